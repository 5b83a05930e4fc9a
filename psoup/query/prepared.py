"""Prepared queries: a query text parsed once and bound again for each parameter set.

A client that registers one text with many parameter values (Linear Road: three standing
queries per vehicle, ``vid = :v``) pays the parser once per text and, for most texts, the
binder once per set of parameter types. ``Prepared.bind(params, schemas)`` always returns
what ``compile_query(text, params, schemas)`` returns, or raises the error it raises; the
property tests in tests/test_prepared.py compare the two on random texts and values.

How: a *simple* template is one whose every parameter is the direct operand of a
comparison with a column (``col op :p``, ``:p op col``, ``col BETWEEN :lo AND :hi``).
Then a parameter's value lands unchanged (normalised by ``param_value``) in one
``Compare`` factor at a position fixed by the text, and no check of the binder depends
on the value, only on its type. So the first successful bind for a *signature* (the
parameters' names and types) is kept, and the next one with that signature copies it
with the new values in place: O(factors), no parse, no name resolution. Everything else
(a parameter in an IN list, a window bound, an offset, under a minus; a new signature;
a value that is refused; a stream declared anew) goes through the binder, which also
gives every error its message and position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from psoup.query import ast
from psoup.query.binder import OPEN, bind, param_value
from psoup.query.spec import Compare, QuerySpec
from psoup.values import Schema

#: Signatures a template keeps bound specs for (a client using one template with more
#: distinct sets of parameter names and types than this binds fully past it).
MAX_SIGNATURES = 64


def _params(node: object) -> Iterator[ast.Param]:
    """Every ``Param`` node under ``node``, in the order written."""
    if isinstance(node, ast.Param):
        yield node
    elif isinstance(node, tuple):
        for item in node:
            yield from _params(item)
    elif isinstance(node, ast.Node):
        for f in dataclasses.fields(node):
            if f.compare:  # positions are not children
                yield from _params(getattr(node, f.name))


def _slots(tree: ast.Query) -> tuple[tuple[int, str], ...] | None:
    """``(factor index, parameter name)`` for each parameter of a simple template (see
    the module docstring), in the order of the bound factors; None when the template is
    not simple. Mirrors ``_Binder.bind_factor``: a comparison gives one factor, BETWEEN
    two (``>=`` low, ``<=`` high), IN one."""
    slots: list[tuple[int, str]] = []
    index = 0
    for node in tree.where:
        if isinstance(node, ast.Comparison):
            left, right = node.left, node.right
            if isinstance(left, ast.Column) and isinstance(right, ast.Param):
                slots.append((index, right.name))
            elif isinstance(left, ast.Param) and isinstance(right, ast.Column):
                slots.append((index, left.name))
            index += 1
        elif isinstance(node, ast.Between):
            for k, bound in enumerate((node.low, node.high)):
                if isinstance(bound, ast.Param):
                    slots.append((index + k, bound.name))
            index += 2
        else:
            index += 1
    return tuple(slots) if len(slots) == sum(1 for _ in _params(tree)) else None


class Prepared:
    """One query text, parsed; bound per parameter set by ``bind``.

    Not thread-safe: its owner (the engine) calls it under its lock.
    """

    def __init__(self, text: str, tree: ast.Query, schemas: Mapping[str, Schema]):
        self.text = text
        self.tree = tree
        #: The parameters' names, each once, in the order written.
        self.params: tuple[str, ...] = tuple(dict.fromkeys(p.name for p in _params(tree)))
        self._streams = tuple(t.name for t in tree.sources)
        #: The streams it reads, each once, in FROM order.
        self.streams: tuple[str, ...] = tuple(dict.fromkeys(self._streams))
        self._schemas = self._schemas_of(schemas)
        self._slots = _slots(tree)
        self._specs: dict[tuple, QuerySpec] = {}

    def _schemas_of(self, schemas: Mapping[str, Schema]) -> tuple[Schema | None, ...]:
        return tuple(schemas.get(s) for s in self._streams)

    def check(self, schemas: Mapping[str, Schema]) -> QuerySpec:
        """Bind with every parameter open: raises the ``QueryError`` of anything wrong
        that no parameter value could put right (names, the types of literals and
        columns, unsupported shapes), at its position. The spec it returns holds
        placeholders where the parameters go: only for looking at."""
        return bind(self.tree, self.text, OPEN, schemas)

    def bind(self, params: Mapping[str, object] | None, schemas: Mapping[str, Schema]) -> QuerySpec:
        """``compile_query(self.text, params, schemas)``: the bound query, or the same
        ``QueryError``. O(factors) for a simple template and a signature bound before,
        otherwise a full bind."""
        params = params or {}
        values = self._values(params)
        if values is not None:
            sig = tuple(sorted((name, type(v)) for name, v in values.items()))
            schemas_now = self._schemas_of(schemas)
            if schemas_now != self._schemas:
                # A stream declared anew since: what was bound against the old one goes.
                self._specs.clear()
                self._schemas = schemas_now
            base = self._specs.get(sig)
            if base is not None:
                return self._with_values(base, values)
        spec = bind(self.tree, self.text, params, schemas)
        if values is not None and len(self._specs) < MAX_SIGNATURES:
            self._specs[sig] = spec
        return spec

    def _values(self, params: Mapping[str, object]) -> dict[str, object] | None:
        """Each parameter's value as a query holds it (``param_value``); None when the
        template is not simple or a value would be refused (the binder then says why).
        Their names and types are the signature a bound spec is kept under."""
        if self._slots is None:
            return None
        values = {}
        for name, value in params.items():
            v = param_value(value)
            if v is None:
                return None
            values[name] = v
        return values

    def _with_values(self, base: QuerySpec, values: Mapping[str, object]) -> QuerySpec:
        assert self._slots is not None
        factors = list(base.factors)
        for index, name in self._slots:
            f = factors[index]
            assert isinstance(f, Compare)
            factors[index] = Compare(f.col, f.op, values[name])
        return QuerySpec(base.text, base.sources, tuple(factors), base.select, base.window,
                         base.group_by)  # fmt: skip
