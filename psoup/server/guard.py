"""Requests that are not messages: INVALID_ARGUMENT, decoded by us, not by gRPC.

gRPC Python answers bytes it cannot decode as the request message with INTERNAL
("Exception deserializing request!"), logs the exception, and keeps about 19 KB of
memory per such request (measured: 20,000 mutated requests grew a server by 380 MB; the
same number of well-formed ones by nothing). ``DecodeGuard`` installs a request decoder
that never raises: bytes that do not decode become an ``Undecodable`` marker, and the
call ends with INVALID_ARGUMENT naming the message type and the decoder's complaint,
before the servicer sees it. O(1) per request beyond the decoding gRPC did anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
from google.protobuf.message import DecodeError


class Undecodable:
    """A request that did not decode as its message type."""

    def __init__(self, error: Exception):
        self.error = error


class UndecodableRequest(Exception):
    """Raised by a client stream's iterator at an undecodable request; the servicer
    answers it with INVALID_ARGUMENT (its status table), whichever thread reads."""


def _safe(decode: Callable[[bytes], object]) -> Callable[[bytes], object]:
    def run(data: bytes) -> object:
        try:
            return decode(data)
        except (DecodeError, ValueError, RuntimeError) as err:
            return Undecodable(err)

    return run


def _message(method: str, bad: Undecodable) -> str:
    return f"request: not a valid {method} request message ({bad.error or 'undecodable bytes'})"


def _refuse(context, method: str, bad: Undecodable):
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, _message(method, bad))


class DecodeGuard(grpc.ServerInterceptor):
    """Wraps every handler of the service so undecodable requests are refused cleanly.
    A method's handler is wrapped once, at its first call, and reused (a handler is the
    same for every call of its method): O(1) per call, a dictionary lookup."""

    def __init__(self):
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}  # method path -> handler

    def intercept_service(self, continuation, details):
        # Only methods the service has are kept: a client naming others grows nothing.
        if (wrapped := self._wrapped.get(details.method)) is None:
            handler = continuation(details)
            if handler is None or handler.request_deserializer is None:
                return handler
            wrapped = self._wrapped[details.method] = _guarded(handler, details.method)
        return wrapped


def _guarded(handler: grpc.RpcMethodHandler, path: str) -> grpc.RpcMethodHandler:
    """``handler`` with a decoder that never raises and a behaviour that refuses what it
    could not decode."""
    method = path.rsplit("/", 1)[-1]

    def one(behavior):
        def run(request, context):
            if isinstance(request, Undecodable):
                _refuse(context, method, request)
            return behavior(request, context)

        return run

    def one_streaming(behavior):
        def run(request, context):
            if isinstance(request, Undecodable):
                _refuse(context, method, request)
            yield from behavior(request, context)

        return run

    def checked(requests: Iterator) -> Iterator:
        for r in requests:
            if isinstance(r, Undecodable):
                raise UndecodableRequest(_message(method, r))
            yield r

    def many(behavior):
        def run(requests, context):
            return behavior(checked(requests), context)

        return run

    def many_streaming(behavior):
        def run(requests, context):
            yield from behavior(checked(requests), context)

        return run

    safe = _safe(handler.request_deserializer)
    if handler.unary_unary:
        return handler._replace(request_deserializer=safe, unary_unary=one(handler.unary_unary))
    if handler.unary_stream:
        return handler._replace(
            request_deserializer=safe, unary_stream=one_streaming(handler.unary_stream)
        )
    if handler.stream_unary:
        return handler._replace(request_deserializer=safe, stream_unary=many(handler.stream_unary))
    return handler._replace(
        request_deserializer=safe, stream_stream=many_streaming(handler.stream_stream)
    )
