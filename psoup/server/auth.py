"""Bearer-token authentication: who is calling, from the ``authorization`` metadata."""

from __future__ import annotations

import hmac
from pathlib import Path

ANONYMOUS = ""


class AuthError(Exception):
    """The call carries no valid token."""


def load_tokens(path: str) -> dict[str, str]:
    """token -> client id from a file of ``client-id:token`` lines (# comments, blanks ok).

    Raises ValueError naming the line when a line is malformed or a token repeats.
    """
    tokens: dict[str, str] = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        client, sep, token = line.partition(":")
        if not sep or not client.strip() or not token.strip():
            raise ValueError(f"{path}:{n}: expected client-id:token")
        token = token.strip()
        if token in tokens:
            raise ValueError(f"{path}:{n}: token repeated")
        tokens[token] = client.strip()
    if not tokens:
        raise ValueError(f"{path}: no tokens")
    return tokens


class Authenticator:
    """Maps a call's metadata to a client id; with no token file every caller is anonymous."""

    def __init__(self, tokens: dict[str, str] | None):
        self.tokens = tokens

    @property
    def enabled(self) -> bool:
        return self.tokens is not None

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
