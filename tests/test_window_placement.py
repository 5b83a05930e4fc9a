"""An invoke at NOW places its window once per state of the stream and shape of window,
shared by the queries of that shape (``Stream.placed``), and a repeated read of a column
with no row since answers from its kept copy (``SelectionColumn.rows``): property tests
against a brute force, over inserts, clock moves without a tuple (a shard's empty part of
a batch, ``insert_part``'s ``advance_to``) and invokes repeated in between, under every
strategy."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import psoup
from psoup.strategies import STRATEGIES

MAX_WINDOW = 9
# (text, window begin, window end as NOW minus these, predicate): two share a shape.
QUERIES = [
    ("SELECT a, t FROM r WHERE a >= 0 BEGIN NOW - 5 END NOW", 5, 0, lambda a: a >= 0),
    ("SELECT a, t FROM r WHERE a >= 3 BEGIN NOW - 5 END NOW", 5, 0, lambda a: a >= 3),
    ("SELECT a, t FROM r WHERE a < 4 BEGIN NOW - 3 END NOW - 1", 3, 1, lambda a: a < 4),
    ("SELECT a, t FROM r WHERE a >= 0 BEGIN NOW - 20 END NOW", 20, 0, lambda a: a >= 0),
]

_ops = st.lists(
    st.one_of(
        # rows: (a, time step from the previous row), then the clock moved on by `extra`
        st.tuples(
            st.just("insert"),
            st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2)), max_size=6),
            st.integers(0, 3),
        ),
        # rows at the current time: the stream changes, its clock does not
        st.tuples(
            st.just("insert"),
            st.lists(st.tuples(st.integers(0, 6), st.just(0)), min_size=1, max_size=3),
            st.just(0),
        ),
        # the clock moved on with no tuple: a shard's empty part of a batch
        st.tuples(st.just("insert"), st.just([]), st.integers(1, 4)),
        st.tuples(st.just("invoke"), st.integers(0, len(QUERIES) - 1), st.integers(1, 3)),
    ),
    max_size=40,
)


def _expected(rows: list[tuple[int, int]], clock: int | None, q: int) -> list[tuple]:
    if clock is None:
        return []
    _, back, ahead, keep = QUERIES[q]
    lo, hi = clock - back, clock - ahead
    return [(a, t) for a, t in rows if t >= clock - MAX_WINDOW and lo <= t <= hi and keep(a)]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategy=st.sampled_from(sorted(STRATEGIES)), ops=_ops)
def test_invokes_at_now_answer_as_a_brute_force_across_inserts_and_clock_moves(
    strategy: str, ops: list
) -> None:
    db = psoup.connect(strategy=strategy, block_rows=2)
    db.create_stream("r", {"a": "int", "t": "int"}, time="t", max_window=MAX_WINDOW)
    handles = [db.register(text) for text, *_ in QUERIES]
    rows: list[tuple[int, int]] = []
    clock: int | None = None
    next_tid = 0
    for op in ops:
        if op[0] == "insert":
            _, part, extra = op
            t = clock or 0
            a_s, t_s = [], []
            for a, step in part:
                t += step
                a_s.append(a)
                t_s.append(t)
            advance_to = t + extra
            tids = range(next_tid, next_tid + len(part))
            next_tid += len(part)
            cols = [np.array(a_s, np.int64), np.array(t_s, np.int64)]
            db.insert_part("r", cols, tids, advance_to)
            rows += zip(a_s, t_s, strict=True)
            clock = advance_to if clock is None else max(clock, advance_to)
        else:
            _, q, times = op
            want = _expected(rows, clock, q)
            for _ in range(times):  # again with nothing between: the kept answers
                assert db.invoke(handles[q]).rows == want, (q, clock)
            db._check()
    db.close()
