"""The exception the psoup clients raise: a gRPC status code and the server's message.

Every failed call raises ``PSoupRpcError`` or one of its subclasses, chosen by the
status code, so callers can catch exactly the kind they handle::

    PSoupRpcError            any failed call (.code: grpc.StatusCode, .message: str)
    ├── InvalidArgument      bad query (message has line:column), bad batch, bad field
    ├── NotFound             unknown stream or handle
    ├── AlreadyExists        a stream of that name exists
    ├── FailedPrecondition   dropping a stream that registered queries read
    ├── ResourceExhausted    a server limit (named in the message) or a full ingest queue
    ├── Unauthenticated      no valid bearer token
    ├── PermissionDenied     the handle belongs to another client
    ├── Unavailable          the server cannot be reached (or is shutting down)
    ├── DeadlineExceeded     the call's timeout passed
    └── Cancelled            the call was cancelled (e.g. a subscription closed)

Other codes (INTERNAL, UNKNOWN, ...) raise the base class. ``error_from_rpc`` turns a
``grpc.RpcError`` (sync or grpc.aio) into the matching exception.
"""

from __future__ import annotations

import grpc


class PSoupRpcError(Exception):
    """A call failed with gRPC status ``code``; ``message`` is the server's explanation."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class InvalidArgument(PSoupRpcError):
    """INVALID_ARGUMENT: a bad query, batch or request field."""


class NotFound(PSoupRpcError):
    """NOT_FOUND: an unknown stream or query handle."""


class AlreadyExists(PSoupRpcError):
    """ALREADY_EXISTS: a stream of that name exists."""


class FailedPrecondition(PSoupRpcError):
    """FAILED_PRECONDITION: not possible in the current state (e.g. drop a read stream)."""


class ResourceExhausted(PSoupRpcError):
    """RESOURCE_EXHAUSTED: a configured server limit, or the ingest queue is full."""


class Unauthenticated(PSoupRpcError):
    """UNAUTHENTICATED: authentication is on and the call has no valid bearer token."""


class PermissionDenied(PSoupRpcError):
    """PERMISSION_DENIED: the query handle belongs to another client, or the client lacks
    a right on a stream (the message names the stream and the right)."""


class Unavailable(PSoupRpcError):
    """UNAVAILABLE: the server cannot be reached."""


class DeadlineExceeded(PSoupRpcError):
    """DEADLINE_EXCEEDED: the call did not finish within its timeout."""


class Cancelled(PSoupRpcError):
    """CANCELLED: the call was cancelled."""


#: The exception class raised for each status code (others raise ``PSoupRpcError``).
ERRORS: dict[grpc.StatusCode, type[PSoupRpcError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
}


def make_error(code: grpc.StatusCode, message: str) -> PSoupRpcError:
    """The exception for ``code``: its ``ERRORS`` subclass, or ``PSoupRpcError``."""
    return ERRORS.get(code, PSoupRpcError)(code, message)


_CODES = {c.value[0]: c for c in grpc.StatusCode}


def error_from_status(number: int, message: str) -> PSoupRpcError:
    """The exception for a status code given by its number (as an Invokes reply gives
    it; an unknown number is UNKNOWN)."""
    return make_error(_CODES.get(number, grpc.StatusCode.UNKNOWN), message)


def error_from_rpc(err: grpc.RpcError) -> PSoupRpcError:
    """The psoup exception for a failed gRPC call (sync ``grpc.Call`` or ``AioRpcError``)."""
    code = err.code() if callable(getattr(err, "code", None)) else grpc.StatusCode.UNKNOWN
    details = err.details() if callable(getattr(err, "details", None)) else str(err)
    return make_error(code or grpc.StatusCode.UNKNOWN, details or "")
