"""``psoup bench grpc``: the transport's cost, side by side with the engine in-process.

1. Ingest: the core benchmark's equality workload (65,536 standing queries ``r.a = c``)
   ingested in-process, and through a server in this process from a client in another
   process (psoup/bench/grpc_load.py), on the same generated batches, also with the
   server's threads kept on one CPU (``psoup serve --cpus``); and, as a bound,
   through a bare gRPC front that forwards the batches to the engine in a process of its
   own (psoup/bench/engine_process.py), and through a bare asyncio gRPC front whose one
   event loop thread runs the engine itself (psoup/bench/asyncio_front.py). Also through
   the built server with its engine in a process of its own: ``psoup serve --shards 1``,
   one engine shard on Ray behind the sharded front-end (psoup/shard), as the scheduler
   places it and laid out with the engine on a core of its own (``--cpus`` for the
   front-end, ``--shard-cpus`` for the shard, the client beside the front-end). And,
   to say where a batch's CPU goes, through the transport alone (a gRPC server built as
   psoup's that decodes and acks each batch and runs no engine:
   psoup/bench/transport_front.py), with the server's and the client's CPU per batch:
   the ceiling they put on the gRPC / in-process ratio on the machine it runs on.
2. Invoke latency: p50/p99 of a selective query (an equality, ~1 match) over a window of
   2^16 tuples, with 1, 4 and 16 concurrent clients while another process ingests;
   against the server, the server kept on one CPU (``--cpus``), the server with one shard
   (``--shards 1``) and, as bounds, the two fronts.
3. Invokes one call each (Invoke) against the same invokes in Batch calls of 4, 16 and
   64: the server's CPU and the client's wall time per invoke.
4. A CSV file through the command line: 1,000,000 rows of 4 int attributes written with
   pyarrow's CSV writer into a temporary directory (~26 MB), sent by ``psoup ingest`` (a
   child process) and, from numpy arrays, by ``clients.PSoupClient.insert_columns`` (a
   child process too: psoup/bench/grpc_load.py), in batches of 8192, each into a fresh
   server holding the same 65,536 equality queries; three times each, alternating.

Part 1 measures each design in three rounds, each an in-process run then the same batches
through the design, and takes the median of the rounds' ratios: this host's speed drifts
by half within minutes, so a ratio against a baseline taken minutes before measures the
drift as much as the transport.

Costs (full size): part 1 sends 6,000,000 tuples per round (18 rounds per batch size, as
many in-process), registers 65,536 queries seven times per batch size and starts a Ray
instance once per batch size; part 4 registers them six times (~10 s each) and writes
the CSV file once. The whole suite takes about 12 minutes on 2 cores; ``--quick`` (1024
queries, smaller runs, a 100,000-row CSV) about half a minute.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import psoup
from psoup.bench import asyncio_front, engine_process, machine, report, transport_front
from psoup.bench.core import Section
from psoup.bench.grpc_load import CSV_SCHEMA, EQ_DOMAIN, SCHEMA, csv_columns, make_batches
from psoup.pinning import allowed_cpus, cpu_list
from psoup.server import ServerConfig, start_server
from psoup.shard.front import ShardedEngine

EQ_QUERY = "SELECT * FROM r WHERE a = :c BEGIN NOW - 9999 END NOW"
INVOKE_QUERY = "SELECT * FROM r WHERE a = :c BEGIN NOW - 65535 END NOW"
MAX_WINDOW = 65_535  # the last 2^16 timestamps (one tuple each)


def _setup(db: psoup.Engine, consts: list[int], schema: dict[str, str] = SCHEMA) -> None:
    db.create_stream("r", schema, time="t", max_window=MAX_WINDOW)
    for c in consts:
        db.register(EQ_QUERY, params={"c": c})


def _load(mode: str, *args: str) -> dict:
    cmd = [sys.executable, "-m", "psoup.bench.grpc_load", mode, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def ingest_rates(
    n_queries: int, total_rows: int, batch_rows: list[int], seed: int, rounds: int = 3
) -> tuple[Section, Section]:
    """In-process versus gRPC ingest rate on the same batches, per batch size; and where
    a batch's CPU goes (engine, transport, client) with the ratio's ceiling it implies.

    This host's speed drifts by half within minutes (docs/BENCHMARKS.md), and a run
    lasts a second or two; so each design is measured in
    ``rounds`` rounds, each an in-process run then the same batches through the design,
    and its ratio is the median of the rounds' ratios (each against the in-process run
    just before it), not one ratio against a baseline taken minutes earlier."""
    sec = Section(
        f"Ingest: {n_queries:,} equality queries, in-process vs through the server",
        ["batch rows", "in-process t/s", "gRPC t/s", "gRPC / in-process",
         "Arrow Flight t/s", "Arrow Flight / in-process",
         "gRPC, --cpus 1 CPU t/s", "--cpus 1 CPU / in-process",
         "gRPC, --shards 1 t/s", "--shards 1 / in-process",
         "--shards 1 placed t/s", "--shards 1 placed / in-process",
         "Arrow Flight, --shards 1 placed t/s", "Arrow Flight, --shards 1 placed / in-process",
         "engine process t/s", "engine process / in-process",
         "asyncio front t/s", "asyncio front / in-process"],
    )  # fmt: skip
    budget = Section(
        f"Ingest: {n_queries:,} equality queries, a batch's CPU: engine, transport, client",
        ["batch rows", "engine in-process µs", "transport alone t/s",
         "transport alone: server CPU µs", "transport alone: client CPU µs",
         "gRPC: server CPU µs", "gRPC: client CPU µs", "ceiling on gRPC / in-process",
         "gRPC / in-process", "Arrow Flight: server CPU µs", "Arrow Flight: client CPU µs",
         "Arrow Flight / in-process"],
    )  # fmt: skip
    cores = len(allowed_cpus())
    engine_us: list[tuple[int, float, float]] = []  # rows, µs per batch: in-process, child
    spread: list[str] = []  # each design's lowest and highest ratio, per batch size
    consts = np.random.default_rng(seed).choice(EQ_DOMAIN, n_queries, replace=False).tolist()
    for rows in tqdm(batch_rows, desc="batch sizes", leave=False):
        runs, local_us, cpu, cpu_of = _designs_at(rows, consts, total_rows, seed, rounds)
        engine = float(np.median(local_us))
        moved, sent = cpu_of["transport alone"]
        budget.rows.append(
            [rows, engine, runs["transport alone"][0], moved, sent, *cpu_of["gRPC"],
             ceiling(engine, moved, sent, cores), runs["gRPC"][1], *cpu_of["Arrow Flight"],
             runs["Arrow Flight"][1]]
        )  # fmt: skip
        row: list = [rows, rows / (1e-6 * float(np.median(local_us)))]
        for name in ("gRPC", "Arrow Flight", "--cpus 1 CPU", "--shards 1", "--shards 1 placed",
                     "Arrow Flight, --shards 1 placed", "engine process",
                     "asyncio front"):  # fmt: skip
            rate, ratio, ratios = runs.get(name, (None, None, []))
            row += [rate, ratio]
            if ratios:
                spread.append(f"{name} at {rows:,} rows {min(ratios):.3f}-{max(ratios):.3f}")
        sec.rows.append(row)
        engine_us.append((rows, engine, cpu))
    sec.notes.append(
        f"Each design in {rounds} rounds, each an in-process run then the same batches "
        "through the design; a design's t/s and ratio are the medians of its rounds (each "
        "ratio against the in-process run just before it), the in-process t/s the median "
        "of every in-process run. The rounds' ratios ranged: " + "; ".join(spread) + "."
    )
    sec.notes.append(
        f"{total_rows:,} tuples per run, the first fifth untimed; max_window {MAX_WINDOW + 1:,}. "
        "The gRPC client runs in its own process and pipelines batches on one Ingest stream "
        "(columnar little-endian arrays); the server decodes with np.frombuffer and runs the "
        "same engine code on its engine thread. Both processes share the machine's 2 cores. "
        "'Arrow Flight': the same server and batches, the client writing them as Arrow "
        "record batches over one Flight DoPut to its `--flight-port` while a thread reads "
        "the acks (psoup/server/flight.py: Flight's C++ server reads each batch with the "
        "interpreter free; the handler hands numpy views of it to the same `ingest_batch` "
        "as Ingest's). "
        f"'--cpus 1 CPU': the same server with every thread of its own kept on CPU "
        f"{_listed(ONE_CPU)} (`psoup serve --cpus`, psoup/pinning.py), the client "
        "free to run on any. '--shards 1': the same server with its engine in a process "
        "of its own (`psoup serve --shards 1`: the sharded front-end in this process, "
        "which checks, numbers and acks each batch, and one engine shard, a Ray actor, "
        "fed over a socket; psoup/shard), timed once the shard has taken the standing "
        "queries. '--shards 1 placed': that server laid out over the two cores, the engine "
        f"on a core of its own: its front-end on CPU {_listed(ONE_CPU)} (`--cpus`), its "
        f"shard's process on CPU {_listed(ENGINE_CPU)} (`--shard-cpus`), and the client "
        f"kept on CPU {_listed(ONE_CPU)} beside the front-end (the load's `--cpus`, as "
        "`taskset` would). 'Arrow Flight, --shards 1 placed': that layout with the "
        "client putting its batches over Flight, as in 'Arrow Flight'. 'engine process': "
        "the same client against the other design at its leanest "
        "(psoup/bench/engine_process.py): a gRPC front that only forwards each request's "
        "bytes, undecoded, over a pipe to the engine in a process of its own, which decodes "
        "them and answers with the batch's counts; none of the server's checks, durability "
        "or metrics on the way: what "
        "taking the engine out of the gRPC process could give at best. The engine's time "
        "per batch, in-process against its CPU in the engine process (all batches, the "
        "warm-up's too): "
        + "; ".join(f"{r:,} rows {a:,.0f} µs against {b:,.0f}" for r, a, b in engine_us)
        + ". Three processes (client, front, engine) share the 2 cores. 'asyncio front': "
        "the same client against the third design at its leanest "
        "(psoup/bench/asyncio_front.py): a grpc.aio server in this process whose one event "
        "loop thread decodes each batch, runs the engine on it there and acks it, with no "
        "thread hand-off and none of the server's checks, durability or metrics: what "
        "taking the hand-offs out of the server could give at best."
    )
    budget.notes.append(
        "Where the CPU of a batch through the server goes, from the same rounds as the "
        "table above (medians of the rounds). 'engine in-process µs': the engine's wall "
        "time per timed batch in this process, alone on the machine. 'transport alone': "
        "the same client against a gRPC server built as psoup's (a thread pool of "
        "`workers` threads, the same message limit) whose Ingest decodes each batch's "
        "columns as the server does and acks it, with no engine and none of the server's "
        "steps (psoup/bench/transport_front.py): its t/s, this process's CPU per batch "
        "(every thread: gRPC's C threads, its polling thread, the call's; all batches, "
        "the warm-up's too), and the client process's CPU per timed batch. 'gRPC': the "
        "same two for the server of the first column ('gRPC' above; the engine's work "
        "included), and for the same server taking the same batches as Arrow record "
        "batches over one Flight DoPut (`psoup serve --flight-port`, "
        "psoup/server/flight.py; 'Arrow Flight' above). "
        f"'ceiling': {cores} cores' worth of time over the CPU a batch needs at the least,"
        " the engine's in-process time plus the transport's and the client's: "
        f"min(1, {cores} × engine / (engine + transport server CPU + transport client "
        "CPU)). No design that sends each batch through gRPC's Python server and runs the "
        "engine on this machine can do better than that, whatever it overlaps, as long "
        "as neither part costs less in the server than alone: that is how far issue "
        "#19's 0.8 is within reach on this machine through the PSoup service. Arrow "
        "Flight's transport is another one, in C++, and is not bound by it."
    )
    return sec, budget


def ceiling(engine_us: float, transport_us: float, client_us: float, cores: int) -> float:
    """The highest gRPC / in-process ingest ratio a machine of ``cores`` cores allows
    when a batch costs ``engine_us`` of engine time in-process, ``transport_us`` of the
    server's CPU to receive and ack, and ``client_us`` of the client's CPU to send: its
    cores' time over the least CPU a batch needs, at most 1."""
    return min(1.0, cores * engine_us / (engine_us + transport_us + client_us))


def _designs_at(
    rows: int, consts: list[int], total_rows: int, seed: int, rounds: int
) -> tuple[
    dict[str, tuple[float, float, list[float]]],
    list[float],
    float,
    dict[str, tuple[float, float]],
]:
    """``ingest_rates``'s rounds at one batch size: per design (median tuples/s, median
    ratio, the rounds' ratios); the in-process engine's µs per timed batch, per run; the
    engine process's CPU µs per batch (all batches, the warm-up's too); and for the plain
    server and the transport alone, the medians of this process's CPU µs per batch (all
    batches) and the client's per timed batch."""
    count = max(total_rows // rows, 5)
    warm = count // 5
    span = count * rows  # the timestamps one run takes
    db = psoup.connect()
    _setup(db, consts)
    local_t0 = iter(range(0, 1 << 62, span))
    local_us: list[float] = []

    def local() -> float:
        """One in-process run, after the ones before it: tuples/s."""
        data = make_batches(seed, count, rows, next(local_t0))
        for b in data[:warm]:
            db.insert_columns("r", b)
        start = time.perf_counter()
        for b in data[warm:]:
            db.insert_columns("r", b)
        took = time.perf_counter() - start
        local_us.append(1e6 * took / (count - warm))
        return (count - warm) * rows / took

    def rounds_of(
        target: str, client_cpus: frozenset[int] | None = None, name: str = "", mode="ingest"
    ):
        rates, ratios, here, client = [], [], [], []
        for k in range(rounds):
            base = local()
            load = ("--seed", str(seed), "--batches", str(count), "--rows", str(rows),
                    "--warm", str(warm), "--t0", str(k * span))  # fmt: skip
            if client_cpus:
                load += ("--cpus", _listed(client_cpus))
            cpu0 = time.process_time()  # this process: the server's threads, when it is here
            got = _load(mode, target, *load)
            here.append(1e6 * (time.process_time() - cpu0) / count)
            client.append(1e6 * got["cpu_seconds"] / (count - warm))
            rates.append(got["rows"] / got["seconds"])
            ratios.append(rates[-1] / base)
        if name:
            cpu_of[name] = (float(np.median(here)), float(np.median(client)))
        return float(np.median(rates)), float(np.median(ratios)), ratios

    def on_server(cpus=None, shards=None, shard_cpus=None, client_cpus=None, name="", flight=False):
        srv = start_server(
            ServerConfig(port=0, cpus=cpus, shards=shards, shard_cpus=shard_cpus,
                         flight_port=0 if flight else None)
        )  # fmt: skip
        try:
            srv.worker.call(lambda: _setup(srv.engine, consts))
            _settle(srv)
            if flight:
                target = f"127.0.0.1:{srv.flight_port}"
                return rounds_of(target, client_cpus, name, mode="flight-ingest")
            return rounds_of(f"127.0.0.1:{srv.port}", client_cpus, name)
        finally:
            srv.stop(grace=1)

    cpu_of: dict[str, tuple[float, float]] = {}
    try:
        runs = {"gRPC": on_server(name="gRPC")}
        runs["Arrow Flight"] = on_server(name="Arrow Flight", flight=True)
        with transport_front.front() as port:
            runs["transport alone"] = rounds_of(f"127.0.0.1:{port}", name="transport alone")
        if ONE_CPU:
            runs["--cpus 1 CPU"] = on_server(ONE_CPU)
        runs["--shards 1"] = on_server(shards=1)
        if ONE_CPU:
            runs["--shards 1 placed"] = on_server(ONE_CPU, 1, ENGINE_CPU, client_cpus=ONE_CPU)
            runs["Arrow Flight, --shards 1 placed"] = on_server(
                ONE_CPU, 1, ENGINE_CPU, client_cpus=ONE_CPU, flight=True
            )
        with engine_process.front(functools.partial(_setup, consts=consts)) as f:
            cpu = f.stats()[0]
            runs["engine process"] = rounds_of(f"127.0.0.1:{f.port}")
            cpu = f.stats()[0] - cpu
        with asyncio_front.front(functools.partial(_setup, consts=consts)) as f:
            runs["asyncio front"] = rounds_of(f"127.0.0.1:{f.port}")
    finally:
        db.close()
    return runs, local_us, 1e6 * cpu / (rounds * count), cpu_of


#: The CPU the one-CPU server runs on (``psoup serve --cpus``): the lowest this process
#: may use; None where there are not two to choose from (the runs are then left out).
ONE_CPU = frozenset({min(allowed_cpus())}) if len(allowed_cpus()) >= 2 else None
#: The CPU the placed one-shard server's shard runs on (``--shard-cpus``): the highest.
ENGINE_CPU = frozenset({max(allowed_cpus())}) if ONE_CPU else None


def _listed(cpus: frozenset[int] | None) -> str:
    return cpu_list(cpus) if cpus else "(none: fewer than 2 CPUs)"


def _settle(srv, timeout: float = 600.0) -> None:
    """Return once a sharded server's shards have applied what the front-end sent them
    (a shard takes 65,536 standing queries for ~10 s after the front-end has said yes
    to them), so that a timed run measures the workload, not that backlog; at once for
    a server with its engine in-process. Raises TimeoutError if the shards have not
    within ``timeout`` seconds (one lost in memory never will)."""
    if isinstance(srv.engine, ShardedEngine) and not srv.engine.drain(timeout):
        raise TimeoutError(f"the shards did not take the workload in {timeout:.0f} s")


def _invokers(
    target: str, handles: Path, clients: int, invokes: int, seed: int, stream: bool = False
) -> list:
    """``clients`` client processes of one thread each, started together (each connects,
    says ready, then invokes ``invokes`` times on a line from stdin, with unary Invoke
    calls or, with ``stream``, on one Invokes call); their latencies."""

    def one(k: int) -> list[str]:
        return [sys.executable, "-m", "psoup.bench.grpc_load", "invoke", target,
                "--handles", str(handles), "--clients", "1", "--invokes", str(invokes),
                "--seed", str(seed + k), "--wait-go",
                *(["--stream"] if stream else [])]  # fmt: skip

    procs = [
        subprocess.Popen(one(k), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for k in range(clients)
    ]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("an invoking client did not start")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        lat: list[float] = []
        for p in procs:
            out, _ = p.communicate()
            if p.returncode:
                raise RuntimeError(f"an invoking client failed (exit {p.returncode})")
            lat.extend(json.loads(out)["latencies_ms"])
        return lat
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


PRELOAD_BATCHES = (MAX_WINDOW + 1) // 1000 + 2  # of 1000 rows: the window, full
T_NEXT = PRELOAD_BATCHES * 1000  # the first timestamp after the preloaded tuples


def _invoke_workload(db: psoup.Engine, consts: list[int], seed: int, invoked: list[int]):
    """The equality workload's standing queries on ``consts``, the last 2^16 tuples, and
    the queries to invoke (``r.a = c`` for each c of ``invoked``): their handles."""
    _setup(db, consts)
    for b in make_batches(seed, PRELOAD_BATCHES, 1000):
        db.insert_columns("r", b)
    return [db.register(INVOKE_QUERY, params={"c": c}) for c in invoked]


def _invoke_args(n_queries: int, rng: np.random.Generator, seed: int) -> dict:
    """``_invoke_workload``'s arguments after the engine: ``n_queries`` constants to stand
    and 256 to invoke."""
    consts = rng.choice(EQ_DOMAIN, n_queries, replace=False).tolist()
    return {"consts": consts, "seed": seed, "invoked": rng.integers(0, EQ_DOMAIN, 256).tolist()}


def _invoke_server(config: ServerConfig, args: dict):
    """A server in this process started with ``config`` and holding ``_invoke_workload``
    on ``args`` (``_invoke_args``), its shards (if any) settled: ``(server, the handles
    to invoke)``."""
    srv = start_server(config)
    try:
        handles = srv.worker.call(lambda: _invoke_workload(srv.engine, **args))
        _settle(srv)
        return srv, handles
    except BaseException:
        srv.stop(grace=1)
        raise


#: How concurrent invokers are laid out: each a client process of its own (as separate
#: applications are), or threads of one client process (sharing its interpreter lock,
#: whose waits then count in the latency).
LAYOUTS = ("processes", "threads")
PLACED = "processes, server on 1 CPU"  # client processes against a server with --cpus
CALLS = "processes, Invokes"  # each client process invokes on one open Invokes call
PLACED_CALLS = "processes, Invokes, server on 1 CPU"  # CALLS against a server with --cpus
SHARDED = "processes, --shards 1"  # client processes against a server with one shard
APART = "processes, engine apart"  # client processes against engine_process's front
LOOP = "processes, asyncio front"  # client processes against asyncio_front's server


def _invoke_runs(
    sec: Section, target: str, handles: list[str], ingested, runs: list, invokes: int, seed: int
) -> None:
    """Add a row to ``sec`` per ``(clients, layout)`` of ``runs``: the invoke latencies at
    ``target`` while a client process ingests there; ``ingested()`` counts the tuples the
    engine has taken, for the rate meanwhile."""
    background = None
    with tempfile.NamedTemporaryFile("w", suffix=".handles", delete=False) as fh:
        fh.write("\n".join(handles))
    try:
        background = subprocess.Popen(
            [sys.executable, "-m", "psoup.bench.grpc_load", "ingest-forever", target,
             "--rows", "1000", "--t0", str(T_NEXT), "--seed", str(seed + 2)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for c, how in tqdm(runs, desc=f"concurrent invokers ({target})", leave=False):
            each = max(invokes // c, 50)
            before = ingested()
            start = time.perf_counter()
            if how == "threads":
                got = _load("invoke", target, "--handles", fh.name, "--clients", str(c),
                            "--invokes", str(each), "--seed", str(seed))  # fmt: skip
                lat = got["latencies_ms"]
            else:
                lat = _invokers(target, Path(fh.name), c, each, seed, how in (CALLS, PLACED_CALLS))
            rate = (ingested() - before) / (time.perf_counter() - start)
            p50, p90, p99 = np.percentile(np.array(lat), [50, 90, 99])
            sec.rows.append([c, how, len(lat), float(p50), float(p90), float(p99), rate])
    finally:
        if background is not None:
            background.kill()
            background.wait()
        Path(fh.name).unlink(missing_ok=True)


def invoke_latency(n_queries: int, clients: list[int], invokes: int, seed: int) -> Section:
    """Invoke p50/p99 for concurrent clients while another process ingests: against the
    server (the clients as processes, then as threads of one process), the server kept on
    one CPU and the server with one shard (clients as processes), then, as bounds,
    against the engine-process and asyncio fronts (clients as processes)."""
    sec = Section(
        "Invoke latency at window 2^16 while ingest runs",
        ["clients", "as", "invokes", "p50 ms", "p90 ms", "p99 ms", "ingest t/s meanwhile"],
    )
    args = _invoke_args(n_queries, np.random.default_rng(seed + 1), seed)
    servers = [(ServerConfig(port=0), [(c, how) for c in clients for how in (*LAYOUTS, CALLS)])]
    if ONE_CPU:
        placed = [(c, how) for c in clients for how in (PLACED, PLACED_CALLS)]
        servers.append((ServerConfig(port=0, cpus=ONE_CPU), placed))
    servers.append((ServerConfig(port=0, shards=1), [(c, SHARDED) for c in clients]))
    for config, runs in servers:
        srv, handles = _invoke_server(config, args)
        try:
            _invoke_runs(
                sec, f"127.0.0.1:{srv.port}", handles,
                lambda s=srv: s.engine.stats()["streams"]["r"]["tuples_ingested"],
                runs, invokes, seed,
            )  # fmt: skip
        finally:
            srv.stop(grace=1)
    with engine_process.front(functools.partial(_invoke_workload, **args)) as f:
        _invoke_runs(
            sec, f"127.0.0.1:{f.port}", f.ready, lambda: f.stats()[1],
            [(c, APART) for c in clients], invokes, seed,
        )  # fmt: skip
    with asyncio_front.front(functools.partial(_invoke_workload, **args)) as f:
        _invoke_runs(
            sec, f"127.0.0.1:{f.port}", f.ready, lambda: f.stats()[1],
            [(c, LOOP) for c in clients], invokes, seed,
        )  # fmt: skip
    sec.notes.append(
        f"{n_queries:,} standing equality queries plus 256 invoked ones (r.a = c over the last "
        "2^16 tuples, about one match each); another process ingests batches of 1000 as fast "
        "as the server takes them. 'processes': each client is a process of its own, as "
        "separate applications are; 'threads': the clients are threads of one process and "
        "share its interpreter lock. Latency is measured per call at the client, from "
        f"request to answer (a unary Invoke). '{PLACED}': client processes as in "
        f"'processes', against the same server with every thread of its own kept on CPU "
        f"{_listed(ONE_CPU)} (`psoup serve --cpus`), the clients free to run on any. "
        f"'{CALLS}' and '{PLACED_CALLS}': the same two, each client invoking on one open "
        "Invokes call (as `clients.Invoker` does) instead of a unary call each; the "
        "server keeps at most 8 open (`--max-invoke-calls`), so of 16 clients the others "
        "invoke with unary calls, as an Invoker then does. "
        f"'{SHARDED}': the same against the server with one engine shard (`psoup serve "
        "--shards 1`, the ingest table's): a shard runs the operations it is sent in the "
        "order sent, so an invoke waits behind the batches the front-end acknowledged "
        "before it. "
        f"'{APART}': client processes as in "
        "'processes', against the engine-process front of the ingest table "
        "(psoup/bench/engine_process.py: the same workload, the engine in a process of "
        "its own running one thing at a time, invokes before waiting ingest batches, gRPC "
        "in the front's), a bound on what that design would give. "
        f"'{LOOP}': the same against the asyncio front of the ingest table "
        "(psoup/bench/asyncio_front.py: its one event loop runs each call's engine work "
        "as its message comes, invokes and batches alike in arrival order)."
    )
    return sec


def batched_invokes(n_queries: int, invokes: int, sizes: list[int], seed: int) -> Section:
    """Invokes one call each (Invoke) against the same invokes in Batch calls: the
    server's CPU and the client's wall time per invoke."""
    sec = Section(
        "Invokes one call each vs in Batch calls",
        ["invokes per call", "calls", "wall µs per invoke", "server CPU µs per invoke",
         "CPU vs one call each"],
    )  # fmt: skip
    args = _invoke_args(n_queries, np.random.default_rng(seed + 3), seed)
    srv, handles = _invoke_server(ServerConfig(port=0), args)
    target = f"127.0.0.1:{srv.port}"
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".handles", delete=False) as fh:
            fh.write("\n".join(handles))
        one = None
        for size in tqdm(sizes, desc="invokes per call", leave=False):
            calls = max(invokes // size, 20)
            before, start = os.times(), time.perf_counter()
            _load("invoke", target, "--handles", fh.name, "--invokes", str(calls),
                  "--seed", str(seed), "--batch", str(size))  # fmt: skip
            wall, after = time.perf_counter() - start, os.times()
            cpu = (after.user - before.user) + (after.system - before.system)
            n = calls * size
            per = 1e6 * cpu / n
            one = per if one is None else one
            sec.rows.append([size, calls, 1e6 * wall / n, per, per / one])
    finally:
        srv.stop(grace=1)
        Path(fh.name).unlink(missing_ok=True)
    sec.notes.append(
        f"{n_queries:,} standing equality queries plus 256 invoked ones (r.a = c over the last "
        "2^16 tuples, about one match each), no ingest meanwhile. One client process of one "
        "thread calls in sequence; the server runs in the benchmark's process, whose CPU time "
        "(user + system, all its threads: gRPC's and the engine's) is what the server spent. "
        "The wall time counts the client process's start and connection too. Batch runs its "
        "invokes in one turn of the engine thread and answers them in one message "
        "(docs/ARCHITECTURE.md)."
    )
    return sec


#: ``psoup ingest``'s summary line: "ingested N rows in B batches in S s (R rows/s); ...";
#: S has two decimals, R is whole rows/s of the unrounded seconds, so R gives the time.
_SUMMARY = re.compile(r"ingested ([\d,]+) rows? in .*? s \(([\d,]+) rows/s\)")


def _cli_ingest(target: str, path: Path, batch_rows: int) -> dict:
    """``psoup ingest r FILE`` as a user types it (progress bar and all, on a pipe here):
    the rows and seconds of its own summary, and the child's wall-clock time."""
    cmd = [sys.executable, "-m", "psoup", "ingest", "r", str(path), "--server", target,
           "--batch-rows", str(batch_rows)]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    m = _SUMMARY.search(done.stdout)
    if m is None:
        raise RuntimeError(f"no summary in psoup ingest's output: {done.stdout!r}")
    rows = int(m[1].replace(",", ""))
    return {"rows": rows, "seconds": rows / int(m[2].replace(",", "")), "wall": wall}


def _client_ingest(target: str, rows: int, batch_rows: int, seed: int) -> dict:
    start = time.perf_counter()
    got = _load("client-ingest", target, "--seed", str(seed), "--rows", str(rows),
                "--batch-rows", str(batch_rows))  # fmt: skip
    return {**got, "wall": time.perf_counter() - start}


def _warm_setup(db: psoup.Engine, consts: list[int]) -> None:
    """Stream r of CSV_SCHEMA with the queries, and one row (t = -1, matching none) sent
    through it, so that the first timed batch does not pay for building the query index
    (~0.1 s at 65,536 queries, a quarter of the whole timed run): both clients are then
    measured against a server in its steady state."""
    _setup(db, consts, CSV_SCHEMA)
    db.insert_columns("r", {"a": [-1], "b": [0], "c": [0], "t": [-1]})


def csv_ingest(n_queries: int, rows: int, batch_rows: int, seed: int, runs: int = 3) -> Section:
    """``psoup ingest FILE.csv`` against the same rows sent from memory by PSoupClient."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    sec = Section(
        f"A {rows:,}-row CSV file through `psoup ingest` vs the same rows from memory",
        ["client", "batch rows", "rows", "seconds", "rows/s", "vs in-memory client",
         "process wall s"],
    )  # fmt: skip
    consts = np.random.default_rng(seed).choice(EQ_DOMAIN, n_queries, replace=False).tolist()
    runs_of: dict[str, list[dict]] = {"memory": [], "cli": []}
    with tempfile.TemporaryDirectory(prefix="psoup-bench-csv-") as tmp:
        path = Path(tmp) / "r.csv"
        pacsv.write_csv(pa.table(csv_columns(seed, rows)), path)
        size = path.stat().st_size
        for k in tqdm(range(2 * runs), desc="csv ingest runs", leave=False):
            which = "memory" if k % 2 == 0 else "cli"
            srv = start_server(ServerConfig(port=0))
            try:
                srv.worker.call(lambda s=srv: _warm_setup(s.engine, consts))
                target = f"127.0.0.1:{srv.port}"
                if which == "memory":
                    got = _client_ingest(target, rows, batch_rows, seed)
                else:
                    got = _cli_ingest(target, path, batch_rows)
                stored = srv.engine.stats()["streams"]["r"]["tuples_ingested"]
            finally:
                srv.stop(grace=1)
            stored -= 1  # the warm-up row
            if got["rows"] != rows or stored != rows:
                raise RuntimeError(f"{which}: {got['rows']:,} rows acknowledged, {stored:,} stored")
            runs_of[which].append(got)

    def median(which: str) -> dict:
        # A run lasts 0.2-0.4 s, so single runs move by +-25%: the median of several,
        # alternating, judges both clients the same way.
        ordered = sorted(runs_of[which], key=lambda r: r["seconds"])
        return ordered[len(ordered) // 2]

    memory = median("memory")
    memory_rate = rows / memory["seconds"]
    for which, label in (("memory", "PSoupClient.insert_columns (numpy arrays)"),
                         ("cli", "psoup ingest r FILE.csv")):  # fmt: skip
        got = median(which)
        rate = rows / got["seconds"]
        sec.rows.append([label, batch_rows, rows, got["seconds"], rate, rate / memory_rate,
                         got["wall"]])  # fmt: skip
    every = "; ".join(
        f"{which}: " + ", ".join(f"{r['seconds']:.3f} s" for r in runs_of[which])
        for which in ("memory", "cli")
    )
    sec.notes.append(
        f"The CSV file ({size / 1e6:.1f} MB; columns {', '.join(CSV_SCHEMA)}, all int; a as "
        "the equality workload, b and c uniform in [0, 10^6), t = 0, 1, ...) is written by "
        "pyarrow's CSV writer. Each run starts a fresh in-memory server in this process "
        f"with stream r and {n_queries:,} standing equality queries r.a = c (~1 match per "
        "tuple), and one untimed row sent through them first (t = -1, no match) so that "
        "neither client's time holds the query index's build; the client is a child "
        "process. 'seconds' is the median of "
        f"{runs} runs, alternating (every run: {every}): for psoup ingest the time its "
        "own summary line reports (from the first batch read to the last acknowledgement: "
        "parsing the CSV with pyarrow, typing, encoding, sending), for the in-memory client "
        "the insert_columns call on arrays already in memory. 'process wall s' is the child "
        "process's whole life, interpreter start and imports included (for the in-memory "
        "client also generating the arrays)."
    )
    return sec


def run(out_dir: Path, quick: bool = False, seed: int = 7) -> list[Section]:
    """Run the four parts; print tables; write BENCHMARKS.md's grpc section."""
    if quick:
        sections = [
            *ingest_rates(1024, 50_000, [1000], seed),
            invoke_latency(1024, [1, 4], 100, seed),
            batched_invokes(1024, 640, [1, 16, 64], seed),
            csv_ingest(1024, 100_000, 8192, seed),
        ]
    else:
        sections = [
            *ingest_rates(65_536, 6_000_000, [1000, 8192, 65_536], seed),
            invoke_latency(65_536, [1, 4, 16], 2000, seed),
            batched_invokes(65_536, 8192, [1, 4, 16, 64], seed),
            csv_ingest(65_536, 1_000_000, 8192, seed, runs=7),
        ]
    where = machine.describe()
    command = "psoup bench grpc" + (" --quick" if quick else "")
    md = [f"## gRPC (`{command}`)", "", f"Machine: {where}.", ""]
    print(f"machine: {where}")
    for sec in sections:
        md += sec.show()
    lat = sections[2]
    report.plot(
        out_dir / "grpc_invoke_latency.png",
        lat.title,
        "concurrent clients",
        "ms",
        {
            f"{stat} ({how})": (
                [r[0] for r in lat.rows if r[1] == how],
                [r[col] for r in lat.rows if r[1] == how],
            )
            for stat, col in (("p50", 3), ("p99", 5))
            for how in (*LAYOUTS, CALLS, PLACED, PLACED_CALLS, SHARDED, APART, LOOP)
        },
    )
    md += ["![invoke latency](grpc_invoke_latency.png)", ""]
    report.write_section(out_dir / "BENCHMARKS.md", "grpc", "\n".join(md))
    print(f"\nwrote {out_dir / 'BENCHMARKS.md'} and grpc_invoke_latency.png")
    return sections
