"""Frames about the connection itself rather than the quorum: the error
answer and the optional greeting."""

from __future__ import annotations

from dataclasses import dataclass

from .._messages import ErrorCode
from ._checks import (
    ERROR_MESSAGE_CHARS_MAX,
    check_error_code,
    check_optional_int64,
    check_optional_node_id,
    check_str,
)

HELLO_ROLES = ("voter", "observer", "client")


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorFrame:
    """The answer to a frame that could not be handled.

    ``correlation_id`` is that of the offending frame, or None when it could
    not be read. The envelope of an ErrorFrame carries the same correlation
    id (0 when None). ``code`` is never ``ErrorCode.NONE``.

    Raises ``ValueError`` on construction when a field is invalid.
    """

    code: ErrorCode
    message: str
    correlation_id: int | None = None

    def __post_init__(self) -> None:
        code = check_error_code(self.code, "code")
        if code is ErrorCode.NONE:
            raise ValueError("an ErrorFrame must carry an error, not NONE")
        object.__setattr__(self, "code", code)
        check_str(self.message, "message", ERROR_MESSAGE_CHARS_MAX)
        check_optional_int64(self.correlation_id, "correlation_id")


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """Optional first frame on a connection: who is calling. A voter or an
    observer names its node id; a client may.

    Raises ``ValueError`` on construction when a field is invalid.
    """

    node_id: int | None
    role: str

    def __post_init__(self) -> None:
        check_optional_node_id(self.node_id, "node_id")
        if type(self.role) is not str or self.role not in HELLO_ROLES:
            raise ValueError(f"role must be one of {HELLO_ROLES}, got {self.role!r:.40}")
        if self.node_id is None and self.role != "client":
            raise ValueError(f"a {self.role} must give its node id")
