"""``psoup bench scale``: the sharded engine on Ray beside the single process.

1. Through the server: the same 8,192-row batches (the gRPC benchmark's equality
   workload, 1,024 standing queries) sent by a client in another process to a server in
   this process, kept in memory: one engine, then ``--shards 1`` and ``--shards 2``
   (the stream partitioned by its attribute ``a``); then invoke p50/p99 of equality
   queries (each on one shard) and of a COUNT over the whole stream (gathered from
   every shard) by one client, idle.
2. The hop: the same call made to a ``Shard`` in this process and to the same class as
   a Ray actor (one ingest part of 8,192 rows, one small invoke), so the difference is
   what Ray's call, serialisation and scheduling add, in microseconds.
3. A model of ingest and invoke capacity for 4, 16 and 64 machines from those figures,
   with its assumptions, and the 1 -> 2 shard step measured here as its check.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from psoup.bench import machine, report
from psoup.bench.core import Section
from psoup.bench.grpc_bench import EQ_QUERY, _load
from psoup.bench.grpc_load import EQ_DOMAIN, SCHEMA, make_batches
from psoup.server import ServerConfig, start_server
from psoup.shard.front import ShardedEngine

ROWS = 8192
COUNT_QUERY = "SELECT COUNT(*) FROM r BEGIN NOW - 9999 END NOW"


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def through_server(n_queries: int, batches: int, invokes: int, seed: int) -> Section:
    """Ingest rate and invoke latency per configuration."""
    sec = Section(
        f"Through the server: {n_queries:,} equality queries, batches of {ROWS:,} rows",
        ["engine", "ingest t/s", "vs one engine", "eq invoke p50 ms", "eq invoke p99 ms",
         "gathered COUNT p50 ms", "gathered COUNT p99 ms"],
    )  # fmt: skip
    consts = np.random.default_rng(seed).choice(EQ_DOMAIN, n_queries, replace=False).tolist()
    base = None
    for shards in tqdm((None, 1, 2), desc="configurations", leave=False):
        srv = start_server(ServerConfig(port=0, shards=shards))
        try:

            def setup(engine=srv.engine, shards=shards) -> tuple[list[str], str]:
                part = {"partition_by": "a"} if shards else {}
                engine.create_stream("r", SCHEMA, time="t", **part)
                eq = [engine.register(EQ_QUERY, params={"c": c}) for c in consts]
                return eq, engine.register(COUNT_QUERY)

            eq, count = srv.worker.call(setup)
            target = f"127.0.0.1:{srv.port}"
            got = _load("ingest", target, "--seed", str(seed), "--batches", str(batches),
                        "--rows", str(ROWS), "--warm", str(batches // 5))  # fmt: skip
            # A sharded server acknowledges a batch once it is queued for the shards:
            # the run ends when they have applied it all (conservatively, the wait starts
            # only after the client process has exited).
            start = time.perf_counter()
            if isinstance(srv.engine, ShardedEngine):
                srv.engine.drain()
            rate = got["rows"] / (got["seconds"] + time.perf_counter() - start)
            base = base or rate
            lat = {}
            for name, hs in (("eq", eq[:64]), ("count", [count])):
                path = Path(f"/tmp/psoup-scale-{name}-{srv.port}.handles")
                path.write_text("\n".join(hs))
                got = _load("invoke", target, "--handles", str(path), "--clients", "1",
                            "--invokes", str(invokes), "--seed", str(seed))  # fmt: skip
                lat[name] = got["latencies_ms"]
                path.unlink()
        finally:
            srv.stop(grace=1)
        label = "one engine" if shards is None else f"{shards} shard{'s' * (shards > 1)} (Ray)"
        sec.rows.append([label, rate, rate / base,
                         _pct(lat["eq"], 50), _pct(lat["eq"], 99),
                         _pct(lat["count"], 50), _pct(lat["count"], 99)])  # fmt: skip
    sec.notes.append(
        f"{batches:,} batches per run (the first fifth untimed) from a client in another "
        "process on one Ingest stream; the server in memory. A sharded server acknowledges "
        "a batch once its parts are queued to the shards (every invoke queues behind "
        "them, so answers stay stream-prefix consistent); its run is timed until the "
        "shards have applied every batch. Everything "
        "shares the machine's 2 cores: the shards, the front-end, the client and Ray."
    )
    return sec


def hop_cost(reps: int, seed: int) -> tuple[Section, dict]:
    """The same shard calls in this process, over the shard actor's socket (the path the
    front-end takes) and as Ray actor calls (microseconds)."""
    import ray

    from psoup.shard.cluster import RayShard, RayTransport, init_ray, namespace_for

    init_ray(None, None, namespace_for(None))
    local = RayShard(0)
    actor = ray.remote(RayShard).options(num_cpus=0, max_concurrency=1).remote(0)
    sock = RayTransport(actor)
    epoch = sock.hello(60)[0]
    decl = list(SCHEMA.items())
    data = make_batches(seed, reps + 2, ROWS)
    paths = {
        "local": lambda ops: local.call(local.epoch, ops),
        "socket": lambda ops: sock.result(sock.send(epoch, ops), None),
        "ray": lambda ops: ray.get(actor.call.remote(epoch, ops)),
    }
    out: dict[str, list[float]] = {}
    for where, call in paths.items():
        table = f"r_{where}"
        call([(None, "create_stream", (table, decl, "t"), {}),
              (None, "restore_query", (f"h_{where}", EQ_QUERY.replace("FROM r", f"FROM {table}")
                                       .replace("WHERE a", f"WHERE {table}.a"),
                                       {"c": 5}, None, 0.0), {})])  # fmt: skip
        ins, inv = [], []
        for k, b in enumerate(data):
            cols = [b["a"], b["t"]]
            tids = np.arange(k * ROWS, (k + 1) * ROWS, dtype=np.int64)
            start = time.perf_counter()
            call([(None, "insert_part", (table, cols, tids, int(b["t"][-1])), {})])
            ins.append(1e6 * (time.perf_counter() - start))
            start = time.perf_counter()
            call([(None, "invoke_parts", (f"h_{where}", None), {})])
            inv.append(1e6 * (time.perf_counter() - start))
        out[f"{where} insert"], out[f"{where} invoke"] = ins[2:], inv[2:]
    sock.close()
    sec = Section(
        "The hop to a shard actor, per call (µs, p50)",
        ["call", "in this process", "actor's socket (used)", "socket hop", "Ray actor call",
         "Ray call hop", "socket p99"],
    )  # fmt: skip
    med = {k: statistics.median(v) for k, v in out.items()}
    for what in ("insert", "invoke"):
        lo, so, ra = med[f"local {what}"], med[f"socket {what}"], med[f"ray {what}"]
        sec.rows.append([
            f"insert ({ROWS:,}-row part)" if what == "insert" else "invoke (equality query)",
            lo, so, so - lo, ra, ra - lo, _pct(out[f"socket {what}"], 99)])  # fmt: skip
    sec.notes.append(
        f"{reps} calls each, one at a time, from this process to a shard here, to the "
        "same class as a Ray actor over the socket it serves (psoup/shard/cluster.py: "
        "Ray places, restarts and introduces the shard; the operations skip Ray's task "
        "path), and as plain Ray actor calls (numpy columns over 100 KB go through "
        "Ray's object store there). The front-end also pipelines up to 4 calls per shard "
        "and groups what waits meanwhile into one call."
    )
    return sec, med


def model(server: Section, hop: dict) -> Section:
    """Capacity for M machines from the measured costs, assumptions stated."""
    one = server.rows[0][1]
    shard1 = server.rows[1][1]
    per_batch_us = 1e6 * ROWS / shard1
    shard_us = hop["local insert"]
    front_us = max(per_batch_us - shard_us, 1.0)
    sec = Section(
        "A model of capacity on M machines (one shard per machine, one front-end)",
        ["machines", "ingest t/s (model)", "limited by", "single-shard invoke p50 ms",
         "gathered invoke p50 ms"],
    )  # fmt: skip
    eq_p50 = server.rows[1][3]
    hop_inv = (hop["socket invoke"] - hop["local invoke"]) / 1e3
    for m in (1, 2, 4, 16, 64):
        shards_rate = m * 1e6 * ROWS / shard_us
        front_rate = 1e6 * ROWS / front_us
        rate = min(shards_rate, front_rate)
        gathered = eq_p50 + hop_inv * np.log2(max(m, 1))  # parallel calls; the merge tree
        sec.rows.append([m, rate, "front-end" if front_rate < shards_rate else "shards",
                         eq_p50, gathered])  # fmt: skip
    sec.notes += [
        f"Inputs measured above: one engine {one:,.0f} t/s through the server; one shard "
        f"{shard1:,.0f} t/s, i.e. {per_batch_us:,.0f} µs per {ROWS:,}-row batch of which "
        f"the shard's own work is {shard_us:,.0f} µs (the in-process call), so the "
        f"front-end and the hop cost ~{front_us:,.0f} µs per batch; an invoke's hop "
        f"{hop_inv * 1e3:,.0f} µs.",
        "Assumes: each machine has the cores of this one and runs one shard; batches are "
        "spread evenly by the partition attribute (Linear Road's expressways are); one "
        "front-end process receives every batch (its per-batch cost does not shrink with "
        "M, so it caps ingest; more front-ends, each owning some streams, would lift the "
        "cap); network hops cost what Ray's local hop costs here plus the wire. A "
        "single-shard query's invoke does not grow with M; a gathered one waits for the "
        "slowest of M parallel calls, modelled as one hop per doubling.",
        "Check on this machine: the measured 2-shard row above against the model's M = "
        "2 row. Both shards share 2 cores with the front-end and the client here, so "
        "the measured step is the model's shape under contention, not its size.",
    ]
    return sec


def run(out_dir: Path, quick: bool = False, seed: int = 7) -> list[Section]:
    """Run all three; print tables; write BENCHMARKS.md's scale section and plot."""
    if quick:
        server = through_server(64, 40, 100, seed)
        hop, med = hop_cost(20, seed)
    else:
        server = through_server(1024, 400, 2000, seed)
        hop, med = hop_cost(300, seed)
    sections = [server, hop, model(server, med)]
    where = machine.describe()
    command = "psoup bench scale" + (" --quick" if quick else "")
    md = [f"## Scale-out on Ray (`{command}`)", "", f"Machine: {where}.", ""]
    print(f"machine: {where}")
    for sec in sections:
        md += sec.show()
    plot = "scale_model" + ("_quick" if quick else "") + ".png"
    mod = sections[2]
    report.plot(
        out_dir / plot,
        "Ingest capacity by machines (model) and measured",
        "machines",
        "tuples/s",
        {
            "model": ([r[0] for r in mod.rows], [r[1] for r in mod.rows]),
            "measured (this machine)": ([1, 2], [server.rows[1][1], server.rows[2][1]]),
        },
    )
    md += [f"![ingest capacity]({plot})", ""]
    name = "scale" + ("-quick" if quick else "")
    report.write_section(out_dir / "BENCHMARKS.md", name, "\n".join(md))
    print(f"\nwrote {out_dir / 'BENCHMARKS.md'} and {plot}")
    return sections
