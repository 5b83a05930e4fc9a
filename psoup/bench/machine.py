"""The machine a benchmark runs on: a one-line description for tables and reports, a CPU
hog to make it busy, and a wait for it to settle."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

from psoup import procinfo


def describe() -> str:
    """CPU model, cores, memory, OS, Python and numpy versions, as one line."""
    import numpy as np

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{cpu}, {cores} cores{mem}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )


@contextlib.contextmanager
def busy_loop() -> Iterator[subprocess.Popen]:
    """A CPU hog for the block: a child process spinning in a loop (one core's worth),
    ended when the block ends. For benchmarks that must hold up on a busy machine."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def settle_reporting(
    quiet: float = 5.0,
    limit: float = 120.0,
    poll: float = 0.25,
    read: Callable[[], int | None] = procinfo.reported_kib,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[float, int]:
    """Wait until this virtual machine has handed the memory freed so far back to its
    host: until its count of reported memory (``procinfo.reported_kib``) has not grown
    for ``quiet`` seconds, or ``limit`` seconds have passed. Returns (seconds waited, KiB
    reported meanwhile); (0, 0) at once where the kernel does not count it.

    Why: on the Firecracker guests these benchmarks run on, the kernel reports freed
    memory to the host ~2 s after it is freed, in passes 2 s apart, and the host's work
    on it is taken from the guest's CPUs (10-100% steal in bursts). A Spark job that has
    just ended frees ~4 GB: ~20 s of such passes, which a Linear Road replay started
    right after runs into. ``quiet`` is longer than the 2 s between passes."""
    first = read()
    if first is None:
        return 0.0, 0
    start = last_change = clock()
    last = first
    while (now := clock()) - last_change < quiet and now - start < limit:
        sleep(poll)
        if (seen := read()) is not None and seen != last:
            last, last_change = seen, clock()
    return clock() - start, last - first
