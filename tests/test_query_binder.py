"""Tests of binding (psoup.query.binder) and of the whole pipeline through compile_query.

The golden files in tests/fixtures drive most of it:

* ``queries_ok.txt``: valid queries and their canonical form (``=> ...``); each must
  compile to that form, and the form must compile back to the same spec.
* ``query_errors.txt``: invalid queries and the error they raise
  (``!! ErrorClass line:column message``), message compared exactly.

Cases are separated by blank lines; a case may carry ``params: {json}``; lines starting
with ``#`` are comments of the fixture file. The unit tests below pin the exact
``QuerySpec`` objects for each normalisation rule.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psoup.errors import (
    QueryError,
    QueryNameError,
    QueryParameterError,
    QueryTypeError,
    UnsupportedQueryError,
)
from psoup.query import canonical, compile_query
from psoup.query.spec import (
    OPS,
    Bound,
    Col,
    ColCompare,
    Compare,
    InList,
    QuerySpec,
    SelectItem,
    Source,
    Window,
)
from psoup.values import Schema

FIXTURES = Path(__file__).parent / "fixtures"

#: The streams every test here compiles against.
SCHEMAS: dict[str, Schema] = {
    "r": Schema(("a", "b", "name", "t"), ("int", "float", "str", "int"), "t"),
    "s": Schema(("a", "c", "label", "ts"), ("int", "float", "str", "float"), "ts"),
    "positions": Schema(
        ("time", "vid", "spd", "xway", "lane", "dir", "seg", "pos"), ("int",) * 8, "time"
    ),
    "toll_history": Schema(("vid", "day", "xway", "tolls"), ("int",) * 4, "day"),
}

ALWAYS = "BEGIN 0 END NOW"
ALL_TIME = Window(Bound("const", 0), Bound("now", 0))


def compile_(text: str, params: dict[str, object] | None = None) -> QuerySpec:
    return compile_query(text, params, SCHEMAS)  # type: ignore[arg-type]


def factors(where: str, params: dict[str, object] | None = None) -> tuple:
    return compile_(f"SELECT a FROM r WHERE {where} {ALWAYS}", params).factors


def raises(text: str, params: dict[str, object] | None = None) -> QueryError:
    with pytest.raises(QueryError) as info:
        compile_(text, params)
    return info.value


# --- golden files ---------------------------------------------------------------------


@dataclass(frozen=True)
class GoldenCase:
    text: str
    params: dict[str, object] | None
    expected: str
    where: str  # file:line, the test id

    def __str__(self) -> str:
        return self.where


def load_golden(name: str, marker: str) -> list[GoldenCase]:
    """The cases of one fixture file; ``marker`` starts the expected-result line."""
    path = FIXTURES / name
    cases: list[GoldenCase] = []
    block: list[str] = []
    start = 0
    for number, line in enumerate([*path.read_text().splitlines(), ""], 1):
        if line.startswith("#"):
            continue
        if line.strip():
            start = start if block else number
            block.append(line)
            continue
        if not block:
            continue
        query = [x for x in block if not x.startswith(("params:", marker))]
        params = [json.loads(x[len("params:") :]) for x in block if x.startswith("params:")]
        expected = [x[len(marker) :].strip() for x in block if x.startswith(marker)]
        assert len(expected) == 1, f"{name}:{start}: one '{marker}' line per case"
        cases.append(
            GoldenCase(
                "\n".join(query), params[0] if params else None, expected[0], f"{name}:{start}"
            )
        )
        block = []
    return cases


OK_CASES = load_golden("queries_ok.txt", "=>")
ERROR_CASES = load_golden("query_errors.txt", "!!")
ERROR_LINE = re.compile(r"(\w+) (\d+):(\d+) (.+)")


@pytest.mark.parametrize("case", OK_CASES, ids=str)
def test_golden_ok(case: GoldenCase) -> None:
    spec = compile_(case.text, case.params)
    assert spec.text == case.text
    assert canonical(spec) == case.expected
    # The canonical form is itself a query that binds to the same spec.
    assert replace(compile_(case.expected), text=case.text) == spec


@pytest.mark.parametrize("case", ERROR_CASES, ids=str)
def test_golden_error(case: GoldenCase) -> None:
    match = ERROR_LINE.fullmatch(case.expected)
    assert match, f"{case.where}: expected '!! ErrorClass line:column message'"
    err = raises(case.text, case.params)
    got = (type(err).__name__, err.line, err.column, err.message)
    assert got == (match[1], int(match[2]), int(match[3]), match[4])
    assert err.text == case.text


def test_golden_files_cover_every_error_class() -> None:
    classes = {ERROR_LINE.fullmatch(case.expected)[1] for case in ERROR_CASES}  # type: ignore[index]
    assert classes == {
        "QuerySyntaxError",
        "QueryNameError",
        "QueryTypeError",
        "QueryParameterError",
        "UnsupportedQueryError",
    }


def test_golden_files_are_not_trivial() -> None:
    assert len(OK_CASES) >= 40 and len(ERROR_CASES) >= 100


# --- the spec, field by field ---------------------------------------------------------


def test_full_spec_of_a_simple_query() -> None:
    text = "SELECT a, name FROM r WHERE a > 5 BEGIN NOW - 10 END NOW"
    assert compile_(text) == QuerySpec(
        text=text,
        sources=(Source("r", "r"),),
        factors=(Compare(Col(0, "a"), ">", 5),),
        select=(SelectItem("a", "int", Col(0, "a")), SelectItem("name", "str", Col(0, "name"))),
        window=Window(Bound("now", -10), Bound("now", 0)),
        group_by=None,
    )


def test_no_where_clause_means_no_factors() -> None:
    assert compile_(f"SELECT a FROM r {ALWAYS}").factors == ()


def test_sources_keep_alias_or_stream_name() -> None:
    spec = compile_(f"SELECT x.a FROM r x, s {ALWAYS}")
    assert spec.sources == (Source("r", "x"), Source("s", "s"))
    assert spec.is_join


@pytest.mark.parametrize("op", OPS)
def test_constant_on_the_left_flips_the_operator(op: str) -> None:
    flipped = {"<": ">", "<=": ">=", "=": "=", ">=": "<=", ">": "<", "!=": "!="}[op]
    assert factors(f"3 {op} a") == (Compare(Col(0, "a"), flipped, 3),)
    assert factors(f"a {op} 3") == (Compare(Col(0, "a"), op, 3),)


def test_angle_brackets_mean_not_equal() -> None:
    assert factors("a <> 3") == (Compare(Col(0, "a"), "!=", 3),)


def test_between_becomes_two_inclusive_factors() -> None:
    assert factors("b BETWEEN 1 AND 2.5") == (
        Compare(Col(0, "b"), ">=", 1),
        Compare(Col(0, "b"), "<=", 2.5),
    )


def test_between_with_low_above_high_is_kept_as_written() -> None:
    assert factors("a BETWEEN 5 AND 1") == (
        Compare(Col(0, "a"), ">=", 5),
        Compare(Col(0, "a"), "<=", 1),
    )


def test_in_drops_duplicates_and_keeps_order() -> None:
    assert factors("a IN (3, 1, 3, 2, 1)") == (InList(Col(0, "a"), (3, 1, 2)),)
    assert factors("name IN ('y', 'x', 'y')") == (InList(Col(0, "name"), ("y", "x")),)


def test_long_in_list() -> None:
    values = ", ".join(str(i % 500) for i in range(5000))
    (factor,) = factors(f"a IN ({values})")
    assert factor == InList(Col(0, "a"), tuple(range(500)))


def test_in_treats_equal_numbers_as_duplicates() -> None:
    (factor,) = factors("b IN (1, 1.0, 2)")
    assert factor == InList(Col(0, "b"), (1, 2))
    assert type(factor.values[0]) is int


def test_column_comparisons_and_offsets() -> None:
    a, b = Col(0, "a"), Col(0, "b")
    assert factors("a < b") == (ColCompare(a, "<", b, 0),)
    assert factors("a < b + 5") == (ColCompare(a, "<", b, 5),)
    assert factors("a >= b - 2.5") == (ColCompare(a, ">=", b, -2.5),)
    assert factors("a = b - -3") == (ColCompare(a, "=", b, 3),)
    assert factors("a = b + -3") == (ColCompare(a, "=", b, -3),)


def test_join_factor_keeps_sides_as_written() -> None:
    spec = compile_(f"SELECT r.a FROM r, s WHERE s.c > r.a + 1 {ALWAYS}")
    assert spec.factors == (ColCompare(Col(1, "c"), ">", Col(0, "a"), 1),)


def test_float_constant_against_int_column_stays_float() -> None:
    (factor,) = factors("a > 2.0")
    assert factor == Compare(Col(0, "a"), ">", 2.0) and type(factor.value) is float


def test_unary_minus_and_exponents() -> None:
    assert factors("a > -5 AND b < -2.5e3") == (
        Compare(Col(0, "a"), ">", -5),
        Compare(Col(0, "b"), "<", -2500.0),
    )


def test_parenthesised_factors_are_flattened() -> None:
    assert factors("(a = 1) AND ((b > 2 AND (name = 'x')))") == (
        Compare(Col(0, "a"), "=", 1),
        Compare(Col(0, "b"), ">", 2),
        Compare(Col(0, "name"), "=", "x"),
    )


# --- SELECT ---------------------------------------------------------------------------


def test_star_single_stream_in_schema_order() -> None:
    spec = compile_(f"SELECT * FROM r {ALWAYS}")
    assert spec.select == (
        SelectItem("a", "int", Col(0, "a")),
        SelectItem("b", "float", Col(0, "b")),
        SelectItem("name", "str", Col(0, "name")),
        SelectItem("t", "int", Col(0, "t")),
    )
    assert spec.columns == ("a", "b", "name", "t")


def test_star_join_qualifies_with_aliases() -> None:
    spec = compile_(f"SELECT * FROM r AS x, s WHERE x.a = s.a {ALWAYS}")
    assert spec.columns == ("x.a", "x.b", "x.name", "x.t", "s.a", "s.c", "s.label", "s.ts")
    assert spec.select[4] == SelectItem("s.a", "int", Col(1, "a"))
    assert spec.select[7] == SelectItem("s.ts", "float", Col(1, "ts"))


def test_self_join_star() -> None:
    spec = compile_(f"SELECT * FROM r p, r q {ALWAYS}")
    assert spec.columns[:2] == ("p.a", "p.b") and spec.columns[4:6] == ("q.a", "q.b")
    assert spec.select[4].col == Col(1, "a")


def test_output_names() -> None:
    single = compile_(f"SELECT r.a, b AS bee, name FROM r {ALWAYS}")
    assert single.columns == ("a", "bee", "name")
    join = compile_(f"SELECT x.a AS k, b, label, s.a FROM r x, s {ALWAYS}")
    assert join.columns == ("k", "x.b", "s.label", "s.a")


def test_aggregate_output_names() -> None:
    single = compile_(f"SELECT COUNT(*), sum(r.b), Min(a) AS low FROM r {ALWAYS}")
    assert single.columns == ("COUNT(*)", "SUM(b)", "low")
    join = compile_(f"SELECT COUNT(*), Max(c), min(x.a), count(label) FROM r x, s {ALWAYS}")
    assert join.columns == ("COUNT(*)", "MAX(s.c)", "MIN(x.a)", "COUNT(s.label)")


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("a", SelectItem("a", "int", Col(0, "a"))),
        ("COUNT(*)", SelectItem("COUNT(*)", "int", None, "COUNT")),
        ("COUNT(name)", SelectItem("COUNT(name)", "int", Col(0, "name"), "COUNT")),
        ("SUM(a)", SelectItem("SUM(a)", "int", Col(0, "a"), "SUM")),
        ("SUM(b)", SelectItem("SUM(b)", "float", Col(0, "b"), "SUM")),
        ("AVG(a)", SelectItem("AVG(a)", "float", Col(0, "a"), "AVG")),
        ("MIN(name)", SelectItem("MIN(name)", "str", Col(0, "name"), "MIN")),
        ("MAX(b) AS top", SelectItem("top", "float", Col(0, "b"), "MAX")),
    ],
)
def test_select_item_types(item: str, expected: SelectItem) -> None:
    assert compile_(f"SELECT {item} FROM r {ALWAYS}").select == (expected,)


def test_group_by() -> None:
    spec = compile_(f"SELECT name, COUNT(*) FROM r GROUP BY name {ALWAYS}")
    assert spec.group_by == Col(0, "name") and spec.is_aggregate
    assert compile_(f"SELECT SUM(a) FROM r GROUP BY name {ALWAYS}").group_by == Col(0, "name")
    assert compile_(f"SELECT SUM(a) FROM r {ALWAYS}").group_by is None


def test_plain_column_must_be_the_group_by_column() -> None:
    err = raises(f"SELECT a, SUM(b) FROM r {ALWAYS}")
    assert isinstance(err, UnsupportedQueryError)
    assert (err.line, err.column) == (1, 8)
    assert "add it to GROUP BY or aggregate it" in err.message


# --- windows --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("clause", "window"),
    [
        ("BEGIN 0 END 100", Window(Bound("const", 0), Bound("const", 100))),
        ("BEGIN 100 END NOW", Window(Bound("const", 100), Bound("now", 0))),
        ("BEGIN NOW - 10 END NOW", Window(Bound("now", -10), Bound("now", 0))),
        ("BEGIN NOW + 1.5 END NOW + 2", Window(Bound("now", 1.5), Bound("now", 2))),
        ("BEGIN -5 END -5", Window(Bound("const", -5), Bound("const", -5))),
        ("BEGIN NOW END NOW", Window(Bound("now", 0), Bound("now", 0))),
        ("BEGIN now - 1 END 3", Window(Bound("now", -1), Bound("const", 3))),
    ],
)
def test_windows(clause: str, window: Window) -> None:
    assert compile_(f"SELECT a FROM r {clause}").window == window


def test_begin_after_end() -> None:
    err = raises("SELECT a FROM r\nBEGIN NOW - 5 END NOW - 10")
    assert isinstance(err, UnsupportedQueryError)
    assert (err.line, err.column) == (2, 7)
    assert err.message.startswith("BEGIN is after END (NOW - 5 > NOW - 10)")


# --- parameters -----------------------------------------------------------------------


def test_parameters_everywhere_a_literal_may_be() -> None:
    params = {"k": 3, "lo": 1, "hi": 2.5, "n": "x", "off": 1.5, "start": 100, "w": 30}
    spec = compile_(
        "SELECT a FROM r WHERE a = :k AND b BETWEEN :lo AND :hi AND name IN (:n, 'y')"
        " AND a < b + :off AND :k < a AND a > -:k BEGIN :start END NOW - :w",
        params,
    )
    a, b = Col(0, "a"), Col(0, "b")
    assert spec.factors == (
        Compare(a, "=", 3),
        Compare(b, ">=", 1),
        Compare(b, "<=", 2.5),
        InList(Col(0, "name"), ("x", "y")),
        ColCompare(a, "<", b, 1.5),
        Compare(a, ">", 3),
        Compare(a, ">", -3),
    )
    assert spec.window == Window(Bound("const", 100), Bound("now", -30))


def test_a_parameter_may_be_used_twice() -> None:
    assert factors("a > :k AND b < :k", {"k": 2}) == (
        Compare(Col(0, "a"), ">", 2),
        Compare(Col(0, "b"), "<", 2),
    )


def test_parameter_values_of_numpy_number_types() -> None:
    (factor,) = factors("a = :k", {"k": np.int64(4)})
    assert factor == Compare(Col(0, "a"), "=", 4) and type(factor.value) is int
    (factor,) = factors("b = :k", {"k": np.float32(0.5)})
    assert factor == Compare(Col(0, "b"), "=", 0.5) and type(factor.value) is float


def test_parameter_type_follows_its_python_type() -> None:
    (factor,) = factors("a > :x", {"x": 2.0})
    assert type(factor.value) is float
    err = raises(f"SELECT a FROM r WHERE a = :v {ALWAYS}", {"v": "3"})
    assert isinstance(err, QueryTypeError)
    assert err.message == "cannot compare int column a with parameter :v, a str"


def test_missing_parameter() -> None:
    err = raises(f"SELECT a FROM r WHERE a = 1\n  AND b < :lim {ALWAYS}")
    assert isinstance(err, QueryParameterError)
    assert (err.line, err.column) == (2, 11)
    assert err.message == "parameter :lim is not given (no parameters were given)"


def test_missing_parameter_names_the_given_ones() -> None:
    err = raises(f"SELECT a FROM r WHERE a = :vid {ALWAYS}", {"vdi": 1, "x": 2})
    assert err.message == "parameter :vid is not given (given: :vdi, :x)"


def test_parameter_names_are_case_sensitive() -> None:
    err = raises(f"SELECT a FROM r WHERE a = :V {ALWAYS}", {"v": 1})
    assert isinstance(err, QueryParameterError) and err.message.startswith("parameter :V is")


def test_parameter_names_are_given_without_the_colon() -> None:
    err = raises(f"SELECT a FROM r WHERE a = :v {ALWAYS}", {"v": 1, ":w": 2})
    assert isinstance(err, QueryParameterError)
    assert err.message == (
        "parameter ::w is given but not used in the query "
        "(name parameters without the colon: {'vid': 1} for :vid)"
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"v": 1, "w": 2}, "parameter :w is given but not used in the query"),
        ({"v": 1, "x": 2, "w": 3}, "parameters :w, :x are given but not used in the query"),
    ],
)
def test_unused_parameters(params: dict[str, object], message: str) -> None:
    err = raises(f"SELECT a FROM r WHERE a = :v {ALWAYS}", params)
    assert isinstance(err, QueryParameterError)
    assert (err.line, err.column, err.message) == (1, 1, message)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (True, "is a bool; pass an int, a float or a str"),
        (False, "is a bool; pass an int, a float or a str"),
        (None, "has type NoneType; pass an int, a float or a str"),
        ([1], "has type list; pass an int, a float or a str"),
        (b"x", "has type bytes; pass an int, a float or a str"),
        (math.inf, "is inf; pass a finite number"),
        (-math.inf, "is -inf; pass a finite number"),
        (math.nan, "is nan; pass a finite number"),
    ],
)
def test_bad_parameter_values(value: object, problem: str) -> None:
    err = raises(f"SELECT a FROM r WHERE b < :v {ALWAYS}", {"v": value})
    assert isinstance(err, QueryParameterError)
    assert (err.line, err.column) == (1, 27)
    assert err.message == f"parameter :v {problem}"


def test_no_params_and_empty_params_are_the_same() -> None:
    text = f"SELECT a FROM r {ALWAYS}"
    assert compile_query(text, None, SCHEMAS) == compile_query(text, {}, SCHEMAS)


# --- names, types and errors in general ----------------------------------------------


def test_unknown_stream_lists_the_streams() -> None:
    err = raises(f"SELECT a FROM nope {ALWAYS}")
    assert isinstance(err, QueryNameError)
    assert err.message == "unknown stream 'nope'; the streams are: positions, r, s, toll_history"


def test_unknown_stream_without_any_stream() -> None:
    with pytest.raises(QueryNameError, match="unknown stream 'r'; no stream exists"):
        compile_query(f"SELECT a FROM r {ALWAYS}", None, {})


def test_unknown_attribute_in_a_multi_line_query_points_at_the_name() -> None:
    err = raises(f"SELECT a\nFROM r\nWHERE r.zz = 1 {ALWAYS}")
    assert isinstance(err, QueryNameError)
    assert (err.line, err.column) == (3, 9)
    assert err.message == "stream 'r' has no attribute 'zz'; its attributes are: a, b, name, t"


def test_error_renders_the_line_with_a_caret() -> None:
    err = raises(f"SELECT a\nFROM r WHERE a = 'x'\n{ALWAYS}")
    assert str(err) == (
        "line 2, column 18: cannot compare int column a with the string 'x'\n"
        "  FROM r WHERE a = 'x'\n"
        "                   ^"
    )


def test_errors_are_query_errors_with_the_text() -> None:
    text = f"SELECT a FROM r WHERE a = 1 OR a = 2 {ALWAYS}"
    err = raises(text)
    assert isinstance(err, UnsupportedQueryError) and err.text == text
    assert "register one query per alternative" in err.message


def test_long_name_lists_are_cut() -> None:
    schemas = {f"s{i:02}": SCHEMAS["r"] for i in range(15)}
    with pytest.raises(QueryNameError) as info:
        compile_query(f"SELECT a FROM nope {ALWAYS}", None, schemas)
    assert info.value.message.endswith("s08, s09, ...")


# --- property: canonical form is a fixed point ---------------------------------------

_COLUMNS = {"a": "int", "b": "float", "name": "str", "t": "int"}
_numbers = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)
_strings = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)


@st.composite
def _factor(draw: st.DrawFn) -> str:
    column = draw(st.sampled_from(sorted(_COLUMNS)))
    numeric = _COLUMNS[column] != "str"
    value = _numbers if numeric else _strings
    lit = lambda v: repr(v) if not isinstance(v, str) else "'" + v.replace("'", "''") + "'"  # noqa: E731
    op = draw(st.sampled_from([*OPS, "<>"]))
    kind = draw(st.sampled_from(["cmp", "flip", "between", "in", "col"]))
    if kind == "cmp":
        return f"{column} {op} {lit(draw(value))}"
    if kind == "flip":
        return f"{lit(draw(value))} {op} {column}"
    if kind == "between":
        return f"{column} BETWEEN {lit(draw(value))} AND {lit(draw(value))}"
    if kind == "in":
        values = draw(st.lists(value, min_size=1, max_size=4))
        return f"{column} IN ({', '.join(lit(v) for v in values)})"
    other = draw(st.sampled_from([c for c, t in _COLUMNS.items() if (t != "str") == numeric]))
    if not numeric:
        return f"{column} {op} {other}"
    sign = draw(st.sampled_from(["+", "-"]))
    return f"{column} {op} {other} {sign} {lit(abs(draw(_numbers)))}"


@settings(max_examples=200, deadline=None)
@given(st.lists(_factor(), max_size=5), st.integers(0, 100), st.integers(0, 100))
def test_canonical_form_compiles_to_the_same_spec(where: list[str], k1: int, k2: int) -> None:
    text = "SELECT * FROM r"
    if where:
        text += " WHERE " + " AND ".join(where)
    text += f" BEGIN NOW - {max(k1, k2)} END NOW - {min(k1, k2)}"
    spec = compile_(text)
    form = canonical(spec)
    assert replace(compile_(form), text=text) == spec
    assert canonical(compile_(form)) == form
