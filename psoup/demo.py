"""``psoup demo``: the embedded engine end to end on generated sensor readings.

Creates a stream, registers standing queries of each kind (selection, aggregate with
GROUP BY, self-join; sliding and landmark windows), ingests batches while the queries'
results are maintained, then invokes every query and prints what it returns.
"""

from __future__ import annotations

import time

import numpy as np
from tqdm import tqdm

import psoup

QUERIES = {
    "hot readings, last 60 s": (
        "SELECT sensor, temp, t FROM readings WHERE temp >= :hot BEGIN NOW - 60 END NOW",
        {"hot": 38},
    ),
    "sensor 3, last hour": (
        "SELECT COUNT(*), AVG(temp), MAX(temp) FROM readings WHERE sensor = 3 "
        "BEGIN NOW - 3599 END NOW",
        {},
    ),
    "per-sensor stats, last 5 min": (
        "SELECT sensor, COUNT(*), MIN(temp), MAX(temp) FROM readings GROUP BY sensor "
        "BEGIN NOW - 300 END NOW",
        {},
    ),
    "sensor pairs both hot within 10 s": (
        "SELECT x.sensor, y.sensor, x.t, y.t FROM readings x, readings y "
        "WHERE x.temp >= 37 AND y.temp >= 37 AND x.sensor < y.sensor "
        "AND x.t >= y.t - 2 AND x.t <= y.t + 2 "
        "BEGIN NOW - 10 END NOW",
        {},
    ),
}


def run(
    seconds: int = 7200, sensors: int = 64, seed: int = 1, strategy: str = "psoup-p", show: int = 8
) -> None:
    """Ingest ``seconds`` of readings from ``sensors`` sensors and print every query's result."""
    rng = np.random.default_rng(seed)
    db = psoup.connect(strategy=strategy)
    db.create_stream(
        "readings", {"sensor": "int", "temp": "float", "t": "int"}, time="t", max_window=5400
    )
    handles = {name: db.register(text, params=params) for name, (text, params) in QUERIES.items()}
    start = time.perf_counter()
    batch_seconds = 60
    for t0 in tqdm(range(0, seconds, batch_seconds), desc="ingest", unit="batch"):
        t = np.repeat(np.arange(t0, t0 + batch_seconds), sensors)
        sensor = np.tile(np.arange(sensors), batch_seconds)
        temp = np.round(30 + 5 * np.sin(t / 600 + sensor) + rng.normal(0, 2, len(t)), 1)
        db.insert_columns("readings", {"sensor": sensor, "temp": temp, "t": t})
    secs = time.perf_counter() - start
    stats = db.stats()
    tuples = stats["streams"]["readings"]["tuples_ingested"]
    print(
        f"\ningested {tuples:,} readings in {secs:.2f} s ({tuples / secs:,.0f} tuples/s), "
        f"{stats['matches_marked']:,} matches marked, strategy {strategy}, NOW = {seconds - 1}\n"
    )
    for name, h in handles.items():
        res = db.invoke(h)
        print(f"{name}  [{h[:8]}]  {len(res.rows)} row(s)")
        print("  " + " | ".join(res.columns))
        for row in res.rows[:show]:
            print("  " + " | ".join(_cell(v) for v in row))
        if len(res.rows) > show:
            print(f"  ... {len(res.rows) - show} more")
        print()
    then = seconds - 1 - 1800
    earlier = db.invoke(handles["sensor 3, last hour"], now=then)
    print(
        f"sensor 3, the hour before NOW = {then}: "
        f"{dict(zip(earlier.columns, earlier.rows[0], strict=True))}"
    )
    db.close()


def _cell(v: object) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)
