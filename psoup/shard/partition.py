"""Where a sharded server keeps a stream's tuples and runs a query (docs/SCALE_OUT.md).

A stream created with ``partition_by`` is spread over every shard by its attribute's
value: an int ``v`` goes to shard ``v mod N``, a str to ``crc32(utf-8) mod N``, so Linear
Road's expressways 0..N-1 land one per shard. Any other stream lives whole on its home
shard, ``crc32(name) mod N``. A query runs on the shards that hold what it reads:

* a selection over a partitioned stream whose predicate fixes the partition attribute
  (``=``, ``IN``, a parameter) on the shards of those values, any other on all shards;
* a selection over an unpartitioned stream on its home shard;
* a join of two streams partitioned by the attributes it equates (``r.p = s.q``) on
  every shard (or those its predicate fixes); a join of two unpartitioned streams with
  the same home shard there. Any other join could pair tuples kept on different shards,
  so it is refused with ``UnsupportedQueryError`` saying what to change.

Nothing here knows Ray or gRPC.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import numpy as np

from psoup.errors import UnsupportedQueryError
from psoup.plan import Plan
from stems.predicates import AttrConstraint


def shard_of(value: object, n: int) -> int:
    """The shard of one partition value. O(len(value)) for a str, else O(1)."""
    if isinstance(value, str):
        return zlib.crc32(value.encode()) % n
    return int(value) % n


def home_of(stream: str, n: int) -> int:
    """The shard an unpartitioned stream lives on. O(len(stream))."""
    return zlib.crc32(stream.encode()) % n


def split(column: np.ndarray, n: int) -> list[np.ndarray]:
    """Row numbers of a batch per shard, ascending, by its partition column's values.
    O(rows) in numpy for int columns, one crc32 per row for str."""
    if column.dtype.kind in "iu":
        owner = np.mod(column, n)
    else:
        owner = np.fromiter((shard_of(v, n) for v in column.tolist()), np.int64, len(column))
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(n + 1))
    return [order[bounds[k] : bounds[k + 1]] for k in range(n)]


def _fixed(c: AttrConstraint | None) -> frozenset | None:
    """The values a constraint allows, when it allows a finite few (else None)."""
    if c is None:
        return None
    if c.points is not None:
        return frozenset(c.points - c.excluded)
    if c.lo is not None and c.lo == c.hi and c.lo_incl and c.hi_incl:
        return frozenset() if c.lo in c.excluded else frozenset([c.lo])
    return None


def stream_shards(partition_by: str | None, stream: str, n: int) -> list[int]:
    """The shards holding a stream's tuples."""
    return list(range(n)) if partition_by is not None else [home_of(stream, n)]


def placement(plan: Plan, partition_by: Mapping[str, str | None], n: int) -> list[int]:
    """The shards query ``plan`` runs on (ascending), given each stream's partition
    attribute (None: unpartitioned). Raises UnsupportedQueryError for a join whose pairs
    could span shards. O(factors)."""
    streams = plan.streams
    parts = [partition_by.get(s) for s in streams]
    if not plan.is_join:
        if parts[0] is None:
            return [home_of(streams[0], n)]
        fixed = _fixed(plan.local[0].constraint(parts[0]))
        if fixed is None:
            return list(range(n))
        return sorted({shard_of(v, n) for v in fixed}) or [0]
    if parts[0] is None and parts[1] is None:
        homes = {home_of(s, n) for s in streams}
        if len(homes) == 1:
            return sorted(homes)
        raise UnsupportedQueryError(
            f"streams {streams[0]!r} and {streams[1]!r} live on different shards, so "
            "this join could miss pairs: create both with --partition-by on the join "
            "attribute and join on it with '='"
        )
    if parts[0] is None or parts[1] is None:
        lone = streams[0] if parts[0] is None else streams[1]
        raise UnsupportedQueryError(
            f"stream {lone!r} is not partitioned but the other side of the join is, so "
            "pairs could span shards: partition both by the join attribute"
        )
    on_keys = any(
        j.op == "=" and not j.offset
        and {(j.left.source, j.left.attr), (j.right.source, j.right.attr)}
        == {(0, parts[0]), (1, parts[1])}
        for j in plan.joins
    )  # fmt: skip
    if not on_keys:
        aliases = [src.alias for src in plan.spec.sources]
        raise UnsupportedQueryError(
            f"a join of partitioned streams runs inside each shard only when it equates "
            f"their partition attributes: add {aliases[0]}.{parts[0]} = "
            f"{aliases[1]}.{parts[1]} (or partition them by the attributes it joins on)"
        )
    fixed = [_fixed(plan.local[i].constraint(parts[i])) for i in (0, 1)]
    known = [f for f in fixed if f is not None]
    if not known:
        return list(range(n))
    allowed = set.intersection(*({shard_of(v, n) for v in f} for f in known))
    return sorted(allowed) or [0]
