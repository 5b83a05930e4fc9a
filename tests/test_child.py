"""psoup.child.in_child: the call runs in another process, its result and its exception come
back, and the memory it used is not left in the caller."""

from __future__ import annotations

import os

import pytest

from psoup.child import in_child
from psoup.procinfo import rss_bytes as _rss

_KEPT: list[bytearray] = []  # what a job leaves resident (as a Spark driver's buffers do)


def _touch(megabytes: int) -> int:
    """Allocate, write and keep ``megabytes``; returns this process's resident bytes."""
    block = bytearray(megabytes << 20)
    _KEPT.append(block)
    return _rss()


def _refuse(text: str) -> None:
    raise ValueError(text)


def test_the_call_runs_in_another_process_and_returns_its_result() -> None:
    assert in_child(os.getpid) != os.getpid()
    assert in_child(divmod, 17, 5) == (3, 2)


def test_the_childs_exception_reaches_the_caller() -> None:
    with pytest.raises(ValueError, match="no such vehicle"):
        in_child(_refuse, "no such vehicle")


def test_the_childs_memory_is_not_the_callers() -> None:
    before = _rss()
    child_rss = in_child(_touch, 400)
    assert child_rss > 400 << 20  # the child really held it
    assert _rss() - before < 100 << 20
