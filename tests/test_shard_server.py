"""``psoup serve --shards 2`` end to end: a real server process, its shards as Ray actors
of the Ray instance it starts, a real SIGKILL of a shard and of the server.

Every answer is compared with one engine in this process fed the same acknowledged
operations: a sharded server answers exactly as the single process does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from oracle import rows_equal

import psoup
from clients import Invoke, PSoupClient, Register, Registered
from clients.errors import InvalidArgument, NotFound
from psoup.server.process import ServerProcess

pytestmark = pytest.mark.ray

SCHEMA = {"a": "int", "b": "int", "t": "int"}
QUERIES = (
    "SELECT * FROM r WHERE r.a = 3 BEGIN NOW - 40 END NOW",
    "SELECT r.a, COUNT(*), SUM(r.b), AVG(r.b), MAX(r.b) FROM r GROUP BY r.a BEGIN NOW - 60 END NOW",
    "SELECT x.b, y.b FROM r AS x, r AS y WHERE x.a = y.a AND x.b < 5 AND y.b > 95 "
    "BEGIN NOW - 20 END NOW",
    "SELECT COUNT(*) FROM u WHERE u.b > 50 BEGIN NOW - 100 END NOW",
)


def _batch(k: int, t0: int) -> list[tuple[int, int, int]]:
    return [((k * 7 + i) % 5, (k * 31 + i * 17) % 100, t0 + i // 4) for i in range(40)]


def _check(c: PSoupClient, db, handles) -> None:
    for h, eh in handles:
        got, want = c.invoke(h), db.invoke(eh)
        assert got.columns == want.columns
        assert rows_equal(want.rows, got.rows), (h, want.rows, got.rows)
        assert got.now == want.now


def _until_up(c: PSoupClient, limit: float = 180.0) -> None:
    """Return once Stats says every shard is up again after a restart. Reads meanwhile
    answer UNAVAILABLE after 10 s, and on a loaded machine Ray may take longer than
    that to restart a killed actor and the shard to recover."""
    deadline = time.monotonic() + limit
    while True:
        shards = c.stats()["shards"]
        if all(s["state"] == "up" for s in shards) and shards[1]["restarts"] >= 1:
            return
        assert time.monotonic() < deadline, shards
        time.sleep(0.2)


def _cli(target: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "psoup", *args, "--server", target],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_sharded_server_survives_shard_and_server_kills(tmp_path) -> None:
    data = tmp_path / "d"
    db = psoup.connect()  # the single process, fed the same acknowledged operations
    for name in ("r", "u"):
        db.create_stream(name, SCHEMA, time="t", max_window=100)
    with ServerProcess("--shards", "2", data_dir=data) as srv, PSoupClient(srv.target) as c:
        c.create_stream("r", SCHEMA, "t", 100, partition_by="a")
        c.create_stream("u", SCHEMA, "t", 100)
        assert c.describe_stream("r").partition_by == "a"
        handles = [(c.register(q), db.register(q)) for q in QUERIES]
        with pytest.raises(InvalidArgument, match=r"live on different shards|not partitioned"):
            c.register("SELECT * FROM r, u WHERE r.t = u.t BEGIN NOW - 5 END NOW")
        t = 0
        for k in range(10):
            for name in ("r", "u"):
                rows = _batch(k, t)
                c.insert(name, rows)
                db.insert(name, rows)
            t += 10
        _check(c, db, handles)
        # A Batch gathers each invoke from the shards as Invoke does; a refused one (an
        # unknown handle, found on the front-end's engine thread) undoes its registration.
        got = c.batch([Invoke(h) for h, _ in handles] + [Register(QUERIES[0], invoke=True)])
        for g, (_, eh) in zip(got, [*handles, (None, handles[0][1])], strict=True):
            g = g.result if isinstance(g, Registered) else g
            assert rows_equal(db.invoke(eh).rows, g.rows)
        with pytest.raises(NotFound, match=r"items\[1\]"):
            c.batch([Register(QUERIES[1]), Invoke("f" * 32)])
        handles.append((got[-1].handle, db.register(QUERIES[0])))
        assert c.stats()["queries"] == len(handles)

        shards = c.stats()["shards"]
        assert [s["index"] for s in shards] == [0, 1] and all(s["state"] == "up" for s in shards)
        assert sum(s["tuples_stored"] for s in shards) == 800
        os.kill(shards[1]["pid"], signal.SIGKILL)
        for k in range(10, 15):  # acknowledged only once the restarted shard has them
            rows = _batch(k, t)
            c.insert("r", rows)
            db.insert("r", rows)
            t += 10
        _check(c, db, handles)
        status = _cli(srv.target, "cluster", "status")
        assert status.returncode == 0, status.stderr
        restarts = [line.split()[-1] for line in status.stdout.splitlines()[2:]]
        assert restarts == ["0", "1"], status.stdout
        sub = iter(c.subscribe(handles[0][0], include_current=True))
        kind, current, _ = next(sub)
        assert kind == "current" and rows_equal(db.invoke(handles[0][1]).rows, current.rows)
        rows = [(3, 7, t), (1, 1, t), (3, 8, t + 1)]
        c.insert("r", rows)
        db.insert("r", rows)
        kind, news, _ = next(sub)
        assert kind != "current" and news.rows == [(3, 7, t), (3, 8, t + 1)]
        t += 10

        srv.proc.send_signal(signal.SIGKILL)  # the front-end itself
        srv.proc.wait()
    time.sleep(1)
    with ServerProcess("--shards", "2", data_dir=data) as srv, PSoupClient(srv.target) as c:
        _check(c, db, handles)  # same handles, same answers, same NOW
        rows = _batch(99, t)
        c.insert("r", rows)
        db.insert("r", rows)
        _check(c, db, handles)
        assert srv.stop() == 0
    db.close()


def test_shards_refuse_what_they_cannot_run(tmp_path) -> None:
    """--ray without --shards is a usage error; a directory written with another number
    of shards (tuples are placed mod N) is refused."""
    run = [sys.executable, "-m", "psoup", "serve", "--port", "0"]
    usage = subprocess.run([*run, "--in-memory", "--ray", "127.0.0.1:6379"],
                           capture_output=True, text=True)  # fmt: skip
    assert usage.returncode == 2 and "--ray goes with --shards" in usage.stderr
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "psoup.json").write_text('{"format": 1, "application": "sharded(2)"}')
    other = subprocess.run([*run, "--data-dir", str(tmp_path / "d"), "--shards", "3"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert other.returncode == 1 and "'sharded(2)'" in other.stderr, other.stderr


def test_read_stream_and_metrics_of_a_sharded_server() -> None:
    """ReadStream gathers every shard's rows (each part from every shard, in tuple-id
    order), and the metrics endpoint has a series per shard."""
    from test_metrics import _scrape

    from psoup.server import ServerConfig, start_server

    srv = start_server(ServerConfig(port=0, shards=2, metrics_port=0))
    try:
        with PSoupClient(f"127.0.0.1:{srv.port}") as c:
            c.create_stream("r", SCHEMA, "t", partition_by="a")
            rows = [r for k in range(5) for r in _batch(k, 10 * k)]
            c.insert("r", rows)
            got = []
            for part in range(3):
                for page in c.read_stream("r", part, 3):
                    got += zip(page["a"], page["b"], page["t"], strict=True)
            assert sorted(got) == sorted(rows) and len(got) == len(rows)
            one = [tuple(r) for p in c.read_stream("r") for r in zip(*p.values(), strict=True)]
            assert one == rows  # one part: arrival order, as one engine reads it
            m = _scrape(srv.metrics_port)
            assert m[("psoup_shard_up", (("shard", "0"),))] == 1
            assert m[("psoup_shard_up", (("shard", "1"),))] == 1
            stored = [m[("psoup_shard_tuples_stored", (("shard", k),))] for k in "01"]
            assert sum(stored) == len(rows) and all(stored)
            assert m[("psoup_tuples_stored", (("stream", "r"),))] == len(rows)
    finally:
        srv.stop(grace=1)


_EMBEDDED = """
import os, sys
import ray
from psoup.server import ServerConfig, start_server

def children():
    # This process's live children (Ray's own processes, when it started them).
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and stat[0] != "Z":
            out.append(pid)
    return out

if sys.argv[1] == "mine":
    ray.init(include_dashboard=False, log_to_driver=False, namespace="caller")
srv = start_server(ServerConfig(port=0, shards=1))
during = len(children())
srv.worker.call(lambda: srv.engine.create_stream("r", {"a": "int", "t": "int"}, time="t"))
srv.stop(grace=1)
print(ray.is_initialized(), during > 0, len(children()))
"""


@pytest.mark.parametrize("ray_of", ["server", "mine"])
def test_an_embedded_sharded_server_leaves_ray_as_it_found_it(ray_of) -> None:
    """``start_server(shards=1)`` in a process: its ``stop`` ends the Ray connection and
    the Ray instance the server started (no Ray process left a child of this one); a Ray
    connection the caller made before is the caller's and stays."""
    run = subprocess.run([sys.executable, "-c", _EMBEDDED, ray_of],
                         capture_output=True, text=True, timeout=240)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    connected, had_children, children_left = run.stdout.split()
    assert had_children == "True"
    if ray_of == "mine":
        assert connected == "True"
    else:
        assert (connected, children_left) == ("False", "0")
