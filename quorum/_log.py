"""The core's in-memory view of the replicated log.

The core holds the records from the log start offset (just behind the latest
snapshot, or 0) to the end. Durable storage mirrors it through the
persistence instructions in each ``Output``; on restart the runtime loads the
durable copy back into a ``MemoryLog``.

It enforces the two shapes every Raft log has (Raft thesis §3.5, Log
Matching): offsets are contiguous, and epochs never decrease along the log.
A violation is a ``ValueError``: the core only appends its own records or a
leader's records that ``quorum/wire`` has already checked for both.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from operator import itemgetter

from ._types import PER_BATCH_CHECK_MIN_RECORDS, Entry, OffsetAndEpoch, SnapshotId, one_epoch_columns

_DATA_OF = itemgetter(3)  # an Entry's data


class MemoryLog:
    """Records ``[start_offset, end_offset)`` plus an epoch index.

    ``start_epoch`` is the epoch of the record just before ``start_offset``
    (the snapshot's epoch), so ``epoch_at(start_offset - 1)`` is defined.
    """

    __slots__ = ("_entries", "_start_offset", "_start_epoch", "_epoch_starts", "_epoch_offsets")

    def __init__(self, start: SnapshotId | None = None, entries: Iterable[Entry] = ()) -> None:
        self._start_offset = start.end_offset if start else 0
        self._start_epoch = start.epoch if start else 0
        self._entries: list[Entry] = []
        # Epoch index ("leader epoch cache"): parallel lists of each epoch
        # present in the log and the offset of its first record.
        self._epoch_starts: list[int] = []
        self._epoch_offsets: list[int] = []
        self.append(list(entries))

    # -- queries ----------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The first offset held; everything below is in the snapshot."""
        return self._start_offset

    @property
    def start_epoch(self) -> int:
        """Epoch of the record just before ``start_offset`` (the snapshot's
        last), so that a fetcher at the log start can still be validated."""
        return self._start_epoch

    @property
    def end_offset(self) -> int:
        """One past the last record, as in Kafka."""
        return self._start_offset + len(self._entries)

    @property
    def last_epoch(self) -> int:
        """Epoch of the last record (the snapshot's, for an empty log): the
        first half of Raft's up-to-dateness comparison (§3.6.1)."""
        return self._entries[-1].epoch if self._entries else self._start_epoch

    @property
    def last(self) -> OffsetAndEpoch:
        """(epoch of the last record, end offset): Raft's up-to-dateness key."""
        return OffsetAndEpoch(self.last_epoch, self.end_offset)

    def __len__(self) -> int:
        return len(self._entries)

    def epoch_at(self, offset: int) -> int | None:
        """Epoch of the record at ``offset``; None when not held."""
        if offset == self._start_offset - 1:
            return self._start_epoch
        index = offset - self._start_offset
        if 0 <= index < len(self._entries):
            return self._entries[index].epoch
        return None

    def entry(self, offset: int) -> Entry | None:
        """The record at ``offset``; None when not held."""
        index = offset - self._start_offset
        if 0 <= index < len(self._entries):
            return self._entries[index]
        return None

    def slice(self, start: int, end: int | None = None, bytes_max: int | None = None) -> list[Entry]:
        """Records from ``start`` up to ``end`` (exclusive), at most about
        ``bytes_max`` of payload but always at least one record if any."""
        lo = max(0, start - self._start_offset)
        hi = len(self._entries) if end is None else max(lo, min(len(self._entries), end - self._start_offset))
        chunk = self._entries[lo:hi]
        if bytes_max is None:
            return chunk
        # Payload plus a rough per-record overhead, so that a flood of empty
        # records is bounded too.
        if len(chunk) >= PER_BATCH_CHECK_MIN_RECORDS:
            # No more than bytes_max // 16 records (at least one) can fit;
            # summed in C first, since all of them nearly always do.
            del chunk[max(1, bytes_max // 16) :]
            if sum(map(len, map(_DATA_OF, chunk))) + 16 * len(chunk) <= bytes_max:
                return chunk
        result: list[Entry] = []
        total = 0
        for entry in chunk:
            total += len(entry.data) + 16
            # At least one record, or a record larger than the limit would
            # stop replication for good.
            if result and total > bytes_max:
                break
            result.append(entry)
        return result

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch | None:
        """The largest epoch <= ``epoch`` in this log and the end offset of its
        records (KIP-595 / KIP-101 divergence detection).

        None when ``epoch`` predates the log start (is below ``start_epoch``):
        where such records end is covered by the snapshot and not known here.
        """
        if epoch < self._start_epoch:
            return None
        # A fetcher at or beyond our last epoch diverges, if at all, only by
        # being longer than us: our end is where its records must stop.
        if epoch >= self.last_epoch:
            return OffsetAndEpoch(self.last_epoch, self.end_offset)
        position = bisect.bisect_right(self._epoch_starts, epoch)
        if position == 0:
            # Older than every epoch we hold records of: the snapshot's.
            return OffsetAndEpoch(self._start_epoch, self._start_offset)
        found_epoch = self._epoch_starts[position - 1]
        # The records of found_epoch end where the next epoch begins.
        return OffsetAndEpoch(found_epoch, self._epoch_offsets[position])

    # -- mutations ----------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Append contiguous records; raises ``ValueError`` on a gap or an
        epoch going backwards."""
        expected = self.end_offset
        last_epoch = self.last_epoch
        if (
            len(entries) >= PER_BATCH_CHECK_MIN_RECORDS
            and (columns := one_epoch_columns(entries, expected)) is not None
            and columns[1][0] >= last_epoch
        ):
            # The common case, one epoch without a gap, checked per batch.
            epoch = columns[1][0]
            if not self._epoch_starts or self._epoch_starts[-1] != epoch:
                self._epoch_starts.append(epoch)
                self._epoch_offsets.append(expected)
            self._entries.extend(entries)
            return
        for entry in entries:
            if entry.offset != expected:
                raise ValueError(f"append at offset {entry.offset}, log ends at {expected}")
            if entry.epoch < last_epoch:
                raise ValueError(f"epoch {entry.epoch} after epoch {last_epoch} at offset {entry.offset}")
            # A new epoch starts here: index it for divergence checks.
            if not self._epoch_starts or self._epoch_starts[-1] != entry.epoch:
                self._epoch_starts.append(entry.epoch)
                self._epoch_offsets.append(entry.offset)
            self._entries.append(entry)
            expected += 1
            last_epoch = entry.epoch

    def truncate_to(self, end_offset: int) -> None:
        """Drop every record at or after ``end_offset``. Raises
        ``ValueError`` below the log start: those records are in the
        snapshot, hence committed, and must never be truncated."""
        if end_offset < self._start_offset:
            raise ValueError(f"cannot truncate to {end_offset}, below the log start {self._start_offset}")
        del self._entries[end_offset - self._start_offset :]
        # Epochs that began at or after the cut no longer exist here.
        while self._epoch_offsets and self._epoch_offsets[-1] >= end_offset:
            self._epoch_offsets.pop()
            self._epoch_starts.pop()

    def delete_before(self, offset: int, epoch_before: int) -> None:
        """Forget records below ``offset`` (they are covered by a snapshot);
        ``epoch_before`` is the epoch of the record at ``offset - 1``."""
        if offset <= self._start_offset:
            return
        drop = min(offset - self._start_offset, len(self._entries))
        del self._entries[:drop]
        self._start_offset = offset
        self._start_epoch = epoch_before
        self._cut_epoch_index()

    def reset(self, snapshot: SnapshotId) -> None:
        """Discard everything: the log now starts after ``snapshot``."""
        self._entries.clear()
        self._start_offset = snapshot.end_offset
        self._start_epoch = snapshot.epoch
        self._epoch_starts.clear()
        self._epoch_offsets.clear()

    def _cut_epoch_index(self) -> None:
        # Records were dropped from the front, up to the new log start:
        # epochs whose records are all gone leave the index, and the epoch
        # of the first record kept now begins at the log start. Patched, not
        # rebuilt: a rebuild read every record kept at each snapshot.
        if not self._entries:
            self._epoch_starts.clear()
            self._epoch_offsets.clear()
            return
        start = self._start_offset
        kept_from = max(0, bisect.bisect_right(self._epoch_offsets, start) - 1)
        del self._epoch_starts[:kept_from]
        del self._epoch_offsets[:kept_from]
        self._epoch_offsets[0] = start
