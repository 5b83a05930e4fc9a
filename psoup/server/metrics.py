"""Counters the Stats RPC reports: ingest rate over the last minute, invoke latency percentiles."""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np


class Metrics:
    """Thread-safe rolling measurements. Recording is O(1); reading O(samples kept)."""

    def __init__(self, latency_samples: int = 10_000, rate_window_s: float = 60.0):
        self._lock = threading.Lock()
        self._latencies: deque[float] = deque(maxlen=latency_samples)
        self._ingests: deque[tuple[float, int]] = deque()
        self._rate_window = rate_window_s
        self.invocations = 0

    def invoked(self, seconds: float) -> None:
        with self._lock:
            self._latencies.append(seconds)
            self.invocations += 1

    def ingested(self, rows: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._ingests.append((now, rows))
            self._trim(now)

    def _trim(self, now: float) -> None:
        while self._ingests and self._ingests[0][0] < now - self._rate_window:
            self._ingests.popleft()

    def ingest_rate(self) -> float:
        """Tuples per second accepted over the last minute (or since the first batch)."""
        now = time.monotonic()
        with self._lock:
            self._trim(now)
            if not self._ingests:
                return 0.0
            rows = sum(r for _, r in self._ingests)
            span = max(now - self._ingests[0][0], 1e-3)
            return rows / span

    def latency_ms(self) -> tuple[float, float, float, int]:
        """(p50, p90, p99) invoke latency in ms over recent invocations, and their count."""
        with self._lock:
            if not self._latencies:
                return 0.0, 0.0, 0.0, 0
            arr = np.fromiter(self._latencies, dtype=float)
        p50, p90, p99 = np.percentile(arr, [50, 90, 99]) * 1e3
        return float(p50), float(p90), float(p99), len(arr)


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
