"""Subscriptions on the sharded engine: every batch's news equals one engine's.

Random batches into two streams spread by ``a``; a selection, a selection fixing ``a``
(one shard), a join on ``a``, a grouped aggregate and a COUNT are subscribed on one
engine and on 2 and 3 in-process shards; each subscription must hear the same results,
for the same batches, in the same order.
"""

from __future__ import annotations

import random

import pytest
from oracle import rows_equal

import psoup
import psoup.shard

W = " BEGIN NOW - 6 END NOW"
QUERIES = (
    "SELECT * FROM r WHERE r.b > 3" + W,
    "SELECT r.b, r.t FROM r WHERE r.a = 2" + W,
    "SELECT x.b, y.b FROM r AS x, s AS y WHERE x.a = y.a AND x.b < y.b" + W,
    "SELECT r.a, COUNT(*), SUM(r.b), MIN(r.b) FROM r GROUP BY r.a" + W,
    "SELECT COUNT(*) FROM s" + W,
)


def _run(db, seed: int) -> list[list[tuple]]:
    rng = random.Random(seed)
    for name in ("r", "s"):
        db.create_stream(name, {"a": "int", "b": "int", "t": "int"}, time="t", max_window=10,
                         partition_by="a")  # fmt: skip
    heard: list[list[tuple]] = [[] for _ in QUERIES]
    for k, text in enumerate(QUERIES):
        h = db.register(text)
        db.subscribe(h, lambda res, tid, k=k: heard[k].append(
            (tid, None if res is None else (res.now, tuple(res.rows)))))  # fmt: skip
    t = {"r": 0, "s": 0}
    for _ in range(25):
        name = rng.choice("rs")
        rows = []
        for _ in range(rng.randint(1, 12)):
            t[name] += rng.choice((0, 0, 1, 2))
            rows.append((rng.randint(0, 4), rng.randint(0, 9), t[name]))
        db.insert(name, rows)
    if hasattr(db, "wait_delivered"):
        db.channels[0].drain()
        assert db.wait_delivered(30)
    db.close()
    return heard


@pytest.mark.parametrize("shards", [2, 3])
@pytest.mark.parametrize("seed", range(6))
def test_subscriptions_hear_what_one_engine_hears(shards: int, seed: int) -> None:
    want = _run(psoup.connect(), seed)
    got = _run(psoup.shard.local(shards, block_rows=4), seed)
    assert sum(len(w) for w in want) > 10  # the news was not all empty
    for k, (w, g) in enumerate(zip(want, got, strict=True)):
        assert [x[0] for x in g] == [x[0] for x in w], QUERIES[k]
        for (_, a), (_, b) in zip(w, g, strict=True):
            assert a[0] == b[0] and rows_equal(list(a[1]), list(b[1])), QUERIES[k]
