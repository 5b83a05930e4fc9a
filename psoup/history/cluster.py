"""A Spark standalone cluster on this machine, started from the pyspark package itself.

One master and N workers, each a JVM launched with the package's own ``bin/spark-class``
(no Spark installation), bound to 127.0.0.1, with their logs and work directories in one
folder. For the tests and benchmarks that need a real ``spark://`` master, and for a user
who wants to try one (``psoup history cluster``). A real multi-machine cluster is set up
as docs/HISTORY.md says; nothing here is needed for it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from psoup.history import HistoryError

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The pyspark package's directory: it holds ``bin/spark-class`` and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """A master and ``workers`` workers (``cores`` cores and ``memory`` each) on loopback.

    ``start()`` returns the master URL once every worker has registered; ``stop()`` ends
    them all (the workers end their executors). ``env`` is added to the daemons'
    environment (e.g. PATH, to choose the ``python3`` the executors start by default).
    Logs: ``<dir>/master.log``, ``<dir>/worker-N.log``.
    """

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        directory: Path | None = None,
        env: Mapping[str, str] | None = None,
    ):
        if workers < 1 or cores < 1:
            raise ValueError("a cluster needs at least one worker with at least one core")
        self.workers, self.cores, self.memory = workers, cores, memory
        self._own_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="psoup-spark-cluster-"))
        self.env = dict(env or {})
        self.procs: list[subprocess.Popen] = []
        self.url = ""
        self.web_url = ""

    def _launch(self, name: str, *args: str) -> subprocess.Popen:
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            **self.env,
        }
        log = open(self.directory / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        try:
            cmd = [str(spark_home() / "bin" / "spark-class"), *args]
            # A group of its own: a Ctrl-C meant for us is not the cluster's; stop() ends it.
            return subprocess.Popen(cmd, stdout=log, stderr=log, env=env, process_group=0)
        finally:
            log.close()

    def start(self, timeout: float = 180.0) -> str:
        """Start the daemons and wait until all workers are alive; returns the master URL.

        Raises HistoryError (naming the logs) when they do not come up within ``timeout``.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        port, web = _free_port(), _free_port()
        self.url, self.web_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}"
        self.procs.append(
            self._launch(
                "master",
                MASTER_CLASS,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(web),
            )
        )
        for i in range(self.workers):
            work = self.directory / f"work-{i}"
            work.mkdir(exist_ok=True)
            self.procs.append(
                self._launch(
                    f"worker-{i}",
                    WORKER_CLASS,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    "0",
                    "--work-dir",
                    str(work),
                    self.url,
                )
            )
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                why = "a daemon exited" if dead else f"not ready after {timeout:.0f} s"
                raise HistoryError(
                    f"the local Spark cluster did not start ({why}; logs in {self.directory})"
                )
            time.sleep(0.5)  # polling the master's state, not waiting out a race
        return self.url

    def alive_workers(self) -> int:
        """Workers the master counts as alive (0 while it is not answering)."""
        try:
            with urllib.request.urlopen(self.web_url + "/json/", timeout=2) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def stop(self) -> None:
        """End the workers, then the master (SIGTERM, then SIGKILL after 20 s)."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
