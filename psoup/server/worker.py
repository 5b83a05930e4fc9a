"""The engine thread: the single writer that owns the engine, fed by two queues.

gRPC handler threads submit closures and wait on futures. Invocations, registrations and
everything else that a user waits on (``submit``) go before queued ingest batches, so
their latency does not grow with the ingest backlog; each closure runs alone, between
two batches, which keeps every answer stream-prefix consistent. Ingest closures
(``submit_ingest``) are queued per client and taken round-robin, one batch per client in
turn, so a client that keeps more batches in flight (or opens more Ingest calls) does not
get more of the engine than one that keeps fewer. They are counted: when
``ingest_limit`` are already waiting, ``submit_ingest`` raises ``QueueFull`` instead of
letting memory grow. Between two closures the thread gives the heap freezer its turn
(psoup/heap.py), so the collector's full passes stay short.

``call`` (submit and wait) and ``run_ingest`` (an ingest batch, waited for) run the
closure on the caller's own thread when the engine thread is idle (nothing running,
nothing queued): the same one-at-a-time order, without the two thread hand-offs (wake the
engine thread, wake the caller) that cost a Linear Road front-end ~7% of its interpreter
time in futex wake-ups (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from psoup.heap import HeapFreezer
from psoup.server.turns import next_in_turn


class QueueFull(Exception):
    """The ingest queue holds its limit of batches."""


class EngineWorker:
    """Runs submitted closures one at a time on one thread: urgent ones first, then
    ingest batches round-robin over clients."""

    def __init__(self, ingest_limit: int, freeze_heap_every: float = 0.0):
        self.ingest_limit = ingest_limit
        self.heap = HeapFreezer(freeze_heap_every)
        self._cond = threading.Condition()
        self._urgent: deque = deque()  # (fn, future)
        self._ingest: OrderedDict[str, deque] = OrderedDict()  # client -> (fn, future)
        self._ingest_waiting = 0
        self._busy = False  # a closure runs (on the engine thread or a caller's)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="psoup-engine", daemon=True)
        self._thread.start()

    @property
    def queue_depth(self) -> int:
        """Ingest batches waiting for the engine."""
        return self._ingest_waiting

    def submit(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` before any waiting ingest batch; returns its future."""
        fut: Future = Future()
        with self._cond:
            self._urgent.append((fn, fut))
            self._cond.notify()
        return fut

    def submit_ingest(self, fn: Callable[[], Any], client: str = "") -> Future:
        """Queue an ingest closure of ``client``; raises QueueFull when the queue is at
        its limit. O(1)."""
        fut: Future = Future()
        with self._cond:
            if self._ingest_waiting >= self.ingest_limit:
                raise QueueFull
            self._ingest_waiting += 1
            q = self._ingest.get(client)
            if q is None:
                q = self._ingest[client] = deque()
            q.append((fn, fut))
            self._cond.notify()
        return fut

    def call(self, fn: Callable[[], Any]) -> Any:
        """``submit(fn)`` and wait for its result (re-raising its exception); run on
        this thread when the engine thread is idle, as it would have run there next."""
        if not self._claim_inline():
            return self.submit(fn).result()
        try:
            return fn()
        finally:
            self._end_inline()

    def run_ingest(self, fn: Callable[[], Any], client: str = "") -> tuple[Any, float]:
        """Run an ingest closure of ``client`` and wait for it: ``(its result, the CPU
        seconds it took on the thread that ran it)``, re-raising its exception. It runs
        on this thread when the engine thread is idle (as ``call``), else it is queued
        as ``submit_ingest`` (QueueFull as there) and waited for. O(1) besides ``fn``."""
        if not self._claim_inline():
            fut = self.submit_ingest(fn, client)
            return fut.result(), getattr(fut, "cpu_seconds", 0.0)
        start = time.thread_time()
        try:
            return fn(), time.thread_time() - start
        finally:
            self._end_inline()

    def _claim_inline(self) -> bool:
        """Whether the caller may run a closure on its own thread now (the engine thread
        idle, nothing queued); if so, the engine counts as busy until
        ``_end_inline``."""
        with self._cond:
            inline = not (self._busy or self._urgent or self._ingest or self._stopping)
            if inline:
                self._busy = True
            return inline

    def _end_inline(self) -> None:
        self.heap.tick()
        with self._cond:
            self._busy = False
            if self._urgent or self._ingest or self._stopping:
                self._cond.notify()  # what was queued (or a stop) meanwhile waited for this

    def _next(self) -> tuple[Callable[[], Any], Future] | None:
        """The next closure: urgent first, else the first client's oldest batch (that
        client then goes to the back of the line). None once stopped and drained."""
        with self._cond:
            while True:
                if self._busy:  # a caller runs one inline (``call``)
                    self._cond.wait()
                    continue
                if self._urgent:
                    self._busy = True
                    return self._urgent.popleft()
                if self._ingest:
                    self._ingest_waiting -= 1
                    self._busy = True
                    return next_in_turn(self._ingest)
                if self._stopping:
                    return None
                self._cond.wait()

    def _run(self) -> None:
        while (item := self._next()) is not None:
            fn, fut = item
            # Nothing of a closure outlives it here: this frame's names would otherwise
            # hold the last one (a bulk load's columns: gigabytes) while the thread
            # waits, idle, for the next.
            del item
            if not fut.set_running_or_notify_cancel():
                del fn, fut
                self._idle()
                continue
            # The closure's CPU time on this thread, for the done callbacks (set_* runs
            # them here): ingest turns pause in proportion to it (psoup/server/turns.py).
            start = time.thread_time()
            try:
                result, error = fn(), None
            except BaseException as exc:  # delivered to the waiting handler
                result, error = None, exc
            del fn  # before the waiter wakes: what it held is gone once the call is done
            fut.cpu_seconds = time.thread_time() - start
            # Idle before the waiter wakes: a caller that has its answer finds the engine
            # free and may run its next closure inline.
            self._idle()
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)
            del fut, result, error
            self.heap.tick()

    def _idle(self) -> None:
        """The engine thread is done with the closure it took (``_next``). Only this
        thread clears what it set: an inline caller's claim is the caller's to end."""
        with self._cond:
            self._busy = False

    def stop(self) -> None:
        """Finish what is queued, then end the thread."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify()
        self._thread.join()
