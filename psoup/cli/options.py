"""Option groups more than one ``psoup`` command takes, as parent parsers: the connection
to a server (``--server``, ``--token``, ``--timeout``, ``--tls-ca``) and a Spark job's
``--master`` and ``--conf``; and ``EPILOG``, the exit statuses every usage text ends with.
"""

from __future__ import annotations

import argparse
import os

from psoup.cli.args import _spark_setting, _timeout

EPILOG = """\
exit status: 0 success; 1 the server refused the request (printed as
'error: STATUS_CODE: message' on stderr) or a bad input file; 2 bad usage;
3 the server cannot be reached; 130 interrupted.
"""


def _spark_options() -> argparse.ArgumentParser:
    """The options of the commands that run a Spark job."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("spark")
    g.add_argument(
        "--master",
        metavar="URL",
        help="Spark master, e.g. spark://host:7077 (default: local[*,4], this machine's "
        "cores, a failed task tried up to 4 times)",
    )
    g.add_argument(
        "--conf",
        type=_spark_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.executor.memory=2g or spark.pyspark.python=PATH "
        "(the executors' interpreter); repeatable",
    )
    return p


def _connection_options(top: bool = False) -> argparse.ArgumentParser:
    """The options every client subcommand takes, before or after the subcommand
    (``psoup --server H:P invoke X`` and ``psoup invoke X --server H:P``): the top-level
    parser (``top``) holds the defaults, a subcommand's copy sets only what it is given."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection")

    def default(value):
        return value if top else argparse.SUPPRESS

    g.add_argument(
        "--server",
        default=default("localhost:50051"),
        metavar="HOST:PORT",
        help="the psoup server to talk to (default: localhost:50051)",
    )
    g.add_argument(
        "--token",
        default=default(os.environ.get("PSOUP_TOKEN")),
        help="bearer token for an authenticating server (default: $PSOUP_TOKEN)",
    )
    g.add_argument(
        "--timeout",
        type=_timeout,
        default=default(30.0),
        metavar="SECONDS",
        help="deadline of each call, except ingest and subscribe; at most a year (default: 30)",
    )
    g.add_argument(
        "--tls-ca",
        default=default(None),
        metavar="FILE",
        help="connect with TLS, trusting the PEM root certificates in FILE",
    )
    return p
