"""The psoup.v1.PSoup servicer: validate, hand the engine thread a closure, translate back.

Each method is thin. It authenticates the caller, checks the request's fields and the
configured limits (naming the field or the limit in the error), decodes values with
psoup.api.codec, runs the engine work through the engine worker (psoup/server/worker.py:
one closure at a time, on the engine thread or, when it is idle, on the caller's) and
turns the answer or the engine's error into a message or a status code. Nothing touches
the engine outside the worker's turns, and a refused request changes nothing.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import heapq
import math
import os
import queue
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import wait as wait_futures
from pathlib import Path

import grpc

from psoup.access import OWNER, READ, WRITE, Access
from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.engine import Engine, Query
from psoup.errors import (
    AlreadyExistsError,
    NotFoundError,
    NotSupportedError,
    PermissionDeniedError,
    PreconditionError,
    PSoupError,
    ResultOverflowError,
    UnavailableError,
)
from psoup.procinfo import rss_bytes
from psoup.server.auth import Authenticator, AuthError
from psoup.server.config import ServerConfig
from psoup.server.guard import UndecodableRequest
from psoup.server.invoke_calls import CallsFull, InvokeCalls
from psoup.server.loads import BudgetExceeded, Loads, UnknownLoad
from psoup.server.metrics import Metrics, release_free_memory
from psoup.server.observe import Observer
from psoup.server.turns import IngestTurns
from psoup.server.worker import EngineWorker, QueueFull
from psoup.storage.log import StorageError, StorageFullError
from psoup.values import Result

_STATUS = (
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (AlreadyExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (PreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (ResultOverflowError, grpc.StatusCode.OUT_OF_RANGE),
    (UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (NotSupportedError, grpc.StatusCode.UNIMPLEMENTED),
    (StorageFullError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StorageError, grpc.StatusCode.INTERNAL),
    (PSoupError, grpc.StatusCode.INVALID_ARGUMENT),
    (codec.CodecError, grpc.StatusCode.INVALID_ARGUMENT),
    (UndecodableRequest, grpc.StatusCode.INVALID_ARGUMENT),
)
INGEST_DEPTH = 4  # batches of one Ingest call in flight at once
BUSIEST = 10  # the most invoked queries Stats lists
_END = object()  # a subscription's RPC ended
_FAILED = object()  # a subscription ends with an error (a revoke, an overflow)
_OVERFLOW = object()  # a subscriber fell too far behind


class _Skipped(Exception):
    """A batch not applied because an earlier batch of its call failed."""


class Abort(Exception):
    """A status to end the call with."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The status code and message a call ends with for ``exc`` (an Abort or one of
    psoup's errors); None for an unexpected error (INTERNAL)."""
    if isinstance(exc, Abort):
        return exc.code, exc.message
    for cls, code in _STATUS:
        if isinstance(exc, cls):
            return code, str(exc)
    return None


def _abort(context: grpc.ServicerContext, exc: BaseException):
    """End the call with the status ``exc`` stands for; unexpected errors are INTERNAL."""
    status = status_of(exc)
    if status is None:
        context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
    context.abort(*status)


@contextlib.contextmanager
def _item(k: int):
    """Errors raised inside name item ``k`` of a Batch: "items[k]: ..." with the status
    the item alone would have had."""
    try:
        yield
    except BaseException as exc:
        status = status_of(exc)
        if status is None:
            raise
        raise Abort(status[0], f"items[{k}]: {status[1]}") from None


def _rows(columns: dict) -> int:
    """The rows of a decoded batch (attribute -> values)."""
    return len(next(iter(columns.values()), ()))


def _set_time(msg, result: Result) -> None:
    """Fill a response's now / window_begin / window_end from ``result``."""
    if result.now is not None:
        codec.set_value(msg.now, result.now)
    if result.window is not None:
        codec.set_value(msg.window_begin, result.window[0])
        codec.set_value(msg.window_end, result.window[1])


def result_pages(result: Result, page: int) -> Iterator[pb.InvokeQueryResponse]:
    """The result in messages of ``page`` rows (InvokeQuery's answer), the first with
    the columns, the total and the window. O(rows) in C."""
    n = len(result)
    yield _first_page(result, min(page, n))
    for a in range(page, n, page):
        yield pb.InvokeQueryResponse(
            data=codec.encode_result(result, a, a + page), rows=min(page, n - a)
        )


def _first_page(result: Result, rows: int) -> pb.InvokeQueryResponse:
    """The first message of a result: its first ``rows`` rows, the columns, the total
    and the window."""
    msg = pb.InvokeQueryResponse(
        data=codec.encode_result(result, 0, rows),
        rows=rows,
        columns=[
            pb.ColumnInfo(name=n, type=codec.TYPE_TO_PB[t])
            for n, t in zip(result.columns, result.types, strict=True)
        ],
        total_rows=len(result),
    )
    _set_time(msg, result)
    return msg


def whole_result(result: Result) -> pb.InvokeQueryResponse:
    """The result in one message (Invoke's answer), whatever its size."""
    return _first_page(result, len(result))


def _window(spec) -> pb.Window:
    def bound(b) -> pb.Window.Bound:
        return pb.Window.Bound(relative_to_now=b.kind == "now", offset=float(b.value))

    return pb.Window(begin=bound(spec.window.begin), end=bound(spec.window.end))


def _columns(spec) -> list[pb.ColumnInfo]:
    return [
        pb.ColumnInfo(name=name, type=codec.TYPE_TO_PB[item.type])
        for name, item in zip(spec.columns, spec.select, strict=True)
    ]


def _stream_info(db: Engine, name: str) -> pb.StreamInfo:
    st = db.streams[name]
    schema = st.schema
    info = pb.StreamInfo(
        name=name,
        attributes=[
            pb.Attribute(name=a, type=codec.TYPE_TO_PB[t])
            for a, t in zip(schema.names, schema.types, strict=True)
        ],
        time=schema.time,
        tuples_stored=db.tuples_stored(name),
        partition_by=st.partition_by or "",
        tuples_ingested=st.tuples_ingested,
        queries=len(st.queries),
        owner=st.owner or "",
        grants=[pb.StreamGrant(client=c, rights=sorted(r)) for c, r in sorted(st.grants.items())],
    )
    if st.max_window is not None:
        info.max_window = float(st.max_window)
    if st.last_ts is not None:
        info.last_ts.CopyFrom(codec.to_value(st.last_ts))
    return info


_TEMPLATE_ID = re.compile(r"[0-9a-f]{32}")

#: The RPCs someone waits on, a person or an application: while they arrive, bulk ingest
#: yields part of its time (``psoup serve --ingest-share``).
INTERACTIVE = frozenset({
    "DescribeStream", "ListStreams", "PrepareQuery", "RegisterQuery", "InvokeQuery", "Invoke",
    "UnregisterQuery", "DescribeQuery", "ReadStream", "Batch", "Invokes",
})  # fmt: skip


class PSoupServicer(pb_grpc.PSoupServicer):
    """The service's methods; see proto/psoup/v1/psoup.proto for what each promises."""

    def __init__(
        self,
        engine: Engine,
        worker: EngineWorker,
        auth: Authenticator,
        config: ServerConfig,
        observer: Observer | None = None,
    ):
        self.engine = engine
        self.worker = worker
        self.auth = auth
        self.access = Access(auth.enabled, auth.admins)
        self.config = config
        self.metrics = Metrics()
        self.observer = observer or Observer(engine.strategy.name, auth.who)
        self._lock = threading.Lock()
        self._owners: dict[str, str] = {}  # handle -> client id
        self._per_client: Counter[str] = Counter()
        for handle, q in engine.queries.items():  # recovered from the data directory
            if q.owner is not None:
                self._owners[handle] = q.owner
                self._per_client[q.owner] += 1
        self.storage = engine.storage  # None in memory
        self._subscriptions = 0
        self.invoke_calls = InvokeCalls(config.max_invoke_calls, config.invoke_idle_seconds)
        self.loads = Loads(max_staged_bytes=config.max_staged_bytes)
        self.turns = IngestTurns(config.ingest_turns, share=config.ingest_share)
        self.observer.on_request(self._arrived)

    def _arrived(self, method: str) -> None:
        """Told of every request by name, as it arrives: while interactive calls come,
        ingest makes way (psoup/server/turns.py)."""
        if method in INTERACTIVE:
            self.turns.interactive()

    # -- common steps -------------------------------------------------------------------
    def _client(self, context: grpc.ServicerContext) -> str:
        try:
            return self.auth.client(context.invocation_metadata())
        except AuthError as exc:
            raise Abort(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None

    def _own(self, client: str, handle: str) -> None:
        """PERMISSION_DENIED unless ``client`` registered ``handle`` (auth on)."""
        if not handle:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "handle: required")
        if not self.auth.enabled or client in self.access.admins:
            return
        with self._lock:
            owner = self._owners.get(handle)
        if owner is None:
            raise Abort(grpc.StatusCode.NOT_FOUND, "handle: unknown query handle")
        if owner != client:
            raise Abort(
                grpc.StatusCode.PERMISSION_DENIED,
                "handle: the query belongs to another client",
            )

    def _kept(self) -> None:
        """Return once every change made so far, this call's included, is durable (at
        once in memory); raises StorageError when it cannot be. Runs on the caller's
        thread, so concurrent calls share one fsync (group commit)."""
        if self.storage is not None:
            self.storage.wait()

    def _unary(self, context, fn):
        try:
            return fn()
        except Exception as exc:
            _abort(context, exc)

    # -- streams ------------------------------------------------------------------------
    def CreateStream(self, request, context):
        def run():
            client = self._client(context)
            schema = [
                (a.name, codec.type_name(a.type, f"attributes[{i}].type"))
                for i, a in enumerate(request.attributes)
            ]
            mw = request.max_window if request.HasField("max_window") else None
            if mw is not None and (not math.isfinite(mw) or mw < 0):
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT, "max_window: must be a finite number >= 0"
                )
            if mw is not None and mw.is_integer():
                mw = int(mw)

            owner = self.access.owner_of_new(client)

            def create():
                self.engine.create_stream(
                    request.name, schema, time=request.time, max_window=mw, owner=owner,
                    partition_by=request.partition_by or None,
                )  # fmt: skip
                return _stream_info(self.engine, request.name)

            info = self.worker.call(create)
            self._kept()
            return info

        return self._unary(context, run)

    def DescribeStream(self, request, context):

        def run():
            self._client(context)
            return self.worker.call(lambda: self._describe_stream(request.name))

        return self._unary(context, run)

    def _describe_stream(self, name: str) -> pb.StreamInfo:
        self.engine._stream(name)  # raises UnknownStreamError naming the stream
        return _stream_info(self.engine, name)

    def ListStreams(self, request, context):

        def run():
            self._client(context)

            def list_all():
                return pb.ListStreamsResponse(
                    streams=[_stream_info(self.engine, n) for n in sorted(self.engine.streams)]
                )

            return self.worker.call(list_all)

        return self._unary(context, run)

    def DropStream(self, request, context):
        def run():
            client = self._client(context)

            def drop():
                self.access.require(self.engine, request.name, client, OWNER)
                self.engine.drop_stream(request.name)

            self.worker.call(drop)
            self._kept()
            return pb.DropStreamResponse()

        return self._unary(context, run)

    def Grant(self, request, context):
        return self._set_grant(request, context, True)

    def Revoke(self, request, context):
        return self._set_grant(request, context, False)

    def _set_grant(self, request, context, granted: bool):
        def run():
            client = self._client(context)
            for name in ("stream", "client", "right"):
                if not getattr(request, name):
                    raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"{name}: required")
            if request.right not in (READ, WRITE):
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"right: {request.right!r} is not one of {READ}, {WRITE}",
                )

            def change():
                self.access.require(self.engine, request.stream, client, OWNER)
                self.engine.set_grant(request.stream, request.client, request.right, granted)
                return _stream_info(self.engine, request.stream)

            info = self.worker.call(change)
            self._kept()
            return info

        return self._unary(context, run)

    # -- ingest -------------------------------------------------------------------------
    @property
    def _acks_wait(self) -> bool:
        """Whether an ingest ack waits for a force to disk (``_kept``, ``--sync batch``)."""
        return self.storage is not None and self.storage.sync.mode == "batch"

    def Ingest(self, request_iterator, context):
        # Two ways: when an ack waits for a force to disk, a call's batches are pipelined
        # (they share fsyncs); when it waits for nothing (in memory, sync off or
        # interval), one thread does a batch from end to end, two hand-offs fewer.
        if self._acks_wait:
            return self._ingest_pipelined(request_iterator, context)
        return self._ingest_direct(request_iterator, context)

    def _ingest_direct(self, request_iterator, context):
        """This call's thread reads a batch, applies it (on this thread when the engine
        thread is idle: ``EngineWorker.run_ingest``), acks it, then reads the next: no
        thread hand-off of its own, where the pipelined way passes each batch from a
        reader thread to the engine thread to this one (docs/BENCHMARKS.md, stop 52).
        The first batch that fails ends the call with everything before it applied and
        nothing after it."""
        stop = threading.Event()  # the call is over: a wait for a turn gives up
        context.add_callback(stop.set)
        try:
            client = self._client(context)
            share = client if self.auth.enabled else context.peer()
            for req in request_iterator:
                ack = self.ingest_batch(req, self._decode_batch(req), client, share, stop)
                if ack is None:
                    return
                yield ack
        except Exception as exc:
            _abort(context, exc)

    def ingest_batch(
        self, req: pb.IngestRequest, columns: dict, client: str, share: str, stop: threading.Event
    ) -> pb.IngestAck | None:
        """Apply one decoded batch of ``client`` on a turn of ``share`` (its connection
        when anonymous) and acknowledge it once durable: its IngestAck; None when ``stop``
        was set before it had a turn (nothing applied). Abort, or the engine's error,
        names the batch (``req`` holds its stream and id; its columns are not read). The
        one way an unpipelined Ingest call and Arrow Flight's DoPut
        (psoup/server/flight.py) apply a batch. O(the engine's work)."""
        if not self.turns.acquire(share, stop):
            return None
        applied = functools.partial(self._apply_in_turn, req, columns, client, share)
        return self._ack(req, applied, _rows(columns))

    def _apply_in_turn(self, req: pb.IngestRequest, columns: dict, client: str, share: str):
        """Apply a batch whose turn is taken (``EngineWorker.run_ingest``), then give
        the turn back with the engine CPU it took: its InsertResult."""
        held = 0.0
        try:
            res, held = self.worker.run_ingest(
                lambda: self._insert(req.stream, columns, client), share
            )
            return res
        except QueueFull:
            raise self._queue_full(req) from None
        finally:
            self.turns.release(held)

    def _ingest_pipelined(self, request_iterator, context):
        # A reader thread receives, decodes and queues up to INGEST_DEPTH batches of this
        # call on the engine thread, while this generator sends each batch's ack as soon
        # as the engine has applied it and it is durable. (Reading in the generator
        # would hold an applied batch's ack until the next batch arrived: a whole batch
        # interval of latency for every client waiting on it.) The engine runs the batches
        # in order; once one fails, the later ones of this call are skipped (``failed``),
        # so a bad batch still ends the call with everything before it applied and
        # nothing after it.
        failed = threading.Event()
        stop = threading.Event()  # this call is over: the reader gives up
        pending: queue.Queue = queue.Queue()  # (request, future), then an exception or _END
        room = threading.Semaphore(INGEST_DEPTH)

        def apply(stream: str, columns: dict):
            if failed.is_set():
                raise _Skipped
            try:
                return self._insert(stream, columns, client)
            except BaseException:
                failed.set()
                raise

        def submit(req: pb.IngestRequest, columns: dict, inflight: deque):
            while True:
                try:
                    return self.worker.submit_ingest(
                        lambda s=req.stream, c=columns: apply(s, c), share
                    )
                except QueueFull:
                    while inflight and inflight[0].done():
                        inflight.popleft()
                    if not inflight:
                        raise self._queue_full(req) from None
                    wait_futures([inflight[0]])  # this call's oldest batch makes room

        def read() -> None:
            inflight: deque = deque()  # this call's futures, oldest first
            try:
                for req in request_iterator:
                    columns = self._decode_batch(req)
                    while not room.acquire(timeout=1.0):
                        if stop.is_set():
                            return
                    if stop.is_set() or failed.is_set():
                        return
                    # One batch of the whole server on its way to the engine per turn
                    # (psoup/server/turns.py); the engine gives the turn back as it
                    # finishes the batch, however this call ends.
                    if not self.turns.acquire(share, stop):
                        return
                    try:
                        fut = submit(req, columns, inflight)
                    except BaseException:
                        self.turns.release()
                        raise
                    fut.add_done_callback(
                        lambda f: self.turns.release(getattr(f, "cpu_seconds", 0.0))
                    )
                    # Only the batches not yet applied matter (the oldest makes room when
                    # the queue is full): drop the rest, or a call streaming for hours
                    # keeps a future per batch (~1.6 KB each: the server's memory grew
                    # ~0.8 MB/s under `psoup bench overload`).
                    while inflight and inflight[0].done():
                        inflight.popleft()
                    inflight.append(fut)
                    pending.put((req, fut, _rows(columns)))
                pending.put(_END)
            except Exception as exc:  # ends the call after the acks queued before it
                pending.put(exc)

        try:
            client = self._client(context)
            # The engine's turns go round the clients (their connections, anonymously).
            share = client if self.auth.enabled else context.peer()
            threading.Thread(target=read, name="psoup-ingest-reader", daemon=True).start()
            while (item := pending.get()) is not _END:
                if isinstance(item, Exception):
                    raise item
                req, fut, rows = item
                ack = self._ack(req, fut.result, rows)
                room.release()
                yield ack
        except Exception as exc:
            failed.set()
            _abort(context, exc)
        finally:
            stop.set()

    def _rejected(self, req: pb.IngestRequest, rows: int) -> None:
        # Labelled by stream only when it exists: a client must not grow the metrics.
        stream = req.stream if req.stream in self.engine.streams else "(unknown)"
        self.observer.rejected.labels(stream).inc(rows)

    def _insert(self, stream: str, columns: dict, client: str):
        """Apply one batch for ``client`` (on the engine's turn): its InsertResult."""
        self.access.require(self.engine, stream, client, WRITE)
        return self.engine.insert_columns(stream, columns)

    def _queue_full(self, req: pb.IngestRequest) -> Abort:
        return Abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"batch {req.batch_id}: the ingest queue is full "
            f"(ingest_queue_batches={self.worker.ingest_limit}); retry later",
        )

    def _ack(self, req: pb.IngestRequest, applied, rows: int) -> pb.IngestAck:
        """``applied()`` (the batch's InsertResult, once applied) acknowledged once
        durable; or Abort naming the batch."""
        try:
            res = applied()
        except PSoupError as exc:
            self._rejected(req, rows)
            raise Abort(
                status_of(exc)[0], f"batch {req.batch_id} (stream {req.stream!r}): {exc}"
            ) from None
        self._kept()
        self.metrics.ingested(res.count)
        self.observer.ingested.labels(req.stream).inc(res.count)
        self.observer.batches.labels(req.stream).inc()
        ack = pb.IngestAck(batch_id=req.batch_id, rows=res.count, matches=res.matches)
        if res.count:
            ack.first_tuple_id, ack.last_tuple_id = res.first_id, res.last_id
        return ack

    def _decode_batch(self, req: pb.IngestRequest) -> dict:
        """attribute -> values of one batch; Abort names the batch and the column."""
        where = f"batch {req.batch_id}"
        limit = self.config.max_batch_rows
        columns = {}
        for i, col in enumerate(req.columns):
            field = f"{where}: columns[{i}] {col.name!r}"
            if col.name in columns:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: attribute given twice")
            if col.null_rows:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: NULLs cannot be stored")
            values = codec.decode_column(col, f"{where}: columns[{i}]")
            if len(values) > limit:
                raise Abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{where}: {len(values)} rows exceed max_batch_rows={limit}",
                )
            columns[col.name] = values
        return columns

    # -- queries ------------------------------------------------------------------------
    def _check_text(self, text: str) -> None:
        """Abort for a query text that is empty or longer than the server takes."""
        if not text.strip():
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "text: the query text is empty")
        if len(text) > self.config.max_query_chars:
            raise Abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"text: {len(text)} characters exceed "
                f"max_query_chars={self.config.max_query_chars}",
            )

    def PrepareQuery(self, request, context):

        def run():
            client = self._client(context)
            self._check_text(request.text)

            def allow(streams):
                self.access.require_all(self.engine, streams, client, READ)

            def prepare():
                engine, limit = self.engine, self.config.max_templates
                if engine.template_count() >= limit and not engine.is_prepared(request.text):
                    raise Abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"the server holds {limit} prepared templates (max_templates={limit})",
                    )
                return engine.prepare(request.text, allow=allow)

            tpl = self.worker.call(prepare)
            self._kept()
            return pb.PrepareQueryResponse(
                template_id=tpl.id, params=list(tpl.params), streams=list(tpl.streams)
            )

        return self._unary(context, run)

    def RegisterQuery(self, request, context):

        def run():
            client = self._client(context)
            params, now = self._register_args(request)
            self._reserve(client, 1)
            try:
                spent = [0.0]
                start = time.perf_counter()
                handle, q, later = self.worker.call(
                    lambda: self._register_here(request, params, now, client, spent)
                )
                current = None
                if later is not None:
                    try:
                        current = later()  # a sharded engine's answers, waited for here
                    except BaseException:
                        self._forget(handle)
                        raise
                    self._timed_invoke(time.perf_counter() - start - spent[0])
            except BaseException:
                self._reserve(client, -1)
                raise
            # Registered: it counts even if making it durable fails below (it is there).
            self._kept()
            return self._registered(handle, q, current)

        return self._unary(context, run)

    def _register_args(self, request: pb.RegisterQueryRequest) -> tuple[dict, float | None]:
        """A registration's checks before the engine: (params, now); Abort names the
        field. O(text + params)."""
        if request.template_id:
            if request.text:
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "text: give the query's text or template_id, not both",
                )
            if not _TEMPLATE_ID.fullmatch(request.template_id):
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "template_id: expected 32 hex digits (PrepareQuery's answer), got "
                    f"{len(request.template_id)} characters",
                )
        else:
            self._check_text(request.text)
        params = {}
        for name, value in request.params.items():
            v = codec.from_value(value)
            if v is None:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"params[{name!r}]: no value set")
            params[name] = v
        if request.HasField("now") and not request.invoke:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "now: only with invoke set")
        return params, self._now_field(request)

    def _reserve(self, client: str, n: int) -> None:
        """Count ``n`` more registered queries of ``client`` (a negative ``n`` gives them
        back); RESOURCE_EXHAUSTED past ``max_queries_per_client``, nothing counted."""
        with self._lock:
            have = self._per_client[client]
            if n > 0 and have + n > self.config.max_queries_per_client:
                raise Abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"this client has {have} registered queries "
                    f"(max_queries_per_client={self.config.max_queries_per_client})",
                )
            self._per_client[client] = have + n

    def _register_here(self, request, params: dict, now, client: str, spent: list[float]):
        """On the engine thread: register the query; with ``invoke``, start its invoke in
        the same turn, so the result is the new query's over exactly the data it was
        registered over (a bad ``now`` undoes the registration). ``(handle, query,
        later or None)``; the registration's own time in ``spent[0]``."""
        t0 = time.perf_counter()

        def allow(streams):
            self.access.require_all(self.engine, streams, client, READ)

        if request.template_id:
            handle = self.engine.register_template(
                request.template_id, params, owner=client, allow=allow
            )
        else:
            handle = self.engine.register(request.text, params, owner=client, allow=allow)
        q = self.engine.queries[handle]
        spent[0] += time.perf_counter() - t0  # not the invoke's: kept out of its time
        later = None
        if request.invoke:
            try:
                later = self.engine.invoke_later(handle, now=now)
            except BaseException:
                self.engine.unregister(handle)
                raise
        with self._lock:
            self._owners[handle] = client
        return handle, q, later

    def _registered(self, handle: str, q, current: Result | None) -> pb.RegisterQueryResponse:
        """A registration's answer; its current result left out (``current_omitted``)
        when the two would not fit in a message."""
        reply = pb.RegisterQueryResponse(
            handle=handle,
            columns=_columns(q.spec),
            window=_window(q.spec),
            streams=list(dict.fromkeys(q.plan.streams)),
        )
        if current is not None:
            msg = whole_result(current)
            if msg.ByteSize() + reply.ByteSize() + 64 > self.config.max_message_bytes:
                reply.current_omitted = True
            else:
                reply.current.CopyFrom(msg)
        return reply

    def InvokeQuery(self, request, context):
        try:
            result = self._invoked(request, self._client(context))
            yield from result_pages(result, request.page_rows or self.config.page_rows)
        except Exception as exc:
            _abort(context, exc)

    def Invoke(self, request, context):
        return self._unary(
            context, lambda: self._whole(self._invoked(request, self._client(context)))
        )

    def Invokes(self, request_iterator, context):
        """One reply per request, in order: the result whole, or the status Invoke would
        have ended with (the call goes on). The client is authenticated once, at the
        call's start; an undecodable request ends the call (INVALID_ARGUMENT). At most
        ``max_invoke_calls`` are open at once (each holds a handler thread): past that,
        a new call takes the place of the one idle longest if it has been idle
        ``invoke_idle_seconds`` (that one is cancelled), else RESOURCE_EXHAUSTED before
        any request is read (psoup/server/invoke_calls.py)."""
        call = None
        try:
            client = self._client(context)
            try:
                call = self.invoke_calls.open(context)
            except CallsFull:
                raise Abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"max_invoke_calls={self.config.max_invoke_calls} Invokes calls are "
                    "open and none has been idle long enough to give its place: use "
                    "Invoke, or try again later",
                ) from None
            # Taken: a client may wait for this before its first request, so that its
            # write does not race a refusal (grpc.aio reports that race as INTERNAL).
            context.send_initial_metadata(())
            while True:
                try:
                    request = next(request_iterator, None)
                except grpc.RpcError:  # cancelled: by its client, or to make room
                    return
                if request is None or not self.invoke_calls.busy(call):
                    return
                self.turns.interactive()  # each is an interactive call's arrival
                try:
                    msg = self._whole(self._invoked(request, client))
                except Exception as exc:
                    if (status := status_of(exc)) is None:
                        raise
                    code, message = status
                    yield pb.InvokesReply(refused=pb.Refusal(code=code.value[0], message=message))
                else:
                    yield pb.InvokesReply(result=msg)
                self.invoke_calls.idle(call)
        except Exception as exc:
            _abort(context, exc)
        finally:
            if call is not None:
                self.invoke_calls.close(call)

    def _whole(self, result: Result) -> pb.InvokeQueryResponse:
        """``result`` in one message; RESOURCE_EXHAUSTED past max_message_bytes."""
        msg = whole_result(result)
        if (size := msg.ByteSize()) > self.config.max_message_bytes:
            raise Abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the result ({len(result)} rows, {size} bytes) is larger than "
                f"max_message_bytes={self.config.max_message_bytes}: take it in pages "
                "with InvokeQuery",
            )
        return msg

    def Batch(self, request, context):

        def run():
            client = self._client(context)
            items = request.items
            if not items:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "items: none given")
            if len(items) > self.config.max_batch_items:
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"items: {len(items)} items, more than max_batch_items="
                    f"{self.config.max_batch_items}",
                )
            # Every item is checked before any runs: a refused batch changes nothing.
            ops = []
            for k, item in enumerate(items):
                with _item(k):
                    kind = item.WhichOneof("op")
                    if kind == "register":
                        ops.append((item.register, *self._register_args(item.register)))
                    elif kind == "invoke":
                        self._own(client, item.invoke.handle)
                        ops.append((item.invoke, None, self._now_field(item.invoke)))
                    else:
                        raise Abort(
                            grpc.StatusCode.INVALID_ARGUMENT, "op: neither register nor invoke set"
                        )
            registers = sum(params is not None for _, params, _ in ops)
            self._reserve(client, registers)
            made: list[str] = []  # handles this call registered: undone if it fails
            try:
                spent = [0.0]
                start = time.perf_counter()
                started = self.worker.call(lambda: self._batch_here(ops, client, made, spent))
                replies, waited = [], []
                for k, (handle, q, later, queued, own) in enumerate(started):
                    with _item(k):
                        t0 = time.perf_counter()
                        current = later() if later is not None else None
                        if later is not None:
                            # An invoke's own time (a registration's too, as RegisterQuery
                            # counts it): its wait for the engine thread, its turn there
                            # and its answer, not the other items'.
                            waited.append(queued - start + own + time.perf_counter() - t0)
                        replies.append(
                            pb.BatchResponse.Reply(register=self._registered(handle, q, current))
                            if handle is not None
                            else pb.BatchResponse.Reply(invoke=whole_result(current))
                        )
                reply = pb.BatchResponse(replies=replies)
                if (size := reply.ByteSize()) > self.config.max_message_bytes:
                    raise Abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"the answers ({size} bytes) are larger than max_message_bytes="
                        f"{self.config.max_message_bytes}: send fewer items per call",
                    )
                for seconds in waited:
                    self._timed_invoke(seconds)
            except BaseException:
                for handle in made:
                    self._forget(handle)
                self._reserve(client, -registers)
                raise
            self._kept()
            return reply

        return self._unary(context, run)

    def _batch_here(self, ops: list, client: str, made: list[str], spent: list[float]) -> list:
        """On the engine thread: a Batch's items in order, each ``(handle, query, later,
        queued, own)`` (handle and query None for an invoke; ``queued`` the clock when
        the engine thread took the call, ``own`` an invoke's time on it). A refused item
        undoes the registrations made before it and raises, its message naming it."""
        started = []
        queued = time.perf_counter()
        try:
            # A sharded engine sends each shard the Batch's operations in one call.
            with self.engine.together():
                for k, (req, params, now) in enumerate(ops):
                    with _item(k):
                        if params is None:
                            t0 = time.perf_counter()
                            self.access.require_query(self.engine, req.handle)
                            later = self.engine.invoke_later(req.handle, now=now)
                            own = time.perf_counter() - t0
                            started.append((None, None, later, queued, own))
                        else:
                            t0, before = time.perf_counter(), spent[0]
                            handle, q, later = self._register_here(req, params, now, client, spent)
                            own = time.perf_counter() - t0 - (spent[0] - before)
                            made.append(handle)
                            started.append((handle, q, later, queued, own))
        except BaseException:
            for handle in made:
                self.engine.unregister(handle)
                with self._lock:
                    self._owners.pop(handle, None)
            made.clear()
            raise
        return started

    def _invoked(self, request: pb.InvokeRequest | pb.InvokeQueryRequest, client: str) -> Result:
        """The query's result for ``client``'s InvokeQuery or Invoke request, on the
        engine thread (its time recorded in the metrics); Abort names a bad field."""
        self._own(client, request.handle)
        now = self._now_field(request)
        start = time.perf_counter()

        def invoke():
            self.access.require_query(self.engine, request.handle)
            return self.engine.invoke_later(request.handle, now=now)

        # The engine thread only starts the invoke: a sharded engine's answers are
        # waited for here, while the engine thread goes on with other calls.
        result = self.worker.call(invoke)()
        self._timed_invoke(time.perf_counter() - start)
        return result

    def _timed_invoke(self, seconds: float) -> None:
        """Count one invoke that took ``seconds`` (its wait for the engine thread in it)."""
        self.metrics.invoked(seconds)
        self.observer.invoked(seconds)

    @staticmethod
    def _now_field(request) -> int | float | None:
        """A request's ``now`` (None when unset), an int when it is one; Abort when it is
        not a finite number. (Its range against the time attribute is the engine's check.)"""
        now = request.now if request.HasField("now") else None
        if now is not None and not math.isfinite(now):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "now: must be a finite number")
        if now is not None and now.is_integer() and abs(now) < 2**63:
            now = int(now)
        return now

    def _forget(self, handle: str) -> None:
        """Unregister a query this call registered but cannot answer for (its owner's
        count is the caller's to release)."""
        self.worker.call(lambda: self.engine.unregister(handle))
        with self._lock:
            self._owners.pop(handle, None)

    def Subscribe(self, request, context):
        sub = None
        try:
            client = self._client(context)
            self._own(client, request.handle)
            inbox: queue.Queue = queue.Queue()
            cap = self.config.subscription_buffer
            cut = threading.Event()

            def deliver(result, first_tid):  # on the engine thread: never blocks
                if cut.is_set():
                    return
                if isinstance(result, PSoupError):  # the result cannot be computed
                    cut.set()
                    inbox.put((_FAILED, result))
                    return
                if result is not None and self.access.enabled:
                    try:
                        self.access.require_query(self.engine, request.handle)
                    except PSoupError as exc:  # revoked: nothing more reaches the client
                        cut.set()
                        inbox.put((_FAILED, exc))
                        return
                if inbox.qsize() >= cap:
                    cut.set()
                    inbox.put(_OVERFLOW)
                    return
                inbox.put((result, first_tid))

            def start():
                self.access.require_query(self.engine, request.handle)
                current = (
                    self.engine.invoke_later(request.handle) if request.include_current else None
                )
                return current, self.engine.subscribe(request.handle, deliver)

            current, sub = self.worker.call(start)
            current = current() if current is not None else None
            context.add_callback(lambda: inbox.put(_END))
            context.send_initial_metadata((("psoup-subscribed", "1"),))
            with self._lock:
                self._subscriptions += 1
            try:
                if current is not None:
                    yield self._event(pb.SubscribeResponse.CURRENT, current, 0)
                while True:
                    item = inbox.get()
                    if item is _END:
                        return
                    if item is _OVERFLOW:
                        raise Abort(
                            grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"the subscriber fell more than subscription_buffer={cap} "
                            "messages behind",
                        )
                    result, first_tid = item
                    if result is _FAILED:
                        raise first_tid
                    if result is None:  # the query was unregistered
                        return
                    yield self._event(pb.SubscribeResponse.NEW, result, first_tid)
            finally:
                with self._lock:
                    self._subscriptions -= 1
        except Exception as exc:
            _abort(context, exc)
        finally:
            if sub is not None:
                self.worker.submit(lambda: self.engine.unsubscribe(sub))

    @staticmethod
    def _event(kind, result: Result, first_tid: int) -> pb.SubscribeResponse:
        msg = pb.SubscribeResponse(
            kind=kind,
            columns=[
                pb.ColumnInfo(name=n, type=codec.TYPE_TO_PB[t])
                for n, t in zip(result.columns, result.types, strict=True)
            ],
            data=codec.encode_result(result),
            rows=len(result),
            first_tuple_id=first_tid,
        )
        _set_time(msg, result)
        return msg

    def UnregisterQuery(self, request, context):

        def run():
            client = self._client(context)
            self._own(client, request.handle)
            self.worker.call(lambda: self.engine.unregister(request.handle))
            self._kept()
            with self._lock:
                owner = self._owners.pop(request.handle, client)
                self._per_client[owner] -= 1
            return pb.UnregisterQueryResponse()

        return self._unary(context, run)

    def DescribeQuery(self, request, context):

        def run():
            client = self._client(context)
            self._own(client, request.handle)
            q: Query = self.worker.call(lambda: self.engine.describe(request.handle))
            return pb.QueryInfo(
                handle=q.handle,
                text=q.text,
                params={k: codec.to_value(v) for k, v in q.params.items()},
                columns=_columns(q.spec),
                window=_window(q.spec),
                streams=list(dict.fromkeys(q.plan.streams)),
                registered_at=q.registered_at,
                invocations=q.invocations,
            )

        return self._unary(context, run)

    # -- stats --------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """The engine's figures the metrics read at each scrape; on the engine thread.
        O(streams)."""
        db = self.engine
        return {
            "queue_depth": self.worker.queue_depth,
            "subscriptions": self._subscriptions,
            "invoke_calls": len(self.invoke_calls),
            "invoke_calls_taken_over": self.invoke_calls.taken_over,
            "queries": len(db.queries),
            "matches_marked": db.matches_marked,
            "ingest_paused_seconds": self.turns.paused,
            "streams": db.stream_figures(),
            "shards": db.shard_status(),
        }

    def Stats(self, request, context):
        def run():
            client = self._client(context)
            sees_all = not self.auth.enabled or client in self.access.admins

            def gather():
                if not request.busiest_queries:
                    return self.engine.stats_later(), []
                mine = (q for q in self.engine.queries.values() if sees_all or q.owner == client)
                top = heapq.nlargest(BUSIEST, mine, key=lambda q: q.invocations)
                return self.engine.stats_later(), [
                    pb.QueryStats(handle=q.handle, text=q.text, invocations=q.invocations,
                                  owner=q.owner or "")
                    for q in top if q.invocations
                ]  # fmt: skip

            stats, busiest = self.worker.call(gather)
            stats = stats()  # a sharded engine's shards answer here, not on the engine thread
            p50, p90, p99, n = self.metrics.latency_ms()
            out = pb.StatsResponse(
                strategy=stats["strategy"],
                queries=stats["queries"],
                matches_marked=stats["matches_marked"],
                ingest_rate=self.metrics.ingest_rate(),
                invoke_latency=pb.LatencyPercentiles(p50_ms=p50, p90_ms=p90, p99_ms=p99, count=n),
                queue_depth=self.worker.queue_depth,
                memory_bytes=rss_bytes(),
                subscriptions=self._subscriptions,
                invoke_calls=len(self.invoke_calls),
            )
            for name, s in sorted(stats["streams"].items()):
                out.streams.append(
                    pb.StreamStats(
                        name=name,
                        tuples_stored=s["tuples_stored"],
                        tuples_ingested=s["tuples_ingested"],
                        bytes=s["bytes"],
                        indexed_blocks=s["indexed_blocks"],
                        query_entries=s["query_entries"],
                    )
                )
            out.busiest_queries.extend(busiest)
            for sh in stats.get("shards", ()):
                out.shards.append(
                    pb.ShardStats(
                        index=sh["index"], state=sh["state"], node=sh.get("node", ""),
                        pid=sh.get("pid", 0), tuples_stored=sh.get("tuples", 0),
                        queries=sh.get("queries", 0), memory_bytes=sh.get("rss_bytes", 0),
                        restarts=sh["restarts"], last_op=sh.get("last_op", 0),
                    )
                )  # fmt: skip
            return out

        return self._unary(context, run)

    # -- bulk loads and reads -----------------------------------------------------------
    def _load(self, client: str, load_id: str, pop: bool = False):
        if not load_id:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "load_id: required")
        try:
            load = self.loads.get(load_id)
            if load.client != client:
                raise Abort(
                    grpc.StatusCode.PERMISSION_DENIED, "load_id: the load belongs to another client"
                )
            return self.loads.pop(load_id) if pop else load
        except UnknownLoad:
            raise Abort(grpc.StatusCode.NOT_FOUND, "load_id: unknown load") from None

    def BeginLoad(self, request, context):
        def run():
            client = self._client(context)
            schema = self.worker.call(
                lambda: self.access.require(self.engine, request.stream, client, WRITE).schema
            )
            load = self.loads.begin(request.stream, schema, client)
            return pb.BeginLoadResponse(load_id=load.load_id)

        return self._unary(context, run)

    def LoadBatches(self, request_iterator, context):
        def run():
            client = self._client(context)
            held: list = []  # this call's Staging, once its first request names the load
            try:
                for req in request_iterator:
                    if not held:
                        held.append(self._load(client, req.load_id).staging(req.part))
                        first = (req.load_id, req.part)
                    elif (req.load_id, req.part) != first:
                        raise Abort(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            f"batch {req.batch_id}: every request of a LoadBatches call "
                            "names the load_id and part of the first",
                        )
                    self._stage(held[0], req)
            except BaseException:
                if held:  # nothing of a failed call stays staged, nor counts
                    held[0].discard()
                raise
            if not held:
                return pb.LoadBatchesResponse()
            # Only a call that got to its end stages anything (a cancelled one raised above).
            staging = held[0]
            replaced = staging.done()
            return pb.LoadBatchesResponse(
                batches=staging.batches, rows=staging.rows, replaced=replaced
            )

        return self._unary(context, run)

    def _stage(self, staging, req: pb.LoadBatchRequest) -> None:
        """Validate one LoadBatches request and stage it; Abort names the batch."""
        columns = self._decode_batch(req)
        try:
            staging.add(columns)
        except PSoupError as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"batch {req.batch_id}: {exc}") from None
        except BudgetExceeded as exc:
            raise Abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"batch {req.batch_id}: {exc} (server option --max-staged-bytes)",
            ) from None

    def CommitLoad(self, request, context):
        def run():
            client = self._client(context)
            load = self._load(client, request.load_id, pop=True)
            # The staged batches are freed by now; give their heap pages back before the
            # commit allocates the new storage, or the peak holds both.
            box = [load.take_columns()]
            load.release()
            release_free_memory()

            def apply():
                # Popped, so no closure or queue entry keeps the columns once applied.
                columns = box.pop()
                self.access.require(self.engine, load.stream, client, WRITE)
                return self.engine.replace_contents(load.stream, columns)

            res = self.worker.call(apply)
            self._kept()
            release_free_memory()
            out = pb.CommitLoadResponse(rows=res.count)
            if res.count:
                out.first_tuple_id, out.last_tuple_id = res.first_id, res.last_id
            return out

        return self._unary(context, run)

    def AbortLoad(self, request, context):
        def run():
            client = self._client(context)
            self._load(client, request.load_id, pop=True).release()
            return pb.AbortLoadResponse()

        return self._unary(context, run)

    def Backup(self, request, context):
        def run():
            client = self._client(context)
            if self.access.enabled and client not in self.access.admins:
                raise Abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    "a backup copies every stream: only an admin (named in the tokens file) "
                    "may start one",
                )
            if self.storage is None:
                raise Abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "this server keeps no data directory (--in-memory): nothing to back up",
                )
            dest = request.directory
            if not dest or not os.path.isabs(dest):
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"directory: an absolute path on the server is needed, not {dest!r}",
                )
            start = time.perf_counter()
            try:
                lsn, size = self.storage.backup(Path(dest))
            except ValueError as exc:
                raise Abort(grpc.StatusCode.FAILED_PRECONDITION, f"directory: {exc}") from None
            except OSError as exc:
                code = (grpc.StatusCode.RESOURCE_EXHAUSTED if exc.errno == errno.ENOSPC
                        else grpc.StatusCode.FAILED_PRECONDITION)  # fmt: skip
                raise Abort(code, f"directory: {exc}") from None
            return pb.BackupResponse(
                directory=dest, lsn=lsn, bytes=size, seconds=time.perf_counter() - start
            )

        return self._unary(context, run)

    def ReadStream(self, request, context):
        try:
            client = self._client(context)
            parts = request.parts or 1
            if request.part >= parts:
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"part: {request.part} is not below parts={parts}",
                )
            page = request.page_rows or 65_536

            def snapshot():
                st = self.access.require(self.engine, request.stream, client, READ)
                cols = self.engine.read_part(request.stream, request.part, parts)
                return st.schema.names, st.schema.types, cols

            names, types, cols = self.worker.call(snapshot)
            n = len(cols[0]) if cols else 0
            for a in range(0, n, page):
                yield pb.ReadStreamResponse(
                    columns=[
                        codec.encode_column(name, t, c[a : a + page])
                        for name, t, c in zip(names, types, cols, strict=True)
                    ],
                    rows=min(page, n - a),
                )
        except Exception as exc:
            _abort(context, exc)
