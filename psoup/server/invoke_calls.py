"""The open Invokes calls: how many there are, and which one gives its place to a new one.

Each open Invokes call holds one of the server's handler threads for as long as its
client keeps it, answering or not, so the server keeps at most ``limit`` open. A client
that opened one and then went quiet would keep a newcomer out for good, so at the limit
a new call takes the place of the call idle longest, once that one has waited
``idle_seconds`` for its next request: the server cancels it, and its client's Invoker
opens a call again (or invokes with unary calls) at its next invoke.
"""

from __future__ import annotations

import threading
import time

import grpc


class CallsFull(Exception):
    """At the limit, and no open call has been idle long enough to give its place."""


class OpenCall:
    """One open Invokes call: its context (to cancel it) and since when it has waited for
    a request (None while it answers one)."""

    __slots__ = ("context", "idle_since")

    def __init__(self, context: grpc.ServicerContext, now: float):
        self.context = context
        self.idle_since: float | None = now


class InvokeCalls:
    """The open Invokes calls of one server (thread-safe)."""

    def __init__(self, limit: int, idle_seconds: float | None):
        self.limit = limit
        self.idle_seconds = idle_seconds  # None: an open call never gives its place
        self.taken_over = 0  # calls cancelled to make room, since the start
        self._lock = threading.Lock()
        self._open: set[OpenCall] = set()

    def __len__(self) -> int:
        return len(self._open)

    def open(self, context: grpc.ServicerContext) -> OpenCall:
        """The new call, counted among the open; at the limit, the call idle longest is
        cancelled to make room if it has been idle ``idle_seconds``, else CallsFull.
        O(open calls), at most ``limit``."""
        now = time.monotonic()
        with self._lock:
            victim = None
            if len(self._open) >= self.limit:
                idle = [c for c in self._open if c.idle_since is not None]
                victim = min(idle, key=lambda c: c.idle_since, default=None)
                if (
                    victim is None
                    or self.idle_seconds is None
                    or now - victim.idle_since < self.idle_seconds
                ):
                    raise CallsFull
                self._open.discard(victim)
                self.taken_over += 1
            call = OpenCall(context, now)
            self._open.add(call)
        if victim is not None:
            victim.context.cancel()  # its handler's wait for a request ends (RpcError)
        return call

    def busy(self, call: OpenCall) -> bool:
        """Mark ``call`` answering a request; False if it has given its place (its
        handler should end without answering: the client asks again on a new call)."""
        with self._lock:
            call.idle_since = None
            return call in self._open

    def idle(self, call: OpenCall) -> None:
        """Mark ``call`` waiting for its next request."""
        with self._lock:
            call.idle_since = time.monotonic()

    def close(self, call: OpenCall) -> bool:
        """Count ``call`` out (its handler ended); whether it had been open, that is, not
        taken over."""
        with self._lock:
            if call in self._open:
                self._open.discard(call)
                return True
            return False
