"""The export job: a stream's stored tuples -> a Parquet directory, read by the executors.

``spark.range(n, numPartitions=n)`` gives one task per part number; each task reads part
k of n of the stream (``ReadStream``: contiguous ranges in time order, together every
stored tuple once) straight from the server as Arrow batches, and Spark writes them as
Parquet, one file per part, columns in the stream's attribute order. The directory can be
hydrated again (``psoup history hydrate --tolls DIR``).

The parts are read by separate calls, so a stream that is being ingested while it is
exported may give a mix of before and after; a history stream changes only by commits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from psoup.history import executors, spark
from psoup.history.progress import Phase

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROWS_PER_PART = 4_000_000  # about 128 MB of int64 columns per task and per file


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote."""

    stream: str
    out_dir: Path
    rows: int
    parts: int
    seconds: float

    def text(self) -> str:
        rate = self.rows / max(self.seconds, 1e-9)
        return (
            f"exported {self.rows:,} rows of {self.stream} to {self.out_dir} "
            f"({self.parts} parts) in {self.seconds:.2f} s, {rate:,.0f} rows/s"
        )


def _schema(schema: dict[str, str]):
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    spark_type = {"int": LongType(), "float": DoubleType(), "str": StringType()}
    return StructType([StructField(a, spark_type[t]) for a, t in schema.items()])


def export(
    stream: str,
    out_dir: str | Path,
    server: str = "localhost:50051",
    *,
    token: str | None = None,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    session: SparkSession | None = None,
    parts: int | None = None,
    timeout: float | None = 30.0,
    root_certificates: bytes | None = None,
    progress: bool = True,
) -> ExportSummary:
    """Write ``stream``'s stored tuples as Parquet to ``out_dir`` (replaced if it exists).

    ``parts`` tasks read the stream in parallel (default: enough for ~4 M rows each, at
    least the session's default parallelism). Runs on ``session`` if given, else on the
    active session, else on one started (and stopped) here on ``master`` with the Spark
    settings ``conf``. Raises
    ``clients.NotFound`` for an unknown stream, other ``PSoupRpcError``s and Spark's
    errors. One Spark job; the rows go server -> executors -> files, never through the
    driver.
    """
    out = Path(out_dir).absolute()
    conn = executors.Connection(server, token, root_certificates, timeout)
    with conn.client() as client:
        info = client.describe_stream(stream)  # before Spark starts: fail fast
    with spark.use(session, master, conf) as active:
        start = time.perf_counter()
        sc = active.sparkContext
        n = parts or max(sc.defaultParallelism, math.ceil(info.tuples_stored / ROWS_PER_PART))
        read = executors.reader(conn, stream, n, dict(info.schema))
        ids = active.range(n, numPartitions=n)
        with Phase(sc, f"{stream}: export", progress):
            table = ids.mapInArrow(read, _schema(dict(info.schema)))
            table.write.mode("overwrite").parquet(out.as_uri())
        rows = active.read.parquet(out.as_uri()).count()  # from the files' footers
        return ExportSummary(stream, out, rows, n, time.perf_counter() - start)
