"""The values both sides of the wire share: stream schemas, typed columns, results.

The engine, the server and the client library all speak in these, so this module
imports neither the engine nor gRPC (only numpy and psoup.errors; pyarrow when a result
is asked for as an Arrow table): ``import clients``
does not load the engine. It holds:

* ``Schema`` and ``DTYPES``: a stream's ordered, typed attributes and its time
  attribute, and how each type is stored column-wise (its numpy dtype). A schema does no
  validation of user input.
* Batch validation: user rows or columns -> typed numpy columns. A batch is checked
  whole before anything of it is stored; the first problem found raises ``BatchError``
  naming the row (0-based position in the batch) and the column. Rules: an ``int``
  column takes Python/numpy integers (not bool) within 64 bits; a ``float`` column takes
  ints and floats, finite; a ``str`` column takes str. Timestamps must not decrease,
  within the batch or against the stream's newest stored timestamp.
* ``Result`` (the answer of one invoke) and ``InsertResult`` (what an accepted batch
  got).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from psoup.errors import BatchError

#: The attribute types a stream may declare, with the numpy dtype of their column.
DTYPES: dict[str, np.dtype] = {
    "int": np.dtype(np.int64),
    "float": np.dtype(np.float64),
    "str": np.dtype(object),
}

#: Types that may serve as a stream's time attribute.
TIME_TYPES = ("int", "float")


@dataclass(frozen=True)
class Schema:
    """The attributes of one stream, in declaration order, and its time attribute.

    >>> s = Schema(("a", "t"), ("int", "int"), "t")
    >>> s.index_of("t"), s.type_of("a")
    (1, 'int')
    """

    names: tuple[str, ...]
    types: tuple[str, ...]
    time: str
    _pos: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.names) != len(self.types):
            raise ValueError("names and types differ in length")
        object.__setattr__(self, "_pos", {n: i for i, n in enumerate(self.names)})
        if len(self._pos) != len(self.names):
            raise ValueError("duplicate attribute name")
        for t in self.types:
            if t not in DTYPES:
                raise ValueError(f"unknown type {t!r}")
        if self.time not in self._pos:
            raise ValueError(f"time attribute {self.time!r} is not an attribute")
        if self.type_of(self.time) not in TIME_TYPES:
            raise ValueError("the time attribute must be int or float")

    def __contains__(self, name: object) -> bool:
        return name in self._pos

    def __len__(self) -> int:
        return len(self.names)

    def index_of(self, name: str) -> int:
        """Position of attribute ``name`` (KeyError if absent). O(1)."""
        return self._pos[name]

    def type_of(self, name: str) -> str:
        """Declared type of attribute ``name``. O(1)."""
        return self.types[self._pos[name]]

    def dtype_of(self, name: str) -> np.dtype:
        """numpy dtype of the column that stores ``name``. O(1)."""
        return DTYPES[self.type_of(name)]

    @property
    def time_index(self) -> int:
        return self._pos[self.time]


class Result:
    """The answer of one invoke, held column-wise.

    ``columns`` are the output names, ``types`` their types ('int', 'float', 'str'),
    ``now`` the NOW used and ``window`` the resolved (begin, end), None if not placeable.
    The values are there two ways, each built from the other only when first asked for:

    * ``arrays``: one read-only numpy array per column (int64, float64, or object for
      str columns and for columns holding None); ``column(name)`` one of them;
      ``to_arrow()`` a pyarrow Table. What the engine builds: an invoke gathers columns
      and never makes a Python object per value unless asked.
    * ``rows``: a list of tuples of Python values (None for the aggregate of no rows).
      O(rows x columns) Python objects, built once on first use.

    >>> r = Result(("a", "b"), ("int", "str"), [(1, "x"), (2, "y")])
    >>> r.column("a").tolist(), len(r)
    ([1, 2], 2)
    """

    __slots__ = ("_arrays", "_rows", "columns", "now", "types", "window")

    def __init__(
        self,
        columns: Sequence[str],
        types: Sequence[str],
        rows: list[tuple] | None = None,
        now: int | float | None = None,
        window: tuple[int | float, int | float] | None = None,
        *,
        arrays: Sequence[np.ndarray] | None = None,
    ) -> None:
        self.columns = tuple(columns)
        self.types = tuple(types)
        self.now = now
        self.window = window
        if arrays is not None:
            if len(arrays) != len(self.columns):
                raise ValueError(f"{len(arrays)} arrays for {len(self.columns)} columns")
            arrs = tuple(_frozen(a) for a in arrays)
            if len({len(a) for a in arrs}) > 1:
                raise ValueError("result arrays differ in length")
            self._arrays: tuple[np.ndarray, ...] | None = arrs
            self._rows: list[tuple] | None = None
        else:
            self._arrays = None
            self._rows = [] if rows is None else rows

    @classmethod
    def of_owned_arrays(
        cls,
        columns: tuple[str, ...],
        types: tuple[str, ...],
        arrays: Sequence[np.ndarray],
        now: int | float | None = None,
        window: tuple[int | float, int | float] | None = None,
        frozen: bool = False,
    ) -> Result:
        """A Result of arrays no one else holds (an engine's fresh gathers, equally long,
        one per column), made read-only in place unless ``frozen`` says they are: no
        copy, view or check. O(columns). ~2.7 µs less than the constructor, which an
        invoke of a few rows notices."""
        if not frozen:
            for a in arrays:
                a.setflags(False)  # write=False: half the cost of the flags attribute
        self = cls.__new__(cls)
        self.columns, self.types, self.now, self.window = columns, types, now, window
        self._arrays = tuple(arrays)
        self._rows = None
        return self

    @property
    def rows(self) -> list[tuple]:
        """The rows as tuples of Python values. O(rows x columns) the first time."""
        if self._rows is None:
            arrs = self._arrays or ()
            if not arrs or not len(arrs[0]):
                self._rows = []
            else:
                self._rows = list(zip(*(a.tolist() for a in arrs), strict=True))
        return self._rows

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        """One read-only numpy array per column. O(rows x columns) the first time when
        the result was built from rows, O(1) otherwise."""
        if self._arrays is None:
            rows = self._rows or []
            self._arrays = tuple(
                _frozen(_array_of(t, [r[c] for r in rows])) for c, t in enumerate(self.types)
            )
        return self._arrays

    def column(self, name: str) -> np.ndarray:
        """The values of column ``name`` (KeyError naming it if there is none). O(1)
        once ``arrays`` is built."""
        try:
            c = self.columns.index(name)
        except ValueError:
            raise KeyError(f"no column {name!r} (columns: {', '.join(self.columns)})") from None
        return self.arrays[c]

    def to_arrow(self):
        """A ``pyarrow.Table`` of the result (nulls where values are None). Numeric
        columns are handed over without a copy."""
        import pyarrow as pa  # only those who ask for Arrow pay for importing it

        arrow_type = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
        cols = []
        for arr, t in zip(self.arrays, self.types, strict=True):
            if arr.dtype == object:
                cols.append(pa.array(arr.tolist(), type=arrow_type[t]))
            else:
                cols.append(pa.array(arr, type=arrow_type[t]))
        return pa.Table.from_arrays(cols, names=list(self.columns))

    def __len__(self) -> int:
        if self._rows is not None:
            return len(self._rows)
        return len(self._arrays[0]) if self._arrays else 0

    def __iter__(self):
        return iter(self.rows)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Result):
            return NotImplemented
        return (
            self.columns == other.columns
            and self.types == other.types
            and self.now == other.now
            and self.window == other.window
            and self.rows == other.rows
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-looking: compared by value

    def __repr__(self) -> str:
        return (
            f"Result(columns={self.columns!r}, types={self.types!r}, rows={self.rows!r}, "
            f"now={self.now!r}, window={self.window!r})"
        )

    def as_dicts(self) -> list[dict[str, object]]:
        """The rows as dicts keyed by column name."""
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


def _frozen(a: np.ndarray | Sequence) -> np.ndarray:
    arr = np.asarray(a) if isinstance(a, np.ndarray) else _array_of(None, list(a))
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def _array_of(type_: str | None, values: list) -> np.ndarray:
    """A column's values as an array: typed when the type allows and no value is None,
    object otherwise. O(n)."""
    dtype = DTYPES.get(type_ or "")
    if dtype is not None and dtype.kind != "O" and all(v is not None for v in values):
        try:
            return np.asarray(values, dtype=dtype)
        except (TypeError, ValueError, OverflowError):
            pass
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@dataclass(frozen=True)
class InsertResult:
    """What an accepted batch got: its global tuple id range and the matches it made."""

    first_id: int
    last_id: int
    count: int
    matches: int


# ------------------------------------------------------------------------------ batches

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # the range of an int value


def rows_to_columns(schema: Schema, rows: Iterable[Sequence | Mapping]) -> list[np.ndarray]:
    """Typed columns (schema order) from tuples in schema order or dicts. O(rows x attrs)."""
    names = schema.names
    width = len(names)
    cols: list[list] = [[] for _ in names]
    for r, row in enumerate(rows):
        if isinstance(row, Mapping):
            if len(row) != width or any(n not in row for n in names):
                missing = [n for n in names if n not in row]
                extra = [k for k in row if k not in schema]
                if missing:
                    raise BatchError(
                        f"missing attribute (expected {', '.join(names)})", r, missing[0]
                    )
                raise BatchError(
                    f"unknown attribute (expected {', '.join(names)})", r, str(extra[0])
                )
            for c, n in enumerate(names):
                cols[c].append(row[n])
        else:
            if isinstance(row, str | bytes) or not isinstance(row, Sequence):
                raise BatchError(f"a row must be a tuple or a dict, not {type(row).__name__}", r)
            if len(row) != width:
                raise BatchError(
                    f"has {len(row)} values, the stream has {width} attributes "
                    f"({', '.join(names)})",
                    r,
                )
            for c in range(width):
                cols[c].append(row[c])
    return [_typed(schema, c, vals) for c, vals in enumerate(cols)]


def columns_to_arrays(schema: Schema, columns: Mapping[str, Sequence]) -> list[np.ndarray]:
    """Typed columns (schema order) from a mapping attribute -> values. O(rows x attrs)."""
    for name in columns:
        if name not in schema:
            raise BatchError(f"unknown attribute (expected {', '.join(schema.names)})", None, name)
    lengths = set()
    out = []
    for c, name in enumerate(schema.names):
        if name not in columns:
            raise BatchError("missing column", None, name)
        vals = columns[name]
        lengths.add(len(vals))
        out.append(_typed(schema, c, vals))
    if len(lengths) > 1:
        first = len(columns[schema.names[0]])
        odd = next(n for n in schema.names if len(columns[n]) != first)
        raise BatchError(
            f"has {len(columns[odd])} values, column {schema.names[0]!r} has {first}", None, odd
        )
    return out


def _typed(schema: Schema, c: int, vals: Sequence) -> np.ndarray:
    name = schema.names[c]
    t = schema.types[c]
    if isinstance(vals, np.ndarray):
        arr = _typed_array(name, t, vals)
        if arr is not None:
            return arr
        vals = vals.tolist()
    if t == "int":
        for r, v in enumerate(vals):
            if type(v) is not int and (isinstance(v, bool) or not isinstance(v, int | np.integer)):
                raise BatchError(f"expected int, got {type(v).__name__} {v!r}", r, name)
            if not INT64_MIN <= v <= INT64_MAX:
                raise BatchError(f"int {v} is outside the 64-bit range", r, name)
        return np.array(vals, dtype=np.int64)
    if t == "float":
        for r, v in enumerate(vals):
            if type(v) is not float and (
                isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating)
            ):
                raise BatchError(f"expected float, got {type(v).__name__} {v!r}", r, name)
            if not math.isfinite(v):
                raise BatchError(f"float {v!r} is not finite", r, name)
        return np.array(vals, dtype=np.float64)
    for r, v in enumerate(vals):
        if not isinstance(v, str):
            raise BatchError(f"expected str, got {type(v).__name__} {v!r}", r, name)
    arr = np.empty(len(vals), dtype=object)
    arr[:] = vals
    return arr


def _typed_array(name: str, t: str, arr: np.ndarray) -> np.ndarray | None:
    """Fast path for numpy input of a fitting kind; None to fall back to the checks."""
    kind = arr.dtype.kind
    if t == "int" and kind in "iu":
        if kind == "u" and len(arr) and arr.max() > INT64_MAX:
            return None
        return arr.astype(np.int64, copy=False)
    if t == "float" and kind in "iuf":
        out = arr.astype(np.float64, copy=False)
        bad = np.flatnonzero(~np.isfinite(out))
        if len(bad):
            raise BatchError(f"float {out[bad[0]].item()!r} is not finite", int(bad[0]), name)
        return out
    return None


def check_time(schema: Schema, cols: list[np.ndarray], last_ts) -> None:
    """Raise BatchError unless timestamps are non-decreasing from ``last_ts`` on. O(n)."""
    ts = cols[schema.time_index]
    if not len(ts):
        return
    if last_ts is not None and ts[0] < last_ts:
        raise BatchError(
            f"time {ts[0].item()!r} is older than the stream's latest time {last_ts!r} "
            "(timestamps must not decrease)",
            0,
            schema.time,
        )
    bad = np.flatnonzero(ts[1:] < ts[:-1])
    if len(bad):
        r = int(bad[0]) + 1
        raise BatchError(
            f"time {ts[r].item()!r} is older than the previous row's {ts[r - 1].item()!r} "
            "(timestamps must not decrease)",
            r,
            schema.time,
        )
