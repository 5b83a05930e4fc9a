"""``psoup bench overload``: a server flooded by ingest, as a new user would try it.

``clients`` processes (psoup/bench/grpc_load.py ``flood``) each send 8,192-row batches to
a stream of their own as fast as a ``psoup serve`` child process takes them, for
``seconds``. Meanwhile a bystander, a client process of its own, invokes a standing query on a quiet
stream every 5 ms, and the server's memory and queue are sampled. Reported: each
client's accepted rate and its share of a fair split, the refused calls, the bystander's
invoke latency idle and under the flood, the server's peak memory, and whether every
acknowledged tuple was stored; plots of the rates and the latency over time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from clients import PSoupClient
from psoup.bench import machine, report
from psoup.bench.core import Section
from psoup.bench.grpc_load import EQ_DOMAIN, SCHEMA
from psoup.progress import progress_bar
from psoup.server.process import ServerProcess

ROWS = 8192
WINDOW = 1 << 20  # each flooded stream keeps its last million tuples
QUERIES_PER_STREAM = 64
BYSTANDER = "SELECT t FROM quiet WHERE quiet.a = 5 BEGIN NOW - 1000 END NOW"


class _Bystander:
    """The bystander: a client process of its own (grpc_load ``bystander``), as a third
    party's would be, so this process's sampling and progress bar are not in its way."""

    def __init__(self, target: str, handle: str):
        cmd = [sys.executable, "-m", "psoup.bench.grpc_load", "bystander", target,
               "--handle", handle]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if (line := self.proc.stdout.readline()).strip() != "ready":
            raise RuntimeError(f"the bystander did not start: {line.strip() or 'no output'}")

    def start(self, seconds: float) -> None:
        """Invoke every 5 ms for ``seconds`` from now; ``samples`` collects the answer."""
        self.proc.stdin.write(f"run {seconds}\n")
        self.proc.stdin.flush()

    def samples(self) -> list[tuple[float, float]]:
        """The last run's (seconds since its start, ms) per invoke; waits for its end."""
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the bystander ended before answering")
        return [(t, ms) for t, ms in json.loads(line)["samples"]]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _flood(target: str, k: int, seconds: float, seed: int) -> subprocess.Popen:
    """Client ``k``: a process that floods stream load<k> once told to (a line on its
    stdin), after it has said ``ready``."""
    cmd = [sys.executable, "-m", "psoup.bench.grpc_load", "flood", target,
           "--stream", f"load{k}", "--rows", str(ROWS), "--seconds", str(seconds),
           "--seed", str(seed + k)]  # fmt: skip
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _start_together(procs: list[subprocess.Popen]) -> None:
    """Wait until every flood client is connected, then let them all go: the clocks
    start on the flood, not on ten interpreters importing numpy and gRPC (~10 s of CPU,
    which made most of the slow invokes of the first 2 s)."""
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"a flood client did not start: {line.strip() or 'no output'}")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()


def _percentiles(ms: list[float]) -> list[float]:
    a = np.array(ms) if ms else np.zeros(1)
    return [float(np.percentile(a, 50)), float(np.percentile(a, 99)), float(a.max())]


def run(out_dir: Path, quick: bool = False, seed: int = 7) -> list[Section]:
    """Flood, measure, print the tables; write BENCHMARKS.md's overload section and plots."""
    clients, seconds = (3, 6.0) if quick else (10, 45.0)
    rng = np.random.default_rng(seed)
    srv = ServerProcess()
    try:
        with PSoupClient(srv.target, timeout=60) as c:
            for k in range(clients):
                c.create_stream(f"load{k}", SCHEMA, time="t", max_window=WINDOW)
                for v in rng.choice(EQ_DOMAIN, QUERIES_PER_STREAM, replace=False).tolist():
                    c.register(
                        f"SELECT * FROM load{k} WHERE load{k}.a = {v} BEGIN NOW - 1000 END NOW"
                    )
            c.create_stream("quiet", SCHEMA, time="t")
            c.insert("quiet", [(i % 10, i) for i in range(10_000)])
            by = _Bystander(srv.target, c.register(BYSTANDER))
            by.start(3.0)
            idle = by.samples()
            rss0 = srv.rss_bytes()
            procs = [_flood(srv.target, k, seconds, seed) for k in range(clients)]
            _start_together(procs)
            t0 = time.monotonic()
            by.start(seconds)
            rss, depth = [], []
            bar = progress_bar(total=int(seconds), desc="flood", unit="s")
            while (since := time.monotonic() - t0) < seconds:
                time.sleep(0.5)
                rss.append((since, srv.rss_bytes()))
                depth.append(int(c.stats()["queue_depth"]))
                bar.update(min(int(since), int(seconds)) - bar.n)
            bar.close()
            busy = by.samples()
            by.close()
            results = [json.loads(p.communicate()[0].splitlines()[-1]) for p in procs]
            stored = [c.describe_stream(f"load{k}").tuples_ingested for k in range(clients)]
        peak = srv.peak_rss_bytes()
    finally:
        srv.stop()

    acked = [sum(r["per_second"]) for r in results]
    fair = sum(acked) / clients
    span = seconds - 2  # the first and last second are partial
    per_client = Section(
        f"{clients} clients flooding {ROWS:,}-row batches for {seconds:.0f} s",
        ["client", "accepted t/s", "share of fair", "refused calls", "acknowledged = stored"],
    )
    for k, r in enumerate(results):
        rate = sum(r["per_second"][1:-1]) / span if len(r["per_second"]) > 2 else 0.0
        kept = "yes" if acked[k] == stored[k] else f"no ({stored[k]:,})"
        per_client.rows.append([k, rate, acked[k] / fair if fair else 0.0, r["refused"], kept])
    i50, i99, imax = _percentiles([ms for _, ms in idle])
    b50, b99, bmax = _percentiles([ms for _, ms in busy])
    total = sum(acked) / seconds
    summary = Section(
        "A bystander's invoke, and the server, under the flood",
        ["", "invoke p50 ms", "p99 ms", "max ms", "ingest t/s", "server RSS MB"],
    )
    summary.rows.append(["idle", i50, i99, imax, 0.0, rss0 / 2**20])
    summary.rows.append(["flooded", b50, b99, bmax, total, peak / 2**20])
    summary.notes.append(
        f"Each client is a process of its own ({sys.executable} -m psoup.bench.grpc_load "
        f"flood) with one pipelined Ingest call; each flooded stream has "
        f"{QUERIES_PER_STREAM} standing equality queries and keeps its last {WINDOW:,} "
        "tuples. The bystander invokes a selection over a quiet 10,000-tuple stream every "
        "5 ms from a client process of its own (grpc_load bystander). Server RSS: before "
        "the flood and its peak (VmHWM). "
        f"Largest ingest queue seen: {max(depth, default=0)} batches. Everything shares "
        "the machine's cores (the ten clients take about 0.7 of the two). The server runs "
        "with its defaults: `--ingest-turns 1`, and `--ingest-share 0.5`, so while invokes "
        "arrive ingest has at most half the engine thread's time."
    )
    where = machine.describe()
    command = "psoup bench overload" + (" --quick" if quick else "")
    md = [f"## Overload (`{command}`)", "", f"Machine: {where}.", ""]
    print(f"machine: {where}")
    for sec in (per_client, summary):
        md += sec.show()
    suffix = "_quick" if quick else ""
    secs = np.arange(int(seconds))
    lat_by_sec = [[ms for t, ms in busy if int(t) == s] for s in secs]
    report.plot(
        out_dir / f"overload_latency{suffix}.png",
        "Bystander invoke latency during the flood",
        "second",
        "ms",
        {
            "p50": (secs.tolist(), [_percentiles(v)[0] for v in lat_by_sec]),
            "p99": (secs.tolist(), [_percentiles(v)[1] for v in lat_by_sec]),
            "max": (secs.tolist(), [_percentiles(v)[2] for v in lat_by_sec]),
        },
        logx=False,
    )
    report.plot(
        out_dir / f"overload_ingest{suffix}.png",
        "Accepted ingest per client (tuples/s)",
        "second",
        "tuples/s",
        {
            f"client {k}": (list(range(len(r["per_second"]))), r["per_second"])
            for k, r in enumerate(results)
        },
        logx=False,
        logy=False,
    )
    report.plot(
        out_dir / f"overload_memory{suffix}.png",
        "Server resident memory during the flood",
        "second",
        "MB",
        {"RSS": ([t for t, _ in rss], [b / 2**20 for _, b in rss])},
        logx=False,
        logy=False,
    )
    md += [
        f"![invoke latency](overload_latency{suffix}.png) "
        f"![ingest per client](overload_ingest{suffix}.png) "
        f"![server memory](overload_memory{suffix}.png)",
        "",
    ]
    report.write_section(out_dir / "BENCHMARKS.md", "overload" + suffix.replace("_", "-"),
                         "\n".join(md))  # fmt: skip
    print(f"\nwrote {out_dir / 'BENCHMARKS.md'} and the overload plots")
    return [per_client, summary]
