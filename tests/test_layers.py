"""Each part knows only what it must: the import contracts (import-linter, in
pyproject.toml) hold, the client library loads no engine, and an application plugs into
the server through ``--app`` alone (a test application in tests/apps)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clients import PSoupClient
from psoup.server import ServerConfig, start_server
from psoup.server.apps import AppSpec

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_hold() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_the_client_library_loads_no_engine() -> None:
    code = (
        "import sys, clients\n"
        "bad = sorted(m for m in sys.modules if m == 'psoup.engine' or m.split('.')[0] in "
        "('stems', 'results') or m.startswith('psoup.linear_road'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_an_application_plugs_in_by_path_and_survives_a_restart(tmp_path: Path) -> None:
    config = ServerConfig(port=0, app="apps.counter:install=10", data_dir=str(tmp_path / "d"))
    srv = start_server(config)
    try:
        with PSoupClient(f"127.0.0.1:{srv.port}") as c:
            c.insert("events", [(1, 1), (2, 2), (1, 3)])
            h = c.register("SELECT kind, SUM(n) FROM counts GROUP BY kind BEGIN 0 END NOW")
            assert c.invoke(h).rows == [(1, 20), (2, 10)]
    finally:
        srv.stop(grace=1)
    srv = start_server(config)
    try:
        with PSoupClient(f"127.0.0.1:{srv.port}") as c:
            c.insert("events", [(2, 4)])
            assert c.invoke(h).rows == [(1, 20), (2, 20)]
        total = srv.engine._states["counter"]
        assert total.events == 4  # restored from the checkpoint, then one more batch
    finally:
        srv.stop(grace=1)
    other = ServerConfig(port=0, app="apps.counter:install=2", data_dir=str(tmp_path / "d"))
    with pytest.raises(Exception, match=r"apps\.counter:install:10"):
        start_server(other)  # the directory was written with another argument


def test_an_unknown_application_is_refused_naming_the_installed_ones() -> None:
    with pytest.raises(ValueError, match=r"no such application \(installed: linear-road"):
        AppSpec.parse("nosuch").load()
    with pytest.raises(ValueError, match="nosuch_module"):
        AppSpec.parse("nosuch_module:install").load()
    assert AppSpec.parse("linear-road=validator").key == "linear-road:validator"
