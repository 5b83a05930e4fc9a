"""Hand-checked examples of the test oracle itself (``tests/oracle.py``).

The oracle is the reference the property tests trust, so it gets its own small tests whose
expected answers are worked out by hand in each test (never copied from the engine). Most
build ``QuerySpec`` objects directly so that they test the oracle alone, without the
parser; the last few go through query text to check the two agree on simple cases.
"""

from __future__ import annotations

import math

import pytest
from oracle import Oracle, rows_equal

from psoup.errors import (
    AlreadyExistsError,
    BatchError,
    SchemaError,
    UnknownHandleError,
    UnknownStreamError,
)
from psoup.query.spec import (
    Bound,
    Col,
    ColCompare,
    Compare,
    InList,
    QuerySpec,
    SelectItem,
    Source,
    Window,
)

SCHEMA = {"a": "int", "b": "float", "s": "str", "t": "int"}


def window(begin: tuple[str, float], end: tuple[str, float]) -> Window:
    return Window(Bound(begin[0], begin[1]), Bound(end[0], end[1]))  # type: ignore[arg-type]


SLIDING_10 = window(("now", -10), ("now", 0))
FOREVER = window(("const", -(10**9)), ("const", 10**9))


def col(attr: str, source: int = 0) -> Col:
    return Col(source, attr)


def star(stream: str = "r", source: int = 0, qualify: str | None = None) -> tuple[SelectItem, ...]:
    names = list(SCHEMA)
    types = list(SCHEMA.values())
    return tuple(
        SelectItem(f"{qualify}.{n}" if qualify else n, t, Col(source, n))
        for n, t in zip(names, types, strict=True)
    )


def selection(factors=(), win: Window = FOREVER, select=None, stream: str = "r") -> QuerySpec:
    return QuerySpec(
        text="(hand-built)",
        sources=(Source(stream, stream),),
        factors=tuple(factors),
        select=select if select is not None else star(stream),
        window=win,
    )


@pytest.fixture
def db() -> Oracle:
    o = Oracle()
    o.create_stream("r", SCHEMA, time="t")
    return o


def test_selection_filters_and_keeps_arrival_order(db: Oracle) -> None:
    db.insert("r", [(1, 2.0, "x", 10), (5, 1.5, "y", 10), (2, 0.0, "x", 12)])
    h = db.register_spec(selection([Compare(col("a"), "<", 3)]))
    cols, rows = db.invoke(h)
    assert cols == ("a", "b", "s", "t")
    assert rows == [(1, 2.0, "x", 10), (2, 0.0, "x", 12)]


def test_float_column_stores_ints_as_floats(db: Oracle) -> None:
    db.insert("r", [{"a": 1, "b": 3, "s": "", "t": 0}])
    _, rows = db.invoke(db.register_spec(selection()))
    assert rows == [(1, 3.0, "", 0)]
    assert type(rows[0][1]) is float


def test_in_list_and_column_compare_with_offset(db: Oracle) -> None:
    db.insert("r", [(1, 2.0, "x", 1), (3, 1.0, "y", 2), (4, 4.0, "z", 3), (6, 2.5, "x", 4)])
    # a IN (1, 4, 6) AND a <= b + 1: rows a=1 (1 <= 3), a=4 (4 <= 5); a=6 fails (6 > 3.5)
    spec = selection(
        [InList(col("a"), (1, 4, 6)), ColCompare(col("a"), "<=", col("b"), 1)],
        select=(SelectItem("a", "int", col("a")),),
    )
    assert db.invoke(db.register_spec(spec))[1] == [(1,), (4,)]


def test_string_compare_is_python_order(db: Oracle) -> None:
    db.insert("r", [(0, 0.0, "b", 1), (0, 0.0, "ab", 2), (0, 0.0, "", 3), (0, 0.0, "ba", 4)])
    spec = selection([Compare(col("s"), ">=", "b")], select=(SelectItem("s", "str", col("s")),))
    assert db.invoke(db.register_spec(spec))[1] == [("b",), ("ba",)]


def test_sliding_window_uses_latest_ts_as_now(db: Oracle) -> None:
    db.insert("r", [(i, 0.0, "", t) for i, t in enumerate([0, 5, 10, 15, 20])])
    h = db.register_spec(selection(win=SLIDING_10, select=(SelectItem("t", "int", col("t")),)))
    # NOW = 20: [10, 20]
    assert db.invoke(h)[1] == [(10,), (15,), (20,)]
    # now= overrides: [-3, 7] and [25, 35]
    assert db.invoke(h, now=7)[1] == [(0,), (5,)]
    assert db.invoke(h, now=35)[1] == []


def test_window_needing_now_is_empty_before_any_insert(db: Oracle) -> None:
    h = db.register_spec(selection(win=SLIDING_10))
    count = QuerySpec(
        "(hand-built)",
        (Source("r", "r"),),
        (),
        (
            SelectItem("COUNT(*)", "int", None, "COUNT"),
            SelectItem("SUM(a)", "int", col("a"), "SUM"),
        ),
        SLIDING_10,
    )
    hc = db.register_spec(count)
    assert db.invoke(h)[1] == []
    assert db.invoke(hc)[1] == [(0, None)]
    # a constant window needs no NOW; now= places a NOW window even with no data
    snap = db.register_spec(selection(win=window(("const", 0), ("const", 5))))
    assert db.invoke(snap)[1] == []
    db.insert("r", [(7, 1.0, "q", 3)])
    assert db.invoke(snap)[1] == [(7, 1.0, "q", 3)]
    assert db.invoke(hc)[1] == [(1, 7)]
    assert db.invoke(hc, now=100)[1] == [(0, None)]


def test_retention_hides_old_tuples_for_good() -> None:
    db = Oracle()
    db.create_stream("r", SCHEMA, time="t", max_window=5)
    db.insert("r", [(1, 0.0, "", 0), (2, 0.0, "", 4), (3, 0.0, "", 6)])
    landmark = window(("const", 0), ("now", 0))
    h = db.register_spec(selection(win=landmark, select=(SelectItem("a", "int", col("a")),)))
    # latest 6, keep ts >= 1
    assert db.invoke(h)[1] == [(2,), (3,)]
    # moving NOW back does not bring ts=0 back
    assert db.invoke(h, now=4)[1] == [(2,)]
    db.insert("r", [(4, 0.0, "", 10)])
    # latest 10, keep ts >= 5
    assert db.invoke(h)[1] == [(3,), (4,)]


def test_max_window_zero_keeps_the_latest_timestamp_only() -> None:
    db = Oracle()
    db.create_stream("r", SCHEMA, time="t", max_window=0)
    db.insert("r", [(1, 0.0, "", 3), (2, 0.0, "", 4), (3, 0.0, "", 4)])
    h = db.register_spec(selection(select=(SelectItem("a", "int", col("a")),)))
    assert db.invoke(h)[1] == [(2,), (3,)]


def test_join_pairs_ordered_by_older_timestamp_then_ids() -> None:
    db = Oracle()
    db.create_stream("r", {"k": "int", "t": "int"}, time="t")
    db.create_stream("s", {"k": "int", "t": "int"}, time="t")
    db.insert("r", [(1, 5)])  # id 0
    db.insert("s", [(1, 1), (2, 2), (1, 3)])  # ids 1, 2, 3
    db.insert("r", [(1, 6), (2, 6)])  # ids 4, 5
    spec = QuerySpec(
        "(hand-built)",
        (Source("r", "r"), Source("s", "s")),
        (ColCompare(Col(0, "k"), "=", Col(1, "k")),),
        (
            SelectItem("r.t", "int", Col(0, "t")),
            SelectItem("s.t", "int", Col(1, "t")),
        ),
        FOREVER,
    )
    h = db.register_spec(spec)
    # pairs: (r5,s1) min 1; (r6,s1) min 1; (r6b=k2,s2) min 2; (r5,s3) min 3; (r6,s3) min 3
    # ties on min ts broken by r's id, then s's id
    assert db.invoke(h)[1] == [(5, 1), (6, 1), (6, 2), (5, 3), (6, 3)]
    # NOW is the latest over both streams (6); a [3, 6] window keeps both ends >= 3
    h2 = db.register_spec(
        QuerySpec(
            spec.text, spec.sources, spec.factors, spec.select, window(("now", -3), ("now", 0))
        )
    )
    assert db.invoke(h2)[1] == [(5, 3), (6, 3)]


def test_self_join_pairs_a_tuple_with_itself() -> None:
    db = Oracle()
    db.create_stream("r", {"k": "int", "t": "int"}, time="t")
    db.insert("r", [(1, 1), (1, 2), (2, 2)])
    spec = QuerySpec(
        "(hand-built)",
        (Source("r", "x"), Source("r", "y")),
        (ColCompare(Col(0, "k"), "<", Col(1, "k"), 1),),  # x.k < y.k + 1, i.e. x.k <= y.k
        (SelectItem("x.t", "int", Col(0, "t")), SelectItem("y.t", "int", Col(1, "t"))),
        FOREVER,
    )
    rows = db.invoke(db.register_spec(spec))[1]
    # ids: 0=(1,1) 1=(1,2) 2=(2,2); x.k <= y.k: all pairs except x=2,y in {0,1}
    # (0,0) m1; (0,1) m1; (0,2) m1; (1,0) m1; (1,1) m2; (1,2) m2; (2,2) m2
    assert rows == [(1, 1), (1, 2), (1, 2), (2, 1), (2, 2), (2, 2), (2, 2)]


def test_join_respects_each_streams_retention() -> None:
    db = Oracle()
    db.create_stream("r", {"k": "int", "t": "int"}, time="t", max_window=2)
    db.create_stream("s", {"k": "int", "t": "int"}, time="t")
    db.insert("r", [(1, 0), (1, 10)])
    db.insert("s", [(1, 0), (1, 20)])
    spec = QuerySpec(
        "(hand-built)",
        (Source("r", "r"), Source("s", "s")),
        (ColCompare(Col(0, "k"), "=", Col(1, "k")),),
        (SelectItem("r.t", "int", Col(0, "t")), SelectItem("s.t", "int", Col(1, "t"))),
        FOREVER,
    )
    # r keeps ts >= 8 only; s keeps everything (its own latest does not expire r)
    assert db.invoke(db.register_spec(spec))[1] == [(10, 0), (10, 20)]


def test_aggregates_without_group_by(db: Oracle) -> None:
    db.insert("r", [(1, 0.5, "b", 1), (4, 2.0, "a", 2), (2, 1.0, "c", 3)])
    items = (
        SelectItem("COUNT(*)", "int", None, "COUNT"),
        SelectItem("COUNT(a)", "int", col("a"), "COUNT"),
        SelectItem("SUM(a)", "int", col("a"), "SUM"),
        SelectItem("SUM(b)", "float", col("b"), "SUM"),
        SelectItem("AVG(a)", "float", col("a"), "AVG"),
        SelectItem("MIN(s)", "str", col("s"), "MIN"),
        SelectItem("MAX(b)", "float", col("b"), "MAX"),
    )
    _, rows = db.invoke(db.register_spec(selection(select=items)))
    assert rows_equal([(3, 3, 7, 3.5, 7 / 3, "a", 2.0)], rows)
    assert type(rows[0][2]) is int and type(rows[0][3]) is float and type(rows[0][4]) is float
    empty = db.register_spec(selection([Compare(col("a"), ">", 100)], select=items))
    assert db.invoke(empty)[1] == [(0, 0, None, None, None, None, None)]


def test_aggregates_with_group_by(db: Oracle) -> None:
    db.insert("r", [(2, 1.0, "x", 1), (1, 3.0, "y", 2), (2, 5.0, "z", 3), (3, 0.0, "x", 4)])
    spec = QuerySpec(
        "(hand-built)",
        (Source("r", "r"),),
        (Compare(col("a"), "<", 3),),
        (
            SelectItem("a", "int", col("a")),
            SelectItem("COUNT(*)", "int", None, "COUNT"),
            SelectItem("AVG(b)", "float", col("b"), "AVG"),
        ),
        FOREVER,
        group_by=col("a"),
    )
    h = db.register_spec(spec)
    assert db.invoke(h)[1] == [(1, 1, 3.0), (2, 2, 3.0)]
    # grouping by a str key sorts by Python str order; no rows at all when nothing matches
    by_s = QuerySpec(
        spec.text, spec.sources, (), (SelectItem("s", "str", col("s")),
        SelectItem("SUM(a)", "int", col("a"), "SUM")), FOREVER, group_by=col("s"),
    )  # fmt: skip
    assert db.invoke(db.register_spec(by_s))[1] == [("x", 5), ("y", 1), ("z", 2)]
    assert db.invoke(h, now=0)[1] == [(1, 1, 3.0), (2, 2, 3.0)]  # const window ignores NOW
    never = QuerySpec(spec.text, spec.sources, spec.factors, spec.select,
                      window(("const", 50), ("const", 60)), group_by=col("a"))  # fmt: skip
    assert db.invoke(db.register_spec(never))[1] == []


def test_float_sum_is_correctly_rounded(db: Oracle) -> None:
    db.insert("r", [(0, 1e16, "", 0), (0, 1.0, "", 1), (0, -1e16, "", 2), (0, 1.0, "", 3)])
    spec = selection(select=(SelectItem("SUM(b)", "float", col("b"), "SUM"),))
    assert db.invoke(db.register_spec(spec))[1] == [(2.0,)]


def test_register_sees_old_and_new_tuples(db: Oracle) -> None:
    db.insert("r", [(1, 0.0, "", 1)])
    h = db.register_spec(selection(select=(SelectItem("a", "int", col("a")),)))
    db.insert("r", [(2, 0.0, "", 2)])
    assert db.invoke(h)[1] == [(1,), (2,)]


def test_batch_errors_leave_state_unchanged(db: Oracle) -> None:
    h = db.register_spec(selection(select=(SelectItem("t", "int", col("t")),)))
    first = db.insert("r", [(1, 0.0, "", 5)])
    bad_batches = [
        [(1, 0.0, "", 9), (1, 0.0, "", 4)],  # time goes back within the batch
        [(1, 0.0, "", 9), (1, 0.0, "", 1)],  # and below the stream's latest
        [(1, 0.0, "", 9), (True, 0.0, "", 9)],  # bool is not an int
        [(1, 0.0, "", 9), (1.0, 0.0, "", 9)],  # float is not an int
        [(1, 0.0, "", 9), (1, math.nan, "", 9)],
        [(1, 0.0, "", 9), (1, math.inf, "", 9)],
        [(1, 0.0, "", 9), (1, 0.0, 3, 9)],
        [(1, 0.0, "", 9), (1, 0.0, "")],
        [(1, 0.0, "", 9), {"a": 1, "b": 0.0, "s": ""}],
        [(1, 0.0, "", 9), {"a": 1, "b": 0.0, "s": "", "t": 9, "z": 1}],
    ]
    for batch in bad_batches:
        with pytest.raises(BatchError) as err:
            db.insert("r", batch)
        assert err.value.row == 1
    assert db.invoke(h)[1] == [(5,)]
    # the rejected ts=9 rows did not move the stream's latest time
    second = db.insert("r", [(1, 0.0, "", 6)])
    assert second.first_id > first.last_id
    assert db.invoke(h)[1] == [(5,), (6,)]


def test_tuple_ids_are_global_and_increasing() -> None:
    db = Oracle()
    db.create_stream("r", {"t": "int"}, time="t")
    db.create_stream("s", {"t": "float"}, time="t")
    a = db.insert("r", [(1,), (2,)])
    b = db.insert("s", [(1,)])
    c = db.insert("r", [(2,)])
    assert a.first_id < a.last_id < b.first_id <= b.last_id < c.first_id


def test_declaration_and_lookup_errors() -> None:
    db = Oracle()
    with pytest.raises(SchemaError):
        db.create_stream("r", {}, time="t")
    with pytest.raises(SchemaError):
        db.create_stream("r", {"t": "bool"}, time="t")
    with pytest.raises(SchemaError):
        db.create_stream("r", {"t": "str"}, time="t")
    with pytest.raises(SchemaError):
        db.create_stream("r", {"a": "int"}, time="t")
    with pytest.raises(SchemaError):
        db.create_stream("1r", {"t": "int"}, time="t")
    with pytest.raises(SchemaError):
        db.create_stream("r", {"t": "int"}, time="t", max_window=-1)
    db.create_stream("r", {"t": "int"}, time="t")
    with pytest.raises(AlreadyExistsError):
        db.create_stream("r", {"t": "int"}, time="t")
    with pytest.raises(UnknownStreamError):
        db.insert("nope", [(1,)])
    with pytest.raises(UnknownHandleError):
        db.invoke("0" * 32)
    h = db.register_spec(selection(select=(SelectItem("t", "int", col("t")),)))
    db.unregister(h)
    with pytest.raises(UnknownHandleError):
        db.invoke(h)
    with pytest.raises(UnknownHandleError):
        db.unregister(h)


def test_rows_equal_is_strict_on_types_and_lenient_on_float_bits() -> None:
    assert rows_equal([(1, 0.1 + 0.2)], [(1, 0.3)])
    assert not rows_equal([(1, 2.0)], [(1, 2)])
    assert not rows_equal([(1,)], [(1.0,)])
    assert not rows_equal([(1,), (2,)], [(2,), (1,)])
    assert not rows_equal([(None,)], [(0,)])
    assert not rows_equal([(1,)], [[1]])  # type: ignore[list-item]


# -- through query text (needs the parser) ----------------------------------------------


def test_text_selection_and_aggregate(db: Oracle) -> None:
    db.insert("r", [(1, 2.0, "x", 10), (3, 4.0, "y", 11), (6, 1.0, "x", 12)])
    h = db.register("SELECT * FROM r WHERE r.a < :x BEGIN NOW - 1 END NOW", params={"x": 5})
    # NOW = 12, window [11, 12], a < 5: only (3, ...)
    assert db.invoke(h) == (("a", "b", "s", "t"), [(3, 4.0, "y", 11)])
    agg = db.register("SELECT COUNT(*), SUM(b) FROM r WHERE s = 'x' BEGIN 0 END NOW")
    cols, rows = db.invoke(agg)
    assert cols == ("COUNT(*)", "SUM(b)")
    assert rows == [(2, 3.0)]


def test_text_join(db: Oracle) -> None:
    db.create_stream("q", {"a": "int", "t": "int"}, time="t")
    db.insert("r", [(1, 0.0, "", 1), (2, 0.0, "", 2)])
    db.insert("q", [(2, 3), (1, 4)])
    h = db.register("SELECT r.t, q.t FROM r, q WHERE r.a = q.a BEGIN 0 END NOW")
    # pairs (r1@1, q@4) min 1, (r2@2, q@3) min 2
    assert db.invoke(h) == (("r.t", "q.t"), [(1, 4), (2, 3)])
