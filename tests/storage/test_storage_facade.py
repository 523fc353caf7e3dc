"""The storage facade: the same contract from FileStorage and MemoryStorage,
startup loading and reconciliation, ownership, retention."""

from __future__ import annotations

import os

import pytest
from _storage_helpers import make_entries

from quorum._types import ElectionState, SnapshotId
from quorum.storage import (
    CorruptElectionStateError,
    FileStorage,
    MemoryStorage,
    RetentionPolicy,
    StorageError,
    StorageOwnershipError,
)


@pytest.fixture(params=["file", "memory"])
def make_storage(request, tmp_path):
    """Returns open() -> storage; for files, reopening means close + open."""
    opened = []

    def open_(**options):
        if request.param == "memory":
            if not opened:
                opened.append(MemoryStorage(**options))
            return opened[0]
        for storage in opened:
            storage.close()
        opened.clear()
        options.setdefault("fsync", False)
        options.setdefault("segment_bytes_max", 300)
        storage = FileStorage.open(tmp_path / "data", **options)
        opened.append(storage)
        return storage

    yield open_
    for storage in opened:
        storage.close()


def test_fresh_storage_loads_empty(make_storage):
    state = make_storage().load()
    assert state.election_state is None and state.snapshot_id is None and state.snapshot_bytes is None
    assert state.entries == [] and state.log_start_offset == 0 and state.end_offset == 0


def test_persist_then_load(make_storage):
    storage = make_storage()
    storage.persist(election_state=ElectionState(2, voted_for=1), append=make_entries(0, 30, epoch=2))
    storage.persist(snapshot=(SnapshotId(20, 2), b"state@20"), delete_before=15)
    storage.persist(election_state=ElectionState(3, leader_id=2), truncate_to=28, append=make_entries(28, 3, epoch=3, tag="x"))
    expected = make_entries(0, 28, epoch=2) + make_entries(28, 3, epoch=3, tag="x")
    state = make_storage().load()
    assert state.election_state == ElectionState(3, leader_id=2)
    assert (state.snapshot_id, state.snapshot_bytes) == (SnapshotId(20, 2), b"state@20")
    assert state.log_start_offset <= 15
    assert state.entries == expected[state.log_start_offset :]
    assert state.entries_after_snapshot == expected[20:]
    assert state.end_offset == 31
    storage = make_storage()
    assert (storage.end_offset, storage.last_epoch) == (31, 3)
    assert storage.read(29, 1) == expected[29:30]


def test_follower_installs_a_snapshot_past_its_log(make_storage):
    storage = make_storage()
    storage.persist(election_state=ElectionState(1), append=make_entries(0, 10, epoch=1))
    # A node records an epoch before it installs anything of it.
    storage.persist(election_state=ElectionState(4, leader_id=2), snapshot=(SnapshotId(100, 4), b"s"), delete_before=100)
    assert (storage.log_start_offset, storage.end_offset, storage.last_epoch) == (100, 100, 4)
    storage.persist(append=make_entries(100, 2, epoch=4))
    state = make_storage().load()
    assert state.log_start_offset == 100 and state.entries == make_entries(100, 2, epoch=4)
    assert make_storage().last_epoch == 4


def test_reset_to_snapshot(make_storage):
    storage = make_storage()
    storage.persist(election_state=ElectionState(1), append=make_entries(0, 10, epoch=1))
    storage.write_snapshot(SnapshotId(5, 1), b"s")
    storage.reset_to_snapshot(SnapshotId(5, 1))
    assert (storage.log_start_offset, storage.end_offset, storage.last_epoch) == (5, 5, 1)
    state = make_storage().load()
    assert (state.log_start_offset, state.entries) == (5, [])


def test_load_discards_a_log_that_ends_before_the_snapshot(make_storage, caplog):
    storage = make_storage()
    storage.persist(election_state=ElectionState(1), append=make_entries(0, 10, epoch=1))
    storage.write_election_state(ElectionState(3, leader_id=2))
    storage.write_snapshot(SnapshotId(50, 3), b"s")  # crash before the log was reset
    state = make_storage().load()
    assert (state.log_start_offset, state.entries, state.snapshot_id) == (50, [], SnapshotId(50, 3))
    assert "before the latest snapshot" in caplog.text
    assert make_storage().last_epoch == 3


def test_load_discards_a_log_that_disagrees_with_the_snapshot(make_storage, caplog):
    storage = make_storage()
    storage.persist(election_state=ElectionState(1), append=make_entries(0, 10, epoch=1))
    storage.write_election_state(ElectionState(2, leader_id=2))
    storage.write_snapshot(SnapshotId(8, 2), b"s")  # the committed record 7 has epoch 2
    state = make_storage().load()
    assert (state.log_start_offset, state.entries) == (8, [])
    assert "diverged" in caplog.text


def test_load_keeps_a_log_that_agrees_with_the_snapshot(make_storage):
    storage = make_storage()
    storage.persist(
        election_state=ElectionState(1), append=make_entries(0, 10, epoch=1), snapshot=(SnapshotId(8, 1), b"s")
    )
    assert make_storage().load().entries == make_entries(0, 10, epoch=1)


def test_load_refuses_a_hole_without_a_snapshot(make_storage):
    storage = make_storage()
    storage.persist(election_state=ElectionState(1), append=make_entries(0, 10, epoch=1))
    storage.log.delete_before(10)  # behind the facade's back: no snapshot covers it
    with pytest.raises(StorageError, match="no snapshot covers the records below it, so this node refuses to start"):
        make_storage().load()


def test_delete_before_removes_stale_snapshots(make_storage):
    storage = make_storage()
    storage.persist(append=make_entries(0, 40, epoch=1))
    for end in (5, 10, 30):
        storage.write_snapshot(SnapshotId(end, 1), b"s")
    storage.delete_before(30)
    kept = storage.list_snapshots()
    assert kept[-1] == SnapshotId(30, 1)
    assert all(s.end_offset >= storage.log_start_offset for s in kept[:-1])


def test_snapshot_transfer_through_the_facade(make_storage):
    leader = MemoryStorage()
    leader.write_snapshot(SnapshotId(10, 2), b"payload" * 1000)
    follower = make_storage()
    writer = follower.snapshot_writer(SnapshotId(10, 2))
    while writer.position < leader.snapshot_size(SnapshotId(10, 2)):
        writer.append(writer.position, leader.read_snapshot_chunk(SnapshotId(10, 2), writer.position, 1000))
    writer.finish()
    assert follower.read_snapshot(SnapshotId(10, 2)) == b"payload" * 1000


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_retention_only_behind_the_latest_snapshot(tmp_path, kind):
    policy = RetentionPolicy(retention_bytes=0, retention_ms=None)
    if kind == "file":
        storage = FileStorage.open(tmp_path, fsync=False, segment_bytes_max=200, retention=policy)
    else:
        storage = MemoryStorage(retention=policy)
    for chunk in range(0, 60, 3):
        storage.persist(append=make_entries(chunk, 3, size=30))
    assert storage.apply_retention(now_ms=0) == 0  # no snapshot: nothing may go
    storage.write_snapshot(SnapshotId(10, 1), b"s10")
    storage.write_snapshot(SnapshotId(30, 1), b"s30")
    start = storage.apply_retention(now_ms=0)
    assert 0 < start <= 30
    assert storage.log_start_offset == start
    assert storage.read(start, 1)[0].offset == start
    assert storage.end_offset == 60
    assert storage.list_snapshots() == [SnapshotId(30, 1)]
    storage.close()


def test_retention_by_size_and_age(tmp_path):
    storage = FileStorage.open(
        tmp_path, fsync=False, segment_bytes_max=200, retention=RetentionPolicy(retention_bytes=10**9, retention_ms=1000)
    )
    for chunk in range(0, 60, 3):
        storage.persist(append=make_entries(chunk, 3, size=30))
    storage.write_snapshot(SnapshotId(60, 1), b"s")
    infos = storage.log.segment_infos()
    now = max(info.modified_ms for info in infos)
    assert storage.apply_retention(now_ms=now) == 0  # all young and small
    old = infos[0].modified_ms - 10_000
    os.utime(infos[0].path, ns=(old * 10**6, old * 10**6))
    assert storage.apply_retention(now_ms=now) == infos[1].base_offset  # only the old one
    storage.retention = RetentionPolicy(retention_bytes=0, retention_ms=None)
    start = storage.apply_retention(now_ms=now)
    assert start == storage.log.segment_infos()[-1].base_offset  # the active segment stays
    storage.close()


# -- FileStorage only ------------------------------------------------------------------------


def test_meta_is_written_once_and_checked(tmp_path):
    FileStorage.open(tmp_path, node_id=1, cluster_id="c1", fsync=False).close()
    with FileStorage.open(tmp_path, fsync=False) as storage:
        assert (storage.node_id, storage.cluster_id) == (1, "c1")
    with FileStorage.open(tmp_path, node_id=1, cluster_id="c1", fsync=False):
        pass
    with pytest.raises(StorageOwnershipError, match="belongs to node 1 .* not node 2"):
        FileStorage.open(tmp_path, node_id=2, cluster_id="c1", fsync=False)
    with pytest.raises(StorageOwnershipError, match="not cluster 'c2'"):
        FileStorage.open(tmp_path, node_id=1, cluster_id="c2", fsync=False)
    (tmp_path / "meta.json").write_text("{}")
    with pytest.raises(StorageOwnershipError, match="damaged"):
        FileStorage.open(tmp_path, node_id=1, cluster_id="c1", fsync=False)


def test_meta_needs_both_ids(tmp_path):
    with pytest.raises(ValueError, match="both"):
        FileStorage.open(tmp_path, node_id=1, fsync=False)


def test_one_process_per_data_directory(tmp_path):
    first = FileStorage.open(tmp_path, node_id=1, cluster_id="c", fsync=False)
    with pytest.raises(StorageOwnershipError, match="already open"):
        FileStorage.open(tmp_path, fsync=False)
    first.close()
    FileStorage.open(tmp_path, fsync=False).close()


def test_layout_and_fsync_on(tmp_path):
    with FileStorage.open(tmp_path / "d", node_id=3, cluster_id="c") as storage:
        storage.persist(
            election_state=ElectionState(1, voted_for=3),
            append=make_entries(0, 3),
            snapshot=(SnapshotId(0, 0), b""),
        )
    names = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert names == [".lock", "log", "meta.json", "quorum-state.json", "quorum-state.witness.json", "snapshots"]


def test_corrupt_election_state_stops_startup(tmp_path):
    with FileStorage.open(tmp_path, fsync=False) as storage:
        storage.write_election_state(ElectionState(4, voted_for=1))
    (tmp_path / "quorum-state.json").write_bytes(b"{}")
    with pytest.raises(CorruptElectionStateError):
        FileStorage.open(tmp_path, fsync=False)
