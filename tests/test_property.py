"""Property tests: the engine, under every strategy, against the brute-force oracle.

Hypothesis draws *programs* (``tests/strategies.py``): one or two small streams, an engine
block size of 2..8 rows, and a random interleaving of batch inserts (some that must be
rejected whole), registrations, invokes (with and without ``now=``) and unregistrations.
Each program runs in lockstep on ``tests/oracle.py`` and on one engine per strategy
(psoup-p, psoup-c, nomat); every step's outcome must agree: the same error class, or
the same columns and the same rows in the same order (floats compared with isclose).

A disagreement fails with the shrunk program written out as a runnable script against
the embedded API, with the oracle's and the engine's answers at the failing step.

``PSOUP_HYPOTHESIS_EXAMPLES=N`` sets the number of examples of every test here (the
defaults keep the file well under a minute on two cores); run with
``--hypothesis-show-statistics`` to see how often joins, aggregates, non-empty answers
and rejected batches came up.
"""

from __future__ import annotations

import math
import os
import random
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from oracle import Oracle, rows_equal
from strategies import (
    BadInsert,
    Insert,
    Invoke,
    InvokeAll,
    Program,
    Register,
    RegisterAgain,
    StreamDef,
    Unregister,
    concretize_insert,
    programs,
    queries,
    shifted,
)

import psoup
from psoup.errors import BatchError, QueryError, UnknownHandleError

STRATEGIES = ("psoup-p", "psoup-c", "nomat")


def examples(default: int) -> int:
    """``default``, or the PSOUP_HYPOTHESIS_EXAMPLES environment variable when set."""
    return int(os.environ.get("PSOUP_HYPOTHESIS_EXAMPLES", default))


def _settings(default_examples: int, shrink: bool = True) -> settings:
    phases = tuple(Phase) if shrink else tuple(p for p in Phase if p is not Phase.shrink)
    return settings(
        max_examples=examples(default_examples),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        phases=phases,
    )


# -- rendering a program as a script --------------------------------------------------------


def py(value: Any) -> str:
    """``repr`` that stays valid Python for the values a program holds (nan, inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    if isinstance(value, tuple):
        inner = ", ".join(py(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(py(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py(k)}: {py(v)}" for k, v in value.items()) + "}"
    return repr(value)


class Divergence(AssertionError):
    """The engine and the oracle disagree; the message is a reproduction script."""


@dataclass
class _Engine:
    strategy: str
    db: Any
    handles: list[str] = field(default_factory=list)
    last_id: int | None = None


@dataclass
class _Outcome:
    value: Any = None
    error: BaseException | None = None

    def describe(self) -> str:
        if self.error is None:
            return py(self.value)
        return f"{type(self.error).__name__}: {self.error}"


def _call(fn: Callable[[], Any]) -> _Outcome:
    try:
        return _Outcome(fn())
    except Exception as exc:  # the engine must not crash; a crash is a divergence
        exc.__traceback_text__ = traceback.format_exc()  # type: ignore[attr-defined]
        return _Outcome(error=exc)


class Runner:
    """Runs one program on the oracle and on an engine per strategy, in lockstep."""

    def __init__(self, program: Program, strategies: Sequence[str] = STRATEGIES):
        self.program = program
        self.oracle = Oracle()
        self.engines = [
            _Engine(s, psoup.connect(strategy=s, block_rows=program.block_rows, segment_blocks=2))
            for s in strategies
        ]
        self.oracle_handles: list[str] = []
        self.cases: list = []  # what each Register registered
        self.alive: list[int] = []
        self.dead: list[int] = []
        self.latest: list[int | float | None] = [None] * len(program.streams)
        self.script = [
            "import psoup",
            f"db = psoup.connect(strategy=STRATEGY, block_rows={program.block_rows}, "
            "segment_blocks=2)",
        ]
        if program.block_rows % 2:
            # Half the programs keep no column's copy of what it read past its next read
            # by another column: every read but the latest column's reads its window anew.
            for e in self.engines:
                kept = getattr(getattr(e.db.strategy, "results", None), "kept", None)
                if kept is not None:
                    kept.budget = kept.small = 0
            self.script.append("# results.kept.budget = results.kept.small = 0 (PSoup-P)")

    # -- reporting ----------------------------------------------------------------------

    def fail(self, what: str, expected: str, bad: list[tuple[str, _Outcome]]) -> None:
        lines = [f"engine disagrees with the oracle on {what}", "", *self.script, ""]
        lines.append(f"oracle: {expected}")
        for strategy, got in bad:
            lines.append(f"{strategy}: {got.describe()}")
            tb = getattr(got.error, "__traceback_text__", None)
            if tb and not isinstance(got.error, psoup.PSoupError):
                lines.append(tb)
        raise Divergence("\n".join(lines))

    # -- steps --------------------------------------------------------------------------

    def run(self) -> None:
        for s in self.program.streams:
            self.oracle.create_stream(s.name, s.schema, s.time, s.max_window)
            for e in self.engines:
                e.db.create_stream(s.name, s.schema, time=s.time, max_window=s.max_window)
            self.script.append(
                f"db.create_stream({s.name!r}, {py(s.schema)}, time={s.time!r}, "
                f"max_window={s.max_window!r})"
            )
        for step in self.program.steps:
            if isinstance(step, Insert | BadInsert):
                self.insert(step)
            elif isinstance(step, Register):
                self.register(step)
            elif isinstance(step, RegisterAgain):
                self.register_again(step)
            elif isinstance(step, Unregister):
                self.unregister(step)
            elif isinstance(step, Invoke):
                self.invoke_step(step)
            elif isinstance(step, InvokeAll):
                for k in list(self.alive):
                    self.invoke(k, None)
            self.check_invariants()
        for e in self.engines:
            e.db.close()

    def check_invariants(self) -> None:
        """Every engine's internal invariants hold after every step."""
        for e in self.engines:
            got = _call(e.db._check)
            if got.error is not None:
                self.fail("the invariant check", "no error", [(e.strategy, got)])

    def insert(self, step: Insert | BadInsert) -> None:
        stream = self.program.streams[step.stream]
        batch, self.latest[step.stream] = concretize_insert(stream, step, self.latest[step.stream])
        rows = list(batch.rows)
        self.script.append(f"db.insert({batch.stream!r}, {py(rows)})")
        expected = _call(lambda: self.oracle.insert(batch.stream, rows))
        if batch.must_fail:
            assert isinstance(expected.error, BatchError), (
                f"the oracle accepted a batch built to fail: {py(rows)}"
            )
            event("insert: rejected batch")
            self.script[-1] = f"# raises BatchError: {self.script[-1]}"
        else:
            assert expected.error is None, f"the oracle rejected a valid batch: {expected}"
        bad = []
        for e in self.engines:
            got = _call(lambda e=e: e.db.insert(batch.stream, rows))
            if expected.error is not None:
                if not isinstance(got.error, BatchError):
                    bad.append((e.strategy, got))
                continue
            if got.error is not None:
                bad.append((e.strategy, got))
                continue
            first, last = got.value.first_id, got.value.last_id
            if not (first <= last and (e.last_id is None or first > e.last_id)):
                got.error = AssertionError(
                    f"tuple ids {first}..{last} do not increase (previous last {e.last_id})"
                )
                bad.append((e.strategy, got))
            e.last_id = last
        if bad:
            self.fail("insert", expected.describe(), bad)

    def register(self, step: Register, template: bool = False) -> None:
        q = step.query
        k = len(self.oracle_handles)
        via = f"db.prepare({q.text!r}).register(" if template else f"db.register({q.text!r}, "
        self.script.append(f"h{k} = {via}{py(q.params_dict)})")

        def call(db):
            if template:
                return db.prepare(q.text).register(q.params_dict)
            return db.register(q.text, q.params_dict)

        try:
            handle = self.oracle.register(q.text, q.params_dict)
        except QueryError as exc:
            if not template:  # a generated query is always valid
                raise AssertionError(f"a generated query was refused: {q.text}\n{exc}") from exc
            # moved values may refuse (an empty window): then every engine refuses alike
            self.script[-1] = f"{via}{py(q.params_dict)})  # refused"
            bad = []
            for e in self.engines:
                got = _call(lambda e=e: call(e.db))
                if type(got.error) is not type(exc):
                    bad.append((e.strategy, got))
            if bad:
                self.fail("register", f"{type(exc).__name__}: {exc}", bad)
            return
        self.oracle_handles.append(handle)
        self.cases.append(q)
        spec = self.oracle.spec(self.oracle_handles[-1])
        event(
            "register: "
            + ("join" if spec.is_join else "selection")
            + (" aggregate" if spec.is_aggregate else "")
            + (" grouped" if spec.group_by is not None else "")
        )
        bad = []
        for e in self.engines:
            got = _call(lambda e=e: call(e.db))
            if got.error is not None:
                bad.append((e.strategy, got))
                e.handles.append("")
                continue
            h = got.value
            if not (
                isinstance(h, str) and len(h) == 32 and all(c in "0123456789abcdef" for c in h)
            ):
                got.error = AssertionError(f"the handle {h!r} is not 32 hex digits")
                bad.append((e.strategy, got))
            e.handles.append(h)
        self.alive.append(k)
        if bad:
            self.fail("register", "a handle", bad)

    def register_again(self, step: RegisterAgain) -> None:
        if self.cases:
            case = self.cases[step.which % len(self.cases)]
            self.register(Register(shifted(case, step.shift)), template=True)

    def unregister(self, step: Unregister) -> None:
        if not self.alive:
            return
        k = self.alive.pop(step.which % len(self.alive))
        self.dead.append(k)
        self.script.append(f"db.unregister(h{k})")
        self.oracle.unregister(self.oracle_handles[k])
        bad = []
        for e in self.engines:
            got = _call(lambda e=e: e.db.unregister(e.handles[k]))
            if got.error is not None:
                bad.append((e.strategy, got))
        if bad:
            self.fail("unregister", "None", bad)

    def invoke_step(self, step: Invoke) -> None:
        if step.stale:
            if not self.dead:
                return
            k = self.dead[step.which % len(self.dead)]
            self.script.append(f"db.invoke(h{k})  # raises UnknownHandleError")
            bad = []
            for e in self.engines:
                got = _call(lambda e=e: e.db.invoke(e.handles[k]))
                if not isinstance(got.error, UnknownHandleError):
                    bad.append((e.strategy, got))
            if bad:
                self.fail("invoke of an unregistered handle", "UnknownHandleError", bad)
            return
        if not self.alive:
            return
        k = self.alive[step.which % len(self.alive)]
        now = None
        if step.now_delta is not None:
            base = self.oracle.current_now(self.oracle_handles[k])
            now = (0 if base is None else base) + step.now_delta
        self.invoke(k, now)

    def invoke(self, k: int, now: int | float | None) -> None:
        arg = "" if now is None else f", now={now!r}"
        self.script.append(f"db.invoke(h{k}{arg})")
        columns, rows = self.oracle.invoke(self.oracle_handles[k], now)
        event("invoke: " + ("empty" if not rows else "non-empty"))
        if now is not None:
            event("invoke: with now=")
        bad = []
        for e in self.engines:
            got = _call(lambda e=e: e.db.invoke(e.handles[k], now=now))
            if got.error is None:
                res = got.value
                got.value = (getattr(res, "columns", None), getattr(res, "rows", None))
                ok = (
                    res.columns == columns
                    and isinstance(res.columns, tuple)
                    and isinstance(res.rows, list)
                    and rows_equal(rows, res.rows)
                    and _arrays_fit(res)
                )
                if ok:
                    continue
            bad.append((e.strategy, got))
        if bad:
            self.fail(f"invoke of h{k}", py((columns, rows)), bad)


def _arrays_fit(res: Any) -> bool:
    """The result's columns hold its rows' values, typed by the column types (object only
    for str columns and for columns holding None)."""
    want = {"int": "int64", "float": "float64", "str": "object"}
    for c, (arr, t) in enumerate(zip(res.arrays, res.types, strict=True)):
        if arr.tolist() != [r[c] for r in res.rows] or arr.flags.writeable:
            return False
        if str(arr.dtype) != want[t] and not (arr.dtype == object and None in arr.tolist()):
            return False
    return True


def run_program(program: Program) -> None:
    Runner(program).run()


# -- the tests ------------------------------------------------------------------------------


@_settings(150)
@given(programs())
def test_engine_matches_oracle(program: Program) -> None:
    """Random programs: every strategy's every answer equals the oracle's."""
    run_program(program)


@st.composite
def big_programs(draw: st.DrawFn) -> Program:
    """Few steps, big batches (100-400 rows), 16-row blocks, tight retention.

    Rows come from a seeded ``random.Random`` (drawing hundreds of values one by one
    through hypothesis would be slow and shrink badly); each batch has its own value
    range, so a query's match density swings from all to none between batches and the
    engine's result columns have to switch between dense and sparse forms, while
    ``max_window`` makes whole blocks expire.
    """
    from strategies import stream_defs

    n = draw(st.integers(1, 2))
    streams = []
    for i in range(n):
        s = draw(stream_defs(("r", "q")[i]))
        window = draw(st.sampled_from((None, 20, 40, 60)))
        streams.append(StreamDef(s.name, s.attrs, s.time, window))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    steps: list[Any] = [Register(draw(queries(streams))) for _ in range(draw(st.integers(1, 4)))]
    for _ in range(draw(st.integers(2, 5))):
        i = rng.randrange(n)
        steps.append(Insert(i, _big_batch(rng, streams[i])))
        if rng.random() < 0.5:
            steps.append(Register(draw(queries(streams))))
        steps.append(InvokeAll())
        steps.append(Invoke(rng.randrange(8), rng.choice([None, -30, -5, 0, 7])))
    return Program(tuple(streams), 16, tuple(steps))


def _big_batch(rng: random.Random, stream: StreamDef) -> tuple[tuple[Any, ...], ...]:
    """100-400 rows whose time slot holds an increment; values from a per-batch range."""
    low = rng.choice((0, 0, 3, 6))
    high = rng.choice((low, low + 1, 6))
    rows = []
    for _ in range(rng.randint(100, 400)):
        row: list[Any] = []
        for name, typ in stream.attrs:
            if name == stream.time:
                inc = rng.choice((0, 0, 0, 1)) if rng.random() < 0.8 else rng.randint(1, 5)
                row.append(inc if typ == "int" else inc / 2)
            elif typ == "int":
                row.append(rng.randint(low, high))
            elif typ == "float":
                row.append(rng.randint(2 * low, 2 * high) / 2)
            else:
                row.append(rng.choice(("a", "b") if low else ("", "a", "ab", "b", "ba", "c")))
        rows.append(tuple(row))
    return tuple(rows)


@_settings(12, shrink=False)  # seeded rows do not shrink; the script shows the failure
@given(big_programs())
def test_engine_matches_oracle_on_big_batches(program: Program) -> None:
    """Hundreds of rows per batch, many blocks, expiry and density changes."""
    run_program(program)
