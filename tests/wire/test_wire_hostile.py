"""Hostile input at the wire edge (issue 15, parts 1 and 3), sans-IO.

- Every epoch field is an int32: the log stores a batch's epoch as a u32,
  and one VoteRequest at 2**32 + 1 used to be granted, persisted, and then
  crash the winner on every restart.
- Boundary values in any field of any message type are accepted as a valid
  message or refused with a ``RemoteProtocolError``; what is accepted holds
  only values the storage can hold.
- Frame sizes depend on the message type, read from a frame's first two
  bytes, before the rest is buffered.
- A msgpack bomb costs the decoder a bounded multiple of its size
  (measured with tracemalloc).
"""

from __future__ import annotations

import dataclasses
import math
import tracemalloc

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _wire_strategies import EXAMPLES, any_message
from quorum import FetchRequest, FetchResponse, VoteRequest
from quorum.wire import (
    DEFAULT_LIMITS,
    EPOCH_MAX,
    INT64_MAX,
    NODE_LIMITS,
    FrameDecoder,
    FrameTooLargeError,
    InvalidMessageError,
    LocalProtocolError,
    MalformedFrameError,
    ProposeRequest,
    RemoteProtocolError,
    decode_message,
    encode_message,
    peek_type_code,
)
from test_wire_fuzz import FUZZ, _paths, _replace, decode_or_reject

CLUSTER = "fuzz-cluster"


def _envelope(message) -> list:
    return msgpack.unpackb(encode_message(message, correlation_id=1, cluster_id=CLUSTER)[4:])


# ---------------------------------------------------------------------------
# Epochs: what the storage can hold, and nothing above
# ---------------------------------------------------------------------------

EPOCH_FIELDS = {
    # message type -> body positions of its epoch fields
    VoteRequest: (2, 3),
    FetchRequest: (2, 4),
    FetchResponse: (2,),
}


@pytest.mark.parametrize("epoch", [2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**63 - 1])
@pytest.mark.parametrize("message_type", list(EPOCH_FIELDS), ids=lambda t: t.__name__)
def test_an_epoch_above_int32_is_refused_with_invalid_request(message_type, epoch):
    envelope = _envelope(EXAMPLES[message_type])
    for position in EPOCH_FIELDS[message_type]:
        body = list(envelope[4])
        body[position] = epoch
        with pytest.raises(InvalidMessageError, match="epoch") as caught:
            decode_message(msgpack.packb([*envelope[:4], body]), expected_cluster_id=CLUSTER)
        assert caught.value.recoverable and caught.value.correlation_id == 1


def test_the_largest_epoch_is_accepted_and_fits_the_log_format():
    from quorum.storage._format import U32_MAX

    assert EPOCH_MAX < U32_MAX  # a node at the largest wire epoch can still stand, 2**31 times
    body = [2, 1, EPOCH_MAX, EPOCH_MAX, 43, False]
    decoded = decode_message(msgpack.packb([1, 1, 1, CLUSTER, body]), expected_cluster_id=CLUSTER)
    assert decoded.message.epoch == EPOCH_MAX


def test_the_encoder_refuses_an_epoch_no_peer_would_accept():
    message = VoteRequest(src=1, dst=2, epoch=2**31, last_epoch=0, end_offset=0, pre_vote=False)
    with pytest.raises(LocalProtocolError, match="epoch"):
        encode_message(message, correlation_id=1, cluster_id=CLUSTER)


# ---------------------------------------------------------------------------
# Boundary values in any field of any message type
# ---------------------------------------------------------------------------

_NESTED: list = []
for _ in range(20):
    _NESTED = [_NESTED]
boundary_values = st.sampled_from(
    [
        -1,
        -(2**31),
        -(2**63),
        2**31 - 1,
        2**31,
        2**32 - 1,
        2**32,
        2**32 + 1,
        2**63 - 1,
        2**63,
        2**64 - 1,
        math.nan,
        math.inf,
        -0.0,
        1.5,
        True,
        None,
        "",
        "x" * 300,
        b"",
        b"\x00" * 300,
        list(range(2000)),
        [None] * 5000,
        {"unknown": 1, "keys": [1, 2]},
        {str(index): index for index in range(2000)},
        _NESTED,
        [_NESTED] * 50,
    ]
)


def _epoch_and_int_fields_fit(message) -> None:
    """What the decoder let through holds values the node can store."""
    for name in ("epoch", "last_epoch", "last_fetched_epoch"):
        value = getattr(message, name, None)
        if value is not None:
            assert 0 <= value <= EPOCH_MAX, (name, value)
    for name in ("src", "dst", "leader_id", "node_id"):
        value = getattr(message, name, None)
        if value is not None:
            assert 0 <= value < 2**31, (name, value)
    for name in ("fetch_offset", "end_offset", "high_watermark", "log_start_offset", "position", "size", "request_id"):
        value = getattr(message, name, None)
        if value is not None:
            assert 0 <= value <= INT64_MAX, (name, value)
    for record in getattr(message, "records", None) or ():
        if isinstance(record, tuple) and hasattr(record, "epoch"):
            assert 0 <= record.epoch <= EPOCH_MAX and 0 <= record.offset <= INT64_MAX


@FUZZ
@given(message=any_message, data=st.data())
def test_a_boundary_value_in_any_field(message, data):
    envelope = _envelope(message)
    paths = [path for path in _paths(envelope) if path[:1] == (4,) and len(path) > 1]
    if not paths:  # DescribeQuorumRequest: an empty body
        paths = [(4,)]
    path = data.draw(st.sampled_from(paths))
    mutated = _replace(envelope, path, data.draw(boundary_values))
    outcome = decode_or_reject(msgpack.packb(mutated))
    if not isinstance(outcome, RemoteProtocolError):
        _epoch_and_int_fields_fit(outcome.message)


@FUZZ
@given(message=any_message, extra=boundary_values)
def test_an_unknown_extra_field_is_refused(message, extra):
    envelope = _envelope(message)
    # A message leaves out an optional tail holding its default (fields
    # added in later versions, e.g. a Fetch's ``repairing``): appended to
    # such a body, ``extra`` would be that field, not an unknown one. Fill
    # the tail with nils (as a peer that knows it may) first.
    for _ in range(8):
        longer = [*envelope[:4], [*envelope[4], None]]
        if isinstance(decode_or_reject(msgpack.packb(longer)), RemoteProtocolError):
            break
        envelope = longer
    envelope[4] = [*envelope[4], extra]
    assert isinstance(decode_or_reject(msgpack.packb(envelope)), RemoteProtocolError)


# ---------------------------------------------------------------------------
# Frame sizes by message type
# ---------------------------------------------------------------------------


def test_the_message_type_is_read_from_the_first_two_bytes():
    for message in EXAMPLES.values():
        payload = encode_message(message, correlation_id=7, cluster_id=CLUSTER)[4:]
        assert peek_type_code(payload[:2]) == msgpack.unpackb(payload)[0]
    assert peek_type_code(b"\x95") is None
    assert peek_type_code(b"\x94\x01") is None
    assert peek_type_code(b"\x95\xcc") is None


def test_an_oversized_request_is_refused_from_its_first_bytes_before_it_is_buffered():
    decoder = FrameDecoder(frame_bytes_max=NODE_LIMITS.frame_bytes_max, frame_bytes_max_for=NODE_LIMITS.frame_bytes_max_for)
    # A FetchRequest (type 7) claiming 16 MiB: a request is held to 1 MiB.
    decoder.feed((16 * 1024 * 1024 - 1).to_bytes(4, "big") + b"\x95")
    assert decoder.next_frame() is None  # the type is not known yet
    decoder.feed(b"\x07")
    with pytest.raises(FrameTooLargeError, match="type code 7") as caught:
        decoder.next_frame()
    assert not caught.value.recoverable
    # A FetchResponse (type 8) of that size is a large type: it may come.
    decoder = FrameDecoder(frame_bytes_max=NODE_LIMITS.frame_bytes_max, frame_bytes_max_for=NODE_LIMITS.frame_bytes_max_for)
    decoder.feed((16 * 1024 * 1024 - 1).to_bytes(4, "big") + b"\x95\x08")
    assert decoder.next_frame() is None and decoder.in_frame


def test_a_node_takes_no_large_client_answer_but_a_client_does():
    payload = encode_message(ProposeRequest(records=(b"x",)), correlation_id=1, cluster_id=CLUSTER)[4:]
    assert NODE_LIMITS.frame_bytes_max_for(33) == NODE_LIMITS.small_frame_bytes_max
    assert DEFAULT_LIMITS.frame_bytes_max_for(33) == DEFAULT_LIMITS.frame_bytes_max
    assert NODE_LIMITS.frame_bytes_max_for(8) == NODE_LIMITS.frame_bytes_max
    assert NODE_LIMITS.frame_bytes_max_for(None) == NODE_LIMITS.small_frame_bytes_max
    small = dataclasses.replace(NODE_LIMITS, small_frame_bytes_max=len(payload) - 1)
    with pytest.raises(FrameTooLargeError):
        decode_message(payload, expected_cluster_id=CLUSTER, limits=small)


def test_the_encoder_refuses_a_request_over_the_small_limit():
    request = ProposeRequest(records=(b"x" * (DEFAULT_LIMITS.small_frame_bytes_max + 1),))
    with pytest.raises(LocalProtocolError, match="over the limit"):
        encode_message(request, correlation_id=1, cluster_id=CLUSTER)


# ---------------------------------------------------------------------------
# msgpack bombs: memory bounded by a small multiple of the frame
# ---------------------------------------------------------------------------


def _fetch_request_with_extension(extension_bytes: bytes) -> bytes:
    # [7, 1, 1, CLUSTER, [2, 1, 5, 0, 0, 1, 0, <extension>]]
    head = msgpack.packb([7, 1, 1, CLUSTER])[1:]
    body = msgpack.packb([2, 1, 5, 0, 0, 1, 0])
    return b"\x95" + head + b"\x98" + body[1:] + extension_bytes


def _array_of(count: int, item: bytes) -> bytes:
    return b"\xdd" + count.to_bytes(4, "big") + item * count


def _peak_decoding(payload: bytes) -> tuple[int, object]:
    tracemalloc.start()
    try:
        try:
            outcome = decode_message(payload, expected_cluster_id=CLUSTER, limits=NODE_LIMITS)
        except RemoteProtocolError as error:
            outcome = error
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, outcome


@pytest.mark.parametrize(
    "item",
    [b"\x80", b"\x90", b"\x81\xa0\xc0", b"\x91\x00", b"\xa2ab", b"\xcd\x01\x00"],
    ids=["empty maps", "empty arrays", "one-entry maps", "one-item arrays", "2-char strings", "uint16s"],
)
def test_a_bomb_in_a_fetch_extension_costs_a_small_multiple_of_its_size(item):
    size = NODE_LIMITS.small_frame_bytes_max - 100
    payload = _fetch_request_with_extension(_array_of(size // len(item), item))
    assert len(payload) <= NODE_LIMITS.small_frame_bytes_max
    peak, outcome = _peak_decoding(payload)
    assert isinstance(outcome, RemoteProtocolError)
    # Before: ~72 bytes per byte for empty maps (a 16 MiB bomb took 1.3 GB).
    assert peak <= 25 * len(payload), f"decoding {len(payload)} bytes peaked at {peak} bytes"


def test_a_request_bomb_over_the_small_limit_allocates_nothing():
    payload = _fetch_request_with_extension(_array_of(16 * 1024 * 1024, b"\x80"))
    peak, outcome = _peak_decoding(payload)
    assert isinstance(outcome, FrameTooLargeError)
    assert peak < 64 * 1024


def test_containers_past_the_budget_are_refused_while_decoding():
    limits = dataclasses.replace(NODE_LIMITS, containers_max=1000)
    payload = _fetch_request_with_extension(_array_of(1000, b"\x90"))
    with pytest.raises(MalformedFrameError, match="more than 1000 arrays and maps"):
        decode_message(payload, expected_cluster_id=CLUSTER, limits=limits)
    ok = _fetch_request_with_extension(_array_of(990, b"\x90"))
    assert decode_message(ok, expected_cluster_id=CLUSTER, limits=limits).message.extension == [[]] * 990


def test_a_proposal_of_more_records_than_one_request_may_carry_is_refused():
    envelope = _envelope(ProposeRequest(records=(b"",)))
    envelope[4] = [[b""] * (DEFAULT_LIMITS.records_per_request_max + 1)]
    with pytest.raises(InvalidMessageError, match="at most 10000"):
        decode_message(msgpack.packb(envelope), expected_cluster_id=CLUSTER)
    with pytest.raises(LocalProtocolError, match="at most 10000"):
        encode_message(ProposeRequest(records=(b"",) * 10_001), correlation_id=1, cluster_id=CLUSTER)
    envelope[4] = [[b""] * DEFAULT_LIMITS.records_per_request_max]
    assert len(decode_message(msgpack.packb(envelope), expected_cluster_id=CLUSTER).message.records) == 10_000
