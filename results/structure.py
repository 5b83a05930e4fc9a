"""The Results Structure: materialised matches of every standing query.

Selection queries get a ``SelectionColumn`` keyed by an int the engine chooses, grouped
by the stream they range over (one group per FROM list, as in seeds/002 section 4.3);
two-source queries get a ``JoinColumn``. Each stream group has one ``MatchLog`` holding
the sparse matches of all its columns.

Marking a probe's matches is per batch (docs/ARCHITECTURE.md, "Marking a batch"):

* sparse (row, key) pairs of columns in sparse mode go to the log in one numpy append;
* a dense group (keys x batch booleans, from an interval index) is packed to bits once
  with ``np.packbits``; each matched column in dense mode takes its row with one bitarray
  slice assignment, and the rows of columns in sparse mode go to the log in one append.

So the Python work per batch is O(columns in dense mode that matched), never O(matches).
When the log seals a block it counts each key's matches there; keys over the density
threshold switch their columns to dense mode for the blocks that follow.
"""

from __future__ import annotations

import numpy as np
from bitarray import bitarray

from results.columns import JoinColumn, KeptCopies, Modes, SelectionColumn
from results.match_log import MatchLog


class ResultsStructure:
    """Columns keyed by int, grouped by the stream they range over."""

    def __init__(self, block_rows: int = 4096, kept_bytes: int = 64 << 20):
        self.block_rows = block_rows
        # The selection columns' copies of what they read, under one budget.
        self.kept = KeptCopies(kept_bytes)
        self._threshold = max(1, block_rows // 64)
        self.modes = Modes()  # key -> column in dense mode
        self.selections = Modes()  # key -> has a selection column
        self._groups: dict[str, dict[int, SelectionColumn]] = {}
        self._logs: dict[str, MatchLog] = {}
        # stream -> block number -> columns with a dense block there
        self._registry: dict[str, dict[int, set[SelectionColumn]]] = {}
        self._expired_below: dict[str, int] = {}
        self._joins: dict[int, tuple[tuple[str, ...], JoinColumn]] = {}
        self._backfilled: dict[str, set[SelectionColumn]] = {}
        # Layout changes wait for the next block: stream -> keys to turn dense.
        self._pending: dict[str, set[int]] = {}
        self._dense_cols: dict[str, set[SelectionColumn]] = {}
        self._cur_block: dict[str, int] = {}

    def _log(self, stream: str) -> MatchLog:
        log = self._logs.get(stream)
        if log is None:
            log = self._logs[stream] = MatchLog(self.block_rows)
            self._groups.setdefault(stream, {})
            threshold = self._threshold

            pending = self._pending.setdefault(stream, set())

            def on_seal(k: int, keys: np.ndarray, seqs: np.ndarray) -> None:
                # Measured density: keys that matched many rows of block k go dense.
                cuts = np.flatnonzero(np.diff(keys)) + 1
                starts = np.concatenate(([0], cuts))
                counts = np.diff(np.concatenate((starts, [len(keys)])))
                pending.update(keys[starts[counts > threshold]].tolist())

            log.on_seal = on_seal
        return log

    def add_selection(self, key: int, stream: str) -> SelectionColumn:
        """A new empty column under ``key`` over ``stream``. O(1)."""
        log = self._log(stream)
        col = SelectionColumn(
            key, self.block_rows, log, self._registry.setdefault(stream, {}), self.modes,
            self.kept,
        )  # fmt: skip
        self._groups[stream][key] = col
        self.selections.set(key, True)
        return col

    def backfill(self, key: int, stream: str, seqs: np.ndarray) -> None:
        """Mark the matches a new query found in ``stream``'s stored data."""
        col = self._groups[stream][key]
        col.backfill(seqs)
        if len(seqs):
            # The newest block now holds log entries of this column: layout changes
            # must wait for the block after it.
            k = int(seqs[-1]) // self.block_rows
            cur = self._cur_block.get(stream)
            if cur is None or k > cur:
                self._cur_block[stream] = k
        if len(col._backfill):
            self._backfilled.setdefault(stream, set()).add(col)

    def add_join(self, key: int, streams: tuple[str, ...]) -> JoinColumn:
        """A new empty pair column for a two-source query. O(1)."""
        col = JoinColumn()
        self._joins[key] = (streams, col)
        return col

    def drop_join(self, key: int) -> None:
        """Free the pair column under ``key`` if there is one. O(1)."""
        self._joins.pop(key, None)

    def drop_selection(self, key: int) -> None:
        """Free the selection column under ``key``. O(its dense blocks)."""
        for group in self._groups.values():
            col = group.pop(key, None)
            if col is not None:
                for cols in (*self._backfilled.values(), *self._dense_cols.values()):
                    cols.discard(col)
                col.release()
                self.modes.set(key, False)
                self.selections.set(key, False)
                return

    def reset_stream(self, stream: str) -> None:
        """Forget every result over ``stream`` (its contents are being replaced).

        The stream's selection columns must have been dropped first; its shared log,
        block registry and layout state go. O(1)."""
        assert not self._groups.get(stream), "drop the stream's columns first"
        for state in (
            self._groups,
            self._logs,
            self._registry,
            self._expired_below,
            self._backfilled,
            self._pending,
            self._dense_cols,
            self._cur_block,
        ):
            state.pop(stream, None)

    def selection(self, key: int, stream: str) -> SelectionColumn:
        return self._groups[stream][key]

    def join(self, key: int) -> JoinColumn:
        return self._joins[key][1]

    def mark(self, stream: str, first: int, dense, offsets, entries) -> int:
        """Mark a probe's matches of ``stream``'s rows starting at seq ``first``.

        ``dense`` is a list of (keys, booleans keys x n); ``offsets``/``entries`` are
        sparse (row offset, key) pairs; keys without a selection column (join sides)
        are skipped. Returns the number of matches marked. O(n x dense keys / 8 +
        pairs) in C, plus O(1) Python steps per column in dense mode that matched.
        """
        B = self.block_rows
        n = dense[0][1].shape[1] if dense else (int(offsets.max()) + 1 if len(offsets) else 0)
        if n and first // B != (first + n - 1) // B:
            # Mark each block's part on its own, so that the log only ever appends to
            # its open block.
            marked = 0
            cut = (first // B + 1) * B - first
            while cut - B < n:
                a, z = max(cut - B, 0), min(cut, n)
                sel = (offsets >= a) & (offsets < z)
                marked += self.mark(
                    stream,
                    first + a,
                    [(k, m[:, a:z]) for k, m in dense],
                    offsets[sel] - a,
                    entries[sel],
                )
                cut += B
            return marked
        self._enter_block(stream, first // B)
        group = self._groups.get(stream, {})
        marked = 0
        log_keys: list[np.ndarray] = []
        log_seqs: list[np.ndarray] = []
        for keys, mat in dense:
            rows = np.flatnonzero(mat.any(axis=1))
            if not len(rows):
                continue
            keys = keys[rows]
            known = self.selections.lookup(keys)
            is_dense = self.modes.lookup(keys) & known
            dense_rows = rows[is_dense]
            if len(dense_rows):
                # One packbits for the group, one bitarray holding all its rows; then
                # one C-level slice copy per column: no Python work per match.
                sub = mat[dense_rows]
                marked += int(np.count_nonzero(sub))
                n_bits = sub.shape[1]
                packed = np.packbits(sub, axis=1)
                stride = 8 * packed.shape[1]
                src = bitarray()
                src.frombytes(packed.tobytes())
                k = first // B
                lo = first - k * B
                at = 0
                for key in keys[is_dense].tolist():
                    group[key].block_bitmap(k)[lo : lo + n_bits] = src[at : at + n_bits]
                    at += stride
            sparse = ~is_dense & known
            if sparse.any():
                r, offs = np.nonzero(mat[rows[sparse]])
                log_keys.append(keys[sparse][r])
                log_seqs.append(offs + first)
                self._measure(stream, keys[sparse], np.bincount(r, minlength=int(sparse.sum())))
        if len(entries):
            known = self.selections.lookup(entries)
            if not known.all():
                offsets, entries = offsets[known], entries[known]
            is_dense = self.modes.lookup(entries)
            # Sparse pairs are measured when their block seals (on_seal): counting them
            # per batch would cost a sort of every batch's pairs.
            if not is_dense.any():
                log_keys.append(entries)
                log_seqs.append(offsets + first)
            else:
                log_keys.append(entries[~is_dense])
                log_seqs.append(offsets[~is_dense] + first)
                de, do = entries[is_dense], offsets[is_dense] + first
                order = np.lexsort((do, de))
                de, do = de[order], do[order]
                cuts = np.flatnonzero(np.diff(de)) + 1
                for a, z in zip([0, *cuts.tolist()], [*cuts.tolist(), len(de)], strict=True):
                    group[int(de[a])].mark_seqs(do[a:z])
                marked += len(de)
        if log_keys:
            keys = log_keys[0] if len(log_keys) == 1 else np.concatenate(log_keys)
            seqs = log_seqs[0] if len(log_seqs) == 1 else np.concatenate(log_seqs)
            self._log(stream).append(keys, seqs)
            marked += len(keys)
        return marked

    def _measure(self, stream: str, keys: np.ndarray, counts: np.ndarray) -> None:
        """Columns with more matches in one batch than a sparse block holds go dense
        from the next block on. O(len(keys)) in C."""
        over = counts > self._threshold
        if over.any():
            self._pending.setdefault(stream, set()).update(keys[over].tolist())

    def _enter_block(self, stream: str, k: int) -> None:
        """Apply layout changes when marking moves on to block ``k``.

        Dense columns whose finished block held B/64 matches or fewer go back to the
        log; columns measured dense go to bitmaps. O(dense columns) once per block.
        """
        cur = self._cur_block.get(stream)
        if cur == k:
            return
        self._cur_block[stream] = k
        dense = self._dense_cols.setdefault(stream, set())
        for col in [
            c
            for c in dense
            if c._blocks.get(cur) is None or c._blocks[cur].count(1) <= self._threshold
        ]:
            col.dense = False
            dense.discard(col)
        pending = self._pending.get(stream)
        if pending:
            group = self._groups.get(stream, {})
            for key in pending:
                col = group.get(key)
                if col is not None:
                    col.dense = True
                    dense.add(col)
            pending.clear()

    def expire(self, stream: str, seq: int) -> None:
        """Drop the blocks of ``stream``'s columns wholly older than ``seq``.

        O(1) when no block boundary was passed since the last call, else O(blocks
        dropped): the log drops whole blocks and a registry maps each dense block to
        the columns holding it.
        """
        limit = seq // self.block_rows
        done = self._expired_below.get(stream, 0)
        if limit <= done:
            return
        self._expired_below[stream] = limit
        log = self._logs.get(stream)
        if log is not None:
            log.drop_below(limit)
        backfilled = self._backfilled.get(stream)
        if backfilled:
            for col in [c for c in backfilled if not c.trim_backfill(limit * self.block_rows)]:
                backfilled.discard(col)
        registry = self._registry.get(stream)
        if not registry:
            return
        ks = (
            [k for k in registry if k < limit]
            if limit - done > len(registry)
            else range(done, limit)
        )
        for k in ks:
            for col in registry.pop(k, ()):
                col.drop_block(k)

    def stats(self) -> dict[str, int]:
        """Counts of columns, dense blocks and logged sparse matches. O(columns)."""
        return {
            "selection_columns": sum(len(g) for g in self._groups.values()),
            "join_columns": len(self._joins),
            "dense_blocks": sum(len(c) for r in self._registry.values() for c in r.values()),
            "sparse_matches": sum(len(log) for log in self._logs.values()),
            "join_pairs": sum(len(c) for _, c in self._joins.values()),
        }

    def _check(self) -> None:
        """Verify columns, logs and the dense-block registry agree (for tests)."""
        for stream, group in self._groups.items():
            registry = self._registry.get(stream, {})
            for col in group.values():
                col._check()
                for k in col._blocks:
                    assert col in registry.get(k, ()), "dense block missing from the registry"
            for k, cols in registry.items():
                assert cols, "empty registry entry"
                for col in cols:
                    assert k in col._blocks, "registry names a block the column lacks"
            if stream in self._logs:
                self._logs[stream]._check()
        self.kept._check()
