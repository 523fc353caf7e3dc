"""Framing: a frame is a 4-byte big-endian unsigned length N, then N bytes
of payload (one msgpack envelope; see ``_codec``).

``FrameDecoder`` is sans-IO, like h11: the runtime feeds it whatever bytes
the socket produced and pulls whole frames out. A length above
``frame_bytes_max`` is fatal for the connection: without trusting the
length there is no way to find the next frame. With a per-type limit
(``frame_bytes_max_for``), the frame's message type is read from its first
two payload bytes, and a frame over its type's limit is refused before the
rest of it is buffered.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from ._errors import FrameTooLargeError, LocalProtocolError, TruncatedFrameError

FRAME_BYTES_MAX = 16 * 1024 * 1024
# How many of a peer's first bytes an error or a log line shows when none of
# them made a frame (an SSH banner, an HTTP request or status line): enough
# to tell which, too few to flood a log.
FIRST_BYTES_SHOWN = 32
FRAME_HEADER_BYTES = 4

_HEADER = struct.Struct(">I")
# An envelope is a 5-element array (0x95) whose first element, the type
# code, every type below 128 packs as one positive-fixint byte.
_ENVELOPE_ARRAY = 0x95
TYPE_PEEK_BYTES = 2


def peek_type_code(payload_head: bytes | bytearray | memoryview) -> int | None:
    """The message type code of a payload from its first two bytes, or None
    when they are not those of an envelope (the decoder refuses such a
    payload anyway)."""
    if len(payload_head) >= TYPE_PEEK_BYTES and payload_head[0] == _ENVELOPE_ARRAY and payload_head[1] < 0x80:
        return payload_head[1]
    return None


def encode_frame(payload: bytes, *, frame_bytes_max: int = FRAME_BYTES_MAX) -> bytes:
    """``payload`` with its length prefix.

    Raises ``LocalProtocolError`` when the payload is over ``frame_bytes_max``
    (the peer would close the connection on it).
    """
    if len(payload) > frame_bytes_max:
        raise LocalProtocolError(f"payload of {len(payload)} bytes is over the frame limit of {frame_bytes_max}")
    return _HEADER.pack(len(payload)) + payload


class FrameDecoder:
    """Incremental frame decoder for one connection.

    ``feed(data)`` buffers bytes; ``next_frame()`` returns the next whole
    payload, or None until more bytes arrive. Call ``next_frame()`` until it
    returns None after every ``feed``. At end of stream call ``feed_eof()``.

    Once a ``FrameTooLargeError`` has been raised the decoder is spent: every
    later ``next_frame()`` raises it again, and the connection must close.

    ``frame_bytes_max_for(type_code)``, when given, bounds each frame by its
    message type (``peek_type_code``; None when unreadable): a frame over it
    is refused as soon as its first two payload bytes arrive.
    """

    __slots__ = ("frame_bytes_max", "frame_bytes_max_for", "_buffer", "_start", "_error")

    def __init__(
        self, *, frame_bytes_max: int = FRAME_BYTES_MAX, frame_bytes_max_for: Callable[[int | None], int] | None = None
    ) -> None:
        if frame_bytes_max < 0 or frame_bytes_max > 2**32 - 1:
            raise ValueError(f"frame_bytes_max must be 0..{2**32 - 1}, got {frame_bytes_max}")
        self.frame_bytes_max = frame_bytes_max
        self.frame_bytes_max_for = frame_bytes_max_for
        self._buffer = bytearray()
        # Start of the unconsumed bytes: consuming a frame moves it rather
        # than deleting from the front of the buffer (which is O(buffer)).
        self._start = 0
        self._error: FrameTooLargeError | None = None

    @property
    def in_frame(self) -> bool:
        """True while part of a frame has arrived and the rest has not."""
        return len(self._buffer) > self._start

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buffer) - self._start

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes received from the peer. Never raises for bad input:
        ``next_frame`` does."""
        if self._error is not None:
            return  # spent: nothing more will be read from this stream
        if self._start and self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        self._buffer += data

    def next_frame(self) -> bytes | None:
        """The next whole frame's payload, or None when more bytes are needed.

        Raises ``FrameTooLargeError`` as soon as a length prefix over
        ``frame_bytes_max`` arrives, before any of that frame is buffered
        for it or allocated.
        """
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        start = self._start
        if len(buffer) - start < FRAME_HEADER_BYTES:
            self._compact()
            return None
        (length,) = _HEADER.unpack_from(buffer, start)
        if length > self.frame_bytes_max:
            self._error = FrameTooLargeError(length, self.frame_bytes_max)
            raise self._error
        end = start + FRAME_HEADER_BYTES + length
        limit_for = self.frame_bytes_max_for
        if limit_for is not None and length:
            head_end = start + FRAME_HEADER_BYTES + min(length, TYPE_PEEK_BYTES)
            if len(buffer) < head_end:
                self._compact()
                return None
            type_code = peek_type_code(buffer[start + FRAME_HEADER_BYTES : head_end])
            limit = limit_for(type_code)
            if length > limit:
                self._error = FrameTooLargeError(length, limit, type_code=type_code)
                raise self._error
        if len(buffer) < end:
            self._compact()
            return None
        # One copy, straight out of the buffer (slicing the bytearray first
        # would copy twice). The view is released before the buffer resizes.
        with memoryview(buffer) as view:
            payload = view[start + FRAME_HEADER_BYTES : end].tobytes()
        if end == len(buffer):
            buffer.clear()
            self._start = 0
        else:
            self._start = end
        return payload

    def feed_eof(self) -> None:
        """The peer closed its side. Raises ``TruncatedFrameError`` when part
        of a frame was left in the buffer (the runtime logs it)."""
        if self._error is None and self.buffered_bytes:
            raise TruncatedFrameError(f"stream ended {self.buffered_bytes} bytes into a frame")

    def _compact(self) -> None:
        # Waiting for more bytes: drop what was consumed so the buffer holds
        # one partial frame at most.
        if self._start:
            del self._buffer[: self._start]
            self._start = 0
