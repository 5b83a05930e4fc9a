"""The driver streams its input: reading a file seconds by seconds keeps pyarrow's memory
at a few blocks, whatever the file's size (16 MB blocks once held 0.7 GB: the streaming
CSV reader decodes about 16 blocks ahead)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from psoup.child import in_child
from psoup.linear_road.driver import read_seconds


def _peak_while_reading(path: Path) -> tuple[int, int, int]:
    """(seconds read, rows read, pyarrow's peak allocation) in a fresh process."""
    import pyarrow as pa

    seconds = rows = 0
    for _s, block in read_seconds(path):
        seconds += 1
        rows += len(block)
    return seconds, rows, pa.default_memory_pool().max_memory()


def test_reading_the_input_holds_a_few_blocks_not_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n, per_second = 2_000_000, 500
    cols = rng.integers(0, 100_000, size=(n, 15))
    cols[:, 0] = 0
    cols[:, 1] = np.arange(n) // per_second  # time, in order
    path = tmp_path / "input.dat"
    np.savetxt(path, cols, fmt="%d", delimiter=",")
    size = path.stat().st_size
    seconds, rows, peak = in_child(_peak_while_reading, path)
    assert (seconds, rows) == (n // per_second, n)
    assert size > 100 << 20
    assert peak < 100 << 20, f"pyarrow held {peak >> 20} MB reading a {size >> 20} MB file"
