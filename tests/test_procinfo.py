"""psoup.procinfo: the machine's steal time, read from /proc/stat's first line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from psoup.procinfo import reported_kib, steal_seconds

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
