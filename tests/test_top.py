"""``psoup top`` through a pseudo-terminal (pexpect): it starts, shows figures that change
while the test ingests, and quits on q; an unreachable server is exit 3 in one line."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pexpect
import pytest

from clients import PSoupClient
from psoup.server import ServerConfig, start_server

ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


@pytest.fixture
def server():
    srv = start_server(ServerConfig(port=0))
    yield f"127.0.0.1:{srv.port}"
    srv.stop(grace=1)


def _screen_until(child: pexpect.spawn, pattern: str, timeout: float = 30) -> str:
    """Read the terminal until ``pattern`` shows (escape codes removed)."""
    seen = ""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            seen += ANSI.sub("", child.read_nonblocking(65536, timeout=1))
        except pexpect.TIMEOUT:
            continue
        if re.search(pattern, seen):
            return seen
        seen = seen[-20_000:]
    raise AssertionError(f"{pattern!r} never showed; last screen:\n{seen[-2000:]}")


def test_top_shows_the_server_at_work_and_quits_on_q(server) -> None:
    with PSoupClient(server) as c:
        c.create_stream("events", {"k": "int", "t": "int"}, time="t")
        c.insert("events", [(i, i) for i in range(1000)])
        h = c.register("SELECT k FROM events WHERE events.k = 3 BEGIN 0 END NOW")
        for _ in range(7):
            c.invoke(h)
        child = pexpect.spawn(
            sys.executable, ["-m", "psoup", "top", "--server", server, "--refresh", "0.2"],
            encoding="utf-8", dimensions=(40, 140), timeout=30,
        )  # fmt: skip
        try:
            _screen_until(child, r"events\W+[\d,]+\W+1,000\W+1,000")
            _screen_until(child, r"invocations")
            _screen_until(child, r"\W7\W+SELECT k FROM events")
            c.insert("events", [(i, 1000 + i) for i in range(5000)])
            _screen_until(child, r"events\W+[\d,]+\W+6,000\W+6,000")
            child.send("q")
            child.expect(pexpect.EOF, timeout=15)
        finally:
            child.close()
        assert child.exitstatus == 0


def test_top_on_an_unreachable_server_is_exit_3() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "psoup", "top", "--server", "127.0.0.1:1", "--timeout", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 3
    assert out.stderr.startswith("error: UNAVAILABLE") and "Traceback" not in out.stderr
