"""A py-spy flame graph of a running process, for benchmarks' ``--profile``.

``Flame(pid, svg)`` starts ``py-spy record`` on the process (and its children: a sharded
server's Ray workers) and ``stop()`` ends it, which makes py-spy write the SVG. Only the
thread holding the interpreter lock is sampled (``--gil``): a psoup server is bound by
its GIL (docs/BENCHMARKS.md, the overload reading), and without it the graph is mostly
threads waiting in native code, which py-spy's ``--native`` counts as busy. Native
frames (numpy, gRPC's C core, protobuf) are kept where py-spy can unwind them. py-spy
needs to be allowed to read the other process's memory (ptrace): without that, or
without py-spy, ``stop()`` says why in one line and the benchmark goes on without it.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path


class Flame:
    """``py-spy record`` of ``pid`` into ``svg`` until ``stop()``; ``rate`` samples/s."""

    def __init__(self, pid: int, svg: Path, rate: int = 49, native: bool = True):
        self.svg = svg
        self.problem: str | None = None
        exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which(
            "py-spy"
        )
        self.proc: subprocess.Popen | None = None
        if exe is None:
            self.problem = "py-spy is not installed"
            return
        cmd = [exe, "record", "--pid", str(pid), "--output", str(svg), "--format",
               "flamegraph", "--rate", str(rate), "--subprocesses", "--gil"]  # fmt: skip
        if native:
            cmd.append("--native")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_sampling(self) -> bool:
        """Block until py-spy has attached and samples (it says so on stdout); False if it
        ended first (``stop()`` then says why). Attaching takes a moment, longer on a
        busy machine: what runs before it is not in the graph."""
        if self.proc is None:
            return False
        while line := self.proc.stdout.readline():
            if "Sampling process" in line:
                return True
        return False

    def stop(self, timeout: float = 120) -> Path | None:
        """End the recording; the SVG's path, or None (``problem`` says why)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        if self.svg.exists() and self.svg.stat().st_size:
            return self.svg
        lines = [ln for ln in ((out or "") + (err or "")).splitlines() if ln.strip()]
        self.problem = f"py-spy wrote no flame graph: {lines[-1] if lines else 'no output'}"
        return None
