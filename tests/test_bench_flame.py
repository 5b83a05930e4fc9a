"""``psoup bench ... --profile``'s flame graph: py-spy records a real process into an SVG
that names the functions it ran; without py-spy the benchmark is told why, in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from psoup.bench import flame as flame_mod
from psoup.bench.flame import Flame

# Pure Python, so the one thread holds the interpreter lock all along: the graph samples
# the thread holding it (``--gil``), and numpy's sort runs without it (1 run in 8 sampled
# nothing and wrote an empty graph).
BUSY = """
import random
import sys

def busy_sorting_for_the_flame_graph():
    while True:
        sorted([random.random() for _ in range(20_000)])
        sys.stdout.write("x")
        sys.stdout.flush()

busy_sorting_for_the_flame_graph()
"""


def test_flame_graph_of_a_running_process(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE)
    try:
        child.stdout.read(1)  # it runs
        f = Flame(child.pid, tmp_path / "flame.svg", rate=200)
        assert f.wait_sampling(), f.stop() or f.problem
        for _ in range(200):  # ~0.5 s of sorting once sampled: a hundred samples
            child.stdout.read(1)
        svg = f.stop()
    finally:
        child.kill()
        child.wait()
    assert svg == tmp_path / "flame.svg", f.problem
    assert "busy_sorting_for_the_flame_graph" in svg.read_text()


def test_without_py_spy_the_problem_is_named(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(flame_mod.shutil, "which", lambda *a, **k: None)
    f = Flame(1, tmp_path / "flame.svg")
    assert f.stop() is None
    assert f.problem == "py-spy is not installed"
