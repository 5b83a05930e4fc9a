"""Client-side load for ``psoup bench grpc``, run in its own process.

``python -m psoup.bench.grpc_load ingest TARGET --seed S --batches N --rows R --warm W --t0 T
[--cpus LIST]``
sends the equality workload's batches over one pipelined Ingest stream and prints JSON
``{"rows": ..., "seconds": ..., "cpu_seconds": ...}`` for the batches after the first W
(timed from the acknowledgement of batch W to the last one; the CPU is this process's
over that span).

``python -m psoup.bench.grpc_load flight-ingest TARGET ...`` (the same options) sends the
same batches as Arrow record batches over one Flight DoPut to a server's
``--flight-port`` (psoup/server/flight.py) and prints the same JSON.

``python -m psoup.bench.grpc_load flood TARGET --stream S --rows R --seconds D`` prints
``ready`` once connected, waits for a line on stdin, then ingests into S as fast as the
server takes it for D seconds and prints the rows acknowledged in each second and the
calls refused (``psoup bench overload``: its clocks start once every client is ready,
not while ten interpreters import numpy and gRPC).

``python -m psoup.bench.grpc_load bystander TARGET --handle H`` is the overload bench's
bystander: a client process of its own that, for each line ``run SECONDS`` on its stdin,
invokes H every 5 ms with ``clients.PSoupClient`` for that long and prints one JSON line
``{"samples": [[seconds since the line, ms], ...]}``; it exits at the end of its input.

``python -m psoup.bench.grpc_load invoke TARGET --handles FILE --clients C --invokes M``
runs C threads, each invoking M random handles from FILE (one per line), and prints
JSON ``{"latencies_ms": [...]}``. With ``--wait-go`` it prints ``ready`` once every
thread is connected and starts on a line from stdin: ``psoup bench grpc`` starts C such
processes of one thread together, C clients as C applications would be.

These use the generated stubs and psoup.api.codec directly, so what is measured is the
transport and the server, not a client library's conveniences.

``python -m psoup.bench.grpc_load client-ingest TARGET --seed S --rows N --batch-rows B``
is the other way round: the in-memory client ``psoup ingest`` is compared with. It makes
the CSV workload's N rows (``csv_columns``, the rows of the bench's CSV file) as numpy
arrays and sends them with ``clients.PSoupClient.insert_columns`` in batches of B, timed
from the call to its last acknowledgement, and prints ``{"rows": ..., "seconds": ...}``.
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import sys
import threading
import time

import grpc
import numpy as np

from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.pinning import parse_cpus, pin_process

EQ_DOMAIN = 65_536
SCHEMA = {"a": "int", "t": "int"}
#: The CSV ingest comparison's stream: the equality workload's ``a``, two more int
#: attributes and the time.
CSV_SCHEMA = {"a": "int", "b": "int", "c": "int", "t": "int"}


def make_batch(rng: np.random.Generator, rows: int, t0: int) -> dict[str, np.ndarray]:
    """One batch of the equality workload: a uniform in [0, 65536), t = t0, t0+1, ..."""
    return {"a": rng.integers(0, EQ_DOMAIN, rows), "t": np.arange(t0, t0 + rows, dtype=np.int64)}


def make_batches(seed: int, count: int, rows: int, t0: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` batches of ``rows`` rows, the same for a given seed in every process."""
    rng = np.random.default_rng(seed)
    return [make_batch(rng, rows, t0 + k * rows) for k in range(count)]


def csv_columns(seed: int, rows: int) -> dict[str, np.ndarray]:
    """The CSV comparison's rows as columns (CSV_SCHEMA): ``a`` as the equality workload,
    ``b`` and ``c`` uniform in [0, 10^6), t = 0, 1, ...; the same for a given seed."""
    rng = np.random.default_rng(seed)
    return {
        "a": rng.integers(0, EQ_DOMAIN, rows),
        "b": rng.integers(0, 1_000_000, rows),
        "c": rng.integers(0, 1_000_000, rows),
        "t": np.arange(rows, dtype=np.int64),
    }


def client_ingest(target: str, stream: str, seed: int, rows: int, batch_rows: int) -> dict:
    """Send ``csv_columns(seed, rows)`` into ``stream`` with the client library, in
    batches of ``batch_rows``; time the insert (the channel is connected first by a
    DescribeStream, as ``psoup ingest`` does before its clock starts; the insert asks for
    the schema once more, one round trip)."""
    from clients import PSoupClient

    columns = csv_columns(seed, rows)
    with PSoupClient(target, batch_rows=batch_rows) as c:
        c.describe_stream(stream)
        start = time.perf_counter()
        res = c.insert_columns(stream, columns)
        end = time.perf_counter()
    assert res.count == rows, res
    return {"rows": res.count, "seconds": end - start}


def ingest(target: str, seed: int, batches: int, rows: int, warm: int, t0: int) -> dict:
    """Send the batches; time the ones after ``warm``: from the acknowledgement of the last
    warm-up batch to the last acknowledgement, so warm-up work still queued in the
    server (index compilation, pipelined batches) is not counted. ``cpu_seconds``: this
    process's CPU over the same span (all its threads: gRPC's too)."""
    data = make_batches(seed, batches, rows, t0)
    reqs = [
        pb.IngestRequest(stream="r", columns=codec.encode_batch(SCHEMA, b), batch_id=k)
        for k, b in enumerate(data)
    ]
    with grpc.insecure_channel(target) as ch:
        stub = pb_grpc.PSoupStub(ch)
        start, cpu = time.perf_counter(), time.process_time()
        acks = 0
        for _ack in stub.Ingest(iter(reqs)):
            acks += 1
            if acks == warm:
                start, cpu = time.perf_counter(), time.process_time()
        end, cpu = time.perf_counter(), time.process_time() - cpu
    assert acks == batches
    return {"rows": (batches - warm) * rows, "seconds": end - start, "cpu_seconds": cpu}


def flight_ingest(target: str, seed: int, batches: int, rows: int, warm: int, t0: int) -> dict:
    """``ingest``'s batches as Arrow record batches over one Flight DoPut into the
    server's ``--flight-port`` (psoup/server/flight.py), written as fast as gRPC takes
    them while a thread reads the acks; timed and measured as ``ingest``."""
    import pyarrow as pa
    import pyarrow.flight as flight

    data = make_batches(seed, batches, rows, t0)
    out = [pa.record_batch(b) for b in data]
    client = flight.connect(f"grpc+tcp://{target}")
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("r"), out[0].schema)
    span: dict[str, float] = {}

    def acks() -> None:
        got = 0
        while reader.read() is not None:
            got += 1
            if got == warm:
                span["start"], span["cpu"] = time.perf_counter(), time.process_time()
            if got == batches:
                span["end"], span["cpu"] = time.perf_counter(), time.process_time() - span["cpu"]
                return

    reading = threading.Thread(target=acks)
    span["start"], span["cpu"] = time.perf_counter(), time.process_time()
    reading.start()
    for b in out:
        writer.write_batch(b)
    writer.done_writing()
    reading.join()
    writer.close()
    client.close()
    assert "end" in span, "the server ended the put before acking every batch"
    return {
        "rows": (batches - warm) * rows,
        "seconds": span["end"] - span["start"],
        "cpu_seconds": span["cpu"],
    }


def ingest_forever(target: str, seed: int, rows: int, t0: int) -> None:
    """Send batches until the process is killed (background load)."""
    rng = np.random.default_rng(seed)

    def stream():
        k = 0
        while True:
            cols = codec.encode_batch(SCHEMA, make_batch(rng, rows, t0 + k * rows))
            yield pb.IngestRequest(stream="r", columns=cols, batch_id=k)
            k += 1

    with grpc.insecure_channel(target) as ch:
        for _ack in pb_grpc.PSoupStub(ch).Ingest(stream()):
            pass


def flood(target: str, stream: str, seed: int, rows: int, seconds: float) -> dict:
    """Send ``rows``-row batches into ``stream`` as fast as the server takes them, for
    ``seconds``: a client of ``psoup bench overload``. A refused call (the ingest queue
    full) is counted and a new call started. Returns the rows acknowledged per whole
    second since the start, and the refusals."""
    rng = np.random.default_rng(seed)
    per_second: list[int] = []
    refused = 0
    t = 0
    start = time.monotonic()

    def stream_requests():
        nonlocal t
        k = 0
        while time.monotonic() - start < seconds:
            cols = codec.encode_batch(SCHEMA, make_batch(rng, rows, t))
            t += rows
            yield pb.IngestRequest(stream=stream, columns=cols, batch_id=k)
            k += 1

    with grpc.insecure_channel(target) as ch:
        stub = pb_grpc.PSoupStub(ch)
        grpc.channel_ready_future(ch).result(timeout=60)
        print("ready", flush=True)
        sys.stdin.readline()  # go
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            try:
                for ack in stub.Ingest(stream_requests()):
                    sec = int(time.monotonic() - start)
                    per_second.extend([0] * (sec + 1 - len(per_second)))
                    per_second[sec] += ack.rows
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                refused += 1
    return {"per_second": per_second, "refused": refused}


def bystander(target: str, handle: str) -> None:
    """Serve ``run SECONDS`` lines from stdin (see the module docstring): invoke
    ``handle`` every 5 ms for that long; one JSON line of (seconds, ms) samples each."""
    from clients import PSoupClient

    with PSoupClient(target, timeout=60) as c:
        c.invoke(handle)  # connect before the first timed call
        print("ready", flush=True)
        for line in sys.stdin:
            seconds = float(line.split()[1])
            samples: list[tuple[float, float]] = []
            t0 = time.monotonic()
            while (now := time.monotonic()) - t0 < seconds:
                start = time.perf_counter()
                c.invoke(handle)
                samples.append((now - t0, 1e3 * (time.perf_counter() - start)))
                time.sleep(max(0.0, 0.005 - (time.perf_counter() - start)))
            print(json.dumps({"samples": samples}), flush=True)


def _ready_go() -> None:
    print("ready", flush=True)
    sys.stdin.readline()  # go


def invoke(
    target: str,
    handles: list[str],
    clients: int,
    invokes: int,
    seed: int,
    go: bool = False,
    batch: int = 1,
    stream: bool = False,
) -> dict:
    """Latencies (ms) of ``clients`` threads x ``invokes`` calls each; with ``go``, they
    start once told on stdin (after ``ready``). ``batch`` > 1: each call is a Batch of
    that many invokes (of handles drawn at random); else an Invoke, or with ``stream``
    a request on an Invokes call each client keeps open (as clients.Invoker)."""
    lat: list[float] = []
    lock = threading.Lock()
    ready = threading.Barrier(clients, action=_ready_go if go else None)

    def client(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        mine = []
        with grpc.insecure_channel(target) as ch:
            stub = pb_grpc.PSoupStub(ch)
            if stream:
                outbox: queue.SimpleQueue = queue.SimpleQueue()
                replies = stub.Invokes(iter(outbox.get, None))

                def invoke_one(req):
                    outbox.put(req)
                    return next(replies)

            else:
                invoke_one = stub.Invoke
            try:
                invoke_one(pb.InvokeRequest(handle=handles[0]))  # connect first
            except grpc.RpcError as err:  # past max_invoke_calls: unary, as Invoker does
                if not stream or err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                outbox.put(None)
                invoke_one = stub.Invoke
                invoke_one(pb.InvokeRequest(handle=handles[0]))
            ready.wait()
            for _ in range(invokes):
                if batch > 1:  # as PSoupClient.batch
                    call, req = stub.Batch, pb.BatchRequest(items=[
                        pb.BatchRequest.Item(invoke=pb.InvokeRequest(handle=rng.choice(handles)))
                        for _ in range(batch)
                    ])  # fmt: skip
                else:  # as PSoupClient.invoke
                    call = invoke_one
                    req = pb.InvokeRequest(handle=rng.choice(handles))
                start = time.perf_counter()
                call(req)
                mine.append(1e3 * (time.perf_counter() - start))
            if stream:
                outbox.put(None)  # the call's end
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"latencies_ms": lat}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m psoup.bench.grpc_load", description=__doc__)
    sub = p.add_subparsers(dest="mode", required=True)
    i = sub.add_parser("ingest", help="timed ingest of the equality workload")
    fi = sub.add_parser("flight-ingest", help="the same over Arrow Flight DoPut")
    f = sub.add_parser("ingest-forever", help="background ingest until killed")
    v = sub.add_parser("invoke", help="concurrent invokers")
    fl = sub.add_parser("flood", help="ingest as fast as the server takes it, for a while")
    by = sub.add_parser("bystander", help="invoke every 5 ms for as long as told")
    by.add_argument("target", help="HOST:PORT of the server")
    by.add_argument("--handle", required=True, help="the standing query to invoke")
    ci = sub.add_parser("client-ingest", help="the CSV rows from memory with PSoupClient")
    ci.add_argument("target", help="HOST:PORT of the server")
    ci.add_argument("--seed", type=int, default=7, help="random seed")
    ci.add_argument("--stream", default="r", help="the stream to ingest into")
    ci.add_argument("--rows", type=int, required=True, help="rows to send")
    ci.add_argument("--batch-rows", type=int, default=8192, help="rows per batch")
    fl.add_argument("target", help="HOST:PORT of the server")
    fl.add_argument("--seed", type=int, default=7, help="random seed")
    fl.add_argument("--stream", required=True, help="the stream to flood")
    fl.add_argument("--rows", type=int, default=8192, help="rows per batch")
    fl.add_argument("--seconds", type=float, required=True, help="how long")
    for s in (i, fi, f, v):
        s.add_argument("target", help="HOST:PORT of the server")
        s.add_argument("--seed", type=int, default=7, help="random seed")
    for s in (i, fi, f):
        s.add_argument("--rows", type=int, default=1000, help="rows per batch")
        s.add_argument("--t0", type=int, default=0, help="first timestamp")
    for s in (i, fi):
        s.add_argument("--batches", type=int, required=True, help="batches to send")
        s.add_argument("--warm", type=int, default=0, help="untimed leading batches")
        s.add_argument("--cpus", type=parse_cpus, help="keep this client on these CPUs (0, 0-1)")
    v.add_argument("--handles", required=True, help="file with one handle per line")
    v.add_argument("--clients", type=int, default=1, help="concurrent client threads")
    v.add_argument("--invokes", type=int, default=200, help="invocations per client")
    v.add_argument("--wait-go", action="store_true", help="print ready, start on a stdin line")
    v.add_argument("--batch", type=int, default=1, help="invokes per call (a Batch when > 1)")
    v.add_argument("--stream", action="store_true", help="invoke on one Invokes call each")
    a = p.parse_args(argv)
    if a.mode in ("ingest", "flight-ingest"):
        if a.cpus:  # before gRPC starts its threads, which inherit it
            pin_process(a.cpus)
        send = ingest if a.mode == "ingest" else flight_ingest
        out = send(a.target, a.seed, a.batches, a.rows, a.warm, a.t0)
    elif a.mode == "client-ingest":
        out = client_ingest(a.target, a.stream, a.seed, a.rows, a.batch_rows)
    elif a.mode == "flood":
        out = flood(a.target, a.stream, a.seed, a.rows, a.seconds)
    elif a.mode == "bystander":
        bystander(a.target, a.handle)
        return 0
    elif a.mode == "ingest-forever":
        ingest_forever(a.target, a.seed, a.rows, a.t0)
        return 0
    else:
        with open(a.handles) as fh:
            handles = fh.read().split()
        out = invoke(a.target, handles, a.clients, a.invokes, a.seed, a.wait_go, a.batch, a.stream)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
