"""Helpers shared by the storage tests (imported by name: pytest puts this
directory on sys.path)."""

from __future__ import annotations

from pathlib import Path

from quorum._types import Entry, RecordKind
from quorum.storage import SegmentedLog


def make_entries(start: int, count: int, epoch: int = 1, size: int = 20, tag: str = "") -> list[Entry]:
    """``count`` DATA records from ``start``, each with distinct payload."""
    return [
        Entry(offset, epoch, RecordKind.DATA, (f"{tag}{offset}:".encode() * size)[:size])
        for offset in range(start, start + count)
    ]


def open_log(directory: Path, **options) -> SegmentedLog:
    options.setdefault("fsync", False)
    return SegmentedLog.open(directory, **options)


def all_entries(log) -> list[Entry]:
    return list(log.entries_from())


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def flip_bit(path: Path, byte_position: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[byte_position] ^= 1 << bit
    path.write_bytes(bytes(data))


def batch_spans(path: Path) -> list[tuple[int, int]]:
    """(start, end) byte positions of every batch in a healthy segment file."""
    from quorum.storage._format import parse_batch

    data = path.read_bytes()
    spans = []
    position = 0
    while position < len(data):
        header = parse_batch(data, position, len(data))
        spans.append((position, position + header.size))
        position += header.size
    return spans
