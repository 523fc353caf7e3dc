"""The schema of every message body: type codes, field order, field checks.

A body is a msgpack array of the message's fields in a fixed order (see
docs/protocol.md, which must change with this file). Each message type has a
hand-written pair of functions rather than a generic field walker: the
codec is on the replication hot path, and a FetchResponse carrying a hundred
records must not pay for reflection per field.

- ``encode_*(message) -> list``: the body, not yet checked;
- ``decode_*(body, limits, build) -> message``: checks every field and
  builds the message; raises ``ValueError`` naming the bad field. With
  ``build=False`` it only checks (and may return None): the encoder runs it
  on its own output so that we never send what a peer would reject.

Nested values: an ``Entry`` travels as ``[offset, epoch, kind, data]``, an
``OffsetAndEpoch`` as ``[epoch, offset]``, a ``SnapshotId`` as
``[end_offset, epoch]``, a ``ReplicaDescription`` as
``[node_id, log_end_offset, last_fetch_ms]`` (and ``directory_id`` last, in
DescribeQuorumResponse version 3); None is nil.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from .._messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from .._node import ReplicaDescription
from .._types import (
    DATA_KIND,
    PER_BATCH_CHECK_MIN_RECORDS,
    VOTERS_KIND,
    Entry,
    OffsetAndEpoch,
    RecordKind,
    SnapshotId,
    one_epoch_columns,
)
from .._voters import ENDPOINTS_MAX, check_directory_id, check_endpoint, voter_set_problem
from ._checks import (
    INT64_MAX,
    RECORD_KINDS,
    check_bool,
    check_bytes,
    check_epoch,
    check_error_code,
    check_int64,
    check_node_id,
    check_optional_int64,
    check_optional_node_id,
    check_plain_value,
    describe_value,
)
from ._client_messages import (
    AddVoterRequest,
    ApplicationRequest,
    ApplicationResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ProposeRequest,
    ProposeResponse,
    ReadRequest,
    ReadResponse,
    RemoveVoterRequest,
    UpgradeVotersRequest,
    VoterChangeResponse,
)
from ._connection_messages import ErrorFrame, Hello
from ._frames import FRAME_BYTES_MAX

PROTOCOL_VERSION = 1


# Type codes of the messages that may legitimately be large: responses that
# carry records, snapshot chunks, or an answer of the application. Every
# other message (every request, every small answer) is held to
# ``WireLimits.small_frame_bytes_max``. A node receives no large message but
# a FetchResponse or a FetchSnapshotResponse (see ``NODE_LARGE_TYPE_CODES``).
LARGE_TYPE_CODES = frozenset({8, 10, 33, 35, 37, 39})
NODE_LARGE_TYPE_CODES = frozenset({8, 10})
# Messages sent only by whoever opens an exchange: never large anywhere, so
# the encoder holds them to the small limit (a peer would refuse more).
REQUEST_TYPE_CODES = frozenset({1, 3, 5, 7, 9, 32, 34, 36, 38, 40, 42, 43, 65})


@dataclass(frozen=True, slots=True, kw_only=True)
class WireLimits:
    """Bounds the decoder enforces (and the encoder, so both sides agree).

    Frame sizes depend on the message type, read from the first bytes of a
    frame before the rest is buffered or decoded: ``frame_bytes_max`` for the
    types in ``large_type_codes``, ``small_frame_bytes_max`` for all others.
    Decoding a frame costs up to ~70 bytes of Python objects per byte of
    msgpack (a frame of empty maps), so the small limit is what bounds a
    hostile request; containers past ``containers_max`` in a small frame are
    refused while decoding, which holds such a frame to ~20x its size.
    ``DEFAULT_LIMITS`` suits a client (answers may be large);
    ``NODE_LIMITS`` a node.
    """

    frame_bytes_max: int = FRAME_BYTES_MAX
    small_frame_bytes_max: int = 1024 * 1024
    large_type_codes: frozenset[int] = LARGE_TYPE_CODES
    # Arrays and maps in one small frame, in all.
    containers_max: int = 100_000
    # Above QuorumConfig.snapshot_chunk_bytes_max's default (1 MiB): the
    # runtime should pass its configured value.
    snapshot_chunk_bytes_max: int = 8 * 1024 * 1024
    # ``extension`` values: containers nested at most this deep, at most
    # this many values and keys in all.
    extension_depth_max: int = 16
    extension_items_max: int = 100_000
    # Lists of node ids or replicas (preferred successors, DescribeQuorum).
    replicas_max: int = 65_536
    # Records in one ProposeRequest: one atomic batch the leader appends
    # and replicates whole.
    records_per_request_max: int = 10_000

    def __post_init__(self) -> None:
        for name in (
            "frame_bytes_max",
            "small_frame_bytes_max",
            "containers_max",
            "snapshot_chunk_bytes_max",
            "extension_items_max",
            "replicas_max",
            "records_per_request_max",
        ):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.frame_bytes_max > 2**32 - 1:
            raise ValueError("frame_bytes_max must fit the 4-byte length prefix")
        if self.small_frame_bytes_max > self.frame_bytes_max:
            # A lowered frame_bytes_max lowers every limit.
            object.__setattr__(self, "small_frame_bytes_max", self.frame_bytes_max)
        if type(self.large_type_codes) is not frozenset:
            raise ValueError("large_type_codes must be a frozenset of type codes")
        if type(self.extension_depth_max) is not int or not 0 <= self.extension_depth_max <= 256:
            raise ValueError(f"extension_depth_max must be 0..256, got {self.extension_depth_max!r}")

    def frame_bytes_max_for(self, type_code: int | None) -> int:
        """The largest frame accepted for ``type_code`` (None: a frame whose
        type could not be read from its first bytes, held to the small
        limit)."""
        if type_code in self.large_type_codes:
            return self.frame_bytes_max
        return self.small_frame_bytes_max


DEFAULT_LIMITS = WireLimits()
NODE_LIMITS = WireLimits(large_type_codes=NODE_LARGE_TYPE_CODES)


def fields(body: Any, count: int) -> list:
    """``body`` as an array of exactly ``count`` fields."""
    if type(body) is list and len(body) == count:
        return body
    raise ValueError(f"body must be an array of {count} fields, got {describe_value(body)}")


def _extension(value: Any, limits: WireLimits) -> Any:
    if value is None:
        return None
    return check_plain_value(
        value, "extension", depth_max=limits.extension_depth_max, items_max=limits.extension_items_max
    )


def _offset_and_epoch(value: Any, name: str) -> OffsetAndEpoch:
    if type(value) is list and len(value) == 2:
        return OffsetAndEpoch(check_epoch(value[0], f"{name}.epoch"), check_int64(value[1], f"{name}.offset"))
    raise ValueError(f"{name} must be an array [epoch, offset], got {describe_value(value)}")


def _snapshot_id(value: Any, name: str) -> SnapshotId:
    if type(value) is list and len(value) == 2:
        return SnapshotId(check_int64(value[0], f"{name}.end_offset"), check_epoch(value[1], f"{name}.epoch"))
    raise ValueError(f"{name} must be an array [end_offset, epoch], got {describe_value(value)}")


def _encode_snapshot_id(snapshot_id: SnapshotId | None) -> list | None:
    return None if snapshot_id is None else [snapshot_id.end_offset, snapshot_id.epoch]


def _node_ids(value: Any, name: str, limits: WireLimits) -> tuple[int, ...]:
    if type(value) not in (list, tuple) or len(value) > limits.replicas_max:
        raise ValueError(f"{name} must be an array of at most {limits.replicas_max} node ids, got {describe_value(value)}")
    for index, node_id in enumerate(value):
        check_node_id(node_id, f"{name}[{index}]")
    if len(set(value)) != len(value):
        raise ValueError(f"{name} names a node twice")
    return tuple(value)


def _records(raw: Any, message_epoch: int, build: bool) -> tuple[Entry, ...]:
    """Records of a FetchResponse: ``[offset, epoch, kind, data]`` each, at
    contiguous offsets, epochs never decreasing and never above the epoch of
    the leader sending them. Anything else must not reach a log.

    The encoder runs this on its own body (``build=False``), whose records
    are still ``Entry`` tuples (msgpack packs them as those same arrays)."""
    if type(raw) is not list:
        raise ValueError(f"records must be an array, got {describe_value(raw)}")
    if not raw:
        return ()
    first = raw[0]
    if type(first) not in (list, Entry) or len(first) != 4:
        raise ValueError(f"records[0] must be an array [offset, epoch, kind, data], got {describe_value(first)}")
    first_offset = next_offset = check_int64(first[0], "records[0].offset")
    if len(raw) >= PER_BATCH_CHECK_MIN_RECORDS:
        entries_or_none = _one_epoch_data_records(raw, first_offset, message_epoch, build)
        if entries_or_none is not None:
            return entries_or_none
    previous_epoch = 0
    kinds = RECORD_KINDS
    # A plain int off the wire; an Entry holds a RecordKind (never a bool,
    # which would compare equal to a kind).
    kind_types = (int,) if build else (int, RecordKind)
    entries: list[Entry] = []
    append = entries.append
    # One combined test per record on the fast path; _reject_record works
    # out which rule was broken, for the error text.
    for record in raw:
        if (type(record) is list or (not build and type(record) is Entry)) and len(record) == 4:
            offset, epoch, kind, data = record
            if (
                offset == next_offset
                and type(offset) is int
                and type(epoch) is int
                and previous_epoch <= epoch <= message_epoch
                and type(kind) in kind_types
                and type(data) is bytes
            ):
                record_kind = kinds.get(kind)
                if record_kind is not None:
                    if record_kind is VOTERS_KIND:
                        # A voter set decides who votes: checked here, at the
                        # edge, as every other field (the core checks again).
                        problem = voter_set_problem(data)
                        if problem is not None:
                            raise ValueError(f"records[{next_offset - first_offset}] holds no voter set: {problem}")
                    if build:
                        append(Entry(offset, epoch, record_kind, data))
                    next_offset += 1
                    previous_epoch = epoch
                    continue
        _reject_record(record, next_offset, previous_epoch, message_epoch, index=next_offset - first_offset)
    if next_offset - 1 > INT64_MAX:
        raise ValueError(f"records run past the largest offset {INT64_MAX}")
    return tuple(entries)


_ONLY_LIST = {list}
_ONLY_ENTRY = {Entry}
_ONLY_INT = {int}
_ONLY_BYTES = {bytes}
_ONLY_FOUR = {4}
_ENCODED_KIND_TYPES = {int, RecordKind}
_new_tuple = tuple.__new__


def _one_epoch_data_records(raw: list, first_offset: int, message_epoch: int, build: bool) -> tuple[Entry, ...] | None:
    """What ``_records`` returns for ``raw`` when it has the shape of nearly
    every batch: arrays (``Entry`` tuples for the encoder) of four fields,
    int offsets from ``first_offset`` on without a gap, one int epoch within
    0..``message_epoch``, DATA records only, bytes data. Checked over the
    batch in C (``one_epoch_columns``, then a type set per column) rather
    than a record at a time; None for anything else, which the loop of
    ``_records`` then accepts or refuses, naming the record. ``raw``'s last
    offset is bounded by the caller."""
    if set(map(type, raw)) != (_ONLY_LIST if build else _ONLY_ENTRY) or set(map(len, raw)) != _ONLY_FOUR:
        return None
    columns = one_epoch_columns(raw, first_offset)
    if columns is None:
        return None
    offsets, epochs, kinds, datas = columns
    if not (
        set(map(type, offsets)) == _ONLY_INT
        and set(map(type, epochs)) == _ONLY_INT
        and 0 <= epochs[0] <= message_epoch
        and (set(map(type, kinds)) == _ONLY_INT if build else set(map(type, kinds)) <= _ENCODED_KIND_TYPES)
        and kinds.count(DATA_KIND) == len(kinds)
        and set(map(type, datas)) == _ONLY_BYTES
    ):
        return None
    if first_offset + len(raw) - 1 > INT64_MAX:
        return None  # the loop says so
    if not build:
        return ()
    # tuple.__new__ straight: the named tuple's own __new__ is a Python
    # function, one call per record.
    return tuple(map(_new_tuple, repeat(Entry), zip(offsets, epochs, repeat(DATA_KIND), datas)))


def _reject_record(record: Any, expected_offset: int, previous_epoch: int, message_epoch: int, *, index: int) -> None:
    """Raise the ValueError saying why ``record`` failed the fast check."""
    name = f"records[{index}]"
    if type(record) not in (list, Entry) or len(record) != 4:
        raise ValueError(f"{name} must be an array [offset, epoch, kind, data], got {describe_value(record)}")
    offset, epoch, kind, data = record
    check_int64(offset, f"{name}.offset")
    if offset != expected_offset:
        raise ValueError(f"{name}.offset is {offset}, expected {expected_offset}: records must be contiguous")
    check_epoch(epoch, f"{name}.epoch")
    if epoch < previous_epoch:
        raise ValueError(f"{name}.epoch {epoch} is below the previous record's {previous_epoch}")
    if epoch > message_epoch:
        raise ValueError(f"{name}.epoch {epoch} is above the sender's epoch {message_epoch}")
    if type(kind) not in (int, RecordKind) or kind not in RECORD_KINDS:
        raise ValueError(f"{name}.kind must be a known record kind {sorted(RECORD_KINDS)}, got {describe_value(kind)}")
    raise ValueError(f"{name}.data must be bytes, got {describe_value(data)}")


def _encode_records(records: tuple[Entry, ...]) -> list:
    # An Entry is a tuple in wire order, and msgpack packs a tuple as an
    # array and a RecordKind (an IntEnum) as its int: no copy per record.
    return list(records)


# --------------------------------------------------------------------------
# Quorum messages. Every body starts [src, dst, epoch].
# --------------------------------------------------------------------------


def fields_with_optional_tail(body: Any, count: int, optional: int = 1) -> list:
    """``body`` as ``count`` fields, the last ``optional`` of which a peer
    that predates them may leave out (they then read as nil): fields added
    later (KIP-853's directory ids) go at the end, so old and new peers
    understand each other during a rolling upgrade."""
    if type(body) is list and count - optional <= len(body) < count:
        return [*body, *([None] * (count - len(body)))]
    return fields(body, count)


# Directory ids that passed ``check_directory_id``: every Fetch of a voter
# carries its own, and the check builds a set of its characters. Validity
# depends on the string alone; bounded, since a peer chooses the strings.
_VALID_DIRECTORY_IDS: set[str] = set()
_VALID_DIRECTORY_IDS_MAX = 1024


def _directory_id(value: Any, name: str) -> str | None:
    if value is None or (type(value) is str and value in _VALID_DIRECTORY_IDS):
        return value
    try:
        checked = check_directory_id(value, name)
    except ValueError:
        raise ValueError(f"{name} must be nil or a directory id, got {describe_value(value)}") from None
    if type(checked) is str:
        if len(_VALID_DIRECTORY_IDS) >= _VALID_DIRECTORY_IDS_MAX:
            _VALID_DIRECTORY_IDS.clear()
        _VALID_DIRECTORY_IDS.add(checked)
    return checked


def encode_vote_request(m: VoteRequest) -> list:
    return [m.src, m.dst, m.epoch, m.last_epoch, m.end_offset, m.pre_vote, m.voter_directory_id]


def decode_vote_request(body: Any, limits: WireLimits, build: bool) -> VoteRequest:
    src, dst, epoch, last_epoch, end_offset, pre_vote, voter_directory_id = fields_with_optional_tail(body, 7)
    return VoteRequest(
        src=check_node_id(src, "src"),
        dst=check_node_id(dst, "dst"),
        epoch=check_epoch(epoch, "epoch"),
        last_epoch=check_epoch(last_epoch, "last_epoch"),
        end_offset=check_int64(end_offset, "end_offset"),
        pre_vote=check_bool(pre_vote, "pre_vote"),
        voter_directory_id=_directory_id(voter_directory_id, "voter_directory_id"),
    )


def encode_vote_response(m: VoteResponse) -> list:
    return [m.src, m.dst, m.epoch, m.granted, m.pre_vote, m.leader_id, m.error]


def decode_vote_response(body: Any, limits: WireLimits, build: bool) -> VoteResponse:
    src, dst, epoch, granted, pre_vote, leader_id, error = fields(body, 7)
    return VoteResponse(
        src=check_node_id(src, "src"),
        dst=check_node_id(dst, "dst"),
        epoch=check_epoch(epoch, "epoch"),
        granted=check_bool(granted, "granted"),
        pre_vote=check_bool(pre_vote, "pre_vote"),
        leader_id=check_optional_node_id(leader_id, "leader_id"),
        error=check_error_code(error),
    )


def encode_begin_quorum_epoch_request(m: BeginQuorumEpochRequest) -> list:
    return [m.src, m.dst, m.epoch]


def decode_begin_quorum_epoch_request(body: Any, limits: WireLimits, build: bool) -> BeginQuorumEpochRequest:
    src, dst, epoch = fields(body, 3)
    return BeginQuorumEpochRequest(
        src=check_node_id(src, "src"), dst=check_node_id(dst, "dst"), epoch=check_epoch(epoch, "epoch")
    )


def encode_begin_quorum_epoch_response(m: BeginQuorumEpochResponse) -> list:
    return [m.src, m.dst, m.epoch, m.error]


def decode_begin_quorum_epoch_response(body: Any, limits: WireLimits, build: bool) -> BeginQuorumEpochResponse:
    src, dst, epoch, error = fields(body, 4)
    return BeginQuorumEpochResponse(
        src=check_node_id(src, "src"),
        dst=check_node_id(dst, "dst"),
        epoch=check_epoch(epoch, "epoch"),
        error=check_error_code(error),
    )


def encode_end_quorum_epoch_request(m: EndQuorumEpochRequest) -> list:
    return [m.src, m.dst, m.epoch, list(m.preferred_successors)]


def decode_end_quorum_epoch_request(body: Any, limits: WireLimits, build: bool) -> EndQuorumEpochRequest:
    src, dst, epoch, preferred_successors = fields(body, 4)
    return EndQuorumEpochRequest(
        src=check_node_id(src, "src"),
        dst=check_node_id(dst, "dst"),
        epoch=check_epoch(epoch, "epoch"),
        preferred_successors=_node_ids(preferred_successors, "preferred_successors", limits),
    )


def encode_end_quorum_epoch_response(m: EndQuorumEpochResponse) -> list:
    return [m.src, m.dst, m.epoch, m.error]


def decode_end_quorum_epoch_response(body: Any, limits: WireLimits, build: bool) -> EndQuorumEpochResponse:
    src, dst, epoch, error = fields(body, 4)
    return EndQuorumEpochResponse(
        src=check_node_id(src, "src"),
        dst=check_node_id(dst, "dst"),
        epoch=check_epoch(epoch, "epoch"),
        error=check_error_code(error),
    )


def encode_fetch_request(m: FetchRequest) -> list:
    body = [
        m.src, m.dst, m.epoch, m.fetch_offset, m.last_fetched_epoch, m.request_id, m.read_token, m.extension,
        m.directory_id,
    ]  # fmt: skip
    # ``repairing`` only when true: a Fetch of a node that does not repair
    # is the very body a peer that predates the field decodes. ``observer``
    # is no body field: the connection's Hello carries it (role
    # "observer"), and the receiving transport sets it.
    if m.repairing:
        body.append(True)
    return body


def decode_fetch_request(body: Any, limits: WireLimits, build: bool) -> FetchRequest | None:
    src, dst, epoch, fetch_offset, last_fetched_epoch, request_id, read_token, extension, directory_id, repairing = (
        fields_with_optional_tail(body, 10, optional=2)
    )
    # Every field checked, in this order, whether or not a message is built
    # (the encoder's own check builds none: it has the message).
    src = check_node_id(src, "src")
    dst = check_node_id(dst, "dst")
    epoch = check_epoch(epoch, "epoch")
    fetch_offset = check_int64(fetch_offset, "fetch_offset")
    last_fetched_epoch = check_epoch(last_fetched_epoch, "last_fetched_epoch")
    request_id = check_int64(request_id, "request_id")
    read_token = check_int64(read_token, "read_token")
    extension = _extension(extension, limits)
    directory_id = _directory_id(directory_id, "directory_id")
    repairing = False if repairing is None else check_bool(repairing, "repairing")
    if not build:
        return None
    return FetchRequest(
        src=src,
        dst=dst,
        epoch=epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch,
        request_id=request_id,
        read_token=read_token,
        extension=extension,
        directory_id=directory_id,
        repairing=repairing,
    )


def encode_fetch_response(m: FetchResponse) -> list:
    diverging = m.diverging
    return [
        m.src,
        m.dst,
        m.epoch,
        m.request_id,
        m.leader_id,
        m.error,
        m.high_watermark,
        m.log_start_offset,
        _encode_records(m.records),
        None if diverging is None else [diverging.epoch, diverging.offset],
        _encode_snapshot_id(m.snapshot_id),
        m.read_token,
        m.extension,
        # ``leader_endpoint`` only when set: every other answer is the very
        # body a peer that predates the field decodes.
        *(() if m.leader_endpoint is None else (m.leader_endpoint,)),
    ]


def decode_fetch_response(body: Any, limits: WireLimits, build: bool) -> FetchResponse | None:
    (
        src,
        dst,
        epoch,
        request_id,
        leader_id,
        error,
        high_watermark,
        log_start_offset,
        records,
        diverging,
        snapshot_id,
        read_token,
        extension,
        leader_endpoint,
    ) = fields_with_optional_tail(body, 14)
    epoch = check_epoch(epoch, "epoch")
    # Every field checked, in this order, whether or not a message is built
    # (the encoder's own check builds none: it has the message).
    src = check_node_id(src, "src")
    dst = check_node_id(dst, "dst")
    request_id = check_int64(request_id, "request_id")
    leader_id = check_optional_node_id(leader_id, "leader_id")
    error = check_error_code(error)
    high_watermark = check_int64(high_watermark, "high_watermark")
    log_start_offset = check_int64(log_start_offset, "log_start_offset")
    records = _records(records, epoch, build)
    diverging = None if diverging is None else _offset_and_epoch(diverging, "diverging")
    snapshot_id = None if snapshot_id is None else _snapshot_id(snapshot_id, "snapshot_id")
    read_token = check_int64(read_token, "read_token")
    extension = _extension(extension, limits)
    leader_endpoint = None if leader_endpoint is None else check_endpoint(leader_endpoint, "leader_endpoint")
    if not build:
        return None
    return FetchResponse(
        src=src,
        dst=dst,
        epoch=epoch,
        request_id=request_id,
        leader_id=leader_id,
        error=error,
        high_watermark=high_watermark,
        log_start_offset=log_start_offset,
        records=records,
        diverging=diverging,
        snapshot_id=snapshot_id,
        read_token=read_token,
        extension=extension,
        leader_endpoint=leader_endpoint,
    )


def encode_fetch_snapshot_request(m: FetchSnapshotRequest) -> list:
    return [m.src, m.dst, m.epoch, _encode_snapshot_id(m.snapshot_id), m.position, m.request_id]


def decode_fetch_snapshot_request(body: Any, limits: WireLimits, build: bool) -> FetchSnapshotRequest:
    src, dst, epoch, snapshot_id, position, request_id = fields(body, 6)
    return FetchSnapshotRequest(
        src=check_node_id(src, "src"),
        dst=check_node_id(dst, "dst"),
        epoch=check_epoch(epoch, "epoch"),
        snapshot_id=_snapshot_id(snapshot_id, "snapshot_id"),
        position=check_int64(position, "position"),
        request_id=check_int64(request_id, "request_id"),
    )


def encode_fetch_snapshot_response(m: FetchSnapshotResponse) -> list:
    return [
        m.src,
        m.dst,
        m.epoch,
        m.request_id,
        m.leader_id,
        m.error,
        _encode_snapshot_id(m.snapshot_id),
        m.position,
        m.size,
        m.chunk,
    ]


def decode_fetch_snapshot_response(body: Any, limits: WireLimits, build: bool) -> FetchSnapshotResponse:
    src, dst, epoch, request_id, leader_id, error, snapshot_id, position, size, chunk = fields(body, 10)
    position = check_int64(position, "position")
    size = check_int64(size, "size")
    chunk = check_bytes(chunk, "chunk", limits.snapshot_chunk_bytes_max)
    if position + len(chunk) > size:
        raise ValueError(f"chunk of {len(chunk)} bytes at position {position} runs past the snapshot size {size}")
    return FetchSnapshotResponse(
        src=check_node_id(src, "src"),
        dst=check_node_id(dst, "dst"),
        epoch=check_epoch(epoch, "epoch"),
        request_id=check_int64(request_id, "request_id"),
        leader_id=check_optional_node_id(leader_id, "leader_id"),
        error=check_error_code(error),
        snapshot_id=None if snapshot_id is None else _snapshot_id(snapshot_id, "snapshot_id"),
        position=position,
        size=size,
        chunk=chunk,
    )


# --------------------------------------------------------------------------
# Connection frames and client messages. These classes validate themselves
# (ValueError); the decoders only reshape wire arrays into their fields.
# --------------------------------------------------------------------------


def encode_error_frame(m: ErrorFrame) -> list:
    return [m.code, m.message, m.correlation_id]


def decode_error_frame(body: Any, limits: WireLimits, build: bool) -> ErrorFrame:
    code, message, correlation_id = fields(body, 3)
    return ErrorFrame(code=code, message=message, correlation_id=correlation_id)


def encode_hello(m: Hello) -> list:
    return [m.node_id, m.role]


def decode_hello(body: Any, limits: WireLimits, build: bool) -> Hello:
    node_id, role = fields(body, 2)
    return Hello(node_id=node_id, role=role)


def encode_propose_request(m: ProposeRequest) -> list:
    return [list(m.records)]


def decode_propose_request(body: Any, limits: WireLimits, build: bool, **version_fields: Any) -> ProposeRequest:
    (records,) = fields(body, 1)
    if type(records) is not list or len(records) > limits.records_per_request_max:
        raise ValueError(
            f"records must be an array of at most {limits.records_per_request_max}, got {describe_value(records)}"
        )
    return ProposeRequest(records=tuple(records), **version_fields)


def encode_propose_response(m: ProposeResponse) -> list:
    return [m.error, m.offset, m.leader_hint, list(m.results)]


def decode_propose_response(body: Any, limits: WireLimits, build: bool, **version_fields: Any) -> ProposeResponse:
    error, offset, leader_hint, results = fields(body, 4)
    if type(results) is not list:
        raise ValueError(f"results must be an array, got {type(results).__name__}")
    return ProposeResponse(
        error=check_error_code(error), offset=offset, leader_hint=leader_hint, results=tuple(results), **version_fields
    )


def encode_read_request(m: ReadRequest) -> list:
    return [m.mode, m.query]


def decode_read_request(body: Any, limits: WireLimits, build: bool, **version_fields: Any) -> ReadRequest:
    mode, query = fields(body, 2)
    return ReadRequest(mode=mode, query=query, **version_fields)


def encode_read_response(m: ReadResponse) -> list:
    return [m.error, m.offset, m.leader_hint, m.value]


def decode_read_response(body: Any, limits: WireLimits, build: bool, **version_fields: Any) -> ReadResponse:
    error, offset, leader_hint, value = fields(body, 4)
    return ReadResponse(
        error=check_error_code(error), offset=offset, leader_hint=leader_hint, value=value, **version_fields
    )


def encode_describe_quorum_request(m: DescribeQuorumRequest) -> list:
    return []


def decode_describe_quorum_request(body: Any, limits: WireLimits, build: bool) -> DescribeQuorumRequest:
    fields(body, 0)
    return DescribeQuorumRequest(version=1)


def decode_describe_quorum_request_v2(body: Any, limits: WireLimits, build: bool) -> DescribeQuorumRequest:
    fields(body, 0)
    return DescribeQuorumRequest(version=2)


def _encode_replicas(replicas: tuple[ReplicaDescription, ...]) -> list:
    return [[r.node_id, r.log_end_offset, r.last_fetch_ms] for r in replicas]


def _encode_replicas_with_directories(replicas: tuple[ReplicaDescription, ...]) -> list:
    return [[r.node_id, r.log_end_offset, r.last_fetch_ms, r.directory_id] for r in replicas]


def _replicas(value: Any, name: str, limits: WireLimits, with_directories: bool = False) -> tuple[ReplicaDescription, ...]:
    if type(value) is not list or len(value) > limits.replicas_max:
        raise ValueError(f"{name} must be an array of at most {limits.replicas_max} replicas, got {describe_value(value)}")
    replicas = []
    arity = 4 if with_directories else 3
    for index, item in enumerate(value):
        if type(item) is not list or len(item) != arity:
            shape = "node_id, log_end_offset, last_fetch_ms" + (", directory_id" if with_directories else "")
            raise ValueError(f"{name}[{index}] must be an array [{shape}], got {describe_value(item)}")
        node_id, log_end_offset, last_fetch_ms = item[:3]
        replicas.append(
            ReplicaDescription(
                check_node_id(node_id, f"{name}[{index}].node_id"),
                check_optional_int64(log_end_offset, f"{name}[{index}].log_end_offset"),
                check_optional_int64(last_fetch_ms, f"{name}[{index}].last_fetch_ms"),
                _directory_id(item[3], f"{name}[{index}].directory_id") if with_directories else None,
            )
        )
    if len({replica.node_id for replica in replicas}) != len(replicas):
        raise ValueError(f"{name} names a node twice")
    return tuple(replicas)


def encode_describe_quorum_response(m: DescribeQuorumResponse) -> list:
    return [
        m.error,
        m.leader_id,
        m.epoch,
        m.high_watermark,
        _encode_replicas(m.voters),
        _encode_replicas(m.observers),
    ]


def _describe_quorum_response(
    head: Any, limits: WireLimits, with_directories: bool = False, **version_fields: Any
) -> DescribeQuorumResponse:
    """The six fields every version shares, and what a version adds."""
    error, leader_id, epoch, high_watermark, voters, observers = head
    return DescribeQuorumResponse(
        error=check_error_code(error),
        leader_id=leader_id,
        epoch=epoch,
        high_watermark=high_watermark,
        voters=_replicas(voters, "voters", limits, with_directories),
        observers=_replicas(observers, "observers", limits, with_directories),
        **version_fields,
    )


def decode_describe_quorum_response(body: Any, limits: WireLimits, build: bool) -> DescribeQuorumResponse:
    return _describe_quorum_response(fields(body, 6), limits, repairing=None, repairing_voters=None, version=1)


def encode_describe_quorum_response_v2(m: DescribeQuorumResponse) -> list:
    return [*encode_describe_quorum_response(m), m.node_id, m.disk_failure, m.repairing]


def decode_describe_quorum_response_v2(body: Any, limits: WireLimits, build: bool) -> DescribeQuorumResponse:
    *head, node_id, disk_failure, repairing = fields(body, 9)
    return _describe_quorum_response(
        head, limits, node_id=node_id, disk_failure=disk_failure, repairing=repairing, repairing_voters=None, version=2
    )


def decode_describe_quorum_request_v3(body: Any, limits: WireLimits, build: bool) -> DescribeQuorumRequest:
    fields(body, 0)
    return DescribeQuorumRequest(version=3)


def encode_describe_quorum_response_v3(m: DescribeQuorumResponse) -> list:
    # Version 2's fields with each replica's directory id (KIP-853), then
    # the voters a leader knows to be repairing (issue 14).
    return [
        m.error,
        m.leader_id,
        m.epoch,
        m.high_watermark,
        _encode_replicas_with_directories(m.voters),
        _encode_replicas_with_directories(m.observers),
        m.node_id,
        m.disk_failure,
        m.repairing,
        list(m.repairing_voters or ()),
    ]


def decode_describe_quorum_response_v3(body: Any, limits: WireLimits, build: bool) -> DescribeQuorumResponse:
    *head, node_id, disk_failure, repairing, repairing_voters = fields(body, 10)
    return _describe_quorum_response(
        head,
        limits,
        True,
        node_id=node_id,
        disk_failure=disk_failure,
        repairing=repairing,
        repairing_voters=_node_ids(repairing_voters, "repairing_voters", limits),
        version=3,
    )


# --------------------------------------------------------------------------
# The registry. Type codes are forever: never reuse or renumber one.
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageSchema:
    """One message type. ``encode_body``/``decode_body`` are version 1;
    ``later_versions`` holds ``(version, encode, decode)`` for each later
    one; a message of such a type has a ``version`` attribute and is sent
    in that version (every other message in version 1)."""

    type_code: int
    message_class: type
    encode_body: Callable[[Any], list]
    decode_body: Callable[[Any, WireLimits, bool], Any]
    later_versions: tuple[tuple[int, Callable[[Any], list], Callable[[Any, WireLimits, bool], Any]], ...] = ()
    # The message class's constructor checks everything this type's
    # decoders check (they add only the body's shape, which the encoders
    # produce by construction, and nothing against ``WireLimits``), and its
    # instances are frozen: ``encode_message`` skips the send-side decode
    # of such a message, which would only build it again (issue 21: a
    # ProposeResponse per write on the leader). Held by a property test
    # (tests/wire/test_wire_constructor_checks.py).
    checked_by_constructor: bool = False
    # Fields of the message class that are not in its body: the receiving
    # transport sets them from the connection (FetchRequest's ``observer``,
    # from the sender's Hello role), so old and new peers decode the same
    # body.
    connection_fields: tuple[str, ...] = ()
    # Derived once from the above: every frame asks for them.
    versions: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _codecs: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        codecs = {PROTOCOL_VERSION: (self.encode_body, self.decode_body)}
        for later, encode, decode in self.later_versions:
            codecs.setdefault(later, (encode, decode))
        object.__setattr__(self, "versions", (PROTOCOL_VERSION, *(version for version, _, _ in self.later_versions)))
        object.__setattr__(self, "_codecs", codecs)

    @property
    def name(self) -> str:
        return self.message_class.__name__

    def codec(self, version: int) -> tuple[Callable[[Any], list], Callable[[Any, WireLimits, bool], Any]]:
        """(encode, decode) of ``version``; raises ``KeyError`` for a version
        this type does not have."""
        try:
            return self._codecs[version]
        except TypeError:  # unhashable: no version either
            raise KeyError(version) from None


def encode_application_request(m: ApplicationRequest) -> list:
    return [m.payload]


def decode_application_request(body: Any, limits: WireLimits, build: bool, **version_fields: Any) -> ApplicationRequest:
    (payload,) = fields(body, 1)
    return ApplicationRequest(payload=payload, **version_fields)


def encode_application_response(m: ApplicationResponse) -> list:
    return [m.error, m.leader_hint, m.payload]


def decode_application_response(
    body: Any, limits: WireLimits, build: bool, **version_fields: Any
) -> ApplicationResponse:
    error, leader_hint, payload = fields(body, 3)
    return ApplicationResponse(error=check_error_code(error), leader_hint=leader_hint, payload=payload, **version_fields)


def _endpoints(value: Any, limits: WireLimits) -> tuple:
    if type(value) is not list or len(value) > ENDPOINTS_MAX:
        raise ValueError(f"endpoints must be an array of at most {ENDPOINTS_MAX}, got {describe_value(value)}")
    return tuple(value)


def encode_add_voter_request(m: AddVoterRequest) -> list:
    return [m.node_id, m.directory_id, list(m.endpoints)]


def decode_add_voter_request(body: Any, limits: WireLimits, build: bool, **version_fields: Any) -> AddVoterRequest:
    node_id, directory_id, endpoints = fields(body, 3)
    return AddVoterRequest(
        node_id=node_id,
        directory_id=_directory_id(directory_id, "directory_id"),
        endpoints=_endpoints(endpoints, limits),
        **version_fields,
    )


def encode_add_voter_request_v2(m: AddVoterRequest) -> list:
    # Version 1's fields, then whether the node asks for itself (auto-join);
    # its answer, as every version-2 answer, names where the leader listens.
    return [*encode_add_voter_request(m), m.auto_join]


def decode_add_voter_request_v2(body: Any, limits: WireLimits, build: bool) -> AddVoterRequest:
    node_id, directory_id, endpoints, auto_join = fields(body, 4)
    return AddVoterRequest(
        node_id=node_id,
        directory_id=_directory_id(directory_id, "directory_id"),
        endpoints=_endpoints(endpoints, limits),
        auto_join=check_bool(auto_join, "auto_join"),
        version=2,
    )


def encode_remove_voter_request(m: RemoveVoterRequest) -> list:
    return [m.node_id, m.directory_id]


def decode_remove_voter_request(body: Any, limits: WireLimits, build: bool, **version_fields: Any) -> RemoveVoterRequest:
    node_id, directory_id = fields(body, 2)
    return RemoveVoterRequest(node_id=node_id, directory_id=_directory_id(directory_id, "directory_id"), **version_fields)


def encode_upgrade_voters_request(m: UpgradeVotersRequest) -> list:
    return []


def decode_upgrade_voters_request(
    body: Any, limits: WireLimits, build: bool, **version_fields: Any
) -> UpgradeVotersRequest:
    fields(body, 0)
    return UpgradeVotersRequest(**version_fields)


def encode_voter_change_response(m: VoterChangeResponse) -> list:
    return [m.error, m.leader_hint, m.offset, m.message]


def decode_voter_change_response(
    body: Any, limits: WireLimits, build: bool, **version_fields: Any
) -> VoterChangeResponse:
    error, leader_hint, offset, message = fields(body, 4)
    return VoterChangeResponse(
        error=check_error_code(error), leader_hint=leader_hint, offset=offset, message=message, **version_fields
    )


# Version 2 of the client requests a node may answer NOT_LEADER, and of
# their answers (``LEADER_HINT_VERSIONS``): a request's body is version 1's;
# an answer's is version 1's, then ``leader_epoch`` and ``leader_endpoint``.


def _in_version(decode: Callable[..., Any], version: int) -> Callable[[Any, WireLimits, bool], Any]:
    """``decode`` (which passes its keyword arguments on to the message's
    constructor), whose message says it came in ``version``. Built once
    with that version, not rebuilt: the constructor's checks run once."""

    def decode_in_version(body: Any, limits: WireLimits, build: bool) -> Any:
        return decode(body, limits, build, version=version)

    return decode_in_version


def _with_leader_fields(encode: Callable[[Any], list]) -> Callable[[Any], list]:
    """Version 2 of an answer's body: version 1's, then the leader's epoch
    and endpoint."""

    def encode_v2(m: Any) -> list:
        return [*encode(m), m.leader_epoch, m.leader_endpoint]

    return encode_v2


def _leader_fields_decoder(decode: Callable[..., Any]) -> Callable[[Any, WireLimits, bool], Any]:
    """Decodes ``_with_leader_fields``' bodies (``decode`` passes its keyword
    arguments on to the message's constructor); ``ValueError`` (from the
    message's own checks) for a leader epoch or endpoint out of range."""

    def decode_v2(body: Any, limits: WireLimits, build: bool) -> Any:
        if type(body) is not list or len(body) < 2:
            raise ValueError(f"body must be an array ending in leader_epoch, leader_endpoint, got {describe_value(body)}")
        return decode(body[:-2], limits, build, leader_epoch=body[-2], leader_endpoint=body[-1], version=2)

    return decode_v2


def _leader_hint_schemas(
    type_code: int, message_class: type, encode: Callable[[Any], list], decode: Callable[[Any, WireLimits, bool], Any]
) -> MessageSchema:
    """The schema of a request (versions 1 and 2 share a body) or, for a
    class with ``leader_endpoint``, of an answer (version 2 adds the leader
    fields) that may say NOT_LEADER."""
    if "leader_endpoint" in message_class.__dataclass_fields__:
        return MessageSchema(
            type_code, message_class, encode, _in_version(decode, 1),
            ((2, _with_leader_fields(encode), _leader_fields_decoder(decode)),),
        )  # fmt: skip
    return MessageSchema(type_code, message_class, encode, _in_version(decode, 1), ((2, encode, _in_version(decode, 2)),))


SCHEMAS: tuple[MessageSchema, ...] = (
    # 1..31: quorum messages (KIP-595, KIP-996 pre-vote, KIP-630 snapshots).
    MessageSchema(1, VoteRequest, encode_vote_request, decode_vote_request),
    MessageSchema(2, VoteResponse, encode_vote_response, decode_vote_response),
    MessageSchema(3, BeginQuorumEpochRequest, encode_begin_quorum_epoch_request, decode_begin_quorum_epoch_request),
    MessageSchema(4, BeginQuorumEpochResponse, encode_begin_quorum_epoch_response, decode_begin_quorum_epoch_response),
    MessageSchema(5, EndQuorumEpochRequest, encode_end_quorum_epoch_request, decode_end_quorum_epoch_request),
    MessageSchema(6, EndQuorumEpochResponse, encode_end_quorum_epoch_response, decode_end_quorum_epoch_response),
    MessageSchema(7, FetchRequest, encode_fetch_request, decode_fetch_request, connection_fields=("observer",)),
    MessageSchema(8, FetchResponse, encode_fetch_response, decode_fetch_response),
    MessageSchema(9, FetchSnapshotRequest, encode_fetch_snapshot_request, decode_fetch_snapshot_request),
    MessageSchema(10, FetchSnapshotResponse, encode_fetch_snapshot_response, decode_fetch_snapshot_response),
    # 32..63: client requests.
    _leader_hint_schemas(32, ProposeRequest, encode_propose_request, decode_propose_request),
    dataclasses.replace(
        _leader_hint_schemas(33, ProposeResponse, encode_propose_response, decode_propose_response),
        checked_by_constructor=True,
    ),
    _leader_hint_schemas(34, ReadRequest, encode_read_request, decode_read_request),
    _leader_hint_schemas(35, ReadResponse, encode_read_response, decode_read_response),
    MessageSchema(
        36, DescribeQuorumRequest, encode_describe_quorum_request, decode_describe_quorum_request,
        (
            (2, encode_describe_quorum_request, decode_describe_quorum_request_v2),
            (3, encode_describe_quorum_request, decode_describe_quorum_request_v3),
        ),
    ),
    MessageSchema(
        37, DescribeQuorumResponse, encode_describe_quorum_response, decode_describe_quorum_response,
        (
            (2, encode_describe_quorum_response_v2, decode_describe_quorum_response_v2),
            (3, encode_describe_quorum_response_v3, decode_describe_quorum_response_v3),
        ),
    ),
    _leader_hint_schemas(38, ApplicationRequest, encode_application_request, decode_application_request),
    _leader_hint_schemas(39, ApplicationResponse, encode_application_response, decode_application_response),
    # KIP-853 voter changes (administration, served by the leader).
    MessageSchema(
        40, AddVoterRequest, encode_add_voter_request, _in_version(decode_add_voter_request, 1),
        ((2, encode_add_voter_request_v2, decode_add_voter_request_v2),),
    ),
    _leader_hint_schemas(41, VoterChangeResponse, encode_voter_change_response, decode_voter_change_response),
    _leader_hint_schemas(42, RemoveVoterRequest, encode_remove_voter_request, decode_remove_voter_request),
    _leader_hint_schemas(43, UpgradeVotersRequest, encode_upgrade_voters_request, decode_upgrade_voters_request),
    # 64..: connection frames.
    MessageSchema(64, ErrorFrame, encode_error_frame, decode_error_frame),
    MessageSchema(65, Hello, encode_hello, decode_hello),
)

SCHEMA_BY_CODE: dict[int, MessageSchema] = {schema.type_code: schema for schema in SCHEMAS}
SCHEMA_BY_CLASS: dict[type, MessageSchema] = {schema.message_class: schema for schema in SCHEMAS}
# Public view: message class -> type code.
MESSAGE_TYPE_CODES: dict[type, int] = {schema.message_class: schema.type_code for schema in SCHEMAS}

assert len(SCHEMA_BY_CODE) == len(SCHEMAS) == len(SCHEMA_BY_CLASS), "a type code or class is registered twice"
assert LARGE_TYPE_CODES <= set(SCHEMA_BY_CODE) and REQUEST_TYPE_CODES <= set(SCHEMA_BY_CODE)
assert not LARGE_TYPE_CODES & REQUEST_TYPE_CODES, "a request type can not be large"
