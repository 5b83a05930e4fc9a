"""The shard wire over a real loopback TCP connection: messages come back equal, with
columns large enough that one ``sendmsg`` or ``recvmsg_into`` moves only part of them,
empty columns, and values pickled in band."""

from __future__ import annotations

import socket
import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from psoup.shard import wire


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
    for s in (a, b):
        s.settimeout(60)  # a lost or misread part fails the test instead of hanging it
    return a, b


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(("int64", "float64", "int32")), st.integers(0, 1 << 20)),
        max_size=5,
    ),
    st.lists(st.text(max_size=5), max_size=3),
)
def test_messages_arrive_whole_and_in_order(columns, texts) -> None:
    a, b = _pair()
    rng = np.random.default_rng(len(columns))
    msgs = [
        ("insert", {f"c{i}": rng.integers(-5, 5, n).astype(d) for i, (d, n) in enumerate(columns)},
         np.array(texts, dtype=object)),
        ("ping", len(texts)),
    ]  # fmt: skip
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(wire.recv(b) for _ in msgs))
    reader.start()
    try:
        for m in msgs:
            wire.send(a, m)
        reader.join()
    finally:
        a.close()
        b.close()
    (op, cols, objs), ping = got
    assert op == "insert" and ping == ("ping", len(texts))
    assert cols.keys() == msgs[0][1].keys()
    for name, col in msgs[0][1].items():
        assert cols[name].dtype == col.dtype and np.array_equal(cols[name], col)
    assert objs.tolist() == texts


def test_a_closed_connection_ends_the_reader() -> None:
    a, b = _pair()
    a.close()
    try:
        wire.recv(b)
    except EOFError:
        pass
    else:
        raise AssertionError("recv returned on a closed connection")
    finally:
        b.close()
