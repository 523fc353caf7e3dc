"""The election state file (KIP-595 ``quorum-state``).

One small JSON document, ``quorum-state.json``::

    {"crc32": 1234567890, "epoch": 7, "leader_id": null, "version": 1, "voted_for": 2}

``crc32`` is zlib.crc32 of the canonical JSON of the other members (sorted
keys, no spaces). Written atomically: ``quorum-state.json.tmp``, fsync,
``os.replace``, fsync the directory, so after a crash the file holds the old
state or the new one, never a mixture. A leftover ``.tmp`` is ignored (and
removed): it was never renamed, so it was never promised to anyone.

A present but unreadable file is fatal (``CorruptElectionStateError``):
starting without knowing the vote already cast in the current epoch could
let this voter vote twice (Raft thesis §3.8).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .._types import ElectionState
from ._errors import REPAIR_ADVICE, CorruptElectionStateError
from ._files import atomic_write, decode_checked_json, encode_checked_json, is_plain_int

ELECTION_STATE_FILE_NAME = "quorum-state.json"
_VERSION = 1

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
    """Reads and atomically writes ``<directory>/quorum-state.json``."""

    def __init__(self, directory: Path | str, *, fsync: bool = True, logger: logging.Logger | None = None) -> None:
        """Creates ``directory`` if needed and removes a leftover temporary
        file. Raises ``OSError``."""
        self._directory = Path(directory)
        self._directory.mkdir(parents=True, exist_ok=True)
        self._path = self._directory / ELECTION_STATE_FILE_NAME
        self._fsync = fsync
        self._logger = logger or _default_logger
        self._last: ElectionState | None = None
        temporary = self._path.with_name(self._path.name + ".tmp")
        if temporary.exists():
            self._logger.info("%s: removing a leftover temporary file (an interrupted write)", temporary)
            os.unlink(temporary)

    @property
    def path(self) -> Path:
        return self._path

    def read(self) -> ElectionState | None:
        """The stored state, or None if none was ever written.

        Raises ``CorruptElectionStateError`` if the file exists but is
        damaged (refuse to start), ``OSError`` on I/O failure.
        """
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return None
        state = decode_election_state(raw, self._path)
        self._last = state
        return state

    def write(self, state: ElectionState) -> None:
        """Store ``state`` atomically and durably; returns when it is on disk.

        Raises ``ValueError`` for a transition no correct node makes (see
        ``check_election_transition``), ``OSError`` on I/O failure (the old
        state is then still in place).
        """
        check_election_transition(self._last, state)
        atomic_write(self._path, encode_election_state(state), fsync=self._fsync)
        self._last = state


def encode_election_state(state: ElectionState) -> bytes:
    return encode_checked_json(
        {"version": _VERSION, "epoch": state.epoch, "voted_for": state.voted_for, "leader_id": state.leader_id}
    )


def decode_election_state(raw: bytes, path: Path | str = ELECTION_STATE_FILE_NAME) -> ElectionState:
    """Parse a ``quorum-state.json``. Raises ``CorruptElectionStateError``."""
    try:
        document = decode_checked_json(raw)
        if document.get("version") != _VERSION:
            raise ValueError(f"unknown version {document.get('version')!r}")
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
    return ElectionState(epoch=epoch, voted_for=voted_for, leader_id=leader_id)
