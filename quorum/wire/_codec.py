"""Messages to frames and back.

A frame's payload is one msgpack array, the envelope::

    [type_code: int, version: int, correlation_id: int, cluster_id: str, body: array]

``body`` is the message's fields in the order ``_schema`` defines. Decoding
checks the envelope, then the body, field by field; anything wrong raises a
``RemoteProtocolError`` subclass that says how to answer it. The decoder
never logs: the runtime does, with the peer's address.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import msgpack

from ._checks import CLUSTER_ID_CHARS_MAX, INT64_MAX, describe_value
from ._errors import (
    ClusterIdMismatchError,
    FrameTooLargeError,
    InvalidMessageError,
    LocalProtocolError,
    MalformedFrameError,
    UnknownMessageTypeError,
    UnsupportedVersionError,
)
from ._frames import _HEADER, peek_type_code
from ._schema import DEFAULT_LIMITS, PROTOCOL_VERSION, REQUEST_TYPE_CODES, SCHEMA_BY_CLASS, SCHEMA_BY_CODE, WireLimits

_ENVELOPE_FIELDS = 5

# One Packer per thread: reusing it saves about half of ``packb``'s cost on a
# small message (packb builds a Packer each call); a Packer is not safe to
# share between threads.
_packers = threading.local()


def _pack(value: Any) -> bytes:
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    return packer.pack(value)


class Decoded(NamedTuple):
    """A decoded frame: the message, the correlation id to echo in the
    answer, and the version the sender used. A named tuple: one is built
    per frame received, at a fifth of a frozen dataclass's cost."""

    message: Any
    correlation_id: int
    version: int


def encode_message(
    message: Any, *, correlation_id: int, cluster_id: str, limits: WireLimits = DEFAULT_LIMITS
) -> bytes:
    """A complete frame (length prefix included) carrying ``message``.

    The body is checked with the decoder's own rules before it is sent, so a
    peer running this code never rejects what we send.

    Raises ``LocalProtocolError`` when ``message`` is not a wire message
    type, when a field is invalid (the text names it), when
    ``correlation_id`` is not an int in 0..2^63-1 or ``cluster_id`` not a
    non-empty str of at most 255 chars, or when the frame would exceed
    ``limits.frame_bytes_max`` (``limits.small_frame_bytes_max`` for a
    request: no peer accepts a larger one).
    """
    schema = SCHEMA_BY_CLASS.get(type(message))
    if schema is None:
        raise LocalProtocolError(f"not a wire message: {type(message).__name__}")
    if type(correlation_id) is not int or not 0 <= correlation_id <= INT64_MAX:
        raise LocalProtocolError(f"correlation_id must be an int 0..{INT64_MAX}, got {describe_value(correlation_id)}")
    if type(cluster_id) is not str or not 0 < len(cluster_id) <= CLUSTER_ID_CHARS_MAX:
        raise LocalProtocolError(
            f"cluster_id must be a non-empty str of at most {CLUSTER_ID_CHARS_MAX} chars, got {describe_value(cluster_id)}"
        )
    if schema.later_versions:
        version = message.version
        try:
            encode_body, decode_body = schema.codec(version)
        except KeyError:
            raise LocalProtocolError(f"{schema.name} has no version {version!r} (versions: {list(schema.versions)})") from None
    else:
        # The replication hot path: no lookup for a type with one version.
        version, encode_body, decode_body = PROTOCOL_VERSION, schema.encode_body, schema.decode_body
    try:
        body = encode_body(message)
    except (TypeError, AttributeError, ValueError) as exc:
        # A field of the wrong shape (a tuple where a SnapshotId belongs...).
        raise LocalProtocolError(f"cannot encode {schema.name}: {exc}") from exc
    try:
        decode_body(body, limits, False)
    except ValueError as exc:
        raise LocalProtocolError(f"invalid {schema.name}: {exc}") from exc
    try:
        payload = _pack([schema.type_code, version, correlation_id, cluster_id, body])
    except (TypeError, ValueError, OverflowError) as exc:
        # The checks leave one thing to msgpack: a str that is not valid
        # Unicode (a lone surrogate) cannot be packed as UTF-8.
        raise LocalProtocolError(f"cannot pack {schema.name}: {exc}") from exc
    frame_bytes_max = limits.small_frame_bytes_max if schema.type_code in REQUEST_TYPE_CODES else limits.frame_bytes_max
    if len(payload) > frame_bytes_max:
        raise LocalProtocolError(
            f"{schema.name} needs a frame of {len(payload)} bytes, over the limit of {frame_bytes_max}"
        )
    return _HEADER.pack(len(payload)) + payload


_new_tuple = tuple.__new__


class _TooManyContainersError(ValueError):
    pass


def _container_counter(containers_max: int) -> Callable[[Any], Any]:
    """A msgpack hook that passes each array or map through and raises once
    more than ``containers_max`` were built."""
    remaining = containers_max

    def count(container: Any) -> Any:
        nonlocal remaining
        remaining -= 1
        if remaining < 0:
            raise _TooManyContainersError(f"more than {containers_max} arrays and maps in one frame")
        return container

    return count


def _unpack_bounded(payload: bytes | bytearray | memoryview, count_container: Callable[[Any], Any] | None) -> Any:
    """The one msgpack value in ``payload``, every length capped at the
    payload's size and ext types refused; ``count_container`` (a
    ``_container_counter``), if given, sees each array and map as it is
    built. Raises whatever the msgpack unpacker raises on bad input."""
    size = len(payload)
    return msgpack.unpackb(
        payload,
        raw=False,
        use_list=True,
        strict_map_key=True,
        max_str_len=size,
        max_bin_len=size,
        max_array_len=size,
        max_map_len=size // 2,
        max_ext_len=0,
        list_hook=count_container,
        object_hook=count_container,
    )


def decode_message(
    payload: bytes | bytearray | memoryview, *, expected_cluster_id: str, limits: WireLimits = DEFAULT_LIMITS
) -> Decoded:
    """Decode one frame's payload (what ``FrameDecoder.next_frame`` returns).

    Returns a ``Decoded`` whose message has passed every check of its schema.
    Raises a ``RemoteProtocolError`` and nothing else on bad input:

    - ``FrameTooLargeError`` — the payload is over its message type's limit
      (``limits.frame_bytes_max_for``);
    - ``MalformedFrameError`` — not msgpack, trailing bytes, not an
      envelope, more than ``limits.containers_max`` arrays and maps in a
      small frame, or an unreadable correlation id (close the connection);
    - ``ClusterIdMismatchError`` — another cluster's frame (answer
      INCONSISTENT_CLUSTER_ID, close);
    - ``UnknownMessageTypeError``, ``UnsupportedVersionError``,
      ``InvalidMessageError`` — a bad message in a good frame (answer
      INVALID_REQUEST, keep the connection).
    """
    size = len(payload)
    type_code = peek_type_code(payload[:2])
    frame_bytes_max = limits.frame_bytes_max_for(type_code)
    if size > frame_bytes_max:
        raise FrameTooLargeError(size, frame_bytes_max, type_code=type_code)
    try:
        # Every container or string length is capped at the payload's size
        # (each element needs at least one byte, each map entry two):
        # msgpack allocates a declared array length up front, and a 5-byte
        # frame must not get to ask for a 16M-slot list. Ext types are
        # refused outright. A small frame also counts its containers as they
        # are built (an empty map costs ~70 bytes for its one byte of
        # msgpack); a large one (records, on the replication path) skips the
        # count, which costs a Python call per record. So does a frame of
        # at most ``containers_max`` bytes: every array or map takes at
        # least one byte, so it cannot hold more than the limit.
        if size <= limits.containers_max or type_code in limits.large_type_codes:
            envelope = _unpack_bounded(payload, count_container=None)
        else:
            envelope = _unpack_bounded(payload, count_container=_container_counter(limits.containers_max))
    except Exception as exc:
        # msgpack documents few of the exceptions its C unpacker raises on
        # bad input (ExtraData, FormatError, StackError, ValueError,
        # UnicodeDecodeError, TypeError, OverflowError, ...). Only the
        # unpacker runs in this block, on bytes the peer chose: whatever it
        # raises is the peer's fault.
        raise MalformedFrameError(f"payload is not one msgpack value: {type(exc).__name__}: {exc}") from exc
    if type(envelope) is not list or len(envelope) != _ENVELOPE_FIELDS:
        raise MalformedFrameError(
            f"payload must be an envelope [type, version, correlation_id, cluster_id, body], got {describe_value(envelope)}"
        )
    type_code, version, correlation_id, cluster_id, body = envelope
    if type(correlation_id) is not int or not 0 <= correlation_id <= INT64_MAX:
        raise MalformedFrameError(f"envelope correlation_id must be an int 0..{INT64_MAX}, got {describe_value(correlation_id)}")
    if type(type_code) is not int or type(version) is not int or type(cluster_id) is not str:
        raise MalformedFrameError(
            "envelope must hold [int, int, int, str, body], got type "
            f"{describe_value(type_code)}, version {describe_value(version)}, cluster_id {describe_value(cluster_id)}",
            correlation_id=correlation_id,
        )
    if cluster_id != expected_cluster_id:
        raise ClusterIdMismatchError(cluster_id, expected_cluster_id, correlation_id=correlation_id)
    schema = SCHEMA_BY_CODE.get(type_code)
    if schema is None:
        raise UnknownMessageTypeError(type_code, correlation_id=correlation_id)
    if version not in schema.versions:
        raise UnsupportedVersionError(version, schema.versions, correlation_id=correlation_id, message_type=schema.name)
    try:
        decode_body = schema.decode_body if version == PROTOCOL_VERSION else schema.codec(version)[1]
        message = decode_body(body, limits, True)
    except ValueError as exc:
        raise InvalidMessageError(str(exc), correlation_id=correlation_id, message_type=schema.name) from exc
    # tuple.__new__ straight: the named tuple's own __new__ is a Python
    # function, and this runs for every frame received.
    return _new_tuple(Decoded, (message, correlation_id, version))
