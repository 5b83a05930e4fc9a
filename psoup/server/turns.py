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

Interactive calls first: while invokes, registrations or descriptions are arriving (one
came within the last ``recent`` seconds), ingest may have only ``share`` of the engine
thread's time. A batch that took ``h`` seconds of the engine thread's CPU is followed by a
pause of ``h (1 - share) / share`` before the next turn is handed out, in which the gRPC
threads serving the interactive calls have the interpreter to themselves. (CPU time, not
the time the turn was held: a sharded engine's batch waits for its shards with the
interpreter free, and owes no pause for that.) Paused readers hold no GIL and read
nothing, so HTTP/2 flow control holds the flooding clients back. `psoup bench overload`:
at share 0.5 the bystander's invoke p99 went from 8.6 to 4.7 ms for 27% less ingest
(docs/BENCHMARKS.md). With no interactive calls, ingest runs at full speed.
"""

from __future__ import annotations

import threading
import time
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
    """``slots`` turns shared by all clients, handed out round-robin over clients; while
    interactive calls arrive, held at most ``share`` of the time."""

    def __init__(self, slots: int, share: float = 1.0, recent: float = 1.0, clock=time.monotonic):
        if slots < 1:
            raise ValueError("slots must be at least 1")
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        self.slots = slots
        self.share = share
        self.recent = recent
        self._clock = clock
        self._free = slots
        self._lock = threading.Lock()
        self._waiting: OrderedDict[str, deque[threading.Event]] = OrderedDict()
        self._interactive = -float("inf")  # when the last interactive call arrived
        self._not_before = -float("inf")  # no turn is handed out before this time
        self.owed = 0.0  # seconds of pause interactive calls were owed, in all
        self.paused = 0.0  # seconds ingest has waited for them (less: some passed anyway)

    def interactive(self) -> None:
        """Note that an interactive call arrived now. O(1), no lock: a plain store."""
        self._interactive = self._clock()

    @property
    def free(self) -> int:
        """Turns not taken now."""
        return self._free

    def acquire(self, client: str, stop: threading.Event, poll: float = 1.0) -> bool:
        """Wait for a turn (and for the pause interactive calls are owed); True once taken,
        False if ``stop`` was set first (no turn is then held). O(1)."""
        with self._lock:
            if free := bool(self._free) and not self._waiting:
                self._free -= 1
            else:
                mine = threading.Event()
                self._waiting.setdefault(client, deque()).append(mine)
        if free:
            return self._paced(stop)
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
        return self._paced(stop)

    def _paced(self, stop: threading.Event) -> bool:
        """Holding a turn, wait out the pause; True, or False (the turn given back) if
        ``stop`` was set meanwhile."""
        if (pause := self._not_before - self._clock()) > 0:
            self.paused += pause
            if stop.wait(pause):
                self.release()
                return False
        return True

    def pause_after(self, held: float) -> float:
        """The pause owed to interactive calls after a batch that took ``held`` seconds of
        the engine: 0 unless one arrived within ``recent`` seconds. O(1)."""
        if self.share >= 1 or self._clock() - self._interactive > self.recent:
            return 0.0
        return held * (1 - self.share) / self.share

    def release(self, held: float = 0.0) -> None:
        """Give a turn back, whose batch took ``held`` seconds of the engine: to the next
        client in line, else to the pool. O(1)."""
        if held and (pause := self.pause_after(held)):
            self.owed += pause
            self._not_before = max(self._not_before, self._clock() + pause)
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
