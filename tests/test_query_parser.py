"""Tests of the lexer (psoup.query.lexer) and the parser (psoup.query.parser).

These check tokens, positions and the shape of the unbound tree; meaning (names, types,
normal form) is tested in test_query_binder.py, and most error messages in the golden
file tests/fixtures/query_errors.txt.
"""

from __future__ import annotations

import pytest

from psoup.errors import QueryError, QuerySyntaxError, UnsupportedQueryError
from psoup.query import ast, parse
from psoup.query.ast import Pos
from psoup.query.lexer import KEYWORDS, Kind, tokenize

ALWAYS = "BEGIN 0 END NOW"


def kinds_values(text: str) -> list[tuple[Kind, object]]:
    return [(t.kind, t.value) for t in tokenize(text)]


def where(text: str) -> tuple[ast.Factor, ...]:
    return parse(f"SELECT a FROM r WHERE {text} {ALWAYS}").where


def syntax_error(text: str) -> QueryError:
    with pytest.raises(QueryError) as info:
        parse(text)
    return info.value


# --- lexer ----------------------------------------------------------------------------


def test_token_kinds_and_values() -> None:
    assert kinds_values("SELECT x.a, :p, 'it''s', 12, 1.5, .5, 2e3, 1E-2 FROM") == [
        (Kind.KEYWORD, "SELECT"),
        (Kind.IDENT, "x"),
        (Kind.SYMBOL, "."),
        (Kind.IDENT, "a"),
        (Kind.SYMBOL, ","),
        (Kind.PARAM, "p"),
        (Kind.SYMBOL, ","),
        (Kind.STRING, "it's"),
        (Kind.SYMBOL, ","),
        (Kind.INT, 12),
        (Kind.SYMBOL, ","),
        (Kind.FLOAT, 1.5),
        (Kind.SYMBOL, ","),
        (Kind.FLOAT, 0.5),
        (Kind.SYMBOL, ","),
        (Kind.FLOAT, 2000.0),
        (Kind.SYMBOL, ","),
        (Kind.FLOAT, 0.01),
        (Kind.KEYWORD, "FROM"),
        (Kind.EOF, ""),
    ]


def test_keywords_are_case_insensitive_identifiers_are_not() -> None:
    assert kinds_values("select Select sElEcT Vid vid") == [
        (Kind.KEYWORD, "SELECT"),
        (Kind.KEYWORD, "SELECT"),
        (Kind.KEYWORD, "SELECT"),
        (Kind.IDENT, "Vid"),
        (Kind.IDENT, "vid"),
        (Kind.EOF, ""),
    ]


def test_keyword_token_keeps_its_spelling() -> None:
    token = tokenize("wHeRe")[0]
    assert (token.value, token.text, token.describe()) == ("WHERE", "wHeRe", "WHERE")


def test_operators() -> None:
    ops = [t.value for t in tokenize("< <= = >= > != <> <=> a<-1")][:-1]
    assert ops == ["<", "<=", "=", ">=", ">", "!=", "!=", "<=", ">", "a", "<", "-", 1]


def test_not_equal_keeps_its_spelling_in_text() -> None:
    token = tokenize("<>")[0]
    assert (token.value, token.text) == ("!=", "<>")


def test_comments_run_to_the_end_of_the_line() -> None:
    tokens = tokenize("a -- b c\nd --\n-- whole line\ne--f")
    assert [t.text for t in tokens] == ["a", "d", "e", ""]


def test_positions_are_one_based_lines_and_columns() -> None:
    tokens = tokenize("SELECT a\n  FROM r\n\n\tWHERE")
    assert [(t.text, t.line, t.column) for t in tokens] == [
        ("SELECT", 1, 1),
        ("a", 1, 8),
        ("FROM", 2, 3),
        ("r", 2, 8),
        ("WHERE", 4, 2),
        ("", 4, 7),
    ]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r", "\u2028"])
def test_lines_are_counted_like_splitlines(newline: str) -> None:
    text = f"SELECT a{newline}FROM r{newline}x"
    last = tokenize(text)[-2]
    assert (last.text, last.line, last.column) == ("x", 3, 1)
    assert text.splitlines()[last.line - 1][last.column - 1] == "x"


def test_string_over_two_lines_moves_the_following_positions() -> None:
    tokens = tokenize("'a\nbc' x")
    assert tokens[0].value == "a\nbc"
    assert (tokens[1].line, tokens[1].column) == (2, 5)


def test_end_of_query_sits_after_the_last_token() -> None:
    assert (tokenize("")[-1].line, tokenize("")[-1].column) == (1, 1)
    eof = tokenize("SELECT a  -- trailing\n\n")[-1]
    assert (eof.kind, eof.line, eof.column, eof.describe()) == (Kind.EOF, 1, 9, "end of query")


def test_describe_tokens() -> None:
    described = [t.describe() for t in tokenize("x 12 'str' :p ( <> FROM")]
    assert described == [
        "identifier 'x'",
        "number 12",
        "string 'str'",
        "parameter :p",
        "'('",
        "'<>'",
        "FROM",
        "end of query",
    ]


def test_keywords_are_reserved() -> None:
    assert {"SELECT", "BEGIN", "END", "NOW", "OR", "ORDER"} <= KEYWORDS
    assert "COUNT" not in KEYWORDS  # aggregate names are ordinary identifiers


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        ("a # b", 3, "unexpected character '#'"),
        ('a = "x"', 5, "unexpected character '\"' (strings use single quotes)"),
        ("a = 'x", 5, "unterminated string: expected a closing quote (')"),
        ("a = 'x''", 5, "unterminated string: expected a closing quote (')"),
        ("a = 1x", 5, "malformed number '1x'"),
        ("a = 1.2.3", 5, "malformed number '1.2.'"),
        ("a = 1e+", 5, "malformed number: expected digits after the exponent"),
        ("a = 1e400", 5, "number 1e400 is too large"),
        ("a = :", 5, "expected a parameter name after ':' (for example :vid)"),
        ("a = :1", 5, "expected a parameter name after ':' (for example :vid)"),
        ("a = é", 5, "unexpected character 'é'"),
        ("a = !1", 5, "unexpected character '!'"),
    ],
)
def test_lexer_errors(text: str, column: int, message: str) -> None:
    with pytest.raises(QuerySyntaxError) as info:
        tokenize(text)
    err = info.value
    assert (err.line, err.column, err.message, err.text) == (1, column, message, text)


def test_lexer_error_on_a_later_line() -> None:
    with pytest.raises(QuerySyntaxError) as info:
        tokenize("SELECT a\nFROM r\nWHERE a = 'x")
    assert (info.value.line, info.value.column) == (3, 11)


# --- parser: the tree -----------------------------------------------------------------


def test_whole_query_tree() -> None:
    tree = parse(
        "SELECT a, r.b AS bee, COUNT(*), sum(c) AS total FROM r AS x, s "
        "WHERE a = 1 AND b BETWEEN 2 AND :hi AND c IN (1, 'x') AND a < s.b - 3 "
        "GROUP BY a BEGIN NOW - 10 END NOW"
    )
    assert tree == ast.Query(
        select=(
            ast.Item(ast.Column(None, "a")),
            ast.Item(ast.Column("r", "b"), "bee"),
            ast.Item(ast.Func("COUNT", ast.Star())),
            ast.Item(ast.Func("sum", ast.Column(None, "c")), "total"),
        ),
        sources=(ast.Table("r", "x"), ast.Table("s")),
        where=(
            ast.Comparison(ast.Column(None, "a"), "=", ast.Literal(1)),
            ast.Between(ast.Column(None, "b"), ast.Literal(2), ast.Param("hi")),
            ast.In(ast.Column(None, "c"), (ast.Literal(1), ast.Literal("x"))),
            ast.Comparison(
                ast.Column(None, "a"), "<", ast.Arith(ast.Column("s", "b"), "-", ast.Literal(3))
            ),
        ),
        begin=ast.Arith(ast.Now(), "-", ast.Literal(10)),
        end=ast.Now(),
        group_by=ast.Column(None, "a"),
    )


def test_node_positions() -> None:
    tree = parse("SELECT x.a AS k\nFROM r x\nWHERE x.a >= 5 BEGIN NOW - 1 END 7")
    item = tree.select[0]
    assert item.pos == Pos(1, 8) and item.alias_pos == Pos(1, 15)
    column = item.expr
    assert isinstance(column, ast.Column)
    assert column.pos == Pos(1, 8) and column.name_pos == Pos(1, 10)
    table = tree.sources[0]
    assert table.pos == Pos(2, 6) and table.alias_pos == Pos(2, 8)
    (factor,) = tree.where
    assert isinstance(factor, ast.Comparison)
    assert factor.pos == Pos(3, 7) and factor.right.pos == Pos(3, 14)
    assert isinstance(tree.begin, ast.Arith)
    assert tree.begin.pos == Pos(3, 26) and tree.begin.left.pos == Pos(3, 22)
    assert tree.end.pos == Pos(3, 34)


def test_positions_do_not_take_part_in_equality() -> None:
    assert parse("SELECT a FROM r BEGIN 0 END NOW") == parse(
        "select\n   a\nfrom\n  r\nbegin 0 end now"
    )


def test_table_alias_with_and_without_as() -> None:
    assert parse(f"SELECT a FROM r x {ALWAYS}").sources == (ast.Table("r", "x"),)
    assert parse(f"SELECT a FROM r AS x {ALWAYS}").sources == (ast.Table("r", "x"),)
    assert parse(f"SELECT a FROM r {ALWAYS}").sources == (ast.Table("r"),)


def test_star_item() -> None:
    assert parse(f"SELECT * FROM r {ALWAYS}").select == (ast.Item(ast.Star()),)


def test_aggregate_names_are_kept_as_written() -> None:
    (item,) = parse(f"SELECT mAx(a) FROM r {ALWAYS}").select
    assert item.expr == ast.Func("mAx", ast.Column(None, "a"))


def test_unknown_function_parses_and_is_left_to_the_binder() -> None:
    (item,) = parse(f"SELECT median(a) FROM r {ALWAYS}").select
    assert item.expr == ast.Func("median", ast.Column(None, "a"))


def test_literal_on_the_left_is_not_flipped_by_the_parser() -> None:
    assert where("3 < a") == (ast.Comparison(ast.Literal(3), "<", ast.Column(None, "a")),)


def test_minus_is_folded_into_number_literals() -> None:
    (factor,) = where("a > -5")
    assert factor == ast.Comparison(ast.Column(None, "a"), ">", ast.Literal(-5))
    assert factor.right.pos == Pos(1, 27)  # the minus sign
    assert where("a > - 2.5") == (ast.Comparison(ast.Column(None, "a"), ">", ast.Literal(-2.5)),)


def test_minus_before_a_parameter_or_string_is_kept() -> None:
    assert where("a > -:k") == (
        ast.Comparison(ast.Column(None, "a"), ">", ast.Neg(ast.Param("k"))),
    )
    assert where("a > -'x'") == (
        ast.Comparison(ast.Column(None, "a"), ">", ast.Neg(ast.Literal("x"))),
    )


def test_subtracting_a_negative_number() -> None:
    (factor,) = where("a = b - -3")
    assert factor == ast.Comparison(
        ast.Column(None, "a"), "=", ast.Arith(ast.Column(None, "b"), "-", ast.Literal(-3))
    )


def test_plus_minus_chains_are_left_associative() -> None:
    (factor,) = where("a < b + 1 - 2")
    assert isinstance(factor, ast.Comparison)
    assert factor.right == ast.Arith(
        ast.Arith(ast.Column(None, "b"), "+", ast.Literal(1)), "-", ast.Literal(2)
    )


def test_parentheses_are_flattened_into_the_conjunction() -> None:
    assert where("(a = 1) AND ((b = 2 AND (c = 3)))") == (
        ast.Comparison(ast.Column(None, "a"), "=", ast.Literal(1)),
        ast.Comparison(ast.Column(None, "b"), "=", ast.Literal(2)),
        ast.Comparison(ast.Column(None, "c"), "=", ast.Literal(3)),
    )


def test_between_and_does_not_end_the_conjunction() -> None:
    factors = where("a BETWEEN 1 AND 2 AND b = 3")
    assert [type(f) for f in factors] == [ast.Between, ast.Comparison]


@pytest.mark.parametrize(
    ("bound", "tree"),
    [
        ("NOW", ast.Now()),
        ("now + 5", ast.Arith(ast.Now(), "+", ast.Literal(5))),
        ("NOW - :w", ast.Arith(ast.Now(), "-", ast.Param("w"))),
        ("NOW - -2", ast.Arith(ast.Now(), "-", ast.Literal(-2))),
        ("42", ast.Literal(42)),
        ("-1.5", ast.Literal(-1.5)),
        (":start", ast.Param("start")),
        ("'x'", ast.Literal("x")),  # a type error, found by the binder
    ],
)
def test_window_bounds(bound: str, tree: ast.Node) -> None:
    assert parse(f"SELECT a FROM r BEGIN {bound} END NOW").begin == tree


def test_trailing_semicolon() -> None:
    assert parse(f"SELECT a FROM r {ALWAYS};") == parse(f"SELECT a FROM r {ALWAYS}")


def test_three_streams_parse_the_binder_refuses_them() -> None:
    assert len(parse(f"SELECT a FROM r, s, t {ALWAYS}").sources) == 3


# --- parser: errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("", (1, 1), "expected SELECT, found end of query"),
        ("SELECT a FROM r", (1, 16), "expected BEGIN, found end of query"),
        ("SELECT a FROM r\nWHERE a = 1\n", (2, 12), "expected BEGIN, found end of query"),
        ("SELECT a FROM r BEGIN 0", (1, 24), "expected END, found end of query"),
        ("SELECT a FROM r END NOW", (1, 17), "expected ',', WHERE, GROUP BY or BEGIN, found END"),
        (
            "SELECT a FROM r WHERE a = 1 END NOW",
            (1, 29),
            "expected AND, GROUP BY or BEGIN, found END",
        ),
        ("SELECT a FROM r GROUP BY a END NOW", (1, 28), "expected BEGIN, found END"),
        ("SELECT a FROM r BEGIN 0 END NOW GROUP BY a", (1, 33), "GROUP BY must come before BEGIN"),
        ("FROM r", (1, 1), "expected SELECT, found FROM"),
        ("SELECT a WHERE", (1, 10), "expected ',' or FROM, found WHERE"),
        ("SELECT 1 FROM r", (1, 8), "expected a column, an aggregate or '*', found number 1"),
        ("SELECT a FROM 'r'", (1, 15), "expected a stream name, found string 'r'"),
        ("SELECT a FROM r AS BEGIN", (1, 20), "expected an alias after AS, found BEGIN"),
        (
            "SELECT a FROM r WHERE a BETWEEN 1, 2",
            (1, 34),
            "expected AND between the two BETWEEN bounds, found ','",
        ),
        (
            "SELECT a FROM r WHERE a IN (1, a)",
            (1, 32),
            "expected a constant (number, string or :parameter), found identifier 'a'",
        ),
        (
            "SELECT a FROM r BEGIN END NOW",
            (1, 23),
            "expected NOW, a number or a :parameter, found END",
        ),
        (
            "SELECT a FROM r BEGIN NOW + x END NOW",
            (1, 29),
            "expected a number or a :parameter after 'NOW +', found identifier 'x'",
        ),
        ("SELECT a FROM r BEGIN 0 END NOW NOW", (1, 33), "expected end of query, found NOW"),
        ("SELECT a FROM r WHERE 'x' || name = 'y'", (1, 27), "unexpected character '|'"),
        ("SELECT r.* FROM r", (1, 10), "expected an attribute name after 'r.', found '*'"),
        ("SELECT * * FROM r", (1, 10), "expected ',' or FROM, found '*'"),
        ("SELECT - a FROM r", (1, 8), "expected a column, an aggregate or '*', found '-'"),
    ],
)
def test_syntax_errors(text: str, position: tuple[int, int], message: str) -> None:
    err = syntax_error(text)
    assert isinstance(err, QuerySyntaxError)
    assert ((err.line, err.column), err.message, err.text) == (position, message, text)


@pytest.mark.parametrize(
    ("text", "position", "hint"),
    [
        ("SELECT a FROM r WHERE a = 1 OR a = 2", (1, 29), "register one query per alternative"),
        ("SELECT a FROM r WHERE NOT a = 1", (1, 23), "write the opposite comparison"),
        ("SELECT a FROM r WHERE a NOT IN (1)", (1, 25), "a != 1 AND a != 2"),
        ("SELECT a FROM r WHERE a IN (SELECT a FROM s)", (1, 28), "subqueries"),
        ("SELECT a FROM (SELECT a FROM s)", (1, 15), "subqueries"),
        ("SELECT (SELECT a FROM s) FROM r", (1, 8), "subqueries"),
        ("SELECT a FROM r WHERE ((SELECT 1) = a)", (1, 24), "subqueries"),
        ("SELECT a FROM r GROUP BY a HAVING a > 1", (1, 28), "HAVING is not supported"),
        ("SELECT a FROM r BEGIN 0 END NOW ORDER BY a", (1, 33), "ORDER BY is not supported"),
        ("SELECT a FROM r BEGIN 0 END NOW LIMIT 1", (1, 33), "LIMIT is not supported"),
        ("SELECT DISTINCT a FROM r", (1, 8), "DISTINCT is not supported"),
        ("SELECT a FROM r JOIN s", (1, 17), "put the join condition in WHERE"),
        ("SELECT a FROM r BEGIN 0 END NOW UNION", (1, 33), "UNION is not supported"),
        ("SELECT a FROM r WHERE a IS NULL", (1, 25), "NULL is not supported"),
        ("SELECT a FROM r WHERE a = NULL", (1, 27), "NULL is not supported"),
        ("SELECT a FROM r WHERE a LIKE 'x'", (1, 25), "LIKE is not supported"),
        ("SELECT a FROM r WHERE t > NOW", (1, 27), "NOW is only allowed in BEGIN and END"),
        ("SELECT a FROM r WHERE f(a) = 1", (1, 23), "functions and aggregates"),
        ("SELECT a FROM r WHERE a < b * 2", (1, 29), "column + constant"),
        ("SELECT a FROM r WHERE a < b / 2", (1, 29), "column + constant"),
        ("SELECT a * 2 FROM r", (1, 10), "column + constant"),
        ("SELECT COUNT(a) - 1 FROM r", (1, 17), "column + constant"),
        ("SELECT a FROM r BEGIN 0 END NOW * 2", (1, 33), "column + constant"),
        ("SELECT SUM(a) FROM r GROUP BY a, b", (1, 32), "more than one column"),
    ],
)
def test_unsupported_constructs_are_refused_while_parsing(
    text: str, position: tuple[int, int], hint: str
) -> None:
    err = syntax_error(text)
    assert isinstance(err, UnsupportedQueryError)
    assert (err.line, err.column) == position
    assert hint in err.message


def test_syntax_error_renders_a_caret() -> None:
    err = syntax_error("SELECT a\nFROM r\nWHERE a = = 1")
    assert str(err) == (
        "line 3, column 11: expected a column, a constant or a :parameter, found '='\n"
        "  WHERE a = = 1\n"
        "            ^"
    )
