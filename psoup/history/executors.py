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


def _first_attempt() -> None:
    """Refuse to run a retried task: its first attempt may have staged rows already, and
    staging them again would count them twice. The job then fails and the driver aborts
    the load, leaving the stream's old contents; running the hydration again is safe."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is not None and ctx.attemptNumber() > 0:
        raise RuntimeError(
            f"task for partition {ctx.partitionId()} was retried (attempt "
            f"{ctx.attemptNumber()}); a retry could stage rows twice, so the load is given up"
        )


def pusher(
    conn: Connection, load_id: str, stream: str, fail_after_rows: int | None = None
) -> ArrowFn:
    """A mapInArrow function (output schema ``rows long``) that stages its partition's
    batches into load ``load_id`` over one LoadBatches call and yields the rows staged.

    ``fail_after_rows`` is a test hook: the task stages about that many rows (whole
    batches), then raises, as a task dying part-way would. O(rows) bytes copied.
    """

    def push(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        _first_attempt()
        sent = 0

        def columns() -> Iterator[dict[str, np.ndarray]]:
            nonlocal sent
            for batch in batches:
                if batch.num_rows:
                    yield _columns(batch)
                    sent += batch.num_rows
                if fail_after_rows is not None and sent >= fail_after_rows:
                    return

        with conn.client() as client:
            rows = client.load_batches(load_id, stream, columns())
        if fail_after_rows is not None:
            raise RuntimeError(f"injected failure after staging {rows} rows (test hook)")
        yield pa.RecordBatch.from_pydict({"rows": pa.array([rows], pa.int64())})

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
