"""The history pipeline (psoup/history/) with a real local Spark session and a real server.

One Spark session and one in-process server serve the whole module (the JVM takes
seconds to start); each test uses its own streams. Expected contents and daily
expenditures are computed here in plain Python from the fixture lines. Every test is
marked ``spark``: deselect them with ``-m "not spark"``.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clients import PSoupClient
from psoup import cli
from psoup.history import HistoryError, executors, spark
from psoup.history.export import export
from psoup.history.hydrate import hydrate
from psoup.linear_road.streams import DAILY_EXPENDITURE
from psoup.server import ServerConfig, start_server

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
ATTRS = ("vid", "day", "xway", "tolls")

# (line text, reject reason or None). Line 1 is a header, which is skipped.
LINES = [
    ("vid,day,xway,tolls", "header"),
    ("1,1,0,5", None),
    ("1,1,0,7", None),  # duplicate of (1, 1, 0): summed
    ("1,2,0,3", None),
    ("1,2,0", "expected 4 fields (vid,day,xway,tolls), found 3"),
    ("2,1,0,10", None),
    ("1,2,0,3,4", "expected 4 fields (vid,day,xway,tolls), found 5"),
    ("x,1,0,3", "vid is not an integer: 'x'"),
    ("2,1,1,4", None),  # same vid and day, another xway: its own row
    ("1,one,0,3", "day is not an integer: 'one'"),
    ("", "blank line"),
    ("1,1,0,2.5", "tolls is not an integer: '2.5'"),
    ("3,69,0,9", None),
    ("1,0,0,3", "day 0 is not in 1..69"),
    ("1,70,0,3", "day 70 is not in 1..69"),
    (" 3 , 1 ,0, 0 ", None),  # spaces around fields are allowed
    ("1,3,0,-4", "tolls -4 is negative"),
    ("-1,3,0,4", "vid -1 is negative"),
    ("1,3,-2,4", "xway -2 is negative"),
    ("1,2,0,6", None),  # duplicate of (1, 2, 0), far from the first
    ("4,5,2,", "tolls is not an integer: ''"),
]
# A different history of the same vehicles, for re-hydration.
OTHER = ["1,1,0,50", "1,2,0,1", "2,1,0,20", "5,9,0,8"]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _expected(lines: list[str]) -> dict[tuple[int, int, int], int]:
    """(vid, day, xway) -> summed tolls of the good lines, in plain Python."""
    out: dict[tuple[int, int, int], int] = {}
    for text in lines:
        try:
            vid, day, xway, tolls = (int(f) for f in text.split(","))
        except ValueError:
            continue
        if vid >= 0 and 1 <= day <= 69 and xway >= 0 and tolls >= 0:
            out[vid, day, xway] = out.get((vid, day, xway), 0) + tolls
    return out


GOOD = _expected([text for text, _ in LINES])
REJECTED = [
    (i + 1, text, why) for i, (text, why) in enumerate(LINES) if why not in (None, "header")
]


@pytest.fixture(scope="module")
def session() -> Iterator:
    s = spark.start_session("local[2,4]")  # a failed task is tried up to 4 times
    yield s
    spark.stop_session(s)


@pytest.fixture(scope="module")
def server() -> Iterator:
    srv = start_server(ServerConfig(port=0))
    yield srv
    srv.stop(grace=1)


@pytest.fixture(scope="module")
def target(server) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.fixture(scope="module")
def client(target: str) -> Iterator[PSoupClient]:
    with PSoupClient(target) as c:
        yield c


@pytest.fixture
def fixture_csv(tmp_path: Path) -> Path:
    return _write(tmp_path / "tolls.csv", [text for text, _ in LINES])


@pytest.fixture
def small_splits(session) -> Iterator[None]:
    """Input splits of 64 bytes: several partitions even for the tiny fixture."""
    key = "spark.sql.files.maxPartitionBytes"
    before = session.conf.get(key)
    session.conf.set(key, "64")
    yield
    session.conf.set(key, before)


def _contents(client: PSoupClient, stream: str) -> list[tuple[int, ...]]:
    """Every stored row, read back in 3 parts, sorted."""
    rows = []
    for part in range(3):
        for page in client.read_stream(stream, part=part, parts=3):
            rows += zip(*(page[a].tolist() for a in ATTRS), strict=True)
    return sorted(rows)


def _as_rows(expected: dict[tuple[int, int, int], int]) -> list[tuple[int, ...]]:
    return sorted((v, d, x, t) for (v, d, x), t in expected.items())


def _daily(client: PSoupClient, vid: int, xway: int, day: int) -> int | None:
    h = client.register(DAILY_EXPENDITURE, {"v": vid, "x": xway, "d": day})
    return client.invoke(h).rows[0][0]


def _run(session, path: Path, target: str, stream: str, **kw):
    return hydrate(path, server=target, stream=stream, session=session, progress=False, **kw)


# ------------------------------------------------------------------------------ hydrate


def test_hydrate_rejects_merges_and_answers_queries_registered_after(
    session, target, client, fixture_csv, small_splits
) -> None:
    summary = _run(session, fixture_csv, target, "toll_history")

    good = [text for text, why in LINES if why is None]
    assert summary.rows_read == len(LINES) - 1  # the header is not a row
    assert summary.rejected == len(REJECTED)
    assert summary.duplicates_merged == len(good) - len(GOOD) == 2
    assert summary.loaded == len(GOOD)
    assert summary.rejects_path == fixture_csv.with_name("tolls.csv.rejects.csv")
    with open(summary.rejects_path, newline="") as f:
        got = list(csv.reader(f))
    assert got[0] == ["line", "reason", "text"]
    assert got[1:] == [[str(line), why, text] for line, text, why in REJECTED]

    assert _contents(client, "toll_history") == _as_rows(GOOD)
    info = client.describe_stream("toll_history")
    assert info.time == "day" and info.schema == dict.fromkeys(ATTRS, "int")
    # Queries registered now are applied to the loaded rows (the PSoup symmetry).
    for vid, xway, day in [(1, 0, 1), (1, 0, 2), (2, 0, 1), (2, 1, 1), (3, 0, 69), (3, 0, 1)]:
        assert _daily(client, vid, xway, day) == GOOD[vid, day, xway]
    assert _daily(client, 1, 0, 3) is None  # rejected rows were not loaded
    assert _daily(client, 4, 2, 5) is None


def test_hydrating_twice_leaves_the_same_contents(session, target, client, fixture_csv) -> None:
    first = _run(session, fixture_csv, target, "twice")
    once = _contents(client, "twice")
    second = _run(session, fixture_csv, target, "twice")
    assert _contents(client, "twice") == once == _as_rows(GOOD)
    assert first.loaded == second.loaded == client.describe_stream("twice").tuples_stored


def test_a_query_registered_before_a_rehydration_sees_the_new_file(
    session, target, client, fixture_csv, tmp_path
) -> None:
    _run(session, fixture_csv, target, "again")
    h = client.register(
        DAILY_EXPENDITURE.replace("toll_history", "again"), {"v": 1, "x": 0, "d": 1}
    )
    count = client.register("SELECT COUNT(*) FROM again BEGIN 0 END NOW")
    assert client.invoke(h).rows == [(GOOD[1, 1, 0],)]
    _run(session, _write(tmp_path / "other.csv", OTHER), target, "again")
    assert client.invoke(h).rows == [(50,)]
    assert client.invoke(count).rows == [(len(OTHER),)]
    assert _contents(client, "again") == _as_rows(_expected(OTHER))


def test_a_failure_part_way_leaves_the_old_contents(
    session, server, target, client, fixture_csv, tmp_path
) -> None:
    _run(session, fixture_csv, target, "fragile")
    h = client.register(
        DAILY_EXPENDITURE.replace("toll_history", "fragile"), {"v": 2, "x": 0, "d": 1}
    )
    other = _write(tmp_path / "other.csv", OTHER)
    with pytest.raises(Exception, match="injected failure after staging"):
        _run(session, other, target, "fragile", _fault=executors.Fault(after_rows=1))
    assert _contents(client, "fragile") == _as_rows(GOOD)
    assert client.invoke(h).rows == [(GOOD[2, 1, 0],)]
    assert len(server.servicer.loads) == 0  # the load was aborted, not left behind
    _run(session, other, target, "fragile")  # and the next hydration works
    assert client.invoke(h).rows == [(20,)]


@pytest.mark.parametrize("mid_call", [True, False], ids=["during-its-call", "after-its-call"])
def test_a_retried_task_is_counted_once(
    session, target, client, fixture_csv, small_splits, mid_call
) -> None:
    """One push task fails in its first attempt, Spark retries it, and the load still has
    every row once: a task that died during its LoadBatches call staged nothing, one that
    died after it is replaced by its retry."""
    fault = executors.Fault(after_rows=1, partition=0, first_attempt_only=True, mid_call=mid_call)
    summary = _run(session, fixture_csv, target, f"retried_{mid_call}", _fault=fault)
    assert summary.retried_tasks == 1
    assert "tasks retried" in summary.text()
    assert summary.loaded == len(GOOD)
    assert _contents(client, f"retried_{mid_call}") == _as_rows(GOOD)


def test_inputs_are_read_from_uris(session, target, client, fixture_csv, tmp_path) -> None:
    """A file:// URI is read like its path; a URI of another scheme goes to Hadoop's file
    systems, and one Spark cannot read is refused with its reason before any job runs."""
    summary = _run(session, fixture_csv.as_uri(), target, "from_uri")
    assert summary.loaded == len(GOOD)
    assert (tmp_path / "tolls.csv.rejects.csv").exists()  # next to the local file
    assert _contents(client, "from_uri") == _as_rows(GOOD)
    with pytest.raises(HistoryError, match="no such file or directory: file:///nonexistent"):
        _run(session, "file:///nonexistent/tolls.csv", target, "from_uri")
    with pytest.raises(HistoryError, match=r"cannot read nosuch://host/tolls\.csv: .*nosuch"):
        _run(session, "nosuch://host/tolls.csv", target, "from_uri")
    assert _contents(client, "from_uri") == _as_rows(GOOD)


def test_a_file_without_a_good_row_changes_nothing(
    session, target, client, fixture_csv, tmp_path
) -> None:
    _run(session, fixture_csv, target, "kept")
    bad = _write(tmp_path / "input.dat", ["0,1,100,30,0,1,0,10,52800,-1,-1,-1,-1,-1,-1"])
    with pytest.raises(HistoryError, match="has no valid row"):
        _run(session, bad, target, "kept")
    assert _contents(client, "kept") == _as_rows(GOOD)
    rejects = (tmp_path / "input.dat.rejects.csv").read_text()
    assert "expected 4 fields (vid,day,xway,tolls), found 15" in rejects


# ------------------------------------------------------------------------------- export


def test_export_then_hydrate_from_the_export_gives_the_same_contents(
    session, target, client, fixture_csv, tmp_path
) -> None:
    _run(session, fixture_csv, target, "source")
    out = tmp_path / "archive"
    summary = export("source", out, server=target, session=session, parts=3, progress=False)
    assert summary.rows == len(GOOD) and summary.parts == 3
    assert pq.read_table(out).column_names == list(ATTRS)

    again = _run(session, out, target, "copy")
    assert (again.rows_read, again.rejected, again.loaded) == (len(GOOD), 0, len(GOOD))
    assert again.rejects_path is None and not (tmp_path / "archive.rejects.csv").exists()
    assert _contents(client, "copy") == _contents(client, "source") == _as_rows(GOOD)


def test_a_parquet_input_is_validated_too(session, target, client, tmp_path) -> None:
    table = pa.table(
        {
            "vid": pa.array([1, 2, None, 4], pa.int32()),
            "day": pa.array([1, 0, 3, 4], pa.int64()),
            "xway": pa.array([0, 0, 0, 0], pa.int16()),
            "tolls": pa.array([5, 6, 7, -1], pa.int64()),
        }
    )
    path = tmp_path / "h.parquet"
    pq.write_table(table, path)
    summary = _run(session, path, target, "from_parquet")
    assert (summary.rows_read, summary.rejected, summary.loaded) == (4, 3, 1)
    with open(summary.rejects_path, newline="") as f:
        got = sorted(tuple(r) for r in list(csv.reader(f))[1:])
    assert got == [
        ("", "day 0 is not in 1..69", "2,0,0,6"),
        ("", "tolls -1 is negative", "4,4,0,-1"),
        ("", "vid is missing", ",3,0,7"),
    ]
    assert _contents(client, "from_parquet") == [(1, 1, 0, 5)]

    pq.write_table(pa.table({"vid": [1], "day": ["x"]}), tmp_path / "bad.parquet")
    with pytest.raises(HistoryError, match="no column xway, tolls"):
        _run(session, tmp_path / "bad.parquet", target, "from_parquet")


# ---------------------------------------------------------------------------------- CLI


def test_cli_failures_exit_non_zero_with_a_message(client, target, fixture_csv, capsys) -> None:
    argv = ["history", "hydrate", "--tolls", str(fixture_csv), "--no-progress"]
    assert cli.main([*argv, "--server", "127.0.0.1:1", "--timeout", "5"]) == 3
    assert "error: UNAVAILABLE" in capsys.readouterr().err

    missing = ["history", "hydrate", "--tolls", str(fixture_csv) + ".nope", "--server", target]
    assert cli.main(missing) == 1
    assert "no such file or directory" in capsys.readouterr().err

    client.create_stream("wrong", {"vid": "int", "t": "int"}, time="t")
    assert cli.main([*argv, "--server", target, "--stream", "wrong"]) == 1
    err = capsys.readouterr().err
    assert "stream 'wrong' exists on the server as vid:int,t:int (time t)" in err

    assert (
        cli.main(["history", "export", "--stream", "nope", "--out", "x", "--server", target]) == 1
    )
    assert "error: NOT_FOUND: unknown stream 'nope'" in capsys.readouterr().err


def test_cli_hydrate_and_export_in_subprocesses(target, client, fixture_csv, tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def psoup(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "psoup", "history", *args, "--server", target]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)

    done = psoup("hydrate", "--tolls", str(fixture_csv), "--stream", "cli_history")
    assert done.returncode == 0, done.stderr
    for label, n in [
        ("rows read", len(LINES) - 1),
        ("rejected", len(REJECTED)),
        ("duplicates merged", 2),
        ("loaded", len(GOOD)),
    ]:
        assert re.search(rf"^  {label} +{n}\b", done.stdout, re.M), done.stdout
    assert re.search(r"^  [0-9.]+ s, [0-9,]+ rows/s", done.stdout, re.M), done.stdout
    # Progress bars, but none of Spark's own console output.
    assert "cli_history: load" in done.stderr
    assert not any(w in done.stderr for w in ("WARN", "log4j", "Exception", "Stage ")), done.stderr
    assert _contents(client, "cli_history") == _as_rows(GOOD)

    out = tmp_path / "export"
    done = psoup("export", "--stream", "cli_history", "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"exported {len(GOOD)} rows of cli_history to {out}")
    assert done.stderr == ""
    assert sorted(pq.read_table(out).to_pylist(), key=lambda r: tuple(r.values())) == [
        dict(zip(ATTRS, r, strict=True)) for r in _as_rows(GOOD)
    ]
