"""``PSoupClient``: the blocking client of a psoup server, with the embedded engine's methods.

::

    from clients import PSoupClient

    with PSoupClient("localhost:50051", token="...") as c:
        c.create_stream("r", {"a": "int", "t": "int"}, time="t")
        c.insert("r", [(1, 10), (7, 11)])
        h = c.register("SELECT * FROM r WHERE r.a < :x BEGIN NOW - 10 END NOW", {"x": 5})
        c.invoke(h).rows  # [(1, 10)]

Every failed call raises ``clients.errors.PSoupRpcError`` (a subclass per status code).
Deadlines: each method takes ``timeout`` (seconds; None: no deadline). Its default is the
client's ``timeout`` for the calls that answer at once (everything but ``ingest``,
``insert``, ``insert_columns`` and ``subscribe``); those last as long as their data, so
they have no deadline unless given one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import grpc
import numpy as np

from clients import batching, channel, messages
from clients.channel import DEFAULT, Timeout
from clients.errors import InvalidArgument, ResourceExhausted, error_from_rpc
from clients.invoker import Invoker
from clients.messages import (
    IngestAck,
    Invoke,
    QueryInfo,
    Register,
    Registered,
    StagedPart,
    StreamInfo,
    Template,
)
from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.values import InsertResult, Result, Schema


class Subscription:
    """An open Subscribe call: iterate it for ``(kind, Result, first_tuple_id)`` events.

    ``kind`` is ``"current"`` (the result at subscription time, first, if asked for) or
    ``"new"`` (one batch's new matches; for aggregates the new aggregate rows). Iteration
    ends when the query is unregistered or after ``cancel()``, which may be called from
    any thread. Use it as a context manager to cancel on exit.
    """

    def __init__(self, call):
        self._call = call
        self._decoder = messages.EventDecoder()
        self._cancelled = False

    def __iter__(self) -> Iterator[tuple[str, Result, int]]:
        return self

    def __next__(self) -> tuple[str, Result, int]:
        try:
            msg = next(self._call)
        except grpc.RpcError as err:
            if self._cancelled:
                raise StopIteration from None
            raise error_from_rpc(err) from err
        return self._decoder.decode(msg)

    def cancel(self) -> None:
        """End the subscription; a blocked iteration stops."""
        self._cancelled = True
        self._call.cancel()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


class PSoupClient:
    """A connection to a psoup server, with the embedded ``psoup.Engine``'s methods.

    ``target`` is ``host:port`` (``host`` alone: port 50051; IPv6 as ``[::1]:port``);
    ``token`` (printable ASCII) is sent as ``authorization: Bearer <token>``; a bad
    target or token raises ValueError here, before any call. ``timeout`` is the default
    deadline in seconds (see the module docstring);
    ``root_certificates`` (PEM bytes or a file path) turns on TLS, as does ``tls=True``
    (system roots). ``batch_rows`` is the size of the batches ``insert`` cuts rows into,
    ``max_in_flight`` how many batches may await their ack at once on an Ingest call.
    The channel connects lazily: an unreachable server shows at the first call, as
    ``Unavailable``. Thread-safe, like the gRPC channel under it.
    """

    def __init__(
        self,
        target: str = "localhost:50051",
        token: str | None = None,
        timeout: float | None = 30.0,
        root_certificates: bytes | str | Path | None = None,
        *,
        tls: bool | None = None,
        batch_rows: int = 8192,
        max_in_flight: int = 8,
        max_message_bytes: int = channel.MAX_MESSAGE_BYTES,
    ):
        if batch_rows < 1 or max_in_flight < 1:
            raise ValueError("batch_rows and max_in_flight must be positive")
        target = channel.target(target)
        self._metadata = channel.metadata(token)
        self.target = target
        self.timeout = timeout
        self.batch_rows = batch_rows
        self.max_in_flight = max_in_flight
        creds = channel.credentials(root_certificates, tls)
        self._channel = channel.sync_channel(target, creds, channel.options(max_message_bytes))
        self._stub = pb_grpc.PSoupStub(self._channel)
        self._schemas: dict[str, Schema] = {}

    # -- plumbing ---------------------------------------------------------------------
    def _unary(self, method, request, timeout: Timeout):
        try:
            return method(
                request,
                timeout=channel.deadline(timeout, self.timeout),
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err

    def _schema(self, stream: str) -> Schema:
        """The stream's schema, asked of the server once per stream."""
        schema = self._schemas.get(stream)
        if schema is None:
            schema = batching.schema_of(self.describe_stream(stream))
            self._schemas[stream] = schema
        return schema

    # -- streams ----------------------------------------------------------------------
    def create_stream(
        self,
        name: str,
        schema: Mapping[str, str],
        time: str,
        max_window: int | float | None = None,
        *,
        partition_by: str | None = None,
        timeout: Timeout = DEFAULT,
    ) -> StreamInfo:
        """Declare a stream (attribute -> 'int' | 'float' | 'str'); returns its description.

        ``partition_by``: the int or str attribute a sharded server spreads the tuples
        by (docs/SCALE_OUT.md). InvalidArgument for a bad declaration, AlreadyExists if
        the name is taken.
        """
        req = messages.create_stream_request(name, schema, time, max_window, partition_by)
        info = messages.stream_info(self._unary(self._stub.CreateStream, req, timeout))
        self._schemas[name] = batching.schema_of(info)
        return info

    def describe_stream(self, name: str, *, timeout: Timeout = DEFAULT) -> StreamInfo:
        """A stream's declaration and counters; NotFound if unknown."""
        req = pb.DescribeStreamRequest(name=name)
        return messages.stream_info(self._unary(self._stub.DescribeStream, req, timeout))

    def list_streams(self, *, timeout: Timeout = DEFAULT) -> list[StreamInfo]:
        """Every stream, by name."""
        resp = self._unary(self._stub.ListStreams, pb.ListStreamsRequest(), timeout)
        return [messages.stream_info(s) for s in resp.streams]

    def drop_stream(self, name: str, *, timeout: Timeout = DEFAULT) -> None:
        """Forget a stream and its tuples; FailedPrecondition while queries read it."""
        self._schemas.pop(name, None)
        self._unary(self._stub.DropStream, pb.DropStreamRequest(name=name), timeout)

    def grant(
        self, stream: str, client: str, right: str, *, timeout: Timeout = DEFAULT
    ) -> StreamInfo:
        """Give ``client`` a ``right`` ('read' or 'write') on ``stream``: its owner or an
        admin only (PermissionDenied otherwise). Returns the stream with its grants."""
        req = pb.GrantRequest(stream=stream, client=client, right=right)
        return messages.stream_info(self._unary(self._stub.Grant, req, timeout))

    def revoke(
        self, stream: str, client: str, right: str, *, timeout: Timeout = DEFAULT
    ) -> StreamInfo:
        """Take ``right`` on ``stream`` back from ``client``: its queries over the stream
        stop being invokable. Owner or admin only. Returns the stream with its grants."""
        req = pb.GrantRequest(stream=stream, client=client, right=right)
        return messages.stream_info(self._unary(self._stub.Revoke, req, timeout))

    # -- ingest -----------------------------------------------------------------------
    def insert(
        self,
        stream: str,
        rows: Iterable[Sequence | Mapping],
        *,
        timeout: Timeout = None,
    ) -> InsertResult:
        """Append tuples (schema order, or dicts) in batches of ``batch_rows``.

        All rows are validated before anything is sent (InvalidArgument names the row,
        0-based in ``rows``, and the column). The batches then go over one Ingest call,
        pipelined; each is applied whole, so if the server refuses one (e.g. a timestamp
        older than the stream's latest) the batches before it stay applied. Returns the
        tuple id range and matches of the whole insert. O(rows x attributes) Python work
        to transpose the rows; ``insert_columns`` with numpy arrays avoids it.
        """
        schema = self._schema(stream)
        arrays = batching.rows_to_arrays(stream, schema, rows)
        return self._insert(stream, schema, arrays, timeout)

    def insert_columns(
        self,
        stream: str,
        columns: Mapping[str, Sequence | np.ndarray],
        *,
        timeout: Timeout = None,
    ) -> InsertResult:
        """Append tuples given column-wise (attribute -> list or numpy array), as ``insert``."""
        schema = self._schema(stream)
        arrays = batching.columns_to_typed(stream, schema, columns)
        return self._insert(stream, schema, arrays, timeout)

    def _insert(self, stream: str, schema: Schema, arrays, timeout: Timeout) -> InsertResult:
        parts = batching.split(arrays, self.batch_rows)
        return batching.summarize(self._ingest(stream, schema, parts, False, timeout))

    def ingest(
        self,
        stream: str,
        batches: Iterable[Mapping[str, Sequence | np.ndarray]],
        *,
        timeout: Timeout = None,
    ) -> Iterator[IngestAck]:
        """Send ``batches`` (attribute -> values) over one Ingest call; yields their acks.

        Lazy: nothing is sent until the result is iterated. Batches are pipelined (up to
        ``max_in_flight`` await their ack) and ``batches`` is consumed on a gRPC thread.
        Each batch is validated before it is sent; a bad one ends the call with
        InvalidArgument ("batch N: ...") after the acks of the batches before it, which
        stay applied. Batch ids count from 0 in the order given.
        """
        return self._ingest(stream, self._schema(stream), batches, True, timeout)

    def _ingest(
        self, stream: str, schema: Schema, batches: Iterable, validate: bool, timeout: Timeout
    ) -> Iterator[IngestAck]:
        window = threading.Semaphore(self.max_in_flight)
        stop = threading.Event()
        failure: list[BaseException] = []

        def requests() -> Iterator[pb.IngestRequest]:
            # Runs on a gRPC thread: errors are handed to the caller's thread via `failure`.
            try:
                for batch_id, cols in enumerate(batches):
                    window.acquire()
                    if stop.is_set():
                        return
                    if validate:
                        where = f"batch {batch_id}: "
                        cols = batching.columns_to_typed(stream, schema, cols, where)
                    yield batching.request(stream, schema, cols, batch_id)
            except Exception as exc:
                failure.append(exc)

        try:
            call = self._stub.Ingest(
                requests(),
                timeout=channel.deadline(timeout, self.timeout),
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err
        try:
            for ack in call:
                window.release()
                yield messages.ingest_ack(ack)
        except grpc.RpcError as err:
            self._schemas.pop(stream, None)  # maybe redeclared elsewhere: ask again next time
            raise error_from_rpc(err) from err
        finally:
            stop.set()
            window.release()  # wakes the request thread if it waits for room
            call.cancel()  # no-op once the call has ended
        if failure:
            raise failure[0]

    # -- bulk loads and reads ---------------------------------------------------------
    def begin_load(self, stream: str, *, timeout: Timeout = DEFAULT) -> str:
        """Start a load that will replace ``stream``'s contents; returns its id."""
        return self._unary(
            self._stub.BeginLoad, pb.BeginLoadRequest(stream=stream), timeout
        ).load_id

    def load_batches(
        self,
        load_id: str,
        stream: str,
        batches: Iterable[Mapping[str, Sequence | np.ndarray]],
        *,
        part: str = "",
        timeout: Timeout = None,
    ) -> StagedPart:
        """Stage ``batches`` (attribute -> values, any time order) into a load over one
        LoadBatches call; returns what was staged. Several callers (processes, Spark
        tasks) may stage into one load at once. Nothing is visible until commit_load.

        The rows are staged only if the call completes. Naming a ``part`` makes the call
        idempotent: a later call for the same part replaces its rows (``replaced``), so a
        retried writer (a Spark task attempt) is counted once.
        """
        schema = self._schema(stream)

        def requests() -> Iterator[pb.LoadBatchRequest]:
            for batch_id, cols in enumerate(batches):
                typed = batching.columns_to_typed(stream, schema, cols, f"batch {batch_id}: ")
                cols = batching.request(stream, schema, typed, batch_id).columns
                yield pb.LoadBatchRequest(
                    load_id=load_id, columns=cols, batch_id=batch_id, part=part
                )

        res = self._unary(self._stub.LoadBatches, requests(), timeout)
        return StagedPart(res.rows, res.batches, res.replaced)

    def commit_load(self, load_id: str, *, timeout: Timeout = None) -> InsertResult:
        """Replace the stream's contents with the load's rows, atomically."""
        res = self._unary(self._stub.CommitLoad, pb.CommitLoadRequest(load_id=load_id), timeout)
        return InsertResult(res.first_tuple_id, res.last_tuple_id, res.rows, 0)

    def abort_load(self, load_id: str, *, timeout: Timeout = DEFAULT) -> None:
        """Drop a load's staged rows; the stream is unchanged."""
        self._unary(self._stub.AbortLoad, pb.AbortLoadRequest(load_id=load_id), timeout)

    def read_stream(
        self,
        stream: str,
        part: int = 0,
        parts: int = 1,
        page_rows: int = 0,
        *,
        timeout: Timeout = None,
    ) -> Iterator[dict[str, np.ndarray | list]]:
        """Pages (attribute -> values) of part ``part`` of ``parts`` of the stream's
        retained rows, in time order; the parts together are every row once."""
        req = pb.ReadStreamRequest(stream=stream, part=part, parts=parts, page_rows=page_rows)
        try:
            for page in self._stub.ReadStream(
                req, timeout=channel.deadline(timeout, self.timeout), metadata=self._metadata
            ):
                yield {c.name: codec.decode_column(c) for c in page.columns}
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err

    # -- queries ----------------------------------------------------------------------
    def prepare(self, text: str, *, timeout: Timeout = DEFAULT) -> Template:
        """Prepare ``text`` as a template, to register for many parameter sets (pass it to
        ``register`` or ``register_invoke`` in place of the text): the server parses and
        checks it once. InvalidArgument (line and column) for what no parameter value
        can mend; the parameters are checked at each registration."""
        reply = self._unary(self._stub.PrepareQuery, pb.PrepareQueryRequest(text=text), timeout)
        return messages.template_from(text, reply)

    def register(
        self,
        query: str | Template,
        params: Mapping[str, object] | None = None,
        *,
        timeout: Timeout = DEFAULT,
    ) -> str:
        """Register a standing query, from its text or a template (``prepare``); returns
        its handle (keep it secret).

        InvalidArgument for a bad query (the message has line and column) or parameter;
        NotFound for a template the server does not know.
        """
        try:
            req = messages.register_request(query, params)
        except codec.CodecError as err:
            raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"params: {err}") from None
        return self._unary(self._stub.RegisterQuery, req, timeout).handle

    def register_invoke(
        self,
        query: str | Template,
        params: Mapping[str, object] | None = None,
        now: int | float | None = None,
        *,
        timeout: Timeout = DEFAULT,
    ) -> tuple[str, Result]:
        """Register a standing query and take its current result (as of ``now``, default
        NOW) in one round trip: ``(handle, result)``. The result is the new query's over
        exactly the data it was registered over. When it is larger than a message may
        be, it is taken in pages by a second call (``invoke``). Errors as ``register``
        and ``invoke``; a refused ``now`` registers nothing.
        """
        try:
            req = messages.register_request(query, params, invoke=True, now=now)
        except codec.CodecError as err:
            raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"params: {err}") from None
        reply = self._unary(self._stub.RegisterQuery, req, timeout)
        if reply.current_omitted:
            return reply.handle, self.invoke(reply.handle, now, timeout=timeout)
        pages = messages.PageAssembler()
        pages.add(reply.current)
        return reply.handle, pages.result()

    def batch(
        self, ops: Sequence[Register | Invoke], *, timeout: Timeout = DEFAULT
    ) -> list[Registered | Result]:
        """Registrations and invokes in one round trip (Batch), for a client acting for
        many: the answers in order, a ``Registered`` for each ``Register`` and a
        ``Result`` for each ``Invoke``. They run in order in one turn of the server's
        engine. All or nothing: if one item is refused, the call raises that item's
        error ("items[k]: ...") and registers nothing. O(items + their results).
        """
        try:
            req = messages.batch_request(ops)
        except codec.CodecError as err:
            raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None
        reply = self._unary(self._stub.Batch, req, timeout)
        out: list[Registered | Result] = []
        for op, item in zip(ops, reply.replies, strict=True):
            answer, omitted = messages.batch_answer(item)
            if omitted:
                answer = Registered(
                    answer.handle, self.invoke(answer.handle, op.now, timeout=timeout)
                )
            out.append(answer)
        return out

    def invoke(
        self,
        handle: str,
        now: int | float | None = None,
        page_rows: int = 0,
        *,
        timeout: Timeout = DEFAULT,
    ) -> Result:
        """The query's current result over its window, as of ``now`` (default: NOW).

        With ``page_rows`` 0 the result comes whole in one message (Invoke), or, when it
        is larger than a message may be, in the server's default pages; otherwise in
        pages of ``page_rows`` rows (InvokeQuery), assembled here. O(rows x columns) to
        decode. NotFound for an unknown handle.
        """
        if not page_rows:
            pages = messages.PageAssembler()
            whole = messages.invoke_whole_request(handle, now)
            try:
                pages.add(self._unary(self._stub.Invoke, whole, timeout))
                return pages.result()
            except ResourceExhausted:
                pass  # larger than a message: in pages
        return self._invoke_paged(handle, now, page_rows, timeout)

    def _invoke_paged(
        self, handle: str, now: int | float | None, page_rows: int, timeout: Timeout
    ) -> Result:
        """The result in pages of ``page_rows`` rows (0: the server's default), with
        InvokeQuery."""
        pages = messages.PageAssembler()
        req = messages.invoke_request(handle, now, page_rows)
        try:
            for page in self._stub.InvokeQuery(
                req, timeout=channel.deadline(timeout, self.timeout), metadata=self._metadata
            ):
                pages.add(page)
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err
        return pages.result()

    def invoker(self, retry_after: float = 10.0) -> Invoker:
        """An ``Invoker``: ``invoke`` on one open Invokes call, for a thread that invokes
        again and again, at about half the server's CPU per invoke (clients/invoker.py).
        Close it when done (``with``): the call holds a thread of the server."""
        return Invoker(self, retry_after)

    def subscribe(
        self, handle: str, include_current: bool = False, *, timeout: Timeout = None
    ) -> Subscription:
        """Every new match of the query from now on, as ``(kind, Result, first_tuple_id)``.

        With ``include_current`` the first event is ``("current", result, 0)``; once it
        has arrived the subscription is known to be in place, so no later batch is
        missed. Errors (NotFound, ...) are raised by the iteration.
        """
        req = pb.SubscribeRequest(handle=handle, include_current=include_current)
        call = self._stub.Subscribe(
            req, timeout=channel.deadline(timeout, self.timeout), metadata=self._metadata
        )
        return Subscription(call)

    def unregister(self, handle: str, *, timeout: Timeout = DEFAULT) -> None:
        """Drop a standing query; its handle becomes unknown."""
        req = pb.UnregisterQueryRequest(handle=handle)
        self._unary(self._stub.UnregisterQuery, req, timeout)

    def describe_query(self, handle: str, *, timeout: Timeout = DEFAULT) -> QueryInfo:
        """A query's text, parameters, result columns, window and counters."""
        req = pb.DescribeQueryRequest(handle=handle)
        return messages.query_info(self._unary(self._stub.DescribeQuery, req, timeout))

    def stats(
        self, *, busiest_queries: bool = False, timeout: Timeout = DEFAULT
    ) -> dict[str, object]:
        """Engine and per-stream counters (see ``clients.messages.stats`` for the keys);
        with ``busiest_queries`` also the most invoked queries (O(queries) on the server)."""
        req = pb.StatsRequest(busiest_queries=busiest_queries)
        return messages.stats(self._unary(self._stub.Stats, req, timeout))

    def backup(self, directory: str, *, timeout: Timeout = None) -> dict[str, object]:
        """Have the server write a consistent copy of its data into ``directory`` (an
        absolute path on the server's machine, missing or empty), a data directory a
        server can start on. Returns {directory, lsn, bytes, seconds}."""
        r = self._unary(self._stub.Backup, pb.BackupRequest(directory=directory), timeout)
        return {"directory": r.directory, "lsn": r.lsn, "bytes": r.bytes, "seconds": r.seconds}

    # -- lifetime ---------------------------------------------------------------------
    def close(self) -> None:
        """Close the channel; calls in progress are cancelled."""
        self._channel.close()

    def __enter__(self) -> PSoupClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
