"""CSV files for ``psoup ingest``, read with pyarrow's streaming reader.

The header row names the stream's attributes (any order, each exactly once; blanks around
a name are ignored). The file is UTF-8 text (a byte-order mark is skipped) and a regular
file: a pipe or a device (``/dev/zero``) would be read without end before anything is
sent. pyarrow reads it a block (1 MiB) at a time straight into typed columns: ints and
floats as pyarrow parses them (blanks around a number ignored; no empty field, no
thousands separator), strings as they are (an empty field is an empty string). Blank lines
are skipped; a quoted field may hold newlines.

pyarrow's own errors name no line, so when it refuses a block, ``psoup.datafiles.csvfault``
reads that block again with Python's csv module to name the line and the column.
"""

from __future__ import annotations

import codecs
import csv
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from psoup.datafiles.columns import (
    ARROW_TYPES,
    Columns,
    DataFileError,
    batch_error,
    check_names,
    first_fault,
    head,
    to_numpy,
    validated,
)
from psoup.errors import BatchError
from psoup.values import Schema

#: Bytes pyarrow reads and converts at a time: the reader's memory is a few of these.
BLOCK_BYTES = 1 << 20
_SNIFF_BYTES = 1 << 16


def check_text_file(path: str | Path) -> None:
    """DataFileError unless the first 64 KB of the file look like text (no NUL byte, not
    gzip-compressed). OSError if it cannot be opened. O(1); a regular file, as
    ``psoup.datafiles.detect`` checked first."""
    with open(path, "rb") as f:
        start = f.read(_SNIFF_BYTES)
    if start.startswith(b"\x1f\x8b"):
        raise DataFileError(f"{path}: gzip-compressed, not CSV text (decompress it first)")
    if b"\0" in start:
        raise DataFileError(
            f"{path}: a binary file, not CSV text (NUL byte at offset {start.index(0)})"
        )


def not_utf8(path: str | Path) -> DataFileError:
    """The error for the first byte of the file that is not UTF-8, with its line. O(bytes)
    up to that byte; only called once decoding failed."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, offset = 1, 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as err:
                at = max(err.start - pending, 0)
                line += chunk.count(b"\n", 0, at)
                return DataFileError(
                    f"{path}:{line}: not UTF-8 text (byte 0x{chunk[at]:02x} at offset "
                    f"{offset + at})"
                )
            line += chunk.count(b"\n")
            offset += len(chunk)
    return DataFileError(f"{path}: not UTF-8 text (it ends inside a character)")


def count_rows(path: str | Path) -> int:
    """Data lines in the file (lines after the header), for a progress total. O(bytes).

    A quoted field holding a newline makes this an overestimate; it is only a total.
    """
    lines = 0
    last = b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    if last != b"\n":
        lines += 1
    return max(lines - 1, 0)


def header(path: str | Path) -> list[str]:
    """The header row's fields as written, read with the csv module."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            names = next(reader, None)
        except UnicodeDecodeError:
            raise not_utf8(path) from None
        except csv.Error as err:
            raise DataFileError(f"{path}:{reader.line_num}: {err}") from None
    if names is None:
        raise DataFileError(f"{path}: empty file; the first row must name the attributes")
    return names


def chunks(path: str | Path, schema: Schema) -> Iterator[Columns]:
    """The file's rows as typed, validated columns, a block at a time (chunks of any size).

    O(bytes) in pyarrow, no Python work per value for int and float columns. A bad file
    raises DataFileError after yielding the rows before the bad one (from the failing
    block, read again by ``csvfault``).
    """
    raw = header(path)
    names = [n.strip() for n in raw]
    check_names(f"{path}:1: ", names, schema)
    types = {r: ARROW_TYPES[schema.type_of(n)] for r, n in zip(raw, names, strict=True)}
    options = (
        # no thread pool: the streaming reader parses a block when asked for it, and
        # psoup.datafiles.ahead already asks from a thread of its own
        pacsv.ReadOptions(block_size=BLOCK_BYTES, use_threads=False),
        pacsv.ParseOptions(newlines_in_values=True),
        pacsv.ConvertOptions(
            column_types=types,
            null_values=[],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    done = 0  # data rows read so far
    try:
        # our own stream: pyarrow would guess a compression from the file's name
        with pa.OSFile(str(path)) as source:
            reader = pacsv.open_csv(source, *options)
            for batch in reader:
                columns = {n: to_numpy(batch.column(i)) for i, n in enumerate(names)}
                try:
                    typed = validated(schema, columns)
                except BatchError as err:

                    def convert(rows: int, columns=columns) -> Columns:
                        return validated(schema, head(columns, rows))

                    prefix, first = first_fault(convert, err)
                    if prefix is not None:
                        yield prefix
                    from psoup.datafiles import csvfault  # the error path: loads on demand

                    line = csvfault.line_of(path, done + (first.row or 0))
                    raise batch_error(f"{path}:{line}: ", first) from None
                yield typed
                done += batch.num_rows
    except pa.ArrowInvalid as err:
        from psoup.datafiles import csvfault

        prefix, error = csvfault.locate(path, schema, names, done, str(err))
        if prefix is not None:
            yield prefix
        raise error from None
