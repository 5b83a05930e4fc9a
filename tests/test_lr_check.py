"""The independent Linear Road checker (psoup/linear_road/check.py) on sample20.

The original validator's expected files, taken as a run's output, are all right; one
injected wrong, missing, extra and late answer per answer type is counted exactly; the
balance rule accepts the answers the README describes and nothing else; and
``psoup linear-road check`` exits 0 or 1 and prints the table. The expected answers of
sample20 are computed once for the module (3 s); the whole file takes about 10 s.
"""

from __future__ import annotations

import shutil
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


def test_balances_are_judged_under_the_60_second_rule(answers, tmp_path) -> None:
    out = _copy_expected(tmp_path)
    rows = _read(out / "accountbalance.csv")
    # The validator's own ResultTime is the latest toll notification, sometimes > 60 s back.
    assert sum(r[4] < r[1] - 60 for r in rows) == 195
    # Exact as of the request's own time (what psoup's driver answers): right.
    _write(out / "accountbalance.csv", [[*r[:4], r[1], r[5]] for r in rows])
    assert _check(out, answers).types["balance"].right == COUNTS["balance"]

    # Any time in [t - 60, t] with the balance it had then: right; 61 s back, at a time
    # that is not the latest notification: wrong; a time that is not the request's: wrong.
    def as_of(r: list[int], back: int) -> list[int]:
        vid = answers.balance_requests[r[3]][1]
        return [*r[:4], r[1] - back, answers.balance_at(vid, r[1] - back)]

    shifted = [as_of(r, 60) for r in rows]
    i = next(k for k, r in enumerate(rows) if r[4] == r[1] and r[1] >= 61)
    shifted[i] = as_of(rows[i], 61)
    shifted[i + 1][1] += 1
    _write(out / "accountbalance.csv", shifted)
    r = _check(out, answers).types["balance"]
    assert (r.right, r.wrong) == (COUNTS["balance"] - 2, 2), r.examples["wrong"]


def test_a_balance_from_inside_the_window_before_a_toll_is_right() -> None:
    # 51 vehicles in segment 0 during minute 1 at 10 mph: vehicle 1, entering it at 60, is
    # notified a toll of 2 and charged at 90 on leaving. A balance request at 100 may
    # answer 2 as of 90 .. 100, or 0 as of 40 .. 89, but not 0 as of 95 nor 2 as of 80.
    rows = [[0, t, v, 10, 0, 1, 0, 0, 1000 + v, *[-1] * 6] for t in (0, 30) for v in range(10, 61)]
    rows += [[0, 60, 1, 10, 0, 1, 0, 0, 3000, *[-1] * 6]]
    rows += [[0, 90, 1, 10, 0, 1, 0, 1, 6000, *[-1] * 6]]
    rows += [[2, 100, 1, -1, -1, -1, -1, -1, -1, 7, *[-1] * 5]]
    ans = check.run(rows, {})
    assert ans.assessed == {1: [(90, 2)]}
    assert ans.balances == [(2, 100, 100, 7, 100, 2)]
    assert ans.balance_requests[7] == (100, 1, 90)
    ok = [(100, 2), (90, 2), (89, 0), (40, 0)]
    bad = [(95, 0), (80, 2), (39, 0), (101, 2)]
    assert [ans.balance_accepts(7, rt, bal) for rt, bal in ok + bad] == [True] * 4 + [False] * 4


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
