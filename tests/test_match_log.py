"""The match log against brute force: every key's pairs per block, the blocks a key's
presence mask names, and ``_check()`` after every step, over random appends, expiry and
forgotten keys (more than 64 blocks, so both the mask's reads and its fallback run)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from results.match_log import MatchLog

B = 4


@st.composite
def programs(draw: st.DrawFn) -> list[tuple]:
    steps = []
    for _ in range(draw(st.integers(1, 120))):
        kind = draw(st.sampled_from(["append", "append", "append", "drop", "forget", "late"]))
        if kind == "late":  # a pair into a block before the open one (a sealed block's merge)
            steps.append(("late", (draw(st.integers(0, 9)), draw(st.integers(0, B - 1)))))
        elif kind == "append":
            rows = draw(st.integers(1, 3 * B))
            keys = draw(st.lists(st.integers(0, 9), min_size=rows, max_size=rows))
            steps.append(("append", keys))
        elif kind == "drop":
            steps.append(("drop", draw(st.integers(0, 40))))
        else:
            steps.append(("forget", draw(st.integers(1, 9))))  # key 0 lives on
    return steps


@settings(max_examples=150, deadline=None)
@given(programs())
def test_match_log_matches_brute_force(steps: list[tuple]) -> None:
    """Also each key's ``SelectionColumn`` (all its blocks in the log), read after every
    step: its copy of the sealed pairs must follow appends, merges and expiry."""
    from results.columns import Modes, SelectionColumn

    log = MatchLog(B)
    modes = Modes()
    cols = [SelectionColumn(key, B, log, {}, modes) for key in range(10)]
    pairs: set[tuple[int, int]] = set()  # (key, seq) still held
    dead: set[int] = set()
    end = 0
    below = 0
    for kind, arg in steps:
        if kind == "append":
            arg = [0 if k in dead else k for k in arg]  # a forgotten key never comes back
            seqs = np.arange(end, end + len(arg), dtype=np.int64)
            log.append(np.array(arg, dtype=np.int64), seqs)
            pairs |= set(zip(arg, seqs.tolist(), strict=True))
            end += len(arg)
        elif kind == "late":
            key, off = arg
            k = log.open_block - 1
            seq = k * B + off
            if k < below or key in dead or (key, seq) in pairs:
                continue
            log.append(np.array([key], dtype=np.int64), np.array([seq], dtype=np.int64))
            pairs.add((key, seq))
        elif kind == "drop":
            below = max(below, min(arg, end // B))
            log.drop_below(below)
            pairs = {(k, s) for k, s in pairs if s // B >= below}
        else:
            log.forget(arg)
            dead.add(arg)
            pairs = {(k, s) for k, s in pairs if k != arg}
        log._check()
        last = max(log.open_block, 0)
        for key in range(10):
            if key in dead:
                continue
            want = sorted(s for k, s in pairs if k == key)
            got = [
                s for k in range(0, last + 1) for s in log.rows(key, k, k * B, (k + 1) * B).tolist()
            ]
            assert got == want, (key, got, want)
            for s0, s1 in ((below * B, end), (below * B + 1, end - 1), (end // 2, end)):
                got = cols[key].rows(max(s0, below * B), s1).tolist()
                assert got == [s for s in want if max(s0, below * B) <= s < s1], (key, s0, s1)
            cols[key]._check()
            # rows_in over any blocks and any seq range: their rows, clipped, joined.
            s0, s1 = below * B + 1, end - 1
            ks = sorted({*range(below, last + 1, 2), last})
            parts = log.rows_in(key, ks, s0, s1)
            assert all(len(p) for p in parts)
            joined = [s for p in parts for s in p.tolist()]
            assert joined == [s for s in want if s // B in ks and s0 <= s < s1], (key, ks)
            for k0, k1 in ((0, last), (last // 2, last), (below, below + 3)):
                named = log.sealed_blocks_of(key, k0, k1)
                if named is None:
                    continue
                holding = {s // B for s in want if k0 <= s // B <= k1 and s // B != log.open_block}
                assert holding <= set(named), (key, k0, k1, named, holding)
                assert named == sorted(named)


def test_a_column_reads_the_logs_open_block_before_its_dense_ones() -> None:
    """A column whose newest log pairs sit in the log's open block and whose later blocks
    went dense: a read over all of them takes the open block too, in order."""
    from results.columns import Modes, SelectionColumn

    log = MatchLog(B)
    col = SelectionColumn(1, B, log, {}, Modes())
    other = SelectionColumn(2, B, log, {}, Modes())
    other.mark_seqs(np.array([1, 2 * B], dtype=np.int64))  # seals block 0 in the log
    col.mark_seqs(np.array([5 * B + 1], dtype=np.int64))  # the log's open block is 5
    col.dense = True
    col.mark_seqs(np.array([6 * B + 2, 7 * B + 3], dtype=np.int64))
    want = [5 * B + 1, 6 * B + 2, 7 * B + 3]
    assert col.rows(0, 8 * B).tolist() == want
    assert col.count(0, 8 * B) == 3


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([1, 3, 4, 4096, 5000]),
    st.integers(0, 50),
    st.lists(st.integers(0, 2**40), min_size=0, max_size=60),
    st.data(),
)
def test_a_blocks_pairs_sort_by_key_then_seq(block_rows, k, keys, data) -> None:
    """Sealing sorts (key, seq) packed into one integer: 32-bit while the keys fit above
    the offset's bits, else 64-bit; both give what sorting the pairs gives."""
    from results.match_log import _sorted_pairs

    base = k * block_rows
    offs = data.draw(st.lists(st.integers(0, block_rows - 1), min_size=len(keys),
                              max_size=len(keys)))  # fmt: skip
    if keys and data.draw(st.booleans()):  # small keys: the 32-bit path
        keys = [x % 1000 for x in keys]
    ks = np.array(keys, dtype=np.int64)
    ss = np.array(offs, dtype=np.int64) + base
    got_k, got_s = _sorted_pairs(ks, ss, base, block_rows)
    want = sorted(zip(keys, (ss.tolist()), strict=True))
    assert got_k.dtype == got_s.dtype == np.int64
    assert list(zip(got_k.tolist(), got_s.tolist(), strict=True)) == want


def test_a_columns_read_visits_only_its_windows_blocks() -> None:
    """A column read once, then again after many blocks were sealed, with a short window:
    the log is asked for the window's blocks only (its kept copy is not brought up to
    date outside the window), with the masks able to tell (span <= 64) and not."""
    from results.columns import Modes, SelectionColumn

    for blocks in (40, 200):
        log = MatchLog(B)
        col = SelectionColumn(1, B, log, {}, Modes())
        asked: list[int] = []
        read = log.rows_in

        def spy(key, ks, s, e, read=read, asked=asked):
            asked.extend(ks)
            return read(key, ks, s, e)

        log.rows_in = spy
        col.mark_seqs(np.array([0, 1], dtype=np.int64))
        col.mark_seqs(np.array([B], dtype=np.int64))  # seals block 0
        assert col.rows(0, 2 * B).tolist() == [0, 1, B]
        for k in range(2, blocks):
            col.mark_seqs(np.array([k * B + 1], dtype=np.int64))
        asked.clear()
        s = (blocks - 3) * B
        assert col.rows(s, blocks * B).tolist() == [k * B + 1 for k in range(blocks - 3, blocks)]
        assert asked and min(asked) >= blocks - 3, (blocks, sorted(set(asked))[:5])
        col._check()


def test_past_64_blocks_a_read_visits_the_blocks_its_keys_filter_names() -> None:
    """Sealed blocks spanning more than 64 numbers: the presence masks cannot tell, and a
    column's read asks the log only for the blocks whose filter holds its key (those
    with its pairs, and those of a key with the same filter bit), not one per block."""
    from results.columns import Modes, SelectionColumn
    from results.match_log import _FILTER_BITS

    log = MatchLog(B)
    mine, twin, other = 7, 7 + _FILTER_BITS, 8  # twin: the same filter bit as mine
    col = SelectionColumn(mine, B, log, {}, Modes())
    asked: list[int] = []
    read = log.rows_in

    def spy(key, ks, s, e):
        if key == mine:
            asked.extend(ks)
        return read(key, ks, s, e)

    log.rows_in = spy
    holding, twins = {3, 90, 150}, {40, 120}
    for k in range(200):
        key = mine if k in holding else twin if k in twins else other
        log.append(np.array([key, other], dtype=np.int64), np.array([k * B, k * B + 1]))
    log.append(np.array([other], dtype=np.int64), np.array([200 * B]))  # seals block 199
    assert log.sealed_blocks_of(mine, 0, 199) is None  # the masks cannot tell
    assert log.sealed_blocks_holding(mine, 0, 199) == sorted(holding | twins)
    assert log.sealed_blocks_holding(mine, 4, 149) == [40, 90, 120]
    assert col.rows(0, 200 * B).tolist() == [k * B for k in sorted(holding)]
    assert sorted(set(asked)) == sorted(holding | twins)
    log.drop_below(100)
    assert log.sealed_blocks_holding(mine, 0, 199) == [120, 150]
    log._check()


def test_a_columns_read_reads_only_the_rows_stored_since_its_last() -> None:
    """A column read, read again with no new row, then again after more rows (sparse
    first, then dense): the second read reads nothing, the third only the new rows, and
    each answer is the brute-force one."""
    from results.columns import Modes, SelectionColumn

    bb = 16  # a multiple of 8, so dense blocks join
    read_ranges: list[tuple[int, int]] = []

    class Spied(SelectionColumn):
        def _read(self, s: int, e: int) -> np.ndarray:
            read_ranges.append((s, e))
            return super()._read(s, e)

    log = MatchLog(bb)
    col = Spied(1, bb, log, {}, Modes())
    rng = np.random.default_rng(3)
    marked: list[int] = []
    end = 0

    def store(rows: int, dense: bool) -> None:
        nonlocal end
        col.dense = dense
        seqs = np.flatnonzero(rng.random(rows) < 0.4) + end
        col.mark_seqs(seqs.astype(np.int64))
        marked.extend(seqs.tolist())
        end += rows

    def window(s: int) -> list[int]:
        return [q for q in marked if s <= q < end]

    store(3 * bb + 5, dense=False)
    assert col.rows(4, end).tolist() == window(4)
    assert read_ranges == [(4, end)]
    assert col.rows(4, end).tolist() == window(4)
    assert read_ranges == [(4, end)], "a read with no new row read again"
    before = end
    store(2 * bb - 5, dense=False)  # the rest of the open block, then a new one
    store(2 * bb, dense=True)  # (a column changes layout only between blocks)
    assert col.rows(bb, end).tolist() == window(bb)
    assert read_ranges[1:] == [(before, end)], "a read read more than the rows stored since"
    col._check()


def test_the_least_recently_read_copy_goes_first_past_the_budget() -> None:
    """Two dense columns under a budget that holds one copy: reading the second drops
    the first's copy, whose next read reads its window anew and answers the same."""
    from results.columns import KeptCopies, Modes, SelectionColumn

    bb = 64
    log = MatchLog(bb)
    modes = Modes()
    copies = KeptCopies(budget_bytes=8 * 150, small=0)
    cols = [SelectionColumn(k, bb, log, {}, modes, copies) for k in (1, 2)]
    for col in cols:
        col.dense = True
        col.mark_seqs(np.arange(0, 4 * bb, 2, dtype=np.int64))  # 128 seqs, 1,024 bytes
    want = list(range(0, 4 * bb, 2))
    assert cols[0].rows(0, 4 * bb).tolist() == want
    assert cols[0]._cache is not None and copies.nbytes == 1024
    assert cols[1].rows(0, 4 * bb).tolist() == want
    assert cols[0]._cache is None and copies.nbytes == 1024, "the older copy stayed"
    assert cols[0].rows(bb, 4 * bb).tolist() == want[bb // 2 :]
    assert cols[1]._cache is None
    copies._check()


def test_a_columns_copy_holds_no_view_of_the_logs_blocks() -> None:
    """A copy read from one sealed log block is an array of its own: a view would keep
    the block's pairs alive after the log drops it."""
    from results.columns import Modes, SelectionColumn

    log = MatchLog(B)
    col = SelectionColumn(1, B, log, {}, Modes())
    col.mark_seqs(np.array([0, 2], dtype=np.int64))
    col.mark_seqs(np.array([B + 1], dtype=np.int64))  # seals block 0
    assert col.rows(0, B).tolist() == [0, 2]
    kept = col._cache[3]
    assert not np.shares_memory(kept, log._sealed[0][1])
    log.drop_below(1)
    assert col.rows(B, 2 * B).tolist() == [B + 1]
