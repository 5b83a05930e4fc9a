"""A one-line description of the machine a benchmark ran on, for tables and reports."""

from __future__ import annotations

import contextlib
import os
import platform
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator


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
    trips = wakeup_round_trips()
    woken = (
        f", a thread hand-off and back {trips[0]:.0f} µs across CPUs, {trips[1]:.0f} on one"
        if trips
        else ""
    )
    return (
        f"{cpu}, {cores} cores{mem}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}{woken}"
    )


def wakeup_round_trips(n: int = 2000) -> tuple[float, float] | None:
    """``(across, same)``: the median µs of ``n`` round trips of a value between two
    threads (a queue each way, each side woken by the other), with the threads on two
    CPUs and on one; None with fewer than two CPUs to use. A server hands each call
    from thread to thread and process to process several times, so this cost, which
    virtual machines differ in by 5x (waking an idle virtual CPU goes through the
    host), weighs in every figure measured through the server. ~0.2 s."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return _round_trip_us(n, cpus[0], cpus[1]), _round_trip_us(n, cpus[0], cpus[0])


def _round_trip_us(n: int, mine: int, theirs: int) -> float:
    there: queue.SimpleQueue = queue.SimpleQueue()
    back: queue.SimpleQueue = queue.SimpleQueue()

    def echo() -> None:
        os.sched_setaffinity(0, {theirs})
        while (item := there.get()) is not None:
            back.put(item)

    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {mine})
    peer = threading.Thread(target=echo, daemon=True)
    peer.start()
    try:
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            there.put(i)
            back.get()
            times.append(time.perf_counter() - t0)
    finally:
        there.put(None)
        peer.join()
        os.sched_setaffinity(0, before)
    times.sort()
    return 1e6 * times[n // 2]


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
