"""Invokes on one open call (the Invokes RPC, ``clients.Invoker``): every answer and every
refusal is what a unary Invoke gives for the same request at the same point of the
stream; a refusal does not end the call; the server's limit on open calls, a deadline, a
server restart and a server without Invokes each fall back or fail as documented. Real
servers on loopback ports, the real client library."""

from __future__ import annotations

import _thread
import asyncio
import socket
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest

from clients import (
    AsyncPSoupClient,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    PSoupClient,
    PSoupRpcError,
    Unauthenticated,
)
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.server import ServerConfig, start_server
from psoup.server.invoke_calls import CallsFull, InvokeCalls

SCHEMA = {"vid": "int", "spd": "float", "t": "int"}
QUERIES = [
    "SELECT vid, t FROM {s} WHERE vid < :x BEGIN NOW - 40 END NOW",
    "SELECT COUNT(*), SUM(spd) FROM {s} WHERE vid < :x BEGIN 0 END NOW",
    "SELECT * FROM {s} WHERE vid = :x BEGIN NOW - 10 END NOW",
]


@pytest.fixture(scope="module")
def server():
    srv = start_server(
        ServerConfig(
            port=0, max_message_bytes=128 * 1024, max_invoke_calls=2, invoke_idle_seconds=None
        )
    )
    yield srv
    srv.stop(grace=1)


@pytest.fixture
def client(server):
    with PSoupClient(f"127.0.0.1:{server.port}", timeout=30, batch_rows=500) as c:
        yield c


_names = iter(range(10**6))


def _stream(c: PSoupClient) -> str:
    name = f"iv{next(_names)}"
    c.create_stream(name, SCHEMA, time="t")
    return name


def _batch(rng: np.random.Generator, t0: int, rows: int) -> dict:
    return {
        "vid": rng.integers(0, 20, rows),
        "spd": rng.random(rows),
        "t": t0 + np.sort(rng.integers(0, 30, rows)),
    }


def _answer(fn, *args):
    """What ``fn(*args)`` gave: its result's parts, or its error's class and message."""
    try:
        r = fn(*args)
    except PSoupRpcError as exc:
        return type(exc), exc.message
    return r.columns, r.types, r.rows, r.now, r.window


def _open_calls(server, want: int, timeout: float = 10.0) -> int:
    """The server's count of open Invokes calls (Stats' ``invoke_calls``) once it is
    ``want`` (a call's end reaches the server after the client has moved on), or as it
    is at ``timeout``."""
    end = time.monotonic() + timeout
    with PSoupClient(f"127.0.0.1:{server.port}") as c:
        while (n := c.stats()["invoke_calls"]) != want and time.monotonic() < end:
            time.sleep(0.01)
    return n


def _idle_calls(srv, want: int, timeout: float = 10.0) -> int:
    """How many of the server's open Invokes calls wait for a request, once it is
    ``want`` (a call counts as idle once its reply is sent, a moment after the client
    has it), or as it is at ``timeout``."""
    end = time.monotonic() + timeout
    calls = srv.servicer.invoke_calls
    while (n := sum(c.idle_since is not None for c in list(calls._open))) != want and (
        time.monotonic() < end
    ):
        time.sleep(0.001)
    return n


@pytest.mark.parametrize("seed", range(8))
def test_an_invoker_answers_as_unary_invokes_do(server, client, seed) -> None:
    """Random streams, queries, ingests and invoke times (some refused, some results too
    large for a message): the Invoker and a unary Invoke agree at every point."""
    rng = np.random.default_rng(seed)
    s = _stream(client)
    handles = [
        client.register(
            QUERIES[int(rng.integers(0, 3))].format(s=s), {"x": int(rng.integers(0, 20))}
        )
        for _ in range(4)
    ] + ["no-such-handle", ""]
    t0 = 0
    with client.invoker() as inv:
        for _ in range(12):
            if rng.random() < 0.5:
                rows = int(rng.choice([1, 50, 3000]))  # 3000 rows: some results take pages
                client.insert_columns(s, _batch(rng, t0, rows))
                t0 += 30
            h = handles[int(rng.integers(0, len(handles)))]
            now = [None, int(rng.integers(0, t0 + 40)), 1e308][int(rng.integers(0, 3))]
            assert _answer(inv.invoke, h, now) == _answer(client.invoke, h, now)
    assert _open_calls(server, 0) == 0


def test_a_refused_invoke_keeps_the_call_and_every_invoke_counts(server, client) -> None:
    s = _stream(client)
    client.insert(s, [(1, 0.5, 1), (2, 0.5, 2)])
    h = client.register(f"SELECT * FROM {s} WHERE vid = 1 BEGIN 0 END NOW")
    with client.invoker() as inv:
        assert inv.invoke(h).rows == [(1, 0.5, 1)]
        call = inv._call
        with pytest.raises(NotFound, match="unknown query handle"):
            inv.invoke("nope")
        with pytest.raises(InvalidArgument, match="handle: required"):
            inv.invoke("")
        with pytest.raises(InvalidArgument, match="now"):
            inv.invoke(h, now=float("nan"))
        assert inv.invoke(h).rows == [(1, 0.5, 1)]
        assert inv._call is call and _open_calls(server, 1) == 1
    assert client.describe_query(h).invocations == 2  # the refused one ran nothing
    assert _open_calls(server, 0) == 0


def test_past_max_invoke_calls_an_invoker_uses_unary_invokes(server, client) -> None:
    s = _stream(client)
    client.insert(s, [(3, 0.5, 1)])
    h = client.register(f"SELECT vid FROM {s} BEGIN 0 END NOW")
    invokers = [client.invoker(retry_after=3600) for _ in range(3)]  # the limit is 2
    try:
        assert [inv.invoke(h).rows for inv in invokers] == [[(3,)]] * 3
        assert [inv._call is not None for inv in invokers] == [True, True, False]
        assert _open_calls(server, 2) == 2
        assert invokers[2].invoke(h).rows == [(3,)]  # still unary, until retry_after
    finally:
        for inv in invokers:
            inv.close()
    assert _open_calls(server, 0) == 0
    with client.invoker() as inv:  # the calls were given back
        inv.invoke(h)
        assert inv._call is not None


def test_at_the_limit_a_new_call_takes_the_place_of_the_call_idle_longest() -> None:
    # Idle for 0 s is idle long enough: every open call that waits for a request may give
    # its place, so which one does is decided by the order of the invokes alone.
    srv = start_server(ServerConfig(port=0, max_invoke_calls=2, invoke_idle_seconds=0.0))
    try:
        with PSoupClient(f"127.0.0.1:{srv.port}", timeout=30) as c:
            s = _stream(c)
            c.insert(s, [(5, 0.5, 1), (6, 0.25, 2)])
            h = c.register(f"SELECT vid FROM {s} WHERE vid > 0 BEGIN 0 END NOW")
            want = c.invoke(h).rows
            a, b, d = (c.invoker(retry_after=3600) for _ in range(3))
            try:
                assert a.invoke(h).rows == want and b.invoke(h).rows == want
                assert _idle_calls(srv, 2) == 2  # so the one to give its place is a's
                assert d.invoke(h).rows == want  # took a's place: a's call is cancelled
                assert d._call is not None and srv.servicer.invoke_calls.taken_over == 1
                assert _open_calls(srv, 2) == 2 and _idle_calls(srv, 2) == 2
                # a's next invoke finds its call cancelled and asks again on a new one,
                # which takes b's place (idle longest now): the caller sees its answer.
                assert a.invoke(h).rows == want
                assert a._call is not None and srv.servicer.invoke_calls.taken_over == 2
                assert _open_calls(srv, 2) == 2
                # What a sent on its cancelled call never ran: 1 unary + 4 on calls.
                assert c.describe_query(h).invocations == 5
            finally:
                for inv in (a, b, d):
                    inv.close()
            assert _open_calls(srv, 0) == 0
    finally:
        srv.stop(grace=1)


def test_an_async_invoker_whose_call_gave_its_place_asks_again_on_a_new_one() -> None:
    srv = start_server(ServerConfig(port=0, max_invoke_calls=2, invoke_idle_seconds=0.0))
    try:
        with PSoupClient(f"127.0.0.1:{srv.port}", timeout=30) as c:
            s = _stream(c)
            c.insert(s, [(7, 0.5, 1)])
            h = c.register(f"SELECT vid FROM {s} BEGIN 0 END NOW")

        async def scenario() -> None:
            async with AsyncPSoupClient(f"127.0.0.1:{srv.port}", timeout=30) as ac:
                a, b, d = (ac.invoker(retry_after=3600) for _ in range(3))
                try:
                    for k, inv in enumerate((a, b, d)):  # d takes the place of a's call
                        assert await asyncio.to_thread(_idle_calls, srv, k) == k
                        assert (await inv.invoke(h)).rows == [(7,)]
                    assert await asyncio.to_thread(_idle_calls, srv, 2) == 2
                    assert (await a.invoke(h)).rows == [(7,)]  # takes b's place
                    assert a._call is not None and srv.servicer.invoke_calls.taken_over == 2
                finally:
                    for inv in (a, b, d):
                        await inv.close()

        asyncio.run(scenario())
        assert _open_calls(srv, 0) == 0
    finally:
        srv.stop(grace=1)


def test_open_calls_give_their_place_only_when_idle_long_enough() -> None:
    class Context:  # the one method the table calls on a gRPC context
        def __init__(self):
            self.cancelled = False

        def cancel(self):
            self.cancelled = True

    calls = InvokeCalls(limit=2, idle_seconds=3600)
    first, second = Context(), Context()
    a, b = calls.open(first), calls.open(second)
    with pytest.raises(CallsFull):  # both idle, neither for an hour
        calls.open(Context())
    calls.idle_seconds = 0.0
    assert calls.busy(a) and calls.busy(b)
    with pytest.raises(CallsFull):  # both answering: neither is idle
        calls.open(Context())
    calls.idle(b)
    c = calls.open(Context())
    assert second.cancelled and not first.cancelled and len(calls) == 2
    assert not calls.busy(b)  # its handler ends without answering
    assert not calls.close(b) and calls.close(a) and calls.close(c) and len(calls) == 0
    assert calls.taken_over == 1
    never = InvokeCalls(limit=1, idle_seconds=None)
    never.idle(never.open(Context()))
    with pytest.raises(CallsFull):
        never.open(Context())


def test_a_deadline_cancels_the_call_and_the_next_invoke_opens_another(server, client) -> None:
    s = _stream(client)
    client.insert(s, [(4, 0.5, 1)])
    h = client.register(f"SELECT vid FROM {s} BEGIN 0 END NOW")
    with client.invoker() as inv:
        assert inv.invoke(h).rows == [(4,)]
        release = threading.Event()
        held = server.worker.submit(lambda: release.wait(30))  # the engine thread is busy
        try:
            start = time.monotonic()
            with pytest.raises(DeadlineExceeded):
                inv.invoke(h, timeout=0.3)
            assert time.monotonic() - start < 10
        finally:
            release.set()
            held.result(timeout=30)
        assert inv._call is None
        assert inv.invoke(h).rows == [(4,)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_invoke_after_a_server_restart_goes_on_a_new_call(tmp_path: Path) -> None:
    port = _free_port()
    config = ServerConfig(port=port, data_dir=str(tmp_path / "d"))
    srv = start_server(config)
    try:
        with PSoupClient(f"127.0.0.1:{port}", timeout=30) as c:
            c.create_stream("r", SCHEMA, time="t")
            c.insert("r", [(5, 0.5, 1)])
            h = c.register("SELECT vid FROM r BEGIN 0 END NOW")
            with c.invoker() as inv:
                assert inv.invoke(h).rows == [(5,)]
                srv.stop(grace=0)
                srv = start_server(config)
                assert inv.invoke(h).rows == [(5,)]
    finally:
        srv.stop(grace=1)


def test_an_undecodable_request_ends_the_call_with_invalid_argument(server) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        call = ch.stream_stream("/psoup.v1.PSoup/Invokes")(iter([b"\xff\xff\xff"]))
        with pytest.raises(grpc.RpcError) as err:
            list(call)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Invokes" in err.value.details()
    assert _open_calls(server, 0) == 0


def test_invokes_authenticate_once_and_check_each_handle(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:a-secret\nbob:b-secret\n")
    srv = start_server(ServerConfig(port=0, auth_tokens_file=str(tokens)))
    target = f"127.0.0.1:{srv.port}"
    try:
        with (
            PSoupClient(target, token="a-secret") as alice,
            PSoupClient(target, token="b-secret") as bob,
            PSoupClient(target, token="wrong") as eve,
        ):
            alice.create_stream("r", SCHEMA, time="t")
            alice.insert("r", [(6, 0.5, 1)])
            h = alice.register("SELECT vid FROM r BEGIN 0 END NOW")
            with bob.invoker() as inv:
                with pytest.raises(PermissionDenied, match="another client"):
                    inv.invoke(h)
                assert inv._call is not None  # refused, the call goes on
            with eve.invoker() as inv, pytest.raises(Unauthenticated):
                inv.invoke(h)
            with alice.invoker() as inv:
                assert inv.invoke(h).rows == [(6,)]
            alice.grant("r", "bob", "read")
            mine = bob.register("SELECT vid FROM r BEGIN 0 END NOW")
            with bob.invoker() as inv:  # a revoke reaches each request of an open call
                assert inv.invoke(mine).rows == [(6,)]
                alice.revoke("r", "bob", "read")
                with pytest.raises(PermissionDenied, match="read"):
                    inv.invoke(mine)
                alice.grant("r", "bob", "read")
                assert inv.invoke(mine).rows == [(6,)]
    finally:
        srv.stop(grace=1)


class _OnlyInvoke(pb_grpc.PSoupServicer):
    """A server of the API before Invokes: Invoke answers from a psoup server behind it."""

    def __init__(self, target: str):
        self.ch = grpc.insecure_channel(target)

    def Invoke(self, request, context):
        return pb_grpc.PSoupStub(self.ch).Invoke(request)


def test_against_a_server_without_invokes_an_invoker_uses_unary_invokes(server, client) -> None:
    s = _stream(client)
    client.insert(s, [(7, 0.5, 1)])
    h = client.register(f"SELECT vid FROM {s} BEGIN 0 END NOW")
    old = grpc.server(futures.ThreadPoolExecutor(2))
    front = _OnlyInvoke(f"127.0.0.1:{server.port}")
    pb_grpc.add_PSoupServicer_to_server(front, old)
    port = old.add_insecure_port("127.0.0.1:0")
    old.start()
    try:
        with PSoupClient(f"127.0.0.1:{port}") as c, c.invoker() as inv:
            assert inv.invoke(h).rows == [(7,)]
            assert inv._call is None and inv._unary_until == float("inf")
            assert inv.invoke(h).rows == [(7,)]
    finally:
        old.stop(0)
        front.ch.close()


def test_a_closed_invoker_refuses_to_invoke(client) -> None:
    inv = client.invoker()
    inv.close()
    inv.close()
    with pytest.raises(ValueError, match="closed"):
        inv.invoke("h")


def test_a_result_too_large_for_a_message_comes_in_pages(server, client) -> None:
    s = _stream(client)
    client.insert_columns(s, _batch(np.random.default_rng(0), 0, 10_000))  # ~240 KB > 128 KiB
    h = client.register(f"SELECT * FROM {s} BEGIN 0 END NOW")
    with client.invoker() as inv:
        got = inv.invoke(h)
        assert len(got) == 10_000 and got.rows == client.invoke(h).rows
        assert inv._call is not None  # the refusal did not end the call


def test_an_interrupted_invoke_leaves_no_reply_for_the_next(server, client) -> None:
    s = _stream(client)
    client.insert(s, [(1, 0.5, 1), (2, 0.5, 2)])
    h1, h2 = (
        client.register(f"SELECT vid FROM {s} WHERE vid = {v} BEGIN 0 END NOW") for v in (1, 2)
    )
    with client.invoker() as inv:
        assert inv.invoke(h1).rows == [(1,)]
        release = threading.Event()
        held = server.worker.submit(lambda: release.wait(30))  # h1's next invoke waits
        threading.Timer(0.3, _thread.interrupt_main).start()
        try:
            with pytest.raises(KeyboardInterrupt):
                inv.invoke(h1, timeout=None)
        finally:
            release.set()
            held.result(timeout=30)
        assert inv.invoke(h2).rows == [(2,)]  # not h1's late reply


# -- the grpc.aio client's AsyncInvoker ----------------------------------------------------


def test_an_async_invoker_answers_as_async_unary_invokes_do(server, client) -> None:
    """The same agreement for ``AsyncInvoker``, with tasks sharing it; a refusal keeps
    the call; a deadline cancels it and the next invoke opens another; past
    max_invoke_calls it uses unary calls."""
    rng = np.random.default_rng(11)
    s = _stream(client)
    client.insert_columns(s, _batch(rng, 0, 10_000))  # some results take pages
    handles = [client.register(q.format(s=s), {"x": 7}) for q in QUERIES]
    handles += [client.register(f"SELECT * FROM {s} BEGIN 0 END NOW"), "no-such-handle", ""]
    target = f"127.0.0.1:{server.port}"
    # The calls of the tests before have ended on the server too: the invoker's call and
    # the two below must find max_invoke_calls' places free.
    assert _open_calls(server, 0) == 0

    async def scenario() -> None:
        async with AsyncPSoupClient(target, timeout=30) as c, c.invoker() as inv:

            async def both(h, now):
                async def answer(fn):
                    try:
                        r = await fn(h, now)
                    except PSoupRpcError as exc:
                        return type(exc), exc.message
                    return r.columns, r.types, r.rows, r.now, r.window

                return await answer(inv.invoke), await answer(c.invoke)

            asks = [(h, now) for h in handles for now in (None, 15, 1e308)]
            for got, want in await asyncio.gather(*(both(h, now) for h, now in asks)):
                assert got == want
            assert inv._call is not None  # the refusals did not end the call
            release = threading.Event()
            held = server.worker.submit(lambda: release.wait(30))
            try:
                with pytest.raises(DeadlineExceeded):
                    await inv.invoke(handles[0], timeout=0.3)
            finally:
                release.set()
                await asyncio.to_thread(held.result, 30)
            assert inv._call is None
            assert (await inv.invoke(handles[2])).rows == (await c.invoke(handles[2])).rows
            # The cancelled call's end reaches the server once its held invoke is done:
            # until then it takes a place, and the first of the others would be refused.
            assert await asyncio.to_thread(_open_calls, server, 1) == 1
            others = [c.invoker(retry_after=3600) for _ in range(2)]  # the limit is 2
            try:
                for other in others:
                    await other.invoke(handles[2])
                assert [o._call is not None for o in others] == [True, False]
            finally:
                for other in others:
                    await other.close()
        assert _open_calls(server, 0) == 0

    asyncio.run(scenario())
