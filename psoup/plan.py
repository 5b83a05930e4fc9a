"""From a bound ``QuerySpec`` to what the SteMs execute: per-source predicates and joins.

Each FROM source gets the ``LocalPredicate`` of the factors that read only it; factors
that read two sources are join factors. ``Plan.substitute`` is the hybrid struct of
seeds/002 lines 1816-1836: once a tuple of one source is known, its values turn each join
factor into a constant factor on the other source, ANDed with that source's own factors.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from psoup.query.spec import Col, ColCompare, Compare, InList, QuerySpec
from psoup.values import Schema
from stems.predicates import FLIPPED, LocalPredicate, PairTest, build_constraint


@dataclass(frozen=True)
class JoinFactor:
    """``left op right + offset`` with ``left`` and ``right`` on different sources."""

    left: Col
    op: str
    right: Col
    offset: int | float


class Plan:
    """The executable form of one query."""

    def __init__(self, spec: QuerySpec, schemas: Mapping[str, Schema]):
        # Built once per registration (thousands a second in Linear Road): plain dicts
        # and lists, no defaultdicts or generators. O(factors).
        self.spec = spec
        self.streams = tuple(src.stream for src in spec.sources)
        self.schemas: tuple[Schema, ...] | None = tuple(schemas[s] for s in self.streams)
        n = len(self.streams)
        consts: list[dict[str, list[tuple[str, object]]]] = [{} for _ in range(n)]
        pairs: list[list[PairTest]] = [[] for _ in range(n)]
        joins: list[JoinFactor] = []
        for f in spec.factors:
            if isinstance(f, Compare):
                consts[f.col.source].setdefault(f.col.attr, []).append((f.op, f.value))
            elif isinstance(f, InList):
                consts[f.col.source].setdefault(f.col.attr, []).append(("in", f.values))
            elif isinstance(f, ColCompare):
                if f.left.source == f.right.source:
                    pairs[f.left.source].append(PairTest(f.left.attr, f.op, f.right.attr, f.offset))
                else:
                    joins.append(JoinFactor(f.left, f.op, f.right, f.offset))
            else:  # pragma: no cover - the binder produces only these
                raise TypeError(f"unknown factor {f!r}")
        self.joins: tuple[JoinFactor, ...] = tuple(joins)
        self._consts: list | None = consts
        self._pairs: list | None = [tuple(p) for p in pairs]
        self.local = [self._fold(i, None) for i in range(n)]
        if n == 1:
            # What ``substitute`` folds from is a join's only: a plan lives as long as
            # its query, and these are ~6 of the ~20 objects a registered selection
            # held, each one more for the collector to walk (psoup/heap.py).
            self.schemas = self._consts = self._pairs = None

    @property
    def is_join(self) -> bool:
        return len(self.streams) > 1

    def _fold(
        self, source: int, extra: Mapping[str, list[tuple[str, object]]] | None
    ) -> LocalPredicate:
        schema = self.schemas[source]
        consts = self._consts[source]
        if not extra:
            cons = tuple(build_constraint(a, schema.type_of(a), fs) for a, fs in consts.items())
            return LocalPredicate(cons, self._pairs[source])
        attrs = list(consts) + [a for a in extra if a not in consts]
        cons = tuple(
            build_constraint(a, schema.type_of(a), [*consts.get(a, ()), *extra.get(a, ())])
            for a in attrs
        )
        return LocalPredicate(cons, self._pairs[source])

    def substitute(self, known: int, values: Mapping[str, object]) -> LocalPredicate:
        """The predicate on the other source once source ``known``'s tuple is ``values``.

        O(join factors + the other source's factors).
        """
        other = 1 - known
        extra: dict[str, list[tuple[str, object]]] = defaultdict(list)
        for j in self.joins:
            if j.left.source == known:
                # v op R.b + off  <=>  R.b FLIP(op) v - off
                v = values[j.left.attr]
                extra[j.right.attr].append((FLIPPED[j.op], v - j.offset if j.offset else v))
            else:
                # L.a op w + off
                w = values[j.right.attr]
                extra[j.left.attr].append((j.op, w + j.offset if j.offset else w))
        return self._fold(other, extra)

    def join_attrs(self, source: int) -> list[str]:
        """Attributes of ``source`` that join factors read."""
        out = []
        for j in self.joins:
            a = j.left.attr if j.left.source == source else j.right.attr
            if a not in out:
                out.append(a)
        return out
