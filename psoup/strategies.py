"""The three result strategies of seeds/002 section 5, behind one interface.

* ``PSoupP`` (the default): materialise every match in the Results Structure; apply the
  window at invoke by binary search on time and a read of the column's bits in range.
* ``PSoupC``: keep each selection query's matches with their timestamps, and a plain
  selection's output columns' values (its complete result, as the paper's PSoup-C
  keeps and copies the tuples), in append-only arrays, and move the query's
  current-window bounds eagerly after every batch, so that an invoke at the current NOW
  is a slice of each column: read-only views, no gather and no copy. The maintenance is
  O(queries on the stream) per batch plus O(columns) per match; the memory 8 bytes per
  match and kept column more than PSoup-P's bit. Two-source queries use the Results
  Structure's pair columns, as under PSoup-P.
* ``NoMat``: materialise nothing; ingest only stores data; an invoke evaluates the query
  over the window's rows through the Data SteM's indexes.

The engine owns the SteMs and calls these hooks; a strategy owns only result state.
"""

from __future__ import annotations

import numpy as np

from results.columns import SelectionColumn
from results.structure import ResultsStructure

_EMPTY = np.empty(0, dtype=np.int64)


class Strategy:
    """Hooks the engine calls; see the module docstring for the three implementations."""

    name = ""
    materializes = True

    def __init__(self, block_rows: int):
        self.results = ResultsStructure(block_rows)
        # entry id -> column to mark, for selection entries
        self.columns: dict[int, SelectionColumn] = {}

    # -- registration ------------------------------------------------------
    def add_selection(
        self, qid: int, entry: int, stream: str, seqs: np.ndarray, ts: np.ndarray
    ) -> None:
        self.columns[entry] = self.results.add_selection(entry, stream)
        self.results.backfill(entry, stream, seqs)

    def drop(self, qid: int, entries: list[int]) -> None:
        for e in entries:
            if self.columns.pop(e, None) is not None:
                self.results.drop_selection(e)
        self.results.drop_join(qid)

    def reset_stream(self, stream: str) -> None:
        """Forget all result state over ``stream`` (its queries were dropped first)."""
        self.results.reset_stream(stream)

    # -- ingest -------------------------------------------------------------
    def mark(self, stream: str, first: int, matches, ts: np.ndarray, cols=None) -> int:
        """Record the selection matches of a probe; returns how many were recorded.
        ``cols``: the batch's columns in schema order (``ts`` is one of them)."""
        return self.results.mark(stream, first, matches.dense, matches.offsets, matches.entries)

    def after_batch(self, stream: str, now, horizon_seq: int, stored_from: int) -> None:
        """Called once per ingested batch, after marking and expiry."""
        self.results.expire(stream, stored_from)

    # -- invoke ------------------------------------------------------------
    def selection_rows(self, entry: int, stream: str, s: int, e: int) -> np.ndarray:
        """Matched seqs in ``[s, e)`` (the window's visible seqs), ascending."""
        return self.results.selection(entry, stream).rows(s, e)

    def selection_count(self, entry: int, stream: str, s: int, e: int) -> int:
        return self.results.selection(entry, stream).count(s, e)


class PSoupP(Strategy):
    """Materialise matches; apply windows at invoke."""

    name = "psoup-p"


class _Matched:
    """PSoup-C's per-query list: matched seqs, their timestamps and, for a plain
    selection, its output columns' values (the complete result, as the paper's PSoup-C
    keeps the tuples), plus the window.

    The lists are append-only buffers: rows ``[0, n)`` are never written again (a
    growth or a compaction copies into new buffers), so the read-only views an invoke
    hands out keep their values whatever comes after. O(1) amortised per match and
    column appended.
    """

    __slots__ = ("begin", "end", "head", "n", "positions", "seqs", "ts", "vals")

    def __init__(self, seqs: np.ndarray, ts: np.ndarray):
        self.n = len(seqs)
        self.seqs = _grown(np.ascontiguousarray(seqs, dtype=np.int64), self.n)
        self.ts = _grown(np.ascontiguousarray(ts), self.n)
        self.positions: tuple[int, ...] | None = None  # output columns kept, if any
        self.vals: list[np.ndarray] = []
        self.head = 0  # entries before head are expired and may be compacted away
        self.begin = 0  # current window = [begin, end) indexes into seqs
        self.end = 0

    def keep(self, positions: tuple[int, ...], values: list[np.ndarray]) -> None:
        """Keep the values of the stream's columns at ``positions`` too, from the
        matches' current ``values`` (one array per position, ``n`` long) on."""
        self.positions = positions
        self.vals = [_grown(np.asarray(v), self.n) for v in values]

    def extend(self, seqs: np.ndarray, ts: np.ndarray, cols: list | None, offs) -> None:
        """Append matches at ``seqs`` (ascending, after the last kept) with their ``ts``;
        their kept columns' values are ``cols[p][offs]`` (the batch's columns)."""
        n, k = self.n, len(seqs)
        if n + k > len(self.seqs):
            cap = max(2 * len(self.seqs), n + k)
            self.seqs, self.ts = _grown(self.seqs[:n], cap), _grown(self.ts[:n], cap)
            self.vals = [_grown(v[:n], cap) for v in self.vals]
        self.seqs[n : n + k] = seqs
        self.ts[n : n + k] = ts
        if self.positions is not None:
            for v, p in zip(self.vals, self.positions, strict=True):
                v[n : n + k] = cols[p][offs]
        self.n = n + k

    def compact(self, head: int) -> None:
        """Drop the first ``head`` entries into new buffers (views given out keep the
        old ones), with room for twice as many more: a list compacts again (at more
        expired than kept) before it grows. O(kept)."""
        n = self.n - head
        cap = 3 * n
        self.seqs = _grown(self.seqs[head : self.n], cap)
        self.ts = _grown(self.ts[head : self.n], cap)
        self.vals = [_grown(v[head : self.n], cap) for v in self.vals]
        self.n = n


def _grown(a: np.ndarray, cap: int) -> np.ndarray:
    """A new buffer of at least ``cap`` (and 16) entries starting with ``a``. O(len(a))."""
    out = np.empty(max(cap, len(a), 16), dtype=a.dtype)
    out[: len(a)] = a
    return out


class PSoupC(Strategy):
    """Keep each selection query's current window result up to date."""

    name = "psoup-c"

    def __init__(self, block_rows: int):
        super().__init__(block_rows)
        self.lists: dict[int, _Matched] = {}  # entry -> list
        self.by_stream: dict[str, dict[int, object]] = {}  # stream -> entry -> window

    def add_selection(self, qid, entry, stream, seqs, ts) -> None:
        self.lists[entry] = _Matched(seqs, ts)

    def keep_values(self, entry: int, positions: tuple[int, ...], values: list) -> None:
        """Keep ``entry``'s output columns (the stream's columns at ``positions``) with
        its matches, from their current ``values`` on: an invoke of the current window
        is then a slice of each (``selection_arrays``). O(matches x columns)."""
        self.lists[entry].keep(positions, values)

    def watch(self, stream: str, entry: int, window, now, horizon_seq: int) -> None:
        """Have ``entry``'s window maintained after each batch of ``stream``, and place it
        for the stream's current ``now`` and horizon. O(log matches): a registration does
        not advance the other queries' windows."""
        self.by_stream.setdefault(stream, {})[entry] = window
        self._advance(self.lists[entry], window, now, horizon_seq)

    def drop(self, qid, entries) -> None:
        for e in entries:
            self.lists.pop(e, None)
            for group in self.by_stream.values():
                group.pop(e, None)
        self.results.drop_join(qid)

    def mark(self, stream, first, matches, ts, cols=None) -> int:
        marked = 0
        lists = self.lists
        for entry, offs in matches.by_entry():
            m = lists.get(entry)
            if m is not None:
                m.extend(offs + first, ts[offs], cols, offs)
                marked += len(offs)
        return marked

    def after_batch(self, stream, now, horizon_seq, stored_from) -> None:
        super().after_batch(stream, now, horizon_seq, stored_from)
        for entry, window in self.by_stream.get(stream, {}).items():
            self._advance(self.lists[entry], window, now, horizon_seq)

    @staticmethod
    def _advance(m: _Matched, window, now, horizon_seq: int) -> None:
        bounds = window.resolve(now)
        if not m.n:
            m.head = m.begin = m.end = 0
            return
        seqs, ts = m.seqs[: m.n], m.ts[: m.n]
        head = int(np.searchsorted(seqs, horizon_seq, "left"))
        if bounds is None:
            begin = end = head
        else:
            lo, hi = bounds
            begin = max(head, int(np.searchsorted(ts, lo, "left")))
            end = max(begin, int(np.searchsorted(ts, hi, "right")))
        # Compact once the expired prefix outweighs what is kept.
        if head > 1024 and head * 2 > m.n:
            m.compact(head)
            begin -= head
            end -= head
            head = 0
        m.head, m.begin, m.end = head, begin, end

    def _span(self, entry: int, s: int, e: int) -> tuple[_Matched, int, int]:
        """``entry``'s list and the indexes ``[a, z)`` of its matches in ``[s, e)``: the
        current window's at the current NOW (O(1)), else by binary search."""
        m = self.lists[entry]
        seqs = m.seqs[: m.n]
        a, z = m.begin, m.end
        if not self._exact(seqs, a, z, s, e):
            a = int(np.searchsorted(seqs, s, "left"))
            z = int(np.searchsorted(seqs, e, "left"))
        return m, a, z

    def selection_rows(self, entry, stream, s, e) -> np.ndarray:
        m, a, z = self._span(entry, s, e)
        return m.seqs[a:z].copy() if a < z else _EMPTY

    def selection_arrays(self, entry: int, s: int, e: int) -> list[np.ndarray] | None:
        """The kept output columns of ``entry``'s matches in ``[s, e)``, as views of its
        lists (which never change under them: ``_Matched``); None when it keeps no
        values. O(log matches), O(1) at the current NOW: no gather, no copy."""
        m, a, z = self._span(entry, s, e)
        if m.positions is None:
            return None
        return [v[a:z] for v in m.vals]

    @staticmethod
    def _exact(seqs: np.ndarray, a: int, z: int, s: int, e: int) -> bool:
        """Whether [a, z) holds exactly the matches in [s, e). O(1)."""
        inside = a == z or (seqs[a] >= s and seqs[z - 1] < e)
        return inside and (a == 0 or seqs[a - 1] < s) and (z == len(seqs) or seqs[z] >= e)

    def selection_count(self, entry, stream, s, e) -> int:
        _, a, z = self._span(entry, s, e)
        return z - a

    def _check(self) -> None:
        """Each list's seqs ascending, its parts equally long, its window inside it."""
        for m in self.lists.values():
            seqs = m.seqs[: m.n]
            assert np.all(seqs[1:] > seqs[:-1]), "seqs not strictly ascending"
            assert all(len(v) >= m.n for v in (m.seqs, m.ts, *m.vals))
            assert (m.positions is None) == (not m.vals)
            assert 0 <= m.head <= m.begin <= m.end <= m.n


class NoMat(Strategy):
    """Evaluate at invoke; ingest only stores data."""

    name = "nomat"
    materializes = False

    def add_selection(self, qid, entry, stream, seqs, ts) -> None:
        pass

    def mark(self, stream, first, matches, ts, cols=None) -> int:
        return 0

    def after_batch(self, stream, now, horizon_seq, stored_from) -> None:
        pass


STRATEGIES: dict[str, type[Strategy]] = {s.name: s for s in (PSoupP, PSoupC, NoMat)}
