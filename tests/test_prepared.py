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

from psoup.errors import QueryError, QueryParameterError, QueryTypeError
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
