"""Replacing a stream's contents (bulk loads): same answers as registering over the new data."""

from __future__ import annotations

import random

import pytest
from oracle import Oracle, rows_equal

import psoup
from psoup.engine import Engine
from psoup.errors import BatchError

SCHEMA = {"vid": "int", "day": "int", "tolls": "int"}
QUERIES = [
    "SELECT SUM(tolls) FROM h WHERE vid = :v AND day = :d BEGIN 0 END NOW",
    "SELECT * FROM h WHERE vid < :v BEGIN NOW - 5 END NOW",
    "SELECT day, COUNT(*) FROM h WHERE tolls > 50 GROUP BY day BEGIN 0 END NOW",
    "SELECT x.vid, y.vid FROM h x, h y WHERE x.vid = y.vid AND x.day < y.day AND x.tolls > :v "
    "BEGIN NOW - 3 END NOW",
]


def _rows(rng: random.Random, n: int) -> list[tuple[int, int, int]]:
    return [(rng.randint(0, 9), rng.randint(1, 20), rng.randint(0, 99)) for _ in range(n)]


@pytest.mark.parametrize("chunk", [1 << 20, 7])  # rows per internal copy step
@pytest.mark.parametrize("strategy", ["psoup-p", "psoup-c", "nomat"])
@pytest.mark.parametrize("seed", range(6))
def test_replace_equals_a_fresh_load(strategy: str, seed: int, chunk: int, monkeypatch) -> None:
    monkeypatch.setattr(Engine, "_REPLACE_CHUNK_ROWS", chunk)
    rng = random.Random(seed)
    db = psoup.connect(strategy=strategy, block_rows=8)
    db.create_stream("h", SCHEMA, time="day", max_window=None if seed % 2 else 12)
    db.insert("h", sorted(_rows(rng, 30), key=lambda r: r[1]))
    params = [{"v": rng.randint(0, 9), "d": rng.randint(1, 20)}, {"v": 5}, {}, {"v": 60}]
    handles = [db.register(q, p) for q, p in zip(QUERIES, params, strict=True)]
    got_events: list = []
    db.subscribe(handles[1], lambda res, tid: got_events.append(res))
    new = _rows(rng, rng.randint(0, 200))  # any time order
    if seed % 3 == 0:
        new.sort(key=lambda r: r[1])  # already in time order: no permutation
    res = db.replace_contents("h", {a: [r[i] for r in new] for i, a in enumerate(SCHEMA)})
    assert res.count == len(new) and res.last_id - res.first_id == len(new) - 1
    db._check()
    oracle = Oracle()
    oracle.create_stream("h", SCHEMA, "day", None if seed % 2 else 12)
    oracle.insert("h", sorted(new, key=lambda r: r[1]))
    for h, q, p in zip(handles, QUERIES, params, strict=True):
        want = oracle.invoke(oracle.register(q, p))[1]
        assert rows_equal(want, db.invoke(h).rows), q
    # The stream keeps working: a later batch reaches the re-attached queries.
    last = max((r[1] for r in new), default=0)
    db.insert("h", [(1, last, 70), (2, last + 1, 80)])
    oracle.insert("h", [(1, last, 70), (2, last + 1, 80)])
    for h, q, p in zip(handles, QUERIES, params, strict=True):
        assert rows_equal(oracle.invoke(oracle.register(q, p))[1], db.invoke(h).rows), q
    assert got_events and got_events[-1] is not None


def test_a_bad_replacement_changes_nothing() -> None:
    db = psoup.connect()
    db.create_stream("h", SCHEMA, time="day")
    db.insert("h", [(1, 1, 10)])
    h = db.register("SELECT * FROM h BEGIN 0 END NOW")
    with pytest.raises(BatchError, match="tolls"):
        db.replace_contents("h", {"vid": [1, 2], "day": [1, 2], "tolls": [1, "x"]})
    with pytest.raises(BatchError, match="tolls"):
        db.replace_contents("h", {"vid": [1], "day": [1]})
    assert db.invoke(h).rows == [(1, 1, 10)]
