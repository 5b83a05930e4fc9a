"""The log's records: one engine operation each, as bytes and back.

A payload is a JSON header and then the raw column data::

    u32 header length | header (UTF-8 JSON) | column bytes ...

The header is ``{"op": ..., ...fields}``; an ``insert`` or ``replace`` also lists its
columns as ``[[dtype, count], ...]`` (``<i8``, ``<f8``) and their little-endian bytes
follow in that order; string columns travel in the header as JSON lists. JSON keeps
ints and floats apart, so parameters and windows come back with their types.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import numpy as np

_LEN = struct.Struct("<I")
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
    header, then each numeric column's own little-endian array (not copied when it
    is one already). O(header); no copy of column data."""
    header = {"op": rec.op, **rec.fields}
    blobs: list[bytes | np.ndarray] = []
    if rec.columns:
        layout = []
        for col in rec.columns:
            if col.dtype == object:
                layout.append(["str", col.tolist()])
            else:
                arr = np.ascontiguousarray(col, dtype=col.dtype.newbyteorder("<"))
                layout.append([arr.dtype.str, len(arr)])
                if len(arr):
                    blobs.append(arr)
        header["columns"] = layout
    head = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
    return [_LEN.pack(len(head)) + head, *blobs]


def decode(payload: bytes) -> Record:
    """The record a payload holds. Raises ValueError when it is not one. O(payload)."""
    (n,) = _LEN.unpack_from(payload, 0)
    header = json.loads(payload[_LEN.size : _LEN.size + n])
    op = header.pop("op")
    if op not in OPS:
        raise ValueError(f"unknown log operation {op!r}")
    cols = []
    pos = _LEN.size + n
    for dtype, spec in header.pop("columns", []):
        if dtype == "str":
            cols.append(np.array(spec, dtype=object))
            continue
        dt = np.dtype(dtype)
        end = pos + dt.itemsize * spec
        raw = np.frombuffer(payload, dtype=dt, count=spec, offset=pos)
        cols.append(raw.astype(dt.newbyteorder("=")))  # a writable copy in native order
        pos = end
    if pos != len(payload):
        raise ValueError(f"a {op} record has {len(payload) - pos} bytes too many")
    return Record(op, header, cols)
