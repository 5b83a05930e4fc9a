"""The Linear Road driver's live view: a short replay of sample20 with ``show_live`` draws
the answers per type, their latest and worst response times and the deadlines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clients import PSoupClient
from psoup.linear_road import driver
from psoup.server.process import ServerProcess

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "linear-road" / "sample20"

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="no Linear Road sample")


def test_the_live_view_shows_the_run(tmp_path: Path, capsys) -> None:
    with ServerProcess(*driver.server_args()) as srv, PSoupClient(srv.target) as c:
        rep = driver.replay(
            c, SAMPLE / "input.dat", 20, tmp_path, progress=False, until=120, show_live=True
        )
    screen = capsys.readouterr().out
    tolls = len((tmp_path / "tollalerts.csv").read_text().splitlines())
    assert tolls > 0 and not rep.failed
    assert "simulated second 119 of" in screen
    row = re.search(r"toll\W+([\d,]+)\W+(\d+)\W+(\d+)\W+5", screen)
    assert row and int(row.group(1).replace(",", "")) == tolls
    for kind in ("accident", "balance", "daily"):
        assert kind in screen
