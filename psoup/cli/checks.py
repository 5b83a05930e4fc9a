"""What the ``psoup`` commands check before they start work (input files present, an
output folder that can be made, a well-formed ``--server`` and ``--token``) and the one
``error: ...`` line that reports a refusal on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path


def _error(message: str, status: int = 1) -> int:
    """Print ``error: message`` on stderr; returns ``status``."""
    print(f"error: {message}", file=sys.stderr)
    return status


def _missing_input(**files: Path | None) -> str | None:
    """What is wrong with the input files (option name -> path; None: not given), if any."""
    for option, path in files.items():
        if path is not None and not path.is_file():
            what = "not a regular file" if path.exists() else "no such file"
            return f"--{option} {path}: {what}"
    return None


def _output_folder(option: str, path: Path) -> str | None:
    """Make the folder ``path`` (and its parents) for a command's output; what is wrong
    with it, if anything. Checked before a long job starts, not when it ends."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"--{option} {path}: not a folder"
    except OSError as err:
        return f"--{option} {path}: cannot make the folder: {err.strerror}"
    return None


def _connection_problem(server: str | None, token: str | None = None) -> str | None:
    """What is wrong with a ``--server`` address or a ``--token``, if anything (the client
    commands find it when they connect)."""
    from clients import channel

    try:
        if server is not None:
            channel.target(server)
        channel.metadata(token)
    except ValueError as err:
        return str(err)
    return None
