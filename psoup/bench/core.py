"""``psoup bench core``: the engine core's three benchmarks, each against its baseline.

- output-sensitivity: ingest rate with 128 .. 65,536 equality queries ``r.a = c`` where
  each tuple matches about one query (the shape of Linear Road);
- paper: the PSoup paper's workload (seeds/002 section 5.2.1), shared predicate index
  versus each query tested on its own;
- invoke: PSoup-P, PSoup-C and NoMat response times at windows 2^7 .. 2^16 tuples for
  equality, 1-interval and 2-interval queries (the paper's Figure 7), results taken as columns;
- table 2: the paper's Table 2 (1, 2 and 4 conjoined interval predicates at a window
  of 2^15) per strategy, beside the paper's own figures;
- invoke at scale: one equality query's invoke among 65,536 of them over a 65,536-tuple
  window, p50 and p99 per strategy;
- registration: one text registered for many values (a Linear Road balance query per
  vehicle) through a template, by its text again, and bound in full each time.

Every variant runs in this one process, side by side, on the same generated data.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bitarray import bitarray
from tqdm import tqdm

import psoup
from psoup.bench import machine, report

BATCH = 1000
EQ_DOMAIN = 65_536
EQ_QUERY = "SELECT * FROM r WHERE r.a = :c BEGIN NOW - 9999 END NOW"
PAPER_ATTRS = ("a", "b", "c", "d")
PAPER_WINDOW = 1000
PAPER_ROUNDS = 5  # the paper workload's measured batches come in rounds of each path
PAPER_QUERY = "SELECT * FROM r WHERE r.{attr} BETWEEN :lo AND :hi BEGIN NOW - 999 END NOW"


@dataclass
class Section:
    """One benchmark's results: a table, notes, and plots."""

    title: str
    headers: list[str]
    rows: list[list[object]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)

    def show(self) -> list[str]:
        """Print the table and notes; returns them as Markdown lines for BENCHMARKS.md."""
        print(f"\n{self.title}\n{report.table(self.headers, self.rows)}")
        for note in self.notes:
            print(f"  {note}")
        return [f"### {self.title}", "", report.markdown_table(self.headers, self.rows), "",
                *self.notes, ""]  # fmt: skip


def _batches(rng: np.random.Generator, make: Callable[[int], dict], count: int, t0: int):
    """``count`` column batches of BATCH rows with consecutive timestamps from ``t0``."""
    out = []
    for k in range(count):
        cols = make(BATCH)
        cols["t"] = np.arange(t0 + k * BATCH, t0 + (k + 1) * BATCH, dtype=np.int64)
        out.append(cols)
    return out


def _ingest(db: psoup.Engine, batches: list[dict], bar: tqdm | None = None) -> float:
    """Seconds spent inserting ``batches`` into stream r."""
    start = time.perf_counter()
    for cols in batches:
        db.insert_columns("r", cols)
        if bar is not None:
            bar.update(1)
    return time.perf_counter() - start


# -- output-sensitivity ------------------------------------------------------------------


def output_sensitivity(sizes: list[int], warm: int, measured: int, seed: int) -> Section:
    """Ingest rate against the number of registered equality queries."""
    sec = Section(
        "Output-sensitivity: equality queries r.a = c, each tuple matches ~1 query",
        ["queries", "tuples/s", "us/tuple", "vs 128", "matches/tuple", "register us/query"],
    )
    rng = np.random.default_rng(seed)
    rates: dict[int, float] = {}
    for n in sizes:
        db = psoup.connect()
        db.create_stream("r", {"a": "int", "t": "int"}, time="t", max_window=10 * BATCH)
        consts = rng.choice(EQ_DOMAIN, size=n, replace=False)
        start = time.perf_counter()
        for c in tqdm(consts.tolist(), desc=f"register {n} equality queries", leave=False):
            db.register(EQ_QUERY, params={"c": c})
        reg = (time.perf_counter() - start) / n
        batches = _batches(rng, lambda m: {"a": rng.integers(0, EQ_DOMAIN, m)}, warm + measured, 0)
        with tqdm(
            total=warm + measured, desc=f"ingest, {n} queries", unit="batch", leave=False
        ) as bar:
            _ingest(db, batches[:warm], bar)
            before = db.stats()["matches_marked"]
            secs = _ingest(db, batches[warm:], bar)
            marked = db.stats()["matches_marked"] - before
        tuples = measured * BATCH
        rates[n] = tuples / secs
        sec.rows.append([n, rates[n], 1e6 * secs / tuples, 0.0, marked / tuples, reg * 1e6])
        db.close()
    base = rates[sizes[0]]
    for row in sec.rows:
        row[3] = row[1] / base
    sec.notes.append(
        f"{measured} batches of {BATCH} tuples after {warm} warm-up batches; a uniform in "
        f"[0, {EQ_DOMAIN}); window and max_window 10,000 tuples, so blocks expire in steady "
        "state, and the warm-up is long enough for expired storage chunks to be reused."
    )
    sec.plots.append("core_output_sensitivity.png")
    sec.series = {"PSoup-P ingest": (sizes, [rates[n] for n in sizes])}  # type: ignore[attr-defined]
    return sec


# -- the paper's workload ------------------------------------------------------------------


def _paper_constant(rng: np.random.Generator) -> int:
    if rng.random() < 0.2:
        return int(rng.integers(0, 8)) * 32
    return int(rng.integers(0, 256))


def paper_queries(rng: np.random.Generator, n: int) -> list[tuple[str, int, int]]:
    """``n`` interval queries (attribute, lo, hi) as in seeds/002 section 5.2.1."""
    out = []
    for _ in range(n):
        x, y = _paper_constant(rng), _paper_constant(rng)
        out.append((PAPER_ATTRS[int(rng.integers(0, 4))], min(x, y), max(x, y)))
    return out


class Unshared:
    """The baseline: each query tested on its own against every batch.

    Per query and batch, one vectorised numpy test and one bitmap append, with the
    window's old bits dropped: no sharing between queries, but no Python loop per tuple.
    """

    def __init__(self, queries: list[tuple[str, int, int]], window: int):
        self.queries = queries
        self.window = window
        self.bits = [bitarray() for _ in queries]

    def insert(self, cols: dict) -> None:
        for (attr, lo, hi), bits in zip(self.queries, self.bits, strict=True):
            v = cols[attr]
            bits.frombytes(np.packbits((v >= lo) & (v <= hi)).tobytes())
            if len(bits) > 2 * self.window:
                del bits[: len(bits) - self.window]


def _per_tuple_rate(queries: list[tuple[str, int, int]], cols: dict, rows: int) -> float:
    """Tuples/s of the naive loop: every tuple against every query, in Python."""
    names = PAPER_ATTRS
    data = [
        dict(zip(names, vals, strict=True))
        for vals in zip(*(cols[a][:rows].tolist() for a in names), strict=True)
    ]
    hits = [[] for _ in queries]
    start = time.perf_counter()
    for i, row in enumerate(data):
        for q, (attr, lo, hi) in enumerate(queries):
            if lo <= row[attr] <= hi:
                hits[q].append(i)
    return rows / (time.perf_counter() - start)


def paper_workload(sizes: list[int], warm: int, measured: int, seed: int) -> Section:
    """Shared predicate index versus unshared evaluation, 128 .. 4096 queries."""
    sec = Section(
        "The paper's workload: 4 int attributes in [0,255], interval queries, window 1000 tuples",
        [
            "queries",
            "shared t/s",
            "row API t/s",
            "unshared t/s",
            "shared/unshared",
            "per-tuple loop t/s",
            "shared/per-tuple",
            "matches/tuple",
        ],
    )
    rng = np.random.default_rng(seed)
    per = max(1, measured // PAPER_ROUNDS)  # batches per path and round
    shared, by_rows, unshared, naive = [], [], [], []
    for n in sizes:
        queries = paper_queries(rng, n)
        db = psoup.connect()
        schema = {a: "int" for a in PAPER_ATTRS} | {"t": "int"}
        db.create_stream("r", schema, time="t", max_window=PAPER_WINDOW - 1)
        for attr, lo, hi in tqdm(queries, desc=f"register {n} interval queries", leave=False):
            db.register(PAPER_QUERY.format(attr=attr), params={"lo": lo, "hi": hi})

        def make(m: int) -> dict:
            return {a: rng.integers(0, 256, m) for a in PAPER_ATTRS}

        batches = _batches(rng, make, warm + 2 * measured, 0)
        # Measured in rounds, each of `per` batches through each path in turn, so that a
        # slow spell of the machine falls on all three; a path's rate is its median
        # round's. The row API (Python tuples, as a client without numpy sends them) takes
        # the next `per` batches of the stream after the shared path's, as rows made
        # before the clock starts; the unshared baseline takes the shared path's.
        spans = [(warm + 2 * r * per, warm + (2 * r + 1) * per) for r in range(PAPER_ROUNDS)]
        rows = {
            a: [
                list(zip(*(b[c].tolist() for c in (*PAPER_ATTRS, "t")), strict=True))
                for b in batches[z : z + per]
            ]
            for a, z in spans
        }
        base = Unshared(queries, PAPER_WINDOW)
        for cols in batches[:warm]:
            base.insert(cols)
        secs, row_secs, base_secs, marked = [], [], [], 0
        with tqdm(
            total=warm + 2 * PAPER_ROUNDS * per,
            desc=f"{n} queries: shared, row API, unshared",
            unit="batch",
            leave=False,
        ) as bar:
            _ingest(db, batches[:warm], bar)
            for a, z in spans:
                before = db.stats()["matches_marked"]
                secs.append(_ingest(db, batches[a:z], bar))
                marked += db.stats()["matches_marked"] - before
                start = time.perf_counter()
                for r in rows[a]:
                    db.insert("r", r)
                    bar.update(1)
                row_secs.append(time.perf_counter() - start)
                start = time.perf_counter()
                for cols in batches[a:z]:
                    base.insert(cols)
                base_secs.append(time.perf_counter() - start)
        db.close()
        tuples = per * BATCH
        loop_rate = _per_tuple_rate(queries, batches[-1], max(50, min(BATCH, 200_000 // n)))
        shared.append(tuples / float(np.median(secs)))
        by_rows.append(tuples / float(np.median(row_secs)))
        unshared.append(tuples / float(np.median(base_secs)))
        naive.append(loop_rate)
        sec.rows.append(
            [
                n,
                shared[-1],
                by_rows[-1],
                unshared[-1],
                shared[-1] / unshared[-1],
                loop_rate,
                shared[-1] / loop_rate,
                marked / (tuples * PAPER_ROUNDS),
            ]
        )
    sec.notes.append(
        f"{PAPER_ROUNDS} rounds of {per} batches of {BATCH} "
        f"tuples through each path in turn, after {warm} warm-up batches; a path's rate is "
        "its median round's. Constants are "
        "multiples of 32 with probability 0.2, else uniform in [0,255]; each query is an "
        "interval on one of the 4 attributes, chosen uniformly. 'unshared' tests each query "
        "on its own with one vectorised numpy comparison per query and batch and appends to "
        "the query's own bitmap; 'per-tuple loop' is the naive evaluation of every query "
        "against every tuple in Python (measured on a sample of one batch). 'row API' is "
        "shared again, over the next batches of the stream given as Python tuples "
        "(`insert`), not as columns."
    )
    sec.plots.append("core_paper_workload.png")
    sec.series = {  # type: ignore[attr-defined]
        "shared (PSoup-P)": (sizes, shared),
        "shared, row API": (sizes, by_rows),
        "unshared, per query vectorised": (sizes, unshared),
        "unshared, per tuple loop": (sizes, naive),
    }
    return sec


# -- invoke --------------------------------------------------------------------------------

INVOKE_KINDS = {
    "equality": ("SELECT * FROM r WHERE r.a = :x BEGIN NOW - :w END NOW", 1),
    "1-interval": ("SELECT * FROM r WHERE r.a BETWEEN :x AND :y BEGIN NOW - :w END NOW", 1),
    "2-interval": (
        "SELECT * FROM r WHERE r.a BETWEEN :x AND :y AND r.b BETWEEN :u AND :v "
        "BEGIN NOW - :w END NOW",
        2,
    ),
}
STRATEGY_NAMES = ("psoup-p", "psoup-c", "nomat")


def _invoke_params(kind: str, rng: np.random.Generator, w: int) -> dict:
    """Equality and 2-interval select 1/256 of the window, 1-interval 1/16."""
    if kind == "equality":
        return {"x": int(rng.integers(0, 256)), "w": w - 1}
    if kind == "1-interval":
        x = int(rng.integers(0, 241))
        return {"x": x, "y": x + 15, "w": w - 1}
    x, u = int(rng.integers(0, 241)), int(rng.integers(0, 241))
    return {"x": x, "y": x + 15, "u": u, "v": u + 15, "w": w - 1}


def invoke_latency(windows: list[int], per_point: int, seed: int) -> Section:
    """Mean invoke time per strategy, query kind and window size."""
    sec = Section(
        "Invoke: response time by window size (tuples)",
        ["kind", "window", "psoup-p ms", "psoup-c ms", "nomat ms", "nomat/psoup-p", "rows"],
    )
    rng = np.random.default_rng(seed)
    total = max(windows) + 4 * BATCH
    schema = {a: "int" for a in PAPER_ATTRS} | {"t": "int"}
    batches = _batches(
        rng, lambda m: {a: rng.integers(0, 256, m) for a in PAPER_ATTRS}, total // BATCH, 0
    )
    plan = [
        (k, w, _invoke_params(k, rng, w))
        for k in INVOKE_KINDS
        for w in windows
        for _ in range(per_point)
    ]
    times: dict[tuple[str, str, int], list[float]] = {}
    sizes: dict[tuple[str, int], list[int]] = {}
    for strategy in STRATEGY_NAMES:
        db = psoup.connect(strategy=strategy)
        db.create_stream("r", schema, time="t", max_window=max(windows))
        handles = [db.register(INVOKE_KINDS[k][0], params=p) for k, _, p in plan]
        with tqdm(total=len(batches), desc=f"{strategy}: ingest", unit="batch", leave=False) as bar:
            _ingest(db, batches, bar)
        for (k, w, _), h in tqdm(
            list(zip(plan, handles, strict=True)), desc=f"{strategy}: invoke", leave=False
        ):
            db.invoke(h)  # warm the data SteM's per-block indexes for NoMat, and caches
            start = time.perf_counter()
            res = db.invoke(h)
            times.setdefault((strategy, k, w), []).append(time.perf_counter() - start)
            if strategy == "psoup-p":
                sizes.setdefault((k, w), []).append(len(res))
        db.close()
    series = {}
    for k in INVOKE_KINDS:
        for w in windows:
            ms = [1e3 * float(np.mean(times[(s, k, w)])) for s in STRATEGY_NAMES]
            sec.rows.append([k, w, *ms, ms[2] / ms[0], float(np.mean(sizes[(k, w)]))])
        for s in STRATEGY_NAMES:
            series[f"{s} {k}"] = (
                windows,
                [1e3 * float(np.mean(times[(s, k, w)])) for w in windows],
            )
    sec.notes.append(
        f"{per_point} queries per kind and window, each invoked once to warm up and once "
        f"timed; {total:,} tuples of 4 int attributes uniform in [0,255]; max_window "
        f"{max(windows):,}. Equality is r.a = x (selects 1/256 of the window); 1-interval "
        "r.a BETWEEN x AND x+15 (1/16); 2-interval ranges of 16 values on both a and b "
        "(1/256). 'rows' is the mean result size. NoMat "
        "evaluates at invoke with the data SteM's sorted index runs (not a plain scan)."
    )
    sec.plots.append("core_invoke.png")
    sec.series = series  # type: ignore[attr-defined]
    return sec


# -- invoke among many standing queries ---------------------------------------------------


def invoke_at_scale(queries: int, window: int, invokes: int, seed: int) -> Section:
    """In-process invoke latency of one equality query among ``queries`` of them over a
    ``window``-tuple window (about one match each), per strategy: p50, p99."""
    sec = Section(
        f"Invoke among {queries:,} equality queries, window {window:,} tuples (in process)",
        ["strategy", "p50 us", "p99 us", "mean rows"],
    )
    rng = np.random.default_rng(seed)
    batches = _batches(rng, lambda m: {"a": rng.integers(0, queries, m)}, window // BATCH + 16, 0)
    picks = rng.integers(0, queries, invokes).tolist()  # the same queries for every strategy
    for strategy in STRATEGY_NAMES:
        db = psoup.connect(strategy=strategy)
        db.create_stream("r", {"a": "int", "t": "int"}, time="t", max_window=window)
        text = f"SELECT * FROM r WHERE r.a = :c BEGIN NOW - {window - 1} END NOW"
        handles = [
            db.register(text, params={"c": c})
            for c in tqdm(range(queries), desc=f"{strategy}: register", leave=False)
        ]
        _ingest(db, batches)
        sample = [handles[i] for i in picks]
        for h in sample:
            db.invoke(h)  # warm
        # As the server does every second (psoup/heap.py): the collector then does not
        # walk the 65,536 queries' objects in the middle of the timed invokes.
        gc.collect()
        gc.freeze()
        times, rows = [], []
        for h in sample:
            start = time.perf_counter()
            res = db.invoke(h)
            times.append(time.perf_counter() - start)
            rows.append(len(res))
        db.close()
        gc.unfreeze()
        us = 1e6 * np.array(times)
        sec.rows.append([strategy, float(np.median(us)), float(np.percentile(us, 99)),
                         float(np.mean(rows))])  # fmt: skip
    sec.notes.append(
        f"{invokes:,} invokes of queries drawn at random, each invoked once before to warm "
        f"up; r.a uniform in [0, {queries:,}), {len(batches) * BATCH:,} tuples in "
        f"{BATCH}-row batches, max_window {window:,}. The result is taken as columns. The "
        "heap is frozen before the timed invokes, as the server freezes it every second."
    )
    return sec


# -- the paper's Table 2 -----------------------------------------------------------------

#: seeds/002 Table 2: ms per invoke at a window of 2^15, by conjoined interval predicates.
PAPER_TABLE2 = {
    1: {"nomat": 0.3940, "psoup-p": 0.0465, "psoup-c": 0.0565},
    2: {"nomat": 0.4905, "psoup-p": 0.0240, "psoup-c": 0.0210},
    4: {"nomat": 0.8255, "psoup-p": 0.0130, "psoup-c": 0.0035},
}
TABLE2_WINDOW = 2**15


def table2_query(k: int) -> str:
    """A selection with one interval predicate on each of the first ``k`` attributes."""
    preds = " AND ".join(f"r.{a} BETWEEN :lo{i} AND :hi{i}" for i, a in enumerate(PAPER_ATTRS[:k]))
    return f"SELECT * FROM r WHERE {preds} BEGIN NOW - {TABLE2_WINDOW - 1} END NOW"


def table2_params(rng: np.random.Generator, k: int) -> dict[str, int]:
    """Each interval from two of the paper's constants (seeds/002 section 5.2.1)."""
    out = {}
    for i in range(k):
        x, y = _paper_constant(rng), _paper_constant(rng)
        out[f"lo{i}"], out[f"hi{i}"] = min(x, y), max(x, y)
    return out


def paper_table2(queries: int, seed: int, rounds: int = 21) -> Section:
    """Invoke time with 1, 2 and 4 conjoined interval predicates at a window of 2^15
    tuples, per strategy, the result taken as columns, beside the paper's Table 2. Each
    query's time is its best of ``rounds`` rounds, and each round times every strategy
    (in turn, the order rotating), so that a slow spell of the machine falls on all of
    them rather than on the one measured during it; the median of its rounds is shown
    too."""
    sec = Section(
        "The paper's Table 2: invoke time by interval predicates (window 2^15)",
        ["predicates", "strategy", "ms p50", "ms mean", "first ms p50", "paper ms",
         "vs paper", "nomat/this", "rows", "rounds' median ms p50", "nomat/this by it"],
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    total = TABLE2_WINDOW + 4 * BATCH
    schema = {a: "int" for a in PAPER_ATTRS} | {"t": "int"}
    batches = _batches(
        rng, lambda m: {a: rng.integers(0, 256, m) for a in PAPER_ATTRS}, total // BATCH, 0
    )
    plan = [(k, table2_params(rng, k)) for k in PAPER_TABLE2 for _ in range(queries)]
    firsts: dict[tuple[str, int], list[float]] = {}
    sizes: dict[int, list[int]] = {}
    rates: dict[str, float] = {}
    dbs: dict[str, tuple[psoup.Engine, list[str]]] = {}
    for strategy in STRATEGY_NAMES:
        db = psoup.connect(strategy=strategy)
        db.create_stream("r", schema, time="t", max_window=TABLE2_WINDOW)
        handles = [db.register(table2_query(k), params=p) for k, p in plan]
        with tqdm(total=len(batches), desc=f"{strategy}: ingest", unit="batch", leave=False) as bar:
            rates[strategy] = total / _ingest(db, batches, bar)
        dbs[strategy] = db, handles
    # taken[strategy][i]: query i's timed invoke in each round
    taken = {strategy: [[] for _ in plan] for strategy in STRATEGY_NAMES}
    order = list(STRATEGY_NAMES)
    with tqdm(total=rounds * len(order) * len(plan), desc="invoke", leave=False) as bar:
        for r in range(rounds):
            for strategy in order[r % len(order) :] + order[: r % len(order)]:
                db, handles = dbs[strategy]
                mine = taken[strategy]
                for i, ((k, _), h) in enumerate(zip(plan, handles, strict=True)):
                    start = time.perf_counter()
                    _ = db.invoke(h).arrays  # warms caches and NoMat's per-block indexes
                    took = time.perf_counter() - start
                    if r == 0:
                        firsts.setdefault((strategy, k), []).append(took)
                    start = time.perf_counter()
                    arrays = db.invoke(h).arrays
                    mine[i].append(time.perf_counter() - start)
                    if r == 0 and strategy == "psoup-p":
                        sizes.setdefault(k, []).append(len(arrays[0]))
                bar.update(len(plan))
    for db, _ in dbs.values():
        db.close()
    times: dict[tuple[str, int], list[float]] = {}  # per query its best round
    medians: dict[tuple[str, int], list[float]] = {}  # and the median of its rounds
    for strategy, mine in taken.items():
        for (k, _), t in zip(plan, mine, strict=True):
            times.setdefault((strategy, k), []).append(min(t))
            medians.setdefault((strategy, k), []).append(float(np.median(t)))
    for k, paper in PAPER_TABLE2.items():
        nomat = 1e3 * float(np.median(times[("nomat", k)]))
        nomat_med = 1e3 * float(np.median(medians[("nomat", k)]))
        for strategy in STRATEGY_NAMES:
            ms = [1e3 * t for t in times[(strategy, k)]]
            p50 = float(np.median(ms))
            med = 1e3 * float(np.median(medians[(strategy, k)]))
            first = 1e3 * float(np.median(firsts[(strategy, k)]))
            sec.rows.append([k, strategy, p50, float(np.mean(ms)), first, paper[strategy],
                             p50 / paper[strategy], nomat / p50,
                             float(np.mean(sizes[k])), med, nomat_med / med])  # fmt: skip
    sec.notes.append(
        f"{queries} queries per predicate count, each invoked once to warm up and once timed "
        f"right after, in each of {rounds} rounds (its time the best of them; each round "
        "times all three strategies, in an order that rotates; 'rounds' median' takes each "
        "query's median round instead), with no tuple between (so PSoup-P's read is its "
        "column's kept copy of what the first read found; 'first ms p50' is the first "
        "invoke, "
        "which reads the window's bitmaps and log blocks, and under NoMat may build an index "
        "run); "
        f"{total:,} tuples of 4 int attributes uniform in [0,255], window and max_window "
        f"{TABLE2_WINDOW:,}; each interval's ends are two constants drawn as in seeds/002 "
        "section 5.2.1 (a multiple of 32 with probability 0.2, else uniform). The result is "
        "taken as columns (`Result.arrays`), as the paper's copied tuples (under PSoup-C "
        "read-only views of the columns it keeps, which no later batch changes). 'vs paper' is our "
        "p50 over the paper's time (Java, 2 x Pentium III 666 MHz); 'nomat/this' our NoMat's "
        "p50 over this strategy's; 'rows' the mean result size. What materialising costs "
        f"at ingest, with the {len(plan)} queries registered: "
        + ", ".join(f"{name} {rate:,.0f} tuples/s" for name, rate in rates.items())
        + "."
    )
    ks = list(PAPER_TABLE2)
    series = {}
    for strategy in STRATEGY_NAMES:
        series[f"{strategy} (ours)"] = (
            ks,
            [1e3 * float(np.median(times[(strategy, k)])) for k in ks],
        )
        series[f"{strategy} (paper)"] = (ks, [PAPER_TABLE2[k][strategy] for k in ks])
    sec.plots.append("core_table2.png")
    sec.series = series  # type: ignore[attr-defined]
    return sec


# -- registration ---------------------------------------------------------------------------

REG_QUERY = "SELECT time, bal FROM balances WHERE vid = :v BEGIN 0 END NOW"


def registration(queries: int, stored: int, seed: int) -> Section:
    """Registering one text for ``queries`` values over ``stored`` rows: whole
    registrations through a template, by the text (the engine's kept ``Prepared``) and
    with the binder run in full each time (the path before templates), and the parts."""
    from psoup.plan import Plan
    from psoup.query import compile_query, prepare

    sec = Section(
        "Registration: one text for many values (a Linear Road balance query per vehicle)",
        ["path", "us per query", "full bind / this"],
    )
    rng = np.random.default_rng(seed)
    vids = rng.permutation(queries).tolist()
    times: dict[str, float] = {}

    rows = np.arange(stored)
    data = {"time": rows // 64, "vid": rng.integers(0, queries, stored), "bal": rows % 97}

    def engine() -> psoup.Engine:
        db = psoup.connect()
        db.create_stream("balances", {"time": "int", "vid": "int", "bal": "int"}, time="time")
        db.insert_columns("balances", data)
        return db

    def timed(name: str, fn: Callable[[int], object]) -> None:
        gc.collect()
        start = time.perf_counter()
        for v in tqdm(vids, desc=name, leave=False):
            fn(v)
        times[name] = (time.perf_counter() - start) / queries

    db = engine()
    schemas = db.schemas()
    spec = compile_query(REG_QUERY, {"v": 0}, schemas)
    timed("binder in full (compile_query)", lambda v: compile_query(REG_QUERY, {"v": v}, schemas))
    prep = prepare(REG_QUERY, schemas)
    timed("template's kept spec (Prepared.bind)", lambda v: prep.bind({"v": v}, schemas))
    timed("plan (Plan)", lambda v: Plan(spec, schemas))
    db.close()
    # whole registrations, each path on an engine of its own over the same rows
    db = engine()

    def in_full(v: int) -> None:
        params = {"v": v}
        spec = compile_query(REG_QUERY, params, db.schemas())
        db._restore_planned(f"h{v}", REG_QUERY, params, None, 0.0, spec, Plan(spec, db.schemas()))

    timed("whole: bound in full, then planned and indexed", in_full)
    db.close()
    db = engine()
    timed("whole: db.register(text, params)", lambda v: db.register(REG_QUERY, {"v": v}))
    db.close()
    db = engine()
    tpl = db.prepare(REG_QUERY)
    timed("whole: template.register(params)", lambda v: tpl.register({"v": v}))
    db.close()
    bind = times["binder in full (compile_query)"]
    for name in ("binder in full (compile_query)", "template's kept spec (Prepared.bind)"):
        sec.rows.append([name, 1e6 * times[name], bind / times[name]])
    sec.rows.append(["plan (Plan)", 1e6 * times["plan (Plan)"], ""])
    wholes = [name for name in times if name.startswith("whole: ")]
    for name in wholes:
        sec.rows.append([name, 1e6 * times[name], times[wholes[0]] / times[name]])
    sec.notes.append(
        f"{queries:,} registrations of `{REG_QUERY}` (one vid each) per path, in one "
        f"process, over {stored:,} stored balance rows (each new query probes them). 'bound "
        "in full' is what every registration cost before templates (the parse was cached "
        "per text then too); 'db.register' binds through the text's kept `Prepared` "
        "(psoup/query/prepared.py), 'template.register' through the template's. 'full bind "
        "/ this': how many times faster than the full bind."
    )
    return sec


# -- driver ---------------------------------------------------------------------------------


def run(out_dir: Path, quick: bool = False, seed: int = 7) -> list[Section]:
    """Run the three benchmarks; print tables; write BENCHMARKS.md's core section and PNGs."""
    if quick:
        sections = [
            output_sensitivity([128, 1024], warm=5, measured=10, seed=seed),
            paper_workload([128, 256], warm=5, measured=10, seed=seed),
            invoke_latency([2**7, 2**10], per_point=2, seed=seed),
            paper_table2(queries=4, seed=seed, rounds=2),
            invoke_at_scale(1024, 4096, 200, seed),
            registration(2000, 10_000, seed),
        ]
    else:
        sections = [
            # 150 warm-up batches: the stream's storage reaches its steady state (two
            # chunks of 65,536 rows allocated, then expired ones reused), so the rate
            # measured is a probe's, not a young stream's first touch of its memory.
            output_sensitivity([128, 1024, 8192, 65_536], warm=150, measured=100, seed=seed),
            paper_workload([128, 256, 512, 1024, 2048, 4096], warm=10, measured=40, seed=seed),
            invoke_latency([2**k for k in range(7, 17)], per_point=8, seed=seed),
            paper_table2(queries=128, seed=seed),
            invoke_at_scale(65_536, 65_536, 5000, seed),
            registration(50_000, 1_000_000, seed),
        ]
    where = machine.describe()
    command = "psoup bench core" + (" --quick" if quick else "")
    md = [f"## Engine core (`{command}`)", "", f"Machine: {where}.", ""]
    print(f"machine: {where}")
    for sec in sections:
        md += sec.show()
        for name in sec.plots:
            invoke = "invoke" in name or "table2" in name
            ylabel = "ms per invoke" if invoke else "tuples/s"
            xlabel = {"core_invoke.png": "window (tuples)",
                      "core_table2.png": "conjoined interval predicates"}.get(
                name, "registered queries")  # fmt: skip
            report.plot(out_dir / name, sec.title, xlabel, ylabel, sec.series)  # type: ignore[attr-defined]
            md += [f"![{sec.title}]({name})", ""]
    report.write_section(out_dir / "BENCHMARKS.md", "core", "\n".join(md))
    print(f"\nwrote {out_dir / 'BENCHMARKS.md'} and {len(sections)} plots")
    return sections
