"""Phase 2 output: the unbound syntax tree of one query.

The tree says what was written, not what it means: names are not resolved, parameters
not substituted, ``*`` not expanded, ``BETWEEN`` not split, and operand shapes are not yet
checked (the parser accepts ``a + 1 < b`` so that the binder can refuse it with a
precise message). ``psoup.query.binder`` turns a tree into a ``QuerySpec``.

Every node carries ``pos``, the line and column (1-based) where it starts; positions do
not take part in equality, so tests can compare trees built by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Pos(NamedTuple):
    """A 1-based line and column in the query text."""

    line: int
    column: int


_NOWHERE = Pos(1, 1)


@dataclass(frozen=True)
class Node:
    """Base of every node: where it starts in the text."""

    pos: Pos = field(default=_NOWHERE, kw_only=True, compare=False, repr=False)


# --- operands -------------------------------------------------------------------------


@dataclass(frozen=True)
class Column(Node):
    """``name`` or ``qualifier.name``. ``pos`` is the first token, ``name_pos`` the name's."""

    qualifier: str | None
    name: str
    name_pos: Pos = field(default=_NOWHERE, kw_only=True, compare=False, repr=False)


@dataclass(frozen=True)
class Literal(Node):
    """A number or string constant; a minus sign before a number is folded in."""

    value: int | float | str


@dataclass(frozen=True)
class Param(Node):
    """A named parameter ``:name``."""

    name: str


@dataclass(frozen=True)
class Neg(Node):
    """Unary minus on anything but a number literal (``-:k``)."""

    operand: Expr


@dataclass(frozen=True)
class Now(Node):
    """``NOW`` in a window bound."""


@dataclass(frozen=True)
class Arith(Node):
    """``left op right`` with op ``+`` or ``-``; ``pos`` is the operator's position."""

    left: Expr
    op: str
    right: Expr


@dataclass(frozen=True)
class Star(Node):
    """``*`` in the select list or in ``COUNT(*)``."""


@dataclass(frozen=True)
class Func(Node):
    """``name(arg)``: an aggregate call as written (name in its original case)."""

    name: str
    arg: Column | Star


Expr = Column | Literal | Param | Neg | Now | Arith
Const = Literal | Param | Neg


# --- clauses --------------------------------------------------------------------------


@dataclass(frozen=True)
class Item(Node):
    """One select-list entry with its optional ``AS`` name."""

    expr: Column | Func | Star
    alias: str | None = None
    alias_pos: Pos = field(default=_NOWHERE, kw_only=True, compare=False, repr=False)


@dataclass(frozen=True)
class Table(Node):
    """One FROM entry: a stream name and its optional alias."""

    name: str
    alias: str | None = None
    alias_pos: Pos = field(default=_NOWHERE, kw_only=True, compare=False, repr=False)


@dataclass(frozen=True)
class Comparison(Node):
    """``left op right``; op is one of ``spec.OPS`` (``<>`` already read as ``!=``)."""

    left: Expr
    op: str
    right: Expr


@dataclass(frozen=True)
class Between(Node):
    """``subject BETWEEN low AND high``."""

    subject: Expr
    low: Const
    high: Const


@dataclass(frozen=True)
class In(Node):
    """``subject IN (values...)``, values as written (duplicates kept)."""

    subject: Expr
    values: tuple[Const, ...]


Factor = Comparison | Between | In
#: A window bound: ``NOW``, ``Arith(Now, '+'|'-', const)`` or a constant.
BoundExpr = Now | Arith | Const


@dataclass(frozen=True)
class Query(Node):
    """A whole query. ``where`` is the flattened conjunction (parentheses dropped)."""

    select: tuple[Item, ...]
    sources: tuple[Table, ...]
    where: tuple[Factor, ...]
    begin: BoundExpr
    end: BoundExpr
    group_by: Column | None = None
