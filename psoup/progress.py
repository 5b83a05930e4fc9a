"""Progress for long jobs: a tqdm bar on a terminal, a plain line every 30 s in a log.

A carriage-return bar written to a file is one line per update (1,200 of them for a
20-minute replay); when stderr is not a terminal, ``progress_bar`` prints one plain
line every ``every`` seconds instead (and a last one when the job ends), as other data
tools do. Both are used the same way: ``update(n)`` and ``close()``, or as a context.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm

LOG_EVERY = 30.0  # seconds between plain progress lines


class _LogLines:
    """``desc: n/total unit (p%), elapsed s`` on a line of its own, every ``every`` s."""

    def __init__(self, total: float | None, desc: str, unit: str, every: float, out: TextIO):
        self.total, self.desc, self.unit, self.every, self.out = total, desc, unit, every, out
        self.n = 0.0
        self.start = self.last = time.monotonic()
        self.closed = False

    def _line(self) -> str:
        done = f"{self.n:,.0f}" + (f"/{self.total:,.0f}" if self.total else "")
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        return f"{self.desc}: {done} {self.unit}{share}, {time.monotonic() - self.start:,.0f} s"

    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            print(self._line(), file=self.out, flush=True)

    def refresh(self) -> None:
        """After ``n`` or ``total`` were set directly (as on a tqdm bar)."""
        self.update(0)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            print(self._line(), file=self.out, flush=True)

    def __enter__(self) -> _LogLines:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Silent:
    n = total = 0

    def update(self, n: float = 1) -> None:
        pass

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc) -> None:
        pass


def progress_bar(
    total: float | None = None,
    desc: str = "",
    unit: str = "it",
    enabled: bool = True,
    every: float = LOG_EVERY,
    out: TextIO | None = None,
    **tqdm_options,
):
    """A progress reporter on ``out`` (default stderr): tqdm's bar when it is a terminal,
    else a plain line every ``every`` seconds; nothing when not ``enabled``."""
    out = out or sys.stderr
    if not enabled:
        return _Silent()
    if out.isatty():
        return tqdm(total=total, desc=desc, unit=unit, file=out, **tqdm_options)
    return _LogLines(total, desc, unit, every, out)
