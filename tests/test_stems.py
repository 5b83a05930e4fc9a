"""The SteMs' indexes against brute force, with their ``_check()`` invariants after each step.

Small value domains and tiny blocks make collisions, block boundaries and expiry common.
"""

from __future__ import annotations

import random
import weakref

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from psoup.values import Schema
from stems import data_stem
from stems.data_stem import DataSteM
from stems.point_index import PointIndex, _Compiled
from stems.predicates import LocalPredicate, build_constraint
from stems.range_index import RangeIndex

OPS = ("<", "<=", "=", ">=", ">", "!=")
factor = st.tuples(st.sampled_from(OPS), st.integers(-2, 8))
point_sets = st.frozensets(st.integers(-3, 12), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 12), point_sets), max_size=30),
    st.lists(st.integers(-4, 14), max_size=40),
    st.sampled_from(("int64", "float64")),
    st.sampled_from((0, 1, 3, None)),
)
def test_point_index_matches_brute_force(ops, values, dtype, limit) -> None:
    """Probes equal brute force through every state of the levels: main, recent, dead,
    and the main level absorbing the others (forced often with a small ``limit``)."""
    idx = PointIndex(np.dtype(dtype))
    if limit is not None:
        idx._limit = lambda: limit
    live: dict[int, frozenset] = {}
    for add, entry, points in ops:
        if add and entry not in live:
            idx.add(entry, points)
            live[entry] = points
        elif not add and entry in live:
            idx.remove(entry, live.pop(entry))
        arr = np.array(values, dtype=dtype)
        offs, ents = idx.probe(arr)
        got = sorted(zip(offs.tolist(), ents.tolist(), strict=True))
        want = sorted((i, e) for i, v in enumerate(values) for e, ps in live.items() if v in ps)
        assert got == want
        idx._check()


pair_lists = st.lists(
    st.tuples(st.one_of(st.integers(-5, 5), st.integers(-(2**62), 2**62)), st.integers(0, 9)),
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(pair_lists, pair_lists, st.sampled_from(("int64", "float64")))
def test_merging_two_sorted_levels_equals_sorting_their_pairs(a, b, dtype) -> None:
    """``_Compiled.merged`` (the main level absorbing the recent one) gives the level
    of all the pairs, a pair in both once, packed or not (huge keys overflow the
    packing and take the sorting path)."""
    if dtype == "float64":
        a, b = [(k % 7, e) for k, e in a], [(k % 7, e) for k, e in b]

    def arrays(pairs):
        pairs = sorted(set(pairs))
        return (np.array([k for k, _ in pairs], dtype=dtype),
                np.array([e for _, e in pairs], dtype=np.int64))  # fmt: skip

    level = _Compiled.merged(arrays(a), arrays(b), np.dtype(dtype))
    keys, ents = level.pairs()
    assert list(zip(keys.tolist(), ents.tolist(), strict=True)) == sorted(set(a) | set(b))


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.integers(-50, 50), st.sets(st.integers(0, 40), min_size=1, max_size=4)),
    st.sampled_from(("int64", "float64")),
)
def test_a_compiled_level_is_the_sorted_csr_of_its_map(items, dtype) -> None:
    level = _Compiled(items, np.dtype(dtype))
    keys = sorted(items)
    assert level.keys.tolist() == keys
    assert level.starts.tolist() == [0, *np.cumsum([len(items[k]) for k in keys]).tolist()]
    assert level.flat.tolist() == [e for k in keys for e in sorted(items[k])]
    assert level.unique == all(len(v) == 1 for v in items.values())


def test_point_index_on_strings() -> None:
    idx = PointIndex(np.dtype(object))
    idx.add(1, {"a", "b"})
    idx.add(2, {"b"})
    offs, ents = idx.probe(np.array(["b", "c", "a"], dtype=object))
    assert sorted(zip(offs.tolist(), ents.tolist(), strict=True)) == [(0, 1), (0, 2), (2, 1)]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 15), st.lists(factor, min_size=1, max_size=3)),
        max_size=25,
    ),
    st.lists(st.integers(-4, 10), max_size=30),
    st.sampled_from((0, 1 << 10, 64 << 20)),
)
def test_range_index_matches_brute_force(ops, values, budget) -> None:
    """Every layout (budget 0 forces the direct comparison) gives the same pairs."""
    idx = RangeIndex(np.dtype("int64"), budget)
    live = {}
    for add, entry, factors in ops:
        c = build_constraint("a", "int", [f for f in factors if f[0] != "="])
        if c.points is not None or c.empty or not c.bounded:
            continue  # the range index holds bounded intervals only
        c = type(c)("a", None, c.lo, c.lo_incl, c.hi, c.hi_incl)  # exclusions are residual
        if add and entry not in live:
            idx.add(entry, c)
            live[entry] = c
        elif not add and entry in live:
            idx.remove(entry)
            del live[entry]
        idx._check()
    arr = np.array(values, dtype=np.int64)
    res = idx.probe(arr)
    got: set = set()
    if res is not None and res[0] == "dense":
        _, ents, mat = res
        got = {(i, int(ents[j])) for j in range(len(ents)) for i in np.flatnonzero(mat[j]).tolist()}
    elif res is not None:
        got = set(zip(res[1].tolist(), res[2].tolist(), strict=True))
    want = {(i, e) for i, v in enumerate(values) for e, c in live.items() if c.contains(v)}
    assert got == want


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6)), min_size=1, max_size=9),
        max_size=8,
    ),
    st.lists(factor, max_size=3),
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(-2, 30)), max_size=2),
    st.integers(1, 4),
    st.integers(0, 6),
    st.integers(1, 3),
    st.sampled_from((1, 2, 5, data_stem._RESIDUAL_ROWS)),
    st.integers(0, 2),
    st.sampled_from((1, 2, 4)),
)
def test_data_stem_probe_and_expiry_match_brute_force(
    batches, factors, time_factors, block_rows, keep, segment_blocks, residual_rows,
    segment_builds, run_segments,
) -> None:  # fmt: skip
    """probe() over [s, e) equals filtering the retained rows, through index runs of one
    or many segments, block indexes and scans alike (segments left unindexed when a
    probe's budget of builds is spent), narrowed first by the factors on the time
    attribute, its candidates tested a few or all at once; expiry drops whole blocks
    and the runs that no longer cover any."""
    saved = data_stem._RESIDUAL_ROWS, data_stem._SEGMENT_BUILDS, data_stem._RUN_SEGMENTS
    data_stem._RESIDUAL_ROWS, data_stem._SEGMENT_BUILDS = residual_rows, segment_builds
    data_stem._RUN_SEGMENTS = run_segments
    try:
        _probe_and_expiry(batches, factors, time_factors, block_rows, keep, segment_blocks)
    finally:
        data_stem._RESIDUAL_ROWS, data_stem._SEGMENT_BUILDS, data_stem._RUN_SEGMENTS = saved


def test_an_equality_probe_cut_inside_an_index_run_keeps_only_its_span() -> None:
    """One value in every row, so each run's entries for it span the whole run: a probe
    whose span starts and ends inside runs must drop the entries on either side (the
    random test above reaches such cuts rarely)."""
    schema = Schema(("t", "a"), ("int", "int"), "t")
    stem = DataSteM(schema, block_rows=2, segment_blocks=2)
    n = 21
    stem.append([np.arange(n, dtype=np.int64), np.ones(n, dtype=np.int64)],
                np.arange(n, dtype=np.int64))  # fmt: skip
    pred = LocalPredicate((build_constraint("a", "int", [("=", 1)]),))
    assert stem.probe(pred, 0, n).tolist() == list(range(n))  # builds and merges runs
    for s in range(n):
        for e in range(s, n + 1):
            assert stem.probe(pred, s, e).tolist() == list(range(s, e)), (s, e)
    stem._check()


def _probe_and_expiry(batches, factors, time_factors, block_rows, keep, segment_blocks) -> None:
    schema = Schema(("t", "a"), ("int", "int"), "t")
    stem = DataSteM(schema, block_rows=block_rows, segment_blocks=segment_blocks)
    rows: list[tuple[int, int]] = []
    t = 0
    pred = LocalPredicate(
        tuple(build_constraint(a, "int", fs) for a, fs in (("a", factors), ("t", time_factors))
              if fs)
    )  # fmt: skip
    for batch in batches:
        ts = []
        for inc, _ in batch:
            t += inc
            ts.append(t)
        vals = [a for _, a in batch]
        tids = np.arange(len(rows), len(rows) + len(batch), dtype=np.int64)
        stem.append([np.array(ts, dtype=np.int64), np.array(vals, dtype=np.int64)], tids)
        rows += list(zip(ts, vals, strict=True))
        stem.expire(t - keep)
        stem._check()
        horizon = stem.first_seq_at_or_after(t - keep)
        # Blocks expire whole: everything visible is still stored.
        assert stem.start_seq <= horizon
        assert all(rows[i][0] < t - keep for i in range(stem.start_seq))
        assert all(rows[i][0] < t - keep for i in range(horizon))
        assert all(rows[i][0] >= t - keep for i in range(horizon, len(rows)))
        spans = [(horizon, stem.end_seq), (horizon, (horizon + stem.end_seq) // 2)]
        spans += [(stem.start_seq, stem.end_seq), ((horizon + stem.end_seq) // 2, stem.end_seq)]
        for s, e in spans:
            got = stem.probe(pred, s, e).tolist()
            want = [i for i in range(s, e) if pred.holds({"t": rows[i][0], "a": rows[i][1]})]
            assert got == want
            assert stem.gather("a", np.array(want, dtype=np.int64)).tolist() == [
                rows[i][1] for i in want
            ]
        stem._check()  # the indexes the probes built


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(0, 400),
    st.integers(0, 300),
    st.lists(st.sampled_from([None, 0, 1, 2, 3]), min_size=1, max_size=5)
    | st.sampled_from([[3, None], [0, 3, None]]),  # consecutive rows: one take's rows
    st.randoms(use_true_random=False),
    st.booleans(),
    st.booleans(),
)
def test_gather_matches_the_rows_across_blocks_and_chunks(
    block_rows, n, keep, cols, rnd, frozen, one_chunk
) -> None:
    """gather_at of any stored seqs, for any columns in any order (the 8-byte ones in
    the chunks' matrices, consecutive or not, strings per block, tuple ids) gives the
    rows' values, across block and chunk boundaries and after expiry; ``frozen``, each
    array read-only. ``one_chunk``: the seqs in one chunk (an invoke's usual window, which
    has a path of its own)."""
    schema = Schema(("t", "s", "x", "a"), ("int", "str", "float", "int"), "t")
    stem = DataSteM(schema, block_rows=block_rows)
    rows = [(i // 3, f"v{i}", i / 4, 7 * i - 100, 1000 + i) for i in range(n)]
    for a in range(0, n, 37):
        part = rows[a : a + 37]
        stem.append(
            [np.array([r[j] for r in part], dtype=d) for j, d in enumerate((np.int64, object,
             np.float64, np.int64))],
            np.array([r[4] for r in part], dtype=np.int64),
        )  # fmt: skip
    stem.expire(max(0, (n - keep) // 3))
    stem._check()
    stored = list(range(stem.start_seq, stem.end_seq))
    if one_chunk and stored:
        c = rnd.choice(stored) // stem.chunk_rows
        stored = [q for q in stored if q // stem.chunk_rows == c]
    seqs = sorted(rnd.sample(stored, rnd.randint(0, len(stored))))
    got = stem.gather_at(cols, np.array(seqs, dtype=np.int64), frozen=frozen)
    for c, arr in zip(cols, got, strict=True):
        assert arr.tolist() == [rows[q][4 if c is None else c] for q in seqs], (c, seqs)
        assert arr.flags.writeable is not frozen


def test_an_expired_chunk_is_reused_only_when_nothing_reads_it() -> None:
    """A chunk whose blocks all expired is reused for the next one, unless a view of its
    rows is still held (a result, a snapshot's parts): those rows never change."""
    schema = Schema(("t", "a"), ("int", "int"), "t")
    stem = DataSteM(schema, block_rows=4)
    chunk_rows = stem.chunk_rows

    def fill(first: int, n: int) -> None:
        ts = np.arange(first, first + n, dtype=np.int64)
        stem.append([ts, ts * 10], ts)

    fill(0, chunk_rows)
    first_chunk = stem._blocks[0].chunk
    held = stem.column("a", 0, 8)  # a view of the first chunk's rows
    want = held.tolist()
    fill(chunk_rows, 4)  # the second chunk begins
    stem.expire(chunk_rows)  # every block of the first chunk expires
    stem._check()
    fill(chunk_rows + 4, 2 * chunk_rows)  # the third chunk may not take the first's memory
    assert held.tolist() == want
    assert all(b.chunk is not first_chunk for b in stem._blocks)
    second = weakref.ref(stem._blocks[0].chunk)
    stem.expire(2 * chunk_rows)  # the second chunk's blocks expire, nothing holds them
    fill(3 * chunk_rows + 4, chunk_rows)  # the fourth chunk takes its memory
    stem._check()
    assert second() is not None and stem._blocks[-1].chunk is second()
    assert stem.gather("a", np.arange(stem.start_seq, stem.end_seq)).tolist() == [
        10 * t for t in range(stem.start_seq, stem.end_seq)
    ]


_copy_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 40)),
        st.tuples(st.just("expire"), st.integers(0, 30)),
        # columns (schema positions, the int ones; 3 of 4 or more take whole rows), a
        # chunk and the share of its stored rows to gather (or of every stored row,
        # across chunks: ``across``), and whether the result comes read-only
        st.tuples(
            st.just("gather"),
            st.sampled_from([[0, 1, 2, 3], [3, 2, 1], [1, 3, 0], [2, 0, 3, 1], [0, 1]]),
            st.integers(0, 1000),
            st.floats(0.0, 1.0),
            st.booleans(),
            st.booleans(),
        ),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 3), _copy_ops, st.randoms(use_true_random=False))
# every block of the copied chunk expires: the copy goes with them
@example(3, [("append", 36), ("gather", [0, 1, 2, 3], 0, 0.6, False, False), ("expire", 36)],
         random.Random(0))  # fmt: skip
def test_gathers_through_row_copies_match_the_rows(block_rows, ops, rnd) -> None:
    """A wide gather from the stream's newest chunks takes whole rows of their row-major
    copies (``_row_copy``), filled as rows are appended, dropped when a newer chunk
    begins or with their chunk (whose memory a later chunk may reuse); from older chunks
    it reads the column-major matrices. Across appends, expiry and gathers in one chunk
    or across chunks, in any order, it gives the rows' values, and ``_check`` finds each
    copy of a newest chunk, equal to it, and counted in the stem's bytes. The threshold
    is lowered so that the test's small streams take the copies' path."""
    saved = data_stem._ROW_COPY_MIN
    data_stem._ROW_COPY_MIN = 1
    try:
        schema = Schema(("t", "a", "b", "c"), ("int", "int", "int", "int"), "t")
        stem = DataSteM(schema, block_rows=block_rows)
        rows: list[tuple[int, int, int, int]] = []
        horizon = 0
        for op in ops:
            if op[0] == "append":
                new = [(len(rows) + i, 3 * (len(rows) + i), -(len(rows) + i), (len(rows) + i) % 7)
                       for i in range(op[1])]  # fmt: skip
                rows += new
                cols = [np.array([r[j] for r in new], dtype=np.int64) for j in range(4)]
                stem.append(cols, np.array([r[0] for r in new], dtype=np.int64))
            elif op[0] == "expire":
                horizon += op[1]
                stem.expire(horizon)
            else:
                _, cols, pick, share, frozen, across = op
                stored = list(range(stem.start_seq, stem.end_seq))
                if not stored:
                    continue
                c = stored[pick % len(stored)] // stem.chunk_rows
                mine = stored if across else [q for q in stored if q // stem.chunk_rows == c]
                seqs = sorted(rnd.sample(mine, max(1, int(share * len(mine)))))
                got = stem.gather_at(cols, np.array(seqs, dtype=np.int64), frozen=frozen)
                for j, arr in zip(cols, got, strict=True):
                    assert arr.tolist() == [rows[q][j] for q in seqs], (j, seqs)
                    assert arr.flags.writeable is not frozen
            stem._check()
    finally:
        data_stem._ROW_COPY_MIN = saved
