"""Checkpoints: an engine image (``Engine.capture``) as files, and back.

::

    DIR/checkpoints/<LSN, 16 hex digits>/     the engine as of that log record
        catalog.json      streams (declaration, counters, row count), the query
                          pages' files in order, the prepared templates' texts,
                          the next tuple id, the application states' files
        queries-<page>.json
                          the queries with ids in page ``page`` (of
                          ``QUERY_PAGE_QIDS``), in registration order: a JSON array of
                          (handle, text, params, owner, time); a page no query joined
                          or left since is a hard link to an earlier file
        <k>-<stream>-<run>.arrow
                          the stream's stored rows with seqs in run ``run`` (of
                          ``RUN_ROWS``): an Arrow IPC file, one column per attribute and
                          ``_tid``, one record batch per storage block; a run no row
                          was appended to since is a hard link to an earlier file, and
                          one of a shard's bulk load a link to its load file (which
                          has the same columns in the same order, in larger batches)
        <name>.state      an application's state (its own bytes)

A checkpoint is written into ``<LSN>.tmp``, every file forced to disk, then renamed:
a directory without ``.tmp`` is complete. Recovery loads the newest one and replays the
log records after its LSN; older checkpoints, log segments and load files are deleted
once a newer checkpoint is complete. Results are not written: registering the queries
again over the data rebuilds them.

A checkpoint is written beside a live log, on a thread of its own, and the log's
``fdatasync`` must not wait behind it: the files are forced to disk every
``SYNC_STEP_BYTES`` as they are written (RocksDB's ``bytes_per_sync``, PostgreSQL's
``checkpoint_flush_after``), so the kernel never holds a checkpoint's worth of dirty pages
for one writeback, and old files are cut down in steps of as many bytes before they are
deleted (RocksDB's ``bytes_max_delete_chunk``), so no single unlink frees gigabytes in one
journal commit. On this machine's disk a 1.5 GB file written whole stalled a 20 kB log
append's ``fdatasync`` for up to 252 ms; written in these steps, 6 ms (deleted: 59 against
13 ms). What a checkpoint writes is what changed since the one before: the stream runs
appended to and the query pages joined or left, each a few megabytes; the rest is
linked. (Written whole, Linear Road's 150,000 queries were a 100 MB catalog at every
checkpoint, and on a slow disk the log's fsyncs waited behind it for over a second.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from psoup.engine import EngineImage, QueryRows, StreamImage
from psoup.storage.arrow import to_arrow, to_numpy
from psoup.storage.log import fsync_dir
from psoup.values import Schema

TID = "_tid"


#: Bytes of a checkpoint file written between two forced writes, and cut off an old file
#: per step when it is deleted.
SYNC_STEP_BYTES = 4 << 20


class _Stepped:
    """Forces a file being written to disk each time ``SYNC_STEP_BYTES`` more of it
    have been written (``step(position)``), through a descriptor of its own (the writer
    may be Arrow's). O(1) per call, one ``fdatasync`` per step."""

    def __init__(self, path: Path):
        self._fd = os.open(path, os.O_RDONLY)
        self._synced = 0

    def step(self, position: int) -> None:
        if position - self._synced >= SYNC_STEP_BYTES:
            os.fdatasync(self._fd)
            self._synced = position

    def close(self) -> None:
        """Force the rest and close."""
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)


def _write_bytes(path: Path, parts: Iterable) -> int:
    """Write the bytes-like ``parts``, one after the other, to a new file at ``path`` in
    forced steps; forced to disk on return. Returns the bytes written. O(bytes); each
    write is a system call that lets other threads run, and no copy is made."""
    size = synced = 0
    with open(path, "wb", buffering=0) as f:
        for part in parts:
            view = memoryview(part).cast("B")
            at = 0
            while at < len(view):  # a raw write may take fewer bytes than it is given
                wrote = f.write(view[at : at + SYNC_STEP_BYTES])
                at += wrote
                size += wrote
                if size - synced >= SYNC_STEP_BYTES:
                    os.fdatasync(f.fileno())
                    synced = size
        os.fsync(f.fileno())
    return size


def delete(path: Path) -> None:
    """Delete a file or a directory tree, each file over ``SYNC_STEP_BYTES`` first cut
    down in steps of that many bytes (each step forced), so that its blocks are freed
    a few megabytes per journal commit (a file linked elsewhere is left whole: cutting
    it would cut the other name's data, and deleting it frees nothing). Errors are
    ignored: the next checkpoint's clean-up retries."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        try:
            st = f.stat()
            if st.st_size > SYNC_STEP_BYTES and st.st_nlink == 1:  # a link frees nothing
                fd = os.open(f, os.O_WRONLY)
                try:
                    size = st.st_size
                    while size > 0:
                        size = max(size - SYNC_STEP_BYTES, 0)
                        os.ftruncate(fd, size)
                        os.fdatasync(fd)
                finally:
                    os.close(fd)
        except OSError:
            continue
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


#: Rows of a stream per run file: a checkpoint writes a stream as files of runs of this
#: many rows (by seq), and a run whose rows an earlier checkpoint wrote already is
#: hard-linked from there, not written again. The rows at a seq of a stem never change
#: (rows are appended at the end and expired from the front, and a replaced stream gets
#: a new stem), so what a checkpoint writes is the runs appended to since the one before,
#: not everything retained.
RUN_ROWS = 1 << 16


@dataclass
class _Run:
    """A run file: the rows with seqs ``first`` .. ``first + rows - 1`` of the stem
    ``uid``."""

    path: Path
    uid: int
    first: int
    rows: int


@dataclass
class _Page:
    """A query page's file: ``rows`` queries, the last with id ``last``."""

    path: Path
    rows: int
    last: int


@dataclass
class Reuse:
    """What the last checkpoint of an engine wrote that the next may link: each
    stream's runs (stream -> run number -> file) and the query pages (page -> file).
    Start with an empty one and pass it to each ``write``; it holds only this process's
    checkpoints (query ids are renumbered when an engine is recovered)."""

    runs: dict[str, dict[int, _Run]] = field(default_factory=dict)
    pages: dict[int, _Page] = field(default_factory=dict)


@dataclass
class Written:
    """What ``write`` did: the checkpoint's directory, the bytes it wrote and linked,
    and its seconds by part (``streams``, ``states``, ``queries``, ``catalog``)."""

    path: Path
    bytes_written: int = 0
    bytes_linked: int = 0  # run files hard-linked from the checkpoint before
    seconds: dict[str, float] = field(default_factory=dict)


def write(root: Path, lsn: int, img: EngineImage, reuse: Reuse | None = None) -> Written:
    """Write ``img`` as the checkpoint at ``lsn`` under ``root``; returns its directory
    and what was written.
    ``reuse`` is what the previous checkpoint of the same engine left there: every run
    of a stream that holds no row appended since is linked from there (a 25-million-row
    history costs nothing after its first checkpoint, a growing stream only its last
    runs), and so is every query page no query joined or left. It is updated with this
    checkpoint's files. O(rows of the runs appended to + queries of the pages changed)
    of writing, O(runs + pages x log queries) of linking. The arrays are not copied
    (strings aside)."""
    reuse = Reuse() if reuse is None else reuse
    root.mkdir(exist_ok=True)
    final = root / f"{lsn:016x}"
    tmp = root / f"{lsn:016x}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    out = Written(final)
    clock = time.perf_counter()
    streams = []
    written: dict[str, dict[int, _Run]] = {}
    for k, si in enumerate(img.streams):
        files, written[si.name] = _write_stream(tmp, final, f"{k:04d}-{si.name}", si,
                                                reuse.runs.get(si.name, {}), out)  # fmt: skip
        streams.append(
            {
                "name": si.name,
                "schema": [list(a) for a in zip(si.schema.names, si.schema.types, strict=True)],
                "time": si.schema.time,
                "max_window": si.max_window,
                "last_ts": si.last_ts,
                "tuples_ingested": si.tuples_ingested,
                "start_seq": si.start_seq,
                "rows": sum(e["rows"] for e in files),
                "files": files,
                "owner": si.owner,
                "grants": si.grants,
                "partition_by": si.partition_by,
            }
        )
    clock = _lap(out, "streams", clock)
    states = {}
    for name, blob in img.states.items():
        states[name] = f"{name}.state"
        out.bytes_written += _write_bytes(tmp / states[name],
                                          blob if isinstance(blob, list) else [blob])  # fmt: skip
    clock = _lap(out, "states", clock)
    pages, kept = _write_queries(tmp, final, img.queries, reuse.pages, out)
    clock = _lap(out, "queries", clock)
    catalog = {"lsn": lsn, "next_tid": img.next_tid, "streams": streams, "states": states,
               "templates": img.templates, "query_pages": pages}  # fmt: skip
    out.bytes_written += _write_bytes(tmp / "catalog.json", [json.dumps(catalog).encode()])
    fsync_dir(tmp)  # each file was forced by its writer; a linked one was already
    os.replace(tmp, final)
    fsync_dir(root)
    _lap(out, "catalog", clock)
    reuse.runs, reuse.pages = written, kept
    return out


def _lap(out: Written, part: str, since: float) -> float:
    """Record the seconds since ``since`` as ``part``'s; returns now."""
    now = time.perf_counter()
    out.seconds[part] = now - since
    return now


def _write_stream(
    tmp: Path, final: Path, stem: str, si: StreamImage, runs: dict[int, _Run], out: Written
) -> tuple[list[dict], dict[int, _Run]]:
    """Write (or link from ``runs``) the run files of ``si`` into ``tmp``; returns the
    catalog's entries ({"file", "skip", "rows"}) and the runs by number, named as they
    will be once ``tmp`` is renamed to ``final``. Adds the bytes to ``out``."""
    uid = si.version[0]  # 0: rows of no known stem, never linked
    groups: dict[int, list] = {}  # run number (of its first row's seq) -> its parts
    seq = si.start_seq
    for part in si.parts:
        groups.setdefault(seq // RUN_ROWS, []).append(part)
        seq += len(part[1])
    if uid and si.loaded is not None:
        # A shard's bulk load: its file holds these rows in order, with their ids last,
        # as a run file does (in larger batches). Its runs link the file, so the first
        # checkpoint after a hydration does not write the history again.
        path, first, n = si.loaded
        whole = _Run(Path(path), uid, first, n)
        runs = dict(runs)
        for g in range(first // RUN_ROWS, (first + n) // RUN_ROWS + 1):
            if g not in runs or runs[g].uid != uid:
                runs[g] = whole
    files, kept = [], {}
    linked: set[tuple[int, int]] = set()  # (device, inode): a file counted once
    seq = si.start_seq
    for g, parts in groups.items():
        rows = sum(len(t) for _, t in parts)
        name = f"{stem}-{g:08d}.arrow"
        run = runs.get(g)
        fits = uid and run is not None and run.uid == uid and run.first <= seq
        if fits and seq + rows <= run.first + run.rows and _link(run.path, tmp / name):
            st = (tmp / name).stat()
            if (st.st_dev, st.st_ino) not in linked:
                linked.add((st.st_dev, st.st_ino))
                out.bytes_linked += st.st_size
            files.append({"file": name, "skip": seq - run.first, "rows": rows})
            kept[g] = replace(run, path=final / name)
        else:
            _write_parts(tmp / name, si.schema, parts)
            out.bytes_written += (tmp / name).stat().st_size
            files.append({"file": name, "skip": 0, "rows": rows})
            kept[g] = _Run(final / name, uid, seq, rows)
        seq += rows
    return files, kept


def _link(src: Path, dest: Path) -> bool:
    """Hard-link ``src`` as ``dest``; False when it cannot be (gone, or on another file
    system: a backup elsewhere), and the caller writes the rows instead."""
    try:
        os.link(src, dest)
    except OSError:
        return False
    return True


def _write_parts(path: Path, schema: Schema, parts: list) -> None:
    """``parts`` ((columns, tids) per block) as an Arrow IPC file at ``path``, one record
    batch per part, forced to disk every ``SYNC_STEP_BYTES``. O(rows)."""
    import pyarrow as pa

    names = [*schema.names, TID]
    arrow_schema = pa.schema(
        [(n, _arrow_type(t)) for n, t in zip(schema.names, schema.types, strict=True)]
        + [(TID, pa.int64())]
    )
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, arrow_schema) as w:
        forced = _Stepped(path)
        try:
            for cols, tids in parts:
                arrays = [to_arrow(c) for c in cols] + [pa.array(tids)]
                w.write_batch(pa.record_batch(arrays, names=names))
                forced.step(f.tell())
        finally:
            forced.close()


#: Query ids per query page: a checkpoint writes the queries as files of pages (by id),
#: and a page no query joined or left since the checkpoint before is linked from there.
#: A page of Linear Road's queries is ~3 MB: the writer holds the interpreter lock while
#: it joins one, and a page's memory is reused for the next.
QUERY_PAGE_QIDS = 1 << 12


def _write_queries(
    tmp: Path, final: Path, queries, before: dict[int, _Page], out: Written
) -> tuple[list[dict], dict[int, _Page]]:
    """Write (or link from ``before``) the query pages of ``queries`` into ``tmp``;
    returns the catalog's entries ({"file", "rows"}) and the pages by number, named as
    they will be once ``tmp`` is renamed to ``final``. An engine's image
    (``QueryRows``) comes paged by query id, its rows encoded once in each query's life;
    other rows (an image read back) are one page, encoded here and never linked. Adds
    the bytes to ``out``. O(pages x log queries + rows of the pages written)."""
    if not isinstance(queries, QueryRows):
        rows = [json.dumps(list(q)) for q in queries]
        if not rows:
            return [], {}
        out.bytes_written += _write_bytes(tmp / "queries-all.json", [_json_array(rows)])
        return [{"file": "queries-all.json", "rows": len(rows)}], {}
    entries, kept = [], {}
    for page, start, stop, last in queries.pages(QUERY_PAGE_QIDS):
        name = f"queries-{page:08d}.json"
        had = before.get(page)
        if (
            had is not None
            and (had.rows, had.last) == (stop - start, last)
            and _link(had.path, tmp / name)
        ):
            out.bytes_linked += (tmp / name).stat().st_size
        else:
            rows = queries.encoded(start, stop)
            out.bytes_written += _write_bytes(tmp / name, [_json_array(rows)])
        entries.append({"file": name, "rows": stop - start})
        kept[page] = _Page(final / name, stop - start, last)
    return entries, kept


def _json_array(rows: list[str]) -> bytes:
    """Rows already encoded as JSON, as one JSON array (a line of its own)."""
    return ("[" + ",".join(rows) + "]\n").encode()


def _arrow_type(t: str):
    import pyarrow as pa

    return {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}[t]


def latest(root: Path) -> tuple[int, Path] | None:
    """(LSN, directory) of the newest complete checkpoint, or None."""
    found = []
    if root.exists():
        for p in root.iterdir():
            if p.is_dir() and not p.name.endswith(".tmp"):
                try:
                    found.append((int(p.name, 16), p))
                except ValueError:
                    continue
    return max(found) if found else None


def read(path: Path) -> EngineImage:
    """The engine image a checkpoint directory holds. Raises ValueError naming the file
    that is missing or unreadable. O(stored rows)."""
    import pyarrow as pa

    try:
        catalog = json.loads((path / "catalog.json").read_text())
        streams = []
        for s in catalog["streams"]:
            names = [a for a, _ in s["schema"]]
            schema = Schema(tuple(names), tuple(t for _, t in s["schema"]), s["time"])
            # Checkpoints written before run files name one file that holds all rows.
            files = s["files"] if "files" in s else [{"file": s["file"], "skip": 0,
                                                       "rows": s["rows"]}]  # fmt: skip
            parts = []
            for entry in files:
                parts += _read_run(path / entry["file"], len(names), entry["skip"],
                                   entry["rows"])  # fmt: skip
            streams.append(
                StreamImage(s["name"], schema, s["max_window"], s["last_ts"],
                            s["tuples_ingested"], s["start_seq"], parts,
                            owner=s.get("owner"), grants=s.get("grants", {}),
                            partition_by=s.get("partition_by"))
            )  # fmt: skip
        states = {n: (path / f).read_bytes() for n, f in catalog["states"].items()}
        if "query_pages" in catalog:
            queries = []
            for entry in catalog["query_pages"]:
                rows = json.loads((path / entry["file"]).read_text())
                if len(rows) != entry["rows"]:
                    raise ValueError(f"{entry['file']} holds {len(rows)} queries, the "
                                     f"catalog says {entry['rows']}")  # fmt: skip
                queries += map(tuple, rows)
        else:  # written before query pages: the rows in the catalog
            queries = [tuple(q) for q in catalog["queries"]]
        # Checkpoints written before templates have none.
        return EngineImage(streams, queries, catalog["next_tid"], states,
                           templates=catalog.get("templates", []))  # fmt: skip
    except (OSError, KeyError, ValueError, pa.ArrowInvalid) as err:
        raise ValueError(f"checkpoint {path} is damaged: {err}") from None


def _read_run(file: Path, width: int, skip: int, rows: int) -> list:
    """(columns, tids) per record batch of ``file``, for its rows ``skip`` ..
    ``skip + rows - 1``. Raises ValueError when it holds fewer."""
    import pyarrow as pa

    reader = pa.ipc.open_file(pa.memory_map(str(file)))
    parts = []
    for i in range(reader.num_record_batches):
        if not rows:
            break
        batch = reader.get_batch(i)
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        batch = batch.slice(skip, rows)
        skip = 0
        rows -= batch.num_rows
        parts.append(([to_numpy(batch.column(j)) for j in range(width)],
                      batch.column(width).to_numpy()))  # fmt: skip
    if rows:
        raise ValueError(f"{file.name} holds fewer rows than the catalog says")
    return parts


def remove_before(root: Path, lsn: int) -> None:
    """Delete the checkpoints older than ``lsn`` and any unfinished one."""
    for p in list(root.iterdir()) if root.exists() else []:
        name = p.name.removesuffix(".tmp")
        try:
            old = int(name, 16) < lsn
        except ValueError:
            continue
        if old or (p.name.endswith(".tmp") and int(name, 16) != lsn):
            delete(p)
