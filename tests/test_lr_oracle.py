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


def test_every_balance_of_the_validator_is_a_candidate_and_so_is_ours(answers) -> None:
    """The validator's one answer per request is among the five rules' candidates, and
    so is the answer the oracle gives (rule 3, else 4); which rule picked the validator's
    is counted, so a rule that never fires shows."""
    _, ans = answers
    ours = {b[3]: b for b in ans.balances}
    expected = _expected("accountbalance.csv")
    assert len(ours) == len(expected)
    for _, t, _, qid, result_time, bal in expected:
        assert ans.balance_requests[qid][0] == t
        candidates = ans.balance_candidates(*ans.balance_requests[qid])
        assert (result_time, bal) in candidates, (qid, t, sorted(candidates))
        assert ours[qid][4:] in candidates
    # Answers as of an earlier time than the request exist in the sample: the old
    # "request's own time" answer would be wrong for them.
    assert sum(1 for e in expected if e[4] != e[1]) > 100
