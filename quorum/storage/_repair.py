"""Opening a damaged log for repair (issue 14; Protocol-Aware Recovery,
Alagappan et al., FAST '18). See docs/storage.md, "Repair".

A damaged log is not a short log: the records after the damage may have
been acknowledged, and a node that rejoined as an ordinary voter with the
valid prefix could elect a leader lacking them. So repair is two steps:

1. here, in storage: keep the valid prefix, move the damaged suffix aside
   (never deleted: ``damaged-<ms>/`` inside the data directory), and first
   of all record durably, in ``repairing.json``, where the damage was, the
   epoch the node was in (every vote it cast is at or below it) and the end
   of what was on disk (it may have acknowledged anything below it);
2. in the core (``quorum.RepairState``): the node neither votes nor stands
   until a leader has given its log back, then ``FileStorage.finish_repair``
   removes the marker.

Crash-safety: the marker is written before anything moves; a crash while
the damage is being moved aside leaves the marker, and the next open
finishes the move, merging what it finds into the marker (the earliest
damage, the largest end, the latest epoch), so that nothing is forgotten.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._node import RepairState
from ._errors import REPAIR_ADVICE, CorruptLogMetadataError, DamagedLogError
from ._files import atomic_write, encode_checked_json, fsync_directory, is_plain_int, read_checked_json
from ._format import BATCH_HEADER_BYTES, RECORD_HEADER_BYTES, BatchProblem, parse_batch
from ._segments import (
    INDEX_SUFFIX,
    find_valid_batch,
    list_log_directory,
    lost_segment,
    read_log_start_checkpoint,
    scan_segments,
    segment_file_name,
)

REPAIR_MARKER_FILE_NAME = "repairing.json"
DAMAGED_DIR_PREFIX = "damaged-"


@dataclass(frozen=True, slots=True)
class DamageCut:
    """What ``plan_damage_cut`` found: the damage ``path``/``position``/
    ``what``; the log keeps offsets below ``damaged_from_offset``;
    ``acknowledged_end`` is the end of every valid batch found on disk
    (for damage in the log's last batch, a bound from its bytes; None if
    nothing is found after the damage); the damaged segment is cut at
    ``cut_position`` (None: the whole file goes aside) and the files
    ``move`` go aside whole."""

    path: Path
    position: int
    what: str
    damaged_from_offset: int
    acknowledged_end: int | None
    cut_segment: Path | None
    cut_position: int
    move: tuple[Path, ...]


def plan_damage_cut(directory: Path, index_interval_bytes: int) -> DamageCut | None:
    """Find the damage in the log ``directory`` and plan its removal; reads
    only. None if the log is not damaged in a way a cut repairs (a log-start
    checkpoint contradicting the segments is left to the operator). Raises
    ``CorruptLogMetadataError``, ``OSError``."""
    listing = list_log_directory(directory)
    bases = sorted(listing.log_bases)
    checkpoint = read_log_start_checkpoint(directory)
    if checkpoint is not None and bases and bases[0] > checkpoint:
        return None
    scan = scan_segments(directory, bases, index_interval_bytes)
    damage = scan.damage
    if damage is None:
        lost = lost_segment(directory, bases, listing.index_bases, checkpoint)
        if lost is None:
            return None
        # A segment file is gone, its index remains: the log ends where the
        # segments before it end, and what the lost one held is unknown.
        orphans = tuple(
            directory / f"{base:020d}{INDEX_SUFFIX}" for base in sorted(set(listing.index_bases) - set(bases))
        )
        return DamageCut(
            Path(lost.path), 0, lost.what, scan.verdict.end_offset, None, None, 0, orphans
        )
    damaged_path = Path(damage.path)
    damaged_base = int(damaged_path.name.split(".")[0])
    later = [base for base in bases if base > damaged_base]
    ends: list[int] = []
    if damaged_path.exists():
        data = damaged_path.read_bytes()
        ends += _valid_batch_ends(data, damage.position + 1, scan.verdict.end_offset)
        if not later and not ends:
            # Damage in the log's last batch (a whole batch, so not torn):
            # it may have been acknowledged, and its own header cannot be
            # trusted. Every record takes RECORD_HEADER_BYTES at least, so
            # the bytes from the damage to the end of the file bound the
            # offsets it held: an over-estimate, never an under-estimate.
            records = max(1, (len(data) - damage.position - BATCH_HEADER_BYTES) // RECORD_HEADER_BYTES)
            ends.append(scan.verdict.end_offset + records)
    for base in later:
        ends += _valid_batch_ends((directory / segment_file_name(base)).read_bytes(), 0, base)
    move: list[Path] = []
    for base in later:
        for suffix in (".log", INDEX_SUFFIX):
            path = directory / f"{base:020d}{suffix}"
            if path.exists():
                move.append(path)
    cut_segment = damaged_path if damaged_path.exists() else None
    return DamageCut(
        damaged_path,
        damage.position,
        damage.what,
        scan.verdict.end_offset,
        max(ends) if ends else None,
        cut_segment,
        damage.position,
        tuple(move),
    )


def _valid_batch_ends(data: bytes, start: int, min_base_offset: int) -> list[int]:
    """The next offset after every CRC-valid batch found in ``data`` from
    byte ``start`` on (skipping damage), as a bound of what was written."""
    ends = []
    position = find_valid_batch(data, start, min_base_offset, 0)
    while position is not None:
        try:
            header = parse_batch(data, position, len(data))
        except BatchProblem:  # find_valid_batch checked it; defensive
            break
        ends.append(header.next_offset)
        position = find_valid_batch(data, position + header.size, header.next_offset, header.epoch)
    return ends


def move_damage_aside(plan: DamageCut, aside: Path, *, fsync: bool) -> None:
    """Carry out ``plan``: copy the damaged segment whole into ``aside``
    (created), move the later files there, then cut the damaged segment at
    the damage. Each step is durable before the next; repeating a step
    after a crash is harmless. Raises ``OSError``."""
    aside.mkdir(exist_ok=True)
    if fsync:
        fsync_directory(aside.parent)
    if plan.cut_segment is not None:
        copy = aside / plan.cut_segment.name
        shutil.copyfile(plan.cut_segment, copy)
        if fsync:
            fd = os.open(copy, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for path in plan.move:
        os.replace(path, aside / path.name)
    if fsync:
        fsync_directory(aside)
        fsync_directory(plan.path.parent)
    if plan.cut_segment is not None:
        fd = os.open(plan.cut_segment, os.O_RDWR)
        try:
            os.ftruncate(fd, plan.cut_position)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


def read_repair_marker(data_dir: Path) -> RepairState | None:
    """The repair recorded in ``repairing.json``, or None. Raises
    ``CorruptLogMetadataError`` if the marker is damaged (the node refuses
    to start: it cannot tell how far it may have acknowledged)."""
    path = data_dir / REPAIR_MARKER_FILE_NAME
    try:
        document = read_checked_json(path, version=1)
        if document is None:
            return None
        damaged = document.get("damaged_from_offset")
        epoch = document.get("restart_epoch")
        end = document.get("acknowledged_end")
        for name, value in (("damaged_from_offset", damaged), ("restart_epoch", epoch)):
            if not is_plain_int(value) or value < 0:
                raise ValueError(f"bad {name} {value!r}")
        if end is not None and (not is_plain_int(end) or end < damaged):
            raise ValueError(f"bad acknowledged_end {end!r}")
    except ValueError as error:
        raise CorruptLogMetadataError(
            f"the repair marker {path} is damaged ({error}), so this node refuses to start: it cannot tell how "
            f"far it may have acknowledged; {REPAIR_ADVICE}.",
            reason=str(error),
        ) from None
    return RepairState(damaged_from_offset=damaged, restart_epoch=epoch, acknowledged_end=end)


def write_repair_marker(data_dir: Path, repair: RepairState, damage: Sequence[str], *, fsync: bool) -> None:
    """Durably record ``repair`` (and, for people, where the damage was)."""
    atomic_write(
        data_dir / REPAIR_MARKER_FILE_NAME,
        encode_checked_json(
            {
                "version": 1,
                "damaged_from_offset": repair.damaged_from_offset,
                "restart_epoch": repair.restart_epoch,
                "acknowledged_end": repair.acknowledged_end,
                "damage": list(damage),
            }
        ),
        fsync=fsync,
    )


def merge_repairs(earlier: RepairState | None, found: RepairState) -> RepairState:
    """A repair found while an earlier one is recorded (``RepairState.merged_with``)."""
    return found if earlier is None else earlier.merged_with(found)


def clear_repair_marker(data_dir: Path, *, fsync: bool) -> None:
    """Remove the marker durably (the repair is complete). Raises ``OSError``."""
    try:
        os.unlink(data_dir / REPAIR_MARKER_FILE_NAME)
    except FileNotFoundError:
        return
    if fsync:
        fsync_directory(data_dir)


def describe_damage(error: DamagedLogError) -> list[str]:
    return [error.path, str(error.position), error.what]
