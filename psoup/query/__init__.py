"""The query language: text → tokens → syntax tree → bound ``QuerySpec``.

One module per phase, in pipeline order: ``lexer`` (tokens with positions), ``parser``
(recursive descent → ``ast``), ``binder`` (names, types, parameters, ``*``, normal form →
``spec``). docs/QUERY_LANGUAGE.md describes the language for users.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from psoup.query.ast import Query
from psoup.query.binder import bind, canonical
from psoup.query.parser import parse
from psoup.query.prepared import Prepared
from psoup.query.spec import QuerySpec
from psoup.values import Schema

__all__ = ["Prepared", "QuerySpec", "canonical", "compile_query", "parse", "prepare"]


def compile_query(
    text: str,
    params: Mapping[str, int | float | str] | None,
    schemas: Mapping[str, Schema],
) -> QuerySpec:
    """Parse and bind ``text`` against the streams in ``schemas`` (name → Schema).

    Raises a ``psoup.errors.QueryError`` subclass, with line and column, when the query
    cannot be registered.
    """
    tree: Query = _parse_cached(text)
    return bind(tree, text, params or {}, schemas)


def prepare(text: str, schemas: Mapping[str, Schema]) -> Prepared:
    """``text`` parsed once, to be bound per parameter set (``Prepared.bind``, which
    gives what ``compile_query`` gives). Raises ``QuerySyntaxError`` for text that does
    not parse; ``Prepared.check`` finds the rest of what no parameter value can mend."""
    return Prepared(text, _parse_cached(text), schemas)


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Query:
    # Syntax trees are immutable, and clients register one text with many parameter sets
    # (one standing query per vehicle), so parsing once per text pays.
    return parse(text)
