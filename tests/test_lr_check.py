"""The independent Linear Road checker (psoup/linear_road/check.py) on sample20.

The original validator's expected files, taken as a run's output, are all right; one
injected wrong, missing, extra and late answer per answer type is counted exactly; the
balance rule accepts the answers the README describes and nothing else; and
``psoup linear-road check`` exits 0 or 1 and prints the table. The expected answers of
sample20 are computed once for the module (3 s); the whole file takes about 10 s.
"""

from __future__ import annotations

import shutil
from array import array
from pathlib import Path

import pytest

from psoup import cli
from psoup.linear_road import check

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "linear-road" / "sample20"
COUNTS = {"toll": 209_479, "accident": 4_252, "balance": 2_473, "daily": 490}
# Per answer type: the column of the value to corrupt. Every toll is even (2 (n - 50)^2),
# so a balance + 1 is never one of the candidates.
VALUE = {"toll": 5, "accident": 4, "balance": 5, "daily": 4}

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="no Linear Road sample")


@pytest.fixture(scope="module")
def answers() -> check.Answers:
    return check.expected(SAMPLE / "input.dat", SAMPLE / "tolls.dat")


def _check(out: Path, answers: check.Answers) -> check.CheckReport:
    return check.check(SAMPLE / "input.dat", SAMPLE / "tolls.dat", out, answers=answers)


def _read(path: Path) -> list[list[int]]:
    with open(path) as f:
        return [list(map(int, line.split(","))) for line in f if line.strip()]


def _write(path: Path, rows: list[list[int]]) -> None:
    with open(path, "w") as f:
        f.writelines(",".join(map(str, r)) + "\n" for r in rows)


def _copy_expected(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(SAMPLE / "expected", out)
    for p in out.iterdir():
        p.chmod(0o644)
    return out


def test_the_validators_expected_files_are_all_right(answers) -> None:
    report = _check(SAMPLE / "expected", answers)
    assert report.ok, report.table() + "\n" + report.problems()
    for kind, n in COUNTS.items():
        r = report.types[kind]
        assert (r.expected, r.received, r.right) == (n, n, n), kind
        assert (r.wrong, r.missing, r.extra, r.late) == (0, 0, 0, 0), kind
    assert report.problems() == ""
    assert report.reports == 505_389


def test_written_expected_answers_are_all_right(answers, tmp_path: Path) -> None:
    answers.write(tmp_path)
    report = _check(tmp_path, answers)
    assert report.ok, report.problems()
    assert {k: r.right for k, r in report.types.items()} == COUNTS


def test_one_injected_problem_of_each_kind_per_type_is_counted(answers, tmp_path) -> None:
    out = _copy_expected(tmp_path)
    for kind, name in check.FILES.items():
        _, _, t_col, e_col = check.LAYOUT[kind]
        rows = _read(out / name)
        rows[1][VALUE[kind]] += 1  # wrong
        rows[4][e_col] = rows[4][t_col] + check.DEADLINES[kind] + 1  # late (but right)
        rows.append(list(rows[3]))  # extra: a second answer for one key
        del rows[2]  # missing
        _write(out / name, rows)
    report = _check(out, answers)
    assert not report.ok
    for kind, n in COUNTS.items():
        r = report.types[kind]
        counts = (r.expected, r.received, r.right, r.wrong, r.missing, r.extra, r.late)
        assert counts == (n, n, n - 2, 1, 1, 1, 1), (kind, counts)
        assert all(len(e) == 1 for e in r.examples.values()), r.examples
    text = report.problems()
    for kind in COUNTS:
        for problem in ("wrong", "missing", "extra", "late"):
            assert f"{kind} {problem} (1)" in text
    assert "a second answer" in text and "answered 6 s after" in text
    assert "answered 11 s after" in text  # daily expenditure's deadline is 10 s


def test_answers_of_another_type_or_for_no_request_are_extra(answers, tmp_path) -> None:
    out = _copy_expected(tmp_path)
    rows = _read(out / "accidentalerts.csv")
    rows.append([1, 100, 100, 999_999, 7])  # no such alert
    rows.append([0, 100, 100, 999_999, 7])  # not an accident alert
    _write(out / "accidentalerts.csv", rows)
    r = _check(out, answers).types["accident"]
    assert (r.received, r.right, r.extra) == (COUNTS["accident"] + 2, COUNTS["accident"], 2)
    assert "(not expected)" in r.examples["extra"][0] and "type is not 1" in r.examples["extra"][1]


def test_balances_are_judged_by_the_validators_rules(answers, tmp_path) -> None:
    out = _copy_expected(tmp_path)
    rows = _read(out / "accountbalance.csv")
    # The validator's ResultTime is when the balance was last updated, not the request's
    # time: answering as of the request's own time (what psoup once did) is mostly wrong.
    _write(out / "accountbalance.csv", [[*r[:4], r[1], r[5]] for r in rows])
    r = _check(out, answers).types["balance"]
    assert r.wrong > 1_000 and r.right + r.wrong == COUNTS["balance"], r
    assert "expected (resulttime, bal) in" in r.examples["wrong"][0]
    # The oracle's own answers (rule 3, else 4) are all right; one whose time is not the
    # request's is wrong.
    ours = [list(b) for b in answers.balances]
    _write(out / "accountbalance.csv", ours)
    assert _check(out, answers).types["balance"].right == COUNTS["balance"]
    ours[0][1] += 1
    _write(out / "accountbalance.csv", ours)
    assert _check(out, answers).types["balance"].wrong == 1


def _vehicle(times: list[int], bals: list[int]) -> check.Answers:
    ans = check.Answers()
    ans.alerts_of[1] = (array("q", times), array("q", bals))
    return ans


@pytest.mark.parametrize(
    "t, accepted",
    [
        # A = 10, 50, 80, 100 with balances 0, 5, 5, 12 (charged at 50 and 100).
        (100, {(100, 12), (80, 5), (50, 5)}),  # 1. t in A; 2. before tau0=100; 3. earliest
        (110, {(80, 5)}),  # tau0 = 100 (in (80, 110]) -> 80; earliest in (50, 110] = 80
        (129, {(80, 5)}),  # tau0 = 100 still in (99, 129]: 80; earliest in (69, 129]: 80
        (130, {(80, 5)}),  # (100, 130] is empty: no rule 2; earliest in (70, 130]: 80
        (140, {(100, 12)}),  # earliest in (80, 140]: 100 (t - 60 = 80 is excluded)
        (160, {(100, 12)}),  # (100, 160] empty: 4. the latest at or before t - 60 = 100
        (500, {(100, 12)}),  # long after: 4. still the last alert
        (5, {(5, 0)}),  # before any alert: nothing charged yet
    ],
)
def test_each_balance_rule_at_its_boundaries(t: int, accepted: set) -> None:
    ans = _vehicle([10, 50, 80, 100], [0, 5, 5, 12])
    assert ans.balance_candidates(t, 1) == accepted


def test_rule_2_needs_an_alert_before_its_answer_and_rule_5_the_first_alert() -> None:
    assert _vehicle([10, 50], [0, 3]).balance_candidates(60, 1) == {(10, 0)}
    assert _vehicle([5, 10, 50], [0, 0, 3]).balance_candidates(60, 1) == {(10, 0), (5, 0)}
    assert _vehicle([36], [0]).balance_candidates(36, 1) == {(36, 0)}  # 5. first alert at t
    # The README's example: the only crossing at 6, a request at 36: (6, 0), not (36, 0).
    assert _vehicle([6], [0]).balance_candidates(36, 1) == {(6, 0)}


def test_an_exit_lane_report_is_no_update() -> None:
    # 51 vehicles in segment 0 during minute 1 at 10 mph: vehicle 1, entering it at 60,
    # is notified a toll of 2, charged at its next alert (segment 1, at 90); it leaves by
    # the exit lane at 120 (no alert, no charge). A request at 170: no alert within
    # (110, 170], so the answer is the balance at the latest alert at or before 110.
    rows = [[0, t, v, 10, 0, 1, 0, 0, 1000 + v, *[-1] * 6] for t in (0, 30) for v in range(10, 61)]
    rows += [[0, 60, 1, 10, 0, 1, 0, 0, 3000, *[-1] * 6]]
    rows += [[0, 90, 1, 10, 0, 1, 0, 1, 6000, *[-1] * 6]]
    rows += [[0, 120, 1, 10, 0, 4, 0, 1, 7000, *[-1] * 6]]
    rows += [[2, 170, 1, -1, -1, -1, -1, -1, -1, 7, *[-1] * 5]]
    ans = check.run(rows, {})
    assert ans.assessed == {1: [(90, 2)]}
    assert ans.balances == [(2, 170, 170, 7, 90, 2)]
    assert ans.balance_candidates(170, 1) == {(90, 2)}
    assert not ans.balance_accepts(7, 170, 2)  # the request's own time is not an update


def test_a_missing_answer_file_counts_as_no_answers(answers, tmp_path) -> None:
    out = _copy_expected(tmp_path)
    (out / "dailyexpenditure.csv").unlink()
    report = _check(out, answers)
    r = report.types["daily"]
    assert (r.received, r.missing) == (0, COUNTS["daily"])
    assert "dailyexpenditure.csv: counted as no answers" in report.problems()


def _small_sample(tmp_path: Path) -> Path:
    """The first 3 simulated minutes of sample20 (some 40,000 tuples)."""
    path = tmp_path / "input.dat"
    with open(SAMPLE / "input.dat") as src, open(path, "w") as dst:
        dst.writelines(line for line in src if int(line.split(",", 2)[1]) < 180)
    return path


def test_cli_exit_status_and_table(tmp_path, capsys) -> None:
    small = _small_sample(tmp_path)
    out = tmp_path / "run"
    check.expected(small, SAMPLE / "tolls.dat").write(out)
    argv = ["linear-road", "check", "--input", str(small), "--out", str(out)]
    argv += ["--history", str(SAMPLE / "tolls.dat")]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split() == [
        "answer",
        *("expected", "received", "right", "wrong", "missing", "extra", "late"),
    ]
    assert "every answer right and on time" in printed
    toll_line = next(line for line in printed.splitlines() if line.startswith("toll"))
    n = int(toll_line.split()[1])
    assert n > 1000 and toll_line.split()[1:] == [str(n)] * 3 + ["0"] * 4

    rows = _read(out / "tollalerts.csv")
    rows[0][5] += 2
    _write(out / "tollalerts.csv", rows)
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert "toll wrong (1), first 1:" in captured.out
    assert "some answers are wrong" in captured.err


def test_cli_reports_unreadable_files(tmp_path, capsys) -> None:
    small = _small_sample(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / "tollalerts.csv").write_text("type,vid,time,emit,lav,toll\n0,1,2,3,4,5\n")
    assert cli.main(["linear-road", "check", "--input", str(small), "--out", str(out)]) == 1
    assert "tollalerts.csv: not 6 integers per line" in capsys.readouterr().err
    assert (
        cli.main(["linear-road", "check", "--input", str(small), "--out", str(tmp_path / "x")]) == 1
    )
    assert "no answers directory" in capsys.readouterr().err
