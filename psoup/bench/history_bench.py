"""``psoup bench history``: hydrating a Linear Road-sized toll history with the Spark job.

1. Generates a one-expressway history of 25 million rows (``--quick``: 1 million) as the
   Linear Road generator lays it out: one ``vid,day,xway,tolls`` line per vehicle and day
   1..69, xway 0, tolls 0..99, in vehicle order, so every row is its own (vid, day, xway)
   and all of them are loaded. Written with pyarrow's CSV writer into a temporary
   directory, deleted afterwards.
2. Starts ``psoup serve --port 0`` as a child process (its memory is its own) and runs
   ``psoup.history.hydrate`` on it with a local Spark session: rows/s, per step.
3. Reads the server's resident memory (VmRSS) after the hydration, and its peak (VmHWM).
4. Registers daily-expenditure queries for random (vid, day) after the hydration (each is
   applied to the 25 million stored rows) and times invokes from this process: mean,
   p50, p99. Every answer is checked against the generated tolls.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
from tqdm import tqdm

from clients import PSoupClient
from psoup.bench import machine, report
from psoup.history.hydrate import hydrate
from psoup.history.stream import ATTRS
from psoup.history.validate import LAST_DAY
from psoup.linear_road.streams import DAILY_EXPENDITURE
from psoup.server.process import ServerProcess

FULL_ROWS, QUICK_ROWS = 25_000_000, 1_000_000
CHUNK_ROWS = 1_000_000
QUERIES, ROUNDS = 200, 5
RSS_GOAL_GB, INVOKE_GOAL_MS = 2.5, 5.0
PLOT = "history_invoke_latency.png"


def generate(path: Path, rows: int, seed: int) -> np.ndarray:
    """Write ``rows`` history lines to ``path``; returns the tolls column (row i is vehicle
    i // 69, day i % 69 + 1). Vectorised per chunk of a million rows."""
    tolls = np.random.default_rng(seed).integers(0, 100, rows, dtype=np.int8)
    schema = pa.schema([(a, pa.int64()) for a in ATTRS])
    options = pacsv.WriteOptions(include_header=False)
    with (
        pacsv.CSVWriter(path, schema, write_options=options) as out,
        tqdm(total=rows, unit="row", unit_scale=True, desc="generate") as bar,
    ):
        for a in range(0, rows, CHUNK_ROWS):
            i = np.arange(a, min(a + CHUNK_ROWS, rows), dtype=np.int64)
            cols = [i // LAST_DAY, i % LAST_DAY + 1, np.zeros_like(i), tolls[i].astype(np.int64)]
            out.write_batch(pa.RecordBatch.from_arrays(cols, schema=schema))
            bar.update(len(i))
    return tolls


def invoke_latencies(target: str, tolls: np.ndarray, seed: int) -> tuple[list[float], list[float]]:
    """(register ms, invoke ms): QUERIES daily-expenditure queries registered over the
    hydrated stream, each invoked ROUNDS times; raises if an answer is wrong."""
    rng = np.random.default_rng(seed + 1)
    picks = rng.choice(len(tolls), QUERIES, replace=False)
    registers, invokes = [], []
    with PSoupClient(target, timeout=600) as client:
        handles = []
        for i in tqdm(picks, desc="register", unit="query"):
            vid, day = int(i) // LAST_DAY, int(i) % LAST_DAY + 1
            start = time.perf_counter()
            handles.append(client.register(DAILY_EXPENDITURE, {"v": vid, "x": 0, "d": day}))
            registers.append((time.perf_counter() - start) * 1e3)
        client.invoke(handles[0])  # the first call of a channel pays for its setup
        for _ in tqdm(range(ROUNDS), desc="invoke rounds"):
            for h, i in zip(handles, picks, strict=True):
                start = time.perf_counter()
                rows = client.invoke(h).rows
                invokes.append((time.perf_counter() - start) * 1e3)
                if rows != [(int(tolls[i]),)]:
                    raise AssertionError(f"row {i}: expected {int(tolls[i])}, got {rows}")
    return registers, invokes


def _section(quick: bool, master: str | None) -> str:
    """BENCHMARKS.md's section for a run: the full local run is ``history``; a quick run
    or another master gets its own, so runs on several masters stand side by side."""
    if not quick and master is None:
        return "history"
    where = "local" if master is None or master.startswith("local") else "cluster"
    return f"history-{'quick-' if quick else ''}{where}"


def run(
    out_dir: Path,
    quick: bool = False,
    seed: int = 7,
    master: str | None = None,
    conf: dict[str, str] | None = None,
) -> int:
    """Generate, hydrate on ``master`` (default local[*,4]) with the Spark settings
    ``conf``, measure; print the table and write BENCHMARKS.md's section for the run.

    Returns 0, or 1 when a goal (RSS < 2.5 GB, invoke mean < 5 ms) is missed.
    """
    section = _section(quick, master)
    plot_name = PLOT if section == "history" else f"{section.replace('-', '_')}_invoke_latency.png"
    n = QUICK_ROWS if quick else FULL_ROWS
    with tempfile.TemporaryDirectory(prefix="psoup-history-bench-") as tmp:
        path = Path(tmp) / "tolls.csv"
        start = time.perf_counter()
        tolls = generate(path, n, seed)
        gen_s = time.perf_counter() - start
        file_mb = path.stat().st_size / 1e6
        with ServerProcess() as srv:
            rss_idle = srv.rss_bytes()
            start = time.perf_counter()
            summary = hydrate(path, server=srv.target, master=master, conf=conf)
            wall = time.perf_counter() - start
            rss = srv.rss_bytes()
            peak = srv.peak_rss_bytes()
            registers, invokes = invoke_latencies(srv.target, tolls, seed)
            rss_after_queries = srv.rss_bytes()
    print(summary.text())
    lat = np.array(invokes)
    reg = np.array(registers)
    gb = 1 / 2**30
    rows = [
        ["rows generated (CSV)", n, f"{file_mb:,.0f} MB, written in {gen_s:.1f} s"],
        ["rows read / rejected", summary.rows_read, f"{summary.rejected:,} rejected"],
        ["rows loaded", summary.loaded, f"{summary.duplicates_merged:,} duplicates merged"],
        ["hydration, Spark job (s)", summary.seconds, _steps(summary.phases)],
        ["hydration rate (rows/s)", summary.rows_per_second, "rows read / job seconds"],
        ["hydration incl. Spark start (s)", wall, "what the command takes"],
        ["server RSS idle (GB)", rss_idle * gb, ""],
        ["server RSS after hydration (GB)", rss * gb, f"goal < {RSS_GOAL_GB} GB"],
        ["server peak RSS (GB)", peak * gb, "VmHWM: staging + commit"],
        [f"server RSS with {QUERIES} queries (GB)", rss_after_queries * gb, ""],
        ["register, after hydration (ms)", float(reg.mean()), f"mean of {QUERIES}"],
        ["invoke mean (ms)", float(lat.mean()), f"goal < {INVOKE_GOAL_MS} ms"],
        ["invoke p50 (ms)", float(np.percentile(lat, 50)), ""],
        ["invoke p99 (ms)", float(np.percentile(lat, 99)), f"{len(lat):,} invokes"],
    ]
    headers = ["measure", "value", "note"]
    where = machine.describe()
    command = "psoup bench history" + (" --quick" if quick else "")
    command += f" --master {master}" if master else ""
    command += "".join(f" --conf {k}={v}" for k, v in (conf or {}).items())
    print(f"\nmachine: {where}\n{report.table(headers, rows)}")
    report.histogram(
        out_dir / plot_name,
        f"Daily-expenditure invoke over {summary.loaded:,} rows",
        "invoke latency (ms), client to server and back",
        invokes,
    )
    md = [
        f"## History hydration (`{command}`)",
        "",
        f"Machine: {where}.",
        "",
        report.markdown_table(headers, rows),
        "",
        f"A generated one-expressway Linear Road toll history (vehicles 0..{n // LAST_DAY:,}, "
        f"days 1..{LAST_DAY}, xway 0, tolls 0..99, one row per vehicle and day) hydrated into "
        "`toll_history` of a `psoup serve` child process by `psoup.history.hydrate` on a "
        f"Spark session on `{master or 'local[*,4]'}` (this machine's 2 cores, shared with "
        "the server). Steps: validate "
        "(scan, parse and check every line), rejects (none here), load (sum duplicates: "
        "a shuffle; the executors push Arrow batches as numpy columns over gRPC), commit "
        "(the server sorts by day and swaps the stream's storage). "
        f"Then {QUERIES} daily-expenditure queries (`{DAILY_EXPENDITURE}`) for random "
        f"(vid, day) are registered, each applied to every stored row, and invoked "
        f"{ROUNDS} times each from this process over gRPC; every answer is checked.",
        "",
        f"![invoke latency]({plot_name})",
        "",
    ]
    report.write_section(out_dir / "BENCHMARKS.md", section, "\n".join(md))
    print(f"\nwrote {out_dir / 'BENCHMARKS.md'} and {plot_name}")
    ok = rss * gb < RSS_GOAL_GB and lat.mean() < INVOKE_GOAL_MS
    if not ok:
        print("a goal was missed (see the table)")
    return 0 if ok else 1


def _steps(phases: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())
