"""Running one call in a fresh child process, so the memory it needs is not the caller's.

A long-lived process that once held a big job's buffers keeps them resident: CPython and
the C allocator rarely give freed memory back to the system. The Linear Road driver must
stay small through a 3-hour replay, so the jobs before it (generating the input, the Spark
driver of the history hydration) run in a child that exits when they are done.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def in_child(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``fn(*args, **kwargs)`` run in a spawned child process; returns its result or raises
    its exception. ``fn``, its arguments and its result must pickle; the child inherits
    stdout and stderr, so its progress shows. Costs a fresh interpreter's start (~1 s)."""
    spawn = multiprocessing.get_context("spawn")  # no fork: the caller may have threads
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        return pool.submit(fn, *args, **kwargs).result()
