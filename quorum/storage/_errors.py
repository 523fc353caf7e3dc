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


# What every refusal to open damaged storage tells the operator to do next:
# a node whose storage is damaged beyond automatic repair (docs/storage.md,
# "Repair"), or told to refuse, rejoins from nothing, as an observer first.
REPAIR_ADVICE = (
    "keep the directory for inspection (kraft-quorum check-storage shows the damage), move it aside and "
    "rejoin the node as docs/operations.md, 'A node that lost its disk', describes"
)


class CorruptRecordError(StorageError):
    """A log batch failed validation (CRC, framing, version) when read.

    Raised instead of ever returning a record that failed its CRC. This
    error means the damage appeared (or was reached) after the log was
    opened; at open, damage is ``DamagedLogError`` and a torn tail is cut.
    """

    def __init__(self, message: str, *, path: str | None = None, position: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.position = position


class DamagedLogError(StorageError):
    """The log is damaged, not merely torn: a bad batch followed by valid
    data, a bad batch in a sealed segment, a batch whose CRC holds but which
    does not continue the log, or a missing segment.

    Raised by ``SegmentedLog.open`` before anything is modified: damaged data
    is never truncated, since what follows it may be acknowledged records
    (Protocol-Aware Recovery, FAST '18). ``path``, ``position`` (bytes) and
    ``what`` say where and what; the message is one sentence for the
    operator.
    """

    def __init__(self, path: str, position: int, what: str, *, whole_directory: bool = False) -> None:
        self.path = path
        self.position = position
        self.what = what
        # The log directory as a whole (``lost_log``): no byte to name.
        self.whole_directory = whole_directory
        super().__init__(f"{self.where}, so this node refuses to start rather than cut acknowledged records: {REPAIR_ADVICE}.")

    @property
    def where(self) -> str:
        """What is damaged, and where, as the start of a sentence."""
        if self.whole_directory:
            return f"the log directory {self.path} is damaged ({self.what})"
        return f"the log file {self.path} is damaged at byte {self.position} ({self.what})"


class SoleVoterDamagedError(StorageError):
    """The log of a cluster's only voter is damaged (or half repaired).

    A damaged voter repairs its log from a leader (docs/storage.md,
    "Repair"), but a static voter set of one has no other copy of the log
    and can never elect anyone else: the node would wait for a leader that
    cannot come, serving nothing. It refuses to start instead, and nothing
    is moved. ``where`` says what is damaged, as the log's own error does.
    """

    def __init__(self, node_id: int, where: str) -> None:
        super().__init__(
            f"{where}, and node {node_id} is its cluster's only voter: no other copy of the log exists to repair "
            "it from, and records after the damage may have been committed, so this node refuses to start rather "
            "than wait for a leader that cannot come: keep the directory for inspection (kraft-quorum "
            "check-storage shows the damage) and restore it from a backup, or give the cluster more voters "
            "before the next damage (docs/storage.md, 'The only voter')"
        )
        self.node_id = node_id
        self.where = where


class CorruptElectionStateError(StorageError):
    """The election state file exists but cannot be trusted.

    Fatal by design: guessing an epoch or a vote could let a voter vote twice
    in one epoch (Raft thesis §3.8). An operator must inspect the file.
    ``reason`` is what is wrong with it, without the advice.
    """

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class MissingElectionStateError(CorruptElectionStateError):
    """The election state file is missing although the directory holds log
    records or snapshots: the vote this voter may have cast is lost.

    Starting at epoch 0 (or at the log's last epoch) could let it vote a
    second time in an epoch it already voted in, so the node refuses to
    start; see docs/storage.md.
    """


class RolledBackElectionStateError(CorruptElectionStateError):
    """Both copies of the election state agree, but the log (or the latest
    snapshot) holds an epoch above theirs: the state went back in time (a
    restored backup, a rolled-back file system), and the votes cast since
    are lost. Refused like a lost state; see docs/storage.md."""


class CorruptSnapshotError(StorageError):
    """A snapshot file (or a received snapshot) failed its header or CRC
    check. ``where`` says which file and what is wrong, as the start of a
    sentence, for a file on disk (None for a received snapshot)."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message)
        self.where = where


class SnapshotNotFoundError(StorageError, LookupError):
    """No snapshot with the requested id exists."""


class CorruptLogMetadataError(StorageError):
    """A small metadata file of the log (the log-start checkpoint) is damaged.

    Fatal: without it, segments deleted behind a snapshot could come back and
    be mistaken for live records. ``reason`` is what is wrong with it.
    """

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class StorageOwnershipError(StorageError):
    """The data directory belongs to another node or cluster, or another
    process has it open."""


class LogFailedError(StorageError):
    """An earlier write failed part-way and could not be rolled back; the log
    refuses further use until it is reopened (reopening repairs the tail)."""
