"""The heap freezer (psoup/heap.py): what it freezes, and that freezing the
engine's long-lived state leaks nothing, because that state is freed by reference
counting, not by the cyclic collector."""

from __future__ import annotations

import gc

import pytest

from psoup.engine import Engine
from psoup.heap import HeapFreezer
from psoup.linear_road import streams
from psoup.server.worker import EngineWorker


@pytest.fixture
def clean_gc():
    gc.collect()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.collect()


def test_tick_freezes_only_when_due(clean_gc):
    f = HeapFreezer(3600.0)
    assert not f.tick() and gc.get_freeze_count() == 0
    f = HeapFreezer(1e-9)
    assert f.tick() and f.freezes == 1
    assert gc.get_freeze_count() > 0
    assert not HeapFreezer(0).tick()  # 0 = never


def test_collects_young_cycles_before_freezing(clean_gc):
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b  # a cycle: only the collector frees it
    before = sum(1 for o in gc.get_objects() if type(o) is Node)
    assert before == 2
    HeapFreezer(1e-9).tick()
    gc.unfreeze()
    assert sum(1 for o in gc.get_objects() if type(o) is Node) == 0


def test_engine_worker_freezes_between_closures(clean_gc):
    w = EngineWorker(4, freeze_heap_every=1e-9)
    w.call(lambda: [object() for _ in range(10)])
    w.stop()  # joins the thread: its tick after the closure has run
    assert w.heap.freezes >= 1 and gc.get_freeze_count() > 0


def test_a_shard_freezes_between_calls(clean_gc):
    from psoup.shard.shard import Shard

    shard = Shard(0, freeze_heap_every=1e-9)
    assert gc.get_freeze_count() == 0
    ok, _ = shard.call(shard.epoch, [(1, "create_stream", ("r", {"a": "int"}, "a"), {})])[0]
    assert ok and shard._heap.freezes == 1 and gc.get_freeze_count() > 0


@pytest.mark.parametrize("text", [*streams.VEHICLE_QUERIES.values(), streams.DAILY_EXPENDITURE])
def test_unregistered_queries_leave_nothing_frozen(clean_gc, text):
    """Register queries, freeze, unregister them: every object they held is freed by
    reference counting, so the permanent generation shrinks back (a cycle in a query's
    state would stay there for good)."""
    db = Engine()
    streams.install(db)
    params = {k: v for k, v in {"v": 1, "x": 0, "d": 1}.items() if f":{k}" in text}
    warm = db.register(text, params)
    db.unregister(warm)  # first-use caches (plans, indexes) are not per query
    gc.collect()
    gc.freeze()
    base = gc.get_freeze_count()
    handles = [db.register(text, {**params, "v": 2 + i}) for i in range(200)]
    gc.collect()
    gc.freeze()
    grown = gc.get_freeze_count()
    assert grown - base >= 200  # each query holds tracked objects, now frozen
    for h in handles:
        db.unregister(h)
    del handles
    assert gc.get_freeze_count() - base < 20


@pytest.mark.parametrize(("flag", "seconds"), [("0", 0.0), ("2.5", 2.5)])
def test_serve_flag_sets_the_interval_and_zero_turns_it_off(flag, seconds):
    from psoup.cli import build_parser

    args = build_parser().parse_args(["serve", "--freeze-heap-every", flag])
    assert args.freeze_heap_every == seconds


def test_serve_flag_refuses_negative_seconds(capsys):
    from psoup.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--freeze-heap-every", "-1"])
    assert "not a number of seconds >= 0: '-1'" in capsys.readouterr().err


def test_entry_owner_map_is_never_walked_by_the_collector(clean_gc):
    # A dict whose contents are all atomic is untracked by the collector, but one whose
    # values were fresh tuples was tracked again by each registration and then walked,
    # whole, by every young collection after it (docs/BENCHMARKS.md, stop 42).
    db = Engine()
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    db.create_stream("s", {"a": "int", "t": "int"}, time="t")
    handles = [
        db.register(f"SELECT * FROM r WHERE a = {k} BEGIN NOW - 9 END NOW") for k in range(50)
    ]
    join = db.register("SELECT * FROM r, s WHERE r.a = s.a BEGIN NOW - 9 END NOW")
    assert not gc.is_tracked(db._entry_owner)
    db.insert_columns("r", {"a": [1, 2], "t": [0, 1]})
    db.insert_columns("s", {"a": [2, 3], "t": [1, 2]})
    assert len(db.invoke(join).rows) == 1 and len(db.invoke(handles[1]).rows) == 1
    db.unregister(handles[0])
    assert not gc.is_tracked(db._entry_owner)


def test_a_registered_selection_keeps_few_objects_for_the_collector(clean_gc):
    # Each object a standing query keeps is one more for every freeze tick and young
    # collection after its registration to walk (Linear Road registers hundreds a
    # second). A selection's plan kept what only a join's needs (the folded constants,
    # pair tests, schemas, an empty join list) and its predicate a map by attribute:
    # 20 objects per query before, 13 now.
    db = Engine()
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    tid = db.prepare("SELECT t FROM r WHERE a = :v BEGIN NOW - 30 END NOW").id
    for v in range(200):  # the first registrations grow shared structures
        db.register_template(tid, {"v": v})
    gc.collect()
    before = len(gc.get_objects())
    n = 1_000
    for v in range(1_000, 1_000 + n):
        db.register_template(tid, {"v": v})
    gc.collect()
    per_query = (len(gc.get_objects()) - before) / n
    assert per_query <= 14, per_query
    db.insert_columns("r", {"a": [1_000, 1_999, 5], "t": [0, 1, 2]})
    assert [len(db.invoke(h).rows) for h in list(db.queries)[200:202]] == [1, 0]
