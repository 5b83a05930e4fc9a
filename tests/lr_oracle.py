"""A brute-force Linear Road oracle: the spec's rules applied one report at a time.

Slow and obvious on purpose: it is what the engine-based toll network is checked
against. It reproduces the original validator's expected answers for
../shared/linear-road/sample20 exactly (tests/test_lr_oracle.py), which pins down the
conventions the spec leaves implicit:

* minute of a time t: t // 60 + 1;
* a segment's speed for a minute averages each reporting vehicle's own average there
  (all lanes); LAV for minute m truncates the mean of those over minutes m-5 .. m-1 that
  have reports, and is -1 when none has;
* the toll of minute m counts the distinct vehicles of the segment in minute m - 1;
  2 * (n - 50)^2 when LAV < 40 and n > 50, else 0, and 0 when an accident is in one of
  the 5 segments downstream (the segment itself included) during minute m - 1;
* a vehicle is stopped from its 4th consecutive report (30 s apart) at the same
  (xway, lane, pos, dir); an accident is two distinct vehicles stopped at the same place
  in a travel lane (1-3) at the same time; it is in its segment (pos // 5280) from the
  minute it is detected through the minute one of the vehicles reports elsewhere;
* a toll alert (and, near an accident, an accident alert naming the accident's
  segment) answers every report from a segment other than the vehicle's previous
  report's (its first report included), except from the exit lane (4);
* the toll notified on entering a segment is assessed when the vehicle reports from
  another segment; a vehicle that leaves by the exit ramp is not charged for it;
* a balance is exact at the request's time; the daily expenditure is the historical
  tolls of (vid, day, xway), duplicates summed.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

EXIT = 4
SEGMENT_FEET = 5280


def minute(t: int) -> int:
    return t // 60 + 1


def downstream(seg: int, direction: int, i: int) -> int:
    """The segment ``i`` segments downstream of ``seg`` (eastbound 0 counts up)."""
    return seg + i if direction == 0 else seg - i


def read_input(path: Path) -> list[list[int]]:
    """Every input tuple (the spec's 15 fields) in file order."""
    with open(path) as f:
        return [list(map(int, line.split(","))) for line in f if line.strip()]


def read_history(path: Path) -> dict[tuple[int, int, int], int]:
    """(vid, day, xway) -> tolls from a historical tolls file, duplicates summed."""
    out: dict[tuple[int, int, int], int] = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                v, day, x, tolls = map(int, line.split(","))
                out[(v, day, x)] = out.get((v, day, x), 0) + tolls
    return out


@dataclass
class Answers:
    """The four answer files' rows (emit = time) and the balances' full history."""

    tolls: list[tuple] = field(default_factory=list)  # (0, vid, time, emit, lav, toll)
    accidents: list[tuple] = field(default_factory=list)  # (1, time, emit, vid, seg)
    balances: list[tuple] = field(default_factory=list)  # (2, time, emit, qid, resulttime, bal)
    daily: list[tuple] = field(default_factory=list)  # (3, time, emit, qid, bal)
    assessed: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # vid -> (time, toll)

    def balance_at(self, vid: int, tau: int) -> int:
        """The vehicle's balance as of time ``tau``."""
        return sum(a for t, a in self.assessed.get(vid, ()) if t <= tau)


def _segment_minutes(reports: Iterable[list[int]]):
    speeds: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in reports:
        _, t, v, spd, x, _lane, d, s = r[:8]
        speeds[(minute(t), x, s, d)][v].append(spd)
    avgs = {k: sum(sum(a) / len(a) for a in vs.values()) / len(vs) for k, vs in speeds.items()}
    cars = {k: len(vs) for k, vs in speeds.items()}
    return avgs, cars


def _accident_minutes(reports: list[list[int]]) -> set[tuple[int, int, int, int]]:
    """(minute, xway, seg, dir) during which an accident is in that segment."""
    by_vid: dict[int, list[list[int]]] = collections.defaultdict(list)
    for r in reports:
        by_vid[r[2]].append(r)
    stops = collections.defaultdict(list)  # place -> (vid, stopped from, still at, moved at)
    for v, rs in by_vid.items():
        i = 0
        while i < len(rs):
            place = (rs[i][4], rs[i][5], rs[i][8], rs[i][6])  # xway, lane, pos, dir
            j = i
            while (
                j + 1 < len(rs)
                and (rs[j + 1][4], rs[j + 1][5], rs[j + 1][8], rs[j + 1][6]) == place
                and rs[j + 1][1] - rs[j][1] == 30
            ):
                j += 1
            if j - i + 1 >= 4 and 1 <= place[1] <= 3:
                moved = rs[j + 1][1] if j + 1 < len(rs) else None
                # Stopped while its last 4 reports are here: from the 4th until 29 s
                # after the last one (Last_1 in the spec's Table 3).
                stops[place].append((v, rs[i + 3][1], rs[j][1] + 29, moved))
            i = j + 1
    out = set()
    for (x, _lane, pos, d), ss in stops.items():
        for a in range(len(ss)):
            for b in range(a + 1, len(ss)):
                (v1, s1, e1, n1), (v2, s2, e2, n2) = ss[a], ss[b]
                if v1 == v2 or max(s1, s2) > min(e1, e2):
                    continue
                moved = [n for n in (n1, n2) if n is not None]
                last = minute(min(moved)) if moved else 10**9
                for m in range(minute(max(s1, s2)), min(last, 10**5) + 1):
                    out.add((m, x, pos // SEGMENT_FEET, d))
    return out


def run(rows: list[list[int]], history: dict[tuple[int, int, int], int]) -> Answers:
    """All answers for an input (in time order) and a toll history."""
    reports = [r for r in rows if r[0] == 0]
    avgs, cars = _segment_minutes(reports)
    accidents = _accident_minutes(reports)
    ans = Answers()

    def lav(m: int, x: int, s: int, d: int) -> int:
        vals = [avgs[k] for mm in range(m - 5, m) if (k := (mm, x, s, d)) in avgs]
        return int(sum(vals) / len(vals)) if vals else -1

    prev_seg: dict[int, int] = {}
    quoted: dict[int, int] = {}
    for r in rows:
        kind, t, v = r[0], r[1], r[2]
        if kind == 0:
            x, lane, d, s = r[4], r[5], r[6], r[7]
            before = prev_seg.get(v)
            prev_seg[v] = s
            if before is not None and before != s:
                toll = quoted.pop(v, 0)
                if toll:
                    ans.assessed.setdefault(v, []).append((t, toll))
            if before == s or lane == EXIT:
                continue
            m = minute(t)
            near = [
                downstream(s, d, i)
                for i in range(5)
                if (m - 1, x, downstream(s, d, i), d) in accidents
            ]
            n = cars.get((m - 1, x, s, d), 0)
            speed = lav(m, x, s, d)
            toll = 2 * (n - 50) ** 2 if speed < 40 and n > 50 and not near else 0
            quoted[v] = toll
            ans.tolls.append((0, v, t, t, speed, toll))
            if near:
                ans.accidents.append((1, t, t, v, near[0]))
        elif kind == 2:
            ans.balances.append((2, t, t, r[9], t, ans.balance_at(v, t)))
        elif kind == 3:
            x, qid, day = r[4], r[9], r[14]
            ans.daily.append((3, t, t, qid, history.get((v, day, x), 0)))
    return ans
