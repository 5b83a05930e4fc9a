"""The ``psoup`` command line: the embedded demo and benchmarks, the server, and its client.

This package only parses arguments and hands each command to the code that runs it; a
module per command group holds its parsers:

* ``args``: the argument types shared by the groups (``parse_schema``, ``_port``, ...);
* ``options``: the shared option groups (connection, Spark) and ``EPILOG``;
* ``checks``: checks of inputs and addresses before a command runs, the ``error:`` line;
* ``bench`` (demo and bench), ``serve``, ``client`` (the client commands, run by
  ``psoup.cli_client``), ``top``, ``linear_road`` and ``history`` (run by ``psoup.history.cli``).

Each command's implementation is imported only when it runs, so ``psoup demo`` does not
load gRPC or Spark.
"""

from __future__ import annotations

import argparse

from psoup.cli import bench, client, history, linear_road, serve, top
from psoup.cli.args import (
    GRPC_MAX_MESSAGE_BYTES,
    INT64_MAX,
    INT64_MIN,
    MAX_TIMEOUT,
    STRATEGIES,
    parse_number,
    parse_param,
    parse_schema,
    parse_value,
)
from psoup.cli.checks import _connection_problem, _error
from psoup.cli.options import EPILOG, _connection_options
from psoup.cli.serve import _tls_problem

__all__ = [
    "EPILOG",
    "GRPC_MAX_MESSAGE_BYTES",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_TIMEOUT",
    "STRATEGIES",
    "_tls_problem",
    "build_parser",
    "main",
    "parse_number",
    "parse_param",
    "parse_schema",
    "parse_value",
]


class _Parser(argparse.ArgumentParser):
    """A parser whose subcommands refuse an argument they do not know with their own usage
    line (argparse leaves that to the top-level parser, which prints its own)."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def build_parser() -> argparse.ArgumentParser:
    """The ``psoup`` argument parser with every subcommand."""
    parser = _Parser(
        prog="psoup",
        description="Continuous queries over streams, after PSoup: the embedded demo and "
        "benchmarks, the gRPC server (serve) and its client commands.",
        epilog=EPILOG,
        parents=[_connection_options(top=True)],
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    bench.add_parsers(sub)
    serve.add_parser(sub)
    client.add_parsers(sub)
    top.add_parser(sub)
    linear_road.add_parser(sub)
    history.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the exit status (130 on Ctrl-C)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(parser, args)
    except KeyboardInterrupt:
        return _error("interrupted", 130)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "demo":
        return bench.run_demo(args)
    if args.command == "bench":
        return bench.run_bench(parser, args)
    if args.command == "linear-road":
        return linear_road.run(args)
    if args.command == "serve":
        return serve.run(parser, args)
    if args.command == "history":
        if args.history_command != "cluster" and (
            problem := _connection_problem(args.server, args.token)
        ):
            return _error(problem, 2)
        from psoup.history import cli as history_cli

        return history_cli.run(args)
    if args.client_command == "register" and (args.query is None) == (args.template is None):
        parser.error("register: give the query text or --template ID, not both")
    from psoup import cli_client

    return cli_client.run(args.client_command, args)
