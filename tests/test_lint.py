"""The code base stays ruff-clean (lint and format), as configured in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_and_format() -> None:
    for args in (["check", "."], ["format", "--check", "."]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
