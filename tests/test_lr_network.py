"""The vectorised toll network against the validator's answers and the brute-force oracle.

Boundary scenarios are built report by report; each is checked both against a stated
expectation and against the checker's plain implementation (psoup/linear_road/check.py),
so the two implementations pin each other.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from psoup.linear_road.check import run
from psoup.linear_road.network import REPORT_FIELDS, TollNetwork

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "linear-road" / "sample20"


def feed(rows: list[list[int]], every_crossing: bool = False) -> tuple[set, set, list]:
    """Run the network over input rows (spec's 15 fields, type 0 used), second by second.
    Returns the toll alerts, accident alerts and charges; ``feed.balances`` keeps the
    balance rows (vid -> [(time, bal)])."""
    net = TollNetwork(every_crossing=every_crossing)
    feed.balances = {}
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
        o = out.balances
        for t, v, b in zip(o["time"], o["vid"], o["bal"], strict=True):
            feed.balances.setdefault(int(v), []).append((int(t), int(b)))
    return tolls, alerts, sorted(assessed)


def agree_with_oracle(rows: list[list[int]], every_crossing: bool = False) -> tuple[set, set, list]:
    tolls, alerts, assessed = feed(rows, every_crossing)
    ans = run(sorted(rows, key=lambda r: r[1]), {}, every_crossing)
    assert tolls == set(ans.tolls)
    assert alerts == set(ans.accidents)
    assert assessed == sorted((t, v, a) for v, lst in ans.assessed.items() for t, a in lst)
    oracle_balances = {v: list(zip(*tb, strict=True)) for v, tb in ans.alerts_of.items()}
    assert feed.balances == oracle_balances
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
    rows = _accident(20, reports=6) + congestion(60, 10, seg=20 - upstream, minute=4)
    rows += [report(240, 1, 10, 20 - upstream)]
    tolls, alerts, _ = agree_with_oracle(rows)
    assert ((1, 240, 240, 1, 20) in alerts) is alerted
    assert (toll_of(tolls, 1)[1] == 0) is alerted  # an accident nearby suppresses the toll


def test_accident_alerts_start_the_minute_after_detection_and_end_at_its_last_minute_plus_1():
    rows = _accident(20, minute=1, reports=8)  # stopped from t=91 (minute 2)
    rows += [report(240, 501, 50, 21, lane=2)]  # one of them moves at 240: last seen at 210
    rows += [report(100, 1, 50, 19)]  # minute 2 looks at minute 1: nothing yet
    rows += [report(150, 2, 50, 19)]  # minute 3 looks at minute 2: alerted
    rows += [report(290, 3, 50, 19)]  # minute 5 looks at minute 4 (the last, L): alerted
    rows += [report(330, 4, 50, 19)]  # minute 6 looks at minute 5: over (L + 1 = 5)
    _, alerts, _ = agree_with_oracle(sorted(rows, key=lambda r: r[1]))
    assert {a[3] for a in alerts} == {2, 3}


def test_an_accident_whose_vehicles_vanish_ends_with_their_last_report() -> None:
    rows = _accident(20, minute=1, reports=6)  # last stopped reports at 150 (minute 3)
    rows += [report(200, 2, 50, 19), report(230, 3, 50, 19), report(250, 4, 50, 19)]
    _, alerts, _ = agree_with_oracle(sorted(rows, key=lambda r: r[1]))
    assert {a[3] for a in alerts} == {2, 3}  # minute 4 looks at 3: alerted; 5 at 4: not


def test_accidents_at_one_place_merge_in_the_oracle_only() -> None:
    """The validator merges the accidents at one (dir, seg, pos) into one interval over
    the whole run, so it alerts between them: at minute 8 because of an accident detected
    at minute 12. A real-time network cannot know that then; it alerts for each accident
    in its own interval (the generator never puts two accidents at one place)."""
    first = _accident(20, minute=1, reports=5)  # minutes 2..3
    second = [[r[0], r[1] + 600, r[2] + 10, *r[3:]] for r in first]  # the same place later
    rows = sorted(first + second + [report(420, 7, 50, 19)], key=lambda r: r[1])
    _, alerts, _ = feed(rows)
    oracle = set(run(rows, {}).accidents)
    assert (1, 420, 420, 7, 20) in oracle - alerts
    assert alerts <= oracle


def test_exit_lane_reports_get_no_alert_and_exiting_is_not_charged() -> None:
    rows = congestion(55, 10, seg=10, minute=1) + congestion(55, 10, seg=11, minute=1)
    rows += [report(65, 1, 10, 10), report(95, 1, 10, 11), report(125, 1, 10, 11, lane=4)]
    tolls, _, assessed = agree_with_oracle(rows)
    assert [r[2] for r in tolls if r[1] == 1] == [65, 95]  # not the exit-lane report
    assert [a for a in assessed if a[1] == 1] == [(95, 1, 50)]  # seg 11's toll never charged


@pytest.mark.parametrize("every_crossing, alerted", [(False, [0, 600, 630]), (True, [0, 630])])
def test_reentering_vehicle_and_first_report(every_crossing: bool, alerted: list[int]) -> None:
    rows = [report(0, 1, 50, 3, lane=0), report(30, 1, 50, 3), report(60, 1, 50, 4, lane=4)]
    rows += [report(600, 1, 50, 4, lane=0), report(630, 1, 50, 5)]  # a later trip
    tolls, _, _ = agree_with_oracle(rows, every_crossing)
    # First report (entry ramp) alerted; same segment not; exit lane not. Re-entering
    # where it exited: the validator alerts (no non-exit report from segment 4 yet); the
    # spec's reading does not (the segment did not change).
    assert sorted(r[2] for r in tolls if r[1] == 1) == alerted


@pytest.mark.parametrize("every_crossing", [False, True])
def test_a_second_trip_through_used_segments(every_crossing: bool) -> None:
    """The validator alerts (and so charges) once per vehicle, direction and segment for
    the whole run; a trip's last toll is charged at the next alert, on a later trip."""
    trip = [report(t, 1, 10, 10 + i) for i, t in enumerate(range(60, 181, 30))]  # segs 10..14
    exit_ = report(210, 1, 10, 14, lane=4)
    again = [report(t + 600, 1, 10, 10 + i) for i, t in enumerate(range(60, 241, 30))]  # ..16
    busy = [r for seg in range(10, 17) for r in congestion(55, 10, seg=seg, minute=1)]
    busy += [
        r
        for seg in range(10, 17)
        for m in (2, 3, 11, 12, 13, 14)
        for r in congestion(55, 10, seg=seg, minute=m)
    ]
    tolls, _, assessed = agree_with_oracle(busy + trip + [exit_] + again, every_crossing)
    mine = sorted(r[2] for r in tolls if r[1] == 1)
    if every_crossing:
        assert mine == [60, 90, 120, 150, 180, 660, 690, 720, 750, 780, 810, 840]
    else:
        assert mine == [60, 90, 120, 150, 180, 810, 840]  # only segments 15 and 16 again
    charged = [a for a in assessed if a[1] == 1]
    # Charged at each later alert; the toll of seg 14 (the trip's last) at the next trip's
    # first alert, not when exiting.
    assert [a[0] for a in charged] == mine[1 : len(charged) + 1]
    assert 210 not in [a[0] for a in charged]


@pytest.mark.skipif(not SAMPLE.exists(), reason="no Linear Road sample")
def test_sample20_matches_the_validator() -> None:
    def rows_of(name: str) -> list[list[int]]:
        with open(SAMPLE / name) as f:
            return [list(map(int, line.split(","))) for line in f if line.strip()]

    tolls, alerts, _ = feed(rows_of("input.dat"))
    assert tolls == {tuple(r) for r in rows_of("expected/tollalerts.csv")}
    assert alerts == {tuple(r) for r in rows_of("expected/accidentalerts.csv")}


def _crowd(seconds: int, vehicles: int, seed: int) -> list[np.ndarray]:
    """Per second, the reports (columns REPORT_FIELDS) of ``vehicles`` crawling through
    six segments, more of them on the road as time goes on (the slot arrays grow), and
    two stopped side by side (an accident)."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(seconds):
        v = np.arange(t % 30, min(vehicles, 5 * (t + 1)), 30, dtype=np.int64)
        seg = (t // 45 + v) % 6
        rows = [np.full(len(v), t), v, rng.integers(0, 60, len(v)), np.zeros(len(v), int),
                1 + v % 3, np.zeros(len(v), int), seg, seg * 5280 + v % 5000]  # fmt: skip
        if t % 30 == 0:
            stop = np.array([vehicles, vehicles + 1])
            rows = [np.concatenate((c, x)) for c, x in zip(rows, [
                [t, t], stop, [0, 0], [0, 0], [2, 2], [0, 0], [3, 3], [3 * 5280 + 9] * 2
            ], strict=True)]  # fmt: skip
        out.append(dict(zip(REPORT_FIELDS, (np.asarray(c, dtype=np.int64) for c in rows),
                            strict=True)))  # fmt: skip
    return out


def _same_outputs(a, b) -> None:
    for kind in ("tolls", "alerts", "assessments", "balances"):
        x, y = getattr(a, kind), getattr(b, kind)
        assert x.keys() == y.keys()
        for k in x:
            assert np.array_equal(x[k], y[k]), (kind, k)


def test_a_restored_snapshot_runs_on_as_the_network_did() -> None:
    """A network restored from a snapshot (its parts joined, as a checkpoint writes them)
    derives the same rows as the network it was taken from, from then on; the parts
    stay as they were while that network runs on and grows (the writer reads them
    later); a state pickled whole, as checkpoints before parts held it, restores too."""
    seconds = _crowd(900, 3000, seed=5)
    net = TollNetwork()
    for batch in seconds[:400]:
        net.process(batch)
    cap = len(net._last_seg)
    parts = net.snapshot()
    frozen = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
    old = pickle.dumps({k: v for k, v in net.__dict__.items() if not k.startswith("_shadow")})
    ahead = [net.process(batch) for batch in seconds[400:]]
    assert len(net._last_seg) > cap  # it grew after the snapshot
    assert b"".join(bytes(memoryview(p).cast("B")) for p in parts) == frozen
    assert any(len(o.tolls["vid"]) for o in ahead) and any(len(o.alerts["vid"]) for o in ahead)
    for blob in (frozen, old):
        back = TollNetwork()
        back.restore(blob)
        for batch, want in zip(seconds[400:], ahead, strict=True):
            _same_outputs(back.process(batch), want)
    # A second snapshot after growing reuses nothing stale: it restores the grown network.
    again = TollNetwork()
    again.restore(b"".join(bytes(memoryview(p).cast("B")) for p in net.snapshot()))
    more = _crowd(960, 3000, seed=6)[900:]
    for batch in more:
        _same_outputs(again.process(batch), net.process(batch))


def test_a_snapshot_after_the_arrays_grew_copies_into_memory_touched_before() -> None:
    """The vehicle arrays' growth prepares the next snapshot's copies at the new length,
    off the caller's thread: the snapshot then copies into them and allocates none (memory
    touched the first time is what made a checkpoint hold the engine ~80 ms)."""
    from psoup.linear_road.network import _VEHICLE_ARRAYS

    net = TollNetwork()
    seconds = _crowd(700, 3000, seed=7)
    for batch in seconds[:200]:
        net.process(batch)
    net.snapshot()
    cap = len(net._last_seg)
    for batch in seconds[200:]:
        net.process(batch)
    assert len(net._last_seg) > cap  # grew since the snapshot
    net._shadow_ready.join()
    ready = {name: net._shadow[name] for name in _VEHICLE_ARRAYS}
    assert all(len(ready[name]) >= len(getattr(net, name)) for name in _VEHICLE_ARRAYS)
    parts = net.snapshot()[2:]
    for name, part in zip(_VEHICLE_ARRAYS, parts, strict=True):
        assert part.base is ready[name] or part is ready[name], name
        assert net._shadow[name] is ready[name], name
    back = TollNetwork()
    back.restore(b"".join(bytes(memoryview(p).cast("B")) for p in net.snapshot()))
    for name in _VEHICLE_ARRAYS:
        n = len(net._vids) if name != "_slot_of" else len(net._slot_of)
        assert np.array_equal(getattr(back, name)[:n], getattr(net, name)[:n]), name


def test_the_vehicle_arrays_grow_into_arrays_made_ahead() -> None:
    """Three quarters full, the per-slot arrays' next, longer ones are made in a thread
    of their own; the growth then copies into them (no fresh memory under the caller's
    lock), and the network answers as one that grew the plain way."""
    from psoup.linear_road import network

    net, plain = TollNetwork(), TollNetwork()
    plain._ahead = lambda names, n: None  # grows the plain way: a new array each time
    seconds = _crowd(900, 3000, seed=8)
    grew = 0
    for batch in seconds:
        cap = len(net._last_seg)
        if net._shadow_ahead is not None:
            net._shadow_ahead.join()  # made before the batch that needs them
        spare = dict(net._shadow_spare)
        _same_outputs(net.process(batch), plain.process(batch))
        if len(net._last_seg) > cap and "_last_seg" in spare:
            grew += 1
            for name in network._SLOT_ARRAYS:
                assert getattr(net, name) is spare[name], name
    assert grew >= 2
