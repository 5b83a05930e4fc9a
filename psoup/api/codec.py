"""Conversions between Python/numpy values and the API's messages, shared by server and clients.

Columns travel as little-endian 8-byte arrays (ints, floats) or repeated strings, so a
batch of n rows costs O(n) bytes copied in C on each side and no Python work per value
for numbers. NULLs (only in results) are listed in ``null_rows``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from psoup.api import psoup_pb2 as pb
from psoup.values import Result

TYPE_TO_PB = {"int": pb.TYPE_INT, "float": pb.TYPE_FLOAT, "str": pb.TYPE_STRING}
PB_TO_TYPE = {v: k for k, v in TYPE_TO_PB.items()}
_LE_INT = np.dtype("<i8")
_LE_FLOAT = np.dtype("<f8")


class CodecError(ValueError):
    """A message does not decode; the text names the field."""


def type_name(t: int, field: str) -> str:
    """The engine's type name for an API ``Type``; CodecError names ``field`` if unknown."""
    name = PB_TO_TYPE.get(t)
    if name is None:
        raise CodecError(f"{field}: unknown or unspecified type {t}")
    return name


def to_value(v: object) -> pb.Value:
    """A ``Value`` message for a Python scalar (None -> no kind set)."""
    out = pb.Value()
    set_value(out, v)
    return out


def set_value(out: pb.Value, v: object) -> None:
    """Set ``out``, a ``Value`` field of a message, to a Python scalar in place (as
    ``to_value``, without making a message to copy from)."""
    if v is None:
        out.Clear()
    elif isinstance(v, bool):
        raise CodecError(f"booleans are not values: {v!r}")
    elif isinstance(v, int | np.integer):
        out.int_value = int(v)
    elif isinstance(v, float | np.floating):
        out.float_value = float(v)
    elif isinstance(v, str):
        out.string_value = v
    else:
        raise CodecError(f"cannot send a value of type {type(v).__name__}: {v!r}")


def from_value(v: pb.Value) -> int | float | str | None:
    """The Python scalar of a ``Value`` (None when no kind is set)."""
    kind = v.WhichOneof("kind")
    return None if kind is None else getattr(v, kind)


def encode_column(name: str, type_: str, values: Sequence | np.ndarray) -> pb.Column:
    """One ``Column`` message of ``type_`` ('int', 'float', 'str'); None values become NULLs."""
    col = pb.Column(name=name)
    if type_ == "str":
        vals = list(values)
        nulls = [i for i, v in enumerate(vals) if v is None]
        if nulls:
            col.null_rows.extend(nulls)
            vals = ["" if v is None else v for v in vals]
        col.strings.values.extend(vals)
        return col
    dtype = _LE_INT if type_ == "int" else _LE_FLOAT
    if isinstance(values, np.ndarray) and values.dtype != object:
        src = values
    else:
        vals = list(values)
        nulls = [i for i, v in enumerate(vals) if v is None]
        if nulls:
            col.null_rows.extend(nulls)
            vals = [0 if v is None else v for v in vals]
        src = np.asarray(vals) if vals else np.empty(0, dtype=dtype)
    # Never convert silently: 1.5 must not become 1, True must not become 1.
    if src.dtype.kind not in ("iu" if type_ == "int" else "iuf"):
        raise CodecError(f"column {name!r}: {src.dtype} values for a {type_} column")
    arr = src.astype(dtype, copy=False)
    if type_ == "int":
        col.int64_le = arr.tobytes()
    else:
        col.float64_le = arr.tobytes()
    return col


def decode_column(col: pb.Column, field: str = "column") -> np.ndarray | list:
    """The values of a ``Column``: an int64/float64 array, or a list of str (NULLs as None
    when ``null_rows`` is set, which makes numbers a list). CodecError names ``field``."""
    kind = col.WhichOneof("values")
    if kind is None:
        return np.empty(0, dtype=np.int64)
    if kind == "strings":
        out: list = list(col.strings.values)
    else:
        raw = getattr(col, kind)
        if len(raw) % 8:
            raise CodecError(
                f"{field} {col.name!r}: {kind} has {len(raw)} bytes, not a multiple of 8"
            )
        arr = np.frombuffer(raw, dtype=_LE_INT if kind == "int64_le" else _LE_FLOAT)
        if not col.null_rows:
            return arr.astype(arr.dtype.newbyteorder("="), copy=False)
        out = arr.tolist()
    for i in col.null_rows:
        if i >= len(out):
            raise CodecError(f"{field} {col.name!r}: null row {i} is past its {len(out)} values")
        out[i] = None
    return out


def column_kind(col: pb.Column) -> str | None:
    """The engine type name the column's encoding carries ('int', 'float', 'str')."""
    return {"int64_le": "int", "float64_le": "float", "strings": "str"}.get(
        col.WhichOneof("values") or ""
    )


def encode_rows(
    columns: Sequence[str], types: Sequence[str], rows: Sequence[tuple]
) -> list[pb.Column]:
    """Result rows as one ``Column`` per result column. O(rows x columns)."""
    if not rows:
        return [encode_column(n, t, []) for n, t in zip(columns, types, strict=True)]
    cols = list(zip(*rows, strict=True))
    return [encode_column(n, t, c) for n, t, c in zip(columns, types, cols, strict=True)]


def encode_result(result: Result, start: int = 0, stop: int | None = None) -> list[pb.Column]:
    """Rows ``start:stop`` of a result as one ``Column`` per result column, taken from its
    arrays (no Python object per numeric value). O(rows x columns) bytes copied."""
    return [
        encode_column(n, t, a[start:stop])
        for n, t, a in zip(result.columns, result.types, result.arrays, strict=True)
    ]


def decode_result_columns(cols: Sequence[pb.Column]) -> list[np.ndarray | list]:
    """The values of result ``Column``s, one array (or list, for strings and NULLs) each."""
    return [decode_column(c, "result column") for c in cols]


def decode_rows(cols: Sequence[pb.Column], n: int) -> list[tuple]:
    """Rows (tuples of Python values) from result ``Column``s holding ``n`` rows each."""
    if not cols:
        return [() for _ in range(n)]
    lists = []
    for c in cols:
        v = decode_column(c, "result column")
        lists.append(v.tolist() if isinstance(v, np.ndarray) else v)
    return list(zip(*lists, strict=True))


def encode_batch(
    schema: Mapping[str, str], columns: Mapping[str, Sequence | np.ndarray]
) -> list[pb.Column]:
    """Ingest columns for a stream whose attribute types are ``schema`` (name -> type)."""
    return [encode_column(name, schema[name], values) for name, values in columns.items()]
