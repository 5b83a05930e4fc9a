"""The sharded engine's invoke and stats start on the engine thread and wait elsewhere.

``psoup serve --shards N`` runs every call's closure on one engine thread. If an invoke
waited there for its shards' answers, each invoke would hold every other call (ingest,
registrations, the other vehicles' invokes) for a round trip through the shards' queues.
``invoke_later`` and ``stats_later`` send the shards their calls and return at once; the
function they return waits. Here the shards' answers are held back (a transport whose
``result`` waits for a gate: a slow shard cannot be made to order otherwise) while the
calls start, then released: the answers must be those of one engine fed the same calls.
"""

from __future__ import annotations

import threading

import numpy as np

import psoup
from psoup.shard.channel import Channel, LocalTransport
from psoup.shard.front import ShardedEngine
from psoup.shard.shard import Shard

SCHEMA = {"a": "int", "b": "int", "t": "int"}
QUERIES = (
    "SELECT * FROM r WHERE r.a = 1 BEGIN NOW - 30 END NOW",
    "SELECT r.a, COUNT(*), SUM(r.b) FROM r GROUP BY r.a BEGIN NOW - 50 END NOW",
)


class HeldTransport(LocalTransport):
    """A shard in this process whose answers wait until ``gate`` is set."""

    def __init__(self, shard: Shard, gate: threading.Event):
        super().__init__(shard)
        self.gate = gate

    def result(self, handle, timeout):
        self.gate.wait()
        return super().result(handle, timeout)


def _returns(fn, limit: float = 10.0):
    """``fn()``'s value, called on a thread; None when it had not returned in ``limit``
    seconds (it waits for the held shards)."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(limit)
    return out[0] if out else None


def test_invoke_and_stats_start_without_waiting_for_the_shards() -> None:
    gate = threading.Event()
    gate.set()
    channels = [
        Channel(k, HeldTransport(Shard(k, None, "batch", "psoup-p"), gate)) for k in range(2)
    ]
    db = ShardedEngine(channels, strategy="psoup-p")
    one = psoup.connect()
    rng = np.random.default_rng(3)
    for e in (db, one):
        e.create_stream("r", SCHEMA, time="t", partition_by="a" if e is db else None)
    handles = [(db.register(q), one.register(q)) for q in QUERIES]
    for k in range(6):
        rows = [
            (int(a), int(b), 10 * k + i)
            for i, (a, b) in enumerate(
                zip(rng.integers(0, 4, 10), rng.integers(0, 100, 10), strict=True)
            )
        ]
        db.insert("r", rows)
        one.insert("r", rows)
    assert all(ch.drain(30) for ch in db.channels)

    gate.clear()  # from here no shard answers until the gate opens again
    later = [_returns(lambda h=h: db.invoke_later(h)) for h, _ in handles]
    stats_later = _returns(db.stats_later)
    assert all(callable(f) for f in later), "invoke_later waited for the shards"
    assert callable(stats_later), "stats_later waited for the shards"
    gate.set()

    for f, (_, oh) in zip(later, handles, strict=True):
        got, want = f(), one.invoke(oh)
        assert got.columns == want.columns
        assert sorted(got.rows) == sorted(want.rows)
        assert got.now == want.now
    assert (
        stats_later()["streams"]["r"]["tuples_stored"]
        == one.stats()["streams"]["r"]["tuples_stored"]
    )
    db.close()
    one.close()
