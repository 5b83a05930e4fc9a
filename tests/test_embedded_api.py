"""Unit tests of the embedded API contract (``import psoup; psoup.connect()``).

Declarations, batches, registration, invoke and unregister, checked call by call on every
strategy: the errors each misuse raises (and that a refused call changes nothing), the
shape and types of results, retention (``max_window``) and ``invoke(now=...)``. Every
expected answer is worked out by hand in the test; none is copied from the engine.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import pytest

import psoup
from psoup import errors

STRATEGIES = ("psoup-p", "psoup-c", "nomat")
R = {"a": "int", "b": "float", "s": "str", "t": "int"}


@pytest.fixture(params=STRATEGIES)
def db(request: pytest.FixtureRequest) -> Iterator[psoup.Engine]:
    """An engine per strategy with tiny blocks, so a few rows already span many."""
    engine = psoup.connect(strategy=request.param, block_rows=4)
    yield engine
    engine.close()


def rows(db: psoup.Engine, handle: str, now: int | float | None = None) -> list[tuple]:
    return db.invoke(handle, now=now).rows


def snapshot(db: psoup.Engine, handles: list[str]) -> list[tuple[tuple[str, ...], list]]:
    out = []
    for h in handles:
        res = db.invoke(h)
        out.append((res.columns, list(res.rows)))
    return out


# -- exports -------------------------------------------------------------------------------


def test_errors_are_exported_from_the_package() -> None:
    for name in (
        "PSoupError",
        "QueryError",
        "QuerySyntaxError",
        "QueryNameError",
        "QueryTypeError",
        "QueryParameterError",
        "UnsupportedQueryError",
        "SchemaError",
        "BatchError",
        "NotFoundError",
        "UnknownStreamError",
        "UnknownHandleError",
        "AlreadyExistsError",
    ):
        assert getattr(psoup, name) is getattr(errors, name)
        assert issubclass(getattr(psoup, name), psoup.PSoupError)


# -- declarations --------------------------------------------------------------------------

BAD_DECLARATIONS = [
    pytest.param("r", {}, "t", None, id="empty-schema"),
    pytest.param("r", {"a": "bool", "t": "int"}, "t", None, id="unknown-type"),
    pytest.param("r", {"a": "double", "t": "int"}, "t", None, id="unknown-type-double"),
    pytest.param("r", {"a": "int"}, "t", None, id="time-missing"),
    pytest.param("r", {"a": "int", "t": "str"}, "t", None, id="time-is-str"),
    pytest.param("", {"t": "int"}, "t", None, id="empty-name"),
    pytest.param("1r", {"t": "int"}, "t", None, id="name-starts-with-digit"),
    pytest.param("r-s", {"t": "int"}, "t", None, id="name-with-dash"),
    pytest.param("r s", {"t": "int"}, "t", None, id="name-with-space"),
    pytest.param("r", {"a b": "int", "t": "int"}, "t", None, id="bad-attribute-name"),
    pytest.param("r", {"1a": "int", "t": "int"}, "t", None, id="attribute-starts-with-digit"),
    pytest.param("r", {"t": "int"}, "t", -1, id="negative-max-window"),
    pytest.param("r", {"t": "float"}, "t", -0.5, id="negative-float-max-window"),
]


@pytest.mark.parametrize(("name", "schema", "time", "max_window"), BAD_DECLARATIONS)
def test_bad_declarations_raise_schema_error_and_create_nothing(
    db: psoup.Engine, name: str, schema: dict, time: str, max_window: int | None
) -> None:
    with pytest.raises(psoup.SchemaError):
        db.create_stream(name, schema, time=time, max_window=max_window)
    if name == "r":
        with pytest.raises(psoup.UnknownStreamError):
            db.insert("r", [(0,)])
        # the name is still free
        db.create_stream("r", {"t": "int"}, time="t")
        assert db.insert("r", [(0,)]).first_id >= 0


def test_duplicate_stream_raises_already_exists_and_keeps_the_first(db: psoup.Engine) -> None:
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    with pytest.raises(psoup.AlreadyExistsError):
        db.create_stream("r", {"x": "str", "t": "float"}, time="t")
    db.insert("r", [(5, 1)])
    h = db.register("SELECT * FROM r BEGIN 0 END NOW")
    assert db.invoke(h).columns == ("a", "t")
    assert rows(db, h) == [(5, 1)]


def test_select_star_follows_declaration_order(db: psoup.Engine) -> None:
    db.create_stream("r", {"z": "str", "t": "int", "a": "float"}, time="t")
    db.insert("r", [("q", 3, 1.5)])
    res = db.invoke(db.register("SELECT * FROM r BEGIN 0 END NOW"))
    assert res.columns == ("z", "t", "a")
    assert res.rows == [("q", 3, 1.5)]


def test_float_time_attribute_and_float_max_window(db: psoup.Engine) -> None:
    db.create_stream("r", {"a": "int", "t": "float"}, time="t", max_window=1.5)
    db.insert("r", [(1, 0.5), (2, 1.0), (3, 2.0), (4, 2.5)])
    h = db.register("SELECT a FROM r BEGIN 0 END NOW")
    # latest 2.5, retention keeps t >= 1.0
    assert rows(db, h) == [(2,), (3,), (4,)]
    assert rows(db, db.register("SELECT a, t FROM r BEGIN NOW - 0.5 END NOW")) == [
        (3, 2.0),
        (4, 2.5),
    ]


# -- inserting -----------------------------------------------------------------------------


def test_tuples_and_dicts_are_the_same_rows(db: psoup.Engine) -> None:
    db.create_stream("r", R, time="t")
    h = db.register("SELECT * FROM r BEGIN 0 END NOW")
    db.insert("r", [(1, 2.0, "x", 10)])
    db.insert("r", [{"t": 11, "s": "y", "b": 4.5, "a": 3}])
    res = db.invoke(h)
    assert res.columns == ("a", "b", "s", "t")
    assert res.rows == [(1, 2.0, "x", 10), (3, 4.5, "y", 11)]


def test_result_holds_python_scalars(db: psoup.Engine) -> None:
    db.create_stream("r", R, time="t")
    db.insert("r", [(1, 2, "x", 10), (2, 0.5, "y", 10)])  # an int into the float column
    res = db.invoke(db.register("SELECT * FROM r BEGIN 0 END NOW"))
    assert isinstance(res.columns, tuple)
    assert isinstance(res.rows, list)
    assert res.rows == [(1, 2.0, "x", 10), (2, 0.5, "y", 10)]
    for row in res.rows:
        assert type(row) is tuple
        assert [type(v) for v in row] == [int, float, str, int]
    agg = db.invoke(
        db.register("SELECT COUNT(*), SUM(a), SUM(b), AVG(a), MIN(s), MAX(b) FROM r BEGIN 0 END 99")
    )
    assert agg.rows == [(2, 3, 2.5, 1.5, "x", 2.0)]
    assert [type(v) for v in agg.rows[0]] == [int, int, float, float, str, float]


def test_tuple_ids_are_global_and_increasing(db: psoup.Engine) -> None:
    db.create_stream("r", {"t": "int"}, time="t")
    db.create_stream("q", {"t": "float"}, time="t")
    a = db.insert("r", [(1,), (2,), (2,)])
    b = db.insert("q", [(0.5,)])
    c = db.insert("r", [(3,)])
    assert a.last_id - a.first_id >= 2
    assert a.first_id < a.last_id < b.first_id <= b.last_id < c.first_id <= c.last_id


def test_equal_timestamps_are_accepted(db: psoup.Engine) -> None:
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    db.insert("r", [(1, 5), (2, 5)])
    db.insert("r", [(3, 5)])
    assert rows(db, db.register("SELECT a FROM r BEGIN 5 END 5")) == [(1,), (2,), (3,)]


GOOD = (1, 0.5, "x", 20)
BAD_BATCHES = [
    pytest.param([GOOD, (1, 0.5, "x")], 1, None, id="too-few-values"),
    pytest.param([GOOD, (1, 0.5, "x", 20, 0)], 1, None, id="too-many-values"),
    pytest.param([GOOD, {"a": 1, "b": 0.5, "s": "x"}], 1, None, id="dict-missing-key"),
    pytest.param(
        [GOOD, {"a": 1, "b": 0.5, "s": "x", "t": 20, "z": 0}], 1, None, id="dict-extra-key"
    ),
    pytest.param([GOOD, (True, 0.5, "x", 20)], 1, "a", id="bool-in-int"),
    pytest.param([GOOD, (1.0, 0.5, "x", 20)], 1, "a", id="float-in-int"),
    pytest.param([GOOD, ("1", 0.5, "x", 20)], 1, "a", id="str-in-int"),
    pytest.param([GOOD, (None, 0.5, "x", 20)], 1, "a", id="none-in-int"),
    pytest.param([GOOD, (1, math.nan, "x", 20)], 1, "b", id="nan-in-float"),
    pytest.param([GOOD, (1, math.inf, "x", 20)], 1, "b", id="inf-in-float"),
    pytest.param([GOOD, (1, -math.inf, "x", 20)], 1, "b", id="minus-inf-in-float"),
    pytest.param([GOOD, (1, "0.5", "x", 20)], 1, "b", id="str-in-float"),
    pytest.param([GOOD, (1, 0.5, 7, 20)], 1, "s", id="int-in-str"),
    pytest.param([GOOD, (1, 0.5, None, 20)], 1, "s", id="none-in-str"),
    pytest.param([GOOD, (1, 0.5, "x", 20.5)], 1, "t", id="float-in-int-time"),
    pytest.param([GOOD, (1, 0.5, "x", 19)], 1, "t", id="time-decreases-in-batch"),
    pytest.param([(1, 0.5, "x", 9)], 0, "t", id="time-below-latest"),
    pytest.param([GOOD, GOOD, (1, 0.5, "x", 9)], 2, "t", id="time-below-latest-late-row"),
]


@pytest.mark.parametrize(("batch", "bad_row", "bad_column"), BAD_BATCHES)
def test_bad_batch_is_rejected_whole(
    db: psoup.Engine, batch: list, bad_row: int, bad_column: str | None
) -> None:
    db.create_stream("r", R, time="t")
    db.create_stream("q", {"k": "int", "t": "int"}, time="t")
    handles = [
        db.register("SELECT * FROM r BEGIN 0 END NOW"),
        db.register("SELECT COUNT(*), SUM(a), MAX(t) FROM r BEGIN NOW - 100 END NOW"),
        db.register("SELECT r.t, q.t FROM r, q WHERE r.a = q.k BEGIN 0 END NOW"),
        db.register("SELECT a, COUNT(*) FROM r GROUP BY a BEGIN 0 END NOW"),
    ]
    before_ids = db.insert("r", [(1, 1.5, "p", 5), (2, 2.5, "q", 10)])
    db.insert("q", [(1, 8), (2, 12)])
    before = snapshot(db, handles)
    assert before[0][1] == [(1, 1.5, "p", 5), (2, 2.5, "q", 10)]
    assert before[1][1] == [(2, 3, 10)]
    # pairs (r@5, q@8) and (r@10, q@12), ordered by the older timestamp
    assert before[2][1] == [(5, 8), (10, 12)]
    assert before[3][1] == [(1, 1), (2, 1)]

    with pytest.raises(psoup.BatchError) as err:
        db.insert("r", batch)
    assert err.value.row == bad_row
    if bad_column is not None:
        assert err.value.column == bad_column
    assert snapshot(db, handles) == before

    # the refused batch did not move the stream's latest time (20 > 10): 11 is accepted
    after = db.insert("r", [(1, 0.0, "z", 11)])
    assert after.first_id > before_ids.last_id
    assert rows(db, handles[1]) == [(3, 4, 11)]


def test_unknown_stream(db: psoup.Engine) -> None:
    with pytest.raises(psoup.UnknownStreamError):
        db.insert("nope", [(1,)])
    with pytest.raises(psoup.NotFoundError):
        db.insert("nope", [(1,)])
    with pytest.raises(psoup.QueryNameError):
        db.register("SELECT * FROM nope BEGIN 0 END NOW")


# -- registering and handles -----------------------------------------------------------------

BAD_QUERIES = [
    pytest.param("SELECT * FROM r", None, psoup.QuerySyntaxError, id="no-window"),
    pytest.param("SELECT zz FROM r BEGIN 0 END NOW", None, psoup.QueryNameError, id="no-attr"),
    pytest.param(
        "SELECT * FROM r WHERE a = 'x' BEGIN 0 END NOW", None, psoup.QueryTypeError, id="type"
    ),
    pytest.param(
        "SELECT * FROM r WHERE a = :v BEGIN 0 END NOW", {}, psoup.QueryParameterError, id="param"
    ),
    pytest.param(
        "SELECT * FROM r WHERE a = 1 BEGIN 0 END NOW",
        {"v": 1},
        psoup.QueryParameterError,
        id="unused-param",
    ),
    pytest.param(
        "SELECT * FROM r WHERE a = 1 OR a = 2 BEGIN 0 END NOW",
        None,
        psoup.UnsupportedQueryError,
        id="or",
    ),
]


@pytest.mark.parametrize(("text", "params", "error"), BAD_QUERIES)
def test_bad_queries_raise_query_errors(
    db: psoup.Engine, text: str, params: dict | None, error: type[Exception]
) -> None:
    db.create_stream("r", R, time="t")
    with pytest.raises(error) as err:
        db.register(text, params=params)
    assert isinstance(err.value, psoup.QueryError)
    assert err.value.line >= 1 and err.value.column >= 1


def test_handles_are_distinct_hex_and_unregister_is_per_handle(db: psoup.Engine) -> None:
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    text = "SELECT a FROM r WHERE a > :k BEGIN 0 END NOW"
    h1 = db.register(text, params={"k": 0})
    h2 = db.register(text, params={"k": 0})
    for h in (h1, h2):
        assert isinstance(h, str)
        assert re.fullmatch(r"[0-9a-f]{32}", h)
    assert h1 != h2
    db.insert("r", [(0, 1), (1, 2)])
    db.unregister(h1)
    with pytest.raises(psoup.UnknownHandleError):
        db.invoke(h1)
    with pytest.raises(psoup.UnknownHandleError):
        db.unregister(h1)
    assert rows(db, h2) == [(1,)]
    db.insert("r", [(2, 3)])
    assert rows(db, h2) == [(1,), (2,)]


def test_unknown_handles(db: psoup.Engine) -> None:
    with pytest.raises(psoup.UnknownHandleError):
        db.invoke("0" * 32)
    with pytest.raises(psoup.UnknownHandleError):
        db.unregister("f" * 32)
    with pytest.raises(psoup.NotFoundError):
        db.invoke("not a handle")


def test_registration_order_does_not_matter(db: psoup.Engine) -> None:
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    text = "SELECT a, t FROM r WHERE a != 2 BEGIN NOW - 5 END NOW"
    early = db.register(text)
    db.insert("r", [(1, 1), (2, 2), (3, 3)])
    middle = db.register(text)
    db.insert("r", [(4, 7), (2, 8)])
    late = db.register(text)
    # NOW = 8: window [3, 8], a != 2
    expected = [(3, 3), (4, 7)]
    assert rows(db, early) == rows(db, middle) == rows(db, late) == expected


def test_join_and_self_join(db: psoup.Engine) -> None:
    db.create_stream("r", {"k": "int", "t": "int"}, time="t")
    db.create_stream("q", {"k": "int", "t": "int"}, time="t")
    join = db.register("SELECT r.t, q.t FROM r, q WHERE r.k = q.k BEGIN 0 END NOW")
    self_join = db.register("SELECT x.t, y.t FROM r x, r AS y WHERE x.k < y.k BEGIN 0 END NOW")
    db.insert("r", [(1, 5)])
    db.insert("q", [(1, 1), (2, 2), (1, 3)])
    db.insert("r", [(1, 6), (2, 6)])
    # pairs by (older ts, r's id, q's id): (5,1) (6,1) (6,2) (5,3) (6,3)
    assert rows(db, join) == [(5, 1), (6, 1), (6, 2), (5, 3), (6, 3)]
    # r: k1@5 (first), k1@6, k2@6; x.k < y.k: (k1@5, k2@6) and (k1@6, k2@6)
    assert rows(db, self_join) == [(5, 6), (6, 6)]
    # NOW of a join is the latest over both streams (6 here)
    sliding = db.register("SELECT r.t, q.t FROM r, q WHERE r.k = q.k BEGIN NOW - 3 END NOW")
    assert rows(db, sliding) == [(5, 3), (6, 3)]  # [3, 6]
    assert rows(db, sliding, now=5) == [(5, 3)]  # [2, 5]


def test_self_join_pairs_a_tuple_with_itself(db: psoup.Engine) -> None:
    db.create_stream("r", {"k": "int", "t": "int"}, time="t")
    db.insert("r", [(1, 1), (2, 2)])
    h = db.register("SELECT x.t, y.t FROM r x, r y WHERE x.k = y.k BEGIN 0 END NOW")
    db.insert("r", [(1, 3)])
    # ids: 0 (k1@1), 1 (k2@2), 2 (k1@3); pairs with equal k, by (older ts, x id, y id)
    assert rows(db, h) == [(1, 1), (1, 3), (3, 1), (2, 2), (3, 3)]


# -- windows and NOW -----------------------------------------------------------------------


def test_invoke_before_any_insert(db: psoup.Engine) -> None:
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    sliding = db.register("SELECT a FROM r BEGIN NOW - 10 END NOW")
    count = db.register("SELECT COUNT(*), SUM(a), AVG(a), MIN(a), MAX(a) FROM r BEGIN 0 END NOW")
    grouped = db.register("SELECT a, COUNT(*) FROM r GROUP BY a BEGIN 0 END NOW")
    snap = db.register("SELECT a FROM r BEGIN 0 END 10")
    assert rows(db, sliding) == []
    assert rows(db, count) == [(0, None, None, None, None)]
    assert rows(db, grouped) == []
    assert rows(db, snap) == []
    assert rows(db, count, now=50) == [(0, None, None, None, None)]


def test_invoke_with_now(db: psoup.Engine) -> None:
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    db.insert("r", [(i, t) for i, t in enumerate([0, 2, 4, 6, 8, 10])])
    sliding = db.register("SELECT t FROM r BEGIN NOW - 4 END NOW")
    ahead = db.register("SELECT t FROM r BEGIN NOW - 2 END NOW + 2")
    snap = db.register("SELECT t FROM r BEGIN 3 END 7")
    landmark = db.register("SELECT COUNT(*) FROM r BEGIN 4 END NOW")
    assert rows(db, sliding) == [(6,), (8,), (10,)]  # NOW = 10
    assert rows(db, sliding, now=10) == [(6,), (8,), (10,)]
    assert rows(db, sliding, now=5) == [(2,), (4,)]
    assert rows(db, sliding, now=13) == [(10,)]
    assert rows(db, sliding, now=30) == []
    assert rows(db, sliding, now=-1) == []
    assert rows(db, ahead, now=5) == [(4,), (6,)]
    assert rows(db, ahead, now=7.5) == [(6,), (8,)]
    assert rows(db, snap) == rows(db, snap, now=0) == rows(db, snap, now=99) == [(4,), (6,)]
    assert rows(db, landmark) == [(4,)]
    assert rows(db, landmark, now=3) == [(0,)]
    assert rows(db, landmark, now=7) == [(2,)]


# -- retention -----------------------------------------------------------------------------


def test_max_window_expires_old_tuples_for_good(db: psoup.Engine) -> None:
    db.create_stream("r", {"a": "int", "t": "int"}, time="t", max_window=10)
    everything = db.register("SELECT t FROM r BEGIN 0 END NOW")
    count = db.register("SELECT COUNT(*), SUM(a), MIN(t) FROM r BEGIN NOW - 1000 END NOW")
    for t in range(0, 31, 3):
        db.insert("r", [(1, t)])  # 0, 3, ..., 30
    # latest 30, retention keeps t >= 20
    assert rows(db, everything) == [(21,), (24,), (27,), (30,)]
    assert rows(db, count) == [(4, 4, 21)]
    assert rows(db, everything, now=15) == []  # expired tuples never come back
    late = db.register("SELECT t FROM r BEGIN 0 END NOW")
    assert rows(db, late) == [(21,), (24,), (27,), (30,)]
    db.insert("r", [(1, 31), (1, 31)])
    assert rows(db, everything) == [(21,), (24,), (27,), (30,), (31,), (31,)]


def test_max_window_boundary_is_inclusive_and_zero_keeps_the_latest_time(
    db: psoup.Engine,
) -> None:
    db.create_stream("r", {"a": "int", "t": "int"}, time="t", max_window=0)
    db.create_stream("q", {"a": "int", "t": "int"}, time="t", max_window=4)
    zero = db.register("SELECT a FROM r BEGIN 0 END NOW")
    four = db.register("SELECT a FROM q BEGIN 0 END NOW")
    db.insert("r", [(1, 1), (2, 2), (3, 2)])
    db.insert("q", [(1, 1), (2, 2), (3, 6)])
    assert rows(db, zero) == [(2,), (3,)]
    assert rows(db, four) == [(2,), (3,)]  # 2 >= 6 - 4


def test_max_window_none_keeps_everything(db: psoup.Engine) -> None:
    db.create_stream("r", {"a": "int", "t": "int"}, time="t", max_window=None)
    db.insert("r", [(i, 1000 * i) for i in range(20)])
    assert rows(db, db.register("SELECT COUNT(*) FROM r BEGIN 0 END NOW")) == [(20,)]


def test_retention_is_per_stream_in_a_join(db: psoup.Engine) -> None:
    db.create_stream("r", {"k": "int", "t": "int"}, time="t", max_window=2)
    db.create_stream("q", {"k": "int", "t": "int"}, time="t")
    h = db.register("SELECT r.t, q.t FROM r, q WHERE r.k = q.k BEGIN 0 END NOW")
    db.insert("r", [(1, 0), (1, 10)])
    db.insert("q", [(1, 0), (1, 20)])
    # r keeps t >= 8 (its own latest is 10; q's 20 does not expire r)
    assert rows(db, h) == [(10, 0), (10, 20)]


def test_expiry_across_many_blocks_with_aggregates(db: psoup.Engine) -> None:
    db.create_stream("r", {"a": "int", "b": "float", "t": "int"}, time="t", max_window=7)
    h = db.register("SELECT a, COUNT(*), SUM(b) FROM r WHERE a < 2 GROUP BY a BEGIN 0 END NOW")
    sel = db.register("SELECT t FROM r WHERE a = 1 BEGIN NOW - 100 END NOW")
    for t in range(40):
        db.insert("r", [(t % 3, 0.5, t)])
    # latest 39, keep t >= 32: t 32..39, a = t % 3
    kept = list(range(32, 40))
    zeros = [t for t in kept if t % 3 == 0]
    ones = [t for t in kept if t % 3 == 1]
    assert rows(db, h) == [(0, len(zeros), 0.5 * len(zeros)), (1, len(ones), 0.5 * len(ones))]
    assert rows(db, sel) == [(t,) for t in ones]
