"""A Linear Road input generator: position reports, historical query requests and the
matching toll history, for any number of expressways, deterministic given a seed.

The traffic follows the spec's simulation (seeds/000 section 3.1) and reproduces the load
of the public re-implementation that made ../shared/linear-road/sample20
(walmartlabs/LinearGenerator), so that L-ratings measured on either compare:

* arrivals: at second t each expressway admits a random number of new vehicles, drawn the
  way that generator draws them (about 20 x (sin(pi t / 10800) + 0.8 + U) + a few): about
  22/s at the start, 46/s at 1.5 h, some 370,000 vehicles in 3 hours (longer runs repeat the
  3-hour rush hour);
* trips: direction uniform, entry ramp uniform over the segments that leave room for a
  trip (2 segments). The spec draws the exit ramp from a normal distribution around
  segment 50 (sd 20); we draw it as the sample's generator does, which is what gives the
  sample's load (a normal around 50 restricted to the segments downstream gives 15% fewer
  reports in 3 hours; trip lengths ~ N(50, 20) clipped to the road, 37% more): uniform
  over the segments at least 2 downstream, except that 80% of the trips entering upstream
  of downtown (the middle third) exit downtown. 10% of the vehicles that leave come back
  1,000-1,999 s later under the same id for a new trip, half of them entering where they
  left (their exit segment, the same direction), so repeat trips re-enter a segment they
  just exited from and cross segments they used before;
* movement: every vehicle reports every 30 s from its entry second on (so each second holds
  about 1/30 of the active vehicles) and then moves pos += spd x 44 ft (spd mph for 30 s);
  first report lane 0 at 10 mph at the start of its entry segment, lane 0 while in that
  segment (40 mph less congestion), then a travel lane 1-3 (70 mph less congestion, +-9,
  changing lane with probability 0.4), and a last report in lane 4 at 10 mph from the
  exit segment; congestion takes 10 mph off above 72 vehicles in the vehicle's (xway, dir,
  segment) and 20 above 87, as in that generator, and halves speeds in a segment with an
  accident; speeds stay within 0..100, so a trip reports from every segment it crosses;
* accidents: on each expressway the first about 5-15 minutes in, the next about 15-21
  minutes after the previous one started (about one per 20 minutes): a vehicle in a travel
  lane stops where its next report puts it and a vehicle of another report phase, at most
  4,400 ft behind in the same direction, drives to the same lane and position and stops
  too; both report that place (speed 0) until 10-20 minutes after the accident becomes
  detectable (4 reports at the place), then drive on;
* requests: each position report is followed, with probability 0.5%, by an account balance
  request (type 2) and with probability 0.1% by a daily expenditure request (type 3, day
  uniform in 1..69, the vehicle's expressway): the spec's 1% of reports with a request, of
  which 50% balances and 10% daily expenditures; the other 40%, travel-time requests
  (type 4), are not emitted, as in the sample. A request line repeats its report's fields
  (as the sample's do), carries a query id (one counter for both types, increasing through
  the file) and follows its report;
* history: one row ``vid,day,xway,tolls`` per vehicle id and day 1..69 on the vehicle's
  expressway, tolls uniform in 10..99 (as the sample's).

Lines are sorted by time, then vehicle id. Expressways are independent copies of the
traffic (own random draws, distinct vehicle ids, numbered in order of first entry).

Cost: one Python step per simulated second, each O(vehicles reporting that second) numpy
work over all expressways, plus O(vehicles) when an accident starts; lines are formatted
in chunks by pyarrow on a second thread. Measured on the 2-core development machine: 3
hours of one expressway (22.4 M reports, 1.1 GB, and a 369 MB history) in 48 s
(docs/LINEAR_ROAD.md has the numbers).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from psoup.linear_road.network import EXIT_LANE, REPORT_EVERY, SEGMENT_FEET, SEGMENTS
from psoup.progress import progress_bar

RUSH_HOUR = 10_800  # seconds of the arrival curve's half sine: the benchmark's 3 hours
ROAD_FEET = SEGMENTS * SEGMENT_FEET  # positions 0 .. 527,999
FEET_PER_MPH = REPORT_EVERY * SEGMENT_FEET // 3600  # 44 ft in 30 s per mph
MAX_SPEED = 100
BASE_ARRIVALS = 20  # vehicles per second and expressway, times the arrival multiplier
ARRIVAL_FLOOR = 0.8
ARRIVAL_DRAWS = 64  # > BASE_ARRIVALS x (1 + ARRIVAL_FLOOR + 1): enough to end every draw
ROUTE_BUFFER = 2  # the exit ramp is at least this many segments downstream of the entry
DOWNTOWN = (SEGMENTS // 3, 2 * SEGMENTS // 3)  # segments 33 .. 65 from the upstream end
DOWNTOWN_SHARE = 0.8  # of the trips entering upstream of downtown, exit there
ENTRY_SPEED, ENTRY_LANE_SPEED, TRAVEL_SPEED, EXIT_SPEED = 10, 40, 70, 10
FREE_FLOW = 72  # vehicles in a segment and direction before speeds drop (24 per lane)
CONGESTION_STEP = 15
CONGESTION_MPH = 10
LANE_CHANGE = 0.4
REENTER, REENTER_GAP = 0.10, (1_000, 2_000)
# Of the returning vehicles, the share that enters where it left (its exit segment, the
# same direction): the first report there is a toll alert under the validator's
# convention, though the segment is the one of its previous report.
REENTER_WHERE_LEFT = 0.5
BALANCE_P, DAILY_P = 0.005, 0.001  # per position report
HISTORY_DAYS = 69
HISTORY_TOLLS = (10, 100)
FIRST_ACCIDENT = (300, 901)  # seconds
ACCIDENT_EVERY = (900, 1_261)  # from one accident's start to the next one's, at least
ACCIDENT_CLEAR = (600, 1_142)  # detection to the first report that moved: this + 30..59 s
ACCIDENT_TRIES = 20
STOP_REPORTS = 4
FIELDS = 15  # type time vid spd xway lane dir seg pos qid sinit send dow tod day
NAMES = ("type", "time", "vid", "spd", "xway", "lane", "dir", "seg", "pos", "qid")
NAMES += ("sinit", "send", "dow", "tod", "day")
CHUNK_ROWS = 1 << 20

# Vehicle state: one int64 column per vehicle, one array per report phase (time % 30).
VID, XWAY, DIR, EXIT, POS, SPD, LANE, ACC, TPOS, TLANE, AID = range(11)
STATE = 11
DRIVING, STOPPED, HEADING = 0, 1, 2  # ACC: heading = driving to an accident's place


@dataclass
class GenerateSummary:
    """What :func:`generate` wrote."""

    path: Path
    history: Path
    xways: int
    duration: int
    seed: int
    reports: int = 0  # type-0 lines
    balances: int = 0  # type-2 lines
    daily: int = 0  # type-3 lines
    vehicles: int = 0  # distinct vehicle ids
    trips: int = 0  # entries onto an expressway (re-entries included)
    accidents: int = 0  # pairs of vehicles stopped at one place
    peak_reports: int = 0  # most type-0 lines in one second
    peak_time: int = 0
    history_rows: int = 0
    bytes: int = 0
    history_bytes: int = 0
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """The summary as text lines (what ``psoup linear-road generate`` prints)."""
        rate = self.reports / self.duration if self.duration else 0.0
        return [
            f"input    {self.path} ({_size(self.bytes)}): {self.xways} expressway(s), "
            f"{self.duration:,} s, seed {self.seed}",
            f"reports  {self.reports:,} ({rate:,.0f}/s on average, peak {self.peak_reports:,}/s "
            f"at {self.peak_time:,} s)",
            f"vehicles {self.vehicles:,} ({self.trips:,} trips), accidents {self.accidents}",
            f"requests {self.balances:,} account balance (type 2), "
            f"{self.daily:,} daily expenditure (type 3)",
            f"history  {self.history} ({_size(self.history_bytes)}, {self.history_rows:,} rows)",
            f"time     {self.seconds:.1f} s",
        ]


def _size(n: int) -> str:
    """A byte count for people: ``_size(1_130_000_000)`` -> "1.1 GB"."""
    if n < 1000:
        return f"{n} B"
    for unit in ("kB", "MB"):
        n /= 1000
        if n < 1000:
            return f"{n:,.1f} {unit}"
    return f"{n / 1000:,.1f} GB"


def arrival_counts(rng: np.random.Generator, duration: int) -> np.ndarray:
    """New vehicles per second on one expressway, seconds 0 .. duration-1.

    As in walmartlabs/LinearGenerator: vehicle j of second t is admitted while
    j < 20 x (sin(pi t / 10800) + 0.8 + U_j), a fresh uniform U_j per vehicle. O(duration).
    """
    t = np.arange(duration)
    wave = np.sin(np.pi * (t % RUSH_HOUR) / RUSH_HOUR)
    u = rng.random((duration, ARRIVAL_DRAWS))
    admit = np.arange(ARRIVAL_DRAWS) < BASE_ARRIVALS * (wave[:, None] + ARRIVAL_FLOOR + u)
    return np.argmin(admit, axis=1)  # the first refusal


class _Road:
    """The simulation state of all expressways; :meth:`second` advances it by one second.

    Vehicles are columns of int64 arrays (rows VID .. AID), one array per report phase
    (time % 30): the vehicles of phase p report at every t with t % 30 == p."""

    def __init__(self, xways: int, duration: int, seed: int):
        self.xways, self.duration = xways, duration
        arrivals_seq, road_seq = _streams(seed)[:2]
        self.arrivals = np.stack(  # one stream per xway: a shorter run is a prefix
            [arrival_counts(np.random.default_rng(s), duration) for s in arrivals_seq.spawn(xways)]
        )
        self.rng = np.random.default_rng(road_seq)
        self.phases = [np.empty((STATE, 0), dtype=np.int64) for _ in range(REPORT_EVERY)]
        self.occupancy = np.zeros(xways * 2 * SEGMENTS, dtype=np.int64)  # by _key
        # time -> [[vid...], [xway...], [dir...], [exit segment...]] of returning vehicles
        self.reentries: dict[int, list[np.ndarray]] = {}
        self.xway_of: list[np.ndarray] = []  # of the new vehicles, in id order
        self.next_vid = 0
        self.next_qid = 0
        self.trips = 0
        # Accidents, one entry each; a new one may start on xway x once t >= next_accident[x].
        self.next_accident = self.rng.integers(*FIRST_ACCIDENT, size=xways)
        self.acc_key: list[int] = []
        self.acc_start: list[int] = []
        self.acc_clear: list[float] = []  # the stopped vehicles drive on from this step
        self.acc_xway: list[int] = []

    # -- vehicles --------------------------------------------------------------------
    def _enter(self, t: int) -> np.ndarray:
        """State of the vehicles entering at second t (new ones, then returning ones)."""
        counts = self.arrivals[:, t]
        n_new = int(counts.sum())
        vids = [np.arange(self.next_vid, self.next_vid + n_new)]
        xw = [np.repeat(np.arange(self.xways), counts)]
        self.next_vid += n_new
        self.xway_of.append(xw[0])
        last_dir, last_exit = [np.full(n_new, -1)], [np.full(n_new, -1)]
        for back in self.reentries.pop(t, []):
            vids.append(back[0])
            xw.append(back[1])
            last_dir.append(back[2])
            last_exit.append(back[3])
        vid, xway = np.concatenate(vids), np.concatenate(xw)
        n = len(vid)
        self.trips += n
        direction = self.rng.integers(0, 2, n)
        entry = self.rng.integers(0, SEGMENTS - ROUTE_BUFFER, n) + direction * ROUTE_BUFFER
        if n > n_new:  # some come back: half of them where they left, if a trip fits there
            ld, le = np.concatenate(last_dir), np.concatenate(last_exit)
            up = np.where(ld == 0, le, SEGMENTS - 1 - le)
            same = (ld >= 0) & (up < SEGMENTS - ROUTE_BUFFER)
            same &= self.rng.random(n) < REENTER_WHERE_LEFT
            direction = np.where(same, ld, direction)
            entry = np.where(same, le, entry)
        cars = np.zeros((STATE, n), dtype=np.int64)
        cars[VID], cars[XWAY], cars[DIR] = vid, xway, direction
        cars[EXIT] = self._exit_segments(direction, entry)
        cars[POS] = entry * SEGMENT_FEET + direction * (SEGMENT_FEET - 1)
        cars[SPD] = ENTRY_SPEED
        cars[AID] = -1
        self.occupancy += np.bincount(_key(cars), minlength=len(self.occupancy))
        return cars

    def _exit_segments(self, direction: np.ndarray, entry: np.ndarray) -> np.ndarray:
        """Exit segment per trip, drawn as the sample's generator draws it. O(len(entry)).

        In segments counted from the upstream end: uniform over up+2 .. up+101, capped at
        99 (the far end); but 80% of the trips entering upstream of downtown (the middle
        third) exit downtown, uniformly; always at least ROUTE_BUFFER downstream."""
        rng, n = self.rng, len(entry)
        up = np.where(direction == 0, entry, SEGMENTS - 1 - entry)
        far = np.minimum(up + ROUTE_BUFFER + rng.integers(0, SEGMENTS - up), SEGMENTS - 1)
        to_town = (up < DOWNTOWN[0]) & (rng.random(n) < DOWNTOWN_SHARE)
        down = np.where(to_town, rng.integers(*DOWNTOWN, size=n), far)
        down = np.maximum(down, up + ROUTE_BUFFER)
        return np.where(direction == 0, down, SEGMENTS - 1 - down)

    def _leave(self, t: int, gone: np.ndarray) -> None:
        """Vehicles that reported from an exit ramp: free their segment; some come back."""
        self.occupancy -= np.bincount(_key(gone), minlength=len(self.occupancy))
        back = gone[:, self.rng.random(gone.shape[1]) < REENTER]
        when = t + self.rng.integers(*REENTER_GAP, size=back.shape[1])
        for w in np.unique(when[when < self.duration]).tolist():
            self.reentries.setdefault(w, []).append(back[[VID, XWAY, DIR, EXIT]][:, when == w])

    # -- one second ------------------------------------------------------------------
    def second(self, t: int) -> np.ndarray:
        """Lines (the 15 fields as rows, one column per line) for second t, and moves that
        second's vehicles on. O(vehicles reporting at t) numpy work."""
        phase = t % REPORT_EVERY
        cars = np.concatenate((self.phases[phase], self._enter(t)), axis=1)
        cars = cars[:, np.argsort(cars[VID], kind="stable")]
        out = self._lines(t, cars)
        gone = cars[LANE] == EXIT_LANE
        if gone.any():
            self._leave(t, cars[:, gone])
            cars = cars[:, ~gone]
        self.phases[phase] = self._move(t, cars)
        return out

    def _lines(self, t: int, cars: np.ndarray) -> np.ndarray:
        """Position reports of ``cars`` at t, each followed by its request if it makes one."""
        n = cars.shape[1]
        u = self.rng.random(n)
        kind = np.where(u < BALANCE_P, 2, np.where(u < BALANCE_P + DAILY_P, 3, 0))
        asks = kind > 0
        rows = np.repeat(np.arange(n), 1 + asks) if asks.any() else slice(None)
        c = cars[:, rows]
        out = np.full((FIELDS, c.shape[1]), -1, dtype=np.int64)
        out[0] = 0
        out[1] = t
        out[2], out[3], out[4] = c[VID], c[SPD], c[XWAY]
        out[5], out[6], out[7], out[8] = c[LANE], c[DIR], c[POS] // SEGMENT_FEET, c[POS]
        if asks.any():
            q = np.flatnonzero(np.diff(rows) == 0) + 1  # each request line follows its report
            k = kind[asks]
            out[0, q] = k
            out[9, q] = np.arange(self.next_qid, self.next_qid + len(q))
            self.next_qid += len(q)
            daily = q[k == 3]
            out[14, daily] = self.rng.integers(1, HISTORY_DAYS + 1, size=len(daily))
        return out

    def _move(self, t: int, cars: np.ndarray) -> np.ndarray:
        """Where ``cars`` (reporting at t) will report at t + 30. O(vehicles in cars)."""
        rng, n = self.rng, cars.shape[1]
        cars = cars.copy()
        key = _key(cars)
        seg = cars[POS] // SEGMENT_FEET
        crowd = self.occupancy[key]
        slower = CONGESTION_MPH * (
            (crowd > FREE_FLOW).astype(np.int64) + (crowd > FREE_FLOW + CONGESTION_STEP)
        )
        lane = cars[LANE].copy()
        on_ramp = lane == 0
        spd = np.where(
            on_ramp,
            ENTRY_LANE_SPEED - slower + rng.integers(-4, 5, n),
            TRAVEL_SPEED - slower + rng.integers(-9, 10, n),
        )
        blocked = self._accident_keys(t)
        if len(blocked):
            spd = np.where(np.isin(key, blocked), spd // 2, spd)
        spd = np.clip(spd, 1, MAX_SPEED)
        stopped = cars[ACC] == STOPPED
        if stopped.any():
            clear = np.asarray(self.acc_clear)[np.where(stopped, cars[AID], 0)]
            resumed = stopped & (t >= clear)
            stopped &= ~resumed
            cars[ACC, resumed] = DRIVING
            cars[AID, resumed] = -1
            spd[stopped] = 0
        pos = np.clip(cars[POS] + (1 - 2 * cars[DIR]) * spd * FEET_PER_MPH, 0, ROAD_FEET - 1)
        new_lane = lane.copy()
        for i in np.flatnonzero(cars[ACC] == HEADING).tolist():  # rare: an accident's 2nd car
            pos[i], new_lane[i] = cars[TPOS, i], cars[TLANE, i]
            spd[i] = -(-abs(int(cars[TPOS, i] - cars[POS, i])) // FEET_PER_MPH)
            cars[ACC, i] = STOPPED
            self._arrived(t, int(cars[AID, i]))
        new_lane[on_ramp & (pos // SEGMENT_FEET != seg)] = 1
        driving = cars[ACC] == DRIVING
        change = driving & (lane >= 1) & (lane <= 3) & (rng.random(n) < LANE_CHANGE)
        new_lane[change] = rng.integers(1, 4, int(change.sum()))
        leaving = driving & (pos // SEGMENT_FEET == cars[EXIT])
        new_lane[leaving] = EXIT_LANE
        spd[leaving] = EXIT_SPEED
        cars[POS], cars[SPD], cars[LANE] = pos, spd, new_lane
        new_key = _key(cars)
        moved = new_key != key
        if moved.any():
            m = len(self.occupancy)
            self.occupancy += np.bincount(new_key[moved], minlength=m)
            self.occupancy -= np.bincount(key[moved], minlength=m)
        for x in np.flatnonzero(self.next_accident <= t).tolist():
            self._try_accident(t, x, cars)
        return cars

    # -- accidents -------------------------------------------------------------------
    def _accident_keys(self, t: int) -> np.ndarray:
        """Segment keys (xway, dir, seg) with an accident in them at t (slowed down)."""
        keys = [
            k
            for k, s, c in zip(self.acc_key, self.acc_start, self.acc_clear, strict=True)
            if s <= t < c + 2 * REPORT_EVERY
        ]
        return np.asarray(keys, dtype=np.int64)

    def _try_accident(self, t: int, x: int, cars: np.ndarray) -> None:
        """Stop a vehicle of ``cars`` (just moved, to report at t + 30) in a travel lane of
        xway x, and send a vehicle of another phase, at most 4,400 ft behind it, to the same
        place. O(vehicles on the road)."""
        lane = cars[LANE]
        first = np.flatnonzero(
            (cars[XWAY] == x) & (cars[ACC] == DRIVING) & (lane >= 1) & (lane <= 3)
        )
        if not len(first):
            return
        others = [(p, c) for p, c in enumerate(self.phases) if p != t % REPORT_EVERY]
        pool = np.concatenate([c for _, c in others], axis=1)
        phase_of = np.concatenate([np.full(c.shape[1], p) for p, c in others])
        index_of = np.concatenate([np.arange(c.shape[1]) for _, c in others])
        pl = pool[LANE]
        ok = np.flatnonzero((pool[XWAY] == x) & (pool[ACC] == DRIVING) & (pl >= 1) & (pl <= 3))
        pool, phase_of, index_of = pool[:, ok], phase_of[ok], index_of[ok]
        for i in self.rng.permutation(first)[:ACCIDENT_TRIES].tolist():
            place, d = int(cars[POS, i]), int(cars[DIR, i])
            sign = 1 - 2 * d
            gap = (place - pool[POS]) * sign
            room = (pool[EXIT] - place // SEGMENT_FEET) * sign  # > 0: exits beyond the place
            fit = np.flatnonzero(
                (pool[DIR] == d)
                & (gap >= FEET_PER_MPH)
                & (gap <= MAX_SPEED * FEET_PER_MPH)
                & (room > 0)
            )
            if not len(fit):
                continue
            j = int(self.rng.choice(fit))
            aid = len(self.acc_key)
            self.acc_key.append(int(_key(cars[:, i : i + 1])[0]))
            self.acc_start.append(t)
            self.acc_clear.append(math.inf)
            self.acc_xway.append(x)
            cars[ACC, i], cars[AID, i] = STOPPED, aid
            other = self.phases[int(phase_of[j])]
            r = int(index_of[j])
            other[ACC, r], other[AID, r] = HEADING, aid
            other[TPOS, r], other[TLANE, r] = place, cars[LANE, i]
            self.next_accident[x] = np.iinfo(np.int64).max  # set when the 2nd car arrives
            return

    def _arrived(self, t: int, aid: int) -> None:
        """The second vehicle of accident ``aid`` steps to the place at t: it reports there
        from t + 30, and its 4th report there (t + 120) makes the accident detectable."""
        detected = t + STOP_REPORTS * REPORT_EVERY
        clear = detected - REPORT_EVERY + int(self.rng.integers(*ACCIDENT_CLEAR))
        self.acc_clear[aid] = clear
        x = self.acc_xway[aid]
        nxt = self.acc_start[aid] + int(self.rng.integers(*ACCIDENT_EVERY))
        self.next_accident[x] = max(nxt, clear + 3 * REPORT_EVERY)

    @property
    def accidents(self) -> int:
        return len(self.acc_key)


def _streams(seed: int) -> list[np.random.SeedSequence]:
    """Independent random streams: arrivals, the road, the history."""
    return np.random.SeedSequence(seed).spawn(3)


def _key(cars: np.ndarray) -> np.ndarray:
    """Segment key (xway, dir, seg) of each vehicle (column of a state array)."""
    return (cars[XWAY] * 2 + cars[DIR]) * SEGMENTS + cars[POS] // SEGMENT_FEET


class _Writer:
    """Appends blocks (one row per field, one column per line) to a headerless CSV file,
    formatted by pyarrow on a background thread."""

    def __init__(self, path: Path, names: tuple[str, ...]):
        self.schema = pa.schema([(n, pa.int64()) for n in names])
        options = pacsv.WriteOptions(include_header=False)
        self.csv = pacsv.CSVWriter(str(path), self.schema, write_options=options)
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.pending: list[Future] = []
        self.blocks: list[np.ndarray] = []
        self.rows = 0

    def add(self, block: np.ndarray) -> None:
        self.blocks.append(block)
        self.rows += block.shape[1]
        if self.rows >= CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.blocks:
            return
        cols = np.concatenate(self.blocks, axis=1)
        self.blocks, self.rows = [], 0
        table = pa.Table.from_arrays([pa.array(c) for c in cols], schema=self.schema)
        while len(self.pending) >= 2:  # bound the memory held by queued blocks
            self.pending.pop(0).result()
        self.pending.append(self.pool.submit(self.csv.write_table, table))

    def close(self) -> None:
        self.flush()
        for f in self.pending:
            f.result()
        self.pool.shutdown()
        self.csv.close()


def generate(
    path: Path | str,
    xways: int = 1,
    duration: int = RUSH_HOUR,
    seed: int = 1,
    history: Path | str | None = None,
    progress: bool = True,
) -> GenerateSummary:
    """Write ``duration`` seconds of input for ``xways`` expressways to ``path`` and the
    historical tolls to ``history`` (default: ``path`` with suffix ``.tolls.dat``).

    The same arguments give byte-identical files, and a shorter run's input is the start
    of a longer one's. Cost: O(lines) numpy work with one Python step per simulated second;
    48 s for the 3 hours of one expressway (22.4 M reports) on 2 cores.
    """
    if xways < 1 or duration < 1:
        raise ValueError("xways and duration must be positive")
    if seed < 0:
        raise ValueError("seed must be >= 0")
    started = time.perf_counter()
    path = Path(path)
    history = Path(history) if history is not None else path.with_suffix(".tolls.dat")
    path.parent.mkdir(parents=True, exist_ok=True)
    history.parent.mkdir(parents=True, exist_ok=True)
    summary = GenerateSummary(path, history, xways, duration, seed)
    road = _Road(xways, duration, seed)
    writer = _Writer(path, NAMES)
    try:
        bar = progress_bar(total=duration, desc="simulated seconds", unit="s", enabled=progress)
        with bar:
            for t in range(duration):
                lines = road.second(t)
                writer.add(lines)
                kinds = np.bincount(lines[0], minlength=4)
                summary.reports += int(kinds[0])
                summary.balances += int(kinds[2])
                summary.daily += int(kinds[3])
                if kinds[0] > summary.peak_reports:
                    summary.peak_reports, summary.peak_time = int(kinds[0]), t
                bar.update()
    finally:
        writer.close()
    summary.vehicles, summary.trips, summary.accidents = road.next_vid, road.trips, road.accidents
    xway_of = np.concatenate(road.xway_of) if road.xway_of else np.empty(0, dtype=np.int64)
    summary.history_rows = write_history(history, xway_of, seed, progress)
    summary.bytes, summary.history_bytes = path.stat().st_size, history.stat().st_size
    summary.seconds = time.perf_counter() - started
    return summary


def write_history(path: Path, xway_of: np.ndarray, seed: int, progress: bool = False) -> int:
    """Write ``vid,day,xway,tolls`` for every vehicle id (``xway_of[vid]`` its expressway)
    and day 1..69, tolls uniform in 10..99. Returns the row count. O(vehicles x 69)."""
    rng = np.random.default_rng(_streams(seed)[2])
    writer = _Writer(path, ("vid", "day", "xway", "tolls"))
    block = CHUNK_ROWS // HISTORY_DAYS + 1
    try:
        starts = range(0, len(xway_of), block)
        blocks = progress_bar(
            len(starts), desc="history", unit="block", enabled=progress, leave=False
        )
        for a in starts:
            blocks.update(1)
            vids = np.arange(a, min(a + block, len(xway_of)))
            rows = np.empty((4, len(vids) * HISTORY_DAYS), dtype=np.int64)
            rows[0] = np.repeat(vids, HISTORY_DAYS)
            rows[1] = np.tile(np.arange(1, HISTORY_DAYS + 1), len(vids))
            rows[2] = np.repeat(xway_of[vids], HISTORY_DAYS)
            rows[3] = rng.integers(*HISTORY_TOLLS, size=rows.shape[1])
            writer.add(rows)
        blocks.close()
    finally:
        writer.close()
    return len(xway_of) * HISTORY_DAYS


def cli_main(args: argparse.Namespace) -> int:
    """``psoup linear-road generate``: write the files, print the summary. Returns 0 (2 on
    a bad argument, 1 when a file cannot be written)."""
    for option, path in (("--out", args.out), ("--history", args.history)):
        if path is not None and Path(path).is_dir():
            print(f"error: {option} {path} is a directory: give a file to write", file=sys.stderr)
            return 2
    try:
        summary = generate(
            args.out,
            xways=args.xways,
            duration=args.duration,
            seed=args.seed,
            history=args.history,
            progress=True,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("\n".join(summary.lines()))
    sys.stdout.flush()
    return 0
