"""The per-batch checks of the replication path (one_epoch_columns and its
users: MemoryLog.append and slice, the stores' check_append, the core's
check of a Fetch answer's records) against deliberately dumb record-by-record
references, on batches with every kind of damage the references look for:
gaps, repeated offsets, epochs that go back or pass the limit, unknown or
VOTERS kinds, data that is not bytes. Also the log's epoch index after
records leave its front, against an index built from scratch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quorum._log import MemoryLog
from quorum._node import _records_problem
from quorum._types import OFFSET_MAX, Entry, RecordKind, SnapshotId, one_epoch_columns
from quorum._voters import voter_set_problem
from quorum.storage._format import KINDS, U32_MAX, check_append


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, list[Entry]]:
    """(first offset the batch should start at, a batch), mostly well
    formed, often damaged in one place."""
    first = draw(st.sampled_from([0, 7, 1000, OFFSET_MAX - 3]))
    count = draw(st.integers(1, 12))
    epoch = draw(st.sampled_from([0, 1, 5, U32_MAX]))
    entries = [Entry(first + i, epoch, RecordKind.DATA, b"d%d" % i) for i in range(count)]
    damage = draw(st.sampled_from(["none", "none", "offset", "epoch", "kind", "data", "start"]))
    at = draw(st.integers(0, count - 1))
    entry = entries[at]
    if damage == "offset":
        entries[at] = entry._replace(offset=entry.offset + draw(st.sampled_from([-1, 1, 2])))
    elif damage == "epoch":
        entries[at] = entry._replace(epoch=max(0, entry.epoch + draw(st.sampled_from([-1, 1]))))
    elif damage == "kind":
        kind = draw(st.sampled_from([RecordKind.LEADER_CHANGE, RecordKind.VOTERS, 7]))
        entries[at] = entry._replace(kind=kind, data=draw(st.sampled_from([b"", b"\x93\x01\x02\x03", entry.data])))
    elif damage == "data":
        entries[at] = entry._replace(data=draw(st.sampled_from([bytearray(b"x"), "text", None])))
    elif damage == "start":
        first += draw(st.sampled_from([-1, 1]))
    return first, entries


def _runs_on(entries: list[Entry], first: int) -> bool:
    return all(entry.offset == first + i for i, entry in enumerate(entries))


def _epochs_rise(entries: list[Entry], lowest: int, highest: int) -> bool:
    previous = lowest
    for entry in entries:
        if not previous <= entry.epoch <= highest:
            return False
        previous = entry.epoch
    return True


@given(batches())
@settings(max_examples=40)
def test_one_epoch_columns_says_yes_only_for_one_epoch_without_a_gap(case):
    first, entries = case
    columns = one_epoch_columns(entries, first)
    one_epoch = len({entry.epoch for entry in entries}) == 1
    assert (columns is not None) == (_runs_on(entries, first) and one_epoch)
    if columns is not None:
        assert [list(column) for column in columns] == [list(field) for field in zip(*entries)]
    assert one_epoch_columns([], first) is None


@given(batches(), st.sampled_from([0, 1, 5, 6, U32_MAX]))
@settings(max_examples=40)
def test_records_problem_matches_a_record_by_record_reference(case, leader_epoch):
    _, entries = case
    first = entries[0].offset
    expected_fine = (
        first >= 0
        and first + len(entries) - 1 <= OFFSET_MAX
        and _runs_on(entries, first)
        and _epochs_rise(entries, 0, leader_epoch)
        and all(voter_set_problem(entry.data) is None for entry in entries if entry.kind is RecordKind.VOTERS)
    )
    assert (_records_problem(entries, leader_epoch) is None) == expected_fine


@given(batches(), st.sampled_from([0, 1, 5, 6]))
@settings(max_examples=40)
def test_check_append_matches_a_record_by_record_reference(case, last_epoch):
    first, entries = case
    if not (_runs_on(entries, first) and _epochs_rise(entries, last_epoch, U32_MAX)):
        expected: type[Exception] | None = ValueError
    elif any(entry.kind not in KINDS for entry in entries):
        expected = ValueError
    else:
        # A batch is damaged in one place at most: data of another type is
        # the one TypeError.
        expected = TypeError if any(not isinstance(entry.data, bytes) for entry in entries) else None
    raised = None
    try:
        check_append(entries, first, last_epoch)
    except (ValueError, TypeError) as error:
        raised = type(error)
    assert raised is expected


@given(st.lists(batches(), min_size=1, max_size=6), st.data())
@settings(max_examples=30)
def test_memory_log_appends_as_a_record_by_record_log_and_keeps_its_epoch_index(cases, data):
    log = MemoryLog()
    model: list[Entry] = []
    for _, entries in cases:
        # Renumber the batch onto the log's end, damage kept relative.
        # The log does not look at data (the stores do): bytes here.
        shift = log.end_offset - entries[0].offset
        batch = [
            entry._replace(offset=entry.offset + shift, data=entry.data if isinstance(entry.data, bytes) else b"")
            for entry in entries
        ]
        accepted = []
        expected_offset, last_epoch = log.end_offset, log.last_epoch
        for entry in batch:
            if entry.offset != expected_offset or entry.epoch < last_epoch:
                break
            accepted.append(entry)
            expected_offset, last_epoch = expected_offset + 1, entry.epoch
        try:
            log.append(batch)
        except ValueError:
            assert len(accepted) < len(batch)
        else:
            assert accepted == batch
        model.extend(accepted)  # the records before a bad one stay, as they always did
        assert log.slice(log.start_offset) == model
        if data.draw(st.booleans()) and log.end_offset > log.start_offset + 1:
            cut = data.draw(st.integers(log.start_offset + 1, log.end_offset))
            epoch_before = log.epoch_at(cut - 1)
            log.delete_before(cut, epoch_before)
            model = [entry for entry in model if entry.offset >= cut]
        entries_now = log.slice(log.start_offset)
        fresh = MemoryLog(SnapshotId(log.start_offset, log.start_epoch), entries_now)
        for epoch in sorted({0, 1, 2, 4, 5, 6, U32_MAX - 1, U32_MAX} | {entry.epoch for entry in entries_now}):
            assert log.end_offset_for_epoch(epoch) == fresh.end_offset_for_epoch(epoch)
        bytes_max = data.draw(st.integers(0, 400))
        reference: list[Entry] = []
        total = 0
        for entry in entries_now:
            total += len(entry.data) + 16
            if reference and total > bytes_max:
                break
            reference.append(entry)
        assert log.slice(log.start_offset, bytes_max=bytes_max) == reference
