"""The vectorised toll network against the validator's answers and the brute-force oracle.

Boundary scenarios are built report by report; each is checked both against a stated
expectation and against the checker's plain implementation (psoup/linear_road/check.py),
so the two implementations pin each other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from psoup.linear_road.check import run
from psoup.linear_road.network import REPORT_FIELDS, TollNetwork

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "linear-road" / "sample20"


def feed(rows: list[list[int]]) -> tuple[set, set, list]:
    """Run the network over input rows (spec's 15 fields, type 0 used), second by second."""
    net = TollNetwork()
    rows = sorted(rows, key=lambda r: r[1])  # the input's order: by time, stable
    rep = np.array([r[:9] for r in rows if r[0] == 0], dtype=np.int64).reshape(-1, 9)
    tolls, alerts, assessed = set(), set(), []
    times = rep[:, 1]
    cuts = np.flatnonzero(np.diff(times)) + 1
    for a, z in zip([0, *cuts.tolist()], [*cuts.tolist(), len(times)], strict=True):
        out = net.process({f: rep[a:z, i + 1] for i, f in enumerate(REPORT_FIELDS)})
        o = out.tolls
        for t, v, lav, toll in zip(o["time"], o["vid"], o["lav"], o["toll"], strict=True):
            tolls.add((0, int(v), int(t), int(t), int(lav), int(toll)))
        o = out.alerts
        for t, v, s in zip(o["time"], o["vid"], o["seg"], strict=True):
            alerts.add((1, int(t), int(t), int(v), int(s)))
        o = out.assessments
        assessed += [
            (int(t), int(v), int(a)) for t, v, a in zip(o["time"], o["vid"], o["toll"], strict=True)
        ]
    return tolls, alerts, sorted(assessed)


def agree_with_oracle(rows: list[list[int]]) -> tuple[set, set, list]:
    tolls, alerts, assessed = feed(rows)
    ans = run(sorted(rows, key=lambda r: r[1]), {})
    assert tolls == set(ans.tolls)
    assert alerts == set(ans.accidents)
    assert assessed == sorted((t, v, a) for v, lst in ans.assessed.items() for t, a in lst)
    return tolls, alerts, assessed


def report(t, vid, spd, seg, lane=1, pos=None, xway=0, direction=0) -> list[int]:
    pos = seg * 5280 + 100 if pos is None else pos
    return [0, t, vid, spd, xway, lane, direction, seg, pos, -1, -1, -1, -1, -1, -1]


def congestion(n: int, spd: int, seg: int = 10, minute: int = 1) -> list[list[int]]:
    """``n`` vehicles reporting from ``seg`` at speed ``spd`` during ``minute``."""
    t = (minute - 1) * 60
    return [report(t + k % 30, 1000 + k, spd, seg) for k in range(n)]


def toll_of(tolls: set, vid: int) -> tuple[int, int]:
    (row,) = [r for r in tolls if r[1] == vid]
    return row[4], row[5]


@pytest.mark.parametrize("n, toll", [(50, 0), (51, 2), (53, 18)])
def test_exactly_50_vehicles_is_toll_free(n: int, toll: int) -> None:
    rows = [*congestion(n, 30), report(65, 1, 30, 10)]
    tolls, _, _ = agree_with_oracle(rows)
    assert toll_of(tolls, 1) == (30, toll)


@pytest.mark.parametrize("spd, toll", [(40, 0), (39, 2)])
def test_lav_exactly_40_is_toll_free(spd: int, toll: int) -> None:
    rows = [*congestion(51, spd), report(65, 1, spd, 10)]
    tolls, _, _ = agree_with_oracle(rows)
    assert toll_of(tolls, 1) == (spd, toll)


def test_lav_is_minus_one_without_reports_and_averages_vehicle_means() -> None:
    rows = [report(0, 7, 10, 3), report(30, 7, 30, 3), report(10, 8, 50, 3), report(70, 1, 0, 3)]
    tolls, _, _ = agree_with_oracle(rows)
    assert toll_of(tolls, 7)[0] == -1  # first report: no earlier minute
    assert toll_of(tolls, 1)[0] == 35  # mean of vehicle means (20 and 50), not of reports


def _accident(seg: int, minute: int = 2, reports: int = 4) -> list[list[int]]:
    """Two vehicles stopped at one place of ``seg``, reporting from minute ``minute``."""
    t0 = (minute - 1) * 60
    pos = seg * 5280 + 7
    return [
        report(t0 + 30 * k + dt, vid, 0, seg, lane=2, pos=pos)
        for k in range(reports)
        for vid, dt in ((501, 0), (502, 1))
    ]


@pytest.mark.parametrize("upstream, alerted", [(0, True), (4, True), (5, False)])
def test_accidents_reach_4_segments_upstream(upstream: int, alerted: bool) -> None:
    rows = _accident(20) + congestion(60, 10, seg=20 - upstream, minute=4)
    rows += [report(240, 1, 10, 20 - upstream)]
    tolls, alerts, _ = agree_with_oracle(rows)
    assert ((1, 240, 240, 1, 20) in alerts) is alerted
    assert (toll_of(tolls, 1)[1] == 0) is alerted  # an accident nearby suppresses the toll


def test_accident_alerts_start_the_minute_after_detection_and_stop_after_clearing() -> None:
    rows = _accident(20, minute=1, reports=8)  # stopped from t=91 (minute 2)
    rows += [report(240, 501, 50, 21, lane=2)]  # one of them moves at minute 5: cleared
    rows += [report(100, 1, 50, 19)]  # minute 2 looks at minute 1: nothing yet
    rows += [report(150, 2, 50, 19)]  # minute 3 looks at minute 2: alerted
    rows += [report(330, 4, 50, 19)]  # minute 6 looks at minute 5: still alerted
    rows += [report(360, 5, 50, 19)]  # minute 7 looks at minute 6: cleared
    _, alerts, _ = agree_with_oracle(sorted(rows, key=lambda r: r[1]))
    assert {a[3] for a in alerts} == {2, 4}


def test_exit_lane_reports_get_no_alert_and_exiting_is_not_charged() -> None:
    rows = congestion(55, 10, seg=10, minute=1) + congestion(55, 10, seg=11, minute=1)
    rows += [report(65, 1, 10, 10), report(95, 1, 10, 11), report(125, 1, 10, 11, lane=4)]
    tolls, _, assessed = agree_with_oracle(rows)
    assert [r[2] for r in tolls if r[1] == 1] == [65, 95]  # not the exit-lane report
    assert [a for a in assessed if a[1] == 1] == [(95, 1, 50)]  # seg 11's toll never charged


def test_reentering_vehicle_and_first_report() -> None:
    rows = [report(0, 1, 50, 3, lane=0), report(30, 1, 50, 3), report(60, 1, 50, 4, lane=4)]
    rows += [report(600, 1, 50, 4, lane=0), report(630, 1, 50, 5)]  # a later trip
    tolls, _, _ = agree_with_oracle(rows)
    # First report (entry ramp) alerted; same segment not; exit lane not; re-entry into
    # the segment it exited from is not a new segment; the next one is.
    assert sorted(r[2] for r in tolls if r[1] == 1) == [0, 630]


@pytest.mark.skipif(not SAMPLE.exists(), reason="no Linear Road sample")
def test_sample20_matches_the_validator() -> None:
    def rows_of(name: str) -> list[list[int]]:
        with open(SAMPLE / name) as f:
            return [list(map(int, line.split(","))) for line in f if line.strip()]

    tolls, alerts, _ = feed(rows_of("input.dat"))
    assert tolls == {tuple(r) for r in rows_of("expected/tollalerts.csv")}
    assert alerts == {tuple(r) for r in rows_of("expected/accidentalerts.csv")}
