"""Parquet and Arrow IPC files for ``psoup ingest``, read a record batch at a time.

The file's column names are the stream's attributes (any order, each exactly once). A
column's Arrow type must fit its attribute: integers of any width for an int (unsigned
64-bit values up to 2**63-1), integers or floats for a float, strings (also large,
view or dictionary-encoded) for a str; a null value is refused. Columns convert to numpy
in one cast each, zero-copy where the type already is the stream's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from psoup.datafiles.columns import (
    Columns,
    DataFileError,
    batch_error,
    check_names,
    first_fault,
    to_numpy,
    validated,
)
from psoup.errors import BatchError
from psoup.values import INT64_MAX, Schema

#: Rows per record batch read from a Parquet file (cut to --batch-rows afterwards).
PARQUET_BATCH_ROWS = 65_536
KINDS = {"parquet": "Parquet file", "arrow": "Arrow IPC file", "arrow-stream": "Arrow IPC stream"}


def _fits(type_: pa.DataType, attribute: str) -> bool:
    """Whether a column of Arrow type ``type_`` can hold the values of an ``attribute``."""
    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    if attribute == "int":
        return pa.types.is_integer(type_)
    if attribute == "float":
        return pa.types.is_integer(type_) or pa.types.is_floating(type_)
    return pa.types.is_string(type_) or pa.types.is_large_string(type_) or _is_view(type_)


def _is_view(type_: pa.DataType) -> bool:
    is_string_view = getattr(pa.types, "is_string_view", None)  # pyarrow 16 on
    return is_string_view is not None and is_string_view(type_)


def _numpy(column: pa.Array, name: str, attribute: str) -> np.ndarray:
    """One column as the stream's numpy dtype; BatchError (row, column) for a null or an
    unsigned value beyond 64-bit signed. O(rows) in Arrow, no Python work per number."""
    if column.null_count:
        row = pc.index(column.is_null(), True).as_py()
        raise BatchError(f"expected {attribute}, got null", row, name)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if attribute == "str":
        return to_numpy(pc.cast(column, pa.string()))
    if attribute == "int":
        if column.type == pa.uint64() and len(column):
            over = pc.greater(column, pa.scalar(INT64_MAX, pa.uint64()))
            if pc.any(over).as_py():
                row = pc.index(over, True).as_py()
                value = column[row].as_py()
                raise BatchError(f"int {value} is outside the 64-bit range", row, name)
        return to_numpy(pc.cast(column, pa.int64(), safe=False))
    return to_numpy(pc.cast(column, pa.float64(), safe=False))


class ArrowFile:
    """A Parquet file, or an Arrow IPC file or stream, checked against the stream."""

    def __init__(self, path: str | Path, kind: str):
        self.path, self.kind = path, kind
        try:
            if kind == "parquet":
                self._parquet = pq.ParquetFile(str(path))
                self.arrow_schema = self._parquet.schema_arrow
            elif kind == "arrow":
                self._file = ipc.open_file(pa.memory_map(str(path)))
                self.arrow_schema = self._file.schema
            else:
                self._stream = ipc.open_stream(pa.memory_map(str(path)))
                self.arrow_schema = self._stream.schema
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise DataFileError(f"{path}: not a readable {KINDS[kind]}: {err}") from None

    def count_rows(self) -> int | None:
        """Its rows, from the metadata (Parquet, IPC file); None for an IPC stream."""
        if self.kind == "parquet":
            return self._parquet.metadata.num_rows
        if self.kind == "arrow":
            return self._file.count_rows()
        return None

    def _batches(self) -> Iterator[pa.RecordBatch]:
        if self.kind == "parquet":
            yield from self._parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS)
        elif self.kind == "arrow":
            for i in range(self._file.num_record_batches):
                yield self._file.get_batch(i)
        else:
            yield from self._stream

    def chunks(self, schema: Schema) -> Iterator[Columns]:
        """The rows as typed, validated columns, a record batch at a time. A bad value
        raises DataFileError (row from 0 and column) after yielding the rows before it."""
        names = self.arrow_schema.names
        check_names(f"{self.path}: ", names, schema)
        for field in self.arrow_schema:
            attribute = schema.type_of(field.name)
            if not _fits(field.type, attribute):
                raise DataFileError(
                    f"{self.path}: column {field.name!r} holds {field.type} values, the "
                    f"stream's attribute is {attribute}"
                )
        done = 0
        try:
            for batch in self._batches():

                def convert(rows: int, batch=batch) -> Columns:
                    part = batch.slice(0, rows)
                    return validated(schema, {
                        n: _numpy(part.column(i), n, schema.type_of(n))
                        for i, n in enumerate(names)
                    })  # fmt: skip

                try:
                    typed = convert(batch.num_rows)
                except BatchError as err:
                    prefix, first = first_fault(convert, err)
                    if prefix is not None:
                        yield prefix
                    where = f"{self.path}: row {done + (first.row or 0)}, "
                    raise batch_error(where, first) from None
                yield typed
                done += batch.num_rows
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise DataFileError(
                f"{self.path}: a damaged {KINDS[self.kind]} after row {done}: {err}"
            ) from None
