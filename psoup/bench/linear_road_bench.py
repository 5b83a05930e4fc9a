"""``psoup bench linear-road --input FILE --history FILE``: the largest speed-up at which
every Linear Road answer is right and on time.

Runs the data driver against a fresh ``psoup serve --linear-road`` child per speed-up,
from fast to slow, and stops at the first run with every answer right and on time, as
judged by the independent checker (``psoup linear-road check``). Reports per answer type
the max and p99 response times and the server's CPU time per position report.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from psoup.bench import machine, report
from psoup.linear_road import check, driver
from psoup.server.process import ServerProcess

SPEEDUPS = (80.0, 60.0, 40.0, 30.0, 20.0, 10.0, 5.0, 2.0, 1.0)


def run(out: Path, input_path: Path, history: Path | None, quick: bool = False) -> int:
    """Try the speed-ups; write the result to BENCHMARKS.md's linear-road section."""
    with open(input_path) as f:
        reports = sum(1 for line in f if line.startswith("0,"))
    rows, best = [], None
    answers = check.expected(input_path, history)  # computed once for every speed-up
    for k in SPEEDUPS[:2] if quick else SPEEDUPS:
        with tempfile.TemporaryDirectory() as tmp, ServerProcess(*driver.server_args()) as srv:
            if history is not None:
                driver.hydrate_history(history, srv.target, Path(tmp))
                if settled := driver.settle("the bench"):
                    print(settled)
            cpu0 = srv.cpu_seconds()  # the replay's share only, not the hydration
            summary = driver.run(input_path, None, Path(tmp), k, server=srv.target)
            cpu = srv.cpu_seconds() - cpu0
            verdict = check.check(input_path, history, Path(tmp), answers=answers)
            wrong = [kind for kind, r in verdict.types.items() if r.wrong or r.missing or r.extra]
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
