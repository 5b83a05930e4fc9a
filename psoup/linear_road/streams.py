"""Linear Road's streams in the engine, and the standing queries a vehicle registers.

``install(engine)`` declares the input stream ``positions`` and the derived streams the
toll network (network.py) fills after every batch of positions, on the engine thread,
so every client can register its own standing queries over them:

==================== ====================================== =========== ==============
stream               attributes                             time        kept
==================== ====================================== =========== ==============
positions            time vid spd xway lane dir seg pos     time        10 minutes
toll_notifications   time vid xway dir seg lav toll         time        10 minutes
accident_alerts      time vid xway dir seg (accident's)     time        10 minutes
toll_assessments     time vid xway toll                     time        everything
balances             time vid bal                           time        everything
toll_history         vid day xway tolls                     day         everything
==================== ====================================== =========== ==============

``balances`` has a row per toll notification: the vehicle's balance there (the tolls
charged so far), which is what an account-balance answer reports with its ResultTime.
``toll_history`` is hydrated by the PySpark pipeline (``psoup history hydrate``).
"""

from __future__ import annotations

import threading

import numpy as np

from psoup.engine import Engine
from psoup.linear_road.network import REPORT_FIELDS, TollNetwork

RECENT = 600  # seconds of reports and notifications kept

SCHEMAS: dict[str, tuple[dict[str, str], str, int | None]] = {
    "positions": ({f: "int" for f in REPORT_FIELDS}, "time", RECENT),
    "toll_notifications": (
        {a: "int" for a in ("time", "vid", "xway", "dir", "seg", "lav", "toll")},
        "time",
        RECENT,
    ),
    "accident_alerts": ({a: "int" for a in ("time", "vid", "xway", "dir", "seg")}, "time", RECENT),
    "toll_assessments": ({a: "int" for a in ("time", "vid", "xway", "toll")}, "time", None),
    "balances": ({a: "int" for a in ("time", "vid", "bal")}, "time", None),
    "toll_history": ({a: "int" for a in ("vid", "day", "xway", "tolls")}, "day", None),
}

# How a sharded server spreads them (psoup serve --linear-road --shards N): the reports
# by expressway; what vehicles ask for by vehicle, so each vehicle's queries (which fix
# ``vid``) run on one shard. One engine keeps it in its catalog only.
PARTITION_BY = {"positions": "xway", "toll_notifications": "vid", "accident_alerts": "vid",
                "toll_assessments": "vid", "balances": "vid", "toll_history": "vid"}  # fmt: skip

# The standing queries of one vehicle (named parameters: :v vehicle, :x xway, :d day).
VEHICLE_QUERIES = {
    "tolls": "SELECT time, lav, toll FROM toll_notifications WHERE vid = :v BEGIN NOW - 30 END NOW",
    "accidents": "SELECT time, seg FROM accident_alerts WHERE vid = :v BEGIN NOW - 30 END NOW",
    # The account balance: every balance row of the vehicle so far, from which
    # balance_answer picks the validator's answer in the client. One invoke answers every
    # request; two aggregate queries (the earliest row within the last 60 s, else the
    # latest before) took two calls whenever the first found nothing (62% of the
    # sample's requests).
    "balance": "SELECT time, bal FROM balances WHERE vid = :v BEGIN 0 END NOW",
}
DAILY_EXPENDITURE = (
    "SELECT SUM(tolls) FROM toll_history WHERE vid = :v AND xway = :x AND day = :d BEGIN 0 END NOW"
)
# What the alert service subscribes to: every notification and alert as it is made.
ALL_TOLLS = "SELECT vid, time, lav, toll FROM toll_notifications BEGIN NOW END NOW"
ALL_ALERTS = "SELECT time, vid, seg FROM accident_alerts BEGIN NOW END NOW"


def balance_answer(times: np.ndarray, bals: np.ndarray, t: int) -> tuple[int, int]:
    """(resulttime, balance) for a request at ``t``, given a vehicle's balance rows at or
    before ``t``: at its earliest toll notification within (t - 60, t], else at its
    latest one at or before t - 60, else (t, 0) before any (the original validator's
    rules 3 and 4, see psoup/linear_road/check.py; ResultTime is when the balance was
    last updated). Balances only grow, so the earliest row has the smallest balance.
    O(rows)."""
    times = np.asarray(times, dtype=np.int64)
    bals = np.asarray(bals, dtype=np.int64)
    recent = times > t - 60
    if recent.any():
        return int(times[recent].min()), int(bals[recent].min())
    if len(times):
        return int(times.max()), int(bals.max())
    return t, 0


#: The toll-alert conventions (see psoup/linear_road/check.py): the original validator's,
#: one alert per vehicle, direction and segment over the run (the default, what a valid
#: rating needs), or the spec's text, one at every crossing into a new segment.
CONVENTIONS = ("validator", "every-crossing")


def install(engine: Engine, convention: str = "validator") -> TollNetwork:
    """Declare the streams that do not exist yet and attach a toll network to positions."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention {convention!r}: expected one of {', '.join(CONVENTIONS)}")
    for name, (schema, time, keep) in SCHEMAS.items():
        if name not in engine.streams:
            engine.create_stream(name, schema, time=time, max_window=keep,
                                 partition_by=PARTITION_BY[name])  # fmt: skip
    network = TollNetwork(every_crossing=convention == "every-crossing")
    lock = threading.Lock()

    def on_positions(cols: dict[str, np.ndarray]) -> None:
        with lock:  # the engine serialises batches already; this guards direct use
            out = network.process(cols)
        for stream, rows in (
            ("toll_notifications", out.tolls),
            ("accident_alerts", out.alerts),
            ("toll_assessments", out.assessments),
            ("balances", out.balances),
        ):
            if len(rows["time"]):
                engine.insert_columns(stream, rows)

    engine.add_trigger("positions", on_positions)
    engine.add_state("linear_road", network)  # in checkpoints, beside the streams
    return network
