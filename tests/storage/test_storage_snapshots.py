"""Snapshot files: atomic publication, CRCs, chunked transfer, cleanup."""

from __future__ import annotations

import logging
import os

import pytest

from quorum._types import SnapshotId
from quorum.storage import (
    CorruptSnapshotError,
    MemorySnapshotStore,
    SnapshotNotFoundError,
    SnapshotStore,
)
from quorum.storage._format import SNAPSHOT_HEADER_BYTES

PAYLOAD = bytes(range(256)) * 40  # 10 KiB


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path):
    return SnapshotStore(tmp_path / "snapshots", fsync=False) if request.param == "file" else MemorySnapshotStore()


def test_write_read_latest(store):
    assert store.latest() is None
    store.write(SnapshotId(100, 3), PAYLOAD)
    store.write(SnapshotId(50, 2), b"older")
    store.write(SnapshotId(200, 3), b"")
    assert store.list() == [SnapshotId(50, 2), SnapshotId(100, 3), SnapshotId(200, 3)]
    assert store.latest() == SnapshotId(200, 3)
    assert store.read(SnapshotId(100, 3)) == PAYLOAD
    assert store.read(SnapshotId(200, 3)) == b""
    assert store.size(SnapshotId(100, 3)) == SNAPSHOT_HEADER_BYTES + len(PAYLOAD)
    with pytest.raises(SnapshotNotFoundError):
        store.read(SnapshotId(7, 1))
    with pytest.raises(SnapshotNotFoundError):
        store.size(SnapshotId(7, 1))


def test_file_names_and_fsync(tmp_path):
    store = SnapshotStore(tmp_path)  # fsync on
    store.write(SnapshotId(1234, 5), b"state")
    assert [p.name for p in tmp_path.iterdir()] == ["00000000000000001234-0000000005.snapshot"]
    assert SnapshotStore(tmp_path).read(SnapshotId(1234, 5)) == b"state"


def test_chunks_reassemble(store):
    snapshot_id = SnapshotId(100, 3)
    store.write(snapshot_id, PAYLOAD)
    size = store.size(snapshot_id)
    chunks = []
    position = 0
    while position < size:
        chunk = store.read_chunk(snapshot_id, position, 999)
        assert 0 < len(chunk) <= 999
        chunks.append(chunk)
        position += len(chunk)
    assert store.read_chunk(snapshot_id, size, 999) == b""
    for bad in (-1, size + 1):
        with pytest.raises(ValueError, match="outside"):
            store.read_chunk(snapshot_id, bad, 10)
    with pytest.raises(ValueError):
        store.read_chunk(snapshot_id, 0, 0)
    # the receiver, of either kind, accepts the chunks
    for receiver in (MemorySnapshotStore(), store):
        writer = receiver.writer(SnapshotId(100, 3))
        position = 0
        for chunk in chunks:
            writer.append(position, chunk)
            position += len(chunk)
        assert writer.position == size
        assert writer.finish() == snapshot_id
        assert receiver.read(snapshot_id) == PAYLOAD


def test_writer_position_checks(store):
    source = MemorySnapshotStore()
    source.write(SnapshotId(9, 1), PAYLOAD)
    writer = store.writer(SnapshotId(9, 1))
    writer.append(0, source.read_chunk(SnapshotId(9, 1), 0, 100))
    for wrong in (0, 50, 101):
        with pytest.raises(ValueError, match="100 bytes were received"):
            writer.append(wrong, b"x")
    writer.append(100, source.read_chunk(SnapshotId(9, 1), 100, 10**6))
    writer.finish()
    with pytest.raises(ValueError, match="already finished"):
        writer.append(writer.position, b"x")
    with pytest.raises(ValueError, match="already finished"):
        writer.finish()


@pytest.mark.parametrize(
    "mangle",
    [
        lambda raw: raw[:-1],  # short
        lambda raw: raw[:10],  # not even a header
        lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]),  # payload bit flip
        lambda raw: raw[:8] + bytes([raw[8] ^ 1]) + raw[9:],  # header bit flip
        lambda raw: raw + b"extra",
    ],
    ids=["short", "tiny", "payload-flip", "header-flip", "extra"],
)
def test_damaged_transfer_is_refused(store, tmp_path, mangle):
    source = MemorySnapshotStore()
    source.write(SnapshotId(9, 1), PAYLOAD)
    raw = mangle(source.read_chunk(SnapshotId(9, 1), 0, 10**6))
    writer = store.writer(SnapshotId(9, 1))
    writer.append(0, raw)
    with pytest.raises(CorruptSnapshotError):
        writer.finish()
    assert store.latest() is None
    if isinstance(store, SnapshotStore):
        assert list(store.directory.iterdir()) == []


def test_transfer_of_a_different_snapshot_is_refused(store):
    source = MemorySnapshotStore()
    source.write(SnapshotId(9, 1), PAYLOAD)
    writer = store.writer(SnapshotId(9, 2))
    writer.append(0, source.read_chunk(SnapshotId(9, 1), 0, 10**6))
    with pytest.raises(CorruptSnapshotError, match="the header says"):
        writer.finish()


def test_writer_context_manager_aborts(store):
    with store.writer(SnapshotId(9, 1)) as writer:
        writer.append(0, b"partial")
    assert store.latest() is None
    with pytest.raises(ValueError):
        writer.append(7, b"more")


def test_delete_older_than(store):
    for end in (10, 20, 30):
        store.write(SnapshotId(end, 1), b"s")
    assert store.delete_older_than(SnapshotId(30, 1)) == [SnapshotId(10, 1), SnapshotId(20, 1)]
    assert store.list() == [SnapshotId(30, 1)]


def test_corrupt_snapshot_file_is_never_read_or_served(tmp_path):
    store = SnapshotStore(tmp_path, fsync=False)
    store.write(SnapshotId(100, 3), PAYLOAD)
    path = tmp_path / "00000000000000000100-0000000003.snapshot"
    data = bytearray(path.read_bytes())
    data[5000] ^= 4
    path.write_bytes(bytes(data))
    fresh = SnapshotStore(tmp_path, fsync=False)
    with pytest.raises(CorruptSnapshotError, match="payload CRC mismatch"):
        fresh.read(SnapshotId(100, 3))
    with pytest.raises(CorruptSnapshotError):
        fresh.read_chunk(SnapshotId(100, 3), 0, 100)


def test_header_naming_a_different_id_is_corrupt(tmp_path):
    store = SnapshotStore(tmp_path, fsync=False)
    store.write(SnapshotId(100, 3), b"x")
    os.rename(tmp_path / "00000000000000000100-0000000003.snapshot", tmp_path / "00000000000000000100-0000000004.snapshot")
    with pytest.raises(CorruptSnapshotError, match="header says"):
        store.read(SnapshotId(100, 4))


def test_leftover_part_files_are_removed_at_open(tmp_path, caplog):
    store = SnapshotStore(tmp_path, fsync=False)
    writer = store.writer(SnapshotId(5, 1))
    writer.append(0, b"half a snapshot")  # the process dies here
    (tmp_path / "README").write_text("not a snapshot")
    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        reopened = SnapshotStore(tmp_path)
    assert "removing an unfinished snapshot" in caplog.text
    assert "ignoring unexpected file README" in caplog.text
    assert not list(tmp_path.glob("*.part"))
    assert reopened.latest() is None


def test_ids_must_fit_the_file_name(tmp_path):
    store = SnapshotStore(tmp_path, fsync=False)
    with pytest.raises(ValueError):
        store.write(SnapshotId(1, 2**32), b"")
