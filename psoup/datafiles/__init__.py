"""Data files as typed column batches for ``psoup ingest``: CSV, Parquet and Arrow IPC.

The format is told by the file's first bytes (``PAR1``: Parquet; ``ARROW1``: an Arrow IPC
file, also called Feather; ``0xFFFFFFFF``: an Arrow IPC stream), else it is CSV text. A
name ending in .parquet/.parq/.pq or .arrow/.feather/.ipc/.arrows promises one of the
binary formats and is refused without its bytes. Every format is read a block or record
batch at a time, so memory stays small for any size of file, and converted to the
stream's types column by column (``csvfile``, ``arrowfile``), then checked by the engine's
validator. A file that does not fit raises ``DataFileError`` naming the file, the line
(CSV, from 1, the header being line 1) or the row (Parquet, Arrow, from 0) and the column;
the rows before the bad one come first, so a caller sending full batches sends every
batch before the bad one, and none holding it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from psoup.datafiles import csvfile
from psoup.datafiles.ahead import read_ahead
from psoup.datafiles.columns import Columns, DataFileError, as_schema, rebatch
from psoup.values import Schema

__all__ = ["DataFileError", "count_rows", "detect", "read_batches"]

PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")
ARROW_SUFFIXES = (".arrow", ".feather", ".ipc", ".arrows")
_MAGIC = {b"PAR1": "parquet", b"ARROW1": "arrow", b"\xff\xff\xff\xff": "arrow-stream"}


def detect(path: str | Path) -> str:
    """The format of the file: ``csv``, ``parquet``, ``arrow`` (IPC file) or
    ``arrow-stream``. DataFileError for a directory, a device or pipe, a binary format's
    name without its bytes, or (CSV) what is not text; OSError if it cannot be read. O(1).
    """
    mode = os.stat(path).st_mode  # before open(): opening a FIFO waits for a writer
    if stat.S_ISDIR(mode):
        raise DataFileError(f"{path}: a directory, not a CSV, Parquet or Arrow file")
    if not stat.S_ISREG(mode):
        raise DataFileError(
            f"{path}: not a regular file but a device or a pipe (write the rows to a file first)"
        )
    with open(path, "rb") as f:
        start = f.read(8)
    for magic, kind in _MAGIC.items():
        if start.startswith(magic):
            return kind
    suffix = Path(path).suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        raise DataFileError(f"{path}: not a Parquet file (it does not start with PAR1)")
    if suffix in ARROW_SUFFIXES:
        raise DataFileError(
            f"{path}: not an Arrow IPC file or stream (it starts with neither ARROW1 nor "
            "0xFFFFFFFF)"
        )
    csvfile.check_text_file(path)
    return "csv"


def count_rows(path: str | Path, kind: str | None = None) -> int | None:
    """The file's rows for a progress total: data lines (CSV, an overestimate when quoted
    fields hold newlines; O(bytes)), from the metadata (Parquet, IPC file; O(1)), None for
    an IPC stream. ``kind`` is ``detect``'s answer, found if not given."""
    kind = kind or detect(path)
    if kind == "csv":
        return csvfile.count_rows(path)
    from psoup.datafiles.arrowfile import ArrowFile  # Parquet and compute load on demand

    return ArrowFile(path, kind).count_rows()


def read_batches(
    path: str | Path,
    schema: Schema | Mapping[str, str],
    batch_rows: int,
    *,
    kind: str | None = None,
    ahead: int = 0,
) -> Iterator[Columns]:
    """Batches (attribute -> numpy array, ``batch_rows`` rows but the last) of the file.

    ``kind`` is ``detect``'s answer (found if not given); ``ahead`` > 0 reads that many
    batches ahead on a thread. DataFileError after the batches before a bad row.
    """
    kind = kind or detect(path)
    schema = as_schema(schema)
    if kind == "csv":
        chunks = csvfile.chunks(path, schema)
    else:
        from psoup.datafiles.arrowfile import ArrowFile

        chunks = ArrowFile(path, kind).chunks(schema)
    batches = rebatch(chunks, batch_rows)
    return read_ahead(batches, ahead) if ahead > 0 else batches
