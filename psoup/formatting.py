"""Text renderings of results and descriptions for the ``psoup`` client commands.

Results print as an aligned table, CSV (header row, NULL as an empty field) or JSON;
stream and query descriptions and stats as ``key: value`` lines or JSON. Everything here
returns strings and does no I/O, so it is tested without a server.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from psoup.values import Result

RESULT_FORMATS = ("table", "csv", "json")  # invoke
EVENT_FORMATS = ("text", "csv", "json")  # subscribe
TEXT_FORMATS = ("text", "json")  # descriptions and stats
NULL = "NULL"


def _cell(v: object) -> str:
    return NULL if v is None else str(v)


def table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An aligned text table with a header rule; numbers right-aligned. O(cells)."""
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [len(c) for c in columns]
    for r in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float) or r[i] is None for r in rows)
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(columns), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, in the plural unless n is 1: ``plural(2, "batch")`` -> "2 batches"."""
    if n == 1:
        return f"1 {word}"
    return f"{n:,} {word}{'es' if word.endswith(('s', 'ch', 'sh', 'x')) else 's'}"


def result_table(result: Result) -> str:
    """The rows as a table, then a line with the row count, NOW and the window."""
    footer = [plural(len(result.rows), "row")]
    if result.now is not None:
        footer.append(f"NOW {result.now}")
    if result.window is not None:
        footer.append(f"window [{result.window[0]}, {result.window[1]}]")
    return f"{table(result.columns, result.rows)}\n({'; '.join(footer)})"


def result_csv(result: Result, header: bool = True) -> str:
    """The rows as CSV (with a header row unless ``header`` is false); NULL is empty."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(result.columns)
    w.writerows(["" if v is None else v for v in r] for r in result.rows)
    return buf.getvalue().rstrip("\n")


def result_dict(result: Result) -> dict[str, object]:
    """The result as a JSON-ready dict: columns, types, rows (lists), now, window."""
    return {
        "columns": list(result.columns),
        "types": list(result.types),
        "rows": [list(r) for r in result.rows],
        "now": result.now,
        "window": list(result.window) if result.window is not None else None,
    }


def result_json(result: Result) -> str:
    """The result as one JSON object (see ``result_dict``)."""
    return json.dumps(result_dict(result))


def format_result(result: Result, fmt: str) -> str:
    """``result`` rendered as ``fmt``: one of ``RESULT_FORMATS``."""
    if fmt == "table":
        return result_table(result)
    if fmt == "csv":
        return result_csv(result)
    if fmt == "json":
        return result_json(result)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(RESULT_FORMATS)}")


def format_event(kind: str, result: Result, first_tuple_id: int, fmt: str, first: bool) -> str:
    """One subscription event as lines to print; ``first`` says it is the first event.

    ``text``: the column names once, then per event a ``# kind ...`` line and the rows,
    tab-separated. ``csv``: the header once, then only rows. ``json``: one object per
    event (JSON Lines) with ``kind`` and ``first_tuple_id`` added to ``result_dict``.
    """
    if fmt == "json":
        return json.dumps({"kind": kind, "first_tuple_id": first_tuple_id, **result_dict(result)})
    if fmt == "csv":
        return result_csv(result, header=first)
    lines = ["\t".join(result.columns)] if first else []
    origin = f" from tuple {first_tuple_id}" if kind == "new" else ""
    lines.append(f"# {kind}{origin}: {plural(len(result.rows), 'row')}")
    lines.extend("\t".join(_cell(v) for v in r) for r in result.rows)
    return "\n".join(lines)


def jsonable(obj: object) -> object:
    """Dataclasses (recursively), mappings and sequences as plain JSON-ready values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return obj


def to_json(obj: object) -> str:
    """``obj`` (dataclass, dict, list) as indented JSON."""
    return json.dumps(jsonable(obj), indent=2)


def _scalar(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return str(round(v, 3))
    return str(v)


def key_values(items: Mapping[str, object], indent: int = 0) -> str:
    """``key: value`` lines; nested mappings are indented under their key."""
    pad = " " * indent
    lines = []
    for k, v in items.items():
        if isinstance(v, Mapping):
            if v:
                lines.append(f"{pad}{k}:")
                lines.append(key_values(v, indent + 2))
            else:
                lines.append(f"{pad}{k}: -")
        else:
            lines.append(f"{pad}{k}: {_scalar(v)}")
    return "\n".join(lines)


def schema_text(schema: Mapping[str, str]) -> str:
    """Attributes as ``name:type,...`` (the form ``psoup stream create --schema`` takes)."""
    return ",".join(f"{a}:{t}" for a, t in schema.items())


def streams_table(infos: Sequence) -> str:
    """Streams (``clients.StreamInfo``) as a table, one row each."""
    rows = [
        (
            s.name,
            schema_text(s.schema),
            s.time,
            s.max_window,
            s.tuples_stored,
            s.tuples_ingested,
            s.queries,
            s.last_ts,
        )
        for s in infos
    ]
    cols = ("name", "schema", "time", "max_window", "stored", "ingested", "queries", "last_ts")
    return table(cols, rows)


def grants_text(grants: Mapping[str, Sequence[str]]) -> str:
    """Grants (client -> rights) as ``bob: read,write; carol: read``."""
    return "; ".join(f"{c}: {','.join(r)}" for c, r in sorted(grants.items()))


def stream_text(info) -> str:
    """One stream (``clients.StreamInfo``) as ``key: value`` lines; its owner and grants
    when it has any (a server with authentication)."""
    d = jsonable(info)
    d["schema"] = schema_text(info.schema)
    if info.owner or info.grants:
        d["owner"] = info.owner or "(none: an admin manages it)"
        d["grants"] = grants_text(info.grants) or "(none)"
    else:
        del d["owner"], d["grants"]
    return key_values(d)


def query_text(info) -> str:
    """One query (``clients.QueryInfo``) as ``key: value`` lines."""
    return key_values(
        {
            "handle": info.handle,
            "text": info.text,
            "params": info.params,
            "columns": ", ".join(f"{c} {t}" for c, t in zip(info.columns, info.types, strict=True)),
            "window": str(info.window),
            "streams": ", ".join(info.streams),
            "registered_at": datetime.fromtimestamp(info.registered_at, UTC).isoformat(
                timespec="seconds"
            ),
            "invocations": info.invocations,
        }
    )
