"""Staged bulk loads: rows collected from many concurrent callers, applied in one commit.

A load belongs to one stream and one client. Batches are validated against the
stream's schema as they arrive (so errors name the batch, row and column) and kept as
typed numpy arrays, no Python object per row. Committing concatenates them column by
column, freeing the parts as it goes, and hands the result to the engine, which replaces
the stream's contents in one step. Loads left idle longer than ``idle_seconds`` are
dropped when the next load begins, so a crashed loader cannot pin memory forever.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from psoup.batch import columns_to_arrays
from stems.schema import Schema


class UnknownLoad(KeyError):
    """No load of that id (never begun, committed, aborted or expired)."""


@dataclass
class Load:
    """One load's staged rows."""

    load_id: str
    stream: str
    schema: Schema
    client: str
    parts: list[list[np.ndarray]] = field(default_factory=list)  # per attribute
    rows: int = 0
    touched: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.parts = [[] for _ in self.schema.names]

    def stage(self, columns: dict) -> int:
        """Validate one batch and keep it; returns its rows. Raises BatchError. O(rows)."""
        arrays = columns_to_arrays(self.schema, columns)
        with self.lock:
            for part, arr in zip(self.parts, arrays, strict=True):
                part.append(arr)
            n = len(arrays[0]) if arrays else 0
            self.rows += n
            self.touched = time.monotonic()
        return n

    def take_columns(self) -> dict[str, np.ndarray]:
        """attribute -> all staged values; the staged parts are released. O(rows)."""
        with self.lock:
            out = {}
            for name, parts in zip(self.schema.names, self.parts, strict=True):
                dtype = self.schema.dtype_of(name)
                out[name] = np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
                parts.clear()  # free as we go: peak memory is one column over the data
            return out


class Loads:
    """The open loads, by id. Thread-safe."""

    def __init__(self, idle_seconds: float = 3600.0):
        self.idle_seconds = idle_seconds
        self._loads: dict[str, Load] = {}
        self._lock = threading.Lock()

    def begin(self, stream: str, schema: Schema, client: str) -> Load:
        """A new empty load for ``stream``; idle loads are dropped first."""
        now = time.monotonic()
        with self._lock:
            for lid in [k for k, v in self._loads.items() if now - v.touched > self.idle_seconds]:
                del self._loads[lid]
            load = Load(secrets.token_hex(16), stream, schema, client)
            self._loads[load.load_id] = load
            return load

    def get(self, load_id: str) -> Load:
        """The load, or UnknownLoad."""
        with self._lock:
            load = self._loads.get(load_id)
        if load is None:
            raise UnknownLoad(load_id)
        return load

    def pop(self, load_id: str) -> Load:
        """Remove and return the load, or UnknownLoad."""
        with self._lock:
            load = self._loads.pop(load_id, None)
        if load is None:
            raise UnknownLoad(load_id)
        return load

    def __len__(self) -> int:
        return len(self._loads)
