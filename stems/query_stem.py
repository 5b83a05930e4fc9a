"""Query SteM: the standing queries' single-stream predicates, indexed for batch probes.

One ``QuerySteM`` holds, per stream, the *entries* that read it: an entry is the part of
one standing query that concerns one FROM source (a selection has one entry, a two-stream
join two). Each entry is indexed under its *access constraint*, the most selective
bounded constraint of its predicate (the access-predicate clustering of Fabret et al.,
[FJLP+01] in the PSoup paper):

* a point set (``=``, ``IN``) goes to a hash map value -> entries on that attribute;
* an interval goes to the attribute's ``RangeIndex`` (the paper's ordered predicate index);
* an entry with no bounded constraint goes to the scan list and is tested directly.

The rest of an entry's predicate is its *residual*, tested only on the tuples that
satisfied the access constraint. So ANDing touches only entries whose access factor the
tuple satisfies: a probe costs O(satisfied access factors + residual tests on them), never
time in proportion to registered queries the tuple does not touch (except scan entries,
which by definition touch every tuple).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from psoup.values import Schema
from stems.point_index import PointIndex
from stems.predicates import AttrConstraint, LocalPredicate
from stems.range_index import RangeIndex


@dataclass
class Matches:
    """The result of probing with a batch of ``n`` tuples.

    ``dense`` holds (entries, matrix) groups, the matrix boolean entries x n; ``offsets``
    and ``entries`` hold sparse (row offset, entry) pairs, each pair once.
    """

    n: int
    dense: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    offsets: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    entries: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def by_entry(self):
        """Yield ``(entry, offsets)`` with ascending offsets, one per matched entry.

        Cost O(matches + n x dense entries / 8); meant for consumers that need offsets.
        """
        for ents, mat in self.dense:
            hit = mat.any(axis=1)
            for j in np.flatnonzero(hit).tolist():
                yield int(ents[j]), np.flatnonzero(mat[j])
        if len(self.entries):
            order = np.lexsort((self.offsets, self.entries))
            ents = self.entries[order]
            offs = self.offsets[order]
            cuts = np.flatnonzero(np.diff(ents)) + 1
            starts = [0, *cuts.tolist()]
            ends = [*cuts.tolist(), len(ents)]
            for a, z in zip(starts, ends, strict=True):
                yield int(ents[a]), offs[a:z]

    def count(self) -> int:
        """Number of (tuple, entry) matches. O(size)."""
        return len(self.entries) + sum(int(m.sum()) for _, m in self.dense)


class _StreamIndex:
    """All entries over one stream."""

    def __init__(self, schema: Schema, budget_bytes: int):
        self.schema = schema
        self.budget_bytes = budget_bytes
        self.points: dict[str, PointIndex] = {}
        self.ranges: dict[str, RangeIndex] = {}
        self.scan: dict[int, LocalPredicate] = {}
        self.residual: dict[int, LocalPredicate] = {}
        self.access: dict[int, AttrConstraint | None] = {}
        self.never: set[int] = set()

    def add(self, entry: int, pred: LocalPredicate) -> None:
        if pred.unsatisfiable:
            # Contradictory factors (a = 1 AND a = 2): the entry can never match.
            self.never.add(entry)
            return
        acc = pred.access()
        self.access[entry] = acc
        if acc is None:
            self.scan[entry] = pred
            return
        rest = pred.without(acc.attr)
        if not rest.is_true:
            self.residual[entry] = rest
        if acc.points is not None:
            table = self.points.get(acc.attr)
            if table is None:
                table = self.points[acc.attr] = PointIndex(self.schema.dtype_of(acc.attr))
            table.add(entry, acc.points)
        else:
            idx = self.ranges.get(acc.attr)
            if idx is None:
                idx = self.ranges[acc.attr] = RangeIndex(
                    self.schema.dtype_of(acc.attr), self.budget_bytes
                )
            idx.add(entry, acc)

    def remove(self, entry: int) -> None:
        if entry in self.never:
            self.never.discard(entry)
            return
        acc = self.access.pop(entry)
        self.residual.pop(entry, None)
        if acc is None:
            del self.scan[entry]
        elif acc.points is not None:
            table = self.points[acc.attr]
            table.remove(entry, acc.points)
            if not len(table):
                del self.points[acc.attr]
        else:
            idx = self.ranges[acc.attr]
            idx.remove(entry)
            if not len(idx):
                del self.ranges[acc.attr]

    def __len__(self) -> int:
        return len(self.access) + len(self.never)

    def probe(self, cols: dict[str, np.ndarray], n: int) -> Matches:
        out = Matches(n)
        offs_parts: list[np.ndarray] = []
        ent_parts: list[np.ndarray] = []
        for attr, table in self.points.items():
            po, pe = table.probe(cols[attr])
            if len(po):
                offs_parts.append(po)
                ent_parts.append(pe)
        for attr, idx in self.ranges.items():
            res = idx.probe(cols[attr])
            if res is None:
                continue
            if res[0] == "dense":
                _, ents, mat = res
                if self.residual:
                    for j, ent in enumerate(ents.tolist()):
                        rest = self.residual.get(ent)
                        if rest is not None and mat[j].any():
                            mat[j] &= rest.mask(cols.__getitem__, n)
                out.dense.append((ents, mat))
            else:
                _, o, e = res
                if len(o):
                    offs_parts.append(o)
                    ent_parts.append(e)
        if offs_parts:
            offs = np.concatenate(offs_parts)
            ents = np.concatenate(ent_parts)
            if self.residual:
                offs, ents = self._filter_residual(offs, ents, cols)
            out.offsets, out.entries = offs, ents
        if self.scan:
            ents = np.fromiter(self.scan, dtype=np.int64, count=len(self.scan))
            mat = np.empty((len(ents), n), dtype=bool)
            for j, pred in enumerate(self.scan.values()):
                mat[j] = pred.mask(cols.__getitem__, n)
            out.dense.append((ents, mat))
        return out

    def _filter_residual(self, offs, ents, cols):
        keep = np.ones(len(offs), dtype=bool)
        order = np.argsort(ents, kind="stable")
        se = ents[order]
        cuts = np.flatnonzero(np.diff(se)) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), len(se)]
        for a, z in zip(starts, ends, strict=True):
            rest = self.residual.get(int(se[a]))
            if rest is None:
                continue
            sel = order[a:z]
            o = offs[sel]
            keep[sel] = rest.mask(lambda attr, o=o: cols[attr][o], len(o))
        return offs[keep], ents[keep]


class QuerySteM:
    """The one Query SteM: per-stream predicate indexes over all standing entries.

    ``budget_bytes`` bounds the memory of each interval index's stabbing table.
    """

    def __init__(self, budget_bytes: int = 64 << 20):
        self.budget_bytes = budget_bytes
        self._streams: dict[str, _StreamIndex] = {}

    def add(self, stream: str, schema: Schema, entry: int, pred: LocalPredicate) -> None:
        """Index ``entry`` (an int the caller owns) with ``pred`` over ``stream``. O(log m)."""
        idx = self._streams.get(stream)
        if idx is None:
            idx = self._streams[stream] = _StreamIndex(schema, self.budget_bytes)
        idx.add(entry, pred)

    def remove(self, stream: str, entry: int) -> None:
        """Forget ``entry``: its index nodes and residual go. O(log m + points)."""
        idx = self._streams[stream]
        idx.remove(entry)
        if not len(idx):
            del self._streams[stream]

    def entries(self, stream: str) -> int:
        """Number of entries over ``stream``."""
        idx = self._streams.get(stream)
        return len(idx) if idx else 0

    def probe(self, stream: str, cols: dict[str, np.ndarray], n: int) -> Matches:
        """Which entries over ``stream`` each of ``n`` new tuples satisfies.

        ``cols`` maps attribute -> the batch's column. Cost: O(n) hash look-ups per
        point-indexed attribute, O(n log m) per interval index plus the table read
        (see ``RangeIndex.probe``), residual tests on candidates only, and O(n) per
        scan entry.
        """
        idx = self._streams.get(stream)
        if idx is None:
            return Matches(n)
        return idx.probe(cols, n)

    def layouts(self, stream: str) -> dict[str, str]:
        """Attribute -> layout of its interval index (for Stats and benchmarks)."""
        idx = self._streams.get(stream)
        return {a: r.layout for a, r in idx.ranges.items()} if idx else {}

    def _check(self) -> None:
        """Verify each index's invariants (for tests)."""
        for idx in self._streams.values():
            for attr, table in idx.points.items():
                table._check()
                for v, ents in table.table.items():
                    assert ents, f"empty bucket {attr}={v!r}"
                    for ent in ents:
                        acc = idx.access[ent]
                        assert acc is not None and acc.attr == attr and v in acc.points
            for r in idx.ranges.values():
                r._check()
            for ent, acc in idx.access.items():
                assert (acc is None) == (ent in idx.scan)
