"""The parser of ``psoup top``: a running server at a glance (psoup/top.py draws it)."""

from __future__ import annotations

from psoup.cli.args import _seconds
from psoup.cli.options import EPILOG, _connection_options


def add_parser(sub) -> None:
    """Add ``top`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "top",
        help="watch a running server: ingest rate, queue, invoke latency, busiest streams "
        "and queries, refreshed every second; q quits",
        description="Watch a running psoup server: ingest rate (with a sparkline of the last "
        "minute), ingest queue, memory, invoke latency percentiles, the busiest streams and "
        "the most invoked queries. q quits.",
        parents=[_connection_options()],
        epilog=EPILOG,
    )
    p.add_argument(
        "--refresh", type=_seconds, default=1.0, metavar="SECONDS",
        help="seconds between refreshes (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--for", dest="for_seconds", type=_seconds, metavar="SECONDS",
        help="stop after this long (default: until q or Ctrl-C)",
    )  # fmt: skip
    p.set_defaults(client_command="top")
