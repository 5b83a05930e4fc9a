"""Hypothesis strategies for the property tests: streams, rows, queries and programs.

A *program* is what the property tests run, identically, on the oracle and on the engine
under each strategy: some stream declarations, a ``block_rows`` for the engine, and a list
of steps (insert a batch, insert a batch that must be rejected, register a query, invoke,
unregister). Steps are stored in a relative form so that hypothesis can delete any of them
while shrinking and the rest stays meaningful:

* an insert's time values are *increments* over the stream's latest time; ``concretize``
  turns them into absolute timestamps (so deleting an insert never makes a later one go
  back in time);
* invoke and unregister name a query by a number taken modulo the queries alive at that
  moment (and are skipped when there is none); invoke's ``now=`` is an offset from the
  query's current NOW.

Domains are deliberately tiny (ints 0..6, floats in steps of 0.5, a handful of strings,
time increments of 0..3) so that equal values, equal timestamps and window edges are hit
all the time. Floats stay dyadic so that ``b + 0.5`` and ``NOW - 2.5`` are exact and the
engine cannot be blamed for rounding that a different but correct evaluation order causes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache

from hypothesis import strategies as st

Value = int | float | str
Number = int | float

STREAM_NAMES = ("r", "q")
ATTR_NAMES = ("a", "b", "c")
TIME_ATTR = "t"
ALIASES = ("x", "y")
OPS = ("<", "<=", "=", ">=", ">", "!=")
STRINGS = ("", "a", "ab", "b", "ba", "c", "o'k")
AGGREGATES = ("COUNT", "SUM", "AVG", "MIN", "MAX")


# -- cached building blocks (building strategies anew for every draw is slow) ---------------


@cache
def pick(options: tuple) -> st.SearchStrategy:
    """``sampled_from(options)``, built once per distinct tuple."""
    return st.sampled_from(options)


@cache
def ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    """``integers(lo, hi)``, built once per range."""
    return st.integers(lo, hi)


def halves(lo: int, hi: int) -> st.SearchStrategy[float]:
    """Multiples of 0.5 from ``lo / 2`` to ``hi / 2``."""
    return _halves(lo, hi)


@cache
def _halves(lo: int, hi: int) -> st.SearchStrategy[float]:
    return st.integers(lo, hi).map(lambda k: k / 2)


BOOLS = st.booleans()


# -- streams and values -------------------------------------------------------------------


@dataclass(frozen=True)
class StreamDef:
    """A stream declaration: attributes in schema order, time attribute, retention."""

    name: str
    attrs: tuple[tuple[str, str], ...]
    time: str
    max_window: Number | None

    @property
    def schema(self) -> dict[str, str]:
        return dict(self.attrs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.attrs)

    def type_of(self, attr: str) -> str:
        return self.schema[attr]

    @property
    def time_index(self) -> int:
        return self.names.index(self.time)


@cache
def data_values(typ: str) -> st.SearchStrategy[Value]:
    """Values stored in a column of type ``typ`` (small domains, many ties)."""
    if typ == "int":
        return st.integers(0, 6)
    if typ == "float":
        # mostly halves; sometimes a Python int, which a float column must accept
        return st.one_of(st.integers(0, 12).map(lambda k: k / 2), st.integers(0, 6))
    return st.sampled_from(STRINGS)


@cache
def const_values(typ: str) -> st.SearchStrategy[Value]:
    """Constants compared with a column of type ``typ``: a bit wider than the data."""
    if typ == "int":
        return st.one_of(st.integers(-1, 7), st.integers(-2, 14).map(lambda k: k / 2))
    if typ == "float":
        return st.one_of(st.integers(-2, 14).map(lambda k: k / 2), st.integers(-1, 7))
    return st.sampled_from((*STRINGS, "aa", "z"))


@cache
def time_increments(typ: str) -> st.SearchStrategy[Number]:
    """How much the time attribute grows from one tuple to the next (0 = a tie)."""
    if typ == "int":
        return st.sampled_from((0, 1, 1, 2, 3))
    return st.integers(0, 6).map(lambda k: k / 2)


@st.composite
def stream_defs(draw: st.DrawFn, name: str) -> StreamDef:
    """One stream: 2-4 attributes, one of them the int or float time attribute."""
    n_other = draw(ints(1, 3))
    types = draw(
        st.lists(
            st.sampled_from(("int", "int", "float", "str")), min_size=n_other, max_size=n_other
        )
    )
    attrs = list(zip(ATTR_NAMES, types, strict=False))
    time_type = draw(pick(("int", "int", "float")))
    pos = draw(ints(0, len(attrs)))
    attrs.insert(pos, (TIME_ATTR, time_type))
    max_window: Number | None = draw(
        st.one_of(
            st.none(),
            st.integers(0, 8),
            st.integers(0, 16).map(lambda k: k / 2) if time_type == "float" else st.nothing(),
        )
    )
    return StreamDef(name, tuple(attrs), TIME_ATTR, max_window)


@cache
def raw_rows(stream: StreamDef) -> st.SearchStrategy[tuple[Value, ...]]:
    """A row in schema order whose time slot holds an increment, not a timestamp."""
    return st.tuples(
        *(time_increments(t) if n == stream.time else data_values(t) for n, t in stream.attrs)
    )


# -- query texts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryCase:
    """A query text and its named parameters."""

    text: str
    params: tuple[tuple[str, Value], ...] = ()

    @property
    def params_dict(self) -> dict[str, Value]:
        return dict(self.params)


def shifted(case: QueryCase, shift: int) -> QueryCase:
    """``case`` with each parameter's value moved by ``shift``, keeping its type."""

    def move(v: Value) -> Value:
        if isinstance(v, str):
            return STRINGS[(STRINGS.index(v) + shift) % len(STRINGS)] if v in STRINGS else v
        if isinstance(v, int):
            return (v + shift) % 9 - 1
        return ((v * 2 + shift) % 17 - 2) / 2

    return QueryCase(case.text, tuple((n, move(v)) for n, v in case.params))


def literal(value: Value) -> str:
    """``value`` as it is written in a query."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


@dataclass
class _QueryBuilder:
    """Collects the named parameters while a query text is drawn."""

    draw: st.DrawFn
    params: dict[str, Value] = field(default_factory=dict)

    def const(self, value: Value) -> str:
        """A constant, written literally or (sometimes) as a named parameter."""
        if self.draw(ints(0, 4)) == 4:
            name = f"p{len(self.params)}"
            self.params[name] = value
            return f":{name}"
        return literal(value)


@dataclass(frozen=True)
class _Src:
    stream: StreamDef
    ref: str  # how columns are qualified: the alias, else the stream name
    decl: str  # the FROM-list entry


def _is_num(typ: str) -> bool:
    return typ in ("int", "float")


@st.composite
def queries(draw: st.DrawFn, streams: Sequence[StreamDef]) -> QueryCase:
    """A valid query over ``streams``: a selection or a two-way join, plain or aggregate."""
    qb = _QueryBuilder(draw)
    join = draw(ints(0, 9)) >= 7
    if join:
        s0, s1 = draw(pick(tuple(streams))), draw(pick(tuple(streams)))
        if s0.name == s1.name or draw(BOOLS):
            as_kw = draw(pick(("", "AS ")))
            srcs = [_Src(s0, "x", f"{s0.name} {as_kw}x"), _Src(s1, "y", f"{s1.name} {as_kw}y")]
        else:
            srcs = [_Src(s0, s0.name, s0.name), _Src(s1, s1.name, s1.name)]
    else:
        s0 = draw(pick(tuple(streams)))
        srcs = [_Src(s0, "x", f"{s0.name} x")] if draw(BOOLS) else [_Src(s0, s0.name, s0.name)]
    qualify_always = join or draw(BOOLS)
    cols = [(i, n, t) for i, src in enumerate(srcs) for n, t in src.stream.attrs]

    def ref(c: tuple[int, str, str]) -> str:
        if qualify_always:
            return f"{srcs[c[0]].ref}.{c[1]}"
        return c[1]

    factors: list[str] = []
    if join:
        factors.append(draw(_col_compare(srcs, ref, cross=True, qb=qb)))
    for _ in range(draw(ints(0, 1 if join else 3))):
        kind = draw(pick(("cmp", "cmp", "between", "in", "colcmp")))
        if kind == "colcmp":
            factors.append(draw(_col_compare(srcs, ref, cross=False, qb=qb)))
            continue
        c = draw(pick(tuple(cols)))
        if kind == "cmp":
            op = draw(pick((*OPS, "<>")))
            value = qb.const(draw(const_values(c[2])))
            if draw(ints(0, 5)) == 5:
                factors.append(f"{value} {op} {ref(c)}")
            else:
                factors.append(f"{ref(c)} {op} {value}")
        elif kind == "between":
            lo = draw(const_values(c[2]))
            hi = draw(const_values(c[2]))
            factors.append(f"{ref(c)} BETWEEN {qb.const(lo)} AND {qb.const(hi)}")
        else:
            values = draw(_in_lists(c[2]))
            factors.append(f"{ref(c)} IN ({', '.join(qb.const(v) for v in values)})")
    if draw(ints(0, 9)) == 9 and factors:
        # a parenthesized sub-conjunction is the same conjunction
        k = draw(ints(1, len(factors)))
        factors = ["(" + " AND ".join(factors[:k]) + ")", *factors[k:]]

    group_by = ""
    shape = draw(ints(0, 9))  # shrinks towards SELECT *
    if shape < 3:
        items = ["*"]
    elif shape < 6:
        chosen = draw(st.lists(pick(tuple(cols)), min_size=1, max_size=3, unique=True))
        items = [ref(c) for c in chosen]
    else:
        items = _aggregate_items(draw, cols, ref)
        if draw(BOOLS):
            g = draw(pick(tuple(cols)))
            group_by = f" GROUP BY {ref(g)}"
            if draw(ints(0, 3)) > 0:
                items.insert(draw(ints(0, len(items))), ref(g))
    items = _maybe_alias(draw, items)

    where = f" WHERE {' AND '.join(factors)}" if factors else ""
    text = (
        f"SELECT {', '.join(items)} FROM {', '.join(s.decl for s in srcs)}{where}{group_by}"
        f" {draw(windows(srcs[0].stream.type_of(srcs[0].stream.time), qb))}"
    )
    return QueryCase(text, tuple(qb.params.items()))


@cache
def _in_lists(typ: str) -> st.SearchStrategy[list[Value]]:
    """1-3 distinct constants for ``IN``; floats for a float column (so 2 and 2.0 don't mix)."""
    pool = const_values(typ).map(float) if typ == "float" else const_values(typ)
    return st.lists(pool, min_size=1, max_size=3, unique=True)


def _aggregate_items(draw: st.DrawFn, cols, ref) -> list[str]:
    items: list[str] = []
    for _ in range(draw(ints(1, 3))):
        func = draw(pick(AGGREGATES))
        if func == "COUNT" and draw(BOOLS):
            item = "COUNT(*)"
        else:
            pool = [c for c in cols if func in ("COUNT", "MIN", "MAX") or _is_num(c[2])]
            item = f"{func}({ref(draw(pick(tuple(pool))))})"
        if item not in items:
            items.append(item)
    return items


def _maybe_alias(draw: st.DrawFn, items: list[str]) -> list[str]:
    if items == ["*"] or draw(ints(0, 3)) < 3:
        return items
    return [f"{item} AS o{i}" if draw(BOOLS) else item for i, item in enumerate(items)]


@st.composite
def _col_compare(draw: st.DrawFn, srcs: list[_Src], ref, cross: bool, qb: _QueryBuilder) -> str:
    """``left op right [± k]``: across the two sources (a join factor) or within one.

    Both sides are numeric (any mix of int and float, with an optional offset) or both str
    (no offset). Every stream has a numeric time attribute, so a numeric pair always exists.
    """
    if cross:
        i, j = draw(pick(((0, 1), (1, 0))))
    else:
        i = j = draw(ints(0, len(srcs) - 1))
    attrs_i, attrs_j = srcs[i].stream.attrs, srcs[j].stream.attrs
    common = {_is_num(t) for _, t in attrs_i} & {_is_num(t) for _, t in attrs_j}
    numeric = draw(pick(tuple(sorted(common, reverse=True))))
    left = draw(pick(tuple([a for a in attrs_i if _is_num(a[1]) == numeric])))
    right = draw(pick(tuple([a for a in attrs_j if _is_num(a[1]) == numeric])))
    op = draw(pick(("=", "=", *OPS)) if cross else pick(OPS))
    text = f"{ref((i, *left))} {op} {ref((j, *right))}"
    if numeric:
        k = draw(pick((0, 0, 1, 2, 0.5, 1.5)))
        if k:
            text += f" {draw(pick(('+', '-')))} {literal(k)}"
    return text


_WINDOW_LENGTHS = {
    "int": st.one_of(st.integers(0, 12), st.integers(13, 60)),
    "float": st.one_of(st.integers(0, 12), st.integers(0, 24).map(lambda k: k / 2)),
}
_ONE_IN_FIVE = st.integers(0, 4).map(lambda k: k == 4)


@st.composite
def windows(draw: st.DrawFn, time_type: str, qb: _QueryBuilder | None = None) -> str:
    """BEGIN ... END: snapshot, landmark, sliding, or NOW ± k on both sides.

    Never BEGIN after END with two bounds of one kind: the binder refuses that window.
    """
    num = _WINDOW_LENGTHS[time_type]

    def const(v: Number) -> str:
        return qb.const(v) if qb is not None else literal(v)

    def now_plus(k: Number) -> str:
        if k == 0:
            return "NOW"
        return f"NOW - {const(-k)}" if k < 0 else f"NOW + {const(k)}"

    kind = draw(pick(("landmark", "snapshot", "sliding", "sliding", "shifted")))
    if kind == "snapshot":
        lo = draw(ints(-2, 20))
        return f"BEGIN {const(lo)} END {const(lo + draw(ints(0, 25)))}"
    if kind == "landmark":
        return f"BEGIN {const(draw(ints(-1, 15)))} END NOW"
    if kind == "sliding":
        return f"BEGIN {now_plus(-draw(num))} END NOW"
    lo = draw(ints(-10, 3))
    return f"BEGIN {now_plus(lo)} END {now_plus(lo + draw(ints(0, 10)))}"


# -- programs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Insert:
    """Insert ``rows`` (time slots are increments) into stream number ``stream``."""

    stream: int
    rows: tuple[tuple[Value, ...], ...]
    as_dicts: bool = False


@dataclass(frozen=True)
class BadInsert:
    """A batch that must be rejected whole: ``rows`` valid rows, then one bad row."""

    stream: int
    rows: tuple[tuple[Value, ...], ...]
    defect: str  # "time", "type", "arity", "bool", "nan", "keys"
    depth: int = 1  # how far back in time for a "time" defect


@dataclass(frozen=True)
class Register:
    query: QueryCase


@dataclass(frozen=True)
class RegisterAgain:
    """Register an earlier registration's text (``which`` modulo their number) again, as
    a prepared template, with each parameter's value moved by ``shift`` (same type)."""

    which: int
    shift: int


@dataclass(frozen=True)
class Unregister:
    which: int


@dataclass(frozen=True)
class InvokeAll:
    """Invoke every alive query (the last step of every program)."""


@dataclass(frozen=True)
class Invoke:
    """Invoke an alive query (``which`` modulo the alive ones), or a dropped one (stale)."""

    which: int
    now_delta: Number | None = None
    stale: bool = False


Step = Insert | BadInsert | Register | RegisterAgain | Unregister | Invoke | InvokeAll

DEFECTS = ("time", "time", "type", "arity", "bool", "nan", "keys")


@dataclass(frozen=True)
class Program:
    streams: tuple[StreamDef, ...]
    block_rows: int
    steps: tuple[Step, ...]


@lru_cache(maxsize=256)
def steps_for(streams: tuple[StreamDef, ...], max_rows: int = 6) -> st.SearchStrategy[Step]:
    """One step of a program over ``streams``."""
    idx = ints(0, len(streams) - 1)

    def insert_for(i: int) -> st.SearchStrategy[Insert]:
        return st.builds(
            Insert,
            st.just(i),
            st.lists(raw_rows(streams[i]), min_size=1, max_size=max_rows).map(tuple),
            _ONE_IN_FIVE,
        )

    def bad_insert_for(i: int) -> st.SearchStrategy[BadInsert]:
        return st.builds(
            BadInsert,
            st.just(i),
            st.lists(raw_rows(streams[i]), min_size=0, max_size=3).map(tuple),
            pick(DEFECTS),
            ints(1, 3),
        )

    now_deltas = st.one_of(st.none(), st.none(), ints(-6, 6))
    which = ints(0, 7)
    kinds: dict[str, st.SearchStrategy[Step]] = {
        "insert": idx.flatmap(insert_for),
        "invoke": st.builds(Invoke, which, now_deltas),
        "register": queries(streams).map(Register),
        "again": st.builds(RegisterAgain, which, ints(1, 9)),
        "unregister": st.builds(Unregister, which),
        "stale": st.builds(Invoke, which, st.none(), st.just(True)),
        "bad": idx.flatmap(bad_insert_for),
    }
    # relative frequencies; hypothesis shrinks towards the first kind
    weights = {"insert": 8, "invoke": 6, "register": 4, "again": 2, "unregister": 1, "stale": 1,
               "bad": 1}  # fmt: skip
    pool = [k for k, w in weights.items() for _ in range(w)]
    return pick(tuple(pool)).flatmap(kinds.__getitem__)


@st.composite
def programs(draw: st.DrawFn, chunk: int = 12) -> Program:
    """1 or 2 streams, a block size of 2..8 rows, and about 30 (up to ``chunk``²) steps.

    The steps are drawn as a list of lists and flattened: hypothesis keeps short lists
    short, so one flat list would average a handful of steps (too few to reach the bugs
    that need many blocks, several queries and an unregister), while a ``min_size`` would
    keep shrunk programs long. Nested lists are long on average and still shrink to one
    step.
    """
    n = draw(ints(1, 2))
    streams = tuple(draw(stream_defs(STREAM_NAMES[i])) for i in range(n))
    block_rows = draw(ints(2, 8))
    step = steps_for(streams)
    chunks = draw(st.lists(st.lists(step, min_size=1, max_size=chunk), min_size=1, max_size=chunk))
    steps = [s for c in chunks for s in c]
    # end by invoking every alive query so that every registration is checked
    return Program(streams, block_rows, (*steps, InvokeAll()))


# -- concretization -------------------------------------------------------------------------


@dataclass(frozen=True)
class ConcreteInsert:
    """A batch with absolute timestamps, as the API takes it (tuples or dicts)."""

    stream: str
    rows: tuple[tuple[Value, ...] | dict[str, object], ...]
    must_fail: bool


def _bad_row(stream: StreamDef, row: list[object], defect: str, latest: Number | None, depth: int):
    """Spoil ``row`` (absolute time already set) according to ``defect``."""
    names, types = stream.names, [t for _, t in stream.attrs]
    ti = stream.time_index
    if defect == "time" and latest is not None:
        row[ti] = latest - depth
        return tuple(row)
    if defect == "arity":
        return (*row, 0) if depth % 2 else tuple(row[:-1])
    if defect == "keys":
        d = dict(zip(names, row, strict=True))
        if depth % 2:
            d["zz"] = 1
        else:
            del d[names[0]]
        return d
    if defect == "nan":
        for i, t in enumerate(types):
            if t == "float":
                row[i] = float("nan") if depth % 2 else float("inf")
                return tuple(row)
    if defect == "bool":
        for i, t in enumerate(types):
            if t == "int":
                row[i] = True
                return tuple(row)
    # "type" (and the fall-backs): a value of the wrong type in the time column
    row[ti] = "late" if depth % 2 else None
    return tuple(row)


def concretize_insert(
    stream: StreamDef, step: Insert | BadInsert, latest: Number | None
) -> tuple[ConcreteInsert, Number | None]:
    """The absolute batch for ``step`` and the stream's latest time after it."""
    ti = stream.time_index
    rows: list[tuple[Value, ...] | dict[str, object]] = []
    t = latest
    for raw in step.rows:
        r = list(raw)
        t = (0 if t is None else t) + raw[ti]  # type: ignore[operator]
        r[ti] = t
        rows.append(tuple(r))
    if isinstance(step, BadInsert):
        base = list(rows[-1]) if rows else [0 if typ == "int" else (0.0 if typ == "float" else "")
                                           for _, typ in stream.attrs]  # fmt: skip
        if not rows:
            base[ti] = latest if latest is not None else 0
        rows.append(_bad_row(stream, base, step.defect, t, step.depth))
        return ConcreteInsert(stream.name, tuple(rows), True), latest
    if step.as_dicts:
        rows = [dict(zip(stream.names, r, strict=True)) for r in rows]  # type: ignore[arg-type]
    return ConcreteInsert(stream.name, tuple(rows), False), t
