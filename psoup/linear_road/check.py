"""The independent Linear Road checker: the spec's rules applied one report at a time give
the expected answers of an input, and a run's answer files are judged against them the
way the original validator judges them.

This is deliberately not psoup's engine-based toll network (network.py): it is a plain,
obvious implementation of the spec (seeds/000, section 3.2), dicts and tuples, that
reproduces the original validator's expected answers for ../shared/linear-road/sample20
exactly (tests/test_lr_oracle.py). The network is tested against it. It pins down the
conventions the spec leaves implicit:

* the input is in time order; minute of a time t: t // 60 + 1;
* a segment's speed for a minute averages each reporting vehicle's own average there
  (all lanes); LAV for minute m truncates the mean of those over minutes m-5 .. m-1 that
  have reports, and is -1 when none has;
* the toll of minute m counts the distinct vehicles of the segment in minute m - 1;
  2 * (n - 50)^2 when LAV < 40 and n > 50, else 0, and 0 when an accident is in one of
  the 5 segments downstream (the segment itself included) during minute m - 1;
* a vehicle is stopped from its 4th consecutive report (30 s apart) at the same
  (xway, lane, pos, dir); an accident is two distinct vehicles stopped at the same place
  in a travel lane (1-3) at the same time; it is in its segment (pos // 5280) from the
  minute F the later of them is stopped (its 4th report) through the last minute L in
  which both were seen stopped there; accidents at one (xway, dir, pos) merge into one
  interval over the whole run (the validator's); reports in minutes F+1 .. L+1 are
  alerted;
* a toll alert answers a vehicle's first report outside the exit lane (4) from each
  (direction, segment), over the whole run, whatever trip it belongs to (the validator's
  convention, the default); with ``every_crossing`` (the spec's text) it answers every
  report from a segment other than the vehicle's previous report's, first report
  included, except from the exit lane. Near an accident it comes with an accident alert
  naming the nearest accident's segment;
* the toll notified at an alert is charged at the vehicle's next alert (on this trip or
  a later one, or never): leaving by the exit lane charges nothing, and historical tolls
  are not added;
* the balance of a vehicle at one of its alerts, at time tau, is bal(tau), the sum of the
  tolls notified at its alerts before tau; the daily expenditure is the historical tolls
  of (vid, day, xway), duplicates summed (0 when the history has none, and without a
  history file).

Judging (``check``), per answer type, like the original validator:

* toll alerts match on the key (time, vid) with the values (lav, toll); accident alerts
  on (time, vid) with seg; daily expenditures on qid with (time, bal);
* a balance answer (qid, resulttime, bal) is right when its time is the request's and
  (resulttime, bal) is one of the validator's candidates for a request of vehicle v at
  time t, with A the times of v's toll alerts (``balance_candidates``; the five rules of
  ../shared/linear-road/README.md): (t, bal(t)) when t is in A and A has an earlier
  time; (tau, bal(tau)) for tau the time in A before tau0, the latest time in A within
  (t-30, t], when A has a time earlier than tau; the earliest time in A within
  (t-60, t]; only when A has none there, the latest time in A at or before t-60; and
  (t, 0) when v's first alert is at t (or v has had none);
* the first answer for a key is judged (right or wrong); later ones for the same key, and
  answers for keys with no expected answer, are extra; expected answers with none are
  missing; an answer is late when emit - time exceeds 5 s (10 s for daily expenditure),
  whatever its value.

Cost: two passes over the input with O(1) dict steps per report (plain Python; about
200,000 reports/s on a 2-core machine: 2.5 s for sample20, ~2 min for a 3-hour expressway
of 22 million reports), plus O(n log n) numpy work per answer file to match the answers.
Memory: O(vehicles + segment-minutes) for the state, and the expected toll alerts as
int64 columns (32 bytes each).
"""

from __future__ import annotations

import bisect
import gc
import sys
import time as _time
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# pyarrow's streaming CSV reader decodes about 16 blocks ahead of the consumer: 1 MB
# blocks hold ~50 MB (16 MB blocks held 0.7 GB in the driver) and read as fast.
CSV_BLOCK = 1 << 20
INPUT_FIELDS = (
    "type",
    "time",
    "vid",
    "spd",
    "xway",
    "lane",
    "dir",
    "seg",
    "pos",
    "qid",
    "sinit",
    "send",
    "dow",
    "tod",
    "day",
)
EXIT = 4
SEGMENT_FEET = 5280
DEADLINES = {"toll": 5, "accident": 5, "balance": 5, "daily": 10}
FILES = {
    "toll": "tollalerts.csv",
    "accident": "accidentalerts.csv",
    "balance": "accountbalance.csv",
    "daily": "dailyexpenditure.csv",
}
# Per answer file: the type code, the number of fields, and the (time, emit) columns.
LAYOUT = {
    "toll": (0, 6, 2, 3),  # 0,vid,time,emit,lav,toll
    "accident": (1, 5, 1, 2),  # 1,time,emit,vid,seg
    "balance": (2, 6, 1, 2),  # 2,time,emit,qid,resulttime,bal
    "daily": (3, 5, 1, 2),  # 3,time,emit,qid,bal
}
EXAMPLES = 5  # problems kept per answer type and kind

_PASS1 = ("type", "time", "vid", "spd", "xway", "lane", "dir", "seg", "pos")
_PASS2 = ("type", "time", "vid", "xway", "lane", "dir", "seg", "qid", "day")

# A source of input rows: given field names, yields chunks of rows (tuples of those fields).
Source = Callable[[tuple[str, ...]], Iterator[Iterable[tuple[int, ...]]]]


def minute(t: int) -> int:
    """The spec's minute number of time ``t`` (the first minute is 1)."""
    return t // 60 + 1


def downstream(seg: int, direction: int, i: int) -> int:
    """The segment ``i`` segments downstream of ``seg`` (eastbound 0 counts up)."""
    return seg + i if direction == 0 else seg - i


# ----------------------------------------------------------------------------- reading
def read_input(path: Path) -> list[list[int]]:
    """Every input tuple (the spec's 15 fields) in file order. O(n) Python objects: for
    tests and small inputs; ``expected`` streams big files instead."""
    with open(path) as f:
        return [list(map(int, line.split(","))) for line in f if line.strip()]


def read_history(path: Path, vids: Iterable[int] | None = None) -> dict[tuple[int, int, int], int]:
    """(vid, day, xway) -> tolls from a historical tolls file, duplicates summed.

    With ``vids``, only those vehicles' rows are kept (the file is filtered with numpy,
    so a 10-million-row history costs seconds and little memory). O(rows).
    """
    cols = _read_int_csv(path, 4)
    if vids is not None:
        wanted = np.fromiter(vids, dtype=np.int64)
        cols = cols[np.isin(cols[:, 0], wanted)]
    out: dict[tuple[int, int, int], int] = {}
    for v, day, x, tolls in cols.tolist():
        out[(v, day, x)] = out.get((v, day, x), 0) + tolls
    return out


def bad_line(path: Path, width: int, ordered: bool = False) -> str | None:
    """The first wrong line of an all-integer CSV file, as an error message naming the file
    and the line: one that is not ``width`` 64-bit integers or, when ``ordered``, whose
    time (the second field) is before the line above's. None if every line is right.
    O(lines) Python work: for the message once the fast reader (pyarrow) refused the file.
    """
    last = None
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            text = raw.strip()
            if not text:
                continue
            try:
                fields = [int(x) for x in text.split(b",")]
            except ValueError:
                fields = []
            if len(fields) != width or not all(-(2**63) <= v < 2**63 for v in fields):
                shown = text[:60].decode("ascii", "backslashreplace")
                return f"{path}: not {width} integers per line: line {n}: {shown!r}"
            if ordered:
                if last is not None and fields[1] < last:
                    return (
                        f"{path}: the input is not in time order: line {n}: time {fields[1]} "
                        f"after {last}"
                    )
                last = fields[1]
    return None


def input_error(path: Path, err: Exception | None = None) -> ValueError:
    """The error for an input file that the fast reader refused (``err``), or whose times
    go back (None), naming the file and its first wrong line."""
    why = f"not 15 integers per line: {err}" if err else "the input is not in time order"
    return ValueError(bad_line(path, 15, ordered=True) or f"{path}: {why}")


def _read_int_csv(path: Path, width: int) -> np.ndarray:
    """An all-integer CSV file without header as an (n, width) int64 array (pyarrow)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if Path(path).stat().st_size == 0:
        return np.empty((0, width), dtype=np.int64)
    names = [f"c{i}" for i in range(width)]
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=names),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.int64())),
        )
    except pa.ArrowInvalid as err:
        where = bad_line(path, width)
        raise ValueError(where or f"{path}: not {width} integers per line: {err}") from None
    out = np.empty((table.num_rows, width), dtype=np.int64)
    for i, name in enumerate(names):
        out[:, i] = table.column(name).to_numpy()
    return out


def _file_source(path: Path) -> Source:
    """Stream an input file's fields in 32 MB chunks (~650,000 rows; pyarrow). Raises
    ValueError naming the file and the line when a line is not 15 integers or the times
    go back."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    def chunks(names: tuple[str, ...]) -> Iterator[Iterable[tuple[int, ...]]]:
        try:
            reader = pacsv.open_csv(
                path,
                read_options=pacsv.ReadOptions(
                    column_names=list(INPUT_FIELDS), block_size=CSV_BLOCK
                ),
                convert_options=pacsv.ConvertOptions(
                    include_columns=list(names), column_types=dict.fromkeys(names, pa.int64())
                ),
            )
        except pa.ArrowInvalid as err:
            raise input_error(path, err) from None
        last = None
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as err:
                raise input_error(path, err) from None
            times = batch.column("time").to_numpy()
            if len(times) and (
                (last is not None and times[0] < last) or (np.diff(times) < 0).any()
            ):
                raise input_error(path)
            last = times[-1] if len(times) else last
            yield zip(*(batch.column(n).to_numpy().tolist() for n in names), strict=True)

    return chunks


def _rows_source(rows: list[list[int]]) -> Source:
    def chunks(names: tuple[str, ...]) -> Iterator[Iterable[tuple[int, ...]]]:
        idx = [INPUT_FIELDS.index(n) for n in names]
        yield (tuple(r[i] for i in idx) for r in rows)

    return chunks


# ----------------------------------------------------------------------------- answers
@dataclass
class Answers:
    """The expected answers of an input (emit = time) and what judging balances needs."""

    # Toll alerts as columns, in input order: time, vid, lav, toll.
    toll_columns: tuple[array, array, array, array] = field(
        default_factory=lambda: (array("q"), array("q"), array("q"), array("q"))
    )
    accidents: list[tuple] = field(default_factory=list)  # (1, time, emit, vid, seg)
    balances: list[tuple] = field(default_factory=list)  # (2, time, emit, qid, resulttime, bal)
    daily: list[tuple] = field(default_factory=list)  # (3, time, emit, qid, bal)
    assessed: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # vid -> (time, toll)
    # vid -> its toll alerts' times and bal(time), the balance there: two parallel arrays.
    alerts_of: dict[int, tuple[array, array]] = field(default_factory=dict)
    # qid -> (request time, vid).
    balance_requests: dict[int, tuple[int, int]] = field(default_factory=dict)
    reports: int = 0  # position reports read
    every_crossing: bool = False  # the alert convention the answers follow

    @property
    def tolls(self) -> list[tuple]:
        """Toll alert rows (0, vid, time, emit, lav, toll). O(alerts) tuples: for tests."""
        t, v, lav, toll = self.toll_columns
        return [(0, v_, t_, t_, a, b) for t_, v_, a, b in zip(t, v, lav, toll, strict=True)]

    def balance_candidates(self, t: int, vid: int) -> set[tuple[int, int]]:
        """The (resulttime, bal) answers the validator accepts for a balance request of
        ``vid`` at ``t`` (the module docstring's five rules). O(log alerts + 1)."""
        times, bals = self.alerts_of.get(vid, (array("q"), array("q")))
        n = bisect.bisect_right(times, t)  # A = times[:n], the alerts at or before t
        if n == 0:
            return {(t, 0)}  # no alert yet: nothing was ever charged
        out: set[tuple[int, int]] = set()
        if times[n - 1] == t and n > 1:  # 1. t in A, with an earlier time
            out.add((t, bals[n - 1]))
        i0 = n - 1  # 2. tau0 = the latest time in A within (t-30, t]
        if times[i0] > t - 30 and i0 >= 2:
            out.add((times[i0 - 1], bals[i0 - 1]))
        first = bisect.bisect_right(times, t - 60, 0, n)  # 3. earliest within (t-60, t]
        if first < n:
            out.add((times[first], bals[first]))
        else:  # 4. none within: the latest at or before t-60
            out.add((times[n - 1], bals[n - 1]))
        if times[0] == t:  # 5. the first alert is at t
            out.add((t, 0))
        return out

    def balance_answer(self, t: int, vid: int) -> tuple[int, int]:
        """The answer psoup gives (and the expected file lists): rule 3, else rule 4."""
        times, bals = self.alerts_of.get(vid, (array("q"), array("q")))
        n = bisect.bisect_right(times, t)
        if n == 0:
            return t, 0
        first = bisect.bisect_right(times, t - 60, 0, n)
        i = first if first < n else n - 1
        return times[i], bals[i]

    def balance_accepts(self, qid: int, resulttime: int, bal: int) -> bool:
        """Whether (resulttime, bal) is one of the candidate answers to request ``qid``."""
        t, vid = self.balance_requests[qid]
        return (resulttime, bal) in self.balance_candidates(t, vid)

    def write(self, out_dir: Path) -> None:
        """The four answer files, in the validator's formats (no header, emit = time):
        a run that produced exactly these is all right. O(answers)."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        t, v, lav, toll = self.toll_columns
        tolls = ((0, b, a, a, c, d) for a, b, c, d in zip(t, v, lav, toll, strict=True))
        for kind, rows in (
            ("toll", tolls),
            ("accident", self.accidents),
            ("balance", self.balances),
            ("daily", self.daily),
        ):
            with open(out_dir / FILES[kind], "w") as f:
                f.writelines(",".join(map(str, r)) + "\n" for r in rows)


def run(
    rows: list[list[int]],
    history: dict[tuple[int, int, int], int],
    every_crossing: bool = False,
) -> Answers:
    """All answers for an input (rows of the spec's 15 fields, in time order) and a toll
    history. O(rows) dict steps; the rows are held by the caller (small inputs, tests)."""
    return _answers(_rows_source(rows), lambda vids: history, every_crossing)


def expected(
    input_path: Path, history_path: Path | None = None, every_crossing: bool = False
) -> Answers:
    """All answers for an input file and a historical tolls file (none: empty history).

    The input is streamed twice (pyarrow, 32 MB chunks); only the history of the
    vehicles that ask for a daily expenditure is kept. O(reports) time, memory O(vehicles
    + segment-minutes + toll alerts).
    """

    def history(vids: set[int]) -> dict[tuple[int, int, int], int]:
        return {} if history_path is None else read_history(history_path, vids)

    return _answers(_file_source(Path(input_path)), history, every_crossing)


def _answers(source: Source, history: Callable[[set[int]], dict], every_crossing: bool) -> Answers:
    # The passes make millions of small lists that live for a while and hold no cycles:
    # with the cyclic collector on, its full collections triple the time on big inputs.
    enabled = gc.isenabled()
    gc.disable()
    try:
        avgs, cars, accidents = _traffic(source)
        ans = Answers(every_crossing=every_crossing)
        daily_requests = _alerts(source, avgs, cars, accidents, ans)
    finally:
        if enabled:
            gc.enable()
    for qid, (t, vid) in ans.balance_requests.items():
        ans.balances.append((2, t, t, qid, *ans.balance_answer(t, vid)))
    tolls = history({r[2] for r in daily_requests})
    for t, qid, vid, x, day in daily_requests:
        ans.daily.append((3, t, t, qid, tolls.get((vid, day, x), 0)))
    return ans


# ----------------------------------------------------------------- pass 1: the traffic
def _traffic(source: Source) -> tuple[dict, dict, dict]:
    """Per (minute, xway, seg, dir): the average speed and the number of vehicles; per
    (minute, xway, dir): the segments with an accident. One pass, O(1) per report."""
    avgs: dict[tuple[int, int, int, int], float] = {}
    cars: dict[tuple[int, int, int, int], int] = {}
    # The open minute: (xway, seg, dir) -> vid -> [sum of speeds, reports].
    speeds: dict[tuple[int, int, int], dict[int, list[int]]] = {}
    open_minute = 0
    # vid -> its current run of reports at one place:
    # [xway, lane, pos, dir, last report's time, reports, 4th report's time].
    runs: dict[int, list[int]] = {}
    # (xway, lane, pos, dir) -> (vid, its 4th report's time, its last report's time there).
    stops: dict[tuple[int, int, int, int], list[tuple]] = {}
    last = -1

    def close_minute() -> None:
        for (x, s, d), per_vehicle in speeds.items():
            key = (open_minute, x, s, d)
            avgs[key] = sum(a / n for a, n in per_vehicle.values()) / len(per_vehicle)
            cars[key] = len(per_vehicle)
        speeds.clear()

    def close_run(vid: int, r: list[int]) -> None:
        x, lane, pos, d, t_last, n, t_stop = r
        if n >= 4 and 1 <= lane <= 3:
            # Stopped here from its 4th report through its last one.
            stops.setdefault((x, lane, pos, d), []).append((vid, t_stop, t_last))

    for chunk in source(_PASS1):
        for typ, t, v, spd, x, lane, d, s, pos in chunk:
            if t < last:
                raise ValueError(f"the input is not in time order: time {t} after {last}")
            last = t
            if typ != 0:
                continue
            m = t // 60 + 1
            if m != open_minute:
                close_minute()
                open_minute = m
            per_vehicle = speeds.get((x, s, d))
            if per_vehicle is None:
                per_vehicle = speeds[(x, s, d)] = {}
            acc = per_vehicle.get(v)
            if acc is None:
                per_vehicle[v] = [spd, 1]
            else:
                acc[0] += spd
                acc[1] += 1
            r = runs.get(v)
            if (
                r is not None
                and r[2] == pos
                and r[4] + 30 == t
                and r[0] == x
                and r[1] == lane
                and r[3] == d
            ):
                r[4] = t
                r[5] += 1
                if r[5] == 4:
                    r[6] = t
                continue
            if r is not None and r[5] >= 4:
                close_run(v, r)
            runs[v] = [x, lane, pos, d, t, 1, -1]
    close_minute()
    for v, r in runs.items():
        close_run(v, r)
    return avgs, cars, _accident_segments(stops)


def _accident_segments(
    stops: dict[tuple[int, int, int, int], list[tuple]],
) -> dict[tuple[int, int, int], set[int]]:
    """(minute, xway, dir) -> the segments with an accident during that minute.

    Two vehicles stopped at one place at once are an accident from the minute F of the
    later one's 4th report through the last minute L both were seen there; the accidents
    at one (xway, dir, pos), whatever the lane, merge into one interval from the first F
    to the last L (the validator's). O(stops at a place ^ 2), and stops are rare.
    """
    spans: dict[tuple[int, int, int], tuple[int, int]] = {}  # (xway, dir, pos) -> (F, L)
    for (x, _lane, pos, d), ss in stops.items():
        for a in range(len(ss)):
            for b in range(a + 1, len(ss)):
                (v1, s1, l1), (v2, s2, l2) = ss[a], ss[b]
                if v1 == v2 or max(s1, s2) > min(l1, l2) + 29:
                    continue  # one had left before the other was stopped
                f, last = minute(max(s1, s2)), minute(min(l1, l2))
                if last < f:
                    continue
                old = spans.get((x, d, pos))
                spans[(x, d, pos)] = (f, last) if old is None else (
                    min(old[0], f), max(old[1], last))  # fmt: skip
    out: dict[tuple[int, int, int], set[int]] = {}
    for (x, d, pos), (f, last) in spans.items():
        for m in range(f, last + 1):
            out.setdefault((m, x, d), set()).add(pos // SEGMENT_FEET)
    return out


# ------------------------------------------------------------------ pass 2: the answers
def _alerts(
    source: Source,
    avgs: dict[tuple[int, int, int, int], float],
    cars: dict[tuple[int, int, int, int], int],
    accidents: dict[tuple[int, int, int], set[int]],
    ans: Answers,
) -> list[tuple[int, int, int, int, int]]:
    """Toll and accident alerts, assessments and balance requests into ``ans``; returns
    the daily expenditure requests (time, qid, vid, xway, day). O(1) per report."""
    lavs: dict[tuple[int, int, int, int], int] = {}

    def lav(key: tuple[int, int, int, int]) -> int:
        m, x, s, d = key
        vals = [avgs[k] for mm in range(m - 5, m) if (k := (mm, x, s, d)) in avgs]
        return int(sum(vals) / len(vals)) if vals else -1

    every_crossing = ans.every_crossing
    prev_seg: dict[int, int] = {}  # vid -> its previous report's segment (every_crossing)
    seen: set[tuple[int, int, int]] = set()  # (vid, dir, seg) alerted once (validator)
    quoted: dict[int, int] = {}  # vid -> the toll notified at its latest alert
    balance: dict[int, int] = {}  # vid -> the tolls charged so far
    assessed = ans.assessed
    alerts_of = ans.alerts_of
    alert_t, alert_v, alert_lav, alert_toll = ans.toll_columns
    pending: list[tuple[int, int, int]] = []  # this second's balance requests
    daily: list[tuple[int, int, int, int, int]] = []
    now = -1
    reports = 0

    def answer_pending() -> None:
        # After the whole second: an alert in the request's second counts.
        for t, v, qid in pending:
            ans.balance_requests[qid] = (t, v)
        pending.clear()

    for chunk in source(_PASS2):
        for typ, t, v, x, lane, d, s, qid, day in chunk:
            if t != now:
                answer_pending()
                now = t
            if typ == 0:
                reports += 1
                if every_crossing:
                    before = prev_seg.get(v)
                    prev_seg[v] = s
                    if before == s or lane == EXIT:
                        continue
                else:
                    if lane == EXIT or (v, d, s) in seen:
                        continue
                    seen.add((v, d, s))
                # A toll alert: the toll notified at the vehicle's previous alert is
                # charged now, and the balance there is recorded.
                charge = quoted.pop(v, 0)
                bal = balance.get(v, 0) + charge
                if charge:
                    balance[v] = bal
                    assessed.setdefault(v, []).append((t, charge))
                mine = alerts_of.get(v)
                if mine is None:
                    mine = alerts_of[v] = (array("q"), array("q"))
                mine[0].append(t)
                mine[1].append(bal)
                m = t // 60 + 1
                near = None
                segs = accidents.get((m - 1, x, d))
                if segs:
                    for i in range(5):
                        if (s + i if d == 0 else s - i) in segs:
                            near = s + i if d == 0 else s - i
                            break
                key = (m, x, s, d)
                speed = lavs.get(key)
                if speed is None:
                    speed = lavs[key] = lav(key)
                n = cars.get((m - 1, x, s, d), 0)
                toll = 2 * (n - 50) ** 2 if speed < 40 and n > 50 and near is None else 0
                if toll:
                    quoted[v] = toll
                alert_t.append(t)
                alert_v.append(v)
                alert_lav.append(speed)
                alert_toll.append(toll)
                if near is not None:
                    ans.accidents.append((1, t, t, v, near))
            elif typ == 2:
                pending.append((t, v, qid))
            elif typ == 3:
                daily.append((t, qid, v, x, day))
    answer_pending()
    ans.reports = reports
    return daily


# ----------------------------------------------------------------------------- judging
@dataclass
class TypeReport:
    """One answer type's counts; ``examples`` keeps the first few problems of each kind.

    received = right + wrong + extra and expected = right + wrong + missing; late counts
    received rows over the deadline whatever their value.
    """

    name: str
    expected: int = 0
    received: int = 0
    right: int = 0
    wrong: int = 0
    missing: int = 0
    extra: int = 0
    late: int = 0
    examples: dict[str, list[str]] = field(
        default_factory=lambda: {"wrong": [], "missing": [], "extra": [], "late": []}
    )

    @property
    def ok(self) -> bool:
        return not (self.wrong or self.missing or self.extra or self.late)


@dataclass
class CheckReport:
    """Per answer type (toll, accident, balance, daily) counts and example problems."""

    types: dict[str, TypeReport]
    reports: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.types.values())

    def table(self) -> str:
        cols = ("expected", "received", "right", "wrong", "missing", "extra", "late")
        lines = [f"{'answer':<10}" + "".join(f"{c:>10}" for c in cols)]
        for r in self.types.values():
            lines.append(f"{r.name:<10}" + "".join(f"{getattr(r, c):>10}" for c in cols))
        return "\n".join(lines)

    def problems(self) -> str:
        """The first few problems of each kind, one per line ('' when there are none)."""
        lines = list(self.notes)
        for r in self.types.values():
            for kind, examples in r.examples.items():
                if examples:
                    count = getattr(r, kind)
                    lines.append(f"{r.name} {kind} ({count}), first {len(examples)}:")
                    lines.extend(f"  {e}" for e in examples)
        return "\n".join(lines)


CONVENTION_FILE = "convention"  # the driver writes its run's convention there


def run_convention(out_dir: Path) -> bool | None:
    """Whether the run whose answers are in ``out_dir`` alerted at every crossing, as its
    ``convention`` file says; None when there is none. Raises ValueError for another."""
    path = Path(out_dir) / CONVENTION_FILE
    if not path.exists():
        return None
    text = path.read_text().strip()
    if text not in ("validator", "every-crossing"):
        raise ValueError(f"{path}: unknown convention {text!r}")
    return text == "every-crossing"


def check(
    input_path: Path,
    history_path: Path | None,
    out_dir: Path,
    answers: Answers | None = None,
    every_crossing: bool | None = None,
) -> CheckReport:
    """Judge the answer files in ``out_dir`` against the expected answers of the input
    (computed unless ``answers`` gives them; no history: an empty one). A missing answer
    file counts as no answers. The toll-alert convention is ``every_crossing`` if given,
    else the run's own (``out_dir/convention``), else the validator's.
    O(reports) for the expected answers plus O(n log n) per answer file."""
    if not Path(out_dir).is_dir():
        raise FileNotFoundError(f"no answers directory {out_dir}")
    start = _time.perf_counter()
    if every_crossing is None:
        every_crossing = bool(run_convention(out_dir))
    ans = answers if answers is not None else expected(input_path, history_path, every_crossing)
    report = CheckReport(types={}, reports=ans.reports)
    received = {}
    for kind, name in FILES.items():
        path = Path(out_dir) / name
        width = LAYOUT[kind][1]
        if path.exists():
            received[kind] = _read_int_csv(path, width)
        else:
            report.notes.append(f"no {path}: counted as no answers")
            received[kind] = np.empty((0, width), dtype=np.int64)
    t, v, lav, toll = (np.array(c, dtype=np.int64) for c in ans.toll_columns)
    tolls = np.stack([np.zeros_like(t), v, t, t, lav, toll], axis=1)
    report.types["toll"] = _judge_keyed("toll", tolls, received["toll"], (2, 1), (4, 5))
    report.types["accident"] = _judge_keyed(
        "accident", _rows(ans.accidents, 5), received["accident"], (1, 3), (4,)
    )
    report.types["balance"] = _judge_balances(ans, received["balance"])
    report.types["daily"] = _judge_keyed(
        "daily", _rows(ans.daily, 5), received["daily"], (3,), (1, 4)
    )
    report.seconds = _time.perf_counter() - start
    return report


def _rows(rows: list[tuple], width: int) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(len(rows), width)


def _show(row: np.ndarray) -> str:
    return ",".join(map(str, row.tolist()))


def _first_of_each(keys: np.ndarray) -> np.ndarray:
    """Index of the first occurrence of each distinct key, in key order. O(n log n)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.ones(len(keys), dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    return order[starts]


def _encode(exp: np.ndarray, rec: np.ndarray, cols: tuple[int, ...]) -> tuple:
    """Exact int64 keys of the columns ``cols`` of both arrays: each column's values are
    replaced by their dense rank among both arrays' values, and the ranks combined."""
    k_exp = np.zeros(len(exp), dtype=np.int64)
    k_rec = np.zeros(len(rec), dtype=np.int64)
    for c in cols:
        values = np.concatenate([exp[:, c], rec[:, c]])
        order = np.argsort(values, kind="stable")
        step = np.zeros(len(values), dtype=np.int64)
        step[1:] = values[order][1:] != values[order][:-1]
        rank = np.empty(len(values), dtype=np.int64)
        rank[order] = np.cumsum(step)
        distinct = int(rank.max()) + 1 if len(rank) else 1
        k_exp = k_exp * distinct + rank[: len(exp)]
        k_rec = k_rec * distinct + rank[len(exp) :]
    return k_exp, k_rec


def _start(kind: str, exp: np.ndarray, rec: np.ndarray, key_cols: tuple[int, ...]) -> tuple:
    """Counts shared by every type: late rows, extra rows (of another type code, a second
    answer for a key, or a key with no expected answer) and missing answers. Returns the
    report, the received rows to judge (the first per key, in file order) and their
    expected rows (indices into ``exp``)."""
    code, _, t_col, e_col = LAYOUT[kind]
    out = TypeReport(kind, expected=len(exp), received=len(rec))
    late = np.flatnonzero(rec[:, e_col] - rec[:, t_col] > DEADLINES[kind])
    out.late = len(late)
    out.examples["late"] = [
        f"{_show(rec[i])} (answered {rec[i, e_col] - rec[i, t_col]} s after)"
        for i in late[:EXAMPLES]
    ]
    good = np.flatnonzero(rec[:, 0] == code)
    k_exp, k_rec = _encode(exp, rec[good], key_cols)
    if len(_first_of_each(k_exp)) != len(k_exp):
        raise ValueError(f"{kind}: the input asks for two answers with one key")
    first = _first_of_each(k_rec)  # the first answer per key is judged
    order = np.argsort(k_exp, kind="stable")
    pos = np.searchsorted(k_exp[order], k_rec[first])
    found = pos < len(order)
    found[found] = k_exp[order[pos[found]]] == k_rec[first[found]]
    # Extra rows, by reason: 0 another type, 1 a second answer, 2 not expected.
    second = np.ones(len(good), dtype=bool)
    second[first] = False
    extra = np.concatenate([np.flatnonzero(rec[:, 0] != code), good[second], good[first[~found]]])
    reason = np.repeat([0, 1, 2], [len(rec) - len(good), int(second.sum()), int((~found).sum())])
    out.extra = len(extra)
    why = (f"type is not {code}", "a second answer", "not expected")
    out.examples["extra"] = [
        f"{_show(rec[extra[i]])} ({why[reason[i]]})"
        for i in np.argsort(extra, kind="stable")[:EXAMPLES]
    ]
    match = order[pos[found]]
    answered = np.zeros(len(exp), dtype=bool)
    answered[match] = True
    missing = np.flatnonzero(~answered)
    out.missing = len(missing)
    out.examples["missing"] = [f"expected {_show(exp[i])}" for i in missing[:EXAMPLES]]
    judged = good[first[found]]
    in_file_order = np.argsort(judged, kind="stable")
    return out, judged[in_file_order], match[in_file_order]


def _judge_keyed(
    kind: str, exp: np.ndarray, rec: np.ndarray, key_cols: tuple, val_cols: tuple
) -> TypeReport:
    """Match on ``key_cols``; an answer is right when ``val_cols`` equal the expected."""
    out, judged, match = _start(kind, exp, rec, key_cols)
    cols = list(val_cols)
    bad = np.flatnonzero((rec[judged][:, cols] != exp[match][:, cols]).any(axis=1))
    out.wrong = len(bad)
    out.right = len(judged) - out.wrong
    out.examples["wrong"] = [
        f"{_show(rec[judged[i]])}, expected {_show(exp[match[i]])}" for i in bad[:EXAMPLES]
    ]
    return out


def _judge_balances(ans: Answers, rec: np.ndarray) -> TypeReport:
    """Match on qid; right when the time is the request's and (resulttime, bal) is one
    of the validator's candidates (Answers.balance_candidates)."""
    exp = _rows(ans.balances, 6)
    out, judged, match = _start("balance", exp, rec, (3,))
    for i, j in zip(judged.tolist(), match.tolist(), strict=True):
        _, t, _, qid, resulttime, bal = rec[i].tolist()
        if t == exp[j, 1] and ans.balance_accepts(qid, resulttime, bal):
            out.right += 1
        else:
            out.wrong += 1
            if len(out.examples["wrong"]) < EXAMPLES:
                accepted = sorted(ans.balance_candidates(*ans.balance_requests[qid]))
                out.examples["wrong"].append(
                    f"{_show(rec[i])}, expected (resulttime, bal) in "
                    f"{', '.join(map(str, accepted))}"
                )
    return out


# --------------------------------------------------------------------------------- CLI
def cli_main(args) -> int:
    """``psoup linear-road check``: print the table and the first problems; 0 when every
    answer is right and on time, else 1."""
    try:
        report = check(args.input, args.history, args.out, every_crossing=args.every_crossing)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(report.table())
    problems = report.problems()
    if problems:
        print(problems)
    rate = report.reports / report.seconds if report.seconds else 0.0
    print(f"checked {report.reports} position reports in {report.seconds:.1f} s ({rate:,.0f}/s)")
    if report.ok:
        print("every answer right and on time")
        return 0
    print("error: some answers are wrong, missing, extra or late", file=sys.stderr)
    return 1
