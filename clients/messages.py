"""The clients' typed values and their translation to and from the API's messages.

Both clients (sync and grpc.aio) build every request and read every response through
this module, so they differ only in how they wait. Column values go through
``psoup.api.codec``; nothing here converts values itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from psoup.api import codec
from psoup.api import psoup_pb2 as pb
from psoup.values import Result

#: Kinds of subscription events, as ``subscribe`` yields them.
CURRENT, NEW = "current", "new"
_KINDS = {pb.SubscribeResponse.CURRENT: CURRENT, pb.SubscribeResponse.NEW: NEW}


@dataclass(frozen=True)
class StreamInfo:
    """A stream's declaration and counters, as the server describes it.

    ``schema`` maps attribute -> type ('int', 'float', 'str') in declaration order;
    ``last_ts`` is None before the first tuple.
    """

    name: str
    schema: dict[str, str]
    time: str
    max_window: int | float | None = None
    tuples_stored: int = 0
    tuples_ingested: int = 0
    queries: int = 0
    last_ts: int | float | None = None
    owner: str = ""  # the client that created it ("" without authentication)
    grants: dict[str, tuple[str, ...]] = field(default_factory=dict)  # client -> rights
    partition_by: str | None = None  # spread over shards by this attribute (None: not)


@dataclass(frozen=True)
class Bound:
    """One end of a registered window: ``NOW + offset`` if ``relative_to_now``, else ``offset``."""

    relative_to_now: bool
    offset: int | float

    def __str__(self) -> str:
        if not self.relative_to_now:
            return str(self.offset)
        if not self.offset:
            return "NOW"
        sign = "-" if self.offset < 0 else "+"
        return f"NOW {sign} {abs(self.offset)}"


@dataclass(frozen=True)
class Window:
    """A query's window as registered (``BEGIN begin END end``)."""

    begin: Bound
    end: Bound

    def __str__(self) -> str:
        return f"BEGIN {self.begin} END {self.end}"


@dataclass(frozen=True)
class QueryInfo:
    """A registered query: its text, parameters, result schema, window and counters."""

    handle: str
    text: str
    params: dict[str, int | float | str | None]
    columns: tuple[str, ...]
    types: tuple[str, ...]
    window: Window
    streams: tuple[str, ...]
    registered_at: float = 0.0
    invocations: int = 0


@dataclass(frozen=True)
class Template:
    """A prepared query (``PSoupClient.prepare``): pass it to ``register`` or
    ``register_invoke`` in place of the text, with the parameters' values."""

    id: str
    text: str
    params: tuple[str, ...]  # the parameters' names, each once, in the order written
    streams: tuple[str, ...]


def template_from(text: str, reply: pb.PrepareQueryResponse) -> Template:
    """The Template a PrepareQueryResponse describes."""
    return Template(reply.template_id, text, tuple(reply.params), tuple(reply.streams))


@dataclass(frozen=True)
class Register:
    """A registration in a ``batch``, as ``register`` (``invoke``: with its current
    result as of ``now``, as ``register_invoke``)."""

    query: str | Template
    params: Mapping[str, object] | None = None
    invoke: bool = False
    now: int | float | None = None


@dataclass(frozen=True)
class Invoke:
    """An invoke in a ``batch``, as ``invoke`` (the result whole)."""

    handle: str
    now: int | float | None = None


@dataclass(frozen=True)
class Registered:
    """A batch's answer to a ``Register``: the new handle, and the current result when
    the registration asked for it (else None)."""

    handle: str
    result: Result | None = None


@dataclass(frozen=True)
class StagedPart:
    """What one LoadBatches call staged: ``replaced`` when its part had been staged
    before (a retried writer) and this call's rows took the earlier ones' place."""

    rows: int
    batches: int
    replaced: bool = False


@dataclass(frozen=True)
class IngestAck:
    """The server's acknowledgement of one batch: its tuple ids and the matches it made.

    ``first_tuple_id``..``last_tuple_id`` inclusive; both 0 when ``rows`` is 0.
    """

    batch_id: int
    rows: int
    first_tuple_id: int
    last_tuple_id: int
    matches: int


def number(x: float) -> int | float:
    """A double from the wire as the engine would give it: integral values become int.

    The API carries times as doubles; int time attributes are by far the common case, and
    giving them back as int keeps results equal in type to the embedded engine's.
    """
    if x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x


# ------------------------------------------------------------------------------ requests


def create_stream_request(
    name: str,
    schema: Mapping[str, str],
    time: str,
    max_window: float | None,
    partition_by: str | None = None,
) -> pb.CreateStreamRequest:
    """A CreateStreamRequest; an unknown type name is sent unspecified (the server names it)."""
    req = pb.CreateStreamRequest(
        name=name,
        attributes=[
            pb.Attribute(name=a, type=codec.TYPE_TO_PB.get(t, pb.TYPE_UNSPECIFIED))
            for a, t in schema.items()
        ],
        time=time,
        partition_by=partition_by or "",
    )
    if max_window is not None:
        req.max_window = float(max_window)
    return req


def register_request(
    query: str | Template,
    params: Mapping[str, object] | None,
    invoke: bool = False,
    now: float | None = None,
) -> pb.RegisterQueryRequest:
    """A RegisterQueryRequest for a query's text or a prepared template (``invoke``:
    answer with the current result too, as of ``now``, None: the server's NOW); raises
    codec.CodecError for a value that cannot be sent."""
    req = pb.RegisterQueryRequest(
        params={k: codec.to_value(v) for k, v in (params or {}).items()}, invoke=invoke
    )
    if isinstance(query, Template):
        req.template_id = query.id
    else:
        req.text = query
    if now is not None:
        req.now = float(now)
    return req


def invoke_whole_request(handle: str, now: float | None) -> pb.InvokeRequest:
    """An InvokeRequest (``now`` None: the server's NOW)."""
    req = pb.InvokeRequest(handle=handle)
    if now is not None:
        req.now = float(now)
    return req


def invoke_request(handle: str, now: float | None, page_rows: int) -> pb.InvokeQueryRequest:
    """An InvokeQueryRequest (``now`` None: the server's NOW; ``page_rows`` 0: its default)."""
    req = pb.InvokeQueryRequest(handle=handle, page_rows=page_rows)
    if now is not None:
        req.now = float(now)
    return req


# ----------------------------------------------------------------------------- responses


def batch_request(ops: Sequence[Register | Invoke]) -> pb.BatchRequest:
    """A BatchRequest for ``ops``; raises codec.CodecError naming the item for a value
    that cannot be sent, TypeError for an item that is neither kind."""
    items = []
    for k, op in enumerate(ops):
        if isinstance(op, Register):
            try:
                req = register_request(op.query, op.params, op.invoke, op.now)
            except codec.CodecError as err:
                raise codec.CodecError(f"items[{k}]: params: {err}") from None
            items.append(pb.BatchRequest.Item(register=req))
        elif isinstance(op, Invoke):
            items.append(pb.BatchRequest.Item(invoke=invoke_whole_request(op.handle, op.now)))
        else:
            raise TypeError(f"items[{k}]: a Register or an Invoke, not {type(op).__name__}")
    return pb.BatchRequest(items=items)


def batch_answer(reply: pb.BatchResponse.Reply) -> tuple[Registered | Result, bool]:
    """One item's answer, and whether it is a registration whose result was left out
    (too large for the message: take it with ``invoke``)."""
    if reply.WhichOneof("reply") == "invoke":
        return whole_result(reply.invoke), False
    reg = reply.register
    current = whole_result(reg.current) if reg.HasField("current") else None
    return Registered(reg.handle, current), reg.current_omitted


def whole_result(msg: pb.InvokeQueryResponse) -> Result:
    """The Result one whole (single page) InvokeQueryResponse carries."""
    pages = PageAssembler()
    pages.add(msg)
    return pages.result()


def stream_info(msg: pb.StreamInfo) -> StreamInfo:
    """A ``StreamInfo`` from its message."""
    return StreamInfo(
        name=msg.name,
        schema={
            a.name: codec.type_name(a.type, f"attributes[{i}].type")
            for i, a in enumerate(msg.attributes)
        },
        time=msg.time,
        max_window=number(msg.max_window) if msg.HasField("max_window") else None,
        tuples_stored=msg.tuples_stored,
        tuples_ingested=msg.tuples_ingested,
        queries=msg.queries,
        last_ts=codec.from_value(msg.last_ts) if msg.HasField("last_ts") else None,
        owner=msg.owner,
        grants={g.client: tuple(g.rights) for g in msg.grants},
        partition_by=msg.partition_by or None,
    )


def _bound(b: pb.Window.Bound) -> Bound:
    return Bound(b.relative_to_now, number(b.offset))


def query_info(msg: pb.QueryInfo) -> QueryInfo:
    """A ``QueryInfo`` from its message."""
    return QueryInfo(
        handle=msg.handle,
        text=msg.text,
        params={k: codec.from_value(v) for k, v in sorted(msg.params.items())},
        columns=tuple(c.name for c in msg.columns),
        types=tuple(codec.type_name(c.type, "columns.type") for c in msg.columns),
        window=Window(_bound(msg.window.begin), _bound(msg.window.end)),
        streams=tuple(msg.streams),
        registered_at=msg.registered_at,
        invocations=msg.invocations,
    )


def ingest_ack(msg: pb.IngestAck) -> IngestAck:
    """An ``IngestAck`` from its message."""
    return IngestAck(msg.batch_id, msg.rows, msg.first_tuple_id, msg.last_tuple_id, msg.matches)


def stats(msg: pb.StatsResponse) -> dict[str, object]:
    """The Stats response as a dict shaped like ``Engine.stats()``, plus the server's counters."""
    lat = msg.invoke_latency
    return {
        "strategy": msg.strategy,
        "queries": msg.queries,
        "matches_marked": msg.matches_marked,
        "ingest_rate": msg.ingest_rate,
        "invoke_latency": {
            "p50_ms": lat.p50_ms,
            "p90_ms": lat.p90_ms,
            "p99_ms": lat.p99_ms,
            "count": lat.count,
        },
        "queue_depth": msg.queue_depth,
        "memory_bytes": msg.memory_bytes,
        "subscriptions": msg.subscriptions,
        "invoke_calls": msg.invoke_calls,
        "streams": {
            s.name: {
                "tuples_stored": s.tuples_stored,
                "tuples_ingested": s.tuples_ingested,
                "bytes": s.bytes,
                "indexed_blocks": dict(sorted(s.indexed_blocks.items())),
                "query_entries": s.query_entries,
            }
            for s in msg.streams
        },
        "busiest_queries": [
            {"handle": q.handle, "text": q.text, "invocations": q.invocations, "owner": q.owner}
            for q in msg.busiest_queries
        ],
        "shards": [
            {
                "index": h.index,
                "state": h.state,
                "node": h.node,
                "pid": h.pid,
                "tuples_stored": h.tuples_stored,
                "queries": h.queries,
                "memory_bytes": h.memory_bytes,
                "restarts": h.restarts,
                "last_op": h.last_op,
            }
            for h in msg.shards
        ],
    }


@dataclass
class PageAssembler:
    """Collects the pages of one InvokeQuery into a ``Result``. O(rows x columns)."""

    columns: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    pages: list[list] = field(default_factory=list)
    now: int | float | None = None
    window: tuple[int | float, int | float] | None = None
    _first: bool = True

    def add(self, page: pb.InvokeQueryResponse) -> None:
        """Take one page (the first one carries the columns, NOW and the window)."""
        if self._first:
            self._first = False
            self.columns = tuple(c.name for c in page.columns)
            self.types = tuple(codec.type_name(c.type, "columns.type") for c in page.columns)
            self.now, self.window = _times(page)
        self.pages.append(_page_columns(page.data, page.rows, len(self.columns)))

    def result(self) -> Result:
        """The assembled result, column-wise (its rows are built if asked for)."""
        arrays = [_concat([p[c] for p in self.pages]) for c in range(len(self.columns))]
        return Result(self.columns, self.types, now=self.now, window=self.window, arrays=arrays)


def _page_columns(data, rows: int, width: int) -> list:
    """One page's values per column; CodecError when a column's length is not ``rows``."""
    cols = codec.decode_result_columns(data)
    if len(cols) != width:
        raise codec.CodecError(f"a result page has {len(cols)} columns, not {width}")
    for c in cols:
        if len(c) != rows:
            raise codec.CodecError(f"a result column has {len(c)} values, not {rows}")
    return cols


def _concat(parts: list) -> np.ndarray | list:
    """One column from its pages' values (arrays, or lists for strings and NULLs): an
    array, or a list that ``Result`` keeps as an object array."""
    if parts and all(isinstance(p, np.ndarray) for p in parts):
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    vals: list = []
    for p in parts:
        vals.extend(p.tolist() if isinstance(p, np.ndarray) else p)
    return vals


@dataclass
class EventDecoder:
    """Turns Subscribe messages into ``(kind, Result, first_tuple_id)`` events.

    Remembers the columns, in case a server sends them only once.
    """

    columns: tuple[str, ...] = ()
    types: tuple[str, ...] = ()

    def decode(self, msg: pb.SubscribeResponse) -> tuple[str, Result, int]:
        """One event: ``kind`` is ``CURRENT`` or ``NEW``."""
        if msg.columns:
            self.columns = tuple(c.name for c in msg.columns)
            self.types = tuple(codec.type_name(c.type, "columns.type") for c in msg.columns)
        cols = _page_columns(msg.data, msg.rows, len(self.columns))
        kind = _KINDS.get(msg.kind, NEW)
        now, window = _times(msg)
        res = Result(
            self.columns, self.types, now=now, window=window, arrays=[_concat([c]) for c in cols]
        )
        return kind, res, msg.first_tuple_id


def _times(msg) -> tuple[int | float | None, tuple[int | float, int | float] | None]:
    """(NOW, window) of an InvokeQueryResponse or SubscribeResponse, None where unset."""
    now = codec.from_value(msg.now) if msg.HasField("now") else None
    window = None
    if msg.HasField("window_begin") and msg.HasField("window_end"):
        window = (codec.from_value(msg.window_begin), codec.from_value(msg.window_end))
    return now, window
