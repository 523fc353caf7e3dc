"""Opening a damaged log for repair (issue 14; docs/storage.md, "Repair"):
the valid prefix is kept, the damage moved aside (never deleted), and the
repair recorded durably before anything moves, so that a crash during the
repair forgets nothing."""

from __future__ import annotations

import json
import logging

import pytest
from _storage_helpers import batch_spans, flip_bit, make_entries, segment_files

from quorum import ElectionState, RepairState
from quorum.storage import DamagedLogError, FileStorage, MissingElectionStateError
from quorum.storage._repair import REPAIR_MARKER_FILE_NAME, plan_damage_cut


def build(data_dir, count=30, **options):
    """A node's data directory with ``count`` records in epoch 3 (several
    segments with ``segment_bytes_max``), election state epoch 3."""
    with FileStorage.open(data_dir, node_id=1, cluster_id="c", fsync=False, **options) as storage:
        storage.write_election_state(ElectionState(epoch=3, voted_for=2, leader_id=2))
        for offset in range(0, count, 3):  # one batch per append
            storage.append(make_entries(offset, 3, epoch=3))
            storage.flush()


def damage_middle(data_dir):
    """Flip a byte in the middle batch of the first segment."""
    segment = segment_files(data_dir / "log")[0]
    spans = batch_spans(segment)
    start, _ = spans[len(spans) // 2]
    flip_bit(segment, start + 30)


def test_without_repair_a_damaged_log_is_still_refused(tmp_path):
    build(tmp_path)
    damage_middle(tmp_path)
    with pytest.raises(DamagedLogError):
        FileStorage.open(tmp_path, fsync=False)
    assert not (tmp_path / REPAIR_MARKER_FILE_NAME).exists()


@pytest.mark.parametrize("segment_bytes_max", [64 * 1024 * 1024, 300])
def test_repair_keeps_the_prefix_moves_the_rest_aside_and_records_the_repair(tmp_path, caplog, segment_bytes_max):
    build(tmp_path, segment_bytes_max=segment_bytes_max)
    log_dir = tmp_path / "log"
    before = {path.name: path.read_bytes() for path in segment_files(log_dir)}
    damage_middle(tmp_path)
    damaged_bytes = segment_files(log_dir)[0].read_bytes()

    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        storage = FileStorage.open(tmp_path, fsync=False, segment_bytes_max=segment_bytes_max, repair_damage=True, now_ms=1234)
    with storage:
        repair = storage.repair
        kept = list(storage.entries_from())
        assert repair == RepairState(damaged_from_offset=len(kept), restart_epoch=3, acknowledged_end=30)
        assert 0 < len(kept) < 30
        assert kept == make_entries(0, len(kept), epoch=3)
        # The damaged suffix is aside, whole: the damaged segment as it was,
        # the later segments untouched.
        aside = tmp_path / "damaged-1234"
        first = segment_files(log_dir)[0].name
        assert (aside / first).read_bytes() == damaged_bytes
        for name, data in before.items():
            if name != first:
                assert (aside / name).read_bytes() == data
        # One line names the file, the offset and what happens next.
        [line] = [record.getMessage() for record in caplog.records if "damaged at byte" in record.getMessage()]
        assert str(log_dir / first) in line and f"below {len(kept)}" in line and "repairs its log from a leader" in line
        # The log goes on from the prefix (in a new epoch, recorded first).
        storage.write_election_state(ElectionState(epoch=4, leader_id=2))
        storage.append(make_entries(len(kept), 3, epoch=4))
        storage.flush()

    with FileStorage.open(tmp_path, fsync=False, segment_bytes_max=segment_bytes_max) as reopened:
        assert reopened.repair == repair, "the repair is continued after a restart, whatever the flag"
        reopened.finish_repair()
        assert reopened.repair is None
    with FileStorage.open(tmp_path, fsync=False, segment_bytes_max=segment_bytes_max) as done:
        assert done.repair is None
        assert done.end_offset == len(kept) + 3


def test_the_marker_is_written_before_anything_moves(tmp_path, monkeypatch):
    """A crash while the damage is moved aside: the marker is there, and
    the next open finishes the cut and keeps what the marker says."""
    build(tmp_path, segment_bytes_max=300)
    damage_middle(tmp_path)
    from quorum.storage import _storage

    def crash(*args, **kwargs):
        assert (tmp_path / REPAIR_MARKER_FILE_NAME).exists()
        raise OSError("power lost")

    monkeypatch.setattr(_storage, "move_damage_aside", crash)
    with pytest.raises(OSError):
        FileStorage.open(tmp_path, fsync=False, segment_bytes_max=300, repair_damage=True, now_ms=1)
    monkeypatch.undo()
    marker = json.loads((tmp_path / REPAIR_MARKER_FILE_NAME).read_bytes())
    assert marker["acknowledged_end"] == 30 and marker["restart_epoch"] == 3

    with FileStorage.open(tmp_path, fsync=False, segment_bytes_max=300, repair_damage=True, now_ms=2) as storage:
        assert storage.repair.acknowledged_end == 30
        assert storage.end_offset == storage.repair.damaged_from_offset


def test_a_crash_half_way_through_the_move_forgets_nothing(tmp_path):
    """The later segments already moved, the damaged one not yet cut: the
    end of what was on disk can no longer be seen, but the marker kept it."""
    build(tmp_path, segment_bytes_max=300)
    damage_middle(tmp_path)
    log_dir = tmp_path / "log"
    with pytest.raises(DamagedLogError):
        FileStorage.open(tmp_path, fsync=False, segment_bytes_max=300)
    plan = plan_damage_cut(log_dir, 4096)
    assert plan is not None and plan.acknowledged_end == 30
    # First open: records the marker (then "crashes" in the move below).
    from quorum.storage._repair import write_repair_marker

    write_repair_marker(tmp_path, RepairState(plan.damaged_from_offset, 3, 30), [], fsync=False)
    aside = tmp_path / "damaged-1"
    aside.mkdir()
    for path in plan.move:
        path.rename(aside / path.name)
    # ... and the power was lost before the damaged segment was cut.

    with FileStorage.open(tmp_path, fsync=False, segment_bytes_max=300, repair_damage=True, now_ms=2) as storage:
        assert storage.repair == RepairState(plan.damaged_from_offset, 3, 30)


def test_damage_with_the_election_state_lost_is_refused(tmp_path):
    """Its votes are unknown as well: refused, repair or not."""
    build(tmp_path)
    damage_middle(tmp_path)
    (tmp_path / "quorum-state.json").unlink()
    with pytest.raises(MissingElectionStateError):
        FileStorage.open(tmp_path, fsync=False, repair_damage=True)
    assert not (tmp_path / REPAIR_MARKER_FILE_NAME).exists()


def test_a_damaged_marker_is_refused(tmp_path):
    build(tmp_path)
    (tmp_path / REPAIR_MARKER_FILE_NAME).write_bytes(b'{"version": 1}')
    from quorum.storage import CorruptLogMetadataError

    with pytest.raises(CorruptLogMetadataError):
        FileStorage.open(tmp_path, fsync=False)


def test_check_storage_reports_a_repair_under_way(tmp_path):
    from quorum.storage import check_storage_report

    build(tmp_path)
    damage_middle(tmp_path)
    FileStorage.open(tmp_path, fsync=False, repair_damage=True, now_ms=7).close()

    report, code = check_storage_report(tmp_path)

    [line] = [text for text in report.splitlines() if text.startswith("REPAIR")]
    assert "damage found at offset" in line and "damaged-7" in line and "up to offset 30" in line
    assert code == 0 and report.endswith("verdict: sound")


def test_a_flipped_bit_in_the_last_batch_is_repaired_not_cut(tmp_path):
    """Issue 14's known limit: the last batch may have been fsynced and
    acknowledged, so a flipped bit in it (a whole batch, no zeroed sector)
    is damage: check-storage says so, a plain open refuses, and a repairing
    open keeps the prefix, moves the batch aside and neither votes nor
    stands until a leader gave it back."""
    from quorum.storage import EXIT_DAMAGED, check_storage

    build(tmp_path)
    segment = segment_files(tmp_path / "log")[-1]
    start, end = batch_spans(segment)[-1]
    flip_bit(segment, (start + end) // 2)
    damaged_bytes = segment.read_bytes()
    check = check_storage(tmp_path)
    assert check.exit_code == EXIT_DAMAGED
    assert any("last batch, which is whole and has no zeroed 512-byte sector" in line for line in check.lines)
    with pytest.raises(DamagedLogError, match="a flipped bit, not a torn write"):
        FileStorage.open(tmp_path, fsync=False)
    with FileStorage.open(tmp_path, fsync=False, repair_damage=True, now_ms=99) as storage:
        # The damaged batch's own header cannot be trusted: its 100 bytes
        # bound what it held (a record takes 5 bytes at least, past the
        # 25-byte batch header).
        assert storage.repair == RepairState(damaged_from_offset=27, restart_epoch=3, acknowledged_end=27 + 15)
        assert list(storage.entries_from()) == make_entries(0, 27, epoch=3)
    assert (tmp_path / "damaged-99" / segment.name).read_bytes() == damaged_bytes


def _files(data_dir):
    return {str(path.relative_to(data_dir)): path.read_bytes() for path in sorted(data_dir.rglob("*")) if path.is_file()}


def _node_config(data_dir, voters, on_damage="repair"):
    from quorum.runtime import NodeConfig

    return NodeConfig(
        node_id=1, voters={voter: ("127.0.0.1", 0) for voter in voters}, data_dir=data_dir, cluster_id="c",
        fsync=False, plaintext=True, on_damage=on_damage,
    )


@pytest.mark.parametrize("on_damage", ["repair", "refuse"])
def test_the_only_voter_refuses_a_damaged_log_that_nobody_could_repair(tmp_path, on_damage):
    """A repair waits for a leader; a static voter set of one has none but
    the damaged node itself, which would then run forever serving nothing.
    It refuses to start instead, moving nothing (docs/storage.md, "The only
    voter")."""
    from quorum.runtime._node_api import open_storage
    from quorum.storage import SoleVoterDamagedError

    build(tmp_path)
    damage_middle(tmp_path)
    before = _files(tmp_path)
    with pytest.raises(SoleVoterDamagedError) as caught:
        open_storage(_node_config(tmp_path, [1], on_damage))
    message = str(caught.value)
    assert "is damaged at byte" in message and "node 1 is its cluster's only voter" in message
    assert "restore it from a backup" in message
    assert _files(tmp_path) == before, "nothing moved, no repair marker"
    assert not (tmp_path / REPAIR_MARKER_FILE_NAME).exists()

    # One voter among three repairs as before: a leader can come.
    with open_storage(_node_config(tmp_path, [1, 2, 3])) as storage:
        assert storage.repair is not None and storage.repair.damaged_from_offset > 0


def test_the_only_voter_refuses_a_repair_an_earlier_start_began(tmp_path):
    from quorum.runtime._node_api import open_storage
    from quorum.storage import SoleVoterDamagedError

    build(tmp_path)
    damage_middle(tmp_path)
    FileStorage.open(tmp_path, fsync=False, repair_damage=True).close()  # the marker stays
    assert (tmp_path / REPAIR_MARKER_FILE_NAME).exists()
    with pytest.raises(SoleVoterDamagedError, match="is being repaired from offset .* only voter"):
        open_storage(_node_config(tmp_path, [1]))
    # The storage it opened is closed again: the directory is not held.
    with FileStorage.open(tmp_path, fsync=False) as reopened:
        assert reopened.repair is not None


@pytest.mark.parametrize("voters", [[1], [1, 2, 3]])
def test_a_damaged_snapshot_is_refused_and_the_directory_released(tmp_path, voters):
    """The snapshot is read when the runtime recovers, after storage opened:
    the refusal used to leave the directory locked by this process (a
    program that caught it and started again found it "already open"), and
    told the only voter to rejoin a cluster that has no other member."""
    import trio

    from quorum import ElectionState, SnapshotId
    from quorum.runtime import open_quorum_node
    from quorum.storage import CorruptSnapshotError, SoleVoterDamagedError

    with FileStorage.open(tmp_path, node_id=1, cluster_id="c", fsync=False) as storage:
        storage.write_election_state(ElectionState(epoch=3, voted_for=1, leader_id=1))
        storage.append(make_entries(0, 30, epoch=3))
        storage.flush()
        storage.persist(snapshot=(SnapshotId(30, 3), b"state@30"))
    snapshot = next((tmp_path / "snapshots").glob("*.snapshot"))
    flip_bit(snapshot, snapshot.stat().st_size - 2)

    async def start() -> None:
        async with open_quorum_node(_node_config(tmp_path, voters)):
            raise AssertionError("a node with a damaged snapshot started")

    expected = SoleVoterDamagedError if voters == [1] else CorruptSnapshotError
    with pytest.raises(expected) as caught:
        trio.run(start)
    assert f"the snapshot file {snapshot} is damaged" in str(caught.value)
    assert ("only voter" in str(caught.value)) == (voters == [1])
    FileStorage.open(tmp_path, fsync=False).close()  # released: no "already open"
