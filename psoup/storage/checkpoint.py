"""Checkpoints: an engine image (``Engine.capture``) as files, and back.

::

    DIR/checkpoints/<LSN, 16 hex digits>/     the engine as of that log record
        catalog.json      streams (declaration, counters, row count), queries in
                          registration order (handle, text, params, owner, time),
                          the next tuple id, the application states' files
        <stream>.arrow    the stream's stored rows: an Arrow IPC file, one column per
                          attribute and ``_tid``, one record batch per storage block
        <name>.state      an application's state (its own bytes)

A checkpoint is written into ``<LSN>.tmp``, every file forced to disk, then renamed:
a directory without ``.tmp`` is complete. Recovery loads the newest one and replays the
log records after its LSN; older checkpoints, log segments and load files are deleted
once a newer checkpoint is complete. Results are not written: registering the queries
again over the data rebuilds them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from psoup.engine import EngineImage, StreamImage
from psoup.storage.arrow import to_arrow, to_numpy
from psoup.storage.log import fsync_dir
from psoup.values import Schema

TID = "_tid"


def write(
    root: Path, lsn: int, img: EngineImage, reuse: dict[str, tuple[tuple, Path, int]] | None = None
) -> Path:
    """Write ``img`` as the checkpoint at ``lsn`` under ``root``; returns its directory.
    ``reuse`` maps a stream to (version, file, rows) of its file in an earlier
    checkpoint: a stream whose version is unchanged is hard-linked, not written again
    (a 25-million-row history costs nothing after its first checkpoint); it is updated
    with this checkpoint's files. O(rows of the changed streams) of writing; the arrays
    are not copied (strings aside)."""
    reuse = {} if reuse is None else reuse
    import pyarrow as pa

    root.mkdir(exist_ok=True)
    final = root / f"{lsn:016x}"
    tmp = root / f"{lsn:016x}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    streams = []
    written: dict[str, tuple[tuple, Path, int]] = {}
    for k, si in enumerate(img.streams):
        file = f"{k:04d}-{si.name}.arrow"
        names = [*si.schema.names, TID]
        schema = pa.schema(
            [(n, _arrow_type(t)) for n, t in zip(si.schema.names, si.schema.types, strict=True)]
            + [(TID, pa.int64())]
        )
        rows = 0
        old = reuse.get(si.name)
        if old is not None and old[0] == si.version and si.version[0] and old[1].exists():
            os.link(old[1], tmp / file)
            rows = old[2]
        else:
            with pa.OSFile(str(tmp / file), "wb") as f, pa.ipc.new_file(f, schema) as w:
                for cols, tids in si.parts:
                    arrays = [to_arrow(c) for c in cols] + [pa.array(tids)]
                    w.write_batch(pa.record_batch(arrays, names=names))
                    rows += len(tids)
        written[si.name] = (si.version, final / file, rows)
        streams.append(
            {
                "name": si.name,
                "schema": [list(a) for a in zip(si.schema.names, si.schema.types, strict=True)],
                "time": si.schema.time,
                "max_window": si.max_window,
                "last_ts": si.last_ts,
                "tuples_ingested": si.tuples_ingested,
                "start_seq": si.start_seq,
                "rows": rows,
                "file": file,
                "owner": si.owner,
                "grants": si.grants,
                "partition_by": si.partition_by,
            }
        )
    states = {}
    for name, blob in img.states.items():
        states[name] = f"{name}.state"
        (tmp / states[name]).write_bytes(blob)
    catalog = {
        "lsn": lsn,
        "next_tid": img.next_tid,
        "streams": streams,
        "queries": [list(q) for q in img.queries],
        "states": states,
    }
    (tmp / "catalog.json").write_text(json.dumps(catalog, indent=1) + "\n")
    for p in tmp.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())
    fsync_dir(tmp)
    os.replace(tmp, final)
    fsync_dir(root)
    reuse.clear()
    reuse.update(written)
    return final


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
            reader = pa.ipc.open_file(pa.memory_map(str(path / s["file"])))
            parts = []
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                cols = [to_numpy(batch.column(j)) for j in range(len(names))]
                parts.append((cols, batch.column(len(names)).to_numpy()))
            if sum(len(t) for _, t in parts) != s["rows"]:
                raise ValueError(f"{s['file']} holds fewer rows than the catalog says")
            streams.append(
                StreamImage(s["name"], schema, s["max_window"], s["last_ts"],
                            s["tuples_ingested"], s["start_seq"], parts,
                            owner=s.get("owner"), grants=s.get("grants", {}),
                            partition_by=s.get("partition_by"))
            )  # fmt: skip
        states = {n: (path / f).read_bytes() for n, f in catalog["states"].items()}
        queries = [tuple(q) for q in catalog["queries"]]
        return EngineImage(streams, queries, catalog["next_tid"], states)
    except (OSError, KeyError, ValueError, pa.ArrowInvalid) as err:
        raise ValueError(f"checkpoint {path} is damaged: {err}") from None


def remove_before(root: Path, lsn: int) -> None:
    """Delete the checkpoints older than ``lsn`` and any unfinished one."""
    for p in list(root.iterdir()) if root.exists() else []:
        name = p.name.removesuffix(".tmp")
        try:
            old = int(name, 16) < lsn
        except ValueError:
            continue
        if old or (p.name.endswith(".tmp") and int(name, 16) != lsn):
            shutil.rmtree(p, ignore_errors=True)
