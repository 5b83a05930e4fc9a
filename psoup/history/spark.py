"""The SparkSession of the history jobs: ``local[*]`` by default, any master by URL, quiet.

Spark's JVM writes start-up warnings, log lines and its worker processes' stderr straight
to file descriptor 2. The JVM inherits our stderr when it is launched, so ``start_session()``
points descriptor 2 at a log file for that moment only: everything the JVM (and the
Python workers it forks) print goes to ``log_path()``, while this process keeps its own
stderr for progress bars and messages. log4j is set to ERROR and Spark's console progress
bar and web UI are off.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from psoup.history import HistoryError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# All cores; a failed task is tried up to 4 times, as on a cluster (spark.task.maxFailures:
# a local master takes the count from its URL, and plain local[*] never retries).
DEFAULT_MASTER = "local[*,4]"
# What the executors import: shipped to them as a zip (code_zip), so a worker needs only
# the third-party dependencies.
CODE_PACKAGES = ("psoup", "clients", "stems", "results")

# Sized for the 2-core, 24 GB machine the benchmarks run on; any key can be overridden.
DEFAULT_CONF: dict[str, str] = {
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "8",
    # Smaller input splits than the 128 MB default: more tasks, finer progress, and both
    # cores busy on a single file of a few hundred MB.
    "spark.sql.files.maxPartitionBytes": str(32 << 20),
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def log_path() -> Path:
    """Where the Spark JVM's output goes (one file per user, appended to)."""
    return Path(tempfile.gettempdir()) / f"psoup-spark-{os.getuid()}.log"


def _log4j_file() -> Path:
    path = Path(tempfile.gettempdir()) / f"psoup-spark-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _LOG4J:
        path.write_text(_LOG4J)
    return path


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` for the block; child processes keep it."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextmanager
def _no_pandas_warning() -> Iterator[None]:
    """PySpark 4 warns that pandas >= 3 is not fully supported wherever it first checks
    (start-up, mapInArrow's pandas_udf); these jobs use only Arrow, never pandas."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas")
        yield


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def _is_loopback(master: str) -> bool:
    """A standalone master on this machine (spark://127.0.0.1:P, spark://localhost:P)."""
    host = master.removeprefix("spark://").rsplit(":", 1)[0]
    return master.startswith("spark://") and host in ("127.0.0.1", "localhost", "[::1]")


def worker_python(master: str, conf: Mapping[str, str]) -> str | None:
    """The interpreter the executors start, to put in PYSPARK_PYTHON for the job; None to
    leave the variable as the user set it.

    An in-process SparkContext takes the executors' interpreter from PYSPARK_PYTHON (else
    ``python3`` on the worker's PATH), not from ``spark.pyspark.python``, which only
    spark-submit reads. So a given ``spark.pyspark.python`` wins, then the user's own
    PYSPARK_PYTHON; else a local master runs this interpreter (a venv called by path has
    our dependencies, the ``python3`` on PATH may not), and a cluster master Spark's
    default, ``python3`` on each worker's PATH (this path may not exist there).
    """
    if conf.get("spark.pyspark.python"):
        return conf["spark.pyspark.python"]
    if os.environ.get("PYSPARK_PYTHON"):
        return None
    return sys.executable if _is_local(master) else "python3"


@contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """``os.environ[name] = value`` for the block (nothing when value is None)."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _launch_gateway(settings: Mapping[str, str]):
    """Start Spark's JVM (the py4j gateway) with ``settings`` and connect to it.

    PySpark starts it with ``Popen(preexec_fn=...)`` (to ignore SIGINT), which makes
    subprocess fork and run Python in the child. With a gRPC channel open in this process
    (the jobs talk to the server before Spark starts) gRPC's event engine restarts its
    epoll poller in the forked child, then ``close_fds`` closes the epoll descriptor under
    it and the child aborts ("epoll_wait error: Bad file descriptor") before it can exec
    the JVM: JAVA_GATEWAY_EXITED, about one start in ten (measured: 259 of 2,000 forks
    with ``preexec_fn`` died of SIGABRT, 0 of 2,000 without). This is gRPC's bug
    grpc/grpc#43055 (open; since grpcio 1.81: epoll EBADF after ``subprocess.Popen``).
    So the JVM is started without ``preexec_fn``, in a process group of its own (Ctrl-C
    on the terminal goes to the foreground group only, as the SIGINT-ignore intended);
    subprocess then uses vfork/posix_spawn and runs no Python and no fork handler in the
    child.
    """
    from pyspark import java_gateway
    from pyspark.conf import SparkConf

    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    real = java_gateway.Popen
    java_gateway.Popen = popen_without_preexec(real)
    try:
        return java_gateway.launch_gateway(conf)
    finally:
        java_gateway.Popen = real


def popen_without_preexec(
    popen: Callable[..., subprocess.Popen],
) -> Callable[..., subprocess.Popen]:
    """``popen`` with any ``preexec_fn`` replaced by a process group of the child's own
    (see ``_launch_gateway``): no Python runs between fork and exec."""

    def launch(cmd, **kwargs) -> subprocess.Popen:
        kwargs.pop("preexec_fn", None)
        kwargs["process_group"] = 0
        return popen(cmd, **kwargs)

    return launch


def code_zip() -> Path:
    """A zip of the packages the executors import (psoup, clients, stems, results), for
    ``addPyFile``: a worker needs only the third-party dependencies installed, not psoup.

    Built once per content (named by its hash) in the temporary directory. O(source size).
    """
    import hashlib
    import importlib.util
    import zipfile

    files: list[tuple[str, Path]] = []
    for package in CODE_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise HistoryError(f"cannot find the package {package!r} to ship to the executors")
        root = Path(next(iter(spec.submodule_search_locations)))
        files += [
            (str(Path(package) / f.relative_to(root)), f)
            for f in sorted(root.rglob("*.py"))
            if "__pycache__" not in f.parts
        ]
    digest = hashlib.sha256()
    for name, f in files:
        digest.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    out = Path(tempfile.gettempdir()) / f"psoup-spark-code-{digest.hexdigest()[:16]}.zip"
    if not out.exists():
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for name, f in files:
                z.write(f, name)
        os.replace(tmp, out)
    return out


def _ship_code(spark: SparkSession) -> None:
    """Send ``code_zip()`` to every executor; the driver keeps importing from its checkout
    (``addPyFile`` also puts the zip on this process's sys.path, which is undone)."""
    before = list(sys.path)
    spark.sparkContext.addPyFile(str(code_zip()))
    sys.path[:] = before


def start_session(
    master: str | None = None,
    app_name: str = "psoup-history",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession on ``master`` (default ``local[*,4]``) with ``DEFAULT_CONF`` and
    ``conf`` (any Spark setting; ``conf`` wins).

    If a session is already active in this process it is returned as it is (Spark allows
    one per process; its master and memory cannot change). The executors get this
    package's code (``code_zip``) and the interpreter ``worker_python`` names. Raises
    HistoryError, naming the log file, when Spark does not start (e.g. no Java). Takes a
    few seconds: the JVM starts here; ``stop_session`` ends it.
    """
    from pyspark.core.context import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    master = master or DEFAULT_MASTER
    conf = dict(conf or {})
    settings = dict(DEFAULT_CONF)
    settings["spark.master"] = master
    settings["spark.app.name"] = app_name
    settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={_log4j_file()}"
    if _is_local(master) or _is_loopback(master):
        # Loopback only: no warning about the host name, no dependence on the network.
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf)
    log = log_path()
    try:
        with _stderr_to(log), _no_pandas_warning():
            if SparkContext._gateway is None:
                gateway = _launch_gateway(settings)
                SparkContext._gateway, SparkContext._jvm = gateway, gateway.jvm
            builder = SparkSession.builder
            for key, value in settings.items():
                builder = builder.config(key, value)
            with _environment("PYSPARK_PYTHON", worker_python(master, conf)):
                spark = builder.getOrCreate()
    except Exception as err:
        _end_gateway()
        raise HistoryError(f"Spark did not start on {master}: {err} (Spark's log: {log})") from err
    spark.sparkContext.setLogLevel("ERROR")
    _ship_code(spark)
    return spark


def _end_gateway() -> None:
    """Shut the py4j gateway and its JVM down, so the next session starts a fresh one.

    PySpark keeps the JVM for the life of the process after ``stop()``: gigabytes held by
    an idle JVM long after a hydration. The JVM exits when its stdin closes.
    """
    from pyspark.core.context import SparkContext

    gateway = SparkContext._gateway
    SparkContext._gateway = SparkContext._jvm = None
    if gateway is None:
        return
    with contextlib.suppress(Exception):
        gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except Exception:
            proc.kill()
            proc.wait()


def stop_session(spark: SparkSession) -> None:
    """Stop ``spark`` and end its JVM (see ``_end_gateway``)."""
    with _no_pandas_warning():
        spark.stop()
    _end_gateway()


@contextmanager
def use(
    session: SparkSession | None = None,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> Iterator[SparkSession]:
    """The session to run a job on: ``session`` if given, else the active one, else a new
    one on ``master`` with ``conf``, stopped with its JVM when the block ends (only if it
    was started here)."""
    from pyspark.sql import SparkSession

    with _no_pandas_warning():
        found = session or SparkSession.getActiveSession()
        if found is not None:
            yield found
            return
        started = start_session(master, conf=conf)
        try:
            yield started
        finally:
            stop_session(started)


def failure(err: BaseException) -> str:
    """One line saying why a Spark job failed: the executor's exception for a failed
    Python task (the last line of its traceback), else the first line of the error."""
    text = str(err).strip()
    if "Traceback (most recent call last)" in text:
        lines = [
            ln.strip() for ln in text.split("Traceback (most recent call last)")[-1].splitlines()
        ]
        tail = [ln for ln in lines if ln and not ln.startswith(("at ", "File ", "^"))]
        if tail:
            return tail[-1]
    return text.splitlines()[0] if text else type(err).__name__
