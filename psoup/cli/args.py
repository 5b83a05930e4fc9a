"""The argument types of the ``psoup`` command line: each turns one option's text into its
value or refuses it with an ``argparse.ArgumentTypeError`` (a usage error, exit 2).

Shared by every command group; none of them imports more than the standard library until
it is called (``parse_schema`` and ``_sync_mode`` load their module then).
"""

from __future__ import annotations

import argparse
import math

STRATEGIES = ("psoup-p", "psoup-c", "nomat")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: gRPC's largest message size (a C int).
GRPC_MAX_MESSAGE_BYTES = 2**31 - 1
#: The longest --timeout: gRPC fails a call at once when its deadline overflows.
MAX_TIMEOUT = 365 * 24 * 3600


def parse_schema(text: str) -> dict[str, str]:
    """``"a:int,b:float,t:int"`` -> ``{"a": "int", "b": "float", "t": "int"}``."""
    from psoup.values import DTYPES

    schema: dict[str, str] = {}
    for part in text.split(","):
        name, sep, type_ = (s.strip() for s in part.partition(":"))
        if not sep or not name or not type_:
            raise argparse.ArgumentTypeError(
                f"bad attribute {part.strip()!r}: expected NAME:TYPE (e.g. vid:int,t:int)"
            )
        if name in schema:
            raise argparse.ArgumentTypeError(f"attribute {name!r} is declared twice")
        if type_ not in DTYPES:
            raise argparse.ArgumentTypeError(
                f"attribute {name!r} has unknown type {type_!r}; types are {', '.join(DTYPES)}"
            )
        schema[name] = type_
    return schema


def parse_value(text: str) -> int | float | str:
    """A parameter value: an int if it reads as one (64 bits), else a finite float, else
    the text. NaN and infinity are refused, as is an int beyond 64 bits."""
    try:
        v = int(text)
    except ValueError:
        pass
    else:
        if not INT64_MIN <= v <= INT64_MAX:
            raise argparse.ArgumentTypeError(
                f"{text!r} is beyond the 64-bit integer range ({INT64_MIN}..{INT64_MAX})"
            )
        return v
    try:
        f = float(text)
    except ValueError:
        return text
    if not math.isfinite(f):
        raise argparse.ArgumentTypeError(f"{text!r}: NaN and infinity are not allowed values")
    return f


class _Params(argparse.Action):
    """``--param NAME=VALUE``, repeatable; a name given twice is a usage error (else the
    last would silently win)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        params = list(getattr(namespace, self.dest, None) or [])
        if any(name == values[0] for name, _ in params):
            raise argparse.ArgumentError(self, f"parameter {values[0]!r} is given twice")
        setattr(namespace, self.dest, [*params, values])


def parse_param(text: str) -> tuple[str, int | float | str]:
    """``"k=v"`` -> ``("k", parse_value("v"))``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"bad parameter {text!r}: expected NAME=VALUE")
    return name.strip(), parse_value(value)


def parse_number(text: str) -> int | float:
    """A finite int (64 bits) or float."""
    v = parse_value(text)  # refuses NaN, infinity and an int beyond 64 bits
    if isinstance(v, str):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return v


def _count(text: str, least: int, most: int = INT64_MAX) -> int:
    try:
        v = int(text)
    except ValueError:
        v = least - 1
    if v < least:
        what = "a positive integer" if least > 0 else "an integer >= 0"
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    if v > most:
        raise argparse.ArgumentTypeError(f"{text!r} is more than {most}")
    return v


def _positive(text: str) -> int:
    return _count(text, 1)


def _page_rows(text: str) -> int:
    return _count(text, 0, 2**32 - 1)  # a uint32 in the request


def _duration(text: str, zero_ok: bool) -> float:
    v = parse_number(text)
    if v < 0 or (v == 0 and not zero_ok):
        what = "a number of seconds >= 0" if zero_ok else "a positive number of seconds"
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    return float(v)


def _seconds(text: str) -> float:
    return _duration(text, zero_ok=False)


def _timeout(text: str) -> float:
    """A call's deadline: positive seconds, at most a year."""
    v = _seconds(text)
    if v > MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(f"{text!r} is more than a year ({MAX_TIMEOUT} s)")
    return v


def _speedup(text: str) -> float:
    """A positive, finite factor."""
    v = parse_number(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return float(v)


def _share(text: str) -> float:
    """A fraction in (0, 1]."""
    v = parse_number(text)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"not a fraction in (0, 1]: {text!r}")
    return float(v)


def _cpus(text: str) -> frozenset[int]:
    """A list of CPUs: 0, 0,2 or 0-3,6."""
    from psoup.pinning import parse_cpus

    try:
        return parse_cpus(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _message_bytes(text: str) -> int:
    return _count(text, 1, GRPC_MAX_MESSAGE_BYTES)


def _seconds_or_never(text: str) -> float:
    """Seconds between two runs of a periodic job; 0 turns the job off."""
    return _duration(text, zero_ok=True)


def _sync_mode(text: str) -> str:
    from psoup.storage.log import Sync

    try:
        return str(Sync.parse(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {text!r}")
    return v


def _spark_setting(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip() or key != key.strip():
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return key, value
