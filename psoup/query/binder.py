"""Phase 3 of the query pipeline: syntax tree + schemas + parameters → ``QuerySpec``.

The binder gives the tree its meaning and refuses what cannot run, always at the
position of the offending token:

* names: FROM entries to streams (``QueryNameError`` for an unknown stream or a duplicate
  alias), columns to ``(source, attribute)`` (unknown qualifier or attribute, ambiguous
  unqualified attribute in a join);
* parameters: each ``:name`` is replaced by its value, whose Python type is its type;
  missing, unused, bool or other-typed values are ``QueryParameterError``;
* types: int and float are numeric and compare with each other, str only with str; a
  mismatch, SUM/AVG of a str, or a str window bound is ``QueryTypeError``. A parameter is
  checked exactly like a literal of its value;
* normal form: ``*`` expanded, BETWEEN split into ``>=`` and ``<=``, a constant on the left
  moved right with the operator flipped, ``a op b ± k`` to ``ColCompare(offset=±k)``, IN
  lists without duplicates, output names and types filled in;
* shapes psoup does not run (arithmetic elsewhere, 3-way joins, aggregates mixed with
  ungrouped columns, GROUP BY without aggregates, an always-empty window) are
  ``UnsupportedQueryError``.

``canonical(spec)`` prints a bound query back as query text in normal form; compiling
that text again gives the same spec.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from psoup.errors import (
    QueryError,
    QueryNameError,
    QueryParameterError,
    QueryTypeError,
    UnsupportedQueryError,
)
from psoup.query import ast
from psoup.query.ast import Pos
from psoup.query.parser import ARITHMETIC
from psoup.query.spec import (
    FLIP,
    Bound,
    Col,
    ColCompare,
    Compare,
    Factor,
    InList,
    QuerySpec,
    SelectItem,
    Source,
    Value,
    Window,
)
from psoup.values import Schema

AGGREGATES: tuple[str, ...] = ("COUNT", "SUM", "AVG", "MIN", "MAX")
NUMERIC: tuple[str, ...] = ("int", "float")
#: How many known names an "unknown name" message lists before cutting off.
MAX_LISTED = 10


@dataclass(frozen=True)
class _Const:
    """A constant after parameter substitution, with how messages should name it."""

    value: Value
    type: str
    what: str
    pos: Pos


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + ", ..." if len(names) > MAX_LISTED else shown


def _type_of(value: Value) -> str:
    return "str" if isinstance(value, str) else "int" if isinstance(value, int) else "float"


def _a(type_: str) -> str:
    """``an int``, ``a float``, ``a str``."""
    return f"an {type_}" if type_ == "int" else f"a {type_}"


def _comparable(a: str, b: str) -> bool:
    return a == "any" or b == "any" or (a in NUMERIC) == (b in NUMERIC)


class _Open:
    """The value of a parameter bound without one (``bind(..., params=OPEN)``, what
    preparing a template checks): of any type, its own negation, and neither above nor
    below anything, so no check of a value fires on it."""

    def __neg__(self) -> _Open:
        return self

    def __lt__(self, other: object) -> bool:
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __repr__(self) -> str:
        return "OPEN"


#: Bind with every parameter open: the checks that do not depend on parameter values.
OPEN: Mapping[str, object] = MappingProxyType({})


def param_value(value: object) -> Value | None:
    """A parameter's value as a query holds it (an int, a finite float or a str), or None
    when it is refused (a bool, a non-finite number, another type). O(1)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value):
        return float(value)
    return None


def render_value(value: Value) -> str:
    """A constant as query text: ``5``, ``1.5``, ``'it''s'``."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _start(node: ast.Node) -> Pos:
    """Where an expression starts (an ``Arith`` node's own ``pos`` is its operator)."""
    while isinstance(node, ast.Arith):
        node = node.left
    return node.pos


class _Binder:
    def __init__(self, text: str, params: Mapping[str, object], schemas: Mapping[str, Schema]):
        self.text = text
        self.params = params
        self.open = params is OPEN
        self.schemas = schemas
        self.sources: list[Source] = []
        self.source_schemas: list[Schema] = []
        self.used: set[str] = set()

    def error(self, cls: type[QueryError], message: str, pos: Pos) -> QueryError:
        return cls(message, pos.line, pos.column, self.text)

    # --- the whole query --------------------------------------------------------------

    def query(self, tree: ast.Query) -> QuerySpec:
        self.bind_sources(tree.sources)
        items = self.bind_select(tree.select)
        factors = [factor for node in tree.where for factor in self.bind_factor(node)]
        group_by = self.resolve(tree.group_by)[0] if tree.group_by else None
        window = self.bind_window(tree.begin, tree.end)
        self.check_grouping(tree, items, group_by)
        self.check_unused_params()
        return QuerySpec(
            text=self.text,
            sources=tuple(self.sources),
            factors=tuple(factors),
            select=tuple(item for _, item in items),
            window=window,
            group_by=group_by,
        )

    # --- FROM and names ---------------------------------------------------------------

    def bind_sources(self, tables: tuple[ast.Table, ...]) -> None:
        if len(tables) > 2:
            raise self.error(
                UnsupportedQueryError,
                "joins of more than two streams are not supported",
                tables[2].pos,
            )
        for table in tables:
            schema = self.schemas.get(table.name)
            if schema is None:
                known = sorted(self.schemas)
                hint = f"; the streams are: {_listing(known)}" if known else "; no stream exists"
                raise self.error(QueryNameError, f"unknown stream '{table.name}'{hint}", table.pos)
            alias = table.alias or table.name
            if any(source.alias == alias for source in self.sources):
                example = "" if table.alias else f" (FROM {alias} AS {alias}1, {alias} AS {alias}2)"
                raise self.error(
                    QueryNameError,
                    f"duplicate alias '{alias}' in FROM: give each stream its own alias{example}",
                    table.alias_pos,
                )
            self.sources.append(Source(table.name, alias))
            self.source_schemas.append(schema)

    def display(self, col: Col) -> str:
        """A column as messages and canonical text write it."""
        return _display(col, self.sources)

    def resolve(self, column: ast.Column) -> tuple[Col, str]:
        """The column's ``Col`` and type."""
        if column.qualifier is not None:
            index = self.resolve_qualifier(column)
            schema = self.source_schemas[index]
            if column.name not in schema:
                source = self.sources[index]
                called = "" if source.alias == source.stream else f" (called {source.alias})"
                raise self.error(
                    QueryNameError,
                    f"stream '{source.stream}'{called} has no attribute '{column.name}'; "
                    f"its attributes are: {_listing(schema.names)}",
                    column.name_pos,
                )
            return Col(index, column.name), schema.type_of(column.name)
        found = [i for i, schema in enumerate(self.source_schemas) if column.name in schema]
        if not found:
            if len(self.sources) == 1:
                message = (
                    f"stream '{self.sources[0].stream}' has no attribute '{column.name}'; "
                    f"its attributes are: {_listing(self.source_schemas[0].names)}"
                )
            else:
                having = "; ".join(
                    f"{source.alias} has {_listing(schema.names)}"
                    for source, schema in zip(self.sources, self.source_schemas, strict=True)
                )
                message = f"no stream in FROM has an attribute '{column.name}': {having}"
            raise self.error(QueryNameError, message, column.name_pos)
        if len(found) > 1:
            candidates = " or ".join(f"{self.sources[i].alias}.{column.name}" for i in found)
            raise self.error(
                QueryNameError,
                f"attribute '{column.name}' is ambiguous: it could be {candidates}; qualify it",
                column.pos,
            )
        index = found[0]
        return Col(index, column.name), self.source_schemas[index].type_of(column.name)

    def resolve_qualifier(self, column: ast.Column) -> int:
        for index, source in enumerate(self.sources):
            if source.alias == column.qualifier:
                return index
        aliases = ", ".join(source.alias for source in self.sources)
        message = f"unknown stream or alias '{column.qualifier}'; FROM names: {aliases}"
        for source in self.sources:
            if source.stream == column.qualifier:
                message = (
                    f"'{source.stream}' is called {source.alias} in this query; "
                    f"write {source.alias}.{column.name}"
                )
        raise self.error(QueryNameError, message, column.pos)

    # --- SELECT -----------------------------------------------------------------------

    def bind_select(self, nodes: tuple[ast.Item, ...]) -> list[tuple[ast.Item, SelectItem]]:
        stars = [node for node in nodes if isinstance(node.expr, ast.Star)]
        if stars and len(nodes) > 1:
            if any(isinstance(node.expr, ast.Func) for node in nodes):
                message = "'*' cannot be combined with aggregates; list the columns instead"
            else:
                message = "'*' cannot be combined with other select items; list the columns"
            raise self.error(UnsupportedQueryError, message, stars[0].pos)
        if stars:
            return [
                (nodes[0], self.plain_item(Col(index, name), schema.type_of(name), None))
                for index, schema in enumerate(self.source_schemas)
                for name in schema.names
            ]
        items: list[tuple[ast.Item, SelectItem]] = []
        names: set[str] = set()
        for node in nodes:
            if isinstance(node.expr, ast.Func):
                item = self.aggregate_item(node.expr, node.alias)
            else:
                assert isinstance(node.expr, ast.Column)
                col, type_ = self.resolve(node.expr)
                item = self.plain_item(col, type_, node.alias)
            if item.name in names:
                raise self.error(
                    QueryNameError,
                    f"duplicate output column name '{item.name}': rename one with AS",
                    node.alias_pos if node.alias else node.pos,
                )
            names.add(item.name)
            items.append((node, item))
        return items

    def plain_item(self, col: Col, type_: str, alias: str | None) -> SelectItem:
        return SelectItem(alias or self.display(col), type_, col)

    def aggregate_item(self, func: ast.Func, alias: str | None) -> SelectItem:
        name = func.name.upper()
        if name not in AGGREGATES:
            raise self.error(
                UnsupportedQueryError,
                f"unknown aggregate '{func.name}': the aggregates are {', '.join(AGGREGATES)}",
                func.pos,
            )
        if isinstance(func.arg, ast.Star):
            if name != "COUNT":
                raise self.error(
                    UnsupportedQueryError,
                    f"{name}(*) is not supported: only COUNT takes *; write {name}(column)",
                    func.arg.pos,
                )
            return SelectItem(alias or "COUNT(*)", "int", None, "COUNT")
        col, type_ = self.resolve(func.arg)
        if name in ("SUM", "AVG") and type_ not in NUMERIC:
            raise self.error(
                QueryTypeError,
                f"{name} needs a numeric column, but {self.display(col)} is {type_}",
                func.arg.pos,
            )
        out_type = {"COUNT": "int", "AVG": "float"}.get(name, type_)
        return SelectItem(alias or f"{name}({self.display(col)})", out_type, col, name)  # type: ignore[arg-type]

    # --- WHERE ------------------------------------------------------------------------

    def bind_factor(self, node: ast.Factor) -> list[Factor]:
        if isinstance(node, ast.Comparison):
            return [self.comparison(node)]
        col, type_ = self.subject(
            node.subject, "BETWEEN" if isinstance(node, ast.Between) else "IN"
        )
        if isinstance(node, ast.Between):
            low = self.checked_const(node.low, col, type_)
            high = self.checked_const(node.high, col, type_)
            return [Compare(col, ">=", low.value), Compare(col, "<=", high.value)]
        # dict keeps the first of equal values (1 and 1.0 are equal) in the order written
        values: dict[Value, None] = {}
        for value_node in node.values:
            values.setdefault(self.checked_const(value_node, col, type_).value, None)
        return [InList(col, tuple(values))]

    def subject(self, node: ast.Expr, keyword: str) -> tuple[Col, str]:
        """The column left of BETWEEN or IN."""
        if isinstance(node, ast.Column):
            return self.resolve(node)
        if isinstance(node, ast.Arith):
            raise self.error(UnsupportedQueryError, ARITHMETIC, node.pos)
        raise self.error(
            UnsupportedQueryError, f"{keyword} needs a column on its left", _start(node)
        )

    def comparison(self, node: ast.Comparison) -> Factor:
        left, op, right = node.left, node.op, node.right
        if isinstance(left, ast.Arith):
            raise self.error(
                UnsupportedQueryError,
                "arithmetic is not supported on the left of a comparison: move the constant "
                "to the right (write a < b + 1, not a - 1 < b)",
                left.pos,
            )
        if not isinstance(left, ast.Column):  # a constant on the left: flip
            if isinstance(right, ast.Column):
                col, type_ = self.resolve(right)
                return Compare(col, FLIP[op], self.checked_const(left, col, type_).value)
            if isinstance(right, ast.Arith):
                raise self.error(UnsupportedQueryError, ARITHMETIC, right.pos)
            raise self.error(
                UnsupportedQueryError,
                "a comparison needs a column on at least one side",
                node.pos,
            )
        col, type_ = self.resolve(left)
        if isinstance(right, ast.Column):
            other, other_type = self.resolve(right)
            self.check_columns(col, type_, other, other_type, right.pos)
            return ColCompare(col, op, other)
        if isinstance(right, ast.Arith):
            return self.offset_comparison(col, type_, op, right)
        return Compare(col, op, self.checked_const(right, col, type_).value)

    def offset_comparison(self, col: Col, type_: str, op: str, right: ast.Arith) -> ColCompare:
        """``col op column ± constant``."""
        if not isinstance(right.left, ast.Column) or isinstance(
            right.right, ast.Column | ast.Arith
        ):
            raise self.error(UnsupportedQueryError, ARITHMETIC, right.pos)
        other, other_type = self.resolve(right.left)
        offset = self.const(right.right)
        if offset.type not in (*NUMERIC, "any"):
            raise self.error(
                QueryTypeError, f"the offset must be a number, not {offset.what}", offset.pos
            )
        self.check_columns(col, type_, other, other_type, right.left.pos)
        if other_type not in NUMERIC:
            raise self.error(
                QueryTypeError,
                f"cannot add a number to str column {self.display(other)}",
                right.pos,
            )
        value = offset.value if right.op == "+" else -offset.value  # type: ignore[operator]
        return ColCompare(col, op, other, value)

    def check_columns(self, left: Col, lt: str, right: Col, rt: str, pos: Pos) -> None:
        if not _comparable(lt, rt):
            raise self.error(
                QueryTypeError,
                f"cannot compare {lt} column {self.display(left)} "
                f"with {rt} column {self.display(right)}",
                pos,
            )

    # --- constants and parameters -----------------------------------------------------

    def checked_const(self, node: ast.Expr, col: Col, type_: str) -> _Const:
        """A constant compared with ``col`` (of type ``type_``), type-checked."""
        const = self.const(node)
        if not _comparable(type_, const.type):
            raise self.error(
                QueryTypeError,
                f"cannot compare {type_} column {self.display(col)} with {const.what}",
                const.pos,
            )
        return const

    def const(self, node: ast.Expr) -> _Const:
        if isinstance(node, ast.Literal):
            kind = "string" if isinstance(node.value, str) else "number"
            return _Const(
                node.value, _type_of(node.value), f"the {kind} {render_value(node.value)}", node.pos
            )
        if isinstance(node, ast.Param):
            if self.open:
                return _Const(_Open(), "any", f"parameter :{node.name}", node.pos)  # type: ignore[arg-type]
            value = self.param(node)
            return _Const(
                value, _type_of(value), f"parameter :{node.name}, {_a(_type_of(value))}", node.pos
            )
        if isinstance(node, ast.Neg):
            inner = self.const(node.operand)
            if inner.type not in (*NUMERIC, "any"):
                raise self.error(QueryTypeError, f"cannot negate {inner.what}", node.pos)
            return _Const(-inner.value, inner.type, f"minus {inner.what}", node.pos)  # type: ignore[operator]
        raise self.error(UnsupportedQueryError, ARITHMETIC, node.pos)  # pragma: no cover

    def param(self, node: ast.Param) -> Value:
        if node.name not in self.params:
            given = ", ".join(f":{name}" for name in sorted(self.params))
            hint = f" (given: {given})" if given else " (no parameters were given)"
            raise self.error(
                QueryParameterError, f"parameter :{node.name} is not given{hint}", node.pos
            )
        value = self.params[node.name]
        self.used.add(node.name)
        bound = param_value(value)
        if bound is not None:
            return bound
        if isinstance(value, bool):
            problem = "is a bool; pass an int, a float or a str"
        elif isinstance(value, numbers.Real):
            problem = f"is {value}; pass a finite number"
        else:
            problem = f"has type {type(value).__name__}; pass an int, a float or a str"
        raise self.error(QueryParameterError, f"parameter :{node.name} {problem}", node.pos)

    def check_unused_params(self) -> None:
        unused = sorted(set(self.params) - self.used)
        if unused:
            names = ", ".join(f":{name}" for name in unused)
            verb = "is" if len(unused) == 1 else "are"
            noun = "parameter" if len(unused) == 1 else "parameters"
            hint = ""
            if any(name.startswith(":") for name in unused):
                hint = " (name parameters without the colon: {'vid': 1} for :vid)"
            raise self.error(
                QueryParameterError,
                f"{noun} {names} {verb} given but not used in the query{hint}",
                Pos(1, 1),
            )

    # --- window and grouping ----------------------------------------------------------

    def bind_window(self, begin: ast.Expr, end: ast.Expr) -> Window:
        window = Window(self.bound(begin), self.bound(end))
        lo, hi = window.begin, window.end
        if lo.kind == hi.kind and lo.value > hi.value:
            raise self.error(
                UnsupportedQueryError,
                f"BEGIN is after END ({_bound_text(lo)} > {_bound_text(hi)}): "
                "the window would always be empty; swap the bounds",
                _start(begin),
            )
        return window

    def bound(self, node: ast.Expr) -> Bound:
        if isinstance(node, ast.Now):
            return Bound("now", 0)
        if isinstance(node, ast.Arith):  # NOW ± constant
            offset = self.window_number(node.right)
            return Bound("now", offset if node.op == "+" else -offset)
        return Bound("const", self.window_number(node))

    def window_number(self, node: ast.Expr) -> int | float:
        const = self.const(node)
        if isinstance(const.value, str):
            raise self.error(
                QueryTypeError,
                f"window bounds are numbers in the time attribute's unit, not {const.what}",
                const.pos,
            )
        return const.value

    def check_grouping(
        self, tree: ast.Query, items: list[tuple[ast.Item, SelectItem]], group_by: Col | None
    ) -> None:
        if not any(item.func for _, item in items):
            if tree.group_by is not None:
                raise self.error(
                    UnsupportedQueryError,
                    "GROUP BY needs an aggregate (COUNT, SUM, AVG, MIN or MAX) in SELECT; "
                    "add one or remove GROUP BY",
                    tree.group_by.pos,
                )
            return
        for node, item in items:
            if item.func is None and item.col != group_by:
                assert item.col is not None
                what = (
                    f"column {self.display(item.col)} is neither aggregated nor the GROUP BY column"
                )
                raise self.error(
                    UnsupportedQueryError,
                    f"{what}: add it to GROUP BY or aggregate it",
                    node.pos,
                )


def _display(col: Col, sources: Sequence[Source]) -> str:
    return col.attr if len(sources) == 1 else f"{sources[col.source].alias}.{col.attr}"


def _bound_text(bound: Bound) -> str:
    if bound.kind == "const":
        return render_value(bound.value)
    if bound.value == 0:
        return "NOW"
    return f"NOW {'-' if bound.value < 0 else '+'} {render_value(abs(bound.value))}"


def bind(
    tree: ast.Query,
    text: str,
    params: Mapping[str, object],
    schemas: Mapping[str, Schema],
) -> QuerySpec:
    """Bind a parsed query to ``schemas`` (stream name → Schema) and ``params``.

    ``text`` is the query text the tree came from: it goes into ``QuerySpec.text`` and
    into errors, which then show the offending line with a caret.
    """
    return _Binder(text, params, schemas).query(tree)


def canonical(spec: QuerySpec) -> str:
    """``spec`` as query text in normal form, on one line.

    Columns are unqualified in a single-stream query and ``alias.attr`` in a join;
    parameters appear as their values; ``AS`` is written only where the output name is
    not the default one. ``compile_query(canonical(spec), None, schemas)`` gives back
    ``spec`` (except ``text``).
    """
    sources = spec.sources

    def col(c: Col) -> str:
        return _display(c, sources)

    def item(it: SelectItem) -> str:
        if it.func is None:
            assert it.col is not None
            expr = col(it.col)
        else:
            expr = f"{it.func}({'*' if it.col is None else col(it.col)})"
        return expr if it.name == expr else f"{expr} AS {it.name}"

    def factor(f: Factor) -> str:
        if isinstance(f, Compare):
            return f"{col(f.col)} {f.op} {render_value(f.value)}"
        if isinstance(f, InList):
            return f"{col(f.col)} IN ({', '.join(render_value(v) for v in f.values)})"
        text = f"{col(f.left)} {f.op} {col(f.right)}"
        if f.offset:
            sign = "-" if f.offset < 0 else "+"
            text += f" {sign} {render_value(abs(f.offset))}"
        return text

    parts = [
        "SELECT " + ", ".join(item(it) for it in spec.select),
        "FROM "
        + ", ".join(
            s.stream if s.alias == s.stream else f"{s.stream} AS {s.alias}" for s in sources
        ),
    ]
    if spec.factors:
        parts.append("WHERE " + " AND ".join(factor(f) for f in spec.factors))
    if spec.group_by is not None:
        parts.append(f"GROUP BY {col(spec.group_by)}")
    parts.append(f"BEGIN {_bound_text(spec.window.begin)} END {_bound_text(spec.window.end)}")
    return " ".join(parts)
