"""Reading a CSV file as typed column batches for ``psoup ingest``.

The header row names the stream's attributes (any order, each exactly once); each field
is converted per the attribute's type. The file is UTF-8 text (a byte-order mark is
skipped) and a regular file: a pipe or a device (``/dev/zero``) would be read without end
before anything is sent. A bad file raises ``CsvError`` naming the file, the line and the
column.
"""

from __future__ import annotations

import codecs
import csv
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path


class CsvError(ValueError):
    """The file does not fit the stream; the message names file, line and column."""


_CONVERT: dict[str, Callable[[str], object]] = {
    "int": lambda s: int(s.strip()),
    "float": lambda s: float(s.strip()),
    "str": str,
}


_SNIFF_BYTES = 1 << 16


def check_text_file(path: str | Path) -> None:
    """CsvError unless ``path`` is a regular file whose first 64 KB look like text (no NUL
    byte, not gzip-compressed). OSError if it cannot be opened. O(1)."""
    mode = os.stat(path).st_mode  # before open(): opening a FIFO waits for a writer
    if stat.S_ISDIR(mode):
        raise CsvError(f"{path}: a directory, not a CSV file")
    if not stat.S_ISREG(mode):
        raise CsvError(
            f"{path}: not a regular file but a device or a pipe (write the rows to a file first)"
        )
    with open(path, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    if head.startswith(b"\x1f\x8b"):
        raise CsvError(f"{path}: gzip-compressed, not CSV text (decompress it first)")
    if b"\0" in head:
        raise CsvError(f"{path}: a binary file, not CSV text (NUL byte at offset {head.index(0)})")


def _not_utf8(path: str | Path) -> CsvError:
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
                return CsvError(
                    f"{path}:{line}: not UTF-8 text (byte 0x{chunk[at]:02x} at offset "
                    f"{offset + at})"
                )
            line += chunk.count(b"\n")
            offset += len(chunk)
    return CsvError(f"{path}: not UTF-8 text (it ends inside a character)")


def count_rows(path: str | Path) -> int:
    """Data lines in the file (lines after the header), for a progress total. O(bytes).

    A quoted field holding a newline makes this an overestimate; it is only a total.
    Raises CsvError first if the file is not a regular text file (``check_text_file``).
    """
    check_text_file(path)
    lines = 0
    last = b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    if last != b"\n":
        lines += 1
    return max(lines - 1, 0)


def _header(path: str | Path, header: list[str], schema: Mapping[str, str]) -> list[str]:
    names = [h.strip() for h in header]
    for i, name in enumerate(names):
        if name not in schema:
            raise CsvError(
                f"{path}:1: column {i + 1} {name!r} is not an attribute of the stream "
                f"(attributes: {', '.join(schema)})"
            )
        if name in names[:i]:
            raise CsvError(f"{path}:1: column {name!r} appears twice")
    missing = [a for a in schema if a not in names]
    if missing:
        raise CsvError(f"{path}:1: no column for attribute(s) {', '.join(missing)}")
    return names


def read_batches(
    path: str | Path, schema: Mapping[str, str], batch_rows: int
) -> Iterator[dict[str, list]]:
    """Batches (attribute -> values, at most ``batch_rows`` rows) of the CSV file at ``path``.

    Blank lines are skipped. O(fields) Python work: one conversion per field.
    """
    check_text_file(path)
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            yield from _batches(path, reader, schema, batch_rows)
        except UnicodeDecodeError:
            raise _not_utf8(path) from None
        except csv.Error as err:  # a field over csv.field_size_limit(), a bad quote
            raise CsvError(f"{path}:{reader.line_num}: {err}") from None


def _batches(
    path: str | Path, reader, schema: Mapping[str, str], batch_rows: int
) -> Iterator[dict[str, list]]:
    header = next(reader, None)
    if header is None:
        raise CsvError(f"{path}: empty file; the first row must name the attributes")
    names = _header(path, header, schema)
    converts = [_CONVERT[schema[n]] for n in names]
    cols: list[list] = [[] for _ in names]
    for row in reader:
        if not row:
            continue
        if len(row) != len(names):
            raise CsvError(
                f"{path}:{reader.line_num}: {len(row)} fields, the header has {len(names)}"
            )
        for c, (convert, field) in enumerate(zip(converts, row, strict=True)):
            try:
                cols[c].append(convert(field))
            except ValueError:
                raise CsvError(
                    f"{path}:{reader.line_num}: column {names[c]!r}: expected "
                    f"{schema[names[c]]}, got {field!r}"
                ) from None
        if len(cols[0]) >= batch_rows:
            yield dict(zip(names, cols, strict=True))
            cols = [[] for _ in names]
    if cols[0]:
        yield dict(zip(names, cols, strict=True))
