"""The Stats RPC's rolling figures (psoup/server/metrics.py) against brute force."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from psoup.server.metrics import Metrics


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 5, allow_nan=False), max_size=60),
    st.integers(1, 16),
)
def test_latency_percentiles_are_those_of_the_last_samples(seconds, kept) -> None:
    m = Metrics(latency_samples=kept)
    for s in seconds:
        m.invoked(s)
    got = m.latency_ms()
    last = seconds[-kept:]
    if not last:
        assert got == (0.0, 0.0, 0.0, 0)
        return
    want = np.percentile(np.array(last), [50, 90, 99]) * 1e3
    assert np.allclose(got[:3], want) and got[3] == len(last)
    assert m.invocations == len(seconds)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 30, allow_nan=False), st.integers(0, 10_000)), max_size=40))
def test_ingest_rate_sums_the_batches_of_the_window(steps) -> None:
    now = [1000.0]
    m = Metrics(rate_window_s=60.0, clock=lambda: now[0])
    seen: list[tuple[float, int]] = []
    for gap, rows in steps:
        now[0] += gap
        m.ingested(rows)
        seen.append((now[0], rows))
        window = [(t, r) for t, r in seen if t >= now[0] - 60.0]
        span = max(now[0] - window[0][0], 1e-3)
        assert m.ingest_rate() == sum(r for _, r in window) / span
