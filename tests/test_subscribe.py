"""Engine subscriptions: each batch's new matches delivered once, in order, for every strategy."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import psoup

STRATEGIES = ("psoup-p", "psoup-c", "nomat")


def _feed(db: psoup.Engine, rng: random.Random, batches: int, stream: str = "r") -> None:
    t = db.stats()["streams"][stream]["last_ts"] or 0
    for _ in range(batches):
        rows = []
        for _ in range(rng.randint(0, 40)):
            t += rng.choice((0, 0, 1, 2))
            rows.append((t, rng.randint(0, 9), rng.randint(0, 9)))
        db.insert(stream, rows)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("seed", range(5))
def test_new_matches_concatenate_to_the_landmark_result(strategy: str, seed: int) -> None:
    rng = random.Random(seed)
    db = psoup.connect(strategy=strategy, block_rows=16)
    db.create_stream("r", {"t": "int", "a": "int", "b": "int"}, time="t")
    _feed(db, rng, 3)
    sel = db.register("SELECT * FROM r WHERE a < :x AND b != 3 BEGIN 0 END NOW", {"x": 5})
    join = db.register("SELECT x.t, y.t FROM r x, r y WHERE x.a = y.b AND x.b < 2 BEGIN 0 END NOW")
    agg = db.register("SELECT COUNT(*), MAX(b) FROM r WHERE a = 1 BEGIN 0 END NOW")
    before = {h: db.invoke(h).rows for h in (sel, join, agg)}
    got: dict[str, list] = {sel: [], join: [], agg: []}
    tids: list[int] = []

    def collect(h):
        def cb(result, first_tid):
            got[h].append(result.rows)
            tids.append(first_tid)

        return cb

    for h in got:
        db.subscribe(h, collect(h))
    _feed(db, rng, 6)
    assert tids == sorted(tids)
    # Selections: old result + every batch's new rows, in order, is the result now.
    assert before[sel] + [r for rows in got[sel] for r in rows] == db.invoke(sel).rows
    # Joins: the same as multisets (a new pair may sort before older ones).
    new_pairs = Counter(r for rows in got[join] for r in rows)
    assert Counter(before[join]) + new_pairs == Counter(db.invoke(join).rows)
    # Aggregates: the last pushed value is the current one, and every push changed it.
    if got[agg]:
        assert got[agg][-1] == db.invoke(agg).rows
        assert all(a != b for a, b in zip([before[agg], *got[agg]], got[agg], strict=False))


def test_unsubscribe_and_unregister_end_deliveries() -> None:
    db = psoup.connect()
    db.create_stream("r", {"t": "int", "a": "int", "b": "int"}, time="t")
    h = db.register("SELECT * FROM r BEGIN NOW - 5 END NOW")
    events: list = []
    sub = db.subscribe(h, lambda res, tid: events.append(res and res.rows))
    db.insert("r", [(1, 2, 3)])
    db.unsubscribe(sub)
    db.insert("r", [(2, 2, 3)])
    assert events == [[(1, 2, 3)]]
    db.subscribe(h, lambda res, tid: events.append(res and res.rows))
    db.unregister(h)
    assert events[-1] is None
    db.insert("r", [(3, 2, 3)])
    assert events[-1] is None
    with pytest.raises(psoup.UnknownHandleError):
        db.subscribe(h, lambda res, tid: None)
