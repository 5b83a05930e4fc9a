"""Arrow Flight ingest: record batches into a stream by DoPut, beside the gRPC service.

Why a second door for ingest: on the 2-core host of issue #19, ``psoup bench grpc``
(stop 57) measured per 8,192-row batch the engine at 342 µs in-process, and the server
through its Ingest call at 807 µs of its CPU and 240 of the client's: 0.41 of in-process.
gRPC's Python server taking the batch to no engine at all costs 188 µs of the server's
CPU and 183 of the client's (psoup/bench/transport_front.py); the rest is the transport's
threads and the engine sharing one interpreter lock and handing the batch and the lock to
each other. Arrow Flight's server is C++: it reads each record batch into Arrow buffers
with the interpreter lock free and hands the handler one batch per ``read_chunk``, which
waits with the lock released; the columns reach the engine as numpy views of those
buffers, copied nowhere. The same server over Flight: 552 µs of its CPU and 129 of the
client's a batch, 0.77 of in-process (docs/BENCHMARKS.md, the ``grpc-stop57`` block).

A client calls DoPut with a descriptor of one path element, the stream's name, and a
schema naming the stream's attributes (int64, float64 or string columns; no NULLs).
Each record batch is one batch. The server answers each, once it is applied and durable,
with app metadata: the batch's ``IngestAck`` (psoup.proto) serialized, whose ``batch_id``
is the batch's place in the call (0, 1, ...). The first batch refused ends the call with
everything before it applied and nothing after it, as Ingest does; the error names the
batch and, where the engine tells, the column and the row. Batches go the same way as an
Ingest call's (``PSoupServicer.ingest_batch``): the same turns among clients, access
checks, durability (``--sync batch``: acked once forced to disk) and metrics (the
ingest counters; each put counted as a request of method ``DoPut``, and a refused one
counted and logged as the gRPC interceptor does a refused request). With ``--sync
batch`` each batch waits for its own force before the next is read, where an Ingest
call pipelines its batches and shares the forces (on this host's disk the forces are
shorter than the engine's work: a durable put still took 8,192-row batches at 12.5
million tuples/s against Ingest's 7-10.6).

Errors, as Flight's client raises them (gRPC code): no or a bad token:
FlightUnauthenticatedError (UNAUTHENTICATED); a stream the client may not write:
FlightUnauthorizedError (PERMISSION_DENIED); an unknown stream: ArrowKeyError
(NOT_FOUND); a descriptor, schema or column that does not fit: ArrowInvalid
(INVALID_ARGUMENT); the ingest queue full, too many rows, storage full, the server
stopping: FlightUnavailableError (UNAVAILABLE); anything else: FlightInternalError
(INTERNAL). Flight has no RESOURCE_EXHAUSTED, hence UNAVAILABLE (retry later). For
ArrowInvalid and ArrowKeyError, pyarrow appends the server's Python traceback to the
message after "Detail:".

Costs per batch: Arrow IPC decoding in C++ with no copy, one ``to_numpy`` per number
column (a view), one ``to_pylist`` per string column (O(rows)), and the engine's work.
"""

from __future__ import annotations

import itertools
import threading
import time

import grpc
import pyarrow as pa
import pyarrow.flight as fl

from psoup.api import psoup_pb2 as pb
from psoup.server.auth import Authenticator, AuthError
from psoup.server.observe import Observer
from psoup.server.servicer import Abort, PSoupServicer, status_of

#: The method name a put is counted under in the request metrics.
METHOD = "DoPut"

#: The Flight exception a gRPC status code of the servicer's becomes.
_RAISED = {
    grpc.StatusCode.UNAUTHENTICATED: fl.FlightUnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: fl.FlightUnauthorizedError,
    grpc.StatusCode.NOT_FOUND: pa.ArrowKeyError,
    grpc.StatusCode.INVALID_ARGUMENT: pa.ArrowInvalid,
    grpc.StatusCode.ALREADY_EXISTS: pa.ArrowInvalid,
    grpc.StatusCode.FAILED_PRECONDITION: pa.ArrowInvalid,
    grpc.StatusCode.OUT_OF_RANGE: pa.ArrowInvalid,
    grpc.StatusCode.RESOURCE_EXHAUSTED: fl.FlightUnavailableError,
    grpc.StatusCode.UNAVAILABLE: fl.FlightUnavailableError,
    grpc.StatusCode.UNIMPLEMENTED: pa.ArrowNotImplementedError,
    grpc.StatusCode.CANCELLED: fl.FlightCancelledError,
    grpc.StatusCode.DEADLINE_EXCEEDED: fl.FlightTimedOutError,
}

#: The gRPC code of each Flight error pyarrow itself raises (reading or writing a put).
_CODE_OF = {
    fl.FlightCancelledError: grpc.StatusCode.CANCELLED,
    fl.FlightTimedOutError: grpc.StatusCode.DEADLINE_EXCEEDED,
    fl.FlightUnavailableError: grpc.StatusCode.UNAVAILABLE,
    fl.FlightUnauthenticatedError: grpc.StatusCode.UNAUTHENTICATED,
    fl.FlightUnauthorizedError: grpc.StatusCode.PERMISSION_DENIED,
}


def stream_of(descriptor: fl.FlightDescriptor) -> str:
    """The stream a DoPut writes: its descriptor's one path element. Abort otherwise."""
    path = descriptor.path if descriptor.descriptor_type == fl.DescriptorType.PATH else None
    if not path or len(path) != 1:
        raise Abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            "descriptor: give the stream's name as its one path element "
            "(FlightDescriptor.for_path(stream))",
        )
    try:
        return path[0].decode("utf-8")
    except UnicodeDecodeError:
        raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "descriptor: not UTF-8") from None


def check_schema(schema: pa.Schema) -> None:
    """Abort naming the field when the schema repeats an attribute."""
    seen = set()
    for i, name in enumerate(schema.names):
        if name in seen:
            raise Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"schema: fields[{i}] {name!r}: attribute given twice",
            )
        seen.add(name)


def batch_columns(batch: pa.RecordBatch, k: int, max_rows: int) -> dict:
    """attribute -> values of record batch ``k``: numpy views of number columns, lists
    of str for string ones, other types as numpy arrays for the engine to refuse by
    name. Abort naming the batch and column for NULLs, the batch for too many rows.
    O(columns), plus O(rows) per string column."""
    if batch.num_rows > max_rows:
        raise Abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"batch {k}: {batch.num_rows} rows exceed max_batch_rows={max_rows}",
        )
    columns = {}
    for i, (name, col) in enumerate(zip(batch.schema.names, batch.columns, strict=True)):
        if col.null_count:
            raise Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"batch {k}: columns[{i}] {name!r}: NULLs cannot be stored",
            )
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            columns[name] = col.to_pylist()
        else:
            columns[name] = col.to_numpy(zero_copy_only=False)
    return columns


class _Caller(fl.ServerMiddleware):
    """Who is calling: the client id its token names (anonymous without tokens)."""

    def __init__(self, client: str):
        self.client = client


class _Authenticate(fl.ServerMiddlewareFactory):
    """Every call's ``authorization: Bearer <token>`` header checked as the gRPC
    service checks it; a call without a valid one is refused before it starts, and
    counted and logged as the gRPC interceptor does a refused request."""

    def __init__(self, auth: Authenticator, observer: Observer):
        self.auth = auth
        self.observer = observer

    def start_call(self, info, headers) -> _Caller:
        metadata = [(key.lower(), value) for key, values in headers.items() for value in values]
        try:
            return _Caller(self.auth.client(metadata))
        except AuthError as exc:
            start, who = time.perf_counter(), self.observer.who(metadata)
            self.observer.counted(who, METHOD)
            self.observer.ended(who, METHOD, grpc.StatusCode.UNAUTHENTICATED, str(exc), start)
            raise fl.FlightUnauthenticatedError(str(exc)) from None


def put_status(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status a put that raised ``exc`` ends with: the servicer's for an Abort or an
    engine error; a Flight error's own (the client went away: CANCELLED);
    INVALID_ARGUMENT for bytes that do not read as Arrow IPC; INTERNAL for anything
    else."""
    if (status := status_of(exc)) is not None:
        return status
    for kind, code in _CODE_OF.items():
        if isinstance(exc, kind):
            return code, str(exc)
    if isinstance(exc, pa.ArrowException) and not isinstance(exc, fl.FlightError):
        return grpc.StatusCode.INVALID_ARGUMENT, f"the record batches do not read: {exc}"
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


class FlightIngest(fl.FlightServerBase):
    """The Flight server: DoPut only, into the engine of ``servicer``. Serving once
    made (pyarrow starts it in the constructor); ``stop()`` ends it. Each put is counted
    in the server's request metrics as method ``DoPut``, and a refused one as the gRPC
    interceptor counts and logs a refused request (psoup/server/observe.py)."""

    def __init__(
        self, location: str, servicer: PSoupServicer, tls: tuple[bytes, bytes] | None = None
    ):
        super().__init__(
            location,
            middleware={"auth": _Authenticate(servicer.auth, servicer.observer)},
            tls_certificates=[fl.CertKeyPair(*tls)] if tls else None,
        )
        self.servicer = servicer
        self._stopping = threading.Event()  # a batch waiting for a turn gives up

    def do_put(self, context, descriptor, reader, writer) -> None:
        start = time.perf_counter()
        client = context.get_middleware("auth").client
        observer = self.servicer.observer
        observer.counted(client, METHOD)
        try:
            self._put(client, context, descriptor, reader, writer)
        except Exception as exc:
            code, message = put_status(exc)
            observer.ended(client, METHOD, code, message, start)
            raise _RAISED.get(code, fl.FlightInternalError)(message) from None

    def _put(self, client: str, context, descriptor, reader, writer) -> None:
        share = client if self.servicer.auth.enabled else context.peer()
        stream = stream_of(descriptor)
        check_schema(reader.schema)
        limit = self.servicer.config.max_batch_rows
        for k in itertools.count():
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                return
            req = pb.IngestRequest(stream=stream, batch_id=k)
            columns = batch_columns(chunk.data, k, limit)
            ack = self.servicer.ingest_batch(req, columns, client, share, self._stopping)
            if ack is None:
                raise Abort(grpc.StatusCode.UNAVAILABLE, f"batch {k}: the server is stopping")
            writer.write(pa.py_buffer(ack.SerializeToString()))

    def stop(self, grace: float | None = 5.0) -> bool:
        """Refuse batches that wait for a turn and new calls, let the puts under way end
        for up to ``grace`` seconds (None: as long as they take), and stop serving;
        whether every put had ended. A put whose client neither sends nor closes keeps
        its thread until the client goes (Flight's shutdown waits for every call and
        cannot cut one short)."""
        self._stopping.set()
        ending = threading.Thread(target=self.shutdown, name="psoup-flight-stop", daemon=True)
        ending.start()
        ending.join(grace)
        return not ending.is_alive()
