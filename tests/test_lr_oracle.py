"""The Linear Road oracle reproduces the original validator's answers on sample20."""

from __future__ import annotations

from pathlib import Path

import pytest

from psoup.linear_road.check import read_history, read_input, run

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "linear-road" / "sample20"


def _expected(name: str) -> list[tuple[int, ...]]:
    with open(SAMPLE / "expected" / name) as f:
        return [tuple(map(int, line.split(","))) for line in f if line.strip()]


@pytest.fixture(scope="module")
def answers():
    if not SAMPLE.exists():
        pytest.skip(f"no Linear Road sample at {SAMPLE}")
    rows = read_input(SAMPLE / "input.dat")
    return rows, run(rows, read_history(SAMPLE / "tolls.dat"))


def test_toll_and_accident_alerts_match_exactly(answers) -> None:
    _, ans = answers
    assert sorted(ans.tolls) == sorted(_expected("tollalerts.csv"))
    assert sorted(ans.accidents) == sorted(_expected("accidentalerts.csv"))


def test_daily_expenditures_match_exactly(answers) -> None:
    _, ans = answers
    assert sorted(ans.daily) == sorted(_expected("dailyexpenditure.csv"))


def test_balances_are_valid_under_the_60_second_rule(answers) -> None:
    rows, ans = answers
    vid_of = {r[9]: r[2] for r in rows if r[0] == 2}
    ours = {b[3]: b for b in ans.balances}
    expected = _expected("accountbalance.csv")
    assert len(ours) == len(expected)
    for _, t, _, qid, result_time, bal in expected:
        mine = ours[qid]
        assert mine[4] == t  # exact as of the request's own time
        # The validator's answer and ours agree: no toll was assessed in between.
        assert ans.balance_at(vid_of[qid], result_time) == bal == mine[5]
