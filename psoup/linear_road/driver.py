"""The Linear Road data driver: replays an input file against a psoup server in simulated
real time and writes the answers in the original validator's formats.

One Ingest stream carries each simulated second's position reports as one columnar
batch (no per-tuple calls). The server's toll network derives toll notifications and
accident alerts; the driver's alert service receives them through two subscriptions. Each
type-2 / type-3 request is answered by that vehicle's client (psoup/linear_road/vehicle.py)
invoking its standing queries, after the second's reports are acknowledged; a balance is
reported with the time it was last updated (a toll notification of the vehicle, by the
original validator's rules: see psoup/linear_road/vehicle.py). ``emit`` is the simulated second at
which an answer was produced: wall time since the replay started x the speed-up. The
toll-alert convention of the run is written next to the answers (``convention``), so
``psoup linear-road check`` judges by the same one.
"""

from __future__ import annotations

import collections
import itertools
import queue
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clients.errors import PSoupRpcError, Unavailable
from clients.psoup_client import PSoupClient
from psoup.child import in_child
from psoup.heap import HeapFreezer
from psoup.linear_road import live
from psoup.linear_road.check import CONVENTION_FILE, CSV_BLOCK, DEADLINES, FILES, input_error
from psoup.linear_road.network import REPORT_FIELDS
from psoup.linear_road.streams import ALL_ALERTS, ALL_TOLLS
from psoup.linear_road.vehicle import Fleet, Vehicle, prepare_queries
from psoup.procinfo import disk_counts, rss_bytes, settle_reporting, steal_seconds
from psoup.progress import progress_bar

# How the driver (and the benchmarks) start their server. Without authentication every
# vehicle is the same client to the server, and a 3-hour expressway has ~370,000
# vehicles with 3 standing queries each for those that ask: the default limit of 100,000
# queries per client stopped the first full-duration run.
#
# --ingest-share 1: Linear Road's requests come every simulated second, so with the
# default 0.5 (psoup/server/turns.py) every batch of reports paid a pause as long as its
# engine CPU, doubling its way through the front-end; at L = 48 that alone made the
# reports queue at the busiest seconds (docs/BENCHMARKS.md, the `-L48-epyc2-share1`
# block). The requests still run before waiting batches (the urgent queue).
SERVER_ARGS = ("--max-queries-per-client", "10000000", "--ingest-share", "1")


UNAVAILABLE_RETRIES = 120  # a request asked again every 0.5 s while a shard recovers
#: Seconds' groups of type 2 and 3 requests answered at once (threads of the driver; a
#: group is one Batch call, and a refused group's requests go one call each). History:
#: with one call per request, Little's law bounded the requests answered per second by
#: workers / call time (p50 11-16 ms with durability at L = 32): 8 and then 16 workers
#: fell behind at the busiest seconds (~40 requests a simulated second, 80% of them a
#: vehicle's first, which registers and waits for the log), so 32 were needed. A group
#: takes one call, so few of them are busy at once.
REQUEST_WORKERS = 32


def server_args(convention: str = "validator") -> tuple[str, ...]:
    """The arguments of the ``psoup serve`` the driver starts for a convention."""
    return ("--linear-road", convention, *SERVER_ARGS)


@dataclass
class Summary:
    """Per answer type: count, max and p99 response (simulated s), answers over deadline;
    the ten slowest simulated seconds; every process's peak resident memory."""

    rows: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0
    speedup: float = 1.0
    failed: list[str] = field(default_factory=list)  # requests the server refused
    retried: int = 0  # requests asked again after UNAVAILABLE (a shard recovering)
    slowest: list[dict[str, float]] = field(default_factory=list)  # see Replay.slowest
    peak_rss: dict[str, int] = field(default_factory=dict)  # process -> bytes
    # balance and daily requests, wall ms: phase -> {"p50", "p99", "max"}
    request_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    driver_cpu: float = 0.0  # the driver's CPU seconds over the replay (Replay.driver_cpu)

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
        if self.retried:
            lines.append(f"{self.retried} requests asked again after UNAVAILABLE (a shard "
                         "recovering); their answers count with their full delay")  # fmt: skip
        if self.slowest:
            lines.append(
                "slowest simulated seconds (response; server queue; server CPU; machine "
                "steal; disk busy, ms per write; send lag; ack):"
            )
            for w in self.slowest:
                lines.append(
                    f"  t={int(w['second']):>6}  {int(w['response']):>3} s ({w['kind']})"
                    f"  queue {int(w['queue']):>3} batches  server CPU {w['cpu']:>4.0%}"
                    f"  steal {w['steal']:>4.0%}  disk {w['disk_busy']:>4.0%}"
                    f" {w['disk_ms']:>5.1f} ms/write"
                    f"  batch sent {w['lag_ms']:>6.0f} ms late, acked {w['ack_ms']:>6.0f} ms"
                    " after"
                )
        for phase, q in self.request_ms.items():
            lines.append(
                f"requests {phase}: p50 {q['p50']:.0f} ms, p99 {q['p99']:.0f} ms,"
                f" max {q['max']:.0f} ms (wall)"
            )
        if self.peak_rss:
            peaks = ", ".join(f"{k} {v / 2**30:.2f} GB" for k, v in self.peak_rss.items())
            lines.append(f"peak RSS: {peaks}")
        return "\n".join(lines)


def _last_time(path: Path) -> int:
    """The time field of the input's last line (the file is in time order). O(1), but
    ValueError naming the first wrong line when the last one is wrong."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - 4096))
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    try:
        return int(lines[-1].split(b",")[1]) if lines else 0
    except (IndexError, ValueError) as err:
        raise input_error(path, err) from None


def read_seconds(path: Path) -> Iterator[tuple[int, np.ndarray]]:
    """(t, rows of second t as an int64 array of the 15 fields) for t = 0 .. last, empty
    seconds included; the file is streamed with pyarrow in 1 MB blocks (CSV_BLOCK), so
    memory stays at ~50 MB whatever the file's size. Raises ValueError on a line that is not 15
    integers or a time out of order."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    names = [f"f{i}" for i in range(15)]
    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=names, block_size=CSV_BLOCK),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.int64())),
        )
    except pa.ArrowInvalid as err:
        raise input_error(path, err) from None
    t = 0
    carry = np.empty((0, 15), dtype=np.int64)
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except pa.ArrowInvalid as err:
            raise input_error(path, err) from None
        block = np.column_stack([c.to_numpy() for c in batch.columns]).astype(np.int64)
        rows = np.concatenate((carry, block)) if len(carry) else block
        times = rows[:, 1]
        if len(times) and (np.diff(times) < 0).any():
            raise input_error(path)
        done = int(times[-1]) if len(times) else t  # the last second may go on
        starts = np.searchsorted(times, np.arange(t, done + 1))
        for s in range(t, done):
            yield s, rows[starts[s - t] : starts[s - t + 1]]
        carry, t = rows[starts[done - t] :], done
    yield t, carry


def read_until(path: Path, seconds: int) -> np.ndarray:
    """The rows of the input's first ``seconds`` simulated seconds (streamed)."""
    parts = []
    for s, rows in read_seconds(path):
        if s >= seconds:
            break
        parts.append(rows)
    return np.concatenate(parts) if parts else np.empty((0, 15), dtype=np.int64)


class _ReadAhead:
    """``read_seconds(path)`` for the seconds in [start, until) on a thread of its own, up
    to ``seconds`` ahead of the consumer, so parsing the next block never delays the paced
    sends. Raises what the reader raised."""

    _END = object()

    def __init__(
        self, path: Path, seconds: int = 256, start: int = 0, until: int | None = None
    ) -> None:
        self._q: queue.Queue = queue.Queue(maxsize=seconds)
        self.first_ready = threading.Event()
        span = (start, until if until is not None else float("inf"))
        threading.Thread(target=self._fill, args=(path, *span), daemon=True).start()

    def _fill(self, path: Path, start: int, until: float) -> None:
        try:
            for item in read_seconds(path):
                if item[0] < start:
                    continue
                if item[0] >= until:
                    break
                self._q.put(item)
                self.first_ready.set()
            self._q.put(self._END)
        except BaseException as exc:  # handed to the consumer
            self._q.put(exc)
        self.first_ready.set()

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        while (item := self._q.get()) is not self._END:
            if isinstance(item, BaseException):
                raise item
            yield item


def _csv_lines(columns: Sequence[int | np.ndarray], n: int) -> str:
    """``n`` CSV lines of integer ``columns`` (an int stands for a column of it). The
    values are turned to text by ``map(str, ...)`` and joined by ``str.join``: C loops."""
    parts = [itertools.repeat(str(c), n) if isinstance(c, int) else map(str, c.tolist())
             for c in columns]  # fmt: skip
    return "\n".join(map(",".join, zip(*parts, strict=True))) + "\n"


class _AnswerFiles:
    """Answers written to their files as they arrive (emit order), with only their
    times and responses kept, as compact numpy columns: memory O(answers x 8 bytes), not
    the rows. Thread-safe."""

    def __init__(
        self, out_dir: Path, append: bool = False, progress: live.Progress | None = None
    ) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        mode = "a" if append else "w"
        self.files = {k: open(out_dir / name, mode, newline="") for k, name in FILES.items()}  # noqa: SIM115
        self.times: dict[str, list[np.ndarray]] = {k: [] for k in FILES}
        self.responses: dict[str, list[np.ndarray]] = {k: [] for k in FILES}
        self.lock = threading.Condition()
        self.derived = {"toll": 0, "accident": 0}
        self.failed: list[str] = []
        self.progress = progress  # the live view's counters, when there is one

    def add(self, kind: str, columns: Sequence[int | np.ndarray]) -> None:
        """Write answers of ``kind`` given as columns in the validator's layout, each a
        1-D integer array or one int for every row (the type, a second's emit; the times
        are always an array), and note their responses. O(rows x columns) in C loops: no
        Python frame per row, which cost the driver ~1.5 µs an answer at ~37,000 toll
        notifications a second (L = 48)."""
        t_col, e_col = (2, 3) if kind == "toll" else (1, 2)
        t = np.asarray(columns[t_col], np.int32)  # the answers' times: always a column
        if not (n := len(t)):
            return
        e = columns[e_col]
        e = np.full(n, e, np.int32) if isinstance(e, int) else np.asarray(e, np.int32)
        text = _csv_lines(columns, n)
        with self.lock:
            self.files[kind].write(text)
            self.times[kind].append(t)
            self.responses[kind].append((e - t).astype(np.int16))
            if self.progress is not None:
                r = e - t
                self.progress.answered(kind, n, int(r[-1]), int(r.max()))
            if kind in self.derived:
                self.derived[kind] += n
                self.lock.notify_all()

    def add_rows(self, kind: str, rows: list[tuple]) -> None:
        """``add`` for a few answers given as rows (the requests' answers)."""
        if rows:
            self.add(kind, [np.array(c, dtype=np.int64) for c in zip(*rows, strict=True)])

    def columns(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """(times, responses) of every answer of ``kind`` so far."""
        with self.lock:
            t, r = self.times[kind], self.responses[kind]
            return (np.concatenate(t) if t else np.empty(0, np.int32),
                    np.concatenate(r) if r else np.empty(0, np.int16))  # fmt: skip

    def close(self) -> None:
        for f in self.files.values():
            f.close()


@dataclass
class Replay:
    """What a replay measured: the answers' columns, the wall seconds, the refused
    requests, per simulated second the lag of its batch behind schedule (ms), the
    server's queue depth and CPU share sampled while it ran (by simulated second), the
    wall ms from sending its batch to the batch's ack, the machine's steal share and its
    disks' busy share and ms per write, and the driver's own largest resident memory
    during the replay."""

    answers: _AnswerFiles
    seconds: float
    failed: list[str]
    send_lag_ms: np.ndarray
    queue: np.ndarray
    cpu: np.ndarray
    driver_rss: int = 0  # the largest resident memory of this process during the replay
    # Per balance and daily request, wall ms: waiting for its second to be ingested, then
    # in its calls (registrations the first time, invokes).
    request_ms: np.ndarray = field(default_factory=lambda: np.empty((0, 2), np.float32))
    retried: int = 0  # requests asked again after UNAVAILABLE
    # Per simulated second, wall ms from sending its batch to the batch's ack.
    ack_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    # Per simulated second, the largest share of the machine's CPU time its host took
    # (steal), over the samples that cover it (taken with the queue): a virtual machine
    # stalled from outside.
    steal: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    # Per simulated second, the largest share of the time the machine's disks were busy
    # and their largest mean ms per write, over the samples that cover it (taken with the
    # queue): a disk stalled from outside, which every fsync waits behind.
    disk_busy: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    disk_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    driver_cpu: float = 0.0  # this process's CPU seconds (every thread) over the replay

    def slowest(self, n: int = 10) -> list[dict[str, float]]:
        """The ``n`` simulated seconds with the slowest answers: the second, its slowest
        response and kind, the largest server queue, server CPU share, machine steal
        share, disk busy share and ms per write sampled while it was being answered, how
        late its batch was sent and how long its ack took (wall ms; a balance or daily
        request waits for its second's ack before its call)."""
        worst: dict[int, tuple[int, str]] = {}
        for kind in FILES:
            t, r = self.answers.columns(kind)
            if not len(t):
                continue
            order = np.lexsort((r, t))  # per second, its largest response last
            t, r = t[order], r[order]
            last = np.r_[t[1:] != t[:-1], True]
            for s, resp in zip(t[last].tolist(), r[last].tolist(), strict=True):
                if resp > worst.get(s, (-1, ""))[0]:
                    worst[s] = (resp, kind)
        top = sorted(worst.items(), key=lambda kv: (-kv[1][0], kv[0]))[:n]
        out = []
        for s, (resp, kind) in top:
            span = slice(s, s + resp + 1)
            out.append(
                {
                    "second": s,
                    "response": resp,
                    "kind": kind,
                    "queue": float(self.queue[span].max(initial=0)),
                    "cpu": float(self.cpu[span].max(initial=0)),
                    "steal": float(self.steal[span].max(initial=0)),
                    "disk_busy": float(self.disk_busy[span].max(initial=0)),
                    "disk_ms": float(self.disk_ms[span].max(initial=0)),
                    "lag_ms": float(self.send_lag_ms[s]) if s < len(self.send_lag_ms) else 0.0,
                    "ack_ms": float(self.ack_ms[s]) if s < len(self.ack_ms) else 0.0,
                }
            )
        return out


def replay(
    client: PSoupClient,
    input_path: Path,
    speedup: float,
    out_dir: Path,
    progress: bool = True,
    server_cpu: Callable[[], float] | None = None,
    *,
    start: int = 0,
    until: int | None = None,
    vehicles: dict[int, Vehicle] | None = None,
    show_live: bool = False,
) -> Replay:
    """Replay the input file's seconds in [start, until) (all of them by default) against
    the server behind ``client``, writing the answer files into ``out_dir`` as answers
    arrive. ``server_cpu()`` (the server's CPU seconds so far), when given, is sampled
    with the queue depth. Memory: the input is streamed and the answers are not kept, only
    6 bytes of response time each.

    A replay from ``start`` > 0 goes on with an earlier one (one that ended at ``until =
    start``, against a server that has kept its state, e.g. restarted on its data
    directory): its clock starts at simulated second ``start``, its answers are appended
    to the files in ``out_dir``, and given the earlier replay's ``vehicles`` (each
    vehicle's handles) it invokes the queries registered then, now through ``client``.
    ``show_live``: a live view of the run (psoup/linear_road/live.py) instead of the
    progress bar."""
    last = _last_time(input_path)
    counters = live.Progress(last + 1)
    answers = _AnswerFiles(out_dir, append=start > 0, progress=counters)
    clock: dict[str, float] = {}
    send_lag = np.zeros(last + 1, dtype=np.float32)
    ack_ms = np.zeros(last + 1, dtype=np.float32)
    sent_at: queue.SimpleQueue[tuple[int, float]] = queue.SimpleQueue()  # batches in order
    queue_at = np.zeros(last + 1, dtype=np.int32)
    cpu_at = np.zeros(last + 1, dtype=np.float32)
    steal_at = np.zeros(last + 1, dtype=np.float32)
    disk_busy_at = np.zeros(last + 1, dtype=np.float32)
    disk_ms_at = np.zeros(last + 1, dtype=np.float32)

    def emit() -> int:
        return int((time.monotonic() - clock["start"]) * speedup)

    # The alert service: every toll notification and accident alert, as it is made. The
    # current result comes first: once it is here the subscription is in place. Derived
    # rows counted by then were made before this replay (by an earlier one).
    subs = []
    for text in (ALL_TOLLS, ALL_ALERTS):
        sub = client.subscribe(client.register(text), include_current=True)
        next(sub)
        subs.append(sub)
    made_before = _derived_made(client)

    def listen(sub, kind: str, shape: Callable[[tuple[np.ndarray, ...], int], tuple]) -> None:
        for _kind, result, _tid in sub:
            e = emit()
            answers.add(kind, shape(result.arrays, e))

    listeners = [
        threading.Thread(
            target=listen, args=(subs[0], "toll", lambda c, e: (0, c[0], c[1], e, c[2], c[3]))
        ),
        threading.Thread(
            target=listen, args=(subs[1], "accident", lambda c, e: (1, c[0], e, c[1], c[2]))
        ),
    ]
    for t in listeners:
        t.daemon = True
        t.start()

    sent = queue.Queue()  # per-second batches for the ingest stream; None ends it
    acked = {"n": 0}
    # Seconds' requests whose batch is not acknowledged yet, in order: (rows, batches
    # needed, when read). They are handed to the request workers once it is, so that no
    # worker sits waiting for an ack (8 workers, each holding a request ~25 ms for its ack
    # and ~10 ms in its call, fell behind at L = 32).
    held: collections.deque[tuple[np.ndarray, int, float]] = collections.deque()
    held_lock = threading.Lock()  # guards acked, held and pending
    vehicles = {} if vehicles is None else vehicles
    queries = prepare_queries(client)
    for v in vehicles.values():
        v.client = client
    fleet = Fleet(client, queries, vehicles)
    vlock = threading.Lock()
    phases: list[tuple[float, float]] = []  # per request: ms before its call, in RPCs
    done = threading.Event()
    own_rss = [rss_bytes()]

    def sample() -> None:
        # The server's queue and CPU share, twice a simulated second at most; the share
        # of the machine's CPU time its host took (steal) and its disks' busy share and
        # ms per write, each given to every second since the sample before (a stall can
        # hold this loop up, in its stats call, for seconds); and this process's own
        # memory.
        cpu0, w0 = (server_cpu() if server_cpu else 0.0), time.monotonic()
        stolen0, total0 = steal_seconds()
        disk0, dw0, ds0 = disk_counts(), time.monotonic(), 0
        while not done.wait(max(0.25, 0.5 / speedup)):
            own_rss[0] = max(own_rss[0], rss_bytes())
            s = min(emit(), last)
            span = slice(ds0, s + 1)
            stolen1, total1 = steal_seconds()
            if total1 > total0:
                share = (stolen1 - stolen0) / (total1 - total0)
                steal_at[span] = np.maximum(steal_at[span], share)
            stolen0, total0 = stolen1, total1
            disk1, dw1 = disk_counts(), time.monotonic()
            busy = (disk1.busy_ms - disk0.busy_ms) / max((dw1 - dw0) * 1e3, 1e-9)
            disk_busy_at[span] = np.maximum(disk_busy_at[span], min(busy, 1.0))
            if disk1.writes > disk0.writes:
                ms = (disk1.write_ms - disk0.write_ms) / (disk1.writes - disk0.writes)
                disk_ms_at[span] = np.maximum(disk_ms_at[span], ms)
            disk0, dw0, ds0 = disk1, dw1, s
            try:
                depth = int(client.stats(timeout=5)["queue_depth"])
            except PSoupRpcError:
                continue
            queue_at[s] = max(queue_at[s], depth)
            if server_cpu is not None:
                cpu1, w1 = server_cpu(), time.monotonic()
                cpu_at[s] = max(cpu_at[s], (cpu1 - cpu0) / max(w1 - w0, 1e-9))
                cpu0, w0 = cpu1, w1

    def batches():
        while (item := sent.get()) is not None:
            yield item

    def consume_acks() -> None:
        for _ack in client.ingest("positions", batches()):
            s, t_sent = sent_at.get()
            ack_ms[s] = (time.perf_counter() - t_sent) * 1e3
            with held_lock:
                acked["n"] += 1
                while held and held[0][1] <= acked["n"]:
                    rows, _needed, w0 = held.popleft()
                    pending.append(pool.submit(answer_all, rows, w0))

    def request(rows: np.ndarray, needed: int, w0: float) -> None:
        # A second's requests, answered once it is fully ingested (``needed`` batches
        # acked).
        with held_lock:
            if held or acked["n"] < needed:
                held.append((rows, needed, w0))
            else:
                pending.append(pool.submit(answer_all, rows, w0))

    def retrying(call: Callable[[], object]) -> object:
        # A shard recovering answers Unavailable: asked again every 0.5 s, the answer late.
        for attempt in range(UNAVAILABLE_RETRIES + 1):
            try:
                return call()
            except Unavailable:
                if attempt == UNAVAILABLE_RETRIES:
                    raise
                with vlock:
                    counters.retried += 1
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def answer_all(rows: np.ndarray, w0: float) -> None:
        # A second's requests in one Batch call (the fleet's gateway); w0: when they were
        # read. If the server refuses the batch, each is asked on its own, so that one
        # refused request does not lose the others.
        w1 = time.perf_counter()
        reqs = [(int(r[0]), int(r[1]), int(r[2]), int(r[4]), int(r[14])) for r in rows]
        try:
            got = retrying(lambda: fleet.answer(reqs))
        except PSoupRpcError:
            for row in rows:
                answer(row, w0)
            return
        e = emit()
        done = list(zip(reqs, rows, got, strict=True))
        bal = [(2, q[1], e, int(r[9]), *a) for q, r, a in done if q[0] == 2]
        day = [(3, q[1], e, int(r[9]), a) for q, r, a in done if q[0] == 3]
        if bal:
            answers.add_rows("balance", bal)
        if day:
            answers.add_rows("daily", day)
        w2 = time.perf_counter()
        with vlock:
            phases.extend([((w1 - w0) * 1e3, (w2 - w1) * 1e3)] * len(rows))

    def answer(row: np.ndarray, w0: float) -> None:
        # One request on its own (a refused batch's). What precedes the call (the ack of
        # the request's second, a free worker) counts in its first phase.
        w1 = time.perf_counter()
        kind, t, vid = int(row[0]), int(row[1]), int(row[2])
        v = fleet.vehicle(vid)
        try:
            if kind == 2:
                resulttime, bal = retrying(lambda: v.balance(t))
                answers.add_rows("balance", [(2, t, emit(), int(row[9]), resulttime, bal)])
            else:
                total = retrying(lambda: v.daily_expenditure(int(row[4]), int(row[14])))
                answers.add_rows("daily", [(3, t, emit(), int(row[9]), total)])
        except PSoupRpcError as err:  # one refused request must not lose the whole run
            with answers.lock:
                answers.failed.append(f"type {kind} at {t} for vehicle {vid}: {err}")
                counters.failed += 1
        w2 = time.perf_counter()
        with vlock:
            phases.append(((w1 - w0) * 1e3, (w2 - w1) * 1e3))

    # A request's wait for a worker counts in its first phase: at L = 14 requests queued
    # here for seconds while every call took < 0.7 s.
    pool = ThreadPoolExecutor(max_workers=REQUEST_WORKERS)
    pending: list = []
    acker = threading.Thread(target=consume_acks, daemon=True)
    acker.start()
    sampler = threading.Thread(target=sample, daemon=True)
    n_sent = 0
    ahead = _ReadAhead(input_path, start=start, until=until)
    ahead.first_ready.wait()  # the first block is parsed before the clock starts
    clock["start"] = time.monotonic() - start / speedup
    cpu0 = time.process_time()
    sampler.start()
    total = (last + 1 if until is None else min(until, last + 1)) - start
    bar = progress_bar(
        total=total, desc="simulated seconds", unit="s", enabled=progress and not show_live
    )
    stop_live = live.maybe(counters, speedup, show_live)
    # The driver's own heap holds ~2 tracked objects per vehicle it has seen (1.5 million
    # at L = 24); a full collection over them stopped every thread here for ~0.4-1.3 s, and
    # the answers emitted meanwhile came out late. Frozen every second, as the server's is.
    freezer = HeapFreezer(1.0)
    for s, rows in ahead:
        due = clock["start"] + s / speedup
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing the replay to simulated real time
        send_lag[s] = max(0.0, -pause) * 1e3
        reports = rows[rows[:, 0] == 0]
        counters.sent(s, float(send_lag[s]), len(reports))
        if len(reports):
            sent_at.put((s, time.perf_counter()))
            sent.put({f: reports[:, i + 1] for i, f in enumerate(REPORT_FIELDS)})
            n_sent += 1
        if len(asked := rows[(rows[:, 0] == 2) | (rows[:, 0] == 3)]):
            request(asked, n_sent, time.perf_counter())
        with held_lock:
            if len(pending) > 4096:  # keep the futures of answered requests from piling up
                pending[:] = [f for f in pending if not f.done() or f.result()]
        bar.update(1)
        freezer.tick()
    bar.close()
    sent.put(None)
    acker.join(timeout=600)
    with held_lock:  # none, unless the ingest stream ended early: answered anyway
        while held:
            rows, _needed, w0 = held.popleft()
            pending.append(pool.submit(answer_all, rows, w0))
    for f in list(pending):
        f.result()
    pool.shutdown()
    # Every derived row reaches the alert service: wait until as many arrived as the server
    # made (its streams count them).
    made = _derived_made(client)
    with answers.lock:
        answers.lock.wait_for(
            lambda: all(answers.derived[k] >= made[k] - made_before[k] for k in made),
            timeout=600,
        )
    for s in subs:
        s.cancel()
    stop_live()
    done.set()
    sampler.join()
    answers.close()
    seconds = time.monotonic() - clock["start"]
    driver_cpu = time.process_time() - cpu0
    request_ms = np.array(phases, dtype=np.float32).reshape(-1, 2)
    return Replay(
        answers,
        seconds,
        answers.failed,
        send_lag,
        queue_at,
        cpu_at,
        own_rss[0],
        request_ms,
        counters.retried,
        ack_ms,
        steal_at,
        disk_busy_at,
        disk_ms_at,
        driver_cpu,
    )


def _derived_made(client: PSoupClient) -> dict[str, int]:
    """How many toll notifications and accident alerts the server has made so far."""
    return {
        "toll": client.describe_stream("toll_notifications").tuples_ingested,
        "accident": client.describe_stream("accident_alerts").tuples_ingested,
    }


def summarize(rep: Replay, speedup: float) -> Summary:
    """Response-time statistics per answer type, and the slowest seconds."""
    out = Summary(seconds=rep.seconds, speedup=speedup, failed=rep.failed, retried=rep.retried,
                  driver_cpu=rep.driver_cpu)  # fmt: skip
    for kind in FILES:
        _, resp = rep.answers.columns(kind)
        out.rows[kind] = {
            "count": len(resp),
            "max": float(resp.max()) if len(resp) else 0.0,
            "p99": float(np.percentile(resp, 99)) if len(resp) else 0.0,
            "late": int((resp > DEADLINES[kind]).sum()),
        }
    out.slowest = rep.slowest()
    for i, phase in enumerate(("before the call (a worker, its second's ack)", "in calls")):
        ms = rep.request_ms[:, i]
        if len(ms):
            out.request_ms[phase] = dict(
                zip(("p50", "p99", "max"), np.percentile(ms, [50, 99, 100]).tolist(), strict=True)
            )
    return out


def plot(rep: Replay, path: Path) -> None:
    """Response time over the run as a PNG: per answer type and simulated second, the
    slowest answer (points), with the deadline and the server's queue depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, aq) = plt.subplots(
        2, 1, figsize=(8, 5), dpi=110, sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for kind in FILES:
        t, r = rep.answers.columns(kind)
        if not len(t):
            continue
        worst = np.zeros(int(t.max()) + 1, dtype=np.int32)
        np.maximum.at(worst, t, r)
        seen = np.zeros(len(worst), dtype=bool)
        seen[t] = True
        xs = np.flatnonzero(seen)
        ax.scatter(xs, worst[xs], s=2, label=f"{kind} (deadline {DEADLINES[kind]} s)")
    ax.axhline(5, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("slowest response\n(simulated s)")
    ax.set_title("Linear Road answers over the run")
    ax.legend(markerscale=4, loc="upper left")  # "best" scans every point
    aq.plot(np.arange(len(rep.queue)), rep.queue, lw=0.6, color="black")
    aq.set_ylabel("server queue\n(batches)")
    aq.set_xlabel("simulated time (s)")
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
    convention: str = "validator",
    server_cpu: Callable[[], float] | None = None,
    show_live: bool = False,
) -> Summary:
    """Hydrate the history, replay the input, write the answers, a summary and a PNG.

    Without ``server`` a ``psoup serve --linear-road`` child process on a free loopback
    port is started (its own CPU and GIL); a given server must run with ``--linear-road``.
    ``hydrate(history_path, target, out_dir)`` loads the toll history; it defaults to the
    PySpark pipeline (``psoup history hydrate``), its rejected rows written to out_dir.
    ``convention`` is the toll-alert convention of the server started here (a given
    server's own is used as it is); it is written to ``out_dir/convention``.
    ``server_cpu()`` gives a given server's CPU seconds so far, for the summary's
    slowest seconds (the server started here is measured without it). ``show_live``: a
    live view of the run in the terminal instead of the progress bar.
    """
    _last_time(input_path)  # a missing or unreadable input fails here, before anything
    child = None
    if server is None:
        from psoup.server.process import ServerProcess

        child = ServerProcess(*server_args(convention))
        server = child.target
    peaks: dict[str, int] = {}
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
                peaks.update(children_peak_rss("spark (hydration)"))
                if settled := settle():
                    print(settled, file=sys.stderr)
            cpu = child.cpu_seconds if child else server_cpu
            rep = replay(client, input_path, speedup, out_dir, progress, cpu, show_live=show_live)
    finally:
        if child is not None:
            peaks["server"] = child.peak_rss_bytes()
            child.stop()
    (out_dir / CONVENTION_FILE).write_text(convention + "\n")
    plot(rep, out_dir / "response_times.png")
    summary = summarize(rep, speedup)
    summary.peak_rss = {"driver (replay)": rep.driver_rss, "driver process": own_peak_rss(),
                        **peaks}  # fmt: skip
    return summary


def own_peak_rss() -> int:
    """This process's largest resident memory so far (bytes): whatever it did before the
    replay (generating input, in a benchmark) included."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def children_peak_rss(name: str) -> dict[str, int]:
    """{name: the largest resident memory of a child process that has ended} (the Spark
    JVM, after a hydration started and stopped it here); empty when none has."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {name: peak} if peak else {}


def settle(who: str = "the driver") -> str:
    """Wait for this machine to hand the memory freed so far back to its host, as it does
    after a hydration, whose Spark JVM frees gigabytes as it ends
    (``procinfo.settle_reporting``: until the kernel's count has stood still 10 s, at most
    2 minutes), so that the replay's clock does not start in the stalls that come with
    it. Returns what ``who`` waited as a sentence ("" where the kernel keeps no count)."""
    seconds, kib = settle_reporting()
    if not seconds:
        return ""
    return (
        f"Before the replay {who} waited {seconds:.0f} s for this virtual machine to "
        + (f"hand back to its host the {kib / 1024:,.0f} MiB freed meanwhile" if kib else
           "show that it was handing no freed memory back to its host")
        + " (free page reporting, whose host-side work stalls every process of the "
        "machine: docs/LINEAR_ROAD.md)."
    )  # fmt: skip


def hydrate_history(history_path: Path, server: str, out_dir: Path) -> object:
    """Load the toll history into ``toll_history`` with the PySpark pipeline, in a child
    process: whatever the Spark driver side holds (py4j, Arrow buffers) is not the
    replay's. Returns the pipeline's HydrateSummary."""
    return in_child(_hydrate, history_path, server, out_dir)


def _hydrate(history_path: Path, server: str, out_dir: Path) -> object:
    from psoup.history.hydrate import hydrate

    rejects = out_dir / "history.rejects.csv"
    return hydrate(str(history_path), server=server, stream="toll_history", rejects=rejects)
