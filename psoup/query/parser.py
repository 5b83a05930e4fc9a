"""Phase 2 of the query pipeline: tokens → unbound syntax tree (``psoup.query.ast``).

A hand-written recursive-descent parser, one method per grammar rule (the EBNF is in
docs/QUERY_LANGUAGE.md). No parser library: the grammar is about fifteen LL(1) rules
with one level of binary operators (``+``/``-``), so a generator would save little code,
while writing it by hand keeps every error message ours ("expected BEGIN, found end of
query", at the exact token), costs no dependency and reads top to bottom like the grammar.

The parser is slightly more lenient than the language where that gives a better error:
operands of a comparison may be any ``+``/``-`` chain of columns and constants, and the
binder refuses the shapes psoup does not run. SQL constructs psoup does not support (OR,
NOT, subqueries, HAVING, ORDER BY, LIMIT, DISTINCT, JOIN ... ON, UNION, NULL, LIKE,
functions in WHERE, ``*`` and ``/``) are recognised where they would appear and refused
with ``UnsupportedQueryError`` and a hint instead of a bare syntax error.
"""

from __future__ import annotations

from psoup.errors import QueryError, QuerySyntaxError, UnsupportedQueryError
from psoup.query import ast
from psoup.query.ast import Pos
from psoup.query.lexer import Kind, Token, tokenize
from psoup.query.spec import OPS

JOIN_ON = (
    "JOIN ... ON is not supported: list both streams in FROM and put the join condition "
    "in WHERE (FROM r, s WHERE r.a = s.b)"
)
#: Keywords psoup recognises only to refuse them, with what to do instead.
UNSUPPORTED_KEYWORDS: dict[str, str] = {
    "OR": "OR is not supported: a query is a conjunction of factors; "
    "register one query per alternative",
    "NOT": "NOT is not supported: write the opposite comparison instead "
    "(a != 1 for NOT a = 1, a != 1 AND a != 2 for a NOT IN (1, 2))",
    "HAVING": "HAVING is not supported: filter the aggregated rows in the client",
    "ORDER": "ORDER BY is not supported: sort the result in the client",
    "LIMIT": "LIMIT is not supported: keep the rows you need in the client",
    "DISTINCT": "DISTINCT is not supported: remove duplicates in the client",
    "JOIN": JOIN_ON,
    "ON": JOIN_ON,
    "UNION": "UNION is not supported: register one query per part",
    "NULL": "NULL is not supported: stream attributes always have a value",
    "IS": "IS [NOT] NULL is not supported: stream attributes always have a value",
    "LIKE": "LIKE is not supported: compare strings with =, != or IN",
}
NOW_IN_WHERE = "NOW is only allowed in BEGIN and END: the window restricts time"
SUBQUERY = "subqueries are not supported: register the inner query on its own"
ARITHMETIC = (
    "arithmetic is supported only as column + constant or column - constant "
    "on the right of a comparison with a column (a < b + 5)"
)
#: Tokens that can end an operand.
OPERAND_KINDS = frozenset({Kind.IDENT, Kind.INT, Kind.FLOAT, Kind.STRING, Kind.PARAM})

MAX_NESTING = 64  # parentheses in WHERE: far more than a conjunction needs, far below the stack


class Parser:
    """Parses one query text. Use ``parse(text)``."""

    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0  # parentheses open around the current factor

    # --- token helpers ----------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        tok = self.tok
        if tok.kind is not Kind.EOF:
            self.i += 1
        return tok

    def accept_keyword(self, word: str) -> Token | None:
        return self.advance() if self.tok.is_keyword(word) else None

    def accept_symbol(self, symbol: str) -> Token | None:
        return self.advance() if self.tok.is_symbol(symbol) else None

    def expect_keyword(self, word: str, expected: str | None = None) -> Token:
        if not self.tok.is_keyword(word):
            raise self.unexpected(expected or word)
        return self.advance()

    def expect_symbol(self, symbol: str, expected: str | None = None) -> Token:
        if not self.tok.is_symbol(symbol):
            raise self.unexpected(expected or f"'{symbol}'")
        return self.advance()

    def expect_ident(self, expected: str) -> Token:
        if self.tok.kind is not Kind.IDENT:
            raise self.unexpected(expected)
        return self.advance()

    def error(self, cls: type[QueryError], message: str, tok: Token) -> QueryError:
        return cls(message, tok.line, tok.column, self.text)

    def unexpected(self, expected: str) -> QueryError:
        """The error for the current token where ``expected`` should be.

        A construct psoup recognises but does not run gives ``UnsupportedQueryError``
        with a hint; anything else ``QuerySyntaxError("expected X, found Y")``.
        """
        tok = self.tok
        if tok.kind is Kind.KEYWORD and tok.value in UNSUPPORTED_KEYWORDS:
            return self.error(UnsupportedQueryError, UNSUPPORTED_KEYWORDS[str(tok.value)], tok)
        if tok.is_keyword("SELECT") and self.i > 0 and self.tokens[self.i - 1].is_symbol("("):
            return self.error(UnsupportedQueryError, SUBQUERY, self.tokens[self.i - 1])
        if tok.is_symbol("(") and self.peek().is_keyword("SELECT"):
            return self.error(UnsupportedQueryError, SUBQUERY, tok)
        if tok.is_symbol("+", "-", "*", "/") and self.after_operand():
            return self.error(UnsupportedQueryError, ARITHMETIC, tok)
        return self.error(QuerySyntaxError, f"expected {expected}, found {tok.describe()}", tok)

    def after_operand(self) -> bool:
        """Whether the previous token ends an operand (so ``+ - * /`` is arithmetic)."""
        if self.i == 0:
            return False
        prev = self.tokens[self.i - 1]
        return prev.kind in OPERAND_KINDS or prev.is_symbol(")") or prev.is_keyword("NOW")

    @staticmethod
    def pos(tok: Token) -> Pos:
        return Pos(tok.line, tok.column)

    # --- grammar rules ----------------------------------------------------------------

    def query(self) -> ast.Query:
        """query := SELECT items FROM tables [WHERE conjunction] [GROUP BY column]
        BEGIN bound END bound [';']"""
        start = self.expect_keyword("SELECT")
        select = self.select_list()
        self.expect_keyword("FROM")
        sources = self.from_list()
        where: tuple[ast.Factor, ...] = ()
        group_by = None
        if self.accept_keyword("WHERE"):
            where = tuple(self.conjunction())
        if self.tok.is_keyword("GROUP"):
            group_by = self.group_by()
        if not self.tok.is_keyword("BEGIN"):
            # At the end of the text say what is missing, elsewhere what could go here.
            if self.tok.kind is Kind.EOF or group_by is not None:
                raise self.unexpected("BEGIN")
            before = ["AND", "GROUP BY"] if where else ["','", "WHERE", "GROUP BY"]
            raise self.unexpected(f"{', '.join(before)} or BEGIN")
        self.advance()
        begin = self.bound()
        self.expect_keyword("END")
        end = self.bound()
        self.accept_symbol(";")
        if self.tok.is_keyword("GROUP"):
            raise self.error(QuerySyntaxError, "GROUP BY must come before BEGIN", self.tok)
        if self.tok.kind is not Kind.EOF:
            raise self.unexpected("end of query")
        return ast.Query(select, sources, where, begin, end, group_by, pos=self.pos(start))

    def select_list(self) -> tuple[ast.Item, ...]:
        """items := item (',' item)*"""
        items = [self.item()]
        while self.accept_symbol(","):
            items.append(self.item())
        if not self.tok.is_keyword("FROM"):
            raise self.unexpected("',' or FROM")
        return tuple(items)

    def item(self) -> ast.Item:
        """item := '*' | (column | aggregate) [AS identifier]"""
        tok = self.tok
        if self.accept_symbol("*"):
            return ast.Item(ast.Star(pos=self.pos(tok)), pos=self.pos(tok))
        if tok.kind is not Kind.IDENT:
            raise self.unexpected("a column, an aggregate or '*'")
        expr: ast.Column | ast.Func
        expr = self.func() if self.peek().is_symbol("(") else self.column()
        if self.accept_keyword("AS"):
            name = self.expect_ident("a name after AS")
            return ast.Item(expr, str(name.value), pos=self.pos(tok), alias_pos=self.pos(name))
        return ast.Item(expr, pos=self.pos(tok))

    def func(self) -> ast.Func:
        """aggregate := identifier '(' ('*' | column) ')'"""
        name = self.advance()
        self.expect_symbol("(")
        arg: ast.Column | ast.Star
        star = self.accept_symbol("*")
        if star:
            arg = ast.Star(pos=self.pos(star))
        elif self.tok.kind is Kind.IDENT:
            arg = self.column()
        else:
            raise self.unexpected("a column or '*'")
        self.expect_symbol(")")
        return ast.Func(str(name.value), arg, pos=self.pos(name))

    def column(self) -> ast.Column:
        """column := identifier ['.' identifier]"""
        first = self.expect_ident("a column")
        if self.accept_symbol("."):
            name = self.expect_ident(f"an attribute name after '{first.value}.'")
            return ast.Column(
                str(first.value), str(name.value), pos=self.pos(first), name_pos=self.pos(name)
            )
        return ast.Column(None, str(first.value), pos=self.pos(first), name_pos=self.pos(first))

    def from_list(self) -> tuple[ast.Table, ...]:
        """tables := table (',' table)*"""
        tables = [self.table()]
        while self.accept_symbol(","):
            tables.append(self.table())
        return tuple(tables)

    def table(self) -> ast.Table:
        """table := identifier [[AS] identifier]"""
        name = self.expect_ident("a stream name")
        alias = None
        if self.accept_keyword("AS"):
            alias = self.expect_ident("an alias after AS")
        elif self.tok.kind is Kind.IDENT:
            alias = self.advance()
        if alias is None:
            return ast.Table(str(name.value), pos=self.pos(name), alias_pos=self.pos(name))
        return ast.Table(
            str(name.value), str(alias.value), pos=self.pos(name), alias_pos=self.pos(alias)
        )

    def conjunction(self) -> list[ast.Factor]:
        """conjunction := factor (AND factor)*"""
        factors = self.factor()
        while self.accept_keyword("AND"):
            factors.extend(self.factor())
        return factors

    def factor(self) -> list[ast.Factor]:
        """factor := '(' conjunction ')' | operand (op operand | BETWEEN const AND const
        | IN '(' const (',' const)* ')')"""
        if self.tok.is_symbol("(") and not self.peek().is_keyword("SELECT"):
            if self.depth == MAX_NESTING:
                raise self.error(
                    QuerySyntaxError,
                    f"parentheses nested deeper than {MAX_NESTING} levels",
                    self.tok,
                )
            self.advance()
            self.depth += 1
            factors = self.conjunction()
            self.depth -= 1
            self.expect_symbol(")", "')' or AND")
            return factors
        start = self.tok
        left = self.operand()
        if self.tok.kind is Kind.SYMBOL and self.tok.value in OPS:
            op = str(self.advance().value)
            return [ast.Comparison(left, op, self.operand(), pos=self.pos(start))]
        if self.accept_keyword("BETWEEN"):
            low = self.const()
            self.expect_keyword("AND", "AND between the two BETWEEN bounds")
            high = self.const()
            return [ast.Between(left, low, high, pos=self.pos(start))]
        if self.accept_keyword("IN"):
            self.expect_symbol("(", "'(' after IN")
            values = [self.const()]
            while self.accept_symbol(","):
                values.append(self.const())
            self.expect_symbol(")", "',' or ')'")
            return [ast.In(left, tuple(values), pos=self.pos(start))]
        raise self.unexpected("a comparison operator (<, <=, =, >=, >, !=), BETWEEN or IN")

    def operand(self) -> ast.Expr:
        """operand := term (('+' | '-') term)*"""
        expr = self.term()
        while self.tok.is_symbol("+", "-"):
            op = self.advance()
            expr = ast.Arith(expr, str(op.value), self.term(), pos=self.pos(op))
        return expr

    def term(self) -> ast.Expr:
        """term := column | const"""
        if self.tok.kind is Kind.IDENT:
            if self.peek().is_symbol("("):
                raise self.error(
                    UnsupportedQueryError,
                    "functions and aggregates are not allowed in WHERE",
                    self.tok,
                )
            return self.column()
        if self.tok.is_keyword("NOW"):
            raise self.error(UnsupportedQueryError, NOW_IN_WHERE, self.tok)
        return self.const("a column, a constant or a :parameter")

    def const(self, expected: str = "a constant (number, string or :parameter)") -> ast.Expr:
        """const := ['-'] (number | string | parameter)"""
        tok = self.tok
        if self.accept_symbol("-"):
            if self.tok.kind in (Kind.INT, Kind.FLOAT):
                number = self.advance()
                return ast.Literal(-number.value, pos=self.pos(tok))  # type: ignore[operator]
            if self.tok.kind in (Kind.STRING, Kind.PARAM):
                return ast.Neg(self.const(expected), pos=self.pos(tok))
            raise self.unexpected("a number or a :parameter after '-'")
        if tok.kind in (Kind.INT, Kind.FLOAT, Kind.STRING):
            self.advance()
            return ast.Literal(tok.value, pos=self.pos(tok))
        if tok.kind is Kind.PARAM:
            self.advance()
            return ast.Param(str(tok.value), pos=self.pos(tok))
        raise self.unexpected(expected)

    def group_by(self) -> ast.Column:
        """group_by := GROUP BY column"""
        self.advance()
        self.expect_keyword("BY", "BY after GROUP")
        column = self.column()
        if self.tok.is_symbol(","):
            raise self.error(
                UnsupportedQueryError,
                "GROUP BY on more than one column is not supported",
                self.tok,
            )
        return column

    def bound(self) -> ast.Expr:
        """bound := NOW [('+' | '-') const] | const"""
        tok = self.tok
        if self.accept_keyword("NOW"):
            now = ast.Now(pos=self.pos(tok))
            if self.tok.is_symbol("+", "-"):
                op = self.advance()
                offset = self.const(f"a number or a :parameter after 'NOW {op.value}'")
                return ast.Arith(now, str(op.value), offset, pos=self.pos(op))
            return now
        return self.const("NOW, a number or a :parameter")


def parse(text: str) -> ast.Query:
    """The syntax tree of ``text``. Raises ``QuerySyntaxError`` when the text does not
    follow the grammar and ``UnsupportedQueryError`` for SQL that psoup does not run.

    >>> parse("SELECT * FROM r BEGIN NOW - 10 END NOW").sources
    (Table(name='r', alias=None),)
    """
    return Parser(text).query()
