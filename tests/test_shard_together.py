"""What the front-end sends a shard inside ``together()`` goes in one call per shard.

A batch and the rows its triggers derive (Linear Road's tolls, alerts and balances from
each second's positions), or a Batch call's registrations and invokes, used to reach each
shard as one call per operation: a pickle, a send, a receive and thread wake-ups on both
ends each. ``ShardedEngine.together`` holds the channels and sends the lot at its end.
Here the shards run in this process and their transport counts the calls; the answers
must be those of one engine fed the same calls, and a wait inside the block must not
hang on what is held.
"""

from __future__ import annotations

import threading

import numpy as np

import psoup
from psoup.shard.channel import Channel, LocalTransport
from psoup.shard.front import ShardedEngine
from psoup.shard.shard import Shard

SCHEMA = {"a": "int", "b": "int", "t": "int"}
QUERY = "SELECT * FROM {s} WHERE {s}.a = :a BEGIN NOW - 100 END NOW"
LIMIT = 30.0


class CountedTransport(LocalTransport):
    """A shard in this process; ``calls`` holds the operations of each call sent."""

    def __init__(self, shard: Shard):
        super().__init__(shard)
        self.calls: list[list[str]] = []

    def send(self, epoch, ops):
        self.calls.append([op[1] for op in ops])
        return super().send(epoch, ops)


def _engines(n: int = 2):
    transports = [CountedTransport(Shard(k, None, "batch", "psoup-p")) for k in range(n)]
    db = ShardedEngine([Channel(k, t) for k, t in enumerate(transports)], strategy="psoup-p")
    one = psoup.connect()
    for e in (db, one):
        for s in ("r", "d"):
            e.create_stream(s, SCHEMA, time="t", partition_by="a" if e is db else None)

        def derive(cols, e=e):  # a trigger: rows of "d" from each batch of "r"
            e.insert_columns("d", {"a": cols["a"] + 1, "b": cols["b"] * 2, "t": cols["t"]})

        e.add_trigger("r", derive)
    return db, one, transports


def _rows(rng, k: int) -> list[tuple[int, int, int]]:
    return [(int(rng.integers(0, 6)), int(rng.integers(0, 100)), 100 * k + i) for i in range(20)]


def _same(got, want) -> None:
    assert got.columns == want.columns
    assert sorted(got.rows) == sorted(want.rows)


def test_a_batch_and_its_triggers_inserts_go_in_one_call_per_shard() -> None:
    db, one, transports = _engines()
    rng = np.random.default_rng(5)
    handles = [
        (db.register(QUERY.format(s=s), {"a": a}), one.register(QUERY.format(s=s), {"a": a}))
        for s in ("r", "d")
        for a in range(7)
    ]
    assert all(ch.drain(LIMIT) for ch in db.channels)
    for k in range(5):
        before = [len(t.calls) for t in transports]
        rows = _rows(rng, k)
        db.insert("r", rows)
        one.insert("r", rows)
        assert all(ch.drain(LIMIT) for ch in db.channels)
        for t, n in zip(transports, before, strict=True):
            # one call: the batch's part of "r" and of the derived "d", together
            assert t.calls[n:] == [["insert_part", "insert_part"]], t.calls[n:]
    for h, oh in handles:
        _same(db.invoke(h), one.invoke(oh))
    db.close()
    one.close()


def test_what_a_block_registers_and_invokes_goes_in_one_call_per_shard() -> None:
    db, one, transports = _engines()
    rng = np.random.default_rng(6)
    for k in range(3):
        rows = _rows(rng, k)
        db.insert("r", rows)
        one.insert("r", rows)
    assert all(ch.drain(LIMIT) for ch in db.channels)
    before = [len(t.calls) for t in transports]
    with db.together():
        made = [db.register(QUERY.format(s="r"), {"a": a}) for a in range(6)]
        later = [db.invoke_later(h) for h in made]
        assert [len(t.calls) for t in transports] == before, "sent before the block ended"
    assert all(ch.drain(LIMIT) for ch in db.channels)
    for t, n in zip(transports, before, strict=True):
        assert len(t.calls) == n + 1
        assert sorted(set(t.calls[n])) == ["invoke_parts", "restore_query"]
    for a, f in enumerate(later):
        _same(f(), one.invoke(one.register(QUERY.format(s="r"), {"a": a})))
    db.close()
    one.close()


def test_a_wait_inside_the_block_sends_what_is_held_first() -> None:
    db, one, _ = _engines()
    rng = np.random.default_rng(7)
    rows = _rows(rng, 0)
    db.insert("r", rows)
    one.insert("r", rows)
    got: list = []

    def block() -> None:
        with db.together():
            h = db.register(QUERY.format(s="r"), {"a": 2})
            got.append(db.invoke(h))  # waits for the shards' answers inside the block

    t = threading.Thread(target=block, daemon=True)
    t.start()
    t.join(LIMIT)
    assert got, "the invoke inside together() waited on operations never sent"
    _same(got[0], one.invoke(one.register(QUERY.format(s="r"), {"a": 2})))
    db.close()
    one.close()


def test_a_held_channel_over_its_limit_sends_rather_than_waits() -> None:
    transport = CountedTransport(Shard(0, None, "batch", "psoup-p"))
    ch = Channel(0, transport)
    ch.hold()
    futs = [ch.submit(None, "stats") for _ in range(5)]
    assert transport.calls == []
    done = threading.Event()
    threading.Thread(target=lambda: (ch.wait_below(3, LIMIT), done.set()), daemon=True).start()
    assert done.wait(LIMIT), "wait_below waited on operations it held"
    assert [f.result(LIMIT)["queries"] for f in futs] == [0] * 5
    ch.release()
    assert ch.drain(LIMIT)
    ch.close()
    transport.close()
