"""Connection settings shared by both clients: channel credentials, options, auth metadata."""

from __future__ import annotations

from pathlib import Path

import grpc

#: Default largest message either way, the server's default ``max_message_bytes``.
MAX_MESSAGE_BYTES = 64 << 20


class _Default:
    """Type of ``DEFAULT``: "use the client's timeout" for a per-call ``timeout``."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()
Timeout = float | None | _Default


def deadline(timeout: Timeout, default: float | None) -> float | None:
    """The seconds a call may take: ``default`` for ``DEFAULT``, else ``timeout`` (None: none)."""
    return default if isinstance(timeout, _Default) else timeout


def metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying ``token`` as a bearer token (empty without one)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


def options(max_message_bytes: int) -> list[tuple[str, int]]:
    """Channel options: message size limits both ways."""
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def credentials(
    root_certificates: bytes | str | Path | None, tls: bool | None
) -> grpc.ChannelCredentials | None:
    """TLS credentials, or None for a plaintext channel.

    TLS is used when ``tls`` is true, or when it is None and ``root_certificates`` is
    given. ``root_certificates`` is PEM bytes or the path of a PEM file; None with TLS
    uses the system's roots.
    """
    if tls is None:
        tls = root_certificates is not None
    if not tls:
        return None
    if isinstance(root_certificates, str | Path):
        root_certificates = Path(root_certificates).read_bytes()
    return grpc.ssl_channel_credentials(root_certificates=root_certificates)


def sync_channel(target: str, creds: grpc.ChannelCredentials | None, opts: list) -> grpc.Channel:
    """A blocking-API channel to ``target``."""
    if creds is None:
        return grpc.insecure_channel(target, options=opts)
    return grpc.secure_channel(target, creds, options=opts)


def aio_channel(target: str, creds: grpc.ChannelCredentials | None, opts: list) -> grpc.aio.Channel:
    """A grpc.aio channel to ``target`` (create it inside the event loop that uses it)."""
    if creds is None:
        return grpc.aio.insecure_channel(target, options=opts)
    return grpc.aio.secure_channel(target, creds, options=opts)
