"""``psoup bench durability``: what keeping everything costs, side by side with memory.

1. Ingest through the server by sync mode: the same batches (the gRPC benchmark's
   equality workload, 1,024 standing queries) sent by a client in another process
   (psoup/bench/grpc_load.py) to a server in this process kept in memory, then with a
   data directory under ``--sync batch``, ``interval=10`` and ``off``; 10,000,000 tuples
   per run (a run of 2,000,000 lasted ~0.2 s at 8,192-row batches, too short to tell
   the modes apart), three rounds, the median reported.
2. Recovery time against the retained data: 1, 5 and 25 million tuples with 65,536
   standing equality queries, built in a durable engine and closed; then opened again
   (checkpoint loaded, queries registered, rows run through the ingest path to rebuild
   the results), and again after a crash that leaves 64 MB of log past the checkpoint.
3. A checkpoint against registered queries: an engine holding 10,000 to 300,000
   standing queries registers 1,000 more (a checkpoint interval's worth in a Linear
   Road run) and is checkpointed, linking the query pages no query joined or left;
   beside it, the same image written with nothing to link (every page, as a checkpoint
   wrote the whole catalog before pages). Three rounds, the median reported.
4. A record's commit (append, then wait until forced: ``--sync batch`` with one writer)
   in segments appended to against preallocated ones (psoup/storage/log.py), records of
   20 KB and of 75 KB (a 5,000-report Linear Road batch), 3,000 commits a run after the
   first segment, the kinds taking turns, three rounds: latency percentiles and the
   disk's writes per commit (/proc/diskstats, the spares' zeros included). ~1 minute.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import psoup
from psoup.bench import machine, report
from psoup.bench.core import Section
from psoup.bench.grpc_bench import EQ_QUERY, _load
from psoup.bench.grpc_load import EQ_DOMAIN, SCHEMA
from psoup.procinfo import disk_counts
from psoup.server import ServerConfig, start_server
from psoup.storage import checkpoint
from psoup.storage.log import SEGMENT_BYTES, Log, Sync

MODES = ("in memory", "batch", "interval=10", "off")


def ingest_by_sync(
    n_queries: int, total_rows: int, batch_rows: list[int], seed: int, runs: int = 1
) -> Section:
    """Ingest rate through a server per sync mode and batch size: the median of ``runs``
    runs, the modes taking turns within each round."""
    sec = Section(
        f"Ingest through the server by sync mode ({n_queries:,} equality queries)",
        ["batch rows", *(f"{m} t/s" for m in MODES), "batch / memory", "interval=10 / memory"],
    )
    consts = np.random.default_rng(seed).choice(EQ_DOMAIN, n_queries, replace=False).tolist()
    spreads = []
    for rows in batch_rows:
        count = max(total_rows // rows, 10)
        warm = count // 5
        got_rates: dict[str, list[float]] = {m: [] for m in MODES}
        rounds = [(r, m) for r in range(runs) for m in MODES]
        for _round, mode in tqdm(rounds, desc=f"batches of {rows:,}", leave=False):
            with tempfile.TemporaryDirectory(prefix="psoup-bench-dur-") as tmp:
                data_dir = None if mode == "in memory" else str(Path(tmp) / "d")
                sync = "batch" if mode == "in memory" else mode
                srv = start_server(ServerConfig(port=0, data_dir=data_dir, sync=sync))
                try:

                    def setup(engine=srv.engine):
                        engine.create_stream("r", SCHEMA, time="t")
                        for c in consts:
                            engine.register(EQ_QUERY, params={"c": c})

                    srv.worker.call(setup)
                    got = _load("ingest", f"127.0.0.1:{srv.port}", "--seed", str(seed),
                                "--batches", str(count), "--rows", str(rows),
                                "--warm", str(warm))  # fmt: skip
                finally:
                    srv.stop(grace=1)
            got_rates[mode].append(got["rows"] / got["seconds"])
        rates = [float(np.median(got_rates[m])) for m in MODES]
        sec.rows.append([rows, *rates, rates[1] / rates[0], rates[2] / rates[0]])
        spreads.append(
            f"batches of {rows:,}: "
            + ", ".join(f"{m} {min(v) / 1e6:.1f}-{max(v) / 1e6:.1f}M" for m, v in got_rates.items())
        )
    runs_text = (
        f"the median of {runs} runs per cell, the modes taking turns in each round (range "
        f"of the runs: {'; '.join(spreads)}); "
        if runs > 1
        else "one run per cell; "
    )
    sec.notes.append(
        f"{total_rows:,} tuples per run, the first fifth untimed; {runs_text}timed from "
        "the first acknowledgement after the warm-up to the last, so with a data directory "
        "every timed batch is acknowledged only once its log record is as durable as the "
        "mode promises (batch: fdatasync'ed, shared by the batches in flight). Client in "
        "another process, pipelining on one Ingest stream; both share the machine's 2 cores."
    )
    return sec


def _build(path: Path, tuples: int, n_queries: int, seed: int, chunk: int = 1 << 20) -> float:
    """A durable engine holding ``tuples`` rows and ``n_queries`` queries, closed with a
    checkpoint; returns the seconds it took to build."""
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    db = psoup.connect(path, sync="off")
    db.create_stream("r", SCHEMA, time="t")
    for c in rng.choice(EQ_DOMAIN, n_queries, replace=False).tolist():
        db.register(EQ_QUERY.replace("BEGIN NOW - 9999", "BEGIN 0"), params={"c": c})
    for t0 in range(0, tuples, chunk):
        n = min(chunk, tuples - t0)
        db.insert_columns("r", {"a": rng.integers(0, EQ_DOMAIN, n),
                                "t": np.arange(t0, t0 + n, dtype=np.int64)})  # fmt: skip
    db.close()
    return time.perf_counter() - start


def _reopen(path: Path) -> float:
    """Seconds to open ``path`` again (it is left as it was found)."""
    start = time.perf_counter()
    db = psoup.connect(path, sync="off")
    secs = time.perf_counter() - start
    assert db.stats()["streams"]["r"]["tuples_stored"] > 0
    db.storage.close(checkpoint=False)  # leave the directory as it was found
    db.close()
    return secs


def recovery_times(sizes: list[int], n_queries: int, seed: int, tail_rows: int) -> Section:
    """Recovery seconds against retained tuples: from the checkpoint alone, and from the
    checkpoint plus ``tail_rows`` rows of log left by a crash."""
    sec = Section(
        f"Recovery time against retained data ({n_queries:,} standing queries)",
        ["tuples", "checkpoint MB", "recover s (checkpoint)", "+ log MB",
         "recover s (checkpoint + log)", "built in s"],
    )  # fmt: skip
    for tuples in tqdm(sizes, desc="retained tuples", leave=False):
        with tempfile.TemporaryDirectory(prefix="psoup-bench-rec-") as tmp:
            path = Path(tmp) / "d"
            built = _build(path, tuples, n_queries, seed)
            ckpt_mb = sum(p.stat().st_size for p in (path / "checkpoints").rglob("*")) / 1e6
            clean = _reopen(path)
            # A crash with tail_rows of log past the checkpoint.
            db = psoup.connect(path, sync="off")
            rng = np.random.default_rng(seed + 1)
            for t0 in range(tuples, tuples + tail_rows, 65_536):
                n = min(65_536, tuples + tail_rows - t0)
                db.insert_columns("r", {"a": rng.integers(0, EQ_DOMAIN, n),
                                        "t": np.arange(t0, t0 + n, dtype=np.int64)})  # fmt: skip
            db.storage.close(checkpoint=False)
            db.close()
            log_mb = sum(p.stat().st_size for p in (path / "wal").glob("*.log")) / 1e6
            crashed = _reopen(path)
            shutil.rmtree(path, ignore_errors=True)
        sec.rows.append([tuples, ckpt_mb, clean, log_mb, crashed, built])
    sec.notes.append(
        "Equality queries r.a = c over everything retained (no max_window), a uniform in "
        "[0, 65536): each tuple matches about one query. Recovery loads the checkpoint's "
        "Arrow files, registers the queries over empty streams and runs the rows through "
        "the ingest path in chunks of a million with their tuple ids, which rebuilds the "
        "results; after a crash the log past the checkpoint is replayed as well."
    )
    return sec


def checkpoint_by_queries(sizes: list[int], new: int, rounds: int = 3) -> Section:
    """A checkpoint's query part (bytes and seconds) against registered queries: linked
    pages (what the server does) beside every page written (nothing to link)."""
    sec = Section(
        f"A checkpoint's queries against registered queries ({new:,} new since the last)",
        ["queries", "paged MB written", "paged MB linked", "paged s", "whole MB written",
         "whole s", "paged / whole s"],
    )  # fmt: skip
    for n in tqdm(sizes, desc="registered queries", leave=False):
        with tempfile.TemporaryDirectory(prefix="psoup-bench-ckq-") as tmp:
            db = psoup.connect(Path(tmp) / "d", sync="off")
            db.create_stream("r", SCHEMA, time="t")
            for c in range(n):
                db.register(EQ_QUERY, params={"c": c})
            db.storage.checkpoint()
            paged, whole = [], []
            for r in range(rounds):
                for c in range(n + r * new, n + (r + 1) * new):
                    db.register(EQ_QUERY, params={"c": c})
                db.storage.checkpoint()
                st = db.storage.last_checkpoint
                paged.append((st.parts["queries"], st.bytes_written, st.bytes_linked))
                start = time.perf_counter()
                done = checkpoint.write(Path(tmp) / f"whole{r}", 1, db.capture())
                whole.append((time.perf_counter() - start, done.bytes_written))
                shutil.rmtree(Path(tmp) / f"whole{r}")
            db.close()
        (p_s, p_w, p_l), (w_s, w_w) = _median(paged), _median(whole)
        sec.rows.append([n, p_w / 1e6, p_l / 1e6, p_s, w_w / 1e6, w_s, p_s / w_s])
    sec.notes.append(
        f"Equality queries ({EQ_QUERY!r}, one parameter each) in a durable engine with no "
        f"rows; {new:,} registered before each timed checkpoint. 'paged': the "
        "checkpoint's own query part (the pages written or linked, "
        "psoup/storage/checkpoint.py), its bytes including the small catalog and stream "
        "files; 'whole': the same engine's image written with nothing to link, whose "
        "time also counts the streams' and catalog's files (a few KB). The median of "
        f"{rounds} rounds."
    )
    return sec


SEGMENT_KINDS = ("appended", "preallocated")


def commit_latency(
    record_bytes: list[int], commits: int, rounds: int = 3, segment_bytes: int = SEGMENT_BYTES
) -> Section:
    """A record's append + wait under ``--sync batch`` (one writer: every commit its own
    ``fdatasync``) in appended and in preallocated segments of ``segment_bytes``, after
    the first (always appended), on the file system of the temporary directory: per
    record size and kind, the round with the median p50."""
    sec = Section(
        "A record's commit by segment kind (append + fdatasync, one writer)",
        ["record bytes", "segment", "p50 ms", "p90 ms", "p99 ms", "max ms", "mean ms",
         "disk writes per commit"],
    )  # fmt: skip
    for size in record_bytes:
        payload = np.random.default_rng(size).bytes(size)
        got: dict[str, list[tuple]] = {k: [] for k in SEGMENT_KINDS}
        turns = [(r, k) for r in range(rounds) for k in SEGMENT_KINDS]
        for _round, kind in tqdm(turns, desc=f"commits of {size:,} B", leave=False):
            with tempfile.TemporaryDirectory(prefix="psoup-bench-wal-") as tmp:
                log = Log(Path(tmp), 1, Sync("batch"), segment_bytes,
                          preallocate=kind == "preallocated")  # fmt: skip
                for _ in range(segment_bytes // size + 1):  # untimed: the first segment,
                    log.wait(log.append(payload))  # always appended to
                lat = np.empty(commits)
                before = disk_counts().writes
                for i in range(commits):
                    start = time.perf_counter()
                    log.wait(log.append(payload))
                    lat[i] = time.perf_counter() - start
                writes = disk_counts().writes - before
                log.close()
            p50, p90, p99 = np.percentile(lat, [50, 90, 99]) * 1e3
            got[kind].append((p50, p90, p99, lat.max() * 1e3, lat.mean() * 1e3,
                              writes / commits))  # fmt: skip
        for kind in SEGMENT_KINDS:
            sec.rows.append([size, kind, *_median(got[kind])])
    sec.notes.append(
        f"{commits:,} commits a run after the log's first segment ({segment_bytes >> 20} MB, "
        f"untimed), {rounds} rounds with the kinds taking turns, the round with the "
        "median p50 shown. 'appended': each record extends the file, so its fdatasync "
        "also commits the file's new size and blocks to the file system's journal; "
        "'preallocated' (the log's default): the log's filler thread writes and forces "
        "the next segment as zeros while one fills, and the records overwrite them. Disk "
        "writes are the whole disk's completed writes (/proc/diskstats) over the run, the "
        "spares' zeros included, 0 where it cannot be read."
    )
    return sec


def _median(runs: list[tuple]) -> tuple:
    """The run with the median first field."""
    return sorted(runs)[len(runs) // 2]


def run(out_dir: Path, quick: bool = False, seed: int = 7) -> list[Section]:
    """Run both parts; print tables; write BENCHMARKS.md's durability section and plot."""
    if quick:
        sections = [
            ingest_by_sync(256, 100_000, [8192], seed),
            recovery_times([100_000, 300_000], 1024, seed, 100_000),
            checkpoint_by_queries([10_000, 30_000], 1_000),
            commit_latency([20_000], 300, rounds=1),
        ]
    else:
        sections = [
            ingest_by_sync(1024, 10_000_000, [1024, 8192], seed, runs=3),
            recovery_times([1_000_000, 5_000_000, 25_000_000], 65_536, seed, 4_000_000),
            checkpoint_by_queries([10_000, 100_000, 300_000], 1_000),
            commit_latency([20_000, 75_000], 3_000),
        ]
    where = machine.describe()
    command = "psoup bench durability" + (" --quick" if quick else "")
    md = [f"## Durability (`{command}`)", "", f"Machine: {where}.", ""]
    print(f"machine: {where}")
    for sec in sections:
        md += sec.show()
    rec = sections[1]
    plot = "durability_recovery" + ("_quick" if quick else "") + ".png"
    report.plot(
        out_dir / plot,
        rec.title,
        "retained tuples",
        "seconds",
        {
            "from the checkpoint": ([r[0] for r in rec.rows], [r[2] for r in rec.rows]),
            "checkpoint + log after a crash": ([r[0] for r in rec.rows], [r[4] for r in rec.rows]),
        },
        logx=False,
        logy=False,
    )
    md += [f"![recovery time]({plot})", ""]
    name = "durability" + ("-quick" if quick else "")
    report.write_section(out_dir / "BENCHMARKS.md", name, "\n".join(md))
    print(f"\nwrote {out_dir / 'BENCHMARKS.md'} and {plot}")
    return sections
