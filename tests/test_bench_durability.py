"""psoup bench durability's checkpoint part measures what it says: a checkpoint after a
few registrations links the query pages no query joined and writes less than the same
image written with nothing to link."""

from __future__ import annotations

from psoup.bench.durability_bench import checkpoint_by_queries
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
