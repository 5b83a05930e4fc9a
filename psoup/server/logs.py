"""The server's log: ``psoup serve --log-level LEVEL --log-format text|json``.

Events go to the ``psoup`` loggers with a sentence (the message) and their fields
(``extra={"event": ..., "fields": {...}}``). ``text`` writes ``psoup: <sentence>`` lines
on stderr, as a person reads them; ``json`` one JSON object per line with ``time`` (UTC,
ISO 8601), ``level``, ``event``, ``message`` and the fields, for a log collector.
Warnings (a torn log tail dropped at start, say) become ``warning`` events. Tokens are
never written: no event carries one.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from datetime import UTC, datetime

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, event, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "event": getattr(record, "event", None) or record.name.rsplit(".", 1)[-1],
            "message": record.getMessage(),
        }
        out.update(getattr(record, "fields", None) or {})
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """``psoup: <sentence>``; a warning reads ``psoup: warning: <sentence>``."""

    def format(self, record: logging.LogRecord) -> str:
        head = "psoup: warning: " if record.levelno == logging.WARNING else "psoup: "
        if record.levelno >= logging.ERROR:
            head = "psoup: error: "
        return head + record.getMessage()


def configure(level: str = "info", fmt: str = "text") -> None:
    """Send the ``psoup`` loggers' records at ``level`` and above to stderr in ``fmt``."""
    if level not in LEVELS or fmt not in FORMATS:
        raise ValueError(f"log level {level!r} or format {fmt!r} is not known")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("psoup")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        logging.getLogger("psoup.warning").warning(str(message), extra={"event": "warning"})

    warnings.showwarning = show


def event(logger: logging.Logger, level: int, name: str, message: str, **fields) -> None:
    """Log event ``name``: ``message`` for people, ``fields`` for machines."""
    logger.log(level, message, extra={"event": name, "fields": fields})
