"""In-memory storage with the same contract as the file storage, for the
deterministic simulator.

It models the one thing about disks the protocol depends on: what survives
a crash. Log appends are *volatile* until ``flush``; ``crash()`` drops the
volatile tail (or keeps a given number of its records, to model a partial
write reaching the platter). Everything else is durable when the call
returns, exactly as in the file version: ``truncate_to`` (which fsyncs, and
so also makes earlier appends durable), ``delete_before``/``reset``,
election state and snapshot writes (atomic + fsync on files). A snapshot
transfer in progress is lost on a crash, like a ``.part`` file.

Nothing here reads a clock or uses randomness.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .._types import ElectionState, Entry, SnapshotId
from ._election import check_election_transition
from ._errors import CorruptSnapshotError, SnapshotNotFoundError
from ._format import (
    RECORD_HEADER_BYTES,
    check_append,
    decode_snapshot,
    encode_snapshot,
    parse_snapshot_header,
)
from ._segments import DEFAULT_READ_BYTES_MAX


class MemoryLogStore:
    """The log, in memory, with a durable prefix and a volatile tail."""

    def __init__(self, base: SnapshotId | None = None) -> None:
        self._start = base.end_offset if base is not None else 0
        self._base_epoch = base.epoch if base is not None else 0
        self._entries: list[Entry] = []
        self._durable_count = 0  # records from the start that survive a crash
        self._closed = False

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._start + len(self._entries)

    @property
    def last_epoch(self) -> int:
        """Epoch of the last record, or of the record before the log start."""
        return self._entries[-1].epoch if self._entries else self._base_epoch

    @property
    def unsynced_count(self) -> int:
        """Records appended since the last flush (lost by ``crash()``)."""
        return len(self._entries) - self._durable_count

    @property
    def durable_end_offset(self) -> int:
        return self._start + self._durable_count

    def append(self, entries: Sequence[Entry]) -> None:
        """Same contract as ``SegmentedLog.append``: raises ``ValueError`` or
        ``TypeError`` (nothing appended) on bad entries."""
        self._check_open()
        check_append(entries, self.end_offset, self.last_epoch)
        self._entries.extend(entries)

    def flush(self) -> None:
        self._check_open()
        self._durable_count = len(self._entries)

    def truncate_to(self, end_offset: int) -> None:
        """Same contract as ``SegmentedLog.truncate_to``; durable at once."""
        self._check_open()
        if end_offset >= self.end_offset:
            return
        if end_offset < self._start:
            raise ValueError(f"truncate_to({end_offset}) is below the log start offset {self._start}")
        del self._entries[end_offset - self._start :]
        self._durable_count = len(self._entries)

    def delete_before(self, offset: int, *, epoch_before: int | None = None) -> None:
        """Drop the records below ``offset`` (exactly: there are no segments
        here). Past the end, the log restarts empty at ``offset``; see
        ``SegmentedLog.delete_before`` for ``epoch_before``."""
        self._check_open()
        if offset <= self._start:
            return
        if offset >= self.end_offset:
            if epoch_before is not None:
                self._base_epoch = epoch_before
            elif offset == self.end_offset:
                self._base_epoch = self.last_epoch
            else:
                self._base_epoch = 0
            self._entries.clear()
            self._durable_count = 0
            self._start = offset
            return
        drop = offset - self._start
        self._base_epoch = self._entries[drop - 1].epoch
        del self._entries[:drop]
        self._durable_count = max(0, self._durable_count - drop)
        self._start = offset

    def reset(self, snapshot_id: SnapshotId) -> None:
        """Same contract as ``SegmentedLog.reset``."""
        self._check_open()
        if snapshot_id.end_offset < self._start:
            raise ValueError(f"snapshot {snapshot_id} ends before the log start offset {self._start}")
        self._entries.clear()
        self._durable_count = 0
        self._start = snapshot_id.end_offset
        self._base_epoch = snapshot_id.epoch

    def read(self, start_offset: int, max_bytes: int = DEFAULT_READ_BYTES_MAX) -> list[Entry]:
        """Same contract as ``SegmentedLog.read`` (the same size accounting;
        no segment boundaries). Raises ``ValueError`` out of range."""
        self._check_open()
        if not self._start <= start_offset <= self.end_offset:
            raise ValueError(f"offset {start_offset} is outside the log [{self._start}, {self.end_offset})")
        result: list[Entry] = []
        total = 0
        for entry in self._entries[start_offset - self._start :]:
            total += RECORD_HEADER_BYTES + len(entry.data)
            if result and total > max_bytes:
                break
            result.append(entry)
            if total >= max_bytes:
                break
        return result

    def entries_from(self, start_offset: int | None = None) -> Iterator[Entry]:
        start = self._start if start_offset is None else start_offset
        if not self._start <= start <= self.end_offset:
            raise ValueError(f"offset {start} is outside the log [{self._start}, {self.end_offset})")
        return iter(self._entries[start - self._start :])

    def crash(self, keep_unsynced_records: int = 0) -> None:
        """Lose the volatile tail, keeping its first ``keep_unsynced_records``
        records (a crash may persist part of an unsynced write, always a
        prefix once recovery has cut the torn batch)."""
        keep = self._durable_count + max(0, keep_unsynced_records)
        del self._entries[keep:]
        self._durable_count = len(self._entries)
        self._closed = False

    def close(self) -> None:
        self._closed = True

    def reopen(self) -> None:
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the in-memory log is closed")


class MemoryElectionState:
    """Election state, durable as soon as written."""

    def __init__(self) -> None:
        self._state: ElectionState | None = None

    def read(self) -> ElectionState | None:
        return self._state

    def write(self, state: ElectionState) -> None:
        """Raises ``ValueError`` like ``ElectionStateFile.write``."""
        check_election_transition(self._state, state)
        self._state = state


class MemorySnapshotStore:
    """Snapshots held as the same file bytes the file store writes, so that
    chunks are interchangeable between the two."""

    def __init__(self) -> None:
        self._files: dict[SnapshotId, bytes] = {}
        self._writers: dict[SnapshotId, MemorySnapshotWriter] = {}

    def list(self) -> list[SnapshotId]:
        return sorted(self._files, key=lambda i: (i.end_offset, i.epoch))

    def latest(self) -> SnapshotId | None:
        ids = self.list()
        return ids[-1] if ids else None

    def write(self, snapshot_id: SnapshotId, data: bytes) -> None:
        if snapshot_id.end_offset < 0 or snapshot_id.epoch < 0:
            raise ValueError(f"bad snapshot id {snapshot_id}")
        self._files[snapshot_id] = encode_snapshot(snapshot_id, bytes(data))

    def read(self, snapshot_id: SnapshotId) -> bytes:
        """Raises ``SnapshotNotFoundError``."""
        return decode_snapshot(self._file(snapshot_id))[1]

    def size(self, snapshot_id: SnapshotId) -> int:
        return len(self._file(snapshot_id))

    def read_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        """Same contract as ``SnapshotStore.read_chunk``."""
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        raw = self._file(snapshot_id)
        if not 0 <= position <= len(raw):
            raise ValueError(f"position {position} is outside snapshot {snapshot_id} of {len(raw)} bytes")
        return raw[position : position + max_bytes]

    def writer(self, snapshot_id: SnapshotId) -> MemorySnapshotWriter:
        previous = self._writers.pop(snapshot_id, None)
        if previous is not None:
            previous.abort()
        writer = MemorySnapshotWriter(self, snapshot_id)
        self._writers[snapshot_id] = writer
        return writer

    def delete(self, snapshot_id: SnapshotId) -> bool:
        return self._files.pop(snapshot_id, None) is not None

    def delete_older_than(self, snapshot_id: SnapshotId) -> list[SnapshotId]:
        removed = [old for old in self.list() if old.end_offset < snapshot_id.end_offset]
        for old in removed:
            del self._files[old]
        return removed

    def crash(self) -> None:
        """Unfinished transfers are lost (like ``.part`` files)."""
        for writer in list(self._writers.values()):
            writer.abort()

    def close(self) -> None:
        self.crash()

    def _file(self, snapshot_id: SnapshotId) -> bytes:
        try:
            return self._files[snapshot_id]
        except KeyError:
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id}") from None


class MemorySnapshotWriter:
    """Same contract as ``SnapshotWriter``."""

    def __init__(self, store: MemorySnapshotStore, snapshot_id: SnapshotId) -> None:
        self._store = store
        self.snapshot_id = snapshot_id
        self._chunks: list[bytes] = []
        self._position = 0
        self._done = False

    @property
    def position(self) -> int:
        return self._position

    def append(self, position: int, chunk: bytes) -> None:
        if self._done:
            raise ValueError(f"snapshot writer for {self.snapshot_id} is already finished or aborted")
        if position != self._position:
            raise ValueError(
                f"snapshot {self.snapshot_id}: chunk at byte {position}, but {self._position} bytes were received"
            )
        self._chunks.append(bytes(chunk))
        self._position += len(chunk)

    def finish(self) -> SnapshotId:
        if self._done:
            raise ValueError(f"snapshot writer for {self.snapshot_id} is already finished or aborted")
        raw = b"".join(self._chunks)
        try:
            header = parse_snapshot_header(raw)
            if header.snapshot_id != self.snapshot_id:
                raise ValueError(f"the header says {header.snapshot_id}")
            decode_snapshot(raw)
        except ValueError as error:
            self.abort()
            raise CorruptSnapshotError(f"received snapshot {self.snapshot_id} is damaged: {error}") from None
        self._done = True
        self._forget()
        self._store._files[self.snapshot_id] = raw
        return self.snapshot_id

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._chunks.clear()
        self._forget()

    def _forget(self) -> None:
        if self._store._writers.get(self.snapshot_id) is self:
            del self._store._writers[self.snapshot_id]

    def __enter__(self) -> MemorySnapshotWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.abort()
