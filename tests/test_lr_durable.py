"""Linear Road's state across restarts: a durable engine running the toll network on
sample20, killed (recovered from the log: the network is installed first, so replaying
the log drives its triggers) and later closed (recovered from the checkpoint, which holds
the network's own state) on the way, holds exactly the derived
streams (tolls, accidents, assessments, balances) and answers exactly the vehicles'
balance queries of an engine that never stopped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from psoup.engine import Engine
from psoup.linear_road import driver
from psoup.linear_road.network import REPORT_FIELDS
from psoup.linear_road.streams import SCHEMAS, VEHICLE_QUERIES, install
from psoup.storage.durable import DataDir, RecoveryError

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "linear-road" / "sample20"
SECONDS = 900
APP = "linear-road:validator"

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="no Linear Road sample")


def _feed(engine: Engine, seconds: list[np.ndarray]) -> None:
    for rows in seconds:
        reports = rows[rows[:, 0] == 0]
        if len(reports):
            engine.insert_columns(
                "positions", {f: reports[:, i + 1] for i, f in enumerate(REPORT_FIELDS)}
            )


def _open(path: Path) -> Engine:
    engine = Engine()
    install(engine)
    DataDir(path, application=APP).recover(engine)
    return engine


def _contents(engine: Engine, name: str) -> list[np.ndarray]:
    st = engine.streams[name]
    s, e = st.visible_from(), st.stem.end_seq
    return [st.stem.column(a, s, e) for a in st.schema.names] + [st.stem.tids(s, e)]


def test_the_toll_network_comes_back_as_it_was(tmp_path: Path) -> None:
    seconds = [rows for s, rows in driver.read_seconds(SAMPLE / "input.dat") if s < SECONDS]
    half = SECONDS // 2
    vids = sorted({int(v) for rows in seconds[:half] for v in rows[rows[:, 0] == 0][:, 2]})[:40]

    never = Engine()
    install(never)
    durable = _open(tmp_path)
    handles = []
    for engine in (never, durable):
        hs = [engine.register(VEHICLE_QUERIES["balance"], {"v": v}) for v in vids]
        handles.append(hs)
    _feed(never, seconds)
    third = SECONDS // 3
    _feed(durable, seconds[:third])
    durable.storage.close(checkpoint=False)  # a crash: the log replays through the network
    durable = _open(tmp_path)
    _feed(durable, seconds[third:half])
    durable.close()  # a checkpoint holds the network's state
    assert (tmp_path / "checkpoints").exists()
    durable = _open(tmp_path)
    _feed(durable, seconds[half:])

    for name in SCHEMAS:
        a, b = _contents(never, name), _contents(durable, name)
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), name
    assert len(_contents(never, "toll_notifications")[0]) > 100
    for t in range(half, SECONDS, 37):
        for h_never, h_durable in zip(*handles, strict=True):
            assert never.invoke(h_never, now=t).rows == durable.invoke(h_durable, now=t).rows
    durable.close()


def test_a_directory_written_with_the_network_refuses_to_open_without_it(tmp_path: Path) -> None:
    _open(tmp_path).close()
    with pytest.raises(RecoveryError, match=r"application 'linear-road:validator'.*--linear-road"):
        DataDir(tmp_path)
    DataDir(tmp_path, application=APP).close()  # and the refusal left it free
