"""Errors of the wire protocol, named as in h11.

``RemoteProtocolError`` is the peer's fault (it sent something invalid);
``LocalProtocolError`` is ours (we tried to encode something invalid). Both
are ``ValueError``s (and ``QuorumError``s). A ``RemoteProtocolError`` tells the runtime what to do
about it:

- ``error_code`` — the ``ErrorCode`` to put in the ``ErrorFrame`` answer;
- ``correlation_id`` — the correlation id of the offending frame, or None
  when it could not be read (then there is nobody to answer);
- ``recoverable`` — True when the byte stream is still in step and the peer
  may keep using the connection (answer with an ``ErrorFrame``, log, carry
  on); False when the connection must be closed (after a best-effort
  ``ErrorFrame`` when ``correlation_id`` is known).
"""

from __future__ import annotations

from .._messages import ErrorCode
from .._node import QuorumError
from ._connection_messages import ErrorFrame

# An error text travels in an ErrorFrame and in log lines: keep it short.
ERROR_TEXT_CHARS_MAX = 1024


class ProtocolError(QuorumError, ValueError):
    """Base class of the wire protocol's errors."""


class LocalProtocolError(ProtocolError):
    """We tried to encode something the protocol does not allow: a bug on
    this side. Nothing was sent."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol does not allow.

    Subclasses set the defaults for ``error_code`` and ``recoverable``.
    """

    default_error_code: ErrorCode = ErrorCode.INVALID_REQUEST
    default_recoverable: bool = True

    def __init__(
        self,
        reason: str,
        *,
        correlation_id: int | None = None,
        message_type: str | None = None,
        error_code: ErrorCode | None = None,
        recoverable: bool | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.correlation_id = correlation_id
        # The message type's name when the envelope named a known one: for
        # log lines, and so that a runtime never answers an ErrorFrame with
        # an ErrorFrame.
        self.message_type = message_type
        self.error_code = self.default_error_code if error_code is None else error_code
        self.recoverable = self.default_recoverable if recoverable is None else recoverable

    def __str__(self) -> str:
        where = f"{self.message_type} " if self.message_type else ""
        correlation = "" if self.correlation_id is None else f" (correlation id {self.correlation_id})"
        return f"{where}{self.reason}{correlation}"

    def to_error_frame(self) -> ErrorFrame:
        """The ``ErrorFrame`` that answers this error (text truncated)."""
        return ErrorFrame(
            code=self.error_code,
            message=str(self)[:ERROR_TEXT_CHARS_MAX],
            correlation_id=self.correlation_id,
        )


class FrameTooLargeError(RemoteProtocolError):
    """A frame's length prefix is above ``frame_bytes_max``. The stream can
    not be resynchronised: close the connection."""

    default_recoverable = False

    def __init__(self, frame_bytes: int, frame_bytes_max: int, *, type_code: int | None = None) -> None:
        kind = "" if type_code is None else f" (type code {type_code})"
        super().__init__(f"frame{kind} of {frame_bytes} bytes is over the limit of {frame_bytes_max}")
        self.frame_bytes = frame_bytes
        self.frame_bytes_max = frame_bytes_max
        self.type_code = type_code


class TruncatedFrameError(RemoteProtocolError):
    """The stream ended in the middle of a frame."""

    default_recoverable = False


class MalformedFrameError(RemoteProtocolError):
    """The payload is not msgpack, or not an envelope, or its correlation id
    is unreadable. The peer is broken or not speaking this protocol: close."""

    default_recoverable = False


class ClusterIdMismatchError(RemoteProtocolError):
    """The frame belongs to another cluster: a fatal misconfiguration of the
    peer. Answer INCONSISTENT_CLUSTER_ID and close."""

    default_error_code = ErrorCode.INCONSISTENT_CLUSTER_ID
    default_recoverable = False

    def __init__(self, received: str, expected: str, *, correlation_id: int) -> None:
        super().__init__(
            f"cluster id {received[:64]!r} is not this cluster's ({expected!r})",
            correlation_id=correlation_id,
        )
        self.received_cluster_id = received
        self.expected_cluster_id = expected


class UnknownMessageTypeError(RemoteProtocolError):
    """The envelope names a message type this node does not know (a newer
    peer, or garbage that happens to be a valid envelope)."""

    def __init__(self, type_code: int, *, correlation_id: int) -> None:
        super().__init__(f"unknown message type code {type_code}", correlation_id=correlation_id)
        self.type_code = type_code


class UnsupportedVersionError(RemoteProtocolError):
    """A known message type in a version this node does not support."""

    def __init__(self, version: int, supported: tuple[int, ...], *, correlation_id: int, message_type: str) -> None:
        super().__init__(
            f"version {version} is not supported (supported: {list(supported)})",
            correlation_id=correlation_id,
            message_type=message_type,
        )
        self.version = version
        self.supported_versions = supported


class InvalidMessageError(RemoteProtocolError):
    """A well-framed message whose body breaks its schema (arity, a field's
    type or range, records out of order). The connection can continue."""
