"""RegisterQuery with ``invoke``: the registration answers with the new query's current
result, which must be what a separate Invoke right after returns (no batch between), at
NOW or a given ``now``; a refused ``now`` registers nothing; a result too large for one
message comes by pages through the client's second call. Real server on a loopback port,
real client library."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from clients import PSoupClient
from clients.errors import InvalidArgument
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.server import ServerConfig, start_server

SCHEMA = {"vid": "int", "spd": "float", "t": "int"}
QUERIES = [
    "SELECT vid, t FROM {s} WHERE vid < :x BEGIN NOW - 40 END NOW",
    "SELECT COUNT(*), SUM(spd) FROM {s} WHERE vid < :x BEGIN 0 END NOW",
    "SELECT * FROM {s} WHERE vid = :x BEGIN NOW - 10 END NOW",
]


@pytest.fixture(scope="module")
def server():
    srv = start_server(ServerConfig(port=0, max_message_bytes=128 * 1024))
    yield srv
    srv.stop(grace=1)


@pytest.fixture
def client(server):
    with PSoupClient(f"127.0.0.1:{server.port}", timeout=30, batch_rows=1000) as c:
        yield c


_names = iter(range(10**6))


def _stream(c: PSoupClient, rows: int, seed: int) -> str:
    name = f"ri{next(_names)}"
    c.create_stream(name, SCHEMA, time="t")
    rng = np.random.default_rng(seed)
    if rows:
        c.insert_columns(
            name,
            {
                "vid": rng.integers(0, 20, rows),
                "spd": rng.random(rows),
                "t": np.sort(rng.integers(0, 100, rows)),
            },
        )
    return name


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("text", QUERIES)
def test_the_registration_answers_as_an_invoke_right_after(client, text, seed) -> None:
    rng = np.random.default_rng(seed)
    s = _stream(client, int(rng.integers(0, 200)), seed)
    x = int(rng.integers(0, 20))
    now = None if seed % 2 else int(rng.integers(0, 120))
    handle, got = client.register_invoke(text.format(s=s), {"x": x}, now=now)
    again = client.invoke(handle, now=now)
    assert got.columns == again.columns and got.types == again.types
    assert got.rows == again.rows
    assert (got.now, got.window) == (again.now, again.window)
    assert client.describe_query(handle).invocations == 2


def test_a_refused_now_registers_nothing(client) -> None:
    s = _stream(client, 10, 1)
    before = client.stats()["queries"]
    with pytest.raises(InvalidArgument, match="now"):
        client.register_invoke(f"SELECT * FROM {s} BEGIN 0 END NOW", now=1e308)
    with pytest.raises(InvalidArgument, match="now"):
        client.register_invoke(f"SELECT * FROM {s} BEGIN 0 END NOW", now=float("nan"))
    assert client.stats()["queries"] == before
    assert client.describe_stream(s).queries == 0


def test_now_without_invoke_is_refused(server, client) -> None:
    s = _stream(client, 0, 2)
    before = client.stats()["queries"]
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        req = pb.RegisterQueryRequest(text=f"SELECT * FROM {s} BEGIN 0 END NOW", now=3.0)
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.PSoupStub(ch).RegisterQuery(req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "now" in err.value.details()
    assert client.stats()["queries"] == before


def test_a_result_larger_than_a_message_comes_in_pages(server, client) -> None:
    s = _stream(client, 0, 3)
    n = 20_000  # 3 columns x 8 bytes x 20,000 rows: well over the 128 KiB limit
    client.insert_columns(s, {"vid": np.arange(n), "spd": np.ones(n), "t": np.arange(n)})
    text = f"SELECT * FROM {s} BEGIN 0 END NOW"
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        reply = pb_grpc.PSoupStub(ch).RegisterQuery(pb.RegisterQueryRequest(text=text, invoke=True))
    assert reply.current_omitted and not reply.HasField("current") and reply.handle
    handle, got = client.register_invoke(text)
    assert len(got) == n and [r[0] for r in got.rows] == list(range(n))
    assert got.rows == client.invoke(handle).rows


def test_the_async_client_registers_and_invokes_alike(server, client) -> None:
    import asyncio

    from clients import AsyncPSoupClient

    s = _stream(client, 50, 4)
    text = QUERIES[0].format(s=s)

    async def run():
        async with AsyncPSoupClient(f"127.0.0.1:{server.port}", timeout=30) as c:
            h, got = await c.register_invoke(text, {"x": 7}, now=60)
            return got, await c.invoke(h, now=60)

    got, again = asyncio.run(run())
    assert got.rows == again.rows and (got.now, got.window) == (again.now, again.window)
