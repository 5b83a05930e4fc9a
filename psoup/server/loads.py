"""Staged bulk loads: rows collected from many concurrent callers, applied in one commit.

A load belongs to one stream and one client. Batches are validated against the
stream's schema as they arrive (so errors name the batch, row and column) and kept as
typed numpy arrays, no Python object per row. Writers stage named parts: a part's rows
count once however often it is staged (the last complete writer wins), so a retried
writer is harmless. Committing concatenates them column by
column, freeing the parts as it goes, and hands the result to the engine, which replaces
the stream's contents in one step. Loads left idle longer than ``idle_seconds`` are
dropped when the next load begins, so a crashed loader cannot pin memory forever, and
the bytes staged by all open loads together are held under a limit (``Budget``): a batch
that would pass it is refused (``BudgetExceeded``) instead of growing the server.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from psoup.values import Schema, columns_to_arrays


class UnknownLoad(KeyError):
    """No load of that id (never begun, committed, aborted or expired)."""


class BudgetExceeded(Exception):
    """Staging a batch would pass the limit on the bytes all open loads hold."""


class Budget:
    """Bytes staged by all open loads, under ``limit``. Thread-safe; O(1) per call."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> None:
        """Reserve ``n`` bytes, or raise BudgetExceeded (nothing reserved)."""
        with self._lock:
            if self.used + n > self.limit:
                raise BudgetExceeded(
                    f"staging {n:,} more bytes would pass max_staged_bytes={self.limit:,} "
                    f"({self.used:,} staged by the open loads): commit or abort loads first"
                )
            self.used += n

    def give(self, n: int) -> None:
        """Release ``n`` reserved bytes."""
        with self._lock:
            self.used -= n


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
    budget: Budget = field(default_factory=lambda: Budget(1 << 62))
    parts: dict[str, list[list[np.ndarray]]] = field(default_factory=dict)  # per attribute
    part_bytes: dict[str, int] = field(default_factory=dict)
    closed: bool = False
    touched: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def staging(self, part: str) -> Staging:
        """A writer of ``part`` (empty: a part of its own, never replaced)."""
        return Staging(self, part or f"#{secrets.token_hex(8)}")

    def _install(self, part: str, arrays: list[list[np.ndarray]], nbytes: int) -> bool:
        with self.lock:
            if self.closed:  # committed or aborted meanwhile: the writer was too late
                self.budget.give(nbytes)
                return False
            replaced = part in self.parts
            self.parts[part] = arrays
            old = self.part_bytes.get(part, 0)
            self.part_bytes[part] = nbytes
            self.touched = time.monotonic()
        self.budget.give(old)
        return replaced

    def release(self) -> None:
        """The load is over (committed, aborted, expired): give the budget back the bytes
        of every staged part, and of any writer that finishes later."""
        with self.lock:
            self.closed = True
            n = sum(self.part_bytes.values())
            self.part_bytes.clear()
        self.budget.give(n)

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
    nbytes: int = 0  # reserved in the load's budget

    def __post_init__(self) -> None:
        self.arrays = [[] for _ in self.load.schema.names]

    def add(self, columns: dict) -> int:
        """Validate one batch and keep it aside; returns its rows. Raises BatchError, or
        BudgetExceeded when the open loads would hold too much. O(rows)."""
        arrays = columns_to_arrays(self.load.schema, columns)
        n = sum(a.nbytes for a in arrays)
        self.load.budget.take(n)
        self.nbytes += n
        for kept, arr in zip(self.arrays, arrays, strict=True):
            kept.append(arr)
        n = len(arrays[0]) if arrays else 0
        self.rows += n
        self.batches += 1
        self.load.touched = time.monotonic()
        return n

    def done(self) -> bool:
        """Make the batches the part's rows; returns True if they replaced earlier ones."""
        return self.load._install(self.part, self.arrays, self.nbytes)

    def discard(self) -> None:
        """The writer failed: drop its batches and give their bytes back."""
        self.arrays = []
        self.load.budget.give(self.nbytes)
        self.nbytes = 0


class Loads:
    """The open loads, by id. Thread-safe."""

    def __init__(self, idle_seconds: float = 3600.0, max_staged_bytes: int = 8 << 30):
        self.idle_seconds = idle_seconds
        self.budget = Budget(max_staged_bytes)
        self._loads: dict[str, Load] = {}
        self._lock = threading.Lock()

    def begin(self, stream: str, schema: Schema, client: str) -> Load:
        """A new empty load for ``stream``; idle loads are dropped first."""
        now = time.monotonic()
        with self._lock:
            for lid in [k for k, v in self._loads.items() if now - v.touched > self.idle_seconds]:
                self._loads.pop(lid).release()
            load = Load(secrets.token_hex(16), stream, schema, client, self.budget)
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
        """Remove and return the load, or UnknownLoad. Its bytes stay reserved until the
        caller's ``release()`` (after a commit, or at once for an abort)."""
        with self._lock:
            load = self._loads.pop(load_id, None)
        if load is None:
            raise UnknownLoad(load_id)
        return load

    def __len__(self) -> int:
        return len(self._loads)
