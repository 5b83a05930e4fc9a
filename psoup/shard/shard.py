"""One engine shard: an engine in a data directory of its own, fed numbered operations.

The front-end (psoup/shard/front.py) numbers every change it sends (its operation id,
the LSN of its own log record) and a shard logs that number with the change
(``Engine.op_tag``), so after a crash the shard knows the last change it made durable
(``last_op``: replayed from its log, kept in its checkpoints). An operation sent again
after a crash (the front-end resends what it has no answer for) whose number is not
above ``last_op`` is passed over: nothing is lost and nothing is applied twice.

Each incarnation has an ``epoch`` (random). Every call names the epoch the caller knows;
a call meant for an earlier incarnation is refused with ``StaleEpoch``, so a call sent
before a crash but run by the restarted shard cannot overtake the resent ones.

Under Ray the class runs as an actor (psoup/shard/cluster.py); in tests it also runs in
the caller's process. Nothing here imports Ray or gRPC.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import secrets
import socket
import threading
from pathlib import Path

from psoup.engine import Engine
from psoup.heap import HeapFreezer
from psoup.shard import wire
from psoup.storage.log import StorageError

log = logging.getLogger("psoup.shard")

# What the front-end may ask of a shard: the engine's methods that change or read it.
_OPS = frozenset(
    {"create_stream", "drop_stream", "insert_part", "replace_contents", "restore_query",
     "unregister", "invoke_parts", "stats", "describe_streams", "read_part",
     "invoke_since"}
)  # fmt: skip


class StaleEpoch(Exception):
    """A call meant for an earlier incarnation of the shard."""


class Shard:
    """An engine shard; ``data_dir`` None keeps it in memory (lost with the process)."""

    def __init__(
        self,
        index: int,
        data_dir: str | None = None,
        sync: str = "batch",
        strategy: str = "psoup-p",
        checkpoint_bytes: int | None = None,
        checkpoint_phase: float = 0.0,
        freeze_heap_every: float = 1.0,
        **engine_options,
    ):
        self.index = index
        # A shard holds its share of the standing queries: without this, the collector's
        # full passes over their objects stop it for seconds (psoup/heap.py).
        self._heap = HeapFreezer(freeze_heap_every)
        self.epoch = secrets.token_hex(8)
        self._calls = threading.Lock()  # one call at a time, from whichever side
        self._listener = None
        self._key = b""
        self._closed = False
        self.last_op = 0
        self.engine = Engine(strategy=strategy, **engine_options)
        self.engine.on_tag = self._replayed
        self.engine.add_state("shard", self)
        self.data = None
        self.recovered_records = 0
        if data_dir is not None:
            from psoup.storage.durable import CHECKPOINT_BYTES, DataDir
            from psoup.storage.log import Sync

            Path(data_dir).mkdir(parents=True, exist_ok=True)
            self.data = DataDir(
                data_dir, Sync.parse(sync), application=f"shard-{index}",
                checkpoint_bytes=checkpoint_bytes or CHECKPOINT_BYTES,
                checkpoint_phase=checkpoint_phase,
            )  # fmt: skip
            self.data.on_checkpoint = self._checkpointed
            self.recovered_records = self.data.recover(self.engine).records

    def _checkpointed(self, stats) -> None:
        log.info("shard %d: %s", self.index, stats.describe())

    # -- the engine state that checkpoints keep (Engine.add_state) ----------------------
    def snapshot(self) -> bytes:
        return json.dumps({"last_op": self.last_op}).encode()

    def restore(self, blob: bytes) -> None:
        self.last_op = max(self.last_op, json.loads(blob)["last_op"])

    def _replayed(self, tag: int) -> None:
        self.last_op = max(self.last_op, tag)

    # -- calls ---------------------------------------------------------------------------
    def hello(self) -> tuple[str, int, int]:
        """(epoch, last durable operation, shard index)."""
        return self.epoch, self.last_op, self.index

    def listen(self, host: str = "127.0.0.1") -> tuple[tuple[str, int], bytes]:
        """Serve ``call`` on a socket of its own too (started once): ((host, port),
        authentication key). The front-end's calls then skip the scheduler of whatever
        runs the shard (a Ray call costs ~0.8 ms here, this ~0.1 ms); one connection at
        a time, answers in order."""
        if self._listener is None:
            from multiprocessing.connection import Listener

            key = secrets.token_bytes(32)
            self._listener = Listener((host, 0), authkey=key)
            self._key = key
            threading.Thread(target=self._serve, name="psoup-shard-socket", daemon=True).start()
        return self._listener.address, self._key

    def _serve(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except OSError:  # closed, or a client that failed authentication
                if self._closed:
                    return
                continue
            with wire.attach(conn) as sock:
                # This thread runs each call as it arrives; its answer leaves in order,
                # each once the changes before it are durable (``_Answers``). So the
                # shard runs the next call while the last one's fsync is under way
                # (early lock release): one call at a time cost a shard execute + fsync
                # per call, and on a slowed disk (fsyncs of 10-20 ms) fell behind
                # Linear Road.
                answers = _Answers(self, sock)
                try:
                    while True:
                        try:
                            epoch, ops = wire.recv(sock)
                        except (EOFError, OSError):
                            break
                        try:
                            answer, lsn = ("ok", self.run(epoch, ops)), self.written_lsn()
                        except StaleEpoch as exc:
                            answer, lsn = ("stale", str(exc)), None
                        # Dropped before the answer leaves, not after: the caller may
                        # count on what it handed over (a bulk load's share: a
                        # gigabyte) being gone once it has the answer.
                        del epoch, ops
                        answers.put(answer, lsn)
                        del answer
                finally:  # the sender ends with the connection, however it ends
                    answers.close()

    def call(self, epoch: str, ops: list[tuple]) -> list[tuple[bool, object]]:
        """Run ``ops`` ((op id or None, method, args, kwargs), in order) and return one
        (ok, value or exception) each, once the changes are durable per the sync mode
        (one fsync for the lot). A change whose id is not above ``last_op`` was made
        before: it is passed over and answers (True, None). Raises StaleEpoch."""
        out = self.run(epoch, ops)
        self.wait_durable(self.written_lsn())
        return out

    def run(self, epoch: str, ops: list[tuple]) -> list[tuple[bool, object]]:
        """``call`` without the wait for durability: the answers must not leave the
        shard before ``wait_durable(written_lsn())`` (as read after this) returns."""
        with self._calls:
            out = self._call(epoch, ops)
            self._heap.tick()  # between calls, as the server's engine thread does
            return out

    def written_lsn(self) -> int:
        """The LSN of the last change logged (0 in memory)."""
        return 0 if self.data is None else self.data.written_lsn

    def is_durable(self, lsn: int) -> bool:
        """Whether the change logged as ``lsn`` is durable per the sync mode already.
        O(1), never blocks."""
        return self.data is None or self.data.is_durable(lsn)

    def wait_durable(self, lsn: int) -> None:
        """Return once the change logged as ``lsn`` is durable per the sync mode;
        raises StorageError if it cannot be."""
        if self.data is not None:
            self.data.wait(lsn)

    def _call(self, epoch: str, ops: list[tuple]) -> list[tuple[bool, object]]:
        if epoch != self.epoch:
            raise StaleEpoch(f"shard {self.index}: epoch {epoch} is gone (now {self.epoch})")
        out: list[tuple[bool, object]] = []
        for tag, method, args, kwargs in ops:
            if method not in _OPS:
                out.append((False, ValueError(f"shard: no operation {method!r}")))
                continue
            if tag is not None and tag <= self.last_op:
                out.append((True, None))
                continue
            self.engine.op_tag = tag
            try:
                fn = (
                    getattr(self, method)
                    if method == "describe_streams"
                    else getattr(self.engine, method)
                )
                out.append((True, fn(*args, **kwargs)))
            except Exception as exc:  # the caller decides; the shard stays up
                out.append((False, exc))
            finally:
                self.engine.op_tag = None
                if tag is not None:
                    self.last_op = max(self.last_op, tag)
        return out

    def describe_streams(self) -> dict[str, dict]:
        """Per stream: tuples stored and the clock (for ``psoup cluster status``)."""
        with self.engine.lock:
            return {
                name: {"tuples": len(st.stem), "last_ts": st.last_ts}
                for name, st in self.engine.streams.items()
            }

    def status(self) -> dict:
        """What ``psoup cluster status`` shows of this shard."""

        from psoup.procinfo import rss_bytes

        with self.engine.lock:
            return {
                "index": self.index,
                "epoch": self.epoch,
                "pid": os.getpid(),
                "node": os.uname().nodename,
                "last_op": self.last_op,
                "queries": len(self.engine.queries),
                "tuples": sum(len(st.stem) for st in self.engine.streams.values()),
                "rss_bytes": rss_bytes(),
                "recovered_records": self.recovered_records,
            }

    def close(self) -> None:
        self._closed = True
        if self._listener is not None:
            self._listener.close()
        with self._calls:
            self.engine.close()


class _Answers:
    """The answers to one connection's calls, sent in the order of the calls, each once
    the changes logged before it are durable. An answer with nothing before it still to
    send and nothing of its own to wait for (an invoke's, usually, or any call's once
    its fsync is done) leaves at once from the thread that ran the call; the others go
    through a sender thread that waits for their fsync. Handing every answer to that
    thread cost a thread wake-up each (~5% of a Linear Road shard's samples, the
    ``SimpleQueue.put`` and its ``sem_post``) and the sender's own CPU beside it.

    A shard whose log cannot be forced ends its process: it must not answer again
    under this epoch (the front-end would take the changes as made), and a restart
    recovers what is on disk, after which the front-end resends the rest."""

    def __init__(self, shard: Shard, sock) -> None:
        self._shard = shard
        self._sock = sock
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._gate = threading.Lock()  # one send at a time; guards _queued
        self._queued = 0  # answers handed to the sender and not sent yet
        self._connected = True
        self._sender = threading.Thread(target=self._run, name="psoup-shard-answers",
                                        daemon=True)  # fmt: skip
        self._sender.start()

    def put(self, answer, lsn: int | None) -> None:
        """Send ``answer`` once change ``lsn`` (None: none) is durable, after every
        answer put before it. Never waits for a fsync."""
        with self._gate:
            if not self._queued and (lsn is None or self._shard.is_durable(lsn)):
                self._send(answer)
                return
            self._queued += 1
        self._queue.put((answer, lsn))

    def close(self) -> None:
        """Send what is queued (as it becomes durable), then end the sender."""
        self._queue.put(None)
        self._sender.join()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            answer, lsn = item
            del item
            try:
                if lsn is not None:
                    self._shard.wait_durable(lsn)
            except StorageError as exc:
                log.critical("shard %d: %s; ending the process", self._shard.index, exc)
                os._exit(70)
            with self._gate:
                self._send(answer)
                self._queued -= 1
            del answer  # not kept while waiting for the next (a result can be large)

    def _send(self, answer) -> None:
        """Under ``_gate``."""
        if not self._connected:
            return
        try:
            wire.send(self._sock, answer)
        except OSError:  # the front-end went away: the receiver sees it too
            self._connected = False
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
