"""FrameDecoder: any chunking of a valid stream yields the same frames;
oversized lengths fail fast without allocating; truncation is reported."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.wire import (
    FRAME_BYTES_MAX,
    FrameDecoder,
    FrameTooLargeError,
    LocalProtocolError,
    TruncatedFrameError,
    encode_frame,
)

payloads = st.lists(st.binary(max_size=300), max_size=12)


def _drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    return frames


@given(payloads=payloads, data=st.data())
def test_any_chunking_of_a_stream_yields_the_same_frames(payloads, data):
    stream = b"".join(encode_frame(payload) for payload in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    decoder = FrameDecoder()
    received = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)]):
        decoder.feed(stream[start:end])
        received.extend(_drain(decoder))
    assert received == payloads
    assert decoder.buffered_bytes == 0
    decoder.feed_eof()  # nothing left over: no error


@given(payloads)
def test_byte_at_a_time(payloads):
    stream = b"".join(encode_frame(payload) for payload in payloads)
    decoder = FrameDecoder()
    received = []
    for index in range(len(stream)):
        decoder.feed(stream[index : index + 1])
        received.extend(_drain(decoder))
    assert received == payloads


def test_feed_accepts_bytearray_and_memoryview():
    decoder = FrameDecoder()
    frame = encode_frame(b"abc")
    decoder.feed(bytearray(frame[:3]))
    decoder.feed(memoryview(frame)[3:])
    assert _drain(decoder) == [b"abc"]


def test_a_zero_length_frame_is_an_empty_payload():
    decoder = FrameDecoder()
    decoder.feed(b"\x00\x00\x00\x00")
    assert decoder.next_frame() == b""


def test_length_at_the_limit_is_accepted_and_one_more_is_not():
    decoder = FrameDecoder(frame_bytes_max=10)
    decoder.feed(encode_frame(b"x" * 10, frame_bytes_max=10))
    assert decoder.next_frame() == b"x" * 10
    decoder.feed((11).to_bytes(4, "big"))
    with pytest.raises(FrameTooLargeError) as caught:
        decoder.next_frame()
    assert caught.value.frame_bytes == 11 and caught.value.frame_bytes_max == 10
    assert not caught.value.recoverable


def test_an_oversized_length_fails_on_the_header_alone_without_allocating():
    decoder = FrameDecoder()
    tracemalloc.start()
    try:
        decoder.feed(b"\xff\xff\xff\xff")
        with pytest.raises(FrameTooLargeError):
            decoder.next_frame()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    # The stream cannot be resynchronised: the decoder stays failed.
    decoder.feed(encode_frame(b"fine"))
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


def test_a_frame_just_over_the_default_limit_is_refused():
    decoder = FrameDecoder()
    decoder.feed((FRAME_BYTES_MAX + 1).to_bytes(4, "big") + b"\x00" * 100)
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


@pytest.mark.parametrize("leftover", [b"\x00", b"\x00\x00\x00\x05ab"])
def test_end_of_stream_inside_a_frame_is_reported(leftover):
    decoder = FrameDecoder()
    decoder.feed(encode_frame(b"whole") + leftover)
    assert _drain(decoder) == [b"whole"]
    with pytest.raises(TruncatedFrameError) as caught:
        decoder.feed_eof()
    assert not caught.value.recoverable


def test_many_frames_in_one_chunk():
    frames = [bytes([index % 256]) * (index % 7) for index in range(20_000)]
    decoder = FrameDecoder()
    decoder.feed(b"".join(encode_frame(frame) for frame in frames))
    assert _drain(decoder) == frames
    assert decoder.buffered_bytes == 0


def test_encode_frame_refuses_a_payload_over_the_limit():
    with pytest.raises(LocalProtocolError):
        encode_frame(b"x" * 11, frame_bytes_max=10)


@pytest.mark.parametrize("limit", [-1, 2**32])
def test_frame_limit_must_fit_the_length_prefix(limit):
    with pytest.raises(ValueError):
        FrameDecoder(frame_bytes_max=limit)
