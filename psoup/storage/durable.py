"""A data directory: its lock, its log, and an engine recovered from them.

::

    DIR/LOCK    held (flock) by the one process using DIR; says which process that is
    DIR/psoup.json  the directory's format and the application it was written with
    DIR/wal/    the write-ahead log (psoup/storage/log.py)
    DIR/checkpoints/  the engine as of a log record (psoup/storage/checkpoint.py)
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
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from psoup.errors import PSoupError
from psoup.storage import checkpoint
from psoup.storage import log as wal
from psoup.storage.arrow import to_arrow, to_numpy
from psoup.storage.log import Log, Sync
from psoup.storage.records import Record, decode, encode, held_bytes

DEFAULT_DIR_ENV = "PSOUP_DATA_DIR"


def default_data_dir() -> Path:
    """``$PSOUP_DATA_DIR``, else ``$XDG_DATA_HOME/psoup``, else ``~/.local/share/psoup``."""
    if env := os.environ.get(DEFAULT_DIR_ENV):
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "psoup"


FORMAT = 1
CHECKPOINT_BYTES = 256 << 20  # log written since the last checkpoint that starts the next


@dataclass(frozen=True)
class CheckpointStats:
    """One checkpoint: its LSN; the seconds it held the engine (taking the image, under
    the engine lock; by part in ``held``: ``streams``, ``queries``, ``states``, and a
    sharded engine's wait for its shards), took to write the image (by part in
    ``parts``: ``streams``, ``states``, ``catalog``) and to remove what it replaced; the
    bytes it wrote and linked."""

    lsn: int
    write_seconds: float
    remove_seconds: float
    bytes_written: int
    bytes_linked: int
    parts: dict[str, float]
    held: dict[str, float]

    @property
    def capture_seconds(self) -> float:
        """How long taking the image held the engine."""
        return sum(self.held.values())

    @property
    def seconds(self) -> float:
        """Writing and removing: the time the checkpoint took beside the engine."""
        return self.write_seconds + self.remove_seconds

    def describe(self) -> str:
        """One line for a person."""
        parts = ", ".join(f"{k} {v:.2f}" for k, v in self.parts.items())
        held = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in self.held.items())
        return (
            f"checkpoint at record {self.lsn}: engine held {self.capture_seconds * 1e3:.0f} ms"
            f" ({held});"
            f" written in {self.write_seconds:.2f} s ({parts}; {self.bytes_written / 1e6:.1f}"
            f" MB written, {self.bytes_linked / 1e6:.1f} MB linked); the one before removed"
            f" in {self.remove_seconds:.2f} s"
        )


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
    checkpoint_lsn: int = 0  # the checkpoint it started from (0: none)


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
        checkpoint_bytes: int = CHECKPOINT_BYTES,
        checkpoint_phase: float = 0.0,
    ):
        self.path = Path(path)
        self.sync = sync or Sync()
        self.wait_each = wait_each
        self.checkpoint_bytes = checkpoint_bytes
        # The first checkpoint comes after (1 - phase) x checkpoint_bytes of log: the
        # shards of one server take evenly spread phases, so that their checkpoints
        # (each writing its share of the new rows while its log's fsyncs queue behind
        # the writes) do not all fall on the same seconds.
        self.checkpoint_phase = min(max(checkpoint_phase, 0.0), 1.0)
        self.checkpoints = self.path / "checkpoints"
        self.engine = None
        self._since = 0  # log bytes written since the last checkpoint was captured
        self.on_checkpoint = None  # called with each checkpoint's CheckpointStats
        self._writer: threading.Thread | None = None  # a checkpoint being written
        self._reuse = checkpoint.Reuse()  # what the last checkpoint wrote (to link)
        self.last_checkpoint: CheckpointStats | None = None
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
        """Load the newest checkpoint into ``engine`` and replay the log after it, then
        journal the engine's changes here. A record whose change raises a PSoupError
        raised the same when it was first made (a trigger's error after its batch was
        applied), so it is passed over again. Raises LogCorruptError or RecoveryError,
        saying what is wrong and what to do."""
        start = time.perf_counter()
        after = 0
        found = checkpoint.latest(self.checkpoints)
        if found is not None:
            after, where = found
            try:
                img = checkpoint.read(where)
            except ValueError as err:
                raise RecoveryError(
                    f"{err}; restore the data directory from a backup (psoup backup)"
                ) from None
            engine.restore_image(img)
        segs = wal.segments(self.wal_dir)
        if segs and segs[0][0] > after + 1:
            raise wal.LogCorruptError(
                f"{self.wal_dir}: the log starts at record {segs[0][0]} but the checkpoint "
                f"covers only up to {after}; records are missing. Restore the data "
                "directory from a backup"
            )
        n, last = 0, after
        for lsn, payload in wal.read_log(self.wal_dir, after=after):
            engine.replay_lsn = lsn
            try:
                rec = decode(payload)
                apply(engine, rec, self.path / "loads")
            finally:
                engine.replay_lsn = None
            n, last = n + 1, lsn
            self._since += held_bytes(payload, rec.columns)  # not in a checkpoint yet
        last = max(last, wal.last_lsn(self.wal_dir))
        self._since += int(self.checkpoint_phase * self.checkpoint_bytes)
        self.log = Log(self.wal_dir, last + 1, self.sync)
        self.engine = engine
        engine.journal = self._journal
        engine.storage = self
        return Recovery(n, last, time.perf_counter() - start, after)

    # -- checkpoints --------------------------------------------------------------------
    def _capture(self):
        """(LSN, image) of the engine now; called under its lock, between two changes."""
        self._since = 0
        return self.log.written_lsn, self.engine.capture()

    def _write_checkpoint(self, lsn: int, img) -> None:
        start = time.perf_counter()
        done = checkpoint.write(self.checkpoints, lsn, img, self._reuse)
        held = img.seconds
        del img
        written = time.perf_counter()
        # Everything at or before ``lsn`` is in the checkpoint now.
        checkpoint.remove_before(self.checkpoints, lsn)
        self.log.drop_before(lsn + 1)
        loads = self.path / "loads"
        for p in loads.glob("*.arrow") if loads.exists() else []:
            try:
                covered = int(p.stem, 16) <= lsn
            except ValueError:
                continue
            if covered:
                # In steps, as an old checkpoint's files: a hydration's load file is a
                # gigabyte or more, unlinked whole in one journal commit that the log's
                # fsyncs queue behind (a durable Linear Road run's answers were 6-7 s
                # late at the front-end's first checkpoint after hydration, whose
                # clean-up took 0.56 s).
                checkpoint.delete(p)
        self.last_checkpoint = CheckpointStats(
            lsn, written - start, time.perf_counter() - written, done.bytes_written,
            done.bytes_linked, done.seconds, held,
        )  # fmt: skip
        if self.on_checkpoint is not None:
            self.on_checkpoint(self.last_checkpoint)

    def _background(self, lsn: int, img) -> None:
        try:
            self._write_checkpoint(lsn, img)
        except Exception as exc:  # the log still holds everything: retried later
            warnings.warn(f"checkpoint at {lsn} in {self.path} failed: {exc}", stacklevel=1)
            self._since = self.checkpoint_bytes

    def checkpoint(self) -> int:
        """Write a checkpoint of the engine now (waiting for one being written first);
        returns its LSN. Recovery then starts from it."""
        with self.engine.lock:
            self._finish_writer()
            lsn, img = self._capture()
        self._write_checkpoint(lsn, img)
        return lsn

    def _finish_writer(self) -> None:
        """Wait for the checkpoint being written, if any. Called under the engine lock,
        so that no other starts before the caller's image is taken: an image's state
        parts may be the state's own buffers, which its next snapshot overwrites."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None

    def _journal(self, op: str, fields: dict, columns: list[np.ndarray]) -> Path | None:
        """Log one change (``Engine.journal``); returns the file a bulk load's rows went
        to, else None."""
        # Under the engine lock, before this change is made: the image is the engine as
        # of the previous record. It is written on a thread of its own.
        if self._since >= self.checkpoint_bytes and (
            self._writer is None or not self._writer.is_alive()
        ):
            lsn, img = self._capture()
            self._writer = threading.Thread(
                target=self._background, args=(lsn, img), name="psoup-checkpoint", daemon=True
            )
            self._writer.start()
        load = None
        if op == "replace":  # in bulk, beside the log: its record only names the file
            fields = {**fields, "file": self._write_load(columns)}
            load = self.path / "loads" / fields["file"]
            columns = []
        parts = encode(Record(op, fields, columns))
        lsn = self.log.append(parts)
        # As the engine holds the change, so that the log a recovery replays stays
        # bounded by the work it is, however narrow the log writes ints.
        self._since += held_bytes(parts[0], columns)
        if self.wait_each:
            self.log.wait(lsn)
        return load

    def _write_load(self, columns: list[np.ndarray]) -> str:
        """Write a load's columns to ``loads/<its record's LSN>.arrow``, forced to disk
        before its record is logged; returns the name. O(rows), no copy of the columns."""
        import pyarrow as pa

        loads = self.path / "loads"
        loads.mkdir(exist_ok=True)
        name = f"{self.log.written_lsn + 1:016x}.arrow"
        table = pa.table({f"c{i}": to_arrow(c) for i, c in enumerate(columns)})
        tmp = loads / (name + ".tmp")
        with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table, max_chunksize=1 << 20)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, loads / name)
        wal.fsync_dir(loads)
        return name

    def backup(self, dest: Path) -> tuple[int, int]:
        """Write a consistent copy of the engine into ``dest`` (missing or empty): a data
        directory holding one checkpoint, as of the last change made. Changes go on
        meanwhile (the image is taken under the engine lock, written outside it).
        Returns (its LSN, bytes written). Raises ValueError for a ``dest`` in use."""
        dest = Path(dest)
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise ValueError(f"{dest} exists and is not an empty directory")
        if dest.resolve() == self.path.resolve():
            raise ValueError(f"{dest} is the data directory itself")
        with self.engine.lock:
            self._finish_writer()
            lsn, img = self.log.written_lsn, self.engine.capture()
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "wal").mkdir()
        meta = (self.path / "psoup.json").read_text()
        (dest / "psoup.json").write_text(meta)
        where = checkpoint.write(dest / "checkpoints", lsn, img).path
        with open(dest / "psoup.json", "rb") as f:
            os.fsync(f.fileno())
        wal.fsync_dir(dest / "wal")
        wal.fsync_dir(dest)
        return lsn, sum(p.stat().st_size for p in where.iterdir())

    @property
    def written_lsn(self) -> int:
        """The LSN of the last change logged (0 before any, or with no log open)."""
        return 0 if self.log is None else self.log.written_lsn

    def is_durable(self, lsn: int) -> bool:
        """Whether the change logged as ``lsn`` is durable per the sync mode already (a
        ``wait(lsn)`` would return at once). O(1), never blocks."""
        return self.log is None or self.log.is_durable(lsn)

    def wait(self, lsn: int | None = None) -> None:
        """Return once the change logged as ``lsn`` (None: every change made so far) is
        durable per the sync mode; raises StorageError if it cannot be."""
        if self.log is not None:
            self.log.wait(self.log.written_lsn if lsn is None else lsn)

    def close(self, checkpoint: bool = True) -> None:
        """Finish the checkpoint being written, write one more when the log has grown
        since (``checkpoint``: the next start is then quick), force the log to disk and
        release the directory. Idempotent."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if checkpoint and self.log is not None and self.engine is not None and self._since:
            self.checkpoint()
        if self.log is not None:
            self.log.close()
            self.log = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


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
    return [to_numpy(col) for col in table.columns]


def apply(engine, rec: Record, loads: Path) -> None:
    """Make one logged change on ``engine`` (whose journal is not attached yet); a bulk
    load's rows are read from ``loads``."""
    f = rec.fields
    if "tag" in f and engine.on_tag is not None:
        engine.on_tag(f["tag"])
    try:
        if rec.op == "insert" and "advance_to" in f:  # a shard's part (psoup/shard)
            engine.insert_part(f["stream"], rec.columns[:-1], rec.columns[-1], f["advance_to"])
        elif rec.op == "insert":
            st = engine.streams[f["stream"]]
            engine.insert_columns(f["stream"], dict(zip(st.schema.names, rec.columns, strict=True)))
        elif rec.op == "create_stream":
            engine.create_stream(
                f["name"], [tuple(a) for a in f["schema"]], f["time"], f["max_window"],
                f.get("owner"), recovered=True, partition_by=f.get("partition_by"),
            )  # fmt: skip
        elif rec.op == "grant":
            engine.set_grant(f["stream"], f["client"], f["right"], f["granted"])
        elif rec.op == "register":
            engine.restore_query(
                f["handle"], f["text"], f["params"], f["owner"], f["registered_at"]
            )
        elif rec.op == "unregister":
            engine.unregister(f["handle"])
        elif rec.op == "prepare":
            engine.restore_template(f["text"])
        elif rec.op == "replace":
            st = engine.streams[f["stream"]]
            cols = rec.columns or _read_load(loads / f["file"])
            if "advance_to" in f:  # a shard's part of a bulk load, with its tuple ids
                engine.replace_contents(
                    f["stream"],
                    dict(zip(st.schema.names, cols[:-1], strict=True)),
                    tids=cols[-1],
                    advance_to=f["advance_to"],
                    origin=None if rec.columns else loads / f["file"],
                )
            else:
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
