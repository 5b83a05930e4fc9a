"""Arrow Flight ingest (``psoup serve --flight-port``; psoup/server/flight.py and
clients/flight.py): batches put over Flight land as the same batches sent over Ingest do
(acks, matches, invoke answers); a refused batch ends the put with the batches before it
kept and nothing after; every refusal names what is wrong and changes nothing; tokens
and stream rights hold as on the gRPC service; what was acked survives a SIGKILL.

Real servers on loopback ports, real Flight and gRPC clients, a real process killed.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from clients import PSoupClient
from clients.errors import InvalidArgument, NotFound, PermissionDenied, Unauthenticated
from clients.flight import FlightIngester
from psoup.server import ServerConfig, start_server
from psoup.server.process import ServerProcess

SCHEMA = {"a": "int", "x": "float", "t": "int"}
QUERY = "SELECT * FROM {s} WHERE a >= :lo AND a < :hi BEGIN NOW - 499 END NOW"


@pytest.fixture(scope="module")
def server():
    srv = start_server(ServerConfig(port=0, flight_port=0))
    yield srv
    srv.stop(grace=1)


@pytest.fixture(scope="module")
def grpc_client(server):
    with PSoupClient(f"127.0.0.1:{server.port}", timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def flight(server):
    with FlightIngester(f"127.0.0.1:{server.flight_port}", batch_rows=97) as f:
        yield f


_names = iter(range(10**6))


def _stream(c: PSoupClient) -> str:
    name = f"s{next(_names)}"
    c.create_stream(name, SCHEMA, time="t", max_window=1000)
    return name


def _columns(rng: np.random.Generator, rows: int, t0: int) -> dict[str, np.ndarray]:
    return {
        "a": rng.integers(0, 50, rows),
        "x": rng.uniform(-1, 1, rows),
        "t": t0 + np.sort(rng.integers(0, rows, rows)),
    }


def _rows(c: PSoupClient, handle: str) -> list[tuple]:
    return sorted(map(tuple, c.invoke(handle).rows))


@pytest.mark.parametrize("seed", range(4))
def test_batches_over_flight_land_as_over_ingest(grpc_client, flight, seed: int) -> None:
    rng = np.random.default_rng(seed)
    over_grpc, over_flight = _stream(grpc_client), _stream(grpc_client)
    lo = int(rng.integers(0, 40))
    params = {"lo": lo, "hi": lo + int(rng.integers(1, 20))}
    handles = [
        grpc_client.register(QUERY.format(s=s), params=params) for s in (over_grpc, over_flight)
    ]
    t0 = 0
    for _ in range(int(rng.integers(1, 4))):
        cols = _columns(rng, int(rng.integers(1, 700)), t0)
        t0 = int(cols["t"][-1])
        want = grpc_client.insert_columns(over_grpc, cols)
        got = flight.insert(over_flight, cols)
        assert (got.count, got.matches) == (want.count, want.matches)
        assert got.last_id - got.first_id == want.last_id - want.first_id
        assert _rows(grpc_client, handles[1]) == _rows(grpc_client, handles[0])
    assert _rows(grpc_client, handles[1])  # the query saw rows: the comparison had teeth


def test_acks_come_one_per_batch_in_order(grpc_client, flight) -> None:
    s = _stream(grpc_client)
    rng = np.random.default_rng(9)
    table = pa.table(_columns(rng, 500, 0))
    acks = list(flight.put(s, table.to_batches(max_chunksize=120)))
    assert [a.batch_id for a in acks] == [0, 1, 2, 3, 4]
    assert [a.rows for a in acks] == [120, 120, 120, 120, 20]
    assert all(b.first_tuple_id == a.last_tuple_id + 1 for a, b in itertools.pairwise(acks))
    assert grpc_client.describe_stream(s).tuples_stored == 500


def test_a_refused_batch_ends_the_put_keeping_the_ones_before(grpc_client, flight) -> None:
    s = _stream(grpc_client)
    h = grpc_client.register(QUERY.format(s=s), params={"lo": 0, "hi": 50})
    good = [pa.record_batch(_columns(np.random.default_rng(k), 50, 100 * k)) for k in range(4)]
    late = _columns(np.random.default_rng(7), 50, 0)  # older than batch 1's last time
    batches = [good[0], good[1], pa.record_batch(late), good[3]]
    acks = []
    with pytest.raises(InvalidArgument, match=r"batch 2 \(stream 's\d+'\)") as err:
        for ack in flight.put(s, batches):
            acks.append(ack)
    assert "Traceback" not in err.value.message
    assert [a.batch_id for a in acks] == [0, 1]
    assert grpc_client.describe_stream(s).tuples_stored == 100
    assert len(_rows(grpc_client, h)) == 100


def _refused(grpc_client, flight, s: str, table: pa.Table, error, match: str) -> None:
    before = grpc_client.describe_stream(s).tuples_stored
    with pytest.raises(error, match=match):
        flight.insert(s, table)
    assert grpc_client.describe_stream(s).tuples_stored == before


def test_each_refusal_names_the_problem_and_changes_nothing(grpc_client, flight) -> None:
    s = _stream(grpc_client)
    cols = _columns(np.random.default_rng(1), 10, 0)
    streams = [i.name for i in grpc_client.list_streams()]
    with pytest.raises(NotFound, match="unknown stream 'nowhere'"):
        flight.insert("nowhere", pa.table(cols))
    assert [i.name for i in grpc_client.list_streams()] == streams
    wrong = dict(cols, a=cols["a"].astype(np.float64) + 0.5)
    _refused(
        grpc_client, flight, s, pa.table(wrong), InvalidArgument, r"batch 0.*'a'.*expected int"
    )
    extra = dict(cols, b=cols["a"])
    _refused(grpc_client, flight, s, pa.table(extra), InvalidArgument, r"'b'.*unknown attribute")
    missing = {k: v for k, v in cols.items() if k != "x"}
    _refused(grpc_client, flight, s, pa.table(missing), InvalidArgument, r"'x'.*missing column")
    nulls = pa.table({"a": pa.array([1, None] * 5), "x": cols["x"], "t": cols["t"]})
    _refused(grpc_client, flight, s, nulls, InvalidArgument, r"columns\[0\] 'a': NULLs")
    twice = pa.Table.from_arrays([cols["a"], cols["x"], cols["t"], cols["t"]], ["a", "x", "t", "t"])
    _refused(
        grpc_client, flight, s, twice, InvalidArgument, r"fields\[3\] 't': attribute given twice"
    )


def test_a_descriptor_that_is_not_one_path_is_refused(grpc_client, server) -> None:
    s = _stream(grpc_client)
    table = pa.table(_columns(np.random.default_rng(2), 5, 0))
    client = fl.connect(f"grpc://127.0.0.1:{server.flight_port}")
    for desc in (fl.FlightDescriptor.for_command(s), fl.FlightDescriptor.for_path(s, s)):
        writer, reader = client.do_put(desc, table.schema)
        with pytest.raises(pa.ArrowInvalid, match="descriptor: give the stream's name"):
            writer.write_table(table)
            writer.done_writing()
            reader.read()
            writer.close()  # a raw Flight client hears the call's status here at the latest
    client.close()
    assert grpc_client.describe_stream(s).tuples_stored == 0


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    tokens = tmp_path_factory.mktemp("auth") / "tokens"
    tokens.write_text("alice:a-secret\nbob:b-secret\n")
    srv = start_server(ServerConfig(port=0, flight_port=0, auth_tokens_file=str(tokens)))
    yield srv
    srv.stop(grace=1)


def test_tokens_and_rights_hold_over_flight(secured) -> None:
    target = f"127.0.0.1:{secured.flight_port}"
    table = pa.table(_columns(np.random.default_rng(3), 20, 0))
    with PSoupClient(f"127.0.0.1:{secured.port}", token="a-secret", timeout=30) as alice:
        alice.create_stream("owned", SCHEMA, time="t")
        for token, error, match in (
            (None, Unauthenticated, "authorization"),
            ("nobody", Unauthenticated, "unknown token"),
            ("b-secret", PermissionDenied, "owned"),
        ):
            with FlightIngester(target, token=token) as f, pytest.raises(error, match=match):
                f.insert("owned", table)
            assert alice.describe_stream("owned").tuples_stored == 0
        with FlightIngester(target, token="a-secret") as f:
            assert f.insert("owned", table).count == 20
        alice.grant("owned", "bob", "write")
        with FlightIngester(target, token="b-secret") as f:
            assert (
                f.insert("owned", pa.table(_columns(np.random.default_rng(4), 5, 100))).count == 5
            )
        assert alice.describe_stream("owned").tuples_stored == 25


def test_what_flight_acked_survives_a_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    cols = _columns(np.random.default_rng(5), 300, 0)
    with ServerProcess("--flight-port", "0", "--sync", "batch", data_dir=data) as srv:
        with PSoupClient(srv.target, timeout=30) as c:
            c.create_stream("r", SCHEMA, time="t")
            h = c.register(QUERY.format(s="r"), params={"lo": 0, "hi": 25})
            with FlightIngester(srv.flight_target, batch_rows=64) as f:
                assert f.insert("r", cols).count == 300
            want = _rows(c, h)
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait()
    assert want
    with ServerProcess("--flight-port", "0", data_dir=data) as srv, PSoupClient(srv.target) as c:
        assert c.describe_stream("r").tuples_stored == 300
        assert _rows(c, h) == want


def test_stopping_does_not_wait_for_an_idle_put() -> None:
    srv = start_server(ServerConfig(port=0, flight_port=0))
    with PSoupClient(f"127.0.0.1:{srv.port}", timeout=30) as c:
        c.create_stream("r", SCHEMA, time="t")
    client = fl.connect(f"grpc://127.0.0.1:{srv.flight_port}")
    batch = pa.record_batch(_columns(np.random.default_rng(6), 10, 0))
    writer, reader = client.do_put(fl.FlightDescriptor.for_path("r"), batch.schema)
    writer.write_batch(batch)
    assert reader.read() is not None  # acked: the put is under way, and now idle
    stopping = threading.Thread(target=srv.stop, kwargs={"grace": 0.5})
    stopping.start()
    stopping.join(60)  # a hang fails here rather than stalling the suite
    try:
        assert not stopping.is_alive(), "stop waited for a put whose client sends nothing"
    finally:
        writer.done_writing()  # the put ends, and with it Flight's shutdown
        writer.close()
        client.close()


def test_a_put_left_early_sends_no_more(grpc_client, flight) -> None:
    s = _stream(grpc_client)
    made = []

    def batches():
        for k in range(10_000):  # far more than the test reads acks for
            made.append(k)
            yield pa.record_batch(_columns(np.random.default_rng(k), 5, 10 * k))

    acks = flight.put(s, batches())
    assert next(acks).batch_id == 0
    acks.close()  # the caller is done: the put ends, its source is not drained
    assert len(made) < 10_000
    # The put has ended on the server too (closing waits for its status): every batch
    # written is in, the one taken from the source as it stopped is not sent.
    assert grpc_client.describe_stream(s).tuples_stored in (5 * len(made) - 5, 5 * len(made))


@pytest.mark.ray
def test_flight_into_a_sharded_server_lands_as_into_one_engine() -> None:
    """The placed layout's door (``psoup serve --shards 1 --flight-port``): batches put
    over Flight into a server whose engine is a Ray shard answer as one engine in this
    process fed the same batches; a refused batch keeps the ones before it there too.
    The server is a child process so its Ray instance never lives in the test process."""
    import psoup

    rng = np.random.default_rng(21)
    db = psoup.connect()
    try:
        with (
            ServerProcess("--shards", "1", "--flight-port", "0") as srv,
            PSoupClient(srv.target, timeout=60) as c,
            FlightIngester(srv.flight_target, batch_rows=150) as f,
        ):
            c.create_stream("s", SCHEMA, time="t", max_window=1000)
            db.create_stream("s", SCHEMA, time="t", max_window=1000)
            params = [{"lo": lo, "hi": lo + 9} for lo in (0, 17, 33)]
            handles = [c.register(QUERY.format(s="s"), params=p) for p in params]
            mine = [db.register(QUERY.format(s="s"), params=p) for p in params]
            t0, stored = 0, 0
            for _ in range(3):
                cols = _columns(rng, int(rng.integers(200, 600)), t0)
                t0 = int(cols["t"][-1])
                assert f.insert("s", cols).count == len(cols["t"])
                db.insert_columns("s", cols)
                stored += len(cols["t"])
            extra = _columns(rng, 20, t0 + 10)
            late = _columns(rng, 20, 0)  # older than what is stored
            with pytest.raises(InvalidArgument, match="batch 1"):
                list(f.put("s", [pa.record_batch(extra), pa.record_batch(late)]))
            db.insert_columns("s", extra)
            assert c.describe_stream("s").tuples_stored == stored + 20
            for h, m in zip(handles, mine, strict=True):
                want = sorted(map(tuple, db.invoke(m).rows))
                assert _rows(c, h) == want and want
    finally:
        db.close()


@pytest.mark.parametrize(
    ("exc", "code", "says"),
    [
        (fl.FlightCancelledError("the client went away"), "CANCELLED", "went away"),
        (fl.FlightTimedOutError("too slow"), "DEADLINE_EXCEEDED", "too slow"),
        (pa.ArrowInvalid("bad IPC"), "INVALID_ARGUMENT", "do not read: bad IPC"),
        (pa.ArrowKeyError("k"), "INVALID_ARGUMENT", "do not read"),
        (fl.FlightInternalError("odd"), "INTERNAL", "FlightInternalError: odd"),
        (ValueError("v"), "INTERNAL", "internal error: ValueError: v"),
    ],
)
def test_a_put_ends_with_the_status_its_error_names(exc, code: str, says: str) -> None:
    """What a put's metrics and refusal log record, and the Flight error it raises: the
    code of pyarrow's own errors kept, bytes that do not read INVALID_ARGUMENT, the rest
    INTERNAL; the servicer's errors are the interceptor's (``status_of``)."""
    from psoup.server.flight import put_status

    got, message = put_status(exc)
    assert got.name == code and says in message
