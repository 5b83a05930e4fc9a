"""Ingest over Arrow Flight: record batches to a server started with ``--flight-port``.

``FlightIngester(target)`` opens a Flight client (``grpc+tcp://`` or, with
``root_certificates``, ``grpc+tls://``) with the bearer token of the gRPC client; its
``put`` sends record batches into a stream over one DoPut call and yields their acks,
and ``insert`` sends a table or columns in batches of ``batch_rows`` and sums the acks
into an ``InsertResult``, as ``PSoupClient.insert_columns`` does over Ingest. The server
side is psoup/server/flight.py; the batches are written as they come (gRPC's flow
control bounds what is in flight) and the acks read as the server sends them.

Errors raise the ``clients.errors`` class of the status the server gave (NotFound for an
unknown stream, InvalidArgument for a column that does not fit, ...), its message
without pyarrow's server-side traceback.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence

import grpc
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl

from clients.batching import summarize
from clients.errors import ERRORS, PSoupRpcError
from clients.messages import IngestAck, ingest_ack
from psoup.api import psoup_pb2 as pb
from psoup.values import InsertResult

#: The status code each of Flight's client exceptions stands for.
_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (fl.FlightUnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (fl.FlightUnauthorizedError, grpc.StatusCode.PERMISSION_DENIED),
    (fl.FlightUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (fl.FlightTimedOutError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (fl.FlightCancelledError, grpc.StatusCode.CANCELLED),
    (fl.FlightInternalError, grpc.StatusCode.INTERNAL),
    (pa.ArrowKeyError, grpc.StatusCode.NOT_FOUND),
    (pa.ArrowInvalid, grpc.StatusCode.INVALID_ARGUMENT),
    (pa.ArrowNotImplementedError, grpc.StatusCode.UNIMPLEMENTED),
)


def error_from_flight(exc: BaseException) -> PSoupRpcError:
    """The ``clients.errors`` exception for a Flight call's failure, its message cut
    before the server's traceback ("... Detail: ...")."""
    code = next((c for cls, c in _CODES if isinstance(exc, cls)), grpc.StatusCode.UNKNOWN)
    message = str(exc).split(". Detail:", 1)[0].strip()
    return ERRORS.get(code, PSoupRpcError)(code, message)


class FlightIngester:
    """A Flight client of one server, for ingest. Use as a context manager or ``close()``.
    ValueError for a ``target`` that is not HOST:PORT."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        root_certificates: bytes | None = None,
        batch_rows: int = 8192,
    ):
        scheme = "grpc+tls" if root_certificates else "grpc+tcp"
        host, _, port = target.rpartition(":")
        if not host or not port.isdecimal():
            raise ValueError(f"target {target!r}: expected HOST:PORT")
        try:
            self._client = fl.FlightClient(f"{scheme}://{target}", tls_root_certs=root_certificates)
        except pa.ArrowException as exc:
            raise ValueError(f"target {target!r}: {exc}") from None
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        self._options = fl.FlightCallOptions(headers=headers)
        self.batch_rows = batch_rows

    def put(self, stream: str, batches: Iterable[pa.RecordBatch]) -> Iterator[IngestAck]:
        """Send ``batches`` (all of one schema) into ``stream`` over one DoPut call and
        yield each one's ack as the server sends it. Lazy: nothing is sent until the
        result is iterated; ``batches`` is consumed on a thread of its own. The first
        batch the server refuses ends the call with the error (the batches before it
        stay applied). An error raised by ``batches`` ends the put after the acks of the
        batches sent before it, and is raised then."""
        it = iter(batches)
        first = next(it, None)
        if first is None:
            return
        try:
            writer, reader = self._client.do_put(
                fl.FlightDescriptor.for_path(stream), first.schema, options=self._options
            )
        except (fl.FlightError, pa.ArrowException) as exc:
            raise error_from_flight(exc) from None
        failure: list[BaseException] = []
        stop = threading.Event()  # the caller stopped reading the acks: send no more

        def send() -> None:
            try:
                for batch in itertools.chain((first,), it):
                    if stop.is_set():
                        return
                    writer.write_batch(batch)
            except (fl.FlightError, pa.ArrowException) as exc:
                failure.append(exc)  # the server's error comes with the acks' read too
            except BaseException as exc:  # the batches' source failed: end the put cleanly
                failure.append(exc)
            finally:
                # The server acks what it has and ends the call; without it, both sides
                # would wait for each other.
                with contextlib.suppress(fl.FlightError, pa.ArrowException):
                    writer.done_writing()

        sender = threading.Thread(target=send, name="psoup-flight-put", daemon=True)
        sender.start()
        closed = False
        try:
            while (buf := reader.read()) is not None:  # None: the server ended the call
                yield ingest_ack(pb.IngestAck.FromString(buf.to_pybytes()))
            sender.join()
            closed = True
            writer.close()  # raises the call's status if it failed
        except (fl.FlightError, pa.ArrowException) as exc:
            raise error_from_flight(exc) from None
        finally:
            stop.set()
            sender.join()
            if not closed:
                with contextlib.suppress(fl.FlightError, pa.ArrowException):
                    writer.close()  # the error, if any, is raised already
        if failure and not isinstance(failure[0], fl.FlightError | pa.ArrowException):
            raise failure[0]

    def insert(
        self, stream: str, data: pa.Table | Mapping[str, Sequence | np.ndarray]
    ) -> InsertResult:
        """Send a table (or attribute -> values) into ``stream`` in batches of
        ``batch_rows``; the tuple id range and matches of the whole insert."""
        table = data if isinstance(data, pa.Table) else pa.table(dict(data))
        return summarize(self.put(stream, table.to_batches(max_chunksize=self.batch_rows)))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> FlightIngester:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
