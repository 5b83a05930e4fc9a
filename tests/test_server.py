"""The gRPC service end to end on a real server on a free loopback port, through raw stubs.

Every RPC: its happy path and its bad inputs, checking the status code, that the message
names the problem, that the server still answers SERVING and that nothing changed.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.server import ServerConfig, start_server
from psoup.server.worker import EngineWorker, QueueFull

SCHEMA = {"vid": "int", "spd": "float", "t": "int"}
C = grpc.StatusCode


@pytest.fixture(scope="module", params=["in memory", "durable"])
def server(request, tmp_path_factory):
    """A server in memory, and one whose acks wait for fsync (``--sync batch``): Ingest
    takes a different path in each (``PSoupServicer._ingest_direct`` and
    ``_ingest_pipelined``), and every test here holds for both."""
    data = None if request.param == "in memory" else str(tmp_path_factory.mktemp("data"))
    srv = start_server(
        ServerConfig(port=0, max_batch_rows=1000, max_query_chars=300, data_dir=data)
    )
    assert srv.servicer._acks_wait == (data is not None)
    yield srv
    srv.stop(grace=1)


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch


@pytest.fixture
def stub(channel) -> pb_grpc.PSoupStub:
    return pb_grpc.PSoupStub(channel)


_names = iter(range(10**6))


@pytest.fixture
def stream(stub) -> str:
    """A fresh stream of SCHEMA, named uniquely for the test."""
    name = f"s{next(_names)}"
    stub.CreateStream(create_request(name))
    return name


def create_request(name: str, schema=SCHEMA, time="t", max_window=None) -> pb.CreateStreamRequest:
    req = pb.CreateStreamRequest(
        name=name,
        attributes=[pb.Attribute(name=a, type=codec.TYPE_TO_PB[t]) for a, t in schema.items()],
        time=time,
    )
    if max_window is not None:
        req.max_window = max_window
    return req


def batch(stream: str, vid, spd, t, batch_id: int = 0) -> pb.IngestRequest:
    cols = codec.encode_batch(SCHEMA, {"vid": vid, "spd": spd, "t": t})
    return pb.IngestRequest(stream=stream, columns=cols, batch_id=batch_id)


def ingest(stub, *reqs: pb.IngestRequest) -> list[pb.IngestAck]:
    return list(stub.Ingest(iter(reqs)))


def register(stub, text: str, **params) -> str:
    req = pb.RegisterQueryRequest(
        text=text, params={k: codec.to_value(v) for k, v in params.items()}
    )
    return stub.RegisterQuery(req).handle


def invoke(stub, handle: str, now=None, page_rows=0) -> list[tuple]:
    req = pb.InvokeQueryRequest(handle=handle, page_rows=page_rows)
    if now is not None:
        req.now = now
    return [r for page in stub.InvokeQuery(req) for r in codec.decode_rows(page.data, page.rows)]


def fails(fn, code: grpc.StatusCode, *words: str) -> str:
    """Run ``fn``; assert it fails with ``code`` and a message containing ``words``."""
    with pytest.raises(grpc.RpcError) as err:
        fn()
    assert err.value.code() == code, err.value.details()
    for w in words:
        assert w in err.value.details(), (w, err.value.details())
    return err.value.details()


def serving(channel) -> bool:
    h = health_pb2_grpc.HealthStub(channel)
    ok = health_pb2.HealthCheckResponse.SERVING
    return h.Check(health_pb2.HealthCheckRequest(service="psoup.v1.PSoup")).status == ok


def snapshot(stub, stream: str) -> tuple:
    info = stub.DescribeStream(pb.DescribeStreamRequest(name=stream))
    return info.tuples_ingested, info.tuples_stored, info.queries


# -- streams ------------------------------------------------------------------------------


def test_create_describe_list_drop(stub, channel) -> None:
    info = stub.CreateStream(create_request("cars", max_window=60))
    assert [a.name for a in info.attributes] == ["vid", "spd", "t"]
    assert info.max_window == 60 and info.time == "t" and not info.HasField("last_ts")
    assert "cars" in [s.name for s in stub.ListStreams(pb.ListStreamsRequest()).streams]
    fails(lambda: stub.CreateStream(create_request("cars")), C.ALREADY_EXISTS, "cars")
    h = register(stub, "SELECT * FROM cars BEGIN NOW - 1 END NOW")
    fails(lambda: stub.DropStream(pb.DropStreamRequest(name="cars")), C.FAILED_PRECONDITION, "cars")
    stub.UnregisterQuery(pb.UnregisterQueryRequest(handle=h))
    stub.DropStream(pb.DropStreamRequest(name="cars"))
    fails(lambda: stub.DescribeStream(pb.DescribeStreamRequest(name="cars")), C.NOT_FOUND, "cars")
    fails(lambda: stub.DropStream(pb.DropStreamRequest(name="cars")), C.NOT_FOUND, "cars")
    assert serving(channel)


@pytest.mark.parametrize(
    "req, words",
    [
        (create_request("bad-name"), ["bad-name"]),
        (create_request("x", time="nope"), ["nope"]),
        (create_request("x", schema={"a": "str", "t": "str"}), ["time"]),
        (create_request("x", max_window=-1), ["max_window"]),
        (
            pb.CreateStreamRequest(name="x", attributes=[pb.Attribute(name="t")], time="t"),
            ["attributes[0].type"],
        ),
        (pb.CreateStreamRequest(name="x", time="t"), ["attribute"]),
    ],
)
def test_bad_declarations_are_refused_and_create_nothing(stub, channel, req, words) -> None:
    before = len(stub.ListStreams(pb.ListStreamsRequest()).streams)
    fails(lambda: stub.CreateStream(req), C.INVALID_ARGUMENT, *words)
    assert len(stub.ListStreams(pb.ListStreamsRequest()).streams) == before
    assert serving(channel)


# -- ingest -------------------------------------------------------------------------------


def test_ingest_acknowledges_each_batch_with_its_tuple_ids(stub, stream) -> None:
    acks = ingest(
        stub,
        batch(stream, [1, 2], [10.0, 20.0], [5, 6], batch_id=7),
        batch(stream, [], [], [], batch_id=8),
        batch(stream, [3], [30.0], [6], batch_id=9),
    )
    assert [a.batch_id for a in acks] == [7, 8, 9]
    assert [a.rows for a in acks] == [2, 0, 1]
    assert acks[0].last_tuple_id - acks[0].first_tuple_id == 1
    assert acks[2].first_tuple_id == acks[0].last_tuple_id + 1
    assert snapshot(stub, stream)[0] == 3


def test_an_ingest_ack_does_not_wait_for_the_next_batch(stub, stream) -> None:
    # A client that sends a batch and then waits for its ack (as the Linear Road driver
    # waits before answering a request of that second) must get it while the stream is
    # still open and no next batch has come: an ack held until the next request arrives
    # adds a whole batch interval to every answer.
    more = threading.Event()

    def requests():
        yield batch(stream, [1], [1.0], [1], batch_id=1)
        more.wait(timeout=30)  # the next batch only comes after the first ack
        yield batch(stream, [2], [2.0], [2], batch_id=2)

    call = stub.Ingest(requests(), timeout=20)
    first = next(call)  # DEADLINE_EXCEEDED if the ack waits for batch 2
    assert not more.is_set() and (first.batch_id, first.rows) == (1, 1)
    more.set()
    assert [(a.batch_id, a.rows) for a in call] == [(2, 1)]


def test_a_long_ingest_call_does_not_keep_its_applied_batches() -> None:
    # An Ingest call may stream for hours (a feed, a flood): what the server keeps for a
    # batch must go once the batch is applied, or its memory grows with the call.
    srv = start_server(ServerConfig(port=0, freeze_heap_every=0))  # gc lists frozen objects not
    sent, done = 300, threading.Event()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
            stub = pb_grpc.PSoupStub(ch)
            stub.CreateStream(create_request("r"))

            def requests():
                for k in range(sent):
                    yield batch("r", [k], [1.0], [k], batch_id=k)
                done.wait(timeout=30)  # the call stays open while the server is looked at

            call = stub.Ingest(requests(), timeout=60)
            acks = [next(call) for _ in range(sent)]
            gc.collect()
            live = sum(isinstance(o, Future) for o in gc.get_objects())
            done.set()
            assert [a.batch_id for a in acks] == list(range(sent))
            assert list(call) == []
    finally:
        done.set()
        srv.stop(grace=1)
    assert live < 20, f"{live} futures alive after {sent} batches of one open call"


def _bad_batches(stream: str):
    good = codec.encode_batch(SCHEMA, {"vid": [1], "spd": [1.0], "t": [100]})
    missing = pb.IngestRequest(stream=stream, columns=good[:2])
    twice = pb.IngestRequest(stream=stream, columns=[*good, good[0]])
    strings = pb.IngestRequest(
        stream=stream, columns=[codec.encode_column("vid", "str", ["x"]), *good[1:]]
    )
    floats = pb.IngestRequest(
        stream=stream, columns=[codec.encode_column("vid", "float", [1.5]), *good[1:]]
    )
    ragged = pb.IngestRequest(
        stream=stream, columns=[codec.encode_column("vid", "int", [1, 2]), *good[1:]]
    )
    torn = pb.IngestRequest(
        stream=stream, columns=[pb.Column(name="vid", int64_le=b"123"), *good[1:]]
    )
    extra = pb.IngestRequest(stream=stream, columns=[*good, codec.encode_column("x", "int", [1])])
    return [
        (missing, C.INVALID_ARGUMENT, ["t"]),
        (twice, C.INVALID_ARGUMENT, ["vid", "twice"]),
        (strings, C.INVALID_ARGUMENT, ["vid"]),
        (floats, C.INVALID_ARGUMENT, ["vid"]),
        (ragged, C.INVALID_ARGUMENT, ["vid"]),
        (torn, C.INVALID_ARGUMENT, ["vid", "multiple of 8"]),
        (extra, C.INVALID_ARGUMENT, ["x"]),
        (batch(stream, [1, 2], [1.0, 2.0], [100, 99]), C.INVALID_ARGUMENT, ["row 1", "'t'"]),
        (batch(stream, [1], [1.0], [0]), C.INVALID_ARGUMENT, ["row 0", "'t'"]),
        (
            batch(stream, [1] * 1001, [1.0] * 1001, [100] * 1001),
            C.RESOURCE_EXHAUSTED,
            ["max_batch_rows"],
        ),
        (batch("nosuch", [1], [1.0], [100]), C.NOT_FOUND, ["nosuch"]),
    ]


@pytest.mark.parametrize("case", range(11))
def test_bad_batches_are_rejected_whole_and_change_nothing(stub, channel, stream, case) -> None:
    ingest(stub, batch(stream, [1, 2], [1.0, 2.0], [1, 50]))
    h = register(stub, f"SELECT * FROM {stream} WHERE vid >= 1 BEGIN 0 END NOW")
    before, result = snapshot(stub, stream), invoke(stub, h)
    req, code, words = _bad_batches(stream)[case]
    fails(lambda: ingest(stub, batch(stream, [5], [5.0], [60], batch_id=1), req), code, *words)
    # The good batch before the bad one stays applied; the bad one left no trace.
    assert snapshot(stub, stream)[0] == before[0] + 1
    assert invoke(stub, h) == [*result, (5, 5.0, 60)]
    assert serving(channel)


# -- queries ------------------------------------------------------------------------------


def test_register_invoke_pages_now_describe_unregister(stub, stream) -> None:
    ingest(stub, batch(stream, list(range(10)), [float(i) for i in range(10)], list(range(10))))
    text = f"SELECT vid, t FROM {stream} WHERE vid < :x BEGIN NOW - 4 END NOW"
    resp = stub.RegisterQuery(pb.RegisterQueryRequest(text=text, params={"x": codec.to_value(8)}))
    assert len(resp.handle) == 32 and [c.name for c in resp.columns] == ["vid", "t"]
    assert resp.window.begin.relative_to_now and resp.window.begin.offset == -4
    pages = list(stub.InvokeQuery(pb.InvokeQueryRequest(handle=resp.handle, page_rows=2)))
    assert [p.rows for p in pages] == [2, 1] and pages[0].total_rows == 3
    first = pages[0]
    assert codec.from_value(first.now) == 9
    assert (codec.from_value(first.window_begin), codec.from_value(first.window_end)) == (5, 9)
    assert invoke(stub, resp.handle) == [(5, 5), (6, 6), (7, 7)]
    assert invoke(stub, resp.handle, now=3) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    # Invoke: the same result whole, in one message
    one = stub.Invoke(pb.InvokeRequest(handle=resp.handle))
    assert one.columns == first.columns and one.total_rows == one.rows == 3
    assert (one.now, one.window_begin, one.window_end) == (
        first.now,
        first.window_begin,
        first.window_end,
    )
    assert codec.decode_rows(one.data, one.rows) == [(5, 5), (6, 6), (7, 7)]
    whole = stub.Invoke(pb.InvokeRequest(handle=resp.handle, now=3))
    assert whole.total_rows == whole.rows == 4
    assert codec.decode_rows(whole.data, whole.rows) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    fails(
        lambda: stub.Invoke(pb.InvokeRequest(handle=resp.handle, now=float("inf"))),
        C.INVALID_ARGUMENT,
        "now",
    )
    info = stub.DescribeQuery(pb.DescribeQueryRequest(handle=resp.handle))
    assert info.text == text and codec.from_value(info.params["x"]) == 8
    assert info.invocations == 5 and list(info.streams) == [stream]
    stub.UnregisterQuery(pb.UnregisterQueryRequest(handle=resp.handle))
    fails(lambda: invoke(stub, resp.handle), C.NOT_FOUND, "handle")


def test_aggregates_send_nulls(stub, stream) -> None:
    h = register(stub, f"SELECT COUNT(*), SUM(spd), MIN(vid) FROM {stream} BEGIN 0 END NOW")
    assert invoke(stub, h) == [(0, None, None)]
    ingest(stub, batch(stream, [4, 2], [1.5, 2.0], [1, 2]))
    assert invoke(stub, h) == [(2, 3.5, 2)]


@pytest.mark.parametrize(
    "text, params, code, words",
    [
        (
            "SELECT * FROM {s} WHERE vid < BEGIN 0 END NOW",
            {},
            C.INVALID_ARGUMENT,
            ["line 1, column"],
        ),
        ("SELECT * FROM nosuch BEGIN 0 END NOW", {}, C.INVALID_ARGUMENT, ["nosuch"]),
        ("SELECT nope FROM {s} BEGIN 0 END NOW", {}, C.INVALID_ARGUMENT, ["nope"]),
        ("SELECT * FROM {s} WHERE vid = 'x' BEGIN 0 END NOW", {}, C.INVALID_ARGUMENT, ["vid"]),
        ("SELECT * FROM {s} WHERE vid = :v BEGIN 0 END NOW", {}, C.INVALID_ARGUMENT, ["v"]),
        (
            "SELECT * FROM {s} BEGIN 0 END NOW" + " " * 300,
            {},
            C.RESOURCE_EXHAUSTED,
            ["max_query_chars"],
        ),
        ("", {}, C.INVALID_ARGUMENT, ["text"]),
    ],
)
def test_bad_queries_are_refused_and_register_nothing(
    stub, channel, stream, text, params, code, words
) -> None:
    before = stub.Stats(pb.StatsRequest()).queries
    fails(lambda: register(stub, text.format(s=stream), **params), code, *words)
    assert stub.Stats(pb.StatsRequest()).queries == before
    assert serving(channel)


def test_unset_param_value_is_refused(stub, stream) -> None:
    req = pb.RegisterQueryRequest(
        text=f"SELECT * FROM {stream} WHERE vid = :v BEGIN 0 END NOW", params={"v": pb.Value()}
    )
    fails(lambda: stub.RegisterQuery(req), C.INVALID_ARGUMENT, "params['v']")


@pytest.mark.parametrize(
    "method", ["InvokeQuery", "Invoke", "Subscribe", "UnregisterQuery", "DescribeQuery"]
)
def test_unknown_and_missing_handles(stub, channel, method) -> None:
    reqs = {
        "InvokeQuery": pb.InvokeQueryRequest,
        "Invoke": pb.InvokeRequest,
        "Subscribe": pb.SubscribeRequest,
        "UnregisterQuery": pb.UnregisterQueryRequest,
        "DescribeQuery": pb.DescribeQueryRequest,
    }

    def call(handle):
        out = getattr(stub, method)(reqs[method](handle=handle))
        return list(out) if isinstance(out, Iterator) else out

    fails(lambda: call("0" * 32), C.NOT_FOUND, "handle")
    fails(lambda: call(""), C.INVALID_ARGUMENT, "handle")
    assert serving(channel)


# -- subscriptions ------------------------------------------------------------------------


def test_subscribe_sends_current_then_each_batch_once_in_order(stub, stream) -> None:
    ingest(stub, batch(stream, [1, 9], [1.0, 9.0], [1, 2]))
    h = register(stub, f"SELECT vid, t FROM {stream} WHERE vid < 5 BEGIN 0 END NOW")
    call = stub.Subscribe(pb.SubscribeRequest(handle=h, include_current=True))
    first = next(call)
    assert first.kind == pb.SubscribeResponse.CURRENT
    assert codec.decode_rows(first.data, first.rows) == [(1, 1)]
    acks = ingest(
        stub,
        batch(stream, [2, 7], [0.0, 0.0], [3, 3], batch_id=1),
        batch(stream, [8], [0.0], [4], batch_id=2),  # matches nothing: no message
        batch(stream, [3, 4], [0.0, 0.0], [5, 6], batch_id=3),
    )
    got = [next(call), next(call)]
    call.cancel()
    assert [m.kind for m in got] == [pb.SubscribeResponse.NEW] * 2
    assert [m.first_tuple_id for m in got] == [acks[0].first_tuple_id, acks[2].first_tuple_id]
    rows = [r for m in got for r in codec.decode_rows(m.data, m.rows)]
    assert rows == [(2, 3), (3, 5), (4, 6)]
    assert invoke(stub, h) == [(1, 1), *rows]


def test_subscription_ends_when_the_query_is_unregistered(stub, stream) -> None:
    h = register(stub, f"SELECT * FROM {stream} BEGIN 0 END NOW")
    call = stub.Subscribe(pb.SubscribeRequest(handle=h))
    # The call returns before the server has subscribed; its header says it has.
    assert ("psoup-subscribed", "1") in call.initial_metadata()
    ingest(stub, batch(stream, [1], [1.0], [1]))
    assert next(call).rows == 1
    stub.UnregisterQuery(pb.UnregisterQueryRequest(handle=h))
    assert list(call) == []
    assert call.code() == C.OK


# -- stats, health, reflection -------------------------------------------------------------


def test_stats_health_and_reflection(stub, channel, stream) -> None:
    ingest(stub, batch(stream, [1, 2, 3], [1.0, 2.0, 3.0], [1, 2, 3]))
    h = register(stub, f"SELECT * FROM {stream} WHERE vid = 2 BEGIN 0 END NOW")
    invoke(stub, h)
    stats = stub.Stats(pb.StatsRequest())
    assert stats.strategy == "psoup-p" and stats.queries >= 1 and stats.memory_bytes > 0
    assert stats.invoke_latency.count >= 1 and stats.invoke_latency.p99_ms > 0
    mine = next(s for s in stats.streams if s.name == stream)
    assert mine.tuples_stored == 3 and mine.query_entries == 1
    assert serving(channel)
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    answer = next(
        refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    )
    names = {s.name for s in answer.list_services_response.service}
    assert {"psoup.v1.PSoup", "grpc.health.v1.Health"} <= names


# -- authentication and ownership ----------------------------------------------------------


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    tokens = tmp_path_factory.mktemp("auth") / "tokens"
    tokens.write_text("# client-id:token\nalice:a-secret\nbob:b-secret\n")
    srv = start_server(ServerConfig(port=0, auth_tokens_file=str(tokens), max_queries_per_client=2))
    yield srv
    srv.stop(grace=1)


def _authed(port: int, token: str | None):
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.PSoupStub(ch)
    md = (("authorization", f"Bearer {token}"),) if token else ()

    class Authed:
        def __getattr__(self, name):
            method = getattr(stub, name)
            return lambda req, **kw: method(req, metadata=md, **kw)

    return ch, Authed()


def test_tokens_and_ownership(auth_server) -> None:
    ch_a, alice = _authed(auth_server.port, "a-secret")
    ch_b, bob = _authed(auth_server.port, "b-secret")
    ch_n, nobody = _authed(auth_server.port, None)
    ch_w, wrong = _authed(auth_server.port, "guess")
    with ch_a, ch_b, ch_n, ch_w:
        fails(
            lambda: nobody.ListStreams(pb.ListStreamsRequest()), C.UNAUTHENTICATED, "authorization"
        )
        fails(lambda: wrong.ListStreams(pb.ListStreamsRequest()), C.UNAUTHENTICATED, "token")
        fails(lambda: nobody.CreateStream(create_request("z")), C.UNAUTHENTICATED)
        alice.CreateStream(create_request("z"))
        h = alice.RegisterQuery(
            pb.RegisterQueryRequest(text="SELECT * FROM z BEGIN 0 END NOW")
        ).handle
        for req, method in (
            (pb.InvokeQueryRequest(handle=h), "InvokeQuery"),
            (pb.InvokeRequest(handle=h), "Invoke"),
            (pb.SubscribeRequest(handle=h), "Subscribe"),
            (pb.DescribeQueryRequest(handle=h), "DescribeQuery"),
            (pb.UnregisterQueryRequest(handle=h), "UnregisterQuery"),
        ):

            def call(method=method, req=req):
                out = getattr(bob, method)(req)
                return list(out) if isinstance(out, Iterator) else out

            fails(call, C.PERMISSION_DENIED, "another client")
        assert next(alice.InvokeQuery(pb.InvokeQueryRequest(handle=h))).total_rows == 0
        # max_queries_per_client=2: alice has 1, may add 1 more.
        alice.RegisterQuery(pb.RegisterQueryRequest(text="SELECT * FROM z BEGIN 0 END NOW"))
        fails(
            lambda: alice.RegisterQuery(
                pb.RegisterQueryRequest(text="SELECT * FROM z BEGIN 0 END NOW")
            ),
            C.RESOURCE_EXHAUSTED,
            "max_queries_per_client=2",
        )
        fails(
            lambda: bob.RegisterQuery(
                pb.RegisterQueryRequest(text="SELECT * FROM z BEGIN 0 END NOW")
            ),
            C.PERMISSION_DENIED,
            "stream 'z': client 'bob' has no read right",
        )
        alice.Grant(pb.GrantRequest(stream="z", client="bob", right="read"))
        bob.RegisterQuery(pb.RegisterQueryRequest(text="SELECT * FROM z BEGIN 0 END NOW"))
        alice.UnregisterQuery(pb.UnregisterQueryRequest(handle=h))
        alice.RegisterQuery(pb.RegisterQueryRequest(text="SELECT * FROM z BEGIN 0 END NOW"))
        assert serving(ch_a)


# -- the engine thread ---------------------------------------------------------------------


def test_worker_refuses_ingest_beyond_its_queue_and_serves_urgent_work_first() -> None:
    worker = EngineWorker(ingest_limit=2)
    gate, order = threading.Event(), []
    blocker = worker.submit(gate.wait)  # occupies the engine thread
    first = worker.submit_ingest(lambda: order.append("ingest 1"))
    second = worker.submit_ingest(lambda: order.append("ingest 2"))
    with pytest.raises(QueueFull):
        worker.submit_ingest(lambda: order.append("ingest 3"))
    assert worker.queue_depth == 2
    urgent = worker.submit(lambda: order.append("invoke"))
    gate.set()
    for f in (blocker, first, second, urgent):
        f.result(timeout=10)
    assert order == ["invoke", "ingest 1", "ingest 2"]
    assert worker.queue_depth == 0


def test_a_call_runs_on_its_own_thread_when_the_engine_is_idle_and_alone() -> None:
    worker = EngineWorker(ingest_limit=4)
    assert worker.call(threading.get_ident) == threading.get_ident()  # no hand-off
    gate, started, order = threading.Event(), threading.Event(), []

    def slow() -> int:
        started.set()
        gate.wait()
        order.append("inline")
        return threading.get_ident()

    with ThreadPoolExecutor(1) as pool:
        caller = pool.submit(lambda: (threading.get_ident(), worker.call(slow)))
        started.wait(10)
        # queued while it runs: the engine thread takes them only once it is done
        ingest = worker.submit_ingest(lambda: order.append("ingest"))
        urgent = worker.submit(lambda: order.append("urgent"))
        assert not ingest.done() and not urgent.done()
        gate.set()
        own, ran_on = caller.result(timeout=10)
    for f in (ingest, urgent):
        f.result(timeout=10)
    assert ran_on == own != worker._thread.ident
    assert order == ["inline", "urgent", "ingest"]
    with pytest.raises(ZeroDivisionError):  # an inline call's error is the caller's
        worker.call(lambda: 1 / 0)
    assert worker.call(lambda: "still serving") == "still serving"
    worker.stop()


def test_run_ingest_runs_here_when_idle_else_waits_its_turn_in_the_queue() -> None:
    """An ingest batch run and waited for: on the caller's thread when the engine thread
    is idle (with the CPU it took), else queued behind what runs (QueueFull at the
    limit) and run on the engine thread; and the worker is free again either way."""
    worker = EngineWorker(ingest_limit=1)
    here = threading.get_ident()
    ran_on, cpu = worker.run_ingest(threading.get_ident)
    assert ran_on == here and cpu >= 0.0
    gate, order = threading.Event(), []
    blocker = worker.submit(gate.wait)  # occupies the engine thread
    with ThreadPoolExecutor(2) as pool:
        queued = pool.submit(worker.run_ingest, lambda: (order.append("ingest"),
                                                          threading.get_ident()))  # fmt: skip
        while worker.queue_depth == 0 and not queued.done():
            gate.wait(0.001)
        with pytest.raises(QueueFull):  # the one place in the queue is taken
            worker.run_ingest(lambda: order.append("refused"))
        order.append("released")
        gate.set()
        (_, ran_on), _ = queued.result(timeout=10)
    blocker.result(timeout=10)
    assert order == ["released", "ingest"] and ran_on == worker._thread.ident
    assert worker.run_ingest(threading.get_ident)[0] == here  # idle again: here
    worker.stop()


def test_worker_stops_while_a_caller_runs_a_closure_inline() -> None:
    """A stop that comes while a closure runs on its caller's thread ends the engine
    thread once that closure is done (the stop's wake-up found the engine busy)."""
    worker = EngineWorker(ingest_limit=4)
    running, gate = threading.Event(), threading.Event()
    here = threading.get_ident()

    def inline() -> int:
        running.set()
        gate.wait(30)
        return threading.get_ident()

    with ThreadPoolExecutor(1) as pool:
        caller = pool.submit(worker.run_ingest, inline)
        assert running.wait(10)
        # A daemon thread: a stop that never returns fails the test instead of hanging it.
        stopper = threading.Thread(target=worker.stop, daemon=True)
        stopper.start()
        while not worker._stopping:  # the stop has told the engine thread
            running.wait(0.001)
        gate.set()
        ran_on, _ = caller.result(timeout=10)
    stopper.join(10)
    assert not stopper.is_alive(), "the stop waits for an engine thread that sleeps on"
    assert ran_on != here and ran_on != worker._thread.ident  # the pool's thread ran it
    assert not worker._thread.is_alive()


def test_worker_takes_ingest_round_robin_over_clients() -> None:
    worker = EngineWorker(ingest_limit=10)
    gate, order = threading.Event(), []
    blocker = worker.submit(gate.wait)
    futs = [worker.submit_ingest(lambda n=n: order.append(f"a{n}"), "a") for n in range(3)]
    futs.append(worker.submit_ingest(lambda: order.append("b0"), "b"))
    futs.append(worker.submit_ingest(lambda: order.append("c0"), "c"))
    futs.append(worker.submit_ingest(lambda: order.append("b1"), "b"))
    gate.set()
    for f in (blocker, *futs):
        f.result(timeout=10)
    assert order == ["a0", "b0", "c0", "a1", "b1", "a2"]  # each client's own in order
    worker.stop()
    worker.stop()


def test_full_ingest_queue_answers_resource_exhausted(server, stub, stream) -> None:
    gate = threading.Event()
    blocker = server.worker.submit(gate.wait)  # hold the engine thread
    saved, server.worker.ingest_limit = server.worker.ingest_limit, 0
    try:
        fails(
            lambda: ingest(stub, batch(stream, [1], [1.0], [1])),
            C.RESOURCE_EXHAUSTED,
            "ingest_queue_batches",
        )
    finally:
        server.worker.ingest_limit = saved
        gate.set()
        blocker.result(timeout=10)
    assert snapshot(stub, stream)[0] == 0


def test_ingest_gives_its_turn_back_on_every_ending(server, stub, stream) -> None:
    """Good batches, a bad batch and a full queue: afterwards every turn is free again."""
    ingest(stub, batch(stream, [1, 2], [1.0, 2.0], [1, 2]))
    with pytest.raises(grpc.RpcError):
        ingest(stub, batch(stream, [3], [3.0], [0]))  # time goes backwards: refused
    gate = threading.Event()
    blocker = server.worker.submit(gate.wait)
    saved, server.worker.ingest_limit = server.worker.ingest_limit, 0
    try:
        with pytest.raises(grpc.RpcError):
            ingest(stub, batch(stream, [4], [4.0], [4]))
    finally:
        server.worker.ingest_limit = saved
        gate.set()
        blocker.result(timeout=10)
    ingest(stub, batch(stream, [5], [5.0], [5]))
    turns = server.servicer.turns
    done = threading.Event()
    while turns.free != turns.slots:  # given back as the engine finishes: at most a moment
        done.wait(0.001)
    turns._check()


def test_ingest_makes_way_for_interactive_calls() -> None:
    """Ingest pauses only once an interactive call has come, and loses nothing by it."""
    srv = start_server(ServerConfig(port=0, ingest_share=0.5))
    turns = srv.servicer.turns
    turns.recent = 3600.0  # every interactive call of this test counts as recent
    try:
        with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
            stub = pb_grpc.PSoupStub(ch)
            stub.CreateStream(create_request("s"))
            ingest(stub, *(batch("s", [k], [1.0], [k], batch_id=k) for k in range(3)))
            assert turns.owed == 0.0  # creating a stream is not interactive
            stub.DescribeStream(pb.DescribeStreamRequest(name="s"))
            acks = ingest(stub, *(batch("s", [k], [1.0], [k], batch_id=k) for k in range(3, 9)))
            assert [a.batch_id for a in acks] == list(range(3, 9))
            # Owed, not always waited: a reader that comes back after the pause has passed
            # does not wait.
            assert turns.owed > 0.0
            assert snapshot(stub, "s")[0] == 9
    finally:
        srv.stop(grace=1)


def test_every_interactive_method_is_noted_as_it_arrives() -> None:
    """Each RPC named interactive is one of the service's, and a call of it (answered or
    refused) is noted before it runs; an ingest is not."""
    from psoup.server.servicer import INTERACTIVE

    service = pb.DESCRIPTOR.services_by_name["PSoup"]
    assert {m.name for m in service.methods} >= INTERACTIVE
    # the interactive calls (#16: invoke, register, describe), never bulk ingest
    assert {"Invoke", "InvokeQuery", "RegisterQuery", "DescribeQuery", "DescribeStream"} <= (
        INTERACTIVE
    )
    assert not {"Ingest", "LoadBatches", "BeginLoad", "CommitLoad"} & INTERACTIVE
    srv = start_server(ServerConfig(port=0))
    turns = srv.servicer.turns
    try:
        with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
            for m in sorted({m.name for m in service.methods}):
                method = service.methods_by_name[m]
                turns._interactive = -1.0
                req = getattr(pb, method.input_type.name)()
                kind = (
                    ("stream" if method.client_streaming else "unary")
                    + "_"
                    + ("stream" if method.server_streaming else "unary")
                )
                call = getattr(ch, kind)(f"/{service.full_name}/{m}",
                                         type(req).SerializeToString, bytes)  # fmt: skip
                arg = iter([req]) if method.client_streaming else req
                with contextlib.suppress(grpc.RpcError):
                    answer = call(arg, timeout=5)
                    if method.server_streaming:
                        list(answer)
                assert (turns._interactive >= 0) == (m in INTERACTIVE), m
    finally:
        srv.stop(grace=1)


def test_columns_round_trip_through_the_codec() -> None:
    ints = np.array([-(2**63), 0, 2**63 - 1])
    assert codec.decode_column(codec.encode_column("a", "int", ints)).tolist() == ints.tolist()
    assert codec.decode_column(codec.encode_column("a", "float", [1.5, None])) == [1.5, None]
    assert codec.decode_column(codec.encode_column("a", "str", ["x", None, ""])) == ["x", None, ""]
    for bad in ([1.5], [True], np.array([1.5]), ["x"]):
        with pytest.raises(codec.CodecError, match="'a'"):
            codec.encode_column("a", "int", bad)


def test_oversized_message_is_refused_by_the_message_limit() -> None:
    srv = start_server(ServerConfig(port=0, max_message_bytes=64 << 10))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
            stub = pb_grpc.PSoupStub(ch)
            stub.CreateStream(create_request("big"))
            n = 10_000  # 3 x 8 x 10,000 bytes > 64 KiB
            req = batch("big", list(range(n)), [1.0] * n, list(range(n)))
            fails(lambda: ingest(stub, req), C.RESOURCE_EXHAUSTED, "larger than max")
            assert snapshot(stub, "big")[0] == 0
            assert serving(ch)
    finally:
        srv.stop(grace=1)


# -- bulk loads and partitioned reads -------------------------------------------------------


def _load_req(load_id: str, vid, spd, t, batch_id: int = 0) -> pb.LoadBatchRequest:
    cols = codec.encode_batch(SCHEMA, {"vid": vid, "spd": spd, "t": t})
    return pb.LoadBatchRequest(load_id=load_id, columns=cols, batch_id=batch_id)


def test_load_replaces_contents_atomically_and_reads_back_in_parts(stub, channel, stream) -> None:
    ingest(stub, batch(stream, [1, 2], [1.0, 2.0], [1, 2]))
    h = register(stub, f"SELECT vid, t FROM {stream} WHERE vid >= 5 BEGIN 0 END NOW")
    lid = stub.BeginLoad(pb.BeginLoadRequest(stream=stream)).load_id
    # Two loaders stage concurrently-style into one load, times out of order.
    a = stub.LoadBatches(iter([_load_req(lid, [9, 5], [0.0, 0.0], [30, 10])]))
    b = stub.LoadBatches(iter([_load_req(lid, [7], [0.0], [20]), _load_req(lid, [], [], [])]))
    assert (a.rows, b.rows, b.batches) == (2, 1, 2)
    assert invoke(stub, h) == []  # staged rows are invisible
    done = stub.CommitLoad(pb.CommitLoadRequest(load_id=lid))
    assert done.rows == 3 and done.last_tuple_id - done.first_tuple_id == 2
    assert invoke(stub, h) == [(5, 10), (7, 20), (9, 30)]
    parts = [
        codec.decode_rows(p.columns, p.rows)
        for k in range(3)
        for p in stub.ReadStream(pb.ReadStreamRequest(stream=stream, part=k, parts=3, page_rows=1))
    ]
    assert [r for page in parts for r in page] == [(5, 0.0, 10), (7, 0.0, 20), (9, 0.0, 30)]
    fails(lambda: stub.CommitLoad(pb.CommitLoadRequest(load_id=lid)), C.NOT_FOUND, "load_id")
    assert serving(channel)


def test_bad_and_aborted_loads_leave_the_stream_alone(stub, channel, stream) -> None:
    ingest(stub, batch(stream, [1], [1.0], [1]))
    before = snapshot(stub, stream)
    fails(lambda: stub.BeginLoad(pb.BeginLoadRequest(stream="nosuch")), C.NOT_FOUND, "nosuch")
    lid = stub.BeginLoad(pb.BeginLoadRequest(stream=stream)).load_id
    bad = pb.LoadBatchRequest(
        load_id=lid, columns=codec.encode_batch({"vid": "int"}, {"vid": [1]}), batch_id=4
    )
    fails(lambda: stub.LoadBatches(iter([bad])), C.INVALID_ARGUMENT, "batch 4", "spd")
    fails(
        lambda: stub.LoadBatches(iter([_load_req("f" * 32, [1], [1.0], [1])])),
        C.NOT_FOUND,
        "load_id",
    )
    stub.LoadBatches(iter([_load_req(lid, [3], [3.0], [3])]))
    stub.AbortLoad(pb.AbortLoadRequest(load_id=lid))
    fails(lambda: stub.CommitLoad(pb.CommitLoadRequest(load_id=lid)), C.NOT_FOUND, "load_id")
    assert snapshot(stub, stream) == before
    fails(
        lambda: list(stub.ReadStream(pb.ReadStreamRequest(stream=stream, part=2, parts=2))),
        C.INVALID_ARGUMENT,
        "part",
    )
    assert serving(channel)


def test_a_named_part_staged_twice_counts_once(stub, channel, stream) -> None:
    """A retried writer (a Spark task attempt) restages its part: the rows of the last
    complete call count, once; a call that fails part-way stages none of its batches."""
    h = register(stub, f"SELECT vid, t FROM {stream} WHERE vid >= 0 BEGIN 0 END NOW")
    lid = stub.BeginLoad(pb.BeginLoadRequest(stream=stream)).load_id

    def part(name: str, vids: list[int]) -> pb.LoadBatchRequest:
        req = _load_req(lid, vids, [0.0] * len(vids), [v * 10 for v in vids])
        req.part = name
        return req

    first = stub.LoadBatches(iter([part("p0", [1, 2]), part("p0", [3])]))
    assert (first.rows, first.batches, first.replaced) == (3, 2, False)
    again = stub.LoadBatches(iter([part("p0", [1]), part("p0", [2, 3])]))
    assert (again.rows, again.replaced) == (3, True)
    other = stub.LoadBatches(iter([part("p1", [4])]))
    assert (other.rows, other.replaced) == (1, False)

    def dies_part_way():
        yield part("p2", [5])
        yield part("p2", [6, 7])  # the next request's batch is bad: the call fails
        yield _load_req(lid, [8], [0.0], [80])

    fails(lambda: stub.LoadBatches(dies_part_way()), C.INVALID_ARGUMENT, "part")
    bad = part("p3", [9])
    bad.columns.pop()
    fails(lambda: stub.LoadBatches(iter([part("p3", [9]), bad])), C.INVALID_ARGUMENT, "batch")
    assert stub.CommitLoad(pb.CommitLoadRequest(load_id=lid)).rows == 4
    assert invoke(stub, h) == [(1, 10), (2, 20), (3, 30), (4, 40)]
    assert serving(channel)


def test_loads_belong_to_their_client(auth_server) -> None:
    ch_a, alice = _authed(auth_server.port, "a-secret")
    ch_b, bob = _authed(auth_server.port, "b-secret")
    with ch_a, ch_b:
        alice.CreateStream(create_request("hist"))
        lid = alice.BeginLoad(pb.BeginLoadRequest(stream="hist")).load_id
        fails(lambda: bob.CommitLoad(pb.CommitLoadRequest(load_id=lid)), C.PERMISSION_DENIED)
        fails(lambda: bob.AbortLoad(pb.AbortLoadRequest(load_id=lid)), C.PERMISSION_DENIED)
        alice.CommitLoad(pb.CommitLoadRequest(load_id=lid))


def test_open_loads_hold_at_most_max_staged_bytes() -> None:
    srv = start_server(ServerConfig(port=0, max_staged_bytes=2000))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
            stub = pb_grpc.PSoupStub(ch)
            stub.CreateStream(create_request("big"))
            budget = srv.servicer.loads.budget
            lid = stub.BeginLoad(pb.BeginLoadRequest(stream="big")).load_id
            n = 40  # 40 rows x 24 bytes = 960 bytes
            req = _load_req(lid, list(range(n)), [0.0] * n, list(range(n)))
            stub.LoadBatches(iter([req]))
            assert budget.used == 960
            fails(
                lambda: stub.LoadBatches(iter([req, req])),  # 1,920 more: past 2,000
                C.RESOURCE_EXHAUSTED,
                "max_staged_bytes=2,000",
            )
            assert budget.used == 960  # the refused call's first batch is given back
            other = stub.BeginLoad(pb.BeginLoadRequest(stream="big")).load_id
            stub.LoadBatches(iter([_load_req(other, [1], [0.0], [1])]))
            stub.AbortLoad(pb.AbortLoadRequest(load_id=other))
            assert budget.used == 960
            assert stub.CommitLoad(pb.CommitLoadRequest(load_id=lid)).rows == n
            assert budget.used == 0
    finally:
        srv.stop(grace=1)
