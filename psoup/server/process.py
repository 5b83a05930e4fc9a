"""Running ``psoup serve`` as a child process: for drivers and benchmarks that want the
server on its own CPU and GIL (and its resident memory measurable on its own)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from psoup.procinfo import cpu_seconds


class ServerProcess:
    """A ``psoup serve --port 0`` child; ``target`` is its HOST:PORT once started. It keeps
    its data in ``data_dir``, or in memory when that is None."""

    def __init__(self, *args: str, data_dir: Path | None = None):
        where = ["--data-dir", str(data_dir)] if data_dir is not None else ["--in-memory"]
        cmd = [sys.executable, "-m", "psoup", "serve", "--port", "0", *where, *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # "psoup serving on HOST:PORT" once ready
        if not line.startswith("psoup serving on "):
            self.proc.kill()
            raise RuntimeError(f"psoup serve did not start: {line.strip() or 'no output'}")
        self.target = line.rsplit(" ", 1)[1].strip()
        self.flight_target: str | None = None  # HOST:PORT of its Flight ingest, if asked for
        if "--flight-port" in args:
            line = self.proc.stdout.readline()  # "psoup flight ingest on HOST:PORT"
            if not line.startswith("psoup flight ingest on "):
                self.proc.kill()
                raise RuntimeError(f"psoup serve did not serve Flight: {line.strip()}")
            self.flight_target = line.rsplit(" ", 1)[1].strip()

    def _status_bytes(self, key: str) -> int:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def rss_bytes(self) -> int:
        """The server's resident memory (0 where /proc is missing)."""
        return self._status_bytes("VmRSS")

    def peak_rss_bytes(self) -> int:
        """The server's largest resident memory so far (0 where /proc is missing)."""
        return self._status_bytes("VmHWM")

    def cpu_seconds(self) -> float:
        """The server's user + system CPU seconds so far (0 where /proc is missing)."""
        return cpu_seconds(self.proc.pid)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, wait for the drain; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
