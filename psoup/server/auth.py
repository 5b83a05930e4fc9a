"""Bearer-token authentication: who is calling, from the ``authorization`` metadata."""

from __future__ import annotations

import hmac
from pathlib import Path

ANONYMOUS = ""
_ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@-")


class AuthError(Exception):
    """The call carries no valid token."""


def load_tokens(path: str) -> tuple[dict[str, str], frozenset[str]]:
    """(token -> client id, the admins' client ids) from a file of ``client-id:token``
    lines, ``admin client-id:token`` for an admin (# comments and blank lines are
    skipped). A client id is letters, digits and ``_.@-``.

    Raises ValueError naming the file and line when a line is malformed, a token or a
    client id repeats, or the file is not text.
    """
    tokens: dict[str, str] = {}
    admins: set[str] = set()
    seen: dict[str, int] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file of client-id:token lines") from None
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        admin = line.startswith("admin ")
        if admin:
            line = line[len("admin ") :].strip()
        client, sep, token = line.partition(":")
        client, token = client.strip(), token.strip()
        if not sep or not client or not token:
            raise ValueError(f"{path}:{n}: expected client-id:token or admin client-id:token")
        if not set(client) <= _ID_CHARS:
            raise ValueError(f"{path}:{n}: client id {client!r}: use letters, digits and _.@- only")
        if not token.isascii() or not token.isprintable():
            raise ValueError(f"{path}:{n}: a token must be printable ASCII")
        if token in tokens:
            raise ValueError(f"{path}:{n}: token repeated")
        if client in seen:
            raise ValueError(f"{path}:{n}: client id {client!r} repeated (line {seen[client]})")
        seen[client] = n
        tokens[token] = client
        if admin:
            admins.add(client)
    if not tokens:
        raise ValueError(f"{path}: no tokens")
    return tokens, frozenset(admins)


class Authenticator:
    """Maps a call's metadata to a client id; with no token file every caller is anonymous."""

    def __init__(self, tokens: dict[str, str] | None, admins: frozenset[str] = frozenset()):
        self.tokens = tokens
        self.admins = admins

    @property
    def enabled(self) -> bool:
        return self.tokens is not None

    def who(self, metadata) -> str:
        """The calling client's id for metrics and logs, never raising: "anonymous"
        without authentication, "unauthenticated" for a call without a valid token."""
        if self.tokens is None:
            return "anonymous"
        try:
            return self.client(metadata)
        except AuthError:
            return "unauthenticated"

    def client(self, metadata) -> str:
        """The calling client's id; AuthError when authentication is on and fails."""
        if self.tokens is None:
            return ANONYMOUS
        header = next((v for k, v in metadata or () if k == "authorization"), None)
        if header is None:
            raise AuthError("missing 'authorization: Bearer <token>' metadata")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise AuthError("the authorization metadata must read 'Bearer <token>'")
        for known, client in self.tokens.items():
            # Constant-time comparison: no timing hints about valid tokens.
            if hmac.compare_digest(known.encode(), token.strip().encode()):
                return client
        raise AuthError("unknown token")
