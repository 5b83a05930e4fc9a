"""The log's records: one engine operation each, as bytes and back.

A payload is a JSON header and then the raw column data::

    u32 header length | header (UTF-8 JSON) | column bytes ...

The header is ``{"op": ..., ...fields}``; an ``insert`` or ``replace`` also lists its
columns as ``[[dtype, count], ...]`` (``<i8``, ``<f8``) and their little-endian bytes
follow in that order; string columns travel in the header as JSON lists. JSON keeps
ints and floats apart, so parameters and windows come back with their types.

An int column whose values all fit a narrower int is written as that type and listed as
``[stored dtype, count, dtype]`` (``["<i2", 5000, "<i8"]``), then widened back when read:
a Linear Road report's eight int64 fields take 15 bytes in the log instead of 64, and
every durable server writes its log twice (once more into a checkpoint's runs) on a
disk that every acknowledgement waits for. Records written before (two-item entries)
are read as they were.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import numpy as np

_LEN = struct.Struct("<I")
# The narrower types an int64 column may be written as, narrowest first.
_NARROW = tuple((np.dtype(t), np.iinfo(t)) for t in ("<i1", "<i2", "<i4"))
OPS = (
    "create_stream", "drop_stream", "insert", "replace", "register", "unregister", "grant",
    "prepare",
)  # fmt: skip


@dataclass
class Record:
    """One logged operation: ``op`` (one of OPS), its ``fields`` and, for ``insert`` and
    ``replace``, its ``columns`` in schema order."""

    op: str
    fields: dict
    columns: list[np.ndarray] = field(default_factory=list)


def encode(rec: Record) -> list[bytes | np.ndarray]:
    """The record's log payload, as pieces to write one after the other: the length and
    header, then each numeric column's little-endian array: an int64 column whose values
    fit a narrower int as a copy of that type, any other its own array (not copied when
    it is little-endian already). O(header + int64 values)."""
    header = {"op": rec.op, **rec.fields}
    blobs: list[bytes | np.ndarray] = []
    if rec.columns:
        layout = []
        for col in rec.columns:
            if col.dtype == object:
                layout.append(["str", col.tolist()])
            else:
                arr = np.ascontiguousarray(col, dtype=col.dtype.newbyteorder("<"))
                narrow = _narrowed(arr)
                if narrow is None:
                    layout.append([arr.dtype.str, len(arr)])
                else:
                    layout.append([narrow.dtype.str, len(arr), arr.dtype.str])
                    arr = narrow
                if len(arr):
                    blobs.append(arr)
        header["columns"] = layout
    head = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
    return [_LEN.pack(len(head)) + head, *blobs]


def held_bytes(payload: bytes, columns: list[np.ndarray]) -> int:
    """The size of the change a record holds, as the engine holds it: its length and
    header (read from the start of ``payload``, a record's payload or ``encode``'s first
    piece) and its numeric ``columns`` at their own width (8 bytes an int, however
    narrow the log wrote it). O(columns)."""
    (n,) = _LEN.unpack_from(payload, 0)
    return _LEN.size + n + sum(c.nbytes for c in columns if c.dtype != object)


def _narrowed(arr: np.ndarray) -> np.ndarray | None:
    """``arr`` (int64, little-endian) as the narrowest int type that holds every value
    of it, or None when none is narrower (or it is not int64, or empty). O(n)."""
    if arr.dtype.kind != "i" or arr.dtype.itemsize != 8 or not len(arr):
        return None
    lo, hi = arr.min(), arr.max()
    for dt, info in _NARROW:
        if info.min <= lo and hi <= info.max:
            return arr.astype(dt)
    return None


def decode(payload: bytes) -> Record:
    """The record a payload holds. Raises ValueError when it is not one. O(payload)."""
    (n,) = _LEN.unpack_from(payload, 0)
    header = json.loads(payload[_LEN.size : _LEN.size + n])
    op = header.pop("op")
    if op not in OPS:
        raise ValueError(f"unknown log operation {op!r}")
    cols = []
    pos = _LEN.size + n
    for dtype, spec, *wide in header.pop("columns", []):
        if dtype == "str":
            cols.append(np.array(spec, dtype=object))
            continue
        dt = np.dtype(dtype)
        end = pos + dt.itemsize * spec
        raw = np.frombuffer(payload, dtype=dt, count=spec, offset=pos)
        # A writable copy in native order, widened to the column's type if written narrow.
        cols.append(raw.astype(np.dtype(wide[0] if wide else dtype).newbyteorder("=")))
        pos = end
    if pos != len(payload):
        raise ValueError(f"a {op} record has {len(payload) - pos} bytes too many")
    return Record(op, header, cols)
