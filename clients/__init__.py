"""Clients of the psoup gRPC server, with the embedded engine's method names.

``PSoupClient`` blocks; ``AsyncPSoupClient`` runs on grpc.aio. Failed calls raise
``PSoupRpcError`` or its subclass for the status code (``NotFound``, ``InvalidArgument``,
...; see ``clients.errors``). Results are ``psoup.Result``; stream and query descriptions
and ingest acks are the dataclasses of ``clients.messages``.
"""

from clients.async_client import AsyncPSoupClient, AsyncSubscription
from clients.channel import DEFAULT
from clients.errors import (
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    PSoupRpcError,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from clients.invoker import AsyncInvoker, Invoker
from clients.messages import (
    CURRENT,
    NEW,
    Bound,
    IngestAck,
    Invoke,
    QueryInfo,
    Register,
    Registered,
    StagedPart,
    StreamInfo,
    Template,
    Window,
)
from clients.psoup_client import PSoupClient, Subscription

__all__ = [
    "CURRENT",
    "DEFAULT",
    "NEW",
    "AlreadyExists",
    "AsyncInvoker",
    "AsyncPSoupClient",
    "AsyncSubscription",
    "Bound",
    "Cancelled",
    "DeadlineExceeded",
    "FailedPrecondition",
    "IngestAck",
    "InvalidArgument",
    "Invoke",
    "Invoker",
    "NotFound",
    "PSoupClient",
    "PSoupRpcError",
    "PermissionDenied",
    "QueryInfo",
    "Register",
    "Registered",
    "ResourceExhausted",
    "StagedPart",
    "StreamInfo",
    "Subscription",
    "Template",
    "Unauthenticated",
    "Unavailable",
    "Window",
]
