"""Client-side batch preparation: validate rows or columns, cut them into Ingest requests.

Rows and columns are checked with the engine's own validator (``psoup.values``) before
anything is sent, so a bad value is refused with the same message as in the embedded
engine (row and column named) and never reaches the wire. That matters because the
codec packs columns with numpy, which would silently truncate a float sent to an int
column. Encoding is ``psoup.api.codec``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import grpc
import numpy as np

from clients.errors import InvalidArgument
from clients.messages import IngestAck, StreamInfo
from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.errors import BatchError
from psoup.values import InsertResult, Schema, columns_to_arrays, rows_to_columns

Columns = Mapping[str, Sequence | np.ndarray]


def schema_of(info: StreamInfo) -> Schema:
    """The engine ``Schema`` of a described stream."""
    return Schema(tuple(info.schema), tuple(info.schema.values()), info.time)


def _refused(stream: str, err: BatchError, where: str = "") -> InvalidArgument:
    return InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"stream {stream!r}: {where}{err}")


def rows_to_arrays(
    stream: str, schema: Schema, rows: Iterable[Sequence | Mapping]
) -> dict[str, np.ndarray]:
    """Typed columns of tuples (schema order) or dicts; InvalidArgument names row and column.

    O(rows x attributes) Python work: this is the cost of accepting rows rather than columns.
    """
    try:
        arrays = rows_to_columns(schema, rows)
    except BatchError as err:
        raise _refused(stream, err) from None
    return dict(zip(schema.names, arrays, strict=True))


def columns_to_typed(
    stream: str, schema: Schema, columns: Columns, where: str = ""
) -> dict[str, np.ndarray]:
    """Typed columns of an attribute -> values mapping; InvalidArgument names the problem.

    numpy arrays of a fitting dtype pass in O(1) Python work; lists are checked per value.
    ``where`` prefixes the message (e.g. the batch id).
    """
    try:
        arrays = columns_to_arrays(schema, columns)
    except BatchError as err:
        raise _refused(stream, err, where) from None
    return dict(zip(schema.names, arrays, strict=True))


def split(columns: Mapping[str, np.ndarray], batch_rows: int) -> Iterator[dict[str, np.ndarray]]:
    """Slices of at most ``batch_rows`` rows (views, no copies); none for zero rows."""
    n = len(next(iter(columns.values()))) if columns else 0
    for a in range(0, n, batch_rows):
        yield {name: values[a : a + batch_rows] for name, values in columns.items()}


def request(
    stream: str, schema: Schema, columns: Mapping[str, np.ndarray], batch_id: int
) -> pb.IngestRequest:
    """The IngestRequest of one validated batch. O(rows) bytes copied, per string O(1)."""
    types = dict(zip(schema.names, schema.types, strict=True))
    return pb.IngestRequest(
        stream=stream, columns=codec.encode_batch(types, columns), batch_id=batch_id
    )


def summarize(acks: Iterable[IngestAck]) -> InsertResult:
    """One ``InsertResult`` for the acks of one insert (ids span the non-empty batches).

    An insert of no rows gives ``InsertResult(0, -1, 0, 0)``.
    """
    first, last, count, matches = 0, -1, 0, 0
    for ack in acks:
        if ack.rows:
            if not count:
                first = ack.first_tuple_id
            last = ack.last_tuple_id
        count += ack.rows
        matches += ack.matches
    return InsertResult(first, last, count, matches)
