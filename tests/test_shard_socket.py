"""A durable shard serving its socket in this process (as it does under Ray, without
Ray): it runs the next call while the last one's fsync is under way, and still sends
every answer in order and only once the changes before it are on disk; a shard whose
log cannot be forced ends its process instead of answering.

The log's fsync is held at a gate here: a disk cannot be made slow on cue otherwise.
"""

from __future__ import annotations

import os
import threading
import time
from multiprocessing.connection import Client

import numpy as np
import pytest

from psoup.shard import wire
from psoup.shard.shard import Shard

DECL = [("a", "int"), ("t", "int")]
LIMIT = 30.0  # seconds before a wait that should end is taken as hung


class HeldFsync:
    """``os.fdatasync`` that, once ``hold`` is set, makes the log's commits (not the zeros
    its filler forces ahead of them) wait for ``open``; counts the commits."""

    def __init__(self) -> None:
        self.real = os.fdatasync
        self.hold = threading.Event()
        self.open = threading.Event()
        self.entered = threading.Event()
        self.forced = 0

    def __call__(self, fd: int) -> None:
        if threading.current_thread().name != "psoup-wal":
            return self.real(fd)
        if self.hold.is_set():
            self.entered.set()
            assert self.open.wait(LIMIT), "the held fsync was never released"
        self.real(fd)
        self.forced += 1


def _insert(k: int) -> tuple:
    """Operation ``k`` (its id) inserting one row at time ``k``."""
    cols = [np.array([k], np.int64), np.array([k], np.int64)]
    return (k, "insert_part", ("r", cols, np.array([k], np.int64), k), {})


def _until(cond, what: str) -> None:
    deadline = time.monotonic() + LIMIT
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


@pytest.fixture
def served(tmp_path, monkeypatch):
    fsync = HeldFsync()
    monkeypatch.setattr(os, "fdatasync", fsync)
    shard = Shard(0, str(tmp_path / "shard"), sync="batch")
    shard.call(shard.epoch, [(1, "create_stream", ("r", DECL, "t", None, None),
                              {"recovered": True})])  # fmt: skip
    address, key = shard.listen()
    sock = wire.attach(Client(tuple(address), authkey=key))
    sock.settimeout(LIMIT)
    yield shard, sock, fsync
    fsync.open.set()
    sock.close()
    shard.close()


def test_the_next_call_runs_while_the_last_fsync_waits(served) -> None:
    shard, sock, fsync = served
    fsync.hold.set()
    wire.send(sock, (shard.epoch, [_insert(2)]))
    assert fsync.entered.wait(LIMIT), "the first call's fsync never started"
    # The first call's record is being forced; the second call runs meanwhile.
    wire.send(sock, (shard.epoch, [_insert(3), (None, "invoke_parts", ("h",), {})]))
    _until(lambda: shard.last_op == 3, "the second call to run")
    # Neither answer may leave before its changes are on disk.
    assert not wire.ready(sock, 0.05)
    fsync.hold.clear()
    fsync.open.set()
    first, second = wire.recv(sock), wire.recv(sock)
    assert first == ("ok", [(True, first[1][0][1])])
    assert first[1][0][1].count == 1
    kind, ((ok3, res3), (ok_inv, err)) = second
    assert kind == "ok" and ok3 and res3.count == 1
    assert not ok_inv and "h" in str(err)  # an unknown handle is the call's error, in order
    assert fsync.forced >= 1


def test_a_read_after_a_write_still_being_forced_waits_its_turn(served) -> None:
    # A read changes nothing, so it has no fsync of its own to wait for; its answer
    # still leaves after the answer before it, which waits for one.
    shard, sock, fsync = served
    fsync.hold.set()
    wire.send(sock, (shard.epoch, [_insert(2)]))
    assert fsync.entered.wait(LIMIT), "the write's fsync never started"
    wire.send(sock, (shard.epoch, [(None, "describe_streams", (), {})]))
    _until(lambda: not shard._calls.locked() and shard.last_op == 2, "the calls to run")
    assert not wire.ready(sock, 0.05)
    fsync.hold.clear()
    fsync.open.set()
    first, second = wire.recv(sock), wire.recv(sock)
    assert first[0] == "ok" and first[1][0][1].count == 1
    assert second == ("ok", [(True, {"r": {"tuples": 1, "last_ts": 2}})])


def test_an_answer_with_nothing_to_wait_for_leaves_from_the_thread_that_ran_it(
    served, monkeypatch
) -> None:
    # Handing it to the sender thread would cost a thread wake-up per call.
    shard, sock, _ = served
    senders = []
    send = wire.send

    def recorded(where, msg) -> None:
        senders.append(threading.current_thread().name)
        send(where, msg)

    wire.send(sock, (shard.epoch, [_insert(2)]))
    assert wire.recv(sock)[0] == "ok"
    monkeypatch.setattr(wire, "send", recorded)
    wire.send(sock, (shard.epoch, [(None, "describe_streams", (), {})]))
    assert wire.recv(sock) == ("ok", [(True, {"r": {"tuples": 1, "last_ts": 2}})])
    assert senders == ["MainThread", "psoup-shard-socket"]


def test_a_stale_call_is_answered_in_its_place(served) -> None:
    shard, sock, _ = served
    wire.send(sock, (shard.epoch, [_insert(2)]))
    wire.send(sock, ("gone", [_insert(3)]))
    wire.send(sock, (shard.epoch, [_insert(4)]))
    answers = [wire.recv(sock) for _ in range(3)]
    assert [a[0] for a in answers] == ["ok", "stale", "ok"]
    assert shard.last_op == 4
    assert shard.engine.streams["r"].last_ts == 4


def test_a_dropped_connection_is_served_again(served) -> None:
    shard, sock, _ = served
    wire.send(sock, (shard.epoch, [_insert(2)]))
    assert wire.recv(sock)[0] == "ok"
    sock.close()
    address, key = shard.listen()
    again = wire.attach(Client(tuple(address), authkey=key))
    again.settimeout(LIMIT)
    try:
        wire.send(again, (shard.epoch, [_insert(2), _insert(3)]))
        kind, answers = wire.recv(again)
    finally:
        again.close()
    # Operation 2 was made before: passed over, not applied twice.
    assert kind == "ok" and answers[0] == (True, None) and answers[1][0]
    assert len(shard.engine.streams["r"].stem) == 2


def _serve_with_failing_fsync(data_dir: str, out) -> None:
    """In a child process: a shard whose every log fsync fails with EIO, its address,
    key and epoch sent back on ``out``; then it serves until the process ends."""

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    shard = Shard(0, data_dir, sync="batch")
    shard.call(shard.epoch, [(1, "create_stream", ("r", DECL, "t", None, None),
                              {"recovered": True})])  # fmt: skip
    os.fdatasync = broken
    address, key = shard.listen()
    out.send((address, key, shard.epoch))
    threading.Event().wait(LIMIT)


def test_a_shard_whose_log_cannot_be_forced_ends_its_process(tmp_path) -> None:
    # Answering anyway would let the front-end take the change as made; the process
    # ends instead (Ray restarts it from its disk), and the front-end sees it lost.
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve_with_failing_fsync, args=(str(tmp_path / "s"), child))
    proc.start()
    try:
        assert parent.poll(LIMIT), "the shard never started"
        address, key, epoch = parent.recv()
        sock = wire.attach(Client(tuple(address), authkey=key))
        sock.settimeout(LIMIT)
        wire.send(sock, (epoch, [_insert(2)]))
        with pytest.raises((EOFError, OSError)):
            wire.recv(sock)  # no answer: the connection ends with the process
        proc.join(LIMIT)
        assert proc.exitcode == 70
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
