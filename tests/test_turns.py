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
