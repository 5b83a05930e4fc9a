"""Streams belong to the client that created them: every call that reads, writes or
manages a stream is refused (PERMISSION_DENIED naming the stream and the right) without
the right, and changes nothing; grants give the right, revokes take it back (and stop the
queries registered with it), admins may do everything, and all of it survives a SIGKILL.

A real server on a loopback port with a tokens file, through the client library.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from clients import PSoupClient
from clients.errors import NotFound, PermissionDenied
from psoup.server import ServerConfig, start_server
from psoup.server.auth import load_tokens
from psoup.server.process import ServerProcess

TOKENS = "alice:a-secret\nbob:b-secret\ncarol:c-secret\nadmin root:r-secret\n"
SCHEMA = {"k": "int", "t": "int"}


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("auth") / "tokens"
    path.write_text(TOKENS)
    return path


@pytest.fixture(scope="module")
def server(tokens: Path):
    srv = start_server(ServerConfig(port=0, auth_tokens_file=str(tokens)))
    yield srv
    srv.stop(grace=1)


def _client(port: int, token: str) -> PSoupClient:
    return PSoupClient(f"127.0.0.1:{port}", token=token, timeout=10)


@pytest.fixture(scope="module")
def clients(server):
    cs = {n: _client(server.port, f"{n[0]}-secret") for n in ("alice", "bob", "carol", "root")}
    yield cs
    for c in cs.values():
        c.close()


_names = iter(range(10**6))


def _state(c: PSoupClient, name: str) -> tuple:
    """What a denied call must leave as it was."""
    info = c.describe_stream(name)
    rows = sorted(map(tuple, _rows(c, name)))
    return info.tuples_stored, info.tuples_ingested, info.queries, info.grants, rows


def _rows(c: PSoupClient, name: str) -> list[list]:
    out = []
    for page in c.read_stream(name):
        out += list(zip(*(page[a] for a in SCHEMA), strict=True))
    return out


def _load(c: PSoupClient, name: str) -> None:
    load = c.begin_load(name)
    c.load_batches(load, name, [{"k": [7], "t": [100]}])
    c.commit_load(load)


# Each call, the right it needs on stream s (t is a second stream bob may always read).
CALLS: dict[str, tuple[str, Callable[[PSoupClient, str, str], object]]] = {
    "register": ("read", lambda c, s, t: c.register(f"SELECT * FROM {s} BEGIN 0 END NOW")),
    "register a join": (
        "read",
        lambda c, s, t: c.register(
            f"SELECT * FROM {s} AS x, {t} AS y WHERE x.k = y.k BEGIN 0 END NOW"
        ),
    ),
    "read_stream": ("read", lambda c, s, t: _rows(c, s)),
    "ingest": ("write", lambda c, s, t: c.insert(s, [(1, 50)])),
    "bulk load": ("write", lambda c, s, t: _load(c, s)),
    "drop": ("owner", lambda c, s, t: c.drop_stream(s)),
    "grant": ("owner", lambda c, s, t: c.grant(s, "carol", "read")),
    "revoke": ("owner", lambda c, s, t: c.revoke(s, "alice", "read")),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_each_call_needs_its_right_and_a_denial_changes_nothing(clients, call) -> None:
    alice, bob = clients["alice"], clients["bob"]
    right, fn = CALLS[call]
    s, t = f"s{next(_names)}", f"t{next(_names)}"
    alice.create_stream(s, SCHEMA, time="t")
    alice.insert(s, [(1, 10), (2, 20)])
    bob.create_stream(t, SCHEMA, time="t")
    assert alice.describe_stream(s).owner == "alice"
    others = [r for r in ("read", "write") if r != right]
    for held in ([], others):  # nothing, then every right but the one needed
        for r in held:
            alice.grant(s, "bob", r)
        before = _state(alice, s)
        with pytest.raises(PermissionDenied) as err:
            fn(bob, s, t)
        assert f"stream {s!r}" in err.value.message
        assert (f"no {right} right" if right != "owner" else "only its owner 'alice'") in (
            err.value.message
        )
        assert _state(alice, s) == before
    if right != "owner":
        alice.grant(s, "bob", right)
        fn(bob, s, t)  # now it is allowed
    fn(clients["root"], s, t)  # an admin may do it all along


def test_a_revoke_stops_the_queries_and_subscriptions_registered_with_the_right(
    clients,
) -> None:
    alice, bob = clients["alice"], clients["bob"]
    s = f"s{next(_names)}"
    alice.create_stream(s, SCHEMA, time="t")
    alice.grant(s, "bob", "read")
    h = bob.register(f"SELECT k FROM {s} BEGIN 0 END NOW")
    alice.insert(s, [(1, 10)])
    assert bob.invoke(h).rows == [(1,)]
    sub = bob.subscribe(h, include_current=True)
    assert next(sub)[0] == "current"
    alice.insert(s, [(2, 20)])
    assert next(sub)[1].rows == [(2,)]
    info = alice.revoke(s, "bob", "read")
    assert info.grants == {}
    alice.insert(s, [(3, 30)])  # must not reach bob
    with pytest.raises(PermissionDenied) as err:
        next(sub)
    assert "no longer has the read right" in err.value.message
    with pytest.raises(PermissionDenied):
        bob.invoke(h)
    with pytest.raises(PermissionDenied):
        bob.subscribe(h).__next__()
    assert bob.describe_query(h).handle == h  # still his, and he may unregister it
    alice.grant(s, "bob", "read")
    assert bob.invoke(h).rows == [(1,), (2,), (3,)]  # readable again: the stream is
    bob.unregister(h)
    with pytest.raises(NotFound):
        bob.invoke(h)


def test_a_grant_names_a_right_and_a_stream(clients) -> None:
    alice = clients["alice"]
    s = f"s{next(_names)}"
    alice.create_stream(s, SCHEMA, time="t")
    with pytest.raises(Exception, match="right: 'admin' is not one of read, write"):
        alice.grant(s, "bob", "admin")
    with pytest.raises(NotFound, match="nope"):
        alice.grant("nope", "bob", "read")
    assert alice.grant(s, "bob", "write").grants == {"bob": ("write",)}
    assert alice.grant(s, "bob", "read").grants == {"bob": ("read", "write")}
    assert alice.grant(s, "bob", "read").grants == {"bob": ("read", "write")}  # idempotent


def test_only_an_admin_backs_up_and_manages_streams_without_an_owner(
    clients, tmp_path: Path
) -> None:
    with pytest.raises(PermissionDenied, match="only an admin"):
        clients["alice"].backup(str(tmp_path / "copy"))
    assert not (tmp_path / "copy").exists()


def test_the_tokens_file_names_admins_and_refuses_repeats(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_text("# ids\nalice:x\nadmin ops:y\n")
    assert load_tokens(str(f)) == ({"x": "alice", "y": "ops"}, frozenset({"ops"}))
    for text, message in (
        ("alice:x\nalice:y\n", "client id 'alice' repeated"),
        ("alice:x\nbob:x\n", "token repeated"),
        ("al ice:x\n", "letters, digits"),
        ("alice:x\u00e9\n", "printable ASCII"),
        ("alice\n", "expected client-id:token"),
    ):
        f.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_tokens(str(f))
    f.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match=f"{f}: not a text file"):
        load_tokens(str(f))


def test_tokens_in_clear_off_loopback_are_refused(tokens: Path) -> None:
    with pytest.raises(ValueError, match=r"not a loopback address.*--insecure"):
        start_server(ServerConfig(host="0.0.0.0", port=0, auth_tokens_file=str(tokens)))
    srv = start_server(
        ServerConfig(host="0.0.0.0", port=0, auth_tokens_file=str(tokens), insecure=True)
    )
    srv.stop(grace=0)
    cmd = [sys.executable, "-m", "psoup", "serve", "--host", "0.0.0.0", "--port", "0",
           "--in-memory", "--auth-tokens", str(tokens)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.startswith("error: --auth-tokens without TLS on 0.0.0.0")
    assert "Traceback" not in out.stderr


def test_owners_and_grants_survive_a_sigkill(tokens: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    args = ("--auth-tokens", str(tokens))
    with ServerProcess(*args, data_dir=data) as srv:
        port = int(srv.target.rsplit(":", 1)[1])
        with _client(port, "a-secret") as alice, _client(port, "b-secret") as bob:
            alice.create_stream("s", SCHEMA, time="t")
            alice.grant("s", "bob", "read")
            alice.grant("s", "bob", "write")
            alice.grant("s", "carol", "read")
            h = bob.register("SELECT k FROM s BEGIN 0 END NOW")
            bob.insert("s", [(1, 10)])
            alice.revoke("s", "bob", "write")
        srv.proc.kill()
        srv.proc.wait()
    with ServerProcess(*args, data_dir=data) as srv:
        port = int(srv.target.rsplit(":", 1)[1])
        with _client(port, "a-secret") as alice, _client(port, "b-secret") as bob:
            info = alice.describe_stream("s")
            assert (info.owner, info.grants) == ("alice", {"bob": ("read",), "carol": ("read",)})
            assert bob.invoke(h).rows == [(1,)]
            with pytest.raises(PermissionDenied, match="no write right"):
                bob.insert("s", [(2, 20)])
            with pytest.raises(PermissionDenied, match="only its owner"):
                bob.drop_stream("s")
            alice.revoke("s", "bob", "read")
            with pytest.raises(PermissionDenied):
                bob.invoke(h)


def test_the_command_line_grants_revokes_and_shows_them(server, clients, capsys) -> None:
    from psoup import cli

    alice = clients["alice"]
    s = f"s{next(_names)}"
    alice.create_stream(s, SCHEMA, time="t")
    at = ("--server", f"127.0.0.1:{server.port}")
    as_alice, as_bob = (*at, "--token", "a-secret"), (*at, "--token", "b-secret")
    assert cli.main(["grant", s, "bob", "write", *as_alice]) == 0
    assert f"granted write on {s} to bob: bob: write" in capsys.readouterr().out
    assert cli.main(["stream", "describe", s, *as_bob]) == 0
    out = capsys.readouterr().out
    assert "owner: alice" in out and "grants: bob: write" in out
    assert cli.main(["revoke", s, "alice", "read", *as_bob]) == 1
    err = capsys.readouterr().err
    assert (
        err == f"error: PERMISSION_DENIED: stream {s!r}: only its owner 'alice' may do this; "
        "client 'bob' is not\n"
    )
    assert cli.main(["revoke", s, "bob", "write", *as_alice]) == 0
    assert "no grants left" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        cli.main(["grant", s, "bob", "all", *as_alice])
    assert exc.value.code == 2


def test_linear_road_the_driver_writes_positions_and_vehicles_read_their_own(
    tmp_path: Path,
) -> None:
    """The application's streams have no owner: an admin grants the driver `write` on
    positions and the vehicles `read` on what their queries read (docs/SECURITY.md)."""
    from psoup.linear_road.network import REPORT_FIELDS
    from psoup.linear_road.streams import VEHICLE_QUERIES

    f = tmp_path / "tokens"
    f.write_text("driver:d-secret\nv1:v1-secret\nv2:v2-secret\nadmin ops:o-secret\n")
    srv = start_server(ServerConfig(port=0, auth_tokens_file=str(f), app="linear-road=validator"))
    c = {n: _client(srv.port, f"{n}-secret") for n in ("d", "v1", "v2", "o")}
    try:
        assert c["o"].describe_stream("positions").owner == ""
        c["o"].grant("positions", "driver", "write")
        for v in ("v1", "v2"):
            for stream in ("toll_notifications", "accident_alerts", "balances"):
                c["o"].grant(stream, v, "read")
        report = {f: [0] for f in REPORT_FIELDS}
        c["d"].insert_columns("positions", report)
        with pytest.raises(PermissionDenied, match="'positions': client 'v1' has no write"):
            c["v1"].insert_columns("positions", report)
        with pytest.raises(PermissionDenied, match="only an admin"):
            c["d"].grant("positions", "v1", "write")
        h1 = c["v1"].register(VEHICLE_QUERIES["balance"], {"v": 1})
        assert c["v1"].invoke(h1).rows == []
        with pytest.raises(PermissionDenied, match="another client"):
            c["v2"].invoke(h1)
        with pytest.raises(PermissionDenied, match="'positions': client 'v2' has no read"):
            c["v2"].register("SELECT * FROM positions BEGIN NOW END NOW")
    finally:
        for x in c.values():
            x.close()
        srv.stop(grace=1)
