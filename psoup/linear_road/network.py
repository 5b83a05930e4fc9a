"""The Linear Road toll network: position reports in, toll notifications, accident alerts
and toll assessments out, computed per batch with numpy.

State is kept in arrays indexed by vehicle slot and by segment key (xway, dir, seg), so a
batch of n reports costs O(n) numpy work plus O(1) Python steps per batch; Python work per
report happens only for the rare reports that change accident state (a vehicle becoming
stopped, or a stopped vehicle moving). The rules are the spec's (seeds/000 section 3.2),
with the original validator's conventions (see psoup/linear_road/check.py, which this module is
checked against):

* minute(t) = t // 60 + 1; a segment's speed in a minute is the mean over its vehicles of
  each vehicle's mean speed there; LAV(m) truncates the mean of the minutes m-5 .. m-1
  that have reports (-1 if none); the toll of minute m counts minute m-1's vehicles;
* toll = 2 (n - 50)^2 when LAV < 40 and n > 50, 0 within 4 segments upstream of an
  accident that is in its segment during minute m-1;
* a vehicle is stopped at its 4th consecutive report (30 s apart) from the same
  (xway, lane, pos, dir); two stopped at one travel-lane place make an accident, in its
  segment from the minute the later is stopped through the last minute both were seen
  there;
* a toll notification answers a vehicle's first report outside the exit lane from each
  (direction, segment) over the whole run (the validator's convention); with
  ``every_crossing`` (the spec's text) every report from a segment other than the
  vehicle's previous report's (first report included) outside the exit lane. Near an
  accident it comes with an accident alert;
* at a notification the toll notified at the vehicle's previous one is charged (a
  toll assessment) and the vehicle's balance there is recorded (a balance row): a trip's
  last toll is charged at the next notification, on a later trip, or never.
"""

from __future__ import annotations

import pickle
import threading
from dataclasses import dataclass, field

import numpy as np

EXIT_LANE = 4
SEGMENTS = 100
SEGMENT_FEET = 5280
REPORT_EVERY = 30
STOP_REPORTS = 4
LAV_MINUTES = 5
TOLL_FREE_VEHICLES = 50
TOLL_FREE_SPEED = 40
ACCIDENT_REACH = 5  # segments downstream (including the segment itself) that suppress tolls
REPORT_FIELDS = ("time", "vid", "spd", "xway", "lane", "dir", "seg", "pos")
_SEEN_BYTES = (2 * SEGMENTS + 7) // 8
# The numpy arrays a snapshot copies rather than pickles: per vehicle slot, and the
# vid -> slot map.
_VEHICLE_ARRAYS = ("_slot_of", "_vids", "_last_seg", "_last_place", "_last_time", "_same",
                   "_quoted", "_quoted_xway", "_balance", "_seen")  # fmt: skip
# The per-slot arrays (grown together) and every vehicle array's value in unused slots.
_SLOT_ARRAYS = ("_last_seg", "_last_place", "_last_time", "_same", "_quoted", "_quoted_xway",
                "_balance", "_seen")  # fmt: skip
_FILLS = {"_slot_of": -1, "_last_seg": -1, "_last_place": -1, "_last_time": -(10**9),
          "_same": 0, "_quoted": 0, "_quoted_xway": 0, "_balance": 0, "_seen": 0}  # fmt: skip
_SNAPSHOT_MAGIC = b"psoup-lr-net-1\n"  # a snapshot's first bytes (a pickle starts b"\x80")


@dataclass
class Outputs:
    """Rows derived from one batch, column-wise (numpy int64 arrays)."""

    tolls: dict[str, np.ndarray] = field(default_factory=dict)  # time vid xway dir seg lav toll
    alerts: dict[str, np.ndarray] = field(default_factory=dict)  # time vid xway dir seg
    assessments: dict[str, np.ndarray] = field(default_factory=dict)  # time vid xway toll
    balances: dict[str, np.ndarray] = field(default_factory=dict)  # time vid bal


@dataclass
class _Accident:
    place: tuple[int, int, int, int]  # xway, lane, pos, dir
    vids: tuple[int, int]
    slots: tuple[int, int]
    first_minute: int
    left: dict[int, int] = field(default_factory=dict)  # vid -> its last report here, once gone

    @property
    def ongoing(self) -> bool:
        return not self.left


class TollNetwork:
    """Consumes position reports in time order; produces the derived rows."""

    def __init__(self, xways: int = 1, every_crossing: bool = False):
        self.xways = xways
        self.every_crossing = every_crossing
        self._keys = xways * 2 * SEGMENTS
        # Per vehicle slot (grown on demand); vid -> slot is a direct array for small vids.
        self._slot_of = np.full(0, -1, dtype=np.int64)
        self._vids = np.empty(0, dtype=np.int64)
        cap = 0
        self._last_seg = np.empty(cap, dtype=np.int64)  # -1: no report yet
        self._last_place = np.empty((cap, 4), dtype=np.int64)  # xway, lane, pos, dir
        self._last_time = np.empty(cap, dtype=np.int64)
        self._same = np.empty(cap, dtype=np.int64)  # consecutive reports at last place
        self._quoted = np.empty(cap, dtype=np.int64)  # toll notified at the latest alert
        self._quoted_xway = np.empty(cap, dtype=np.int64)
        self._balance = np.empty(cap, dtype=np.int64)  # tolls charged so far
        # Bit dir * SEGMENTS + seg: the vehicle was alerted in that (direction, segment).
        self._seen = np.empty((cap, _SEEN_BYTES), dtype=np.uint8)
        # Per minute: sums for the open minute, finished averages and counts for older ones.
        self._minute = 0
        self._veh_key: list[np.ndarray] = []  # (segment key * big + slot) per report, open minute
        self._veh_spd: list[np.ndarray] = []
        self._avg: dict[int, np.ndarray] = {}  # minute -> per key mean speed (nan: no report)
        self._cars: dict[int, np.ndarray] = {}  # minute -> per key distinct vehicles
        # Accidents.
        self._stopped: dict[tuple[int, int, int, int], set[int]] = {}
        self._accidents: list[_Accident] = []
        self._shadow: dict[str, np.ndarray] = {}  # the arrays' copies of the last snapshot
        self._shadow_ready: threading.Thread | None = None  # the last ``_prefault``
        # Longer arrays made ahead for the next growth (``_ahead``), and its last thread.
        self._shadow_spare: dict[str, np.ndarray] = {}
        self._shadow_ahead: threading.Thread | None = None

    # -- vehicles -----------------------------------------------------------------------
    def _slots(self, vids: np.ndarray) -> np.ndarray:
        top = int(vids.max())
        if top >= len(self._slot_of):
            self._slot_of = self._longer("_slot_of", top + 1)
            self._prefault({"_slot_of": len(self._slot_of)})
        elif 4 * top >= 3 * len(self._slot_of):
            self._ahead(("_slot_of",), 2 * len(self._slot_of))
        slots = self._slot_of[vids]
        new = np.flatnonzero(slots < 0)
        if len(new):
            n0 = len(self._vids)
            fresh = np.arange(n0, n0 + len(new))
            self._slot_of[vids[new]] = fresh
            slots[new] = fresh
            self._vids = np.concatenate((self._vids, vids[new]))
            self._grow(n0 + len(new))
        return slots

    def _grow(self, n: int) -> None:
        cap = len(self._last_seg)
        if n > cap:
            for name in _SLOT_ARRAYS:
                setattr(self, name, self._longer(name, n))
            self._prefault({name: len(self._last_seg) for name in ("_vids", *_SLOT_ARRAYS)})
        elif 4 * n >= 3 * cap:
            self._ahead(_SLOT_ARRAYS, 2 * cap)

    def _longer(self, name: str, n: int) -> np.ndarray:
        """Array ``name`` grown to hold ``n`` (at least doubled), its new slots filled
        (``_FILLS``): into the array ``_ahead`` made when it is long enough, else a new
        one. O(length) to copy; making a new one also touches fresh memory, which is slow
        here (a million vehicles' arrays: ~80-100 ms under the engine lock)."""
        a = getattr(self, name)
        out = self._shadow_spare.pop(name, None)
        if out is None or len(out) < n:
            shape = (max(n, 2 * len(a), 1024), *a.shape[1:])
            out = np.full(shape, _FILLS[name], dtype=a.dtype)
        out[: len(a)] = a
        return out

    def _ahead(self, names: tuple[str, ...], n: int) -> None:
        """Make the next, ``n`` long arrays of ``names`` for ``_longer`` (filled) in a
        thread of its own, unless they are made or being made: called once the arrays
        are three quarters full."""
        if self._shadow_ahead is not None and self._shadow_ahead.is_alive():
            return
        todo = {name: n for name in names if len(self._shadow_spare.get(name, ())) < n}
        if todo:
            self._shadow_ahead = self._filled_in_thread(self._shadow_spare, todo, _FILLS)

    def _prefault(self, sizes: dict[str, int]) -> None:
        """Have the next snapshot's copies of the arrays ``sizes`` names ready at those
        lengths, their memory touched in a thread of its own. A snapshot copies under
        the engine lock: the one after the arrays doubled to a million vehicles held
        Linear Road's front-end 69-97 ms copying into fresh memory, against 5-15 for the
        others (durable L = 40 and 44, stop 37)."""
        self._shadow_ready = self._filled_in_thread(self._shadow, sizes, {})

    def _filled_in_thread(
        self, into: dict[str, np.ndarray], sizes: dict[str, int], fills: dict[str, int]
    ) -> threading.Thread:
        """Started: a thread that makes an array for each of ``sizes``' names, as long
        as given and shaped and typed as the network's own, filled with ``fills[name]``
        (0 if absent), and puts it in ``into`` unless a longer one is there. numpy fills
        with the interpreter lock released, and memory touched the first time is slow
        here: the caller's thread, which holds the engine lock, is spared both. An array
        is put in only once filled, so a caller that comes first makes its own."""
        specs = [(name, n, getattr(self, name)) for name, n in sizes.items()]

        def make() -> None:
            for name, n, a in specs:
                buf = np.full((n, *a.shape[1:]), fills.get(name, 0), dtype=a.dtype)
                if len(into.get(name, ())) < n:
                    into[name] = buf

        thread = threading.Thread(target=make, name="psoup-lr-fill", daemon=True)
        thread.start()
        return thread

    # -- minutes ------------------------------------------------------------------------
    def _key(self, xway: np.ndarray, direction: np.ndarray, seg: np.ndarray) -> np.ndarray:
        return (xway * 2 + direction) * SEGMENTS + seg

    def _close_minute(self) -> None:
        """Turn the open minute's reports into per-segment averages and vehicle counts."""
        m = self._minute
        avg = np.full(self._keys, np.nan)
        cars = np.zeros(self._keys, dtype=np.int64)
        if self._veh_key:
            vk = np.concatenate(self._veh_key)
            sp = np.concatenate(self._veh_spd)
            # Per (segment, vehicle): mean speed; then per segment: mean of those.
            uk, inv = np.unique(vk, return_inverse=True)
            per_vehicle = np.bincount(inv, weights=sp) / np.bincount(inv)
            seg_of = uk // (1 << 32)
            cars = np.bincount(seg_of, minlength=self._keys)
            sums = np.bincount(seg_of, weights=per_vehicle, minlength=self._keys)
            with np.errstate(invalid="ignore", divide="ignore"):
                avg = np.where(cars > 0, sums / np.maximum(cars, 1), np.nan)
        self._avg[m] = avg
        self._cars[m] = cars
        self._veh_key, self._veh_spd = [], []
        for old in [k for k in self._avg if k < m - LAV_MINUTES]:
            del self._avg[old], self._cars[old]

    def _lav(self, m: int, keys: np.ndarray) -> np.ndarray:
        rows = [self._avg[mm][keys] for mm in range(m - LAV_MINUTES, m) if mm in self._avg]
        if not rows:
            return np.full(len(keys), -1, dtype=np.int64)
        stack = np.vstack(rows)
        have = ~np.isnan(stack)
        n = have.sum(axis=0)
        total = np.where(have, stack, 0.0).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / n
        return np.where(n > 0, np.trunc(mean), -1).astype(np.int64)

    # -- accidents ----------------------------------------------------------------------
    def _accident_keys(self, m: int) -> np.ndarray:
        """Segment keys with an accident in them during minute ``m`` (sorted).

        An accident lasts from its first minute through the last minute both vehicles
        were seen at the place (a vehicle still there: its latest report), exact for every
        minute before the current one. (The validator also merges the accidents at one
        place into one interval over the whole run, which needs the future; accidents
        at one place are each their own here.) O(accidents).
        """
        keys = []
        for a in self._accidents:
            seen = (
                a.left.get(v, int(self._last_time[s])) for v, s in zip(a.vids, a.slots, strict=True)
            )
            if a.first_minute <= m <= min(seen) // 60 + 1:
                x, _lane, pos, d = a.place
                keys.append((x * 2 + d) * SEGMENTS + pos // SEGMENT_FEET)
        return np.unique(np.array(keys, dtype=np.int64))

    def _ongoing(self, a: _Accident, t: int) -> bool:
        """Both vehicles still there: neither left, nor missed a report (vanished)."""
        return a.ongoing and all(self._last_time[s] >= t - REPORT_EVERY for s in a.slots)

    def _update_stops(self, t, vids, slots, before, before_time, place, moved, now_stopped):
        """Rare: vehicles that just stopped or just left a stop. O(such vehicles)."""
        m = t // 60 + 1
        for i in np.flatnonzero(moved).tolist():
            # A stopped vehicle reports elsewhere: it leaves its place; its accident ends
            # with its last report there.
            v = int(vids[i])
            old = tuple(before[i].tolist())
            ids = self._stopped.get(old)
            if ids is not None:
                ids.discard(v)
                if not ids:
                    del self._stopped[old]
            for a in self._accidents:
                if a.ongoing and a.place == old and v in a.vids:
                    a.left[v] = int(before_time[i])
        for i in np.flatnonzero(now_stopped).tolist():
            v = int(vids[i])
            p = tuple(place[i].tolist())
            ids = self._stopped.setdefault(p, set())
            if v in ids:
                continue
            if 1 <= p[1] <= 3:
                for other in ids:
                    if not any(self._ongoing(a, t) and a.place == p for a in self._accidents):
                        pair = (other, v)
                        slots_of = (int(self._slot_of[other]), int(slots[i]))
                        self._accidents.append(_Accident(p, pair, slots_of, m))
                        break
            ids.add(v)

    # -- checkpoints --------------------------------------------------------------------
    def snapshot(self) -> list:
        """The network's whole state (per-vehicle arrays, minute statistics, accidents),
        for a checkpoint, as bytes-like parts: a header (``_SNAPSHOT_MAGIC``, the pickle's
        length), a pickle of the rest and of the arrays' shapes, then each array's used
        rows. Called under the engine lock, so the arrays are copied into buffers kept
        for the next snapshot, not encoded: numpy copies with the interpreter lock
        released, and a reused buffer touches no fresh memory (memory touched the first
        time is slow here: a first 200 MB numpy copy took 483 ms, the next 38 ms, and
        pickling the state held Linear Road's front-end up to ~470 ms in a durable run,
        copying it 4-46 ms). The parts stay unchanged until the next call.
        O(vehicles + minutes kept) of copying."""
        n = len(self._vids)
        rest = {k: v for k, v in self.__dict__.items()
                if k not in _VEHICLE_ARRAYS and not k.startswith("_shadow")}  # fmt: skip
        shapes, parts = [], []
        for name in _VEHICLE_ARRAYS:
            a = getattr(self, name)
            used = len(a) if name == "_slot_of" else n  # the map is by vid, not slot
            buf = self._shadow.get(name)
            if buf is None or len(buf) < used:  # grown (shape and type never change)
                buf = self._shadow[name] = np.empty((len(a), *a.shape[1:]), dtype=a.dtype)
            np.copyto(buf[:used], a[:used])
            shapes.append((name, a.dtype.str, (used, *a.shape[1:])))
            parts.append(buf[:used])
        head = pickle.dumps((rest, shapes), protocol=pickle.HIGHEST_PROTOCOL)
        return [_SNAPSHOT_MAGIC + len(head).to_bytes(8, "little"), head, *parts]

    def restore(self, blob: bytes) -> None:
        """Become the network ``snapshot`` saw (its convention included); ``blob`` is its
        parts joined, or a pickle of the whole state (checkpoints written before parts)."""
        if not blob.startswith(_SNAPSHOT_MAGIC):
            self.__dict__.update(pickle.loads(blob))
            return
        at = len(_SNAPSHOT_MAGIC) + 8
        size = int.from_bytes(blob[at - 8 : at], "little")
        rest, shapes = pickle.loads(blob[at : at + size])
        self.__dict__.update(rest)
        at += size
        for name, dtype, shape in shapes:
            count = int(np.prod(shape))
            a = np.frombuffer(blob, dtype=dtype, count=count, offset=at).reshape(shape).copy()
            setattr(self, name, a)
            at += a.nbytes

    # -- the batch ----------------------------------------------------------------------
    def process(self, reports: dict[str, np.ndarray]) -> Outputs:
        """Apply a batch of reports (columns REPORT_FIELDS, times non-decreasing).

        Returns the derived rows. Cost: O(n) numpy work per distinct time in the batch.
        """
        t_all = np.asarray(reports["time"], dtype=np.int64)
        out_parts: list[Outputs] = []
        if not len(t_all):
            return _merge([])
        cuts = np.flatnonzero(np.diff(t_all)) + 1
        for a, z in zip([0, *cuts.tolist()], [*cuts.tolist(), len(t_all)], strict=True):
            cols = {f: np.asarray(reports[f], dtype=np.int64)[a:z] for f in REPORT_FIELDS}
            # A vehicle reports at most once per second; split if a batch says otherwise.
            out_parts.extend(self._at_time(c) for c in _unique_vid_groups(cols))
        return _merge(out_parts)

    def _at_time(self, c: dict[str, np.ndarray]) -> Outputs:
        t = int(c["time"][0])
        m = t // 60 + 1
        if m != self._minute:
            if self._minute:
                self._close_minute()  # minutes without reports stay absent: no speed, no cars
            self._minute = m
        vids = c["vid"]
        slots = self._slots(vids)
        key = self._key(c["xway"], c["dir"], c["seg"])
        self._veh_key.append(key * (1 << 32) + slots)
        self._veh_spd.append(c["spd"].astype(float))

        # Stops: consecutive identical places, 30 s apart.
        place = np.stack((c["xway"], c["lane"], c["pos"], c["dir"]), axis=1)
        same = (self._last_place[slots] == place).all(axis=1) & (
            t - self._last_time[slots] == REPORT_EVERY
        )
        was_stopped = self._same[slots] >= STOP_REPORTS
        self._same[slots] = np.where(same, self._same[slots] + 1, 1)
        now_stopped = (self._same[slots] == STOP_REPORTS) & same
        moved = was_stopped & ~same
        if moved.any() or now_stopped.any():
            before, before_time = self._last_place[slots], self._last_time[slots]
            self._update_stops(t, vids, slots, before, before_time, place, moved, now_stopped)
        self._last_place[slots] = place
        self._last_time[slots] = t

        # Toll notifications: which reports get one (the convention), the charges there.
        lane_ok = c["lane"] != EXIT_LANE
        if self.every_crossing:
            changed = self._last_seg[slots] != c["seg"]
            self._last_seg[slots] = c["seg"]
            entering = np.flatnonzero(changed & lane_ok)
        else:
            bit = c["dir"] * SEGMENTS + c["seg"]
            byte, mask = bit >> 3, (1 << (bit & 7)).astype(np.uint8)
            fresh = (self._seen[slots, byte] & mask) == 0
            entering = np.flatnonzero(fresh & lane_ok)
            self._seen[slots[entering], byte[entering]] |= mask[entering]
        e_slots = slots[entering]
        charge = self._quoted[e_slots]
        self._balance[e_slots] += charge
        paid = np.flatnonzero(charge > 0)
        out = Outputs(
            assessments={
                "time": np.full(len(paid), t, dtype=np.int64),
                "vid": vids[entering][paid],
                "xway": self._quoted_xway[e_slots[paid]],
                "toll": charge[paid],
            },
            balances={
                "time": np.full(len(entering), t, dtype=np.int64),
                "vid": vids[entering],
                "bal": self._balance[e_slots],
            },
        )
        if not len(entering):
            out.tolls = _empty(("time", "vid", "xway", "dir", "seg", "lav", "toll"))
            out.alerts = _empty(("time", "vid", "xway", "dir", "seg"))
            return out
        e_key = key[entering]
        e_seg, e_dir, e_x = c["seg"][entering], c["dir"][entering], c["xway"][entering]
        lav = self._lav(m, e_key)
        cars = self._cars.get(m - 1)
        n = cars[e_key] if cars is not None else np.zeros(len(entering), dtype=np.int64)
        acc = self._accident_keys(m - 1)
        near = np.zeros(len(entering), dtype=bool)
        near_seg = np.full(len(entering), -1, dtype=np.int64)
        if len(acc):
            step = np.where(e_dir == 0, 1, -1)
            for i in range(ACCIDENT_REACH - 1, -1, -1):  # nearest accident wins
                s_i = e_seg + step * i
                inside = (s_i >= 0) & (s_i < SEGMENTS)
                k_i = self._key(e_x, e_dir, np.clip(s_i, 0, SEGMENTS - 1))
                hit = inside & np.isin(k_i, acc)
                near |= hit
                near_seg = np.where(hit, s_i, near_seg)
        toll = np.where(
            (lav < TOLL_FREE_SPEED) & (n > TOLL_FREE_VEHICLES) & ~near,
            2 * (n - TOLL_FREE_VEHICLES) ** 2,
            0,
        ).astype(np.int64)
        self._quoted[e_slots] = toll
        self._quoted_xway[e_slots] = e_x
        out.tolls = {
            "time": np.full(len(entering), t, dtype=np.int64),
            "vid": vids[entering],
            "xway": e_x,
            "dir": e_dir,
            "seg": e_seg,
            "lav": lav,
            "toll": toll,
        }
        hits = np.flatnonzero(near)
        out.alerts = {
            "time": np.full(len(hits), t, dtype=np.int64),
            "vid": vids[entering][hits],
            "xway": e_x[hits],
            "dir": e_dir[hits],
            "seg": near_seg[hits],
        }
        return out


def _empty(names) -> dict[str, np.ndarray]:
    return {n: np.empty(0, dtype=np.int64) for n in names}


def _unique_vid_groups(cols: dict[str, np.ndarray]):
    """Split one second's reports so that no group holds a vehicle twice (file order kept)."""
    vids = cols["vid"]
    if len(np.unique(vids)) == len(vids):
        yield cols
        return
    order = np.argsort(vids, kind="stable")
    sv = vids[order]
    starts = np.flatnonzero(np.r_[True, sv[1:] != sv[:-1]])
    rank = np.empty(len(vids), dtype=np.int64)
    rank[order] = np.arange(len(vids)) - np.repeat(starts, np.diff(np.r_[starts, len(vids)]))
    for r in range(int(rank.max()) + 1):
        sel = np.flatnonzero(rank == r)
        yield {k: v[sel] for k, v in cols.items()}


def _merge(parts: list[Outputs]) -> Outputs:
    out = Outputs(
        tolls=_empty(("time", "vid", "xway", "dir", "seg", "lav", "toll")),
        alerts=_empty(("time", "vid", "xway", "dir", "seg")),
        assessments=_empty(("time", "vid", "xway", "toll")),
        balances=_empty(("time", "vid", "bal")),
    )
    for name in ("tolls", "alerts", "assessments", "balances"):
        pieces = [getattr(p, name) for p in parts if len(next(iter(getattr(p, name).values())))]
        if pieces:
            setattr(out, name, {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]})
    return out
