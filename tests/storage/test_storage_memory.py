"""MemoryStorage: the crash model the simulator relies on."""

from __future__ import annotations

import pytest
from _storage_helpers import make_entries

from quorum._types import ElectionState, SnapshotId
from quorum.storage import MemoryLogStore, MemoryStorage


def test_crash_loses_unsynced_appends():
    storage = MemoryStorage()
    storage.append(make_entries(0, 5))
    storage.flush()
    storage.append(make_entries(5, 3))
    assert storage.log.unsynced_count == 3
    storage.crash()
    state = storage.load()
    assert state.entries == make_entries(0, 5)
    assert storage.end_offset == 5
    storage.append(make_entries(5, 1, tag="again"))  # the log goes on
    assert storage.end_offset == 6


def test_crash_may_keep_a_prefix_of_the_unsynced_tail():
    storage = MemoryStorage()
    storage.append(make_entries(0, 10))
    storage.crash(keep_unsynced_records=4)
    assert storage.load().entries == make_entries(0, 4)
    storage.append(make_entries(4, 2))
    storage.crash(keep_unsynced_records=99)
    assert storage.load().entries == make_entries(0, 6)


def test_truncation_is_durable_and_syncs_what_precedes_it():
    storage = MemoryStorage()
    storage.append(make_entries(0, 10))
    storage.truncate_to(6)  # fsyncs, as the file version does
    storage.append(make_entries(6, 2, epoch=2, tag="n"))
    storage.crash()
    assert storage.load().entries == make_entries(0, 6)


def test_election_state_and_snapshots_are_durable_at_once():
    storage = MemoryStorage()
    storage.write_election_state(ElectionState(3, voted_for=1))
    storage.write_snapshot(SnapshotId(0, 0), b"empty")
    writer = storage.snapshot_writer(SnapshotId(9, 1))
    writer.append(0, b"partial transfer")
    storage.crash()
    state = storage.load()
    assert state.election_state == ElectionState(3, voted_for=1)
    assert (state.snapshot_id, state.snapshot_bytes) == (SnapshotId(0, 0), b"empty")
    with pytest.raises(ValueError):
        writer.append(writer.position, b"more")  # the transfer died with the node


def test_delete_before_is_exact_and_keeps_the_epoch():
    log = MemoryLogStore()
    log.append(make_entries(0, 5, epoch=1) + make_entries(5, 5, epoch=2))
    log.delete_before(7)
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (7, 10, 2)
    log.delete_before(10)
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (10, 10, 2)
    log.delete_before(20, epoch_before=5)
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (20, 20, 5)
    log.reset(SnapshotId(30, 6))
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (30, 30, 6)
    with pytest.raises(ValueError):
        log.truncate_to(29)


def test_same_validation_as_the_file_log():
    log = MemoryLogStore()
    with pytest.raises(ValueError, match="where offset 0 was expected"):
        log.append(make_entries(1, 1))
    log.append(make_entries(0, 2, epoch=3))
    with pytest.raises(ValueError, match="after epoch 3"):
        log.append(make_entries(2, 1, epoch=2))
    assert log.read(0, 1) == make_entries(0, 1, epoch=3)
    assert log.read(2) == []
    with pytest.raises(ValueError):
        log.read(3)
