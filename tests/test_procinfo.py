"""psoup.procinfo: the machine's steal time, read from /proc/stat's first line, and its
disks' writes, read from /proc/diskstats."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from psoup.procinfo import DiskCounts, disk_counts, reported_kib, steal_seconds

TICK = os.sysconf("SC_CLK_TCK")


def test_steal_is_the_eighth_count_and_the_total_sums_the_first_eight() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice (guest is within user)
    stat = "cpu  1000 20 300 9000 40 5 6 77 400 9\ncpu0 500 10 150 4500 20 2 3 40 200 4\n"
    steal, total = steal_seconds(stat)
    assert steal == pytest.approx(77 / TICK)
    assert total == pytest.approx((1000 + 20 + 300 + 9000 + 40 + 5 + 6 + 77) / TICK)


@pytest.mark.parametrize("stat", ["", "intr 1 2 3\n", "cpu  1 2 x 4 5 6 7 8\n", "cpu 1 2\n"])
def test_anything_but_a_cpu_line_reads_as_no_time(stat: str) -> None:
    assert steal_seconds(stat) == (0.0, 0.0)


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="no /proc on this system")
def test_this_machines_counts_grow_and_steal_is_a_part_of_the_total() -> None:
    steal0, total0 = steal_seconds()
    sum(i * i for i in range(200_000))  # some CPU time passes
    steal1, total1 = steal_seconds()
    assert total0 > 0 and total1 >= total0
    assert 0 <= steal0 <= total0 and steal0 <= steal1 <= total1


def test_reported_memory_reads_the_kernels_count_or_none(tmp_path: Path) -> None:
    counted = tmp_path / "reported_kib"
    counted.write_text("460915192\n")
    assert reported_kib(str(counted)) == 460_915_192
    counted.write_text("not a number\n")
    assert reported_kib(str(counted)) is None
    assert reported_kib(str(tmp_path / "absent")) is None
    here = reported_kib()  # this machine's kernel: a count, or none kept
    assert here is None or here >= 0


DISKSTATS = """\
   7       0 loop0 10 0 80 3 50 0 400 900 0 5 6 0 0 0 0 0 0
 254       0 vda 309205 29286 17146042 9497598 2908739 579497 243006448 1153454 0 590584 1
 254       1 vda1 100 0 800 30 2000 0 16000 700 0 40 730
 253       0 zram0 5 0 40 0 7 0 56 1 0 1 1
 259       0 nvme0n1 10 0 80 5 300 2 2400 45 0 50 50
"""


def test_disk_counts_sum_the_whole_disks_writes_their_ms_and_busy_ms() -> None:
    # Fields: major minor name, then reads, merged, sectors, ms, writes, merged, sectors,
    # ms, in flight, ms doing I/O: the 8th, 11th and 13th of the line. Partitions (vda1)
    # and devices not named are left out, so a write is not counted twice.
    both = disk_counts(DISKSTATS, {"vda", "nvme0n1"})
    assert both == DiskCounts(2_908_739 + 300, 1_153_454 + 45, 590_584 + 50)
    assert disk_counts(DISKSTATS, {"vda"}) == (2_908_739, 1_153_454, 590_584)
    assert disk_counts("", {"vda"}) == (0, 0, 0)
    assert disk_counts(" 254 0 vda 1 2 3 4 x 6 7 8 9 10 11\n", {"vda"}) == (0, 0, 0)


@pytest.mark.skipif(not Path("/proc/diskstats").exists(), reason="no /proc on this system")
def test_this_machines_disks_are_found_and_their_counts_only_grow(tmp_path: Path) -> None:
    before = disk_counts()
    with open(tmp_path / "f", "wb") as f:  # a write forced to the disk
        f.write(b"x" * 4096)
        f.flush()
        os.fsync(f.fileno())
    after = disk_counts()
    assert all(a >= b >= 0 for a, b in zip(after, before, strict=True))
