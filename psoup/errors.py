"""The exceptions psoup raises.

Every error a user can cause is a ``PSoupError``; its subclasses say which kind, so the
server can map each to one gRPC status code in one place::

    PSoupError
    ├── QueryError               a query text that cannot be registered (has line, column)
    │   ├── QuerySyntaxError     the text does not parse
    │   ├── QueryNameError       unknown stream or attribute, ambiguous name
    │   ├── QueryTypeError       comparing values of incompatible types
    │   ├── QueryParameterError  a named parameter missing, unused or of the wrong type
    │   └── UnsupportedQueryError  a construct psoup does not run (OR, subquery, ...)
    ├── SchemaError              a bad stream declaration
    ├── BatchError               a batch of tuples rejected whole (has row, column)
    ├── NotFoundError            unknown stream or handle
    │   ├── UnknownStreamError
    │   └── UnknownHandleError
    ├── AlreadyExistsError       a stream name that is taken
    ├── PermissionDeniedError    the client lacks a right on a stream (has stream, right)
    ├── ValueRangeError          a value outside the range where it is used (e.g. now)
    ├── ResultOverflowError      an aggregate's exact value does not fit its type
    ├── PreconditionError        the operation is not possible in the current state
    ├── UnavailableError         a shard the call needs is recovering (retry later)
    └── NotSupportedError        a call this kind of server does not offer
"""

from __future__ import annotations


class PSoupError(Exception):
    """Base class of every error a user of psoup can cause."""


class QueryError(PSoupError):
    """A query that cannot be registered. ``line`` and ``column`` are 1-based.

    ``str(err)`` reads ``line L, column C: message`` followed, when the query text is
    known, by the offending line and a caret under the position.
    """

    def __init__(self, message: str, line: int = 1, column: int = 1, text: str | None = None):
        self.message = message
        self.line = line
        self.column = column
        self.text = text
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"line {self.line}, column {self.column}: {self.message}"
        if self.text is None:
            return head
        lines = self.text.splitlines() or [""]
        if not 1 <= self.line <= len(lines):
            return head
        src = lines[self.line - 1]
        return f"{head}\n  {src}\n  {' ' * (self.column - 1)}^"


class QuerySyntaxError(QueryError):
    """The query text does not follow the grammar."""


class QueryNameError(QueryError):
    """An unknown or ambiguous stream, alias or attribute name."""


class QueryTypeError(QueryError):
    """Values of incompatible types are compared or aggregated."""


class QueryParameterError(QueryError):
    """A named parameter is missing, unknown, or of the wrong type."""


class UnsupportedQueryError(QueryError):
    """The query uses a construct psoup does not run."""


class SchemaError(PSoupError):
    """A stream declaration that cannot be created."""


class BatchError(PSoupError):
    """A batch rejected whole; nothing of it was applied.

    ``row`` is the 0-based position of the offending tuple in the batch and ``column`` the
    attribute name, when known.
    """

    def __init__(self, message: str, row: int | None = None, column: str | None = None):
        self.message = message
        self.row = row
        self.column = column
        where = []
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class NotFoundError(PSoupError):
    """Something named does not exist."""


class UnknownStreamError(NotFoundError):
    """No stream has that name."""


class UnknownHandleError(NotFoundError):
    """No registered query has that handle."""


class UnknownTemplateError(NotFoundError):
    """A template id that was not prepared."""


class AlreadyExistsError(PSoupError):
    """A stream with that name exists already."""


class PreconditionError(PSoupError):
    """The operation cannot run in the current state."""


class ValueRangeError(PSoupError):
    """A value given by the caller lies outside the range it may take there (the message
    names the field and the range)."""


class ResultOverflowError(PSoupError):
    """An aggregate's exact value does not fit its result type (SUM of int beyond 64
    bits); refused rather than wrapped around."""


class PermissionDeniedError(PSoupError):
    """The calling client lacks ``right`` on ``stream`` (psoup/access.py)."""

    def __init__(self, message: str, stream: str | None = None, right: str | None = None):
        self.stream = stream
        self.right = right
        super().__init__(message)


class UnavailableError(PSoupError):
    """A part of the server the call needs (an engine shard) cannot answer now, e.g.
    while it recovers after a crash; the same call may succeed later."""


class NotSupportedError(PSoupError):
    """The call exists but this kind of server does not offer it (a sharded server's
    subscriptions, for one)."""
