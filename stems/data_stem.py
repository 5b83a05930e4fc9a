"""Data SteM: columnar storage and indexes of one stream's retained tuples.

Rows are numbered by ``seq``, their position in the stream since it was created (0, 1,
...). Storage is a list of fixed-size blocks; block ``k`` holds seqs ``[k*B, (k+1)*B)``
with one numpy array per attribute plus the global tuple ids, so a stored tuple costs its
values and no Python object; the 8-byte columns of 16 consecutive blocks share one
matrix (a chunk), so gathering result rows is one take per chunk. A chunk's matrix is
column-major (a row per column), what scans and index builds read; a wide result from
one of the stream's two newest chunks is taken as whole rows of a row-major copy of it
instead, filled as rows arrive (``_row_copy``). Timestamps are non-decreasing in seq
order, which makes every time window a seq range found by binary search.

Expiry drops whole blocks (the block compartments of Streaming Tables, seeds/001 VI.D):
O(1) amortised per tuple. Which tuples are *visible* is decided by the caller's horizon
(``first_seq_at_or_after``), independently of block boundaries.

Indexes: per attribute a probe needs, sealed blocks get *runs*: a sorted copy of the
column over an aligned range of 2^j blocks and the permutation that sorts it. A run is
built on first need over the largest such range of up to ``segment_blocks`` blocks
(rounded down to a power of two) that is stored, sealed and not yet indexed, and merges
with its equal-sized, aligned neighbour (its buddy, as in a binary counter) up to
``_RUN_SEGMENTS`` times that; a run is dropped when its last block expires. A probe
looks up the predicate's most selective constraint in each run it crosses, scans the
open block, and tests the remaining factors on the candidates only; so probing n sealed
rows costs O(n / (_RUN_SEGMENTS x segment_blocks x B) + log n) index lookups, not
O(n / B) (a query registered over 25 million stored rows: 25 lookups, not 6,000; the
sealed blocks of the newest 64: at most 6, not 63). A probe's own index work (sorts and
merges) is bounded (``_SEGMENT_BUILDS``). A constraint on the time attribute first
narrows the probe to one seq range.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import sys
from collections.abc import Callable, Sequence

import numpy as np

from psoup.values import Schema
from stems.predicates import AttrConstraint, LocalPredicate

_UIDS = itertools.count(1)


class _Block:
    """``capacity`` rows. The 8-byte columns (int, float) and the tuple ids are the rows
    of one int64 matrix (a float column is its row viewed as float64), so one
    ``np.take`` gathers many columns; ``cols[i]`` is column i either way.

    The matrix is a slice of ``chunk``, one matrix shared by the ``_CHUNK_BLOCKS``
    aligned blocks of seqs ``[c * C * B, (c + 1) * C * B)``, so a gather over a window
    of many blocks is one take per chunk, not per block. A chunk is allocated whole and
    uninitialised (the OS gives its pages as rows are written); when its last block
    expires it is freed, or reused for the next chunk (``DataSteM._reuse``)."""

    __slots__ = ("chunk", "cols", "first", "last", "mat", "n", "tids")

    def __init__(
        self, schema: Schema, first: int, capacity: int, row_of: dict[int, int], chunk=None
    ):
        self.first = first
        self.n = 0
        self.last: object = None  # the newest timestamp held, as a Python number
        if chunk is None:
            chunk = np.empty((len(row_of) + 1, _CHUNK_BLOCKS * capacity), dtype=np.int64)
        self.chunk = chunk
        at = first % (_CHUNK_BLOCKS * capacity)
        self.mat = chunk[:, at : at + capacity]
        self.cols = [
            (self.mat[row_of[i]].view(schema.dtype_of(a)) if i in row_of
             else np.empty(capacity, dtype=object))
            for i, a in enumerate(schema.names)
        ]  # fmt: skip
        self.tids = self.mat[-1]


#: Blocks per storage chunk (see ``_Block``): a window of up to 15 blocks is gathered
#: with at most two takes. A stream keeps up to 15 expired blocks' memory until its
#: chunk's last block expires.
_CHUNK_BLOCKS = 16
#: ``probe`` tests its candidates against the rest of the predicate this many at a time at
#: most (and once at the end): few Python steps, bounded memory for an unselective probe.
_RESIDUAL_ROWS = 1 << 16
#: A probe sorts or merges at most this many times ``segment_blocks`` blocks' rows into
#: index runs (``_allowed``: its first step always, so it makes progress) and scans the
#: other unindexed blocks it crosses. The first query over a long history would
#: otherwise sort all of it at once (25 million rows: 1.9 s, during which a Linear Road
#: shard answered nothing), and a registration that also merged a cascade of runs held
#: its shard for up to 320 ms at L = 24. This way a probe's index work is ~2 x 262,144
#: rows (~40 ms), at most one merge of 1 million rows (~25 ms) when that is its first
#: step; until every block is indexed the probes scan the others (vectorised, O(B) per
#: block: 25 ms for 25 million rows).
_SEGMENT_BUILDS = 2
#: A run grows by merging up to this many times ``segment_blocks`` blocks (1 million rows
#: at the defaults). Merging two runs of n rows each costs O(n log n) in C (a binary
#: search of one into the other and two scatters: ~25 ms at 2 x 512k rows); longer runs
#: would mean longer merges on a probe's path and keep more expired rows' index entries
#: (a run lives until its last block expires).
_RUN_SEGMENTS = 4

#: A gather of at least this many rows of at least two thirds of a stream's 8-byte columns
#: (an invoke's ``SELECT *`` of a wide result) takes whole rows from a row-major copy of
#: its chunk (``DataSteM._row_copy``): 2,050 rows x 5 columns in 4.1 µs against 5.7-9 µs
#: for the column-major matrix's take, which reads each row's values from as many cache
#: lines as it has columns. Below it the two differ by at most ~0.3 µs (1.40 against
#: 1.13 at 256 rows, 0.97 against 0.91 at 128: scratch ``/tmp/s61/be.py``), so a stream
#: asked only for small results (an equality query's) pays no copy's memory or filling.
_ROW_COPY_MIN = 256
#: This many chunks of a stream may keep a row-major copy, its newest (windows lie at its
#: end), so a stream's copies hold at most two chunks' memory.
_ROW_COPIES = 2

_FEW = 4  # gathers of at most this many rows go value by value
#: ... and so do gathers with fewer rows than this per chunk they span: one take per chunk
#: (~2 µs of fixed cost for one column, ~4.4 for five) loses to ~0.5 µs a row value by
#: value for one column, ~1 for five (break-even at ~4 rows a chunk; a vehicle's tolls
#: over a Linear Road day are about one row per chunk of 65,536).
_FEW_PER_CHUNK = 4


def _block_bytes(b: _Block) -> int:
    """Bytes of a block's arrays (a fixed capacity, however many rows it holds)."""
    return b.mat.nbytes + sum(c.nbytes for c in b.cols if c.dtype == object)


def _index_bytes(entries) -> int:
    """Bytes of (sorted values, order) index entries."""
    return sum(v.nbytes + o.nbytes for v, o in entries)


def _last(b: _Block) -> object:
    return b.last


class _Run:
    """An index of one attribute over the sealed blocks ``[k0, k1)`` (block numbers: seq
    // B), an aligned power-of-two range: the values in ascending order (ties in seq
    order) and their offsets from seq ``k0 x B``."""

    __slots__ = ("k0", "k1", "order", "vals")

    def __init__(self, k0: int, k1: int, vals: np.ndarray, order: np.ndarray):
        self.k0, self.k1, self.vals, self.order = k0, k1, vals, order

    def merged(self, later: _Run, block_rows: int) -> _Run:
        """This run and the adjacent ``later`` one as one run. O(n log n) in C for the
        binary search of the later values into these, O(n) for the scatters."""
        n, m = len(self.vals), len(later.vals)
        at = np.searchsorted(self.vals, later.vals, side="right") + np.arange(m)
        mine = np.ones(n + m, dtype=bool)
        mine[at] = False
        vals = np.empty(n + m, dtype=self.vals.dtype)
        vals[at], vals[mine] = later.vals, self.vals
        order = np.empty(n + m, dtype=np.int64)
        order[at] = later.order + (later.k0 - self.k0) * block_rows
        order[mine] = self.order
        return _Run(self.k0, later.k1, vals, order)


def _k0(run: _Run) -> int:
    return run.k0


def _allowed(spent: int, cost: int, budget: int) -> bool:
    """Whether a probe that sorted or merged ``spent`` rows may spend ``cost`` more of
    its ``budget``: its first step always (unless the budget is 0), then within it."""
    return budget > 0 and (spent == 0 or spent + cost <= budget)


def _read_only(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """``arrays``, each made read-only in place. O(len(arrays))."""
    for a in arrays:
        a.setflags(write=False)
    return arrays


class _GatherPlan:
    """What ``DataSteM.gather_at`` needs to know about one list of columns: their dtypes,
    which are rows of the chunks' matrices (``wide``, with their rows, and whether those
    are consecutive), and which are object columns stored per block (``narrow``)."""

    __slots__ = (
        "dtypes", "narrow", "pick", "plain", "rows", "rowwise", "span", "split", "together",
        "viewed", "wide",
    )  # fmt: skip

    def __init__(self, schema: Schema, row_of: dict[int, int], cols: tuple[int | None, ...]):
        names = schema.names
        self.dtypes = [np.int64 if i is None else schema.dtype_of(names[i]) for i in cols]
        self.rows = [len(row_of) if i is None else row_of.get(i) for i in cols]
        self.wide = [j for j, r in enumerate(self.rows) if r is not None]
        self.narrow = [j for j, r in enumerate(self.rows) if r is None]
        r0 = self.rows[self.wide[0]] if self.wide else 0
        wide_rows = [self.rows[j] for j in self.wide]
        self.together = wide_rows == list(range(r0, r0 + len(self.wide)))
        self.span = slice(r0, r0 + len(self.wide))  # the chunk rows taken together
        # The matrices are int64: a float column is viewed as such, an int one is as is.
        self.viewed = [np.dtype(d) != np.int64 for d in self.dtypes]
        # Every column an int64 row taken together: the take's rows are the answer.
        self.plain = self.together and not self.narrow and not any(self.viewed)
        # A take's matrix -> its rows as a tuple of views.
        self.split = _rows_of(list(range(len(self.wide))))
        # Int64 stream columns only (no tuple ids), two thirds of the matrix's columns or
        # more: worth a take of whole rows of the row-major copy, ``pick`` its columns
        # from the take's transpose.
        cols = [self.rows[j] for j in self.wide]
        self.rowwise = (
            bool(cols) and not self.narrow and not any(self.viewed)
            and len(row_of) not in cols and 3 * len(cols) >= 2 * len(row_of)
        )  # fmt: skip
        self.pick = _rows_of(cols)


def _rows_of(rows: list[int]) -> Callable[[np.ndarray], tuple]:
    """A function of a matrix that gives its ``rows`` as a tuple of views: an
    ``operator.itemgetter`` for two or more (half the time of iterating the matrix:
    ~0.3 against ~0.55 µs for five)."""
    if len(rows) > 1:
        return operator.itemgetter(*rows)
    if rows:
        r = rows[0]
        return lambda m: (m[r],)
    return lambda m: ()


class _RowCopy:
    """A chunk's 8-byte columns row by row (``mat``, a row of ``k`` values per stored
    row), its first ``n`` rows filled: what ``DataSteM._row_copy`` keeps."""

    __slots__ = ("mat", "n")

    def __init__(self, rows: int, k: int):
        self.mat = np.empty((rows, k), dtype=np.int64)  # pages given as rows are filled
        self.n = 0

    @property
    def nbytes(self) -> int:
        """Bytes of its filled rows (what the stem counts). O(1)."""
        return self.n * self.mat.shape[1] * 8


class DataSteM:
    """Columnar storage of one stream, in blocks of ``block_rows`` rows.

    >>> from psoup.values import Schema
    >>> d = DataSteM(Schema(("a", "t"), ("int", "int"), "t"), block_rows=2)
    >>> d.append([np.array([5, 6, 7]), np.array([1, 2, 2])], np.array([0, 1, 2]))
    0
    >>> d.seq_range(2, 2), d.gather("a", np.array([0, 2])).tolist()
    ((1, 3), [5, 7])
    """

    def __init__(self, schema: Schema, block_rows: int = 4096, segment_blocks: int = 64):
        if block_rows < 1:
            raise ValueError("block_rows must be positive")
        if segment_blocks < 1:
            raise ValueError("segment_blocks must be positive")
        self.schema = schema
        self.block_rows = block_rows
        # The most blocks indexed at once, and the most one run covers (powers of two,
        # so runs stay aligned as they merge).
        self._build_blocks = 1 << (segment_blocks.bit_length() - 1)
        self._max_run = self._build_blocks * _RUN_SEGMENTS
        self.chunk_rows = block_rows * _CHUNK_BLOCKS
        self._blocks: list[_Block] = []
        # attr position -> its index runs over sealed blocks, ascending and disjoint.
        self._index_runs: dict[int, list[_Run]] = {}
        self._end = 0  # next seq to assign
        self._ti = schema.time_index
        wide = [i for i, a in enumerate(schema.names) if schema.dtype_of(a).kind in "if"]
        self._row_of = {i: r for r, i in enumerate(wide)}  # 8-byte column -> matrix row
        self.index_lookups = 0  # probes answered through a block index (for Stats)
        # Unique in this process: (uid, start_seq, end_seq) names the stored rows exactly,
        # since rows are only appended at the end and expired from the front.
        self.uid = next(_UIDS)
        # Counts the appends and expiries that changed the rows: equal versions of one
        # stem hold the same rows (what a cached placement of a window checks).
        self.version = 0
        # Where windows begin, for the rows stored now: (version, {lo: seq}).
        self._starts: tuple[int, dict] = (-1, {})
        # Kept as blocks and indexes come and go, so Stats costs O(1) per stream, not a
        # walk over every block on the engine thread (2-4 ms for ten million-row streams,
        # which an invoke arriving meanwhile waited out): bytes held, and per attribute
        # position the number of blocks an index covers.
        self._bytes = 0
        self._indexed: dict[int, int] = {}
        # The last chunk whose blocks all expired, for the next chunk to reuse (see
        # _reuse).
        self._spare: np.ndarray | None = None
        self._plans: dict[tuple, _GatherPlan] = {}  # columns asked for -> how to gather them
        self._copies: dict[int, _RowCopy] = {}  # chunk number -> its row-major copy

    # ------------------------------------------------------------------ size
    @property
    def start_seq(self) -> int:
        """Seq of the oldest row still stored (== end_seq when empty)."""
        return self._blocks[0].first if self._blocks else self._end

    @property
    def end_seq(self) -> int:
        """Seq the next appended row will get."""
        return self._end

    def __len__(self) -> int:
        return self._end - self.start_seq

    @property
    def last_ts(self) -> object | None:
        """Timestamp of the newest stored row, or None."""
        if not self._blocks:
            return None
        b = self._blocks[-1]
        return b.last

    def nbytes(self) -> int:
        """Bytes held by column arrays, block indexes and row copies (``_row_copy``). O(1)."""
        return self._bytes

    def indexed_attrs(self) -> dict[str, int]:
        """Attribute -> number of blocks covered by an index on it. O(attributes)."""
        return {self.schema.names[i]: n for i, n in sorted(self._indexed.items()) if n}

    def _counted(self) -> tuple[int, dict[int, int]]:
        """``(nbytes, indexed)`` recounted from the blocks (for ``_check``). O(blocks)."""
        total = sum(_block_bytes(b) for b in self._blocks)
        indexed: dict[int, int] = {}
        for i, runs in self._index_runs.items():
            for r in runs:
                total += _index_bytes(((r.vals, r.order),))
                indexed[i] = indexed.get(i, 0) + r.k1 - r.k0
        total += sum(rc.nbytes for rc in self._copies.values())
        return total, indexed

    def _count_index(self, i: int, entry: tuple[np.ndarray, np.ndarray], blocks: int) -> None:
        """An index on attribute ``i`` over ``blocks`` blocks came (blocks > 0) or went."""
        sign = 1 if blocks > 0 else -1
        self._bytes += sign * _index_bytes((entry,))
        self._indexed[i] = self._indexed.get(i, 0) + blocks

    # ---------------------------------------------------------------- append
    def append(self, cols: Sequence[np.ndarray], tids: np.ndarray) -> int:
        """Store ``n`` rows given column-wise (already typed and validated).

        Returns the seq of the first row. O(n) copying, plus O(1) per new block.
        """
        n = len(tids)
        first = self._end
        done = 0
        B = self.block_rows
        while done < n:
            if not self._blocks or self._blocks[-1].n == B:
                prev = self._blocks[-1] if self._blocks else None
                same = (
                    prev is not None
                    and prev.first // self.chunk_rows == self._end // self.chunk_rows
                )
                self._blocks.append(
                    _Block(self.schema, self._end, B, self._row_of,
                           prev.chunk if same else self._reuse())
                )  # fmt: skip
                self._bytes += _block_bytes(self._blocks[-1])
            blk = self._blocks[-1]
            take = min(B - blk.n, n - done)
            for dst, src in zip(blk.cols, cols, strict=True):
                dst[blk.n : blk.n + take] = src[done : done + take]
            blk.tids[blk.n : blk.n + take] = tids[done : done + take]
            blk.n += take
            blk.last = blk.cols[self._ti][blk.n - 1].item()
            done += take
            self._end += take
        if self._copies and min(self._copies) < self._copied_from():  # a new chunk began
            self._drop_copies(self._copied_from())
        self.version += 1
        return first

    def _reuse(self) -> np.ndarray | None:
        """The spare chunk if nothing holds a view of it any more, else None (a new one
        is allocated). Memory freed and allocated anew comes back from the OS page by
        page, one fault each: 5 us per 1000-row batch of 3 columns. Every numpy view
        holds its base, so the reference count tells whether a result, a snapshot or a
        probe still reads the spare's rows. O(1)."""
        spare, self._spare = self._spare, None
        if spare is not None and sys.getrefcount(spare) == 2:  # ``spare`` and the argument
            return spare
        return None

    def expire(self, horizon: object) -> int:
        """Drop the full blocks whose newest timestamp is older than ``horizon``.

        Returns the number of rows dropped. O(blocks dropped).
        """
        k = 0
        B = self.block_rows
        blocks = self._blocks
        while k < len(blocks) - 1 or (k < len(blocks) and blocks[k].n == B):
            b = blocks[k]
            if b.n < B or b.last >= horizon:
                break
            k += 1
        if k:
            dropped = sum(b.n for b in blocks[:k])
            for b in blocks[:k]:
                self._bytes -= _block_bytes(b)
            gone = blocks[k - 1].chunk
            del blocks[:k]
            self.version += 1
            if not blocks or blocks[0].chunk is not gone:
                self._spare = gone  # every block of it expired
            base = blocks[0].first if blocks else self._end
            # a chunk with no block left: its copy goes (the next rows may take new memory)
            self._drop_copies(base // self.chunk_rows if blocks else None)
            for i, runs in self._index_runs.items():
                while runs and runs[0].k1 * B <= base:  # every block of it expired
                    r = runs.pop(0)
                    self._count_index(i, (r.vals, r.order), -(r.k1 - r.k0))
            return dropped
        return 0

    # -------------------------------------------------------------- snapshot
    def parts(self) -> list[tuple[list[np.ndarray], np.ndarray]]:
        """The stored rows as (columns, tuple ids) per block, oldest first: a sealed
        block's own arrays (appends never touch them again), a copy of the open block's
        rows. A consistent image to write out while appends go on. O(blocks + B)."""
        out = []
        for b in self._blocks:
            if b.n == self.block_rows:
                out.append((b.cols, b.tids))
            else:
                out.append(([c[: b.n].copy() for c in b.cols], b.tids[: b.n].copy()))
        return out

    @classmethod
    def empty_at(
        cls, schema: Schema, start_seq: int, block_rows: int = 4096, segment_blocks: int = 64
    ) -> DataSteM:
        """An empty Data SteM whose first row will get seq ``start_seq`` (0 when that is
        not a block boundary of this ``block_rows``): a stream brought back from a
        checkpoint keeps its seqs. O(1)."""
        stem = cls(schema, block_rows, segment_blocks)
        stem._end = start_seq if start_seq % block_rows == 0 else 0
        return stem

    # ------------------------------------------------------------- time search
    def first_seq_at_or_after(self, ts: object) -> int:
        """Smallest stored seq whose timestamp is >= ``ts`` (end_seq if none). O(log n)."""
        return self._search(ts, "left")

    def first_seq_after(self, ts: object) -> int:
        """Smallest stored seq whose timestamp is > ``ts`` (end_seq if none). O(log n)."""
        return self._search(ts, "right")

    def _search(self, ts: object, side: str) -> int:
        blocks = self._blocks
        ti = self._ti
        # Python numbers compared (a block's ``last``), not numpy scalars: a third the cost.
        if side == "left":
            i = bisect.bisect_left(blocks, ts, key=_last)
        else:
            i = bisect.bisect_right(blocks, ts, key=_last)
        if i == len(blocks):
            return self._end
        b = blocks[i]
        return b.first + int(b.cols[ti][: b.n].searchsorted(ts, side=side))

    def seq_range(self, lo: object, hi: object) -> tuple[int, int]:
        """Seqs ``[s, e)`` of the stored rows with ``lo <= ts <= hi``. O(log n), O(1)
        for a window that ends at or after the newest row and begins where one placed
        since the last append or expiry began (the usual invoke: NOW - w .. NOW)."""
        blocks = self._blocks
        if not blocks:
            return self._end, self._end
        if self._starts[0] != self.version:
            self._starts = (self.version, {})
        found = self._starts[1]
        s = found.get(lo)
        if s is None:
            s = self.first_seq_at_or_after(lo)
            if len(found) < 64:  # a handful of window lengths in use; bounded anyway
                found[lo] = s
        # Timestamps never decrease, so nothing stored is newer than the last block's last.
        e = self._end if hi >= blocks[-1].last else self.first_seq_after(hi)
        return s, max(s, e)

    # ------------------------------------------------------------------ read
    def _block_span(self, s: int, e: int):
        """Yield (block, start offset, end offset) covering seqs [s, e)."""
        if not self._blocks:
            return
        base = self._blocks[0].first
        s = max(s, base)
        e = min(e, self._end)
        B = self.block_rows
        k = (s - base) // B
        while s < e:
            b = self._blocks[k]
            lo = s - b.first
            hi = min(e - b.first, b.n)
            yield b, lo, hi
            s = b.first + hi
            k += 1

    def column(self, attr: str, s: int, e: int) -> np.ndarray:
        """Values of ``attr`` for seqs ``[s, e)`` (clipped to what is stored). O(e - s)."""
        i = self.schema.index_of(attr)
        parts = [b.cols[i][lo:hi] for b, lo, hi in self._block_span(s, e)]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return np.empty(0, dtype=self.schema.dtype_of(attr))
        return np.concatenate(parts)

    def tids(self, s: int, e: int) -> np.ndarray:
        """Global tuple ids of seqs ``[s, e)``. O(e - s)."""
        parts = [b.tids[lo:hi] for b, lo, hi in self._block_span(s, e)]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def gather(self, attr: str, seqs: np.ndarray) -> np.ndarray:
        """Values of ``attr`` at the given stored, ascending seqs. O(len(seqs) + blocks hit)."""
        return self.gather_many([attr], seqs)[attr]

    def gather_tids(self, seqs: np.ndarray) -> np.ndarray:
        """Global tuple ids at the given stored, ascending seqs."""
        return self.gather_at([None], seqs)[0]

    def gather_many(self, attrs, seqs: np.ndarray) -> dict[str, np.ndarray]:
        """attr -> values at the given stored, ascending seqs, for each of ``attrs``.

        The seqs are split into per-block runs once for all attributes.
        O(len(seqs) x attrs + blocks hit x attrs).
        """
        attrs = list(dict.fromkeys(attrs))
        idx = [self.schema.index_of(a) for a in attrs]
        return dict(zip(attrs, self.gather_at(idx, seqs), strict=True))

    @staticmethod
    def _runs(seqs: np.ndarray, unit: int) -> list[tuple[int, int, int]]:
        """``(a, z, u)``: ``seqs[a:z]`` are the (ascending) seqs in ``[u * unit, (u + 1) *
        unit)``, for each such unit they touch. O(units spanned x log len(seqs))."""
        u0, u1 = int(seqs[0]) // unit, int(seqs[-1]) // unit
        if u0 == u1:
            return [(0, len(seqs), u0)]
        cuts = np.searchsorted(seqs, np.arange(u0 + 1, u1 + 1) * unit).tolist()
        return [
            (a, z, u)
            for a, z, u in zip([0, *cuts], [*cuts, len(seqs)], range(u0, u1 + 1), strict=True)
            if a < z
        ]

    def _plan(self, cols: Sequence[int | None]) -> _GatherPlan:
        """How to gather ``cols`` (made once per list of columns, then looked up: the
        fixed cost of an invoke's gather). O(1) amortised."""
        key = tuple(cols)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= 256:  # ad-hoc column lists: keep the cache bounded
                self._plans.clear()
            plan = self._plans[key] = _GatherPlan(self.schema, self._row_of, key)
        return plan

    @staticmethod
    def _takes(plan: _GatherPlan, chunk: np.ndarray, off: np.ndarray) -> list[np.ndarray]:
        """The wide columns at chunk offsets ``off``: one take of the chunk's consecutive
        rows (a matrix) when they are ``together``, else one take per column. mode="wrap"
        (the offsets are in range, so it never wraps) is 10-25% faster than numpy's
        default checks; not on the seqs themselves, as numpy wraps by repeated
        subtraction, one per chunk before this one."""
        if plan.together:
            return [chunk[plan.span].take(off, axis=1, mode="wrap")]
        return [chunk[plan.rows[j]].take(off, mode="wrap") for j in plan.wide]

    def _row_copy(self, c: int, chunk: np.ndarray) -> np.ndarray:
        """Chunk ``c``'s 8-byte columns as a row-major matrix (a row per stored row),
        filled up to the rows stored now; ``c`` one of the stream's newest
        ``_ROW_COPIES`` chunks (``_copied_from``: where windows lie; an older chunk's
        gathers read its column-major matrix, so that windows over many chunks never
        trade copies back and forth). Rows are only appended, so what a copy holds stays
        right and a later call copies only the rows appended since; a copy goes when its
        chunk is no longer among the newest (``_drop_copies``) or expires. O(rows
        appended since x columns) of copying, else O(1)."""
        CB = self.chunk_rows
        rc = self._copies.get(c)
        if rc is None:
            rc = self._copies[c] = _RowCopy(CB, len(self._row_of))
        upto = min(self._end - c * CB, CB)
        if rc.n < upto:
            before = rc.nbytes
            rc.mat[rc.n : upto] = chunk[: len(self._row_of), rc.n : upto].T
            rc.n = upto
            self._bytes += rc.nbytes - before
        return rc.mat

    def _rows_from_copies(
        self, plan: _GatherPlan, seqs: np.ndarray, c: int, c1: int, frozen: bool
    ) -> Sequence[np.ndarray]:
        """``gather_at`` of a wide result in chunks ``c..c1``, all of them copied ones:
        whole rows of each chunk's row-major copy, the result's columns strided views of
        the one take when one chunk holds them, joined by one concatenate per column
        otherwise. O(len(seqs) x row width) in C."""
        blocks, CB = self._blocks, self.chunk_rows
        base, B = blocks[0].first, self.block_rows
        if c == c1:
            copy = self._row_copy(c, blocks[max(0, (c * CB - base) // B)].chunk)
            got = copy.take(seqs - c * CB if c else seqs, axis=0, mode="wrap")
            if frozen:
                got.setflags(False)  # views inherit it
            return plan.pick(got.T)
        pieces = []
        for a, z, k in self._runs(seqs, CB):
            copy = self._row_copy(k, blocks[max(0, (k * CB - base) // B)].chunk)
            pieces.append(plan.pick(copy.take(seqs[a:z] - k * CB, axis=0, mode="wrap").T))
        outs = [np.concatenate(p) for p in zip(*pieces, strict=True)]
        return _read_only(outs) if frozen else outs

    def _copied_from(self) -> int:
        """The oldest chunk that may have a row copy: the stream's newest ``_ROW_COPIES``
        chunks have one. O(1)."""
        return (self._end - 1) // self.chunk_rows - _ROW_COPIES + 1

    def _drop_copies(self, below: int | None) -> None:
        """Drop the row copies of the chunks before ``below`` (None: every one). O(copies)."""
        for c in [c for c in self._copies if below is None or c < below]:
            self._bytes -= self._copies.pop(c).nbytes

    def gather_at(
        self, cols: Sequence[int | None], seqs: np.ndarray, frozen: bool = False
    ) -> Sequence[np.ndarray]:
        """The values of the attributes at positions ``cols`` (schema order numbers;
        None: the tuple ids) at the given stored, ascending seqs, one array each, fresh.
        ``frozen``: the arrays come read-only (an invoke's result), one flag per take.
        O(len(seqs) x cols) in C plus O(chunks hit) numpy calls (one take each); when
        the rows are fewer than four per chunk spanned, O(len(seqs) x cols) Python steps
        instead."""
        plan = self._plan(cols)
        dtypes = plan.dtypes
        blocks = self._blocks
        base = blocks[0].first if blocks else 0
        B = self.block_rows
        n = len(seqs)
        CB = self.chunk_rows
        if n > _FEW:
            c, c1 = seqs.item(0) // CB, seqs.item(-1) // CB
            if plan.rowwise and n >= _ROW_COPY_MIN and c >= self._copied_from():
                # A wide result (an invoke's SELECT * of many rows) from the newest chunks
                return self._rows_from_copies(plan, seqs, c, c1, frozen)
            if c == c1 and plan.plain:
                # The usual invoke (every column an int64 row of one chunk's matrix):
                # one take, its rows the answer, decided before the general path's steps.
                chunk = blocks[max(0, (c * CB - base) // B)].chunk
                got = self._takes(plan, chunk, seqs - c * CB if c else seqs)[0]
                if frozen:
                    got.setflags(False)  # write=False, positional: 50 ns less
                return plan.split(got)
        if n and (n <= _FEW or n < _FEW_PER_CHUNK * (c1 - c + 1)):
            # A handful of rows (an equality query's usual answer), or rows scattered
            # over many chunks: value by value costs less than the run-splitting and the
            # takes below, which are fixed costs per call and per chunk.
            vals: list[list] = [[] for _ in cols]
            for seq in seqs.tolist():
                b = blocks[(seq - base) // B]
                off = seq - b.first
                for v, i in zip(vals, cols, strict=True):
                    v.append((b.tids if i is None else b.cols[i])[off])
            outs = [np.array(v, dtype=d) for v, d in zip(vals, dtypes, strict=True)]
            return _read_only(outs) if frozen else outs
        if not len(seqs):
            outs = [np.empty(0, dtype=d) for d in dtypes]
            return _read_only(outs) if frozen else outs
        outs: list = [None] * len(cols)
        # The 8-byte columns as rows of the chunks' matrices: the takes of each chunk
        # (``_takes``), each into an array of its own (a take into a strided slice of
        # one output costs twice as much), and one concatenate joins the chunks' parts.
        wide = plan.wide
        if wide:
            together, viewed = plan.together, plan.viewed
            if c == c1:  # one chunk (the usual window): no join
                chunk = blocks[max(0, (c * CB - base) // B)].chunk
                joined = self._takes(plan, chunk, seqs - c * CB if c else seqs)
            else:
                pieces = [
                    self._takes(plan, blocks[max(0, (c * CB - base) // B)].chunk,
                                seqs[a:z] - c * CB if c else seqs[a:z])
                    for a, z, c in self._runs(seqs, CB)
                ]  # fmt: skip
                joined = [np.concatenate(p, axis=-1) for p in zip(*pieces, strict=True)]
            if frozen:  # a view of a read-only array is read-only: one flag per take
                _read_only(joined)
            if plan.plain:
                return list(joined[0])  # the matrix's rows, in C (the usual SELECT)
            for k, j in enumerate(wide):
                got = joined[0][k] if together else joined[k]
                outs[j] = got.view(dtypes[j]) if viewed[j] else got
        if plan.narrow:  # object columns: stored per block
            for j in plan.narrow:
                outs[j] = np.empty(len(seqs), dtype=dtypes[j])
            for a, z, k in self._runs(seqs - base, B):
                b = blocks[k]
                off = seqs[a:z] - b.first
                for j in plan.narrow:
                    outs[j][a:z] = b.cols[cols[j]][off]
            if frozen:
                _read_only([outs[j] for j in plan.narrow])
        return outs

    def row_values(self, seq: int) -> dict[str, object]:
        """One stored row as attribute -> Python value. O(attributes)."""
        b = self._blocks[(seq - self._blocks[0].first) // self.block_rows]
        off = seq - b.first
        return {a: b.cols[i][off].item() for i, a in enumerate(self.schema.names)}

    # ----------------------------------------------------------------- probe
    def probe(self, pred: LocalPredicate, s: int, e: int) -> np.ndarray:
        """Ascending seqs in ``[s, e)`` whose rows satisfy ``pred``.

        A constraint on the time attribute first narrows ``[s, e)`` to the rows whose
        timestamps may satisfy it (O(log n)). Cost: when the predicate has a bounded
        constraint, one index lookup per run crossed, O(log n + candidates) each: O(n /
        (_RUN_SEGMENTS x segment_blocks x B) + log n) lookups over n sealed rows. A run is
        built on first need, O(R log R) once per R rows and attribute, and merged with
        its buddy; a probe sorts and merges at most ``_SEGMENT_BUILDS`` segments' rows
        (its first step always): a sealed block still without its run is scanned, O(B).
        The open block is scanned (vectorised). The remaining factors are tested on
        the candidates of many runs and blocks at once (one gather and one mask per
        ``_RESIDUAL_ROWS`` candidates).
        """
        if pred.unsatisfiable or s >= e or not self._blocks:
            return np.empty(0, dtype=np.int64)
        access = pred.access()
        rest = pred.without(access.attr) if access is not None else pred
        out: list[np.ndarray] = []
        held: list[np.ndarray] = []  # candidates not yet tested against ``rest``
        n_held = 0
        # Rows this probe sorted or merged into runs, and how many it may (``_allowed``).
        spent, budget = 0, _SEGMENT_BUILDS * self._build_blocks * self.block_rows
        ai = None if access is None else self.schema.index_of(access.attr)
        B = self.block_rows
        last = self._blocks[-1]
        sealed_end = last.first + last.n if last.n == B else last.first
        s, e = max(s, self._blocks[0].first), min(e, self._end)
        if (tc := pred.constraint(self.schema.time)) is not None:
            s, e = self._time_span(tc, s, e)
        while s < e:
            k = s // B
            run = None
            if ai is not None and s < sealed_end:
                run = self._run_at(ai, k)
                if run is None:
                    a, w = self._index_range(ai, k, sealed_end // B)
                    if _allowed(spent, w * B, budget):
                        run = self._build_run(ai, a, w)
                        spent += w * B
                    # else: scanned below, indexed by a later probe
                if run is not None and run.k1 - run.k0 < self._max_run:
                    run, spent = self._merge_up(ai, run, spent, budget)
            if run is not None:
                stop = min(e, run.k1 * B)
                r0 = run.k0 * B
                offs = self._lookup((run.vals, run.order), access, s - r0, stop - r0,
                                    (run.k1 - run.k0) * B)  # fmt: skip
                self.index_lookups += 1
                if len(offs):
                    held.append(offs + r0)
                    n_held += len(offs)
            else:
                stop = min(e, (k + 1) * B)
                b = self._blocks[k - self._blocks[0].first // B]
                lo, hi = s - b.first, stop - b.first
                if access is None:
                    offs = np.arange(lo, hi, dtype=np.int64)
                else:
                    offs = lo + np.flatnonzero(access.mask(b.cols[ai][lo:hi]))
                if len(offs):
                    held.append(offs + b.first)
                    n_held += len(offs)
            s = stop
            if n_held >= _RESIDUAL_ROWS and not rest.is_true:  # else held is the answer
                out.append(self._residual(rest, held))
                held, n_held = [], 0
        if held:
            out.append(self._residual(rest, held))
        if not out:
            return np.empty(0, dtype=np.int64)
        return out[0] if len(out) == 1 else np.concatenate(out)

    def _time_span(self, c: AttrConstraint, s: int, e: int) -> tuple[int, int]:
        """``[s, e)`` narrowed to the rows whose timestamps may satisfy ``c``: timestamps
        never decrease in seq order, so those rows are one seq range (a daily
        expenditure's ``day = d`` over a 69-day history looks up one day's rows, not
        all of them). O(log n)."""
        if c.points is not None:
            if not c.points:
                return s, s
            lo, lo_incl, hi, hi_incl = min(c.points), True, max(c.points), True
        else:
            lo, lo_incl, hi, hi_incl = c.lo, c.lo_incl, c.hi, c.hi_incl
        if lo is not None:
            s = max(s, self._search(lo, "left" if lo_incl else "right"))
        if hi is not None:
            e = min(e, self._search(hi, "right" if hi_incl else "left"))
        return s, max(s, e)

    def _residual(self, rest: LocalPredicate, held: list[np.ndarray]) -> np.ndarray:
        """The candidate seqs in ``held`` (ascending, in order) whose rows satisfy
        ``rest``: one gather of its attributes and one mask. O(candidates)."""
        seqs = held[0] if len(held) == 1 else np.concatenate(held)
        if rest.is_true or not len(seqs):
            return seqs
        vals = self.gather_many(sorted(rest.attrs()), seqs)
        return seqs[rest.mask(lambda a: vals[a], len(seqs))]

    def _run_at(self, i: int, k: int) -> _Run | None:
        """The index run of attribute ``i`` that covers block ``k``, if any.
        O(log runs)."""
        runs = self._index_runs.get(i)
        if not runs:
            return None
        j = bisect.bisect_right(runs, k, key=_k0) - 1
        return runs[j] if j >= 0 and runs[j].k1 > k else None

    def _index_range(self, i: int, k: int, sealed_k: int) -> tuple[int, int]:
        """``(a, w)``: the largest aligned range of blocks ``[a, a + w)`` around block
        ``k``, w a power of two up to ``segment_blocks``, whose blocks are all stored,
        sealed (below block ``sealed_k``) and without a run of attribute ``i``.
        O(log runs) per size tried."""
        first_k = self._blocks[0].first // self.block_rows
        runs = self._index_runs.get(i, [])
        w = self._build_blocks
        while w > 1:
            a = k - k % w
            j = bisect.bisect_left(runs, a + w, key=_k0) - 1  # the last run starting below
            if a >= first_k and a + w <= sealed_k and (j < 0 or runs[j].k1 <= a):
                break
            w //= 2
        return k - k % w, w

    def _build_run(self, i: int, a: int, w: int) -> _Run:
        """A new run of attribute ``i`` over the blocks ``[a, a + w)``. O(R log R) for
        the sort of its R rows."""
        first_k = self._blocks[0].first // self.block_rows
        blocks = self._blocks[a - first_k : a - first_k + w]
        col = blocks[0].cols[i] if w == 1 else np.concatenate([b.cols[i] for b in blocks])
        order = np.argsort(col, kind="stable")
        run = _Run(a, a + w, col[order], order)
        self._count_index(i, (run.vals, run.order), w)
        runs = self._index_runs.setdefault(i, [])
        runs.insert(bisect.bisect_right(runs, a, key=_k0), run)
        return run

    def _merge_up(self, i: int, run: _Run, spent: int, budget: int) -> tuple[_Run, int]:
        """Merge ``run`` with its buddy (the equal-sized, aligned neighbour), as a binary
        counter carries, while the probe's work allows (``_allowed``: ``spent`` rows of
        sorting and merging so far, of ``budget``); returns the run that now covers
        ``run``'s blocks and the rows spent. O(rows merged); a row is merged at most
        log2(_RUN_SEGMENTS x segment_blocks) times in its life."""
        B = self.block_rows
        runs = self._index_runs[i]
        w = run.k1 - run.k0
        while 2 * w <= self._max_run and _allowed(spent, 2 * w * B, budget):
            j = bisect.bisect_left(runs, run.k0, key=_k0)
            if (run.k0 // w) % 2 == 0:
                j2, want = j + 1, (run.k1, run.k1 + w)
            else:
                j2, want = j - 1, (run.k0 - w, run.k0)
            if not (0 <= j2 < len(runs) and (runs[j2].k0, runs[j2].k1) == want):
                break
            j = min(j, j2)
            pair = runs[j], runs[j + 1]
            run = pair[0].merged(pair[1], B)
            for old in pair:
                self._count_index(i, (old.vals, old.order), -w)
            self._count_index(i, (run.vals, run.order), 2 * w)
            runs[j : j + 2] = [run]
            spent += 2 * w * B
            w *= 2
        return run, spent

    @staticmethod
    def _lookup(
        entry: tuple[np.ndarray, np.ndarray], c: AttrConstraint, lo: int, hi: int, n: int
    ) -> np.ndarray:
        """Ascending offsets in ``[lo, hi)`` of an index of ``n`` rows whose values may
        satisfy ``c`` (its excluded values are the caller's residual test).
        O(log n + candidates log candidates)."""
        vals, order = entry
        if c.points is not None and len(c.points) == 1:
            # One value (an equality query's usual probe): its entries are in seq order
            # already (a stable sort, and merges keep ties in seq order), so they need
            # no sort, and the range cut is two binary searches. ndarray methods, not
            # np.searchsorted's Python wrapper: a probe makes one lookup per run.
            (p,) = c.points
            offs = order[vals.searchsorted(p, "left") : vals.searchsorted(p, "right")]
            if lo > 0 or hi < n:
                offs = offs[offs.searchsorted(lo) : offs.searchsorted(hi)]
            return offs
        if c.points is not None:
            pieces = []
            for p in c.points:
                a = np.searchsorted(vals, p, side="left")
                z = np.searchsorted(vals, p, side="right")
                if z > a:
                    pieces.append(order[a:z])
            offs = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int32)
        else:
            a = 0 if c.lo is None else np.searchsorted(vals, c.lo, "left" if c.lo_incl else "right")
            z = (
                len(vals)
                if c.hi is None
                else np.searchsorted(vals, c.hi, "right" if c.hi_incl else "left")
            )
            offs = order[a:z]  # excluded values are the caller's residual test (without())
        if lo > 0 or hi < n:
            offs = offs[(offs >= lo) & (offs < hi)]
        return np.sort(offs)

    # ----------------------------------------------------------------- check
    def _check(self) -> None:
        """Verify the structure's invariants (for tests). O(n)."""
        B = self.block_rows
        prev_ts = None
        for k, b in enumerate(self._blocks):
            assert b.first % B == 0, "block start not aligned"
            if k:
                assert b.first == self._blocks[k - 1].first + B, "blocks not contiguous"
            if k < len(self._blocks) - 1:
                assert b.n == B, "only the last block may be open"
            assert 0 < b.n <= B
            at = b.first % self.chunk_rows
            assert (
                b.mat.base is b.chunk and b.chunk[:, at : at + B].ctypes.data == b.mat.ctypes.data
            )
            assert b.chunk.shape[1] == self.chunk_rows, "a chunk is chunk_rows wide (gather_at)"
            if k:
                prev = self._blocks[k - 1]
                same = prev.first // self.chunk_rows == b.first // self.chunk_rows
                assert (prev.chunk is b.chunk) == same, "a chunk's blocks share its matrix"
            ts = b.cols[self._ti][: b.n]
            assert np.all(ts[1:] >= ts[:-1]), "timestamps decrease inside a block"
            if prev_ts is not None:
                assert ts[0] >= prev_ts, "timestamps decrease across blocks"
            prev_ts = ts[b.n - 1]
            assert np.all(np.diff(b.tids[: b.n]) > 0), "tuple ids not increasing"
        base = self._blocks[0].first if self._blocks else self._end
        sealed = [b for b in self._blocks if b.n == B]
        for i, runs in self._index_runs.items():
            for r, nxt in zip(runs, [*runs[1:], None], strict=False):
                w = r.k1 - r.k0
                assert 0 < w <= self._max_run and w & (w - 1) == 0, "run size"
                assert r.k0 % w == 0, "run not aligned"
                assert nxt is None or r.k1 <= nxt.k0, "runs overlap or out of order"
                assert base < r.k1 * B, "run expired"
                lo = max(r.k0 * B, base)
                blocks = [b for b in sealed if lo <= b.first < r.k1 * B]
                assert len(blocks) == (r.k1 * B - lo) // B, "run over an open block"
                assert len(r.vals) == len(r.order) == w * B
                assert np.all(r.vals[1:] >= r.vals[:-1]), "run values not sorted"
                live = r.order >= lo - r.k0 * B  # entries of rows still stored
                stored = np.concatenate([b.cols[i] for b in blocks])
                assert np.array_equal(np.sort(r.order[live]), np.arange(lo - r.k0 * B, w * B))
                assert np.array_equal(r.vals[live], stored[r.order[live] - (lo - r.k0 * B)])
        if self._blocks:
            last = self._blocks[-1]
            assert last.first + last.n == self._end
        CB = self.chunk_rows
        chunks = {b.first // CB: b.chunk for b in self._blocks}
        for c, rc in self._copies.items():
            assert c in chunks, "a row copy outlived its chunk"
            assert c >= self._copied_from(), "a row copy of a chunk not among the newest"
            assert rc.n <= min(self._end - c * CB, CB), "a row copy past the stored rows"
            k = len(self._row_of)
            assert np.array_equal(rc.mat[: rc.n], chunks[c][:k, : rc.n].T), "row copy differs"
        total, indexed = self._counted()
        assert self._bytes == total, "byte count drifted"
        assert {i: n for i, n in self._indexed.items() if n} == indexed, "index count drifted"
