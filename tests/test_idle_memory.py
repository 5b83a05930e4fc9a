"""What a call carried is freed once the call is answered, not when the next call comes.

A thread that serves calls in a loop keeps its last call's names bound while it waits for
the next one. After a Linear Road hydration that pinned the bulk load's columns (1.9 GB in
the front-end, ~1 GB in each shard) until the replay's first call freed them all at once,
and the virtual machine's handing of those gigabytes back to its host stalled the replay
(docs/BENCHMARKS.md). Each test hands a loop an object it can only reach through the call,
and checks, as soon as the answer is back, that the object is gone.
"""

from __future__ import annotations

import weakref

import pytest

from psoup.server.worker import EngineWorker
from psoup.shard import wire
from psoup.shard.channel import Channel, LocalTransport
from psoup.shard.shard import Shard

# Copies made by unpickling (what a shard's socket receives), while they live.
_COPIES: weakref.WeakSet = weakref.WeakSet()


class Payload:
    """Stands for a bulk load's columns: reachable only through the call that carries it."""

    def __init__(self):
        self.columns = b"0" * 64

    def __setstate__(self, state):
        self.__dict__.update(state)
        _COPIES.add(self)


@pytest.fixture
def worker():
    w = EngineWorker(4)
    yield w
    w.stop()


@pytest.mark.parametrize("fails", [False, True])
def test_engine_thread_drops_a_closure_once_it_is_done(worker, fails):
    def make():
        payload = Payload()
        ref = weakref.ref(payload)

        def closure():
            if fails:
                raise ValueError(f"refused {type(payload).__name__}")
            return len(vars(payload))

        return closure, ref

    fn, ref = make()  # ``submit`` runs it on the engine thread (``call`` might not)
    fut = worker.submit(fn)
    del fn
    if fails:
        assert isinstance(fut.exception(timeout=10), ValueError)
        del fut  # its exception's traceback holds the closure's frame: the caller's to drop
        # The engine thread hands that same exception over and holds it until
        # ``set_exception`` returns, which may be after this thread wakes; its next
        # closure comes after it has let go of the last.
        worker.submit(lambda: None).result(timeout=10)
    else:
        assert fut.result(timeout=10) == 1
    assert ref() is None, "the engine thread still holds its last closure"


def test_engine_thread_drops_an_ingest_closure_once_it_is_done(worker):
    payload = Payload()
    ref = weakref.ref(payload)
    fut = worker.submit_ingest(lambda p=payload: len(vars(p)), client="c")
    del payload
    assert fut.result(timeout=10) == 1
    assert ref() is None


def test_channel_drops_a_calls_arguments_once_it_is_answered():
    ch = Channel(0, LocalTransport(Shard(0, None, "batch", "psoup-p")))
    try:
        payload = Payload()
        ref = weakref.ref(payload)
        fut = ch.submit(None, "no_such_operation", payload)
        del payload
        assert "no operation" in str(fut.exception(timeout=10))
        assert ref() is None, "the channel's collector still holds its last call"
    finally:
        ch.close()


def test_shard_socket_drops_a_calls_arguments_once_it_is_answered():
    from multiprocessing.connection import Client

    shard = Shard(0, None, "batch", "psoup-p")
    try:
        address, key = shard.listen()
        sock = wire.attach(Client(tuple(address), authkey=key))
        try:
            wire.send(sock, (shard.epoch, [(None, "no_such_operation", (Payload(),), {})]))
            kind, answers = wire.recv(sock)
            assert kind == "ok" and answers[0][0] is False
            assert len(_COPIES) == 0, "the shard's socket thread still holds its last call"
        finally:
            sock.close()
    finally:
        shard.close()
