"""The driver's answer files: answers given as columns (arrays, and ints that stand for a
whole column) come out as the validator's CSV lines, with each answer's time and response
noted, the same as the rows they stand for written one by one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from psoup.linear_road.check import FILES
from psoup.linear_road.driver import _AnswerFiles


def _layout(kind: str, rng: np.random.Generator, n: int, emit: int) -> list:
    """Columns of ``n`` random answers of ``kind`` as the alert listeners pass them."""

    def col(hi: int) -> np.ndarray:
        return rng.integers(0, hi, n)

    if kind == "toll":  # 0, vid, time, emit, lav, toll
        return [0, col(10**6), col(10_800), emit, col(100), col(400)]
    return [1, col(10_800), emit, col(1_000), col(100)]  # accident: 1, time, emit, xway, seg


@pytest.mark.parametrize("seed", range(5))
def test_columns_are_written_as_the_rows_they_stand_for(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    files = _AnswerFiles(tmp_path)
    expected: dict[str, list[tuple]] = {"toll": [], "accident": [], "balance": []}
    for _ in range(20):
        kind = str(rng.choice(["toll", "accident", "balance"]))
        n, emit = int(rng.integers(0, 50)), int(rng.integers(0, 20_000))
        if kind == "balance":  # a request's answers, as rows
            rows = [tuple(int(v) for v in rng.integers(0, 10_000, 6)) for _ in range(n)]
            files.add_rows(kind, rows)
        else:
            cols = _layout(kind, rng, n, emit)
            files.add(kind, cols)
            rows = [
                tuple(int(c) if isinstance(c, int) else int(c[i]) for c in cols) for i in range(n)
            ]
        expected[kind] += rows
    files.close()
    for kind, rows in expected.items():
        text = (tmp_path / FILES[kind]).read_text()
        assert text == "".join(",".join(map(str, r)) + "\n" for r in rows), kind
        t_col, e_col = (2, 3) if kind == "toll" else (1, 2)
        times, responses = files.columns(kind)
        assert times.tolist() == [r[t_col] for r in rows], kind
        assert responses.tolist() == [r[e_col] - r[t_col] for r in rows], kind


def test_columns_of_different_lengths_are_refused(tmp_path: Path) -> None:
    files = _AnswerFiles(tmp_path)
    with pytest.raises(ValueError):
        files.add("accident", [1, np.arange(3), 5, np.arange(3), np.arange(2)])
    files.close()
