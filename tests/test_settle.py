"""psoup.procinfo.settle_reporting: the wait before a replay for freed memory to be
handed back to the host, on a scripted count and clock (no real waiting)."""

from __future__ import annotations

from psoup.procinfo import settle_reporting


class Script:
    """A clock that moves only when slept on, and a count that grows by ``steps``: at
    each reading, the next of them (then stays)."""

    def __init__(self, steps: list[int | None]):
        self.now = 100.0
        self.steps = steps
        self.count = 0
        self.reads = 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def read(self) -> int | None:
        self.reads += 1
        if self.steps:
            step = self.steps.pop(0)
            if step is None:
                return None
            self.count += step
        return self.count


def settle(s: Script, **kw) -> tuple[float, int]:
    return settle_reporting(read=s.read, clock=s.clock, sleep=s.sleep, poll=1.0, **kw)


def test_it_waits_until_the_count_has_stood_still_for_the_quiet_time() -> None:
    # Reports at the 1st, 3rd and 5th polls (2 s apart, as the kernel's passes), then none.
    s = Script([0, 64, 0, 128, 0, 256])
    waited, kib = settle(s, quiet=3.0)
    assert kib == 64 + 128 + 256
    assert waited == 5.0 + 3.0  # the last report at 5 s, then 3 s of quiet


def test_with_nothing_reported_it_waits_the_quiet_time_only() -> None:
    assert settle(Script([]), quiet=4.0) == (4.0, 0)


def test_it_gives_up_at_the_limit() -> None:
    s = Script([0] + [64] * 1000)  # memory reported at every poll, for ever
    waited, kib = settle(s, quiet=3.0, limit=10.0)
    assert waited == 10.0
    assert kib == 64 * 10


def test_where_the_kernel_keeps_no_count_it_does_not_wait() -> None:
    s = Script([None])
    assert settle(s) == (0.0, 0)
    assert s.now == 100.0 and s.reads == 1


def test_a_reading_that_fails_meanwhile_is_not_a_change() -> None:
    s = Script([0, 64, None, 0])
    waited, kib = settle(s, quiet=3.0)
    assert kib == 64
    assert waited == 1.0 + 3.0
