"""``ReaderdError``: a server (or connection) failure with its gRPC status code name.

The native client raises it with the status's code and message. For Arrow Flight users,
pyarrow turns a Flight call's gRPC status into one of several exception classes
(``FlightUnavailableError``, ``ArrowInvalid``, ``ArrowKeyError``, ...) whose message reads
``Flight returned data loss error, with message: <server message>. gRPC client debug
context: DATA_LOSS:<server message>. Client context: ...``. :func:`from_arrow` recovers the
code name (``DATA_LOSS``) and the server's own message from it.
"""

from __future__ import annotations

import re

__all__ = ["ReaderdError", "from_arrow", "RETRYABLE"]

#: gRPC status code names.
CODES = frozenset(
    "OK CANCELLED UNKNOWN INVALID_ARGUMENT DEADLINE_EXCEEDED NOT_FOUND ALREADY_EXISTS PERMISSION_DENIED "
    "RESOURCE_EXHAUSTED FAILED_PRECONDITION ABORTED OUT_OF_RANGE UNIMPLEMENTED INTERNAL UNAVAILABLE "
    "DATA_LOSS UNAUTHENTICATED".split()
)

#: Codes after which the client reconnects (the server went away or is restarting).
RETRYABLE = frozenset({"UNAVAILABLE"})

# Arrow's words for each code in "... returned <words> error, with message: ...".
_PHRASES = {
    "cancelled": "CANCELLED",
    "unknown": "UNKNOWN",
    "invalid argument": "INVALID_ARGUMENT",
    "deadline exceeded": "DEADLINE_EXCEEDED",
    "not found": "NOT_FOUND",
    "already exists": "ALREADY_EXISTS",
    "permission denied": "PERMISSION_DENIED",
    "resource exhausted": "RESOURCE_EXHAUSTED",
    "precondition failed": "FAILED_PRECONDITION",
    "failed precondition": "FAILED_PRECONDITION",
    "aborted": "ABORTED",
    "out-of-range": "OUT_OF_RANGE",
    "out of range": "OUT_OF_RANGE",
    "unimplemented": "UNIMPLEMENTED",
    "internal": "INTERNAL",
    "unavailable": "UNAVAILABLE",
    "data loss": "DATA_LOSS",
    "unauthenticated": "UNAUTHENTICATED",
}


def _classes() -> list[tuple[type, str]]:
    """The code of each pyarrow exception class, when the text says nothing better."""
    import pyarrow as pa
    import pyarrow.flight as flight

    return [
        (flight.FlightUnavailableError, "UNAVAILABLE"),
        (flight.FlightTimedOutError, "DEADLINE_EXCEEDED"),
        (flight.FlightCancelledError, "CANCELLED"),
        (flight.FlightUnauthenticatedError, "UNAUTHENTICATED"),
        (flight.FlightUnauthorizedError, "PERMISSION_DENIED"),
        (flight.FlightInternalError, "INTERNAL"),
        (pa.ArrowInvalid, "INVALID_ARGUMENT"),
        (pa.ArrowKeyError, "NOT_FOUND"),
        (pa.ArrowNotImplementedError, "UNIMPLEMENTED"),
    ]

_DEBUG = re.compile(r"gRPC client debug context: ([A-Z_]+):(.*?)(?:\. Client context:.*)?$", re.S)
_RETURNED = re.compile(r"returned ([a-z -]+?) error, with message: (.*?)(?:\. gRPC client debug context:.*)?$", re.S)


class ReaderdError(Exception):
    """A failed readerd call: ``code`` is the gRPC status code name (``"DATA_LOSS"``),
    ``message`` the server's message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def from_arrow(exc: BaseException) -> ReaderdError:
    """The :class:`ReaderdError` a pyarrow (Flight) exception stands for (needs pyarrow)."""
    if isinstance(exc, ReaderdError):
        return exc
    text = str(exc)
    found = _DEBUG.search(text)
    if found and found.group(1) in CODES:
        return ReaderdError(found.group(1), found.group(2))
    found = _RETURNED.search(text)
    if found and found.group(1) in _PHRASES:
        return ReaderdError(_PHRASES[found.group(1)], found.group(2))
    for cls, code in _classes():
        if isinstance(exc, cls):
            return ReaderdError(code, text)
    return ReaderdError("UNKNOWN", text)
