"""What every input format of ``psoup ingest`` shares: ``DataFileError``, the matching of a
file's columns to the stream's attributes, and the check of a converted batch with the
engine's own validator (``psoup.values``) so a bad value is named where it is in the file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from psoup.errors import BatchError
from psoup.values import TIME_TYPES, Schema, columns_to_arrays

#: The Arrow type each attribute type is read as.
ARROW_TYPES = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}

Columns = dict[str, np.ndarray]


class DataFileError(ValueError):
    """The file does not fit the stream; the message names the file, and where known the
    line (CSV) or row (Parquet, Arrow) and the column."""


def to_numpy(values: pa.Array) -> np.ndarray:
    """A null-free int64, float64 or string Array as the stream's numpy column: numbers
    zero-copy, strings as an object array of str (O(rows) Python objects). Arrow's own
    ``to_numpy`` would import pandas, a fifth of a second, on its first call."""
    if values.type == pa.string():
        out = np.empty(len(values), dtype=object)
        out[:] = values.to_pylist()
        return out
    dtype = np.dtype(np.int64) if values.type == pa.int64() else np.dtype(np.float64)
    if not len(values):
        return np.empty(0, dtype=dtype)
    data = values.buffers()[1]
    return np.frombuffer(data, dtype=dtype, count=len(values), offset=values.offset * 8)


def as_schema(schema: Schema | Mapping[str, str]) -> Schema:
    """``schema``, or a ``Schema`` of an attribute -> type mapping (its time attribute, which
    reading does not use, the first int or float one)."""
    if isinstance(schema, Schema):
        return schema
    time = next((n for n, t in schema.items() if t in TIME_TYPES), None)
    if time is None:
        raise ValueError(f"no int or float attribute in {dict(schema)!r}")
    return Schema(tuple(schema), tuple(schema.values()), time)


def check_names(where: str, names: Sequence[str], schema: Schema) -> None:
    """DataFileError unless ``names`` (the file's columns, in order) are the stream's
    attributes, each once. ``where`` starts the message (``"FILE:1: "`` or ``"FILE: "``)."""
    for i, name in enumerate(names):
        if name not in schema:
            raise DataFileError(
                f"{where}column {i + 1} {name!r} is not an attribute of the stream "
                f"(attributes: {', '.join(schema.names)})"
            )
        if name in names[:i]:
            raise DataFileError(f"{where}column {name!r} appears twice")
    missing = [a for a in schema.names if a not in names]
    if missing:
        raise DataFileError(f"{where}no column for attribute(s) {', '.join(missing)}")


def validated(schema: Schema, columns: Mapping[str, np.ndarray]) -> Columns:
    """The columns checked and typed by ``psoup.values`` (numpy int and float columns in
    O(1) or one vectorised pass; str columns per value). Raises BatchError (0-based row
    of this batch, column)."""
    arrays = columns_to_arrays(schema, columns)
    return dict(zip(schema.names, arrays, strict=True))


def head(columns: Columns, rows: int) -> Columns:
    """The first ``rows`` rows (views)."""
    return {name: values[:rows] for name, values in columns.items()}


def first_fault(convert: Callable[[int], Columns], err: BatchError):
    """``(typed, first)``: the rows before the first bad one, typed (None if there are
    none), and the BatchError of that first bad row. ``err`` is what converting all rows
    raised: the first bad row of one column, though another may have an earlier one;
    ``convert(n)`` converts the first ``n`` rows. O(rows x bad columns)."""
    while err.row:
        try:
            return convert(err.row), err
        except BatchError as earlier:
            err = earlier
    return None, err


def rebatch(chunks: Iterator[Columns], batch_rows: int) -> Iterator[Columns]:
    """Batches of exactly ``batch_rows`` rows (the last may be shorter) cut from chunks of
    any size: views where a batch lies in one chunk, a copy where it spans two.

    An exception from ``chunks`` propagates at once: the rows of an incomplete batch before
    it are dropped, not sent, as a batch holding the bad row would be refused whole.
    """
    carry: Columns | None = None
    carried = 0
    for chunk in chunks:
        n = len(next(iter(chunk.values()))) if chunk else 0
        at = 0
        if carry is not None:
            at = min(batch_rows - carried, n)
            carry = {k: np.concatenate([v, chunk[k][:at]]) for k, v in carry.items()}
            carried += at
            if carried < batch_rows:
                continue
            yield carry
            carry, carried = None, 0
        while n - at >= batch_rows:
            yield {k: v[at : at + batch_rows] for k, v in chunk.items()}
            at += batch_rows
        if at < n:
            carry, carried = {k: v[at:] for k, v in chunk.items()}, n - at
    if carry is not None:
        yield carry


def batch_error(where: str, err: BatchError) -> DataFileError:
    """A BatchError as a DataFileError: ``where`` names file and line or row."""
    column = f"column {err.column!r}: " if err.column is not None else ""
    return DataFileError(f"{where}{column}{err.message}")
