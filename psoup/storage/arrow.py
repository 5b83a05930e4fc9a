"""Columns between numpy (the engine's) and Arrow (the files'), one way each."""

from __future__ import annotations

import numpy as np


def to_arrow(col: np.ndarray):
    """An Arrow array of a stored column: zero-copy for ints and floats, strings converted
    (O(n) Python work)."""
    import pyarrow as pa

    return pa.array(col.tolist() if col.dtype == object else col)


def to_numpy(arr) -> np.ndarray:
    """A stored column from an Arrow array or chunked array: strings as an object array,
    numbers as a (possibly read-only, memory-mapped) view where Arrow allows one."""
    import pyarrow as pa

    if pa.types.is_string(arr.type):
        return np.array(arr.to_pylist(), dtype=object)
    return arr.to_numpy()
