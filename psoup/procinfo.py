"""Facts about this process, and its machine, that servers, shards and drivers report."""

from __future__ import annotations

import os


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
