"""What the Spark tasks of the history jobs run: push rows into a load, read a stream part.

Both are ``mapInArrow`` functions built on the driver and pickled into the tasks. Each
task opens its own ``PSoupClient`` to the server, so the rows travel executor -> server
and never through the driver. Arrow record batches become numpy columns with no Python
work per row (the int64 columns are wrapped without a copy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from clients import PSoupClient

ArrowFn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

# The Arrow type of each engine type, for exported columns.
ARROW_TYPES = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}


@dataclass(frozen=True)
class Connection:
    """How a task reaches the server (the driver's own settings, shipped to the tasks)."""

    target: str
    token: str | None = None
    root_certificates: bytes | None = None
    timeout: float | None = 30.0

    def client(self) -> PSoupClient:
        return PSoupClient(
            self.target,
            token=self.token,
            timeout=self.timeout,
            root_certificates=self.root_certificates,
        )


def _columns(batch: pa.RecordBatch) -> dict[str, np.ndarray]:
    return {
        name: col.to_numpy(zero_copy_only=False)
        for name, col in zip(batch.schema.names, batch.columns, strict=True)
    }


@dataclass(frozen=True)
class Fault:
    """A test hook: the push task of ``partition`` (every partition when None) raises
    after sending about ``after_rows`` rows (whole batches), as a task whose executor dies
    would; only in its first attempt when ``first_attempt_only``. ``mid_call`` raises
    inside the LoadBatches call (the call is cancelled, so the server stages none of it),
    else after the call completed (its rows staged, to be replaced by the retry)."""

    after_rows: int = 0
    partition: int | None = None
    first_attempt_only: bool = False
    mid_call: bool = False

    def armed(self, partition: int, attempt: int) -> bool:
        return (self.partition is None or self.partition == partition) and (
            attempt == 0 or not self.first_attempt_only
        )


#: The output schema of ``pusher``'s tasks: one row per task.
PUSH_SCHEMA = "rows long, replaced boolean, attempt int"


def pusher(conn: Connection, load_id: str, stream: str, fault: Fault | None = None) -> ArrowFn:
    """A mapInArrow function (output ``PUSH_SCHEMA``) that stages its partition's batches
    into load ``load_id`` over one LoadBatches call, as the load's part named by the
    partition id, and yields the rows staged, whether they replaced an earlier attempt's,
    and the attempt number.

    Idempotent: Spark's task retries (a lost executor, a failed fetch) stage the same
    partition again under the same part, which replaces the earlier attempt's rows, and a
    part of an attempt that died during its call was never staged. The partition's rows
    are the same set in every attempt (the same shuffle output). O(rows) bytes copied.
    """

    def push(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx else (0, 0)
        armed = fault is not None and fault.armed(partition, attempt)
        sent = 0

        def columns() -> Iterator[dict[str, np.ndarray]]:
            nonlocal sent
            for batch in batches:
                if batch.num_rows:
                    yield _columns(batch)
                    sent += batch.num_rows
                if armed and sent >= fault.after_rows:
                    if fault.mid_call:
                        raise RuntimeError(f"injected failure in partition {partition}")
                    return

        with conn.client() as client:
            staged = client.load_batches(load_id, stream, columns(), part=str(partition))
        if armed:
            raise RuntimeError(
                f"injected failure after staging {staged.rows} rows of partition {partition}"
            )
        yield pa.RecordBatch.from_pydict(
            {
                "rows": pa.array([staged.rows], pa.int64()),
                "replaced": pa.array([staged.replaced], pa.bool_()),
                "attempt": pa.array([attempt], pa.int32()),
            }
        )

    return push


def reader(conn: Connection, stream: str, parts: int, schema: dict[str, str]) -> ArrowFn:
    """A mapInArrow function over part numbers (one ``id`` column, as ``spark.range``
    gives) that yields the rows of those parts of ``stream`` (attributes ``schema``) as
    record batches, one per page the server sends. O(rows) bytes copied."""
    names = list(schema)
    types = [ARROW_TYPES[t] for t in schema.values()]

    def read(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with conn.client() as client:
            for batch in ids:
                for part in batch.column(0).to_pylist():
                    for page in client.read_stream(stream, part=part, parts=parts):
                        arrays = [
                            pa.array(page[n], type=t) for n, t in zip(names, types, strict=True)
                        ]
                        yield pa.RecordBatch.from_arrays(arrays, names=names)

    return read
