"""``psoup ingest`` of CSV, Parquet and Arrow IPC files (``psoup.datafiles``): the same rows
whatever the format, and a bad file named by file, line (CSV) or row (Parquet, Arrow) and
column, with nothing of the batch holding the bad row stored.

The files are written with pyarrow here; the commands run in-process through
``psoup.cli.main`` against an in-process server.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from clients import PSoupClient
from psoup import cli
from psoup.datafiles import DataFileError, count_rows, detect, read_batches
from psoup.datafiles.ahead import read_ahead
from psoup.datafiles.columns import rebatch
from psoup.server import ServerConfig, start_server

SCHEMA = {"vid": "int", "spd": "float", "name": "str", "t": "int"}
N = 1000


def _table(n: int = N) -> pa.Table:
    """Columns in another order than the stream's, of other widths than its types."""
    return pa.table({
        "t": pa.array(np.arange(n), pa.int32()),
        "name": pa.array([f"car {i}, \"quoted\"" if i % 7 else "" for i in range(n)]),
        "spd": pa.array(np.arange(n) * 0.5, pa.float32()),
        "vid": pa.array(np.arange(n) % 13, pa.uint8()),
    })  # fmt: skip


def _write(path: Path, table: pa.Table) -> Path:
    if path.suffix == ".csv":
        pacsv.write_csv(table, path)
    elif path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=300)
    elif path.suffix == ".feather":
        feather.write_feather(table, path)  # an IPC file, lz4-compressed
    elif path.name.endswith(".stream.arrow"):
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table, max_chunksize=256)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table, max_chunksize=256)
    return path


@pytest.fixture(scope="module")
def running():
    srv = start_server(ServerConfig(port=0, flight_port=0))
    yield srv
    srv.stop(grace=1)


@pytest.fixture(scope="module")
def server(running) -> str:
    return f"127.0.0.1:{running.port}"


@pytest.fixture(scope="module")
def flight(running) -> str:
    """Where the server takes ingest over Arrow Flight (``psoup ingest --flight``)."""
    return f"127.0.0.1:{running.flight_port}"


_names = iter(range(10**6))


def _stream(server: str, schema: dict[str, str] = SCHEMA) -> str:
    name = f"f{next(_names)}"
    with PSoupClient(server) as c:
        c.create_stream(name, schema, time="t")
    return name


def _ingest(capsys, server: str, stream: str, path: Path, *extra: str) -> tuple[int, str, str]:
    code = cli.main(["ingest", stream, str(path), "--no-progress", "--server", server, *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _stored(server: str, stream: str) -> dict[str, list]:
    out: dict[str, list] = {}
    with PSoupClient(server) as c:
        for page in c.read_stream(stream):
            for name, values in page.items():
                out.setdefault(name, []).extend(np.asarray(values).tolist())
    return out


def _count(server: str, stream: str) -> int:
    with PSoupClient(server) as c:
        return c.describe_stream(stream).tuples_ingested


# ---------------------------------------------------------------- the same rows


@pytest.mark.parametrize("over_flight", [False, True])
@pytest.mark.parametrize("file", ["r.csv", "r.parquet", "r.arrow", "r.feather", "r.stream.arrow"])
def test_every_format_ingests_the_same_rows(
    capsys, server, flight, tmp_path, file, over_flight
) -> None:
    table = _table()
    path = _write(tmp_path / file, table)
    stream = _stream(server)
    extra = ("--flight", flight) if over_flight else ()
    code, out, err = _ingest(capsys, server, stream, path, "--batch-rows", "128", *extra)
    assert (code, err) == (0, "")
    assert out.startswith(f"ingested {N:,} rows in 8 batches in ")
    stored = _stored(server, stream)
    assert stored["t"] == list(range(N))
    assert stored["vid"] == [i % 13 for i in range(N)]
    assert stored["spd"] == [i * 0.5 for i in range(N)]
    assert stored["name"] == table.column("name").to_pylist()
    assert count_rows(path) == (None if "stream" in file else N)


def test_the_format_is_told_by_the_first_bytes(tmp_path) -> None:
    table = _table(3)
    assert detect(_write(tmp_path / "a.parquet", table)) == "parquet"
    assert detect(_write(tmp_path / "a.arrow", table)) == "arrow"
    assert detect(_write(tmp_path / "a.stream.arrow", table)) == "arrow-stream"
    assert detect(_write(tmp_path / "a.csv", table)) == "csv"
    # a binary file under any name is read as what it is; a binary name with text is refused
    (tmp_path / "a.parquet").rename(tmp_path / "data.bin")
    assert detect(tmp_path / "data.bin") == "parquet"
    (tmp_path / "b.feather").write_text("vid,t\n1,2\n")
    with pytest.raises(DataFileError, match=r"b\.feather: not an Arrow IPC file or stream"):
        detect(tmp_path / "b.feather")


def test_the_progress_bar_counts_the_rows(capsys, server, tmp_path) -> None:
    path = _write(tmp_path / "r.parquet", _table())
    stream = _stream(server)
    assert cli.main(["ingest", stream, str(path), "--server", server]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"ingested {N:,} rows in 1 batch in ")
    assert f"{N}/{N}" in err  # tqdm's bar, on stderr


# ------------------------------------------------------------------- bad files


def test_a_bad_csv_value_names_file_line_and_column(capsys, server, tmp_path) -> None:
    path = tmp_path / "bad.csv"
    # a quoted newline and a blank line before the bad value: lines, not rows, are counted
    path.write_text('vid,spd,name,t\n1,1.5,"two\nlines",1\n\n2,2.5,b,2\n3,fast,c,3\n4,4.5,d,4\n')
    stream = _stream(server)
    code, out, err = _ingest(capsys, server, stream, path, "--batch-rows", "1")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "2 rows in 2 batches were ingested before the error",
        f"error: {path}:6: column 'spd': expected float, got 'fast'",
    ]
    assert _stored(server, stream)["t"] == [1, 2]


def test_a_csv_float_that_is_not_finite_names_its_line(tmp_path) -> None:
    path = tmp_path / "nan.csv"
    path.write_text("vid,spd,name,t\n1,1.5,a,1\n2,nan,b,2\n")
    with pytest.raises(DataFileError, match=rf"^{re.escape(str(path))}:3: column 'spd': float "
                       r"nan is not finite$"):  # fmt: skip
        list(read_batches(path, SCHEMA, 10))


@pytest.mark.parametrize(
    ("name", "column", "message"),
    [
        ("vid", pa.array([1, 2, None, 4], pa.int64()),
         "row 2, column 'vid': expected int, got null"),
        ("vid", pa.array([1, 2, 3, 2**63], pa.uint64()),
         "row 3, column 'vid': int 9223372036854775808 is outside the 64-bit range"),
        ("spd", pa.array([1.0, float("inf"), 3.0, 4.0]),
         "row 1, column 'spd': float inf is not finite"),
        ("name", pa.array(["a", "b", "c", None]), "row 3, column 'name': expected str, got null"),
        ("vid", pa.array([1.0, 2.0, 3.0, 4.0]),
         "column 'vid' holds double values, the stream's attribute is int"),
        ("vid", pa.array(["1", "2", "3", "4"]),
         "column 'vid' holds string values, the stream's attribute is int"),
    ],
)  # fmt: skip
def test_a_bad_parquet_value_names_row_and_column(tmp_path, name, column, message) -> None:
    columns = {"vid": [1, 2, 3, 4], "spd": [1.0, 2.0, 3.0, 4.0], "name": list("abcd"),
               "t": [1, 2, 3, 4]}  # fmt: skip
    table = pa.table({**columns, name: column})
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    with pytest.raises(DataFileError, match=rf"^{re.escape(str(path))}: {re.escape(message)}$"):
        list(read_batches(path, SCHEMA, 10))


def test_a_float_that_is_not_finite_in_arrow_names_its_row(capsys, server, tmp_path) -> None:
    table = _table(600).set_column(2, "spd", pa.array([*range(599), float("nan")], pa.float64()))
    path = _write(tmp_path / "nan.arrow", table)
    stream = _stream(server)
    code, _, err = _ingest(capsys, server, stream, path, "--batch-rows", "100")
    assert code == 1
    assert err.splitlines() == [
        "500 rows in 5 batches were ingested before the error",
        f"error: {path}: row 599, column 'spd': float nan is not finite",
    ]
    assert _count(server, stream) == 500  # the batch holding row 599 stored nothing


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".arrow"])
def test_a_missing_or_unknown_column_is_named(tmp_path, suffix) -> None:
    table = _table(3)
    where = ":1" if suffix == ".csv" else ""
    path = _write(tmp_path / f"missing{suffix}", table.drop_columns(["spd"]))
    with pytest.raises(DataFileError, match=rf"missing{suffix}{where}: no column for attribute"
                       r"\(s\) spd$"):  # fmt: skip
        list(read_batches(path, SCHEMA, 10))
    path = _write(tmp_path / f"extra{suffix}", table.append_column("lane", pa.array([1, 2, 3])))
    with pytest.raises(DataFileError, match=rf"extra{suffix}{where}: column 5 'lane' is not an "
                       r"attribute of the stream \(attributes: vid, spd, name, t\)$"):  # fmt: skip
        list(read_batches(path, SCHEMA, 10))


def test_nothing_of_the_bad_batch_is_stored(capsys, server, tmp_path) -> None:
    """A bad value two blocks into a big CSV: every full batch before it goes in, the
    batch holding it does not; what the command says went in is what the server has."""
    rows = 200_000  # ~2 MB: pyarrow refuses its second or third block, not the first
    bad = 150_001  # data row of the bad value (0-based)
    path = tmp_path / "big.csv"
    with path.open("w") as f:
        f.write("t,vid,spd,name\n")
        f.writelines(f"{i},{i % 5},{i}.25,n{i}\n" for i in range(bad))
        f.write(f"{bad},1,1.0,oops,extra\n")
        f.writelines(f"{i},{i % 5},{i}.25,n{i}\n" for i in range(bad + 1, rows))
    stream = _stream(server)
    code, out, err = _ingest(capsys, server, stream, path, "--batch-rows", "10000")
    assert (code, out) == (1, "")
    sent = bad // 10_000 * 10_000
    assert err.splitlines() == [
        f"{sent:,} rows in {sent // 10_000} batches were ingested before the error",
        f"error: {path}:{bad + 2}: 5 fields, the header has 4",
    ]
    stored = _stored(server, stream)
    assert stored["t"] == list(range(sent))
    assert stored["name"][-1] == f"n{sent - 1}"


# ----------------------------------------------------------------- the machinery


def test_rebatch_cuts_any_chunks_into_exact_batches() -> None:
    sizes = [3, 0, 7, 1, 1, 12, 5]
    ends = np.cumsum([0, *sizes])
    chunks = [{"a": np.arange(a, b)} for a, b in itertools.pairwise(ends)]
    batches = list(rebatch(iter(chunks), 4))
    assert [len(b["a"]) for b in batches] == [4] * 7 + [1]
    assert np.concatenate([b["a"] for b in batches]).tolist() == list(range(sum(sizes)))


def test_read_ahead_hands_over_items_then_the_error() -> None:
    def items():
        yield from range(5)
        raise DataFileError("bad")

    got = []
    with pytest.raises(DataFileError, match="bad"):
        for item in read_ahead(items(), 2):
            got.append(item)
    assert got == [0, 1, 2, 3, 4]
    it = read_ahead(iter(range(10**6)), 2)
    assert next(it) == 0
    it.close()  # the thread stops at its next item


def test_a_bad_row_over_flight_stops_as_over_ingest(capsys, server, flight, tmp_path) -> None:
    table = _table(300)
    spd = table.column("spd").to_pylist()
    spd[200] = float("nan")  # the client refuses it before sending its batch
    path = _write(tmp_path / "bad.arrow", table.set_column(2, "spd", pa.array(spd, pa.float32())))
    stream = _stream(server)
    code, out, err = _ingest(
        capsys, server, stream, path, "--batch-rows", "128", "--flight", flight
    )
    assert code == 1 and out == ""
    assert "128 rows in 1 batch were ingested before the error" in err  # row 200: batch 1
    assert re.search(r"error: .*row 200.*'spd'", err), err
    assert _count(server, stream) == 128


def test_a_batch_the_server_refuses_over_flight_is_one_line(
    capsys, server, flight, tmp_path
) -> None:
    path = _write(tmp_path / "r.csv", _table(10))
    stream = _stream(server)
    with PSoupClient(server) as c:  # later than every row of the file
        c.insert(stream, [(1, 1.0, "late", 50)])
    code, out, err = _ingest(capsys, server, stream, path, "--flight", flight)
    assert code == 1 and out == ""
    assert err.startswith(f"error: INVALID_ARGUMENT: batch 0 (stream '{stream}'): "), err
    assert "older than the stream's latest time 50" in err
    assert err.count("\n") == 1, err
    assert _count(server, stream) == 1


@pytest.mark.parametrize(
    ("target", "code", "says"),
    [("nohostport", 2, "--flight: target 'nohostport': expected HOST:PORT"),
     ("127.0.0.1:1", 3, "error: UNAVAILABLE: ")],
)  # fmt: skip
def test_a_bad_or_closed_flight_target_is_one_line(
    capsys, server, tmp_path, target: str, code: int, says: str
) -> None:
    path = _write(tmp_path / "r.csv", _table(10))
    got, out, err = _ingest(capsys, server, _stream(server), path, "--flight", target)
    assert (got, out) == (code, "")
    assert says in err and err.count("\n") == 1, err
