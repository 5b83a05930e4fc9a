"""A third design, at its leanest: one asyncio event loop receives, runs the engine, answers.

``psoup bench grpc`` compares the server with the engine in-process. The server is gRPC's
threaded server: each ingest batch passes through gRPC's polling thread, the call's reader
thread, the engine thread and the call's ack thread, each a hand-off of the interpreter
lock (docs/BENCHMARKS.md, the gRPC reading). engine_process.py measures the design that
moves the engine to a process of its own; this module measures the one that removes the
hand-offs instead: a ``grpc.aio`` server whose one event loop thread decodes each request,
runs the engine on it right there and sends the answer. gRPC's own completion queue is
polled by its C threads, which do not hold the interpreter lock, so that thread is the
only Python thread a request passes through.

Two methods, ``Ingest`` and ``Invoke``, with gRPC's protobuf decoding; nothing else is done
on the way (no validation, access checks, durability, metrics, turns, no priority of
invokes over batches: the loop takes the calls in the order their messages arrive). What
it measures bounds the design from above; it is a measuring device, not a server.

Costs per request: one protobuf decode and one np.frombuffer per column (O(bytes) in C),
O(1) Python steps beyond the engine's own work, no thread hand-off.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import contextmanager

import grpc

import psoup
from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.bench.engine_process import Setup
from psoup.server.app import SERVICE
from psoup.server.servicer import whole_result


class Front:
    """The engine and the event loop's server that runs it; the engine is touched only
    on the loop's thread once the loop runs."""

    def __init__(self, db: psoup.Engine, ready: object = None):
        self.db = db
        self.port = 0  # once it is serving
        self.ready = ready  # what the setup returned
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Event | None = None

    # -- the two gRPC methods, run on the loop ---------------------------------------
    async def ingest(self, requests: AsyncIterator[pb.IngestRequest], context):
        """Each batch applied as it arrives and acked with its counts."""
        async for req in requests:
            columns = {c.name: codec.decode_column(c) for c in req.columns}
            res = self.db.insert_columns(req.stream, columns)
            yield pb.IngestAck(batch_id=req.batch_id, rows=res.count, matches=res.matches)

    async def invoke(self, request: pb.InvokeRequest, context) -> pb.InvokeQueryResponse:
        return whole_result(self.db.invoke(request.handle))

    async def _stats(self) -> tuple[float, int]:
        ingested = sum(s["tuples_ingested"] for s in self.db.stats()["streams"].values())
        return time.thread_time(), ingested

    def stats(self) -> tuple[float, int]:
        """The loop thread's CPU seconds so far (gRPC's Python and the engine's work) and
        the tuples ingested, answered in turn on the loop."""
        return asyncio.run_coroutine_threadsafe(self._stats(), self._loop).result()

    def _handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Ingest": grpc.stream_stream_rpc_method_handler(
                    self.ingest,
                    request_deserializer=pb.IngestRequest.FromString,
                    response_serializer=pb.IngestAck.SerializeToString,
                ),
                "Invoke": grpc.unary_unary_rpc_method_handler(
                    self.invoke,
                    request_deserializer=pb.InvokeRequest.FromString,
                    response_serializer=pb.InvokeQueryResponse.SerializeToString,
                ),
            },
        )

    async def _serve(self, started: threading.Event, failed: list, max_message_bytes: int):
        try:
            server = grpc.aio.server(
                options=[("grpc.max_receive_message_length", max_message_bytes)]
            )
            server.add_generic_rpc_handlers((self._handler(),))
            self.port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            self._loop = asyncio.get_running_loop()
            self._done = asyncio.Event()
        except BaseException as exc:
            failed.append(exc)
            raise
        finally:
            started.set()
        await self._done.wait()
        await server.stop(None)

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._done.set)


@contextmanager
def front(setup: Setup, max_message_bytes: int = 64 << 20):
    """An engine set up by ``setup`` (in this thread) and an asyncio gRPC front for it on
    a free loopback port, its loop on a thread of its own; yields the ``Front``
    (``ready`` holds what ``setup`` returned), and stops both after."""
    db = psoup.connect()
    try:
        f = Front(db, ready=setup(db))
        started, failed = threading.Event(), []
        thread = threading.Thread(
            target=asyncio.run,
            args=(f._serve(started, failed, max_message_bytes),),
            name="asyncio-front",
            daemon=True,
        )
        thread.start()
        started.wait()
        if failed:
            thread.join()
            raise RuntimeError(f"the asyncio front did not start: {failed[0]}")
        try:
            yield f
        finally:
            f._stop()
            thread.join()
    finally:
        db.close()
