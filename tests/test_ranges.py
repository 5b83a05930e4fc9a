"""Values at the edges of their types: a NOW outside an int time attribute's range is
refused naming the field and the range, an int SUM beyond 64 bits is refused (never
wrapped around), AVG of large ints is right, deep parentheses are a syntax error with a
position; over gRPC each is its status code, never INTERNAL."""

from __future__ import annotations

import grpc
import pytest

import psoup
from clients import PSoupClient
from clients.errors import InvalidArgument, PSoupRpcError
from psoup.errors import QuerySyntaxError, ResultOverflowError, ValueRangeError
from psoup.query.parser import MAX_NESTING
from psoup.server import ServerConfig, start_server

BIG = 2**62


def _db():
    db = psoup.connect()
    db.create_stream("r", {"g": "int", "a": "int", "t": "int"}, time="t")
    db.create_stream("f", {"a": "int", "t": "float"}, time="t")
    return db


def test_now_must_fit_an_int_time_attribute() -> None:
    db = _db()
    db.insert("r", [(0, 1, 5)])
    db.insert("f", [(1, 2.5)])
    h = db.register("SELECT a FROM r BEGIN NOW - 10 END NOW")
    hf = db.register("SELECT a FROM f BEGIN NOW - 10 END NOW")
    for now in (1e308, -1e308, 9.3e18, 2**63, -(2**63) - 1):
        with pytest.raises(ValueRangeError, match=r"now: .* is outside \[-9223372036854775808"):
            db.invoke(h, now=now)
        assert db.invoke(hf, now=float(now)).rows == []  # a float time attribute takes it
    for now in (float("nan"), float("inf")):
        with pytest.raises(ValueRangeError, match="finite"):
            db.invoke(h, now=now)
    assert db.invoke(h, now=2**63 - 1).rows == []
    assert db.invoke(h, now=-(2**63)).rows == []
    # Window ends past the range (NOW - a huge offset) select as the range's ends do.
    wide = db.register(
        "SELECT a FROM r BEGIN NOW - 9223372036854775807 END NOW + 9223372036854775807"
    )
    res = db.invoke(wide, now=-5)
    assert res.rows == [(1,)] and res.window == (-(2**63), 9223372036854775802)


def test_int_sums_are_exact_or_refused() -> None:
    db = _db()
    db.insert("r", [(1, BIG, 1), (1, BIG, 2), (2, BIG, 3), (2, -BIG, 4), (3, 2**63 - 1, 5)])
    total = db.register("SELECT SUM(a) FROM r BEGIN 0 END NOW")
    with pytest.raises(ResultOverflowError, match=r"column 'SUM\(a\)': the SUM is "):
        db.invoke(total)
    avg = db.register("SELECT AVG(a), COUNT(*) FROM r BEGIN 0 END NOW")
    assert db.invoke(avg).rows == [((2 * BIG + 2**63 - 1) / 5, 5)]
    fits = db.register("SELECT SUM(a) FROM r BEGIN 2 END 4")
    assert db.invoke(fits).rows == [(BIG,)]
    grouped = db.register("SELECT g, SUM(a), AVG(a) FROM r GROUP BY g BEGIN 0 END NOW")
    with pytest.raises(ResultOverflowError):
        db.invoke(grouped)  # group 1: 2^62 + 2^62
    part = db.register("SELECT g, SUM(a), AVG(a) FROM r GROUP BY g BEGIN 2 END NOW")
    assert db.invoke(part).rows == [(1, BIG, float(BIG)), (2, 0, 0.0), (3, 2**63 - 1, 2.0**63)]


def test_a_subscription_hears_of_an_overflow_and_the_batch_stands() -> None:
    db = _db()
    h = db.register("SELECT SUM(a) FROM r BEGIN 0 END NOW")
    got = []
    db.subscribe(h, lambda result, tid: got.append(result))
    db.insert("r", [(0, 2**63 - 1, 1)])
    res = db.insert("r", [(0, 1, 2)])
    assert res.count == 1 and len(db.streams["r"].stem) == 2
    assert isinstance(got[-1], ResultOverflowError)


def test_deep_parentheses_are_a_syntax_error() -> None:
    db = _db()
    ok = "(" * MAX_NESTING + "r.a = 1" + ")" * MAX_NESTING
    db.register(f"SELECT * FROM r WHERE {ok} BEGIN 0 END NOW")
    deep = "(" * 5000 + "r.a = 1" + ")" * 5000
    with pytest.raises(QuerySyntaxError, match=f"nested deeper than {MAX_NESTING}") as err:
        db.register(f"SELECT * FROM r WHERE {deep} BEGIN 0 END NOW")
    assert (err.value.line, err.value.column) == (1, 23 + MAX_NESTING)


def test_over_grpc_each_is_its_status_never_internal() -> None:
    srv = start_server(ServerConfig(port=0))
    try:
        with PSoupClient(f"127.0.0.1:{srv.port}") as c:
            c.create_stream("r", {"a": "int", "t": "int"}, time="t")
            c.insert("r", [(2**63 - 1, 1), (1, 2)])
            h = c.register("SELECT a FROM r BEGIN NOW - 10 END NOW")
            with pytest.raises(InvalidArgument, match=r"now: 1e\+308 is outside"):
                c.invoke(h, now=1e308)
            s = c.register("SELECT SUM(a) FROM r BEGIN 0 END NOW")
            with pytest.raises(PSoupRpcError) as err:
                c.invoke(s)
            assert err.value.code == grpc.StatusCode.OUT_OF_RANGE
            with pytest.raises(InvalidArgument, match="nested deeper"):
                c.register(
                    "SELECT * FROM r WHERE "
                    + "(" * 3000
                    + "r.a = 1"
                    + ")" * 3000
                    + " BEGIN 0 END NOW"
                )
    finally:
        srv.stop(grace=1)
