"""Linear Road's Fleet: many vehicles' requests in Batch calls, answered as each vehicle
alone would be answered, each vehicle's query registered once however its requests are
grouped (twice in one group, or in groups answered at the same time)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from clients import PSoupClient
from psoup.linear_road.streams import SCHEMAS
from psoup.linear_road.vehicle import Fleet, Vehicle, prepare_queries
from psoup.server import ServerConfig, start_server


@pytest.fixture(scope="module")
def client():
    srv = start_server(ServerConfig(port=0))
    with PSoupClient(f"127.0.0.1:{srv.port}", timeout=30) as c:
        for name, (schema, time, keep) in SCHEMAS.items():
            c.create_stream(name, schema, time=time, max_window=keep)
        rng = np.random.default_rng(3)
        n = 300
        c.insert_columns(
            "balances",
            {"time": np.sort(rng.integers(0, 100, n)), "vid": rng.integers(0, 8, n),
             "bal": rng.integers(0, 500, n)},
        )  # fmt: skip
        c.insert_columns(
            "toll_history",
            {"vid": rng.integers(0, 8, n), "day": np.sort(rng.integers(1, 6, n)),
             "xway": rng.integers(0, 2, n), "tolls": rng.integers(0, 90, n)},
        )  # fmt: skip
        yield c
    srv.stop(grace=1)


@pytest.mark.parametrize("seed", range(4))
def test_a_fleet_answers_as_each_vehicle_alone(client: PSoupClient, seed: int) -> None:
    rng = np.random.default_rng(seed)
    queries = prepare_queries(client)
    before = client.stats()["queries"]
    fleet = Fleet(client, queries)
    # Few vehicles, so most groups ask for one vehicle more than once.
    groups = [
        [(int(rng.choice([2, 3])), int(rng.integers(0, 120)), int(rng.integers(0, 8)),
          int(rng.integers(0, 2)), int(rng.integers(1, 6))) for _ in range(rng.integers(1, 12))]
        for _ in range(12)
    ]  # fmt: skip
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(fleet.answer, groups))
    asked = {(vid, "balance" if k == 2 else (x, d)) for g in groups for k, _, vid, x, d in g}
    assert client.stats()["queries"] - before == len(asked)  # each registered once
    alone: dict[int, Vehicle] = {}
    for group, answers in zip(groups, got, strict=True):
        for (kind, t, vid, x, d), answer in zip(group, answers, strict=True):
            v = alone.setdefault(vid, Vehicle(client, vid, queries))
            assert answer == (v.balance(t) if kind == 2 else v.daily_expenditure(x, d))
    # Asked again, a fleet invokes what it registered: no new queries.
    n = client.stats()["queries"]
    assert [fleet.answer(g) for g in groups] == got
    assert client.stats()["queries"] == n
