"""``psoup demo`` and ``psoup bench``: their parsers and how they run (the embedded demo job
and the benchmark suites, each imported only when it runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from psoup.cli.args import STRATEGIES, _cpus, _positive, _speedup, _sync_mode
from psoup.cli.checks import _error, _missing_input, _output_folder
from psoup.cli.options import _spark_options


def add_parsers(sub) -> None:
    """Add ``demo`` and ``bench`` to the subcommands ``sub``."""
    demo = sub.add_parser(
        "demo",
        help="run the embedded engine on generated readings and print results",
        description="Run the embedded engine on generated sensor readings and print results.",
    )
    demo.add_argument(
        "--seconds", type=_positive, default=7200, help="seconds of readings to ingest"
    )
    demo.add_argument("--sensors", type=_positive, default=64, help="number of sensors")
    demo.add_argument("--strategy", choices=STRATEGIES, default="psoup-p", help="engine strategy")
    demo.add_argument("--seed", type=int, default=1, help="random seed of the readings")

    bench = sub.add_parser(
        "bench",
        help="run a benchmark suite",
        description="Run a benchmark suite.",
        parents=[_spark_options()],
    )
    bench.add_argument(
        "suite",
        choices=("core", "grpc", "linear-road", "history", "durability", "overload", "scale"),
        help="core: the engine against its baselines; grpc: the server's transport cost; "
        "linear-road: the largest speed-up at which every answer is right and on time; "
        "history: hydrating a generated 25-million-row toll history with Spark, the "
        "server's memory after it and the daily-expenditure invoke time; durability: "
        "ingest by sync mode against memory, recovery time against retained data, a "
        "checkpoint's cost against registered queries; overload: "
        "clients flooding the server with ingest beside another client's invokes; scale: "
        "the sharded engine on Ray (1 and 2 shards) beside one engine, the hop's cost, a "
        "capacity model",
    )
    bench.add_argument("--input", type=Path, help="linear-road: the Linear Road input file")
    bench.add_argument("--history", type=Path, help="linear-road: the historical tolls file")
    bench.add_argument(
        "--xways",
        type=_positive,
        metavar="N",
        help="linear-road without --input: generate N expressways and rate L = N x K",
    )
    bench.add_argument(
        "--speedup",
        type=_speedup,
        default=1.0,
        metavar="K",
        help="linear-road --xways: simulated seconds per wall second (default 1)",
    )
    bench.add_argument(
        "--duration",
        type=_positive,
        default=10_800,
        metavar="SECONDS",
        help="linear-road --xways: simulated seconds to generate (default 10800, the "
        "benchmark's full 3 hours; shorter for smoke runs)",
    )
    bench.add_argument(
        "--work",
        type=Path,
        metavar="DIR",
        help="linear-road --xways: keep the generated input, history and answers here",
    )
    bench.add_argument(
        "--profile",
        action="store_true",
        help="linear-road --xways: also measure where a report's server time goes",
    )
    bench.add_argument(
        "--stress",
        action="store_true",
        help="linear-road --xways: a busy loop on another core through the replay (the "
        "rating must hold on a busy machine)",
    )
    bench.add_argument(
        "--sync",
        type=_sync_mode,
        metavar="MODE",
        help="linear-road --xways: the server keeps a data directory with this sync mode "
        "(batch, interval=MS, off) instead of running in memory",
    )
    bench.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="linear-road --xways: the server runs its engine as N shards on Ray "
        "(psoup serve --shards N)",
    )
    bench.add_argument(
        "--kill-shard",
        type=int,
        metavar="SECOND",
        help="linear-road --shards: SIGKILL the last shard at about this simulated second "
        "(Ray restarts it; late answers are counted)",
    )
    bench.add_argument(
        "--server-cpus",
        type=_cpus,
        metavar="CPUS",
        help="linear-road --xways: keep the server's threads, and its shards' processes, on "
        "these CPUs (psoup serve --cpus, --shard-cpus), e.g. 0",
    )
    bench.add_argument(
        "--driver-cpus",
        type=_cpus,
        metavar="CPUS",
        help="linear-road --xways: keep the driver's threads (the vehicles' clients) on "
        "these CPUs through the replay, e.g. 1",
    )
    bench.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    bench.add_argument(
        "--out", type=Path, default=Path("docs"), help="where BENCHMARKS.md and plots go"
    )
    bench.add_argument("--seed", type=int, default=7, help="random seed of the workloads")


def run_demo(args: argparse.Namespace) -> int:
    """``psoup demo``."""
    from psoup import demo as demo_mod

    demo_mod.run(seconds=args.seconds, sensors=args.sensors, seed=args.seed, strategy=args.strategy)
    return 0


def run_bench(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``psoup bench SUITE``; returns the exit status."""
    if problem := _output_folder("out", args.out):
        return _error(problem)
    if args.suite == "linear-road":
        from psoup.bench import linear_road_bench

        if args.kill_shard is not None and not (args.shards and args.sync):
            parser.error(
                "bench linear-road: --kill-shard goes with --shards and --sync (a shard kept "
                "in memory is not restarted: its tuples died with it)"
            )
        if args.xways is not None:
            from psoup.bench import lr_scale_bench
            from psoup.pinning import check_cpus

            try:
                check_cpus(args.server_cpus, "--server-cpus")
                check_cpus(args.driver_cpus, "--driver-cpus")
            except ValueError as err:
                parser.error(f"bench linear-road: {err}")

            return lr_scale_bench.run(
                args.out,
                args.xways,
                args.speedup,
                duration=args.duration,
                seed=args.seed,
                work=args.work,
                profile=args.profile,
                stress=args.stress,
                sync=args.sync,
                shards=args.shards,
                kill_shard=args.kill_shard,
                server_cpus=args.server_cpus,
                driver_cpus=args.driver_cpus,
            )
        if args.input is None:
            parser.error("bench linear-road needs --input FILE or --xways N")
        if problem := _missing_input(input=args.input, history=args.history):
            return _error(problem)
        return linear_road_bench.run(args.out, args.input, args.history, quick=args.quick)
    if args.suite == "history":
        from psoup.bench import history_bench

        return history_bench.run(
            args.out, quick=args.quick, seed=args.seed, master=args.master,
            conf=dict(args.conf),
        )  # fmt: skip
    if args.suite == "grpc":
        from psoup.bench import grpc_bench as suite
    elif args.suite == "durability":
        from psoup.bench import durability_bench as suite
    elif args.suite == "overload":
        from psoup.bench import overload_bench as suite
    elif args.suite == "scale":
        from psoup.bench import scale_bench as suite
    else:
        from psoup.bench import core as suite

    suite.run(args.out, quick=args.quick, seed=args.seed)
    return 0
