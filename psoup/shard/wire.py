"""Messages between the front-end and a shard over a socket: pickle protocol 5 with the
numpy columns out of band, so a column is sent from its own memory and received straight
into the buffer the unpickled array then uses (no copy through a pickle stream or a
``multiprocessing`` byte buffer on either side).

A message is ``<count u32><size u64 x count>``, the pickle's bytes, then each buffer.
The connection is authenticated first by ``multiprocessing.connection`` (its HMAC
handshake with a key the shard gives through Ray); ``attach`` then takes the socket over.
"""

from __future__ import annotations

import os
import pickle
import select
import socket
import struct

_COUNT = struct.Struct("<I")


def attach(conn) -> socket.socket:
    """The socket of an authenticated ``multiprocessing`` connection (which is closed),
    with TCP_NODELAY: a message goes out in several writes, and Nagle's algorithm would
    hold the later ones back for the peer's delayed ACK."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    conn.close()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def send(sock: socket.socket, obj: object) -> None:
    """Send ``obj``. O(its bytes), the columns not copied."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    sizes = [len(head), *(r.nbytes for r in raws)]
    sock.sendall(_COUNT.pack(len(sizes)) + struct.pack(f"<{len(sizes)}Q", *sizes) + head)
    for r in raws:
        sock.sendall(r)


def recv(sock: socket.socket) -> object:
    """The next message; raises EOFError when the peer closed the connection."""
    (count,) = _COUNT.unpack(_exact(sock, _COUNT.size))
    sizes = struct.unpack(f"<{count}Q", _exact(sock, 8 * count))
    head = _exact(sock, sizes[0])
    buffers = [_exact(sock, n) for n in sizes[1:]]
    return pickle.loads(head, buffers=buffers)


def ready(sock: socket.socket, timeout: float) -> bool:
    """Whether a message (or the end of the connection) is waiting to be read."""
    return bool(select.select([sock], [], [], timeout)[0])


def _exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    while view:
        got = sock.recv_into(view)
        if not got:
            raise EOFError("the connection was closed")
        view = view[got:]
    return buf
