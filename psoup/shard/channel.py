"""The front-end's ordered line to one shard: operations go in the order submitted, and
after a shard crash every operation without an answer is sent again, in order.

``submit`` is called under the front-end's lock, so all shards see operations in one
global order and an invoke on a shard sees exactly the batches submitted before it
(stream-prefix consistency across shards; a batch split over shards is submitted to
all of them at one point of that order). Up to ``window`` calls are in flight; while
they are, new operations wait and then go together in one call (one round trip and
one fsync on the shard for the lot). So do the operations submitted while the channel
is held (``hold``/``release``: a batch and what its triggers insert, a Batch call's
registrations and invokes): one call for the lot instead of one each, each call costing
a pickle, a send and a receive on both ends and thread wake-ups on both. A wait for an
answer (``flush``, ``wait_below``) sends what is held first, so holding never stalls.

A transport carries the calls: ``LocalTransport`` runs a ``Shard`` in this process
(tests, and the model of the Ray one), ``psoup.shard.cluster.RayTransport`` a Ray actor.
When a call fails because the shard died (``Lost``) or was restarted meanwhile
(``StaleEpoch``), the channel asks the shard for its new epoch until it answers, then
resends everything unanswered under it; the shard passes over the changes it had made
durable already (their operation ids are not above its ``last_op``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

from psoup.shard.shard import Shard, StaleEpoch

MAX_OPS_PER_CALL = 256


class Lost(Exception):
    """The shard did not answer a call (it died, or its node did)."""


@dataclass
class _Call:
    ops: list[tuple]
    futures: list[Future]
    handle: object = None


class LocalTransport:
    """A shard in this process: calls run at once, on the caller's thread."""

    def __init__(self, shard: Shard):
        self.shard = shard

    def hello(self, timeout: float) -> tuple[str, int, int]:
        return self.shard.hello()

    def send(self, epoch: str, ops: list[tuple]):
        try:
            return ("ok", self.shard.call(epoch, ops))
        except StaleEpoch as exc:
            return ("stale", exc)

    def result(self, handle, timeout: float | None):
        kind, value = handle
        if kind == "stale":
            raise value
        return value

    def status(self, timeout: float) -> dict:
        return self.shard.status()

    def close(self) -> None:
        self.shard.close()


class Channel:
    """Ordered, resent-on-crash calls to shard ``index`` over ``transport``."""

    def __init__(self, index: int, transport, window: int = 4, hello_timeout: float = 60.0):
        self.index = index
        self.transport = transport
        self.window = window
        self.restarts = 0
        self.recovering = False
        self._cond = threading.Condition()
        self._queued: deque[tuple[tuple, Future]] = deque()
        self._inflight: deque[_Call] = deque()
        self._stopping = False
        self._held = 0  # hold() depth: queued operations wait for release() or a flush
        self.epoch, self.last_op, _ = transport.hello(hello_timeout)
        self._thread = threading.Thread(
            target=self._collect, name=f"psoup-shard-{index}", daemon=True
        )
        self._thread.start()

    def _unanswered(self) -> int:
        """Operations submitted and not answered yet (under the lock)."""
        return len(self._queued) + sum(len(c.ops) for c in self._inflight)

    def submit(self, tag: int | None, method: str, *args, **kwargs) -> Future:
        """Queue ``method(*args, **kwargs)`` on the shard after everything submitted
        before; returns a future of its value (or its exception). O(1)."""
        fut: Future = Future()
        with self._cond:
            if self._stopping:
                raise RuntimeError("the channel is closed")
            self._queued.append(((tag, method, args, kwargs), fut))
            self._send_queued()
            self._cond.notify_all()
        return fut

    def hold(self) -> None:
        """Keep the operations submitted from now on queued until the matching
        ``release`` (holds nest), so that they go in as few calls as the window allows."""
        with self._cond:
            self._held += 1

    def release(self) -> None:
        """End one ``hold``; the last one sends what was queued meanwhile."""
        with self._cond:
            self._held -= 1
            self._send_queued()
            self._cond.notify_all()  # the collector, if it waits for a call in flight

    def flush(self) -> None:
        """Send what is queued now, held or not (as the window allows): before a wait
        for an answer to it."""
        with self._cond:
            if self._queued:
                self._send_queued(force=True)
                self._cond.notify_all()

    def _send_queued(self, force: bool = False) -> None:
        # Under the lock: send queued operations while the window allows.
        if self._held and not force:
            return
        while self._queued and len(self._inflight) < self.window and not self.recovering:
            take = min(len(self._queued), MAX_OPS_PER_CALL)
            items = [self._queued.popleft() for _ in range(take)]
            call = _Call([op for op, _ in items], [f for _, f in items])
            self._send(call)
            self._inflight.append(call)

    def _send(self, call: _Call) -> None:
        try:
            call.handle = self.transport.send(self.epoch, call.ops)
        except Exception as exc:  # the transport could not even send: treated as lost
            call.handle = ("lost", exc)

    def wait_below(self, limit: int, timeout: float) -> None:
        """Wait until fewer than ``limit`` operations are unanswered (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._unanswered() >= limit and self._queued:
                self._send_queued(force=True)  # held ones too, or they would wait for ever
                self._cond.notify_all()
            while self._unanswered() >= limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every submitted operation is answered; returns False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self._queued:
                self._send_queued(force=True)
                self._cond.notify_all()
            while self._queued or self._inflight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _collect(self) -> None:
        while True:
            with self._cond:
                while not self._inflight and not self._stopping:
                    self._cond.wait()
                if not self._inflight:
                    return
                call = self._inflight[0]
            try:
                if isinstance(call.handle, tuple) and call.handle[0] == "lost":
                    raise Lost(str(call.handle[1]))
                answers = self.transport.result(call.handle, None)
            except (Lost, StaleEpoch):
                self._recover()
                continue
            with self._cond:
                self._inflight.popleft()
                self._send_queued()
                self._cond.notify_all()
            # Nothing of a call is kept while this thread waits for the next one: its
            # operations' arguments (a bulk load's share: a gigabyte) go before its
            # waiters wake, its answers once they are handed over.
            futures = call.futures
            del call
            for fut, (ok, value) in zip(futures, answers, strict=True):
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)
            del futures, answers
            fut = value = None

    def _recover(self) -> None:
        """Wait for the shard's next incarnation, then resend every unanswered operation
        in order under its epoch."""
        with self._cond:
            self.recovering = True
        while True:
            if self._stopping:
                return
            try:
                epoch, last_op, _ = self.transport.hello(10.0)
                break
            except Exception:  # still restarting
                time.sleep(0.2)
        with self._cond:
            if epoch != self.epoch:
                self.restarts += 1
            self.epoch, self.last_op = epoch, last_op
            calls = list(self._inflight)
            self._inflight.clear()
            for call in calls:
                self._send(call)
                self._inflight.append(call)
            self.recovering = False
            self._send_queued()
            self._cond.notify_all()

    def status(self, timeout: float) -> dict:
        """The shard's own figures (``Shard.status``; asked outside the line of
        operations) with its state here: up, recovering, or unavailable when it does not
        answer in ``timeout``; and how often it was found restarted."""
        try:
            row = self.transport.status(timeout)
            row["state"] = "recovering" if self.recovering else "up"
        except Exception as err:
            row = {"index": self.index, "state": f"unavailable ({type(err).__name__})"}
        row["restarts"] = self.restarts
        return row

    def close(self) -> None:
        """Stop after answering what is in flight."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
