"""The client library (clients/): every method of both clients against a real in-process server.

Results are compared with the embedded engine fed the same data, errors by exception
class, status code and message. The server runs on a free loopback port for the module;
each test uses streams of its own.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import socket
import subprocess
import threading

import grpc
import numpy as np
import pytest

import psoup
from clients import (
    AlreadyExists,
    AsyncPSoupClient,
    DeadlineExceeded,
    FailedPrecondition,
    IngestAck,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    PSoupClient,
    PSoupRpcError,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    batching,
    channel,
    errors,
    messages,
)
from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.server import ServerConfig, start_server
from psoup.values import InsertResult, Result

SCHEMA = {"vid": "int", "spd": "float", "t": "int"}
SEL = "SELECT vid, spd FROM {s} WHERE spd > :x BEGIN NOW - 5 END NOW"
_names = itertools.count()


@pytest.fixture(scope="module")
def server():
    srv = start_server(ServerConfig(port=0))
    yield srv
    srv.stop(grace=1)


@pytest.fixture(scope="module")
def target(server) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.fixture
def client(target):
    with PSoupClient(target, timeout=10) as c:
        yield c


@pytest.fixture
def stream(client) -> str:
    """A fresh stream of SCHEMA."""
    name = f"s{next(_names)}"
    client.create_stream(name, SCHEMA, time="t")
    return name


def rows(n: int, t0: int = 0) -> list[tuple]:
    return [(i % 7, float(i * 10 % 97), t0 + i // 3) for i in range(n)]


def embedded(data: list[tuple], text: str, params: dict | None = None) -> Result:
    """The embedded engine's result for ``text`` over ``data`` (stream named r)."""
    db = psoup.connect()
    db.create_stream("r", SCHEMA, time="t")
    db.insert("r", data)
    return db.invoke(db.register(text.format(s="r"), params))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ without a server


def test_errors_map_status_codes_to_classes() -> None:
    err = errors.make_error(grpc.StatusCode.NOT_FOUND, "unknown stream 'x'")
    assert type(err) is NotFound and isinstance(err, PSoupRpcError)
    assert err.code == grpc.StatusCode.NOT_FOUND and err.message == "unknown stream 'x'"
    assert str(err) == "NOT_FOUND: unknown stream 'x'"
    other = errors.make_error(grpc.StatusCode.INTERNAL, "boom")
    assert type(other) is PSoupRpcError
    for code, cls in errors.ERRORS.items():
        assert cls.__name__.lower() == code.name.replace("_", "").lower()


def test_number_keeps_integral_doubles_as_int() -> None:
    assert messages.number(12.0) == 12 and isinstance(messages.number(12.0), int)
    assert messages.number(2.5) == 2.5
    assert isinstance(messages.number(2.0**60), float)


def test_window_renders_as_query_text() -> None:
    w = messages.Window(messages.Bound(True, -10), messages.Bound(True, 0))
    assert str(w) == "BEGIN NOW - 10 END NOW"
    assert str(messages.Window(messages.Bound(False, 0), messages.Bound(True, 5))) == (
        "BEGIN 0 END NOW + 5"
    )


def test_pages_assemble_into_one_result() -> None:
    cols = [pb.ColumnInfo(name="a", type=pb.TYPE_INT), pb.ColumnInfo(name="s", type=pb.TYPE_STRING)]
    first = pb.InvokeQueryResponse(
        columns=cols,
        data=codec.encode_rows(["a", "s"], ["int", "str"], [(1, "x")]),
        rows=1,
        now=codec.to_value(12),
        window_begin=codec.to_value(2),
        window_end=codec.to_value(12),
        total_rows=2,
    )
    second = pb.InvokeQueryResponse(
        data=codec.encode_rows(["a", "s"], ["int", "str"], [(2, "y")]), rows=1
    )
    asm = messages.PageAssembler()
    asm.add(first)
    asm.add(second)
    assert asm.result() == Result(("a", "s"), ("int", "str"), [(1, "x"), (2, "y")], 12, (2, 12))


def test_summarize_spans_nonempty_batches() -> None:
    acks = [IngestAck(0, 2, 5, 6, 1), IngestAck(1, 0, 0, 0, 0), IngestAck(2, 3, 7, 9, 2)]
    assert batching.summarize(acks) == InsertResult(5, 9, 5, 3)
    assert batching.summarize([]) == InsertResult(0, -1, 0, 0)


def test_deadline_default_and_override() -> None:
    assert channel.deadline(channel.DEFAULT, 30.0) == 30.0
    assert channel.deadline(None, 30.0) is None
    assert channel.deadline(2.0, 30.0) == 2.0
    assert channel.metadata("tok") == (("authorization", "Bearer tok"),)
    assert channel.metadata(None) == ()


# ------------------------------------------------------------------------ streams


def test_stream_create_describe_list_drop(client) -> None:
    name = f"s{next(_names)}"
    info = client.create_stream(name, SCHEMA, time="t", max_window=60)
    assert (info.name, info.schema, info.time, info.max_window) == (name, SCHEMA, "t", 60)
    assert (info.tuples_stored, info.queries, info.last_ts) == (0, 0, None)
    assert client.describe_stream(name) == info
    assert name in [s.name for s in client.list_streams()]
    client.drop_stream(name)
    with pytest.raises(NotFound, match=f"unknown stream '{name}'") as exc:
        client.describe_stream(name)
    assert exc.value.code == grpc.StatusCode.NOT_FOUND
    assert name not in [s.name for s in client.list_streams()]


def test_stream_errors(client, stream) -> None:
    with pytest.raises(AlreadyExists, match=stream):
        client.create_stream(stream, SCHEMA, time="t")
    with pytest.raises(InvalidArgument, match="type"):
        client.create_stream(f"s{next(_names)}", {"a": "bool", "t": "int"}, time="t")
    with pytest.raises(InvalidArgument, match="time attribute 'x'"):
        client.create_stream(f"s{next(_names)}", SCHEMA, time="x")
    with pytest.raises(NotFound):
        client.drop_stream("no_such_stream")
    h = client.register(SEL.format(s=stream), {"x": 1})
    with pytest.raises(FailedPrecondition, match="unregister them first"):
        client.drop_stream(stream)
    client.unregister(h)
    client.drop_stream(stream)


# ------------------------------------------------------------------------- ingest


def test_insert_rows_and_dicts_in_batches(target, stream) -> None:
    data = rows(23)
    with PSoupClient(target, batch_rows=5) as c:
        mixed = [r if i % 2 else dict(zip(SCHEMA, r, strict=True)) for i, r in enumerate(data)]
        res = c.insert(stream, mixed)
        assert (res.count, res.last_id - res.first_id) == (23, 22)
        info = c.describe_stream(stream)
        assert (info.tuples_ingested, info.last_ts) == (23, data[-1][2])
        h = c.register(SEL.format(s=stream), {"x": 40})
        assert c.invoke(h) == embedded(data, SEL, {"x": 40})
        assert c.insert(stream, []) == InsertResult(0, -1, 0, 0)


def test_insert_columns_lists_and_numpy(client, stream) -> None:
    data = rows(50)
    cols = {a: [r[i] for r in data] for i, a in enumerate(SCHEMA)}
    res = client.insert_columns(stream, {a: np.asarray(v) for a, v in cols.items()})
    assert res.count == 50
    res2 = client.insert_columns(stream, {"t": [99], "spd": [1.5], "vid": [3]})
    assert res2 == InsertResult(res.last_id + 1, res.last_id + 1, 1, 0)
    h = client.register(f"SELECT * FROM {stream} BEGIN 0 END NOW")
    assert client.invoke(h).rows == [*data, (3, 1.5, 99)]


def test_insert_refuses_bad_values_before_sending(client, stream) -> None:
    with pytest.raises(InvalidArgument, match=r"row 1, column 'vid': expected int, got float"):
        client.insert(stream, [(1, 1.0, 1), (1.5, 1.0, 2)])  # would truncate to 1 if sent
    with pytest.raises(InvalidArgument, match="row 0, column 'spd'"):
        client.insert(stream, [{"vid": 1, "spd": "fast", "t": 1}])
    with pytest.raises(InvalidArgument, match="missing column"):
        client.insert_columns(stream, {"vid": [1], "t": [1]})
    assert client.describe_stream(stream).tuples_ingested == 0
    with pytest.raises(NotFound):
        client.insert("no_such_stream", [(1, 1.0, 1)])


def test_server_refusal_keeps_earlier_batches(target, stream) -> None:
    with PSoupClient(target, batch_rows=2) as c:
        # Batch 0 is fine; batch 1 goes back in time, which only the server can tell.
        with pytest.raises(InvalidArgument, match=r"batch 1.*timestamps must not decrease"):
            c.insert(stream, [(1, 1.0, 20), (2, 2.0, 21), (3, 3.0, 5)])
        assert c.describe_stream(stream).tuples_ingested == 2


def test_ingest_one_call_acks_in_order(client, stream) -> None:
    batches = [
        {"vid": np.full(10, b), "spd": np.arange(10.0), "t": np.full(10, b)} for b in range(30)
    ]
    acks = list(client.ingest(stream, batches))
    assert [a.batch_id for a in acks] == list(range(30))
    assert all(a.rows == 10 for a in acks)
    assert all(b.first_tuple_id == a.last_tuple_id + 1 for a, b in itertools.pairwise(acks))
    assert client.describe_stream(stream).tuples_ingested == 300


def test_ingest_is_pipelined(client, stream) -> None:
    pulled_third = threading.Event()

    def batches():
        yield {"vid": [1], "spd": [1.0], "t": [1]}
        yield {"vid": [2], "spd": [2.0], "t": [2]}
        pulled_third.set()  # the client asked for batch 2 before we took ack 0
        yield {"vid": [3], "spd": [3.0], "t": [3]}

    acks = client.ingest(stream, batches())
    first = next(acks)
    assert first.batch_id == 0
    assert pulled_third.wait(timeout=10)
    assert [a.batch_id for a in acks] == [1, 2]


def test_ingest_bad_batch_ends_call_after_earlier_acks(client, stream) -> None:
    good = {"vid": [1], "spd": [1.0], "t": [1]}
    got = []
    with pytest.raises(InvalidArgument, match="batch 2: column 'spd': missing column") as exc:
        for ack in client.ingest(stream, [good, good, {"vid": [1], "t": [2]}, good]):
            got.append(ack.batch_id)
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert got == [0, 1]
    assert client.describe_stream(stream).tuples_ingested == 2

    def failing():
        yield good
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(client.ingest(stream, failing()))
    assert client.describe_stream(stream).tuples_ingested == 3


# ------------------------------------------------------------------------ queries


def test_register_invoke_in_pages(client, stream) -> None:
    data = rows(40)
    client.insert(stream, data)
    h = client.register(SEL.format(s=stream), {"x": 20})
    want = embedded(data, SEL, {"x": 20})
    assert len(want.rows) > 3
    got = client.invoke(h, page_rows=2)
    assert got == want
    assert client.invoke(h) == want  # whole, in one message
    assert client.describe_query(h).invocations == 2
    assert (got.columns, got.types, got.now) == (("vid", "spd"), ("int", "float"), data[-1][2])
    assert got.window == (got.now - 5, got.now)
    assert client.invoke(h, now=5) == _embedded_at(data, 5)
    agg = client.register(
        f"SELECT vid, COUNT(*), AVG(spd) FROM {stream} GROUP BY vid BEGIN 0 END NOW"
    )
    assert client.invoke(agg) == embedded(
        data, "SELECT vid, COUNT(*), AVG(spd) FROM {s} GROUP BY vid BEGIN 0 END NOW"
    )
    empty = client.register(f"SELECT SUM(spd) FROM {stream} WHERE vid > 100 BEGIN 0 END NOW")
    assert client.invoke(empty).rows == [(None,)]


def _embedded_at(data: list[tuple], now: int) -> Result:
    db = psoup.connect()
    db.create_stream("r", SCHEMA, time="t")
    db.insert("r", data)
    return db.invoke(db.register(SEL.format(s="r"), {"x": 20}), now=now)


def test_query_errors(client, stream) -> None:
    text = f"SELECT vid FROM {stream}"
    with pytest.raises(
        InvalidArgument, match=f"line 1, column {len(text) + 1}: expected BEGIN"
    ) as exc:
        client.register(text)
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(InvalidArgument, match="line 1, column"):
        client.register(f"SELECT nope FROM {stream} BEGIN 0 END NOW")
    with pytest.raises(InvalidArgument, match="x"):
        client.register(SEL.format(s=stream))  # parameter x missing
    with pytest.raises(InvalidArgument, match="params"):
        client.register(SEL.format(s=stream), {"x": [1, 2]})
    for call in (client.invoke, client.unregister, client.describe_query):
        with pytest.raises(NotFound, match="unknown query handle"):
            call("0" * 32)


def test_describe_query_and_unregister(client, stream) -> None:
    h = client.register(SEL.format(s=stream), {"x": 2.5})
    client.invoke(h)
    info = client.describe_query(h)
    assert (info.handle, info.text, info.params) == (h, SEL.format(s=stream), {"x": 2.5})
    assert (info.columns, info.types, info.streams) == (("vid", "spd"), ("int", "float"), (stream,))
    assert str(info.window) == "BEGIN NOW - 5 END NOW"
    assert info.invocations == 1 and info.registered_at > 0
    client.unregister(h)
    with pytest.raises(NotFound):
        client.invoke(h)


def test_subscribe_current_then_new_matches(client, stream) -> None:
    client.insert(stream, [(1, 50.0, 1)])
    h = client.register(SEL.format(s=stream), {"x": 10})
    with client.subscribe(h, include_current=True) as sub:
        kind, result, tid = next(sub)
        assert (kind, result.rows, tid) == ("current", [(1, 50.0)], 0)
        res = client.insert(stream, [(2, 5.0, 2), (3, 60.0, 3)])
        kind, result, tid = next(sub)
        assert (kind, result.columns, result.rows, tid) == (
            "new",
            ("vid", "spd"),
            [(3, 60.0)],
            res.first_id,
        )
        sub.cancel()
        assert list(sub) == []


def test_subscription_ends_when_query_is_unregistered(client, stream) -> None:
    h = client.register(SEL.format(s=stream), {"x": 10})
    sub = client.subscribe(h, include_current=True)
    assert next(sub)[0] == "current"
    client.unregister(h)
    assert list(sub) == []
    with pytest.raises(NotFound):
        next(client.subscribe("0" * 32))


def test_subscribe_deadline(client, stream) -> None:
    h = client.register(SEL.format(s=stream), {"x": 10})
    sub = client.subscribe(h, timeout=0.2)
    with pytest.raises(DeadlineExceeded):
        next(sub)


def test_stats(client, stream) -> None:
    client.insert(stream, rows(10))
    h = client.register(SEL.format(s=stream), {"x": 10})
    client.invoke(h)
    s = client.stats()
    assert s["strategy"] == "psoup-p" and s["queries"] >= 1
    assert s["streams"][stream]["tuples_ingested"] == 10
    assert s["streams"][stream]["query_entries"] == 1
    assert s["invoke_latency"]["count"] >= 1
    assert {"ingest_rate", "queue_depth", "memory_bytes", "subscriptions"} <= s.keys()


def test_unreachable_server_is_unavailable() -> None:
    with PSoupClient(f"127.0.0.1:{free_port()}", timeout=5) as c, pytest.raises(Unavailable) as exc:
        c.list_streams()
    assert exc.value.code == grpc.StatusCode.UNAVAILABLE


# --------------------------------------------------------------- auth and limits


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    tokens = tmp_path_factory.mktemp("auth") / "tokens"
    tokens.write_text("alice:tok-a\nbob:tok-b\n")
    srv = start_server(
        ServerConfig(
            port=0,
            auth_tokens_file=str(tokens),
            max_query_chars=120,
            max_batch_rows=10,
            max_templates=1,
        )
    )
    yield f"127.0.0.1:{srv.port}"
    srv.stop(grace=1)


def test_authentication_and_ownership(auth_server) -> None:
    with PSoupClient(auth_server) as anon, pytest.raises(Unauthenticated, match="authorization"):
        anon.list_streams()
    with PSoupClient(auth_server, token="wrong") as bad, pytest.raises(Unauthenticated):
        bad.list_streams()
    with PSoupClient(auth_server, token="tok-a") as a, PSoupClient(auth_server, token="tok-b") as b:
        a.create_stream("r", SCHEMA, time="t")
        h = a.register(SEL.format(s="r"), {"x": 1})
        assert a.invoke(h).rows == []
        with pytest.raises(PermissionDenied, match="another client"):
            b.invoke(h)
        with pytest.raises(PermissionDenied, match="'r'"):
            b.prepare(SEL.format(s="r"))
        with pytest.raises(PermissionDenied, match="'r'"):  # a's template: still no right
            b.register(a.prepare(SEL.format(s="r")), {"x": 1})
        with pytest.raises(PermissionDenied):
            b.unregister(h)


def test_limits_are_resource_exhausted(auth_server) -> None:
    with PSoupClient(auth_server, token="tok-a", batch_rows=100) as c:
        c.create_stream("lim", SCHEMA, time="t")
        with pytest.raises(ResourceExhausted, match="max_query_chars=120"):
            c.register(
                "SELECT * FROM lim WHERE vid = 1 " + " AND vid = 1" * 20 + " BEGIN 0 END NOW"
            )
        with pytest.raises(ResourceExhausted, match="max_batch_rows=10"):
            c.insert("lim", rows(11))
        texts = [f"SELECT vid FROM lim WHERE vid = :v AND t > {k} BEGIN 0 END NOW" for k in (1, 2)]
        prepared = []
        with pytest.raises(ResourceExhausted, match=r"1 prepared templates \(max_templates=1\)"):
            for text in texts:  # the server holds at most one, from this test or another
                prepared.append(c.prepare(text))
        assert len(prepared) <= 1
        for tpl in prepared:
            assert c.prepare(tpl.text) == tpl  # one prepared already is not refused
        assert c.describe_stream("lim").tuples_ingested == 0


# -------------------------------------------------------------------------- async


def test_async_client_every_method(target) -> None:
    async def scenario() -> None:
        async with AsyncPSoupClient(target, timeout=10, batch_rows=4) as c:
            name = f"s{next(_names)}"
            info = await c.create_stream(name, SCHEMA, time="t", max_window=1000)
            assert info.schema == SCHEMA and info.max_window == 1000
            assert await c.describe_stream(name) == info
            assert name in [s.name for s in await c.list_streams()]
            with pytest.raises(AlreadyExists):
                await c.create_stream(name, SCHEMA, time="t")
            with pytest.raises(NotFound):
                await c.describe_stream("no_such_stream")

            data = rows(30)
            res = await c.insert(name, data[:10])
            assert res.count == 10 and res.last_id - res.first_id == 9
            cols = {a: np.asarray([r[i] for r in data[10:20]]) for i, a in enumerate(SCHEMA)}
            assert (await c.insert_columns(name, cols)).first_id == res.last_id + 1

            async def batches():
                for a in range(20, 30, 5):
                    part = data[a : a + 5]
                    yield {k: [r[i] for r in part] for i, k in enumerate(SCHEMA)}

            acks = [a async for a in c.ingest(name, batches())]
            assert [(a.batch_id, a.rows) for a in acks] == [(0, 5), (1, 5)]
            with pytest.raises(InvalidArgument, match="row 0, column 'vid'"):
                await c.insert(name, [("x", 1.0, 99)])
            got = []
            with pytest.raises(InvalidArgument, match="batch 1: column 'spd': missing column"):
                async for a in c.ingest(name, [cols_of([(1, 1.0, 40)]), {"vid": [1]}]):
                    got.append(a.batch_id)
            assert got == [0]
            data.append((1, 1.0, 40))

            h = await c.register(SEL.format(s=name), {"x": 20})
            assert await c.invoke(h, page_rows=3) == embedded(data, SEL, {"x": 20})
            with pytest.raises(InvalidArgument, match="line 1, column"):
                await c.register(f"SELECT FROM {name} BEGIN 0 END NOW")
            info = await c.describe_query(h)
            assert info.params == {"x": 20} and info.invocations == 1
            tpl = await c.prepare(SEL.format(s=name))
            ht = await c.register(tpl, {"x": 20})
            assert await c.invoke(ht) == embedded(data, SEL, {"x": 20})
            hc, current = await c.register_invoke(tpl, {"x": 30})
            assert current == embedded(data, SEL, {"x": 30})
            for done in (ht, hc):
                await c.unregister(done)

            every = "SELECT vid, spd FROM {s} BEGIN 0 END NOW"
            hall = await c.register(every.format(s=name))
            want = embedded(data, every)
            assert len(want.rows) == len(data) > 5
            assert await c.invoke(hall) == want  # whole, in one message
            assert await c.invoke(hall, page_rows=5) == want  # in pages
            assert (await c.describe_query(hall)).invocations == 2
            await c.unregister(hall)

            async with c.subscribe(h, include_current=True) as sub:
                kind, result, _ = await anext(sub)
                assert kind == "current" and result.rows == (await c.invoke(h)).rows
                new = await c.insert(name, [(9, 99.0, 41)])
                now = (await c.invoke(h)).now
                assert await anext(sub) == (
                    "new",
                    Result(("vid", "spd"), ("int", "float"), [(9, 99.0)], now, (now - 5, now)),
                    new.first_id,
                )
                sub.cancel()
                assert [e async for e in sub] == []

            stats = await c.stats()
            assert stats["streams"][name]["tuples_ingested"] == 32
            await c.unregister(h)
            with pytest.raises(NotFound, match="unknown query handle"):
                await c.invoke(h)
            await c.drop_stream(name)
            with pytest.raises(NotFound):
                await c.drop_stream(name)

        async with AsyncPSoupClient(f"127.0.0.1:{free_port()}", timeout=5) as dead:
            with pytest.raises(Unavailable):
                await dead.stats()

    asyncio.run(scenario())


def cols_of(data: list[tuple]) -> dict[str, list]:
    return {a: [r[i] for r in data] for i, a in enumerate(SCHEMA)}


def test_tls_with_root_certificates(tmp_path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    names = ("-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1")
    files = ("-keyout", str(key), "-out", str(cert))
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", *names, *files],
        check=True,
        capture_output=True,
        timeout=60,
    )
    srv = start_server(ServerConfig(port=0, tls_cert=str(cert), tls_key=str(key)))
    try:
        target = f"127.0.0.1:{srv.port}"
        with PSoupClient(target, root_certificates=str(cert)) as c:
            c.create_stream("secure", SCHEMA, time="t")
            assert [s.name for s in c.list_streams()] == ["secure"]
        with PSoupClient(target, root_certificates=cert.read_bytes()) as c:
            assert c.describe_stream("secure").schema == SCHEMA
        with PSoupClient(target, timeout=5) as plain, pytest.raises(Unavailable):
            plain.list_streams()  # plaintext to a TLS port
    finally:
        srv.stop(grace=1)


def test_a_result_larger_than_a_message_comes_in_pages() -> None:
    """Invoke refuses a result over max_message_bytes (naming the limit); invoke() then
    takes it in pages, as it does when its own channel's limit is the smaller one."""
    srv = start_server(ServerConfig(port=0, max_message_bytes=128 << 10, max_batch_rows=1_000))
    try:
        target = f"127.0.0.1:{srv.port}"
        n = 8_000  # 3 x 8 x 8,000 bytes of columns > 128 KiB; a page of 4,096 rows fits
        data = [(i, float(i), i) for i in range(n)]
        with PSoupClient(target) as c:
            c.create_stream("big", SCHEMA, time="t")
            for k in range(0, n, 1_000):
                c.insert("big", data[k : k + 1_000])
            h = c.register("SELECT * FROM big BEGIN 0 END NOW")
            with pytest.raises(grpc.RpcError) as refused:
                c._stub.Invoke(pb.InvokeRequest(handle=h))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "8000 rows" in refused.value.details()
            assert "max_message_bytes=131072" in refused.value.details()
            assert c.invoke(h, page_rows=0).rows == data  # by the stream's pages
            assert c.describe_query(h).invocations == 3  # refused Invoke, Invoke, pages
    finally:
        srv.stop(grace=1)
    big = start_server(ServerConfig(port=0))  # the client's own limit is the smaller one
    try:
        with PSoupClient(f"127.0.0.1:{big.port}", max_message_bytes=128 << 10) as small:
            small.create_stream("big", SCHEMA, time="t")
            for k in range(0, n, 1_000):
                small.insert("big", data[k : k + 1_000])
            h = small.register("SELECT * FROM big BEGIN 0 END NOW")
            assert small.invoke(h).rows == data
            assert small.describe_query(h).invocations == 2  # too large to receive, pages
    finally:
        big.stop(grace=1)


# ---------------------------------------------------------------------- templates


def test_a_template_registers_what_its_text_does(client, stream) -> None:
    data = rows(40)
    client.insert(stream, data)
    text = SEL.format(s=stream)
    tpl = client.prepare(text)
    assert (tpl.text, tpl.params, tpl.streams) == (text, ("x",), (stream,))
    assert client.prepare(text) == tpl  # one text, one template
    for x in (20, 50.5):
        h = client.register(tpl, {"x": x})
        assert client.invoke(h) == embedded(data, SEL, {"x": x})
        assert client.describe_query(h).text == text
        h2, current = client.register_invoke(tpl, {"x": x})
        assert current == client.invoke(h2) == client.invoke(h)


def test_a_template_refuses_what_does_not_fit(client, stream) -> None:
    tpl = client.prepare(SEL.format(s=stream))
    before = client.stats()["queries"]
    with pytest.raises(NotFound, match=r"template_id '0+' is not prepared"):
        client.register(messages.Template("0" * 32, tpl.text, tpl.params, tpl.streams), {"x": 1})
    with pytest.raises(InvalidArgument, match=r"line 1, column \d+: .*parameter :x, a str"):
        client.register(tpl, {"x": "fast"})
    with pytest.raises(InvalidArgument, match=r"parameter :x is not given"):
        client.register(tpl)
    with pytest.raises(InvalidArgument, match=r"line 1, column 8: .*no attribute 'nope'"):
        client.prepare(f"SELECT nope FROM {stream} WHERE vid = :v BEGIN 0 END NOW")
    with pytest.raises(InvalidArgument, match="text: the query text is empty"):
        client.prepare("  ")
    with pytest.raises(InvalidArgument, match=r"template_id: expected 32 hex digits .* 100000"):
        client.register(messages.Template("x" * 100_000, tpl.text, tpl.params, tpl.streams))
    stub = pb_grpc.PSoupStub(client._channel)
    both = pb.RegisterQueryRequest(text=tpl.text, template_id=tpl.id)
    with pytest.raises(grpc.RpcError) as err:
        stub.RegisterQuery(both, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "give the query's text or template_id, not both" in err.value.details()
    assert client.stats()["queries"] == before  # nothing registered above
