"""psoup: continuous queries over streams, after PSoup (Chandrasekaran & Franklin, VLDB 2002).

Embedded use, in the spirit of sqlite3::

    import psoup
    db = psoup.connect()
    db.create_stream("r", {"a": "int", "t": "int"}, time="t", max_window=3600)
    db.insert("r", [(1, 10), (7, 11)])
    h = db.register("SELECT * FROM r WHERE r.a < :x BEGIN NOW - 10 END NOW", params={"x": 5})
    db.invoke(h).rows        # [(1, 10)]
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from psoup.errors import (
    AlreadyExistsError,
    BatchError,
    NotFoundError,
    PreconditionError,
    PSoupError,
    QueryError,
    QueryNameError,
    QueryParameterError,
    QuerySyntaxError,
    QueryTypeError,
    SchemaError,
    UnknownHandleError,
    UnknownStreamError,
    UnknownTemplateError,
    UnsupportedQueryError,
)
from psoup.values import InsertResult, Result

if TYPE_CHECKING:
    from psoup.engine import Engine

__all__ = [
    "AlreadyExistsError",
    "BatchError",
    "Engine",
    "InsertResult",
    "NotFoundError",
    "PSoupError",
    "PreconditionError",
    "QueryError",
    "QueryNameError",
    "QueryParameterError",
    "QuerySyntaxError",
    "QueryTypeError",
    "Result",
    "SchemaError",
    "UnknownHandleError",
    "UnknownStreamError",
    "UnknownTemplateError",
    "UnsupportedQueryError",
    "connect",
]

__version__ = "0.1.0"


def __getattr__(name: str):
    # The engine is loaded when first used, not by ``import psoup``: the client library
    # (clients/) imports psoup.api and psoup.values and must not drag the engine in.
    if name == "Engine":
        from psoup.engine import Engine

        return Engine
    raise AttributeError(f"module 'psoup' has no attribute {name!r}")


def connect(
    path: str | os.PathLike | None = None,
    strategy: str = "psoup-p",
    block_rows: int = 4096,
    index_budget_bytes: int = 64 << 20,
    segment_blocks: int = 64,
    sync: str = "batch",
) -> Engine:
    """An in-process engine: durable in the data directory ``path``, else in memory.

    With ``path`` (created if missing) every change is logged there before the call
    returns and the engine comes back from it, as it was, when ``path`` is opened
    again; ``sync`` is ``"batch"`` (each change forced to disk before the call returns),
    ``"interval=MS"`` or ``"off"`` (docs/DURABILITY.md). Without it nothing is kept, as
    sqlite3's ``":memory:"``. One process at a time may hold a directory.

    ``strategy`` is ``"psoup-p"`` (materialise matches, window at invoke; the default),
    ``"psoup-c"`` (keep each query's current window, a selection's rows with it: the
    fastest invoke, a slice, for slower ingest and 8 bytes per match and column) or
    ``"nomat"`` (evaluate at invoke).
    ``block_rows`` sizes storage and result blocks (small values force many blocks, for
    tests); ``index_budget_bytes`` bounds each interval index's stabbing table;
    ``segment_blocks`` is how many sealed blocks a stored-data index is built over at once
    (rounded down to a power of two; indexes then merge up to 16 times that).
    """
    from psoup.engine import Engine

    engine = Engine(
        strategy=strategy,
        block_rows=block_rows,
        index_budget_bytes=index_budget_bytes,
        segment_blocks=segment_blocks,
    )
    if path is not None:
        from psoup.storage.durable import DataDir
        from psoup.storage.log import Sync

        data = DataDir(path, Sync.parse(sync), wait_each=True)
        try:
            data.recover(engine)
        except BaseException:
            data.close()  # the directory is free again
            raise
    return engine
