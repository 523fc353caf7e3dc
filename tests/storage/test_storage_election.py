"""The election state file: atomic, durable, CRC-checked, fatal when damaged."""

from __future__ import annotations

import json
import os

import pytest

from quorum._types import ElectionState
from quorum.storage import CorruptElectionStateError, ElectionStateFile, MemoryElectionState
from quorum.storage import _files


def test_missing_file_reads_as_none(tmp_path):
    assert ElectionStateFile(tmp_path).read() is None


@pytest.mark.parametrize("fsync", [True, False])
def test_round_trip_across_instances(tmp_path, fsync):
    store = ElectionStateFile(tmp_path, fsync=fsync)
    store.write(ElectionState(3, voted_for=2))
    store.write(ElectionState(3, voted_for=2, leader_id=2))
    store.write(ElectionState(4))
    assert ElectionStateFile(tmp_path).read() == ElectionState(4)
    document = json.loads((tmp_path / "quorum-state.json").read_text())
    assert document["version"] == 2 and document["generation"] == 3 and isinstance(document["crc32"], int)
    assert (tmp_path / "quorum-state.witness.json").read_bytes() == (tmp_path / "quorum-state.json").read_bytes()


@pytest.mark.parametrize("name", ["quorum-state.json.tmp", "quorum-state.witness.json.tmp"])
def test_leftover_temp_file_is_ignored_and_removed(tmp_path, name):
    ElectionStateFile(tmp_path).write(ElectionState(5, voted_for=1))
    temporary = tmp_path / name
    temporary.write_bytes(b'{"epoch": 99, "half a wri')
    store = ElectionStateFile(tmp_path)
    assert store.read() == ElectionState(5, voted_for=1)
    assert not temporary.exists()


def test_failed_write_leaves_the_old_state(tmp_path, monkeypatch):
    store = ElectionStateFile(tmp_path)
    store.write(ElectionState(5, voted_for=1))

    def crash(*args):
        raise OSError("crash before the rename")

    monkeypatch.setattr(_files.os, "replace", crash)
    with pytest.raises(OSError):
        store.write(ElectionState(6, voted_for=3))
    monkeypatch.undo()
    assert ElectionStateFile(tmp_path).read() == ElectionState(5, voted_for=1)


def test_write_is_temp_fsync_rename_fsync_dir(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(_files.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(_files.os, "replace", lambda a, b: (events.append("rename"), real_replace(a, b))[1])
    ElectionStateFile(tmp_path).write(ElectionState(1, voted_for=1))
    # The primary, then the witness, each durable before the next step.
    assert events == ["fsync", "rename", "fsync"] * 2


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-5],
        lambda raw: b"",
        lambda raw: raw.replace(b'"epoch": 7', b'"epoch": 8'),
        lambda raw: raw.replace(b'"version": 2', b'"version": 3'),
        lambda raw: b"\x00\xff garbage",
        lambda raw: b"[1, 2, 3]",
        lambda raw: json.dumps({"epoch": 7, "voted_for": 2, "leader_id": None, "version": 2, "generation": 1}).encode(),
        # Past the JSON decoder's stack: was a RecursionError, not the refusal.
        lambda raw: b"[" * 100_000 + b"]" * 100_000,
    ],
    ids=["torn", "empty", "edited", "version", "binary", "not-object", "no-crc", "nested"],
)
def test_damaged_file_is_fatal(tmp_path, damage):
    ElectionStateFile(tmp_path).write(ElectionState(7, voted_for=2))
    path = tmp_path / "quorum-state.json"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptElectionStateError, match="refuses to start rather than risk voting twice in one epoch: keep the directory"):
        ElectionStateFile(tmp_path).read()


def test_a_bool_is_not_an_epoch(tmp_path):
    from quorum.storage._files import encode_checked_json

    (tmp_path / "quorum-state.json").write_bytes(
        encode_checked_json({"version": 2, "generation": 1, "epoch": True, "voted_for": None, "leader_id": None})
    )
    with pytest.raises(CorruptElectionStateError, match="bad epoch"):
        ElectionStateFile(tmp_path).read()


@pytest.mark.parametrize("make", [lambda p: ElectionStateFile(p), lambda p: MemoryElectionState()])
def test_transitions_no_correct_node_makes_are_refused(tmp_path, make):
    store = make(tmp_path)
    store.write(ElectionState(5, voted_for=1))
    with pytest.raises(ValueError, match="backwards"):
        store.write(ElectionState(4))
    with pytest.raises(ValueError, match="vote already recorded for 1"):
        store.write(ElectionState(5, voted_for=2))
    store.write(ElectionState(5, voted_for=1, leader_id=1))
    with pytest.raises(ValueError, match="leader 1 already recorded"):
        store.write(ElectionState(5, leader_id=3))
    store.write(ElectionState(5, leader_id=1))  # forgetting the vote once a leader is known is fine
    store.write(ElectionState(6, voted_for=3))
    with pytest.raises(ValueError, match="non-negative int"):
        store.write(ElectionState(-1))
    assert store.read() == ElectionState(6, voted_for=3)
