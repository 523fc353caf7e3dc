"""Every message type survives encode -> frame -> decode unchanged."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _wire_strategies import EXAMPLES, STRATEGIES, cluster_ids, correlation_ids
from quorum import MESSAGE_TYPES, Entry, FetchResponse, RecordKind, VoteRequest
from quorum.wire import (
    CLIENT_MESSAGE_TYPES,
    MESSAGE_TYPE_CODES,
    PROTOCOL_VERSION,
    Decoded,
    ErrorFrame,
    FrameDecoder,
    Hello,
    decode_message,
    encode_message,
)

ALL_TYPES = list(STRATEGIES)


def _round_trip(message, correlation_id: int, cluster_id: str) -> Decoded:
    frame = encode_message(message, correlation_id=correlation_id, cluster_id=cluster_id)
    decoder = FrameDecoder()
    decoder.feed(frame)
    payload = decoder.next_frame()
    assert payload is not None and decoder.next_frame() is None and decoder.buffered_bytes == 0
    return decode_message(payload, expected_cluster_id=cluster_id)


def test_every_message_type_has_a_strategy_an_example_and_a_type_code():
    expected = set(MESSAGE_TYPES) | set(CLIENT_MESSAGE_TYPES) | {ErrorFrame, Hello}
    assert set(STRATEGIES) == expected == set(EXAMPLES) == set(MESSAGE_TYPE_CODES)
    assert len(set(MESSAGE_TYPE_CODES.values())) == len(MESSAGE_TYPE_CODES)


@pytest.mark.parametrize("message_type", ALL_TYPES, ids=lambda t: t.__name__)
def test_representative_message_round_trips(message_type):
    message = EXAMPLES[message_type]
    decoded = _round_trip(message, 7, "cluster-a")
    assert decoded == Decoded(message, 7, getattr(message, "version", PROTOCOL_VERSION))
    assert type(decoded.message) is message_type


@pytest.mark.parametrize("message_type", ALL_TYPES, ids=lambda t: t.__name__)
@given(data=st.data(), correlation_id=correlation_ids, cluster_id=cluster_ids)
def test_generated_messages_round_trip(message_type, data, correlation_id, cluster_id):
    message = data.draw(STRATEGIES[message_type])
    decoded = _round_trip(message, correlation_id, cluster_id)
    assert decoded.message == message
    assert decoded.correlation_id == correlation_id
    assert decoded.version == getattr(message, "version", PROTOCOL_VERSION)


def test_decoded_fields_have_their_declared_types():
    # Equality alone would accept 1 for True or an int for a RecordKind.
    decoded = _round_trip(EXAMPLES[FetchResponse], 1, "c").message
    assert all(type(entry.kind) is RecordKind for entry in decoded.records)
    assert type(decoded.error).__name__ == "ErrorCode"
    assert type(decoded.records) is tuple
    assert all(type(entry) is Entry and type(entry.data) is bytes for entry in decoded.records)


def test_the_envelope_and_body_layout_is_the_documented_one():
    """Pins the wire format: docs/protocol.md describes exactly this."""
    frame = encode_message(EXAMPLES[FetchResponse], correlation_id=9, cluster_id="c")
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert msgpack.unpackb(frame[4:]) == [
        8,
        1,
        9,
        "c",
        [
            1, 4, 7, 12, 1, 0, 41, 10,
            [[40, 6, 1, b""], [41, 7, 1, b""], [42, 7, 0, b"register broker 4"]],
            None, None, 4, {"ok": True}, "127.0.0.1:9091",
        ],
    ]  # fmt: skip
    vote = encode_message(EXAMPLES[VoteRequest], correlation_id=0, cluster_id="c")
    # length 14; [1, 1, 0, "c", [2, 1, 8, 7, 43, true, nil]] (nil: no voter directory id)
    assert vote == bytes.fromhex("0000000e" "95010100a163" "97020108072bc3c0")
