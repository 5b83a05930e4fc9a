"""The command line end to end: ``psoup demo`` and ``psoup bench core --quick``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from psoup import cli
from psoup.bench import report


def test_demo_prints_every_query_result() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "psoup", "demo", "--seconds", "600", "--sensors", "4"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "ingested 2,400 readings" in out
    from psoup.demo import QUERIES

    for name in QUERIES:
        assert name in out


def test_bench_quick_writes_tables_and_plots(tmp_path: Path) -> None:
    from psoup.cli import main

    out = tmp_path / "not" / "yet"  # made by the command, before the run
    assert main(["bench", "core", "--quick", "--out", str(out)]) == 0
    md = (out / "BENCHMARKS.md").read_text()
    assert "<!-- bench:core begin -->" in md and "psoup bench core --quick" in md
    for name in ("core_output_sensitivity.png", "core_paper_workload.png", "core_invoke.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_section_replaces_only_its_own_section(tmp_path: Path) -> None:
    path = tmp_path / "B.md"
    report.write_section(path, "a", "first a")
    report.write_section(path, "b", "only b")
    report.write_section(path, "a", "second a")
    text = path.read_text()
    assert "second a" in text and "first a" not in text and "only b" in text
    assert text.count("<!-- bench:a begin -->") == 1


@pytest.mark.parametrize(
    "argv, server, timeout",
    [
        (["invoke", "h"], "localhost:50051", 30.0),
        (["--server", "a:1", "invoke", "h"], "a:1", 30.0),
        (["invoke", "h", "--server", "b:2", "--timeout", "5"], "b:2", 5.0),
        (["--server", "a:1", "--timeout", "7", "invoke", "h", "--server", "b:2"], "b:2", 7.0),
        (["--server", "a:1", "history", "export", "--stream", "s", "--out", "x"], "a:1", 30.0),
    ],
)
def test_client_options_go_before_or_after_the_subcommand(argv, server, timeout) -> None:
    args = cli.build_parser().parse_args(argv)
    assert (args.server, args.timeout) == (server, timeout)
