"""``AsyncPSoupClient``: the grpc.aio client of a psoup server; ``PSoupClient``'s methods, awaited.

::

    async with AsyncPSoupClient("localhost:50051") as c:
        await c.create_stream("r", {"a": "int", "t": "int"}, time="t")
        await c.insert("r", [(1, 10), (7, 11)])
        h = await c.register("SELECT * FROM r WHERE r.a < 5 BEGIN NOW - 10 END NOW")
        (await c.invoke(h)).rows  # [(1, 10)]

Create the client inside the event loop that uses it (grpc.aio channels belong to one
loop). Errors, deadlines and batching are as in ``clients.psoup_client``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path

import grpc
import numpy as np

from clients import batching, channel, messages
from clients.channel import DEFAULT, Timeout
from clients.errors import InvalidArgument, ResourceExhausted, error_from_rpc
from clients.invoker import AsyncInvoker
from clients.messages import (
    IngestAck,
    Invoke,
    QueryInfo,
    Register,
    Registered,
    StreamInfo,
    Template,
)
from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.values import InsertResult, Result, Schema


async def _each(items: Iterable | AsyncIterable) -> AsyncIterator:
    """Iterate a plain or an async iterable alike."""
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


class AsyncSubscription:
    """An open Subscribe call: ``async for kind, result, first_tuple_id in sub``.

    As ``clients.psoup_client.Subscription``; ``cancel()`` ends it, ``async with``
    cancels on exit.
    """

    def __init__(self, call):
        self._call = call
        self._decoder = messages.EventDecoder()
        self._cancelled = False

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> tuple[str, Result, int]:
        if self._cancelled:
            raise StopAsyncIteration
        try:
            msg = await self._call.read()
        except grpc.RpcError as err:
            if self._cancelled:
                raise StopAsyncIteration from None
            raise error_from_rpc(err) from err
        except asyncio.CancelledError:
            # grpc.aio reports a cancelled call this way; a task cancellation is re-raised.
            if self._cancelled:
                raise StopAsyncIteration from None
            raise
        if msg is grpc.aio.EOF:
            raise StopAsyncIteration
        return self._decoder.decode(msg)

    def cancel(self) -> None:
        """End the subscription."""
        self._cancelled = True
        self._call.cancel()

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc) -> None:
        self.cancel()


class AsyncPSoupClient:
    """A grpc.aio connection to a psoup server. Same arguments as ``PSoupClient``."""

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
        self._channel = channel.aio_channel(target, creds, channel.options(max_message_bytes))
        self._stub = pb_grpc.PSoupStub(self._channel)
        self._schemas: dict[str, Schema] = {}

    # -- plumbing ---------------------------------------------------------------------
    async def _unary(self, method, request, timeout: Timeout):
        try:
            return await method(
                request,
                timeout=channel.deadline(timeout, self.timeout),
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err

    async def _schema(self, stream: str) -> Schema:
        schema = self._schemas.get(stream)
        if schema is None:
            schema = batching.schema_of(await self.describe_stream(stream))
            self._schemas[stream] = schema
        return schema

    # -- streams ----------------------------------------------------------------------
    async def create_stream(
        self,
        name: str,
        schema: Mapping[str, str],
        time: str,
        max_window: int | float | None = None,
        *,
        partition_by: str | None = None,
        timeout: Timeout = DEFAULT,
    ) -> StreamInfo:
        """Declare a stream; see ``PSoupClient.create_stream``."""
        req = messages.create_stream_request(name, schema, time, max_window, partition_by)
        info = messages.stream_info(await self._unary(self._stub.CreateStream, req, timeout))
        self._schemas[name] = batching.schema_of(info)
        return info

    async def describe_stream(self, name: str, *, timeout: Timeout = DEFAULT) -> StreamInfo:
        """A stream's declaration and counters; NotFound if unknown."""
        req = pb.DescribeStreamRequest(name=name)
        return messages.stream_info(await self._unary(self._stub.DescribeStream, req, timeout))

    async def list_streams(self, *, timeout: Timeout = DEFAULT) -> list[StreamInfo]:
        """Every stream, by name."""
        resp = await self._unary(self._stub.ListStreams, pb.ListStreamsRequest(), timeout)
        return [messages.stream_info(s) for s in resp.streams]

    async def drop_stream(self, name: str, *, timeout: Timeout = DEFAULT) -> None:
        """Forget a stream; FailedPrecondition while queries read it."""
        self._schemas.pop(name, None)
        await self._unary(self._stub.DropStream, pb.DropStreamRequest(name=name), timeout)

    async def grant(
        self, stream: str, client: str, right: str, *, timeout: Timeout = DEFAULT
    ) -> StreamInfo:
        """Give ``client`` a ``right`` ('read' or 'write') on ``stream`` (owner or admin)."""
        req = pb.GrantRequest(stream=stream, client=client, right=right)
        return messages.stream_info(await self._unary(self._stub.Grant, req, timeout))

    async def revoke(
        self, stream: str, client: str, right: str, *, timeout: Timeout = DEFAULT
    ) -> StreamInfo:
        """Take ``right`` on ``stream`` back from ``client`` (owner or admin)."""
        req = pb.GrantRequest(stream=stream, client=client, right=right)
        return messages.stream_info(await self._unary(self._stub.Revoke, req, timeout))

    # -- ingest -----------------------------------------------------------------------
    async def insert(
        self, stream: str, rows: Iterable[Sequence | Mapping], *, timeout: Timeout = None
    ) -> InsertResult:
        """Append tuples in batches over one Ingest call; see ``PSoupClient.insert``."""
        schema = await self._schema(stream)
        arrays = batching.rows_to_arrays(stream, schema, rows)
        return await self._insert(stream, schema, arrays, timeout)

    async def insert_columns(
        self,
        stream: str,
        columns: Mapping[str, Sequence | np.ndarray],
        *,
        timeout: Timeout = None,
    ) -> InsertResult:
        """Append tuples given column-wise; see ``PSoupClient.insert_columns``."""
        schema = await self._schema(stream)
        arrays = batching.columns_to_typed(stream, schema, columns)
        return await self._insert(stream, schema, arrays, timeout)

    async def _insert(self, stream: str, schema: Schema, arrays, timeout) -> InsertResult:
        parts = batching.split(arrays, self.batch_rows)
        acks = [a async for a in self._ingest(stream, schema, parts, False, timeout)]
        return batching.summarize(acks)

    async def ingest(
        self,
        stream: str,
        batches: Iterable[Mapping[str, Sequence | np.ndarray]]
        | AsyncIterable[Mapping[str, Sequence | np.ndarray]],
        *,
        timeout: Timeout = None,
    ) -> AsyncIterator[IngestAck]:
        """Send ``batches`` over one Ingest call, pipelined; yields their acks.

        ``batches`` may be a plain or an async iterable. As ``PSoupClient.ingest``.
        """
        schema = await self._schema(stream)
        async for ack in self._ingest(stream, schema, batches, True, timeout):
            yield ack

    async def _ingest(
        self, stream: str, schema: Schema, batches, validate: bool, timeout: Timeout
    ) -> AsyncIterator[IngestAck]:
        call = self._stub.Ingest(
            timeout=channel.deadline(timeout, self.timeout), metadata=self._metadata
        )
        window = asyncio.Semaphore(self.max_in_flight)
        failure: list[BaseException] = []

        async def write() -> None:
            try:
                batch_id = 0
                async for cols in _each(batches):
                    await window.acquire()
                    if validate:
                        where = f"batch {batch_id}: "
                        cols = batching.columns_to_typed(stream, schema, cols, where)
                    await call.write(batching.request(stream, schema, cols, batch_id))
                    batch_id += 1
            except (grpc.RpcError, asyncio.InvalidStateError):
                return  # the call ended; the reader reports its status
            except Exception as exc:
                failure.append(exc)
            with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
                await call.done_writing()

        writer = asyncio.create_task(write())
        try:
            while True:
                ack = await call.read()
                if ack is grpc.aio.EOF:
                    break
                window.release()
                yield messages.ingest_ack(ack)
        except grpc.RpcError as err:
            self._schemas.pop(stream, None)
            raise error_from_rpc(err) from err
        finally:
            if not writer.done():
                writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            call.cancel()  # no-op once the call has ended
        if failure:
            raise failure[0]

    # -- queries ----------------------------------------------------------------------
    async def prepare(self, text: str, *, timeout: Timeout = DEFAULT) -> Template:
        """Prepare ``text`` as a template; see ``PSoupClient.prepare``."""
        req = pb.PrepareQueryRequest(text=text)
        reply = await self._unary(self._stub.PrepareQuery, req, timeout)
        return messages.template_from(text, reply)

    async def register(
        self,
        query: str | Template,
        params: Mapping[str, object] | None = None,
        *,
        timeout: Timeout = DEFAULT,
    ) -> str:
        """Register a standing query from its text or a template; returns its handle.
        See ``PSoupClient.register``."""
        try:
            req = messages.register_request(query, params)
        except codec.CodecError as err:
            raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"params: {err}") from None
        return (await self._unary(self._stub.RegisterQuery, req, timeout)).handle

    async def register_invoke(
        self,
        query: str | Template,
        params: Mapping[str, object] | None = None,
        now: int | float | None = None,
        *,
        timeout: Timeout = DEFAULT,
    ) -> tuple[str, Result]:
        """Register and take the current result in one round trip: ``(handle, result)``;
        see ``PSoupClient.register_invoke``."""
        try:
            req = messages.register_request(query, params, invoke=True, now=now)
        except codec.CodecError as err:
            raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"params: {err}") from None
        reply = await self._unary(self._stub.RegisterQuery, req, timeout)
        if reply.current_omitted:
            return reply.handle, await self.invoke(reply.handle, now, timeout=timeout)
        pages = messages.PageAssembler()
        pages.add(reply.current)
        return reply.handle, pages.result()

    async def batch(
        self, ops: Sequence[Register | Invoke], *, timeout: Timeout = DEFAULT
    ) -> list[Registered | Result]:
        """Registrations and invokes in one round trip; see ``PSoupClient.batch``."""
        try:
            req = messages.batch_request(ops)
        except codec.CodecError as err:
            raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None
        reply = await self._unary(self._stub.Batch, req, timeout)
        out: list[Registered | Result] = []
        for op, item in zip(ops, reply.replies, strict=True):
            answer, omitted = messages.batch_answer(item)
            if omitted:
                result = await self.invoke(answer.handle, op.now, timeout=timeout)
                answer = Registered(answer.handle, result)
            out.append(answer)
        return out

    async def invoke(
        self,
        handle: str,
        now: int | float | None = None,
        page_rows: int = 0,
        *,
        timeout: Timeout = DEFAULT,
    ) -> Result:
        """The query's current result, pages assembled; see ``PSoupClient.invoke``."""
        if not page_rows:
            pages = messages.PageAssembler()
            whole = messages.invoke_whole_request(handle, now)
            try:
                pages.add(await self._unary(self._stub.Invoke, whole, timeout))
                return pages.result()
            except ResourceExhausted:
                pass  # larger than a message: in pages
        return await self._invoke_paged(handle, now, page_rows, timeout)

    async def _invoke_paged(
        self, handle: str, now: int | float | None, page_rows: int, timeout: Timeout
    ) -> Result:
        """The result in pages of ``page_rows`` rows (0: the server's default)."""
        pages = messages.PageAssembler()
        req = messages.invoke_request(handle, now, page_rows)
        call = self._stub.InvokeQuery(
            req, timeout=channel.deadline(timeout, self.timeout), metadata=self._metadata
        )
        try:
            async for page in call:
                pages.add(page)
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err
        return pages.result()

    def invoker(self, retry_after: float = 10.0) -> AsyncInvoker:
        """An ``AsyncInvoker``: ``invoke`` on one open Invokes call (see
        ``PSoupClient.invoker``). Close it when done (``async with``)."""
        return AsyncInvoker(self, retry_after)

    def subscribe(
        self, handle: str, include_current: bool = False, *, timeout: Timeout = None
    ) -> AsyncSubscription:
        """New matches of the query as an async iterator; see ``PSoupClient.subscribe``."""
        req = pb.SubscribeRequest(handle=handle, include_current=include_current)
        call = self._stub.Subscribe(
            req, timeout=channel.deadline(timeout, self.timeout), metadata=self._metadata
        )
        return AsyncSubscription(call)

    async def unregister(self, handle: str, *, timeout: Timeout = DEFAULT) -> None:
        """Drop a standing query."""
        req = pb.UnregisterQueryRequest(handle=handle)
        await self._unary(self._stub.UnregisterQuery, req, timeout)

    async def describe_query(self, handle: str, *, timeout: Timeout = DEFAULT) -> QueryInfo:
        """A query's text, parameters, result columns, window and counters."""
        req = pb.DescribeQueryRequest(handle=handle)
        return messages.query_info(await self._unary(self._stub.DescribeQuery, req, timeout))

    async def stats(self, *, timeout: Timeout = DEFAULT) -> dict[str, object]:
        """Engine and per-stream counters."""
        return messages.stats(await self._unary(self._stub.Stats, pb.StatsRequest(), timeout))

    # -- lifetime ---------------------------------------------------------------------
    async def close(self) -> None:
        """Close the channel; calls in progress are cancelled."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncPSoupClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
