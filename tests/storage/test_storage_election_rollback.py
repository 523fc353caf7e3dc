"""Issue 14, item 4: an election state rolled back to an older, valid copy.

A copy restored from a backup (or kept by a file system that lost the last
rename) passes its CRC; the witness ``quorum-state.witness.json`` and the
log are what show it went back (docs/storage.md, "Election state rolled
back"). Before the witness, the node below restarted at epoch 4 with no
vote after voting for node 2 in epoch 5, and could vote again in epoch 5.
"""

from __future__ import annotations

import logging
import os

import pytest
from _storage_helpers import make_entries

from quorum._types import ElectionState
from quorum.storage import (
    EXIT_DAMAGED,
    EXIT_SOUND,
    CorruptElectionStateError,
    ElectionStateFile,
    FileStorage,
    MissingElectionStateError,
    RolledBackElectionStateError,
    check_storage,
)
from quorum.storage import _files
from quorum.storage._files import encode_checked_json

PRIMARY = "quorum-state.json"
WITNESS = "quorum-state.witness.json"


def _voted_twice_dir(path):
    """A node-1 directory: records of epoch 3, then a vote for node 2 in
    epoch 4 and a vote for node 2 in epoch 5 (failed elections: nothing
    appended). Returns the bytes each copy held at epoch 3, generation 1
    (an older valid copy an adversary may restore; the log agrees with it)."""
    with FileStorage.open(path, node_id=1, cluster_id="c", fsync=False) as storage:
        storage.persist(election_state=ElectionState(3, leader_id=2), append=make_entries(0, 8, epoch=3))
        older = {name: (path / name).read_bytes() for name in (PRIMARY, WITNESS)}
        storage.persist(election_state=ElectionState(4, voted_for=2))
        storage.persist(election_state=ElectionState(5, voted_for=2))
    return older


def _open(path):
    return FileStorage.open(path, node_id=1, cluster_id="c", fsync=False)


@pytest.mark.parametrize("rolled_back", [PRIMARY, WITNESS])
def test_one_copy_rolled_back_the_newer_copy_wins_and_the_stale_one_is_rewritten(tmp_path, caplog, rolled_back):
    older = _voted_twice_dir(tmp_path)
    current = (tmp_path / PRIMARY).read_bytes()
    (tmp_path / rolled_back).write_bytes(older[rolled_back])
    assert check_storage(tmp_path).exit_code == EXIT_SOUND  # the next start settles it by itself
    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        with _open(tmp_path) as storage:
            assert storage.load().election_state == ElectionState(5, voted_for=2)
            # The vote cast in epoch 5 is remembered: a second one is refused.
            with pytest.raises(ValueError, match="vote already recorded for 2"):
                storage.write_election_state(ElectionState(5, voted_for=3))
    [line] = [record.getMessage() for record in caplog.records if "election state" in record.getMessage()]
    which = "primary" if rolled_back == PRIMARY else "witness"
    assert f"the {which} was rolled back to generation 1" in line and f"writing the {which} again" in line
    assert (tmp_path / rolled_back).read_bytes() == current


def test_a_write_interrupted_between_the_copies_keeps_the_primary(tmp_path, monkeypatch, caplog):
    store = ElectionStateFile(tmp_path, fsync=False)
    store.write(ElectionState(4, voted_for=2))
    real_replace = os.replace

    def crash_on_the_witness(source, target):
        if str(target).endswith(WITNESS):
            raise OSError("crash between the two copies")
        real_replace(source, target)

    monkeypatch.setattr(_files.os, "replace", crash_on_the_witness)
    with pytest.raises(OSError):
        store.write(ElectionState(5, voted_for=3))
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        assert ElectionStateFile(tmp_path).read() == ElectionState(5, voted_for=3)
    assert "the witness is one generation behind (1 < 2)" in caplog.text
    # Retrying the write after the failure goes above the primary's generation.
    store.write(ElectionState(5, voted_for=3))
    assert ElectionStateFile(tmp_path).read() == ElectionState(5, voted_for=3)
    assert b'"generation": 3' in (tmp_path / WITNESS).read_bytes()


def test_a_directory_from_before_the_witness_opens_and_gets_one(tmp_path, caplog):
    with _open(tmp_path) as storage:
        storage.persist(election_state=ElectionState(3, voted_for=2), append=make_entries(0, 4, epoch=3))
    (tmp_path / WITNESS).unlink()
    (tmp_path / PRIMARY).write_bytes(
        encode_checked_json({"version": 1, "epoch": 3, "voted_for": 2, "leader_id": None})
    )
    with caplog.at_level(logging.INFO, logger="pykraft.storage"):
        with _open(tmp_path) as storage:
            assert storage.load().election_state == ElectionState(3, voted_for=2)
            storage.write_election_state(ElectionState(4, voted_for=1))
    assert "no witness yet" in caplog.text
    with _open(tmp_path) as storage:
        assert storage.load().election_state == ElectionState(4, voted_for=1)


@pytest.mark.parametrize("how", ["missing", "damaged"])
def test_a_lost_or_damaged_witness_keeps_the_primary(tmp_path, caplog, how):
    _voted_twice_dir(tmp_path)
    if how == "missing":
        (tmp_path / WITNESS).unlink()
    else:
        (tmp_path / WITNESS).write_bytes(b"\x00garbage")
    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        with _open(tmp_path) as storage:
            assert storage.load().election_state == ElectionState(5, voted_for=2)
    assert f"the witness is {how}" in caplog.text and "never behind it" in caplog.text
    assert (tmp_path / WITNESS).read_bytes() == (tmp_path / PRIMARY).read_bytes()


def test_a_lost_primary_is_refused_even_beside_an_empty_log(tmp_path):
    # A node that only voted (no record yet) and lost its primary started
    # as new before the witness: it could vote again in the same epoch.
    with _open(tmp_path) as storage:
        storage.persist(election_state=ElectionState(5, voted_for=2))
    (tmp_path / PRIMARY).unlink()
    with pytest.raises(MissingElectionStateError, match="is missing although its witness .* holds generation 1"):
        _open(tmp_path)
    assert check_storage(tmp_path).exit_code == EXIT_DAMAGED


def test_a_damaged_primary_is_refused_whatever_the_witness_says(tmp_path):
    _voted_twice_dir(tmp_path)
    (tmp_path / PRIMARY).write_bytes(b"{}")
    with pytest.raises(CorruptElectionStateError, match="is damaged"):
        _open(tmp_path)


def test_one_generation_holding_two_states_is_refused(tmp_path):
    _voted_twice_dir(tmp_path)
    primary = (tmp_path / PRIMARY).read_bytes()
    (tmp_path / WITNESS).write_bytes(primary.replace(b'"voted_for": 2', b'"voted_for": 3'))
    # Recompute the CRC so that the witness is intact but different.
    import json

    document = json.loads((tmp_path / WITNESS).read_bytes())
    document.pop("crc32")
    (tmp_path / WITNESS).write_bytes(encode_checked_json(document))
    with pytest.raises(CorruptElectionStateError, match="both copies claim generation 3 but hold different states"):
        _open(tmp_path)
    assert check_storage(tmp_path).exit_code == EXIT_DAMAGED


def test_both_copies_rolled_back_below_the_log_is_refused(tmp_path):
    # A whole-directory rollback of the state (both copies, consistently)
    # is caught when the log already holds a later epoch.
    with _open(tmp_path) as storage:
        storage.persist(election_state=ElectionState(3, voted_for=2))
        older = {name: (tmp_path / name).read_bytes() for name in (PRIMARY, WITNESS)}
        storage.persist(election_state=ElectionState(4, leader_id=2), append=make_entries(0, 4, epoch=4))
    for name, raw in older.items():
        (tmp_path / name).write_bytes(raw)
    with pytest.raises(RolledBackElectionStateError, match="the log holds records of epoch 4, above the stored epoch 3"):
        _open(tmp_path)
    result = check_storage(tmp_path)
    assert result.exit_code == EXIT_DAMAGED and any("rolled back" in line for line in result.lines)
