"""Many clients at once against one server: answers are stream-prefix consistent.

One client ingests a fixed sequence of batches while others invoke, register and
subscribe. The brute-force oracle gives each query's answer after every prefix of the
batches; every answer the server gives must be one of them, each invoker must see the
prefixes in non-decreasing order, and every subscription must deliver each new match
exactly once and in order. All waits have deadlines: a deadlock fails the test.
"""

from __future__ import annotations

import random
import threading

import grpc
import pytest
from oracle import Oracle

from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.server import ServerConfig, start_server

SCHEMA = {"vid": "int", "spd": "int", "t": "int"}
QUERIES = {
    "landmark": "SELECT vid, t FROM r WHERE vid < 5 BEGIN 0 END NOW",
    "sliding": "SELECT COUNT(*), SUM(vid), MAX(spd) FROM r WHERE spd > 50 BEGIN NOW - 20 END NOW",
    "join": (
        "SELECT x.t, y.t FROM r x, r y WHERE x.vid = y.spd AND x.vid < 3 BEGIN NOW - 10 END NOW"
    ),
}
DEADLINE = 60


def _batches(seed: int, count: int) -> list[list[tuple]]:
    rng = random.Random(seed)
    t, out = 0, []
    for _ in range(count):
        rows = []
        for _ in range(rng.randint(1, 30)):
            t += rng.choice((0, 1, 1, 2))
            rows.append((rng.randint(0, 20), rng.randint(0, 100), t))
        out.append(rows)
    return out


def _expected(batches: list[list[tuple]]) -> dict[str, list[list[tuple]]]:
    """Query name -> its oracle answer after each prefix of the batches (0 .. all)."""
    oracle = Oracle()
    oracle.create_stream("r", SCHEMA, "t", 1000)
    handles = {name: oracle.register(text) for name, text in QUERIES.items()}
    out = {name: [oracle.invoke(h)[1]] for name, h in handles.items()}
    for rows in batches:
        oracle.insert("r", rows)
        for name, h in handles.items():
            out[name].append(oracle.invoke(h)[1])
    return out


def _request(rows: list[tuple], batch_id: int) -> pb.IngestRequest:
    cols = {a: [r[i] for r in rows] for i, a in enumerate(SCHEMA)}
    return pb.IngestRequest(stream="r", columns=codec.encode_batch(SCHEMA, cols), batch_id=batch_id)


def _invoke(stub, handle: str) -> list[tuple]:
    pages = stub.InvokeQuery(pb.InvokeQueryRequest(handle=handle), timeout=DEADLINE)
    return [r for p in pages for r in codec.decode_rows(p.data, p.rows)]


@pytest.mark.parametrize("seed", [1, 2])
def test_concurrent_clients_see_stream_prefixes(seed: int) -> None:
    batches = _batches(seed, 40)
    expected = _expected(batches)
    server = start_server(ServerConfig(port=0))
    target = f"127.0.0.1:{server.port}"
    errors: list[BaseException] = []
    done = threading.Event()

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as exc:
                errors.append(exc)

        return threading.Thread(target=run, daemon=True)

    try:
        with grpc.insecure_channel(target) as ch:
            stub = pb_grpc.PSoupStub(ch)
            stub.CreateStream(
                pb.CreateStreamRequest(
                    name="r",
                    attributes=[pb.Attribute(name=a, type=pb.TYPE_INT) for a in SCHEMA],
                    time="t",
                    max_window=1000,
                )
            )
            handles = {
                name: stub.RegisterQuery(pb.RegisterQueryRequest(text=text)).handle
                for name, text in QUERIES.items()
            }
            # Subscriptions are live before ingest starts: their CURRENT message says so.
            subs = []
            for _ in range(2):
                call = stub.Subscribe(
                    pb.SubscribeRequest(handle=handles["landmark"], include_current=True),
                    timeout=DEADLINE,
                )
                first = next(call)
                assert codec.decode_rows(first.data, first.rows) == expected["landmark"][0]
                subs.append(call)

            def ingester():
                with grpc.insecure_channel(target) as c:
                    reqs = (_request(rows, k) for k, rows in enumerate(batches))
                    acks = list(pb_grpc.PSoupStub(c).Ingest(reqs, timeout=DEADLINE))
                    assert [a.batch_id for a in acks] == list(range(len(batches)))
                done.set()

            def invoker(name: str):
                with grpc.insecure_channel(target) as c:
                    s = pb_grpc.PSoupStub(c)
                    last = 0
                    while True:
                        finished = done.is_set()
                        got = _invoke(s, handles[name])
                        prefixes = [k for k, ans in enumerate(expected[name]) if ans == got]
                        assert prefixes, f"{name}: an answer no prefix gives: {got}"
                        assert max(prefixes) >= last, f"{name}: went back to an older prefix"
                        last = next(k for k in prefixes if k >= last)
                        if finished:
                            assert got == expected[name][-1]
                            return

            def registrar():
                # New queries registered mid-stream see a prefix too (new query x old data).
                with grpc.insecure_channel(target) as c:
                    s = pb_grpc.PSoupStub(c)
                    while True:
                        finished = done.is_set()
                        h = s.RegisterQuery(pb.RegisterQueryRequest(text=QUERIES["sliding"])).handle
                        assert _invoke(s, h) in expected["sliding"]
                        s.UnregisterQuery(pb.UnregisterQueryRequest(handle=h))
                        if finished:
                            return

            threads = [
                guarded(ingester),
                *(
                    guarded(lambda n=n: invoker(n))
                    for n in ("landmark", "sliding", "join", "landmark")
                ),
                guarded(registrar),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(DEADLINE)
                assert not t.is_alive(), "a client is stuck (deadlock?)"
            assert not errors, errors
            # Subscriptions: every new match once, in ingest order. Ingest is over, so
            # all NEW messages are on their way; read exactly as many rows as were added.
            want = expected["landmark"][-1][len(expected["landmark"][0]) :]
            for call in subs:
                rows, tids = [], []
                while len(rows) < len(want):
                    msg = next(call)
                    assert msg.kind == pb.SubscribeResponse.NEW
                    rows += codec.decode_rows(msg.data, msg.rows)
                    tids.append(msg.first_tuple_id)
                call.cancel()
                assert rows == want
                assert tids == sorted(set(tids))
    finally:
        server.stop(grace=1)
