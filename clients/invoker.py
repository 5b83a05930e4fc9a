"""``Invoker``: invokes sent on one open Invokes call, for code that invokes again and again.

::

    with client.invoker() as inv:
        for h in handles:
            inv.invoke(h).rows

A unary Invoke sets a call up for every invoke, and on the server that setup costs about
as much as answering a small result: an invoke on an open Invokes call used about half
the server CPU of a unary one (docs/BENCHMARKS.md, "Invokes on one open call"). An
Invoker gives the answers and errors ``PSoupClient.invoke`` gives, for the price of one
call kept open:

- **One thread at a time.** Give each thread its own Invoker.
- **It holds a server thread while open**, so close it (or use ``with``). The server
  keeps at most ``max_invoke_calls`` open at once. When it refuses one, the Invoker
  sends unary Invoke calls instead and tries to open a call again ``retry_after``
  seconds later. It does the same, for good, with a server that has no Invokes.
- **Deadlines** are per invoke (``timeout``, the client's by default). A watchdog
  thread cancels the call when one passes; the invoke raises DeadlineExceeded, and the
  next invoke opens a new call.
- **A broken call is retried once.** When the server went away after the call had
  answered (a restart), the invoke is sent once more on a new call: an invoke changes
  nothing, so sending it twice is safe.
- **Large results.** A result too large for one message comes in pages (InvokeQuery),
  as with ``PSoupClient.invoke``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import queue
import threading
import time
import weakref
from typing import TYPE_CHECKING

import grpc

from clients import messages
from clients.channel import DEFAULT, Timeout, deadline
from clients.errors import DeadlineExceeded, error_from_rpc, error_from_status, make_error
from psoup.api import psoup_pb2 as pb
from psoup.values import Result

if TYPE_CHECKING:
    from clients.async_client import AsyncPSoupClient
    from clients.psoup_client import PSoupClient

#: Status codes of a call refused at its start that a second call would meet again.
_FINAL = frozenset({
    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN,
})  # fmt: skip


class _Lane:
    """What the sync and the async Invoker share: the state of their one call, the steps
    before an invoke and the choice once the call ended without answering."""

    def __init__(self, client: PSoupClient | AsyncPSoupClient, retry_after: float):
        self._client = client
        self.retry_after = retry_after
        self._call = None  # the open Invokes call, or None
        self._unary_until = 0.0  # before this (monotonic) time, invoke with Invoke
        self._closed = False

    def _begin(
        self, handle: str, now: int | float | None, timeout: Timeout
    ) -> tuple[float | None, pb.InvokeRequest, bool]:
        """``(the invoke's seconds, its request, whether to send it on the call)``."""
        if self._closed:
            raise ValueError("the Invoker is closed")
        seconds = deadline(timeout, self._client.timeout)
        request = messages.invoke_whole_request(handle, now)
        return seconds, request, time.monotonic() >= self._unary_until

    def _unary_after(
        self, fresh: bool, code: grpc.StatusCode | None, error: Exception | None
    ) -> bool:
        """After the call ended before its reply, with ``code`` (None or OK: the server
        ended it; ``error`` None then): True to invoke with a unary call instead (a
        server without Invokes: from now on; one at max_invoke_calls: for
        ``retry_after`` seconds; one stopping: this once); False to send once more on a
        new call (the call had answered and then broke); ``error`` raised otherwise."""
        if fresh and code == grpc.StatusCode.UNIMPLEMENTED:
            self._unary_until = math.inf
            return True
        if fresh and code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            self._unary_until = time.monotonic() + self.retry_after
            return True
        if fresh or code in _FINAL:
            if error is None:
                return True
            raise error
        return False


class Invoker(_Lane):
    """Invokes on one Invokes call of ``client``, opened at the first invoke (see the
    module docstring). Made by ``PSoupClient.invoker()``."""

    def __init__(self, client: PSoupClient, retry_after: float = 10.0):
        super().__init__(client, retry_after)
        self._outbox: queue.SimpleQueue | None = None  # the call's requests; None ends it
        # The watchdog's state, under _cond: the deadline of the invoke in flight, when
        # the watchdog will next look, whether it cancelled the call.
        self._cond = threading.Condition(threading.Lock())
        self._deadline: float | None = None
        self._wake_at = math.inf
        self._expired = False
        self._watchdog: threading.Thread | None = None

    # -- invoking ---------------------------------------------------------------------
    def invoke(
        self, handle: str, now: int | float | None = None, *, timeout: Timeout = DEFAULT
    ) -> Result:
        """The query's current result over its window, as of ``now`` (default: NOW), as
        ``PSoupClient.invoke`` gives it; NotFound for an unknown handle. O(rows x
        columns) to decode, with no call set up after the first."""
        seconds, request, on_call = self._begin(handle, now, timeout)
        reply = self._on_call(request, seconds) if on_call else None
        if reply is None:  # no call to be had: as PSoupClient.invoke
            return self._client.invoke(handle, now, timeout=seconds)
        if (result := _result_of(reply)) is None:
            return self._client._invoke_paged(handle, now, 0, seconds)
        return result

    def _on_call(self, request: pb.InvokeRequest, seconds: float | None) -> pb.InvokesReply | None:
        """``request``'s reply on the open call (opened if need be, and once more if it
        broke after answering); None when the server refused to open one."""
        while True:
            fresh = self._call is None
            if fresh:
                self._open()
            self._arm(seconds)
            self._outbox.put(request)
            try:
                reply = next(self._call)
            except StopIteration:  # the server ended the call: it is stopping
                err = None
            except grpc.RpcError as exc:
                err = exc
            except BaseException:  # interrupted: its reply must not answer the next invoke
                self._disarm()
                self._drop()
                raise
            else:
                if self._disarm():  # the watchdog cancelled the call as the reply came
                    self._drop()
                return reply
            expired = self._disarm()
            self._drop()
            if expired:
                raise DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            code, error = None, None
            if err is not None:
                code, error = err.code(), error_from_rpc(err)
                error.__cause__ = err
            if self._unary_after(fresh, code, error):
                return None

    def _open(self) -> None:
        self._outbox = queue.SimpleQueue()
        self._call = self._client._stub.Invokes(
            iter(self._outbox.get, None), metadata=self._client._metadata
        )

    def _drop(self) -> None:
        """End the open call (its request stream, then the call itself)."""
        if self._call is not None:
            self._outbox.put(None)
            self._call.cancel()
            self._call = self._outbox = None

    # -- deadlines --------------------------------------------------------------------
    def _arm(self, seconds: float | None) -> None:
        """Watch the invoke about to be sent for ``seconds`` (None: no deadline). O(1);
        the watchdog is woken only when it would look too late."""
        if seconds is None:
            return
        due = time.monotonic() + seconds
        with self._cond:
            self._deadline = due
            if self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=_watch, args=(weakref.ref(self), self._cond),
                    name="psoup-invoker-watchdog", daemon=True,
                )  # fmt: skip
                self._watchdog.start()
            elif due < self._wake_at:
                self._cond.notify()

    def _disarm(self) -> bool:
        """Stop watching the invoke in flight; whether the watchdog had cancelled the
        call (it is then cleared)."""
        with self._cond:
            self._deadline = None
            expired, self._expired = self._expired, False
        return expired

    def _look(self) -> float | None:
        """The watchdog's look, under ``_cond``: cancel the call if the invoke in flight
        is past its deadline; the seconds until the next look (None: until woken)."""
        now = time.monotonic()
        if self._deadline is not None and self._deadline <= now:
            self._expired = True
            self._deadline = None
            if self._call is not None:
                self._call.cancel()
        self._wake_at = self._deadline if self._deadline is not None else math.inf
        return None if self._deadline is None else self._deadline - now

    # -- lifetime ---------------------------------------------------------------------
    def close(self) -> None:
        """End the open call (freeing its server thread) and the watchdog. Idempotent."""
        if self._closed:
            return
        if self._call is not None:
            self._outbox.put(None)  # a clean end: the server answers what it has, then OK
            self._call = self._outbox = None
        with self._cond:
            self._closed = True
            self._cond.notify()

    def __enter__(self) -> Invoker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit modules may be gone
            self.close()


class AsyncInvoker(_Lane):
    """``Invoker`` for ``AsyncPSoupClient``: ``await inv.invoke(handle)`` on one open
    Invokes call. Tasks of its event loop may share it: they take turns on the call. A
    deadline is ``asyncio.wait_for``'s, so there is no watchdog thread. Made by
    ``AsyncPSoupClient.invoker()``; close it with ``await inv.close()`` or ``async
    with``."""

    def __init__(self, client: AsyncPSoupClient, retry_after: float = 10.0):
        super().__init__(client, retry_after)
        self._turn = asyncio.Lock()  # one exchange at a time on the call

    async def invoke(
        self, handle: str, now: int | float | None = None, *, timeout: Timeout = DEFAULT
    ) -> Result:
        """As ``Invoker.invoke``, awaited."""
        seconds, request, on_call = self._begin(handle, now, timeout)
        reply = None
        if on_call:
            async with self._turn:
                reply = await self._on_call(request, seconds)
        if reply is None:
            return await self._client.invoke(handle, now, timeout=seconds)
        if (result := _result_of(reply)) is None:
            return await self._client._invoke_paged(handle, now, 0, seconds)
        return result

    async def _on_call(
        self, request: pb.InvokeRequest, seconds: float | None
    ) -> pb.InvokesReply | None:
        """As ``Invoker._on_call``."""
        while True:
            fresh = self._call is None
            if fresh:
                self._call = self._client._stub.Invokes(metadata=self._client._metadata)
            call = self._call
            try:
                reply = await asyncio.wait_for(_exchange(call, request, fresh), seconds)
            except TimeoutError:
                self._drop()
                raise DeadlineExceeded(
                    grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"
                ) from None
            except grpc.RpcError as exc:
                code, error = exc.code(), error_from_rpc(exc)
            except BaseException:  # cancelled: its reply must not answer the next invoke
                self._drop()
                raise
            else:
                if not isinstance(reply, tuple):
                    return reply
                code = reply[0]
                error = None if code == grpc.StatusCode.OK else make_error(*reply)
            self._drop()
            if self._unary_after(fresh, code, error):
                return None

    def _drop(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None

    async def close(self) -> None:
        """End the open call (freeing its server thread). Idempotent."""
        self._closed = True
        if self._call is not None:
            call, self._call = self._call, None
            with contextlib.suppress(asyncio.InvalidStateError, grpc.RpcError):
                await call.done_writing()  # a clean end: the server answers OK

    async def __aenter__(self) -> AsyncInvoker:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


async def _exchange(call, request: pb.InvokeRequest, fresh: bool):
    """Send ``request`` on the grpc.aio Invokes ``call`` and read its reply; the call's
    ``(code, details)`` when it had ended (OK: the server ended it). On a ``fresh``
    call, first wait for the server to take it (its initial metadata) or refuse it."""
    if fresh:
        await call.initial_metadata()
        if call.done():
            return await call.code(), await call.details()
    try:
        await call.write(request)
        reply = await call.read()
    except asyncio.InvalidStateError:  # it had ended before the write
        reply = grpc.aio.EOF
    if reply is grpc.aio.EOF:
        return await call.code(), await call.details()
    return reply


def _result_of(reply: pb.InvokesReply) -> Result | None:
    """The result an Invokes reply carries; None when it was refused as too large for a
    message (take it in pages); the refusal's error raised for any other."""
    if reply.HasField("result"):
        pages = messages.PageAssembler()
        pages.add(reply.result)
        return pages.result()
    code, message = reply.refused.code, reply.refused.message
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]:
        return None
    raise error_from_status(code, message)


def _watch(ref: weakref.ref, cond: threading.Condition) -> None:
    """The watchdog thread of the Invoker ``ref`` points to, until it is closed or gone.
    It keeps only a weak reference between looks, so a forgotten Invoker is collected."""
    with cond:
        while True:
            inv = ref()
            if inv is None:
                return
            if inv._closed:
                return
            wait = inv._look()
            del inv
            cond.wait(wait)
