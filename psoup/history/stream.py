"""The historical tolls stream on the server: its schema, created when missing, else checked."""

from __future__ import annotations

from clients import AlreadyExists, NotFound, PSoupClient, StreamInfo
from psoup.history import HistoryError

DEFAULT_STREAM = "toll_history"
ATTRS = ("vid", "day", "xway", "tolls")
SCHEMA = {a: "int" for a in ATTRS}
TIME = "day"  # days 1..69 before the simulation; a load is sorted by it


def describe(info: StreamInfo) -> str:
    """``vid:int,day:int,... (time day)``: a stream's declaration, for messages."""
    attrs = ",".join(f"{a}:{t}" for a, t in info.schema.items())
    return f"{attrs} (time {info.time})"


def ensure(client: PSoupClient, stream: str) -> StreamInfo:
    """The tolls stream ``stream``, created with ``SCHEMA`` and time ``TIME`` if missing.

    Raises HistoryError if a stream of that name exists with another declaration. Any
    max_window is accepted (it only limits what the server keeps).
    """
    try:
        info = client.describe_stream(stream)
    except NotFound:
        try:
            return client.create_stream(stream, SCHEMA, time=TIME)
        except AlreadyExists:  # created by someone else meanwhile: check theirs
            info = client.describe_stream(stream)
    if dict(info.schema) != SCHEMA or info.time != TIME:
        want = describe(StreamInfo(stream, SCHEMA, TIME))
        raise HistoryError(
            f"stream {stream!r} exists on the server as {describe(info)}, not as the toll "
            f"history {want}; drop it or hydrate another stream (--stream)"
        )
    return info
