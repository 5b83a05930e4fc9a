"""The history pipeline: PySpark jobs that hydrate and archive a server's historical streams.

``psoup history hydrate`` reads a Linear Road toll history (CSV ``vid,day,xway,tolls``, or
a Parquet export), validates and de-duplicates it with Spark, and replaces the contents
of the server's ``toll_history`` stream through one bulk load fed by the Spark executors.
``psoup history export`` writes a stream's stored tuples as Parquet, read by the
executors in parallel. See docs/HISTORY.md.

Modules: ``spark`` (the session, kept quiet), ``stream`` (the stream's schema, created or
checked), ``validate`` (rows to typed columns and a reject reason, as Spark SQL
expressions), ``executors`` (the functions Spark tasks run: push to a load, read a part),
``progress`` (a progress bar fed by Spark's status tracker), ``hydrate`` and ``export``
(the two jobs), ``cli`` (the commands). Importing this package does not import Spark.
"""

from __future__ import annotations


class HistoryError(Exception):
    """A history job cannot run or did not finish: bad input, schema mismatch, Spark failure.

    The message is meant for the user as it is.
    """


__all__ = ["HistoryError"]
