"""IngestTurns: at most ``slots`` turns out, handed round-robin over clients, none lost
when a waiter gives up (the server's side: tests/test_server.py)."""

from __future__ import annotations

import random
import threading

import pytest

from psoup.server.turns import IngestTurns


def _waiter(turns: IngestTurns, client: str, stop: threading.Event, got: list[str]):
    def run():
        if turns.acquire(client, stop, poll=0.01):
            got.append(client)

    t = threading.Thread(target=run)
    t.start()
    return t


def _until(cond) -> None:
    """Wait (on an event, not a sleep) until ``cond()``."""
    ev = threading.Event()
    while not cond():
        ev.wait(0.001)


def test_turns_go_round_the_clients_and_back_to_the_pool() -> None:
    turns = IngestTurns(1)
    never = threading.Event()
    assert turns.acquire("a", never)  # free: taken at once
    got: list[str] = []
    waiters = []
    for client in ["a", "a", "a", "b", "c", "b"]:
        waiters.append(_waiter(turns, client, never, got))
        n = len(waiters)
        _until(lambda n=n: sum(map(len, turns._waiting.values())) == n)
    turns._check()
    for k in range(6):
        turns.release()
        _until(lambda k=k: len(got) == k + 1)
        turns._check()
    for t in waiters:
        t.join()
    assert got == ["a", "b", "c", "a", "b", "a"]  # each client's own in order
    turns.release()
    assert turns.free == 1
    turns._check()


@pytest.mark.parametrize("seed", range(5))
def test_no_turn_is_lost_when_waiters_give_up(seed: int) -> None:
    """Waiters that stop while queued, or just as they are granted, leave the pool whole."""
    rng = random.Random(seed)
    slots = rng.randint(1, 3)
    turns = IngestTurns(slots)
    never = threading.Event()
    held = [turns.acquire("x", never) for _ in range(slots)]
    assert all(held) and turns.free == 0
    stops = [threading.Event() for _ in range(12)]
    got: list[str] = []
    waiters = [_waiter(turns, f"c{rng.randint(0, 3)}", s, got) for s in stops]
    for s in rng.sample(stops, 6):
        s.set()
    for _ in range(slots):
        turns.release()
    for s in stops:
        s.set()
    for t in waiters:
        t.join()
    turns._check()
    for _ in got:  # the waiters that got a turn give it back
        turns.release()
    assert turns.free == slots
    turns._check()


class _Clock:
    """A clock the test moves; ``wait`` (a stop event's) advances it instead of sleeping."""

    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now


class _Stop:
    """A stop event whose ``wait`` records the pause and moves the clock past it."""

    def __init__(self, clock: _Clock, stop_during_wait: bool = False) -> None:
        self.clock = clock
        self.stop_during_wait = stop_during_wait
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        self.clock.waits.append(timeout)
        self.clock.now += timeout
        self._set = self._set or self.stop_during_wait
        return self._set


@pytest.mark.parametrize("share", [0.25, 0.5, 0.8])
def test_ingest_pauses_for_interactive_calls_in_proportion_to_its_share(share: float) -> None:
    clock = _Clock()
    turns = IngestTurns(1, share=share, recent=1.0, clock=clock)
    stop = _Stop(clock)
    assert turns.acquire("a", stop)
    clock.now += 0.2
    turns.release(0.2)  # no interactive call yet: no pause owed
    assert turns.acquire("a", stop) and clock.waits == []
    turns.interactive()
    clock.now += 0.2
    turns.release(0.2)  # a batch that took 0.2 s of the engine
    before = clock.now
    assert turns.acquire("b", stop)
    owed = 0.2 * (1 - share) / share
    assert clock.waits == [pytest.approx(owed)]
    assert clock.now == pytest.approx(before + owed)
    assert turns.paused == pytest.approx(owed) and turns.owed == pytest.approx(owed)
    # busy 0.2 s, paused ``owed``: ingest had ``share`` of the engine's time
    assert 0.2 / (0.2 + owed) == pytest.approx(share)
    turns.release()  # no time given: no pause
    assert turns.acquire("c", stop) and len(clock.waits) == 1
    turns.release()
    turns._check()


def test_interactive_calls_older_than_recent_owe_nothing() -> None:
    clock = _Clock()
    turns = IngestTurns(1, share=0.5, recent=1.0, clock=clock)
    turns.interactive()
    clock.now += 1.5
    assert turns.pause_after(0.3) == 0.0
    turns.interactive()
    assert turns.pause_after(0.3) == pytest.approx(0.3)
    assert IngestTurns(1, share=1.0, clock=clock).pause_after(0.3) == 0.0


def test_a_reader_stopped_during_its_pause_gives_the_turn_back() -> None:
    clock = _Clock()
    turns = IngestTurns(1, share=0.5, clock=clock)
    turns.interactive()
    assert turns.acquire("a", _Stop(clock))
    clock.now += 0.1
    turns.release(0.1)
    assert not turns.acquire("a", _Stop(clock, stop_during_wait=True))
    assert turns.free == 1
    turns._check()


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_a_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share"):
        IngestTurns(1, share=share)
