"""Result construction at invoke: projection and aggregation over the matched rows.

Projections are done just in time, as in seeds/002 section 3.3: the window's matched row
numbers come from the strategy, the values from the Data SteMs, column by column.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from psoup.errors import ResultOverflowError
from psoup.query.spec import QuerySpec, SelectItem
from psoup.values import DTYPES, INT64_MAX, INT64_MIN

Fetch = Callable[[SelectItem], np.ndarray]


def project(spec: QuerySpec, n: int, fetch: Fetch) -> list[tuple]:
    """Rows of the plain select items; ``fetch(item)`` returns the item's n values.
    O(n x items) Python objects: the columnar form is ``project_columns``."""
    if not n:
        return []
    return list(zip(*(c.tolist() for c in project_columns(spec, n, fetch)), strict=True))


def project_columns(spec: QuerySpec, n: int, fetch: Fetch) -> list[np.ndarray]:
    """The plain select items' ``n`` values each, as arrays (what ``Result(arrays=)``
    takes). O(items) numpy calls, no Python object per value."""
    if not n:
        return [np.empty(0, dtype=DTYPES[item.type]) for item in spec.select]
    return [fetch(item)[:n] for item in spec.select]


def aggregate(
    spec: QuerySpec, n: int, fetch: Fetch, group: np.ndarray | None = None
) -> list[tuple]:
    """Rows of an aggregate query over ``n`` matched rows.

    Without GROUP BY one row (COUNT of nothing is 0, the other aggregates None); with it
    one row per distinct group value, ascending, none when ``n`` is 0. O(n log n) at most
    (sorting by group), O(n) without GROUP BY, all in numpy.
    """
    if group is None:
        return [tuple(_agg(item, n, fetch) for item in spec.select)]
    if not n:
        return []
    order = np.argsort(group, kind="stable")
    g = group[order]
    starts = np.concatenate(([0], np.flatnonzero(g[1:] != g[:-1]) + 1))
    keys = g[starts].tolist()
    counts = np.diff(np.concatenate((starts, [n])))
    cols = []
    for item in spec.select:
        if item.func is None:
            cols.append(keys)
        elif item.func == "COUNT":
            cols.append(counts.tolist())
        else:
            vals = fetch(item)[order]
            cols.append(_grouped(item, vals, starts, counts))
    return list(zip(*cols, strict=True))


def _agg(item: SelectItem, n: int, fetch: Fetch):
    if item.func == "COUNT":
        return n
    if not n:
        return None
    vals = fetch(item)
    if item.func == "SUM":
        if vals.dtype.kind == "i":
            return _checked(item, _int_sum(vals))
        return vals.sum().item() if vals.dtype != object else sum(vals.tolist())
    if item.func == "AVG":
        return (_int_sum(vals) if vals.dtype.kind == "i" else float(vals.sum())) / n
    if item.func == "MIN":
        return vals.min().item() if vals.dtype != object else min(vals.tolist())
    return vals.max().item() if vals.dtype != object else max(vals.tolist())


def _may_wrap(vals: np.ndarray, counts: np.ndarray | int) -> bool:
    """Whether a 64-bit sum of ``counts`` of ``vals`` could wrap around. O(n)."""
    if not len(vals):
        return False
    big = max(abs(int(vals.min())), abs(int(vals.max())))
    return big * int(np.max(counts)) > INT64_MAX


def _int_sum(vals: np.ndarray) -> int:
    """The exact sum of int64 ``vals``: numpy's when it cannot wrap, else Python's."""
    return sum(vals.tolist()) if _may_wrap(vals, len(vals)) else int(vals.sum())


def _checked(item: SelectItem, total: int) -> int:
    if not INT64_MIN <= total <= INT64_MAX:
        raise ResultOverflowError(
            f"column {item.name!r}: the {item.func} is {total}, beyond a 64-bit integer's "
            f"range [{INT64_MIN}, {INT64_MAX}]"
        )
    return total


def _grouped(item: SelectItem, vals: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> list:
    if vals.dtype == object:
        ends = np.concatenate((starts[1:], [len(vals)])).tolist()
        fn = {"MIN": min, "MAX": max}[item.func]  # SUM/AVG of str is refused by the binder
        return [fn(vals[a:z].tolist()) for a, z in zip(starts.tolist(), ends, strict=True)]
    if item.func in ("SUM", "AVG") and vals.dtype.kind == "i" and _may_wrap(vals, counts):
        ends = np.concatenate((starts[1:], [len(vals)])).tolist()
        sums = [sum(vals[a:z].tolist()) for a, z in zip(starts.tolist(), ends, strict=True)]
        if item.func == "AVG":
            return [s / c for s, c in zip(sums, counts.tolist(), strict=True)]
        return [_checked(item, s) for s in sums]
    if item.func == "SUM":
        return np.add.reduceat(vals, starts).tolist()
    if item.func == "AVG":
        return (np.add.reduceat(vals, starts).astype(np.float64) / counts).tolist()
    if item.func == "MIN":
        return np.minimum.reduceat(vals, starts).tolist()
    return np.maximum.reduceat(vals, starts).tolist()


# -- partial states, for a sharded engine's gather (psoup/shard/gather.py) -------------------


def partial(spec: QuerySpec, n: int, fetch: Fetch, group: np.ndarray | None = None) -> dict:
    """An aggregate's mergeable state over ``n`` matched rows: group key (None without
    GROUP BY) -> one state per select item: COUNT its count, SUM and AVG ``[exact sum,
    count]``, MIN and MAX the value (None over no rows), a plain (group) column None.
    ``merge`` of the states of disjoint row sets gives ``aggregate`` of their union.
    O(n log n) at most, as ``aggregate``."""
    if group is None:
        return {None: [_state(item, n, fetch(item) if n and item.func != "COUNT" else None)
                       for item in spec.select]}  # fmt: skip
    if not n:
        return {}
    order = np.argsort(group, kind="stable")
    g = group[order]
    starts = np.concatenate(([0], np.flatnonzero(g[1:] != g[:-1]) + 1))
    ends = np.concatenate((starts[1:], [n]))
    out: dict = {key: [] for key in g[starts].tolist()}
    keys = list(out)
    for item in spec.select:
        vals = fetch(item)[order] if item.func not in (None, "COUNT") else None
        for key, a, z in zip(keys, starts.tolist(), ends.tolist(), strict=True):
            out[key].append(_state(item, z - a, None if vals is None else vals[a:z]))
    return out


def _state(item: SelectItem, n: int, vals: np.ndarray | None):
    if item.func is None:
        return None
    if item.func == "COUNT":
        return n
    if not n:
        return None if item.func in ("MIN", "MAX") else [0, 0]
    if item.func in ("SUM", "AVG"):
        if vals.dtype.kind == "i":
            return [_int_sum(vals), n]
        return [vals.sum().item() if vals.dtype != object else sum(vals.tolist()), n]
    if item.func == "MIN":
        return vals.min().item() if vals.dtype != object else min(vals.tolist())
    return vals.max().item() if vals.dtype != object else max(vals.tolist())


def merge(spec: QuerySpec, parts: list[dict]) -> list[tuple]:
    """The rows ``aggregate`` gives over the union of the row sets whose ``partial``
    states are ``parts``: one row without GROUP BY, else a row per group, ascending.
    Raises ResultOverflowError for an int SUM beyond 64 bits. O(groups x parts)."""
    acc: dict = {}
    for part in parts:
        for key, states in part.items():
            have = acc.get(key)
            acc[key] = list(states) if have is None else [
                _combine(item, x, y) for item, x, y in zip(spec.select, have, states, strict=True)
            ]  # fmt: skip
    if spec.group_by is None and None not in acc:
        acc[None] = [_state(item, 0, None) for item in spec.select]
    return [
        tuple(key if item.func is None else _final(item, st)
              for item, st in zip(spec.select, acc[key], strict=True))
        for key in sorted(acc, key=lambda k: (k is None, k))
    ]  # fmt: skip


def _combine(item: SelectItem, x, y):
    if item.func is None:
        return None
    if item.func == "COUNT":
        return x + y
    if item.func in ("SUM", "AVG"):
        if not x[1]:
            return y
        return x if not y[1] else [x[0] + y[0], x[1] + y[1]]
    if x is None or y is None:
        return y if x is None else x
    return min(x, y) if item.func == "MIN" else max(x, y)


def _final(item: SelectItem, st):
    if item.func == "COUNT" or item.func in ("MIN", "MAX"):
        return st
    total, n = st
    if not n:
        return None
    if item.func == "AVG":
        return total / n
    return _checked(item, total) if isinstance(total, int) else total
