"""Keeps the garbage collector's full passes short on the server's long-lived heap.

CPython's cyclic collector walks every tracked container object on a full (generation 2)
pass, and it runs one whenever the long-lived objects have grown by a quarter. A server
holding hundreds of thousands of standing queries has ~30 tracked objects per query:
10M objects for 320k queries, and a full pass over them stops every thread for ~4.7 s
(measured on the 2-core machine of docs/BENCHMARKS.md). In the 3-hour Linear Road run
these stops, growing with the heap, made 1% of the answers late by up to 17 simulated s.

``HeapFreezer`` collects what was allocated since its last call and then moves every
surviving object into the collector's permanent generation (``gc.freeze()``), so a full
pass only ever walks the objects of the last interval. The engine thread calls it
between two closures. The price: a reference cycle among objects that were already
frozen is never collected. The engine's own long-lived state, a query's in particular,
is freed by reference counting when it goes away (tests/test_heap.py proves it for
register/unregister), so what can leak is limited to cycles that outlive an interval.
"""

from __future__ import annotations

import gc
import time


class HeapFreezer:
    """Every ``interval`` seconds: a full collection of the unfrozen objects, then freeze."""

    def __init__(self, interval: float):
        self.interval = interval
        self.freezes = 0
        self._last = time.monotonic()

    def tick(self) -> bool:
        """Collect and freeze if ``interval`` seconds passed since the last time; returns
        whether it did. O(1) when not due; otherwise O(objects allocated since the last
        freeze): frozen objects are not walked."""
        if self.interval <= 0:
            return False
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        gc.collect()
        gc.freeze()
        self.freezes += 1
        return True
