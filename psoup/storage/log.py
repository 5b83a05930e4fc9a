"""The write-ahead log: numbered, checksummed records in segment files, and group commit.

Layout of ``DIR/wal/`` (docs/DURABILITY.md)::

    0000000000000001.log     a segment, named by the LSN of its first record
    00000000000a3f10.log     ... segments follow each other without gaps

A segment is an 8-byte magic and then records, each::

    u32 payload length | u32 checksum of (lsn, payload) | u64 lsn | payload  (little-endian)

The magic names the format. ``PSOUPWL3`` (what new segments are): CRC-32C checksums
(Castagnoli, as in ext4, iSCSI and Kafka; ``google-crc32c``, with the CPU's CRC
instruction: ~10x zlib's CRC-32 here, which took a third of a logged batch's time), and
the file may be **preallocated**: a background thread writes and forces the next segment
as zeros (``SPARE``) while the current one fills, and the log moves on into it, so that a
record overwrites blocks the file already has and its ``fdatasync`` writes only data.
Appending past the end of a file also changes its size and block map, which ext4 must
commit to its journal in the same ``fdatasync``: more writes per commit (measured in
docs/DURABILITY.md). The spare is another file, so no commit waits for its zeros. The
records end at the first all-zero frame header (no record has LSN 0), and everything
after it must be zero. A log's first segment, and any whose spare was not ready, are
appended to as before.
``PSOUPWL2``: CRC-32C, the records run to the end of the file (segments written before;
still read). ``PSOUPWL1``: zlib's CRC-32, likewise (still read).

LSNs are consecutive from 1 across all segments. A record is written with one ``pwritev``
before its operation is applied, so a process crash (SIGKILL, OOM kill) never loses one
that was acknowledged; when ``fsync`` makes it safe from power loss depends on the sync
mode (``Sync``). Reading checks every frame: a torn last record (a crash in the middle of
its write: the damage runs to the end of what was written, only zeros after it) is cut
off with a warning that names the file and offset; any other damage stops the reader
with ``LogCorruptError``, which says where and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import struct
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import google_crc32c

from psoup.errors import PSoupError

MAGIC = b"PSOUPWL3"  # what new segments start with: CRC-32C, preallocated
MAGIC_V2 = b"PSOUPWL2"  # CRC-32C, records to the end of the file (read only)
MAGIC_V1 = b"PSOUPWL1"  # zlib CRC-32 checksums (read only)
_FRAME = struct.Struct("<IIQ")  # payload length, crc32, lsn
FRAME_BYTES = _FRAME.size
_LSN = struct.Struct("<Q")
SEGMENT_BYTES = 64 << 20  # a segment is closed once it holds this much
SPARE = "spare.zero"  # the next segment, zero-filled ahead (not a segment: not *.log)
_ZEROS = bytes(1 << 20)  # the spare is written 1 MB at a time, each MB forced
SUFFIX = ".log"


class StorageError(PSoupError):
    """The data directory cannot be written: the operation was not applied."""


class StorageFullError(StorageError):
    """The disk (or quota) is full: the operation was not applied; reads still work."""


class LogCorruptError(Exception):
    """The log is damaged somewhere other than its last record: the server must not start
    on it (recovering would silently drop acknowledged data)."""


@dataclass(frozen=True)
class Sync:
    """When an appended record is forced to stable storage.

    ``batch``: before the append is acknowledged (``Log.wait``), one ``fdatasync`` shared
    by every record written meanwhile (group commit). ``interval``: every
    ``interval_ms`` in the background; a record survives a process crash at once and
    power loss after at most that long. ``off``: never by psoup (the OS writes it back
    when it likes); still safe from a process crash.
    """

    mode: str = "batch"  # batch | interval | off
    interval_ms: int = 0

    @classmethod
    def parse(cls, text: str) -> Sync:
        """``batch``, ``off`` or ``interval=MS``; raises ValueError naming the problem."""
        if text in ("batch", "off"):
            return cls(text)
        name, _, ms = text.partition("=")
        if name == "interval" and ms.isdigit() and int(ms) > 0:
            return cls("interval", int(ms))
        raise ValueError(f"bad sync mode {text!r}: use batch, off or interval=MS (MS > 0)")

    def __str__(self) -> str:
        return f"interval={self.interval_ms}" if self.mode == "interval" else self.mode


def _crc(lsn: int, *parts) -> int:
    """The CRC-32C of a record: its LSN, then its payload's pieces (bytes, numpy arrays,
    memoryviews) in order. O(payload), in C."""
    crc = google_crc32c.value(_LSN.pack(lsn))
    for p in parts:
        crc = google_crc32c.extend(crc, bytes(p) if isinstance(p, memoryview) else p)
    return crc


def _crc_v1(lsn: int, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(_LSN.pack(lsn)))


def segment_name(first_lsn: int) -> str:
    return f"{first_lsn:016x}{SUFFIX}"


def segments(wal_dir: Path) -> list[tuple[int, Path]]:
    """(first LSN, path) of every segment, in LSN order. O(segments)."""
    out = []
    for p in wal_dir.glob("*" + SUFFIX):
        with contextlib.suppress(ValueError):
            out.append((int(p.stem, 16), p))
    return sorted(out)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a created, renamed or deleted file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_log(wal_dir: Path, after: int = 0, repair: bool = True) -> Iterator[tuple[int, bytes]]:
    """Yield (lsn, payload) of every record with LSN > ``after``, in order.

    A torn last record is cut off (the file is truncated there when ``repair``) with a
    ``RuntimeWarning`` naming file and offset. Raises LogCorruptError for a bad checksum
    or frame before the last record, a gap between segments or a segment whose first
    record is not the LSN its name says. Reads one segment at a time: memory
    O(segment).
    """
    segs = segments(wal_dir)
    expect = None
    for i, (first, path) in enumerate(segs):
        last_segment = i == len(segs) - 1
        if expect is not None and first != expect:
            raise LogCorruptError(
                f"{path}: the log jumps from LSN {expect - 1} to {first} (a segment is "
                "missing); restore the data directory from a backup"
            )
        data = path.read_bytes()
        magic = data[: len(MAGIC)]
        if magic not in (MAGIC, MAGIC_V2, MAGIC_V1):
            if last_segment and len(data) < len(MAGIC) and MAGIC.startswith(data):
                _cut(path, 0, "a segment created just before a crash", repair)
                return
            raise LogCorruptError(f"{path}: not a psoup log segment (bad magic)")
        crc = _crc_v1 if magic == MAGIC_V1 else _crc
        zeroed = magic == MAGIC  # preallocated: the records end where the zeros begin
        pos, lsn = len(MAGIC), first
        while pos < len(data):
            bad = _bad_frame(data, pos, lsn, crc)
            if bad and zeroed and data.count(0, pos) == len(data) - pos:
                break  # the zeros after the records (no record has LSN 0)
            if bad:
                end = _torn_end(data, pos, zeroed) if last_segment else None
                if end is not None:
                    _cut(path, pos, bad, repair, zero_to=end if zeroed else None)
                    return
                raise LogCorruptError(
                    f"{path} at offset {pos}: record {lsn} is damaged ({bad}) and is not the "
                    "last one; acknowledged data would be lost. Restore the data directory "
                    "from a backup (psoup backup), or move this file away to start from "
                    "what precedes it"
                )
            size = _FRAME.unpack_from(data, pos)[0]
            if lsn > after:
                yield lsn, data[pos + FRAME_BYTES : pos + FRAME_BYTES + size]
            pos += FRAME_BYTES + size
            lsn += 1
        expect = lsn


def _bad_frame(data: bytes, pos: int, lsn: int, crc_of=_crc) -> str:
    """Why the frame at ``pos`` is not record ``lsn``, or '' when it is."""
    if len(data) - pos < FRAME_BYTES:
        return "its header is cut short"
    size, crc, got = _FRAME.unpack_from(data, pos)
    if pos + FRAME_BYTES + size > len(data):
        return "it is cut short"
    if got != lsn:
        return f"it says LSN {got}"
    if crc_of(lsn, memoryview(data)[pos + FRAME_BYTES : pos + FRAME_BYTES + size]) != crc:
        return "its checksum does not match"
    return ""


def _torn_end(data: bytes, pos: int, zeroed: bool) -> int | None:
    """Where a bad frame at ``pos`` ends if it can be a torn last write, else None.

    It can when the damage runs to the end of what was written: its stated length reaches
    the end of the file or is cut short by it, or (a preallocated segment, ``zeroed``)
    only zeros follow the length it states (a crash in the middle of writing it). The
    end returned is the first byte after the damage."""
    if len(data) - pos < FRAME_BYTES:
        return len(data)
    end = pos + FRAME_BYTES + _FRAME.unpack_from(data, pos)[0]
    if end >= len(data):
        return len(data)
    if zeroed and data.count(0, end) == len(data) - end:
        return end
    return None


def _cut(path: Path, pos: int, why: str, repair: bool, zero_to: int | None = None) -> None:
    """Drop the torn record at ``pos``: truncate the file there, or (a preallocated
    segment) zero its bytes up to ``zero_to`` so that the file keeps its blocks."""
    warnings.warn(
        f"{path}: dropped a torn last record at offset {pos} ({why}): it was being written "
        "when the process stopped and was never acknowledged",
        RuntimeWarning,
        stacklevel=3,
    )
    if repair:
        if pos == 0:
            path.unlink()
        else:
            with open(path, "r+b") as f:
                if zero_to is None:
                    f.truncate(pos)
                else:
                    f.seek(pos)
                    f.write(bytes(zero_to - pos))
                os.fsync(f.fileno())


def end_of_records(path: Path) -> int:
    """The offset after the last good record of the segment at ``path``: its size, less
    the zeros preallocated after the records. O(segment)."""
    return _records_end(path.read_bytes(), int(path.stem, 16))


def last_lsn(wal_dir: Path) -> int:
    """The LSN of the last good record (0 for an empty log); repairs a torn tail."""
    last = 0
    for lsn, _ in read_log(wal_dir):
        last = lsn
    if not last:
        segs = segments(wal_dir)
        if segs:
            last = segs[-1][0] - 1  # empty segment after a checkpoint removed the rest
    return last


class Log:
    """Appends records after ``next_lsn - 1`` and makes them durable per ``sync``.

    ``append`` is one ``write`` (plus a segment switch every SEGMENT_BYTES); ``wait(lsn)``
    returns once the record is as durable as the mode promises. In batch mode a
    committer thread runs one ``fdatasync`` for every record written while the previous
    one ran, so concurrent writers share it (group commit). It is woken by the first
    ``wait`` for a record not forced yet, not by ``append``: an append is made by the
    engine's single writer holding the interpreter lock, and a wake-up there (a futex
    call, and the committer taking the core it ran on) was ~10% of a Linear Road shard's
    interpreter samples, one per operation; the caller that waits is about to sleep
    anyway, and one wait covers every record before it. In interval mode an append
    wakes it (it sleeps between forces, so that is rarely a futex call).

    Unless the mode is ``off``, a second thread prepares the next segment as zeros
    (``prepare_spare``) once the current one is half full, and the rotation moves into
    it (see the module).
    """

    def __init__(
        self,
        wal_dir: Path,
        next_lsn: int,
        sync: Sync,
        segment_bytes: int = SEGMENT_BYTES,
        preallocate: bool = True,
    ):
        """``preallocate=False``: no spare segments, every segment appended to (``psoup
        bench durability`` compares the two); the format is the same."""
        self.dir = wal_dir
        self.sync = sync
        self.segment_bytes = segment_bytes
        # One lock, two conditions: waiters hear only that a record was forced (or that
        # forcing failed), the committer only that one was written. One condition for
        # both woke every waiting call at every append (a Linear Road front-end: ~30
        # handlers waiting for their record, each woken and put back to sleep per
        # append), which cost futex wake-ups under the interpreter lock.
        mutex = threading.Lock()
        self._cond = threading.Condition(mutex)  # waiters: a record forced, or a failure
        self._work = threading.Condition(mutex)  # the committer: a record written, or close
        self._sync_lock = threading.Lock()  # held while a file is being forced
        self._written = next_lsn - 1
        self._synced = next_lsn - 1
        self._failed: BaseException | None = None
        self._closing = False
        self.on_flush: Callable[[float], None] | None = None  # seconds of each forced write
        # the filler: a spare is wanted, or close
        self._spare_asked = threading.Condition(mutex)
        self._spare = wal_dir / SPARE
        self._spare.unlink(missing_ok=True)  # one left by a process that stopped
        self._spare_lock = threading.Lock()  # held while the spare is written
        self._spare_wanted = self._spare_ready = False
        segs = segments(wal_dir)
        if segs and _magic(segs[-1][1]) == MAGIC:
            first, path = segs[-1]
            self._fd = os.open(path, os.O_WRONLY)
            self._size = _records_end(path.read_bytes(), first)  # where the next one goes
            self._alloc = os.fstat(self._fd).st_size  # the end of the file
        else:  # a new log, or one whose last segment has an older format
            self._fd, self._size = self._create(next_lsn)
            self._alloc = self._size
        self._committer = self._filler = None
        if sync.mode != "off":
            self._committer = threading.Thread(target=self._commit, name="psoup-wal", daemon=True)
            self._committer.start()
        if sync.mode != "off" and preallocate:
            self._filler = threading.Thread(target=self._fill, name="psoup-wal-fill", daemon=True)
            self._filler.start()

    @property
    def written_lsn(self) -> int:
        """The LSN of the last record written (0 before any)."""
        return self._written

    def _create(self, first_lsn: int) -> tuple[int, int]:
        path = self.dir / segment_name(first_lsn)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, MAGIC)
        os.fsync(fd)
        fsync_dir(self.dir)
        return fd, len(MAGIC)

    def append(self, payload: bytes | list) -> int:
        """Write one record; returns its LSN. ``payload``: its bytes, or pieces (bytes,
        contiguous numpy arrays) written one after the other with no joined copy. Raises
        StorageFullError (disk full) or StorageError (any other write failure), leaving
        the log as it was. O(payload)."""
        parts = [payload] if isinstance(payload, bytes) else payload
        size = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
        if self._size >= self.segment_bytes:
            self._rotate()
        with self._cond:
            if self._failed is not None:
                raise StorageError(f"the log cannot be written: {self._failed}")
            lsn = self._written + 1
            frame = [_FRAME.pack(size, _crc(lsn, *parts), lsn), *parts]
            try:
                _write_all(self._fd, frame, self._size)
            except OSError as exc:
                self._unwrite(FRAME_BYTES + size)
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise StorageFullError(
                        f"the data directory {self.dir.parent} is full: {exc.strerror}"
                    ) from None
                raise StorageError(f"cannot write the log in {self.dir}: {exc}") from None
            self._size += FRAME_BYTES + size
            self._alloc = max(self._alloc, self._size)
            self._written = lsn
            if self.sync.mode == "interval":  # mostly asleep between forces: cheap
                self._work.notify()
            if self._size >= self.segment_bytes // 2 and not self._spare_wanted:
                self._want_spare()
            return lsn

    def _unwrite(self, n: int) -> None:
        """Leave no half record behind a failed write of ``n`` bytes at the end of the
        records: zero what it may have written over the zeros, cut what went past them."""
        with contextlib.suppress(OSError):
            over = min(n, self._alloc - self._size)
            if over > 0:
                os.pwrite(self._fd, bytes(over), self._size)
            if self._size + n > self._alloc:
                os.ftruncate(self._fd, self._alloc)

    def _want_spare(self) -> None:
        """Ask the filler for the next segment's zeros (the caller holds the lock). O(1)."""
        self._spare_wanted = True
        if self._filler is not None and not self._spare_ready:
            self._spare_asked.notify()

    def _fill(self) -> None:
        """The filler thread: ``prepare_spare`` whenever an append asks for it."""
        while True:
            with self._spare_asked:
                self._spare_asked.wait_for(
                    lambda: (self._spare_wanted and not self._spare_ready) or self._closing
                )
                if self._closing:
                    return
            self.prepare_spare()

    def prepare_spare(self) -> None:
        """Write the next segment as SEGMENT_BYTES of zeros (``SPARE``, 1 MB a ``write``,
        no lock of the log held) and force it, so that its blocks are the file's; the
        next rotation moves into it. Nothing when the log does not preallocate or a spare
        is ready. A failure (a full disk) leaves no spare: the next segment is appended
        to, and the appends report the disk's state. O(SEGMENT_BYTES)."""
        if self._filler is None:
            return
        with self._spare_lock:
            with self._cond:
                if self._spare_ready or self._closing:
                    return
            try:
                fd = os.open(self._spare, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    for at in range(0, self.segment_bytes, len(_ZEROS)):
                        if self._closing:
                            return
                        n = min(len(_ZEROS), self.segment_bytes - at)
                        _write_all(fd, [memoryview(_ZEROS)[:n]], at)
                        os.fdatasync(fd)  # 1 MB at a time: a commit meanwhile waits less
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    self._spare.unlink()
                return
            with self._cond:
                self._spare_ready = True

    def _adopt_spare(self, first_lsn: int) -> int | None:
        """Make the spare the segment starting at ``first_lsn`` and return it open, or
        None if that fails. Its magic is forced before its name (a crash between leaves
        a valid empty segment or an unused spare)."""
        try:
            fd = os.open(self._spare, os.O_WRONLY)
        except OSError:
            return None
        try:
            _write_all(fd, [MAGIC], 0)
            os.fdatasync(fd)
            os.rename(self._spare, self.dir / segment_name(first_lsn))
            fsync_dir(self.dir)
        except OSError:
            os.close(fd)
            return None
        return fd

    def _rotate(self) -> None:
        with self._sync_lock, self._cond:
            if self._size < self.segment_bytes:
                return
            if self.sync.mode != "off":
                os.fdatasync(self._fd)
                self._synced = self._written
            with contextlib.suppress(OSError):  # give the unused zeros back; a crash
                os.ftruncate(self._fd, self._size)  # before this leaves them, still valid
            os.close(self._fd)
            first, ready = self._written + 1, self._spare_ready
            self._spare_ready = self._spare_wanted = False
            fd = self._adopt_spare(first) if ready else None
            if fd is not None:
                self._fd, self._size, self._alloc = fd, len(MAGIC), self.segment_bytes
            else:  # no spare: append to a new file
                self._fd, self._size = self._create(first)
                self._alloc = self._size
            self._cond.notify_all()

    def is_durable(self, lsn: int) -> bool:
        """Whether ``wait(lsn)`` would return at once: record ``lsn`` is durable as the
        sync mode promises and forcing has not failed. O(1), never blocks."""
        return self.sync.mode != "batch" or (self._synced >= lsn and self._failed is None)

    def wait(self, lsn: int, timeout: float | None = None) -> None:
        """Return once record ``lsn`` is durable as the sync mode promises (batch: forced
        to disk; interval and off: written to the OS). Raises StorageError if forcing
        failed."""
        if self.sync.mode != "batch":
            return
        with self._cond:
            if self._synced < lsn:
                self._work.notify()  # the committer, if it is idle (see the class)
            ok = self._cond.wait_for(
                lambda: self._synced >= lsn or self._failed is not None, timeout
            )
            if self._failed is not None and self._synced < lsn:
                raise StorageError(f"the log could not be forced to disk: {self._failed}")
            if not ok:
                raise StorageError(f"record {lsn} was not forced to disk within {timeout} s")

    def _commit(self) -> None:
        interval = self.sync.interval_ms / 1e3 if self.sync.mode == "interval" else 0.0
        while True:
            if interval:
                time.sleep(interval)
            with self._work:
                self._work.wait_for(lambda: self._written > self._synced or self._closing)
                if self._closing and self._written <= self._synced:
                    return
            with self._sync_lock:
                with self._cond:
                    target, fd = self._written, self._fd
                try:
                    start = time.perf_counter()
                    os.fdatasync(fd)
                    if self.on_flush is not None:
                        self.on_flush(time.perf_counter() - start)
                except OSError as exc:  # the page cache can no longer be trusted
                    with self._cond:
                        self._failed = exc
                        self._cond.notify_all()
                    return
            with self._cond:
                self._synced = max(self._synced, target)
                self._cond.notify_all()

    def flush(self) -> None:
        """Force everything written so far to disk, whatever the mode."""
        with self._sync_lock, self._cond:
            os.fdatasync(self._fd)
            self._synced = self._written
            self._cond.notify_all()

    def close(self) -> None:
        """Force what was written and close the segment. Idempotent."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._work.notify()
            self._spare_asked.notify()
            self._cond.notify_all()
        if self._committer is not None:
            self._committer.join()
        if self._filler is not None:
            self._filler.join()
            with self._spare_lock:  # a spare being written stops at its next MB
                self._spare.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.flush()
        os.close(self._fd)

    def drop_before(self, lsn: int) -> int:
        """Delete the segments whose records all have LSNs below ``lsn`` (a checkpoint
        holds them); returns how many. Never the segment being written."""
        segs = segments(self.dir)
        gone = 0
        for (_first, path), (next_first, _) in itertools.pairwise(segs):
            if next_first <= lsn:
                path.unlink()
                gone += 1
        if gone:
            fsync_dir(self.dir)
        return gone


def _magic(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(len(MAGIC))


def _write_all(fd: int, parts: list, offset: int) -> None:
    """Write ``parts`` (bytes-like) in order at ``offset`` with one ``pwritev`` (no joined
    copy), finishing a short write piece by piece."""
    n = os.pwritev(fd, parts, offset)
    offset += n
    for part in parts:
        view = memoryview(part).cast("B")
        if n >= len(view):
            n -= len(view)
            continue
        view = view[n:]
        n = 0
        while view:
            done = os.pwrite(fd, view, offset)
            view, offset = view[done:], offset + done


def _records_end(data: bytes, first_lsn: int) -> int:
    """The offset after the last good record of a segment's bytes (``read_log`` repairs a
    torn one first): where the next record is written. O(segment)."""
    pos, lsn = len(MAGIC), first_lsn
    while pos < len(data) and not _bad_frame(data, pos, lsn):
        pos += FRAME_BYTES + _FRAME.unpack_from(data, pos)[0]
        lsn += 1
    return pos
