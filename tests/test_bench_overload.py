"""``psoup bench overload --quick``: the flood runs, every client gets a share of the
server, every acknowledged tuple is stored, and the tables and plots are written."""

from __future__ import annotations

from pathlib import Path

from psoup.bench import overload_bench


def test_overload_quick_run(tmp_path: Path) -> None:
    from psoup.cli import main

    assert main(["bench", "overload", "--quick", "--out", str(tmp_path)]) == 0
    assert "psoup bench overload --quick" in (tmp_path / "BENCHMARKS.md").read_text()
    per_client, summary = overload_bench.run(tmp_path, quick=True)
    assert len(per_client.rows) == 3
    for _client, rate, share, _refused, kept in per_client.rows:
        assert rate > 0 and share > 0.5 and kept == "yes"
    _idle, flooded = summary.rows
    assert flooded[4] > 0  # tuples/s accepted during the flood
    md = (tmp_path / "BENCHMARKS.md").read_text()
    assert "<!-- bench:overload-quick begin -->" in md
    for part in ("latency", "ingest", "memory"):
        assert (tmp_path / f"overload_{part}_quick.png").read_bytes()[:4] == b"\x89PNG"
