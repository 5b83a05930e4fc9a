"""A brute-force reference for psoup's embedded API: the oracle of the property tests.

Everything here is deliberately naive: each stream is a plain list of every tuple ever
inserted, retention and windows are re-applied at every invoke, a join is a nested loop
over all pairs, aggregates are computed from the full list of result rows. No indexes, no
incremental state, no numpy. The only shared code with the engine is the query compiler
(``psoup.query.compile_query``), which turns text into a ``QuerySpec``; the oracle then
evaluates that spec itself. ``register_spec`` accepts a hand-built ``QuerySpec`` so the
oracle can be checked without the parser (see ``tests/test_oracle.py``).

Semantics implemented (the brief of the property tests):

* every inserted tuple gets a global ``tuple_id`` (increasing across streams) and ``ts``,
  the value of its stream's time attribute; per stream ``ts`` never decreases;
* a tuple of stream S is *visible* iff ``S.max_window is None`` or
  ``ts >= (largest ts ever inserted into S) - S.max_window``;
* NOW of a query is ``now=`` when given, else the largest ts ever inserted into any stream
  of its FROM list (None when none was: a window that needs NOW is then empty);
* a selection row is inside the window ``[lo, hi]`` iff ``lo <= ts <= hi``, a join pair
  iff both of its tuples are; selections come in arrival order, join pairs ordered by
  ``(min(ts0, ts1), tuple_id0, tuple_id1)``;
* aggregates without GROUP BY give one row (COUNT 0 and None for the others over no
  rows); with GROUP BY one row per distinct key among the result rows, keys ascending.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from psoup.errors import (
    AlreadyExistsError,
    BatchError,
    SchemaError,
    UnknownHandleError,
    UnknownStreamError,
)
from psoup.query.spec import (
    Col,
    ColCompare,
    Compare,
    Factor,
    InList,
    QuerySpec,
    SelectItem,
    Value,
)
from psoup.values import DTYPES, TIME_TYPES, Schema

Number = int | float
Row = tuple[Any, ...]

#: The comparison operators of the query language, as Python functions.
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    "=": operator.eq,
    ">=": operator.ge,
    ">": operator.gt,
    "!=": operator.ne,
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class StoredTuple:
    """One inserted tuple: its global id, its timestamp and its values in schema order."""

    tuple_id: int
    ts: Number
    values: tuple[Value, ...]


@dataclass
class OracleStream:
    """A stream: its schema, retention and every tuple ever inserted (never dropped)."""

    name: str
    schema: Schema
    max_window: Number | None
    tuples: list[StoredTuple] = field(default_factory=list)
    #: The largest ts ever inserted (None before the first insert).
    max_ts: Number | None = None

    def is_visible(self, t: StoredTuple) -> bool:
        """Whether ``t`` is still retained: within ``max_window`` of the latest ts."""
        if self.max_window is None or self.max_ts is None:
            return True
        return t.ts >= self.max_ts - self.max_window

    def visible(self) -> list[StoredTuple]:
        """The retained tuples, in arrival order."""
        return [t for t in self.tuples if self.is_visible(t)]


@dataclass(frozen=True)
class InsertResult:
    """What ``Oracle.insert`` returns: the ids of the first and last tuple of the batch."""

    first_id: int
    last_id: int


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _coerce(value: object, typ: str) -> Value | None:
    """``value`` as stored in a column of type ``typ``, or None if it does not fit."""
    if typ == "int":
        return value if _is_int(value) else None  # type: ignore[return-value]
    if typ == "float":
        if _is_int(value):
            return float(value)  # type: ignore[arg-type]
        if isinstance(value, float) and math.isfinite(value):
            return value
        return None
    if typ == "str":
        return value if isinstance(value, str) else None
    raise AssertionError(f"unknown type {typ!r}")


class Oracle:
    """The reference engine. Same calls as ``psoup.connect()``'s database object."""

    def __init__(self) -> None:
        self._streams: dict[str, OracleStream] = {}
        self._queries: dict[str, QuerySpec] = {}
        self._next_id = 0
        self._next_handle = 0

    # -- streams ------------------------------------------------------------------------

    def create_stream(
        self,
        name: str,
        schema: Mapping[str, str],
        time: str,
        max_window: Number | None = None,
    ) -> None:
        """Declare a stream; raises SchemaError or AlreadyExistsError like the engine."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise SchemaError(f"bad stream name {name!r}")
        if not isinstance(schema, Mapping) or not schema:
            raise SchemaError("a stream needs at least one attribute")
        for attr, typ in schema.items():
            if not isinstance(attr, str) or not _NAME.match(attr):
                raise SchemaError(f"bad attribute name {attr!r}")
            if typ not in DTYPES:
                raise SchemaError(f"unknown type {typ!r}")
        if time not in schema:
            raise SchemaError(f"time attribute {time!r} is not an attribute")
        if schema[time] not in TIME_TYPES:
            raise SchemaError("the time attribute must be int or float")
        if max_window is not None:
            if isinstance(max_window, bool) or not isinstance(max_window, int | float):
                raise SchemaError("max_window must be a number")
            if not math.isfinite(max_window) or max_window < 0:
                raise SchemaError("max_window must be >= 0")
        if name in self._streams:
            raise AlreadyExistsError(f"stream {name!r} exists")
        sch = Schema(tuple(schema), tuple(schema.values()), time)
        self._streams[name] = OracleStream(name, sch, max_window)

    def schemas(self) -> dict[str, Schema]:
        """Every stream's schema by name (what ``compile_query`` needs)."""
        return {name: s.schema for name, s in self._streams.items()}

    def insert(self, name: str, rows: Iterable[Sequence[object] | Mapping[str, object]]):
        """Append a batch, all or nothing. Rows are sequences in schema order or dicts."""
        stream = self._streams.get(name)
        if stream is None:
            raise UnknownStreamError(f"no stream {name!r}")
        sch = stream.schema
        latest = stream.max_ts
        parsed: list[tuple[Value, ...]] = []
        for i, row in enumerate(rows):
            if isinstance(row, Mapping):
                if set(row) != set(sch.names):
                    raise BatchError("the attributes do not match the schema", row=i)
                raw = [row[n] for n in sch.names]
            elif isinstance(row, tuple | list):
                if len(row) != len(sch.names):
                    raise BatchError(f"{len(row)} values for {len(sch.names)} attributes", row=i)
                raw = list(row)
            else:
                raise BatchError("a row must be a tuple or a dict", row=i)
            values = []
            for attr, typ, v in zip(sch.names, sch.types, raw, strict=True):
                c = _coerce(v, typ)
                if c is None:
                    raise BatchError(f"{v!r} is not a valid {typ}", row=i, column=attr)
                values.append(c)
            ts = values[sch.time_index]
            if latest is not None and ts < latest:  # type: ignore[operator]
                raise BatchError("the time attribute decreases", row=i, column=sch.time)
            latest = ts  # type: ignore[assignment]
            parsed.append(tuple(values))
        if not parsed:
            raise BatchError("empty batch")
        first = self._next_id
        for values in parsed:
            ts = values[sch.time_index]
            stream.tuples.append(StoredTuple(self._next_id, ts, values))  # type: ignore[arg-type]
            self._next_id += 1
            stream.max_ts = ts  # type: ignore[assignment]
        return InsertResult(first, self._next_id - 1)

    # -- queries ------------------------------------------------------------------------

    def register(self, text: str, params: Mapping[str, Value] | None = None) -> str:
        """Compile ``text`` (QueryError on failure) and register it; returns a handle."""
        from psoup.query import compile_query

        spec = compile_query(text, dict(params or {}), self.schemas())
        return self.register_spec(spec)

    def register_spec(self, spec: QuerySpec) -> str:
        """Register an already bound query; returns a handle (32 hex chars)."""
        for src in spec.sources:
            if src.stream not in self._streams:
                raise UnknownStreamError(f"no stream {src.stream!r}")
        handle = f"{self._next_handle:032x}"
        self._next_handle += 1
        self._queries[handle] = spec
        return handle

    def unregister(self, handle: str) -> None:
        if handle not in self._queries:
            raise UnknownHandleError(f"no query {handle!r}")
        del self._queries[handle]

    def spec(self, handle: str) -> QuerySpec:
        if handle not in self._queries:
            raise UnknownHandleError(f"no query {handle!r}")
        return self._queries[handle]

    def current_now(self, handle: str) -> Number | None:
        """NOW of the query when invoked without ``now=``: latest ts over its FROM list."""
        spec = self.spec(handle)
        times = [self._streams[s.stream].max_ts for s in spec.sources]
        known = [t for t in times if t is not None]
        return max(known) if known else None

    def invoke(self, handle: str, now: Number | None = None) -> tuple[tuple[str, ...], list[Row]]:
        """The query's current answer: ``(columns, rows)``."""
        spec = self.spec(handle)
        if now is None:
            now = self.current_now(handle)
        combos = self._matches(spec, now)
        if spec.is_aggregate:
            rows = _aggregate(spec, combos, self._schemas_of(spec))
        else:
            rows = [tuple(_value(c, item.col, self._schemas_of(spec)) for item in spec.select)
                    for c in combos]  # fmt: skip
        return spec.columns, rows

    # -- evaluation ---------------------------------------------------------------------

    def _schemas_of(self, spec: QuerySpec) -> list[Schema]:
        return [self._streams[s.stream].schema for s in spec.sources]

    def _matches(self, spec: QuerySpec, now: Number | None) -> list[tuple[StoredTuple, ...]]:
        """Every combination of visible tuples (one per source) that is a result, ordered."""
        window = spec.window.resolve(now)
        if window is None:
            return []
        lo, hi = window
        schemas = self._schemas_of(spec)
        if len(spec.sources) == 1:
            stream = self._streams[spec.sources[0].stream]
            out = [
                (t,)
                for t in stream.tuples
                if stream.is_visible(t)
                and lo <= t.ts <= hi
                and all(_holds(f, (t,), schemas) for f in spec.factors)
            ]
            out.sort(key=lambda c: c[0].tuple_id)  # arrival order
            return out
        if len(spec.sources) != 2:
            raise NotImplementedError("the oracle evaluates one or two sources")
        s0 = self._streams[spec.sources[0].stream]
        s1 = self._streams[spec.sources[1].stream]
        pairs = []
        for t0 in s0.tuples:
            for t1 in s1.tuples:
                if not (s0.is_visible(t0) and s1.is_visible(t1)):
                    continue
                if not (lo <= t0.ts <= hi and lo <= t1.ts <= hi):
                    continue
                if all(_holds(f, (t0, t1), schemas) for f in spec.factors):
                    pairs.append((t0, t1))
        pairs.sort(key=lambda p: (min(p[0].ts, p[1].ts), p[0].tuple_id, p[1].tuple_id))
        return pairs


def _value(combo: Sequence[StoredTuple], col: Col | None, schemas: Sequence[Schema]) -> Value:
    """The value of ``col`` in one result combination."""
    assert col is not None
    return combo[col.source].values[schemas[col.source].index_of(col.attr)]


def _holds(f: Factor, combo: Sequence[StoredTuple], schemas: Sequence[Schema]) -> bool:
    """Whether the boolean factor ``f`` is true for ``combo``."""
    if isinstance(f, Compare):
        return OPS[f.op](_value(combo, f.col, schemas), f.value)
    if isinstance(f, InList):
        v = _value(combo, f.col, schemas)
        return any(v == x for x in f.values)
    if isinstance(f, ColCompare):
        left = _value(combo, f.left, schemas)
        right = _value(combo, f.right, schemas)
        if f.offset != 0:
            right = right + f.offset  # type: ignore[operator]
        return OPS[f.op](left, right)
    raise AssertionError(f"unknown factor {f!r}")


def _aggregate(
    spec: QuerySpec, combos: list[tuple[StoredTuple, ...]], schemas: Sequence[Schema]
) -> list[Row]:
    """The rows of an aggregate query over its (windowed) result combinations."""
    if spec.group_by is None:
        return [tuple(_agg(item, combos, schemas) for item in spec.select)]
    groups: dict[Value, list[tuple[StoredTuple, ...]]] = {}
    for c in combos:
        groups.setdefault(_value(c, spec.group_by, schemas), []).append(c)
    rows = []
    for key in sorted(groups):  # type: ignore[type-var]
        members = groups[key]
        rows.append(
            tuple(
                _value(members[0], item.col, schemas)
                if item.func is None
                else _agg(item, members, schemas)
                for item in spec.select
            )
        )
    return rows


def _agg(
    item: SelectItem, combos: list[tuple[StoredTuple, ...]], schemas: Sequence[Schema]
) -> Value | None:
    """One aggregate over ``combos`` (None for all but COUNT when there are none)."""
    if item.func == "COUNT":
        return len(combos)
    assert item.col is not None
    values = [_value(c, item.col, schemas) for c in combos]
    if not values:
        return None
    col_type = schemas[item.col.source].type_of(item.col.attr)
    if item.func == "SUM":
        return sum(values) if col_type == "int" else math.fsum(values)  # type: ignore[arg-type]
    if item.func == "AVG":
        if col_type == "int":
            return sum(values) / len(values)  # type: ignore[arg-type,operator]
        return math.fsum(values) / len(values)  # type: ignore[arg-type]
    if item.func == "MIN":
        return min(values)  # type: ignore[type-var]
    if item.func == "MAX":
        return max(values)  # type: ignore[type-var]
    raise AssertionError(f"unknown aggregate {item.func!r}")


def rows_equal(expected: Sequence[Row], actual: Sequence[Row]) -> bool:
    """Rows equal in order; floats compared with ``math.isclose``, everything else exactly.

    Types must agree too: an int where a float is expected (or the reverse) is a mismatch,
    and so is a numpy scalar where a Python scalar is expected.
    """
    if len(expected) != len(actual):
        return False
    for e, a in zip(expected, actual, strict=True):
        if not isinstance(a, tuple) or len(e) != len(a):
            return False
        for x, y in zip(e, a, strict=True):
            if type(x) is not type(y):
                return False
            if isinstance(x, float):
                if not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9):
                    return False
            elif x != y:
                return False
    return True
