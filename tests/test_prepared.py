"""A prepared query binds exactly as the full pipeline does (psoup/query/prepared.py).

The net: random query texts (tests/strategies.py) with many parameter sets each, good
and bad (other types, bools, NaN, missing or extra names), bound in sequence by one
``Prepared``, so its kept specs are reused; each answer must be the spec, or the error
(class, message, position), that ``compile_query`` gives for the same text and values.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import psoup
from psoup.errors import (
    QueryError,
    QueryNameError,
    QueryParameterError,
    QuerySyntaxError,
    QueryTypeError,
    UnknownTemplateError,
)
from psoup.query import compile_query, prepare
from psoup.query.prepared import Prepared
from psoup.values import Schema
from tests.strategies import const_values, queries, stream_defs
from tests.test_query_binder import ERROR_CASES, OK_CASES, SCHEMAS


def outcome(fn) -> tuple:
    """What binding gave, exactly: the spec's repr (1 and 1.0 differ) or the error."""
    try:
        return ("spec", repr(fn()))
    except QueryError as err:
        return ("error", type(err).__name__, str(err), err.line, err.column)


def same_as_compile(prep: Prepared, params, schemas) -> tuple:
    expected = outcome(lambda: compile_query(prep.text, params, schemas))
    assert outcome(lambda: prep.bind(params, schemas)) == expected
    return expected


#: Values of a parameter beside the ones of its own type: what a client might send.
ODD_VALUES = st.one_of(
    const_values("int"), const_values("float"), const_values("str"),
    st.sampled_from((True, False, math.nan, math.inf, None, b"x", 2**70)),
)  # fmt: skip


@st.composite
def param_sets(draw, names: tuple[str, ...], first: dict) -> list[dict]:
    """Parameter sets for a text whose parameters are ``names``: mostly of the first
    set's types (the kept specs' path), some of other types, some with a name missing
    or one too many."""
    sets = []
    for _ in range(draw(st.integers(1, 6))):
        params = {}
        for name in names:
            like = first[name]
            typ = "str" if isinstance(like, str) else "float" if isinstance(like, float) else "int"
            pool = const_values(typ) if draw(st.integers(0, 4)) else ODD_VALUES
            params[name] = draw(pool)
        if names and draw(st.integers(0, 9)) == 0:
            params.pop(draw(st.sampled_from(names)))
        if draw(st.integers(0, 19)) == 0:
            params["extra"] = 1
        sets.append(params)
    return sets


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_prepared_query_binds_as_compile_query_does(data) -> None:
    streams = (data.draw(stream_defs("r")), data.draw(stream_defs("q")))
    schemas = {s.name: Schema(s.names, tuple(t for _, t in s.attrs), s.time) for s in streams}
    case = data.draw(queries(streams))
    prep = prepare(case.text, schemas)
    assert set(prep.params) == set(case.params_dict)
    # the drawn values (always valid), then others, then the drawn ones again
    assert same_as_compile(prep, case.params_dict, schemas)[0] == "spec"
    for params in data.draw(param_sets(prep.params, case.params_dict)):
        same_as_compile(prep, params, schemas)
    assert same_as_compile(prep, case.params_dict, schemas)[0] == "spec"


@pytest.mark.parametrize("case", OK_CASES + ERROR_CASES, ids=str)
def test_golden_queries_bind_the_same_prepared(case) -> None:
    try:
        prep = prepare(case.text, SCHEMAS)
    except QueryError:
        return  # a syntax error: nothing to prepare; test_query_binder covers it
    for _ in range(2):  # the second time from what the first kept
        same_as_compile(prep, case.params, SCHEMAS)


def test_kept_specs_take_each_new_value() -> None:
    text = "SELECT a FROM r WHERE a = :v AND :lo < b AND b BETWEEN :lo AND 9 BEGIN 0 END NOW"
    prep = prepare(text, SCHEMAS)
    assert prep.params == ("v", "lo")
    for v in (1, 2, 3):
        spec = prep.bind({"v": v, "lo": 0.5 * v}, SCHEMAS)
        assert [f.value for f in spec.factors] == [v, 0.5 * v, 0.5 * v, 9]
    assert len(prep._specs) == 1  # one signature: (lo float, v int)


def test_a_value_of_another_type_is_checked_again() -> None:
    prep = prepare("SELECT a FROM r WHERE a = :v BEGIN 0 END NOW", SCHEMAS)
    prep.bind({"v": 1}, SCHEMAS)
    with pytest.raises(QueryTypeError, match=r"int column a with parameter :v, a str"):
        prep.bind({"v": "x"}, SCHEMAS)
    with pytest.raises(QueryParameterError, match=r":v is a bool"):
        prep.bind({"v": True}, SCHEMAS)


def test_a_stream_declared_anew_is_bound_anew() -> None:
    prep = prepare("SELECT a FROM r WHERE a = :v BEGIN 0 END NOW", SCHEMAS)
    prep.bind({"v": 1}, SCHEMAS)
    changed = {**SCHEMAS, "r": Schema(("a", "t"), ("str", "int"), "t")}
    with pytest.raises(QueryTypeError, match="cannot compare str column a"):
        prep.bind({"v": 2}, changed)
    assert prep.bind({"v": "x"}, changed).factors[0].value == "x"


def test_checking_a_template_finds_what_no_value_can_mend() -> None:
    prep = prepare("SELECT nope FROM r WHERE a = :v BEGIN 0 END NOW", SCHEMAS)
    with pytest.raises(QueryError, match="nope") as info:
        prep.check(SCHEMAS)
    assert (info.value.line, info.value.column) == (1, 8)
    # a parameter's type is not known yet: both of these may still bind
    for text in (
        "SELECT a FROM r WHERE name = :v AND a < -:w BEGIN :b END NOW - :e",
        "SELECT r.a FROM r, s WHERE r.a < s.c + :k AND r.a IN (:x, :y) BEGIN 0 END NOW",
    ):
        prepare(text, SCHEMAS).check(SCHEMAS)
    with pytest.raises(QueryTypeError, match="cannot compare int column a with the string"):
        prepare("SELECT a FROM r WHERE a = 'x' AND b = :v BEGIN 0 END NOW", SCHEMAS).check(SCHEMAS)


# --- in the engine ----------------------------------------------------------------------


def _db(path=None):
    db = psoup.connect(path)
    if "r" not in db.streams:
        db.create_stream("r", {"a": "int", "name": "str", "t": "int"}, time="t")
    return db


BY_A = "SELECT a, t FROM r WHERE a = :v AND name != :n BEGIN NOW - 5 END NOW"


def test_a_template_registers_what_register_does() -> None:
    db = _db()
    db.insert("r", [(i % 3, "x" if i % 2 else "y", i) for i in range(12)])
    tpl = db.prepare(BY_A)
    assert (tpl.params, db.prepare(BY_A).id, db.template(tpl.id).text) == (("v", "n"), tpl.id, BY_A)
    for v in range(3):
        by_template, by_text = (
            tpl.register({"v": v, "n": "x"}),
            db.register(BY_A, {"v": v, "n": "x"}),
        )
        assert db.describe(by_template).spec == db.describe(by_text).spec
        db.insert("r", [(v, "y", 20 + v)])
        assert db.invoke(by_template).rows == db.invoke(by_text).rows != []
    assert db.stats()["templates"] == 1
    db._check()


def test_a_template_refuses_what_does_not_fit_and_registers_nothing() -> None:
    db = _db()
    tpl = db.prepare(BY_A)
    with pytest.raises(UnknownTemplateError, match="template_id 'nope' is not prepared"):
        db.register_template("nope", {"v": 1, "n": "x"})
    with pytest.raises(QueryTypeError, match=r"column 30: .*parameter :v, a str") as info:
        tpl.register({"v": "1", "n": "x"})
    assert "a = :v" in str(info.value)  # the template's text, with a caret
    with pytest.raises(QueryParameterError, match=r":n is not given"):
        tpl.register({"v": 1})
    with pytest.raises(QuerySyntaxError):
        db.prepare("SELECT a FROM r WHERE BEGIN 0 END NOW")
    with pytest.raises(QueryNameError, match="no attribute 'b'"):
        db.prepare("SELECT b FROM r WHERE a = :v BEGIN 0 END NOW")
    assert (len(db.queries), db.stats()["templates"]) == (0, 1)


@pytest.mark.parametrize("checkpoint", [False, True], ids=["log", "checkpoint"])
def test_a_prepared_template_survives_a_restart(tmp_path, checkpoint) -> None:
    db = _db(tmp_path)
    tid = db.prepare(BY_A).id
    h = db.register_template(tid, {"v": 1, "n": "x"})
    db.insert("r", [(1, "y", 1), (1, "x", 2)])
    db.storage.close(checkpoint=checkpoint)  # without one, as a crash leaves it: the log
    db.close()
    db = _db(tmp_path)
    assert db.template(tid).text == BY_A
    assert db.invoke(h).rows == db.invoke(db.register_template(tid, {"v": 1, "n": "x"})).rows
    assert db.invoke(h).rows == [(1, 1)]
    db.close()


def test_the_engine_keeps_the_latest_texts_only(monkeypatch) -> None:
    db = _db()
    monkeypatch.setattr(db, "_RECENT_TEXTS", 4)
    texts = [f"SELECT a FROM r WHERE a = :v AND t > {k} BEGIN 0 END NOW" for k in range(6)]
    for text in texts:
        db.register(text, {"v": 1})
    assert list(db._recent) == texts[2:]
    tpl = db.prepare(texts[0])  # a template's text is kept again, and stays a template
    assert list(db._recent) == [*texts[3:], texts[0]]
    db.register(texts[3], {"v": 2})  # used again: the last to go
    assert list(db._recent) == [texts[4], texts[5], texts[0], texts[3]]
    for text in texts:
        db.register(text, {"v": 2})
    assert db.template(tpl.id).register({"v": 3}) in db.queries
    db._check()
