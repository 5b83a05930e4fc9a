"""The SparkSession of the history jobs: ``local[*]`` by default, any master by URL, quiet.

Spark's JVM writes start-up warnings, log lines and its worker processes' stderr straight
to file descriptor 2. The JVM inherits our stderr when it is launched, so ``start_session()``
points descriptor 2 at a log file for that moment only: everything the JVM (and the
Python workers it forks) print goes to ``log_path()``, while this process keeps its own
stderr for progress bars and messages. log4j is set to ERROR and Spark's console progress
bar and web UI are off.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from psoup.history import HistoryError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"

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


def start_session(
    master: str | None = None,
    app_name: str = "psoup-history",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession on ``master`` (default ``local[*]``) with ``DEFAULT_CONF`` and ``conf``.

    If a session is already active in this process it is returned as it is (Spark allows
    one per process; its master and memory cannot change). For a local master the
    workers run this interpreter and can import this checkout. Raises HistoryError, naming
    the log file, when Spark does not start (e.g. no Java). Takes a few seconds: the JVM
    starts here.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    master = master or DEFAULT_MASTER
    settings = dict(DEFAULT_CONF)
    settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={_log4j_file()}"
    if _is_local(master):
        root = str(Path(__file__).resolve().parents[2])
        settings["spark.pyspark.python"] = sys.executable
        settings["spark.executorEnv.PYTHONPATH"] = root
        # Loopback only: no warning about the host name, no dependence on the network.
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    log = log_path()
    try:
        with _stderr_to(log), _no_pandas_warning():
            spark = builder.getOrCreate()
    except Exception as err:
        raise HistoryError(f"Spark did not start on {master}: {err} (Spark's log: {log})") from err
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def use(session: SparkSession | None = None, master: str | None = None) -> Iterator[SparkSession]:
    """The session to run a job on: ``session`` if given, else the active one, else a new
    one on ``master``, stopped when the block ends (only if it was started here)."""
    from pyspark.sql import SparkSession

    with _no_pandas_warning():
        found = session or SparkSession.getActiveSession()
        if found is not None:
            yield found
            return
        started = start_session(master)
        try:
            yield started
        finally:
            started.stop()


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
