"""Who may do what with a stream (with authentication on; docs/SECURITY.md).

The client that creates a stream owns it. Another client needs a grant from its owner:
``read`` to register queries over it (and to go on invoking and subscribing to them:
a revoke stops the queries it already has) and to read it out; ``write`` to ingest into
it and to replace it by a bulk load. Only the owner drops a stream, grants and revokes.
An admin (named in the tokens file) may do everything, also with streams that have no
owner (those created without authentication, or declared by an application). Without
authentication every call is allowed.

The rights are catalog state kept by the engine (``Stream.owner``, ``Stream.grants``),
logged and checkpointed with it, so they survive a restart. Every check is a few dict
lookups, O(streams a query reads).
"""

from __future__ import annotations

from collections.abc import Iterable

from psoup.engine import Engine, Stream
from psoup.errors import PermissionDeniedError

READ, WRITE, OWNER = "read", "write", "owner"


class Access:
    """The rules above for one server: ``enabled`` (authentication on) and its admins."""

    def __init__(self, enabled: bool, admins: Iterable[str] = ()):
        self.enabled = enabled
        self.admins = frozenset(admins)

    def owner_of_new(self, client: str) -> str | None:
        """The owner a stream created by ``client`` gets (None without authentication)."""
        return client if self.enabled else None

    def allowed(self, st: Stream, client: str, right: str) -> bool:
        """Whether ``client`` has ``right`` (READ, WRITE or OWNER) on ``st``. O(1)."""
        if not self.enabled or client in self.admins:
            return True
        if st.owner is not None and st.owner == client:
            return True
        return right != OWNER and right in st.grants.get(client, ())

    def require(self, engine: Engine, stream: str, client: str, right: str) -> Stream:
        """The stream, or PermissionDeniedError naming it and the missing right (an
        unknown stream raises UnknownStreamError first). O(1)."""
        st = engine._stream(stream)
        if not self.allowed(st, client, right):
            raise PermissionDeniedError(_denial(st, client, right), stream, right)
        return st

    def require_all(self, engine: Engine, streams: Iterable[str], client: str, right: str):
        """``require`` for each of ``streams``. O(len(streams))."""
        for name in streams:
            self.require(engine, name, client, right)

    def require_query(self, engine: Engine, handle: str) -> None:
        """PermissionDeniedError unless the owner of query ``handle`` may still read
        every stream it reads (a revoke since its registration stops it); an unknown
        handle raises UnknownHandleError. O(streams)."""
        q = engine._query(handle)  # UnknownHandleError
        if not self.enabled:
            return
        for name in dict.fromkeys(q.plan.streams):
            st = engine.streams.get(name)
            if st is not None and not self.allowed(st, q.owner or "", READ):
                raise PermissionDeniedError(
                    f"stream {name!r}: the query's owner no longer has the read right on "
                    "it (revoked since the query was registered)",
                    name,
                    READ,
                )


def _denial(st: Stream, client: str, right: str) -> str:
    who = f"client {client!r}" if client else "this client"
    if right == OWNER:
        owner = f"its owner {st.owner!r}" if st.owner else "an admin (the stream has no owner)"
        return f"stream {st.name!r}: only {owner} may do this; {who} is not"
    hint = (
        f"its owner {st.owner!r} can give it: psoup grant {st.name} {client} {right}"
        if st.owner
        else f"an admin can give it: psoup grant {st.name} {client} {right}"
    )
    return f"stream {st.name!r}: {who} has no {right} right on it ({hint})"
