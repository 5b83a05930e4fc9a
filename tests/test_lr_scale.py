"""Generator, driver and checker together: the driver's answers on a generated 20-minute
run of one expressway pass the independent checker (right and on time, every type).

A real ``psoup serve --linear-road`` child, the PySpark history pipeline and the
vehicles' queries over gRPC, as ``psoup bench linear-road --xways`` runs them. About five
minutes; marked ``spark``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from psoup.linear_road import check, driver, generate

pytestmark = pytest.mark.spark

SPEEDUP = 5  # passes at 20 alone (docs/BENCHMARKS.md); at 10 a loaded machine was late
DURATION = 1200


def test_the_driver_on_a_generated_run_passes_the_checker(tmp_path: Path) -> None:
    gen = generate.generate(tmp_path / "input.dat", duration=DURATION, seed=3, progress=False)
    out = tmp_path / "answers"
    summary = driver.run(gen.path, gen.history, out, SPEEDUP, progress=False)
    assert summary.missed == 0, summary.table()
    verdict = check.check(gen.path, gen.history, out)
    assert verdict.ok, verdict.table() + "\n" + verdict.problems()
    # The run exercises every answer type, an accident included.
    for kind in ("toll", "accident", "balance", "daily"):
        assert verdict.types[kind].expected > 0, kind
        assert verdict.types[kind].right == verdict.types[kind].expected, kind
    assert verdict.types["toll"].expected == summary.rows["toll"]["count"]
