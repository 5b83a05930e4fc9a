"""Counters the Stats RPC reports: ingest rate over the last minute, invoke latency percentiles."""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np


class Metrics:
    """Thread-safe rolling measurements. Recording is O(1), the ingest rate O(1) amortised,
    the latency percentiles O(samples kept) in numpy.

    Stats reads them on a gRPC thread while the server works: summing a minute of batches
    in Python (30,000 under a flood) held the interpreter ~1 ms per call, which every
    invoke arriving meanwhile waited out."""

    def __init__(
        self, latency_samples: int = 10_000, rate_window_s: float = 60.0, clock=time.monotonic
    ):
        self._clock = clock
        self._lock = threading.Lock()
        self._latencies = np.zeros(latency_samples)  # a ring: the last samples, any order
        self._kept = 0  # samples recorded, in all
        self._ingests: deque[tuple[float, int]] = deque()
        self._rows = 0  # sum of the rows in ``_ingests``
        self._rate_window = rate_window_s
        self.invocations = 0

    def invoked(self, seconds: float) -> None:
        with self._lock:
            self._latencies[self._kept % len(self._latencies)] = seconds
            self._kept += 1
            self.invocations += 1

    def ingested(self, rows: int) -> None:
        now = self._clock()
        with self._lock:
            self._ingests.append((now, rows))
            self._rows += rows
            self._trim(now)

    def _trim(self, now: float) -> None:
        while self._ingests and self._ingests[0][0] < now - self._rate_window:
            self._rows -= self._ingests.popleft()[1]

    def ingest_rate(self) -> float:
        """Tuples per second accepted over the last minute (or since the first batch)."""
        now = self._clock()
        with self._lock:
            self._trim(now)
            if not self._ingests:
                return 0.0
            span = max(now - self._ingests[0][0], 1e-3)
            return self._rows / span

    def latency_ms(self) -> tuple[float, float, float, int]:
        """(p50, p90, p99) invoke latency in ms over recent invocations, and their count."""
        with self._lock:
            n = min(self._kept, len(self._latencies))
            if not n:
                return 0.0, 0.0, 0.0, 0
            arr = self._latencies[:n].copy()
        p50, p90, p99 = np.percentile(arr, [50, 90, 99]) * 1e3
        return float(p50), float(p90), float(p99), n


def release_free_memory() -> None:
    """Give freed heap memory back to the OS (glibc's malloc_trim; a no-op elsewhere).

    A bulk load stages millions of rows in many small arrays allocated by several
    threads; once they are freed, glibc keeps the pages in its arenas, so the process
    would look as big as at its peak. Trimming returns them.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
