"""psoup bench durability measures what it says: a checkpoint after a
few registrations links the query pages no query joined and writes less than the same
image written with nothing to link, and the commit part times both kinds of segment."""

from __future__ import annotations

from psoup.bench.durability_bench import SEGMENT_KINDS, checkpoint_by_queries, commit_latency
from psoup.storage import checkpoint


def test_a_checkpoint_after_a_few_registrations_links_the_full_pages() -> None:
    # 5,000 queries fill page 0 (ids 0-4095) and part of page 1; the 500 new ones join
    # page 1 only, so page 0 is linked and page 1 written again.
    sec = checkpoint_by_queries([5_000], 500, rounds=1)
    ((n, paged_written, paged_linked, _, whole_written, _, _),) = sec.rows
    assert n == 5_000
    assert paged_linked > 0
    assert paged_written < whole_written
    assert checkpoint.QUERY_PAGE_QIDS == 4096  # what the comment above counts on


def test_the_commit_part_measures_both_segment_kinds() -> None:
    sec = commit_latency([1_000], 40, rounds=1, segment_bytes=32_000)
    assert [(r[0], r[1]) for r in sec.rows] == [(1_000, k) for k in SEGMENT_KINDS]
    for _, _, p50, p90, p99, top, mean, writes in sec.rows:
        assert 0 < p50 <= p90 <= p99 <= top and 0 < mean <= top and writes >= 0
