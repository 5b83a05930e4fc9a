"""Where a history job reads its input: a local path or any URI Spark can read.

A plain path or a ``file://`` URI is on this machine: it is checked before Spark starts
(fail fast), and handed to Spark as an absolute ``file://`` URI, so a cluster whose
default file system is HDFS still reads the local (or shared) file. Any other URI
(``hdfs://``, ``s3a://``, ``gs://``, ...) is read by the executors as it is; the driver
asks Hadoop's file system for it once Spark runs, so a missing one still gets a plain
"no such file" before any job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from psoup.history import HistoryError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Source:
    """An input: ``uri`` for Spark; ``local`` its path when it is on this machine."""

    uri: str
    local: Path | None

    @classmethod
    def parse(cls, text: str | Path) -> Source:
        """The source named by a path or URI. Raises HistoryError for a local path that
        does not exist (other URIs are checked by ``is_dir`` once Spark runs)."""
        text = str(text)
        url = urlparse(text)
        if url.scheme == "file":
            local = Path(unquote(url.path))
        elif len(url.scheme) > 1 and text.startswith(f"{url.scheme}://"):
            return cls(text, None)  # one-letter schemes are Windows drives, not URIs
        else:
            local = Path(text)
        if not local.exists():
            raise HistoryError(f"no such file or directory: {text}")
        return cls(local.absolute().as_uri(), local.absolute())

    @property
    def name(self) -> str:
        """The last component of the path (``tolls.csv``)."""
        return self.local.name if self.local else self.uri.rstrip("/").rsplit("/", 1)[-1]

    def __str__(self) -> str:
        return str(self.local) if self.local else self.uri

    def is_dir(self, spark: SparkSession) -> bool:
        """Whether the input is a directory (as Spark writes Parquet). Raises HistoryError
        when it does not exist. A remote URI costs one file-system call from the driver."""
        if self.local is not None:
            return self.local.is_dir()
        jvm = spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path(self.uri)
        try:
            fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
            if not fs.exists(path):
                raise HistoryError(f"no such file or directory: {self.uri}")
            return bool(fs.getFileStatus(path).isDirectory())
        except HistoryError:
            raise
        except Exception as err:  # no file system for the scheme, no credentials, ...
            raise HistoryError(f"cannot read {self.uri}: {_java_reason(err)}") from err


def _java_reason(err: Exception) -> str:
    """The Java exception's own message (py4j's first line says only which call failed)."""
    java = getattr(err, "java_exception", None)
    text = str(java.getMessage() if java is not None else err).strip()
    return text.splitlines()[0] if text else type(err).__name__
