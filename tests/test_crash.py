"""Crash tests: ``psoup serve --data-dir`` killed with SIGKILL at random moments while
several clients ingest, register, unregister and invoke, and another replaces a stream's
contents with bulk loads and creates and drops a stream, then started again on the same
directory. After every restart each stream holds exactly its acknowledged batches, in
order (plus, at most, the one batch in flight when the kill came, wholly or not at all),
the loaded stream holds its last acknowledged load (or the one in flight), the dropped
stream exists as acknowledged, every acknowledged handle that was not unregistered works
with the same owner, and every invoke equals the brute-force oracle's answer over those
contents."""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from oracle import Oracle, rows_equal

from clients import PSoupClient, PSoupRpcError, Template
from clients.errors import NotFound, PermissionDenied
from psoup.server.process import ServerProcess

CLIENTS = 3
# Kill points: 20 in the normal suite; PSOUP_CRASH_ROUNDS=1000 for the long run
# (docs/DURABILITY.md records its result).
ROUNDS = int(os.environ.get("PSOUP_CRASH_ROUNDS", 20))
SCHEMA = {"a": "int", "b": "int", "t": "int"}
KEEP = 60  # the clients' streams' max_window: joins and state stay small over 1,000 kills
# A client holding this many handles unregisters instead of registering, and a round
# checks the last GONE_CHECKED unregistered handles (older ones were checked by earlier
# rounds): a round's cost then stays flat over 1,000 kills instead of growing with them.
MAX_HANDLES = 24
GONE_CHECKED = 40
TEMPLATES = (
    "SELECT * FROM {s} WHERE {s}.a < :x BEGIN NOW - 6 END NOW",
    "SELECT {s}.t, {s}.b FROM {s} WHERE {s}.b BETWEEN :x AND 6 BEGIN 0 END NOW",
    "SELECT COUNT(*), SUM({s}.a) FROM {s} WHERE {s}.a >= :x BEGIN NOW - 10 END NOW",
    "SELECT {s}.b, MAX({s}.a) FROM {s} WHERE {s}.t > :x GROUP BY {s}.b BEGIN 0 END NOW",
)
JOIN = "SELECT * FROM s0 AS x, s1 AS y WHERE x.a = y.b BEGIN NOW - 4 END NOW"
H_QUERY = "SELECT h.v, COUNT(*), SUM(h.t) FROM h WHERE h.v < 7 GROUP BY h.v BEGIN 0 END NOW"


@dataclass
class Client:
    """What one client was told (acknowledged) and what it was doing when the server died."""

    stream: str
    rng: random.Random
    next_t: int = 0
    rows: list[tuple] = field(default_factory=list)  # acknowledged and still retained
    in_flight: list[tuple] | None = None  # a batch sent but not acknowledged
    handles: dict[str, tuple[str, dict]] = field(default_factory=dict)  # handle -> query
    unregistering: str | None = None  # an unregister sent but not acknowledged
    gone: list[str] = field(default_factory=list)  # acknowledged unregistrations


@dataclass
class Loader:
    """The client that bulk-loads stream ``h`` and creates and drops stream ``scratch``."""

    rng: random.Random
    loaded: list[tuple] = field(default_factory=list)  # the last acknowledged load's rows
    loading: list[tuple] | None = None  # a load whose commit was not acknowledged
    scratch: bool = False  # acknowledged to exist
    scratch_unsure: bool = False  # a create or drop in flight
    handle: str | None = None  # a query over h, registered at the start

    def step(self, c: PSoupClient) -> None:
        if self.rng.random() < 0.7:
            rows = sorted(
                ((self.rng.randint(0, 9), self.rng.randint(0, 50))
                 for _ in range(self.rng.randint(0, 300))),
                key=lambda r: r[1],
            )  # fmt: skip
            load = c.begin_load("h")
            if rows:
                cols = {"v": [r[0] for r in rows], "t": [r[1] for r in rows]}
                c.load_batches(load, "h", [cols])
            self.loading = rows
            c.commit_load(load)
            self.loaded, self.loading = rows, None
        else:
            self.scratch_unsure = True
            if self.scratch:
                c.drop_stream("scratch")
            else:
                c.create_stream("scratch", SCHEMA, time="t")
            self.scratch, self.scratch_unsure = not self.scratch, False


class Round:
    """One server life: check what the last one left, then work until the kill."""

    def __init__(self, data: Path, clients: list[Client], loader: Loader, kill_after: int):
        # A checkpoint every MB of log: kills land while one is written, too.
        self.srv = ServerProcess("--checkpoint-every", "1", data_dir=data)
        self.clients = clients
        self.loader = loader
        self.kill_after = kill_after
        self.acks = 0
        self.lock = threading.Lock()

    def ack(self) -> None:
        with self.lock:
            self.acks += 1
            if self.acks == self.kill_after:
                self.srv.proc.kill()  # SIGKILL, right after an acknowledgement

    def check_recovered(self, first: bool) -> None:
        oracle = Oracle()
        with PSoupClient(self.srv.target, timeout=30) as c:
            if first:
                for cl in self.clients:
                    c.create_stream(cl.stream, SCHEMA, time="t", max_window=KEEP)
                c.create_stream("h", {"v": "int", "t": "int"}, time="t")
                self.loader.handle = c.register(H_QUERY)
                return
            self.check_loader(c)
            for cl in self.clients:
                oracle.create_stream(cl.stream, SCHEMA, "t", KEEP)
                got = _rows(c, cl.stream)
                if cl.in_flight is not None and got == _retained(cl.rows + cl.in_flight):
                    cl.rows += cl.in_flight  # it made it to the log before the kill
                cl.in_flight = None
                kept = cl.rows = _retained(cl.rows)
                assert got == kept, f"{cl.stream}: {len(got)} rows, {len(kept)} acknowledged"
                if kept:
                    oracle.insert(cl.stream, kept)
                if cl.unregistering is not None:
                    try:
                        c.invoke(cl.unregistering)
                    except NotFound:
                        del cl.handles[cl.unregistering]
                        cl.gone.append(cl.unregistering)
                    cl.unregistering = None
                for h in cl.gone[-GONE_CHECKED:]:
                    with pytest.raises(NotFound):
                        c.invoke(h)
            for cl in self.clients:
                for h, (text, params) in cl.handles.items():
                    mine = oracle.register(text, params)
                    res = c.invoke(h)
                    columns, rows = oracle.invoke(mine)
                    assert res.columns == columns, text
                    assert res.now == oracle.current_now(mine), text
                    assert rows_equal(rows, res.rows), f"{text} {params}: {rows} != {res.rows}"
                    assert c.describe_query(h).text == text

    def check_loader(self, c: PSoupClient) -> None:
        ld = self.loader
        got = [(int(v), int(t)) for p in c.read_stream("h")
               for v, t in zip(p["v"], p["t"], strict=True)]  # fmt: skip
        if ld.loading is not None and got == ld.loading:
            ld.loaded = ld.loading  # its commit reached the log before the kill
        ld.loading = None
        assert got == ld.loaded, f"h: {len(got)} rows, the last load had {len(ld.loaded)}"
        oracle = Oracle()
        oracle.create_stream("h", {"v": "int", "t": "int"}, "t", None)
        if ld.loaded:
            oracle.insert("h", ld.loaded)
        assert c.invoke(ld.handle).rows == oracle.invoke(oracle.register(H_QUERY))[1]
        exists = "scratch" in {s.name for s in c.list_streams()}
        if ld.scratch_unsure:
            ld.scratch, ld.scratch_unsure = exists, False
        assert exists == ld.scratch

    def load(self) -> None:
        with PSoupClient(self.srv.target, timeout=30) as c:
            try:
                while True:
                    self.loader.step(c)
                    self.ack()
            except PSoupRpcError:
                return

    def work(self, cl: Client) -> None:
        with PSoupClient(self.srv.target, timeout=30, batch_rows=1000) as c:
            try:
                while True:
                    self.step(c, cl)
            except PSoupRpcError:
                return  # the server is gone

    def step(self, c: PSoupClient, cl: Client) -> None:
        r = cl.rng.random()
        if r < 0.6:
            n = cl.rng.randint(1, 20)
            batch = []
            for _ in range(n):
                cl.next_t += cl.rng.randint(0, 2)
                batch.append((cl.rng.randint(0, 6), cl.rng.randint(0, 6), cl.next_t))
            cl.in_flight = batch
            c.insert(cl.stream, batch)
            cl.rows += batch
            cl.in_flight = None
        elif r < 0.8 and len(cl.handles) < MAX_HANDLES:
            if cl.stream == "s0" and cl.rng.random() < 0.2:
                text, params = JOIN, {}
            else:
                text = cl.rng.choice(TEMPLATES).format(s=cl.stream)
                params = {"x": cl.rng.randint(0, 6)}
            h = c.register(text, params)
            cl.handles[h] = (text, params)
        elif r < 0.85 and cl.handles:  # also where a client at MAX_HANDLES would register
            h = cl.rng.choice(sorted(cl.handles))
            cl.unregistering = h
            c.unregister(h)
            del cl.handles[h]
            cl.gone.append(h)
            cl.unregistering = None
        elif cl.handles:
            c.invoke(cl.rng.choice(sorted(cl.handles)))
        self.ack()

    def run(self) -> None:
        threads = [threading.Thread(target=self.work, args=(cl,)) for cl in self.clients]
        threads.append(threading.Thread(target=self.load))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a client hung after the kill"
        self.srv.proc.wait(timeout=30)


def _retained(rows: list[tuple]) -> list[tuple]:
    """The rows a stream of max_window KEEP shows: time within KEEP of the latest."""
    return [r for r in rows if r[2] >= rows[-1][2] - KEEP] if rows else []


def _rows(c: PSoupClient, stream: str) -> list[tuple]:
    rows = []
    for page in c.read_stream(stream):
        cols = [np.asarray(page[a]).tolist() for a in SCHEMA]
        rows.extend(zip(*cols, strict=True))
    return rows


def test_a_killed_server_keeps_everything_it_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(20261125)
    clients = [Client(f"s{i}", random.Random(rng.random())) for i in range(CLIENTS)]
    loader = Loader(random.Random(rng.random()))
    for i in range(ROUNDS + 1):
        rnd = Round(tmp_path / "data", clients, loader, kill_after=rng.randint(1, 40))
        try:
            rnd.check_recovered(first=i == 0)
            if i < ROUNDS:
                rnd.run()
        finally:
            rnd.srv.stop()


def test_a_handle_keeps_its_owner_across_a_kill(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:a-secret\nbob:b-secret\n")
    args = ("--auth-tokens", str(tokens))
    with ServerProcess(*args, data_dir=tmp_path / "data") as srv:
        with PSoupClient(srv.target, token="a-secret", timeout=30) as alice:
            alice.create_stream("r", SCHEMA, time="t")
            alice.insert("r", [(1, 2, 3)])
            h = alice.register("SELECT * FROM r BEGIN 0 END NOW")
        srv.proc.kill()
        srv.proc.wait()
    with ServerProcess(*args, data_dir=tmp_path / "data") as srv:
        with (
            PSoupClient(srv.target, token="b-secret", timeout=30) as bob,
            pytest.raises(PermissionDenied),
        ):
            bob.invoke(h)
        with PSoupClient(srv.target, token="a-secret", timeout=30) as alice:
            assert alice.invoke(h).rows == [(1, 2, 3)]


def test_a_prepared_template_survives_a_kill(tmp_path: Path) -> None:
    text = "SELECT * FROM r WHERE a = :v BEGIN 0 END NOW"
    with ServerProcess(data_dir=tmp_path / "data") as srv:
        with PSoupClient(srv.target, timeout=30) as c:
            c.create_stream("r", SCHEMA, time="t")
            c.insert("r", [(1, 2, 3), (2, 3, 4)])
            tpl = c.prepare(text)  # acknowledged: then killed before any checkpoint
        srv.proc.kill()
        srv.proc.wait()
    with ServerProcess(data_dir=tmp_path / "data") as srv, PSoupClient(srv.target) as c:
        by_id = Template(tpl.id, "", (), ())  # the id alone, as a client keeps it
        assert c.invoke(c.register(by_id, {"v": 2})).rows == [(2, 3, 4)]
        assert c.prepare(text) == tpl
