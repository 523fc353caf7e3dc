"""The decoder's contract under hostile input: for any bytes, decoding
either returns a valid message or raises ``RemoteProtocolError`` — never
anything else, and never a message that could not be sent back as is.

Inputs: arbitrary bytes; valid frames mutated at the byte level (bit flips,
truncations, insertions, huge lengths); valid envelopes mutated at the
structure level (a field's type swapped, fields missing or extra, foreign
cluster id, unknown type code or version); deep nesting.
"""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _wire_strategies import EXAMPLES, any_message
from quorum import ErrorCode
from quorum.wire import (
    FrameDecoder,
    RemoteProtocolError,
    WireLimits,
    decode_message,
    encode_message,
)

CLUSTER = "fuzz-cluster"
INT64_MAX = 2**63 - 1
# Fuzz inputs are cheap to check: explore more of them than the profile's
# default, in proportion to it (the "long" profile soaks longer).
FUZZ = settings(max_examples=settings.default.max_examples * 4)


def decode_or_reject(payload: bytes, *, limits: WireLimits = WireLimits()):
    """Decode ``payload`` and check the contract; return what happened."""
    try:
        decoded = decode_message(payload, expected_cluster_id=CLUSTER, limits=limits)
    except RemoteProtocolError as error:
        assert type(error.recoverable) is bool
        assert error.error_code in ErrorCode and error.error_code is not ErrorCode.NONE
        assert error.correlation_id is None or 0 <= error.correlation_id <= INT64_MAX
        # A recoverable error always has someone to answer.
        assert not error.recoverable or error.correlation_id is not None
        # The answer is always sendable, and the log line short.
        answer = error.to_error_frame()
        encode_message(answer, correlation_id=error.correlation_id or 0, cluster_id=CLUSTER)
        assert len(str(error)) < 2000
        return error
    # Whatever is accepted is a valid message by the encoder's own rules,
    # and survives another round trip unchanged (compared as bytes: an
    # extension may hold a NaN, which is not equal to itself).
    frame = encode_message(decoded.message, correlation_id=decoded.correlation_id, cluster_id=CLUSTER, limits=limits)
    again = decode_message(frame[4:], expected_cluster_id=CLUSTER, limits=limits)
    assert type(again.message) is type(decoded.message)
    assert encode_message(again.message, correlation_id=again.correlation_id, cluster_id=CLUSTER) == frame
    return decoded


def decode_stream_or_reject(stream: bytes, *, frame_bytes_max: int = 1 << 16) -> None:
    """The whole receive path: framing, then decoding, on a byte stream."""
    decoder = FrameDecoder(frame_bytes_max=frame_bytes_max)
    decoder.feed(stream)
    try:
        while (payload := decoder.next_frame()) is not None:
            decode_or_reject(payload, limits=WireLimits(frame_bytes_max=frame_bytes_max))
        decoder.feed_eof()
    except RemoteProtocolError as error:
        assert not error.recoverable  # framing errors always close


def _frame(message, correlation_id: int = 1) -> bytes:
    return encode_message(message, correlation_id=correlation_id, cluster_id=CLUSTER)


# ---------------------------------------------------------------------------
# Byte level
# ---------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_as_a_payload(payload):
    decode_or_reject(payload)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_as_a_stream(stream):
    decode_stream_or_reject(stream)


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes_after_a_valid_envelope_prefix(tail):
    # Past the first bytes, so that the fuzz reaches body decoding often.
    # [8, 1, 5, CLUSTER, <tail>]
    decode_or_reject(b"\x95" + msgpack.packb([8, 1, 5, CLUSTER])[1:] + tail)


@FUZZ
@given(message=any_message, data=st.data())
def test_bit_flips_of_valid_frames(message, data):
    frame = bytearray(_frame(message))
    for _ in range(data.draw(st.integers(1, 4))):
        bit = data.draw(st.integers(0, len(frame) * 8 - 1))
        frame[bit // 8] ^= 1 << (bit % 8)
    decode_stream_or_reject(bytes(frame))
    decode_or_reject(bytes(frame[4:]))


@FUZZ
@given(message=any_message, data=st.data())
def test_truncations_insertions_and_appends_of_valid_frames(message, data):
    frame = _frame(message)
    cut = data.draw(st.integers(0, len(frame)))
    decode_stream_or_reject(frame[:cut])
    decode_or_reject(frame[4:cut])
    inserted = data.draw(st.binary(min_size=1, max_size=8))
    at = data.draw(st.integers(4, len(frame)))
    decode_or_reject(frame[4:at] + inserted + frame[at:])
    decode_stream_or_reject(frame[:at] + inserted + frame[at:])
    decode_or_reject(frame[4:] + inserted)


@FUZZ
@given(message=any_message, length=st.integers(0, 2**32 - 1))
def test_any_length_prefix_on_a_valid_payload(message, length):
    frame = _frame(message)
    decode_stream_or_reject(length.to_bytes(4, "big") + frame[4:], frame_bytes_max=1 << 12)


@pytest.mark.parametrize("message_type", list(EXAMPLES), ids=lambda t: t.__name__)
def test_every_single_bit_flip_and_truncation_of_each_example(message_type):
    """Exhaustive over the representative messages: cheap, and no luck needed."""
    payload = _frame(EXAMPLES[message_type])[4:]
    for cut in range(len(payload)):
        decode_or_reject(payload[:cut])
    for bit in range(len(payload) * 8):
        flipped = bytearray(payload)
        flipped[bit // 8] ^= 1 << (bit % 8)
        decode_or_reject(bytes(flipped))


# ---------------------------------------------------------------------------
# Structure level: valid envelopes with one thing wrong
# ---------------------------------------------------------------------------

msgpack_ints = st.integers(-(2**63), 2**64 - 1) | st.sampled_from(
    [-1, 0, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64 - 1, -(2**63)]
)
wire_scalars = (
    st.none()
    | st.booleans()
    | msgpack_ints
    | st.floats()
    | st.text(max_size=10)
    | st.binary(max_size=10)
    | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=4))
)
wire_values = st.recursive(
    wire_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)


def _paths(value, path=()):
    """Every position inside a decoded msgpack structure."""
    yield path
    if type(value) is list:
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))
    elif type(value) is dict:
        for key, item in value.items():
            yield from _paths(item, (*path, key))


def _replace(value, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if type(value) is list:
        copy = list(value)
    else:
        copy = dict(value)
    copy[head] = _replace(value[head], rest, new)
    return copy


def _container_paths(value):
    return [path for path in _paths(value) if type(_get(value, path)) is list]


def _get(value, path):
    for step in path:
        value = value[step]
    return value


@FUZZ
@given(message=any_message, data=st.data())
def test_a_field_of_another_type(message, data):
    envelope = msgpack.unpackb(_frame(message)[4:])
    path = data.draw(st.sampled_from(list(_paths(envelope))[1:]))
    mutated = _replace(envelope, path, data.draw(wire_values))
    decode_or_reject(msgpack.packb(mutated))


@FUZZ
@given(message=any_message, data=st.data())
def test_missing_and_extra_fields(message, data):
    envelope = msgpack.unpackb(_frame(message)[4:])
    path = data.draw(st.sampled_from(_container_paths(envelope)))
    container = list(_get(envelope, path))
    if container and data.draw(st.booleans()):
        del container[data.draw(st.integers(0, len(container) - 1))]
    else:
        container.insert(data.draw(st.integers(0, len(container))), data.draw(wire_values))
    decode_or_reject(msgpack.packb(_replace(envelope, path, container)))


@FUZZ
@given(
    message=any_message,
    type_code=msgpack_ints,
    version=msgpack_ints,
    correlation_id=msgpack_ints | wire_values,
    cluster_id=st.text(max_size=300) | wire_values,
    which=st.sets(st.integers(0, 3), min_size=1),
)
def test_envelope_fields_of_any_value(message, type_code, version, correlation_id, cluster_id, which):
    envelope = msgpack.unpackb(_frame(message)[4:])
    for index, value in enumerate((type_code, version, correlation_id, cluster_id)):
        if index in which:
            envelope[index] = value
    decode_or_reject(msgpack.packb(envelope))


@FUZZ
@given(wire_values)
def test_any_msgpack_value_as_a_payload(value):
    decode_or_reject(msgpack.packb(value))


@FUZZ
@given(type_code=st.integers(0, 70), body=wire_values)
def test_any_body_for_any_type_code(type_code, body):
    decode_or_reject(msgpack.packb([type_code, 1, 3, CLUSTER, body]))


@pytest.mark.parametrize("depth", [15, 16, 17, 100, 1000, 5000, 100_000])
def test_deep_nesting_in_an_extension(depth):
    # [7, 1, 1, CLUSTER, [2, 1, 5, 0, 0, 1, 0, <extension>]]
    extension = b"\x91" * depth + b"\xc0"
    head = msgpack.packb([7, 1, 1, CLUSTER])[1:]
    body = msgpack.packb([2, 1, 5, 0, 0, 1, 0])
    payload = b"\x95" + head + b"\x98" + body[1:] + extension
    outcome = decode_or_reject(payload)
    if depth <= 16:  # the default limit: 16 containers deep
        assert not isinstance(outcome, RemoteProtocolError)
    else:
        assert isinstance(outcome, RemoteProtocolError)
