"""The election state files (KIP-595 ``quorum-state``): a primary and its
witness.

Two small JSON documents with the same content, ``quorum-state.json`` (the
primary) and ``quorum-state.witness.json`` (the witness)::

    {"crc32": 1234567890, "epoch": 7, "generation": 12, "leader_id": null, "version": 2, "voted_for": 2}

``crc32`` is zlib.crc32 of the canonical JSON of the other members (sorted
keys, no spaces). ``generation`` grows by one at every write. Each copy is
written atomically: ``<name>.tmp``, fsync, ``os.replace``, fsync the
directory, so after a crash a copy holds its old state or its new one,
never a mixture. The primary is written first, then the witness, and the
write returns only when both are durable. A leftover ``.tmp`` is ignored
(and removed): it was never renamed, so it was never promised to anyone.

Why two copies: a copy rolled back to an older, valid version (a restored
backup, a file system that lost the last rename) passes its CRC; only a
second copy can show that it went back. ``quorum._election_copies`` has the
rule that picks the copy to trust; docs/storage.md, "Election state rolled
back", the reasoning. A version-1 file (no generation, no witness: a data
directory from before the witness) is read as generation 0.

A present but unreadable primary is fatal (``CorruptElectionStateError``):
starting without knowing the vote already cast in the current epoch could
let this voter vote twice (Raft thesis §3.8).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .._election_copies import ElectionChoice, ElectionCopy, UndecidableElectionStateError, choose_election_copy
from .._types import ElectionState
from ._errors import REPAIR_ADVICE, CorruptElectionStateError, MissingElectionStateError
from ._files import atomic_write, decode_checked_json, encode_checked_json, is_plain_int

ELECTION_STATE_FILE_NAME = "quorum-state.json"
ELECTION_WITNESS_FILE_NAME = "quorum-state.witness.json"
# Version 1 had no generation and no witness; version 2 adds both.
_VERSION = 2
_VERSIONS_READ = (1, 2)

_default_logger = logging.getLogger("pykraft.storage")


def check_election_transition(previous: ElectionState | None, state: ElectionState) -> None:
    """Refuse a write that no correct Raft node makes: the epoch going
    backwards, or, within one epoch, a recorded vote or leader replaced by a
    different one (a double vote, or two leaders in one epoch). A guard
    against bugs above; raises ``ValueError``."""
    for name in ("epoch", "voted_for", "leader_id"):
        value = getattr(state, name)
        if value is None and name != "epoch":
            continue
        if not is_plain_int(value) or value < 0:
            raise ValueError(f"election state {name} must be a non-negative int, got {value!r}")
    if previous is None:
        return
    if state.epoch < previous.epoch:
        raise ValueError(f"election state epoch going backwards: {previous.epoch} -> {state.epoch}")
    if state.epoch == previous.epoch:
        if previous.voted_for is not None and state.voted_for not in (None, previous.voted_for):
            raise ValueError(
                f"epoch {state.epoch}: vote already recorded for {previous.voted_for}, refusing {state.voted_for}"
            )
        if previous.leader_id is not None and state.leader_id not in (None, previous.leader_id):
            raise ValueError(
                f"epoch {state.epoch}: leader {previous.leader_id} already recorded, refusing {state.leader_id}"
            )


class ElectionStateFile:
    """Reads and atomically writes ``<directory>/quorum-state.json`` and its
    witness ``quorum-state.witness.json``."""

    def __init__(self, directory: Path | str, *, fsync: bool = True, logger: logging.Logger | None = None) -> None:
        """Creates ``directory`` if needed and removes leftover temporary
        files. Raises ``OSError``."""
        self._directory = Path(directory)
        self._directory.mkdir(parents=True, exist_ok=True)
        self._path = self._directory / ELECTION_STATE_FILE_NAME
        self._witness_path = self._directory / ELECTION_WITNESS_FILE_NAME
        self._fsync = fsync
        self._logger = logger or _default_logger
        self._last: ElectionState | None = None
        # The generation of the last copy written or read; None until known.
        self._generation: int | None = None
        for path in (self._path, self._witness_path):
            temporary = path.with_name(path.name + ".tmp")
            if temporary.exists():
                self._logger.info("%s: removing a leftover temporary file (an interrupted write)", temporary)
                os.unlink(temporary)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def witness_path(self) -> Path:
        return self._witness_path

    def read(self) -> ElectionState | None:
        """The stored state, or None if none was ever written.

        When the two copies disagree, the one to trust is chosen
        (``quorum._election_copies``), one WARNING line says what was found,
        and the stale copy is written again from it.

        Raises ``MissingElectionStateError`` if the primary is missing while
        its witness exists, ``CorruptElectionStateError`` if the primary is
        damaged or the copies cannot be reconciled (refuse to start),
        ``OSError`` on I/O failure.
        """
        choice = read_election_copies(self._directory)
        if choice is None:
            self._generation = 0
            return None
        if choice.finding is not None:
            level = logging.INFO if choice.copy.generation == 0 else logging.WARNING
            self._logger.log(
                level, "the election state in %s: %s; writing the %s again", self._directory, choice.finding,
                " and ".join(choice.stale),
            )
            for name in choice.stale:
                path = self._path if name == "primary" else self._witness_path
                atomic_write(path, encode_election_copy(choice.copy), fsync=self._fsync)
        self._generation = choice.copy.generation
        self._last = choice.copy.state
        return choice.copy.state

    def write(self, state: ElectionState) -> None:
        """Store ``state`` atomically and durably in both copies, primary
        first; returns when both are on disk.

        Raises ``ValueError`` for a transition no correct node makes (see
        ``check_election_transition``), ``OSError`` on I/O failure (each
        copy then still holds its old state or its new one, and the primary
        is never behind the witness).
        """
        check_election_transition(self._last, state)
        if self._generation is None:
            self._generation = _highest_generation(self._directory)
        copy = ElectionCopy(self._generation + 1, state)
        encoded = encode_election_copy(copy)
        atomic_write(self._path, encoded, fsync=self._fsync)
        # From here the primary holds the new generation: a retry after a
        # failed witness write must go above it.
        self._generation = copy.generation
        atomic_write(self._witness_path, encoded, fsync=self._fsync)
        self._last = state


def read_election_copies(directory: Path) -> ElectionChoice | None:
    """Read both copies in ``directory`` and choose the one to trust
    (read-only; ``check-storage`` uses it too). None when neither exists.

    Raises ``MissingElectionStateError`` (the primary is missing beside its
    witness), ``CorruptElectionStateError`` (the primary is damaged, or the
    copies cannot be reconciled), ``OSError``."""
    path = directory / ELECTION_STATE_FILE_NAME
    witness_path = directory / ELECTION_WITNESS_FILE_NAME
    primary_raw = _read_or_none(path)
    witness_raw = _read_or_none(witness_path)
    if primary_raw is None:
        if witness_raw is None:
            return None
        try:
            what = f"its witness {witness_path} holds generation {decode_election_copy(witness_raw, witness_path).generation}"
        except CorruptElectionStateError:
            what = f"its witness {witness_path} exists"
        reason = f"missing, although {what}"
        # The witness may lag the primary by the last write of a crash, so
        # it cannot stand in for it.
        raise MissingElectionStateError(
            f"the election state file {path} is missing although {what}, so this node refuses to start rather "
            f"than risk voting twice in one epoch: {REPAIR_ADVICE}.",
            reason=reason,
        )
    primary = decode_election_copy(primary_raw, path)
    witness: ElectionCopy | str | None = None
    if witness_raw is not None:
        try:
            witness = decode_election_copy(witness_raw, witness_path)
        except CorruptElectionStateError as error:
            witness = error.reason
    try:
        return choose_election_copy(primary, witness)
    except UndecidableElectionStateError as error:
        raise CorruptElectionStateError(
            f"the election state files {path} and {witness_path} disagree ({error}), so this node refuses to start "
            f"rather than risk voting twice in one epoch: {REPAIR_ADVICE}.",
            reason=str(error),
        ) from None


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _highest_generation(directory: Path) -> int:
    """The highest generation either copy holds (0 if none is readable):
    where a write that did not read first must go above."""
    highest = 0
    for name in (ELECTION_STATE_FILE_NAME, ELECTION_WITNESS_FILE_NAME):
        raw = _read_or_none(directory / name)
        if raw is None:
            continue
        try:
            highest = max(highest, decode_election_copy(raw, directory / name).generation)
        except CorruptElectionStateError:
            continue
    return highest


def encode_election_copy(copy: ElectionCopy) -> bytes:
    state = copy.state
    return encode_checked_json(
        {
            "version": _VERSION,
            "generation": copy.generation,
            "epoch": state.epoch,
            "voted_for": state.voted_for,
            "leader_id": state.leader_id,
        }
    )


def decode_election_state(raw: bytes, path: Path | str = ELECTION_STATE_FILE_NAME) -> ElectionState:
    """Parse one copy (``quorum-state.json`` or its witness). Raises
    ``CorruptElectionStateError``."""
    return decode_election_copy(raw, path).state


def decode_election_copy(raw: bytes, path: Path | str = ELECTION_STATE_FILE_NAME) -> ElectionCopy:
    """Parse one copy with its generation (0 for a version-1 file). Raises
    ``CorruptElectionStateError``."""
    try:
        document = decode_checked_json(raw)
        version = document.get("version")
        if version not in _VERSIONS_READ:
            raise ValueError(f"unknown version {version!r}")
        generation = document.get("generation", 0) if version == 1 else document.get("generation")
        if version == 1 and "generation" in document:
            raise ValueError("a version-1 file with a generation")
        if not is_plain_int(generation) or generation < 0:
            raise ValueError(f"bad generation {generation!r}")
        epoch = document.get("epoch")
        if not is_plain_int(epoch) or epoch < 0:
            raise ValueError(f"bad epoch {epoch!r}")
        voted_for = document.get("voted_for")
        leader_id = document.get("leader_id")
        for name, value in (("voted_for", voted_for), ("leader_id", leader_id)):
            if value is not None and (not is_plain_int(value) or value < 0):
                raise ValueError(f"bad {name} {value!r}")
    except ValueError as error:
        raise CorruptElectionStateError(
            f"the election state file {path} is damaged ({error}), so this node refuses to start rather than "
            f"risk voting twice in one epoch: {REPAIR_ADVICE}.",
            reason=str(error),
        ) from None
    return ElectionCopy(generation, ElectionState(epoch=epoch, voted_for=voted_for, leader_id=leader_id))
