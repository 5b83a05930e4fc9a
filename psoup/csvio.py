"""Reading a CSV file as typed column batches for ``psoup ingest``.

The header row names the stream's attributes (any order, each exactly once); each field
is converted per the attribute's type. A bad file raises ``CsvError`` naming the file,
the line and the column.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path


class CsvError(ValueError):
    """The file does not fit the stream; the message names file, line and column."""


_CONVERT: dict[str, Callable[[str], object]] = {
    "int": lambda s: int(s.strip()),
    "float": lambda s: float(s.strip()),
    "str": str,
}


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
    with open(path, newline="") as f:
        reader = csv.reader(f)
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
