"""``psoup history hydrate|export|cluster``: the parsers of the history pipeline's commands
(run by ``psoup.history.cli``, which loads PySpark only then)."""

from __future__ import annotations

import argparse
from pathlib import Path

from psoup.cli.args import _positive
from psoup.cli.options import EPILOG, _connection_options, _spark_options


def add_parser(sub) -> None:
    """Add ``history`` and its actions to the subcommands ``sub``."""
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
    _add_cluster(hsub)


def _add_cluster(hsub) -> None:
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
