"""Point index: the entries whose access constraint on one attribute is ``=`` or ``IN``.

A hash map value -> entries is the source of truth (O(1) add and remove). Probing a
batch needs the opposite direction, every row's value against the map, so the map is
compiled into sorted numpy arrays (keys, CSR offsets, entries) and a batch is probed with
one ``searchsorted``: O(n log P + matches) in C, with no Python work per row or per
registered entry; when the int keys lie in a range at most 4P wide (or 65,536), a
direct-address table replaces the binary search: O(n + matches).

Registrations keep arriving while data flows (a vehicle registers when it connects), so
changes do not recompile everything: additions go to a small *recent* level, compiled on
its own, and removals to a *dead* set filtered out of the main level's answers. The
recent level is compiled again at the first probe after it changed, O(R log R); when it
and the dead set together pass T entries, the main level absorbs them: a merge of two
sorted arrays of (key, entry) pairs, O(P) in C, not a walk of the table's P keys in
Python. With c changes between two probes, a probe then costs ~c P / T + T: T =
sqrt(2 c P) (c measured, smoothed over probes), at most P/8. On a Linear Road shard
(~25 registrations between batches, ~100,000 queries) that is ~2,200 entries, where a
fixed P/8 let the recent level grow to 12,500 and be recompiled whole before nearly every
batch. Columns of strings (object dtype) keep a per-row map lookup.
"""

from __future__ import annotations

import math
from itertools import chain

import numpy as np

_EMPTY = np.empty(0, dtype=np.int64)


class _Compiled:
    """One immutable level: sorted keys, CSR offsets into entries, optional direct table."""

    def __init__(self, items: dict[object, set[int]], dtype: np.dtype):
        # Built with numpy sorts over flat arrays: one C-iterator step per key and per
        # entry, no Python sort per key. 150,000 single-entry keys: 348 -> 40 ms, 20,000:
        # 16 -> 5.5 ms; a registration between two probes recompiles the recent level (up
        # to P/8 keys), and Linear Road's shards register between most batches.
        n = len(items)
        keys = np.array(list(items.keys()), dtype=dtype)
        counts = np.fromiter(map(len, items.values()), dtype=np.int64, count=n)
        total = int(counts.sum())
        ents = np.fromiter(chain.from_iterable(items.values()), dtype=np.int64, count=total)
        order = np.argsort(keys, kind="stable")
        rank = np.empty(n, dtype=np.int64)  # each key's place in sorted order
        rank[order] = np.arange(n, dtype=np.int64)
        # Entries sorted by their key's place, then by entry.
        flat = ents[np.lexsort((ents, np.repeat(rank, counts)))]
        self._set(keys[order], counts[order], flat, dtype)

    @classmethod
    def of_pairs(cls, keys: np.ndarray, ents: np.ndarray, dtype: np.dtype) -> _Compiled:
        """A level of the (key, entry) pairs given (any order; a repeated pair counts
        once). O(n log n) in C, no Python step per pair."""
        order = np.lexsort((ents, keys))
        return cls._of_sorted(keys[order], ents[order], dtype)

    @classmethod
    def merged(
        cls, a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], dtype: np.dtype
    ) -> _Compiled:
        """A level of two lists of (key, entry) pairs, each sorted by (key, entry): how
        the main level absorbs the recent one (``PointIndex._levels``). Int keys: each
        pair is packed into one int64 and the two sorted runs are merged by a stable
        sort, which finds runs: O(n) in C, where a lexsort is O(n log n) and indirect.
        Other keys, or packings that would overflow: ``of_pairs``."""
        keys = np.concatenate((a[0], b[0]))
        ents = np.concatenate((a[1], b[1]))
        if dtype.kind != "i" or not len(keys):
            return cls.of_pairs(keys, ents, dtype)
        lo, hi, m = int(keys.min()), int(keys.max()), int(ents.max()) + 1
        if int(ents.min()) < 0 or (hi - lo + 1) * m >= 1 << 62:
            return cls.of_pairs(keys, ents, dtype)
        packed = keys.astype(np.int64) - lo
        packed *= m
        packed += ents
        packed.sort(kind="stable")  # two ascending runs: one merge
        keys, ents = np.divmod(packed, m)
        keys += lo
        return cls._of_sorted(keys.astype(dtype, copy=False), ents, dtype)

    @classmethod
    def _of_sorted(cls, keys: np.ndarray, ents: np.ndarray, dtype: np.dtype) -> _Compiled:
        """A level of pairs sorted by (key, entry), a repeated pair kept once. O(n) in C."""
        if len(keys) > 1:
            new = np.empty(len(keys), dtype=bool)
            new[0] = True
            new[1:] = (keys[1:] != keys[:-1]) | (ents[1:] != ents[:-1])
            keys, ents = keys[new], ents[new]
        first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else _EMPTY
        counts = np.diff(np.r_[first, len(keys)])
        level = cls.__new__(cls)
        level._set(keys[first], counts, ents, dtype)
        return level

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (key, entry) pair of the level, as two arrays. O(pairs) in C."""
        return np.repeat(self.keys, np.diff(self.starts)), self.flat

    def _set(self, keys: np.ndarray, counts: np.ndarray, flat: np.ndarray, dtype) -> None:
        """Sorted distinct ``keys``, their entry ``counts`` and the entries in that
        order (``flat``) become this level."""
        n = len(keys)
        self.flat = flat
        self.keys = keys
        self.starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=self.starts[1:])
        self.unique = bool(len(counts) == 0 or counts.max() == 1)
        self.direct: tuple[int, np.ndarray] | None = None
        if dtype.kind == "i" and len(self.keys):
            base, span = int(self.keys[0]), int(self.keys[-1]) - int(self.keys[0]) + 1
            if span <= max(4 * len(self.keys), 1 << 16):
                slot = np.full(span, -1, dtype=np.int64)
                slot[self.keys - base] = np.arange(len(self.keys))
                self.direct = (base, slot)

    def __len__(self) -> int:
        return len(self.keys)

    def probe(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not len(self.keys):
            return _EMPTY, _EMPTY
        if self.direct is not None:
            # Keys in a compact int range: one table lookup per value instead of a binary
            # search (cache misses dominate searchsorted over many keys).
            base, slot = self.direct
            rel = values - base
            if len(rel) and rel.min() >= 0 and rel.max() < len(slot):
                # Every value inside the table (the usual case): no mask of the inside
                # ones and no gathers through it, three passes fewer.
                pos = slot[rel]
                rows = np.flatnonzero(pos >= 0)
                p = pos[rows]
            else:
                inside = np.flatnonzero((rel >= 0) & (rel < len(slot)))
                pos_in = slot[rel[inside]]
                hit = pos_in >= 0
                rows, p = inside[hit], pos_in[hit]
        else:
            pos = np.searchsorted(self.keys, values)
            np.minimum(pos, len(self.keys) - 1, out=pos)
            rows = np.flatnonzero(self.keys[pos] == values)
            p = pos[rows]
        if not len(rows):
            return _EMPTY, _EMPTY
        if self.unique:
            return rows.astype(np.int64), self.flat[self.starts[p]]
        first, cnt = self.starts[p], self.starts[p + 1] - self.starts[p]
        total = int(cnt.sum())
        within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        return np.repeat(rows.astype(np.int64), cnt), self.flat[np.repeat(first, cnt) + within]


class PointIndex:
    """value -> entries for one attribute of one stream."""

    def __init__(self, dtype: np.dtype):
        self.dtype = np.dtype(dtype)
        self.table: dict[object, set[int]] = {}
        self._main: _Compiled | None = None
        self._recent: dict[object, set[int]] = {}  # added since the main level was compiled
        self._recent_compiled: _Compiled | None = None
        self._dead: set[int] = set()  # removed since; their pairs in the main level are stale
        self._dead_arr: np.ndarray | None = None
        self.compilations = 0
        self._stale = False  # the recent level and dead set are due to go into the main one
        self._changes = 0  # adds and removes since the last probe
        self._per_probe = 1.0  # changes between two probes, smoothed

    def __len__(self) -> int:
        return len(self.table)

    def add(self, entry: int, points) -> None:
        """Index ``entry`` under each value of ``points``. O(len(points)) plus, when the
        recent level is full, an amortised share of a recompilation."""
        for p in points:
            self.table.setdefault(p, set()).add(entry)
            if self._main is not None:
                self._recent.setdefault(p, set()).add(entry)
        self._recent_compiled = None
        self._maybe_recompile()

    def remove(self, entry: int, points) -> None:
        """Forget ``entry`` under each of ``points``. O(len(points)) amortised."""
        for p in points:
            s = self.table[p]
            s.discard(entry)
            if not s:
                del self.table[p]
            r = self._recent.get(p)
            if r is not None:
                r.discard(entry)
                if not r:
                    del self._recent[p]
        if self._main is not None:
            self._dead.add(entry)
            self._dead_arr = None
        self._recent_compiled = None
        self._maybe_recompile()

    def _maybe_recompile(self) -> None:
        self._changes += 1
        if self._main is not None and len(self._recent) + len(self._dead) > self._limit():
            self._stale = True  # the levels are merged into one at the next probe

    def _limit(self) -> int:
        """How many changes the recent level and dead set hold before everything is
        compiled again: sqrt(2 c P) balances the recent level's compile at each probe
        against the main level's, at least 64 and at most P/8. O(1)."""
        p = len(self._main)
        return max(64, min(p // 8, int(math.sqrt(2.0 * self._per_probe * p))))

    def _levels(self) -> tuple[_Compiled, _Compiled | None]:
        if self._main is None or self._stale:
            self._main = (
                self._absorbed() if self._main is not None else _Compiled(self.table, self.dtype)
            )
            self.compilations += 1
            self._recent, self._dead, self._stale = {}, set(), False
            self._recent_compiled, self._dead_arr = None, None
        if self._recent and self._recent_compiled is None:
            self._recent_compiled = _Compiled(self._recent, self.dtype)
        return self._main, self._recent_compiled if self._recent else None

    def _absorbed(self) -> _Compiled:
        """The main level with the dead entries' pairs dropped and the recent level's
        merged in: O(P) in C over arrays of (key, entry) pairs (``_Compiled.merged``),
        not a walk of the table's P keys and their sets in Python (300,000 keys: ~50 ms
        of a Linear Road shard's time, every few thousand registrations)."""
        keys, ents = self._main.pairs()
        if self._dead and len(ents):
            dead = np.fromiter(self._dead, dtype=np.int64, count=len(self._dead))
            top = max(int(ents.max()), int(dead.max()))
            if min(int(dead.min()), int(ents.min())) >= 0 and top < 8 * len(ents) + (1 << 16):
                gone = np.zeros(top + 1, dtype=bool)  # entries are numbered from 0: a
                gone[dead] = True  # table lookup, O(P), where isin sorts
                live = ~gone[ents]
            else:
                live = ~np.isin(ents, dead)
            keys, ents = keys[live], ents[live]
        if not self._recent:
            return _Compiled._of_sorted(keys, ents, self.dtype)
        recent = (self._recent_compiled or _Compiled(self._recent, self.dtype)).pairs()
        return _Compiled.merged((keys, ents), recent, self.dtype)

    def probe(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row offsets, entries): every pair where row's value is one of entry's points.

        O(n log P + matches) for numeric columns (O(n + matches) with a direct table).
        """
        if not self.table:
            return _EMPTY, _EMPTY
        if self.dtype == object:
            return self._probe_objects(values)
        self._per_probe += (max(self._changes, 1) - self._per_probe) / 8
        self._changes = 0
        main, recent = self._levels()
        rows, ents = main.probe(values)
        if self._dead and len(ents):
            if self._dead_arr is None:
                self._dead_arr = np.fromiter(self._dead, dtype=np.int64, count=len(self._dead))
            live = ~np.isin(ents, self._dead_arr)
            rows, ents = rows[live], ents[live]
        if recent is not None:
            r2, e2 = recent.probe(values)
            if len(r2):
                # An entry re-added after removal is in both levels: dead filters the main
                # copy, the recent level holds the live one.
                rows, ents = np.concatenate((rows, r2)), np.concatenate((ents, e2))
        return rows, ents

    def _probe_objects(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        po: list[int] = []
        pe: list[int] = []
        get = self.table.get
        for i, v in enumerate(values.tolist()):
            hit = get(v)
            if hit is not None:
                po.extend([i] * len(hit))
                pe.extend(hit)
        if not po:
            return _EMPTY, _EMPTY
        return np.array(po, dtype=np.int64), np.array(pe, dtype=np.int64)

    def _check(self) -> None:
        assert all(self.table.values()), "empty entry set left in the point table"
        if self._main is not None:
            m = self._main
            assert len(m.flat) == m.starts[-1]
            assert np.all(m.keys[1:] > m.keys[:-1]), "compiled keys not strictly ascending"
            k, e = m.pairs()  # sorted by (key, entry): what ``_Compiled.merged`` relies on
            assert np.all((k[1:] > k[:-1]) | (e[1:] > e[:-1])), "a key's entries not ascending"
            if not self._stale and self.dtype != object:
                # main minus dead, plus recent, is the table
                got = {(k, e) for k, e in zip(*(a.tolist() for a in m.pairs()), strict=True)
                       if e not in self._dead}  # fmt: skip
                got |= {(k, e) for k, es in self._recent.items() for e in es}
                want = {(k, e) for k, es in self.table.items() for e in es}
                assert got == want, "the levels differ from the table"
        for p, ents in self._recent.items():
            assert ents <= self.table.get(p, set()), "recent level holds a removed entry"
