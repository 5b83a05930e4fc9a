"""Reading ahead: the next batches of a file are read on a thread of their own while the
caller sends the ones before, so that parsing (pyarrow, without the GIL) and sending
overlap."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")
_END = object()


def read_ahead(items: Iterator[T], depth: int) -> Iterator[T]:
    """``items``, produced by a daemon thread up to ``depth`` ahead of the consumer. An
    exception of ``items`` is raised to the consumer in its place. Closing the result (or
    dropping it) stops the thread at its next item; memory holds ``depth`` items at most.
    """
    slots: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(entry: tuple) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
        except BaseException as err:  # handed over, raised in the consumer
            put((_END, err))
        else:
            put((_END, None))

    thread = threading.Thread(target=produce, name="psoup-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, err = slots.get()
            if item is _END:
                if err is not None:
                    raise err
                return
            yield item
    finally:
        stop.set()
