"""``psoup bench linear-road --input FILE --history FILE``: the largest speed-up at which
every Linear Road answer is right and on time.

Runs the data driver against a fresh ``psoup serve --linear-road`` child per speed-up,
from fast to slow, and stops at the first run with every answer on time (and, when an
``expected/`` directory of validator answers sits next to the input, every answer
right). Reports per answer type the max and p99 response times and the server's CPU time
per position report.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from psoup.bench import machine, report
from psoup.linear_road import driver
from psoup.server.process import ServerProcess

SPEEDUPS = (80.0, 60.0, 40.0, 30.0, 20.0, 10.0, 5.0, 2.0, 1.0)


def _rows(path: Path) -> list[tuple[int, ...]]:
    with open(path) as f:
        return [tuple(map(int, line.split(","))) for line in f if line.strip()]


def check(out_dir: Path, expected: Path) -> list[str]:
    """Differences from the validator's answers (emit ignored; balances by (qid, bal))."""
    problems = []

    def strip(rows, emit_col):
        return sorted(tuple(v for i, v in enumerate(r) if i != emit_col) for r in rows)

    for name, emit_col in (
        ("tollalerts.csv", 3),
        ("accidentalerts.csv", 2),
        ("dailyexpenditure.csv", 2),
    ):
        if strip(_rows(out_dir / name), emit_col) != strip(_rows(expected / name), emit_col):
            problems.append(name)
    mine = {r[3]: r[5] for r in _rows(out_dir / "accountbalance.csv")}
    theirs = {r[3]: r[5] for r in _rows(expected / "accountbalance.csv")}
    if mine != theirs:
        problems.append("accountbalance.csv")
    return problems


def run(out: Path, input_path: Path, history: Path | None, quick: bool = False) -> int:
    """Try the speed-ups; write the result to BENCHMARKS.md's linear-road section."""
    expected = input_path.parent / "expected"
    with open(input_path) as f:
        reports = sum(1 for line in f if line.startswith("0,"))
    rows, best = [], None
    for k in SPEEDUPS[:2] if quick else SPEEDUPS:
        with tempfile.TemporaryDirectory() as tmp, ServerProcess(*driver.SERVER_ARGS) as srv:
            if history is not None:
                driver.hydrate_history(history, srv.target, Path(tmp))
            cpu0 = srv.cpu_seconds()  # the replay's share only, not the hydration
            summary = driver.run(input_path, None, Path(tmp), k, server=srv.target)
            cpu = srv.cpu_seconds() - cpu0
            wrong = check(Path(tmp), expected) if expected.is_dir() else []
        ok = not summary.missed and not wrong
        print(f"\nspeed-up {k:g}: {'OK' if ok else 'FAILED'}\n{summary.table()}")
        if wrong:
            print(f"  wrong answers in: {', '.join(wrong)}")
        s = summary.rows
        rows.append(
            [
                k,
                "yes" if ok else "no",
                s["toll"]["max"],
                s["toll"]["p99"],
                s["balance"]["max"],
                s["balance"]["p99"],
                s["daily"]["max"],
                1e6 * cpu / max(reports, 1),
                summary.missed,
            ]
        )
        if ok:
            best = k
            break
    headers = [
        "speed-up",
        "all right and on time",
        "toll max s",
        "toll p99 s",
        "balance max s",
        "balance p99 s",
        "daily max s",
        "server CPU us/report",
        "late answers",
    ]
    md = [
        f"## Linear Road (`psoup bench linear-road --input {input_path.name} "
        f"--history {history.name if history else '-'}`)",
        "",
        f"Machine: {machine.describe()}.",
        "",
        report.markdown_table(headers, rows),
        "",
        f"Largest speed-up with every answer right and on time: **{best:g}**"
        if best
        else "No speed-up tried had every answer right and on time.",
        "",
        f"Input: {reports:,} position reports; response times in simulated seconds "
        "(deadlines 5 s, 10 s for daily expenditure); the server runs in its own process.",
    ]
    print("\n" + report.table(headers, rows))
    report.write_section(out / "BENCHMARKS.md", "linear-road", "\n".join(md))
    return 0 if best else 1
