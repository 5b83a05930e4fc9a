"""Results column-wise: ``Result.arrays``, ``column()`` and ``to_arrow()`` agree with
``rows`` in the engine and over gRPC, and a result built either way compares equal."""

from __future__ import annotations

import numpy as np
import pytest

import psoup
from psoup.values import Result


def _db(strategy: str) -> psoup.Engine:
    db = psoup.connect(strategy=strategy)
    db.create_stream("r", {"a": "int", "x": "float", "s": "str", "t": "int"}, time="t")
    rng = np.random.default_rng(3)
    n = 500
    db.insert_columns(
        "r",
        {
            "a": rng.integers(0, 10, n),
            "x": rng.random(n),
            "s": [f"v{i % 7}" for i in range(n)],
            "t": np.arange(n),
        },
    )
    return db


@pytest.mark.parametrize("strategy", ["psoup-p", "psoup-c", "nomat"])
def test_arrays_hold_the_rows_typed(strategy: str) -> None:
    db = _db(strategy)
    h = db.register("SELECT r.a, r.x, r.s FROM r WHERE r.a = 3 BEGIN NOW - 99 END NOW")
    res = db.invoke(h)
    a, x, s = res.arrays
    assert (a.dtype, x.dtype, s.dtype) == (np.int64, np.float64, object)
    assert len(res) == len(a) > 0
    assert list(zip(a.tolist(), x.tolist(), s.tolist(), strict=True)) == res.rows
    assert np.array_equal(res.column("a"), a)
    with pytest.raises(ValueError):
        a[0] = 1  # a result is a value: its arrays are read-only
    table = res.to_arrow()
    assert table.column_names == ["a", "x", "s"]
    assert table.to_pylist() == res.as_dicts()
    with pytest.raises(KeyError, match="no column 'b'"):
        res.column("b")


@pytest.mark.parametrize("strategy", ["psoup-p", "psoup-c", "nomat"])
@pytest.mark.parametrize(
    ("select", "window"),
    [
        ("*", 99),  # int64 columns only: the gather's matrix rows, frozen as one
        ("t, a", 99),  # not in the stream's order: a take per column
        ("a, x, s", 99),  # a float viewed from the int64 matrix and a str column
        ("*", 2),  # a handful of rows, gathered value by value
        ("*", 2000),  # over several storage chunks, joined
    ],
)
def test_every_array_of_a_selection_result_is_read_only(
    strategy: str, select: str, window: int
) -> None:
    db = psoup.connect(strategy=strategy, block_rows=8)  # 128-row storage chunks
    db.create_stream("r", {"a": "int", "x": "float", "s": "str", "t": "int"}, time="t")
    db.create_stream("n", {"a": "int", "b": "int", "t": "int"}, time="t")
    n = 1000
    a = np.arange(n) % 3
    db.insert_columns("n", {"a": a, "b": np.arange(n), "t": np.arange(n)})
    db.insert_columns(
        "r", {"a": a, "x": np.arange(n) / 2, "s": [str(i) for i in range(n)], "t": np.arange(n)}
    )
    stream = "r" if "x" in select else "n"
    text = f"SELECT {select} FROM {stream} WHERE a = 1 BEGIN NOW - {window} END NOW"
    h = db.register(text)
    for res in (db.invoke(h), db.invoke(h)):  # the first read and the kept copy's
        want = [t for t in range(max(0, n - 1 - window), n) if t % 3 == 1]
        assert len(res) == len(want)
        if stream == "n":
            assert res.column("t").tolist() == want
        for arr in res.arrays:
            with pytest.raises(ValueError, match="read-only"):
                arr[:1] = arr[:1]


def test_built_from_rows_or_arrays_compares_equal() -> None:
    rows = [(1, 0.5, "x"), (2, 1.5, None)]
    by_rows = Result(("a", "x", "s"), ("int", "float", "str"), rows, 9, (0, 9))
    by_arrays = Result(
        ("a", "x", "s"),
        ("int", "float", "str"),
        now=9,
        window=(0, 9),
        arrays=[np.array([1, 2]), np.array([0.5, 1.5]), ["x", None]],
    )
    assert by_rows == by_arrays
    assert by_rows.arrays[0].dtype == np.int64
    assert by_arrays.to_arrow().column("s").null_count == 1
    # An aggregate over nothing holds None: its column is object, the type still 'int'.
    empty_sum = Result(("s",), ("int",), [(None,)])
    assert empty_sum.arrays[0].dtype == object and empty_sum.to_arrow().column("s").null_count == 1


def test_arrays_over_grpc_equal_the_engines() -> None:
    from clients import PSoupClient
    from psoup.server import ServerConfig, start_server

    srv = start_server(ServerConfig(port=0))
    try:
        with PSoupClient(f"127.0.0.1:{srv.port}", timeout=10) as c:
            c.create_stream("r", {"a": "int", "x": "float", "s": "str", "t": "int"}, time="t")
            rows = [(i % 10, i / 3, f"v{i % 7}", i) for i in range(3000)]
            c.insert("r", rows)
            h = c.register("SELECT r.a, r.x, r.s FROM r WHERE r.a >= 5 BEGIN NOW - 2999 END NOW")
            res = c.invoke(h, page_rows=700)  # several pages, concatenated per column
            want = [r[:3] for r in rows if r[0] >= 5]
            assert res.rows == want
            assert res.arrays[0].dtype == np.int64 and res.arrays[1].dtype == np.float64
            assert res.to_arrow().num_rows == len(want)
    finally:
        srv.stop(grace=1)


@pytest.mark.parametrize("strategy", ["psoup-p", "psoup-c", "nomat"])
def test_a_result_keeps_its_values_while_the_stream_moves_on(strategy: str) -> None:
    """A result is a value: later batches (which grow, expire and compact what PSoup-C
    keeps, whose results are views of it) leave a result taken before unchanged."""
    db = psoup.connect(strategy=strategy, block_rows=64)
    db.create_stream("r", {"a": "int", "s": "str", "t": "int"}, time="t", max_window=100)
    h = db.register("SELECT r.t, r.a, r.s FROM r WHERE r.a < 5 BEGIN NOW - 80 END NOW")
    rng = np.random.default_rng(11)
    held = []
    t = 0
    for _ in range(100):
        n = int(rng.integers(1, 150))
        db.insert_columns(
            "r",
            {
                "a": rng.integers(0, 10, n),
                "s": [f"v{v}" for v in rng.integers(0, 9, n)],
                "t": t + np.arange(n),
            },
        )
        t += n
        res = db.invoke(h)
        held.append((res, [a.copy() for a in res.arrays]))
        db._check()
    assert sum(len(r) for r, _ in held) > 2000
    for res, copies in held:
        for got, want in zip(res.arrays, copies, strict=True):
            assert np.array_equal(got, want)
    db.close()
