"""The transport alone: gRPC's threaded server taking ingest batches to no engine.

``psoup bench grpc`` compares ingest through the server with the engine in-process. What
the server adds is gRPC's transport (its C threads reading the socket, its polling
thread, the call's thread, protobuf decoding) and the server's own steps. This module
measures the first part on its own: a gRPC server built as psoup's is (``grpc.server``
on a thread pool, the same message limit) with one method, ``Ingest``, which decodes each
batch's columns as the server does (``codec.decode_column``: protobuf, then
np.frombuffer) and acks it with its row count, and does nothing else. No engine, no
checks, durability or metrics.

What it costs per batch in CPU (this process's, all threads: gRPC's C threads too) and
what the client spends sending it bound the server from below: ingest through gRPC cannot
cost less than the transport plus the engine. ``psoup bench grpc`` turns that into a
ceiling on the gRPC / in-process ratio for the machine it runs on. A measuring device, not
a server.

Costs per batch of b bytes: one protobuf decode and one np.frombuffer per column, O(b) in
C; O(1) Python steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager

import grpc

from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.server.app import SERVICE
from psoup.server.config import ServerConfig


def _ingest(requests: Iterator[pb.IngestRequest], context) -> Iterator[pb.IngestAck]:
    """Each batch decoded and acked with its rows (the first column's length), in order."""
    for req in requests:
        columns = [codec.decode_column(c) for c in req.columns]
        yield pb.IngestAck(batch_id=req.batch_id, rows=len(columns[0]) if columns else 0)


@contextmanager
def front(config: ServerConfig | None = None) -> Iterator[int]:
    """A transport-only gRPC server on a free loopback port, with the thread pool and
    message limit of ``config`` (the server's defaults); yields its port and stops it
    after."""
    config = config or ServerConfig()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.workers),
        options=[
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.max_send_message_length", config.max_message_bytes),
        ],
    )
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Ingest": grpc.stream_stream_rpc_method_handler(
                _ingest,
                request_deserializer=pb.IngestRequest.FromString,
                response_serializer=pb.IngestAck.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None)
