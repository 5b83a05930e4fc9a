"""The sparse half of the Results Structure: one match log per stream.

Queries whose matches are rare (an equality on a vehicle id matches one row in
thousands) would cost a Python step per match if each kept its own list. Instead every
sparse match of a stream goes, as a (key, seq) pair, into one shared log, appended a
whole batch at a time with numpy. The log is cut into the stream's row blocks: the open
block collects pairs unsorted; when a block fills it is sealed: sorted by (key, seq) once,
O(m log m) in C. A query's matches inside a sealed block are then one binary search away.

Costs: append O(pairs) in C per batch, no Python work per match; ``rows(key, s, e)``
O(log m) per sealed block in [s, e) plus, when the open block holds pairs of the key
(known in O(1)), a vectorised scan of its pairs;
expiry drops whole blocks. Keys of dropped queries are filtered out at sealing and by
``compact``.

Which sealed blocks hold a key's pairs is kept too, as one 64-bit mask per key (bit
``k mod 64`` for block ``k``): set for the block's keys when it is sealed and cleared for
them when it is dropped, O(pairs of the block) in C either way. A mask may name more
blocks than hold the key's pairs (a slot taken by a newer block while an older one was
still held, a forgotten key), never fewer, and a read checks each block it names. While
the sealed blocks span at most 64 block numbers, a read visits only the blocks its key
is in: an equality query matching a handful of rows of a long window costs a handful of
binary searches, not one per block.

Past 64 blocks, each sealed block also has a filter of its keys: 2^15 bits (4 KiB), bit
``key mod 2^15`` set for each key it holds, O(pairs) in C (~15 µs a block of 4,096), made
as blocks are sealed once the sealed blocks span more than 64 (a log whose window keeps
within 64 blocks makes none; the log that first spans more makes all of its blocks'). A read
tests the key's bit in every block of its span in one numpy step, O(blocks) in C, and
visits only those whose bit is set: the blocks holding the key and, with a block's
4,096 pairs of distinct keys, ~12% of the others. (A Linear Road shard's vehicles'
queries each match a row every few hundred; one binary search per block, ~2 µs of
Python each, was a tenth of a shard's time before.) The filters, like the masks, may
name more blocks than hold a key, never fewer.
"""

from __future__ import annotations

from collections import deque

import numpy as np

_EMPTY = np.empty(0, dtype=np.int64)
_NEVER = np.iinfo(np.int64).max
_SLOTS = 64  # bits of a presence mask: sealed blocks a key's mask can tell apart
_BITS = np.left_shift(np.uint64(1), np.arange(_SLOTS, dtype=np.uint64))
_FILTER_BITS = 1 << 15  # a sealed block's key filter: bit key mod 2^15
_FILTER_WORDS = _FILTER_BITS // 64


def _sorted_pairs(
    keys: np.ndarray, seqs: np.ndarray, base: int, block_rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of one block (seqs in ``[base, base + block_rows)``, keys >= 0) sorted by
    (key, seq), as new int64 arrays. Each pair is packed into one integer, key above the
    seq's offset in the block, and the packed values are sorted, not argsorted: no
    gather after. 32-bit when they fit (keys below 2^32 / block_rows: 2^20 at 4,096 rows),
    which numpy sorts 2.5x as fast as 64-bit (here: 4,096 pairs 52 against 130 µs for
    the argsort and gathers). O(m log m) in C."""
    bits = max(int(block_rows) - 1, 1).bit_length()
    top = int(keys.max()) if len(keys) else 0
    packed = keys << bits
    packed |= seqs - base
    if top < 1 << (32 - bits):
        packed = packed.astype(np.uint32)
    packed.sort()
    out_keys = (packed >> bits).astype(np.int64)
    out_seqs = (packed & ((1 << bits) - 1)).astype(np.int64)
    out_seqs += base
    return out_keys, out_seqs


class MatchLog:
    """(key, seq) match pairs of one stream, in blocks of ``block_rows`` seqs."""

    def __init__(self, block_rows: int):
        self.block_rows = block_rows
        self._sealed: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._open_k = -1
        self._open_keys: list[np.ndarray] = []
        self._open_seqs: list[np.ndarray] = []
        self._dead: set[int] = set()
        self.on_seal = None  # callback(k, keys, seqs) after a block is sealed
        self._first = np.empty(0, dtype=np.int64)  # key -> first block with its pairs
        self._last = np.empty(0, dtype=np.int64)  # key -> newest block appended its pairs
        self._present = np.zeros(0, dtype=np.uint64)  # key -> mask of sealed blocks
        self._slot_block = [-1] * _SLOTS  # slot -> the sealed block its bits stand for
        self._masks_tell: bool | None = None  # sealed blocks span <= 64 (None: not known)
        # Column j of ``_filters`` is block ``_fbase + j``'s key filter (words down the
        # rows, so that one word of many blocks is contiguous); columns below ``_low``
        # are stale and are cut off when the array grows.
        self._filters = np.zeros((_FILTER_WORDS, 0), dtype=np.uint64)
        self._fbase = 0
        self._pairs = 0  # pairs in sealed blocks
        self._low = _NEVER  # no sealed block is numbered below it
        self._unfiltered: deque[int] = deque()  # sealed or merged since their filters
        # What a reader's copy of a key's sealed pairs (``SelectionColumn``'s) rests on:
        # ``epoch`` changes when a sealed block's pairs change (a merge, a compaction),
        # ``newest`` is the newest sealed block (sealing only adds newer ones) and
        # ``floor`` the first block not dropped (seqs below ``floor * block_rows`` expired).
        self.epoch = 0
        self.newest = -1
        self.floor = 0

    @property
    def open_block(self) -> int:
        """Number of the block taking appends (-1 before the first)."""
        return self._open_k

    def __len__(self) -> int:
        """Pairs held. O(the open block's appends)."""
        return self._pairs + sum(len(k) for k in self._open_keys)

    def append(self, keys: np.ndarray, seqs: np.ndarray) -> None:
        """Add pairs; every seq must be in the open block or newer. O(pairs) in C."""
        if not len(keys):
            return
        B = self.block_rows
        lo_k = int(seqs.min()) // B
        hi_k = int(seqs.max()) // B
        if lo_k == hi_k:
            self._into(lo_k, keys, seqs)
            return
        bk = seqs // B
        for k in range(lo_k, hi_k + 1):
            m = bk == k
            if m.any():
                self._into(k, keys[m], seqs[m])

    def _into(self, k: int, keys: np.ndarray, seqs: np.ndarray) -> None:
        if k != self._open_k:
            if k < self._open_k:
                self._merge(k, keys, seqs)
                return
            self.seal()
            self._open_k = k
        self._open_keys.append(np.asarray(keys, dtype=np.int64))
        self._open_seqs.append(np.asarray(seqs, dtype=np.int64))
        self._note_first(k, keys)

    def _note_first(self, k: int, keys: np.ndarray) -> None:
        # The first block holding each key's pairs, so that a read over a long window
        # skips the blocks before it. O(pairs) in C.
        top = int(keys.max())
        if top >= len(self._first):
            size = max(top + 1, 2 * len(self._first))
            grown = np.full(size, _NEVER, dtype=np.int64)
            grown[: len(self._first)] = self._first
            self._first = grown
            last = np.full(size, -1, dtype=np.int64)
            last[: len(self._last)] = self._last
            self._last = last
        ks = keys[self._first[keys] > k]
        self._first[ks] = k
        if k == self._open_k:
            # Which keys the open block holds: a read of a key it does not hold skips the
            # scan of its unsorted pairs. O(pairs) in C.
            self._last[keys] = k

    def open_has(self, key: int) -> bool:
        """Whether the open block holds pairs of ``key``. O(1)."""
        return key < len(self._last) and int(self._last[key]) == self._open_k >= 0

    def first_block(self, key: int) -> int:
        """The first block where ``key`` has pairs (a huge number if none). O(1)."""
        return int(self._first[key]) if key < len(self._first) else _NEVER

    def _merge(self, k: int, keys: np.ndarray, seqs: np.ndarray) -> None:
        """Add pairs to sealed block ``k``: re-sorts it, O(m log m). Rare: only a batch
        spanning two blocks whose columns change layout in between takes this path."""
        old = self._sealed.get(k)
        if old is not None:
            keys = np.concatenate((old[0], keys))
            seqs = np.concatenate((old[1], seqs))
            self._pairs -= len(old[0])
        self._sealed[k] = _sorted_pairs(keys, seqs, k * self.block_rows, self.block_rows)
        self._pairs += len(keys)
        self._low = min(self._low, k)
        self._masks_tell = None
        self.epoch += 1
        self.newest = max(self.newest, k)
        self._note_first(k, keys)
        self._note_present(k, keys)
        self._unfiltered.append(k)
        self._filter_past_slots()

    def _note_present(self, k: int, keys: np.ndarray) -> None:
        """Set block ``k``'s bit in the masks of ``keys``. O(len(keys)) in C."""
        slot = k % _SLOTS
        bit = _BITS[slot]
        if self._slot_block[slot] > k:
            return  # a newer block holds the slot: the span is over 64 while k is sealed
        self._slot_block[slot] = k
        top = int(keys.max()) if len(keys) else -1
        if top >= len(self._present):
            grown = np.zeros(max(top + 1, 2 * len(self._present)), dtype=np.uint64)
            grown[: len(self._present)] = self._present
            self._present = grown
        self._present[keys] |= bit

    def _note_filter(self, k: int, keys: np.ndarray) -> None:
        """Set ``keys``' bits in block ``k``'s filter. O(len(keys) + 2^15/8) in C, plus, when the
        filters' array grows, O(its live part) (amortised O(1) per block: it doubles)."""
        j = k - self._fbase
        width = self._filters.shape[1]
        if not 0 <= j < width:
            # Cut the dropped blocks' columns, make room for block k, double the rest.
            lo = min(max(self._low, self._fbase), k) if width else k
            hi = max(self._fbase + width, k + 1)
            grown = np.zeros((_FILTER_WORDS, max(2 * (hi - lo), 16)), dtype=np.uint64)
            a, z = max(lo, self._fbase), self._fbase + width
            if a < z:
                grown[:, a - lo : z - lo] = self._filters[:, a - self._fbase : z - self._fbase]
            self._filters, self._fbase = grown, lo
            j = k - lo
        # Bit i of a filter is bit i % 64 of word i // 64: packbits' little bit order
        # read as little-endian words (~2 ns a pair; numpy's bitwise_or.at took 10).
        bits = np.zeros(_FILTER_BITS, dtype=bool)
        bits[keys & (_FILTER_BITS - 1)] = True
        self._filters[:, j] |= np.packbits(bits, bitorder="little").view("<u8")

    def _filter_past_slots(self) -> None:
        """Make the filters of the blocks sealed since, once the sealed blocks span more
        than the masks' 64 slots."""
        if self.newest - self._low >= _SLOTS:
            self._filter_unfiltered()

    def _filter_unfiltered(self) -> None:
        sealed = self._sealed
        while self._unfiltered:
            k = self._unfiltered.popleft()
            if k in sealed:
                self._note_filter(k, sealed[k][0])

    def sealed_blocks_holding(self, key: int, k0: int, k1: int) -> list[int]:
        """The sealed blocks in ``[k0, k1]`` whose filter holds ``key``, ascending: every
        sealed block there with pairs of the key, and a few others. O(k1 - k0) in C (one
        word of each block's filter), O(blocks returned) in Python."""
        sealed = self._sealed
        if not sealed:
            return []
        self._filter_unfiltered()
        fb = self._fbase
        k0 = max(k0, self.first_block(key), fb)
        k1 = min(k1, fb + self._filters.shape[1] - 1, self.newest)
        if k0 > k1:
            return []
        h = key & (_FILTER_BITS - 1)
        word = self._filters[h >> 6, k0 - fb : k1 - fb + 1]
        hits = np.flatnonzero(word & _BITS[h & 63])
        hits += k0
        return [k for k in hits.tolist() if k in sealed]

    def sealed_blocks_of(self, key: int, k0: int, k1: int) -> list[int] | None:
        """The sealed blocks in ``[k0, k1]`` that may hold ``key``'s pairs, ascending, or
        None when the masks cannot tell (the sealed blocks span more than 64 block
        numbers). O(64)."""
        sealed = self._sealed
        if not sealed:
            return []
        if self._masks_tell is None:
            self._masks_tell = len(sealed) <= _SLOTS and max(sealed) - min(sealed) < _SLOTS
        if not self._masks_tell:
            return None
        mask = int(self._present[key]) if key < len(self._present) else 0
        out = []
        while mask:
            low = mask & -mask
            kk = self._slot_block[low.bit_length() - 1]
            if k0 <= kk <= k1 and kk in sealed:
                out.append(kk)
            mask ^= low
        out.sort()
        return out

    def seal(self) -> None:
        """Sort the open block and file it; called when a newer block starts."""
        if self._open_k < 0 or not self._open_keys:
            self._open_keys, self._open_seqs = [], []
            return
        keys, seqs = self._open()
        if self._dead:
            live = ~np.isin(keys, np.fromiter(self._dead, np.int64, len(self._dead)))
            keys, seqs = keys[live], seqs[live]
        k = self._open_k
        keys, seqs = _sorted_pairs(keys, seqs, k * self.block_rows, self.block_rows)
        self._open_keys, self._open_seqs = [], []
        if len(keys):
            self._sealed[k] = (keys, seqs)
            self._pairs += len(keys)
            self._low = min(self._low, k)
            self._masks_tell = None
            self.newest = max(self.newest, k)
            self._note_present(k, keys)
            self._unfiltered.append(k)
            self._filter_past_slots()
            if self.on_seal is not None:
                self.on_seal(k, keys, seqs)

    def _open(self) -> tuple[np.ndarray, np.ndarray]:
        if len(self._open_keys) > 1:
            self._open_keys = [np.concatenate(self._open_keys)]
            self._open_seqs = [np.concatenate(self._open_seqs)]
        if not self._open_keys:
            return _EMPTY, _EMPTY
        return self._open_keys[0], self._open_seqs[0]

    def rows(self, key: int, k: int, lo: int, hi: int) -> np.ndarray:
        """Ascending seqs of ``key`` in block ``k`` within seqs ``[lo, hi)``."""
        parts = self.rows_in(key, [k], lo, hi)
        return parts[0] if parts else _EMPTY

    def rows_in(self, key: int, ks: list[int], s: int, e: int) -> list[np.ndarray]:
        """``key``'s ascending seqs within ``[s, e)`` in each of the blocks ``ks``
        (ascending), as the non-empty parts. O(log pairs) per sealed block: one search
        for both ends of the key's run, in C; the open block's pairs scanned, only when
        it holds the key."""
        out = []
        sealed = self._sealed
        bounds = np.array([key, key + 1], dtype=np.int64)  # one search finds both ends
        for k in ks:
            if k == self._open_k:
                if not self.open_has(key):
                    continue
                keys, seqs = self._open()
                v = seqs[keys == key]  # in append order, not sorted yet: masked
                if len(v) and (v[0] < s or v[-1] >= e):
                    v = v[(v >= s) & (v < e)]
            else:
                blk = sealed.get(k)
                if blk is None:
                    continue
                keys, seqs = blk
                a, z = keys.searchsorted(bounds).tolist()
                v = seqs[a:z]
                if len(v) and (v[0] < s or v[-1] >= e):
                    v = v[v.searchsorted(s) : v.searchsorted(e)]
            if len(v):
                out.append(v)
        return out

    def blocks(self) -> list[int]:
        """Numbers of the blocks holding pairs, ascending."""
        ks = sorted(self._sealed)
        if self._open_keys and self._open_k >= 0:
            ks.append(self._open_k)
        return ks

    def forget(self, key: int) -> None:
        """Stop returning ``key``'s pairs; they are purged at sealing and compaction. O(1)."""
        self._dead.add(key)
        if len(self._dead) >= 1024:
            self.compact()

    def compact(self) -> None:
        """Purge the pairs of forgotten keys from every block. O(pairs)."""
        if not self._dead:
            return
        dead = np.fromiter(self._dead, np.int64, len(self._dead))
        self.epoch += 1
        for k, (keys, seqs) in list(self._sealed.items()):
            live = ~np.isin(keys, dead)
            if not live.all():
                kept = int(np.count_nonzero(live))
                self._pairs -= len(keys) - kept
                if kept:
                    self._sealed[k] = (keys[live], seqs[live])
                else:
                    del self._sealed[k]
                    self._masks_tell = None
        if self._open_keys:
            keys, seqs = self._open()
            live = ~np.isin(keys, dead)
            self._open_keys, self._open_seqs = [keys[live]], [seqs[live]]
        self._dead.clear()

    def drop_below(self, k: int) -> None:
        """Forget the blocks numbered below ``k``. O(pairs dropped) in C."""
        sealed = self._sealed
        self.floor = max(self.floor, k)
        low = self._low
        if k > low:
            if k - low <= len(sealed):  # the numbers passed, not every block held
                gone = [kk for kk in range(low, k) if kk in sealed]
            else:
                gone = [kk for kk in sealed if kk < k]
            self._low = k
            while self._unfiltered and self._unfiltered[0] < k:
                self._unfiltered.popleft()
            for kk in gone:
                keys = sealed.pop(kk)[0]
                self._pairs -= len(keys)
                if self._slot_block[kk % _SLOTS] == kk:  # else a newer block owns those bits
                    self._present[keys] &= ~_BITS[kk % _SLOTS]
                self._masks_tell = None
        if self._open_k < k:
            self._open_keys, self._open_seqs = [], []

    def nbytes(self) -> int:
        return 16 * len(self)

    def _check(self) -> None:
        """Verify sortedness and block membership (for tests)."""
        B = self.block_rows
        unfiltered = set(self._unfiltered)
        for k, (keys, seqs) in self._sealed.items():
            assert len(keys) == len(seqs) > 0
            assert np.all((seqs // B) == k), "pair filed under the wrong block"
            order = np.lexsort((seqs, keys))
            assert np.array_equal(order, np.arange(len(keys))), "sealed block not sorted"
            assert k != self._open_k or not self._open_keys
            if self._slot_block[k % _SLOTS] == k:
                bit = _BITS[k % _SLOTS]
                assert np.all(self._present[keys] & bit), "a key's mask misses its block"
            assert self._low <= k, "a sealed block below the lowest"
            if k not in unfiltered:
                h = keys & (_FILTER_BITS - 1)
                word = self._filters[h >> 6, k - self._fbase]
                assert np.all(word & _BITS[h & 63]), "a block's filter misses one of its keys"
        assert self._pairs == sum(len(keys) for keys, _ in self._sealed.values())
        keys, seqs = self._open()
        if len(seqs):
            assert np.all((seqs // B) == self._open_k)
