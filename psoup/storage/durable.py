"""A data directory: its lock, its log, and an engine recovered from them.

::

    DIR/LOCK    held (flock) by the one process using DIR; says which process that is
    DIR/psoup.json  the directory's format and the application it was written with
    DIR/wal/    the write-ahead log (psoup/storage/log.py)
    DIR/loads/  a bulk load's rows (``replace``: a Spark hydration's commit), one Arrow
                IPC file each, named by the LSN of the log record that refers to it

Opening a directory takes its lock, so two processes never share it. ``recover`` replays
the log into an engine that holds only what the application installed (its streams and
triggers): every logged change is made again in order, so the streams, tuple ids,
queries, handles, owners and results come back exactly, and an application's state that
its triggers derive from the data (Linear Road's tolls, balances and accidents) is rebuilt
by the same triggers. From then on the engine hands each change to ``journal`` before it
makes it, and ``wait`` returns once the changes so far are as durable as the sync mode
promises.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from psoup.errors import PSoupError
from psoup.storage import log as wal
from psoup.storage.log import Log, Sync
from psoup.storage.records import Record, decode, encode

DEFAULT_DIR_ENV = "PSOUP_DATA_DIR"


def default_data_dir() -> Path:
    """``$PSOUP_DATA_DIR``, else ``$XDG_DATA_HOME/psoup``, else ``~/.local/share/psoup``."""
    if env := os.environ.get(DEFAULT_DIR_ENV):
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "psoup"


FORMAT = 1


class DirectoryBusyError(RuntimeError):
    """Another process holds the data directory."""


class RecoveryError(RuntimeError):
    """The directory cannot be recovered as it is (wrong application, unknown format):
    the message says what to do."""


@dataclass(frozen=True)
class Recovery:
    """What ``recover`` did: records replayed, the last LSN, and how long it took."""

    records: int
    last_lsn: int
    seconds: float


class DataDir:
    """An open, locked data directory. ``wait_each``: every change waits for its own
    durability inside the engine call (embedded use); a server waits outside the engine
    thread instead (``wait``), so concurrent clients share one fsync."""

    def __init__(
        self,
        path: Path | str,
        sync: Sync | None = None,
        wait_each: bool = False,
        application: str | None = None,
    ):
        self.path = Path(path)
        self.sync = sync or Sync()
        self.wait_each = wait_each
        self.path.mkdir(parents=True, exist_ok=True)
        self.log: Log | None = None
        self._lock_fd = _lock(self.path)
        try:
            _check_meta(self.path, application)
        except BaseException:
            self.close()
            raise
        self.wal_dir = self.path / "wal"
        self.wal_dir.mkdir(exist_ok=True)

    def recover(self, engine) -> Recovery:
        """Replay the log into ``engine``, then journal its changes here. A record whose
        change raises a PSoupError raised the same when it was first made (a trigger's
        error after its batch was applied), so it is passed over again."""
        start = time.perf_counter()
        n, last = 0, 0
        for lsn, payload in wal.read_log(self.wal_dir):
            apply(engine, decode(payload), self.path / "loads")
            n, last = n + 1, lsn
        if not last:
            last = wal.last_lsn(self.wal_dir)
        self.log = Log(self.wal_dir, last + 1, self.sync)
        engine.journal = self._journal
        engine.storage = self
        return Recovery(n, last, time.perf_counter() - start)

    def _journal(self, op: str, fields: dict, columns: list[np.ndarray]) -> None:
        if op == "replace":  # in bulk, beside the log: its record only names the file
            fields = {**fields, "file": self._write_load(columns)}
            columns = []
        lsn = self.log.append(encode(Record(op, fields, columns)))
        if self.wait_each:
            self.log.wait(lsn)

    def _write_load(self, columns: list[np.ndarray]) -> str:
        """Write a load's columns to ``loads/<its record's LSN>.arrow``, forced to disk
        before its record is logged; returns the name. O(rows), no copy of the columns."""
        import pyarrow as pa

        loads = self.path / "loads"
        loads.mkdir(exist_ok=True)
        name = f"{self.log.written_lsn + 1:016x}.arrow"
        table = pa.table({f"c{i}": _arrow(c) for i, c in enumerate(columns)})
        tmp = loads / (name + ".tmp")
        with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table, max_chunksize=1 << 20)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, loads / name)
        wal.fsync_dir(loads)
        return name

    def wait(self) -> None:
        """Return once every change made so far is durable per the sync mode; raises
        StorageError if it cannot be."""
        if self.log is not None:
            self.log.wait(self.log.written_lsn)

    def close(self) -> None:
        """Force the log to disk and release the directory. Idempotent."""
        if self.log is not None:
            self.log.close()
            self.log = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


def _arrow(col: np.ndarray):
    import pyarrow as pa

    return pa.array(col.tolist() if col.dtype == object else col)


def _read_load(path: Path) -> list[np.ndarray]:
    """A load file's columns, as numpy arrays (memory-mapped where the type allows)."""
    import pyarrow as pa

    if not path.exists():
        raise wal.LogCorruptError(
            f"{path} is missing: a logged bulk load refers to it; restore the data "
            "directory from a backup"
        )
    # Not closed here: the arrays may map its pages; it closes when they are gone.
    table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    out = []
    for col in table.columns:
        if pa.types.is_string(col.type):
            out.append(np.array(col.to_pylist(), dtype=object))
        else:
            out.append(col.to_numpy())
    return out


def apply(engine, rec: Record, loads: Path) -> None:
    """Make one logged change on ``engine`` (whose journal is not attached yet); a bulk
    load's rows are read from ``loads``."""
    f = rec.fields
    try:
        if rec.op == "insert":
            st = engine.streams[f["stream"]]
            engine.insert_columns(f["stream"], dict(zip(st.schema.names, rec.columns, strict=True)))
        elif rec.op == "create_stream":
            engine.create_stream(
                f["name"], [tuple(a) for a in f["schema"]], f["time"], f["max_window"]
            )
        elif rec.op == "register":
            engine.restore_query(
                f["handle"], f["text"], f["params"], f["owner"], f["registered_at"]
            )
        elif rec.op == "unregister":
            engine.unregister(f["handle"])
        elif rec.op == "replace":
            st = engine.streams[f["stream"]]
            cols = rec.columns or _read_load(loads / f["file"])
            engine.replace_contents(f["stream"], dict(zip(st.schema.names, cols, strict=True)))
        elif rec.op == "drop_stream":
            engine.drop_stream(f["name"])
    except PSoupError:
        pass


def _check_meta(path: Path, application: str | None) -> None:
    """Write DIR/psoup.json in a new directory; in an old one, refuse a format this
    version does not read or a different application (its log would be replayed without
    the triggers that derive the application's state)."""
    meta = path / "psoup.json"
    if not meta.exists():
        tmp = path / "psoup.json.tmp"
        tmp.write_text(json.dumps({"format": FORMAT, "application": application}) + "\n")
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, meta)
        wal.fsync_dir(path)
        return
    try:
        info = json.loads(meta.read_text())
        fmt, app = info["format"], info["application"]
    except (ValueError, KeyError, TypeError) as err:
        raise RecoveryError(f"{meta} is not readable ({err}); restore it from a backup") from None
    if fmt != FORMAT:
        raise RecoveryError(f"{path} has data format {fmt}; this psoup reads format {FORMAT}")
    if app != application:

        def name(a):
            return f"the application {a!r}" if a else "no application"

        raise RecoveryError(
            f"{path} was written with {name(app)} and is opened with {name(application)}; "
            "start the server as it was (e.g. --linear-road) or use another --data-dir"
        )


def _lock(path: Path) -> int:
    """Take DIR/LOCK (released when the process ends, however it ends) and write this
    process's id into it; raises DirectoryBusyError naming the holder."""
    fd = os.open(path / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise DirectoryBusyError(
            f"the data directory {path} is in use by {holder}; stop it or choose another "
            "directory (--data-dir)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"process {os.getpid()} ({' '.join(sys.argv[:2])})\n".encode(), 0)
    return fd
