"""``psoup linear-road run|generate|check``: the parsers of the Linear Road driver's commands
and their runs (the driver, the generator and the checker, imported only then)."""

from __future__ import annotations

import argparse
from pathlib import Path

from psoup.cli.args import _positive, _speedup
from psoup.cli.checks import _connection_problem, _error, _missing_input


def add_parser(sub) -> None:
    """Add ``linear-road`` and its actions to the subcommands ``sub``."""
    lr = sub.add_parser(
        "linear-road",
        help="run the Linear Road benchmark's data driver",
        description="Linear Road on psoup: replay an input file against a server.",
    )
    lr_sub = lr.add_subparsers(dest="lr_command", required=True, metavar="COMMAND")
    run = lr_sub.add_parser(
        "run",
        help="hydrate the history, replay the input, write the answers",
        description="Hydrate the toll history (PySpark), replay the input in simulated real "
        "time, answer every request through the vehicles' standing queries, and write "
        "tollalerts.csv, accidentalerts.csv, accountbalance.csv and dailyexpenditure.csv "
        "with a summary and a PNG of response times. Exits 1 when a deadline is missed.",
    )
    run.add_argument("--input", type=Path, required=True, help="Linear Road input file")
    run.add_argument("--history", type=Path, help="historical tolls file (vid,day,xway,tolls)")
    run.add_argument("--out", type=Path, required=True, help="directory for the answer files")
    run.add_argument(
        "--speedup",
        type=_speedup,
        default=1.0,
        help="simulated seconds per wall second (1: real time)",
    )
    run.add_argument(
        "--server",
        help="HOST:PORT of a server started with --linear-road (default: start one)",
    )
    run.add_argument(
        "--every-crossing",
        action="store_true",
        help="toll alerts at every crossing into a new segment, as the spec's text says "
        "(default: once per vehicle, direction and segment, as the original validator "
        "expects; see docs/LINEAR_ROAD.md)",
    )
    run.add_argument(
        "--live",
        action="store_true",
        help="show the run as it goes (reports/s, answers per type, latest and worst "
        "response time, how late batches went out) instead of the progress bar",
    )
    gen = lr_sub.add_parser(
        "generate",
        help="generate Linear Road input and its toll history",
        description="Write semantically valid Linear Road input (the spec's 15 fields) for N "
        "expressways and the matching historical tolls file. Deterministic given --seed.",
    )
    gen.add_argument("--xways", type=_positive, default=1, metavar="N", help="expressways")
    gen.add_argument(
        "--duration",
        type=_positive,
        default=10_800,
        metavar="SECONDS",
        help="simulated seconds (default 10800: the benchmark's 3 hours)",
    )
    gen.add_argument("--out", type=Path, required=True, metavar="FILE", help="input file to write")
    gen.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="historical tolls file to write (default: FILE with .tolls.dat)",
    )
    gen.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    check = lr_sub.add_parser(
        "check",
        help="check a run's answers against an independent implementation of the spec",
        description="Compute the expected answers of INPUT and HISTORY with a plain, "
        "independent implementation of the spec and report per answer type: expected, "
        "received, wrong, missing, extra, late. Exits 1 on any error.",
    )
    check.add_argument("--input", type=Path, required=True, help="Linear Road input file")
    check.add_argument("--history", type=Path, help="historical tolls file (vid,day,xway,tolls)")
    check.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="the run's answer files"
    )
    check.add_argument(
        "--every-crossing",
        action="store_const",
        const=True,
        default=None,
        help="judge toll alerts at every crossing (default: the run's own convention, "
        "written in DIR/convention by the driver, else the validator's)",
    )


def _run(args: argparse.Namespace) -> int:
    """``psoup linear-road run``: the inputs and the server are checked before the run."""
    if problem := _connection_problem(args.server):
        return _error(problem, 2)
    if problem := _missing_input(input=args.input, history=args.history):
        return _error(problem)
    from clients import PSoupRpcError, Unavailable
    from psoup.linear_road import driver

    convention = "every-crossing" if args.every_crossing else "validator"
    try:
        summary = driver.run(
            args.input, args.history, args.out, args.speedup, args.server,
            convention=convention, show_live=args.live,
        )  # fmt: skip
    except PSoupRpcError as err:
        return _error(str(err), 3 if isinstance(err, Unavailable) else 1)
    except (ValueError, RuntimeError, OSError) as err:
        # a bad input line, a server without Linear Road's streams, an unwritable --out
        return _error(str(err))
    print(summary.table())
    if summary.missed:
        return _error(f"{summary.missed} answers missed their deadline")
    print(f"every answer on time; answers and response_times.png in {args.out}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``args.lr_command`` (run, generate or check); returns the exit status."""
    if args.lr_command == "generate":
        from psoup.linear_road import generate

        return generate.cli_main(args)
    if args.lr_command == "check":
        if problem := _missing_input(input=args.input, history=args.history):
            return _error(problem)
        from psoup.linear_road import check

        return check.cli_main(args)
    return _run(args)
