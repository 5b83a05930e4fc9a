"""Batch: registrations and invokes in one call.

Each batch is checked against the same operations sent one call at a time to a twin
server holding the same data (random streams, queries, handles and ``now``): the answers
must be the same, item by item. A refused batch must change nothing: the queries, the
client's quota, the handles. The batch's registrations are durable like any other.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clients import (
    AsyncPSoupClient,
    Invoke,
    PSoupClient,
    Register,
    Registered,
)
from clients.errors import InvalidArgument, NotFound, PermissionDenied, ResourceExhausted
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.server import ServerConfig, start_server
from psoup.server.process import ServerProcess

SCHEMA = {"vid": "int", "spd": "float", "t": "int"}
TEXTS = [
    "SELECT vid, t FROM r WHERE vid = :x BEGIN NOW - 30 END NOW",
    "SELECT COUNT(*), SUM(spd) FROM r WHERE vid < :x BEGIN 0 END NOW",
    "SELECT * FROM r WHERE vid BETWEEN :x AND 12 BEGIN NOW - 10 END NOW",
]


def _start(**config) -> tuple:
    srv = start_server(ServerConfig(port=0, **config))
    c = PSoupClient(f"127.0.0.1:{srv.port}", timeout=30, batch_rows=1000)
    c.create_stream("r", SCHEMA, time="t")
    rng = np.random.default_rng(5)
    n = 400
    c.insert_columns(
        "r",
        {
            "vid": rng.integers(0, 20, n),
            "spd": rng.random(n),
            "t": np.sort(rng.integers(0, 100, n)),
        },
    )
    return srv, c


@pytest.fixture(scope="module")
def twins():
    """Two servers with the same data: one answers batches, the other single calls."""
    a, ca = _start()
    b, cb = _start()
    yield ca, cb
    for c, s in ((ca, a), (cb, b)):
        c.close()
        s.stop(grace=1)


def _same(got, want) -> None:
    assert (got.columns, got.types, got.now, got.window) == (
        want.columns,
        want.types,
        want.now,
        want.window,
    )
    assert got.rows == want.rows


# An op: ("register", text index, x, invoke, now) or ("invoke", which earlier handle, now).
_now = st.one_of(st.none(), st.integers(0, 120))
_register = st.tuples(
    st.just("register"), st.integers(0, len(TEXTS) - 1), st.integers(0, 20), st.booleans(), _now
)
_invoke = st.tuples(st.just("invoke"), st.integers(0, 10**6), _now)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(st.one_of(_register, _invoke), min_size=1, max_size=12), by_template=st.booleans()
)
def test_a_batch_answers_as_the_same_calls_one_by_one(twins, ops, by_template) -> None:
    batched, single = twins
    tpl = {}
    for c in twins:
        tpl[c] = [c.prepare(t) if by_template else t for t in TEXTS]
    # Handles for the invokes: queries registered before the batch, on each twin.
    known = {c: [c.register(tpl[c][0], {"x": 3}), c.register(tpl[c][1], {"x": 9})] for c in twins}
    items, want = [], []
    for op in ops:
        if op[0] == "register":
            _, i, x, invoke, now = op
            now = now if invoke else None
            items.append(Register(tpl[batched][i], {"x": x}, invoke=invoke, now=now))
            if invoke:
                want.append(single.register_invoke(tpl[single][i], {"x": x}, now=now))
            else:
                want.append((single.register(tpl[single][i], {"x": x}), None))
        else:
            _, j, now = op
            k = j % len(known[single])
            items.append(Invoke(known[batched][k], now=now))
            want.append(single.invoke(known[single][k], now=now))
    got = batched.batch(items)
    assert len(got) == len(items)
    for g, w, item in zip(got, want, items, strict=True):
        if isinstance(item, Register):
            assert isinstance(g, Registered)
            assert (g.result is None) == (w[1] is None)
            if w[1] is not None:
                _same(g.result, w[1])
            # The new query answers later as its twin does.
            _same(batched.invoke(g.handle, now=50), single.invoke(w[0], now=50))
        else:
            _same(g, w)


def _counts(c: PSoupClient) -> tuple:
    stats = c.stats()
    return stats["queries"], c.describe_stream("r").queries


@pytest.fixture
def lone():
    srv, c = _start(max_queries_per_client=10, max_batch_items=8)
    yield srv, c
    c.close()
    srv.stop(grace=1)


def test_a_refused_item_refuses_the_batch_and_changes_nothing(lone) -> None:
    _, c = lone
    tpl = c.prepare(TEXTS[0])
    h = c.register(tpl, {"x": 1})
    before = _counts(c)
    cases = [
        # refused before the engine runs anything
        ([Register(tpl, {"x": 2}), Register(tpl, {"x": "a"})], InvalidArgument, "items[1]: line 1"),
        ([Register(tpl, {"x": 2}), Invoke(h, now=float("inf"))], InvalidArgument, "items[1]: now"),
        ([Register(tpl, {"x": 2}), Register("SELEC", {})], InvalidArgument, "items[1]: line 1"),
        ([Register(tpl, {"x": 2}), Invoke("")], InvalidArgument, "items[1]: handle: required"),
        ([Register(tpl, {}, now=3)], InvalidArgument, "items[0]: now: only with invoke"),
        ([Invoke(h)] * 9, InvalidArgument, "items: 9 items, more than max_batch_items=8"),
        ([Register(tpl, {"x": i}) for i in range(5)] * 2, InvalidArgument, "max_batch_items"),
        # refused on the engine thread, after registrations: undone
        ([Register(tpl, {"x": 2}), Register(tpl, {"x": 3}), Invoke("f" * 32)], NotFound,
         "items[2]"),
        ([Register(tpl, {"x": 2}, invoke=True), Register(tpl, {"x": 3}, invoke=True, now=1e300)],
         InvalidArgument, "items[1]"),
    ]  # fmt: skip
    for items, err, msg in cases:
        with pytest.raises(err) as got:
            c.batch(items)
        assert msg in str(got.value)
        assert _counts(c) == before
    # The quota counts a batch's registrations together, and a refused batch's none.
    made = c.batch([Register(tpl, {"x": i}) for i in range(5)])  # 6 of 10
    during = _counts(c)
    with pytest.raises(ResourceExhausted, match="max_queries_per_client=10"):
        c.batch([Register(tpl, {"x": i}) for i in range(5)])
    assert _counts(c) == during
    made += c.batch([Register(tpl, {"x": i}) for i in range(4)])  # the limit
    assert len({m.handle for m in made}) == 9
    with pytest.raises(ResourceExhausted):
        c.register(tpl, {"x": 0})
    assert c.invoke(h).rows == c.invoke(made[1].handle).rows


def test_malformed_batches_name_what_is_wrong(lone) -> None:
    srv, c = lone
    with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
        stub = pb_grpc.PSoupStub(ch)
        for req, words in [
            (pb.BatchRequest(), "items: none given"),
            (pb.BatchRequest(items=[pb.BatchRequest.Item()]), "items[0]: op: neither"),
        ]:
            with pytest.raises(grpc.RpcError) as err:
                stub.Batch(req)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert words in err.value.details()
    with pytest.raises(TypeError, match=r"items\[0\]"):
        c.batch(["SELECT"])
    with pytest.raises(InvalidArgument, match=r"items\[0\]: params"):
        c.batch([Register(TEXTS[0], {"x": object()})])


def test_answers_larger_than_a_message_are_refused_and_undone() -> None:
    srv, c = _start(max_message_bytes=64 * 1024, page_rows=1000)
    try:
        text = "SELECT * FROM r BEGIN 0 END NOW"  # 400 rows x 3 columns: ~10 KB each
        h = c.register(text)
        before = _counts(c)
        with pytest.raises(ResourceExhausted, match="fewer items"):
            c.batch([Register(text, invoke=True)] + [Invoke(h)] * 8)
        assert _counts(c) == before
        # One registration's result alone too large: left out, then taken by invoke.
        c.insert_columns(
            "r", {"vid": np.zeros(4000, int), "spd": np.ones(4000), "t": np.full(4000, 100)}
        )
        [reg] = c.batch([Register(text, invoke=True)])
        assert len(reg.result) == 4400 and reg.result.rows == c.invoke(reg.handle).rows
    finally:
        c.close()
        srv.stop(grace=1)


def test_another_clients_handle_is_refused_whole(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:a-secret\nbob:b-secret\n")
    srv = start_server(ServerConfig(port=0, auth_tokens_file=str(tokens)))
    target = f"127.0.0.1:{srv.port}"
    try:
        with (
            PSoupClient(target, token="a-secret") as alice,
            PSoupClient(target, token="b-secret") as bob,
        ):
            alice.create_stream("r", SCHEMA, time="t")
            alice.grant("r", "bob", "read")
            h = alice.register("SELECT * FROM r BEGIN 0 END NOW")
            with pytest.raises(PermissionDenied, match=r"items\[1\]: handle"):
                bob.batch([Register("SELECT * FROM r BEGIN 0 END NOW"), Invoke(h)])
            assert bob.stats()["queries"] == 1
            [mine] = bob.batch([Register("SELECT * FROM r BEGIN 0 END NOW")])
            with pytest.raises(PermissionDenied):
                alice.batch([Invoke(mine.handle)])
    finally:
        srv.stop(grace=1)


def test_the_async_client_batches_alike(twins) -> None:
    batched, _ = twins
    h = batched.register(TEXTS[0], {"x": 4})
    target = batched.target

    async def run():
        async with AsyncPSoupClient(target, timeout=30) as c:
            return await c.batch(
                [Invoke(h, now=60), Register(TEXTS[0], {"x": 4}, invoke=True, now=60)]
            )

    got, reg = asyncio.run(run())
    _same(got, batched.invoke(h, now=60))
    _same(reg.result, got)


def test_each_invoke_of_a_batch_is_timed_on_its_own() -> None:
    """The invoke-latency metric counts each invoke of a batch (a registration with
    ``invoke`` too, as RegisterQuery) with its own time: its wait for the engine thread,
    its turn there and its answer, not the whole call's. 64 invokes, each of 400 rows:
    recorded as the whole call's time each, their sum would be 64 calls' worth."""
    srv, c = _start()
    try:
        h = c.register("SELECT * FROM r BEGIN 0 END NOW")
        hist = srv.observer.invoke_seconds.labels(srv.engine.strategy.name)

        def seen() -> tuple[float, float]:
            sample = {s.name: s.value for m in hist.collect() for s in m.samples}
            return sample["psoup_invoke_seconds_count"], sample["psoup_invoke_seconds_sum"]

        n0, s0 = seen()
        items = [Invoke(h) for _ in range(63)] + [Register(TEXTS[0], {"x": 4}, invoke=True)]
        items.append(Register(TEXTS[0], {"x": 5}))  # no invoke: not counted
        start = time.perf_counter()
        got = c.batch(items)
        wall = time.perf_counter() - start
        n1, s1 = seen()
        assert len(got[0]) == 400
        assert n1 - n0 == 64
        assert s1 - s0 < 64 * wall / 4
    finally:
        c.close()
        srv.stop(grace=1)


def test_a_batchs_registrations_survive_a_kill(tmp_path: Path) -> None:
    with ServerProcess(data_dir=tmp_path / "data") as srv:
        with PSoupClient(srv.target, timeout=30) as c:
            c.create_stream("r", SCHEMA, time="t")
            c.insert("r", [(1, 0.5, 3), (2, 0.25, 4)])
            tpl = c.prepare(TEXTS[0])
            regs = c.batch([Register(tpl, {"x": 1}), Register(tpl, {"x": 2}, invoke=True)])
        srv.proc.kill()  # acknowledged: then killed before any checkpoint
        srv.proc.wait()
    with ServerProcess(data_dir=tmp_path / "data") as srv, PSoupClient(srv.target) as c:
        assert c.invoke(regs[0].handle).rows == [(1, 3)]
        assert c.invoke(regs[1].handle).rows == [(2, 4)] == regs[1].result.rows
