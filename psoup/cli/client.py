"""The parsers of the client commands: ``stream create|list|describe|drop``, ``grant``,
``revoke``, ``ingest``, ``prepare``, ``register``, ``invoke``, ``subscribe``, ``unregister``,
``describe``, ``backup``, ``cluster status`` and ``stats``. Each sets
``client_command``, the key under which ``psoup.cli_client`` runs it.
"""

from __future__ import annotations

import argparse

from psoup import formatting
from psoup.cli.args import _page_rows, _Params, _positive, parse_number, parse_param, parse_schema
from psoup.cli.options import EPILOG, _connection_options


def add_parsers(sub) -> None:
    """Add the client commands to the subcommands ``sub``."""
    conn = _connection_options()

    def client(parent, name: str, help_: str, command: str) -> argparse.ArgumentParser:
        p = parent.add_parser(
            name,
            help=help_,
            description=help_[0].upper() + help_[1:] + ".",
            parents=[conn],
            epilog=EPILOG,
        )
        p.set_defaults(client_command=command)
        return p

    stream = sub.add_parser(
        "stream",
        help="create, list, describe or drop streams on a server",
        description="Manage the streams of a psoup server.",
    )
    ssub = stream.add_subparsers(dest="stream_command", required=True, metavar="ACTION")
    p = client(ssub, "create", "declare a stream", "stream create")
    p.add_argument("name", help="stream name: letters, digits and _")
    p.add_argument(
        "--schema",
        type=parse_schema,
        required=True,
        metavar="NAME:TYPE,...",
        help="attributes in order, types int, float or str (e.g. vid:int,spd:int,t:int)",
    )
    p.add_argument(
        "--time", required=True, metavar="ATTR", help="the time attribute (int or float)"
    )
    p.add_argument(
        "--max-window",
        type=parse_number,
        metavar="N",
        help="keep only tuples with time >= latest time - N (default: keep everything)",
    )
    p.add_argument(
        "--partition-by",
        metavar="ATTR",
        help="an int or str attribute a sharded server spreads the tuples by (docs/SCALE_OUT.md)",
    )
    p = client(ssub, "list", "list every stream", "stream list")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    p = client(ssub, "describe", "show a stream's declaration and counters", "stream describe")
    p.add_argument("name", help="stream name")
    p.add_argument(
        "--format", choices=formatting.TEXT_FORMATS, default="text", help="output format"
    )
    p = client(ssub, "drop", "forget a stream and its tuples", "stream drop")
    p.add_argument("name", help="stream name")

    for verb, help_ in (
        ("grant", "give a client a right on a stream (its owner or an admin only)"),
        ("revoke", "take a client's right on a stream back (its owner or an admin only)"),
    ):
        p = client(sub, verb, help_, verb)
        p.add_argument("stream", help="stream name")
        p.add_argument("client_id", metavar="CLIENT", help="the client id (from the tokens file)")
        p.add_argument(
            "right",
            choices=("read", "write"),
            help="read: register queries over it and read it out; write: ingest and bulk load",
        )

    p = client(
        sub, "ingest", "send the rows of a CSV, Parquet or Arrow IPC file to a stream", "ingest"
    )
    p.add_argument("name", help="stream name")
    p.add_argument(
        "file",
        metavar="FILE",
        help="a CSV file whose header row names the attributes, or a Parquet or Arrow IPC "
        "(Feather) file whose column names do; the format is told by the first bytes",
    )
    p.add_argument(
        "--batch-rows",
        type=_positive,
        default=8192,
        metavar="N",
        help="rows per batch (default: %(default)s)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument(
        "--flight",
        metavar="HOST:PORT",
        help="send the batches over Arrow Flight to the server's --flight-port here instead "
        "of over its Ingest call (the same checks and acks, less CPU on both sides); "
        "--server is still asked for the stream's schema",
    )

    p = client(sub, "prepare", "prepare a query text as a template; prints its id alone",
               "prepare")  # fmt: skip
    p.add_argument("query", help="the query text, with :NAME parameters")

    p = client(sub, "register", "register a standing query; prints its handle alone", "register")
    p.add_argument(
        "query", nargs="?", help="the query text, e.g. 'SELECT * FROM r BEGIN NOW - 10 END NOW'"
    )
    p.add_argument("--template", metavar="ID", help="a template's id (prepare) instead of text")
    p.add_argument(
        "--param",
        type=parse_param,
        action=_Params,
        default=[],
        metavar="NAME=VALUE",
        help="value of the query's :NAME parameter (64-bit int, else finite float, else "
        "string); once per name, repeatable",
    )

    p = client(sub, "invoke", "print a query's current result", "invoke")
    p.add_argument("handle", help="the handle register printed")
    p.add_argument("--now", type=parse_number, metavar="T", help="evaluate the window as of T")
    p.add_argument(
        "--format",
        choices=formatting.RESULT_FORMATS,
        default="table",
        help="output format (default: %(default)s)",
    )
    p.add_argument(
        "--page-rows",
        type=_page_rows,
        default=0,
        metavar="N",
        help="rows per response message; 0 = the server's default",
    )

    p = client(
        sub, "subscribe", "print a query's new matches as they arrive, until Ctrl-C", "subscribe"
    )
    p.add_argument("handle", help="the handle register printed")
    p.add_argument("--include-current", action="store_true", help="first print the current result")
    p.add_argument(
        "--format",
        choices=formatting.EVENT_FORMATS,
        default="text",
        help="text: '# kind' lines then tab-separated rows; csv: rows only; "
        "json: one object per event (default: %(default)s)",
    )

    p = client(sub, "unregister", "drop a standing query", "unregister")
    p.add_argument("handle", help="the query's handle")

    p = client(sub, "describe", "show a query's text, parameters, columns and window", "describe")
    p.add_argument("handle", help="the query's handle")
    p.add_argument(
        "--format", choices=formatting.TEXT_FORMATS, default="text", help="output format"
    )

    p = client(
        sub, "backup", "have the server write a consistent copy of its data directory", "backup"
    )
    p.add_argument(
        "directory",
        help="where, on the server's machine (missing or empty; made absolute here); a "
        "server can start on it with psoup serve --data-dir",
    )

    cluster = sub.add_parser(
        "cluster",
        help="a sharded server's shards (psoup serve --shards)",
        description="The shards of a sharded psoup server.",
    )
    csub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    p = client(csub, "status", "list the shards: state, node, tuples, queries, memory, "
               "restarts", "cluster status")  # fmt: skip
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")

    p = client(sub, "stats", "show the server's engine and per-stream counters", "stats")
    p.add_argument(
        "--format", choices=formatting.TEXT_FORMATS, default="text", help="output format"
    )
