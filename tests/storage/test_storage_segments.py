"""SegmentedLog: round trips, batching, segment roll, the offset index,
truncation (including in the middle of a batch and its crash safety),
deletion behind snapshots, reads, and failure handling."""

from __future__ import annotations

import errno
import logging
import os

import pytest
from _storage_helpers import all_entries, batch_spans, make_entries, open_log, segment_files

from quorum._types import Entry, RecordKind, SnapshotId
from quorum.storage import CorruptLogMetadataError, DamagedLogError, LogFailedError, SegmentedLog, dump_log
from quorum.storage import _segments
from quorum.storage._format import BATCH_HEADER_BYTES, encode_batch


def batches(directory):
    return [item for item in dump_log(directory, records=False) if item["type"] == "batch"]


# -- round trips ------------------------------------------------------------------


def test_empty_log(tmp_path):
    log = open_log(tmp_path / "log")
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (0, 0, 0)
    assert log.read(0) == []
    assert all_entries(log) == []
    log.close()
    assert [p.name for p in segment_files(tmp_path / "log")] == ["00000000000000000000.log"]


def test_round_trip_and_reopen(tmp_path):
    entries = make_entries(0, 30, epoch=1) + make_entries(30, 20, epoch=3)
    entries.append(Entry(50, 3, RecordKind.LEADER_CHANGE, b""))
    with open_log(tmp_path) as log:
        log.append(entries[:7])
        log.append(entries[7:])
        log.flush()
        assert all_entries(log) == entries
        assert (log.end_offset, log.last_epoch) == (51, 3)
    with open_log(tmp_path) as log:
        assert all_entries(log) == entries
        assert (log.log_start_offset, log.end_offset, log.last_epoch) == (0, 51, 3)
        log.append(make_entries(51, 3, epoch=4))
        assert log.end_offset == 54


def test_fsync_enabled_paths(tmp_path):
    # The same operations with real fsyncs (roll, flush, truncate, delete).
    log = SegmentedLog.open(tmp_path, segment_bytes_max=200)
    assert log.fsync_enabled
    log.append(make_entries(0, 20))
    log.flush()
    log.append(make_entries(20, 5))
    log.truncate_to(22)
    log.delete_before(10)
    log.flush()
    log.close()
    with SegmentedLog.open(tmp_path, segment_bytes_max=200) as log:
        assert [e.offset for e in all_entries(log)] == list(range(log.log_start_offset, 22))


def test_one_batch_per_epoch_run(tmp_path):
    log = open_log(tmp_path)
    log.append(make_entries(0, 3, epoch=1) + make_entries(3, 2, epoch=2) + make_entries(5, 4, epoch=2))
    log.append(make_entries(9, 1, epoch=5))
    log.close()
    assert [(b["base_offset"], b["epoch"], b["record_count"]) for b in batches(tmp_path)] == [
        (0, 1, 3),
        (3, 2, 6),
        (9, 5, 1),
    ]


def test_long_append_is_split_into_bounded_batches(tmp_path):
    log = open_log(tmp_path, batch_bytes_max=100)
    log.append(make_entries(0, 20, size=20))  # 25 bytes per record: 4 per batch
    assert all_entries(log) == make_entries(0, 20, size=20)
    log.close()
    assert [b["record_count"] for b in batches(tmp_path)] == [4] * 5


@pytest.mark.parametrize("batch_bytes_max", [1, 60, 116, 137, 269, 10_000])  # 116, 269: records fill a batch exactly
def test_a_one_epoch_append_writes_the_bytes_the_record_loop_writes(tmp_path, batch_bytes_max):
    """An append of one epoch without a gap is checked and split over the
    whole batch (``_one_epoch_runs``); the same records with one more of a
    new epoch take the record-by-record loop. The files are byte for byte
    the same: the same batches, split at the same records (sizes 0 to 150
    bytes, some over the limit, kinds mixed)."""
    kinds = (RecordKind.DATA, RecordKind.LEADER_CHANGE, RecordKind.DATA, RecordKind.VOTERS)
    run = [Entry(offset, 2, kinds[offset % 4], bytes([offset]) * (offset * 37 % 151)) for offset in range(3, 60)]
    tail = [Entry(60, 3, RecordKind.DATA, b"tail")]
    with open_log(tmp_path / "whole", batch_bytes_max=batch_bytes_max) as log:
        log.append(make_entries(0, 3, epoch=1))
        log.append(run)  # one epoch: over the whole batch
        log.append(tail)
    with open_log(tmp_path / "loop", batch_bytes_max=batch_bytes_max) as log:
        log.append(make_entries(0, 3, epoch=1))
        log.append(run + tail)  # two epochs: the loop
    assert _segments.SegmentedLog._one_epoch_runs(log, run, 3, 1) is not None
    whole, loop = (segment_files(tmp_path / name) for name in ("whole", "loop"))
    assert [path.read_bytes() for path in whole] == [path.read_bytes() for path in loop]
    with open_log(tmp_path / "whole") as log:
        assert all_entries(log) == make_entries(0, 3, epoch=1) + run + tail


def test_append_is_one_write_per_segment(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    calls = []
    real_write_all = _segments.write_all

    def counting_write_all(fd, data):
        calls.append((fd, len(data)))
        real_write_all(fd, data)

    monkeypatch.setattr(_segments, "write_all", counting_write_all)
    log.append(make_entries(0, 100, epoch=1) + make_entries(100, 100, epoch=2))
    # two batches, one write to the segment (plus at most one to the index)
    assert len([fd for fd, _ in calls if fd == log._active_fd]) == 1
    assert len(batches(tmp_path)) == 2
    log.close()


@pytest.mark.parametrize(
    "bad, message",
    [
        ([Entry(1, 1, RecordKind.DATA, b"x")], "where offset 0 was expected"),
        ([Entry(0, 1, RecordKind.DATA, b"x"), Entry(2, 1, RecordKind.DATA, b"x")], "where offset 1"),
        ([Entry(0, 2, RecordKind.DATA, b"x"), Entry(1, 1, RecordKind.DATA, b"x")], "epoch 1 at offset 1 after epoch 2"),
        ([Entry(0, 1, 7, b"x")], "unknown record kind"),  # type: ignore[arg-type]
    ],
)
def test_append_rejects_bad_entries_and_writes_nothing(tmp_path, bad, message):
    log = open_log(tmp_path)
    with pytest.raises(ValueError, match=message):
        log.append(bad)
    assert log.end_offset == 0
    assert segment_files(tmp_path)[0].stat().st_size == 0


def test_append_rejects_epoch_below_last_and_non_bytes(tmp_path):
    log = open_log(tmp_path)
    log.append(make_entries(0, 2, epoch=4))
    with pytest.raises(ValueError, match="after epoch 4"):
        log.append(make_entries(2, 1, epoch=3))
    with pytest.raises(TypeError, match="not bytes"):
        log.append([Entry(2, 4, RecordKind.DATA, "text")])  # type: ignore[arg-type]
    log.append([])
    assert log.end_offset == 2


# -- segments and the index ---------------------------------------------------------


def test_segment_roll_by_size(tmp_path):
    entries = make_entries(0, 200, size=30)
    log = open_log(tmp_path, segment_bytes_max=1000)
    for i in range(0, 200, 5):
        log.append(entries[i : i + 5])
    files = segment_files(tmp_path)
    assert len(files) >= 7
    assert all(len(f.stem) == 20 and f.stem.isdigit() for f in files)
    assert all(f.stat().st_size <= 1000 for f in files)
    # each segment's name is the base offset of its first batch
    first_batches = {b["file"]: b["base_offset"] for b in reversed(batches(tmp_path))}
    assert all(first_batches[str(f)] == int(f.stem) for f in files)
    starts = [int(f.stem) for f in files]
    assert starts[0] == 0 and starts == sorted(starts)
    assert all_entries(log) == entries
    for start in (0, 1, 57, 99, 150, 199):
        assert log.read(start, 10**6)[0] == entries[start]
    log.close()
    with open_log(tmp_path, segment_bytes_max=1000) as log:
        assert all_entries(log) == entries
        assert len(segment_files(tmp_path)) == len(files)


def test_a_batch_larger_than_a_segment_gets_its_own_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes_max=100)
    log.append(make_entries(0, 1, size=10))
    log.append(make_entries(1, 10, size=50))
    log.append(make_entries(11, 1, size=10))
    assert [f.stem for f in segment_files(tmp_path)] == [f"{0:020d}", f"{1:020d}", f"{11:020d}"]
    assert all_entries(log) == make_entries(0, 1, size=10) + make_entries(1, 10, size=50) + make_entries(11, 1, size=10)


def test_sparse_index_is_written_and_used(tmp_path):
    entries = make_entries(0, 300, size=40)
    log = open_log(tmp_path, index_interval_bytes=256)
    for i in range(300):
        log.append(entries[i : i + 1])
    index = (tmp_path / f"{0:020d}.index").read_bytes()
    assert len(index) % 16 == 0 and len(index) // 16 > 10
    for start in range(0, 300, 7):
        assert log.read(start, 200) == entries[start : start + 4]
    log.close()


@pytest.mark.parametrize("damage", ["missing", "torn", "wrong", "garbage"])
def test_index_rebuilt_on_recovery(tmp_path, damage, caplog):
    entries = make_entries(0, 300, size=40)
    log = open_log(tmp_path, index_interval_bytes=256, segment_bytes_max=8000)
    for i in range(0, 300, 2):
        log.append(entries[i : i + 2])
    log.close()
    index_path = segment_files(tmp_path)[0].with_suffix(".index")
    good = index_path.read_bytes()
    if damage == "missing":
        index_path.unlink()
    elif damage == "torn":
        index_path.write_bytes(good[: len(good) // 2 + 3])
    elif damage == "wrong":
        index_path.write_bytes(good[:16] + (12345).to_bytes(8, "big") * 2 + good[32:])
    else:
        index_path.write_bytes(os.urandom(len(good)))
    with caplog.at_level(logging.INFO, logger="pykraft.storage"):
        log = open_log(tmp_path, index_interval_bytes=256, segment_bytes_max=8000)
    assert "rebuilding" in caplog.text
    assert index_path.read_bytes() == good
    for start in range(0, 300, 11):
        assert log.read(start, 1)[0] == entries[start]
    log.close()


def test_orphan_index_and_stray_files(tmp_path, caplog):
    open_log(tmp_path).close()
    # An empty index without its segment: a crash just after a roll may keep
    # only the index's directory entry. Removed.
    (tmp_path / f"{500:020d}.index").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("hello")
    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        log = open_log(tmp_path)
    assert not (tmp_path / f"{500:020d}.index").exists()
    assert "ignoring unexpected file notes.txt" in caplog.text
    log.close()


def test_a_non_empty_index_without_its_segment_is_a_lost_file(tmp_path):
    open_log(tmp_path).close()
    (tmp_path / f"{500:020d}.index").write_bytes(b"x" * 16)
    with pytest.raises(DamagedLogError, match="the segment file is missing but its index"):
        open_log(tmp_path)
    assert (tmp_path / f"{500:020d}.index").exists()


# -- reads ----------------------------------------------------------------------------


def test_read_limits(tmp_path):
    entries = make_entries(0, 50, size=95)  # 100 bytes per record
    log = open_log(tmp_path)
    log.append(entries)
    assert log.read(10, 350) == entries[10:13]
    assert log.read(10, 300) == entries[10:13]
    assert log.read(10, 1) == entries[10:11]  # at least one record
    assert log.read(10, 0) == entries[10:11]
    assert log.read(49) == entries[49:]
    assert log.read(50) == []
    with pytest.raises(ValueError, match="outside the log"):
        log.read(51)
    log.delete_before(1)  # no-op: a single segment
    with pytest.raises(ValueError, match="outside the log"):
        log.read(-1)


def test_read_stops_at_segment_end_and_entries_from_crosses(tmp_path):
    entries = make_entries(0, 40, size=30)
    log = open_log(tmp_path, segment_bytes_max=300)
    for i in range(0, 40, 4):
        log.append(entries[i : i + 4])
    second = int(segment_files(tmp_path)[1].stem)
    assert log.read(0, 10**6) == entries[:second]
    assert list(log.entries_from(3)) == entries[3:]
    with pytest.raises(ValueError):
        list(log.entries_from(41))


# -- truncation -------------------------------------------------------------------------


def test_truncate_at_batch_boundary(tmp_path):
    log = open_log(tmp_path)
    log.append(make_entries(0, 5, epoch=1))
    log.append(make_entries(5, 5, epoch=2))
    log.truncate_to(5)
    assert (log.end_offset, log.last_epoch) == (5, 1)
    assert all_entries(log) == make_entries(0, 5, epoch=1)
    log.append(make_entries(5, 2, epoch=3, tag="new"))
    log.close()
    with open_log(tmp_path) as log:
        assert all_entries(log) == make_entries(0, 5, epoch=1) + make_entries(5, 2, epoch=3, tag="new")


def test_truncate_mid_batch_rewrites_the_prefix(tmp_path):
    log = open_log(tmp_path)
    log.append(make_entries(0, 10, epoch=2))
    log.truncate_to(4)
    assert (log.end_offset, log.last_epoch) == (4, 2)
    assert all_entries(log) == make_entries(0, 4, epoch=2)
    log.append(make_entries(4, 3, epoch=5, tag="b"))
    log.close()
    found = batches(tmp_path)
    assert [(b["base_offset"], b["epoch"], b["record_count"]) for b in found] == [(0, 2, 4), (4, 5, 3)]
    assert not list(tmp_path.glob("*.rewrite"))
    with open_log(tmp_path) as log:
        assert all_entries(log) == make_entries(0, 4, epoch=2) + make_entries(4, 3, epoch=5, tag="b")


def test_truncate_across_segments(tmp_path):
    entries = make_entries(0, 60, size=30)
    log = open_log(tmp_path, segment_bytes_max=400)
    for i in range(0, 60, 3):
        log.append(entries[i : i + 3])
    before = len(segment_files(tmp_path))
    log.truncate_to(13)
    assert all_entries(log) == entries[:13]
    assert len(segment_files(tmp_path)) < before
    assert all(int(f.stem) <= 13 for f in segment_files(tmp_path))
    log.append(make_entries(13, 30, size=30, tag="n", epoch=2))
    log.close()
    with open_log(tmp_path, segment_bytes_max=400) as log:
        assert all_entries(log) == entries[:13] + make_entries(13, 30, size=30, tag="n", epoch=2)


def test_truncate_to_a_segment_base_and_to_the_start(tmp_path):
    entries = make_entries(0, 30, size=30)
    log = open_log(tmp_path, segment_bytes_max=200)
    for i in range(0, 30, 2):
        log.append(entries[i : i + 2])
    second = int(segment_files(tmp_path)[1].stem)
    log.truncate_to(second)
    assert all_entries(log) == entries[:second]
    assert log.last_epoch == 1
    log.truncate_to(0)
    assert (log.end_offset, log.last_epoch, all_entries(log)) == (0, 0, [])
    log.close()
    with open_log(tmp_path) as log:
        assert (log.log_start_offset, log.end_offset) == (0, 0)


def test_truncate_bounds(tmp_path):
    log = open_log(tmp_path, segment_bytes_max=100)
    log.append(make_entries(0, 20))
    log.truncate_to(25)  # beyond the end: nothing to do
    assert log.end_offset == 20
    log.delete_before(10)
    with pytest.raises(ValueError, match="below the log start"):
        log.truncate_to(log.log_start_offset - 1)


class _Crash(Exception):
    pass


def _crash_during_rewrite(tmp_path, monkeypatch, after):
    """Append 10 records in one batch, then truncate to 4 and 'crash' at
    ``after`` (a step of the mid-batch rewrite); return the abandoned log."""
    log = open_log(tmp_path)
    log.append(make_entries(0, 10, epoch=2))
    real_ftruncate = os.ftruncate
    real_write_all = _segments.write_all
    state = {"truncated": False}

    def ftruncate(fd, length):
        if after == "redo-written":
            raise _Crash
        real_ftruncate(fd, length)
        state["truncated"] = True

    def write_all(fd, data):
        if after == "segment-cut" and state["truncated"]:
            raise _Crash
        real_write_all(fd, data)

    monkeypatch.setattr(_segments.os, "ftruncate", ftruncate)
    monkeypatch.setattr(_segments, "write_all", write_all)
    with pytest.raises(_Crash):
        log.truncate_to(4)
    monkeypatch.undo()
    log._close_fds()  # the process dies: no flush, no cleanup
    return log


@pytest.mark.parametrize("after", ["redo-written", "segment-cut"])
def test_interrupted_mid_batch_truncation_is_replayed(tmp_path, monkeypatch, after, caplog):
    _crash_during_rewrite(tmp_path, monkeypatch, after)
    assert list(tmp_path.glob("*.rewrite"))
    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        log = open_log(tmp_path)
    assert "completed an interrupted truncation" in caplog.text
    assert all_entries(log) == make_entries(0, 4, epoch=2)
    assert not list(tmp_path.glob("*.rewrite"))
    log.close()


def test_torn_redo_record_is_discarded(tmp_path, monkeypatch):
    _crash_during_rewrite(tmp_path, monkeypatch, "redo-written")
    redo = next(tmp_path.glob("*.rewrite"))
    redo.write_bytes(redo.read_bytes()[:-3])  # the redo write itself was torn
    log = open_log(tmp_path)
    # The segment was never touched: the truncation simply did not happen.
    assert all_entries(log) == make_entries(0, 10, epoch=2)
    assert not redo.exists()
    log.close()


# -- deletion behind snapshots and reset ----------------------------------------------


def _filled(tmp_path, count=60, **options):
    entries = make_entries(0, count, size=30)
    log = open_log(tmp_path, segment_bytes_max=400, **options)
    for i in range(0, count, 3):
        log.append(entries[i : i + 3])
    return log, entries


def test_delete_before_removes_whole_segments_only(tmp_path):
    log, entries = _filled(tmp_path)
    bases = [int(f.stem) for f in segment_files(tmp_path)]
    log.delete_before(bases[2] + 1)
    assert log.log_start_offset == bases[2]
    assert all_entries(log) == entries[bases[2] :]
    log.delete_before(bases[2])  # no-op
    log.delete_before(0)  # no-op
    assert [int(f.stem) for f in segment_files(tmp_path)] == bases[2:]
    log.close()
    with open_log(tmp_path, segment_bytes_max=400) as log:
        assert log.log_start_offset == bases[2]
        assert all_entries(log) == entries[bases[2] :]
        assert log.read(bases[2] + 1, 1) == [entries[bases[2] + 1]]


def test_delete_before_the_end_empties_the_log(tmp_path):
    log, entries = _filled(tmp_path)
    log.delete_before(60)
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (60, 60, 1)
    log.append(make_entries(60, 2, epoch=3))
    log.close()
    with open_log(tmp_path) as log:
        assert all_entries(log) == make_entries(60, 2, epoch=3)


def test_delete_before_beyond_the_end_restarts_there(tmp_path):
    log, _ = _filled(tmp_path)
    log.delete_before(500, epoch_before=7)
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (500, 500, 7)
    log.close()
    with open_log(tmp_path, base=SnapshotId(500, 7)) as log:
        assert (log.log_start_offset, log.end_offset, log.last_epoch) == (500, 500, 7)
    with open_log(tmp_path) as log:  # without the hint the epoch is unknown
        assert (log.log_start_offset, log.last_epoch) == (500, 0)


def test_deleted_segments_that_come_back_are_removed(tmp_path):
    # An unlink that was not yet durable can be undone by a crash: the
    # checkpoint written before unlinking keeps such segments dead.
    log, entries = _filled(tmp_path)
    saved = {f.name: f.read_bytes() for f in segment_files(tmp_path)}
    bases = [int(f.stem) for f in segment_files(tmp_path)]
    log.delete_before(bases[3])
    log._close_fds()
    for name in list(saved)[:3]:
        (tmp_path / name).write_bytes(saved[name])
    with open_log(tmp_path, segment_bytes_max=400) as log:
        assert log.log_start_offset == bases[3]
        assert all_entries(log) == entries[bases[3] :]
    # Only some of them coming back (a gap) must not cut the live log either.
    (tmp_path / list(saved)[0]).write_bytes(saved[list(saved)[0]])
    with open_log(tmp_path, segment_bytes_max=400) as log:
        assert all_entries(log) == entries[bases[3] :]


def test_interrupted_reset_past_the_end(tmp_path):
    log, _ = _filled(tmp_path)
    saved = {f.name: f.read_bytes() for f in segment_files(tmp_path)}
    log.delete_before(1000, epoch_before=9)
    log._close_fds()
    for f in segment_files(tmp_path):
        f.unlink()
    for name, data in saved.items():  # all old segments resurrected, new one lost
        (tmp_path / name).write_bytes(data)
    with open_log(tmp_path) as log:
        assert (log.log_start_offset, log.end_offset) == (1000, 1000)


def test_corrupt_checkpoint_refuses_to_open(tmp_path):
    log, _ = _filled(tmp_path)
    log.delete_before(30)
    log.close()
    checkpoint = tmp_path / "log-start-offset.json"
    checkpoint.write_bytes(checkpoint.read_bytes().replace(b"log_start", b"log_Start"))
    with pytest.raises(CorruptLogMetadataError, match="refuses to start rather than guess where its log begins"):
        open_log(tmp_path)


def test_reset(tmp_path):
    log, entries = _filled(tmp_path)
    log.reset(SnapshotId(25, 4))
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (25, 25, 4)
    assert all_entries(log) == []
    log.append(make_entries(25, 2, epoch=4))
    log.close()
    with open_log(tmp_path) as log:
        assert all_entries(log) == make_entries(25, 2, epoch=4)
        log.reset(SnapshotId(25, 5))  # at the log start
        assert (log.log_start_offset, log.end_offset, log.last_epoch) == (25, 25, 5)
        with pytest.raises(ValueError):
            log.reset(SnapshotId(3, 1))


def test_segment_infos(tmp_path):
    log, _ = _filled(tmp_path)
    infos = log.segment_infos()
    assert [i.base_offset for i in infos] == [int(f.stem) for f in segment_files(tmp_path)]
    assert all(a.end_offset == b.base_offset for a, b in zip(infos, infos[1:]))
    assert infos[-1].end_offset == 60
    assert sum(i.size_bytes for i in infos) == sum(f.stat().st_size for f in segment_files(tmp_path))


# -- failures -----------------------------------------------------------------------------


def test_failed_write_is_rolled_back(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    log.append(make_entries(0, 5))
    real_write_all = _segments.write_all

    def half_then_enospc(fd, data):
        real_write_all(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_segments, "write_all", half_then_enospc)
    with pytest.raises(OSError, match="No space"):
        log.append(make_entries(5, 5))
    monkeypatch.undo()
    assert log.end_offset == 5
    assert segment_files(tmp_path)[0].stat().st_size == batch_spans(segment_files(tmp_path)[0])[-1][1]
    log.append(make_entries(5, 5))
    assert all_entries(log) == make_entries(0, 10)
    log.close()


def test_unrecoverable_write_failure_fails_the_log(tmp_path, monkeypatch):
    log = open_log(tmp_path)

    def broken(*args):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(_segments, "write_all", broken)
    monkeypatch.setattr(_segments.os, "ftruncate", broken)
    with pytest.raises(OSError):
        log.append(make_entries(0, 1))
    monkeypatch.undo()
    with pytest.raises(LogFailedError, match="could not be rolled back"):
        log.append(make_entries(0, 1))
    log.close()
    with open_log(tmp_path) as log:  # reopening repairs
        log.append(make_entries(0, 1))


def test_failed_fsync_fails_the_log(tmp_path, monkeypatch):
    log = SegmentedLog.open(tmp_path)
    log.append(make_entries(0, 3))

    def eio(fd):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(_segments, "data_sync", eio)
    with pytest.raises(OSError):
        log.flush()
    monkeypatch.undo()
    # A later fsync could "succeed" after the kernel dropped the dirty pages:
    # the log must not pretend anything is durable any more.
    with pytest.raises(LogFailedError):
        log.flush()
    with pytest.raises(LogFailedError):
        log.append(make_entries(3, 1))
    log.close()


def test_closed_log_refuses(tmp_path):
    log = open_log(tmp_path)
    log.close()
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.append(make_entries(0, 1))


def test_frame_layout_matches_the_documentation(tmp_path):
    log = open_log(tmp_path)
    log.append([Entry(0, 7, RecordKind.LEADER_CHANGE, b"ab")])
    log.close()
    raw = segment_files(tmp_path)[0].read_bytes()
    assert raw == encode_batch(0, 7, [Entry(0, 7, RecordKind.LEADER_CHANGE, b"ab")])
    assert len(raw) == BATCH_HEADER_BYTES + 5 + 2
    assert int.from_bytes(raw[0:4], "big") == len(raw) - 4
    assert raw[8] == 1  # version
    assert int.from_bytes(raw[9:17], "big") == 0  # base offset
    assert int.from_bytes(raw[17:21], "big") == 7  # epoch
    assert int.from_bytes(raw[21:25], "big") == 1  # record count
    assert raw[25] == RecordKind.LEADER_CHANGE and raw[26:30] == b"\0\0\0\2" and raw[30:] == b"ab"
