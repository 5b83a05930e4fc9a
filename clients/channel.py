"""Connection settings shared by both clients: channel credentials, options, auth metadata."""

from __future__ import annotations

from pathlib import Path

import grpc

#: Default largest message either way, the server's default ``max_message_bytes``.
MAX_MESSAGE_BYTES = 64 << 20
#: The port of a target given without one (the server's default port).
DEFAULT_PORT = 50051
#: gRPC's own target schemes (``unix:/path``, ``dns:///host:port``, ...): passed as they are.
_SCHEMES = ("dns:", "unix:", "unix-abstract:", "ipv4:", "ipv6:", "vsock:")


class _Default:
    """Type of ``DEFAULT``: "use the client's timeout" for a per-call ``timeout``."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()
Timeout = float | None | _Default


def deadline(timeout: Timeout, default: float | None) -> float | None:
    """The seconds a call may take: ``default`` for ``DEFAULT``, else ``timeout`` (None: none)."""
    return default if isinstance(timeout, _Default) else timeout


def target(address: str) -> str:
    """``address`` as a gRPC target: ``HOST:PORT``, ``HOST`` (port 50051), ``[IPv6]:PORT``
    or ``[IPv6]``; a gRPC target URI (``unix:/path``, ``dns:///h:p``) is kept as it is.

    Raises ValueError naming the address when the host is missing, the port is not a
    number in 1..65535, or an IPv6 address is not in brackets.
    """
    if not isinstance(address, str):
        raise ValueError(f"bad server address {address!r}: expected a HOST:PORT string")
    if address.startswith(_SCHEMES):
        return address
    if address.startswith("["):
        end = address.find("]")
        host, rest = address[: end + 1], address[end + 1 :]
        if end < 2 or (rest and not rest.startswith(":")):
            raise ValueError(f"bad server address {address!r}: expected [IPv6]:PORT")
        port = rest[1:] if rest else None
    elif address.count(":") > 1:
        raise ValueError(
            f"bad server address {address!r}: put an IPv6 address in brackets, "
            f"e.g. [::1]:{DEFAULT_PORT}"
        )
    else:
        host, sep, port = address.partition(":")
        port = port if sep else None
    if not host.strip() or host != host.strip():
        raise ValueError(f"bad server address {address!r}: no host (expected HOST:PORT)")
    if port is None:
        return f"{host}:{DEFAULT_PORT}"
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"bad server address {address!r}: the port must be a number in 1..65535")
    return f"{host}:{int(port)}"


def metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying ``token`` as a bearer token (empty without one).

    Raises ValueError when the token has a character other than printable ASCII (gRPC
    would refuse the call with INTERNAL "Invalid metadata"; the server's tokens are
    printable ASCII too).
    """
    if token is not None and not isinstance(token, str):
        raise ValueError(f"bad token: expected a string, not {type(token).__name__}")
    if token and not (token.isascii() and token.isprintable()):
        bad = next(ch for ch in token if not (ch.isascii() and ch.isprintable()))
        raise ValueError(f"bad token: only printable ASCII characters are allowed, not {bad!r}")
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
