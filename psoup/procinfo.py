"""Facts about this process, and its machine, that servers, shards and drivers report."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple


def rss_bytes() -> int:
    """Resident set size of this process (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds process ``pid`` has used so far, its children not
    counted (0 where /proc is missing or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def steal_seconds(stat: str | None = None) -> tuple[float, float]:
    """(steal, total): CPU seconds the hypervisor took from this machine's virtual CPUs
    while they had work ("steal" in /proc/stat) and all CPU seconds counted, summed over
    the CPUs since boot; (0, 0) where /proc is missing. ``stat``: the text of /proc/stat
    (read when not given). A share of steal between two readings is a virtual machine
    stalled by its host: every process on it late at once, none of them busy."""
    try:
        if stat is None:
            with open("/proc/stat") as f:
                stat = f.readline()
        fields = stat.split("\n", 1)[0].split()
        if fields[0] != "cpu":
            return 0.0, 0.0
        # user nice system idle iowait irq softirq steal [guest guest_nice: within user]
        ticks = [int(x) for x in fields[1:9]]
        tick = os.sysconf("SC_CLK_TCK")
        return ticks[7] / tick, sum(ticks) / tick
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0


class DiskCounts(NamedTuple):
    """Counts of this machine's disks since boot (/proc/diskstats), summed over them."""

    writes: int  # writes completed
    write_ms: int  # ms the completed writes took, each from queued to done
    busy_ms: int  # ms during which any request was in flight


def disk_counts(diskstats: str | None = None, disks: set[str] | None = None) -> DiskCounts:
    """``DiskCounts`` from /proc/diskstats (read when ``diskstats`` is not given) for the
    whole disks in /sys/block (``disks`` when given) that are not loop, RAM or zram
    devices; zeros where /proc is missing. Between two readings: ms per write is how long
    a write took on average, and busy ms over wall ms the share of the time the disks
    had work. A disk its host stalls (a virtual machine's) shows both high, with few
    bytes written: every ``fdatasync`` waits behind it. A stall that completes no write
    shows in busy time alone."""
    try:
        if disks is None:
            disks = {
                d for d in os.listdir("/sys/block") if not d.startswith(("loop", "ram", "zram"))
            }
        if diskstats is None:
            with open("/proc/diskstats") as f:
                diskstats = f.read()
        writes = ms = busy = 0
        for line in diskstats.splitlines():
            fields = line.split()
            # major minor name | reads merged sectors ms | writes merged sectors ms |
            # in flight, ms doing I/O, ...
            if len(fields) >= 13 and fields[2] in disks:
                writes += int(fields[7])
                ms += int(fields[10])
                busy += int(fields[12])
        return DiskCounts(writes, ms, busy)
    except (OSError, ValueError):
        return DiskCounts(0, 0, 0)


#: Where this machine's kernel counts the free memory it has handed back to its host
#: (free page reporting, on a virtual machine whose host takes freed pages back).
REPORTED_KIB = "/sys/module/page_reporting/parameters/reported_kib"


def reported_kib(path: str = REPORTED_KIB) -> int | None:
    """KiB of free memory this virtual machine has reported to its host since boot, or
    None where the kernel does not count it. A host that takes such memory back does the
    work on the machine's own CPUs' time: while gigabytes just freed are being reported,
    every process of the machine loses a share of its CPU (steal, above)."""
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def settle_reporting(
    quiet: float = 10.0,
    limit: float = 120.0,
    poll: float = 0.25,
    read: Callable[[], int | None] = reported_kib,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[float, int]:
    """Wait until this virtual machine has handed the memory freed so far back to its
    host: until its count of reported memory (``reported_kib``) has not grown
    for ``quiet`` seconds, or ``limit`` seconds have passed. Returns (seconds waited, KiB
    reported meanwhile); (0, 0) at once where the kernel does not count it.

    Why: on the Firecracker guests these benchmarks run on, the kernel reports freed
    memory to the host ~2 s after it is freed, in passes 2 s apart, and the host's work
    on it is taken from the guest's CPUs (10-100% steal in bursts). A Spark job that has
    just ended frees ~4 GB: ~20 s of such passes, which a Linear Road replay started
    right after runs into. ``quiet`` is well over the 2 s between passes: once the
    reporting paused 7 s between two passes of ~512 MiB, and 3.2 GB more came after a
    wait of 5 s had ended."""
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
