"""Benchmark output: aligned text tables, Markdown sections in docs/BENCHMARKS.md, PNG plots.

A benchmark suite owns one section of BENCHMARKS.md, delimited by HTML comments, so
running ``psoup bench core`` rewrites the core section and leaves the others alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An aligned plain-text table (numbers right-aligned)."""
    cells = [[_fmt(v) for v in r] for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r, raw in zip(cells, rows, strict=True):
        lines.append(
            "  ".join(
                c.rjust(w) if isinstance(v, int | float) else c.ljust(w)
                for c, v, w in zip(r, raw, widths, strict=True)
            )
        )
    return "\n".join(lines)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table."""
    out = ["| " + " | ".join(headers) + " |"]
    out.append(
        "|"
        + "|".join(
            "---:" if rows and isinstance(rows[0][i], int | float) else "---"
            for i in range(len(headers))
        )
        + "|"
    )
    out += ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


def _fmt(v: object) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    return str(v)


def write_section(path: Path, name: str, body: str) -> None:
    """Replace (or append) the section ``name`` of the Markdown file at ``path``."""
    begin, end = f"<!-- bench:{name} begin -->", f"<!-- bench:{name} end -->"
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.S)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def plot(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    logx: bool = True,
    logy: bool = True,
) -> None:
    """A line plot of named (x, y) series, written as a PNG. Past six series the legend
    goes beside the plot, not over its lines, and past ten the colours come from a map
    of twenty, so that up to twenty lines have one each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    many = len(series) > 6
    fig, ax = plt.subplots(figsize=(9.5 if many else 6, 4), dpi=110)
    colours = plt.get_cmap("tab20").colors if len(series) > 10 else [None]
    for k, (label, (xs, ys)) in enumerate(series.items()):
        ax.plot(xs, ys, marker="o", label=label, color=colours[k % len(colours)])
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if many:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize="small")
    else:
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def histogram(path: Path, title: str, xlabel: str, values: Sequence[float], bins: int = 50) -> None:
    """A histogram of ``values`` (log-scaled counts), with its mean and p99 marked, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    ax.hist(values, bins=bins, color="tab:blue", alpha=0.8)
    for label, x, style in (
        ("mean", float(np.mean(values)), "--"),
        ("p99", float(np.percentile(values, 99)), ":"),
    ):
        ax.axvline(x, color="black", ls=style, lw=1, label=f"{label} {x:.3g}")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
