"""The write-ahead log (psoup/storage/log.py) on real files: records come back in order
across segments, a torn last record is cut off with a warning, damage elsewhere refuses
to read, a full disk leaves the log as it was, group commit shares fsyncs, and records
are written over the zeros preallocated ahead of them."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from psoup.storage import log as wal
from psoup.storage.log import Log, LogCorruptError, StorageFullError, Sync


def _payloads(n: int) -> list[bytes]:
    return [bytes([i % 251]) * (i * 37 % 1000) for i in range(n)]


def _write(d: Path, payloads, sync: str = "batch", segment_bytes: int = 4096) -> None:
    log = Log(d, 1, Sync.parse(sync), segment_bytes)
    for p in payloads:
        log.wait(log.append(p))
    log.close()


def test_records_come_back_in_order_across_segments(tmp_path: Path) -> None:
    ps = _payloads(300)
    _write(tmp_path, ps)
    assert len(wal.segments(tmp_path)) > 10
    assert list(wal.read_log(tmp_path)) == list(enumerate(ps, start=1))
    assert [lsn for lsn, _ in wal.read_log(tmp_path, after=250)] == list(range(251, 301))
    assert wal.last_lsn(tmp_path) == 300


def test_appending_resumes_after_the_last_record(tmp_path: Path) -> None:
    ps = _payloads(50)
    _write(tmp_path, ps[:20])
    log = Log(tmp_path, wal.last_lsn(tmp_path) + 1, Sync.parse("off"), 4096)
    for p in ps[20:]:
        log.append(p)
    log.close()
    assert [p for _, p in wal.read_log(tmp_path)] == ps


@pytest.mark.parametrize("how", ["zeros", "truncate"])
@pytest.mark.parametrize("cut", [1, wal.FRAME_BYTES - 1, wal.FRAME_BYTES + 1, -1])
def test_a_torn_last_record_is_dropped_with_a_warning(tmp_path: Path, cut: int, how: str) -> None:
    ps = [b"a" * 100, b"b" * 100, b"c" * 100]
    _write(tmp_path, ps, segment_bytes=1 << 20)
    (_, path) = wal.segments(tmp_path)[-1]
    end = wal.end_of_records(path)
    start = end - (wal.FRAME_BYTES + 100)  # where record 3 begins
    stop = start + cut if cut > 0 else end + cut  # -1: all but the payload's last byte
    if how == "zeros":  # the write stopped there: the preallocated zeros after it stay
        data = bytearray(path.read_bytes())
        data[stop:end] = bytes(end - stop)
        path.write_bytes(bytes(data))
    else:  # an appended segment, or a crash before the zeros were forced
        with open(path, "r+b") as f:
            f.truncate(stop)
    with pytest.warns(RuntimeWarning, match=rf"{path.name}.*offset {start}"):
        got = list(wal.read_log(tmp_path))
    assert got == [(1, ps[0]), (2, ps[1])]
    data = path.read_bytes()  # repaired: nothing of record 3 is left
    assert wal.end_of_records(path) == start and data.count(0, start) == len(data) - start
    log = Log(tmp_path, 3, Sync.parse("batch"), 1 << 20)
    log.wait(log.append(b"d"))
    log.close()
    assert [p for _, p in wal.read_log(tmp_path)] == [ps[0], ps[1], b"d"]


def test_a_last_record_with_a_bad_checksum_is_a_torn_write(tmp_path: Path) -> None:
    _write(tmp_path, [b"a" * 100, b"b" * 100], segment_bytes=1 << 20)
    (_, path) = wal.segments(tmp_path)[-1]
    data = bytearray(path.read_bytes())
    data[wal.end_of_records(path) - 1] ^= 0xFF  # the last page never reached the disk
    path.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="torn last record"):
        assert [lsn for lsn, _ in wal.read_log(tmp_path)] == [1]


SEG = 64 << 10


def _into_a_spare(d: Path, payloads: list[bytes]) -> Log:
    """A log whose first record (LSN 1) fills its first segment, and whose ``payloads``
    (LSNs 2, ...) go into the second, the spare the filler prepared."""
    log = Log(d, 1, Sync.parse("batch"), SEG)
    log.wait(log.append(b"x" * (SEG + 100)))  # past the segment's size: the next rotates
    log.prepare_spare()  # what the filler thread does once a segment is half full
    assert (d / wal.SPARE).stat().st_size == SEG
    for p in payloads:
        log.wait(log.append(p))
    return log


def test_the_next_segment_is_prepared_as_zeros_and_records_overwrite_them(
    tmp_path: Path,
) -> None:
    log = _into_a_spare(tmp_path, _payloads(40))  # ~20 KB: all in the second segment
    (_, first), (_, second) = wal.segments(tmp_path)
    assert second.name == wal.segment_name(2) and not (tmp_path / wal.SPARE).exists()
    assert second.stat().st_size == SEG  # written over the zeros: the file did not grow
    assert wal.end_of_records(second) < SEG
    assert first.stat().st_size == wal.end_of_records(first)  # cut back to its records
    log.close()
    log = Log(tmp_path, 42, Sync.parse("batch"), SEG)  # resumes after the records
    log.wait(log.append(b"last"))
    log.close()
    assert [p for _, p in wal.read_log(tmp_path)][1:] == [*_payloads(40), b"last"]


def test_a_log_told_not_to_preallocate_appends(tmp_path: Path) -> None:
    log = Log(tmp_path, 1, Sync.parse("batch"), SEG, preallocate=False)
    log.wait(log.append(b"x" * (SEG + 100)))
    log.prepare_spare()  # nothing to do: no spares
    for p in _payloads(40):
        log.wait(log.append(p))
    log.close()
    segs = wal.segments(tmp_path)
    assert len(segs) == 2 and not (tmp_path / wal.SPARE).exists()
    assert all(path.stat().st_size == wal.end_of_records(path) for _, path in segs)
    assert [p for _, p in wal.read_log(tmp_path)][1:] == _payloads(40)


@pytest.mark.parametrize("cut", [1, wal.FRAME_BYTES + 1, -1])
def test_a_torn_last_record_in_a_preallocated_segment_is_zeroed(tmp_path: Path, cut: int) -> None:
    ps = [b"a" * 100, b"b" * 100, b"c" * 100]
    _into_a_spare(tmp_path, ps).close()
    (_, path) = wal.segments(tmp_path)[-1]
    end = wal.end_of_records(path)
    start = end - (wal.FRAME_BYTES + 100)  # where the last record begins
    stop = start + cut if cut > 0 else end + cut  # -1: all but the payload's last byte
    data = bytearray(path.read_bytes())
    data[stop:end] = bytes(end - stop)
    path.write_bytes(bytes(data))  # the write stopped there: the zeros after it stay
    with pytest.warns(RuntimeWarning, match=rf"{path.name}.*offset {start}"):
        assert [p for _, p in wal.read_log(tmp_path)][1:] == ps[:2]
    data = path.read_bytes()
    assert len(data) == SEG and data.count(0, start) == SEG - start  # zeroed, not cut
    log = Log(tmp_path, 4, Sync.parse("batch"), SEG)
    log.wait(log.append(b"d"))
    log.close()
    assert [p for _, p in wal.read_log(tmp_path)][1:] == [*ps[:2], b"d"]


def test_data_after_the_zeros_refuses_to_read(tmp_path: Path) -> None:
    _into_a_spare(tmp_path, [b"a" * 100, b"b" * 100]).close()
    (_, path) = wal.segments(tmp_path)[-1]
    data, end = bytearray(path.read_bytes()), wal.end_of_records(path)
    data[end + 5000] = 1  # not a torn write: something wrote past the records
    path.write_bytes(bytes(data))
    with pytest.raises(LogCorruptError, match=rf"{path.name} at offset {end}: record 4"):
        list(wal.read_log(tmp_path))


def test_damage_in_an_earlier_segment_refuses_to_read(tmp_path: Path) -> None:
    _write(tmp_path, _payloads(100))
    (_, first) = wal.segments(tmp_path)[0]
    with open(first, "r+b") as f:
        f.truncate(first.stat().st_size - 3)  # only the last segment may be torn
    with pytest.raises(LogCorruptError, match="cut short"):
        list(wal.read_log(tmp_path))


def test_a_missing_segment_refuses_to_read(tmp_path: Path) -> None:
    _write(tmp_path, _payloads(100))
    segs = wal.segments(tmp_path)
    segs[len(segs) // 2][1].unlink()
    with pytest.raises(LogCorruptError, match="segment is missing"):
        list(wal.read_log(tmp_path))


def test_a_full_disk_refuses_the_record_and_leaves_the_log_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log(tmp_path, 1, Sync.parse("batch"), 1 << 20)
    log.wait(log.append(b"kept"))
    real_pwritev = os.pwritev

    def half_then_full(fd, parts, offset):  # a real ENOSPC needs a full filesystem
        data = b"".join(parts)
        if fd == log._fd and len(data) > 1000:
            os.pwrite(fd, data[:500], offset)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwritev(fd, parts, offset)

    monkeypatch.setattr(os, "pwritev", half_then_full)
    with pytest.raises(StorageFullError, match="is full"):
        log.append(b"x" * 5000)
    monkeypatch.setattr(os, "pwritev", real_pwritev)
    log.wait(log.append(b"after"))
    log.close()
    assert list(wal.read_log(tmp_path)) == [(1, b"kept"), (2, b"after")]


def test_group_commit_shares_fsyncs_between_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(fd), real(fd)))
    log = Log(tmp_path, 1, Sync.parse("batch"), 1 << 30)
    lock = threading.Lock()  # appends are serialised by the engine; waits are not

    def writer(k: int) -> None:
        for i in range(50):
            with lock:
                lsn = log.append(b"%d:%d" % (k, i))
            log.wait(lsn)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    assert wal.last_lsn(tmp_path) == 400
    assert len(calls) < 400  # one fsync covered several records
    assert sorted(p for _, p in wal.read_log(tmp_path)) == sorted(
        b"%d:%d" % (k, i) for k in range(8) for i in range(50)
    )


def test_sync_modes_parse_and_name_a_bad_one() -> None:
    assert str(Sync.parse("interval=10")) == "interval=10"
    assert Sync.parse("off").mode == "off"
    for bad in ("interval=0", "interval=x", "sometimes", "interval"):
        with pytest.raises(ValueError, match="bad sync mode"):
            Sync.parse(bad)


def test_dropping_segments_keeps_the_one_being_written(tmp_path: Path) -> None:
    log = Log(tmp_path, 1, Sync.parse("off"), 4096)
    for p in _payloads(200):
        log.append(p)
    n = len(wal.segments(tmp_path))
    assert log.drop_before(10**9) == n - 1
    log.append(b"more")
    log.close()
    assert list(wal.read_log(tmp_path))[-1] == (201, b"more")


@pytest.mark.parametrize(
    ("magic", "crc"),
    [(wal.MAGIC_V1, wal._crc_v1), (wal.MAGIC_V2, wal._crc)],
    ids=["zlib-crc32", "appended-crc32c"],
)
def test_segments_of_an_older_format_are_read_and_not_appended_to(
    tmp_path: Path, magic: bytes, crc
) -> None:
    # A PSOUPWL1 segment (zlib CRC-32), as servers before CRC-32C wrote them, or a
    # PSOUPWL2 one (CRC-32C, appended: no zeros ahead), as servers before preallocation.
    payloads = [b"one", b"two" * 100]
    raw = bytearray(magic)
    for lsn, p in enumerate(payloads, 1):
        raw += wal._FRAME.pack(len(p), crc(lsn, p), lsn) + p
    (tmp_path / wal.segment_name(1)).write_bytes(bytes(raw))
    log = Log(tmp_path, 3, Sync.parse("off"), 1 << 20)
    log.append(b"three")
    log.close()
    assert list(wal.read_log(tmp_path)) == [(1, b"one"), (2, b"two" * 100), (3, b"three")]
    names = [p.name for _, p in wal.segments(tmp_path)]
    assert names == [wal.segment_name(1), wal.segment_name(3)]
    assert (tmp_path / names[1]).read_bytes()[:8] == wal.MAGIC
    # Damage in the old segment is still found by its own checksum.
    raw[len(magic) + wal.FRAME_BYTES + 1] ^= 0x01
    (tmp_path / wal.segment_name(1)).write_bytes(bytes(raw))
    with pytest.raises(LogCorruptError, match="checksum"):
        list(wal.read_log(tmp_path))


def test_a_spare_left_by_a_stopped_process_is_deleted_at_start(tmp_path: Path) -> None:
    _write(tmp_path, [b"a", b"b"])
    (tmp_path / wal.SPARE).write_bytes(bytes(4096))  # killed while it was written
    log = Log(tmp_path, 3, Sync.parse("batch"), 4096)
    assert not (tmp_path / wal.SPARE).exists()
    log.wait(log.append(b"c"))
    log.close()
    assert [p for _, p in wal.read_log(tmp_path)] == [b"a", b"b", b"c"]


def test_a_spare_renamed_just_before_a_crash_is_an_empty_segment(tmp_path: Path) -> None:
    # The rotation forces the magic, then renames: a crash after it leaves the new
    # segment with no records, only zeros.
    _write(tmp_path, [b"a", b"b"], segment_bytes=1 << 20)
    (tmp_path / wal.segment_name(3)).write_bytes(wal.MAGIC + bytes(SEG - len(wal.MAGIC)))
    assert [p for _, p in wal.read_log(tmp_path)] == [b"a", b"b"]
    assert wal.last_lsn(tmp_path) == 2
    log = Log(tmp_path, 3, Sync.parse("batch"), 1 << 20)  # writes into it
    log.wait(log.append(b"c"))
    log.close()
    assert [lsn for lsn, _ in wal.read_log(tmp_path)] == [1, 2, 3]
    assert (tmp_path / wal.segment_name(3)).stat().st_size == SEG


_WRITER = """
import sys
from pathlib import Path
from psoup.storage.log import Log, Sync, last_lsn
d = Path(sys.argv[1])
log = Log(d, last_lsn(d) + 1, Sync("batch"), int(sys.argv[2]))
while True:
    lsn = log.written_lsn + 1
    log.wait(log.append(bytes([lsn % 251]) * (500 + lsn * 7919 % 3000)))
    print(lsn, int(log._size < log._alloc), flush=True)  # 1: written into zeros ahead
"""


def _payload(lsn: int) -> bytes:
    return bytes([lsn % 251]) * (500 + lsn * 7919 % 3000)  # as _WRITER writes it


def test_a_writer_killed_at_random_moves_keeps_every_acknowledged_record(
    tmp_path: Path,
) -> None:
    # A real process and a real SIGKILL, with segments of 16 KiB: a rotation every few
    # records, into spares the filler prepares meanwhile, so kills land in rotations,
    # adoptions and spares being written as well as in appends.
    import random
    import subprocess
    import sys

    rng = random.Random(45)
    acked = in_spare = 0
    for _ in range(8):
        child = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), str(16 << 10)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        for _ in range(rng.randint(1, 120)):
            lsn, spare = map(int, child.stdout.readline().split())
            acked, in_spare = max(acked, lsn), in_spare + spare
        child.kill()
        child.wait()
        child.stdout.close()
        got = list(wal.read_log(tmp_path))  # a torn last record is cut (a warning)
        assert [lsn for lsn, _ in got] == list(range(1, len(got) + 1))
        assert len(got) >= acked  # nothing acknowledged is lost
        assert all(p == _payload(lsn) for lsn, p in got)
    assert len(wal.segments(tmp_path)) > 20 and in_spare > 0  # rotations, into spares
