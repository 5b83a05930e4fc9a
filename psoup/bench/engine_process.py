"""The other design, at its leanest: gRPC in one process, the engine in another.

``psoup bench grpc`` compares the server with the engine in-process. The server's gRPC
threads and its engine thread share one interpreter, and so one interpreter lock; two of
issue #19's targets are out of reach that way on this machine (docs/BENCHMARKS.md, the
gRPC reading). The design that frees the engine from gRPC's threads puts it in a process
of its own. This module measures what that design would give before anyone builds it.

The front is a byte pump: a gRPC server with two methods, ``Ingest`` and ``Invoke``, whose
requests it does not even decode. Each request's bytes go over one pipe to the engine
child, which decodes them (protobuf, then np.frombuffer for the columns), runs the engine
and sends back the answer's bytes (an ingest batch's counts, an invoke's encoded
``InvokeQueryResponse``), which the front hands to gRPC as they are. The child runs one
thing at a time: invokes before the ingest batches waiting (as the server's engine
thread runs calls first), each kind in the order it came. Nothing else is done on the
way (no validation, access checks, durability, metrics, turns), so what the front
measures bounds the design from above; it is a measuring device, not a server.

Costs per request of b bytes: two copies of b through the pipe (the front's write, the
child's read) and one protobuf decode in the child, O(b) in C; O(1) Python steps on each
side beyond the engine's own work.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import queue
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent import futures
from concurrent.futures import Future
from contextlib import contextmanager
from multiprocessing.connection import Connection

import grpc

import psoup
from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.server.app import SERVICE
from psoup.server.servicer import INGEST_DEPTH, whole_result

#: What a message to the child asks for: its first byte.
INGEST, INVOKE, STATS, STOP = b"I", b"Q", b"S", b"X"
_ID = struct.Struct("<q")  # the request's number, on the way there and back
_COUNTS = struct.Struct("<qq")  # an ingest batch's rows and matches
_STATS = struct.Struct("<dq")  # the child's CPU seconds, the tuples it has ingested

#: What the engine child is set up with: it is given the engine and returns whatever the
#: bench needs back (say the handles of the queries it registered). Picklable.
Setup = Callable[[psoup.Engine], object]


def _answer(db: psoup.Engine, kind: bytes, body: bytes) -> bytes:
    """The child's answer to one request. O(the engine's work + the bytes)."""
    if kind == INGEST:
        req = pb.IngestRequest.FromString(body)
        columns = {c.name: codec.decode_column(c) for c in req.columns}
        res = db.insert_columns(req.stream, columns)
        return _COUNTS.pack(res.count, res.matches)
    if kind == INVOKE:
        result = db.invoke(pb.InvokeRequest.FromString(body).handle)
        return whole_result(result).SerializeToString()
    ingested = sum(s["tuples_ingested"] for s in db.stats()["streams"].values())
    return _STATS.pack(time.process_time(), ingested)


def _engine_main(conn: Connection, setup: Setup) -> None:
    """The child: an engine set up by ``setup`` (whose return value it sends first),
    then answering requests one at a time until the pipe closes. Before each, it takes
    in whatever has arrived, and runs invokes and stats before ingest batches (as the
    server's engine thread runs calls before batches), each kind in arrival order."""
    db = psoup.connect()
    conn.send(setup(db))
    batches: deque[bytes] = deque()
    urgent: deque[bytes] = deque()
    while True:
        while not (urgent or batches) or conn.poll(0):
            try:
                msg = conn.recv_bytes()
            except EOFError:  # the front is gone
                return
            if msg[:1] == STOP:  # the front's reader then sees the pipe close
                return
            (batches if msg[:1] == INGEST else urgent).append(msg)
        msg = urgent.popleft() if urgent else batches.popleft()
        head = 1 + _ID.size
        conn.send_bytes(msg[1:head] + _answer(db, msg[:1], msg[head:]))


class Front:
    """The front's side of the pipe: sends requests from any thread, and one reader
    thread hands each answer to the future of its request."""

    def __init__(self, conn: Connection, child, ready: object = None):
        self.conn = conn
        self.child = child  # the engine's process
        self.port = 0  # the gRPC front's, once it is serving
        self.ready = ready  # what the child's setup returned
        self._send = threading.Lock()
        self._waiting: dict[int, Future] = {}
        self._gone = False  # the child's end closed: no more answers come
        self._ids = itertools.count()
        threading.Thread(target=self._read, name="front-answers", daemon=True).start()

    def ask(self, kind: bytes, body: bytes) -> Future:
        """Send one request; its future gets the answer's bytes. O(len(body))."""
        fut: Future = Future()
        with self._send:
            if self._gone:
                raise ConnectionError("the engine child is gone")
            k = next(self._ids)
            self._waiting[k] = fut
            self.conn.send_bytes(b"".join([kind, _ID.pack(k), body]))
        return fut

    def _read(self) -> None:
        while True:
            try:
                msg = self.conn.recv_bytes()
            except (EOFError, OSError):  # the child or the pipe is gone
                with self._send:
                    self._gone = True
                for fut in self._waiting.values():
                    fut.set_exception(ConnectionError("the engine child is gone"))
                return
            (k,) = _ID.unpack_from(msg)
            self._waiting.pop(k).set_result(msg[_ID.size :])

    def stats(self) -> tuple[float, int]:
        """The engine child's CPU seconds (user + system) so far and the tuples it has
        ingested, answered in turn after what was sent before."""
        return _STATS.unpack(self.ask(STATS, b"").result())

    # -- the two gRPC methods, on bytes --------------------------------------------------
    def ingest(self, requests: Iterator[bytes], context) -> Iterator[bytes]:
        """Each batch forwarded as it arrives (by a thread of this call), each acked with
        the child's counts in order."""
        sent: queue.Queue[Future | None] = queue.Queue()  # None: the call's last batch
        # As many batches in flight as the server allows a call: an invoke then waits
        # behind the batch being applied, not behind a pipe full of them.
        room = threading.Semaphore(INGEST_DEPTH)

        def forward() -> None:
            try:
                for body in requests:
                    room.acquire()
                    sent.put(self.ask(INGEST, body))
            except grpc.RpcError:  # the client went away (the bench kills its ingester)
                pass
            sent.put(None)

        threading.Thread(target=forward, name="front-forward", daemon=True).start()
        for k in itertools.count():
            if (fut := sent.get()) is None:
                return
            rows, matches = _COUNTS.unpack(fut.result())
            room.release()
            yield pb.IngestAck(batch_id=k, rows=rows, matches=matches).SerializeToString()

    def invoke(self, body: bytes, context) -> bytes:
        return self.ask(INVOKE, body).result()

    def handler(self) -> grpc.GenericRpcHandler:
        """The front's service: Ingest and Invoke on undecoded bytes."""
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Ingest": grpc.stream_stream_rpc_method_handler(self.ingest),
                "Invoke": grpc.unary_unary_rpc_method_handler(self.invoke),
            },
        )


@contextmanager
def front(setup: Setup, max_message_bytes: int = 64 << 20):
    """Start an engine child set up by ``setup`` and a gRPC front for it on a free
    loopback port; yields the ``Front`` (``ready`` holds what ``setup`` returned), and
    stops both after."""
    ctx = mp.get_context("spawn")  # no fork of a process that has gRPC's threads
    mine, theirs = ctx.Pipe()
    child = ctx.Process(target=_engine_main, args=(theirs, setup), daemon=True)
    child.start()
    theirs.close()
    server = None
    try:
        ready = mine.recv()
        f = Front(mine, child, ready=ready)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=32),
            options=[("grpc.max_receive_message_length", max_message_bytes)],
        )
        server.add_generic_rpc_handlers((f.handler(),))
        f.port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        yield f
    finally:
        if server is not None:
            server.stop(grace=None)
        with contextlib.suppress(OSError):  # else the child is gone already
            mine.send_bytes(STOP)
        # The pipe is closed once the child has gone: the answers' reader then sees the
        # end of it, not a connection closed under its feet.
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
            child.join()
        mine.close()
