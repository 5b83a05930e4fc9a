"""``--cpus``: every thread the server makes runs on the chosen CPUs, the caller's
threads stay where they were, the server answers as it does unplaced; and the
refusals (psoup/pinning.py).

Real threads, real affinity masks (read back from the kernel), a real server and client.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import psoup
from clients import PSoupClient
from psoup.pinning import allowed_cpus, check_cpus, cpu_list, parse_cpus, process_on
from psoup.server import ServerConfig, start_server
from psoup.server.process import ServerProcess

CPUS = allowed_cpus()
needs_two = pytest.mark.skipif(
    len(CPUS) < 2 or not hasattr(os, "sched_setaffinity"),
    reason="placing threads needs Linux and two CPUs this process may use",
)
QUERY = "SELECT * FROM r WHERE a = 2 BEGIN NOW - 99 END NOW"


def _tids() -> set[int]:
    return {int(p.name) for p in Path("/proc/self/task").iterdir()}


def test_cpu_lists_parse_as_taskset_writes_them() -> None:
    assert parse_cpus("0") == {0}
    assert parse_cpus("0,2") == {0, 2}
    assert parse_cpus("0-3,6") == {0, 1, 2, 3, 6}
    assert parse_cpus(" 1 , 1-2") == {1, 2}
    for bad in ("", "a", "-1", "3-1", "1-", "0,,1", "1.5", "²", "0-²"):
        with pytest.raises(ValueError, match="is not a CPU number"):
            parse_cpus(bad)


def test_a_cpu_list_reads_back_as_the_same_cpus() -> None:
    rng = np.random.default_rng(11)
    for _ in range(200):
        cpus = frozenset(rng.choice(64, rng.integers(1, 9), replace=False).tolist())
        assert parse_cpus(cpu_list(cpus)) == cpus
        assert cpu_list(cpus) == cpu_list(sorted(cpus, reverse=True))


def test_no_cpus_no_placing() -> None:
    assert check_cpus(None) is None
    before = {tid: os.sched_getaffinity(tid) for tid in _tids()}
    with process_on(None):
        assert {tid: os.sched_getaffinity(tid) for tid in before} == before


@needs_two
def test_a_process_placed_for_a_block_has_every_thread_back_after() -> None:
    mine = os.sched_getaffinity(0)
    go, made = threading.Event(), []
    idle = threading.Thread(target=go.wait, daemon=True)
    idle.start()  # a thread of the process made before the block
    cpu = max(CPUS)
    try:
        with process_on(frozenset({cpu}), "--driver-cpus"):
            late = threading.Thread(target=lambda: made.append(os.sched_getaffinity(0)))
            late.start()
            late.join()
            assert os.sched_getaffinity(idle.native_id) == {cpu}
            assert os.sched_getaffinity(0) == {cpu}
        assert made == [{cpu}]  # a thread made inside inherits the block's CPUs
        assert os.sched_getaffinity(idle.native_id) == mine
        assert os.sched_getaffinity(0) == mine
    finally:
        go.set()


@pytest.mark.skipif(not CPUS, reason="the platform cannot tell a thread's CPUs")
def test_a_cpu_the_process_may_not_use_is_refused() -> None:
    bad = max(CPUS) + 1
    with pytest.raises(ValueError, match=rf"--cpus: {bad}: not a CPU this process may use"):
        check_cpus({min(CPUS), bad})
    with pytest.raises(ValueError, match="--cpus: no CPU given"):
        check_cpus(set())
    before = _tids()
    with pytest.raises(ValueError, match="--cpus"):
        start_server(ServerConfig(port=0, cpus=frozenset({bad})))
    assert _tids() <= before  # refused before anything was started


@needs_two
def test_an_embedded_servers_threads_on_its_cpus_the_callers_where_they_were() -> None:
    cpu = max(CPUS)
    mine = os.sched_getaffinity(0)
    before = {t.native_id for t in threading.enumerate()}
    srv = start_server(ServerConfig(port=0, cpus=frozenset({cpu})))
    try:
        with PSoupClient(f"127.0.0.1:{srv.port}", timeout=10) as c:
            c.create_stream("r", {"a": "int", "t": "int"}, time="t")
            a = np.random.default_rng(3).integers(0, 5, 500)
            c.insert_columns("r", {"a": a, "t": np.arange(500)})  # an ingest reader too
            got = c.invoke(c.register(QUERY))
            # The Python threads the server made: the engine's, gRPC's serving loop, the
            # handlers, the ingest reader (the client makes none).
            made = {t.native_id for t in threading.enumerate()} - before
            assert srv.worker._thread.native_id in made and len(made) >= 3
            assert {os.sched_getaffinity(tid) == {cpu} for tid in made} == {True}
        assert os.sched_getaffinity(0) == mine
    finally:
        srv.stop(grace=1)
    db = psoup.connect()
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    db.insert_columns("r", {"a": a, "t": np.arange(500)})
    want = db.invoke(db.register(QUERY))
    assert sorted(got.rows) == sorted(want.rows) and want.rows


@needs_two
def test_psoup_serve_keeps_every_thread_but_the_idle_main_one_on_its_cpus() -> None:
    cpu = min(CPUS)
    proc = subprocess.Popen(
        [sys.executable, "-m", "psoup", "serve", "--in-memory", "--port", "0",
         "--cpus", str(cpu)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # numpy's BLAS would start its threads at import, before the server (and --cpus)
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert line.startswith("psoup serving on 127.0.0.1:"), (line, proc.stderr.read())
        cpus = {int(t.name): _cpus_allowed(t) for t in Path(f"/proc/{proc.pid}/task").iterdir()}
        assert cpus.pop(proc.pid) == CPUS  # the main thread: it waits for a signal
        assert len(cpus) >= 5 and set(cpus.values()) == {frozenset({cpu})}, cpus
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _cpus_allowed(task: Path) -> frozenset[int]:
    """A thread's CPUs, as the kernel lists them in its status."""
    for line in (task / "status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpus(line.split(":", 1)[1])
    raise AssertionError(f"no Cpus_allowed_list in {task}/status")


def test_shard_cpus_are_refused_without_shards_or_outside_the_process() -> None:
    with pytest.raises(ValueError, match="--shard-cpus goes with --shards"):
        start_server(ServerConfig(port=0, shard_cpus=frozenset({0})))
    run = [sys.executable, "-m", "psoup", "serve", "--in-memory", "--port", "0"]
    usage = subprocess.run([*run, "--shard-cpus", "0"], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert usage.returncode == 2 and "--shard-cpus goes with --shards" in usage.stderr
    if CPUS:
        bad = max(CPUS) + 1
        before = _tids()
        with pytest.raises(ValueError, match=rf"--shard-cpus: {bad}: not a CPU"):
            start_server(ServerConfig(port=0, shards=1, shard_cpus=frozenset({bad})))
        assert _tids() <= before  # refused before Ray or anything else was started
        usage = subprocess.run([*run, "--shards", "1", "--shard-cpus", str(bad)],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert usage.returncode == 2 and f"--shard-cpus: {bad}: not a CPU" in usage.stderr
        assert "Traceback" not in usage.stderr


@needs_two
@pytest.mark.ray
def test_shard_cpus_keep_the_whole_shard_process_on_them() -> None:
    """The layout of issue #19's ingest, as ``psoup serve`` runs it: the front-end on
    one CPU, the engine's shard on the other. Every thread of the shard's process (Ray's
    own too) is kept there, and the server answers as one engine does."""
    front, engine = min(CPUS), max(CPUS)
    with ServerProcess("--shards", "1", "--cpus", str(front), "--shard-cpus", str(engine)) as srv:
        with PSoupClient(srv.target, timeout=60) as c:
            c.create_stream("r", {"a": "int", "t": "int"}, time="t")
            a = np.random.default_rng(5).integers(0, 5, 500)
            handle = c.register(QUERY)
            c.insert_columns("r", {"a": a, "t": np.arange(500)})
            got = c.invoke(handle)
            pid = c.stats()["shards"][0]["pid"]
        assert pid not in (0, os.getpid(), srv.proc.pid)
        placed = {_cpus_allowed(t) for t in Path(f"/proc/{pid}/task").iterdir()}
        assert placed == {frozenset({engine})}, placed
    db = psoup.connect()
    db.create_stream("r", {"a": "int", "t": "int"}, time="t")
    want = db.register(QUERY)
    db.insert_columns("r", {"a": a, "t": np.arange(500)})
    assert sorted(got.rows) == sorted(db.invoke(want).rows) and got.rows


@pytest.mark.ray
@pytest.mark.skipif(not CPUS, reason="the platform cannot tell a thread's CPUs")
def test_a_shard_that_cannot_take_its_cpus_says_so_in_one_line() -> None:
    """On a cluster the front-end cannot check a node's CPUs; the shard's constructor
    refuses them, and the start fails naming the shard and ``--shard-cpus``. (Started in
    a child process: Ray started twice in one process can hang.)"""
    bad = max(CPUS) + 1
    script = (
        "from psoup.shard.cluster import start_shards\n"
        "try:\n"
        f"    start_shards(1, None, cpus=frozenset({{{bad}}}))\n"
        "except RuntimeError as err:\n"
        "    print(err)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    msg = done.stdout.strip()
    assert done.returncode == 0, done.stderr
    assert msg.startswith("shard 0 did not start: ValueError: --shard-cpus") and "\n" not in msg
    assert f"{bad}: not CPUs this process may use here" in msg
