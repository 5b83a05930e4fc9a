"""Property tests: the sharded engine (2 and 3 shards) against the brute-force oracle.

The same random programs as tests/test_property.py run in lockstep on the oracle and on
sharded engines whose shards live in this process (``psoup.shard.local``; the Ray
transport is the same code path from the channel down, tests/test_shard_ray.py runs
it). Each stream is spread by an attribute hypothesis picks, or kept whole on its home
shard. A join the sharded engine cannot answer exactly must be refused with
UnsupportedQueryError, and only such a join; every other answer must equal the
oracle's, in the same order.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from strategies import Program, Register, programs
from test_property import Runner, _Engine, _settings, big_programs, py

import psoup.shard
from psoup.errors import QueryError, UnsupportedQueryError
from psoup.plan import Plan
from psoup.query import compile_query
from psoup.shard.partition import placement

SHARDS = (2, 3)
STRATEGIES = ("psoup-p", "nomat")


class _Partitioned:
    """A sharded engine whose create_stream adds the drawn partition attribute."""

    def __init__(self, db, partition_by: dict[str, str | None]):
        self._db = db
        self._partition_by = partition_by

    def create_stream(self, name, schema, **kw):
        return self._db.create_stream(name, schema, partition_by=self._partition_by[name], **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


class ShardedRunner(Runner):
    def __init__(
        self, program: Program, partition_by: dict[str, str | None], n: int, make=psoup.shard.local
    ):
        super().__init__(program, strategies=())
        self.partition_by = partition_by
        self.n = n
        self.engines = [
            _Engine(f"{s}, {n} shards", _Partitioned(
                make(n, s, block_rows=program.block_rows, segment_blocks=2), partition_by))
            for s in STRATEGIES
        ]  # fmt: skip
        self.script[1] = (
            f"db = psoup.shard.local({n}, STRATEGY, block_rows={program.block_rows}, "
            f"segment_blocks=2)  # partition_by {partition_by}"
        )

    def _refused(self, text: str, params: dict) -> bool:
        schemas = {s.name: _schema(s) for s in self.program.streams}
        try:
            plan = Plan(compile_query(text, params, schemas), schemas)
        except QueryError:
            return False  # refused for itself: Runner.register checks that
        try:
            placement(plan, self.partition_by, self.n)
        except UnsupportedQueryError:
            return True
        return False

    def register(self, step: Register, template: bool = False) -> None:
        q = step.query
        if not self._refused(q.text, q.params_dict):
            event("sharded register: placed")
            super().register(step, template)
            return
        event("sharded register: refused join")
        self.script.append(f"db.register({q.text!r})  # UnsupportedQueryError")
        self.oracle_handles.append(self.oracle.register(q.text, q.params_dict))
        for e in self.engines:
            with pytest.raises(UnsupportedQueryError):
                if template:
                    e.db.prepare(q.text).register(q.params_dict)
                else:
                    e.db.register(q.text, q.params_dict)
            e.handles.append("")


def _schema(s):
    from psoup.values import Schema

    return Schema(s.names, tuple(t for _, t in s.attrs), s.time)


@st.composite
def partitioned(draw: st.DrawFn, make=programs) -> tuple[Program, dict[str, str | None]]:
    program = draw(make())
    choice = {}
    for s in program.streams:
        keys = [n for n, t in s.attrs if t in ("int", "str")]
        choice[s.name] = draw(st.sampled_from([None, *keys]))
    return program, choice


@_settings(60)
@given(partitioned())
def test_sharded_engine_matches_oracle(case) -> None:
    """Random programs on 2 and 3 shards: every answer equals the oracle's."""
    program, partition_by = case
    event(f"partitioned streams: {sum(v is not None for v in partition_by.values())}")
    for n in SHARDS:
        ShardedRunner(program, partition_by, n).run()


@_settings(6, shrink=False)
@given(partitioned(big_programs))
def test_sharded_engine_matches_oracle_on_big_batches(case) -> None:
    """Hundreds of rows per batch spread over the shards, expiry and density changes."""
    program, partition_by = case
    for n in SHARDS:
        ShardedRunner(program, partition_by, n).run()


def test_the_script_header_names_the_partitioning() -> None:
    """A failure's script says how the streams were spread (it is part of the program)."""
    r = ShardedRunner(Program((), 4, ()), {}, 2)
    assert "partition_by {}" in r.script[1] and py(None) == "None"
