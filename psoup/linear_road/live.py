"""``psoup linear-road run --live``: the run as it goes, in the terminal (rich).

Refreshed twice a second from counters the driver keeps as it replays: the simulated
second and how far behind schedule its batch went out, position reports per second,
answers per type so far with the latest and the worst response time (simulated
seconds, against the deadline), and the requests refused. Reading the counters is O(1);
nothing of the answers is kept for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from psoup.linear_road.check import DEADLINES


class Progress:
    """The counters the driver updates and the view reads (thread-safe enough: single
    writers, and a torn read only shows a number one refresh late)."""

    def __init__(self, total_seconds: int):
        self.total = total_seconds
        self.second = 0
        self.lag_ms = 0.0
        self.worst_lag_ms = 0.0
        self.reports = 0
        self.answers: dict[str, int] = {}
        self.latest: dict[str, int] = {}
        self.worst: dict[str, int] = {}
        self.failed = 0
        self.retried = 0  # requests asked again after UNAVAILABLE

    def sent(self, second: int, lag_ms: float, reports: int) -> None:
        self.second, self.lag_ms = second, lag_ms
        self.worst_lag_ms = max(self.worst_lag_ms, lag_ms)
        self.reports += reports

    def answered(self, kind: str, n: int, latest: int, worst: int) -> None:
        self.answers[kind] = self.answers.get(kind, 0) + n
        self.latest[kind] = latest
        self.worst[kind] = max(self.worst.get(kind, 0), worst)


class LiveView:
    """Draws ``Progress`` until ``stop()``."""

    def __init__(self, progress: Progress, speedup: float, title: str = "Linear Road"):
        self.p = progress
        self.speedup = speedup
        self.title = title
        self._done = threading.Event()
        self._rate = (time.monotonic(), 0)
        self._thread = threading.Thread(target=self._run, name="psoup-live", daemon=True)

    def render(self) -> Group:
        p = self.p
        now = time.monotonic()
        t0, r0 = self._rate
        rate = (p.reports - r0) / max(now - t0, 1e-6)
        self._rate = (now, p.reports)
        head = Text.assemble(
            (f"{self.title}  ", "bold"), f"simulated second {p.second:,} of {p.total:,}  "
            f"(x{self.speedup:g})  reports {rate:,.0f}/s  sent late {p.lag_ms:,.0f} ms "
            f"(worst {p.worst_lag_ms:,.0f} ms)  refused {p.failed}",
        )  # fmt: skip
        t = Table()
        for col in ("answer", "so far", "latest s", "worst s", "deadline s"):
            t.add_column(col, justify="left" if col == "answer" else "right")
        for kind in ("toll", "accident", "balance", "daily"):
            worst = p.worst.get(kind, 0)
            style = "red" if worst > DEADLINES[kind] else ""
            t.add_row(kind, f"{p.answers.get(kind, 0):,}", str(p.latest.get(kind, "-")),
                      Text(str(worst), style=style), str(DEADLINES[kind]))  # fmt: skip
        return Group(head, t)

    def _run(self) -> None:
        with Live(self.render(), auto_refresh=False) as live:
            while not self._done.wait(0.5):
                live.update(self.render(), refresh=True)
            live.update(self.render(), refresh=True)

    def start(self) -> LiveView:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)


def maybe(progress: Progress, speedup: float, enabled: bool) -> Callable[[], None]:
    """Start a live view of ``progress`` when ``enabled``; returns its stop function."""
    if not enabled:
        return lambda: None
    return LiveView(progress, speedup).start().stop
