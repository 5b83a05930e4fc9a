"""The predicate index for interval factors on one attribute (seeds/002 lines 1880-1897).

The source of truth is the paper's structure: an ordered map from constant to a node
holding, per operator (``<  <=  >=  >``), the entries whose factor uses that constant.
Probing it one tuple at a time (an equality search, then a range walk) costs a Python
step per satisfied factor, too slow when a tuple satisfies thousands of them. So the
ordered map is compiled, lazily after any change, into a *stabbing table*:

The sorted distinct constants ``c0 < c1 < ... < cm-1`` cut the value line into
``2m + 1`` regions: ``(-inf, c0)``, ``[c0]``, ``(c0, c1)``, ``[c1]``, ... ``(cm-1, +inf)``.
Every entry's interval is a contiguous run of regions, and the set of entries a value
satisfies is the same everywhere in a region. A batch probe is then one vectorised binary
search of the batch's values among the constants plus a table look-up per value, done in
numpy; no Python work per satisfied factor. The table takes one of two layouts, chosen by
measured density at each rebuild:

* ``dense``: a boolean matrix entries x regions (used when entries cover many regions,
  as in the paper's workload where each tuple satisfies a third of the queries); a probe
  returns an entries x batch matrix.
* ``csr``: per region, the array of entries covering it (compressed sparse rows; used when
  intervals are narrow); a probe returns (row offset, entry) pairs, O(batch + matches).

When neither fits in ``budget_bytes`` the index evaluates the intervals directly
(``direct``): O(batch x entries) vectorised comparisons, never unbounded memory.

Rebuild cost: O(m log m + entries x regions) for dense, O(m + coverage) for csr; it runs
at the first probe after a change, so a burst of registrations costs one rebuild.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sortedcontainers import SortedDict

from stems.predicates import AttrConstraint


@dataclass(frozen=True)
class _Interval:
    lo: object | None
    lo_incl: bool
    hi: object | None
    hi_incl: bool


class RangeIndex:
    """Entries (ints) with one interval each on a single attribute; probed by batches."""

    def __init__(self, dtype: np.dtype, budget_bytes: int = 64 << 20):
        self.dtype = np.dtype(dtype)
        self.budget_bytes = budget_bytes
        # constant -> {op -> set(entry)}: the paper's predicate index node.
        self._tree: SortedDict = SortedDict()
        self._intervals: dict[int, _Interval] = {}
        self._dirty = True
        self.layout = "empty"
        self.rebuilds = 0

    def __len__(self) -> int:
        return len(self._intervals)

    def add(self, entry: int, c: AttrConstraint) -> None:
        """Index ``entry`` under the interval of ``c`` (no points). O(log m)."""
        if c.points is not None:
            raise ValueError("point constraints belong in the hash index")
        iv = _Interval(c.lo, c.lo_incl, c.hi, c.hi_incl)
        self._intervals[entry] = iv
        if iv.lo is not None:
            self._node(iv.lo).setdefault(">=" if iv.lo_incl else ">", set()).add(entry)
        if iv.hi is not None:
            self._node(iv.hi).setdefault("<=" if iv.hi_incl else "<", set()).add(entry)
        self._dirty = True

    def remove(self, entry: int) -> None:
        """Drop ``entry``; constants no entry uses leave the tree. O(log m)."""
        iv = self._intervals.pop(entry)
        if iv.lo is not None:
            self._unlink(iv.lo, ">=" if iv.lo_incl else ">", entry)
        if iv.hi is not None:
            self._unlink(iv.hi, "<=" if iv.hi_incl else "<", entry)
        self._dirty = True

    def _node(self, value: object) -> dict:
        node = self._tree.get(value)
        if node is None:
            node = self._tree[value] = {}
        return node

    def _unlink(self, value: object, op: str, entry: int) -> None:
        node = self._tree[value]
        node[op].discard(entry)
        if not node[op]:
            del node[op]
        if not node:
            del self._tree[value]

    # ----------------------------------------------------------------- build
    def _rebuild(self) -> None:
        self.rebuilds += 1
        self._dirty = False
        consts = list(self._tree.keys())
        m = len(consts)
        R = 2 * m + 1
        self._consts = np.array(consts, dtype=self.dtype) if m else np.empty(0, self.dtype)
        pos = {v: i for i, v in enumerate(consts)}
        entries = list(self._intervals)
        k = len(entries)
        self._entries = np.array(entries, dtype=np.int64)
        if not k:
            self.layout = "empty"
            return
        s = np.empty(k, dtype=np.int64)
        e = np.empty(k, dtype=np.int64)
        for j, ent in enumerate(entries):
            iv = self._intervals[ent]
            s[j] = 0 if iv.lo is None else 2 * pos[iv.lo] + (1 if iv.lo_incl else 2)
            e[j] = R - 1 if iv.hi is None else 2 * pos[iv.hi] + (1 if iv.hi_incl else 0)
        lens = np.maximum(e - s + 1, 0)
        coverage = int(lens.sum())
        dense_bytes = k * (R + 1)
        csr_bytes = 8 * coverage + 8 * (R + 1)
        if dense_bytes <= self.budget_bytes and coverage * 32 >= k * R:
            self.layout = "dense"
            live = lens > 0
            d = np.zeros((k, R + 1), dtype=np.int8)
            rows = np.flatnonzero(live)
            d[rows, s[live]] = 1
            d[rows, e[live] + 1] = -1
            self._masks = np.cumsum(d, axis=1, dtype=np.int8)[:, :R].astype(bool)
        elif csr_bytes <= self.budget_bytes:
            self.layout = "csr"
            starts = np.cumsum(lens) - lens
            reg = np.repeat(s, lens) + (np.arange(coverage) - np.repeat(starts, lens))
            ent = np.repeat(self._entries, lens)
            order = np.argsort(reg, kind="stable")
            self._ind = ent[order]
            self._indptr = np.zeros(R + 1, dtype=np.int64)
            np.cumsum(np.bincount(reg, minlength=R), out=self._indptr[1:])
        else:
            self.layout = "direct"
            ivs = [self._intervals[x] for x in entries]
            self._has_lo = np.array([iv.lo is not None for iv in ivs])
            self._has_hi = np.array([iv.hi is not None for iv in ivs])
            fill = "" if self.dtype == object else 0
            self._lo = np.array([fill if iv.lo is None else iv.lo for iv in ivs], dtype=self.dtype)
            self._hi = np.array([fill if iv.hi is None else iv.hi for iv in ivs], dtype=self.dtype)
            self._lo_incl = np.array([iv.lo_incl for iv in ivs])
            self._hi_incl = np.array([iv.hi_incl for iv in ivs])

    # ----------------------------------------------------------------- probe
    def regions(self, values: np.ndarray) -> np.ndarray:
        """Region number of each value. O(n log m), vectorised."""
        c = self._consts
        r = np.searchsorted(c, values, side="left")
        if not len(c):
            return r * 2
        hit = c[np.minimum(r, len(c) - 1)] == values
        return 2 * r + (hit & (r < len(c)))

    def probe(self, values: np.ndarray):
        """Entries each value satisfies.

        Returns ``("dense", entries, matrix)`` with a boolean matrix entries x values, or
        ``("pairs", offsets, entries)`` with one pair per (value position, entry) match,
        or None when the index is empty. Cost: O(n log m) plus O(n x entries / 8) for the
        dense layout (C-level), O(n + matches) for csr.
        """
        if self._dirty:
            self._rebuild()
        if self.layout == "empty" or not len(values):
            return None
        if self.layout == "dense":
            return "dense", self._entries, np.take(self._masks, self.regions(values), axis=1)
        if self.layout == "csr":
            reg = self.regions(values)
            lo = self._indptr[reg]
            lens = self._indptr[reg + 1] - lo
            total = int(lens.sum())
            if not total:
                return "pairs", np.empty(0, np.int64), np.empty(0, np.int64)
            offs = np.repeat(np.arange(len(values)), lens)
            firsts = np.cumsum(lens) - lens
            idx = np.repeat(lo - firsts, lens) + np.arange(total)
            return "pairs", offs, self._ind[idx]
        v = values[None, :]
        lo = self._lo[:, None]
        hi = self._hi[:, None]
        ok_lo = np.where(self._lo_incl[:, None], v >= lo, v > lo) | ~self._has_lo[:, None]
        ok_hi = np.where(self._hi_incl[:, None], v <= hi, v < hi) | ~self._has_hi[:, None]
        return "dense", self._entries, ok_lo & ok_hi

    # ----------------------------------------------------------------- check
    def _check(self) -> None:
        """Verify that the tree and the interval map agree (for tests)."""
        seen: dict[int, int] = {}
        for value, node in self._tree.items():
            assert node, f"empty node at {value!r}"
            for op, ents in node.items():
                assert ents, f"empty bucket {op} at {value!r}"
                for ent in ents:
                    iv = self._intervals[ent]
                    if op in (">", ">="):
                        assert iv.lo == value and iv.lo_incl == (op == ">=")
                    else:
                        assert iv.hi == value and iv.hi_incl == (op == "<=")
                    seen[ent] = seen.get(ent, 0) + 1
        for ent, iv in self._intervals.items():
            assert seen.get(ent, 0) == (iv.lo is not None) + (iv.hi is not None)
