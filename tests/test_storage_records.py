"""Log records as bytes and back: every column returns with its values and its type,
int64 columns whose values fit a narrower int take that many bytes in the log (while a
change still counts its full size towards the next checkpoint), and records written
before that (every int column as ``<i8``) are still read."""

from __future__ import annotations

import json
import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from psoup.storage.records import Record, decode, encode, held_bytes

I64 = np.iinfo(np.int64)
# Values around every boundary a column may be narrowed at, and the extremes.
EDGES = [b + d for b in (0, 127, -128, 32767, -32768, 2**31 - 1, -(2**31)) for d in (-1, 0, 1)]
INTS = st.one_of(st.sampled_from(EDGES), st.integers(-300, 300),
                 st.integers(I64.min, I64.max))  # fmt: skip
COLUMN = st.one_of(
    st.lists(INTS, max_size=40).map(lambda v: np.array(v, dtype=np.int64)),
    st.lists(st.floats(allow_nan=False), max_size=10).map(lambda v: np.array(v, np.float64)),
    st.lists(st.text(max_size=4), max_size=5).map(lambda v: np.array(v, dtype=object)),
)


def _payload(rec: Record) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.tobytes() for p in encode(rec))


@settings(max_examples=300, deadline=None)
@given(st.lists(COLUMN, max_size=6))
def test_columns_come_back_with_their_values_and_types(columns) -> None:
    parts = encode(Record("insert", {"stream": "r", "tag": 7}, columns))
    payload = _payload(Record("insert", {"stream": "r", "tag": 7}, columns))
    rec = decode(payload)
    # A change's size as the engine holds it, the same from the record as from the log.
    numeric = sum(8 * len(c) for c in columns if c.dtype != object)
    assert held_bytes(parts[0], columns) == len(parts[0]) + numeric
    assert held_bytes(payload, rec.columns) == len(parts[0]) + numeric
    assert rec.op == "insert" and rec.fields == {"stream": "r", "tag": 7}
    assert len(rec.columns) == len(columns)
    for got, col in zip(rec.columns, columns, strict=True):
        assert got.dtype == col.dtype
        assert got.tolist() == col.tolist()
        if got.dtype != object:
            got[:0] = 0  # writable (the engine keeps the arrays it replays)


@settings(max_examples=100, deadline=None)
@given(st.lists(INTS, min_size=1, max_size=40))
def test_an_int_column_takes_the_bytes_of_the_narrowest_type_that_holds_it(values) -> None:
    col = np.array(values, dtype=np.int64)
    width = next(
        (n for n, t in ((1, np.int8), (2, np.int16), (4, np.int32))
         if np.iinfo(t).min <= col.min() and col.max() <= np.iinfo(t).max),
        8,
    )  # fmt: skip
    payload = _payload(Record("insert", {}, [col]))
    (n,) = struct.unpack_from("<I", payload)
    (entry,) = json.loads(payload[4 : 4 + n])["columns"]
    stored, count, *wide = entry
    assert np.dtype(stored) == np.dtype(f"<i{width}") and count == len(col)
    assert wide == ([] if width == 8 else ["<i8"])
    assert len(payload) == 4 + n + width * len(col)


def test_a_record_written_before_narrowing_is_read() -> None:
    cols = [np.array([1, 2, 3], "<i8"), np.array([0.5, 1.5, 2.5], "<f8")]
    head = json.dumps({"op": "insert", "stream": "r",
                       "columns": [["<i8", 3], ["<f8", 3]]}).encode()  # fmt: skip
    payload = struct.pack("<I", len(head)) + head + b"".join(c.tobytes() for c in cols)
    rec = decode(payload)
    assert [c.dtype for c in rec.columns] == [np.dtype(np.int64), np.dtype(np.float64)]
    assert [c.tolist() for c in rec.columns] == [[1, 2, 3], [0.5, 1.5, 2.5]]
