"""A FetchResponse's records checked and packed once for every answer that
carries them (``RecordSegments``, issue 21) give the very frames that
packing each answer whole gives, pass and refuse exactly what the encoder's
check does, and never reuse the bytes of records that are not the ones
sent (a log truncated and rewritten at the same offsets, another epoch)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _wire_strategies import _entry, fetch_responses
from quorum import Entry, FetchResponse, RecordKind, Voter, VoterSet
from quorum.wire import LocalProtocolError, RecordSegments, encode_message
from quorum.wire._codec import SEGMENT_RECORDS_MIN

CLUSTER = "segments-cluster"


def _frame(message: FetchResponse, segments: RecordSegments | None = None, correlation_id: int = 5) -> bytes:
    return encode_message(message, correlation_id=correlation_id, cluster_id=CLUSTER, record_segments=segments)


def _answer(records: tuple[Entry, ...], epoch: int = 9, **fields: object) -> FetchResponse:
    base = dict(
        src=1, dst=1000, epoch=epoch, request_id=17, leader_id=1, high_watermark=50, log_start_offset=0,
        records=records, read_token=3,
    )
    base.update(fields)
    return FetchResponse(**base)  # type: ignore[arg-type]


def _data(first: int, count: int, epoch: int, size: int = 30) -> tuple[Entry, ...]:
    return tuple(Entry(first + i, epoch, RecordKind.DATA, bytes([i % 256]) * size) for i in range(count))


def _voters_record(offset: int, epoch: int) -> Entry:
    voters = VoterSet((Voter(1, "dir-1", ("h1:9000",)), Voter(2, "dir-2", ("h2:9000",))))
    return Entry(offset, epoch, RecordKind.VOTERS, voters.encode())


def _mixed(first: int) -> tuple[Entry, ...]:
    """Several epochs, a leader change and a voter set among the data."""
    return (
        Entry(first, 2, RecordKind.DATA, b"a"),
        Entry(first + 1, 2, RecordKind.DATA, b""),
        Entry(first + 2, 4, RecordKind.LEADER_CHANGE, b"leader=1 epoch=4"),
        _voters_record(first + 3, 4),
        *_data(first + 4, 10, 4),
        Entry(first + 14, 7, RecordKind.LEADER_CHANGE, b"leader=1 epoch=7"),
        *_data(first + 15, 40, 7, size=300),
        _voters_record(first + 55, 7),
        Entry(first + 56, 9, RecordKind.DATA, bytes(70_000)),  # a bin 32
    )


SHAPES = {
    "empty": (),
    "one record": _data(0, 1, 9),
    "three records": _data(10, 3, 9),
    "one epoch, DATA": _data(1000, 200, 9),
    "one epoch, 20 records (array 16)": _data(5, 20, 9),
    "70,000 records (array 32)": _data(0, 70_000, 9, size=1),
    "mixed kinds, several epochs": _mixed(300),
    "far offsets": _data(2**62, 12, 9),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_tail_of_a_slice_answered_to_many_brokers_gives_the_frames_packed_whole(shape: str) -> None:
    records = SHAPES[shape]
    segments = RecordSegments()
    tails = sorted({0, 1, 2, len(records) // 2, max(0, len(records) - SEGMENT_RECORDS_MIN), len(records)})
    # Each broker's answer carries the records from its own offset on, to a
    # broker of its own with its own request id, read token and extension.
    for round_ in range(2):
        for broker, start in enumerate(tails):
            message = _answer(
                records[start:],
                dst=1000 + broker,
                request_id=round_ * 100 + broker,
                read_token=broker,
                extension=None if broker % 2 else {"broker_epoch": broker, "state": "online"},
                leader_endpoint=None if broker % 3 else "127.0.0.1:9092",
            )
            assert _frame(message, segments, correlation_id=broker) == _frame(message, correlation_id=broker)
    answers_kept = 2 * sum(1 for start in tails if len(records) - start >= SEGMENT_RECORDS_MIN)
    if answers_kept:
        # Checked and packed once (the longest answer first), found for
        # every other answer.
        assert segments.records_packed == len(records)
        assert segments.hits == answers_kept - 1
    else:
        assert segments.hits == segments.records_packed == 0


@st.composite
def _longer_records(draw: st.DrawFn, epoch_max: int) -> tuple[Entry, ...]:
    count = draw(st.integers(0, 40))
    start = draw(st.sampled_from([0, 1, 1000, 2**63 - 1 - count]))
    epochs = sorted(draw(st.lists(st.integers(0, epoch_max), min_size=count, max_size=count)))
    kinds = st.sampled_from([RecordKind.DATA] * 6 + list(RecordKind))
    return tuple(_entry(draw, start + index, epoch, draw(kinds)) for index, epoch in enumerate(epochs))


@st.composite
def _answers(draw: st.DrawFn) -> FetchResponse:
    message = draw(fetch_responses())
    return dataclasses.replace(message, records=draw(_longer_records(message.epoch)))


@settings(max_examples=300, deadline=None)
@given(message=_answers(), tails=st.lists(st.integers(0, 40), max_size=6), correlation_id=st.integers(0, 2**63 - 1))
def test_any_answer_and_its_tails_give_the_frames_packed_whole(
    message: FetchResponse, tails: list[int], correlation_id: int
) -> None:
    segments = RecordSegments()
    for start in [0, *tails, 0]:
        tail = dataclasses.replace(message, records=message.records[start:])
        expected = _frame(tail, correlation_id=correlation_id)
        assert _frame(tail, segments, correlation_id=correlation_id) == expected


def test_a_log_rewritten_at_the_same_offsets_is_packed_anew() -> None:
    """A follower's log truncated and rewritten by a new leader, or the
    same offsets read again after a snapshot: new Entry objects, whatever
    their content, are never answered with the old ones' bytes."""
    segments = RecordSegments()
    old = _data(100, 20, 9)
    assert _frame(_answer(old), segments) == _frame(_answer(old))
    # Same offsets, same epoch, other data: the very key of the old run.
    rewritten = tuple(Entry(e.offset, e.epoch, e.kind, b"rewritten %d" % e.offset) for e in old)
    assert _frame(_answer(rewritten), segments) == _frame(_answer(rewritten))
    assert _frame(_answer(rewritten[5:]), segments) == _frame(_answer(rewritten[5:]))
    # Equal content in new objects is packed anew too (identity, not equality).
    copies = tuple(Entry(*e) for e in rewritten)
    assert _frame(_answer(copies[3:]), segments) == _frame(_answer(copies[3:]))
    # One record replaced in the middle, the rest the same objects.
    patched = rewritten[:10] + (Entry(110, 9, RecordKind.DATA, b"patched"),) + rewritten[11:]
    assert _frame(_answer(patched[2:]), segments) == _frame(_answer(patched[2:]))
    assert segments.hits == 1  # only rewritten[5:], a tail of rewritten itself


def test_records_packed_for_one_epoch_are_checked_again_for_another() -> None:
    """The check compares each record's epoch with the message's: records
    found packed for epoch 9 are no proof for an answer of epoch 8."""
    segments = RecordSegments()
    records = _data(0, 10, 9)
    _frame(_answer(records, epoch=9), segments)
    with pytest.raises(LocalProtocolError, match=r"records\[0\]\.epoch 9 is above the sender's epoch 8"):
        _frame(_answer(records, epoch=8), segments)


def test_the_rest_of_the_body_is_checked_on_every_answer_with_the_same_errors() -> None:
    segments = RecordSegments()
    records = _data(0, 10, 9)
    _frame(_answer(records), segments)
    for bad in (
        {"high_watermark": -1},
        {"dst": -5},
        {"read_token": "3"},
        {"extension": {"x": object()}},
        {"leader_endpoint": "no port"},
        {"error": 12345},
    ):
        message = _answer(records, **bad)
        with pytest.raises(LocalProtocolError) as whole:
            _frame(message)
        with pytest.raises(LocalProtocolError) as found:
            _frame(message, segments)
        assert str(found.value) == str(whole.value)
    assert segments.hits == 6


def test_records_the_check_refuses_are_refused_and_never_kept() -> None:
    segments = RecordSegments()
    gap = _data(0, 5, 9) + _data(6, 5, 9)
    not_bytes = _data(0, 5, 9) + (Entry(5, 9, RecordKind.DATA, bytearray(b"x")),)  # type: ignore[arg-type]
    bool_kind = _data(0, 5, 9) + (Entry(5, 9, True, b"x"),)  # type: ignore[arg-type]
    for records in (gap, not_bytes, bool_kind):
        with pytest.raises(LocalProtocolError) as whole:
            _frame(_answer(records))
        with pytest.raises(LocalProtocolError) as found:
            _frame(_answer(records), segments)
        assert str(found.value) == str(whole.value)
    assert len(segments) == 0
    # Records past the run's end that do not follow on from it: a gap, an
    # epoch going down (each stretch alone would pass the check).
    run = _data(100, 10, 9)
    _frame(_answer(run), segments)
    for following in (_data(111, 5, 9), _data(110, 5, 8)):
        records = run[5:] + following
        with pytest.raises(LocalProtocolError) as whole:
            _frame(_answer(records))
        with pytest.raises(LocalProtocolError) as found:
            _frame(_answer(records), segments)
        assert str(found.value) == str(whole.value)
    assert len(segments) == 10
    # Equal to records packed and kept, but of types the check refuses.
    kept = _data(0, 6, 9)
    _frame(_answer(kept), segments)
    lookalike = kept[:5] + (Entry(5, 9, RecordKind.DATA, bytearray(kept[5].data)),)  # type: ignore[arg-type]
    assert lookalike == kept
    with pytest.raises(LocalProtocolError, match=r"records\[5\]\.data must be bytes"):
        _frame(_answer(lookalike), segments)


def test_records_that_may_change_are_never_kept() -> None:
    """Lists (the check takes them as records too) may change after they
    were packed: packed for their answer, never kept."""
    segments = RecordSegments()
    records = tuple([e.offset, e.epoch, int(e.kind), e.data] for e in _data(0, 8, 9))
    message = _answer(records)  # type: ignore[arg-type]
    assert _frame(message, segments) == _frame(message)
    records[7][3] = b"changed"
    assert _frame(message, segments) == _frame(message)
    assert len(segments) == 0


@settings(max_examples=200, deadline=None)
@given(
    log=_longer_records(9),
    rewrite_at=st.integers(0, 40),
    windows=st.lists(st.tuples(st.integers(0, 45), st.integers(0, 45), st.booleans()), min_size=1, max_size=12),
)
def test_answers_from_a_log_that_grows_and_is_rewritten_give_the_frames_packed_whole(
    log: tuple[Entry, ...], rewrite_at: int, windows: list[tuple[int, int, bool]]
) -> None:
    """Each answer a stretch of the log as it stands: it grows, answers
    reach back or stop short, and at some point the log is cut and written
    anew (new objects, other data) from ``rewrite_at`` on."""
    rewritten = log[:rewrite_at] + tuple(
        Entry(e.offset, e.epoch, e.kind, e.data + b"!" if e.kind is RecordKind.DATA else e.data) for e in log[rewrite_at:]
    )
    segments = RecordSegments(bytes_max=4_000)
    for start, end, after_rewrite in windows:
        current = rewritten if after_rewrite else log
        message = _answer(current[start:end])
        assert _frame(message, segments) == _frame(message)
        assert segments.size_bytes <= 4_000 or len(segments) <= len(message.records)


def test_an_answer_behind_the_run_is_packed_alone() -> None:
    segments = RecordSegments()
    log = _data(0, 100, 9)
    _frame(_answer(log[50:]), segments)
    assert segments.records_packed == 50
    # A broker far behind, its answer bounded by bytes: not the log's tail.
    assert _frame(_answer(log[:20]), segments) == _frame(_answer(log[:20]))
    assert segments.records_packed == 50
    _frame(_answer(log[60:]), segments)
    assert segments.hits == 1
    # One that reaches the run's end takes its place.
    assert _frame(_answer(log[30:]), segments) == _frame(_answer(log[30:]))
    assert segments.records_packed == 120 and len(segments) == 70


def test_the_run_follows_the_log_end_within_its_bound() -> None:
    segments = RecordSegments(bytes_max=200_000)
    log = _data(0, 5_000, 9, size=200)
    for end in range(100, 5_001, 100):
        # The brokers a step answers: from a little behind the end.
        for behind in (100, 60, 20, 5):
            message = _answer(log[end - behind : end])
            assert _frame(message, segments) == _frame(message)
        assert segments.size_bytes <= 200_000
    # Each record was checked and packed once.
    assert segments.records_packed == 5_000
    assert segments.hits == 50 * 4 - 50
    segments.clear()
    assert len(segments) == 0 and segments.size_bytes == 0
