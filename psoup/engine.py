"""The engine: one writer over the SteMs, the strategy's results and the catalog.

It runs the three paths of docs/ARCHITECTURE.md. Every public method takes the engine
lock, so registrations, batches and invokes are serialised and each invoke sees the
effects of a prefix of the query stream over a prefix of the data stream (stream-prefix
consistency, seeds/002 lines 1858-1866).

ingest:   validate batch -> DataSteM.append -> expire -> QuerySteM.probe
          -> strategy.mark (selections) + join step for two-source entries
register: compile -> plan -> QuerySteM.add per source -> DataSteM.probe (new query x
          old data) -> strategy.add_selection / join pairs
invoke:   NOW and window -> visible seq range -> strategy rows -> project / aggregate
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import hashlib
import json
import math
import operator
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from psoup.errors import (
    AlreadyExistsError,
    PreconditionError,
    PSoupError,
    ResultOverflowError,
    SchemaError,
    UnknownHandleError,
    UnknownStreamError,
    UnknownTemplateError,
    ValueRangeError,
)
from psoup.plan import Plan
from psoup.query import Prepared, prepare
from psoup.query.spec import QuerySpec
from psoup.result import aggregate, partial, project, project_columns
from psoup.strategies import STRATEGIES, NoMat, PSoupC
from psoup.values import (
    DTYPES,
    INT64_MAX,
    INT64_MIN,
    InsertResult,
    Result,
    Schema,
    check_time,
    columns_to_arrays,
    rows_to_columns,
)
from stems.data_stem import DataSteM
from stems.query_stem import QuerySteM

RIGHTS = ("read", "write")  # what a stream's owner may grant another client
_NAME_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_SRC_BITS = 4  # an entry's source stream within its query: the low bits of Engine._entry_owner
_SRC_MASK = (1 << _SRC_BITS) - 1


@dataclass
class Stream:
    """A stream's catalog entry and storage."""

    name: str
    schema: Schema
    max_window: int | float | None
    stem: DataSteM
    last_ts: int | float | None = None
    queries: set[int] = field(default_factory=set)
    tuples_ingested: int = 0
    owner: str | None = None  # the client that created it (None: no authentication)
    grants: dict[str, set[str]] = field(default_factory=dict)  # client -> rights
    partition_by: str | None = None  # a sharded server spreads it by this attribute
    # (stem uid, file, first seq, rows): that stem's rows first .. first + rows - 1 are
    # the rows of a bulk load's file, in order with their tuple ids (a checkpoint links
    # the file rather than write them again). Set by a shard's ``replace_contents``.
    loaded: tuple | None = field(default=None, repr=False, compare=False)
    _visible: tuple | None = field(default=None, repr=False, compare=False)
    # NOW's windows placed for the stored rows as they stand: (stem uid, its version,
    # last_ts, {window shape: (now, bounds, s, e)}), shared by the queries of one shape
    # (``Engine._selection_reader``; ``_place``).
    placed: tuple = field(default=(None, -1, None, None), repr=False, compare=False)

    def visible_from(self) -> int:
        """First seq still visible under the retention horizon. O(log n), O(1) again
        until the stream changes."""
        if self.max_window is None or self.last_ts is None:
            return self.stem.start_seq
        key = (self.last_ts, self.stem.uid, self.stem.version)
        if self._visible is None or self._visible[0] != key:
            self._visible = (key, self.stem.first_seq_at_or_after(self.last_ts - self.max_window))
        return self._visible[1]

    def seqs_in(self, bounds: tuple | None, since: int = 0) -> tuple[int, int]:
        """``(s, e)``: the visible stored seqs from ``since`` on whose times are within
        ``bounds`` (lo, hi); empty when ``bounds`` is None or lo > hi. O(log n), O(1)
        for the usual window (``DataSteM.seq_range``)."""
        if bounds is None or bounds[0] > bounds[1]:
            return 0, 0
        s, e = self.stem.seq_range(*bounds)
        return max(s, self.visible_from(), since), e


@dataclass
class Query:
    """A registered query."""

    qid: int
    handle: str
    spec: QuerySpec
    plan: Plan
    entries: list[int]  # entry id per source
    text: str = ""
    params: dict = field(default_factory=dict)
    registered_at: float = field(default_factory=time.time)
    invocations: int = 0
    owner: str | None = None  # the client that registered it (the server's auth id)
    read_at: tuple[int, ...] | None = field(default=None, repr=False, compare=False)
    # The select items' positions in the stream, in output order (a plain selection).
    out_at: tuple[int, ...] | None = field(default=None, repr=False, compare=False)
    # What answers its invokes (Engine._reader), made on the first.
    reader: Callable | None = field(default=None, repr=False, compare=False)
    # Its checkpoint catalog row as JSON, made when it is registered on a durable engine,
    # else by the first checkpoint that holds it (QueryRows): its fields never change.
    catalog_json: str | None = field(default=None, repr=False, compare=False)


@dataclass
class StreamImage:
    """One stream in an engine image: its declaration, counters and stored rows."""

    name: str
    schema: Schema
    max_window: int | float | None
    last_ts: int | float | None
    tuples_ingested: int
    start_seq: int
    parts: list[tuple[list[np.ndarray], np.ndarray]]  # (columns, tuple ids) per block
    version: tuple[int, int, int] = (0, 0, 0)  # equal versions: equal rows (stem uid, seqs)
    owner: str | None = None
    grants: dict[str, list[str]] = field(default_factory=dict)  # client -> sorted rights
    partition_by: str | None = None
    # (file, first seq, rows): the rows at those seqs are a bulk load file's, in order,
    # with their tuple ids as its last column (``Stream.loaded``).
    loaded: tuple | None = None


class QueryRows(Sequence):
    """The rows (handle, text, params, owner, registered_at) of a list of queries, built
    as they are read: ``Engine.capture`` takes the Query objects under the engine lock
    (O(queries) in C, where building the rows there held a Linear Road shard's lock ~130
    ms at 150,000 queries) and the checkpoint writer builds the rows on its own thread. A
    Query's fields do not change once it is registered."""

    def __init__(self, queries: list[Query]):
        self._queries = queries

    @staticmethod
    def _row(q: Query) -> tuple[str, str, dict, str | None, float]:
        return (q.handle, q.text, dict(q.params), q.owner, q.registered_at)

    def __len__(self) -> int:
        return len(self._queries)

    def __getitem__(self, i):
        return self._row(self._queries[i])

    def __iter__(self):
        return map(self._row, self._queries)

    @classmethod
    def encode(cls, q: Query) -> str:
        """``q``'s row as a JSON array, kept on it (``Query.catalog_json``). O(its
        fields)."""
        q.catalog_json = json.dumps(list(cls._row(q)))
        return q.catalog_json

    def encoded(self, start: int = 0, stop: int | None = None) -> list[str]:
        """Rows ``start`` .. ``stop - 1``, each as a JSON array, encoded once per query
        and kept on it, so a checkpoint encodes only the queries no earlier one held and
        that were not encoded when registered: O(rows) of lookups plus O(those) of
        encoding. The writer runs beside the engine thread, and every row it encodes
        holds the interpreter lock the engine needs."""
        out = []
        for q in self._queries[start:stop]:
            js = q.catalog_json
            if js is None:
                js = self.encode(q)
            out.append(js)
        return out

    def pages(self, page_qids: int) -> list[tuple[int, int, int, int]]:
        """The rows grouped by ``qid // page_qids``: ``(page, start, stop, last qid)``
        for each page that holds any, in order. Query ids grow with registration and are
        never reused, so a page's (rows, last qid) changes whenever a query joins it or
        leaves it: a page with the same pair in an earlier image holds the same rows.
        O(pages x log queries): a binary search per page, no walk over the rows."""
        out, start, n = [], 0, len(self._queries)
        while start < n:
            page = self._queries[start].qid // page_qids
            stop = bisect.bisect_left(self._queries, (page + 1) * page_qids, lo=start,
                                      key=operator.attrgetter("qid"))  # fmt: skip
            out.append((page, start, stop, self._queries[stop - 1].qid))
            start = stop
        return out


def template_id(text: str) -> str:
    """A template's id: 128 bits of the SHA-256 of its text, hex. Preparing one text
    twice gives one template; the id says nothing the text does not."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Template:
    """A prepared query (``Engine.prepare``): its id, text and parameters' names."""

    engine: Engine = field(repr=False, compare=False)
    id: str
    text: str
    params: tuple[str, ...]  # the parameters' names, each once, in the order written
    streams: tuple[str, ...]  # the streams it reads

    def register(self, params: Mapping[str, object] | None = None, owner: str | None = None) -> str:
        """Register the template for ``params``; returns the new query's handle. As
        ``Engine.register_template``."""
        return self.engine.register_template(self.id, params, owner=owner)


@dataclass
class EngineImage:
    """What ``Engine.capture`` saw: enough to build the same engine again (results are
    rebuilt from the data and the queries). ``states``: each application state's bytes,
    or the bytes-like parts they are made of, in order (``Engine.add_state``).
    ``seconds``: how long taking each part of the image held the engine, by part."""

    streams: list[StreamImage]
    queries: Sequence[tuple[str, str, dict, str | None, float]]  # handle, text, params, owner, at
    next_tid: int
    states: dict[str, bytes | list]
    seconds: dict[str, float] = field(default_factory=dict)
    templates: list[str] = field(default_factory=list)  # prepared texts, in order


class Engine:
    """In-process PSoup engine. See the module docstring for the paths."""

    _REPLACE_CHUNK_ROWS = 1 << 20  # replace_contents copies the input in chunks this long

    def __init__(
        self,
        strategy: str = "psoup-p",
        block_rows: int = 4096,
        index_budget_bytes: int = 64 << 20,
        segment_blocks: int = 64,
    ):
        if strategy not in STRATEGIES:
            raise ValueError(
                f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}"
            )
        if block_rows < 1:
            raise ValueError("block_rows must be positive")
        if segment_blocks < 1:
            raise ValueError("segment_blocks must be positive")
        self.block_rows = block_rows
        self.segment_blocks = segment_blocks
        self.strategy = STRATEGIES[strategy](block_rows)
        self.qstem = QuerySteM(index_budget_bytes)
        self.streams: dict[str, Stream] = {}
        self.queries: dict[str, Query] = {}
        self._by_qid: dict[int, Query] = {}
        # Prepared texts: the templates clients prepared (id -> Prepared, durable), and
        # the texts registered lately (text -> Prepared, the _RECENT_TEXTS used last), so a
        # text registered again with other values is not parsed and bound again.
        self._templates: dict[str, Prepared] = {}
        self._recent: dict[str, Prepared] = {}
        # entry -> qid << _SRC_BITS | source: an int, not a (qid, source) tuple. A dict of
        # ints only is never walked by the cyclic collector; one of tuples is untracked
        # by it while they are all atomic and tracked again at each registration's fresh
        # tuple, so every young collection after one walked the whole dict (150k entries
        # late in an in-process Linear Road replay, whose collector share this cut from
        # 9.1% to 6.4%: docs/BENCHMARKS.md).
        self._entry_owner: dict[int, int] = {}
        self._join_entries: set[int] = set()
        self._next_tid = 0
        self._next_qid = 0
        self._next_entry = 0
        self.lock = threading.RLock()
        self.matches_marked = 0
        # Subscriptions: id -> (qid, callback, last aggregate rows pushed).
        self._subs: dict[int, list] = {}
        self._subs_by_qid: dict[int, set[int]] = {}
        self._next_sub = 1
        self._triggers: dict[str, list[Callable]] = {}  # stream -> batch callbacks
        # Durable mode (psoup/storage): called with each change, (op, fields, columns),
        # after it is validated and before it is made; a change it refuses is not made.
        # It returns the file it wrote a bulk load's rows to, else None.
        self.journal: Callable[[str, dict, list], object] | None = None
        self._quiet = 0  # > 0 inside a logged change: its own inner steps are not logged
        self.storage = None  # the open data directory (psoup.storage.durable.DataDir)
        self._states: dict[str, object] = {}  # application state: name -> snapshot/restore
        # A shard (psoup/shard) numbers its changes with the front-end's operation ids:
        # ``op_tag`` goes into each change's log record, and ``on_tag`` hears each one
        # replayed at recovery, so the shard knows the last operation it made durable.
        self.op_tag: int | None = None
        self.on_tag: Callable[[int], None] | None = None
        self.replay_lsn: int | None = None  # recovery: the LSN of the record it replays

    def _log(self, op: str, fields: dict, columns: Sequence[np.ndarray] = ()):
        """Hand a change to the journal before it is made; returns what the journal
        returns (for a bulk load, the file that holds its rows), else None."""
        if self.journal is not None and not self._quiet:
            if self.op_tag is not None:
                fields = {**fields, "tag": self.op_tag}
            return self.journal(op, fields, list(columns))
        return None

    # ================================================================ streams
    def create_stream(
        self,
        name: str,
        schema: Mapping[str, str] | Sequence[tuple[str, str]],
        time: str,
        max_window: int | float | None = None,
        owner: str | None = None,
        *,
        recovered: bool = False,
        partition_by: str | None = None,
    ) -> Schema:
        """Declare a stream, owned by ``owner`` (the server's client id; None without
        authentication). Raises SchemaError or AlreadyExistsError. O(attributes).
        ``recovered``: the declaration comes from a data directory, written before
        reserved words were refused as names; it is taken as it was. ``partition_by``:
        the int or str attribute a sharded server spreads the stream's tuples by
        (psoup/shard); one engine only keeps it in the catalog."""
        sch = _make_schema(name, schema, time, max_window, reserved_ok=recovered)
        if partition_by is not None:
            if partition_by not in sch.names:
                raise SchemaError(
                    f"partition_by: {partition_by!r} is not an attribute of {name!r} "
                    f"({', '.join(sch.names)})"
                )
            if sch.type_of(partition_by) not in ("int", "str"):
                raise SchemaError(
                    f"partition_by: {partition_by!r} is a {sch.type_of(partition_by)}; "
                    "streams are partitioned by an int or str attribute"
                )
        with self.lock:
            if name in self.streams:
                raise AlreadyExistsError(f"stream {name!r} already exists")
            extra = {"partition_by": partition_by} if partition_by is not None else {}
            self._log(
                "create_stream",
                {"name": name, "schema": [list(a) for a in zip(sch.names, sch.types, strict=True)],
                 "time": time, "max_window": max_window, "owner": owner, **extra},
            )  # fmt: skip
            self.streams[name] = Stream(
                name, sch, max_window, DataSteM(sch, self.block_rows, self.segment_blocks),
                owner=owner, partition_by=partition_by,
            )  # fmt: skip
            return sch

    def set_grant(self, name: str, client: str, right: str, granted: bool) -> bool:
        """Grant (``granted``) or revoke ``right`` ('read' or 'write') on stream ``name``
        to ``client``; returns whether anything changed (an unchanged grant is not
        logged). Who may do it is the caller's business (psoup/access.py). Raises
        UnknownStreamError, or SchemaError for another right. O(1)."""
        if right not in RIGHTS:
            raise SchemaError(f"right: {right!r} is not one of {', '.join(RIGHTS)}")
        with self.lock:
            st = self._stream(name)
            has = right in st.grants.get(client, ())
            if has == granted:
                return False
            self._log(
                "grant", {"stream": name, "client": client, "right": right, "granted": granted}
            )
            if granted:
                st.grants.setdefault(client, set()).add(right)
            else:
                st.grants[client].discard(right)
                if not st.grants[client]:
                    del st.grants[client]
            return True

    def drop_stream(self, name: str) -> None:
        """Remove a stream no registered query reads (else PreconditionError)."""
        with self.lock:
            st = self._stream(name)
            if st.queries:
                raise PreconditionError(
                    f"stream {name!r} is read by {len(st.queries)} registered queries; "
                    "unregister them first"
                )
            self._log("drop_stream", {"name": name})
            del self.streams[name]

    def _stream(self, name: str) -> Stream:
        st = self.streams.get(name)
        if st is None:
            raise UnknownStreamError(f"unknown stream {name!r}")
        return st

    def stream_figures(self) -> dict[str, dict[str, int]]:
        """Per stream: registered queries reading it, tuples retained, bytes they take
        (the metrics' gauges). O(streams)."""
        with self.lock:
            return {
                name: {"queries": len(st.queries), "tuples_stored": len(st.stem),
                       "bytes": st.stem.nbytes()}
                for name, st in self.streams.items()
            }  # fmt: skip

    def shard_status(self) -> list[dict]:
        """A sharded engine's shards (psoup/shard/front.py); none here."""
        return []

    def read_part(
        self, name: str, part: int, parts: int, with_ids: bool = False
    ) -> list[np.ndarray]:
        """Part ``part`` of ``parts`` of the stream's visible tuples, as columns in schema
        order (then their tuple ids, ``with_ids``): for reading a stream out in parallel.
        O(rows in the part)."""
        with self.lock:
            st = self._stream(name)
            s, e = st.visible_from(), st.stem.end_seq
            a = s + (e - s) * part // parts
            z = s + (e - s) * (part + 1) // parts
            cols = [st.stem.column(n, a, z) for n in st.schema.names]
            return [*cols, st.stem.tids(a, z)] if with_ids else cols

    def tuples_stored(self, name: str) -> int:
        """Tuples stream ``name`` retains now. O(1)."""
        with self.lock:
            return len(self._stream(name).stem)

    def schemas(self) -> dict[str, Schema]:
        return {n: s.schema for n, s in self.streams.items()}

    # ================================================================= ingest
    def insert(self, name: str, rows: Iterable[Sequence | Mapping]) -> InsertResult:
        """Append tuples (schema order, or dicts) to ``name``; rejected whole on any error."""
        with self.lock:
            st = self._stream(name)
            cols = rows_to_columns(st.schema, rows)
            return self._ingest(st, cols)

    def insert_columns(self, name: str, columns: Mapping[str, Sequence]) -> InsertResult:
        """Append tuples given column-wise (attribute -> values); rejected whole on error."""
        with self.lock:
            st = self._stream(name)
            return self._ingest(st, columns_to_arrays(st.schema, columns))

    def replace_contents(
        self,
        name: str,
        columns: Mapping[str, Sequence],
        *,
        tids: np.ndarray | None = None,
        advance_to=None,
        origin=None,
    ) -> InsertResult:
        """Replace every stored tuple of a stream with ``columns``, atomically.

        The rows may come in any time order: they are sorted (stably) by the time
        attribute first. Registered queries stay registered under their handles and are
        applied to the new contents as if registered now (new query x old data);
        subscriptions stay open. Raises BatchError (nothing changed) when a column is bad.
        Cost: O(n log n) for the sort (none when already in time order) plus the queries'
        probes of the new data. Memory: besides the input and the new storage, one int64
        permutation and one chunk of ``_REPLACE_CHUNK_ROWS`` rows; no sorted copy of the
        whole input is made (a 25-million-row load would otherwise need it twice).
        ``tids`` and ``advance_to``: a shard's part of a sharded load (psoup/shard), in
        time order with the front-end's tuple ids; the clock then moves as by
        ``insert_part``. Such a part's rows and ids are kept in a file by the journal (or
        were, ``origin``, when a log is replayed), which the stream then remembers
        (``Stream.loaded``) for a checkpoint to link.
        """
        with self.lock:
            st = self._stream(name)
            cols = columns_to_arrays(st.schema, columns)
            ts = cols[st.schema.time_index]
            n = len(ts)
            # (non-finite times were refused by columns_to_arrays)
            order = None
            if n > 1 and not bool(np.all(ts[1:] >= ts[:-1])):
                order = np.argsort(ts, kind="stable")
            if tids is not None:
                tids = np.asarray(tids, np.int64)
                if order is not None or len(tids) != n:
                    raise ValueRangeError("a shard's part must be in time order, an id a row")
            # Nothing below can fail on user input.
            if tids is None:
                self._log("replace", {"stream": name}, cols)
                origin = None  # its file holds no tuple ids
            else:
                fields = {"stream": name, "advance_to": advance_to}
                origin = self._log("replace", fields, [*cols, tids]) or origin
            self._quiet += 1  # its chunks are in the record
            try:
                affected = [self._by_qid[qid] for qid in sorted(st.queries)]
                for q in affected:
                    self._detach(q)
                self.strategy.reset_stream(name)
                st.stem = DataSteM(st.schema, self.block_rows, self.segment_blocks)
                st.loaded = None if origin is None else (st.stem.uid, origin, st.stem.end_seq, n)
                st.last_ts = None
                st.tuples_ingested = 0
                step = self._REPLACE_CHUNK_ROWS
                parts = []
                for a in range(0, max(n, 1), step):
                    rows = slice(a, a + step) if order is None else order[a : a + step]
                    given = None if tids is None else tids[rows]
                    parts.append(self._ingest(st, [c[rows] for c in cols], given=given))
                del order
                if advance_to is not None:
                    self._advance(st, advance_to)
                for q in affected:
                    self._attach(q)
            finally:
                self._quiet -= 1
            return InsertResult(
                parts[0].first_id,
                parts[-1].last_id,
                sum(r.count for r in parts),
                sum(r.matches for r in parts),
            )

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """A block of calls whose work may go out together at its end: a sharded engine
        (psoup/shard/front.py) sends each shard one call for the lot instead of one per
        operation. Nothing to do here: this engine does each call as it is made."""
        yield

    def insert_part(
        self, name: str, cols: list[np.ndarray], tids: np.ndarray | range, advance_to
    ) -> InsertResult:
        """Apply a shard's part of a batch (psoup/shard): typed columns in schema order
        with the tuple ids the front-end gave them (ascending, maybe none; a ``range``
        when they are consecutive), then move the stream's clock to ``advance_to``, the
        newest time of the whole batch, so retention and NOW are those of the whole
        stream. Logged as one record. Raises BatchError (nothing changed) for times
        before the stream's. O(rows) plus the probe."""
        with self.lock:
            st = self._stream(name)
            if isinstance(tids, range):
                given = np.arange(tids.start, tids.stop, dtype=np.int64)
            else:
                given = np.asarray(tids, np.int64)
            return self._ingest(st, list(cols), given=given, advance_to=advance_to)

    def _ingest(
        self,
        st: Stream,
        cols: list[np.ndarray],
        restored: np.ndarray | None = None,
        *,
        given: np.ndarray | None = None,
        advance_to=None,
    ) -> InsertResult:
        """Apply one batch. ``restored``: the batch comes from a checkpoint with these
        tuple ids; it is stored and matched but not logged, and no trigger or subscriber
        hears of it (the application's state and the next id come from the checkpoint).
        ``given`` and ``advance_to``: see ``insert_part``."""
        n = len(cols[0]) if cols else 0
        check_time(st.schema, cols, st.last_ts)
        if advance_to is not None and n and advance_to < cols[st.schema.time_index][-1]:
            raise ValueRangeError("advance_to is older than the part's newest tuple")
        if not n:
            if advance_to is not None:
                self._log("insert", {"stream": st.name, "advance_to": advance_to},
                          [*cols, np.empty(0, np.int64)])  # fmt: skip
                self._advance(st, advance_to)
            return InsertResult(self._next_tid, self._next_tid - 1, 0, 0)
        if restored is not None:
            tids = restored
        elif given is not None:
            self._log("insert", {"stream": st.name, "advance_to": advance_to}, [*cols, given])
            tids = given
            self._next_tid = max(self._next_tid, int(given[-1]) + 1)
        else:
            self._log("insert", {"stream": st.name}, cols)
            tids = np.arange(self._next_tid, self._next_tid + n, dtype=np.int64)
            self._next_tid += n
        # Nothing below can fail on user input: the batch is now applied whole.
        stem = st.stem
        first = stem.append(cols, tids)
        ts = cols[st.schema.time_index]
        st.last_ts = ts[-1].item()
        st.tuples_ingested += n
        if st.max_window is not None:
            stem.expire(st.last_ts - st.max_window)
        marked = 0
        if self.strategy.materializes and self.qstem.entries(st.name):
            by_name = dict(zip(st.schema.names, cols, strict=True))
            matches = self.qstem.probe(st.name, by_name, n)
            marked = self.strategy.mark(st.name, first, matches, ts, cols)
            if self._join_entries:
                marked += self._join_batch(st, first, n, matches)
        self.strategy.after_batch(st.name, st.last_ts, st.visible_from(), stem.start_seq)
        self.matches_marked += marked
        if advance_to is not None:
            self._advance(st, advance_to)
        if restored is not None:
            return InsertResult(int(tids[0]), int(tids[-1]), n, marked)
        if self._subs_by_qid:
            self._notify(st, first, int(tids[0]))
        if triggers := self._triggers.get(st.name):
            self._quiet += 1  # what a trigger inserts follows from the batch, logged already
            try:
                for trigger in triggers:
                    trigger(dict(zip(st.schema.names, cols, strict=True)))
            finally:
                self._quiet -= 1
        return InsertResult(int(tids[0]), int(tids[-1]), n, marked)

    def _advance(self, st: Stream, last_ts) -> None:
        """Move ``st``'s clock to ``last_ts`` without a tuple (never back): expiry, the
        strategy's windows and the join results follow. O(expired blocks)."""
        if st.last_ts is not None and last_ts <= st.last_ts:
            return
        st.last_ts = last_ts
        if st.max_window is not None:
            st.stem.expire(last_ts - st.max_window)
        self.strategy.after_batch(st.name, last_ts, st.visible_from(), st.stem.start_seq)
        if self._join_entries:
            self._expire_joins(st)

    def add_trigger(self, stream: str, fn: Callable[[dict[str, np.ndarray]], None]) -> None:
        """Call ``fn(columns)`` with every batch accepted into ``stream``, under the engine
        lock, after its matches are marked. A trigger may insert into other streams (a
        derived stream, like Linear Road's toll notifications); its errors propagate to
        the inserting caller, with the batch itself already applied."""
        with self.lock:
            self._stream(stream)
            self._triggers.setdefault(stream, []).append(fn)

    def add_state(self, name: str, state) -> None:
        """Keep an application's state in checkpoints: ``state.snapshot()`` is called
        under the engine lock, ``state.restore(bytes)`` at recovery (before the log after
        the checkpoint is replayed through the application's triggers). ``snapshot``
        returns bytes, or a list of bytes-like parts (the file holds them one after the
        other, and ``restore`` gets them joined) that the state leaves unchanged until
        its next ``snapshot``: a big state then copies itself into buffers of its own
        under the lock and is encoded and written by the checkpoint's writer, off the
        lock. The next ``snapshot`` comes only once that checkpoint is written."""
        with self.lock:
            self._states[name] = state

    # ============================================================== snapshots
    def capture(self) -> EngineImage:
        """An image of the engine as it is: streams (sealed blocks by reference, since
        they never change, the open ones copied), queries in registration order (their
        rows built when read, ``QueryRows``), the next tuple id and the application
        states. Under the lock; O(blocks + queries + states), no copy of stored data (a
        state may copy itself, ``add_state``). ``seconds`` says what each part took."""
        with self.lock:
            t0 = time.perf_counter()
            streams = [
                StreamImage(st.name, st.schema, st.max_window, st.last_ts, st.tuples_ingested,
                            st.stem.start_seq, st.stem.parts(),
                            (st.stem.uid, st.stem.start_seq, st.stem.end_seq), st.owner,
                            {c: sorted(r) for c, r in sorted(st.grants.items())},
                            st.partition_by, _loaded(st))
                for st in self.streams.values()
            ]  # fmt: skip
            t1 = time.perf_counter()
            # In registration order already (``_check``): a copy of the list, not a sort
            # (~60 ms under the lock for Linear Road's queries late in a run).
            queries = QueryRows(list(self.queries.values()))
            t2 = time.perf_counter()
            states = {name: st.snapshot() for name, st in self._states.items()}
            seconds = {"streams": t1 - t0, "queries": t2 - t1, "states": time.perf_counter() - t2}
            templates = [p.text for p in self._templates.values()]
            return EngineImage(streams, queries, self._next_tid, states, seconds, templates)

    _RESTORE_CHUNK_ROWS = 1 << 20

    def restore_image(self, img: EngineImage) -> None:
        """Make this engine (empty but for what an application installed: its streams,
        triggers and states) hold ``img``. The queries are registered first, over empty
        streams, and the rows then go through the ingest path in chunks of a million, so
        the results are rebuilt by the Query SteM's batch probe: O(rows x log queries),
        where registering each query over the stored rows would cost O(queries x
        segments). Raises SchemaError when an installed stream differs from the image's."""
        with self.lock:
            for si in img.streams:
                st = self.streams.get(si.name)
                if st is None:
                    self.create_stream(si.name, list(zip(si.schema.names, si.schema.types,
                                                         strict=True)),
                                       si.schema.time, si.max_window,
                                       recovered=True, partition_by=si.partition_by)  # fmt: skip
                    st = self.streams[si.name]
                elif (st.schema, st.max_window) != (si.schema, si.max_window):
                    raise SchemaError(f"stream {si.name!r} is declared differently now")
                st.stem = DataSteM.empty_at(
                    si.schema, si.start_seq, self.block_rows, self.segment_blocks
                )
                st.last_ts = None
                st.owner = si.owner
                st.grants = {c: set(r) for c, r in si.grants.items()}
            for name, blob in img.states.items():
                if name in self._states:
                    self._states[name].restore(blob)
            for text in img.templates:
                self.restore_template(text)
            for handle, text, params, owner, at in img.queries:
                self.restore_query(handle, text, params, owner, at)
            for si in img.streams:
                st = self.streams[si.name]
                for cols, tids in _chunks(si.parts, self._RESTORE_CHUNK_ROWS):
                    self._ingest(st, cols, restored=tids)
                st.last_ts = si.last_ts
                st.tuples_ingested = si.tuples_ingested
                if st.max_window is not None and st.last_ts is not None:
                    st.stem.expire(st.last_ts - st.max_window)
                self.strategy.after_batch(st.name, st.last_ts, st.visible_from(),
                                          st.stem.start_seq)  # fmt: skip
            self._next_tid = max(self._next_tid, img.next_tid)

    # =============================================================== register
    def register(
        self,
        text: str,
        params: Mapping[str, object] | None = None,
        owner: str | None = None,
        allow: Callable[[Sequence[str]], None] | None = None,
    ) -> str:
        """Register a standing query; returns its handle (128 random bits, hex).

        Raises a QueryError subclass (with line and column) when the text is refused.
        ``owner`` is kept with it (the server's client id). Cost: the new query probes
        the stored data of its streams (new query x old data).
        """
        return self.restore_query(
            secrets.token_hex(16), text, params, owner, time.time(), allow=allow
        )

    def restore_query(
        self,
        handle: str,
        text: str,
        params: Mapping[str, object] | None,
        owner: str | None,
        registered_at: float,
        allow: Callable[[Sequence[str]], None] | None = None,
    ) -> str:
        """Register a query under a given handle and registration time (recovery uses it
        to bring a query back as it was); returns the handle. ``allow(streams)``, given,
        is called with the streams the query reads once it compiles, and may refuse it by
        raising (nothing is registered then). As ``register`` otherwise."""
        with self.lock:
            spec = self.compile(text, params)
            plan = Plan(spec, self.schemas())
            return self._restore_planned(handle, text, params, owner, registered_at, spec, plan,
                                         allow)  # fmt: skip

    _RECENT_TEXTS = 1024

    def compile(self, text: str, params: Mapping[str, object] | None) -> QuerySpec:
        """``compile_query(text, params, <the streams' schemas>)`` from the text's kept
        ``Prepared``: O(factors) for a text registered (or prepared) before with
        parameters of the same names and types (psoup/query/prepared.py), else a parse
        and a bind. Raises the QueryError ``compile_query`` raises."""
        with self.lock:
            schemas = self.schemas()
            prep = self._recent.pop(text, None)
            if prep is not None:
                self._recent[text] = prep  # the most recent again
                return prep.bind(params, schemas)
            prep = prepare(text, schemas)
            spec = prep.bind(params, schemas)
            self._keep_recent(prep)
            return spec

    def _keep_recent(self, prep: Prepared) -> None:
        self._recent.pop(prep.text, None)
        if len(self._recent) >= self._RECENT_TEXTS:
            del self._recent[next(iter(self._recent))]
        self._recent[prep.text] = prep

    # ============================================================== templates
    def prepare(self, text: str, allow: Callable[[Sequence[str]], None] | None = None) -> Template:
        """Prepare ``text`` as a template: parsed and checked now, registered later for
        each parameter set by ``register_template`` (O(factors) to bind, where
        ``register`` parses and binds the text). Raises the QueryError of anything no
        parameter value can mend (syntax, names, types of literals and columns,
        unsupported shapes), with line and column; the parameters' values are checked at
        registration. Preparing a text again gives the same template. Durable.
        ``allow(streams)``, given, may refuse it by raising once it checks (nothing is
        kept then)."""
        with self.lock:
            schemas = self.schemas()
            prep = prepare(text, schemas)
            prep.check(schemas)
            if allow is not None:
                allow(list(prep.streams))
            tid = template_id(text)
            if tid not in self._templates:
                self._log("prepare", {"id": tid, "text": text})
                self._templates[tid] = prep
                self._keep_recent(prep)
            return Template(self, tid, text, prep.params, prep.streams)

    def restore_template(self, text: str) -> str:
        """Bring a template back as it was prepared (recovery); returns its id. Not
        checked again: a stream it reads may have gone since, and registering it then
        says so as it did before."""
        with self.lock:
            tid = template_id(text)
            if tid not in self._templates:
                self._templates[tid] = prep = prepare(text, self.schemas())
                self._keep_recent(prep)
            return tid

    def template_count(self) -> int:
        """How many templates were prepared. O(1)."""
        return len(self._templates)

    def is_prepared(self, text: str) -> bool:
        """Whether ``text`` was prepared as a template. O(len(text))."""
        return template_id(text) in self._templates

    def template(self, template_id: str) -> Template:
        """The template ``template_id``; UnknownTemplateError when none was prepared."""
        with self.lock:
            prep = self._prepared_template(template_id)
            return Template(self, template_id, prep.text, prep.params, prep.streams)

    def _prepared_template(self, template_id: str) -> Prepared:
        prep = self._templates.get(template_id)
        if prep is None:
            raise UnknownTemplateError(f"template_id {template_id!r} is not prepared")
        return prep

    def register_template(
        self,
        template_id: str,
        params: Mapping[str, object] | None = None,
        owner: str | None = None,
        allow: Callable[[Sequence[str]], None] | None = None,
    ) -> str:
        """Register the template ``template_id`` for ``params``; returns the new query's
        handle. The query is the one ``register(text, params)`` makes, logged the same.
        UnknownTemplateError when none was prepared; the QueryError of ``register`` when
        ``params`` do not fit (names, types), at its position in the template's text."""
        with self.lock:
            text = self._prepared_template(template_id).text
            return self.restore_query(secrets.token_hex(16), text, params, owner, time.time(),
                                      allow=allow)  # fmt: skip

    def _restore_planned(
        self, handle, text, params, owner, registered_at, spec, plan, allow=None
    ) -> str:
        """``restore_query`` once ``text`` is compiled to ``spec`` and ``plan``."""
        with self.lock:
            if allow is not None:
                allow(list(dict.fromkeys(plan.streams)))
            if handle in self.queries:
                raise AlreadyExistsError(f"handle {handle!r} is registered already")
            self._log(
                "register",
                {"handle": handle, "text": text, "params": dict(params or {}), "owner": owner,
                 "registered_at": registered_at},
            )  # fmt: skip
            qid = self._next_qid
            self._next_qid += 1
            q = Query(qid, handle, spec, plan, [], text, dict(params or {}), registered_at)
            q.owner = owner
            if self.journal is not None:
                # Its checkpoint row now, a few µs, rather than in one burst with every
                # other query registered since the last checkpoint, on the writer's
                # thread beside the engine thread (a Linear Road front-end registers
                # ~20,000 between two checkpoints: ~0.1 s of the interpreter's time).
                QueryRows.encode(q)
            self.queries[handle] = q
            self._by_qid[qid] = q
            self._attach(q)
            return handle

    def _attach(self, q: Query) -> None:
        """Give ``q`` fresh entries, index them and apply them to the stored data."""
        q.entries = []
        for src in range(len(q.plan.streams)):
            entry = self._next_entry
            self._next_entry += 1
            q.entries.append(entry)
            self._entry_owner[entry] = q.qid << _SRC_BITS | src
        for s in q.plan.streams:
            self.streams[s].queries.add(q.qid)
        if q.plan.is_join:
            self._register_join(q)
        else:
            self._register_selection(q)

    def _detach(self, q: Query) -> None:
        """Remove ``q``'s entries from the Query SteM and its results (not its handle)."""
        for src, entry in enumerate(q.entries):
            stream = q.plan.streams[src]
            if self.strategy.materializes:
                self.qstem.remove(stream, entry)
            self._join_entries.discard(entry)
            del self._entry_owner[entry]
        for s in set(q.plan.streams):
            self.streams[s].queries.discard(q.qid)
        if self.strategy.materializes:
            self.strategy.drop(q.qid, q.entries)

    def _register_selection(self, q: Query) -> None:
        st = self.streams[q.plan.streams[0]]
        entry = q.entries[0]
        pred = q.plan.local[0]
        if self.strategy.materializes:
            self.qstem.add(st.name, st.schema, entry, pred)
            seqs = st.stem.probe(pred, st.visible_from(), st.stem.end_seq)
        else:
            seqs = np.empty(0, dtype=np.int64)
        ts = st.stem.gather(st.schema.time, seqs)
        self.strategy.add_selection(q.qid, entry, st.name, seqs, ts)
        if isinstance(self.strategy, PSoupC):
            if not q.spec.is_aggregate:  # its result is its rows: kept whole
                out_at = self._out_at(q, st)
                self.strategy.keep_values(entry, out_at, st.stem.gather_at(out_at, seqs))
            self.strategy.watch(st.name, entry, q.spec.window, st.last_ts, st.visible_from())

    def _register_join(self, q: Query) -> None:
        if not self.strategy.materializes:
            return
        plan = q.plan
        for src, entry in enumerate(q.entries):
            st = self.streams[plan.streams[src]]
            self.qstem.add(st.name, st.schema, entry, plan.local[src])
            self._join_entries.add(entry)
        col = self.strategy.results.add_join(q.qid, plan.streams)
        s0 = self.streams[plan.streams[0]]
        s1 = self.streams[plan.streams[1]]
        left = s0.stem.probe(plan.local[0], s0.visible_from(), s0.stem.end_seq)
        col.add(self._pairs(plan, 0, left, s1.visible_from(), s1.stem.end_seq))

    def _join_batch(self, st: Stream, first: int, n: int, matches) -> int:
        """New data x old queries for two-source entries: probe the other Data SteM."""
        wanted = {
            e for e in self._join_entries if self._entry_owner[e] >> _SRC_BITS in self._by_qid
        }
        found = 0
        for entry, offs in matches.by_entry():
            if entry not in wanted:
                continue
            owner = self._entry_owner[entry]
            qid, src = owner >> _SRC_BITS, owner & _SRC_MASK
            q = self._by_qid[qid]
            plan = q.plan
            if plan.streams[src] != st.name:
                continue
            other = self.streams[plan.streams[1 - src]]
            lo = other.visible_from()
            hi = other.stem.end_seq
            if src == 1 and plan.streams[0] == st.name:
                # Self join: pairs with a new left tuple were found from source 0 already.
                hi = min(hi, first)
            pairs = self._pairs(plan, src, offs + first, lo, hi)
            self.strategy.results.join(qid).add(pairs)
            found += len(pairs)
        if found:
            self._expire_joins(st)
        return found

    def _pairs(self, plan: Plan, src: int, seqs: np.ndarray, lo: int, hi: int) -> list[tuple]:
        """Result pairs of source ``src``'s tuples at ``seqs`` with the other's in [lo, hi)."""
        mine = self.streams[plan.streams[src]]
        other = self.streams[plan.streams[1 - src]]
        # Rows of a large batch may expire within the batch itself: they join nothing.
        seqs = seqs[seqs >= mine.visible_from()]
        if not len(seqs) or lo >= hi:
            return []
        ms, os_ = mine.stem, other.stem
        my_ts = ms.gather(mine.schema.time, seqs).tolist()
        my_tid = ms.gather_tids(seqs).tolist()
        attrs = plan.join_attrs(src)
        my_vals = {a: ms.gather(a, seqs).tolist() for a in attrs}
        out = []
        for i, seq in enumerate(seqs.tolist()):
            pred = plan.substitute(src, {a: my_vals[a][i] for a in attrs})
            hits = os_.probe(pred, lo, hi)
            if not len(hits):
                continue
            ots = os_.gather(other.schema.time, hits).tolist()
            otid = os_.gather_tids(hits).tolist()
            t, tid = my_ts[i], my_tid[i]
            for oseq, ot, oid in zip(hits.tolist(), ots, otid, strict=True):
                if src == 0:
                    out.append((min(t, ot), tid, oid, max(t, ot), seq, oseq))
                else:
                    out.append((min(t, ot), oid, tid, max(t, ot), oseq, seq))
        return out

    def _expire_joins(self, st: Stream) -> None:
        for qid in st.queries:
            q = self._by_qid[qid]
            if not q.plan.is_join:
                continue
            horizons = []
            for s in q.plan.streams:
                o = self.streams[s]
                if o.max_window is None or o.last_ts is None:
                    break
                horizons.append(o.last_ts - o.max_window)
            else:
                self.strategy.results.join(qid).drop_older(min(horizons))

    # ============================================================= unregister
    def unregister(self, handle: str) -> None:
        """Forget a query: its index entries and result column are freed."""
        with self.lock:
            q = self._query(handle)
            self._log("unregister", {"handle": handle})
            self._detach(q)
            del self.queries[handle]
            del self._by_qid[q.qid]
            for sub in self._subs_by_qid.pop(q.qid, set()):
                _, callback, _ = self._subs.pop(sub)
                callback(None, 0)

    # ========================================================== subscriptions
    def subscribe(
        self, handle: str, callback: Callable[[Result | PSoupError | None, int], None]
    ) -> int:
        """Call ``callback(result, first_tid)`` with each batch's new matches of a query.

        For selections and joins ``result`` holds the rows inside the window (as of the
        NOW after the batch) that involve a tuple of the batch, in result order; for
        aggregates, the new aggregate rows whenever a batch changed them. ``first_tid``
        is the batch's first tuple id. ``callback(None, 0)`` says the query was
        unregistered; ``callback(err, first_tid)`` with a ResultOverflowError that an
        aggregate's new value does not fit its type (the batch stands). Callbacks run on
        the ingesting thread under the engine lock and must not block. Returns a
        subscription id for ``unsubscribe``. Cost per batch per subscription: a read of
        the column over the batch's rows (joins and aggregates: over the window).
        """
        with self.lock:
            q = self._query(handle)
            sub = self._next_sub
            self._next_sub += 1
            last = self._evaluate(q, None).rows if q.spec.is_aggregate else None
            self._subs[sub] = [q.qid, callback, last]
            self._subs_by_qid.setdefault(q.qid, set()).add(sub)
            return sub

    def unsubscribe(self, sub: int) -> None:
        """Stop a subscription (no-op if it already ended). O(1)."""
        with self.lock:
            entry = self._subs.pop(sub, None)
            if entry is not None:
                subs = self._subs_by_qid[entry[0]]
                subs.discard(sub)
                if not subs:
                    del self._subs_by_qid[entry[0]]

    def _notify(self, st: Stream, first: int, first_tid: int) -> None:
        for qid in sorted(st.queries & self._subs_by_qid.keys()):
            q = self._by_qid[qid]
            now = self._now(q)
            bounds = q.spec.window.resolve(now)
            spec = q.spec
            types = spec.types
            if spec.is_aggregate:
                try:
                    rows = self._evaluate(q, now).rows
                except ResultOverflowError as exc:  # the batch stands; the subscribers hear
                    for sub in sorted(self._subs_by_qid[qid]):
                        self._subs[sub][1](exc, first_tid)
                    continue
            elif q.plan.is_join:
                cols = self._invoke_join(q, bounds, new=(st.name, first), columnar=True)
                new = Result(spec.columns, types, now=now, window=bounds, arrays=cols)
            else:  # the batch's rows in the window: one Result (immutable) for every sub
                new = (q.reader or self._reader(q))(now, first)
            for sub in sorted(self._subs_by_qid[qid]):
                entry = self._subs[sub]
                if spec.is_aggregate:
                    if rows == entry[2]:
                        continue
                    entry[2] = rows
                    res = Result(spec.columns, types, list(rows), now, bounds)
                elif not len(new):
                    continue
                else:
                    res = new
                entry[1](res, first_tid)

    def _now(self, q: Query):
        """NOW for ``q``: the latest timestamp of its streams (None before any tuple)."""
        if len(q.plan.streams) == 1:
            return self.streams[q.plan.streams[0]].last_ts
        stamps = [self.streams[s].last_ts for s in q.plan.streams]
        stamps = [t for t in stamps if t is not None]
        return max(stamps) if stamps else None

    def _query(self, handle: str) -> Query:
        q = self.queries.get(handle) if isinstance(handle, str) else None
        if q is None:
            raise UnknownHandleError("unknown query handle")
        return q

    def describe(self, handle: str) -> Query:
        with self.lock:
            return self._query(handle)

    # ================================================================= invoke
    def invoke(self, handle: str, now: int | float | None = None) -> Result:
        """The query's current result over its window, as of ``now`` (default: NOW).

        NOW is the largest timestamp ingested into the query's streams. Cost for a
        selection under PSoup-P: O(log n) to place the window plus a read of the
        column's bits inside it, O(window/8 + matches); never outside the window.
        """
        with self.lock:
            q = self._query(handle)
            if now is not None:
                self._check_now(q, now)
            q.invocations += 1
            return (q.reader or self._reader(q))(now)  # as _evaluate, one call less

    def invoke_later(self, handle: str, now: int | float | None = None) -> Callable[[], Result]:
        """Start an invoke in the engine's order of operations; returns the function that
        gives its result. This engine computes the result here and the function only
        returns it; the sharded engine sends the shards their calls here and waits for
        their answers in the function, so that the server's engine thread, which starts
        the invoke, never waits on a shard. Cost as ``invoke``."""
        result = self.invoke(handle, now)
        return lambda: result

    def invoke_parts(self, handle: str, now: int | float | None = None):
        """What a shard contributes to a sharded invoke (the front-end merges them):
        ``(now, bounds, arrays, tids)`` for a selection, one array per output column
        and the rows' tuple ids (an int64 array) to merge by; ``(now, bounds, rows,
        keys)`` for a join, each pair's order key the older tuple's time and both ids;
        ``(now, bounds, partial, None)`` for an aggregate, with ``result.partial``'s
        mergeable state per group. Cost as ``invoke``."""
        with self.lock:
            q = self._query(handle)
            if now is not None:
                self._check_now(q, now)
            q.invocations += 1
            return self._evaluate(q, now, parts=True)

    def invoke_since(self, handle: str, stream: str, first_tid: int):
        """What a subscription hears of a batch (as ``subscribe``'s callback), for a
        sharded front-end: the rows involving a tuple of ``stream`` with an id at or after
        ``first_tid``, in ``invoke_parts``' form (a selection's as arrays and tuple ids),
        or for an aggregate its whole partial state (the front-end compares merged
        results).
        O(log n) to find the batch, then as the subscription's own read."""
        with self.lock:
            q = self._query(handle)
            now = self._now(q)
            bounds = q.spec.window.resolve(now)
            if q.spec.is_aggregate:
                return self._evaluate(q, now, parts=True)
            since = self._seq_of_tid(self.streams[stream], first_tid)
            keys: list = []
            if q.plan.is_join:
                rows = self._invoke_join(q, bounds, new=(stream, since), keys=keys)
                return now, bounds, rows, keys
            cols = self._invoke_selection(q, bounds, since=since, keys=keys)
            return now, bounds, tuple(cols), keys[0]

    @staticmethod
    def _out_at(q: Query, st: Stream) -> tuple[int, ...]:
        """The stream's column positions of a plain selection's output, in its order
        (found once per query). O(columns)."""
        if q.out_at is None:
            q.out_at = tuple(st.schema.index_of(item.col.attr) for item in q.spec.select)
        return q.out_at

    @staticmethod
    def _seq_of_tid(st: Stream, tid: int) -> int:
        """The first stored seq whose tuple id is at least ``tid`` (ids grow with seqs).
        O(log n) single-row lookups."""
        lo, hi = st.stem.start_seq, st.stem.end_seq
        while lo < hi:
            mid = (lo + hi) // 2
            if int(st.stem.tids(mid, mid + 1)[0]) < tid:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _check_now(self, q: Query, now) -> None:
        """ValueRangeError unless ``now`` is a finite number that fits the time attribute
        of each of ``q``'s streams: within the 64-bit range for an int one."""
        if isinstance(now, bool) or not isinstance(now, int | float | np.integer | np.floating):
            raise ValueRangeError(f"now: must be a number, not {type(now).__name__}")
        if not math.isfinite(now):
            raise ValueRangeError(f"now: must be a finite number, not {now}")
        for name in dict.fromkeys(q.plan.streams):
            sch = self.streams[name].schema
            if sch.types[sch.names.index(sch.time)] == "int" and not INT64_MIN <= now <= INT64_MAX:
                raise ValueRangeError(
                    f"now: {now!r} is outside [{INT64_MIN}, {INT64_MAX}]: the time "
                    f"attribute {sch.time!r} of stream {name!r} is a 64-bit int"
                )

    def _evaluate(self, q: Query, now, parts: bool = False):
        """``q``'s Result as of ``now`` (None: the current NOW); with ``parts``, what a
        shard contributes instead (``invoke_parts``)."""
        if not parts:
            return (q.reader or self._reader(q))(now)
        now, bounds = self._placed(q, now)
        keys: list = []
        if q.plan.is_join:
            rows = self._invoke_join(q, bounds, keys=keys)
        elif q.spec.is_aggregate:
            rows = self._invoke_selection(q, bounds, keys=keys)
        else:
            cols = self._invoke_selection(q, bounds, keys=keys)
            return now, bounds, tuple(cols), keys[0]
        return now, bounds, rows, None if q.spec.is_aggregate else keys

    def _placed(self, q: Query, now) -> tuple:
        """``(now, window)``: NOW (the current one when ``now`` is None) and the window
        it places, None when it cannot be placed. O(streams of q)."""
        if now is None:
            now = self._now(q)
        return now, _clamped(q.spec.window.resolve(now))

    def _reader(self, q: Query) -> Callable[..., Result]:
        """The function that answers ``q``'s invokes, given NOW (None: the current),
        made on its first invoke and kept: a plain selection's steps bound once
        (``_selection_reader``, which also reads what a subscription hears), else the
        general evaluation. O(1) after the first."""
        if q.plan.is_join or q.spec.is_aggregate:
            read = functools.partial(self._evaluate_whole, q)
        else:
            read = self._selection_reader(q)
        q.reader = read
        return read

    def _evaluate_whole(self, q: Query, now) -> Result:
        """A join's or an aggregate's Result as of ``now`` (None: the current NOW)."""
        now, bounds = self._placed(q, now)
        spec = q.spec
        if q.plan.is_join:
            out = self._invoke_join(q, bounds, columnar=True)
        else:
            out = self._invoke_selection(q, bounds)
        if spec.is_aggregate:
            return Result(spec.columns, spec.types, out, now, bounds)
        return Result.of_owned_arrays(spec.columns, spec.types, out, now, bounds)

    def _selection_reader(self, q: Query) -> Callable[..., Result]:
        """A plain one-stream selection's invoke as one function ``read(now, since=0)``
        of NOW (None: the current), only matches at seqs >= ``since`` counted (a
        subscription's batch): what a general path would decide at every call (the
        strategy, the window's kinds, the output's positions) decided here, once. What
        may change (the stream's store, the query's entry) is read at each call. Cost as
        ``invoke``: placing the window, the strategy's read, one take per chunk."""
        spec = q.spec
        name = q.plan.streams[0]
        st = self.streams[name]  # a stream outlives the queries that read it (drop_stream)
        columns, types = spec.columns, spec.types
        out_at = self._out_at(q, st)
        begin, end = spec.window.begin, spec.window.end
        at0, at1 = begin.kind == "now", end.kind == "now"
        shape = (at0, begin.value, at1, end.value)
        strat = self.strategy
        local = q.plan.local[0] if isinstance(strat, NoMat) else None
        keeps = isinstance(strat, PSoupC)
        rows = strat.selection_rows
        of_arrays = Result.of_owned_arrays

        def read(now, since: int = 0) -> Result:
            if now is None and not since:
                # NOW's window is placed once per state of the stream and shape of window
                # (all the queries of that shape share it), not at every invoke.
                stem, p = st.stem, st.placed
                if p[0] != stem.uid or p[1] != stem.version or p[2] != st.last_ts:
                    p = st.placed = (stem.uid, stem.version, st.last_ts, {})
                got = p[3].get(shape)
                if got is None:
                    got = _place(st, shape, None)
                    if len(p[3]) < 64:  # a handful of shapes in use; bounded anyway
                        p[3][shape] = got
                now, bounds, s, e = got
            else:
                now, bounds, s, e = _place(st, shape, now, since)
            if local is not None:  # NoMat: run the query over the window
                seqs = st.stem.probe(local, s, e) if s < e else _NO_SEQS
            else:
                entry = q.entries[0]
                if keeps and (kept := strat.selection_arrays(entry, s, e)) is not None:
                    # PSoup-C keeps a plain selection's output columns: its result is a
                    # slice of each (views that never change), not a gather.
                    return of_arrays(columns, types, kept, now, bounds)
                seqs = rows(entry, name, s, e) if s < e else _NO_SEQS
            # frozen=True, positional: ~0.2 µs less for the two calls
            arrays = st.stem.gather_at(out_at, seqs, True)
            return of_arrays(columns, types, arrays, now, bounds, True)

        return read

    def _invoke_selection(
        self, q: Query, bounds, since: int = 0, keys: list | None = None
    ) -> list | dict:
        """Over ``bounds``, only matches at seqs >= ``since`` counted: an aggregate's
        rows, or with ``keys`` (a list) its partial state (``invoke_parts``); a plain
        selection's output columns as arrays, its rows' tuple ids put in ``keys`` as one
        array (what a shard contributes). A plain selection's own invoke is
        ``_selection_reader``'s. O(matches x columns) past the strategy's read."""
        st = self.streams[q.plan.streams[0]]
        spec = q.spec
        s, e = st.seqs_in(bounds, since)
        strat = self.strategy
        entry = q.entries[0]
        if isinstance(strat, NoMat):
            seqs = st.stem.probe(q.plan.local[0], s, e) if s < e else _NO_SEQS
        elif (
            spec.is_aggregate
            and spec.group_by is None
            and all(i.func == "COUNT" for i in spec.select)
        ):
            n = strat.selection_count(entry, st.name, s, e) if s < e else 0
            if keys is not None:
                return {None: [n for _ in spec.select]}
            return [tuple(n for _ in spec.select)]
        else:
            seqs = strat.selection_rows(entry, st.name, s, e) if s < e else _NO_SEQS
        attrs = spec.read_attrs
        if q.read_at is None:  # the attributes' positions in the stream, once per query
            q.read_at = tuple(st.schema.index_of(a) for a in attrs)
        # A shard's rows go with their tuple ids: gathered with the values, in one pass.
        with_tids = keys is not None and not spec.is_aggregate
        got = st.stem.gather_at((*q.read_at, None) if with_tids else q.read_at, seqs)
        if with_tids:
            *got, tids = got
            keys.append(tids)
        values = dict(zip(attrs, got, strict=True))

        def fetch(item):
            return values[item.col.attr]

        if spec.is_aggregate:
            group = values[spec.group_by.attr] if spec.group_by else None
            if keys is not None:
                return partial(spec, len(seqs), fetch, group)
            return aggregate(spec, len(seqs), fetch, group)
        return project_columns(spec, len(seqs), fetch)

    def _invoke_join(
        self,
        q: Query,
        bounds,
        new: tuple[str, int] | None = None,
        keys: list | None = None,
        columnar: bool = False,
    ) -> list:
        """Result rows over ``bounds``; with ``new=(stream, seq)`` only the pairs that
        involve a tuple of that stream at or after that seq. O(pairs in the window).
        ``keys``, ``columnar``: as ``_invoke_selection``'s (a pair's key: older time,
        both ids)."""
        plan = q.plan
        spec = q.spec
        s0, s1 = (self.streams[s] for s in plan.streams)
        pairs: list[tuple[int, int]] = []
        if bounds is not None and bounds[0] <= bounds[1]:
            lo, hi = bounds
            v0, v1 = s0.visible_from(), s1.visible_from()
            if isinstance(self.strategy, NoMat):
                a0, z0 = s0.stem.seq_range(lo, hi)
                a1, z1 = s1.stem.seq_range(lo, hi)
                left = s0.stem.probe(plan.local[0], max(a0, v0), z0)
                found = self._pairs(plan, 0, left, max(a1, v1), z1)
                found.sort()
                pairs = [(p[4], p[5]) for p in found]
            else:
                pairs = self.strategy.results.join(q.qid).rows(lo, hi, v0, v1)
            if new is not None:
                name, since = new
                n0, n1 = plan.streams[0] == name, plan.streams[1] == name
                pairs = [p for p in pairs if (n0 and p[0] >= since) or (n1 and p[1] >= since)]
        seq0 = np.array([p[0] for p in pairs], dtype=np.int64)
        seq1 = np.array([p[1] for p in pairs], dtype=np.int64)
        stems = (s0.stem, s1.stem)
        seqs = (seq0, seq1)

        def fetch_col(col):
            # gather needs ascending seqs: sort, gather, unsort.
            sq = seqs[col.source]
            order = np.argsort(sq, kind="stable")
            vals = stems[col.source].gather(col.attr, sq[order])
            out = np.empty_like(vals)
            out[order] = vals
            return out

        def fetch(item):
            return fetch_col(item.col)

        if spec.is_aggregate:
            group = fetch_col(spec.group_by) if spec.group_by else None
            if keys is not None:
                return partial(spec, len(pairs), fetch, group)
            return aggregate(spec, len(pairs), fetch, group)
        if keys is not None and pairs:
            t0, t1 = (_unsorted(functools.partial(st.stem.gather, st.schema.time), sq)
                      for st, sq in ((s0, seq0), (s1, seq1)))  # fmt: skip
            id0, id1 = (_unsorted(st.stem.gather_tids, sq) for st, sq in ((s0, seq0), (s1, seq1)))
            keys.extend(zip(np.minimum(t0, t1).tolist(), id0.tolist(), id1.tolist(),
                            strict=True))  # fmt: skip
        if columnar:
            return project_columns(spec, len(pairs), fetch)
        return project(spec, len(pairs), fetch)

    # ================================================================== stats
    def stats_later(self) -> Callable[[], dict[str, object]]:
        """``stats`` in two steps, as ``invoke_later``: the function gives the figures."""
        figures = self.stats()
        return lambda: figures

    def stats(self) -> dict[str, object]:
        """Per stream and per engine counters. O(streams + columns)."""
        with self.lock:
            streams = {}
            for name, st in self.streams.items():
                streams[name] = {
                    "tuples_stored": len(st.stem),
                    "tuples_ingested": st.tuples_ingested,
                    "bytes": st.stem.nbytes(),
                    "indexed_blocks": st.stem.indexed_attrs(),
                    "query_entries": self.qstem.entries(name),
                    "interval_index_layouts": self.qstem.layouts(name),
                    "last_ts": st.last_ts,
                }
            return {
                "strategy": self.strategy.name,
                "queries": len(self.queries),
                "templates": len(self._templates),
                "matches_marked": self.matches_marked,
                "results": self.strategy.results.stats(),
                "streams": streams,
            }

    def close(self) -> None:
        """Release the engine's state (streams and queries are forgotten; a durable
        engine's log is forced to disk and its data directory released)."""
        with self.lock:
            if self.storage is not None:
                self.storage.close()
                self.storage = None
                self.journal = None
            self.streams.clear()
            self.queries.clear()
            self._by_qid.clear()
            self._templates.clear()
            self._recent.clear()
            self._subs.clear()
            self._subs_by_qid.clear()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check(self) -> None:
        """Verify every structure's invariants (for tests)."""
        with self.lock:
            for st in self.streams.values():
                st.stem._check()
                p = st.placed  # the kept placements, while current, are as placed anew
                if (p[0], p[1], p[2]) == (st.stem.uid, st.stem.version, st.last_ts):
                    for shape, got in p[3].items():
                        assert got == _place(st, shape, None), "a kept placement differs"
            self.qstem._check()
            self.strategy.results._check()
            if isinstance(self.strategy, PSoupC):
                self.strategy._check()
                for entry, m in self.strategy.lists.items():
                    if m.positions is None:
                        continue
                    # The kept values are the stored ones.
                    q = self._by_qid[self._entry_owner[entry] >> _SRC_BITS]
                    stored = self.streams[q.plan.streams[0]].stem.gather_at(
                        m.positions, m.seqs[m.head : m.n]
                    )
                    for v, want in zip(m.vals, stored, strict=True):
                        nan = v.dtype.kind == "f"
                        assert np.array_equal(v[m.head : m.n], want, equal_nan=nan), (
                            "a kept value differs"
                        )
            # The queries are kept in registration order (a new handle goes last).
            qids = [q.qid for q in self.queries.values()]
            assert qids == sorted(qids), "queries out of registration order"
            assert list(self._by_qid) == qids
            assert all(template_id(p.text) == t for t, p in self._templates.items())
            assert len(self._recent) <= self._RECENT_TEXTS


_NO_SEQS = np.empty(0, np.int64)
_NO_SEQS.setflags(write=False)


def _place(st: Stream, shape: tuple, now, since: int = 0) -> tuple:
    """``(now, bounds, s, e)``: NOW (None: the stream's clock), the window of ``shape``
    (``(at0, b0, at1, b1)``: an end is NOW plus its constant when its flag is set, else
    the constant) placed at it (None when it needs a NOW there is not), and the visible
    stored seqs ``[s, e)`` inside it from ``since`` on. O(log n)."""
    at0, b0, at1, b1 = shape
    if now is None:
        now = st.last_ts
    if now is None and (at0 or at1):
        bounds = None
    else:
        lo, hi = now + b0 if at0 else b0, now + b1 if at1 else b1
        bounds = (lo, hi)
        if not (INT64_MIN <= lo <= INT64_MAX and INT64_MIN <= hi <= INT64_MAX):
            bounds = _clamped(bounds)  # (rare: a call saved on every invoke)
    return (now, bounds, *st.seqs_in(bounds, since))


def _clamped(bounds: tuple | None) -> tuple | None:
    """A window's ``(lo, hi)`` with an int end past the 64-bit range set to the range's
    own end, which selects the same rows (every stored time is within it) and keeps the
    window sendable; floats and None as they are. O(1)."""
    if bounds is None or (
        INT64_MIN <= bounds[0] <= INT64_MAX and INT64_MIN <= bounds[1] <= INT64_MAX
    ):
        return bounds
    return tuple(min(max(b, INT64_MIN), INT64_MAX) if isinstance(b, int) else b for b in bounds)


def _loaded(st: Stream) -> tuple | None:
    """``StreamImage.loaded`` of ``st``: its bulk load's (file, first seq, rows) while
    the stem that load made is the stream's, else None."""
    if st.loaded is None or st.loaded[0] != st.stem.uid:
        return None
    return st.loaded[1:]


def _unsorted(gather: Callable[[np.ndarray], np.ndarray], seqs: np.ndarray) -> np.ndarray:
    """``gather(seqs)`` for seqs in any order (gathers need them ascending). O(n log n)."""
    order = np.argsort(seqs, kind="stable")
    vals = gather(seqs[order])
    out = np.empty_like(vals)
    out[order] = vals
    return out


def _chunks(parts, rows: int):
    """(columns, tids) of ``parts`` joined into chunks of about ``rows`` rows."""
    buf: list = []
    size = 0
    for cols, tids in parts:
        buf.append((cols, tids))
        size += len(tids)
        if size >= rows:
            yield _join(buf)
            buf, size = [], 0
    if size:
        yield _join(buf)


def _join(parts) -> tuple[list[np.ndarray], np.ndarray]:
    if len(parts) == 1:
        return parts[0]
    cols = [np.concatenate([p[0][i] for p in parts]) for i in range(len(parts[0][0]))]
    return cols, np.concatenate([p[1] for p in parts])


def _make_schema(name: str, schema, time: str, max_window, reserved_ok: bool = False) -> Schema:
    from psoup.query.lexer import KEYWORDS  # a query could not name a reserved word

    if not isinstance(name, str) or not name or not set(name) <= _NAME_OK or name[0].isdigit():
        raise SchemaError(
            f"bad stream name {name!r}: use letters, digits and _, not starting with a digit"
        )
    if name.upper() in KEYWORDS and not reserved_ok:
        raise SchemaError(f"bad stream name {name!r}: it is a reserved word of the query language")
    items = list(schema.items()) if isinstance(schema, Mapping) else list(schema)
    if not items:
        raise SchemaError(f"stream {name!r} needs at least one attribute")
    names, types = [], []
    for item in items:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise SchemaError(f"bad attribute declaration {item!r}: expected (name, type)")
        a, t = item
        if not isinstance(a, str) or not a or not set(a) <= _NAME_OK or a[0].isdigit():
            raise SchemaError(
                f"bad attribute name {a!r}: use letters, digits and _, not starting with a digit"
            )
        if a.upper() in KEYWORDS and not reserved_ok:
            raise SchemaError(
                f"bad attribute name {a!r}: it is a reserved word of the query language"
            )
        if t not in DTYPES:
            raise SchemaError(
                f"attribute {a!r} has unknown type {t!r}; types are {', '.join(DTYPES)}"
            )
        if a in names:
            raise SchemaError(f"attribute {a!r} is declared twice")
        names.append(a)
        types.append(t)
    if time not in names:
        raise SchemaError(
            f"time attribute {time!r} is not one of the attributes ({', '.join(names)})"
        )
    if types[names.index(time)] not in ("int", "float"):
        raise SchemaError(
            f"time attribute {time!r} must be int or float, not {types[names.index(time)]}"
        )
    if max_window is not None and (
        isinstance(max_window, bool)
        or not isinstance(max_window, int | float)
        or not max_window >= 0
    ):
        raise SchemaError(f"max_window must be a non-negative number or None, not {max_window!r}")
    return Schema(tuple(names), tuple(types), time)
