"""The Linear Road data driver: replays an input file against a psoup server in simulated
real time and writes the answers in the original validator's formats.

One Ingest stream carries each simulated second's position reports as one columnar
batch (no per-tuple calls). The server's toll network derives toll notifications and
accident alerts; the driver's alert service receives them through two subscriptions. Each
type-2 / type-3 request is answered by that vehicle's client (clients/vehicle.py)
invoking its standing query, after the second's reports are acknowledged, so a balance
is exact as of the request's own time. ``emit`` is the simulated second at which an answer
was produced: wall time since the replay started x the speed-up.
"""

from __future__ import annotations

import csv
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from clients.errors import PSoupRpcError
from clients.psoup_client import PSoupClient
from clients.vehicle import Vehicle
from psoup.linear_road.check import DEADLINES, FILES
from psoup.linear_road.network import REPORT_FIELDS
from psoup.linear_road.streams import ALL_ALERTS, ALL_TOLLS

# How the driver (and the benchmarks) start their server. Without authentication every
# vehicle is the same client to the server, and a 3-hour expressway has ~370,000
# vehicles with 3 standing queries each for those that ask: the default limit of 100,000
# queries per client stopped the first full-duration run.
SERVER_ARGS = ("--linear-road", "--max-queries-per-client", "10000000")


@dataclass
class Summary:
    """Per answer type: count, max and p99 response (simulated s), answers over deadline."""

    rows: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0
    speedup: float = 1.0
    failed: list[str] = field(default_factory=list)  # requests the server refused

    @property
    def missed(self) -> int:
        """Answers late or never given (a refused request)."""
        return int(sum(r["late"] for r in self.rows.values())) + len(self.failed)

    def table(self) -> str:
        lines = [f"{'answer':<10} {'count':>8} {'max s':>7} {'p99 s':>7} {'late':>6}"]
        for kind, r in self.rows.items():
            count, late = int(r["count"]), int(r["late"])
            lines.append(f"{kind:<10} {count:>8} {r['max']:>7.1f} {r['p99']:>7.1f} {late:>6}")
        if self.failed:
            lines.append(f"{len(self.failed)} requests failed, first: {self.failed[0]}")
        return "\n".join(lines)


def load_input(path: Path) -> np.ndarray:
    """The input file as an int64 array of the spec's 15 fields per row."""
    return np.loadtxt(path, delimiter=",", dtype=np.int64, ndmin=2)


class _Answers:
    """Collected answers with their emit times; thread-safe."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple]] = {k: [] for k in FILES}
        self.lock = threading.Condition()
        self.derived = {"toll": 0, "accident": 0}
        self.failed: list[str] = []

    def add(self, kind: str, rows: list[tuple]) -> None:
        with self.lock:
            self.rows[kind].extend(rows)
            if kind in self.derived:
                self.derived[kind] += len(rows)
                self.lock.notify_all()


def replay(
    client: PSoupClient,
    data: np.ndarray,
    speedup: float,
    progress: bool = True,
) -> tuple[dict[str, list[tuple]], float, list[str]]:
    """Replay ``data`` against the server behind ``client``; returns the answers by kind,
    the replay's wall seconds and the requests the server refused (each a message)."""
    answers = _Answers()
    clock: dict[str, float] = {}

    def emit() -> int:
        return int((time.monotonic() - clock["start"]) * speedup)

    # The alert service: every toll notification and accident alert, as it is made. The
    # current result comes first: once it is here the subscription is in place.
    subs = []
    for text in (ALL_TOLLS, ALL_ALERTS):
        sub = client.subscribe(client.register(text), include_current=True)
        next(sub)
        subs.append(sub)

    def listen(sub, kind: str, shape: Callable[[tuple, int], tuple]) -> None:
        for _kind, result, _tid in sub:
            e = emit()
            answers.add(kind, [shape(r, e) for r in result.rows])

    listeners = [
        threading.Thread(
            target=listen, args=(subs[0], "toll", lambda r, e: (0, r[0], r[1], e, r[2], r[3]))
        ),
        threading.Thread(
            target=listen, args=(subs[1], "accident", lambda r, e: (1, r[0], e, r[1], r[2]))
        ),
    ]
    for t in listeners:
        t.daemon = True
        t.start()

    reports = data[data[:, 0] == 0]
    requests = data[(data[:, 0] == 2) | (data[:, 0] == 3)]
    last = int(data[:, 1].max()) if len(data) else 0
    r_times = reports[:, 1]
    r_starts = np.searchsorted(r_times, np.arange(last + 2))
    q_times = requests[:, 1]
    q_starts = np.searchsorted(q_times, np.arange(last + 2))

    sent = queue.Queue()  # per-second batches for the ingest stream; None ends it
    acked = {"n": 0}
    ack_cond = threading.Condition()
    vehicles: dict[int, Vehicle] = {}
    vlock = threading.Lock()

    def batches():
        while (item := sent.get()) is not None:
            yield item

    def consume_acks() -> None:
        for _ack in client.ingest("positions", batches()):
            with ack_cond:
                acked["n"] += 1
                ack_cond.notify_all()

    def vehicle(vid: int) -> Vehicle:
        with vlock:
            v = vehicles.get(vid)
            if v is None:
                v = vehicles[vid] = Vehicle(client, vid)
            return v

    def answer(row: np.ndarray, needed: int) -> None:
        with ack_cond:  # the request's second is fully ingested first
            ack_cond.wait_for(lambda: acked["n"] >= needed, timeout=600)
        kind, t, vid = int(row[0]), int(row[1]), int(row[2])
        v = vehicle(vid)
        try:
            if kind == 2:
                bal, _ = v.balance()
                answers.add("balance", [(2, t, emit(), int(row[9]), t, bal)])
            else:
                total = v.daily_expenditure(int(row[4]), int(row[14]))
                answers.add("daily", [(3, t, emit(), int(row[9]), total)])
        except PSoupRpcError as err:  # one refused request must not lose the whole run
            with answers.lock:
                answers.failed.append(f"type {kind} at {t} for vehicle {vid}: {err}")

    acker = threading.Thread(target=consume_acks, daemon=True)
    acker.start()
    pool = ThreadPoolExecutor(max_workers=8)
    futures = []
    n_sent = 0
    clock["start"] = time.monotonic()
    for s in tqdm(range(last + 1), desc="simulated seconds", unit="s", disable=not progress):
        due = clock["start"] + s / speedup
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing the replay to simulated real time
        a, z = r_starts[s], r_starts[s + 1]
        if z > a:
            sent.put({f: reports[a:z, i + 1] for i, f in enumerate(REPORT_FIELDS)})
            n_sent += 1
        for row in requests[q_starts[s] : q_starts[s + 1]]:
            futures.append(pool.submit(answer, row, n_sent))
    sent.put(None)
    for f in futures:
        f.result()
    pool.shutdown()
    acker.join(timeout=600)
    # Every derived row reaches the alert service: wait until as many arrived as the server
    # made (its streams count them).
    made = {
        "toll": client.describe_stream("toll_notifications").tuples_ingested,
        "accident": client.describe_stream("accident_alerts").tuples_ingested,
    }
    with answers.lock:
        answers.lock.wait_for(lambda: all(answers.derived[k] >= made[k] for k in made), timeout=600)
    for s in subs:
        s.cancel()
    return answers.rows, time.monotonic() - clock["start"], answers.failed


def summarize(rows: dict[str, list[tuple]], speedup: float, seconds: float) -> Summary:
    """Response-time statistics per answer type."""
    out = Summary(seconds=seconds, speedup=speedup)
    for kind, rs in rows.items():
        t_col, e_col = (2, 3) if kind == "toll" else (1, 2)
        resp = np.array([r[e_col] - r[t_col] for r in rs], dtype=float)
        out.rows[kind] = {
            "count": len(rs),
            "max": float(resp.max()) if len(resp) else 0.0,
            "p99": float(np.percentile(resp, 99)) if len(resp) else 0.0,
            "late": int((resp > DEADLINES[kind]).sum()),
        }
    return out


def write_answers(rows: dict[str, list[tuple]], out_dir: Path) -> None:
    """One CSV per answer type, in the validator's formats, in emit order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for kind, name in FILES.items():
        with open(out_dir / name, "w", newline="") as f:
            csv.writer(f).writerows(rows[kind])


def plot(rows: dict[str, list[tuple]], path: Path) -> None:
    """Response time (simulated s) over simulated time, per answer type, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for kind, rs in rows.items():
        if not rs:
            continue
        t_col, e_col = (2, 3) if kind == "toll" else (1, 2)
        ts = np.array([r[t_col] for r in rs])
        resp = np.array([r[e_col] - r[t_col] for r in rs])
        ax.scatter(ts, resp, s=2, label=f"{kind} (deadline {DEADLINES[kind]} s)")
    ax.axhline(5, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("response time (simulated s)")
    ax.set_title("Linear Road answers")
    ax.legend(markerscale=4, loc="upper left")  # "best" scans millions of points
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run(
    input_path: Path,
    history_path: Path | None,
    out_dir: Path,
    speedup: float = 1.0,
    server: str | None = None,
    progress: bool = True,
    hydrate: Callable[[Path, str, Path], object] | None = None,
) -> Summary:
    """Hydrate the history, replay the input, write the answers, a summary and a PNG.

    Without ``server`` a ``psoup serve --linear-road`` child process on a free loopback
    port is started (its own CPU and GIL); a given server must run with ``--linear-road``.
    ``hydrate(history_path, target, out_dir)`` loads the toll history; it defaults to the
    PySpark pipeline (``psoup history hydrate``), its rejected rows written to out_dir.
    """
    child = None
    if server is None:
        from psoup.server.process import ServerProcess

        child = ServerProcess(*SERVER_ARGS)
        server = child.target
    try:
        with PSoupClient(server, timeout=120) as client:
            names = {s.name for s in client.list_streams()}
            if "positions" not in names:
                raise RuntimeError(
                    f"the server at {server} has no Linear Road streams: "
                    "start it with psoup serve --linear-road"
                )
            if history_path is not None:
                out_dir.mkdir(parents=True, exist_ok=True)
                (hydrate or hydrate_history)(history_path, server, out_dir)
            data = load_input(input_path)
            rows, seconds, failed = replay(client, data, speedup, progress)
    finally:
        if child is not None:
            child.stop()
    write_answers(rows, out_dir)
    plot(rows, out_dir / "response_times.png")
    summary = summarize(rows, speedup, seconds)
    summary.failed = failed
    return summary


def hydrate_history(history_path: Path, server: str, out_dir: Path) -> object:
    """Load the toll history into ``toll_history`` with the PySpark pipeline."""
    from psoup.history.hydrate import hydrate

    rejects = out_dir / "history.rejects.csv"
    return hydrate(str(history_path), server=server, stream="toll_history", rejects=rejects)
