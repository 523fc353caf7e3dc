"""Exceptions raised by the storage layer.

Every error is a ``StorageError``; the subclasses say precisely what went
wrong so that a runtime can decide between "refuse to start" (corrupt
election state, a data directory that belongs to someone else) and "this one
read failed" (a record that failed its CRC after startup).
"""

from __future__ import annotations

from .._node import QuorumError


class StorageError(QuorumError):
    """Base class of every storage failure."""


class CorruptRecordError(StorageError):
    """A log batch failed validation (CRC, framing, version) when read.

    Raised instead of ever returning a record that failed its CRC. At startup
    the same damage is repaired by truncation; this error means the damage
    appeared (or was reached) after the log was opened.
    """

    def __init__(self, message: str, *, path: str | None = None, position: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.position = position


class CorruptElectionStateError(StorageError):
    """The election state file exists but cannot be trusted.

    Fatal by design: guessing an epoch or a vote could let a voter vote twice
    in one epoch (Raft thesis §3.8). An operator must inspect the file.
    """


class CorruptSnapshotError(StorageError):
    """A snapshot file (or a received snapshot) failed its header or CRC check."""


class SnapshotNotFoundError(StorageError, LookupError):
    """No snapshot with the requested id exists."""


class CorruptLogMetadataError(StorageError):
    """A small metadata file of the log (the log-start checkpoint) is damaged.

    Fatal: without it, segments deleted behind a snapshot could come back and
    be mistaken for live records.
    """


class StorageOwnershipError(StorageError):
    """The data directory belongs to another node or cluster, or another
    process has it open."""


class LogFailedError(StorageError):
    """An earlier write failed part-way and could not be rolled back; the log
    refuses further use until it is reopened (reopening repairs the tail)."""
