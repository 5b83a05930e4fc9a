"""Keeping a process's threads on chosen CPUs: the server's (``psoup serve --cpus``) and
its engine shards' (``--shard-cpus``).

The server's threads (gRPC's, the handlers', the ingest readers, the engine's) share one
interpreter lock, so together they run Python on one CPU at a time, and they hand the
lock and their work to each other several times per call. Left to the scheduler, the
thread woken by a hand-off is often started on the other CPU, which on a virtual machine
may first have to be woken itself; the server then pays for a cross-CPU wake-up at every
hand-off and leaves no CPU to the processes beside it (its clients on the same machine).
Kept on one CPU, a hand-off is a switch on that CPU, and the clients have the others. On
the 2-core host of issue #19, ``--cpus 0`` took invoke p99 with 4 client processes
during ingest from 8.28, 6.86 and 12.23 ms to 4.90, 5.36 and 8.37 in three runs of
``psoup bench grpc`` (p50 3.63, 2.86 and 4.90 to 1.92, 2.43 and 3.00); gRPC ingest at
8,192 rows was 0.508, 0.42 and 0.535 of in-process against 0.449, 0.422 and 0.29
(docs/BENCHMARKS.md, the gRPC reading, stop 49). Pinning the engine thread alone to a
CPU of its own did not pay.

Only the server's own threads are placed: ``start_server`` runs while the thread calling
it is on the chosen CPUs, so every thread the server makes (and the threads those make,
and the processes it starts: Ray's, with ``--shards``) inherits them; the calling thread
gets its own CPUs back after. An application embedding a server keeps its other threads
where they were. Linux only (``os.sched_setaffinity``).

A shard, the engine in a process of its own, is placed whole (``pin_process``): with
``--shards 1 --cpus 0 --shard-cpus 1`` on a 2-core host the engine has a core to
itself, and the front-end shares the other with the clients on the machine. That is
the layout in which gRPC ingest reached 0.8 of in-process on the host of issue #19
(docs/BENCHMARKS.md, stop 51).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


def allowed_cpus() -> frozenset[int]:
    """The CPUs the calling thread may run on (empty where the platform cannot tell)."""
    if not hasattr(os, "sched_getaffinity"):
        return frozenset()
    return frozenset(os.sched_getaffinity(0))


def parse_cpus(text: str) -> frozenset[int]:
    """The CPUs of a list such as ``0``, ``0,2`` or ``0-3,6`` (taskset's form). Raises
    ValueError naming the part that is not a CPU number or a range of them."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        # isdecimal, not isdigit: int() refuses digits such as "²" that isdigit takes
        if not (lo.isdecimal() and (not dash or hi.isdecimal())) or (dash and int(hi) < int(lo)):
            raise ValueError(f"{part.strip()!r} is not a CPU number or a range a-b of them")
        cpus.update(range(int(lo), int(hi if dash else lo) + 1))
    return frozenset(cpus)


def cpu_list(cpus: Iterable[int]) -> str:
    """``cpus`` as a list ``parse_cpus`` reads back: ``0,2,3`` (sorted, no ranges)."""
    return ",".join(map(str, sorted(cpus)))


def check_cpus(cpus: Iterable[int] | None, flag: str = "--cpus") -> frozenset[int] | None:
    """``cpus`` as a set, checked (None: the scheduler places the threads). Raises
    ValueError naming ``flag`` if the platform cannot place threads or a CPU is not one
    this process may use."""
    if cpus is None:
        return None
    chosen = frozenset(cpus)
    may = allowed_cpus()
    if not hasattr(os, "sched_setaffinity") or not may:
        raise ValueError(f"{flag}: this platform cannot keep threads on chosen CPUs")
    if not chosen:
        raise ValueError(f"{flag}: no CPU given")
    if not chosen <= may:
        listed = ", ".join(map(str, sorted(may)))
        wrong = ", ".join(map(str, sorted(chosen - may)))
        raise ValueError(f"{flag}: {wrong}: not a CPU this process may use ({listed})")
    return chosen


def pin_process(cpus: frozenset[int], flag: str = "--cpus") -> None:
    """Keep every thread of this process on ``cpus`` (the threads made later inherit
    them from their makers). Raises ValueError naming ``flag`` and the CPUs if they
    cannot be used here. O(threads)."""
    try:
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(tid), cpus)
    except (OSError, AttributeError) as err:
        raise ValueError(
            f"{flag} {cpu_list(cpus)}: not CPUs this process may use here ({err})"
        ) from None


@contextmanager
def process_on(cpus: frozenset[int] | None, flag: str = "--cpus") -> Iterator[None]:
    """While the block runs, every thread of this process on ``cpus`` (``pin_process``);
    after it, every thread on the CPUs the calling thread had before (None: nothing).
    For a process that is all one job, such as a benchmark's driver; a server placed
    among other threads uses ``threads_made_on``. O(threads) on the way in and out."""
    if cpus is None:
        yield
        return
    before = allowed_cpus()
    pin_process(cpus, flag)
    try:
        yield
    finally:
        pin_process(before, flag)


@contextmanager
def threads_made_on(cpus: frozenset[int] | None) -> Iterator[None]:
    """While the block runs, keep the calling thread on ``cpus``, so that the threads and
    processes it starts inherit them; give it its own CPUs back after (None: nothing)."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
