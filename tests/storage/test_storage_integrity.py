"""Issue 14 at the storage level: lost or damaged election state beside a
log, data directories of other nodes, `check-storage`, and the property
that any byte-level damage yields the valid prefix plus a torn-tail or a
damaged verdict, never an exception other than the typed storage error and
never a wrong record."""

from __future__ import annotations

import fcntl
import os
import shutil

import pytest
from _storage_helpers import make_entries
from hypothesis import given
from hypothesis import strategies as st

from quorum._types import ElectionState, SnapshotId
from quorum.storage import (
    EXIT_DAMAGED,
    EXIT_IN_USE,
    EXIT_NOT_A_DATA_DIR,
    EXIT_SOUND,
    EXIT_TORN_TAIL,
    CorruptElectionStateError,
    DamagedLogError,
    FileStorage,
    MissingElectionStateError,
    StorageError,
    StorageOwnershipError,
    check_storage,
)


def _node_dir(path, *, records=40, segment_bytes_max=400, snapshot=False):
    """A node-1 directory of cluster "c" holding ``records`` records in
    batches of 4 (several segments), as a running node leaves it."""
    with FileStorage.open(
        path, node_id=1, cluster_id="c", fsync=False, segment_bytes_max=segment_bytes_max, index_interval_bytes=100
    ) as s:
        s.persist(election_state=ElectionState(3, voted_for=2, leader_id=2))
        for base in range(0, records, 4):
            s.persist(append=make_entries(base, 4, epoch=3, size=9))
        if snapshot:
            s.persist(snapshot=(SnapshotId(24, 3), b"state@24"))
    return path


def _open(path, **options):
    options.setdefault("fsync", False)
    options.setdefault("segment_bytes_max", 400)
    options.setdefault("index_interval_bytes", 100)
    return FileStorage.open(path, node_id=1, cluster_id="c", **options)


def _files(root):
    """Every file's bytes but the ``.index`` files: those are a derived
    cache that any open may rebuild (docs/storage.md)."""
    return {
        p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.suffix != ".index"
    }


# -- election state lost beside a log --------------------------------------------


@pytest.mark.parametrize("how", ["deleted", "empty", "garbage"])
def test_lost_election_state_beside_records_refuses_to_start(tmp_path, how):
    # Issue 14: a deleted quorum-state.json beside a full log started the
    # node silently at epoch 0 with no vote: it could vote twice in epoch 3.
    data_dir = _node_dir(tmp_path / "n")
    state = data_dir / "quorum-state.json"
    if how == "deleted":
        state.unlink()
    else:
        state.write_bytes(b"" if how == "empty" else b"\x00\xff{not json")
    with pytest.raises(CorruptElectionStateError) as caught:
        with _open(data_dir) as storage:
            storage.load()
    assert isinstance(caught.value, MissingElectionStateError) == (how == "deleted")
    assert str(state) in str(caught.value) and "voting twice in one epoch" in str(caught.value)
    assert check_storage(data_dir).exit_code == EXIT_DAMAGED


def test_lost_election_state_beside_a_snapshot_alone_refuses_to_start(tmp_path):
    data_dir = _node_dir(tmp_path / "n", records=0, snapshot=True)
    (data_dir / "quorum-state.json").unlink()
    with pytest.raises(MissingElectionStateError, match="it holds snapshot"):
        _open(data_dir)


def test_a_new_directory_without_election_state_starts(tmp_path):
    with _open(tmp_path / "n") as storage:
        assert storage.load().election_state is None
    with _open(tmp_path / "n") as storage:  # and again, still empty
        assert storage.load().election_state is None


def test_restart_after_refusal_keeps_refusing_and_changes_nothing(tmp_path):
    data_dir = _node_dir(tmp_path / "n")
    (data_dir / "quorum-state.json").unlink()
    before = _files(data_dir)
    for _ in range(2):
        with pytest.raises(MissingElectionStateError):
            _open(data_dir)
    assert _files(data_dir) == before


# -- whose directory is it --------------------------------------------------------


def test_another_nodes_or_clusters_directory_is_refused(tmp_path):
    data_dir = _node_dir(tmp_path / "n")
    with pytest.raises(StorageOwnershipError, match="belongs to node 1 of cluster 'c', not node 2"):
        FileStorage.open(data_dir, node_id=2, cluster_id="c", fsync=False)
    with pytest.raises(StorageOwnershipError, match="belongs to cluster 'c' .*not cluster 'd'"):
        FileStorage.open(data_dir, node_id=1, cluster_id="d", fsync=False)


def test_data_without_meta_is_refused_when_ids_are_given(tmp_path):
    data_dir = _node_dir(tmp_path / "n")
    (data_dir / "meta.json").unlink()
    with pytest.raises(StorageOwnershipError, match="no meta.json"):
        _open(data_dir)
    assert not (data_dir / "meta.json").exists()  # not silently re-stamped
    assert check_storage(data_dir).exit_code == EXIT_DAMAGED


# -- check-storage ----------------------------------------------------------------


def test_check_storage_on_a_sound_directory(tmp_path):
    data_dir = _node_dir(tmp_path / "n", snapshot=True)
    before = _files(data_dir)
    result = check_storage(data_dir)
    assert (result.verdict, result.exit_code) == ("sound", EXIT_SOUND), result.lines
    assert any("epoch 3, voted for 2" in line for line in result.lines)
    assert _files(data_dir) == before


def test_check_storage_reports_a_torn_tail_that_the_next_start_cuts(tmp_path):
    data_dir = _node_dir(tmp_path / "n")
    active = sorted((data_dir / "log").glob("*.log"))[-1]
    with open(active, "ab") as handle:
        handle.write(b"\x00\x00\x01\x00partial")
    before = _files(data_dir)
    result = check_storage(data_dir)
    assert (result.verdict, result.exit_code) == ("torn tail", EXIT_TORN_TAIL), result.lines
    assert _files(data_dir) == before
    with _open(data_dir) as storage:
        assert storage.log.recovery.torn and storage.end_offset == 40
    assert check_storage(data_dir).exit_code == EXIT_SOUND


@pytest.mark.parametrize("target", ["sealed segment", "snapshot", "checkpoint"])
def test_check_storage_reports_damage_and_the_node_refuses(tmp_path, target):
    data_dir = _node_dir(tmp_path / "n", snapshot=True)
    if target == "sealed segment":
        path = sorted((data_dir / "log").glob("*.log"))[0]
    elif target == "snapshot":
        path = next((data_dir / "snapshots").glob("*.snapshot"))
    else:
        with _open(data_dir) as storage:
            storage.log.delete_before(20)
        path = data_dir / "log" / "log-start-offset.json"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    before = _files(data_dir)
    result = check_storage(data_dir)
    assert (result.verdict, result.exit_code) == ("damaged", EXIT_DAMAGED), result.lines
    assert any(line.startswith("DAMAGED") and str(path) in line for line in result.lines)
    with pytest.raises(StorageError) as caught:
        with _open(data_dir) as storage:
            storage.load()
    assert str(path) in str(caught.value) and str(caught.value).endswith("describes.")
    assert _files(data_dir) == before


@pytest.mark.parametrize("how", ["log directory removed", "segments and indexes removed", "a file in its place"])
@pytest.mark.parametrize("repair_damage", [False, True])
def test_a_lost_log_directory_is_damage_not_an_empty_log(tmp_path, how, repair_damage):
    """``rm -rf data/log`` (a name that invites one) beside the election
    state and a snapshot used to open as an empty log after the snapshot:
    the records after it were lost silently, and a voter with that log
    counts as one with a short log (docs/storage.md, "Torn tail or damage")."""
    data_dir = _node_dir(tmp_path / "n", snapshot=True)
    log_dir = data_dir / "log"
    if how == "log directory removed":
        shutil.rmtree(log_dir)
    elif how == "segments and indexes removed":
        for path in log_dir.iterdir():
            path.unlink()
    else:
        shutil.rmtree(log_dir)
        log_dir.write_bytes(b"not a directory\n")
    before = _files(data_dir)
    result = check_storage(data_dir)
    assert (result.verdict, result.exit_code) == ("damaged", EXIT_DAMAGED), result.lines
    assert [line for line in result.lines if str(log_dir) + ":" in line and "ok " in line] == [], result.lines
    assert any(line.startswith(f"DAMAGED  {log_dir}: ") for line in result.lines), result.lines
    with pytest.raises(DamagedLogError, match=f"the log directory {log_dir} is damaged"):
        _open(data_dir, repair_damage=repair_damage)
    assert _files(data_dir) == before, "nothing was created, moved or cut"
    assert log_dir.is_dir() == (how == "segments and indexes removed")


@pytest.mark.parametrize("how", ["a fresh directory", "election state, no snapshot", "an emptied log's checkpoint"])
def test_a_log_without_segments_that_may_be_empty_opens(tmp_path, how):
    """What a crash can leave without losing records is not damage: a first
    open cut short before its segment's directory entry was durable (no
    snapshot yet), or an emptied log (a snapshot installed past its end)
    between its checkpoint and its new segment."""
    data_dir = tmp_path / "n"
    if how == "a fresh directory":
        data_dir.mkdir()
    else:
        _node_dir(data_dir, records=0 if how == "election state, no snapshot" else 40)
        log_dir = data_dir / "log"
        if how == "an emptied log's checkpoint":
            with _open(data_dir) as storage:
                storage.persist(snapshot=(SnapshotId(60, 3), b"state@60"))
                storage.log.delete_before(60, epoch_before=3)
        for path in log_dir.glob("*.log"):
            path.unlink()
        for path in log_dir.glob("*.index"):
            path.unlink()
    assert check_storage(data_dir).verdict in ("sound", "not a data directory")
    with _open(data_dir) as storage:
        expected_start = 60 if how == "an emptied log's checkpoint" else 0
        assert storage.end_offset == expected_start


def test_check_storage_not_a_data_dir_and_in_use(tmp_path):
    assert check_storage(tmp_path / "missing").exit_code == EXIT_NOT_A_DATA_DIR
    (tmp_path / "empty").mkdir()
    assert check_storage(tmp_path / "empty").exit_code == EXIT_NOT_A_DATA_DIR
    data_dir = _node_dir(tmp_path / "n")
    with _open(data_dir):
        assert check_storage(data_dir).exit_code == EXIT_IN_USE
    fd = os.open(data_dir / ".lock", os.O_RDONLY)
    try:  # a checker holds a shared lock: a node cannot start meanwhile
        fcntl.flock(fd, fcntl.LOCK_SH)
        with pytest.raises(StorageOwnershipError, match="already open"):
            _open(data_dir)
    finally:
        os.close(fd)


# -- the property -----------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    data_dir = _node_dir(tmp_path_factory.mktemp("pristine") / "n", records=60)
    with _open(data_dir) as storage:
        entries = storage.load().entries
    assert len(entries) == 60 and len(list((data_dir / "log").glob("*.log"))) >= 3
    assert all(index.stat().st_size > 0 for index in (data_dir / "log").glob("*.index"))
    return data_dir, entries


_DAMAGE = st.sampled_from(["flip", "truncate", "zero", "delete"])


@given(data=st.data(), damage=_DAMAGE)
def test_any_damage_gives_the_valid_prefix_and_a_verdict(pristine, tmp_path_factory, data, damage):
    source, entries = pristine
    data_dir = tmp_path_factory.mktemp("damaged") / "n"
    shutil.copytree(source, data_dir)
    files = sorted(p for p in data_dir.rglob("*") if p.is_file() and p.name != ".lock")
    target = data.draw(st.sampled_from(files), label="file")
    raw = bytearray(target.read_bytes())
    if damage == "delete" or not raw:
        target.unlink()
    elif damage == "flip":
        position = data.draw(st.integers(0, len(raw) - 1), label="byte")
        raw[position] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        target.write_bytes(bytes(raw))
    elif damage == "truncate":
        target.write_bytes(bytes(raw[: data.draw(st.integers(0, len(raw) - 1), label="length")]))
    else:
        start = data.draw(st.integers(0, len(raw) - 1), label="from")
        end = data.draw(st.integers(start + 1, len(raw)), label="to")
        raw[start:end] = bytes(end - start)
        target.write_bytes(bytes(raw))

    check = check_storage(data_dir)
    before = _files(data_dir)
    try:
        with _open(data_dir) as storage:
            loaded = storage.load().entries
            torn = storage.log.recovery.torn
            torn_reason = storage.log.recovery.reason
    except StorageError:
        # Refused: nothing was modified, and check-storage said so first.
        assert _files(data_dir) == before
        assert check.verdict == "damaged", (target.name, damage, check.lines)
        return
    # Never a wrong record: what loads is a prefix of what was written.
    assert loaded == entries[: len(loaded)], (target.name, damage)
    if len(loaded) < len(entries):
        # Lost records come with a torn-tail verdict, except when the active
        # segment is cut exactly at a batch boundary, which no check at the
        # storage level can tell from a shorter log (docs/storage.md).
        active = sorted((source / "log").glob("*.log"))[-1].name
        assert torn or (target.name == active and damage == "truncate"), (target.name, damage, check.lines)
        # A flipped bit is cut as torn only when it made a batch claim more
        # bytes than the file holds (what a short write looks like): a whole
        # batch failing its CRC with no zeroed sector is damage.
        assert damage != "flip" or torn_reason.startswith("short write"), (target.name, torn_reason)
        assert check.verdict == ("torn tail" if torn else "sound"), check.lines
    else:
        # Everything survived: the damage hit an index file (the derived
        # cache) or changed nothing that matters (zeros over zeros, the
        # newline after a JSON file); check-storage agrees with recovery.
        assert check.verdict == "sound", (target.name, damage, check.lines)


# -- crash paths that must never look like damage --------------------------------


def _segmented(path, segment_bytes_max=150, **options):
    from _storage_helpers import open_log

    log = open_log(path, segment_bytes_max=segment_bytes_max, **options)
    for base in range(0, 24, 4):
        log.append(make_entries(base, 4, epoch=1 + base // 8, size=9))
    log.flush()
    return log


@pytest.mark.parametrize("crash_at_log_unlink", [1, 2, 3])
def test_truncation_across_segments_interrupted_leaves_no_gap(tmp_path, monkeypatch, crash_at_log_unlink):
    from _storage_helpers import all_entries, open_log, segment_files

    from quorum.storage import SegmentedLog

    log = _segmented(tmp_path)
    entries = all_entries(log)
    files = segment_files(tmp_path)
    assert len(files) >= 4
    unlinked = []
    real_unlink = SegmentedLog._unlink

    def crashing_unlink(path):
        if path.suffix == ".log":
            unlinked.append(path.name)
            if len(unlinked) == crash_at_log_unlink:
                raise KeyboardInterrupt("power loss")  # not an OSError: nothing handles it
        real_unlink(path)

    monkeypatch.setattr(SegmentedLog, "_unlink", staticmethod(crashing_unlink))
    with pytest.raises(KeyboardInterrupt):
        log.truncate_to(int(files[1].stem) + 1)
    monkeypatch.undo()
    assert unlinked[0] == files[-1].name  # newest first
    with open_log(tmp_path) as reopened:  # a shorter log, never a gap: no DamagedLogError
        assert all_entries(reopened) == entries[: reopened.end_offset]
        assert not reopened.recovery.torn


def test_a_segment_is_synced_before_the_next_exists(tmp_path, monkeypatch):
    import quorum.storage._segments as segments_module
    from quorum.storage import SegmentedLog

    events = []
    real_sync = segments_module.data_sync
    real_create = SegmentedLog._create_segment
    monkeypatch.setattr(segments_module, "data_sync", lambda fd: (events.append("sync"), real_sync(fd))[1])
    monkeypatch.setattr(
        SegmentedLog, "_create_segment", lambda self, base: (events.append(f"create {base}"), real_create(self, base))[1]
    )
    log = _segmented(tmp_path, fsync=True)
    log.close()
    creates = [i for i, event in enumerate(events) if event.startswith("create") and event != "create 0"]
    assert creates and all(events[i - 1] == "sync" for i in creates), events


@pytest.mark.parametrize("base", [0, 250, 2**32 - 3, 2**40 + 17])
def test_find_valid_batch_after_garbage_at_any_offset(base):
    from quorum.storage._format import encode_batch
    from quorum.storage._segments import find_valid_batch

    first = encode_batch(base, 7, make_entries(base, 3, epoch=7, size=9))
    second = encode_batch(base + 3, 7, make_entries(base + 3, 2, epoch=7, size=9))
    damaged = bytearray(first + second)
    damaged[10] ^= 0x01  # inside the first batch's header
    assert find_valid_batch(bytes(damaged), 1, base + 1, 7) == len(first)
    assert find_valid_batch(bytes(damaged), 1, base + 1, 8) is None  # epoch below the floor: not a candidate
    assert find_valid_batch(bytes(b"\x01" * 4096 + damaged[: len(first)]), 1, base + 1, 0) is None
