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
_IOV_MAX = 1024  # the most parts one sendmsg/recvmsg_into takes (Linux)


def attach(conn) -> socket.socket:
    """The socket of an authenticated ``multiprocessing`` connection (which is closed),
    with TCP_NODELAY: a message goes out in several writes, and Nagle's algorithm would
    hold the later ones back for the peer's delayed ACK."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    conn.close()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def send(sock: socket.socket, obj: object) -> None:
    """Send ``obj``: one ``sendmsg`` of the header, the pickle and every column (a
    system call per part cost ~2 us each more). O(its bytes), the columns not copied."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    sizes = [len(head), *(r.nbytes for r in raws)]
    header = _COUNT.pack(len(sizes)) + struct.pack(f"<{len(sizes)}Q", *sizes)
    _move(sock.sendmsg, [memoryview(header + head), *(r for r in raws if r.nbytes)])


def recv(sock: socket.socket) -> object:
    """The next message; raises EOFError when the peer closed the connection."""
    (count,) = _COUNT.unpack(_exact(sock, _COUNT.size))
    sizes = struct.unpack(f"<{count}Q", _exact(sock, 8 * count))
    parts = [bytearray(n) for n in sizes]
    _move(_received(sock), [memoryview(b) for b in parts if b])
    return pickle.loads(parts[0], buffers=parts[1:])


def _received(sock: socket.socket):
    """``recvmsg_into`` as a count of bytes, raising EOFError at the end of the
    connection."""

    def into(views: list[memoryview]) -> int:
        got = sock.recvmsg_into(views)[0]
        if not got:
            raise EOFError("the connection was closed")
        return got

    return into


def _move(call, views: list[memoryview]) -> None:
    """Call ``call(views)`` (a scatter/gather send or receive that returns how many
    bytes it moved) until every view is done: one system call when the socket takes or
    holds it all."""
    while views:
        done = call(views[:_IOV_MAX])
        while done:
            n = views[0].nbytes
            if done >= n:
                done -= n
                views.pop(0)
            else:
                views[0] = views[0][done:]
                done = 0


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
