"""Staged bulk loads: rows collected from many concurrent callers, applied in one commit.

A load belongs to one stream and one client. Batches are validated against the
stream's schema as they arrive (so errors name the batch, row and column) and kept as
typed numpy arrays, no Python object per row. Writers stage named parts: a part's rows
count once however often it is staged (the last complete writer wins), so a retried
writer is harmless. Committing concatenates them column by
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
    """One load's staged rows, by part.

    A writer stages a part through ``staging()``: its batches are validated as they
    arrive and kept aside, and become the part's rows only when the writer finishes
    (``Staging.done``); a part staged again replaces its earlier rows. So a writer that
    dies part-way stages nothing, and one that is retried (a Spark task attempt, after a
    lost executor) is counted once.
    """

    load_id: str
    stream: str
    schema: Schema
    client: str
    parts: dict[str, list[list[np.ndarray]]] = field(default_factory=dict)  # per attribute
    touched: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def staging(self, part: str) -> Staging:
        """A writer of ``part`` (empty: a part of its own, never replaced)."""
        return Staging(self, part or f"#{secrets.token_hex(8)}")

    def _install(self, part: str, arrays: list[list[np.ndarray]]) -> bool:
        with self.lock:
            replaced = part in self.parts
            self.parts[part] = arrays
            self.touched = time.monotonic()
        return replaced

    def take_columns(self) -> dict[str, np.ndarray]:
        """attribute -> all staged values; the staged parts are released. O(rows)."""
        with self.lock:
            parts = list(self.parts.values())
            self.parts.clear()
        out = {}
        for i, name in enumerate(self.schema.names):
            columns = [part[i] for part in parts]
            for part in parts:
                part[i] = []  # free as we go: peak memory is one column over the data
            dtype = self.schema.dtype_of(name)
            arrays = [a for col in columns for a in col]
            out[name] = np.concatenate(arrays) if arrays else np.empty(0, dtype=dtype)
            del columns, arrays
        return out


@dataclass
class Staging:
    """One writer's batches of one part, kept aside until ``done``."""

    load: Load
    part: str
    arrays: list[list[np.ndarray]] = field(default_factory=list)
    rows: int = 0
    batches: int = 0

    def __post_init__(self) -> None:
        self.arrays = [[] for _ in self.load.schema.names]

    def add(self, columns: dict) -> int:
        """Validate one batch and keep it aside; returns its rows. Raises BatchError.
        O(rows)."""
        arrays = columns_to_arrays(self.load.schema, columns)
        for kept, arr in zip(self.arrays, arrays, strict=True):
            kept.append(arr)
        n = len(arrays[0]) if arrays else 0
        self.rows += n
        self.batches += 1
        self.load.touched = time.monotonic()
        return n

    def done(self) -> bool:
        """Make the batches the part's rows; returns True if they replaced earlier ones."""
        return self.load._install(self.part, self.arrays)


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
