"""The engine thread: the single writer that owns the engine, fed by a priority queue.

gRPC handler threads submit closures and wait on futures. Invocations, registrations and
everything else that a user waits on go before queued ingest batches, so their latency
does not grow with the ingest backlog; each closure runs alone, between two batches,
which keeps every answer stream-prefix consistent. Ingest closures are counted: when
``ingest_limit`` are already waiting, ``submit_ingest`` raises ``QueueFull`` instead of
letting memory grow. Between two closures the thread gives the heap freezer its turn
(psoup/server/heap.py), so the collector's full passes stay short.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from psoup.server.heap import HeapFreezer

URGENT, INGEST = 0, 1


class QueueFull(Exception):
    """The ingest queue holds its limit of batches."""


class EngineWorker:
    """Runs submitted closures one at a time on one thread, urgent ones first."""

    def __init__(self, ingest_limit: int, freeze_heap_every: float = 0.0):
        self.ingest_limit = ingest_limit
        self.heap = HeapFreezer(freeze_heap_every)
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()
        self._ingest_waiting = 0
        self._count_lock = threading.Lock()
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
        self._queue.put((URGENT, next(self._order), fn, fut))
        return fut

    def submit_ingest(self, fn: Callable[[], Any]) -> Future:
        """Queue an ingest closure; raises QueueFull when the queue is at its limit."""
        with self._count_lock:
            if self._ingest_waiting >= self.ingest_limit:
                raise QueueFull
            self._ingest_waiting += 1
        fut: Future = Future()
        self._queue.put((INGEST, next(self._order), fn, fut))
        return fut

    def call(self, fn: Callable[[], Any]) -> Any:
        """``submit(fn)`` and wait for its result (re-raising its exception)."""
        return self.submit(fn).result()

    def _run(self) -> None:
        while True:
            prio, _, fn, fut = self._queue.get()
            if fn is None:
                return
            if prio == INGEST:
                with self._count_lock:
                    self._ingest_waiting -= 1
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # delivered to the waiting handler
                fut.set_exception(exc)
            self.heap.tick()

    def stop(self) -> None:
        """Finish what is queued, then end the thread."""
        if not self._stopping:
            self._stopping = True
            self._queue.put((INGEST + 1, next(self._order), None, None))
            self._thread.join()
