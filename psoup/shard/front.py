"""The sharded engine's front-end: the catalog and the engine API over N shards.

``ShardedEngine`` is an ``Engine`` whose streams hold no tuples: it keeps the catalog
(streams, their partition attribute, owners and grants, queries and handles, the
clock of each stream) and sends the work to shards through ``Channel``s
(psoup/shard/channel.py), so the gRPC servicer serves it unchanged.

* ingest: the batch is validated whole, given its tuple ids, written to the front-end's
  own log (with a data directory), split by the partition attribute, and each shard
  holding the stream gets its part and the batch's newest time (an empty part too), so
  every shard's NOW and retention horizon are the whole stream's. The call returns once
  the parts are queued (the front-end's log holds the batch, so it is acknowledged
  once that log is durable; its matches are not counted); invokes queue behind it;
* register: the query is compiled and placed (psoup/shard/partition.py; a join that
  could span shards is refused before anything changes) and registered under the same
  handle on its shards;
* invoke: each of the query's shards answers for its tuples (``Engine.invoke_parts``);
  a selection's columns (numpy arrays, as they travel) are merged in the single engine's
  order by tuple id, a join's rows by their keys (the older tuple's time and both ids),
  aggregates by merging partial states (``result.merge``).

Every operation is submitted to the channels under the front-end's lock, so each shard
applies them in one global order: an invoke sees every batch acknowledged before it and
a batch split over shards whole or not at all. Answers are awaited outside the lock, so
a shard that is recovering holds up only the calls that need it: a read waits
``read_timeout`` seconds and then answers UNAVAILABLE; writes wait until the shard is
back (they are in the front-end's log and will be applied).

Durability: the front-end's log holds every change with its operation id (the record's
LSN). At start it is replayed and every change sent again; each shard passes over those
it made durable already, so a crash of the front-end between two shards' parts of a
batch leaves the batch whole after recovery. The front-end's checkpoints hold only the
catalog and are taken once every shard has answered everything before them.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import numpy as np

from psoup.engine import Engine, EngineImage
from psoup.errors import (
    AlreadyExistsError,
    PSoupError,
    UnavailableError,
    UnknownHandleError,
    UnknownStreamError,
)
from psoup.plan import Plan
from psoup.result import merge
from psoup.shard.channel import Channel
from psoup.shard.partition import placement, split, stream_shards
from psoup.values import InsertResult, Result, check_time, columns_to_arrays, rows_to_columns

WRITE_TIMEOUT = 300.0  # a write waits this long for a recovering shard
MAX_PENDING = 64  # operations unanswered by one shard before ingest waits
TAG_STRIDE = 4096  # operation ids per log record (a batch and its trigger's inserts)

log = logging.getLogger("psoup.shard")


class ShardedEngine(Engine):
    """The engine API over ``channels`` (one per shard)."""

    def __init__(
        self, channels: Sequence[Channel], strategy: str = "psoup-p", read_timeout: float = 10.0
    ):
        super().__init__(strategy=strategy)
        self.channels = list(channels)
        self.n = len(self.channels)
        self.read_timeout = read_timeout
        self.placements: dict[str, list[int]] = {}  # handle -> shards
        self._tag_base, self._tag_sub = -1, 0
        self._restoring = False
        # Subscriptions' news, delivered in batch order by a thread of their own.
        self._news: queue.SimpleQueue = queue.SimpleQueue()
        self._news_done = threading.Condition()
        self._news_sent = self._news_seen = 0
        self._news_thread = threading.Thread(target=self._deliver, name="psoup-news",
                                             daemon=True)  # fmt: skip
        self._news_thread.start()
        self.part_errors: list[BaseException] = []

    # -- operation ids and calls ------------------------------------------------------
    def _tag(self) -> int | None:
        """The id of the change being made: its log record's LSN (replayed: the
        record's) times ``TAG_STRIDE``, plus the changes made before it from the same
        record (an application's trigger inserts with its batch, unlogged: replaying the
        batch makes them again, with the same ids)."""
        if self.replay_lsn is not None:
            base = self.replay_lsn
        elif self.storage is not None and self.journal is not None:
            base = self.storage.log.written_lsn
        else:  # nothing durable to match (in memory; an application's setup at start)
            return None
        if base == self._tag_base:
            self._tag_sub += 1
        else:
            self._tag_base, self._tag_sub = base, 0
        return base * TAG_STRIDE + self._tag_sub

    def _send(self, shards, tag, method, *args, **kwargs) -> list[tuple[int, Future]]:
        return [(k, self.channels[k].submit(tag, method, *args, **kwargs)) for k in shards]

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """As ``Engine.together``: what the block sends each shard goes in one call per
        shard at its end (as the channels' windows allow), not one call per
        operation. A wait for an answer in the block sends what is held first."""
        for ch in self.channels:
            ch.hold()
        try:
            yield
        finally:
            for ch in self.channels:
                ch.release()

    def _wait(self, futs, timeout: float, ignore=()) -> list:
        """The futures' values in order; a shard's error is raised. UnavailableError
        names the shard that did not answer within ``timeout``."""
        for k in dict.fromkeys(k for k, _ in futs):
            self.channels[k].flush()  # held in ``together``: sent before the wait
        deadline = time.monotonic() + timeout
        out = []
        for k, fut in futs:
            try:
                out.append(fut.result(max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                raise UnavailableError(
                    f"shard {k} is not answering (recovering after a crash?); "
                    "retry in a few seconds"
                ) from None
            except ignore:
                out.append(None)
        return out

    def _stream_shards(self, name: str) -> list[int]:
        return stream_shards(self.streams[name].partition_by, name, self.n)

    # -- streams -------------------------------------------------------------------------
    def create_stream(self, name, schema, time, max_window=None, owner=None, *,
                      recovered=False, partition_by=None):  # fmt: skip
        """As ``Engine.create_stream``, on the shards that will hold the stream too."""
        with self.lock:
            sch = super().create_stream(name, schema, time, max_window, owner,
                                        recovered=recovered, partition_by=partition_by)  # fmt: skip
            if self._restoring:
                return sch
            decl = list(zip(sch.names, sch.types, strict=True))
            futs = self._send(self._stream_shards(name), self._tag(), "create_stream",
                              name, decl, time, max_window, owner, recovered=True,
                              partition_by=partition_by)  # fmt: skip
        self._wait(futs, WRITE_TIMEOUT, ignore=AlreadyExistsError)
        return sch

    def drop_stream(self, name: str) -> None:
        with self.lock:
            shards = self._stream_shards(name) if name in self.streams else []
            super().drop_stream(name)
            futs = self._send(shards, self._tag(), "drop_stream", name)
        self._wait(futs, WRITE_TIMEOUT, ignore=UnknownStreamError)

    # -- ingest --------------------------------------------------------------------------
    def insert(self, name, rows) -> InsertResult:
        self._backpressure()
        with self.lock:
            cols = rows_to_columns(self._stream(name).schema, rows)
            return self._insert(name, cols)

    def insert_columns(self, name, columns) -> InsertResult:
        self._backpressure()
        with self.lock:
            cols = columns_to_arrays(self._stream(name).schema, columns)
            return self._insert(name, cols)

    def _insert(self, name: str, cols: list[np.ndarray]) -> InsertResult:
        with self.lock, self.together():  # a batch and its triggers' inserts: one call
            st = self._stream(name)
            check_time(st.schema, cols, st.last_ts)
            n = len(cols[0]) if cols else 0
            if not n:
                return InsertResult(self._next_tid, self._next_tid - 1, 0, 0)
            self._log("insert", {"stream": name}, cols)
            tag = self._tag()
            first = self._next_tid
            self._next_tid += n
            last = cols[st.schema.time_index][-1].item()
            st.last_ts = last
            st.tuples_ingested += n
            for _, fut in self._send_parts(st, tag, "insert_part", cols, first, last):
                fut.add_done_callback(self._part_done)
            if self._subs_by_qid:
                self._notify_shards(st, first)
            if triggers := self._triggers.get(name):
                self._quiet += 1  # follows from the batch, logged already
                try:
                    for trigger in triggers:
                        trigger(dict(zip(st.schema.names, cols, strict=True)))
                finally:
                    self._quiet -= 1
        # Not waited for: the batch is in the front-end's log (durable once the caller's
        # wait for it returns) and in the channels, which resend it after a shard crash;
        # later invokes queue behind it on every shard. So matches are not counted here.
        return InsertResult(first, first + n - 1, n, 0)

    def _part_done(self, fut: Future) -> None:
        if fut.exception() is not None:  # validated in the front-end before it was sent
            self.part_errors.append(fut.exception())
            log.error("a shard refused a change the front-end had accepted: %s",
                      fut.exception())  # fmt: skip

    def _backpressure(self) -> None:
        """Wait (outside the lock) while a shard has ``MAX_PENDING`` operations
        unanswered, so a flood of ingest cannot queue without bound."""
        for ch in self.channels:
            ch.wait_below(MAX_PENDING, WRITE_TIMEOUT)

    def _send_parts(self, st, tag, method, cols, first: int, last):
        """Each shard of ``st`` its rows of the batch (maybe none), whose tuple ids run
        from ``first``, and the batch's newest time ``last``. A shard that takes the
        whole batch gets its ids as a ``range`` (a few bytes on the wire, not 8 a row).
        O(rows)."""
        n = len(cols[0]) if cols else 0
        if st.partition_by is None:
            parts = {self._stream_shards(st.name)[0]: slice(None)}
        else:
            parts = dict(enumerate(split(cols[st.schema.names.index(st.partition_by)], self.n)))
        whole = st.partition_by is None and method == "insert_part"
        ids = range(first, first + n) if whole else np.arange(first, first + n, dtype=np.int64)
        futs = []
        for k, idx in parts.items():
            part = [c[idx] for c in cols]
            if method == "insert_part":
                futs += self._send([k], tag, method, st.name, part, ids[idx], last)
            else:
                futs += self._send([k], tag, method, st.name,
                                   dict(zip(st.schema.names, part, strict=True)),
                                   tids=ids[idx], advance_to=last)  # fmt: skip
        return futs

    def replace_contents(self, name, columns, *, tids=None, advance_to=None) -> InsertResult:
        """As ``Engine.replace_contents``: every shard of the stream replaces its part."""
        with self.lock:
            st = self._stream(name)
            cols = columns_to_arrays(st.schema, columns)
            ts = cols[st.schema.time_index]
            n = len(ts)
            if n > 1 and not bool(np.all(ts[1:] >= ts[:-1])):
                order = np.argsort(ts, kind="stable")
                cols = [c[order] for c in cols]
            self._log("replace", {"stream": name}, cols)
            tag = self._tag()
            first = self._next_tid
            self._next_tid += n
            last = cols[st.schema.time_index][-1].item() if n else None
            st.last_ts = last
            st.tuples_ingested = n
            futs = self._send_parts(st, tag, "replace_contents", cols, first, last)
        got = self._wait(futs, WRITE_TIMEOUT)
        return InsertResult(first, first + n - 1, n,
                            sum(r.matches for r in got if r is not None))  # fmt: skip

    # -- queries -------------------------------------------------------------------------
    def restore_query(self, handle, text, params, owner, registered_at, allow=None) -> str:
        """As ``Engine.restore_query``, on the shards the query needs (refused with
        UnsupportedQueryError, before anything changes, when no shard could answer it
        exactly)."""
        with self.lock:
            spec = self.compile(text, params)
            plan = Plan(spec, self.schemas())
            parts = {s: self.streams[s].partition_by for s in plan.streams}
            shards = placement(plan, parts, self.n)
            self._restore_planned(handle, text, params, owner, registered_at, spec, plan, allow)
            self.placements[handle] = shards
            if self._restoring:
                return handle
            futs = self._send(shards, self._tag(), "restore_query", handle, text,
                              dict(params or {}), owner, registered_at)  # fmt: skip
            # Not waited for, as a batch is not: the registration is in the front-end's
            # log and queued to its shards, and every later invoke queues behind it. (A
            # vehicle registers its queries by the thousands a second in Linear Road;
            # waiting for each held the engine thread for a round trip.)
            for _, fut in futs:
                fut.add_done_callback(self._registered)
        return handle

    def _registered(self, fut: Future) -> None:
        exc = fut.exception()
        if exc is not None and not isinstance(exc, AlreadyExistsError):
            self._part_done(fut)

    def _attach(self, q) -> None:
        """The front-end's part of registering: the streams know their query (drops,
        subscriptions, counts); the index and results live in the shards."""
        q.entries = []
        for s in q.plan.streams:
            self.streams[s].queries.add(q.qid)

    def _detach(self, q) -> None:
        for s in set(q.plan.streams):
            self.streams[s].queries.discard(q.qid)

    def unregister(self, handle: str) -> None:
        with self.lock:
            super().unregister(handle)
            shards = self.placements.pop(handle)
            futs = self._send(shards, self._tag(), "unregister", handle)
            for _, fut in futs:  # not waited for, as a registration
                fut.add_done_callback(self._unregistered)

    def _unregistered(self, fut: Future) -> None:
        exc = fut.exception()
        if exc is not None and not isinstance(exc, UnknownHandleError):
            self._part_done(fut)

    def subscribe(self, handle, callback) -> int:
        """As ``Engine.subscribe``: after each batch the query's shards are asked for its
        new rows (``Engine.invoke_since``), queued behind the batch; a thread merges and
        delivers them in batch order (callbacks run there, not under the lock)."""
        with self.lock:
            q = self._query(handle)
            last = None
            if q.spec.is_aggregate:
                futs = self._send(self.placements[handle], None, "invoke_parts", handle, None)
                last = self._merged(q, self._wait(futs, self.read_timeout)).rows
            sub = self._next_sub
            self._next_sub += 1
            self._subs[sub] = [q.qid, callback, last]
            self._subs_by_qid.setdefault(q.qid, set()).add(sub)
            return sub

    def _notify_shards(self, st, first_tid: int) -> None:
        # Under the lock, right after the batch's parts: each shard answers after them.
        for qid in sorted(st.queries & self._subs_by_qid.keys()):
            q = self._by_qid[qid]
            futs = self._send(self.placements[q.handle], None, "invoke_since", q.handle,
                              st.name, first_tid)  # fmt: skip
            with self._news_done:
                self._news_sent += 1
            self._news.put((q, first_tid, futs))

    def wait_delivered(self, timeout: float | None = None) -> bool:
        """Wait until every subscription news queued so far is delivered; returns False
        on timeout."""
        with self._news_done:
            return self._news_done.wait_for(lambda: self._news_seen >= self._news_sent, timeout)

    def _deliver(self) -> None:
        while (item := self._news.get()) is not None:
            try:
                self._deliver_one(*item)
            finally:
                with self._news_done:
                    self._news_seen += 1
                    self._news_done.notify_all()

    def _deliver_one(self, q, first_tid: int, futs) -> None:
        try:
            res = self._merged(q, [f.result() for _, f in futs])
            err = None
        except PSoupError as exc:  # an aggregate that overflows: the batch stands
            res, err = None, exc
        except Exception:  # the engine is closing
            return
        with self.lock:
            subs = sorted(self._subs_by_qid.get(q.qid, ()))
            for sub in subs:
                entry = self._subs[sub]
                if err is not None:
                    entry[1](err, first_tid)
                    continue
                if q.spec.is_aggregate:
                    if res.rows == entry[2]:
                        continue
                    entry[2] = res.rows
                elif not len(res):
                    continue
                entry[1](res, first_tid)

    def invoke(self, handle: str, now=None) -> Result:
        """The query's result, gathered from its shards: rows merged in the single
        engine's order (O(rows log shards)), aggregates merged from partial states
        (O(groups x shards)). UnavailableError when a shard does not answer in
        ``read_timeout`` seconds."""
        return self.invoke_later(handle, now)()

    def invoke_later(self, handle: str, now=None) -> Callable[[], Result]:
        """Send the shards their part of the invoke, in the order of operations; the
        function returned waits for their answers and merges them (``invoke``'s cost),
        on the thread that calls it."""
        with self.lock:
            q = self._query(handle)
            if now is not None:
                self._check_now(q, now)
            q.invocations += 1
            futs = self._send(self.placements[handle], None, "invoke_parts", handle, now)
        return lambda: self._merged(q, self._wait(futs, self.read_timeout))

    def _merged(self, q, parts: list) -> Result:
        """One result from the shards' parts (``Engine.invoke_parts``): a selection's
        columns merged by tuple id (one stable argsort, O(rows log rows) in C), a join's
        rows by their keys (O(rows log shards)), an aggregate's partial states."""
        spec = q.spec
        nows = [p[0] for p in parts if p[0] is not None]
        at = max(nows) if nows else None
        bounds = next((p[1] for p in parts if p[0] == at), None)
        types = spec.types
        if spec.is_aggregate:
            rows = merge(spec, [p[2] for p in parts])
        elif not q.plan.is_join:
            if len(parts) == 1:
                arrays = parts[0][2]
            else:
                order = np.argsort(np.concatenate([p[3] for p in parts]), kind="stable")
                columns = zip(*(p[2] for p in parts), strict=True)
                arrays = [np.concatenate(cs)[order] for cs in columns]
            return Result(spec.columns, types, now=at, window=bounds, arrays=arrays)
        elif len(parts) == 1:
            rows = parts[0][2]
        else:
            merged = heapq.merge(*(zip(p[3], p[2], strict=True) for p in parts),
                                 key=lambda kr: kr[0])  # fmt: skip
            rows = [r for _, r in merged]
        return Result(spec.columns, types, rows, at, bounds)

    def stream_figures(self) -> dict[str, dict[str, int]]:
        """As ``Engine.stream_figures``, tuples and bytes summed over the shards."""
        with self.lock:
            queries = {name: len(st.queries) for name, st in self.streams.items()}
            futs = self._send(range(self.n), None, "stats")
        per_shard = self._wait(futs, self.read_timeout)
        return {
            name: {"queries": q,
                   "tuples_stored": sum(s["streams"].get(name, {}).get("tuples_stored", 0)
                                        for s in per_shard),
                   "bytes": sum(s["streams"].get(name, {}).get("bytes", 0) for s in per_shard)}
            for name, q in queries.items()
        }  # fmt: skip

    def shard_status(self) -> list[dict]:
        """Each shard's status (``Channel.status``): asked outside the operations' line."""
        return [ch.status(self.read_timeout) for ch in self.channels]

    def read_part(self, name, part, parts, with_ids=False):
        """Each shard's part ``part`` of ``parts`` of the stream, merged in tuple-id
        order: the parts over k still cover every tuple once. O(rows log rows)."""
        with self.lock:
            self._stream(name)
            futs = self._send(self._stream_shards(name), None, "read_part", name, part, parts,
                              with_ids=True)  # fmt: skip
        got = self._wait(futs, self.read_timeout)
        cols = [np.concatenate([g[i] for g in got]) for i in range(len(got[0]))]
        order = np.argsort(cols[-1], kind="stable")
        cols = [c[order] for c in cols]
        return cols if with_ids else cols[:-1]

    def tuples_stored(self, name: str) -> int:
        """Summed over the stream's shards (asks them: O(shards))."""
        with self.lock:
            futs = self._send(self._stream_shards(name), None, "describe_streams")
        got = self._wait(futs, self.read_timeout)
        return sum(d.get(name, {}).get("tuples", 0) for d in got)

    # -- the rest ------------------------------------------------------------------------
    def stats(self) -> dict[str, object]:
        """The front-end's catalog with each stream's stored tuples, bytes and index
        counts summed over the shards (asks every shard: O(shards x streams))."""
        return self.stats_later()()

    def stats_later(self) -> Callable[[], dict[str, object]]:
        """Ask the shards for their figures; the function returned waits for them and
        sums them into ``stats``' figures."""
        with self.lock:
            out = super().stats()
            futs = self._send(range(self.n), None, "stats")

        def gather() -> dict[str, object]:
            per_shard = self._wait(futs, self.read_timeout)
            out["matches_marked"] = sum(s["matches_marked"] for s in per_shard)
            for name, row in out["streams"].items():
                for key in ("tuples_stored", "bytes", "query_entries"):
                    row[key] = sum(s["streams"].get(name, {}).get(key, 0) for s in per_shard)
            out["shards"] = self.shard_status()
            return out

        return gather

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every shard has answered everything sent to it so far (the
        front-end acknowledges a change once it is logged and sent, before the shards
        apply it); returns False if one has not within ``timeout`` seconds in all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for ch in self.channels:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not ch.drain(left):
                return False
        return True

    def capture(self) -> EngineImage:
        """The catalog as of now, once every shard has answered all before it (so the
        log before it is needed no more)."""
        with self.lock:
            start = time.perf_counter()
            self.drain()
            waited = time.perf_counter() - start
            img = super().capture()
            img.seconds = {"shards": waited, **img.seconds}
            return img

    def restore_image(self, img: EngineImage) -> None:
        """The catalog from a front-end checkpoint (the shards have it already)."""
        self._restoring = True
        try:
            super().restore_image(img)
        finally:
            self._restoring = False

    def close(self) -> None:
        """Close the catalog (and its data directory), then each shard: answered what
        it was sent, checkpointed, its actor ended."""
        self._news.put(None)
        super().close()
        for ch in self.channels:
            ch.drain(WRITE_TIMEOUT)
            ch.close()
            ch.transport.close()
