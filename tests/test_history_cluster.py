"""The history pipeline as users run it: from a venv called by path, started many times
with a gRPC channel open, and on a real standalone cluster of one master and two workers
started from the pyspark package.

Each test runs the CLI (or Spark's start) in a real process against a real server; the
cluster's executors run an interpreter that has the dependencies but not psoup, so the
code they run is the code the job ships. Marked ``spark`` (they need Java).
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import PSoupClient
from psoup.history import spark
from psoup.history.cluster import LocalCluster
from psoup.server import ServerConfig, start_server
from psoup.server.process import ServerProcess

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
LINES = ["vid,day,xway,tolls", "1,1,0,5", "1,1,0,7", "2,3,0,4", "3,9,1,1", "bad line"]
LOADED = sorted([(1, 1, 0, 12), (2, 3, 0, 4), (3, 9, 1, 1)])


@pytest.fixture(scope="module")
def server() -> Iterator:
    srv = start_server(ServerConfig(port=0))
    yield srv
    srv.stop(grace=1)


@pytest.fixture(scope="module")
def target(server) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.fixture
def tolls(tmp_path: Path) -> Path:
    path = tmp_path / "tolls.csv"
    path.write_text("\n".join(LINES) + "\n")
    return path


def _contents(target: str, stream: str) -> list[tuple[int, ...]]:
    with PSoupClient(target) as client:
        pages = list(client.read_stream(stream))
    cols = ("vid", "day", "xway", "tolls")
    return sorted(r for p in pages for r in zip(*(p[c].tolist() for c in cols), strict=True))


def _site_dirs() -> list[str]:
    """Where this interpreter's third-party packages are (a venv's or the system's)."""
    return [d for d in site.getsitepackages() if Path(d).is_dir()]


def _bare_python(where: Path) -> Path:
    """A venv with nothing installed: its ``python3`` cannot import numpy or bitarray."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return where / "bin" / "python3"


def _run_cli(python: Path | str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [str(python), "-m", "psoup", "history", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd="/")


def test_a_venv_called_by_path_runs_the_job(target, tolls, tmp_path) -> None:
    """The CLI of a venv that is not activated, while the ``python3`` on PATH has none of
    our dependencies: the executors must start the venv's interpreter, not PATH's."""
    bare = _bare_python(tmp_path / "bare")
    venv = tmp_path / "venv"
    python = _bare_python(venv)
    # The venv gets this interpreter's packages and this checkout through a .pth file, as
    # an install into it would; nothing about it is on PATH or in the environment.
    (purelib,) = (venv / "lib").glob("python3*/site-packages")
    (purelib / "deps.pth").write_text("\n".join([str(ROOT), *_site_dirs()]) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH")}
    env["PATH"] = f"{bare.parent}:{env.get('PATH', '')}"
    broken = subprocess.run(["python3", "-c", "import bitarray"], env=env, capture_output=True)
    assert broken.returncode != 0  # the trap is set: PATH's python3 lacks our dependencies

    done = _run_cli(
        python, "hydrate", "--tolls", str(tolls), "--stream", "from_venv", "--server", target,
        "--no-progress", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _contents(target, "from_venv") == LOADED


def test_spark_starts_30_times_in_a_row_with_a_grpc_channel_open() -> None:
    """The JVM gateway, the step that died one time in ten (JAVA_GATEWAY_EXITED) when a
    gRPC channel was open, is started 30 times in a row, each time right after a call on
    an open channel (as a hydration checks the server before Spark starts), each time
    answering and ending with its session.

    The channel is idle during each start, as in the jobs: that is when gRPC runs its
    fork handlers, which restart its poller in a forked child (while another thread is
    inside gRPC it skips them, and the hazard hides).
    """
    from pyspark.core.context import SparkContext

    with ServerProcess() as srv, PSoupClient(srv.target) as client:  # as users run it
        for i in range(30):
            client.list_streams()
            gateway = spark._launch_gateway({"spark.master": "local[1]"})
            assert gateway.jvm.java.lang.Math.addExact(i, 1) == i + 1, f"start {i}"
            SparkContext._gateway, SparkContext._jvm = gateway, gateway.jvm
            spark._end_gateway()
            assert gateway.proc.poll() is not None, f"the JVM of start {i} outlived its end"


def test_the_gateway_launch_survives_300_forks_with_a_channel_open() -> None:
    """The way the JVM is launched, exercised where it failed: a channel to a server in
    another process, used every 25 children and idle in between (gRPC runs its fork
    handlers then; an in-process server keeps its threads inside gRPC, which skips them
    and hides the hazard), and 300 children started. PySpark's own ``preexec_fn`` launch
    lost 1 to 3 children of 300 to SIGABRT in this set-up (259 of 2,000 on a busy
    machine): gRPC's restarted poller hits the descriptor ``close_fds`` closed. This
    launch loses none."""
    with ServerProcess() as srv, PSoupClient(srv.target) as client:
        launch = spark.popen_without_preexec(subprocess.Popen)
        codes = []
        for i in range(300):
            if i % 25 == 0:
                client.list_streams()
            child = launch(["/bin/true"], stdin=subprocess.PIPE, preexec_fn=lambda: None)
            child.stdin.close()
            codes.append(child.wait())
    assert codes == [0] * 300


def _worker_python(tmp_path: Path) -> Path:
    """An executor interpreter with the dependencies but not psoup: this interpreter run
    with -S (no site, so no editable install) and the site-packages on PYTHONPATH."""
    wrapper = tmp_path / "worker-python"
    deps = ":".join(_site_dirs())
    wrapper.write_text(
        "#!/bin/sh\n"
        f'export PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{deps}"\n'
        f'exec {sys.executable} -S "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def test_hydrate_on_a_standalone_cluster_of_two_workers(target, tolls, tmp_path) -> None:
    """A master and two workers from the pyspark package, a file:// input and executors
    without psoup installed: the job ships its code and every row arrives once."""
    worker_python = _worker_python(tmp_path)
    probe = subprocess.run(
        [str(worker_python), "-c", "import numpy, grpc, pyarrow, bitarray; import psoup"],
        capture_output=True, text=True, cwd="/",
    )  # fmt: skip
    if "No module named 'psoup'" not in probe.stderr:
        pytest.skip(f"psoup is installed where the workers' interpreter sees it: {probe}")
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    with LocalCluster(workers=2, cores=1, memory="1g", directory=tmp_path / "cluster") as c:
        assert c.alive_workers() == 2
        done = _run_cli(
            sys.executable, "hydrate", "--tolls", tolls.as_uri(), "--stream", "on_cluster",
            "--server", target, "--master", c.url, "--no-progress",
            "--conf", f"spark.pyspark.python={worker_python}",
            "--conf", "spark.sql.shuffle.partitions=4",
            env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert _contents(target, "on_cluster") == LOADED
        assert "  loaded                          3" in done.stdout
        # Both workers ran executors of the job.
        apps = [p for w in (tmp_path / "cluster").glob("work-*") for p in w.glob("app-*/*")]
        assert {p.parents[1].name for p in apps} == {"work-0", "work-1"}, apps


def test_cli_rejects_a_malformed_conf(tolls) -> None:
    done = _run_cli(sys.executable, "hydrate", "--tolls", str(tolls), "--conf", "novalue",
                    env=dict(os.environ))  # fmt: skip
    assert done.returncode == 2
    assert "not KEY=VALUE: 'novalue'" in done.stderr
    assert "Traceback" not in done.stderr
