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
from array import array
from collections.abc import Callable
from itertools import accumulate, islice
from operator import is_
from typing import Any, NamedTuple

import msgpack

from .._messages import FetchResponse
from .._types import Entry
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
from ._schema import (
    DEFAULT_LIMITS,
    PROTOCOL_VERSION,
    REQUEST_TYPE_CODES,
    SCHEMA_BY_CLASS,
    SCHEMA_BY_CODE,
    WireLimits,
    _records,
    decode_fetch_response,
    encode_fetch_response,
)

_ENVELOPE_FIELDS = 5

# One Packer per thread: reusing it saves about half of ``packb``'s cost on a
# small message (packb builds a Packer each call); a Packer is not safe to
# share between threads.
_packers = threading.local()


def _packer() -> msgpack.Packer:
    try:
        return _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
        return packer


def _pack(value: Any) -> bytes:
    return _packer().pack(value)


# Where ``encode_fetch_response`` puts the records in a FetchResponse's body.
_FETCH_RESPONSE_RECORDS_FIELD = 8
# A FetchResponse's envelope up to its correlation id: the envelope's
# array header, the type code and the version.
_FETCH_RESPONSE_ENVELOPE_HEAD = msgpack.packb(
    [SCHEMA_BY_CLASS[FetchResponse].type_code, PROTOCOL_VERSION, None, None, None]
)[:-3]
# Fewer records than this are packed and checked with the rest of the body,
# as any message is: splitting the body costs about what packing and
# checking one to three records saves (tests/wire/bench_wire_codec.py).
SEGMENT_RECORDS_MIN = 4
# Counted per record a RecordSegments holds, on top of its packed bytes: its
# place in the run (8), its reference (8) and, once the log has let go of
# it, the Entry itself (~80).
_RUN_RECORD_OVERHEAD_BYTES = 96
# What a RecordSegments keeps at most (bytes and overhead) before it drops
# its run's older half: the default Fetch answer's size (fetch_bytes_max),
# as far behind the log's end as one answer reaches. The run is memory a
# node holds for as long as it runs (it grows with every answer of four
# records or more, followers' too): at 32 MiB a leader's RSS grew by the
# run's size under a batch load, about doubling a node's footprint.
RECORD_SEGMENTS_BYTES_MAX = 8 * 1024 * 1024


class RecordSegments:
    """The records of FetchResponses, checked and packed once for every
    answer that carries them (issue 21).

    When thousands of brokers long-poll the leader, each append answers
    many of them with the same records, each broker's from its own offset
    to the log's end; ``encode_message`` packed and checked those records
    once per broker (61-71 % of a busy leader's CPU, docs/benchmarks.md).
    Given one of these, it keeps one run: the log's tail as the answers
    carried it, each record packed once, checked once for the message epoch
    of the answers, and grown at its end as the log grows. An answer whose
    records are a stretch of the run is given the run's bytes for them;
    records past the run's end are checked together with the run's last
    record (offsets contiguous, epochs never decreasing nor above the
    message's, each record's own fields: what the decoder's check asks of
    every pair of neighbours and of each record), then packed and added.
    So the check still holds for every frame (any stretch of records the
    check accepts is accepted too), and the rest of the body is checked on
    every answer. msgpack of an array is its header, then each element's
    msgpack in turn: the frame is the very bytes packing the whole body
    gives.

    Bytes are reused only for records that *are* (identity, not equality)
    the run's ``Entry`` objects at the same place: a log truncated and
    rewritten at the same offsets holds new objects, the run is cut where
    they start, and the objects the run holds cannot lend their identity to
    others. Only ``Entry`` objects go into the run (immutable, and so are
    their fields once checked: ints, a RecordKind, bytes); anything else,
    and answers far behind the run, are packed alone, as without this.
    About ``bytes_max`` is kept: past it, the run's older half goes. Not
    thread-safe: one per sender (the runtime's transport, on its event
    loop).
    """

    __slots__ = (
        "_base", "_entries", "_epoch", "_first_offset", "_packed", "_starts", "bytes_max", "hits", "records_packed",
        "runs_started",
    )  # fmt: skip

    def __init__(self, *, bytes_max: int = RECORD_SEGMENTS_BYTES_MAX) -> None:
        self.bytes_max = bytes_max
        # Answers whose records were all found packed; records checked and
        # packed into the run; runs started afresh.
        self.hits = 0
        self.records_packed = 0
        self.runs_started = 0
        self._start(None, 0)

    def _start(self, message_epoch: int | None, first_offset: int) -> None:
        # The run's records, their msgpack back to back, and where each
        # starts in it (``_starts[i] - _base``; one more for the end).
        self._epoch = message_epoch
        self._first_offset = first_offset
        self._entries: list[Entry] = []
        self._packed = bytearray()
        self._starts = array("q", (0,))
        self._base = 0

    @property
    def size_bytes(self) -> int:
        """About what the run costs: its bytes and per-record overhead."""
        return len(self._packed) + _RUN_RECORD_OVERHEAD_BYTES * len(self._entries)

    def __len__(self) -> int:
        """Records in the run."""
        return len(self._entries)

    def clear(self) -> None:
        self._start(None, 0)

    def packed(self, records: Any, message_epoch: Any) -> bytearray | None:
        """The msgpack of ``records`` (without the array's header), checked
        as the records of a FetchResponse of ``message_epoch``; None when
        they are not kept here (not a tuple of ``Entry``, behind the run,
        or refused by the check): the caller packs and checks them alone."""
        if type(records) is not tuple or not records or type(message_epoch) is not int:
            return None
        first = records[0]
        if type(first) is not Entry or type(first.offset) is not int:
            return None
        count = len(records)
        at = first.offset - self._first_offset
        entries = self._entries
        if message_epoch != self._epoch or at > len(entries):
            # Another epoch's answers, or a gap after the run: start anew.
            self._start(message_epoch, first.offset)
            self.runs_started += 1
            at, entries = 0, self._entries
        elif at < 0:
            if first.offset + count < self._first_offset + len(entries):
                return None  # behind the run, not reaching its end
            self._start(message_epoch, first.offset)
            self.runs_started += 1
            at, entries = 0, self._entries
        found = min(count, len(entries) - at)
        # A slice, not ``islice``: islice steps over the ``at`` records
        # before the stretch one by one, which cost each answer time in the
        # run's length (up to ~40,000 records: ~0.2 ms per Fetch answer).
        kept = entries[at : at + found]
        if found and not all(map(is_, kept, records)):
            # The log was cut and written anew from the first record that
            # differs: so is the run.
            found = next(i for i, (old, record) in enumerate(zip(kept, records)) if old is not record)
            self._cut(at + found)
        if found < count and not self._add(records, found, message_epoch):
            return None
        if found == count:
            self.hits += 1
        base = self._base
        packed = self._packed[self._starts[at] - base : self._starts[at + count] - base]  # a copy
        if self.size_bytes > self.bytes_max:
            self._drop_older_half()
        return packed

    def _cut(self, kept: int) -> None:
        del self._entries[kept:]
        del self._packed[self._starts[kept] - self._base :]
        del self._starts[kept + 1 :]

    def _add(self, records: tuple[Entry, ...], start: int, message_epoch: int) -> bool:
        """Check ``records[start:]``, the records after the run's end, and
        add them; False (the run unchanged) when the check refuses them or
        one is not an ``Entry``."""
        added = records[start:]
        if set(map(type, added)) != {Entry}:
            return False
        entries = self._entries
        try:
            # With the run's last record: contiguous, epochs in order.
            _records([entries[-1], *added] if entries else list(added), message_epoch, False)
        except ValueError:
            return False
        packed_each = list(map(_packer().pack, added))
        self._packed += b"".join(packed_each)
        # Where each added record starts, then the run's new end.
        self._starts.extend(islice(accumulate(map(len, packed_each), initial=self._starts[-1]), 1, None))
        entries.extend(added)
        self.records_packed += len(added)
        return True

    def _drop_older_half(self) -> None:
        """The run's first half goes (its tail is what answers carry)."""
        while self._entries and self.size_bytes > self.bytes_max // 2:
            dropped = max(1, len(self._entries) // 2)
            shift = self._starts[dropped] - self._base
            del self._entries[:dropped]
            del self._packed[:shift]
            del self._starts[:dropped]
            self._base += shift
            self._first_offset += dropped


def _fetch_response_payload(
    message: FetchResponse, body: list, correlation_id: int, cluster_id: str, limits: WireLimits, segments: RecordSegments
) -> bytes | None:
    """What ``_pack`` gives for a FetchResponse's envelope, its records
    packed and checked by ``segments``, the rest of the body checked as
    ``encode_message`` checks any body; None when ``segments`` does not
    keep the records (the caller packs and checks the message whole)."""
    records = message.records
    packed_records = segments.packed(records, message.epoch)
    if packed_records is None:
        return None
    body[_FETCH_RESPONSE_RECORDS_FIELD] = []
    try:
        decode_fetch_response(body, limits, False)
    except ValueError as exc:
        raise LocalProtocolError(f"invalid FetchResponse: {exc}") from exc
    try:
        packer = _packer()
        pack = packer.pack
        # The msgpack of an array is its header, then each element's
        # msgpack in turn; an array of at most 15 elements (a fixarray: the
        # envelope, the body, the body's parts here) has a one-byte header,
        # cut off where only the elements are wanted.
        return b"".join(
            (
                _FETCH_RESPONSE_ENVELOPE_HEAD,
                pack([correlation_id, cluster_id])[1:],
                packer.pack_array_header(len(body)),
                pack(body[:_FETCH_RESPONSE_RECORDS_FIELD])[1:],
                packer.pack_array_header(len(records)),
                packed_records,
                pack(body[_FETCH_RESPONSE_RECORDS_FIELD + 1 :])[1:],
            )
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot pack FetchResponse: {exc}") from exc


class Decoded(NamedTuple):
    """A decoded frame: the message, the correlation id to echo in the
    answer, and the version the sender used. A named tuple: one is built
    per frame received, at a fifth of a frozen dataclass's cost."""

    message: Any
    correlation_id: int
    version: int


def encode_message(
    message: Any,
    *,
    correlation_id: int,
    cluster_id: str,
    limits: WireLimits = DEFAULT_LIMITS,
    record_segments: RecordSegments | None = None,
) -> bytes:
    """A complete frame (length prefix included) carrying ``message``.

    The body is checked with the decoder's own rules before it is sent, so a
    peer running this code never rejects what we send (for a type whose
    constructor checks all of them, ``MessageSchema.checked_by_constructor``,
    by the constructor the message already passed).

    Raises ``LocalProtocolError`` when ``message`` is not a wire message
    type, when a field is invalid (the text names it), when
    ``correlation_id`` is not an int in 0..2^63-1 or ``cluster_id`` not a
    non-empty str of at most 255 chars, or when the frame would exceed
    ``limits.frame_bytes_max`` (``limits.small_frame_bytes_max`` for a
    request: no peer accepts a larger one).

    With ``record_segments``, a FetchResponse's records are checked and
    packed once for all the answers that carry them (``RecordSegments``):
    the same frame, the same checks, the same errors.
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
    payload = None
    if (
        record_segments is not None
        and encode_body is encode_fetch_response
        # _FETCH_RESPONSE_ENVELOPE_HEAD carries this version's number.
        and version == PROTOCOL_VERSION
        and len(body[_FETCH_RESPONSE_RECORDS_FIELD]) >= SEGMENT_RECORDS_MIN
    ):
        payload = _fetch_response_payload(message, body, correlation_id, cluster_id, limits, record_segments)
    if payload is None:
        if not schema.checked_by_constructor:
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
