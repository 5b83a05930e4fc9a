"""Where a Linear Road position report's server time goes, component by component.

``profile(data)`` replays Linear Road input through an in-process engine with the toll
network installed, as ``psoup serve --linear-road`` runs it on its engine thread: each
simulated second's reports are encoded as an Ingest message's columns and decoded (the
server's share of the transport), then inserted; the alert service's two subscriptions
are open; each type-2/3 request registers (once) and invokes that vehicle's standing
queries. Selected functions are wrapped with exclusive timers (a nested timed call
pauses its caller's clock), so the components add up to the measured total:

============================ ==============================================================
component                    functions
============================ ==============================================================
decode                       ``codec.decode_column`` (Ingest message -> numpy columns)
batch checks                 ``columns_to_arrays`` (types, arity) and ``check_time``
Data SteM                    ``DataSteM.append``, ``DataSteM.expire``
Query SteM                   ``QuerySteM.probe``
Results Structure            the strategy's ``mark`` and ``after_batch``
subscriptions                ``Engine._notify`` (new matches for the alert service)
toll network                 ``TollNetwork.process`` (statistics, accidents, tolls)
registrations, invokes       ``Engine.register``, ``Engine.invoke`` (the vehicles' calls)
engine glue                  the rest of the replay loop (eddy, triggers, Python overhead)
============================ ==============================================================

It measures the engine thread only; gRPC's own threads (HTTP/2, protobuf parsing) and the
driver's side are not in it. Cost: one replay, slower than the server by the timers'
overhead (a few microseconds per wrapped call).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
from tqdm import tqdm

import psoup.engine as engine_mod
from psoup.api import codec
from psoup.engine import Engine
from psoup.linear_road import streams
from psoup.linear_road.network import REPORT_FIELDS, TollNetwork
from stems.data_stem import DataSteM
from stems.query_stem import QuerySteM


class _Timers:
    """Exclusive wall-clock time per component."""

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self._stack: list[list] = []  # [component, started]

    def wrap(self, component: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            now = time.perf_counter()
            if self._stack:
                parent = self._stack[-1]
                self.total[parent[0]] = self.total.get(parent[0], 0.0) + now - parent[1]
            self._stack.append([component, now])
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                name, started = self._stack.pop()
                self.total[name] = self.total.get(name, 0.0) + end - started
                if self._stack:
                    self._stack[-1][1] = end

        return timed


@contextmanager
def _patched(timers: _Timers, strategy_cls: type) -> Iterator[None]:
    targets = [
        (codec, "decode_column", "decode"),
        (engine_mod, "columns_to_arrays", "batch checks"),
        (engine_mod, "check_time", "batch checks"),
        (DataSteM, "append", "Data SteM"),
        (DataSteM, "expire", "Data SteM"),
        (QuerySteM, "probe", "Query SteM"),
        (strategy_cls, "mark", "Results Structure"),
        (strategy_cls, "after_batch", "Results Structure"),
        (Engine, "_notify", "subscriptions"),
        (TollNetwork, "process", "toll network"),
        (Engine, "register", "registrations"),
        (Engine, "invoke", "invokes"),
    ]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in targets]
    try:
        for obj, name, component in targets:
            setattr(obj, name, timers.wrap(component, getattr(obj, name)))
        yield
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)


def profile(data: np.ndarray, progress: bool = True) -> tuple[dict[str, float], int, float]:
    """Replay ``data`` (the spec's 15 fields per row) in-process; returns (seconds per
    component, position reports, total seconds). Cost: one full replay."""
    db = Engine()
    streams.install(db)
    for text in (streams.ALL_TOLLS, streams.ALL_ALERTS):
        db.subscribe(db.register(text), lambda res, tid: None)
    schema = dict.fromkeys(REPORT_FIELDS, "int")
    reports = data[data[:, 0] == 0]
    requests = data[(data[:, 0] == 2) | (data[:, 0] == 3)]
    last = int(data[:, 1].max()) if len(data) else -1
    r_starts = np.searchsorted(reports[:, 1], np.arange(last + 2))
    q_starts = np.searchsorted(requests[:, 1], np.arange(last + 2))
    handles: dict[tuple, str] = {}
    timers = _Timers()
    with _patched(timers, type(db.strategy)):
        for s in tqdm(range(last + 1), desc="profile", unit="s", disable=not progress):
            a, z = r_starts[s], r_starts[s + 1]
            if z > a:
                message = codec.encode_batch(
                    schema, {f: reports[a:z, i + 1] for i, f in enumerate(REPORT_FIELDS)}
                )
                _glue(timers, lambda m=message: _ingest(db, m))
            for row in requests[q_starts[s] : q_starts[s + 1]]:
                _glue(timers, lambda r=row: _request(db, handles, r))
    # The client's encoding and the loop itself are outside every timer.
    return timers.total, len(reports), sum(timers.total.values())


def _glue(timers: _Timers, fn: Callable[[], object]) -> None:
    timers.wrap("engine glue", fn)()


def _ingest(db: Engine, message: list) -> None:
    columns = {c.name: codec.decode_column(c, c.name) for c in message}
    db.insert_columns("positions", columns)


def _request(db: Engine, handles: dict[tuple, str], row: np.ndarray) -> None:
    kind, t, vid = int(row[0]), int(row[1]), int(row[2])
    if kind == 2:  # as psoup/linear_road/vehicle.py answers it: one invoke
        if (vid, "balance") not in handles:
            handles[vid, "balance"] = db.register(streams.VEHICLE_QUERIES["balance"], {"v": vid})
        result = db.invoke(handles[vid, "balance"], now=t)
        streams.balance_answer(result.column("time"), result.column("bal"), t)
    else:
        key = (vid, "daily", int(row[4]), int(row[14]))
        if key not in handles:
            params = {"v": vid, "x": int(row[4]), "d": int(row[14])}
            handles[key] = db.register(streams.DAILY_EXPENDITURE, params)
        db.invoke(handles[key])


def table(components: dict[str, float], reports: int, seconds: float) -> list[list[object]]:
    """Rows ``component, µs per report, share`` in descending order, then the total."""
    rows = [
        [name, 1e6 * t / max(reports, 1), f"{100 * t / max(seconds, 1e-9):.1f}%"]
        for name, t in sorted(components.items(), key=lambda kv: -kv[1])
    ]
    rows.append(["total", 1e6 * seconds / max(reports, 1), "100%"])
    return rows
