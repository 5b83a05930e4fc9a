"""A small application: counts each batch of ``events`` per kind into ``counts``, and
keeps a running total as its state (in checkpoints). It proves that an application needs
nothing from the server but ``--app``: it declares its streams and reacts to batches."""

from __future__ import annotations

import json

import numpy as np


class Total:
    """The events seen so far: the application's state, kept in checkpoints."""

    def __init__(self) -> None:
        self.events = 0

    def snapshot(self) -> bytes:
        return json.dumps({"events": self.events}).encode()

    def restore(self, blob: bytes) -> None:
        self.events = json.loads(blob)["events"]


def install(engine, every: str = "1") -> Total:
    """Declare ``events`` and ``counts``; after each batch of events insert one row per
    kind (how many of that kind, at the batch's last time), scaled by ``every``."""
    scale = int(every)
    total = Total()
    for name, schema in (
        ("events", {"kind": "int", "t": "int"}),
        ("counts", {"kind": "int", "n": "int", "t": "int"}),
    ):
        if name not in engine.streams:
            engine.create_stream(name, schema, time="t")

    def on_events(cols: dict[str, np.ndarray]) -> None:
        total.events += len(cols["kind"])
        kinds, n = np.unique(cols["kind"], return_counts=True)
        t = np.full(len(kinds), cols["t"][-1], dtype=np.int64)
        engine.insert_columns("counts", {"kind": kinds, "n": n * scale, "t": t})

    engine.add_trigger("events", on_events)
    engine.add_state("counter", total)
    return total
