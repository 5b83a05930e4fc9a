"""Turns for ingest batches: how many may be on their way to the engine at once.

Without a bound, ten clients streaming batches keep ten reader threads and forty queued
batches busy at once, and every thread that wants the interpreter (the GIL) queues behind
them: a bystander's invoke waited for a core and the GIL at each of its hand-offs
(docs/BENCHMARKS.md, the overload section). With ``IngestTurns(1)`` one batch at a
time goes from its reader to the engine; the others wait on an event of their own,
holding no GIL and waking no one. The engine is rarely starved by it, since decoding a
batch is cheap next to applying it; `psoup bench overload` measured more ingest, not
less (5.0M against 4.5M tuples/s), and half the bystander's p99.

Turns go round the clients (as the engine's queue does): a client waiting for a turn gets
one before any client gets its second.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque


def next_in_turn(lines: OrderedDict[str, deque]):
    """Pop the oldest item of the first client in ``lines`` (client -> its deque, none
    empty), which then goes to the back of the line (or leaves it, if that was its last):
    round-robin over clients, each client's own in order. O(1)."""
    client, q = next(iter(lines.items()))
    item = q.popleft()
    if q:
        lines.move_to_end(client)
    else:
        del lines[client]
    return item


class IngestTurns:
    """``slots`` turns shared by all clients, handed out round-robin over clients."""

    def __init__(self, slots: int):
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.slots = slots
        self._free = slots
        self._lock = threading.Lock()
        self._waiting: OrderedDict[str, deque[threading.Event]] = OrderedDict()

    @property
    def free(self) -> int:
        """Turns not taken now."""
        return self._free

    def acquire(self, client: str, stop: threading.Event, poll: float = 1.0) -> bool:
        """Wait for a turn; True once taken, False if ``stop`` was set first (no turn is
        then held). O(1)."""
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return True
            mine = threading.Event()
            self._waiting.setdefault(client, deque()).append(mine)
        while not mine.wait(poll):
            if stop.is_set():
                with self._lock:
                    if not mine.is_set():  # still queued: leave the line
                        q = self._waiting[client]
                        q.remove(mine)
                        if not q:
                            del self._waiting[client]
                        return False
                self.release()  # granted while giving up: pass it on
                return False
        return True

    def release(self) -> None:
        """Give a turn back: to the next client in line, else to the pool. O(1)."""
        with self._lock:
            if not self._waiting:
                self._free += 1
                return
            next_in_turn(self._waiting).set()

    def _check(self) -> None:
        """Invariants: free turns within [0, slots]; none free while someone waits."""
        with self._lock:
            assert 0 <= self._free <= self.slots
            assert not (self._free and self._waiting)
            assert all(self._waiting.values())
