"""Phase 1 of the query pipeline: query text → tokens.

Every token keeps the 1-based line and column where it starts, so that later phases can
point at it in an error. Lines are counted exactly as ``str.splitlines`` counts them,
which is what ``QueryError`` uses to print the offending line under the message.

Lexical rules (docs/QUERY_LANGUAGE.md has the user's version):

* keywords are case-insensitive and reserved (``KEYWORDS``); a keyword token's value is
  its upper-case spelling;
* identifiers are ``[A-Za-z_][A-Za-z0-9_]*`` and case-sensitive;
* numbers are ``digits [. digits] [e [+-] digits]`` (also ``.5``); a ``.`` or an
  exponent makes a float, else an int;
* strings are single-quoted, a doubled quote ``''`` stands for one quote;
* ``:name`` is a named parameter;
* ``--`` starts a comment that runs to the end of the line;
* ``<>`` is read as ``!=``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from enum import Enum

from psoup.errors import QuerySyntaxError

#: Reserved words. Some only exist so that the parser can refuse them with a hint.
KEYWORDS: frozenset[str] = frozenset(
    {
        "SELECT", "FROM", "WHERE", "AND", "AS", "BEGIN", "END", "NOW", "GROUP", "BY",
        "BETWEEN", "IN",
        # not supported; recognised for a helpful error
        "OR", "NOT", "HAVING", "ORDER", "LIMIT", "DISTINCT", "JOIN", "ON", "UNION",
        "NULL", "IS", "LIKE",
    }
)  # fmt: skip

#: Punctuation and operators, longest first so that ``<=`` wins over ``<``.
SYMBOLS: tuple[str, ...] = (
    "<=",
    ">=",
    "!=",
    "<>",
    "<",
    ">",
    "=",
    "(",
    ")",
    ",",
    ".",
    "*",
    "+",
    "-",
    "/",
    ";",
)
#: Spellings that mean the same symbol.
SYMBOL_ALIASES: dict[str, str] = {"<>": "!="}


class Kind(Enum):
    """What a token is."""

    IDENT = "identifier"
    KEYWORD = "keyword"
    INT = "int"
    FLOAT = "float"
    STRING = "string"
    PARAM = "parameter"
    SYMBOL = "symbol"
    EOF = "end of query"


@dataclass(frozen=True)
class Token:
    """One token. ``value`` is the identifier, the keyword in upper case, the number, the
    string's content, the parameter's name (without ``:``) or the normalised symbol;
    ``text`` is the token as written."""

    kind: Kind
    value: str | int | float
    text: str
    line: int
    column: int

    def is_keyword(self, *words: str) -> bool:
        return self.kind is Kind.KEYWORD and self.value in words

    def is_symbol(self, *symbols: str) -> bool:
        return self.kind is Kind.SYMBOL and self.value in symbols

    def describe(self) -> str:
        """The token as an error message names it: ``identifier 'x'``, ``WHERE``, ..."""
        if self.kind is Kind.EOF:
            return "end of query"
        if self.kind is Kind.KEYWORD:
            return str(self.value)
        if self.kind is Kind.SYMBOL:
            return f"'{self.text}'"
        if self.kind is Kind.PARAM:
            return f"parameter {self.text}"
        text = self.text if len(self.text) <= 30 else self.text[:27] + "..."
        if self.kind is Kind.IDENT:
            return f"identifier '{text}'"
        if self.kind is Kind.STRING:
            return f"string {text}"
        return f"number {text}"


def _is_ident_start(ch: str) -> bool:
    return ch == "_" or ("a" <= ch <= "z") or ("A" <= ch <= "Z")


def _is_ident_part(ch: str) -> bool:
    return _is_ident_start(ch) or _is_digit(ch)


def _is_digit(ch: str) -> bool:
    return "0" <= ch <= "9"


class _Lexer:
    def __init__(self, text: str):
        self.text = text
        # Offsets where each line starts, as str.splitlines sees lines.
        self.line_starts = [0]
        for line in text.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.tokens: list[Token] = []
        self.end_of_last = 0

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset) - 1
        line = min(line, max(len(self.line_starts) - 2, 0))
        return line + 1, offset - self.line_starts[line] + 1

    def error(self, message: str, offset: int) -> QuerySyntaxError:
        line, column = self.position(offset)
        return QuerySyntaxError(message, line, column, self.text)

    def add(self, kind: Kind, value: str | int | float, start: int, end: int) -> None:
        line, column = self.position(start)
        self.tokens.append(Token(kind, value, self.text[start:end], line, column))
        self.end_of_last = end

    def run(self) -> list[Token]:
        text, i, n = self.text, 0, len(self.text)
        while i < n:
            ch = text[i]
            if ch.isspace():
                i += 1
            elif text.startswith("--", i):
                # skip to the start of the next line (the last entry is len(text))
                i = self.line_starts[bisect.bisect_right(self.line_starts, i)]
            elif _is_ident_start(ch):
                i = self.word(i)
            elif _is_digit(ch) or (ch == "." and i + 1 < n and _is_digit(text[i + 1])):
                i = self.number(i)
            elif ch == "'":
                i = self.string(i)
            elif ch == ":":
                i = self.param(i)
            else:
                i = self.symbol(i)
        line, column = self.position(self.end_of_last) if self.tokens else (1, 1)
        self.tokens.append(Token(Kind.EOF, "", "", line, column))
        return self.tokens

    def word(self, start: int) -> int:
        end = start + 1
        while end < len(self.text) and _is_ident_part(self.text[end]):
            end += 1
        word = self.text[start:end]
        if word.upper() in KEYWORDS:
            self.add(Kind.KEYWORD, word.upper(), start, end)
        else:
            self.add(Kind.IDENT, word, start, end)
        return end

    def number(self, start: int) -> int:
        text, n = self.text, len(self.text)
        end = start
        while end < n and _is_digit(text[end]):
            end += 1
        is_float = False
        if end < n and text[end] == ".":
            is_float = True
            end += 1
            while end < n and _is_digit(text[end]):
                end += 1
        if end < n and text[end] in "eE":
            is_float = True
            end += 1
            if end < n and text[end] in "+-":
                end += 1
            if not (end < n and _is_digit(text[end])):
                raise self.error("malformed number: expected digits after the exponent", start)
            while end < n and _is_digit(text[end]):
                end += 1
        if end < n and (_is_ident_part(text[end]) or text[end] == "."):
            raise self.error(f"malformed number {text[start : end + 1]!r}", start)
        literal = text[start:end]
        if is_float:
            value = float(literal)
            if not math.isfinite(value):
                raise self.error(f"number {literal} is too large", start)
            self.add(Kind.FLOAT, value, start, end)
        else:
            self.add(Kind.INT, int(literal), start, end)
        return end

    def string(self, start: int) -> int:
        text, n = self.text, len(self.text)
        parts: list[str] = []
        i = start + 1
        while True:
            close = text.find("'", i)
            if close < 0:
                raise self.error("unterminated string: expected a closing quote (')", start)
            parts.append(text[i:close])
            if close + 1 < n and text[close + 1] == "'":
                parts.append("'")
                i = close + 2
                continue
            self.add(Kind.STRING, "".join(parts), start, close + 1)
            return close + 1

    def param(self, start: int) -> int:
        end = start + 1
        if end >= len(self.text) or not _is_ident_start(self.text[end]):
            raise self.error("expected a parameter name after ':' (for example :vid)", start)
        while end < len(self.text) and _is_ident_part(self.text[end]):
            end += 1
        self.add(Kind.PARAM, self.text[start + 1 : end], start, end)
        return end

    def symbol(self, start: int) -> int:
        for sym in SYMBOLS:
            if self.text.startswith(sym, start):
                self.add(Kind.SYMBOL, SYMBOL_ALIASES.get(sym, sym), start, start + len(sym))
                return start + len(sym)
        ch = self.text[start]
        hint = " (strings use single quotes)" if ch == '"' else ""
        raise self.error(f"unexpected character {ch!r}{hint}", start)


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with one ``Kind.EOF`` token.

    The EOF token sits just after the last real token, so an error "found end of query"
    points where the missing part should go. Raises ``QuerySyntaxError`` on a character
    that starts no token, an unterminated string or a malformed number. O(n).

    >>> [t.text for t in tokenize("select a<>1 -- note")]
    ['select', 'a', '<>', '1', '']
    """
    return _Lexer(text).run()
