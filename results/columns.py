"""Result columns: which rows of a stream satisfied one standing query.

A ``SelectionColumn`` is split into blocks of ``block_rows`` rows aligned with the Data
SteM's blocks (block ``k`` covers seqs ``[k*B, (k+1)*B)``). Each block's matches are kept
in one of two layouts, chosen by measured density (the storage trade-off of seeds/002
line 1927):

* sparse: (key, seq) pairs in the stream's shared ``MatchLog``, 128 bits per match, no
  Python object and no Python step per match;
* dense: the column's own ``bitarray`` of B bits, 1 bit per row.

A column starts sparse. When it matches more than B/64 rows of a block (where the bitmap
becomes the smaller), its next blocks go dense; a dense block that ends with B/64 matches
or fewer sends the next block back to the log. Expiry drops whole blocks.

A column read keeps a copy of its seqs within the windows it read. Rows are marked once,
in seq order, before any read reaches them, so the copy stays true; the next read
extends it with the rows stored since, each read once, whether from a bitmap or the log
(a log merge or compaction, the log's ``epoch``, has it made anew). So a read is a binary
search in one array plus the rows that came since, not one unpack or search per block,
and no read visits a block outside its window. It costs 8 bytes per match of a column
that has been read, within its windows (the prefix before the window is dropped once it
is the larger part): up to 64 times a dense block's bitmap, half the log's pairs when
sparse. So the copies of one Results Structure share a byte budget (``KeptCopies``, 64
MiB by default): past it the least recently read are dropped, and their next read
reads its window anew.

A ``JoinColumn`` keeps the result pairs of a two-source query ordered by the older base
tuple's timestamp (seeds/002 lines 1899-1909), in a ``SortedList``.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict

import numpy as np
from bitarray import bitarray
from sortedcontainers import SortedList

from results.match_log import MatchLog

_EMPTY = np.empty(0, dtype=np.int64)
_END = np.iinfo(np.int64).max  # past every seq


class Modes:
    """Which column keys are in dense mode, as a numpy array for batch look-ups."""

    def __init__(self) -> None:
        self.flags = np.zeros(1024, dtype=bool)

    def set(self, key: int, flag: bool) -> None:
        if key >= len(self.flags):
            grown = np.zeros(max(2 * len(self.flags), key + 1), dtype=bool)
            grown[: len(self.flags)] = self.flags
            self.flags = grown
        self.flags[key] = flag

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Dense flags of ``keys`` (False for keys never set). O(len(keys))."""
        out = np.zeros(len(keys), dtype=bool)
        ok = keys < len(self.flags)
        out[ok] = self.flags[keys[ok]]
        return out


class KeptCopies:
    """The byte budget of the columns' kept copies of what they read (``SelectionColumn
    ._kept``), shared by the columns of one Results Structure: when the copies exceed
    it, the least recently read are dropped (their next read reads its window anew).
    A copy of at most ``small`` seqs is not counted: it costs no more than its column's
    own bookkeeping, and a million vehicles' queries then need no entry each here.
    O(1) per read."""

    def __init__(self, budget_bytes: int = 64 << 20, small: int = 64):
        self.budget = budget_bytes
        self.small = small
        self.nbytes = 0
        self._lru: OrderedDict[SelectionColumn, int] = OrderedDict()

    def note(self, col: SelectionColumn, nbytes: int) -> None:
        """``col`` was read and its copy now holds ``nbytes``; drop the least recently
        read copies while the counted ones exceed the budget. O(1) amortised."""
        lru = self._lru
        old = lru.pop(col, None)
        if old is None and nbytes <= 8 * self.small:
            return
        self.nbytes += nbytes - (old or 0)
        lru[col] = nbytes
        while self.nbytes > self.budget and len(lru) > 1:
            victim, size = lru.popitem(last=False)
            victim._cache = None
            self.nbytes -= size

    def touch(self, col: SelectionColumn) -> None:
        """``col`` was read and its copy is as it was: now the most recently read. O(1)."""
        if col in self._lru:  # else a small copy, not counted
            self._lru.move_to_end(col)

    def forget(self, col: SelectionColumn) -> None:
        """``col`` dropped its copy (or is dropped). O(1)."""
        size = self._lru.pop(col, None)
        if size is not None:
            self.nbytes -= size

    def _check(self) -> None:
        """The counted bytes are the counted copies' (for tests)."""
        assert self.nbytes == sum(self._lru.values()), "kept bytes miscounted"
        assert self.nbytes <= self.budget or len(self._lru) <= 1, "over the budget"
        for col, size in self._lru.items():
            assert col._cache is not None and col._cache[3].nbytes == size, "stale entry"


class SelectionColumn:
    """Matched seqs of one query over one stream.

    Dense blocks are the column's own bitarrays; every other block's matches live in
    the stream's shared ``MatchLog`` under the column's ``key``. ``dense`` says where the
    next block's matches go; the Results Structure flips it by measured density.
    """

    __slots__ = (
        "_backfill",
        "_blocks",
        "_cache",
        "_copies",
        "_modes",
        "_registry",
        "block_rows",
        "key",
        "log",
        "threshold",
    )

    def __init__(
        self,
        key: int,
        block_rows: int,
        log: MatchLog,
        registry: dict[int, set],
        modes: Modes,
        copies: KeptCopies | None = None,
    ):
        self.key = key
        self._copies = KeptCopies() if copies is None else copies
        self._modes = modes
        self.block_rows = block_rows
        self.threshold = max(1, block_rows // 64)
        self.log = log
        modes.set(key, False)
        self._blocks: dict[int, bitarray] = {}
        # (log epoch, first seq, end seq, seqs): the column's seqs in that range, kept
        # from the last read (``_kept``).
        self._cache: tuple[int, int, int, np.ndarray] | None = None
        # Sparse matches found at registration in blocks the log had already sealed.
        self._backfill = _EMPTY
        # block number -> columns holding a dense block there; shared by the columns of
        # one stream so that expiry visits only the blocks it drops.
        self._registry = registry

    @property
    def dense(self) -> bool:
        """Whether the stream's current block's matches go to a bitmap (else the log).

        The Results Structure changes it only between blocks, so that every block lives
        wholly in the log or wholly in a bitmap."""
        return bool(self._modes.flags[self.key])

    @dense.setter
    def dense(self, flag: bool) -> None:
        self._modes.set(self.key, flag)

    def __len__(self) -> int:
        """Number of matched rows stored. O(blocks)."""
        return self.count(0, self._end_hint())

    def _end_hint(self) -> int:
        ks = [*self._blocks, *self.log.blocks()]
        return (max(ks) + 1) * self.block_rows if ks else 0

    def block_bitmap(self, k: int) -> bitarray:
        """The bitmap of block ``k``, created empty on first use. O(1) amortised."""
        ba = self._blocks.get(k)
        if ba is None:
            ba = bitarray(self.block_rows)
            ba.setall(0)
            self._blocks[k] = ba
            self._registry.setdefault(k, set()).add(self)
        return ba

    def backfill(self, seqs: np.ndarray) -> None:
        """Record the matches a new query found in the stored data (ascending seqs).

        Blocks the log has sealed take a bitmap when dense, else the column's own
        backfill array; newer blocks go the normal way. O(len(seqs)) in C plus O(1)
        Python steps per block touched.
        """
        if not len(seqs):
            return
        seqs = np.asarray(seqs, dtype=np.int64)
        B = self.block_rows
        open_k = self.log.open_block
        old = seqs[: np.searchsorted(seqs, open_k * B)] if open_k >= 0 else seqs[:0]
        if len(old):
            bk = old // B
            cuts = np.flatnonzero(np.diff(bk)) + 1
            keep = []
            for a, z in zip([0, *cuts.tolist()], [*cuts.tolist(), len(old)], strict=True):
                k = int(bk[a])
                if z - a > self.threshold:
                    self.block_bitmap(k)[(old[a:z] - k * B).tolist()] = 1
                else:
                    keep.append(old[a:z])
            if keep:
                self._backfill = np.concatenate(keep)
        self.mark_seqs(seqs[len(old) :])

    def trim_backfill(self, seq: int) -> bool:
        """Drop backfilled matches older than ``seq``; True while some remain."""
        if len(self._backfill):
            self._backfill = self._backfill[np.searchsorted(self._backfill, seq) :]
        return bool(len(self._backfill))

    def mark_seqs(self, seqs: np.ndarray) -> None:
        """Record matches at ascending ``seqs``, newer than any marked before.

        O(len(seqs)) in C plus O(1) Python steps per block touched.
        """
        if not len(seqs):
            return
        seqs = np.asarray(seqs, dtype=np.int64)
        B = self.block_rows
        k0, k1 = int(seqs[0]) // B, int(seqs[-1]) // B
        for k in range(k0, k1 + 1):
            part = seqs if k0 == k1 else seqs[(seqs >= k * B) & (seqs < (k + 1) * B)]
            if not len(part):
                continue
            if self.dense:
                self.block_bitmap(k)[(part - k * B).tolist()] = 1
            else:
                self.log.append(np.full(len(part), self.key, dtype=np.int64), part)

    def _block_numbers(self, k0: int, k1: int) -> list[int]:
        """The blocks of ``[k0, k1]`` that may hold matches, ascending: the dense blocks,
        the sealed log blocks whose presence mask (spans of up to 64 blocks) or filter
        (longer ones) names the column's key, and the open block if it holds the key; so
        a long window costs no Python step per block the column has no match in.
        O(blocks returned + 64), plus O(k1 - k0) in C past 64 blocks."""
        dense = self._blocks
        log = self.log
        known = log.sealed_blocks_of(self.key, k0, k1)
        if known is None:
            known = log.sealed_blocks_holding(self.key, k0, k1)
        if dense:
            known = sorted({*known, *(k for k in dense if k0 <= k <= k1)})
        ob = log.open_block
        if k0 <= ob <= k1 and ob not in known and log.open_has(self.key):
            if known and known[-1] > ob:  # dense blocks after the log's open one
                bisect.insort(known, ob)
            else:
                known.append(ob)
        return known

    def _blocks_in(self, s: int, e: int):
        """Yield (k, lo, hi, bitmap or None) for ``_block_numbers`` of ``[s, e)``: the
        block's number, the window's offsets in it, and its bitmap when dense."""
        B = self.block_rows
        dense = self._blocks
        for k in self._block_numbers(s // B, (e - 1) // B):
            base = k * B
            yield k, max(s - base, 0), min(e - base, B), dense.get(k)

    def rows(self, s: int, e: int) -> np.ndarray:
        """Ascending matched seqs in ``[s, e)``, not to be written (a view of the
        column's copy: left writeable, as numpy's ``take`` copies an index array that is
        not, ~1 µs for an invoke of 3,500 rows). Every row before ``e``
        must have been marked (the engine marks a batch before any read sees it).

        A slice of the column's copy of its seqs (``_kept``: brought up to date with the
        rows stored since the last read, each read once). O(log m + result) when no row
        came since; else plus the new rows' blocks: O(their bits/8) in C when dense, a
        binary search per sealed log block and a scan of the open block's pairs when it
        holds the key. Nothing outside the window is visited.
        """
        if s >= e:
            return _EMPTY
        c = self._cache
        if (
            c is not None
            and c[1] == s
            and c[2] == e
            and c[0] == self.log.epoch
            and not len(self._backfill)
        ):
            # The same window read again with no row stored since (an invoke repeated):
            # the copy is the answer, with no slice or new cache entry.
            self._copies.touch(self)
            return c[3]
        kept, first, upto = self._kept(s, e)
        # The copy holds [first, upto), first <= s and upto >= e: an end that is the
        # copy's own needs no search (a read usually ends where the copy does).
        a = 0 if first == s or not len(kept) else int(kept.searchsorted(s))
        z = len(kept) if upto == e else int(kept.searchsorted(e))
        part = kept[a:z]
        bf = self._backfill
        if len(bf) and bf[0] < e and bf[-1] >= s:
            merged = np.concatenate((part, bf[np.searchsorted(bf, s) : np.searchsorted(bf, e)]))
            merged.sort()
            return merged
        return part  # the kept copy is never written, only replaced

    def _read(self, s: int, e: int) -> np.ndarray:
        """The column's seqs in ``[s, e)`` as its blocks stand, ascending, in an array of
        their own (a view of the log's block would keep the block's pairs alive after
        the log drops it): each run of consecutive dense blocks unpacked once, the log's
        blocks between them read in one call. O(blocks that may hold matches + their
        bits/8 + matches) in C."""
        if s >= e:
            return _EMPTY
        B = self.block_rows
        dense = self._blocks
        log = self.log
        out: list[np.ndarray] = []
        logged: list[int] = []
        run: list[int] = []  # [first, last] of a run of dense blocks
        viewed = False  # a part may be a view of the log's arrays

        def flush() -> None:
            nonlocal viewed
            if logged:
                out.extend(log.rows_in(self.key, logged, s, e))
                logged.clear()
                viewed = True
            if run:
                found = self._dense_bits(max(s, run[0] * B), min(e, (run[1] + 1) * B))
                if len(found):
                    out.append(found)
                run.clear()

        for k in self._block_numbers(s // B, (e - 1) // B):
            if k in dense:
                if run and run[1] == k - 1 and not B % 8:  # bytes join without a seam
                    run[1] = k
                else:
                    flush()
                    run[:] = [k, k]
            else:
                if run:
                    flush()
                logged.append(k)
        flush()
        if not out:
            return _EMPTY
        if len(out) > 1:
            return np.concatenate(out)
        return out[0].copy() if viewed else out[0]

    def _dense_bits(self, s: int, e: int) -> np.ndarray:
        """The set bits' seqs in ``[s, e)``, every block of which is dense: the blocks'
        bytes joined (bitarray's big-endian bit order, as ``np.unpackbits``), unpacked
        once and scanned as booleans (numpy scans them four times as fast as uint8).
        O((e - s)/8) in C, O(1) Python steps besides the join's one per block. A fresh
        array."""
        B = self.block_rows
        k0, k1 = s // B, (e - 1) // B
        dense = self._blocks
        lo, hi = s - k0 * B, e - k0 * B  # the window's bits in the joined blocks
        a = lo >> 3
        joined = b"".join([dense[k] for k in range(k0, k1 + 1)])
        buf = np.frombuffer(joined, dtype=np.uint8, count=((hi + 7) >> 3) - a, offset=a)
        found = np.unpackbits(buf)[lo - 8 * a : hi - 8 * a].view(bool).nonzero()[0]
        found += s
        return found

    def _kept(self, s: int, e: int) -> tuple[np.ndarray, int, int]:
        """``(seqs, first, upto)``: the column's seqs in ``[first, upto)``, a range that
        holds ``[s, e)``, ascending: a copy the column keeps (the caller must not write
        to it). Rows are
        marked once, in seq order, before any read reaches them, so what the copy holds
        never changes but by a log merge or compaction (the log's ``epoch``: the copy is
        made anew). Extended with ``[upto, e)`` (each row read once); made anew from
        ``s`` when ``s`` is outside it; its prefix before ``s`` dropped once it is the
        larger part. O(log m + rows not read before) and 8 bytes per match kept, within
        the windows read, under the structure's budget (``KeptCopies``)."""
        log = self.log
        cache = self._cache
        if cache is None or cache[0] != log.epoch or not cache[1] <= s <= cache[2]:
            first, upto, rows = s, s, _EMPTY
        else:
            _, first, upto, rows = cache
        if e > upto:
            fresh = self._read(upto, e)
            if len(fresh):
                rows = np.concatenate((rows, fresh)) if len(rows) else fresh
            upto = e
        if s > first and len(rows) and rows[0] < s:
            cut = int(rows.searchsorted(s))
            if 2 * cut >= len(rows):
                rows, first = rows[cut:].copy(), s
        self._cache = (log.epoch, first, upto, rows)
        self._copies.note(self, rows.nbytes)
        return rows, first, upto

    def count(self, s: int, e: int) -> int:
        """Number of matched seqs in ``[s, e)``. O(1) C calls per block visited."""
        if s >= e:
            return 0
        total = 0
        for k, lo, hi, seg in self._blocks_in(s, e):
            base = k * self.block_rows
            if seg is not None:
                total += seg.count(1, lo, hi)
            else:
                total += len(self.log.rows(self.key, k, base + lo, base + hi))
        bf = self._backfill
        if len(bf):
            total += int(np.searchsorted(bf, e) - np.searchsorted(bf, s))
        return total

    def drop_block(self, k: int) -> None:
        """Forget dense block ``k`` (the caller keeps the registry). O(1)."""
        self._blocks.pop(k, None)

    def release(self) -> None:
        """Leave the shared registry and the log (when the column is dropped). O(blocks)."""
        for k in self._blocks:
            cols = self._registry.get(k)
            if cols is not None:
                cols.discard(self)
                if not cols:
                    del self._registry[k]
        self._blocks.clear()
        self._backfill = _EMPTY
        self._cache = None
        self._copies.forget(self)
        self.log.forget(self.key)

    def layout_counts(self) -> tuple[int, int]:
        """(blocks in the log, dense blocks)."""
        return len(self.log.blocks()), len(self._blocks)

    def nbytes(self) -> int:
        """Bytes held by the column's own (dense) blocks."""
        return sum(seg.nbytes for seg in self._blocks.values())

    def _check(self) -> None:
        """Verify block contents (for tests)."""
        for seg in self._blocks.values():
            assert len(seg) == self.block_rows
        bf = self._backfill
        assert np.all(bf[1:] > bf[:-1]), "backfill not strictly ascending"
        for k in set((bf // self.block_rows).tolist()):
            assert k not in self._blocks, "a block both backfilled and dense"
        B = self.block_rows
        cache = self._cache
        if cache is not None and cache[0] == self.log.epoch:  # the copy is the rows' seqs
            _, first, upto, rows = cache
            floor = max(first, self.log.floor * B)
            want = self._read(floor, upto)
            assert np.array_equal(rows[rows >= floor], want), "stale copy"
            assert np.all(rows[1:] > rows[:-1]), "copy not strictly ascending"
            assert not len(rows) or (rows[0] >= first and rows[-1] < upto)
        for k in self._blocks:  # a block lives wholly in its bitmap or wholly in the log
            assert not len(self.log.rows(self.key, k, k * B, (k + 1) * B)), (
                "a block both dense and in the log"
            )


class JoinColumn:
    """Result pairs of one two-source query, ordered by (older ts, left id, right id)."""

    __slots__ = ("_pairs",)

    def __init__(self) -> None:
        # (min ts, left tuple id, right tuple id, max ts, left seq, right seq)
        self._pairs: SortedList = SortedList()

    def __len__(self) -> int:
        return len(self._pairs)

    def add(self, pairs) -> None:
        """Insert result pairs given as the 6-tuples above. O(p log n)."""
        self._pairs.update(pairs)

    def rows(self, lo, hi, vis0: int, vis1: int) -> list[tuple[int, int]]:
        """(left seq, right seq) of pairs with both ts in [lo, hi] and both seqs visible.

        O(log n + pairs whose older ts is in [lo, hi]).
        """
        out = []
        for p in self._pairs.irange(minimum=(lo,)):
            if p[0] > hi:
                break
            if p[3] <= hi and p[4] >= vis0 and p[5] >= vis1:
                out.append((p[4], p[5]))
        return out

    def drop_older(self, ts) -> None:
        """Forget pairs whose older timestamp is < ``ts``. O(dropped + log n)."""
        k = self._pairs.bisect_left((ts,))
        if k:
            del self._pairs[:k]
