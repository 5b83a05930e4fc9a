"""The sharded engine (docs/SCALE_OUT.md): a front-end over N engine shards.

``psoup/shard/partition.py`` says where tuples and queries go, ``shard.py`` is one
shard, ``channel.py`` the front-end's ordered, resent-on-crash line to it,
``front.py`` the engine API over the shards, and ``cluster.py`` runs the shards as
Ray actors. ``local`` builds the same thing with the shards in this process.
"""

from __future__ import annotations

from pathlib import Path

from psoup.shard.channel import Channel, LocalTransport
from psoup.shard.front import ShardedEngine
from psoup.shard.shard import Shard


def local(n: int, strategy: str = "psoup-p", data_dir: str | Path | None = None,
          sync: str = "batch", **engine_options) -> ShardedEngine:  # fmt: skip
    """A sharded engine whose ``n`` shards run in this process (each in
    ``data_dir/shard-K`` when given; the front-end's own catalog and log are the
    caller's to attach, as ``psoup serve`` does)."""
    channels = []
    for k in range(n):
        where = None if data_dir is None else str(Path(data_dir) / f"shard-{k}")
        shard = Shard(k, where, sync, strategy, **engine_options)
        channels.append(Channel(k, LocalTransport(shard)))
    return ShardedEngine(channels, strategy=strategy)
