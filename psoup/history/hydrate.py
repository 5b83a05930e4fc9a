"""The hydration job: a toll history file -> the server's ``toll_history`` stream, replaced.

::

    input (CSV text or Parquet) ──validate.read──► values + reject reason per row
        │ validate.count: rows read, rejected, lines per partition      (Spark job 1)
        │ rejects: line,reason,text streamed to the driver, to a file   (Spark job 2)
        ▼ good rows, GROUP BY vid, day, xway: SUM(tolls)
    BeginLoad (driver) ─► executors: LoadBatches, one call per task     (Spark job 3)
                          (part = the partition id: a retried task replaces its rows)
                       ─► CommitLoad (driver): the stream's contents are replaced at once

The stream's old contents stay until the commit, which swaps them for the load's rows and
re-applies the registered queries in one engine step; any failure before it aborts the
load. So hydrating a file twice leaves the same contents as once, and a failure part-way
leaves the previous contents (and no half-staged load) behind. Spark's task retries are
harmless: each task stages its partition as a named part of the load, staged only when
its call completes, and a retry's part replaces the earlier attempt's.
"""

from __future__ import annotations

import contextlib
import csv
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from clients import PSoupClient, PSoupRpcError
from psoup.history import HistoryError, executors, spark, validate
from psoup.history.progress import Phase
from psoup.history.source import Source
from psoup.history.stream import ATTRS, DEFAULT_STREAM, ensure

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_BATCH_ROWS = 65_536  # 2 MB of int64 columns per LoadBatches message
REJECTS_HEADER = ("line", "reason", "text")


@dataclass(frozen=True)
class HydrateSummary:
    """What a hydration did. ``duplicates_merged`` counts good rows folded into another
    row of the same (vid, day, xway); ``loaded`` is the stream's row count after it."""

    stream: str
    source: str
    rows_read: int
    rejected: int
    duplicates_merged: int
    loaded: int
    seconds: float
    rejects_path: Path | None  # None: nothing rejected, no file written
    phases: dict[str, float] = field(default_factory=dict)  # seconds of each step
    retried_tasks: int = 0  # push tasks whose successful attempt was a retry

    @property
    def rows_per_second(self) -> float:
        """Input rows processed per second of the whole job."""
        return self.rows_read / max(self.seconds, 1e-9)

    def text(self) -> str:
        """A few lines for the user."""
        where = f"  (see {self.rejects_path})" if self.rejects_path else ""
        timing = f"  {self.seconds:.2f} s, {self.rows_per_second:,.0f} rows/s"
        if self.phases:
            timing += " (" + ", ".join(f"{k} {v:.2f} s" for k, v in self.phases.items()) + ")"
        return "\n".join(
            [
                f"hydrated {self.stream} from {self.source}",
                f"  rows read          {self.rows_read:>14,}",
                f"  rejected           {self.rejected:>14,}{where}",
                f"  duplicates merged  {self.duplicates_merged:>14,}",
                f"  loaded             {self.loaded:>14,}",
                *(
                    [f"  tasks retried      {self.retried_tasks:>14,}"]
                    if self.retried_tasks
                    else []
                ),
                timing,
            ]
        )


def default_rejects_path(source: Source) -> Path:
    """``<input>.rejects.csv`` next to a local input (file or directory); in the current
    directory for a remote one."""
    where = source.local.parent if source.local else Path.cwd()
    return where / (source.name + ".rejects.csv")


def write_rejects(rows: DataFrame, counts: validate.Counts, path: Path) -> Path | None:
    """Write ``line,reason,text`` of every rejected row to ``path``; returns it, or None
    when nothing was rejected and no file is there (none is made for a clean input; an
    old one is overwritten with the header alone, so it never describes an earlier run).

    The rows stream to the driver one partition at a time (``toLocalIterator``), so memory
    stays bounded whatever their number; the file appears whole (written aside, renamed).
    """
    if not counts.rejected and not path.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(REJECTS_HEADER)
            if counts.rejected:
                for r in validate.rejects(rows, counts).toLocalIterator(prefetchPartitions=True):
                    out.writerow(("" if r["line"] is None else r["line"], r["reason"], r["text"]))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _push(
    session: SparkSession,
    good: DataFrame,
    push: executors.ArrowFn,
    batch_rows: int,
) -> tuple[int, int]:
    """Merge duplicates and stage every row from the executors; returns (rows staged,
    tasks whose successful attempt was a retry)."""
    from pyspark.sql import functions as F

    merged = good.groupBy("vid", "day", "xway").agg(F.sum("tolls").alias("tolls"))
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = session.conf.get(key, None)
    session.conf.set(key, str(batch_rows))
    try:
        tasks = merged.select(*ATTRS).mapInArrow(push, executors.PUSH_SCHEMA).collect()
    finally:
        if before is None:
            session.conf.unset(key)
        else:
            session.conf.set(key, before)
    return sum(t["rows"] for t in tasks), sum(1 for t in tasks if t["attempt"] > 0)


def hydrate(
    tolls: str | Path,
    server: str = "localhost:50051",
    stream: str = DEFAULT_STREAM,
    *,
    token: str | None = None,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    session: SparkSession | None = None,
    rejects: str | Path | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    timeout: float | None = 30.0,
    root_certificates: bytes | None = None,
    progress: bool = True,
    _fault: executors.Fault | None = None,
) -> HydrateSummary:
    """Replace the contents of the server's tolls stream with the validated rows of ``tolls``.

    ``tolls`` is a CSV file of ``vid,day,xway,tolls`` lines or a Parquet export: a local
    path or any URI Spark reads (``file://``, ``hdfs://``, ``s3a://``, ...). The stream
    (``stream``, default ``toll_history``) is created if missing. Rejected rows go to
    ``rejects`` (default ``<tolls>.rejects.csv``, in the current directory for a remote
    input; not made when there are none). Runs on ``session`` if given, else on the active
    session, else on one started (and stopped) here on ``master`` (default local[*,4])
    with the Spark settings ``conf``.

    Raises HistoryError (bad input, no valid row, schema mismatch, Spark failure),
    ``clients.PSoupRpcError`` (the server refused or is unreachable) or the executors'
    error; on any failure after the load began it is aborted, so the stream keeps its
    old contents. Three Spark jobs over the input, one shuffle; the rows reach the server
    from the executors, never through the driver, each partition as a part of the load,
    so a retried task replaces its earlier attempt's rows instead of adding to them.
    """
    if batch_rows < 1:
        raise ValueError("batch_rows must be positive")
    source = Source.parse(tolls)  # before the server and Spark: fail fast
    rejects_path = Path(rejects) if rejects else default_rejects_path(source)
    conn = executors.Connection(server, token, root_certificates, timeout)
    with conn.client() as client:
        ensure(client, stream)  # before Spark starts: a bad server fails fast
        with spark.use(session, master, conf) as active:
            return _run(active, client, conn, stream, source, rejects_path, batch_rows,
                        progress, _fault)  # fmt: skip


def _run(
    session: SparkSession,
    client: PSoupClient,
    conn: executors.Connection,
    name: str,
    path: Source,
    rejects_path: Path,
    batch_rows: int,
    progress: bool,
    fault: executors.Fault | None,
) -> HydrateSummary:
    sc = session.sparkContext
    start = time.perf_counter()
    phases: dict[str, float] = {}

    def lap(step: str) -> None:
        phases[step] = time.perf_counter() - start - sum(phases.values())

    rows = validate.read(session, path)
    with Phase(sc, f"{name}: validate", progress):
        counts = validate.count(rows)
    lap("validate")
    with Phase(sc, f"{name}: rejects", progress and counts.rejected > 0):
        written = write_rejects(rows, counts, rejects_path)
    lap("rejects")
    if counts.valid == 0:
        what = "has no rows" if counts.read == 0 else "has no valid row"
        see = f", see {written}" if written else ""
        raise HistoryError(f"{path} {what} ({counts.rejected:,} rejected{see}); {name} unchanged")
    load_id = client.begin_load(name)
    try:
        push = executors.pusher(conn, load_id, name, fault)
        with Phase(sc, f"{name}: load", progress):
            staged, retried = _push(session, validate.good(rows), push, batch_rows)
        lap("load")
        loaded = client.commit_load(load_id).count
        lap("commit")
    except BaseException:
        with contextlib.suppress(PSoupRpcError):  # committed or gone: nothing to undo
            client.abort_load(load_id)
        raise
    return HydrateSummary(
        stream=name,
        source=str(path),
        rows_read=counts.read,
        rejected=counts.rejected,
        duplicates_merged=counts.valid - staged,
        loaded=loaded,
        seconds=time.perf_counter() - start,
        rejects_path=written,
        phases=phases,
        retried_tasks=retried,
    )
