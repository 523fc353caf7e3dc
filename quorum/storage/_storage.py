"""The storage facade the runtime (and the simulator) talks to.

``FileStorage`` bundles the three durable parts of a node under one data
directory::

    <data_dir>/
        meta.json            node id and cluster id, written once
        .lock                flock'ed while the directory is open
        quorum-state.json    election state
        log/                 segments (see _segments)
        snapshots/           snapshot files (see _snapshots)

``MemoryStorage`` offers the same methods over in-memory parts, plus
``crash()``. Both execute the core's persistence instructions
(``persist``), and hand back everything needed to rebuild the core at
startup (``load``).
"""

from __future__ import annotations

import abc
import logging
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

from .._types import ElectionState, Entry, SnapshotId
from .._election_copies import rolled_back_by_log
from ._election import ELECTION_STATE_FILE_NAME, ELECTION_WITNESS_FILE_NAME, ElectionStateFile
from .._node import RepairState
from .._voters import Voter, VoterSet, check_directory_id
from ..wire import check_cluster_id, check_node_id
from ._errors import (
    REPAIR_ADVICE,
    DamagedLogError,
    MissingElectionStateError,
    RolledBackElectionStateError,
    StorageError,
    StorageOwnershipError,
)
from ._files import atomic_write, decode_checked_json, encode_checked_json, fsync_directory
from ._memory import MemoryElectionState, MemoryLogStore, MemorySnapshotStore, MemorySnapshotWriter
from ._segments import (
    DEFAULT_BATCH_BYTES_MAX,
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_READ_BYTES_MAX,
    DEFAULT_SEGMENT_BYTES_MAX,
    SegmentedLog,
    lost_log,
)
from ._repair import (
    DAMAGED_DIR_PREFIX,
    clear_repair_marker,
    describe_damage,
    merge_repairs,
    move_damage_aside,
    plan_damage_cut,
    read_repair_marker,
    write_repair_marker,
)
from ._snapshots import SnapshotStore, SnapshotWriter

META_FILE_NAME = "meta.json"
_DATA_OF = attrgetter("data")  # an Entry's data
LOCK_FILE_NAME = ".lock"
LOG_DIR_NAME = "log"
SNAPSHOT_DIR_NAME = "snapshots"

_default_logger = logging.getLogger("pykraft.storage")


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How much log to keep behind the latest snapshot (KRaft's
    ``metadata.max.retention.bytes`` / ``metadata.max.retention.ms``, whose
    defaults these are). ``None`` switches a criterion off. Only whole
    segments wholly behind the latest snapshot are ever deleted, oldest
    first, while the log is larger than ``retention_bytes`` or the segment
    was last written more than ``retention_ms`` ago."""

    retention_bytes: int | None = 100 * 1024 * 1024
    retention_ms: int | None = 7 * 24 * 3600 * 1000

    def __post_init__(self) -> None:
        for name in ("retention_bytes", "retention_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0 or None, got {value}")


@dataclass(frozen=True, slots=True)
class RecoveredState:
    """Everything durable, as read back at startup.

    ``entries`` are every record held, from ``log_start_offset``; they may
    begin *below* the snapshot's end offset (the log keeps some records
    behind a snapshot so that followers slightly behind can fetch them):
    ``entries_after_snapshot`` are the ones a state machine restored from
    the snapshot still has to apply.
    """

    election_state: ElectionState | None
    snapshot_id: SnapshotId | None
    snapshot_bytes: bytes | None
    entries: list[Entry]
    log_start_offset: int

    @property
    def end_offset(self) -> int:
        return self.entries[-1].offset + 1 if self.entries else self.log_start_offset

    @property
    def entries_after_snapshot(self) -> list[Entry]:
        if self.snapshot_id is None or not self.entries:
            return self.entries
        skip = max(0, self.snapshot_id.end_offset - self.log_start_offset)
        return self.entries[skip:]


class _Facade(abc.ABC):
    """What FileStorage and MemoryStorage share; ``log``, ``election`` and
    ``snapshots`` are set by the subclasses."""

    log: Any
    election: Any
    snapshots: Any
    retention: RetentionPolicy
    node_id: int | None
    cluster_id: str | None
    _logger: logging.Logger
    # A repair under way (FileStorage.open, docs/storage.md "Repair"); the
    # in-memory storage has none.
    repair: RepairState | None = None

    # -- the log ------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.log.end_offset

    @property
    def last_epoch(self) -> int:
        return self.log.last_epoch

    def append(self, entries: Sequence[Entry]) -> None:
        """Append records (see ``SegmentedLog.append``); durable after ``flush``."""
        self.log.append(entries)

    def flush(self) -> None:
        """fsync what was appended (one call per append round)."""
        self.log.flush()

    def truncate_to(self, end_offset: int) -> None:
        """Drop records at or after ``end_offset``; durable on return."""
        self.log.truncate_to(end_offset)

    def delete_before(self, offset: int) -> None:
        """Forget log records below ``offset`` (behind a snapshot); whole
        segments only, so the log start may stay below ``offset``. Past the
        log end the log restarts, empty, at ``offset`` with the latest
        snapshot's epoch. Then removes snapshots made useless by the new log
        start (every one but the latest whose end offset lies below it)."""
        latest = self.snapshots.latest()
        epoch_before = latest.epoch if latest is not None and latest.end_offset == offset else None
        self.log.delete_before(offset, epoch_before=epoch_before)
        self._delete_stale_snapshots()

    def reset_to_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Discard the whole log: it restarts after ``snapshot_id``."""
        self.log.reset(snapshot_id)

    def return_to_durable_point(self, durable_end_offset: int) -> None:
        """After a write or fsync failed: reopen the log and drop every
        record at or after ``durable_end_offset``, the log end at the last
        flush that succeeded. What was written since may exist only in the
        page cache, which a failed fsync may already have dropped or marked
        clean (PostgreSQL's "fsyncgate", 2018; Rebello et al., USENIX ATC
        '20): it must be written again, never trusted. Raises ``OSError``
        while the disk still fails, ``DamagedLogError`` if reopening finds
        damage below that point."""
        self._reopen_log()
        # A failed round may have restarted the log after a snapshot
        # (durable on return): then what follows that start is the suspect part.
        keep_end = max(durable_end_offset, self.log.log_start_offset)
        if self.log.end_offset > keep_end:
            self.log.truncate_to(keep_end)

    def _reopen_log(self) -> None:
        """Release the log's files and open it again (FileStorage only)."""

    def read(self, start_offset: int, max_bytes: int = DEFAULT_READ_BYTES_MAX) -> list[Entry]:
        """Records from ``start_offset`` (CRC-checked; see ``SegmentedLog.read``)."""
        return self.log.read(start_offset, max_bytes)

    def entries_from(self, start_offset: int | None = None) -> Iterator[Entry]:
        return self.log.entries_from(start_offset)

    def finish_repair(self) -> None:
        """The log is repaired: forget the repair (``FileStorage`` also
        removes its durable marker)."""
        self.repair = None

    # -- election state -------------------------------------------------------------

    def read_election_state(self) -> ElectionState | None:
        return self.election.read()

    def write_election_state(self, state: ElectionState) -> None:
        """Atomically and durably record ``state`` (before any message that
        depends on it is sent)."""
        self.election.write(state)

    # -- snapshots ------------------------------------------------------------------

    def write_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Publish a snapshot atomically and durably."""
        self.snapshots.write(snapshot_id, data)

    def latest_snapshot(self) -> SnapshotId | None:
        return self.snapshots.latest()

    def list_snapshots(self) -> list[SnapshotId]:
        return self.snapshots.list()

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes:
        return self.snapshots.read(snapshot_id)

    def snapshot_size(self, snapshot_id: SnapshotId) -> int:
        return self.snapshots.size(snapshot_id)

    def read_snapshot_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        return self.snapshots.read_chunk(snapshot_id, position, max_bytes)

    def snapshot_writer(self, snapshot_id: SnapshotId) -> SnapshotWriter | MemorySnapshotWriter:
        return self.snapshots.writer(snapshot_id)

    def _delete_stale_snapshots(self) -> list[SnapshotId]:
        ids = self.snapshots.list()
        start = self.log.log_start_offset
        removed = []
        for old in ids[:-1]:
            if old.end_offset < start and self.snapshots.delete(old):
                removed.append(old)
        return removed

    # -- the core's persistence instructions -------------------------------------

    def persist(
        self,
        *,
        election_state: ElectionState | None = None,
        snapshot: tuple[SnapshotId, bytes] | None = None,
        truncate_to: int | None = None,
        append: Sequence[Entry] = (),
        delete_before: int | None = None,
        flush: bool = True,
    ) -> None:
        """Carry out one round of the core's persistence instructions in the
        order the core requires (election state, snapshot, truncation,
        append, deletion behind the snapshot), then fsync once. When it
        returns, everything is durable and the core may be told so."""
        if election_state is not None:
            self.write_election_state(election_state)
        if snapshot is not None:
            self.write_snapshot(*snapshot)
        if truncate_to is not None:
            self.truncate_to(truncate_to)
        if append:
            self.append(append)
        if delete_before is not None:
            self.delete_before(delete_before)
        if flush:
            self.flush()

    # -- startup --------------------------------------------------------------------

    def load(self) -> RecoveredState:
        """Read back everything durable to rebuild the core.

        Reconciles the log with the latest snapshot first (KIP-630): a log
        that ends before the snapshot, or disagrees with it about the epoch
        of the snapshot's last record, is discarded and restarts after the
        snapshot (WARNING logged).

        Raises ``CorruptElectionStateError`` / ``CorruptSnapshotError``
        (refuse to start), ``StorageError`` if the log starts after offset 0
        with no snapshot covering the records below, ``CorruptRecordError``
        if a record became unreadable since the log was opened.
        """
        election_state = self.election.read()
        snapshot_id = self.snapshots.latest()
        snapshot_bytes = self.snapshots.read(snapshot_id) if snapshot_id is not None else None
        self._reconcile(snapshot_id)
        entries = list(self.log.entries_from())
        return RecoveredState(election_state, snapshot_id, snapshot_bytes, entries, self.log.log_start_offset)

    def _reconcile(self, snapshot_id: SnapshotId | None) -> None:
        log = self.log
        where = getattr(log, "directory", "memory")  # MemoryLogStore has no directory
        if snapshot_id is None:
            if log.log_start_offset > 0:
                raise StorageError(
                    f"the log in {where} starts at offset {log.log_start_offset} but no snapshot covers "
                    f"the records below it, so this node refuses to start with a hole in its history: "
                    f"{REPAIR_ADVICE}."
                )
            return
        if log.log_start_offset > snapshot_id.end_offset:
            raise StorageError(
                f"the log in {where} starts at offset {log.log_start_offset}, after the end of the latest "
                f"snapshot {snapshot_id}, so this node refuses to start with a hole in its history: {REPAIR_ADVICE}."
            )
        if log.end_offset < snapshot_id.end_offset:
            self._logger.warning(
                "the log ends at offset %d, before the latest snapshot %s: discarding it, the log restarts "
                "after the snapshot",
                log.end_offset,
                snapshot_id,
            )
            log.reset(snapshot_id)
            return
        if log.log_start_offset < snapshot_id.end_offset:
            before = log.read(snapshot_id.end_offset - 1, 1)[0]
            if before.epoch != snapshot_id.epoch:
                self._logger.warning(
                    "the log holds epoch %d at offset %d where the latest snapshot %s says epoch %d: "
                    "the log diverged from the committed history; discarding it",
                    before.epoch,
                    before.offset,
                    snapshot_id,
                    snapshot_id.epoch,
                )
                log.reset(snapshot_id)

    @abc.abstractmethod
    def close(self) -> None:
        """Release files and locks."""

    def __enter__(self) -> _Facade:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class FileStorage(_Facade):
    """Durable storage of one node in a data directory. Use ``open``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        log: SegmentedLog,
        election: ElectionStateFile,
        snapshots: SnapshotStore,
        node_id: int | None,
        cluster_id: str | None,
        retention: RetentionPolicy,
        lock_fd: int,
        logger: logging.Logger,
        log_options: dict[str, Any] | None = None,
        identity: DataDirIdentity | None = None,
    ) -> None:
        self.data_dir = data_dir
        # What ``format`` wrote (meta.json): the directory id and, for a
        # dynamic-voter cluster, the bootstrap voters. None: no meta.json.
        self.identity = identity
        # How ``open`` opened the log, to open it the same way again.
        self._log_options = log_options or {}
        self.log = log
        self.election = election
        self.snapshots = snapshots
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.retention = retention
        self._lock_fd = lock_fd
        self._logger = logger
        self._closed = False

    @classmethod
    def open(
        cls,
        data_dir: Path | str,
        *,
        node_id: int | None = None,
        cluster_id: str | None = None,
        segment_bytes_max: int = DEFAULT_SEGMENT_BYTES_MAX,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        batch_bytes_max: int = DEFAULT_BATCH_BYTES_MAX,
        fsync: bool = True,
        retention: RetentionPolicy | None = None,
        logger: logging.Logger | None = None,
        repair_damage: bool = False,
        now_ms: int | None = None,
    ) -> FileStorage:
        """Open (creating if needed) the data directory and recover the log.

        ``repair_damage``: a damaged log is opened for repair instead of
        refused (docs/storage.md, "Repair"): the repair is recorded durably
        in ``repairing.json`` first, then the damaged suffix is moved into
        ``damaged-<now_ms>/`` (``now_ms``: wall-clock milliseconds, the
        host's clock when None) and the valid prefix kept; ``repair`` then
        says what the node must do (``quorum.RepairState``). A repair
        recorded by an earlier open is always continued, whatever
        ``repair_damage`` says: the node may not vote until it is done.

        ``meta.json`` is written on first open when ``node_id`` and
        ``cluster_id`` are given; later opens must name the same ones (or
        none). Raises ``StorageOwnershipError`` if the directory belongs to
        another node or cluster, another process has it open, or ids are
        given and it holds data but no ``meta.json``; ``MissingElectionStateError`` if it holds
        log records or snapshots but no election state;
        ``DamagedLogError`` if the log is damaged (not merely torn);
        ``CorruptLogMetadataError``, ``OSError``. Nothing damaged is
        modified before these are raised.
        """
        data_dir = Path(data_dir)
        log_ = logger or _default_logger
        created = not data_dir.exists()
        data_dir.mkdir(parents=True, exist_ok=True)
        if created and fsync:
            fsync_directory(data_dir.parent)
        lock_fd = _lock(data_dir)
        try:
            identity = _check_meta(data_dir, node_id, cluster_id, fsync)
            node_id, cluster_id = (identity.node_id, identity.cluster_id) if identity else (None, None)
            holds_state = (data_dir / ELECTION_STATE_FILE_NAME).exists()
            election = ElectionStateFile(data_dir, fsync=fsync, logger=log_)
            snapshots = SnapshotStore(data_dir / SNAPSHOT_DIR_NAME, fsync=fsync, logger=log_)
            repair = read_repair_marker(data_dir)

            def open_log() -> SegmentedLog:
                return SegmentedLog.open(
                    data_dir / LOG_DIR_NAME,
                    segment_bytes_max=segment_bytes_max,
                    index_interval_bytes=index_interval_bytes,
                    batch_bytes_max=batch_bytes_max,
                    fsync=fsync,
                    base=snapshots.latest(),
                    logger=log_,
                )

            # A lost log is no cut's to repair: refused, whatever the flag.
            lost = lost_log(data_dir / LOG_DIR_NAME, holds_election_state=holds_state, snapshot=snapshots.latest())
            if lost is not None:
                raise lost
            try:
                log = open_log()
            except DamagedLogError as damage:
                if not repair_damage:
                    raise
                if not holds_state:
                    # Its votes are lost too: no repair can make it safe.
                    _check_election_state_present(False, election.path, None, snapshots, damaged=True)
                repair = _cut_damage(data_dir, damage, repair, election, index_interval_bytes, fsync, now_ms, log_)
                log = open_log()
            try:
                _check_election_state_present(holds_state, election.path, log, snapshots)
                _check_election_state_not_rolled_back(election, log, snapshots)
            except BaseException:
                log.close()
                raise
        except BaseException:
            os.close(lock_fd)
            raise
        storage = cls(
            data_dir,
            log=log,
            election=election,
            snapshots=snapshots,
            node_id=node_id,
            cluster_id=cluster_id,
            identity=identity,
            retention=retention if retention is not None else RetentionPolicy(),
            lock_fd=lock_fd,
            logger=log_,
            log_options={
                "segment_bytes_max": segment_bytes_max,
                "index_interval_bytes": index_interval_bytes,
                "batch_bytes_max": batch_bytes_max,
                "fsync": fsync,
            },
        )
        storage.repair = repair
        return storage

    def _reopen_log(self) -> None:
        try:
            self.log.close()
        except OSError as error:
            # The final flush failed too; the descriptors are released.
            self._logger.warning("%s: closing the failed log: %s", self.data_dir, error)
        self.log = SegmentedLog.open(
            self.data_dir / LOG_DIR_NAME, base=self.snapshots.latest(), logger=self._logger, **self._log_options
        )

    def finish_repair(self) -> None:
        """The core says the log is repaired (``QuorumNode.repairing`` went
        None): remove the repair marker durably, and the node votes again
        after its next start too. Raises ``OSError``."""
        if self.repair is None:
            return
        clear_repair_marker(self.data_dir, fsync=self.log.fsync_enabled)
        self._logger.warning("%s: the log is repaired; a voter votes again, an observer goes on observing", self.data_dir)
        self.repair = None

    def apply_retention(self, now_ms: int) -> int:
        """Delete old log segments and snapshots behind the latest snapshot
        according to ``self.retention`` (see ``RetentionPolicy``; segment age
        is its file's modification time, compared with ``now_ms``, wall-clock
        milliseconds). Never touches the active segment or anything at or
        after the latest snapshot's end offset. Returns the new log start
        offset. Raises ``OSError``."""
        latest = self.snapshots.latest()
        if latest is None:
            return self.log.log_start_offset
        policy = self.retention
        infos = self.log.segment_infos()
        total_bytes = sum(info.size_bytes for info in infos)
        keep_from: int | None = None
        for i, info in enumerate(infos[:-1]):
            if info.end_offset > latest.end_offset:
                break
            too_big = policy.retention_bytes is not None and total_bytes > policy.retention_bytes
            too_old = policy.retention_ms is not None and now_ms - info.modified_ms > policy.retention_ms
            if not (too_big or too_old):
                break
            total_bytes -= info.size_bytes
            keep_from = infos[i + 1].base_offset
        if keep_from is not None:
            self._logger.info("retention: deleting the log below offset %d (behind snapshot %s)", keep_from, latest)
            self.log.delete_before(keep_from)
        for removed in self._delete_stale_snapshots():
            self._logger.info("retention: deleted snapshot %s, older than the log start", removed)
        return self.log.log_start_offset

    def close(self) -> None:
        """Flush and close the log, abort snapshot transfers, release the
        directory lock. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.snapshots.close()
            self.log.close()
        finally:
            os.close(self._lock_fd)


class MemoryStorage(_Facade):
    """The same facade in memory, for the simulator; see ``_memory``.

    ``crash()`` models a power loss: unsynced appends are lost (or only
    ``keep_unsynced_records`` of them survive), snapshot transfers in
    progress are lost, everything else stays. After it, call ``load()`` to
    restart the node from what survived.
    """

    def __init__(
        self,
        *,
        node_id: int | None = None,
        cluster_id: str | None = None,
        retention: RetentionPolicy | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.log = MemoryLogStore()
        self.election = MemoryElectionState()
        self.snapshots = MemorySnapshotStore()
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.retention = retention if retention is not None else RetentionPolicy()
        self._logger = logger or _default_logger

    def crash(self, keep_unsynced_records: int = 0) -> None:
        self.log.crash(keep_unsynced_records)
        self.snapshots.crash()

    def load(self) -> RecoveredState:
        self.log.reopen()
        return super().load()

    def apply_retention(self, now_ms: int) -> int:
        """Like ``FileStorage.apply_retention`` with one record as the unit
        of deletion instead of a segment; ``retention_ms`` is ignored (the
        in-memory store keeps no clock). Returns the new log start offset."""
        latest = self.snapshots.latest()
        if latest is None:
            return self.log.log_start_offset
        limit = self.retention.retention_bytes
        if limit is not None:
            entries = list(self.log.entries_from())
            total = 5 * len(entries) + sum(map(len, map(_DATA_OF, entries)))
            cut = self.log.log_start_offset
            for entry in entries:
                if total <= limit or entry.offset >= latest.end_offset:
                    break
                total -= 5 + len(entry.data)
                cut = entry.offset + 1
            if cut > self.log.log_start_offset:
                self.log.delete_before(cut)
        self._delete_stale_snapshots()
        return self.log.log_start_offset

    def close(self) -> None:
        self.snapshots.close()
        self.log.close()


def _lock(data_dir: Path) -> int:
    # Imported here, not at the top: ``fcntl`` is POSIX-only (absent under
    # Pyodide), and only a FileStorage takes the lock; importing the package
    # for MemoryStorage or the formats must not need it.
    import fcntl

    path = data_dir / LOCK_FILE_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageOwnershipError(
            f"{data_dir} is already open in another process (it holds the lock on {path}), and two processes "
            f"must never share a node's data directory: stop that process, or give this one its own directory"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _cut_damage(
    data_dir: Path,
    damage: DamagedLogError,
    earlier: RepairState | None,
    election: ElectionStateFile,
    index_interval_bytes: int,
    fsync: bool,
    now_ms: int | None,
    logger: logging.Logger,
) -> RepairState:
    """Open a damaged log for repair (see ``_repair``): record the repair
    durably, move the damage aside, log one line. Raises ``damage`` if it
    is of a kind a cut does not repair."""
    plan = plan_damage_cut(data_dir / LOG_DIR_NAME, index_interval_bytes)
    if plan is None:
        raise damage
    stored = election.read()
    found = RepairState(
        damaged_from_offset=plan.damaged_from_offset,
        restart_epoch=stored.epoch if stored is not None else 0,
        acknowledged_end=plan.acknowledged_end,
    )
    repair = merge_repairs(earlier, found)
    write_repair_marker(data_dir, repair, describe_damage(damage), fsync=fsync)
    stamp = now_ms if now_ms is not None else int(time.time() * 1000)
    aside = data_dir / f"{DAMAGED_DIR_PREFIX}{stamp}"
    move_damage_aside(plan, aside, fsync=fsync)
    end = "unknown" if repair.acknowledged_end is None else f"offset {repair.acknowledged_end}"
    logger.warning(
        "the log file %s is damaged at byte %d (%s): keeping offsets below %d, the rest is moved to %s; this "
        "node repairs its log from a leader (it may have acknowledged up to %s) and neither votes nor stands "
        "until then",
        damage.path,
        damage.position,
        damage.what,
        plan.damaged_from_offset,
        aside,
        end,
    )
    return repair


def _check_election_state_present(
    holds_state: bool, path: Path, log: SegmentedLog | None, snapshots: SnapshotStore, *, damaged: bool = False
) -> None:
    """A directory with log records or a snapshot but no election state lost
    its vote: refuse rather than start at epoch 0 (or at the log's last
    epoch), which could vote twice in one epoch (Raft thesis §3.8; the
    reasoning is in docs/storage.md)."""
    if holds_state:
        return
    holds_records = damaged or (log is not None and (log.end_offset > log.log_start_offset or log.log_start_offset > 0))
    latest = snapshots.latest()
    if not holds_records and latest is None:
        return
    if log is None:
        what = "the log holds records"
    else:
        what = f"the log holds offsets up to {log.end_offset}" if holds_records else f"it holds snapshot {latest}"
    raise MissingElectionStateError(
        f"the election state file {path} is missing although {what}, so this node refuses to start rather than "
        f"risk voting twice in one epoch: {REPAIR_ADVICE}."
    )


def _check_election_state_not_rolled_back(election: ElectionStateFile, log: SegmentedLog, snapshots: SnapshotStore) -> None:
    """Read the election state (reconciling its two copies, which refuses a
    lost or damaged primary) and refuse a state the log proves older than
    the truth: a node persists an epoch before it appends anything of that
    epoch, so a later epoch in the log (or the latest snapshot) means the
    state was rolled back, copies and all, and the votes cast since are
    lost (docs/storage.md, "Election state rolled back")."""
    stored = election.read()
    if stored is None:
        return
    latest = snapshots.latest()
    log_epoch = max(log.last_epoch, latest.epoch if latest is not None else 0)
    reason = rolled_back_by_log(stored, log_epoch)
    if reason is not None:
        raise RolledBackElectionStateError(
            f"the election state in {election.path} was rolled back ({reason}), so this node refuses to start "
            f"rather than risk voting twice in one epoch: {REPAIR_ADVICE}.",
            reason=reason,
        )


def _holds_data(data_dir: Path) -> bool:
    """True if ``data_dir`` holds an election state, a log segment with
    bytes in it, or a snapshot: the marks of a node that has run."""
    if (data_dir / ELECTION_STATE_FILE_NAME).exists() or (data_dir / ELECTION_WITNESS_FILE_NAME).exists():
        return True
    return holds_log(data_dir)


def holds_log(data_dir: str | Path) -> bool:
    """True if ``data_dir`` holds a log segment with bytes in it or a
    snapshot: records this disk fetched or wrote (read only, no lock; a
    torn first record counts, as anything written does). False for a
    directory that does not exist. Raises ``OSError``."""
    data_dir = Path(data_dir)
    log_dir = data_dir / LOG_DIR_NAME
    if log_dir.is_dir() and any(path.stat().st_size > 0 for path in log_dir.glob("*.log")):
        return True
    snapshot_dir = data_dir / SNAPSHOT_DIR_NAME
    return snapshot_dir.is_dir() and any(snapshot_dir.glob("*.snapshot"))


@dataclass(frozen=True, slots=True)
class DataDirIdentity:
    """What ``meta.json`` says a data directory is: whose (node and cluster
    id), which disk (``directory_id``, random per ``format``: KIP-853, a
    wiped disk formatted again is another replica), and, for a cluster with
    dynamic voters, the bootstrap voter set (empty: static voters, or a
    directory written before directory ids existed)."""

    node_id: int
    cluster_id: str
    directory_id: str | None = None
    bootstrap_voters: tuple[Voter, ...] = ()


def new_directory_id() -> str:
    """A fresh random directory id: 32 hex digits (uuid4)."""
    return uuid.uuid4().hex


def _check_identity(node_id: Any, cluster_id: Any) -> None:
    """Raises ``ValueError`` unless ``node_id`` is an int a node can run
    as (0..``NODE_ID_MAX``, Kafka's int32) and ``cluster_id`` one the wire
    carries: so that ``format`` never writes a ``meta.json`` no node could
    start from."""
    check_node_id(node_id, "node_id")
    check_cluster_id(cluster_id)


def format_data_dir(
    data_dir: str | Path,
    *,
    node_id: int,
    cluster_id: str,
    directory_id: str | None = None,
    bootstrap_voters: Sequence[Voter] = (),
    fsync: bool = True,
) -> DataDirIdentity:
    """Format a new data directory (``kraft-quorum format``): write
    ``meta.json`` with the node id, the cluster id, a directory id (fresh
    and random unless given) and the bootstrap voters (empty: a static
    voter list given at start-up instead).

    Raises ``StorageOwnershipError`` if the directory is already formatted
    or holds a node's data (formatting again would give that data a new
    identity, and let a wiped disk vote as its old self), ``ValueError``
    for a bad id or voter set, ``OSError``."""
    data_dir = Path(data_dir)
    _check_identity(node_id, cluster_id)
    directory_id = check_directory_id(new_directory_id() if directory_id is None else directory_id)
    voters = VoterSet(tuple(bootstrap_voters)).voters if bootstrap_voters else ()
    if (data_dir / META_FILE_NAME).exists() or (data_dir.is_dir() and _holds_data(data_dir)):
        raise StorageOwnershipError(
            f"{data_dir} is already formatted or holds a node's data: format only an empty directory "
            f"(a replaced disk is formatted fresh and added again as a voter; docs/operations.md)"
        )
    created = not data_dir.exists()
    data_dir.mkdir(parents=True, exist_ok=True)
    if created and fsync:
        fsync_directory(data_dir.parent)
    document: dict[str, Any] = {"version": 1, "node_id": node_id, "cluster_id": cluster_id, "directory_id": directory_id}
    if voters:
        document["bootstrap_voters"] = [[voter.node_id, voter.directory_id, list(voter.endpoints)] for voter in voters]
    atomic_write(data_dir / META_FILE_NAME, encode_checked_json(document), fsync=fsync)
    return DataDirIdentity(node_id, cluster_id, directory_id, voters)


def read_data_dir_identity(data_dir: str | Path) -> DataDirIdentity | None:
    """What ``meta.json`` in ``data_dir`` says (read only), or None when
    there is none (not formatted yet). Raises ``StorageOwnershipError`` for
    a damaged ``meta.json``, ``OSError``."""
    return _check_meta(Path(data_dir), None, None, fsync=False)


def _identity_from(document: dict[str, Any]) -> DataDirIdentity:
    """Raises ``ValueError`` or ``KeyError`` for a document ``format`` (or
    a first open) would not have written."""
    if document.get("version") != 1:
        raise ValueError(f"unknown version {document.get('version')!r}")
    node_id, cluster_id = document["node_id"], document["cluster_id"]
    _check_identity(node_id, cluster_id)
    directory_id = check_directory_id(document.get("directory_id"))
    rows = document.get("bootstrap_voters", [])
    if not isinstance(rows, list):
        raise ValueError("bootstrap_voters is not a list")
    voters: list[Voter] = []
    for row in rows:
        if not isinstance(row, list) or len(row) != 3 or not isinstance(row[2], list):
            raise ValueError(f"malformed bootstrap voter {row!r}")
        voters.append(Voter(row[0], row[1], tuple(row[2])))
    bootstrap = VoterSet(tuple(voters)).voters if voters else ()
    return DataDirIdentity(node_id, cluster_id, directory_id, bootstrap)


def _check_meta(data_dir: Path, node_id: int | None, cluster_id: str | None, fsync: bool) -> DataDirIdentity | None:
    path = data_dir / META_FILE_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = None
    if raw is None:
        if (node_id is not None or cluster_id is not None) and _holds_data(data_dir):
            # A node process always names its ids, and meta.json is written
            # at the first open, before anything else: data without it was
            # copied or damaged, and could be another node's or cluster's.
            raise StorageOwnershipError(
                f"{data_dir} holds a node's data but no {META_FILE_NAME}, so this node refuses to start: it cannot "
                f"tell which node and cluster the data belongs to; {REPAIR_ADVICE}."
            )
        if node_id is None and cluster_id is None:
            return None
        if node_id is None or cluster_id is None:
            raise ValueError("give both node_id and cluster_id (or neither) when opening a new data directory")
        # Not formatted: the first open writes the ids (static voters). It
        # gets a directory id too, so that it can be added as a voter later.
        return format_data_dir(data_dir, node_id=node_id, cluster_id=cluster_id, fsync=fsync)
    try:
        identity = _identity_from(decode_checked_json(raw))
    except (ValueError, KeyError) as error:
        raise StorageOwnershipError(
            f"{path} is damaged ({error}), so this node refuses to start: it cannot tell which node and cluster "
            f"{data_dir} belongs to; {REPAIR_ADVICE}."
        ) from None
    stored_node, stored_cluster = identity.node_id, identity.cluster_id
    if node_id is not None and node_id != stored_node:
        raise StorageOwnershipError(
            f"{data_dir} belongs to node {stored_node} of cluster {stored_cluster!r}, not node {node_id}: "
            f"give this node its own data directory"
        )
    if cluster_id is not None and cluster_id != stored_cluster:
        raise StorageOwnershipError(
            f"{data_dir} belongs to cluster {stored_cluster!r} (node {stored_node}), not cluster {cluster_id!r}: "
            f"check --cluster-id, or give this node its own data directory"
        )
    return identity
