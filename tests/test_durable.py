"""A durable engine (``psoup.connect(path)``) closed and opened again at random moments of
a random program answers every invoke as the brute-force oracle does, which has never
stopped: streams, tuples and their ids, queries, handles and results all come back.
Plus what the data directory promises on its own: one process at a time, owners and
registration times kept, a torn last record dropped."""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import Program, programs
from test_property import Runner, _Engine, _settings

import psoup
from psoup.engine import Engine
from psoup.storage import checkpoint
from psoup.storage import log as wal
from psoup.storage.durable import DataDir, DirectoryBusyError
from psoup.storage.log import Sync

_dumps = json.dumps


class ReopeningRunner(Runner):
    """Runs a program on one durable engine that is closed and opened again after the
    steps in ``reopen_after``, in lockstep with the oracle (Runner does the comparing).
    A close writes a checkpoint or, as a crash, leaves the log alone (``crash``); a
    checkpoint also starts in the background every ``checkpoint_bytes`` of log."""

    def __init__(self, program: Program, reopen_after: dict[int, bool], path: Path,
                 strategy: str, checkpoint_bytes: int):  # fmt: skip
        super().__init__(program, strategies=())
        self.path, self.strategy, self.reopen_after = path, strategy, reopen_after
        self.checkpoint_bytes = checkpoint_bytes
        self.engines = [_Engine(f"{strategy}, reopened", self._open())]
        self.steps_done = 0
        self.reopened = 0

    def _open(self) -> Engine:
        engine = Engine(strategy=self.strategy, block_rows=self.program.block_rows,
                        segment_blocks=2)  # fmt: skip
        data = DataDir(self.path, Sync("off"), checkpoint_bytes=self.checkpoint_bytes)
        data.recover(engine)
        return engine

    def check_invariants(self) -> None:  # called after every step
        super().check_invariants()
        self.steps_done += 1
        if self.steps_done in self.reopen_after:
            for e in self.engines:
                e.db.storage.close(checkpoint=not self.reopen_after[self.steps_done])
                e.db.close()
                e.db = self._open()
            self.reopened += 1
            super().check_invariants()


@st.composite
def reopening_programs(draw: st.DrawFn) -> tuple[Program, set[int], str]:
    program = draw(programs())
    steps = st.integers(1, len(program.steps))
    reopen = draw(st.dictionaries(steps, st.booleans(), min_size=1, max_size=4))
    strategy = draw(st.sampled_from(("psoup-p", "psoup-c", "nomat")))
    return program, reopen, strategy, draw(st.sampled_from((1, 200, 2000, 1 << 30)))


@_settings(60)
@given(reopening_programs())
def test_a_reopened_engine_answers_as_one_that_never_stopped(case) -> None:
    program, reopen, strategy, checkpoint_bytes = case
    with tempfile.TemporaryDirectory(prefix="psoup-durable-") as tmp:
        runner = ReopeningRunner(program, reopen, Path(tmp), strategy, checkpoint_bytes)
        runner.run()
        assert runner.reopened == len(reopen)


def test_owner_handle_and_registration_time_come_back(tmp_path: Path) -> None:
    db = psoup.connect(tmp_path)
    db.create_stream("r", {"a": "int", "t": "int"}, time="t", max_window=5)
    db.insert("r", [(i, i) for i in range(20)])
    h = db.register("SELECT * FROM r WHERE r.a > :x BEGIN NOW - 3 END NOW", {"x": 15}, owner="c1")
    before = db.describe(h)
    answer = db.invoke(h)
    stored = db.stats()["streams"]["r"]
    db.close()
    db = psoup.connect(tmp_path)
    q = db.describe(h)
    assert (q.owner, q.text, q.params, q.registered_at) == (
        "c1", before.text, {"x": 15}, before.registered_at,
    )  # fmt: skip
    again = db.invoke(h)
    assert (
        (again.rows, again.now)
        == (answer.rows, answer.now)
        == ([(16, 16), (17, 17), (18, 18), (19, 19)], 19)
    )
    kept = ("tuples_stored", "tuples_ingested", "last_ts", "bytes")
    now = db.stats()["streams"]["r"]
    assert {k: now[k] for k in kept} == {k: stored[k] for k in kept}  # retention as it was
    db.close()


def test_two_engines_never_share_a_directory(tmp_path: Path) -> None:
    db = psoup.connect(tmp_path)
    with pytest.raises(DirectoryBusyError, match=rf"{tmp_path} is in use by process \d+"):
        psoup.connect(tmp_path)
    db.close()
    psoup.connect(tmp_path).close()  # free again once closed


def test_a_torn_last_batch_is_absent_and_the_rest_is_kept(tmp_path: Path) -> None:
    db = psoup.connect(tmp_path)
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    h = db.register("SELECT COUNT(*) FROM r BEGIN 0 END NOW")
    db.insert("r", [(1, 1), (2, 2)])
    db.insert("r", [(3, 3), (4, 4), (5, 5)])
    db.storage.close(checkpoint=False)  # as a crash leaves it: the log alone
    (_, seg) = wal.segments(tmp_path / "wal")[-1]
    with open(seg, "r+b") as f:
        f.truncate(wal.end_of_records(seg) - 5)  # the last batch's write was cut short
    with pytest.warns(RuntimeWarning, match="torn last record"):
        db = psoup.connect(tmp_path)
    assert db.invoke(h).rows == [(2,)]
    db.insert("r", [(6, 6)])  # appends go on after the cut
    db.close()
    assert psoup.connect(tmp_path).invoke(h).rows == [(3,)]


def test_a_bulk_load_is_one_file_beside_the_log_and_comes_back(tmp_path: Path) -> None:
    db = psoup.connect(tmp_path)
    db.create_stream("h", {"v": "int", "name": "str", "x": "float", "t": "int"}, time="t")
    db.insert("h", [(0, "old", 0.5, 0)])
    h = db.register("SELECT h.name, SUM(h.x) FROM h WHERE h.v < 3 GROUP BY h.name BEGIN 0 END NOW")
    n = 10_000
    cols = {"v": list(range(n)), "name": ["ab"[i % 2] for i in range(n)],
            "x": [i / 4 for i in range(n)], "t": [n - i for i in range(n)]}  # fmt: skip
    db.replace_contents("h", cols)
    expected = db.invoke(h)
    wal_bytes = sum(wal.end_of_records(p) for _, p in wal.segments(tmp_path / "wal"))
    assert wal_bytes < 2000  # the rows are not in the log
    assert [p.suffix for p in (tmp_path / "loads").iterdir()] == [".arrow"]
    db.storage.close(checkpoint=False)  # a crash: recovered from the log and the file
    for _ in range(2):  # then from the checkpoint the clean close wrote
        db = psoup.connect(tmp_path)
        got = db.invoke(h)
        assert (got.rows, got.now) == (expected.rows, expected.now)
        assert got.rows == [("a", 0.5), ("b", 0.25)] and got.now == n
        assert db.stats()["streams"]["h"]["tuples_stored"] == n
        db.close()
    assert not list((tmp_path / "loads").iterdir())  # the checkpoint holds the rows now


def test_a_missing_load_file_refuses_to_open(tmp_path: Path) -> None:
    db = psoup.connect(tmp_path)
    db.create_stream("h", {"v": "int", "t": "int"}, time="t")
    db.replace_contents("h", {"v": [1], "t": [1]})
    db.storage.close(checkpoint=False)
    for p in (tmp_path / "loads").iterdir():
        p.unlink()
    with pytest.raises(wal.LogCorruptError, match=r"loads/.*\.arrow is missing"):
        psoup.connect(tmp_path)
    with pytest.raises(wal.LogCorruptError):  # refused again, not "in use"
        psoup.connect(tmp_path)


@pytest.mark.parametrize("step", [None, 64 << 10], ids=["default-steps", "64k-steps"])
def test_an_unchanged_stream_is_linked_into_the_next_checkpoint_not_written(
    tmp_path: Path, monkeypatch, step
) -> None:
    """With small steps the files are forced as they are written and an old checkpoint's
    files cut down before deletion, except the one linked into the newer checkpoint,
    which must come back whole."""
    if step is not None:
        monkeypatch.setattr(checkpoint, "SYNC_STEP_BYTES", step)
    db = psoup.connect(tmp_path)
    db.create_stream("big", {"v": "int", "t": "int"}, time="t")
    db.create_stream("small", {"v": "int", "t": "int"}, time="t")
    db.insert_columns("big", {"v": list(range(50_000)), "t": list(range(50_000))})
    ckpts = tmp_path / "checkpoints"
    inodes = []
    for k in range(3):
        lsn = db.storage.checkpoint()
        assert [p.name for p in ckpts.iterdir()] == [f"{lsn:016x}"]  # older ones are gone
        files = {
            p.name.split("-", 1)[1]: p.stat().st_ino
            for p in (ckpts / f"{lsn:016x}").glob("*.arrow")
        }
        catalog = json.loads((ckpts / f"{lsn:016x}" / "catalog.json").read_text())
        assert {x["name"]: x["rows"] for x in catalog["streams"]} == {"big": 50_000, "small": k}
        inodes.append(files)
        db.insert("small", [(k, k)])
    big = "big-00000000.arrow"  # its one run
    assert inodes[0][big] == inodes[1][big] == inodes[2][big]  # linked
    db.close()
    db = psoup.connect(tmp_path)
    assert db.stats()["streams"]["big"]["tuples_stored"] == 50_000
    assert db.stats()["streams"]["small"]["tuples_stored"] == 3
    db.close()


def _rows(parts) -> tuple[np.ndarray, np.ndarray]:
    """(first column, tids) of a stream's parts, concatenated."""
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate([c[0] for c, _ in parts]), np.concatenate([t for _, t in parts])


@pytest.mark.parametrize("run_rows", [5000, 8192])
def test_a_growing_stream_links_its_unchanged_runs_and_reads_back_whole(
    tmp_path: Path, monkeypatch, run_rows
) -> None:
    """A checkpoint writes a stream as runs of rows and links the runs an earlier one
    wrote that no row was appended to since, also when expiry has cut the run's head (read back
    from an offset); what a checkpoint reads back is exactly the stream's stored rows.
    5000 rows is not a multiple of a storage block (a block then straddles two runs)."""
    monkeypatch.setattr(checkpoint, "RUN_ROWS", run_rows)
    rng = random.Random(run_rows)
    db = psoup.connect(tmp_path)
    db.create_stream("s", {"v": "int", "t": "int"}, time="t", max_window=30_000)
    ckpts = tmp_path / "checkpoints"
    t, before, linked, skipped = 0, {}, 0, 0
    for _ in range(10):
        n = rng.randrange(1, 20_000)
        db.insert_columns("s", {"v": [v * 7 for v in range(t, t + n)], "t": list(range(t, t + n))})
        t += n
        where = ckpts / f"{db.storage.checkpoint():016x}"
        got, want = checkpoint.read(where).streams[0], db.streams["s"]
        assert got.start_seq == want.stem.start_seq
        for a, b in zip(_rows(got.parts), _rows(want.stem.parts()), strict=True):
            assert np.array_equal(a, b)
        files = {p.name: p.stat().st_ino for p in where.glob("*.arrow")}
        links = {name for name, ino in files.items() if before.get(name) == ino}
        linked += len(links)
        # What the checkpoint says it wrote and linked is what its directory holds.
        stats = db.storage.last_checkpoint
        sizes = {p.name: p.stat().st_size for p in where.iterdir()}
        assert stats.bytes_linked == sum(sizes[name] for name in links)
        assert stats.bytes_written == sum(v for name, v in sizes.items() if name not in links)
        assert set(stats.parts) == {"streams", "states", "queries", "catalog"}
        entries = json.loads((where / "catalog.json").read_text())["streams"][0]["files"]
        skipped += sum(
            1 for e in entries if e["skip"] and before.get(e["file"]) == files[e["file"]]
        )
        before = files
    assert linked >= 5 and skipped >= 1, (linked, skipped)
    want = _rows(db.streams["s"].stem.parts())
    db.close()
    db = psoup.connect(tmp_path)
    for a, b in zip(_rows(db.streams["s"].stem.parts()), want, strict=True):
        assert np.array_equal(a, b)
    db.close()


@pytest.mark.parametrize("close", [True, False], ids=["checkpoint", "log"])
def test_a_name_reserved_since_it_was_stored_still_comes_back(tmp_path: Path, close) -> None:
    db = psoup.connect(tmp_path)
    # As a data directory written before reserved words were refused would hold it.
    db.create_stream("select", {"from": "int", "t": "int"}, time="t", recovered=True)
    db.insert("select", [(1, 2)])
    if close:
        db.close()
    else:
        db.storage.close(checkpoint=False)
    back = psoup.connect(tmp_path)
    assert back.streams["select"].schema.names == ("from", "t")
    assert len(back.streams["select"].stem) == 1
    back.close()


TEXT = "SELECT v FROM s WHERE v = :v BEGIN 0 END NOW"


def _row(i: int) -> list:
    """The catalog row of query ``h{i}`` as ``_register`` makes it."""
    return [f"h{i}", TEXT, {"v": i}, None if i % 2 else f"c{i}", 1000.0 + i]


def _register(db: Engine, i: int) -> None:
    db.restore_query(*_row(i))


@pytest.mark.parametrize("seed", range(6))
def test_the_query_pages_hold_every_query_and_link_those_no_query_left_or_joined(
    tmp_path: Path, monkeypatch, seed
) -> None:
    """A checkpoint's query pages hold the engine's queries in registration order, with
    the fields they were registered with, across random registrations and
    unregistrations; a page no query joined or left since the checkpoint before is a
    link to its file there (same inode), and every other page is written anew. A query's
    row is encoded once in its life (kept on the query) and only pages written are
    joined. Pages of 3 ids here, so that one checkpoint holds many."""
    monkeypatch.setattr(checkpoint, "QUERY_PAGE_QIDS", 3)
    rng = random.Random(seed)
    db = Engine()
    db.create_stream("s", {"v": "int", "t": "int"}, time="t")
    reuse, live, n, before, linked, rewritten = checkpoint.Reuse(), [], 0, {}, 0, 0
    encoded: dict[str, str] = {}
    for lsn in range(1, 16):
        for _ in range(rng.randrange(0, 8)):
            if live and rng.random() < 0.4:
                db.unregister(f"h{live.pop(rng.randrange(len(live)))}")
            else:
                _register(db, n)
                live.append(n)
                n += 1
        done = checkpoint.write(tmp_path, lsn, db.capture(), reuse)
        back = checkpoint.read(done.path)
        assert [list(q) for q in back.queries] == [_row(i) for i in sorted(live)]
        pages: dict[str, list[int]] = {}  # file -> the queries its page holds
        for i in sorted(live):
            pages.setdefault(f"queries-{db.queries[f'h{i}'].qid // 3:08d}.json", []).append(i)
        files = {p.name: p.stat() for p in done.path.glob("queries-*.json")}
        assert set(files) == set(pages)  # one file per page that holds a query
        links = set()
        for name, stat in files.items():
            was = before.get(name)
            if was is not None and was[1] == pages[name]:
                assert stat.st_ino == was[0], f"{name} is unchanged but was written again"
                links.add(name)
            else:
                assert was is None or stat.st_ino != was[0], f"{name} changed but was linked"
                rewritten += was is not None
        linked += len(links)
        assert done.bytes_linked == sum(files[name].st_size for name in links)
        before = {name: (stat.st_ino, pages[name]) for name, stat in files.items()}
        for q in db.queries.values():
            assert encoded.setdefault(q.handle, q.catalog_json) is q.catalog_json
        checkpoint.remove_before(tmp_path, lsn)
    assert linked >= 3 and rewritten >= 1, (linked, rewritten)


def test_an_image_read_back_is_written_as_one_page(tmp_path: Path) -> None:
    """Rows that are not an engine's (an image read back) are written as one page and
    read back the same."""
    db = Engine()
    db.create_stream("s", {"v": "int", "t": "int"}, time="t")
    for i in range(5):
        _register(db, i)
    first = checkpoint.write(tmp_path / "a", 1, db.capture())
    img = checkpoint.read(first.path)
    again = checkpoint.read(checkpoint.write(tmp_path / "b", 1, img).path)
    assert [list(q) for q in again.queries] == [_row(i) for i in range(5)]
    assert [p.name for p in (tmp_path / "b").glob("*/queries-*")] == ["queries-all.json"]


def test_a_checkpoint_with_queries_in_its_catalog_is_still_read(tmp_path: Path) -> None:
    """A checkpoint of an earlier version holds its queries in catalog.json
    ("queries"); it is read back with them."""
    db = Engine()
    db.create_stream("s", {"v": "int", "t": "int"}, time="t")
    for i in range(3):
        _register(db, i)
    where = checkpoint.write(tmp_path, 1, db.capture()).path
    catalog = json.loads((where / "catalog.json").read_text())
    for entry in catalog.pop("query_pages"):
        (where / entry["file"]).unlink()
    catalog["queries"] = [_row(i) for i in range(3)]
    (where / "catalog.json").write_text(json.dumps(catalog))
    assert [list(q) for q in checkpoint.read(where).queries] == [_row(i) for i in range(3)]


def test_a_query_page_short_of_its_rows_is_named_as_damaged(tmp_path: Path) -> None:
    db = Engine()
    db.create_stream("s", {"v": "int", "t": "int"}, time="t")
    for i in range(3):
        _register(db, i)
    where = checkpoint.write(tmp_path, 1, db.capture()).path
    (page,) = where.glob("queries-*.json")
    page.write_text(json.dumps([_row(0)]))
    with pytest.raises(ValueError, match=f"{page.name} holds 1 queries, the catalog says 3"):
        checkpoint.read(where)


def test_a_checkpoint_written_before_run_files_is_still_read(tmp_path: Path) -> None:
    """A checkpoint of an earlier version names one file per stream ("file"); a server
    started on it recovers the rows."""
    db = psoup.connect(tmp_path)
    db.create_stream("s", {"v": "int", "t": "int"}, time="t")
    db.insert_columns("s", {"v": list(range(1000)), "t": list(range(1000))})
    where = tmp_path / "checkpoints" / f"{db.storage.checkpoint():016x}"
    db.storage.close(checkpoint=False)
    catalog = json.loads((where / "catalog.json").read_text())
    (stream,) = catalog["streams"]
    (entry,) = stream.pop("files")
    (where / entry["file"]).rename(where / "0000-s.arrow")
    stream["file"] = "0000-s.arrow"
    (where / "catalog.json").write_text(json.dumps(catalog))
    back = psoup.connect(tmp_path)
    assert back.invoke(back.register("SELECT v FROM s WHERE v >= 998 BEGIN 0 END NOW")).rows == [
        (998,),
        (999,),
    ]
    back.close()


def test_a_state_written_in_parts_survives_short_writes(tmp_path: Path, monkeypatch) -> None:
    """A checkpoint file written from parts (bytes and numpy buffers) holds them one
    after the other, whole, also when the system takes fewer bytes per write than it is
    given (a raw write may; simulated here, as it cannot be made to happen on demand)."""
    real_open = open

    class Short:
        def __init__(self, f):
            self.f = f

        def write(self, b) -> int:
            return self.f.write(memoryview(b)[:1000])

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(checkpoint, "open", lambda *a, **k: Short(real_open(*a, **k)),
                        raising=False)  # fmt: skip
    monkeypatch.setattr(checkpoint, "SYNC_STEP_BYTES", 4096)
    parts = [b"head", np.arange(3000, dtype=np.int64), np.ones((500, 7), dtype=np.uint8), b""]
    want = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
    assert checkpoint._write_bytes(tmp_path / "f", parts) == len(want)
    assert (tmp_path / "f").read_bytes() == want


def test_a_later_phase_starts_its_first_checkpoint_sooner(tmp_path: Path) -> None:
    """Two data directories fed the same batches, checkpoints every ~24 KB of log: the one
    with phase 0.5 captures its first checkpoint after about half the log the one with
    phase 0 needs (how the shards of one server spread their checkpoints)."""
    rows = 256
    first_at = {}
    for phase in (0.0, 0.5):
        engine = Engine()
        data = DataDir(tmp_path / str(phase), Sync("off"), checkpoint_bytes=24 * 1024,
                       checkpoint_phase=phase)  # fmt: skip
        data.recover(engine)
        engine.create_stream("r", {"a": "int", "t": "int"}, time="t")
        for k in range(40):
            engine.insert_columns("r", {"a": np.arange(rows), "t": np.arange(rows) + k * rows})
            if data.last_checkpoint is not None or data._writer is not None:
                first_at[phase] = k
                break
        data.close()
        engine.close()
    # 24 KB of log is ~6 batches of 4 KB; the change that finds the log past the mark
    # captures the image: batch 6 at phase 0 (after 6 records), 3 at phase 0.5.
    assert set(first_at) == {0.0, 0.5}
    assert first_at[0.5] < first_at[0.0]
    assert abs(2 * (first_at[0.5] + 1) - (first_at[0.0] + 1)) <= 2, first_at


def _stored(db: Engine, name: str) -> list[np.ndarray]:
    """Every stored column of stream ``name`` and its tuple ids, concatenated."""
    parts = db.streams[name].stem.parts()
    width = len(db.streams[name].schema.names)
    return [np.concatenate([c[i] for c, _ in parts]) for i in range(width)] + [
        np.concatenate([t for _, t in parts])
    ]


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("crash", [False, True], ids=["journaled", "replayed"])
def test_a_shards_bulk_load_is_linked_into_its_first_checkpoint_not_written(
    tmp_path: Path, monkeypatch, crash
) -> None:
    """A shard's part of a bulk load (rows in time order with their tuple ids) lies in
    its load file as a checkpoint's run files would hold it: the first checkpoint after
    it links that file for every run the load fills and writes only the rest, and what
    it reads back is the stream's rows. ``replayed``: the process died before any
    checkpoint, and the one after recovery links the file the log names."""
    monkeypatch.setattr(checkpoint, "RUN_ROWS", 5000)
    db = psoup.connect(tmp_path)
    schema = {"v": "int", "name": "str", "x": "float", "t": "int"}
    db.create_stream("h", schema, time="t", max_window=20_000)
    h = db.register(
        "SELECT h.name, COUNT(*) FROM h WHERE h.v < 50000 GROUP BY h.name BEGIN 0 END NOW"
    )
    n = 23_000  # 4 whole runs and part of a fifth
    cols = {"v": np.arange(n) * 7, "name": [f"n{i % 5}" for i in range(n)],
            "x": np.arange(n) / 8, "t": np.arange(n) // 2}  # fmt: skip
    db.replace_contents("h", cols, tids=np.arange(n) * 2 + 100, advance_to=n // 2)
    db.insert_columns("h", {"v": [1, 2], "name": ["new", "new"], "x": [0.0, 1.0], "t": [n, n]})
    (load,) = (tmp_path / "loads").iterdir()
    if crash:
        db.storage.close(checkpoint=False)
        db = psoup.connect(tmp_path)
    want, answer, file = _stored(db, "h"), db.invoke(h).rows, load.stat()
    where = tmp_path / "checkpoints" / f"{db.storage.checkpoint():016x}"
    stats = db.storage.last_checkpoint
    runs = {p.name: p.stat() for p in where.glob("*.arrow")}
    linked = [name for name, st in runs.items() if st.st_ino == file.st_ino]
    assert sorted(linked) == [f"0000-h-{g:08d}.arrow" for g in range(4)]
    assert stats.bytes_linked == file.st_size
    assert stats.bytes_written < file.st_size / 4  # the last run and the catalog
    assert not load.exists()  # the checkpoint holds the rows now
    got = checkpoint.read(where).streams[0]
    assert _same(
        [np.concatenate([c[i] for c, _ in got.parts]) for i in range(4)]
        + [np.concatenate([t for _, t in got.parts])],
        want,
    )
    # The next checkpoint links the same file again; a reopened engine has the rows.
    db.insert("h", [(3, "newer", 2.0, n + 1)])
    again = tmp_path / "checkpoints" / f"{db.storage.checkpoint():016x}"
    assert all((again / name).stat().st_ino == runs[name].st_ino for name in linked)
    want, answer = _stored(db, "h"), db.invoke(h).rows
    db.close()
    db = psoup.connect(tmp_path)
    assert _same(_stored(db, "h"), want) and db.invoke(h).rows == answer
    db.close()


def test_a_load_file_is_cut_down_in_steps_once_a_checkpoint_holds_it(
    tmp_path: Path, monkeypatch
) -> None:
    """A hydration's load file (a gigabyte or more) is deleted as an old checkpoint's
    files are: cut down a step at a time, each forced, so no single unlink frees it all
    in one journal commit that the log's fsyncs would queue behind."""
    step = 64 << 10
    monkeypatch.setattr(checkpoint, "SYNC_STEP_BYTES", step)
    db = psoup.connect(tmp_path)
    db.create_stream("h", {"v": "int", "t": "int"}, time="t")
    n = 100_000
    db.replace_contents("h", {"v": np.arange(n) * 3, "t": np.arange(n)})
    (load,) = (tmp_path / "loads").iterdir()
    size = load.stat().st_size
    assert size > 4 * step
    cuts: list[int] = []
    real = os.ftruncate
    monkeypatch.setattr(os, "ftruncate", lambda fd, at: (cuts.append(at), real(fd, at)))
    db.storage.checkpoint()
    assert not load.exists()
    assert cuts == [max(size - k * step, 0) for k in range(1, -(-size // step) + 1)]
    db.close()
    db = psoup.connect(tmp_path)
    assert db.stats()["streams"]["h"]["tuples_stored"] == n
    db.close()


def test_a_durable_engine_encodes_a_querys_catalog_row_when_it_is_registered(
    tmp_path: Path, monkeypatch
) -> None:
    """The checkpoint's writer then only looks rows up: it encodes none of the queries
    registered since the last checkpoint (a burst of Python beside the engine thread). An
    engine in memory, which never checkpoints, encodes nothing."""
    text = "SELECT v FROM s WHERE v = :v BEGIN 0 END NOW"
    mem = Engine()
    mem.create_stream("s", {"v": "int", "t": "int"}, time="t")
    assert mem.queries[mem.register(text, params={"v": 1})].catalog_json is None
    db = psoup.connect(tmp_path)
    db.create_stream("s", {"v": "int", "t": "int"}, time="t")
    handles = [db.register(text, params={"v": i}) for i in range(5)]
    rows = {h: db.queries[h].catalog_json for h in handles}
    assert all(rows.values())
    encoded = []
    monkeypatch.setattr(json, "dumps", lambda *a, **k: encoded.append(a) or _dumps(*a, **k))
    where = checkpoint.write(tmp_path / "ck", 1, db.capture()).path
    got = [list(q) for q in checkpoint.read(where).queries]
    assert [json.loads(rows[h]) for h in handles] == got
    assert [q[0] for q in got] == handles
    assert not [a for a in encoded if isinstance(a[0], list)]  # no row encoded again
    monkeypatch.undo()
    db.close()
