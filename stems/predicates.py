"""Single-stream predicates in the normalised form both SteMs index and evaluate.

The boolean factors of a query that touch one stream are folded, per attribute, into one
``AttrConstraint``: a set of points (from ``=`` and ``IN``) or an interval with optional
open ends, plus points excluded by ``!=``. Factors over two attributes of the same stream
(``a < b + 3``) stay as ``PairTest``. A ``LocalPredicate`` is the AND of both kinds.

Everything here is pure: no storage, no engine state. Vectorised evaluation takes a numpy
column per attribute and returns a boolean mask.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

Number = int | float
Value = int | float | str

#: Python comparison functions for each operator of the language.
OPERATORS: dict[str, Callable[[object, object], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    "=": operator.eq,
    ">=": operator.ge,
    ">": operator.gt,
    "!=": operator.ne,
}

#: ``a op b`` holds exactly when ``b FLIPPED[op] a`` does.
FLIPPED = {"<": ">", "<=": ">=", "=": "=", ">=": "<=", ">": "<", "!=": "!="}


@dataclass(frozen=True)
class AttrConstraint:
    """The conjunction of all constant factors on one attribute.

    Either ``points`` is a frozenset (the value must be one of them) or it is None and the
    value must lie in the interval given by ``lo``/``hi`` (None = unbounded) with the
    inclusive flags. ``excluded`` values are never accepted. For an int attribute the
    bounds are integers and inclusive (normalised by ``build``).
    """

    attr: str
    points: frozenset | None = None
    lo: Value | None = None
    lo_incl: bool = True
    hi: Value | None = None
    hi_incl: bool = True
    excluded: frozenset = frozenset()

    @property
    def empty(self) -> bool:
        """True when no value can satisfy the constraint."""
        if self.points is not None:
            return not self.points
        if self.lo is None or self.hi is None:
            return False
        if self.lo > self.hi:
            return True
        return self.lo == self.hi and (
            not (self.lo_incl and self.hi_incl) or self.lo in self.excluded
        )

    @property
    def bounded(self) -> bool:
        """True when an index can narrow the candidates (points, or a finite bound)."""
        return self.points is not None or self.lo is not None or self.hi is not None

    def contains(self, v: Value) -> bool:
        """Whether one value satisfies the constraint. O(1)."""
        if self.points is not None:
            return v in self.points
        if v in self.excluded:
            return False
        if self.lo is not None and (v < self.lo or (v == self.lo and not self.lo_incl)):
            return False
        return not (self.hi is not None and (v > self.hi or (v == self.hi and not self.hi_incl)))

    def mask(self, col: np.ndarray) -> np.ndarray:
        """Boolean mask of the values of ``col`` that satisfy the constraint. O(len(col))."""
        if self.points is not None:
            return _isin(col, self.points)
        m = np.ones(len(col), dtype=bool)
        if self.lo is not None:
            m &= (col >= self.lo) if self.lo_incl else (col > self.lo)
        if self.hi is not None:
            m &= (col <= self.hi) if self.hi_incl else (col < self.hi)
        if self.excluded:
            m &= ~_isin(col, self.excluded)
        return m

    def selectivity_rank(self) -> tuple[int, int]:
        """Smaller is more selective: points first, then two-sided, then one-sided."""
        if self.points is not None:
            return (0, len(self.points))
        sides = (self.lo is not None) + (self.hi is not None)
        return (3 - sides, 0)


@dataclass(frozen=True)
class PairTest:
    """``left op right + offset`` over two attributes of the same tuple."""

    left: str
    op: str
    right: str
    offset: Number = 0

    def holds(self, row: Mapping[str, Value]) -> bool:
        """Whether the factor holds for one row given as attribute -> value. O(1)."""
        r = row[self.right]
        return OPERATORS[self.op](row[self.left], r + self.offset if self.offset else r)

    def mask(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Vectorised form over two aligned columns. O(len(left))."""
        rhs = right + self.offset if self.offset else right
        return np.asarray(OPERATORS[self.op](left, rhs), dtype=bool)


@dataclass(frozen=True)
class LocalPredicate:
    """The AND of attribute constraints and same-tuple pair tests over one stream."""

    constraints: tuple[AttrConstraint, ...] = ()  # one per attribute
    pairs: tuple[PairTest, ...] = ()

    @property
    def unsatisfiable(self) -> bool:
        return any(c.empty for c in self.constraints)

    @property
    def is_true(self) -> bool:
        """True when the predicate accepts every tuple."""
        return not self.pairs and not any(c.bounded or c.excluded for c in self.constraints)

    def constraint(self, attr: str) -> AttrConstraint | None:
        """``attr``'s constraint, or None. O(constraints): a scan of a few, where a map
        by attribute was one more object per standing query, kept as long as it."""
        for c in self.constraints:
            if c.attr == attr:
                return c
        return None

    def access(self) -> AttrConstraint | None:
        """The constraint an index should look up first: the most selective bounded one."""
        best = [c for c in self.constraints if c.bounded]
        return min(best, key=AttrConstraint.selectivity_rank) if best else None

    def without(self, attr: str) -> LocalPredicate:
        """The rest of the predicate once an index enforces ``attr``'s points or bounds.

        Indexes look up points and bounds only, so excluded values (``a != 2``) of an
        interval constraint on ``attr`` stay in the rest.
        """
        rest = [c for c in self.constraints if c.attr != attr]
        c = self.constraint(attr)
        if c is not None and c.points is None and c.excluded:
            rest.append(AttrConstraint(attr, excluded=c.excluded))
        return LocalPredicate(tuple(rest), self.pairs)

    def attrs(self) -> set[str]:
        """Every attribute the predicate reads."""
        out = {c.attr for c in self.constraints}
        for p in self.pairs:
            out.update((p.left, p.right))
        return out

    def mask(self, column: Callable[[str], np.ndarray], n: int) -> np.ndarray:
        """Mask over ``n`` rows whose columns ``column(attr)`` returns. O(n · factors)."""
        m = np.ones(n, dtype=bool)
        for c in self.constraints:
            m &= c.mask(column(c.attr))
        for p in self.pairs:
            m &= p.mask(column(p.left), column(p.right))
        return m

    def holds(self, row: Mapping[str, Value]) -> bool:
        """Whether one row (attribute -> value) satisfies the predicate. O(factors)."""
        return all(c.contains(row[c.attr]) for c in self.constraints) and all(
            p.holds(row) for p in self.pairs
        )


def _isin(col: np.ndarray, values: Iterable[Value]) -> np.ndarray:
    vals = list(values)
    if len(vals) == 1:
        return np.asarray(col == vals[0], dtype=bool)
    if col.dtype == object:
        s = set(vals)
        return np.fromiter((v in s for v in col), dtype=bool, count=len(col))
    return np.isin(col, np.asarray(vals, dtype=col.dtype))


def build_constraint(
    attr: str, attr_type: str, factors: Iterable[tuple[str, object]]
) -> AttrConstraint:
    """Fold ``(op, value)`` factors on one attribute into one normalised constraint.

    ``op`` is one of ``< <= = >= > !=`` or ``in`` (value: a tuple of values). For an int
    attribute, float constants are rounded to the equivalent inclusive integer bounds
    (``a < 2.5`` becomes ``a <= 2``; ``a = 2.5`` matches nothing), so the index and the
    column compare values of one type. O(number of factors + number of points).
    """
    is_int = attr_type == "int"
    is_float = attr_type == "float"
    if isinstance(factors, list) and len(factors) == 1 and factors[0][0] == "=":
        # One equality, the most common factor (a standing query per key): its point.
        v = _coerce_point(factors[0][1], is_int, is_float)
        return AttrConstraint(attr, frozenset() if v is None else frozenset((v,)))
    points: set | None = None
    lo: Value | None = None
    lo_incl = True
    hi: Value | None = None
    hi_incl = True
    excluded: set = set()

    def tighten_lo(v: Value, incl: bool) -> None:
        nonlocal lo, lo_incl
        if lo is None or v > lo or (v == lo and not incl):
            lo, lo_incl = v, incl

    def tighten_hi(v: Value, incl: bool) -> None:
        nonlocal hi, hi_incl
        if hi is None or v < hi or (v == hi and not incl):
            hi, hi_incl = v, incl

    for op, value in factors:
        if op == "in":
            vals = {_coerce_point(v, is_int, is_float) for v in value}  # type: ignore[union-attr]
            vals.discard(None)
            points = vals if points is None else points & vals
        elif op == "=":
            v = _coerce_point(value, is_int, is_float)
            vals = set() if v is None else {v}
            points = vals if points is None else points & vals
        elif op == "!=":
            v = _coerce_point(value, is_int, is_float)
            if v is not None:
                excluded.add(v)
        elif op in (">", ">="):
            v, incl = value, op == ">="
            if is_int:
                v, incl = (math.ceil(v) if incl else math.floor(v) + 1), True  # type: ignore[arg-type]
            elif is_float:
                v = float(v)  # type: ignore[arg-type]
            tighten_lo(v, incl)
        elif op in ("<", "<="):
            v, incl = value, op == "<="
            if is_int:
                v, incl = (math.floor(v) if incl else math.ceil(v) - 1), True  # type: ignore[arg-type]
            elif is_float:
                v = float(v)  # type: ignore[arg-type]
            tighten_hi(v, incl)
        else:
            raise ValueError(f"unknown operator {op!r}")

    if points is not None:
        probe = AttrConstraint(attr, None, lo, lo_incl, hi, hi_incl, frozenset(excluded))
        return AttrConstraint(attr, frozenset(p for p in points if probe.contains(p)))
    # An int interval with one value is a point: the hash index serves it best.
    if is_int and lo is not None and lo == hi and lo not in excluded:
        return AttrConstraint(attr, frozenset({lo}))
    return AttrConstraint(attr, None, lo, lo_incl, hi, hi_incl, frozenset(excluded))


def _coerce_point(v: object, is_int: bool, is_float: bool) -> Value | None:
    """The value as stored in the column's type, or None if no stored value can equal it."""
    if is_int:
        if isinstance(v, float):
            return int(v) if v.is_integer() else None
        return v  # type: ignore[return-value]
    if is_float and isinstance(v, int):
        return float(v)
    return v  # type: ignore[return-value]
