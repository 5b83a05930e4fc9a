"""``psoup serve`` and its data directory as a user meets them: the default directory is
said at start, a second server on the same directory or port refuses to start naming
what holds it, and a torn last record is dropped with a one-line warning."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import psoup
from clients import PSoupClient
from clients.errors import ResourceExhausted
from psoup.server import ServerConfig, start_server
from psoup.server.process import ServerProcess
from psoup.storage import log as wal

TIMEOUT = 60


def _serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A ``psoup serve`` that is expected to refuse to start (it would otherwise run)."""
    return subprocess.run(
        [sys.executable, "-m", "psoup", "serve", *args],
        capture_output=True, text=True, timeout=TIMEOUT, env=env,
    )  # fmt: skip


def test_the_default_directory_is_said_and_held(tmp_path: Path) -> None:
    env = {**os.environ, "PSOUP_DATA_DIR": str(tmp_path / "d")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "psoup", "serve", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().startswith("psoup serving on ")
        second = _serve("--port", "0", env=env)
        assert second.returncode == 1
        assert f"{tmp_path / 'd'} is in use by process {proc.pid}" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=TIMEOUT)
    assert f"psoup: data directory {tmp_path / 'd'} (sync batch): recovered 0 log" in err
    assert (tmp_path / "d" / "wal").is_dir()


def test_a_second_server_on_a_busy_port_refuses(tmp_path: Path) -> None:
    with ServerProcess() as srv:
        port = srv.target.rsplit(":", 1)[1]
        second = _serve("--port", port, "--in-memory")
        assert second.returncode == 1
        assert f"cannot bind 127.0.0.1:{port}" in second.stderr


def test_a_busy_flight_port_refuses_in_one_line_and_leaves_the_data_dir_free(
    tmp_path: Path,
) -> None:
    with ServerProcess("--flight-port", "0") as srv:
        port = srv.flight_target.rsplit(":", 1)[1]
        second = _serve("--port", "0", "--flight-port", port, "--data-dir", str(tmp_path / "d"))
        assert second.returncode == 1
        assert f"cannot bind 127.0.0.1:{port}" in second.stderr
        assert len(second.stderr.strip().splitlines()) <= 2, second.stderr  # its start line
        assert "Traceback" not in second.stderr
    # the failed start let the directory go: a server starts on it
    with ServerProcess(data_dir=tmp_path / "d") as again, PSoupClient(again.target) as c:
        assert c.list_streams() == []


def _killed_after(data: Path, *batches: list[tuple]) -> Path:
    """A server on ``data`` that stored ``batches`` into stream r and was SIGKILLed; its
    last log segment."""
    with ServerProcess(data_dir=data) as srv:
        with PSoupClient(srv.target, timeout=30) as c:
            c.create_stream("r", {"a": "int", "t": "int"}, time="t")
            for rows in batches:
                c.insert("r", rows)
        srv.proc.kill()
        srv.proc.wait()
    return wal.segments(data / "wal")[-1][1]


def test_a_torn_last_record_is_dropped_with_a_warning(tmp_path: Path) -> None:
    data = tmp_path / "d"
    seg = _killed_after(data, [(1, 1)], [(2, 2), (3, 3)])
    with open(seg, "r+b") as f:
        f.truncate(wal.end_of_records(seg) - 3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "psoup", "serve", "--port", "0", "--data-dir", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        target = proc.stdout.readline().rsplit(" ", 1)[1].strip()
        with PSoupClient(target, timeout=30) as c:
            assert [p["a"].tolist() for p in c.read_stream("r")] == [[1]]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=TIMEOUT)
    warning = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(warning) == 1 and warning[0].startswith(f"psoup: warning: {seg}: dropped a torn")


def test_a_damaged_log_refuses_to_start_and_says_what_to_do(tmp_path: Path) -> None:
    data = tmp_path / "d"
    seg = _killed_after(data, [(1, 1)])
    raw = bytearray(seg.read_bytes())
    raw[len(wal.MAGIC) + wal.FRAME_BYTES + 3] ^= 0x40  # inside the first record
    seg.write_bytes(bytes(raw))
    out = _serve("--port", "0", "--data-dir", str(data))
    assert out.returncode == 1
    assert "record 1 is damaged" in out.stderr and "backup" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_backup_of_a_running_server_starts_as_a_data_directory(tmp_path: Path) -> None:
    with ServerProcess(data_dir=tmp_path / "d") as srv, PSoupClient(srv.target, timeout=30) as c:
        c.create_stream("r", {"a": "int", "t": "int"}, time="t")
        c.insert("r", [(i, i) for i in range(1000)])
        h = c.register("SELECT COUNT(*), SUM(r.a) FROM r WHERE r.a > 10 BEGIN NOW - 100 END NOW")
        out = subprocess.run(
            [sys.executable, "-m", "psoup", "backup", str(tmp_path / "copy"),
             "--server", srv.target], capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert f"backed up to {tmp_path / 'copy'}" in out.stdout
        c.insert("r", [(5000, 2000)])  # after the copy: not in it
        again = subprocess.run(
            [sys.executable, "-m", "psoup", "backup", str(tmp_path / "copy"),
             "--server", srv.target], capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        assert again.returncode == 1 and "not an empty directory" in again.stderr
    with ServerProcess(data_dir=tmp_path / "copy") as srv, PSoupClient(srv.target) as c:
        res = c.invoke(h)
        assert (res.rows, res.now) == ([(101, sum(range(899, 1000)))], 999)


def test_an_in_memory_server_has_nothing_to_back_up(tmp_path: Path) -> None:
    with ServerProcess() as srv, PSoupClient(srv.target) as c:
        out = subprocess.run(
            [sys.executable, "-m", "psoup", "backup", str(tmp_path / "copy"),
             "--server", srv.target], capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        assert out.returncode == 1 and "--in-memory" in out.stderr
        assert not (tmp_path / "copy").exists()
        assert c.list_streams() == []


def test_a_full_disk_refuses_writes_keeps_reads_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = start_server(ServerConfig(port=0, data_dir=str(tmp_path / "d")))
    log = running.engine.storage.log
    real_pwritev, full = os.pwritev, threading.Event()

    def pwritev(fd, parts, offset):  # a real ENOSPC needs a full file system: same errno
        if full.is_set() and fd == log._fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwritev(fd, parts, offset)

    monkeypatch.setattr(os, "pwritev", pwritev)
    try:
        with PSoupClient(f"127.0.0.1:{running.port}", timeout=30) as c:
            c.create_stream("r", {"a": "int", "t": "int"}, time="t")
            c.insert("r", [(1, 1), (2, 2)])
            h = c.register("SELECT * FROM r BEGIN 0 END NOW")
            full.set()
            with pytest.raises(ResourceExhausted, match="is full"):
                c.insert("r", [(3, 3)])
            with pytest.raises(ResourceExhausted, match="is full"):
                c.register("SELECT r.a FROM r BEGIN NOW END NOW")
            assert c.invoke(h).rows == [(1, 1), (2, 2)]  # reads go on, the refused is absent
            full.clear()
            c.insert("r", [(4, 4)])
            assert c.invoke(h).rows == [(1, 1), (2, 2), (4, 4)]
    finally:
        running.stop()
    monkeypatch.setattr(os, "pwritev", real_pwritev)
    db = psoup.connect(tmp_path / "d")
    assert db.invoke(h).rows == [(1, 1), (2, 2), (4, 4)]
    assert len(db.queries) == 1
    db.close()


def test_a_kill_during_recovery_loses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "d"
    db = psoup.connect(data, sync="off")
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    h = db.register("SELECT COUNT(*), SUM(r.a) FROM r WHERE r.a < 500 BEGIN 0 END NOW")
    for k in range(200):  # a long log and no checkpoint: recovery takes a while
        db.insert_columns("r", {"a": [(k * 7 + i) % 1000 for i in range(1000)],
                                "t": list(range(k * 1000, (k + 1) * 1000))})  # fmt: skip
    expected = db.invoke(h).rows
    db.storage.close(checkpoint=False)
    db.close()
    cmd = [sys.executable, "-m", "psoup", "serve", "--port", "0", "--data-dir", str(data)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = data / "LOCK"
    while f"process {proc.pid} " not in lock.read_text() and proc.poll() is None:
        pass  # it holds the directory: recovery is under way
    proc.kill()
    proc.communicate(timeout=TIMEOUT)
    with ServerProcess(data_dir=data) as srv, PSoupClient(srv.target, timeout=30) as c:
        assert c.invoke(h).rows == expected
        assert c.stats()["streams"]["r"]["tuples_stored"] == 200_000
