"""The bench's bounds of other server designs do the real work (the answers an engine in
this process gives), so what ``psoup bench grpc`` measures through them is ingest and
invokes, not a shortcut: psoup/bench/engine_process.py (a byte-pump front and its
engine child) and psoup/bench/asyncio_front.py (one event loop running the engine). The
transport alone (psoup/bench/transport_front.py) takes every batch, in order; the
client load reports its own CPU; the ceiling the bench derives from them is a bound."""

from __future__ import annotations

import functools

import grpc
import numpy as np
import pytest

import psoup
from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.bench import asyncio_front, engine_process, grpc_load, transport_front
from psoup.bench.grpc_bench import _setup, ceiling
from psoup.bench.grpc_load import SCHEMA, make_batches

INVOKED = "SELECT * FROM r WHERE a = :c BEGIN NOW - 999 END NOW"


def _workload(db: psoup.Engine, consts: list[int], invoked: list[int]) -> list[str]:
    _setup(db, consts)
    return [db.register(INVOKED, params={"c": c}) for c in invoked]


@pytest.mark.parametrize("front", [engine_process.front, asyncio_front.front])
def test_the_front_answers_as_an_engine_in_this_process(front) -> None:
    consts = list(range(0, 65_536, 97))  # ~1.5% of the domain: some matches per batch
    batches = make_batches(5, 6, 500)
    invoked = [int(c) for c in np.unique(np.concatenate([b["a"][-40:] for b in batches[-2:]]))]
    local = psoup.connect()
    local_handles = _workload(local, consts, invoked)
    want = []
    for b in batches:
        res = local.insert_columns("r", b)
        want.append((res.count, res.matches))
    want_rows = [local.invoke(h).rows for h in local_handles]
    assert sum(m for _, m in want) > 0 and all(want_rows)
    reqs = [
        pb.IngestRequest(stream="r", columns=codec.encode_batch(SCHEMA, b), batch_id=k)
        for k, b in enumerate(batches)
    ]
    setup = functools.partial(_workload, consts=consts, invoked=invoked)
    with front(setup) as f:
        cpu, tuples = f.stats()
        with grpc.insecure_channel(f"127.0.0.1:{f.port}") as ch:
            stub = pb_grpc.PSoupStub(ch)
            acks = list(stub.Ingest(iter(reqs)))
            got = [stub.Invoke(pb.InvokeRequest(handle=h)) for h in f.ready]
        cpu_after, tuples_after = f.stats()
    assert [a.batch_id for a in acks] == list(range(len(batches)))
    assert [(a.rows, a.matches) for a in acks] == want
    assert [codec.decode_rows(r.data, r.rows) for r in got] == want_rows
    assert tuples_after - tuples == sum(len(b["t"]) for b in batches)
    assert cpu_after > cpu


def test_the_front_fails_its_calls_once_the_engine_child_is_gone() -> None:
    with engine_process.front(functools.partial(_workload, consts=[1], invoked=[1])) as f:
        f.child.kill()
        f.child.join()
        with grpc.insecure_channel(f"127.0.0.1:{f.port}") as ch:
            try:
                pb_grpc.PSoupStub(ch).Invoke(pb.InvokeRequest(handle=f.ready[0]), timeout=30)
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.UNKNOWN
            else:
                raise AssertionError("an invoke with no engine child succeeded")


def test_a_setup_that_fails_starts_no_asyncio_front() -> None:
    def setup(db: psoup.Engine) -> None:
        raise ValueError("no workload")

    with pytest.raises(ValueError, match="no workload"), asyncio_front.front(setup):
        raise AssertionError("a front started after its setup failed")


def test_the_transport_alone_acks_every_batch_with_its_rows_in_order() -> None:
    sizes = [3, 500, 1, 64]
    rng = np.random.default_rng(3)
    batches = [grpc_load.make_batch(rng, n, 1000 * k) for k, n in enumerate(sizes)]
    reqs = [
        pb.IngestRequest(stream="r", columns=codec.encode_batch(SCHEMA, b), batch_id=10 + k)
        for k, b in enumerate(batches)
    ]
    with transport_front.front() as port, grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        acks = list(pb_grpc.PSoupStub(ch).Ingest(iter(reqs)))
    assert [(a.batch_id, a.rows) for a in acks] == [(10 + k, n) for k, n in enumerate(sizes)]


def test_the_ingest_load_reports_its_timed_batches_and_its_cpu() -> None:
    with transport_front.front() as port:
        got = grpc_load.ingest(f"127.0.0.1:{port}", seed=1, batches=40, rows=2000, warm=8, t0=0)
    assert got["rows"] == 32 * 2000
    assert got["cpu_seconds"] > 0
    assert got["seconds"] > 0


@pytest.mark.parametrize("cores", [1, 2, 4])
def test_the_ceiling_is_the_cores_time_over_what_a_batch_needs(cores: int) -> None:
    rng = np.random.default_rng(cores)
    for engine, transport, client in rng.uniform(1, 1000, (200, 3)):
        bound = ceiling(engine, transport, client, cores)
        # A run at the ratio r spends engine / r of wall time per batch, on `cores`
        # cores: at least the CPU the three parts need, so r can be no higher.
        assert bound <= 1.0
        assert cores * engine / bound >= engine + transport + client - 1e-9 or bound == 1.0
        assert ceiling(engine, transport + 1, client, cores) <= bound
    assert ceiling(100.0, 0.0, 0.0, cores) == 1.0
