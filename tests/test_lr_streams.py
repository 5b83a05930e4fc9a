"""Linear Road inside the engine: the toll network as a trigger on positions, the derived
streams any client can query, and a vehicle's standing queries."""

from __future__ import annotations

import numpy as np

import psoup
from psoup.linear_road.check import run
from psoup.linear_road.network import REPORT_FIELDS
from psoup.linear_road.streams import (
    ALL_ALERTS,
    ALL_TOLLS,
    VEHICLE_QUERIES,
    balance_answer,
    install,
)


def _reports(rng: np.random.Generator, seconds: int) -> list[list[int]]:
    """Vehicles crawling through a few segments, two of them stopped side by side."""
    rows = []
    for t in range(seconds):
        for v in range(t % 30, 120, 30):
            seg = (t // 45 + v) % 6
            spd = int(rng.integers(0, 60))
            rows.append([0, t, v, spd, 0, 1 + v % 3, 0, seg, seg * 5280 + v, *[-1] * 6])
        if t % 30 == 0:
            for v in (500, 501):
                rows.append([0, t, v, 0, 0, 2, 0, 3, 3 * 5280 + 9, *[-1] * 6])
    return rows


def test_derived_streams_equal_the_oracle_and_vehicle_queries_answer() -> None:
    rows = _reports(np.random.default_rng(3), 900)
    db = psoup.connect()
    install(db)
    tolls, alerts = [], []
    db.subscribe(db.register(ALL_TOLLS), lambda res, tid: tolls.extend(res.rows))
    db.subscribe(db.register(ALL_ALERTS), lambda res, tid: alerts.extend(res.rows))
    vehicles = (1, 2, 31)
    balance = {v: db.register(VEHICLE_QUERIES["balance"], {"v": v}) for v in vehicles}
    arr = np.array([r[:9] for r in rows], dtype=np.int64)
    cuts = np.flatnonzero(np.diff(arr[:, 1])) + 1
    for a, z in zip([0, *cuts.tolist()], [*cuts.tolist(), len(arr)], strict=True):
        db.insert_columns("positions", {f: arr[a:z, i + 1] for i, f in enumerate(REPORT_FIELDS)})
    ans = run(rows, {})
    assert {(0, v, t, t, lav, toll) for v, t, lav, toll in tolls} == set(ans.tolls)
    assert {(1, t, t, v, seg) for t, v, seg in alerts} == set(ans.accidents)
    assert ans.accidents, "the scenario must make an accident"
    # A vehicle's balance answer (psoup/linear_road/vehicle.py: balance_answer over its
    # query's rows) is the oracle's, at every request time, and one the validator accepts.
    for now in range(0, rows[-1][1] + 1, 37):
        for v in vehicles:
            result = db.invoke(balance[v], now=now)
            got = balance_answer(result.column("time"), result.column("bal"), now)
            assert got == ans.balance_answer(now, v), (v, now)
            assert got in ans.balance_candidates(now, v)
