"""The analysed form of a query: what the parser and binder hand to the engine.

A ``QuerySpec`` is fully bound: every name resolved to a (source, attribute) pair, every
named parameter substituted, ``*`` expanded, BETWEEN split into two factors, constants on
the left of a comparison moved to the right (with the operator flipped). The engine, the
strategies and the test oracle read only this module's classes, never the query text.

Semantics (docs/QUERY_LANGUAGE.md is the user's version):

* ``sources`` is the FROM list; a ``Col`` names a source by its position in it.
* ``factors`` are ANDed. ``Compare(col, op, value)`` is ``col op value``;
  ``InList(col, values)`` is ``col IN values``; ``ColCompare(left, op, right, offset)`` is
  ``left op right + offset`` (the two columns may belong to one source or to two).
* The window is applied at invoke: a result is inside when every base tuple has
  ``begin <= ts <= end``; ``Bound('now', k)`` is ``NOW + k``, ``Bound('const', c)`` is ``c``.
* ``select`` lists the output columns in order. A query is an aggregate query when any
  item is an aggregate; then every plain column item must be the ``group_by`` column.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

Value = int | float | str
Op = Literal["<", "<=", "=", ">=", ">", "!="]
OPS: tuple[str, ...] = ("<", "<=", "=", ">=", ">", "!=")

#: ``a op b`` is the same as ``b FLIP[op] a``.
FLIP: dict[str, str] = {"<": ">", "<=": ">=", "=": "=", ">=": "<=", ">": "<", "!=": "!="}

AggFunc = Literal["COUNT", "SUM", "AVG", "MIN", "MAX"]


@dataclass(frozen=True)
class Source:
    """One entry of the FROM list: the stream's name and the alias it goes by."""

    stream: str
    alias: str


@dataclass(frozen=True)
class Col:
    """Attribute ``attr`` of the FROM entry at position ``source``."""

    source: int
    attr: str


@dataclass(frozen=True)
class Compare:
    """``col op value``: an indexable boolean factor."""

    col: Col
    op: str
    value: Value


@dataclass(frozen=True)
class InList:
    """``col IN (values...)``: values are distinct, in the order written."""

    col: Col
    values: tuple[Value, ...]


@dataclass(frozen=True)
class ColCompare:
    """``left op right + offset``: a multi-attribute (one source) or join (two) factor."""

    left: Col
    op: str
    right: Col
    offset: int | float = 0


Factor = Compare | InList | ColCompare


@dataclass(frozen=True)
class Bound:
    """One end of a window: ``kind == 'now'`` means NOW + value, else the constant value."""

    kind: Literal["now", "const"]
    value: int | float

    def resolve(self, now: int | float | None) -> int | float | None:
        """The bound's value given NOW (None when it needs NOW and NOW is None)."""
        if self.kind == "const":
            return self.value
        return None if now is None else now + self.value


@dataclass(frozen=True)
class Window:
    """The BEGIN ... END clause."""

    begin: Bound
    end: Bound

    def resolve(self, now: int | float | None) -> tuple[int | float, int | float] | None:
        """``(lo, hi)`` for this NOW, or None when the window cannot be placed (no NOW)."""
        lo, hi = self.begin.resolve(now), self.end.resolve(now)
        if lo is None or hi is None:
            return None
        return lo, hi


@dataclass(frozen=True)
class SelectItem:
    """One output column: a plain attribute (``func is None``) or an aggregate.

    ``col`` is None only for ``COUNT(*)``. ``name`` is the output column's name: the
    ``AS`` alias if given, else the attribute name (``alias.attr`` when the query has more
    than one source), else the aggregate as written in canonical form, e.g. ``SUM(a)``,
    ``COUNT(*)``. ``type`` is the output type: 'int', 'float' or 'str'.
    """

    name: str
    type: str
    col: Col | None = None
    func: AggFunc | None = None


@dataclass(frozen=True)
class QuerySpec:
    """A bound query, ready for the engine."""

    text: str
    sources: tuple[Source, ...]
    factors: tuple[Factor, ...]
    select: tuple[SelectItem, ...]
    window: Window
    group_by: Col | None = None

    # Computed once per spec (an invoke asks for them every time).
    @cached_property
    def is_aggregate(self) -> bool:
        return any(item.func is not None for item in self.select)

    @property
    def is_join(self) -> bool:
        return len(self.sources) > 1

    @cached_property
    def read_attrs(self) -> tuple[str, ...]:
        """The attributes a one-stream invoke reads: the select items' and the GROUP BY
        one, each once, in that order."""
        attrs = [item.col.attr for item in self.select if item.col is not None]
        if self.group_by is not None:
            attrs.append(self.group_by.attr)
        return tuple(dict.fromkeys(attrs))

    @cached_property
    def columns(self) -> tuple[str, ...]:
        return tuple(item.name for item in self.select)

    @cached_property
    def types(self) -> tuple[str, ...]:
        """The output columns' types ('int', 'float', 'str')."""
        return tuple(item.type for item in self.select)
