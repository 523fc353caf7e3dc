"""A Fetch answer's records are checked over the whole batch at once when
the batch has the common shape (``_one_epoch_data_records``); whatever
else comes falls to the record-by-record loop. The two together must
accept and refuse exactly what the loop alone does, with the same records
built and the same error text: each batch below, mostly well formed and
often damaged in one place, is decoded (and checked as the encoder checks
its own body) with the batch path and with the loop alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum._types import Entry, RecordKind
from quorum.wire import _schema
from quorum.wire._checks import INT64_MAX

MESSAGE_EPOCH = 6


@st.composite
def raw_batches(draw: st.DrawFn) -> list:
    """Records as the wire carries them: lists ``[offset, epoch, kind, data]``."""
    first = draw(st.sampled_from([0, 7, 1000, INT64_MAX - 5]))
    count = draw(st.integers(1, 12))
    epoch = draw(st.sampled_from([0, 3, MESSAGE_EPOCH, MESSAGE_EPOCH + 1]))
    kind = draw(st.sampled_from([int(RecordKind.DATA)] * 4 + [int(RecordKind.LEADER_CHANGE), 99]))
    data = draw(st.sampled_from([b"d"] * 4 + ["text", bytearray(b"d")]))
    # Damage to every record (the epoch, the kind, the data above), or to one.
    records = [[first + i, epoch, kind, data] for i in range(count)]
    at = draw(st.integers(0, count - 1))
    record = records[at]
    damage = draw(st.sampled_from(["none", "none", "offset", "epoch", "kind", "data", "shape", "type"]))
    if damage == "offset":
        record[0] += draw(st.sampled_from([-1, 1, 2]))
    elif damage == "epoch":
        record[1] = draw(st.sampled_from([epoch - 1, epoch + 1, MESSAGE_EPOCH + 1, -1]))
    elif damage == "kind":
        record[2] = draw(st.sampled_from([int(RecordKind.LEADER_CHANGE), int(RecordKind.VOTERS), 99, True, "data"]))
        record[3] = draw(st.sampled_from([b"", b"\x93\x01\x02\x03", record[3]]))
    elif damage == "data":
        record[3] = draw(st.sampled_from(["text", None, 5, [b"x"]]))
    elif damage == "shape":
        records[at] = draw(st.sampled_from([record[:3], [*record, None], tuple(record), b"x"]))
    elif damage == "type":
        field = draw(st.integers(0, 1))
        record[field] = draw(st.sampled_from([float(record[field]), bool(record[field] % 2)]))
    return records


def _outcome(raw: list, build: bool, *, batch_path: bool) -> object:
    with pytest.MonkeyPatch.context() as patch:
        if not batch_path:
            patch.setattr(_schema, "PER_BATCH_CHECK_MIN_RECORDS", 10**9)
        try:
            return _schema._records(raw, MESSAGE_EPOCH, build)
        except ValueError as error:
            return f"ValueError: {error}"


def _as_entries(raw: list) -> list:
    """The encoder's view: its records are ``Entry`` tuples (kinds as members)."""
    converted = []
    for record in raw:
        if type(record) is list and len(record) == 4 and record[2] in _schema.RECORD_KINDS and type(record[2]) is int:
            record = Entry(record[0], record[1], _schema.RECORD_KINDS[record[2]], record[3])
        converted.append(record)
    return converted


@settings(max_examples=400, deadline=None)
@given(raw=raw_batches())
def test_the_batch_path_accepts_and_refuses_what_the_loop_does(raw):
    for build, records in ((True, raw), (False, _as_entries(raw))):
        fast = _outcome(records, build, batch_path=True)
        slow = _outcome(records, build, batch_path=False)
        assert fast == slow, (build, records)
        if build and isinstance(fast, tuple):
            assert all(type(entry) is Entry and type(entry.kind) is RecordKind for entry in fast)


def test_a_clean_batch_takes_the_batch_path_and_a_voters_record_the_loop():
    raw = [[10 + i, 3, int(RecordKind.DATA), b"x"] for i in range(8)]
    built = _schema._one_epoch_data_records(raw, 10, MESSAGE_EPOCH, True)
    assert built == tuple(Entry(10 + i, 3, RecordKind.DATA, b"x") for i in range(8))
    assert _schema._one_epoch_data_records(_as_entries(raw), 10, MESSAGE_EPOCH, False) == ()
    raw[5][2] = int(RecordKind.VOTERS)
    assert _schema._one_epoch_data_records(raw, 10, MESSAGE_EPOCH, True) is None
    raw[5][2] = int(RecordKind.DATA)
    raw[5][1] = 3.0  # equal to 3, but not an int: the loop refuses it
    assert _schema._one_epoch_data_records(raw, 10, MESSAGE_EPOCH, True) is None
    with pytest.raises(ValueError, match=r"records\[5\].epoch"):
        _schema._records(raw, MESSAGE_EPOCH, True)
