"""``psoup top``: a running server at a glance, refreshed every second.

Reads the Stats RPC once a second (with the most invoked queries) and draws, with rich:
the ingest rate and a sparkline of its last minute, the ingest queue, memory,
subscriptions and standing queries, the invoke latency percentiles, the busiest streams
(by tuples ingested per second since the last refresh) and the most invoked queries.
``q`` quits (exit 0), Ctrl-C too (exit 130); an unreachable server exits 3.
"""

from __future__ import annotations

import contextlib
import select
import sys
import time
from collections import deque

from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from clients import PSoupClient

BARS = "▁▂▃▄▅▆▇█"
HISTORY = 60  # seconds of ingest rate in the sparkline


def sparkline(values: list[float]) -> str:
    """Values as block characters scaled to their maximum. O(len(values))."""
    top = max(values, default=0.0)
    if top <= 0:
        return BARS[0] * len(values)
    return "".join(BARS[min(int(v / top * (len(BARS) - 1) + 0.5), len(BARS) - 1)] for v in values)


class View:
    """What one refresh shows, from two successive Stats answers."""

    def __init__(self, target: str):
        self.target = target
        self.rates: deque[float] = deque(maxlen=HISTORY)
        self.prev: tuple[float, dict] | None = None

    def update(self, stats: dict, now: float) -> None:
        self.stream_rates = {}
        if self.prev is not None:
            t0, s0 = self.prev
            dt = max(now - t0, 1e-6)
            for name, st in stats["streams"].items():
                before = s0["streams"].get(name, {}).get("tuples_ingested", st["tuples_ingested"])
                self.stream_rates[name] = (st["tuples_ingested"] - before) / dt
            self.rates.append(sum(self.stream_rates.values()))
        self.prev = (now, stats)
        self.stats = stats

    def render(self) -> Group:
        s = self.stats
        lat = s["invoke_latency"]
        rate = self.rates[-1] if self.rates else 0.0
        head = Text.assemble(
            ("psoup top ", "bold"), f"{self.target}  strategy {s['strategy']}  ",
            ("q quits", "dim"),
        )  # fmt: skip
        ingest = Text.assemble(
            ("ingest  ", "bold"), f"{rate:>12,.0f} t/s  ", (sparkline(list(self.rates)), "cyan"),
        )  # fmt: skip
        server = Text.assemble(
            ("server  ", "bold"),
            f"queue {s['queue_depth']} batches   memory {s['memory_bytes'] / 2**20:,.0f} MB   "
            f"subscriptions {s['subscriptions']}   invoke calls {s['invoke_calls']}   "
            f"queries {s['queries']:,}   matches {s['matches_marked']:,}",
        )
        invoke = Text.assemble(
            ("invoke  ", "bold"),
            f"p50 {lat['p50_ms']:.2f} ms   p90 {lat['p90_ms']:.2f} ms   "
            f"p99 {lat['p99_ms']:.2f} ms   ({lat['count']:,} recent)",
        )
        streams = Table(title="busiest streams", title_justify="left", expand=False)
        for col in ("stream", "t/s", "stored", "ingested", "MB"):
            streams.add_column(col, justify="left" if col == "stream" else "right")
        order = sorted(s["streams"], key=lambda n: (-self.stream_rates.get(n, 0.0), n))
        for name in order[:8]:
            st = s["streams"][name]
            streams.add_row(name, f"{self.stream_rates.get(name, 0.0):,.0f}",
                            f"{st['tuples_stored']:,}", f"{st['tuples_ingested']:,}",
                            f"{st['bytes'] / 2**20:,.1f}")  # fmt: skip
        queries = Table(title="most invoked queries", title_justify="left", expand=False)
        for col in ("handle", "invocations", "query"):
            queries.add_column(col, justify="right" if col == "invocations" else "left")
        for q in s.get("busiest_queries", [])[:8]:
            queries.add_row(q["handle"][:8], f"{q['invocations']:,}", q["text"][:70])
        return Group(head, ingest, server, invoke, streams, queries)


@contextlib.contextmanager
def _keys():
    """Single key presses from a terminal (no Enter needed); nothing otherwise."""
    if not sys.stdin.isatty():
        yield lambda: None
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield lambda: sys.stdin.read(1) if select.select([sys.stdin], [], [], 0)[0] else None
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def run(client: PSoupClient, refresh: float = 1.0, seconds: float | None = None) -> int:
    """Show the view until ``q`` (0) or for ``seconds`` if given; Ctrl-C raises
    KeyboardInterrupt to the caller. Raises the client's errors (Unavailable: exit 3)."""
    view = View(client.target)
    view.update(client.stats(busiest_queries=True), time.monotonic())
    end = None if seconds is None else time.monotonic() + seconds
    with _keys() as key, Live(view.render(), auto_refresh=False, transient=False) as live:
        while end is None or time.monotonic() < end:
            due = time.monotonic() + refresh
            while time.monotonic() < due:
                if key() in ("q", "Q"):
                    return 0
                time.sleep(0.05)
            view.update(client.stats(busiest_queries=True), time.monotonic())
            live.update(view.render(), refresh=True)
    return 0
