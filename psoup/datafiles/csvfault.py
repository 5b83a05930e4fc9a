"""Naming the line and column of what pyarrow refused in a CSV file.

pyarrow's CSV errors say what is wrong ("invalid value 'x'") but not where. Only on that
error path, the file is read again with Python's csv module from the first data row of
the block pyarrow refused: rows are skipped in C up to there, then each column of 4096
rows at a time is parsed as pyarrow does (a cast of the text), and a failed cast is
narrowed down by bisection to its first bad row. The rows before the bad one come back
typed, so that ``psoup ingest`` still sends every full batch before the bad line.
"""

from __future__ import annotations

import collections
import csv
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from psoup.datafiles.columns import (
    ARROW_TYPES,
    Columns,
    DataFileError,
    batch_error,
    first_fault,
    head,
    to_numpy,
    validated,
)
from psoup.errors import BatchError
from psoup.values import Schema

_CHUNK = 4096
#: Rows read past the refused block's start before giving up the search: a block of
#: 1 MiB holds fewer (a row takes two bytes at least).
_MOST_ROWS = 1 << 20


def _records(reader):
    """The non-blank records (pyarrow skips blank lines too)."""
    return filter(None, reader)


def line_of(path: str | Path, row: int) -> int:
    """The line on which data row ``row`` (0-based) ends. O(rows) in the csv module."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        next(reader, None)
        records = _records(reader)
        collections.deque(itertools.islice(records, row), maxlen=0)
        next(records, None)
        return reader.line_num


def _parse(texts: list[str], type_: str) -> np.ndarray:
    """A column of field texts as pyarrow's CSV reader converts them (blanks around a
    number ignored). pa.ArrowInvalid if one does not convert."""
    if type_ == "str":
        out = np.empty(len(texts), dtype=object)
        out[:] = texts
        return out
    arr = pc.utf8_trim(pa.array(texts, pa.string()), characters=" \t")
    return to_numpy(pc.cast(arr, ARROW_TYPES[type_]))


def _first_bad(texts: list[str], type_: str) -> int | None:
    """The index of the first text that does not convert, by bisection; None if all do."""
    try:
        _parse(texts, type_)
        return None
    except pa.ArrowInvalid:
        pass
    lo, hi = 0, len(texts)  # texts[:lo] converts, texts[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            _parse(texts[:mid], type_)
            lo = mid
        except pa.ArrowInvalid:
            hi = mid
    return hi - 1


class _Search:
    """The rows read from the refused block's start, typed in chunks, until the bad one."""

    def __init__(self, path: str | Path, schema: Schema, names: list[str]):
        self.path, self.schema, self.names = path, schema, names
        self.typed: list[Columns] = []
        self.rows: list[list[str]] = []
        self.lines: list[int] = []

    def flush(self) -> DataFileError | None:
        """Type the rows held; the error of the first bad one, if any."""
        if not self.rows:
            return None
        fields = list(zip(*self.rows, strict=True))
        bad, error = len(self.rows), None
        for c, name in enumerate(self.names):
            type_ = self.schema.type_of(name)
            i = _first_bad(list(fields[c]), type_)
            if i is not None and i < bad:
                bad = i
                error = DataFileError(
                    f"{self.path}:{self.lines[i]}: column {name!r}: expected {type_}, "
                    f"got {fields[c][i]!r}"
                )
        columns = {n: _parse(list(fields[c][:bad]), self.schema.type_of(n))
                   for c, n in enumerate(self.names)}  # fmt: skip
        try:
            columns = validated(self.schema, columns)
        except BatchError as err:  # e.g. a float that is not finite, before the bad text

            def convert(rows: int, columns=columns) -> Columns:
                return validated(self.schema, head(columns, rows))

            columns, first = first_fault(convert, err)
            error = batch_error(f"{self.path}:{self.lines[first.row or 0]}: ", first)
        if columns is not None and len(columns[self.names[0]]):
            self.typed.append(columns)
        self.rows, self.lines = [], []
        return error

    def prefix(self) -> Columns | None:
        if not self.typed:
            return None
        return {n: np.concatenate([t[n] for t in self.typed]) for n in self.names}


def locate(
    path: str | Path, schema: Schema, names: list[str], start: int, message: str
) -> tuple[Columns | None, DataFileError]:
    """``(rows, error)``: the typed rows from data row ``start`` (0-based) up to the first
    bad one, and the error naming its line and column (pyarrow's ``message`` refused the
    block that starts at ``start``). O(rows up to the bad one) in Python's csv module."""
    from psoup.datafiles.csvfile import not_utf8

    search = _Search(path, schema, names)
    width = len(names)
    first_line = None
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        error = None
        try:
            next(reader, None)
            records = _records(reader)
            collections.deque(itertools.islice(records, start), maxlen=0)
            for n, row in enumerate(records):
                first_line = first_line or reader.line_num
                if len(row) != width:
                    error = search.flush() or DataFileError(
                        f"{path}:{reader.line_num}: {len(row)} fields, the header has {width}"
                    )
                    break
                search.rows.append(row)
                search.lines.append(reader.line_num)
                if len(search.rows) == _CHUNK and (error := search.flush()):
                    break
                if n >= _MOST_ROWS:
                    break
            else:
                error = search.flush()
        except UnicodeDecodeError:
            error = search.flush() or not_utf8(path)
        except csv.Error as err:  # a field over csv.field_size_limit(), a bad quote
            error = search.flush() or DataFileError(f"{path}:{reader.line_num}: {err}")
    if error is None:
        # pyarrow refused what the csv module and a cast accept (a row longer than a
        # block, ...): say what pyarrow said, where the block starts; send none of it
        return None, DataFileError(
            f"{path}: in the rows from line {first_line or '?'} on: {message}"
        )
    return search.prefix(), error
