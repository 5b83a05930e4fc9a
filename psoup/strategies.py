"""The three result strategies of seeds/002 section 5, behind one interface.

* ``PSoupP`` (the default): materialise every match in the Results Structure; apply the
  window at invoke by binary search on time and a read of the column's bits in range.
* ``PSoupC``: keep each selection query's matches with their timestamps in arrays and
  move the query's current-window bounds eagerly after every batch, so that an invoke at
  the current NOW is a slice. The maintenance is O(queries on the stream) per batch.
  Two-source queries use the Results Structure's pair columns, as under PSoup-P.
* ``NoMat``: materialise nothing; ingest only stores data; an invoke evaluates the query
  over the window's rows through the Data SteM's indexes.

The engine owns the SteMs and calls these hooks; a strategy owns only result state.
"""

from __future__ import annotations

from array import array

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
    def mark(self, stream: str, first: int, matches, ts: np.ndarray) -> int:
        """Record the selection matches of a probe; returns how many were recorded."""
        return self.results.mark(stream, first, matches.dense, matches.offsets, matches.entries)

    def after_batch(self, stream: str, now, horizon_seq: int, stored_from: int) -> None:
        """Called once per ingested batch, after marking and expiry."""
        self.results.expire(stream, stored_from)

    # -- invoke ------------------------------------------------------------
    def selection_rows(
        self, qid: int, entry: int, stream: str, s: int, e: int, lo, hi
    ) -> np.ndarray:
        """Matched seqs in ``[s, e)`` (the window's visible seqs), ascending."""
        return self.results.selection(entry, stream).rows(s, e)

    def selection_count(self, qid: int, entry: int, stream: str, s: int, e: int, lo, hi) -> int:
        return self.results.selection(entry, stream).count(s, e)


class PSoupP(Strategy):
    """Materialise matches; apply windows at invoke."""

    name = "psoup-p"


class _Matched:
    """PSoup-C's per-query list: matched seqs and their timestamps, plus the window."""

    __slots__ = ("begin", "end", "head", "seqs", "ts")

    def __init__(self, ts_code: str):
        self.seqs = array("q")
        self.ts = array(ts_code)
        self.head = 0  # entries before head are expired and may be compacted away
        self.begin = 0  # current window = [begin, end) indexes into seqs
        self.end = 0

    def extend(self, seqs: np.ndarray, ts: np.ndarray) -> None:
        self.seqs.frombytes(np.ascontiguousarray(seqs, dtype=np.int64).tobytes())
        self.ts.frombytes(np.ascontiguousarray(ts).tobytes())


class PSoupC(Strategy):
    """Keep each selection query's current window result up to date."""

    name = "psoup-c"

    def __init__(self, block_rows: int):
        super().__init__(block_rows)
        self.lists: dict[int, _Matched] = {}  # entry -> list
        self.by_stream: dict[str, dict[int, object]] = {}  # stream -> entry -> window
        self.ts_dtype: dict[str, np.dtype] = {}

    def add_selection(self, qid, entry, stream, seqs, ts) -> None:
        code = "q" if ts.dtype.kind == "i" else "d"
        m = self.lists[entry] = _Matched(code)
        m.extend(seqs, ts)
        self.ts_dtype[stream] = ts.dtype

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

    def mark(self, stream, first, matches, ts) -> int:
        marked = 0
        lists = self.lists
        for entry, offs in matches.by_entry():
            m = lists.get(entry)
            if m is not None:
                m.extend(offs + first, ts[offs])
                marked += len(offs)
        return marked

    def after_batch(self, stream, now, horizon_seq, stored_from) -> None:
        super().after_batch(stream, now, horizon_seq, stored_from)
        for entry, window in self.by_stream.get(stream, {}).items():
            self._advance(self.lists[entry], window, now, horizon_seq)

    @staticmethod
    def _advance(m: _Matched, window, now, horizon_seq: int) -> None:
        bounds = window.resolve(now)
        if not len(m.seqs):
            m.head = m.begin = m.end = 0
            return
        seqs = np.frombuffer(m.seqs, dtype=np.int64)
        ts = np.frombuffer(m.ts, dtype=np.int64 if m.ts.typecode == "q" else np.float64)
        head = int(np.searchsorted(seqs, horizon_seq, "left"))
        if bounds is None:
            begin = end = head
        else:
            lo, hi = bounds
            begin = max(head, int(np.searchsorted(ts, lo, "left")))
            end = max(begin, int(np.searchsorted(ts, hi, "right")))
        del seqs, ts
        # Compact once the expired prefix outweighs what is kept.
        if head > 1024 and head * 2 > len(m.seqs):
            del m.seqs[:head]
            del m.ts[:head]
            begin -= head
            end -= head
            head = 0
        m.head, m.begin, m.end = head, begin, end

    def selection_rows(self, qid, entry, stream, s, e, lo, hi) -> np.ndarray:
        m = self.lists[entry]
        if not len(m.seqs):
            return _EMPTY
        seqs = np.frombuffer(m.seqs, dtype=np.int64)
        # At the current NOW the window is ready; otherwise binary-search the list.
        a, z = m.begin, m.end
        if not self._exact(seqs, a, z, s, e):
            a = int(np.searchsorted(seqs, s, "left"))
            z = int(np.searchsorted(seqs, e, "left"))
        return seqs[a:z].copy()

    @staticmethod
    def _exact(seqs: np.ndarray, a: int, z: int, s: int, e: int) -> bool:
        """Whether [a, z) holds exactly the matches in [s, e). O(1)."""
        inside = a == z or (seqs[a] >= s and seqs[z - 1] < e)
        return inside and (a == 0 or seqs[a - 1] < s) and (z == len(seqs) or seqs[z] >= e)

    def selection_count(self, qid, entry, stream, s, e, lo, hi) -> int:
        return len(self.selection_rows(qid, entry, stream, s, e, lo, hi))


class NoMat(Strategy):
    """Evaluate at invoke; ingest only stores data."""

    name = "nomat"
    materializes = False

    def add_selection(self, qid, entry, stream, seqs, ts) -> None:
        pass

    def mark(self, stream, first, matches, ts) -> int:
        return 0

    def after_batch(self, stream, now, horizon_seq, stored_from) -> None:
        pass


STRATEGIES: dict[str, type[Strategy]] = {s.name: s for s in (PSoupP, PSoupC, NoMat)}
