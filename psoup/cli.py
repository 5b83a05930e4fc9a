"""The ``psoup`` command line: the embedded demo and benchmarks, the server, and its client.

This module only parses arguments. The client subcommands run in ``psoup.cli_client``,
the server in ``psoup.server``, the history jobs in ``psoup.history.cli``; each is
imported only when its command runs, so ``psoup demo`` does not load gRPC or Spark.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from pathlib import Path

from psoup import formatting

STRATEGIES = ("psoup-p", "psoup-c", "nomat")
EPILOG = """\
exit status: 0 success; 1 the server refused the request (printed as
'error: STATUS_CODE: message' on stderr) or a bad input file; 2 bad usage;
3 the server cannot be reached; 130 interrupted.
"""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: gRPC's largest message size (a C int).
GRPC_MAX_MESSAGE_BYTES = 2**31 - 1
#: The longest --timeout: gRPC fails a call at once when its deadline overflows.
MAX_TIMEOUT = 365 * 24 * 3600


class _Parser(argparse.ArgumentParser):
    """A parser whose subcommands refuse an argument they do not know with their own usage
    line (argparse leaves that to the top-level parser, which prints its own)."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


# -------------------------------------------------------------------- argument types


def parse_schema(text: str) -> dict[str, str]:
    """``"a:int,b:float,t:int"`` -> ``{"a": "int", "b": "float", "t": "int"}``."""
    from psoup.values import DTYPES

    schema: dict[str, str] = {}
    for part in text.split(","):
        name, sep, type_ = (s.strip() for s in part.partition(":"))
        if not sep or not name or not type_:
            raise argparse.ArgumentTypeError(
                f"bad attribute {part.strip()!r}: expected NAME:TYPE (e.g. vid:int,t:int)"
            )
        if name in schema:
            raise argparse.ArgumentTypeError(f"attribute {name!r} is declared twice")
        if type_ not in DTYPES:
            raise argparse.ArgumentTypeError(
                f"attribute {name!r} has unknown type {type_!r}; types are {', '.join(DTYPES)}"
            )
        schema[name] = type_
    return schema


def parse_value(text: str) -> int | float | str:
    """A parameter value: an int if it reads as one (64 bits), else a finite float, else
    the text. NaN and infinity are refused, as is an int beyond 64 bits."""
    try:
        v = int(text)
    except ValueError:
        pass
    else:
        if not INT64_MIN <= v <= INT64_MAX:
            raise argparse.ArgumentTypeError(
                f"{text!r} is beyond the 64-bit integer range ({INT64_MIN}..{INT64_MAX})"
            )
        return v
    try:
        f = float(text)
    except ValueError:
        return text
    if not math.isfinite(f):
        raise argparse.ArgumentTypeError(f"{text!r}: NaN and infinity are not allowed values")
    return f


class _Params(argparse.Action):
    """``--param NAME=VALUE``, repeatable; a name given twice is a usage error (else the
    last would silently win)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        params = list(getattr(namespace, self.dest, None) or [])
        if any(name == values[0] for name, _ in params):
            raise argparse.ArgumentError(self, f"parameter {values[0]!r} is given twice")
        setattr(namespace, self.dest, [*params, values])


def parse_param(text: str) -> tuple[str, int | float | str]:
    """``"k=v"`` -> ``("k", parse_value("v"))``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"bad parameter {text!r}: expected NAME=VALUE")
    return name.strip(), parse_value(value)


def parse_number(text: str) -> int | float:
    """A finite int (64 bits) or float."""
    v = parse_value(text)  # refuses NaN, infinity and an int beyond 64 bits
    if isinstance(v, str):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return v


def _count(text: str, least: int, most: int = INT64_MAX) -> int:
    try:
        v = int(text)
    except ValueError:
        v = least - 1
    if v < least:
        what = "a positive integer" if least > 0 else "an integer >= 0"
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    if v > most:
        raise argparse.ArgumentTypeError(f"{text!r} is more than {most}")
    return v


def _positive(text: str) -> int:
    return _count(text, 1)


def _page_rows(text: str) -> int:
    return _count(text, 0, 2**32 - 1)  # a uint32 in the request


def _duration(text: str, zero_ok: bool) -> float:
    v = parse_number(text)
    if v < 0 or (v == 0 and not zero_ok):
        what = "a number of seconds >= 0" if zero_ok else "a positive number of seconds"
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    return float(v)


def _seconds(text: str) -> float:
    return _duration(text, zero_ok=False)


def _timeout(text: str) -> float:
    """A call's deadline: positive seconds, at most a year."""
    v = _seconds(text)
    if v > MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(f"{text!r} is more than a year ({MAX_TIMEOUT} s)")
    return v


def _speedup(text: str) -> float:
    """A positive, finite factor."""
    v = parse_number(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return float(v)


def _message_bytes(text: str) -> int:
    return _count(text, 1, GRPC_MAX_MESSAGE_BYTES)


def _seconds_or_never(text: str) -> float:
    """Seconds between two runs of a periodic job; 0 turns the job off."""
    return _duration(text, zero_ok=True)


def _sync_mode(text: str) -> str:
    from psoup.storage.log import Sync

    try:
        return str(Sync.parse(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {text!r}")
    return v


# ------------------------------------------------------------------------ subcommands


def _spark_setting(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip() or key != key.strip():
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return key, value


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


def _add_demo_bench(sub) -> None:
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
        choices=("core", "grpc", "linear-road", "history", "durability", "overload"),
        help="core: the engine against its baselines; grpc: the server's transport cost; "
        "linear-road: the largest speed-up at which every answer is right and on time; "
        "history: hydrating a generated 25-million-row toll history with Spark, the "
        "server's memory after it and the daily-expenditure invoke time; durability: "
        "ingest by sync mode against memory, recovery time against retained data; overload: "
        "clients flooding the server with ingest beside another client's invokes",
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
    bench.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    bench.add_argument(
        "--out", type=Path, default=Path("docs"), help="where BENCHMARKS.md and plots go"
    )
    bench.add_argument("--seed", type=int, default=7, help="random seed of the workloads")


def _add_serve(sub) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the gRPC server until SIGTERM or Ctrl-C",
        description="Run the psoup gRPC server. Prints 'psoup serving on HOST:PORT' once "
        "ready; on SIGTERM or Ctrl-C it drains in-flight calls and exits 0.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument(
        "--port",
        type=_port,
        default=50051,
        help="port to bind; 0 picks a free one (default: %(default)s)",
    )
    serve.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="psoup-p",
        help="engine strategy (default: %(default)s)",
    )
    serve.add_argument(
        "--auth-tokens",
        metavar="FILE",
        help="require bearer tokens, read from FILE of 'client-id:token' lines",
    )
    serve.add_argument(
        "--app",
        metavar="NAME[=ARG]",
        help="run an application inside the server: an installed one by name (entry "
        "point group psoup.applications, e.g. linear-road=validator) or "
        "package.module:function",
    )
    serve.add_argument(
        "--linear-road",
        nargs="?",
        const="validator",
        choices=("validator", "every-crossing"),
        metavar="CONVENTION",
        help="short for --app linear-road=CONVENTION: declare Linear Road's streams and run "
        "its toll network on 'positions'; toll "
        "alerts once per vehicle, direction and segment as the original validator expects "
        "(validator, the default) or at every crossing as the spec's text says "
        "(every-crossing)",
    )
    where = serve.add_mutually_exclusive_group()
    where.add_argument(
        "--data-dir",
        metavar="DIR",
        type=Path,
        help="keep streams, tuples, queries and handles in DIR and recover them from it on "
        "start (default: $PSOUP_DATA_DIR, else $XDG_DATA_HOME/psoup, else "
        "~/.local/share/psoup); one server at a time per directory",
    )
    where.add_argument(
        "--in-memory",
        action="store_true",
        help="keep nothing: a restart starts empty",
    )
    serve.add_argument(
        "--sync",
        type=_sync_mode,
        default="batch",
        metavar="MODE",
        help="when a change is forced to disk: batch (before it is acknowledged, one fsync "
        "shared by concurrent clients; the default), interval=MS (every MS milliseconds: "
        "power loss may lose the last MS, a process crash nothing) or off (when the OS "
        "likes: safe from a process crash only); docs/DURABILITY.md",
    )
    serve.add_argument(
        "--checkpoint-every",
        type=_positive,
        default=256,
        metavar="MB",
        help="start a checkpoint once this much log was written since the last one; the log "
        "replayed at start is at most this long (default: %(default)s)",
    )
    serve.add_argument("--tls-cert", metavar="FILE", help="PEM certificate chain (needs --tls-key)")
    serve.add_argument("--tls-key", metavar="FILE", help="PEM private key (needs --tls-cert)")
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="allow --auth-tokens without TLS on an address that is not loopback (the "
        "tokens then travel in clear: only on a network you trust)",
    )
    limits = serve.add_argument_group("limits")
    limits.add_argument(
        "--max-message-bytes",
        type=_message_bytes,
        default=64 << 20,
        metavar="N",
        help="largest gRPC message either way, at most 2**31-1 (default: %(default)s)",
    )
    limits.add_argument(
        "--max-batch-rows",
        type=_positive,
        default=1_000_000,
        metavar="N",
        help="most rows in one ingest batch (default: %(default)s)",
    )
    limits.add_argument(
        "--max-query-chars",
        type=_positive,
        default=10_000,
        metavar="N",
        help="longest query text (default: %(default)s)",
    )
    limits.add_argument(
        "--max-queries-per-client",
        type=_positive,
        default=100_000,
        metavar="N",
        help="most registered queries per client (default: %(default)s)",
    )
    limits.add_argument(
        "--max-staged-bytes",
        type=_positive,
        default=8 << 30,
        metavar="N",
        help="bytes all open bulk loads may stage together; a batch past it is refused "
        "(default: %(default)s, 8 GiB)",
    )
    limits.add_argument(
        "--ingest-queue-batches",
        type=_positive,
        default=64,
        metavar="N",
        help="batches waiting for the engine before ingest is refused (default: %(default)s)",
    )
    limits.add_argument(
        "--freeze-heap-every",
        type=_seconds_or_never,
        default=1.0,
        metavar="SECONDS",
        help="collect young garbage and freeze the rest this often, so that the collector "
        "never walks the whole heap of standing queries; 0 = never (default: %(default)s)",
    )


def _add_client(sub) -> None:
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

    p = client(sub, "ingest", "send the rows of a CSV file to a stream", "ingest")
    p.add_argument("name", help="stream name")
    p.add_argument(
        "file", metavar="FILE.csv", help="CSV file whose header row names the attributes"
    )
    p.add_argument(
        "--batch-rows",
        type=_positive,
        default=8192,
        metavar="N",
        help="rows per batch (default: %(default)s)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    p = client(sub, "register", "register a standing query; prints its handle alone", "register")
    p.add_argument("query", help="the query text, e.g. 'SELECT * FROM r BEGIN NOW - 10 END NOW'")
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

    p = client(sub, "stats", "show the server's engine and per-stream counters", "stats")
    p.add_argument(
        "--format", choices=formatting.TEXT_FORMATS, default="text", help="output format"
    )


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
    _add_demo_bench(sub)
    _add_serve(sub)
    _add_client(sub)
    _add_linear_road(sub)
    _add_history(sub)
    return parser


def _add_history(sub) -> None:
    conn = _connection_options()
    history = sub.add_parser(
        "history",
        help="hydrate or export a historical stream with PySpark",
        description="The history pipeline (PySpark): load a toll history into a server's "
        "stream, or archive a stream as Parquet. See docs/HISTORY.md.",
    )
    hsub = history.add_subparsers(dest="history_command", required=True, metavar="ACTION")

    spark = _spark_options()

    def job(name: str, help_: str, description: str) -> argparse.ArgumentParser:
        p = hsub.add_parser(name, help=help_, description=description,
                            parents=[conn, spark], epilog=EPILOG)  # fmt: skip
        p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
        return p

    p = job(
        "hydrate",
        "replace a stream's contents with a validated toll history",
        "Validate a Linear Road toll history (vid,day,xway,tolls) with Spark, write the "
        "rejected rows with their reason to a side file, sum duplicates of (vid, day, xway), "
        "and replace the contents of the server's stream (time attribute: day) with the "
        "result, pushed from the Spark executors in one bulk load. The old contents stay "
        "until the load commits: a failure leaves them, and hydrating twice equals once.",
    )
    p.add_argument(
        "--tolls",
        required=True,
        metavar="FILE|URI",
        help="the history: a CSV file of vid,day,xway,tolls lines (.csv, .dat), or a Parquet "
        "directory written by 'psoup history export'; a local path or any URI Spark reads "
        "(file://, hdfs://, s3a://, ...)",
    )
    p.add_argument(
        "--stream",
        default="toll_history",
        help="the stream to hydrate, created if missing (default: %(default)s)",
    )
    p.add_argument(
        "--rejects",
        type=Path,
        metavar="FILE",
        help="where rejected rows go, as line,reason,text (default: <FILE>.rejects.csv, "
        "written only when a row is rejected or the file exists)",
    )
    p.add_argument(
        "--batch-rows",
        type=_positive,
        default=65_536,
        metavar="N",
        help="rows per message from an executor to the server (default: %(default)s)",
    )

    p = job(
        "export",
        "write a stream's stored tuples as Parquet",
        "Write every stored tuple of a stream to a Parquet directory (replaced if it "
        "exists), read from the server by the Spark executors in parallel parts.",
    )
    p.add_argument("--stream", required=True, help="the stream to export")
    p.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="the Parquet directory to write"
    )
    p.add_argument(
        "--parts",
        type=_positive,
        metavar="N",
        help="parallel reads, one Parquet file each (default: ~4 million rows per part)",
    )
    _add_history_cluster(hsub)


def _add_history_cluster(hsub) -> None:
    p = hsub.add_parser(
        "cluster",
        help="run a Spark standalone cluster on this machine until Ctrl-C",
        description="Start a Spark standalone master and workers on 127.0.0.1 from the "
        "pyspark package (no Spark installation), print the master URL for --master, and "
        "keep them running until interrupted.",
    )
    p.add_argument("--workers", type=_positive, default=2, metavar="N", help="(default 2)")
    p.add_argument("--cores", type=_positive, default=1, metavar="N",
                   help="cores per worker (default 1)")  # fmt: skip
    p.add_argument("--memory", default="1g", help="memory per worker (default 1g)")


def _add_linear_road(sub) -> None:
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


# -------------------------------------------------------------------------------- run


def _error(message: str, status: int = 1) -> int:
    """Print ``error: message`` on stderr; returns ``status``."""
    print(f"error: {message}", file=sys.stderr)
    return status


def _missing_input(**files: Path | None) -> str | None:
    """What is wrong with the input files (option name -> path; None: not given), if any."""
    for option, path in files.items():
        if path is not None and not path.is_file():
            what = "not a regular file" if path.exists() else "no such file"
            return f"--{option} {path}: {what}"
    return None


def _connection_problem(server: str | None, token: str | None = None) -> str | None:
    """What is wrong with a ``--server`` address or a ``--token``, if anything (the client
    commands find it when they connect)."""
    from clients import channel

    try:
        if server is not None:
            channel.target(server)
        channel.metadata(token)
    except ValueError as err:
        return str(err)
    return None


def _tls_problem(cert: str, key: str) -> str | None:
    """Why gRPC could not use the PEM certificate chain ``cert`` with the private key
    ``key``, if it could not (gRPC itself would only fail to bind)."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_verify_locations(cafile=cert)
    except ssl.SSLError:
        return f"--tls-cert {cert}: cannot read it as a PEM certificate"
    except OSError as err:
        return f"--tls-cert {cert}: {err.strerror or err}"
    try:
        ctx.load_cert_chain(cert, key, password=lambda: b"")
    except ssl.SSLError:
        return (
            f"--tls-key {key}: cannot read it as an unencrypted PEM private key of the "
            "--tls-cert certificate"
        )
    except OSError as err:
        return f"--tls-key {key}: {err.strerror or err}"
    return None


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("serve: --tls-cert and --tls-key go together")
    if args.tls_cert and (problem := _tls_problem(args.tls_cert, args.tls_key)):
        return _error(problem)
    from psoup.server import ServerConfig, serve_forever
    from psoup.storage.durable import default_data_dir
    from psoup.storage.log import LogCorruptError

    config = ServerConfig(
        host=args.host,
        port=args.port,
        strategy=args.strategy,
        auth_tokens_file=args.auth_tokens,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        insecure=args.insecure,
        max_message_bytes=args.max_message_bytes,
        max_batch_rows=args.max_batch_rows,
        max_query_chars=args.max_query_chars,
        max_queries_per_client=args.max_queries_per_client,
        ingest_queue_batches=args.ingest_queue_batches,
        max_staged_bytes=args.max_staged_bytes,
        freeze_heap_every=args.freeze_heap_every,
        app=args.app or (f"linear-road={args.linear_road}" if args.linear_road else None),
        data_dir=None if args.in_memory else str(args.data_dir or default_data_dir()),
        sync=args.sync,
        checkpoint_bytes=args.checkpoint_every << 20,
    )
    # Recovery's warnings (a torn last record dropped) as one plain line each.
    warnings.formatwarning = lambda message, *_args, **_kw: f"psoup: warning: {message}\n"
    try:
        return serve_forever(config)
    except (ValueError, RuntimeError, OSError, LogCorruptError) as err:
        # a bad token file or TLS file, a busy port or data directory, a damaged log
        return _error(str(err))


def _linear_road_run(args: argparse.Namespace) -> int:
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
            args.input, args.history, args.out, args.speedup, args.server, convention=convention
        )
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
        from psoup import demo as demo_mod

        demo_mod.run(
            seconds=args.seconds, sensors=args.sensors, seed=args.seed, strategy=args.strategy
        )
        return 0
    if args.command == "bench":
        if args.suite == "linear-road":
            from psoup.bench import linear_road_bench

            if args.xways is not None:
                from psoup.bench import lr_scale_bench

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
        else:
            from psoup.bench import core as suite

        suite.run(args.out, quick=args.quick, seed=args.seed)
        return 0
    if args.command == "linear-road" and args.lr_command == "generate":
        from psoup.linear_road import generate

        return generate.cli_main(args)
    if args.command == "linear-road" and args.lr_command == "check":
        if problem := _missing_input(input=args.input, history=args.history):
            return _error(problem)
        from psoup.linear_road import check

        return check.cli_main(args)
    if args.command == "linear-road":
        return _linear_road_run(args)
    if args.command == "serve":
        return _serve(parser, args)
    if args.command == "history":
        if args.history_command != "cluster" and (
            problem := _connection_problem(args.server, args.token)
        ):
            return _error(problem, 2)
        from psoup.history import cli as history_cli

        return history_cli.run(args)
    from psoup import cli_client

    return cli_client.run(args.client_command, args)


if __name__ == "__main__":
    sys.exit(main())
