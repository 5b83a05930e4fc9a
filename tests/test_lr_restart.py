"""A Linear Road run whose server is killed in the middle and restarted: a real
``psoup serve --linear-road --data-dir`` child, the PySpark history pipeline, the
driver's vehicles over gRPC. The driver replays sample20's first half, the server is
SIGKILLed and started again on its directory, and the same driver, with the same
vehicles and their handles, replays the second half against it. The strict checker
judges the whole run: every answer right (tolls and accidents made by the recovered toll
network, balances from account state kept across the kill, daily expenditure from the
history hydrated before it). About three minutes.

Whether they came on time is not asserted here: with a checkpoint every MB and an fsync
per batch, that depends on the host's disk more than on the code (a shared CI host
stalled 0.9-3.4 s and made 2% of the answers late). Being on time is asserted in memory by
test_lr_driver and test_lr_scale, and measured durable by ``psoup bench linear-road``.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from clients.psoup_client import PSoupClient
from psoup.linear_road import driver
from psoup.linear_road.check import FILES, check
from psoup.server.process import ServerProcess

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "linear-road" / "sample20"
SPEEDUP = 8
KILL_AT = 600  # simulated seconds replayed before the kill (of sample20's 1,200)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not SAMPLE.exists(), reason="no Linear Road sample"),
]


def _answers(out: Path, kind: str) -> list[list[int]]:
    with open(out / FILES[kind]) as f:
        return [list(map(int, row)) for row in csv.reader(f) if row]


def test_a_run_killed_in_the_middle_is_right_after_the_restart(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "answers"
    vehicles: dict = {}
    # A checkpoint every MB: the restart reads a checkpoint and replays the log after it.
    args = (*driver.server_args(), "--checkpoint-every", "1")
    with ServerProcess(*args, data_dir=data) as srv:
        driver.hydrate_history(SAMPLE / "tolls.dat", srv.target, tmp_path)
        with PSoupClient(srv.target, timeout=120) as client:
            first = driver.replay(
                client, SAMPLE / "input.dat", SPEEDUP, out, progress=False, until=KILL_AT,
                vehicles=vehicles,
            )  # fmt: skip
        srv.proc.kill()
        srv.proc.wait()
    # The first half's vehicles and their handles, kept by the driver across the kill.
    before = {vid: dict(v.handles) for vid, v in vehicles.items()}
    assert not first.failed
    with ServerProcess(*args, data_dir=data) as srv, PSoupClient(srv.target, timeout=120) as c:
        second = driver.replay(
            c, SAMPLE / "input.dat", SPEEDUP, out, progress=False, start=KILL_AT,
            vehicles=vehicles,
        )  # fmt: skip
    assert not second.failed, second.failed[:5]
    (out / driver.CONVENTION_FILE).write_text("validator\n")

    verdict = check(SAMPLE / "input.dat", SAMPLE / "tolls.dat", out)
    for t in verdict.types.values():
        assert t.expected > 0 and t.right == t.expected == t.received, (
            verdict.table() + "\n" + verdict.problems()
        )
    # Each part answered its own half, and the answers after the restart needed what was
    # kept across the kill: balances last updated before it, through handles registered
    # before it, and the history hydrated before it.
    for kind in ("toll", "balance", "daily"):
        times = [r[2 if kind == "toll" else 1] for r in _answers(out, kind)]
        assert min(times) < KILL_AT <= max(times), kind
    later = [r for r in _answers(out, "balance") if r[1] >= KILL_AT]
    assert any(r[4] < KILL_AT and r[5] > 0 for r in later)  # lost state would say (t, 0)
    assert sum(1 for r in _answers(out, "daily") if r[1] >= KILL_AT and r[4] > 0) > 10
    assert sum(len(h) for h in before.values()) > 100
    assert all(vehicles[vid].handles.items() >= h.items() for vid, h in before.items())
