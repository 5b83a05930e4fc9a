"""Progress reporting: a bar on a terminal, plain lines in a log."""

from __future__ import annotations

import io

from psoup.progress import progress_bar


class _Log(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_a_log_gets_plain_lines_not_carriage_returns() -> None:
    out = _Log()
    bar = progress_bar(total=1200, desc="simulated seconds", unit="s", every=0, out=out)
    for _ in range(3):
        bar.update(400)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[0].startswith("simulated seconds: 400/1,200 s (33%), ")
    assert lines[-1].startswith("simulated seconds: 1,200/1,200 s (100%), ")
    assert len(lines) == 4  # one per update (every=0) and the last one at close


def test_a_log_line_at_most_every_interval() -> None:
    out = _Log()
    with progress_bar(total=10, desc="d", out=out, every=3600) as bar:
        for _ in range(10):
            bar.update(1)
    assert out.getvalue().splitlines() == [out.getvalue().splitlines()[-1]]  # only the last
    assert out.getvalue().startswith("d: 10/10 it (100%)")


def test_disabled_prints_nothing() -> None:
    out = _Log()
    with progress_bar(total=10, enabled=False, out=out) as bar:
        bar.update(5)
    assert out.getvalue() == ""
