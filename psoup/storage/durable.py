"""A data directory: its lock, its log, and an engine recovered from them.

::

    DIR/LOCK    held (flock) by the one process using DIR; says which process that is
    DIR/wal/    the write-ahead log (psoup/storage/log.py)

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


class DirectoryBusyError(RuntimeError):
    """Another process holds the data directory."""


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

    def __init__(self, path: Path | str, sync: Sync | None = None, wait_each: bool = False):
        self.path = Path(path)
        self.sync = sync or Sync()
        self.wait_each = wait_each
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock(self.path)
        self.wal_dir = self.path / "wal"
        self.wal_dir.mkdir(exist_ok=True)
        self.log: Log | None = None

    def recover(self, engine) -> Recovery:
        """Replay the log into ``engine``, then journal its changes here. A record whose
        change raises a PSoupError raised the same when it was first made (a trigger's
        error after its batch was applied), so it is passed over again."""
        start = time.perf_counter()
        n, last = 0, 0
        for lsn, payload in wal.read_log(self.wal_dir):
            apply(engine, decode(payload))
            n, last = n + 1, lsn
        if not last:
            last = wal.last_lsn(self.wal_dir)
        self.log = Log(self.wal_dir, last + 1, self.sync)
        engine.journal = self._journal
        engine.storage = self
        return Recovery(n, last, time.perf_counter() - start)

    def _journal(self, op: str, fields: dict, columns: list[np.ndarray]) -> None:
        lsn = self.log.append(encode(Record(op, fields, columns)))
        if self.wait_each:
            self.log.wait(lsn)

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


def apply(engine, rec: Record) -> None:
    """Make one logged change on ``engine`` (whose journal is not attached yet)."""
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
            engine.replace_contents(
                f["stream"], dict(zip(st.schema.names, rec.columns, strict=True))
            )
        elif rec.op == "drop_stream":
            engine.drop_stream(f["name"])
    except PSoupError:
        pass


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
