"""Draw docs/layers.png: psoup's layers and the imports between them, from the code.

The layers are import-linter's contract in pyproject.toml (top to bottom); the arrows
are the real imports between them, as grimp finds them (the thicker an arrow, the more
module-to-module imports it stands for). Run ``python3 docs/layers.py`` after moving
code; ``tests/test_layers.py`` fails when an arrow points up.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent


def layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["type"] == "layers")
    return [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]


def edges(groups: list[str]) -> dict[tuple[str, str], int]:
    graph = grimp.build_graph("psoup", "stems", "results", "clients")

    def group_of(module: str) -> str | None:
        best = [g for g in groups if module == g or module.startswith(g + ".")]
        return max(best, key=len) if best else None

    out: dict[tuple[str, str], int] = {}
    for module in graph.modules:
        a = group_of(module)
        for imported in graph.find_modules_directly_imported_by(module):
            b = group_of(imported)
            if a and b and a != b:
                out[(a, b)] = out.get((a, b), 0) + 1
    return out


def main() -> None:
    rows = layers()
    pos = {}
    for y, row in enumerate(rows):
        for x, name in enumerate(row):
            zigzag = 1.6 * (-1) ** y if len(row) == 1 else 0.0  # skip-level arrows apart
            pos[name] = ((x - (len(row) - 1) / 2) * 2.8 + zigzag, -y)
    fig, ax = plt.subplots(figsize=(11, 12), dpi=100)
    for (a, b), n in sorted(edges(list(pos)).items()):
        (x0, y0), (x1, y1) = pos[a], pos[b]
        ax.annotate("", xy=(x1, y1 + 0.18), xytext=(x0, y0 - 0.18),
                    arrowprops={"arrowstyle": "->", "color": "#4a6fa5", "alpha": 0.45,
                                "linewidth": 0.6 + min(n, 20) / 10,
                                "connectionstyle": f"arc3,rad={0.05 * (y0 - y1):.2f}"})  # fmt: skip
    for name, (x, y) in pos.items():
        ax.text(x, y, name, ha="center", va="center", fontsize=9,
                bbox={"boxstyle": "round,pad=0.35", "fc": "#f3f6fb", "ec": "#4a6fa5"})  # fmt: skip
    ax.set_xlim(-6, 6)
    ax.set_ylim(-len(rows) + 0.4, 0.6)
    ax.axis("off")
    ax.set_title("psoup's layers, top to bottom: every import points down (import-linter)")
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "layers.png")


if __name__ == "__main__":
    main()
