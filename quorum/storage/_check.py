"""``kraft-quorum check-storage DATA_DIR``: verify every checksum of a
stopped node's data directory and say whether the next start would find it
sound, cut a torn tail, or refuse it as damaged.

It applies the very rules recovery applies (``scan_segments`` and the
same file decoders), in memory: nothing in the directory is created,
modified or removed. It takes a shared lock on ``.lock`` (only if that file
exists) so that it never reads a directory a running node is writing.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

from .._types import SnapshotId
from .._election_copies import rolled_back_by_log
from ._election import ELECTION_STATE_FILE_NAME, ELECTION_WITNESS_FILE_NAME, read_election_copies
from ._errors import CorruptElectionStateError, CorruptLogMetadataError
from ._files import decode_checked_json
from ._format import decode_snapshot, parse_snapshot_file_name
from ._segments import (
    CHECKPOINT_FILE_NAME,
    DEFAULT_INDEX_INTERVAL_BYTES,
    REWRITE_SUFFIX,
    list_log_directory,
    lost_log,
    lost_segment,
    parse_rewrite,
    read_log_start_checkpoint,
    scan_segments,
    segment_file_name,
)
from ._repair import DAMAGED_DIR_PREFIX, REPAIR_MARKER_FILE_NAME, read_repair_marker
from ._snapshots import PART_SUFFIX
from ._storage import LOCK_FILE_NAME, LOG_DIR_NAME, META_FILE_NAME, SNAPSHOT_DIR_NAME

# Exit codes of ``check-storage`` (2 is click's usage error).
EXIT_SOUND = 0
EXIT_TORN_TAIL = 1
EXIT_DAMAGED = 3
EXIT_NOT_A_DATA_DIR = 4
EXIT_IN_USE = 5

SOUND = "sound"
TORN_TAIL = "torn tail"
DAMAGED = "damaged"
NOT_A_DATA_DIR = "not a data directory"
IN_USE = "in use"

_EXIT_CODES = {
    SOUND: EXIT_SOUND,
    TORN_TAIL: EXIT_TORN_TAIL,
    DAMAGED: EXIT_DAMAGED,
    NOT_A_DATA_DIR: EXIT_NOT_A_DATA_DIR,
    IN_USE: EXIT_IN_USE,
}


@dataclass
class StorageCheck:
    """The outcome: ``verdict`` (one of the five constants above), one line
    per finding in ``lines``, and ``exit_code``."""

    verdict: str = SOUND
    lines: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self.verdict]

    def sound(self, line: str) -> None:
        self.lines.append(f"ok       {line}")

    def torn(self, line: str) -> None:
        self.lines.append(f"TORN     {line}")
        if self.verdict == SOUND:
            self.verdict = TORN_TAIL

    def damaged(self, line: str) -> None:
        self.lines.append(f"DAMAGED  {line}")
        self.verdict = DAMAGED


def check_storage(data_dir: Path | str) -> StorageCheck:
    """Check a stopped node's data directory without modifying it. Never
    raises for anything found in the directory: damage is a finding.
    Raises ``OSError`` only if a file cannot be read at all."""
    root = Path(data_dir)
    result = StorageCheck()
    if not root.is_dir() or not ((root / META_FILE_NAME).exists() or (root / LOG_DIR_NAME).is_dir()):
        result.verdict = NOT_A_DATA_DIR
        result.lines.append(f"{root} is not a node's data directory (no {META_FILE_NAME}, no {LOG_DIR_NAME}/)")
        return result
    lock_fd = _shared_lock(root)
    if lock_fd == -1:
        result.verdict = IN_USE
        result.lines.append(f"{root} is in use: a running process holds {root / LOCK_FILE_NAME}; stop it first")
        return result
    try:
        holds_records, log_start, log_epoch = _check_log(root / LOG_DIR_NAME, result)
        latest = _check_snapshots(root / SNAPSHOT_DIR_NAME, result)
        lost = lost_log(
            root / LOG_DIR_NAME, holds_election_state=(root / ELECTION_STATE_FILE_NAME).exists(), snapshot=latest
        )
        if lost is not None:
            result.lines = [line for line in result.lines if not line.startswith(f"ok       {lost.path}:")]
            result.damaged(f"{lost.path}: {lost.what}")
            holds_records = True
        if log_start > 0 and (latest is None or log_start > latest.end_offset):
            # What FileStorage.load refuses (a hole before the log start).
            result.damaged(
                f"{root / LOG_DIR_NAME}: the log starts at offset {log_start} and no snapshot covers the records "
                f"below it (a segment is missing)"
            )
        log_epoch = max(log_epoch, latest.epoch if latest is not None else 0)
        _check_small_files(root, result, holds_data=holds_records or latest is not None, log_epoch=log_epoch)
        _check_repair_marker(root, result)
    finally:
        if lock_fd >= 0:
            os.close(lock_fd)
    return result


def _shared_lock(root: Path) -> int:
    """A shared flock on ``.lock`` (fd), -2 if there is no lock file, -1 if
    a running node holds it."""
    try:
        fd = os.open(root / LOCK_FILE_NAME, os.O_RDONLY)
    except FileNotFoundError:
        return -2
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return -1
        raise
    return fd


def _check_small_files(root: Path, result: StorageCheck, *, holds_data: bool, log_epoch: int) -> None:
    meta = root / META_FILE_NAME
    if not meta.exists():
        (result.damaged if holds_data else result.sound)(f"{meta}: missing")
    else:
        try:
            document = decode_checked_json(meta.read_bytes())
            directory = document.get("directory_id")
            result.sound(
                f"{meta}: node {document.get('node_id')} of cluster {document.get('cluster_id')!r}"
                + ("" if directory is None else f", directory {directory}")
            )
        except ValueError as error:
            result.damaged(f"{meta}: {error}")
    state = root / ELECTION_STATE_FILE_NAME
    witness = root / ELECTION_WITNESS_FILE_NAME
    if not state.exists() and not witness.exists():
        if holds_data:
            result.damaged(f"{state}: missing beside log records or snapshots (the vote cast is lost)")
        else:
            result.sound(f"{state}: none yet (a node that never ran)")
        return
    try:
        choice = read_election_copies(root)
    except CorruptElectionStateError as error:
        result.damaged(f"{state}: {error.reason}")
        return
    assert choice is not None
    decoded = choice.copy.state
    if choice.finding is not None:
        # The next start takes the copy chosen here and writes the other one
        # again: like a torn tail, a finding the start settles by itself.
        result.sound(f"{state}: {choice.finding}; the next start writes the {' and '.join(choice.stale)} again")
    reason = rolled_back_by_log(decoded, log_epoch)
    if reason is not None:
        result.damaged(f"{state}: rolled back ({reason}): the votes cast since are lost")
        return
    result.sound(
        f"{state}: epoch {decoded.epoch}, voted for {decoded.voted_for}, leader {decoded.leader_id}"
        f" (generation {choice.copy.generation})"
    )


def _check_repair_marker(root: Path, result: StorageCheck) -> None:
    """A repair under way (docs/storage.md, "Repair") is reported, not
    judged: the log it left is checked like any other."""
    try:
        repair = read_repair_marker(root)
    except CorruptLogMetadataError as error:
        result.damaged(f"{root / REPAIR_MARKER_FILE_NAME}: {error.reason}")
        return
    if repair is None:
        return
    end = "unknown" if repair.acknowledged_end is None else f"offset {repair.acknowledged_end}"
    aside = ", ".join(sorted(path.name for path in root.glob(f"{DAMAGED_DIR_PREFIX}*"))) or "none"
    result.lines.append(
        f"REPAIR   {root / REPAIR_MARKER_FILE_NAME}: damage found at offset {repair.damaged_from_offset} (kept aside: "
        f"{aside}); it may have acknowledged up to {end}; at its next start the node repairs its log from a leader "
        f"and neither votes nor stands until then"
    )


def _check_log(log_dir: Path, result: StorageCheck) -> tuple[bool, int, int]:
    """Returns whether the log holds records (or starts above 0), where it
    starts, and the epoch of its last valid record (0 if none)."""
    if not log_dir.is_dir():
        result.sound(f"{log_dir}: no log yet")
        return False, 0, 0
    checkpoint_path = log_dir / CHECKPOINT_FILE_NAME
    try:
        checkpoint = read_log_start_checkpoint(log_dir)
    except CorruptLogMetadataError as error:
        result.damaged(f"{checkpoint_path}: {error.reason}")
        return True, 0, 0
    if checkpoint is not None:
        result.sound(f"{checkpoint_path}: the log starts at offset {checkpoint}")
    listing = list_log_directory(log_dir)
    bases = listing.log_bases
    redo: dict[int, tuple[int, bytes]] = {}
    for base in listing.rewrites:
        path = log_dir / f"{base:020d}{REWRITE_SUFFIX}"
        parsed = parse_rewrite(path.read_bytes())
        if parsed is not None and base in bases:
            redo[base] = parsed
            result.sound(f"{path}: an interrupted truncation, completed at the next start")
    if checkpoint is not None:
        while len(bases) >= 2 and bases[1] <= checkpoint:
            result.sound(f"{log_dir / segment_file_name(bases.pop(0))}: below the log start, removed at the next start")
        if bases and bases[0] > checkpoint:
            result.damaged(
                f"{log_dir / segment_file_name(bases[0])}: the log should start at offset {checkpoint} but its first "
                f"segment starts at offset {bases[0]} (a segment is missing)"
            )
            return True, checkpoint, 0

    def read_segment(base: int) -> bytes:
        data = (log_dir / segment_file_name(base)).read_bytes()
        if base in redo:
            position, batch = redo[base]
            if position <= len(data):
                data = data[:position] + batch
        return data

    lost = lost_segment(log_dir, bases, listing.index_bases, checkpoint)
    if lost is not None:
        result.damaged(f"{lost.path} at byte {lost.position}: {lost.what}")
        return True, bases[0] if bases else (checkpoint or 0), 0
    scan = scan_segments(log_dir, bases, DEFAULT_INDEX_INTERVAL_BYTES, read_segment)
    problem_found = scan.damage is not None or scan.verdict.torn
    for i, segment in enumerate(scan.segments):
        prefix = "valid prefix: " if problem_found and i == len(scan.segments) - 1 else ""
        if segment.end_offset > segment.base_offset:
            result.sound(f"{segment.path}: {prefix}offsets {segment.base_offset}..{segment.end_offset - 1}, checksums ok")
        else:
            result.sound(f"{segment.path}: no valid batch")
    if scan.damage is not None:
        damage = scan.damage
        result.damaged(f"{damage.path} at byte {damage.position}: {damage.what}")
    elif scan.verdict.torn:
        result.torn(scan.verdict.describe())
    start = bases[0] if bases else (checkpoint or 0)
    last_epoch = max((segment.last_epoch for segment in scan.segments if segment.last_epoch is not None), default=0)
    return scan.verdict.end_offset > start or start > 0, start, last_epoch


def _check_snapshots(snapshot_dir: Path, result: StorageCheck) -> SnapshotId | None:
    """Returns the latest published snapshot's id, if any."""
    if not snapshot_dir.is_dir():
        return None
    found: SnapshotId | None = None
    for name in sorted(os.listdir(snapshot_dir)):
        path = snapshot_dir / name
        if name.endswith(PART_SUFFIX):
            result.sound(f"{path}: an unfinished snapshot, removed at the next start")
            continue
        snapshot_id = parse_snapshot_file_name(name)
        if snapshot_id is None:
            continue
        found = snapshot_id if found is None or (snapshot_id.end_offset, snapshot_id.epoch) > (
            found.end_offset, found.epoch) else found
        try:
            found_id, payload = decode_snapshot(path.read_bytes())
            if found_id != snapshot_id:
                raise ValueError(f"the header says {found_id}")
        except ValueError as error:
            result.damaged(f"{path}: {error}")
            continue
        result.sound(f"{path}: snapshot {snapshot_id}, {len(payload)} payload bytes, checksums ok")
    return found


def check_storage_report(data_dir: Path | str) -> tuple[str, int]:
    """The text ``check-storage`` prints (findings, then the verdict line)
    and its exit code."""
    result = check_storage(data_dir)
    return "\n".join([*result.lines, f"verdict: {result.verdict}"]), result.exit_code
