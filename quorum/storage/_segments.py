"""An append-only segmented log on local files.

Layout of a log directory::

    00000000000000000000.log     batches for offsets 0 .. (next base - 1)
    00000000000000000000.index   sparse offset index of that segment
    00000000000000001234.log     the next segment starts at offset 1234
    00000000000000001234.index
    log-start-offset.json        where the log starts after deletions behind
                                 a snapshot (absent until the first one)
    00000000000000001234.rewrite transient: redo record of a mid-batch
                                 truncation (see ``truncate_to``)

A segment file is a sequence of batches (format in ``_format``). Its name is
its base offset, zero-padded to 20 digits, so a directory listing sorts in
log order. The last segment is the *active* one; a new one is rolled when
the next batch would push the active segment past ``segment_bytes_max``.

The ``.index`` file holds big-endian ``(u64 offset, u64 byte position)``
pairs: the first batch at or after every ``index_interval_bytes`` of the
segment (position 0 is implicit). It is an optimisation, written without
fsync; the log is the truth, and recovery rebuilds any index that does not
match the batches it scanned.

Recovery (``SegmentedLog.open``) validates every batch of every segment:
frame, CRC, format version, record framing, offsets contiguous within and
across segments, epochs never decreasing. It tells a torn tail from damage
(``scan_segments``; docs/storage.md, "Torn tail or damage"): only a bad
batch in the active segment with no valid batch after it is a torn write,
which is cut (ftruncate + fsync) with a WARNING. Anything else is damage:
``DamagedLogError`` is raised before anything is modified, since what
follows damaged data may be acknowledged records (Protocol-Aware Recovery,
Alagappan et al., FAST '18). ``SegmentedLog.recovery`` says what was found.

Crash-safety of the mutations:

* ``append`` writes whole batches with one ``write`` per segment touched;
  a crash leaves a torn tail, which recovery cuts. A segment is fsynced
  before the next one is created, so only the active segment can be torn.
* ``truncate_to`` removes the later segments first, newest first, each
  removal durable before the next, then cuts the segment holding the new
  end: a crash part-way leaves a shorter log, never a gap.
  Cutting in the middle of a batch rewrites the surviving prefix of that
  batch with a fresh CRC; so that a crash cannot lose that prefix (which may
  be acknowledged), the new batch is first written durably to a
  ``.rewrite`` redo file that recovery replays.
* ``delete_before`` records the new log start durably in
  ``log-start-offset.json`` before unlinking, so that segments whose
  deletion was not yet durable cannot come back as live records.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add
from pathlib import Path

from .._types import PER_BATCH_CHECK_MIN_RECORDS, Entry, SnapshotId, one_epoch_columns
from ._errors import REPAIR_ADVICE, CorruptLogMetadataError, CorruptRecordError, DamagedLogError, LogFailedError
from ._files import (
    atomic_write,
    data_sync,
    encode_checked_json,
    fsync_directory,
    is_plain_int,
    read_checked_json,
    write_all,
)
from ._format import (
    BATCH_HEADER_BYTES,
    CORRUPT,
    TORN,
    FORMAT_VERSION,
    KINDS,
    MIN_BATCH_LENGTH,
    RECORD_HEADER_BYTES,
    U32_MAX,
    U64_MAX,
    BatchHeader,
    BatchProblem,
    decode_records,
    encode_batch,
    is_decimal,
    parse_batch,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
REWRITE_SUFFIX = ".rewrite"
CHECKPOINT_FILE_NAME = "log-start-offset.json"

DEFAULT_SEGMENT_BYTES_MAX = 64 * 1024 * 1024
DEFAULT_INDEX_INTERVAL_BYTES = 4096
# A long append is split into batches of about this size, so that one read
# (which returns whole batches' worth of records) stays bounded.
DEFAULT_BATCH_BYTES_MAX = 1024 * 1024
DEFAULT_READ_BYTES_MAX = 1024 * 1024

_INDEX_ENTRY = struct.Struct(">QQ")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_REWRITE_HEAD = struct.Struct(">IQ")  # crc32 of the rest, byte position
_READ_CHUNK_BYTES = 256 * 1024

_default_logger = logging.getLogger("pykraft.storage")


def segment_file_name(base_offset: int) -> str:
    """``<base_offset:020>.log``."""
    return f"{base_offset:020d}{LOG_SUFFIX}"


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What retention needs to know about one segment."""

    base_offset: int
    end_offset: int
    size_bytes: int
    modified_ms: int
    path: Path


class _Segment:
    __slots__ = (
        "base_offset",
        "end_offset",
        "size_bytes",
        "last_epoch",
        "index_offsets",
        "index_positions",
        "path",
        "index_path",
        "rewrite_path",
    )

    def __init__(self, directory: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.end_offset = base_offset
        self.size_bytes = 0
        self.last_epoch: int | None = None  # None while empty
        self.index_offsets: list[int] = []
        self.index_positions: list[int] = []
        stem = f"{base_offset:020d}"
        self.path = directory / (stem + LOG_SUFFIX)
        self.index_path = directory / (stem + INDEX_SUFFIX)
        self.rewrite_path = directory / (stem + REWRITE_SUFFIX)

    def note_batch(self, position: int, base_offset: int, interval_bytes: int) -> bool:
        """Index the batch at ``position`` if the policy says so (the first
        batch at least ``interval_bytes`` after the last indexed one). The
        policy depends only on batch positions, so recovery can recompute the
        exact index a healthy segment should have."""
        last = self.index_positions[-1] if self.index_positions else 0
        if position - last >= interval_bytes:
            self.index_offsets.append(base_offset)
            self.index_positions.append(position)
            return True
        return False

    def floor(self, offset: int) -> tuple[int, int]:
        """(base offset, byte position) of the last indexed batch starting at
        or before ``offset``; the segment start when none is."""
        i = bisect.bisect_right(self.index_offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.index_offsets[i], self.index_positions[i]

    def drop_index_from(self, position: int) -> None:
        keep = bisect.bisect_left(self.index_positions, position)
        del self.index_offsets[keep:]
        del self.index_positions[keep:]

    def index_bytes(self) -> bytes:
        pack = _INDEX_ENTRY.pack
        return b"".join(pack(o, p) for o, p in zip(self.index_offsets, self.index_positions))


class _BatchReader:
    """Reads the batches of one segment file sequentially through a buffer
    (a few large ``pread`` calls rather than two per batch)."""

    __slots__ = ("_fd", "position", "_limit", "_chunk_bytes", "_buf", "_buf_start")

    def __init__(self, fd: int, position: int, limit: int, chunk_bytes: int = _READ_CHUNK_BYTES) -> None:
        self._fd = fd
        self.position = position
        self._limit = limit
        self._chunk_bytes = chunk_bytes
        self._buf = b""
        self._buf_start = position

    def _ensure(self, need: int) -> int:
        """Make the buffer hold ``min(need, limit - position)`` bytes from
        ``position`` (fewer if the file is shorter); return the relative
        position in the buffer."""
        rel = self.position - self._buf_start
        remaining = self._limit - self.position
        want = min(need, remaining)
        if len(self._buf) - rel < want:
            size = min(max(want, self._chunk_bytes), remaining)
            self._buf = os.pread(self._fd, size, self.position)
            self._buf_start = self.position
            rel = 0
        return rel

    def next(self) -> tuple[int, BatchHeader, bytes, int] | None:
        """(file position, header, buffer, position in buffer) of the next
        batch, or None at the limit. Raises ``BatchProblem``."""
        if self.position >= self._limit:
            return None
        rel = self._ensure(4)
        if len(self._buf) - rel >= 4:
            (length,) = _U32.unpack_from(self._buf, rel)
            if length >= MIN_BATCH_LENGTH:
                rel = self._ensure(4 + length)
        end_in_buf = rel + min(len(self._buf) - rel, self._limit - self.position)
        header = parse_batch(self._buf, rel, end_in_buf)
        position = self.position
        self.position += header.size
        return position, header, self._buf, rel


class SegmentedLog:
    """The durable replicated log: segments of CRC-framed batches.

    Not safe for concurrent use by several threads without the internal lock
    (every public method takes it, so concurrent calls are serialised; an
    ``entries_from`` iterator must not be interleaved with mutations).
    """

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes_max: int,
        index_interval_bytes: int,
        batch_bytes_max: int,
        fsync: bool,
        logger: logging.Logger | None,
    ) -> None:
        """Use ``SegmentedLog.open``."""
        if segment_bytes_max <= 0 or index_interval_bytes <= 0 or batch_bytes_max <= 0:
            raise ValueError("segment_bytes_max, index_interval_bytes and batch_bytes_max must be positive")
        self._directory = directory
        self._segment_bytes_max = segment_bytes_max
        self._index_interval_bytes = index_interval_bytes
        self._batch_bytes_max = batch_bytes_max
        self._fsync = fsync
        self._logger = logger or _default_logger
        self._segments: list[_Segment] = []
        self._bases: list[int] = []
        self._active_fd = -1
        self._active_index_fd = -1
        self._dir_fd = -1
        self._active_dirty = False
        self._dir_dirty = False
        self._base_epoch = 0
        self._failure: str | None = None
        self._closed = False
        self._lock = threading.RLock()
        # What recovery found at open: sound, or a torn tail it cut.
        self.recovery = LogVerdict(0)

    # -- opening and recovery -------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path | str,
        *,
        segment_bytes_max: int = DEFAULT_SEGMENT_BYTES_MAX,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        batch_bytes_max: int = DEFAULT_BATCH_BYTES_MAX,
        fsync: bool = True,
        base: SnapshotId | None = None,
        logger: logging.Logger | None = None,
    ) -> SegmentedLog:
        """Open (creating if needed) the log in ``directory`` and recover it.

        Every batch is validated; a torn tail is cut with a WARNING, and
        ``recovery`` says what was found (see the module docstring). ``base``
        is the latest snapshot, if any: it gives ``last_epoch`` for an empty
        log, and the start offset of a log directory with no segment at all.
        ``fsync=False`` skips every fsync (benchmarks, tests): nothing is
        then durable across a power loss.

        Raises ``DamagedLogError`` if the log is damaged rather than torn
        (nothing is modified then), ``CorruptLogMetadataError`` if the
        log-start checkpoint is damaged, ``OSError`` on I/O failure,
        ``ValueError`` on bad sizes.
        """
        log = cls(
            Path(directory),
            segment_bytes_max=segment_bytes_max,
            index_interval_bytes=index_interval_bytes,
            batch_bytes_max=batch_bytes_max,
            fsync=fsync,
            logger=logger,
        )
        try:
            log._recover(base)
        except BaseException:
            log._close_fds()
            raise
        return log

    def _recover(self, base: SnapshotId | None) -> None:
        directory = self._directory
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            if self._fsync:
                fsync_directory(directory.parent)
        self._dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        self._base_epoch = base.epoch if base is not None else 0

        listing = list_log_directory(directory)
        for name in listing.temporary:
            self._logger.info("%s: removing the leftover temporary file %s", directory, name)
            self._unlink(directory / name)
        for name in listing.unexpected:
            self._logger.warning("%s: ignoring unexpected file %s", directory, name)
        log_bases = list(listing.log_bases)
        index_bases = set(listing.index_bases)
        rewrites = listing.rewrites

        checkpoint = read_log_start_checkpoint(directory)
        for segment_base in rewrites:
            self._replay_rewrite(segment_base, segment_base in log_bases)
        log_bases.sort()
        if checkpoint is not None:
            # Finish an interrupted delete_before: everything wholly below the
            # recorded log start is already covered by a snapshot.
            while len(log_bases) >= 2 and log_bases[1] <= checkpoint:
                doomed = log_bases.pop(0)
                self._logger.info(
                    "%s: removing %s, wholly below the log start offset %d (an interrupted deletion)",
                    directory,
                    segment_file_name(doomed),
                    checkpoint,
                )
                self._remove_files(_Segment(directory, doomed))

        if checkpoint is not None and log_bases and log_bases[0] > checkpoint:
            first = self._directory / segment_file_name(log_bases[0])
            raise DamagedLogError(
                str(first), 0, f"the log start checkpoint says offset {checkpoint} but the first segment starts at "
                f"offset {log_bases[0]}: a segment is missing"
            )
        lost = lost_segment(directory, log_bases, index_bases, checkpoint)
        if lost is not None:
            raise lost
        scan = scan_segments(directory, log_bases, self._index_interval_bytes)
        if scan.damage is not None:
            raise scan.damage
        self._segments = scan.segments
        self._bases = [segment.base_offset for segment in scan.segments]
        self.recovery = scan.verdict
        if scan.verdict.torn:
            torn = scan.verdict
            self._logger.warning(
                "%s: torn tail: truncating at byte %d of %d (%s); offsets from %d on are cut (%d bytes%s)",
                torn.path,
                torn.position,
                torn.file_bytes,
                torn.reason,
                torn.first_offset_cut,
                torn.file_bytes - torn.position,
                torn.claimed,
            )
            fd = os.open(torn.path, os.O_RDWR)
            try:
                os.ftruncate(fd, torn.position)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        for orphan in sorted(index_bases - set(log_bases)):
            self._unlink(directory / f"{orphan:020d}{INDEX_SUFFIX}")
        for segment in self._segments:
            self._check_index(segment)

        if checkpoint is not None and self._segments:
            last = self._segments[-1]
            if last.base_offset < checkpoint and last.end_offset <= checkpoint:
                # Interrupted delete_before/reset past the end: nothing survives.
                for segment in self._segments:
                    self._logger.info(
                        "%s: removing %s, wholly below the log start offset %d (an interrupted deletion)",
                        directory,
                        segment.path.name,
                        checkpoint,
                    )
                    self._remove_files(segment)
                self._segments.clear()
                self._bases.clear()

        if not self._segments:
            start = checkpoint if checkpoint is not None else (base.end_offset if base is not None else 0)
            self._create_segment(start)
            self.recovery = LogVerdict(start)
        else:
            active = self._segments[-1]
            flags = os.O_RDWR | os.O_APPEND
            self._active_fd = os.open(active.path, flags)
            self._active_index_fd = os.open(active.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _write_checkpoint(self, log_start_offset: int) -> None:
        atomic_write(
            self._directory / CHECKPOINT_FILE_NAME,
            encode_checked_json({"version": 1, "log_start_offset": log_start_offset}),
            fsync=self._fsync,
        )

    def _check_index(self, segment: _Segment) -> None:
        wanted = segment.index_bytes()
        try:
            actual: bytes | None = segment.index_path.read_bytes()
        except FileNotFoundError:
            actual = None
        if actual == wanted:
            return
        self._logger.info(
            "%s: %s; rebuilding it (%d entries)",
            segment.index_path,
            "missing" if actual is None else "does not match the log",
            len(segment.index_offsets),
        )
        fd = os.open(segment.index_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, wanted)
        finally:
            os.close(fd)

    def _replay_rewrite(self, segment_base: int, segment_exists: bool) -> None:
        segment = _Segment(self._directory, segment_base)
        redo = parse_rewrite(segment.rewrite_path.read_bytes())
        valid = redo is not None
        position, batch = redo if redo is not None else (-1, b"")
        if not valid or not segment_exists:
            # The redo record itself was torn: the segment was not touched yet.
            self._logger.info("%s: discarding an incomplete truncation record", segment.rewrite_path)
        else:
            size = segment.path.stat().st_size
            if size < position:
                self._logger.warning(
                    "%s: discarding a truncation record for byte %d: the segment is only %d bytes",
                    segment.rewrite_path,
                    position,
                    size,
                )
            else:
                fd = os.open(segment.path, os.O_RDWR | os.O_APPEND)
                try:
                    os.ftruncate(fd, position)
                    write_all(fd, batch)
                    if self._fsync:
                        data_sync(fd)
                finally:
                    os.close(fd)
                self._logger.warning(
                    "%s: completed an interrupted truncation: rewrote the batch at byte %d "
                    "(%d bytes) and cut everything after it",
                    segment.path,
                    position,
                    len(batch),
                )
        self._unlink(segment.rewrite_path)
        if self._fsync:
            os.fsync(self._dir_fd)

    # -- properties -------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def log_start_offset(self) -> int:
        """Offset of the first record held (the first segment's base)."""
        return self._segments[0].base_offset

    @property
    def end_offset(self) -> int:
        """One past the last record."""
        return self._segments[-1].end_offset

    @property
    def last_epoch(self) -> int:
        """Epoch of the last record; when the log is empty, the epoch of the
        record just before it (the ``base`` snapshot's, or what
        ``delete_before``/``reset`` recorded), else 0."""
        for segment in reversed(self._segments):
            if segment.last_epoch is not None:
                return segment.last_epoch
        return self._base_epoch

    @property
    def fsync_enabled(self) -> bool:
        return self._fsync

    def segment_infos(self) -> list[SegmentInfo]:
        """One ``SegmentInfo`` per segment, oldest first (for retention).
        Raises ``OSError``."""
        with self._lock:
            infos = []
            for segment in self._segments:
                modified_ms = os.stat(segment.path).st_mtime_ns // 1_000_000
                infos.append(
                    SegmentInfo(segment.base_offset, segment.end_offset, segment.size_bytes, modified_ms, segment.path)
                )
            return infos

    # -- writes -----------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Append ``entries`` (contiguous, starting at ``end_offset``, epochs
        never decreasing, not below ``last_epoch``) as one or more batches: a
        new batch whenever the epoch changes or a batch reaches
        ``batch_bytes_max``. One ``write`` per segment touched. Not durable
        until ``flush``.

        Raises ``ValueError``/``TypeError`` on bad entries (nothing is
        written then), ``OSError`` on I/O failure (the log then holds a
        prefix of ``entries``: check ``end_offset``), ``LogFailedError`` if
        an earlier failure could not be rolled back.
        """
        if not entries:
            return
        with self._lock:
            self._check_usable()
            batches = self._build_batches(entries)
            pending: list[tuple[bytes, int, int, int]] = []
            pending_bytes = 0
            active_size = self._segments[-1].size_bytes
            for batch in batches:
                size = len(batch[0])
                used = active_size + pending_bytes
                if used > 0 and used + size > self._segment_bytes_max:
                    if pending:
                        self._write_active(pending)
                        pending = []
                        pending_bytes = 0
                    self._roll()
                    active_size = 0
                pending.append(batch)
                pending_bytes += size
            self._write_active(pending)

    def _build_batches(self, entries: Sequence[Entry]) -> list[tuple[bytes, int, int, int]]:
        """Validate everything, then frame: [(bytes, base, epoch, count)]."""
        expected = self.end_offset
        last_epoch = self.last_epoch
        limit = self._batch_bytes_max
        runs = self._one_epoch_runs(entries, expected, last_epoch) if len(entries) >= PER_BATCH_CHECK_MIN_RECORDS else None
        if runs is not None:
            base = entries[0].offset
            return [
                (encode_batch(base + start, epoch, entries[start:stop]), base + start, epoch, stop - start)
                for start, stop, epoch in runs
            ]
        kinds = KINDS
        runs: list[tuple[int, int, int]] = []  # (start index, stop index, epoch)
        run_start = 0
        run_epoch = -1
        run_bytes = 0
        for i, entry in enumerate(entries):
            if entry.offset != expected:
                raise ValueError(f"append: entry at offset {entry.offset} where offset {expected} was expected")
            epoch = entry.epoch
            if epoch != run_epoch:
                if epoch < last_epoch:
                    raise ValueError(f"append: epoch {epoch} at offset {entry.offset} after epoch {last_epoch}")
                if epoch > U32_MAX:
                    raise ValueError(f"append: epoch {epoch} does not fit in 32 bits")
                if i > run_start:
                    runs.append((run_start, i, run_epoch))
                run_start = i
                run_epoch = last_epoch = epoch
                run_bytes = 0
            if entry.kind not in kinds:
                raise ValueError(f"append: unknown record kind {entry.kind!r} at offset {entry.offset}")
            data = entry.data
            if not isinstance(data, bytes):
                raise TypeError(f"append: data at offset {entry.offset} is {type(data).__name__}, not bytes")
            size = RECORD_HEADER_BYTES + len(data)
            if size - RECORD_HEADER_BYTES > U32_MAX:
                raise ValueError(f"append: record at offset {entry.offset} is larger than 4 GiB")
            if run_bytes and run_bytes + size > limit:
                runs.append((run_start, i, run_epoch))
                run_start = i
                run_bytes = 0
            run_bytes += size
            expected += 1
        runs.append((run_start, len(entries), run_epoch))
        base = entries[0].offset
        batches = []
        for start, stop, epoch in runs:
            chunk = entries[start:stop]
            batches.append((encode_batch(base + start, epoch, chunk), base + start, epoch, stop - start))
        return batches

    def _one_epoch_runs(self, entries: Sequence[Entry], expected: int, last_epoch: int) -> list[tuple[int, int, int]] | None:
        """The runs ``(start index, stop index, epoch)`` the loop of
        ``_build_batches`` makes, for entries of one epoch from ``expected``
        on without a gap, of known kinds and bytes data (nearly every append:
        a proposal, a Fetch answer), checked and split by the batch size
        limit over the whole batch in C instead of a record at a time (~3 ms
        of each node's commit of a 10,001-record batch). None for anything
        else: the loop then accepts it or says what is wrong."""
        columns = one_epoch_columns(entries, expected)
        if columns is None:
            return None
        _, epochs, kinds, datas = columns
        epoch = epochs[0]
        if not (last_epoch <= epoch <= U32_MAX and set(kinds).issubset(KINDS) and set(map(type, datas)) == {bytes}):
            return None
        # Where each record ends, counting from the first, header included.
        ends = list(accumulate(map(add, map(len, datas), repeat(RECORD_HEADER_BYTES))))
        if ends[-1] > U32_MAX and max(map(len, datas)) > U32_MAX:
            return None  # a record over 4 GiB: the loop says so
        limit = self._batch_bytes_max
        runs: list[tuple[int, int, int]] = []
        start, start_bytes = 0, 0
        while start < len(ends):
            # As the loop: a run takes records while they fit in the limit,
            # and always at least one.
            stop = max(start + 1, bisect.bisect_right(ends, start_bytes + limit, start))
            runs.append((start, stop, epoch))
            start, start_bytes = stop, ends[stop - 1]
        return runs

    def _write_active(self, pending: list[tuple[bytes, int, int, int]]) -> None:
        segment = self._segments[-1]
        data = pending[0][0] if len(pending) == 1 else b"".join(batch[0] for batch in pending)
        old_size = segment.size_bytes
        try:
            write_all(self._active_fd, data)
        except OSError as error:
            self._roll_back_write(segment, old_size, error)
            raise
        self._active_dirty = True
        position = old_size
        new_index: list[bytes] = []
        interval = self._index_interval_bytes
        for batch, base, epoch, count in pending:
            if segment.note_batch(position, base, interval):
                new_index.append(_INDEX_ENTRY.pack(base, position))
            position += len(batch)
        last = pending[-1]
        segment.size_bytes = position
        segment.end_offset = last[1] + last[3]
        segment.last_epoch = last[2]
        if new_index:
            try:
                write_all(self._active_index_fd, b"".join(new_index))
            except OSError as error:
                # The in-memory index is right; the file will be rebuilt.
                self._logger.warning("%s: could not extend the index: %s", segment.index_path, error)

    def _roll_back_write(self, segment: _Segment, old_size: int, error: OSError) -> None:
        try:
            os.ftruncate(self._active_fd, old_size)
        except OSError as second:
            self._failure = f"a write to {segment.path} failed ({error}) and could not be rolled back ({second})"
            self._logger.error("%s", self._failure)

    def _create_segment(self, base_offset: int) -> None:
        segment = _Segment(self._directory, base_offset)
        fd = os.open(segment.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            index_fd = os.open(segment.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        except BaseException:
            os.close(fd)
            raise
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._active_fd = fd
        self._active_index_fd = index_fd
        self._active_dirty = False
        self._dir_dirty = True

    def _roll(self) -> None:
        old = self._segments[-1]
        old_fd, old_index_fd, old_dirty = self._active_fd, self._active_index_fd, self._active_dirty
        if old_dirty and self._fsync:
            # A segment is sealed durably before the next one exists, so
            # after any crash every sealed segment is whole: a bad batch in a
            # sealed segment is damage, never a torn write.
            try:
                data_sync(old_fd)
            except OSError as error:
                self._failure = f"fsync of {old.path} failed: {error}"
                raise
        # Create first: if that fails, the old segment simply stays active.
        self._create_segment(old.end_offset)
        os.close(old_fd)
        os.close(old_index_fd)
        self._logger.debug("%s: rolled to %s", self._directory, self._segments[-1].path.name)

    def flush(self) -> None:
        """Make every appended record durable: fdatasync each segment written
        since the last flush, then the directory if segments were created or
        removed. One call per append round (group commit), not per record.

        Raises ``OSError``; after a failed fsync the log is marked failed
        (``LogFailedError`` from then on), since the kernel may have dropped
        the unwritten pages and a later "successful" fsync would lie.
        """
        with self._lock:
            self._check_usable()
            self._sync_data()
            if self._dir_dirty:
                if self._fsync:
                    try:
                        os.fsync(self._dir_fd)
                    except OSError as error:
                        self._failure = f"fsync of {self._directory} failed: {error}"
                        raise
                self._dir_dirty = False

    def _sync_data(self) -> None:
        try:
            if self._active_dirty:
                if self._fsync:
                    data_sync(self._active_fd)
                self._active_dirty = False
        except OSError as error:
            self._failure = f"fsync failed in {self._directory}: {error}"
            raise

    def truncate_to(self, end_offset: int) -> None:
        """Drop every record at or after ``end_offset``; durable on return.

        A no-op when ``end_offset >= self.end_offset``. Cutting inside a
        batch rewrites the surviving prefix as a new batch with a fresh CRC
        (crash-safe through a redo file). Everything appended before the call
        is made durable too.

        Raises ``ValueError`` if ``end_offset`` is below the log start,
        ``CorruptRecordError`` if the batch to cut fails its CRC, ``OSError``
        on I/O failure (the log is then marked failed; reopen it).
        """
        with self._lock:
            self._check_usable()
            if end_offset >= self.end_offset:
                return
            if end_offset < self.log_start_offset:
                raise ValueError(f"truncate_to({end_offset}) is below the log start offset {self.log_start_offset}")
            try:
                self._truncate(end_offset)
            except OSError as error:
                self._failure = f"truncation of {self._directory} to offset {end_offset} failed: {error}"
                raise

    def _truncate(self, end_offset: int) -> None:
        self._sync_data()
        index = bisect.bisect_right(self._bases, end_offset) - 1
        segment = self._segments[index]
        last_index = len(self._segments) - 1
        fd = self._active_fd if index == last_index else os.open(segment.path, os.O_RDWR | os.O_APPEND)
        try:
            cut_position, replacement = self._plan_cut(segment, fd, end_offset)
            if index != last_index:
                self._remove_later_segments(index)
            if replacement is None:
                os.ftruncate(fd, cut_position)
                if self._fsync:
                    data_sync(fd)
            else:
                self._rewrite_tail(segment, fd, cut_position, replacement[0])
        except BaseException:
            if fd != self._active_fd:
                os.close(fd)
            raise
        try:
            self._finish_truncate(index, segment, fd, end_offset, cut_position, replacement)
        except BaseException as error:
            # The files changed but the bookkeeping may not have: only a
            # reopen (recovery) can be trusted now.
            self._failure = f"truncation of {self._directory} to offset {end_offset} failed part-way: {error!r}"
            raise

    def _finish_truncate(
        self,
        index: int,
        segment: _Segment,
        fd: int,
        end_offset: int,
        cut_position: int,
        replacement: tuple[bytes, int] | None,
    ) -> None:
        if index != len(self._segments) - 1:
            # The later segments' files are already gone (_remove_later_segments).
            os.close(self._active_fd)
            os.close(self._active_index_fd)
            self._active_fd = fd
            self._active_index_fd = os.open(segment.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            del self._segments[index + 1 :]
            del self._bases[index + 1 :]
        segment.drop_index_from(cut_position)
        segment.size_bytes = cut_position
        segment.end_offset = end_offset
        if replacement is None:
            segment.last_epoch = self._last_epoch_before(segment, fd, cut_position)
        else:
            batch, epoch = replacement
            segment.note_batch(cut_position, segment_base_of(batch), self._index_interval_bytes)
            segment.size_bytes = cut_position + len(batch)
            segment.last_epoch = epoch
        os.ftruncate(self._active_index_fd, 0)
        write_all(self._active_index_fd, segment.index_bytes())
        self._active_dirty = False
        if self._fsync:
            os.fsync(self._dir_fd)
        self._dir_dirty = False

    def _remove_later_segments(self, index: int) -> None:
        """Unlink the files of every segment after ``index``, newest first,
        each removal durable before the next: a crash part-way leaves a
        shorter log with no gap, so a gap found at recovery is always damage
        (a lost file), never an interrupted truncation. Raises ``OSError``."""
        for later in reversed(self._segments[index + 1 :]):
            # The index goes first and durably: a non-empty index without
            # its segment then always means a lost file (``lost_segment``).
            self._unlink(later.index_path)
            if self._fsync:
                os.fsync(self._dir_fd)
            self._unlink(later.path)
            if self._fsync:
                os.fsync(self._dir_fd)

    def _plan_cut(self, segment: _Segment, fd: int, end_offset: int) -> tuple[int, tuple[bytes, int] | None]:
        """Byte position to cut at, and the replacement batch (with its
        epoch) when ``end_offset`` falls inside a batch."""
        if end_offset == segment.base_offset:
            return 0, None
        expected, position = segment.floor(end_offset)
        reader = _BatchReader(fd, position, segment.size_bytes)
        while True:
            item = self._next_checked(reader, segment, expected)
            if item is None:
                raise CorruptRecordError(f"{segment.path}: offset {end_offset} not found", path=str(segment.path))
            position, header, buf, rel = item
            expected = header.next_offset
            if header.base_offset == end_offset:
                return position, None
            if header.base_offset < end_offset < header.next_offset:
                try:
                    entries = decode_records(buf, rel, header)
                except BatchProblem as problem:
                    raise CorruptRecordError(
                        f"{segment.path} byte {position}: {problem.reason}", path=str(segment.path), position=position
                    ) from None
                keep = entries[: end_offset - header.base_offset]
                return position, (encode_batch(header.base_offset, header.epoch, keep), header.epoch)

    def _rewrite_tail(self, segment: _Segment, fd: int, position: int, batch: bytes) -> None:
        body = struct.pack(">Q", position) + batch
        redo = _U32.pack(zlib.crc32(body)) + body
        redo_fd = os.open(segment.rewrite_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(redo_fd, redo)
            if self._fsync:
                os.fsync(redo_fd)
        finally:
            os.close(redo_fd)
        if self._fsync:
            os.fsync(self._dir_fd)
        # From here a crash is repaired by replaying the redo record.
        os.ftruncate(fd, position)
        write_all(fd, batch)  # O_APPEND: lands at ``position``
        if self._fsync:
            data_sync(fd)
        os.unlink(segment.rewrite_path)  # made durable by the caller's directory fsync

    def _last_epoch_before(self, segment: _Segment, fd: int, position: int) -> int | None:
        if position == 0:
            return None
        expected, start = (
            (segment.index_offsets[-1], segment.index_positions[-1]) if segment.index_positions else (segment.base_offset, 0)
        )
        reader = _BatchReader(fd, start, position)
        epoch = None
        while (item := self._next_checked(reader, segment, expected)) is not None:
            expected = item[1].next_offset
            epoch = item[1].epoch
        return epoch

    def delete_before(self, offset: int, *, epoch_before: int | None = None) -> None:
        """Remove whole segments whose records all lie below ``offset``
        (they are covered by a snapshot). The log start becomes the first
        remaining segment's base: never beyond ``offset``, possibly before it.

        When ``offset >= end_offset`` every record goes and the log restarts,
        empty, at ``offset`` (a follower that installed a snapshot past its
        log end). ``epoch_before`` is the epoch of the record at
        ``offset - 1`` (the snapshot's): ``last_epoch`` of the now empty log;
        when omitted it is kept if ``offset == end_offset``, else 0.

        The new log start is recorded durably before anything is unlinked.
        Raises ``OSError``.
        """
        with self._lock:
            self._check_usable()
            if offset <= self.log_start_offset:
                return
            try:
                self._delete_before(offset, epoch_before)
            except OSError as error:
                self._failure = f"deleting {self._directory} below offset {offset} failed: {error}"
                raise

    def _delete_before(self, offset: int, epoch_before: int | None) -> None:
        if offset >= self.end_offset:
            if epoch_before is not None:
                new_base_epoch = epoch_before
            else:
                new_base_epoch = self.last_epoch if offset == self.end_offset else 0
            self._write_checkpoint(offset)
            os.close(self._active_fd)
            os.close(self._active_index_fd)
            self._active_fd = self._active_index_fd = -1
            for segment in self._segments:
                self._remove_files(segment)
            self._segments.clear()
            self._bases.clear()
            self._base_epoch = new_base_epoch
            self._create_segment(offset)
            if self._fsync:
                os.fsync(self._dir_fd)
            self._dir_dirty = False
            return
        keep = bisect.bisect_right(self._bases, offset) - 1
        if keep <= 0:
            return
        self._write_checkpoint(self._bases[keep])
        for segment in self._segments[:keep]:
            self._remove_files(segment)
        del self._segments[:keep]
        del self._bases[:keep]
        # Not fsynced on purpose: the checkpoint already makes the
        # deletion final; the next flush persists the unlinks.
        self._dir_dirty = True

    def reset(self, snapshot_id: SnapshotId) -> None:
        """Discard every record: the log restarts, empty, just after
        ``snapshot_id`` (KIP-630: a follower that installed a fetched
        snapshot its log does not agree with). Durable on return.

        Raises ``ValueError`` if the snapshot ends before the log start,
        ``OSError`` on I/O failure.
        """
        with self._lock:
            self._check_usable()
            offset = snapshot_id.end_offset
            if offset < self.log_start_offset:
                raise ValueError(f"snapshot {snapshot_id} ends before the log start offset {self.log_start_offset}")
            if offset < self.end_offset:
                self.truncate_to(offset)
            self.delete_before(offset, epoch_before=snapshot_id.epoch)
            self._base_epoch = snapshot_id.epoch

    # -- reads ------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int = DEFAULT_READ_BYTES_MAX) -> list[Entry]:
        """Records from ``start_offset``: at least one if any exists there,
        then more while their total size (5 bytes + data each) stays within
        ``max_bytes``; never past the end of the segment holding
        ``start_offset``. ``[]`` at the end offset.

        Every batch read is CRC-checked. Raises ``CorruptRecordError``
        instead of returning a record that failed, ``ValueError`` if
        ``start_offset`` is outside ``[log_start_offset, end_offset]``.
        """
        with self._lock:
            self._check_usable()
            if not self.log_start_offset <= start_offset <= self.end_offset:
                raise ValueError(
                    f"offset {start_offset} is outside the log [{self.log_start_offset}, {self.end_offset})"
                )
            if start_offset == self.end_offset:
                return []
            index = bisect.bisect_right(self._bases, start_offset) - 1
            segment = self._segments[index]
            own_fd = index != len(self._segments) - 1
            fd = os.open(segment.path, os.O_RDONLY) if own_fd else self._active_fd
            try:
                expected, position = segment.floor(start_offset)
                chunk = min(max(max_bytes + 2 * self._index_interval_bytes, 64 * 1024), 8 * 1024 * 1024)
                reader = _BatchReader(fd, position, segment.size_bytes, chunk)
                result: list[Entry] = []
                total = 0
                while True:
                    item = self._next_checked(reader, segment, expected)
                    if item is None:
                        break
                    position, header, buf, rel = item
                    expected = header.next_offset
                    if expected <= start_offset:
                        continue
                    try:
                        entries = decode_records(buf, rel, header)
                    except BatchProblem as problem:
                        raise CorruptRecordError(
                            f"{segment.path} byte {position}: {problem.reason}",
                            path=str(segment.path),
                            position=position,
                        ) from None
                    if header.base_offset < start_offset:
                        entries = entries[start_offset - header.base_offset :]
                    for entry in entries:
                        total += RECORD_HEADER_BYTES + len(entry.data)
                        if result and total > max_bytes:
                            return result
                        result.append(entry)
                    if total >= max_bytes:
                        break
                return result
            finally:
                if own_fd:
                    os.close(fd)

    def _next_checked(
        self, reader: _BatchReader, segment: _Segment, expected: int
    ) -> tuple[int, BatchHeader, bytes, int] | None:
        position = reader.position
        try:
            item = reader.next()
        except BatchProblem as problem:
            raise CorruptRecordError(
                f"{segment.path} byte {position}: {problem.reason}", path=str(segment.path), position=position
            ) from None
        if item is not None and item[1].base_offset != expected:
            raise CorruptRecordError(
                f"{segment.path} byte {position}: batch base offset {item[1].base_offset} "
                f"where offset {expected} was expected",
                path=str(segment.path),
                position=position,
            )
        return item

    def entries_from(self, start_offset: int | None = None) -> Iterator[Entry]:
        """Every record from ``start_offset`` (default: the log start) to the
        end, in order, for loading at startup. Linear in the log size.
        Raises what ``read`` raises. Do not mutate the log while iterating."""
        next_offset = self.log_start_offset if start_offset is None else start_offset
        while True:
            with self._lock:
                if next_offset >= self.end_offset:
                    if next_offset > self.end_offset:
                        raise ValueError(f"offset {next_offset} is beyond the log end {self.end_offset}")
                    return
                batch = self.read(next_offset, 8 * 1024 * 1024)
            yield from batch
            next_offset = batch[-1].offset + 1

    # -- housekeeping -----------------------------------------------------------

    def close(self) -> None:
        """Flush (unless the log has failed) and release every file
        descriptor. Idempotent. Raises ``OSError`` if the final flush fails
        (the descriptors are released anyway)."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._failure is None:
                    self.flush()
            finally:
                self._closed = True
                self._close_fds()

    def _close_fds(self) -> None:
        for attribute in ("_active_fd", "_active_index_fd", "_dir_fd"):
            fd = getattr(self, attribute)
            if fd >= 0:
                os.close(fd)
                setattr(self, attribute, -1)

    def __enter__(self) -> SegmentedLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_usable(self) -> None:
        if self._closed:
            raise ValueError(f"the log in {self._directory} is closed")
        if self._failure is not None:
            raise LogFailedError(f"the log in {self._directory} has failed and must be reopened: {self._failure}")

    def _remove_files(self, segment: _Segment) -> None:
        # Only segments below the log start checkpoint go this way, where a
        # leftover index is ignored at recovery; index first all the same.
        self._unlink(segment.index_path)
        self._unlink(segment.path)
        self._dir_dirty = True

    @staticmethod
    def _unlink(path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as error:
            if error.errno != errno.ENOENT:
                raise

    def __repr__(self) -> str:
        return (
            f"SegmentedLog({str(self._directory)!r}, start={self._segments[0].base_offset if self._segments else None}, "
            f"end={self._segments[-1].end_offset if self._segments else None}, segments={len(self._segments)})"
        )


@dataclass(frozen=True, slots=True)
class LogVerdict:
    """What recovery (or ``check-storage``) found in a log directory that is
    not damaged: ``torn`` False means every batch is sound; True means the
    active segment ``path`` ends in a torn write from byte ``position``
    (``file_bytes`` long before the cut), holding offsets from
    ``first_offset_cut`` on, for ``reason``. ``end_offset`` is where the
    valid log ends."""

    end_offset: int
    torn: bool = False
    path: Path | None = None
    position: int = 0
    file_bytes: int = 0
    first_offset_cut: int = 0
    reason: str = ""
    claimed: str = ""

    def describe(self) -> str:
        """One line for logs and ``check-storage``."""
        if not self.torn:
            return f"sound: the log ends at offset {self.end_offset}"
        return (
            f"torn tail: {self.path} from byte {self.position} of {self.file_bytes} ({self.reason}); "
            f"the valid log ends at offset {self.end_offset}, and the next start cuts the rest"
        )


@dataclass(slots=True)
class SegmentScan:
    """The result of ``scan_segments``: the valid segments (the torn one
    already sized to its cut), and either a verdict or the damage."""

    segments: list[_Segment]
    verdict: LogVerdict
    damage: DamagedLogError | None


def scan_segments(
    directory: Path,
    bases: Sequence[int],
    index_interval_bytes: int,
    read_segment: Callable[[int], bytes] | None = None,
) -> SegmentScan:
    """Validate every batch of the segments ``bases`` (sorted) of the log in
    ``directory`` without modifying anything, and tell a torn tail from
    damage (see docs/storage.md, "Torn tail or damage").

    Only a bad batch in the *last* segment with no valid batch anywhere after
    it is a torn tail: a crash can leave garbage only after the last write
    that was made durable. Anything else is damage, reported in
    ``SegmentScan.damage`` (never raised here): a bad batch followed by a
    valid one, a bad batch in a sealed segment, a batch whose CRC holds but
    whose offset or epoch does not continue the log, a gap between segments.
    ``read_segment(base)`` returns a segment's bytes (default: read the
    file). Raises ``OSError``.
    """
    read = read_segment or (lambda base: (directory / segment_file_name(base)).read_bytes())
    segments: list[_Segment] = []
    expected: int | None = None
    epoch_floor = 0
    for i, base in enumerate(bases):
        path = directory / segment_file_name(base)
        if expected is not None and base != expected:
            what = f"it starts at offset {base} but the segment before it ends at offset {expected}: records are missing"
            return SegmentScan(segments, LogVerdict(expected), DamagedLogError(str(path), 0, what))
        data = read(base)
        segment = _Segment(directory, base)
        position, problem, crc_ok = _scan_batches(segment, data, epoch_floor, index_interval_bytes)
        segments.append(segment)
        expected = segment.end_offset
        if segment.last_epoch is not None:
            epoch_floor = segment.last_epoch
        if problem is None:
            continue
        is_last = i == len(bases) - 1
        what: str | None = None
        if crc_ok:
            what = f"{problem.reason}, in a batch whose CRC holds: not a torn write"
        elif not is_last:
            what = f"{problem.reason}, in a sealed segment (offsets from {expected} on)"
        else:
            later = find_valid_batch(data, position + 1, expected + 1, epoch_floor)
            if later is not None:
                what = f"bad batch ({problem.reason}), followed by a valid batch at byte {later}: not a torn write"
            elif problem.kind != TORN:
                # The last batch, whole (the file holds every byte its length
                # claims) yet bad: torn only if a sector of it reads as zeros.
                zeroed = zeroed_sector(data, position, _claimed_end(data, position))
                if zeroed is None:
                    what = (
                        f"{problem.reason} in the last batch, which is whole and has no zeroed {SECTOR_BYTES}-byte "
                        f"sector: a flipped bit, not a torn write"
                    )
        if what is not None:
            return SegmentScan(segments, LogVerdict(expected), DamagedLogError(str(path), position, what))
        verdict = LogVerdict(
            expected,
            torn=True,
            path=path,
            position=position,
            file_bytes=len(data),
            first_offset_cut=expected,
            reason=problem.reason,
            claimed=_claimed(data, position, len(data)),
        )
        return SegmentScan(segments, verdict, None)
    return SegmentScan(segments, LogVerdict(expected if expected is not None else 0), None)


# The unit a disk writes atomically, at the least: a torn append leaves
# whole sectors of it unwritten (etcd's WAL decoder reasons the same way).
SECTOR_BYTES = 512


def zeroed_sector(data: bytes, start: int, end: int) -> int | None:
    """The file position of the first all-zero piece of ``data[start:end]``
    when it is cut at file-aligned ``SECTOR_BYTES`` boundaries, or None.

    A torn append (a crash before every page of the write reached the disk,
    the file size already grown) leaves sectors that were never written;
    file systems read them as zeros (unwritten extents, holes). A bit flip
    in a batch that was written whole leaves no such sector. So a bad last
    batch with a zeroed piece is a torn write, one without is damage
    (docs/storage.md, "Torn tail or damage")."""
    position = start
    while position < end:
        piece_end = min(end, (position // SECTOR_BYTES + 1) * SECTOR_BYTES)
        if not any(data[position:piece_end]):
            return position
        position = piece_end
    return None


def _claimed_end(data: bytes, position: int) -> int:
    """Where the batch at ``position`` ends by its length field, or the end
    of ``data`` when that field is implausible or claims more."""
    if position + 4 > len(data):
        return len(data)
    (length,) = struct.unpack_from(">I", data, position)
    if length < MIN_BATCH_LENGTH:
        return len(data)
    return min(len(data), position + 4 + length)


@dataclass(frozen=True, slots=True)
class LogListing:
    """The files of a log directory, by role (see ``list_log_directory``)."""

    log_bases: list[int]
    index_bases: list[int]
    rewrites: list[int]
    temporary: list[str]
    unexpected: list[str]


def list_log_directory(directory: Path) -> LogListing:
    """Sort the names in a log directory: segment bases, index bases and
    redo records (each sorted), leftover temporary files of the checkpoint,
    and anything else. Reads only. Raises ``OSError``."""
    listing = LogListing([], [], [], [], [])
    for name in sorted(os.listdir(directory)):
        if name == CHECKPOINT_FILE_NAME:
            continue
        if name == CHECKPOINT_FILE_NAME + ".tmp":
            listing.temporary.append(name)
            continue
        stem, dot, suffix = name.partition(".")
        if len(stem) == 20 and is_decimal(stem) and dot:
            kinds = {LOG_SUFFIX: listing.log_bases, INDEX_SUFFIX: listing.index_bases, REWRITE_SUFFIX: listing.rewrites}
            bucket = kinds.get("." + suffix)
            if bucket is not None:
                bucket.append(int(stem))
                continue
        listing.unexpected.append(name)
    return listing


def read_log_start_checkpoint(directory: Path) -> int | None:
    """The log start offset recorded in ``log-start-offset.json``, or None
    if there is none. Raises ``CorruptLogMetadataError`` if it is damaged,
    ``OSError``."""
    path = directory / CHECKPOINT_FILE_NAME
    try:
        document = read_checked_json(path, version=1)
        if document is None:
            return None
        offset = document.get("log_start_offset")
        if not is_plain_int(offset) or offset < 0:
            raise ValueError(f"bad log_start_offset {offset!r}")
    except ValueError as error:
        raise CorruptLogMetadataError(
            f"the log start checkpoint {path} is damaged ({error}), so this node refuses to start rather "
            f"than guess where its log begins: {REPAIR_ADVICE}.",
            reason=str(error),
        ) from None
    return offset


def lost_segment(
    directory: Path, log_bases: Sequence[int], index_bases: set[int] | Sequence[int], checkpoint: int | None
) -> DamagedLogError | None:
    """Damage if a segment file is gone but its non-empty index remains at
    or above the log start: segments are only removed index first (and
    durably, when above the log start), so that is a lost file, not an
    interrupted removal. An *empty* index is not evidence: a crash right
    after a segment was created may keep the index's directory entry and
    not the segment's. Reads only."""
    floor = checkpoint if checkpoint is not None else 0
    present = set(log_bases)
    for base in sorted(set(index_bases) - present):
        index_path = directory / f"{base:020d}{INDEX_SUFFIX}"
        if base >= floor and index_path.stat().st_size > 0:
            return DamagedLogError(
                str(directory / segment_file_name(base)),
                0,
                f"the segment file is missing but its index {index_path.name} remains: records from offset {base} on are lost",
            )
    return None


def lost_log(directory: Path, *, holds_election_state: bool, snapshot: SnapshotId | None) -> DamagedLogError | None:
    """Damage if the log directory's records are gone as a whole while the
    rest of the node's state says it held some: a ``rm -rf`` of ``log/``
    (a name that invites one) or a lost directory. Read at open, these
    would look like an empty log, and a voter with an empty log counts as
    having a short one (docs/storage.md, "Torn tail or damage").

    - ``directory`` is not a directory;
    - it is missing although the election state exists: the first open
      creates it, durably, before anything writes the election state;
    - it holds no segment and no log-start checkpoint although a snapshot
      exists: a snapshot is taken of flushed records, every removal leaves
      a segment or writes the checkpoint first, and only an emptied log
      (a snapshot installed past its end) has none, after its checkpoint.

    Reads only; ``CorruptLogMetadataError`` for a damaged checkpoint."""
    if directory.exists() and not directory.is_dir():
        return DamagedLogError(str(directory), 0, "it is a file, not a directory", whole_directory=True)
    if not holds_election_state:
        return None
    if not directory.is_dir():
        return DamagedLogError(
            str(directory), 0, "it is missing although the election state exists: its records are lost",
            whole_directory=True,
        )
    if snapshot is None or list_log_directory(directory).log_bases or read_log_start_checkpoint(directory) is not None:
        return None
    return DamagedLogError(
        str(directory), 0,
        f"it holds no segment and no log start checkpoint although snapshot {snapshot} exists: its records are lost",
        whole_directory=True,
    )


def _scan_batches(
    segment: _Segment, data: bytes, epoch_floor: int, interval: int
) -> tuple[int, BatchProblem | None, bool]:
    """Walk the batches of one segment's ``data`` up to the first bad one,
    filling ``segment`` (end offset, size, last epoch, index). Returns the
    position of the bad batch, the problem (None if every batch is good),
    and whether the bad batch's CRC held (then it is damage, never torn)."""
    size = len(data)
    position = 0
    expected = segment.base_offset
    problem: BatchProblem | None = None
    crc_ok = False
    while position < size:
        try:
            header = parse_batch(data, position, size)
        except BatchProblem as found:
            problem = found
            break
        crc_ok = True
        try:
            if header.base_offset != expected:
                raise BatchProblem(
                    CORRUPT, f"batch base offset {header.base_offset} where offset {expected} was expected"
                )
            if header.epoch < epoch_floor:
                raise BatchProblem(CORRUPT, f"epoch {header.epoch} after epoch {epoch_floor}")
            decode_records(data, position, header, build=False)
        except BatchProblem as found:
            problem = found
            break
        crc_ok = False
        segment.note_batch(position, expected, interval)
        expected = header.next_offset
        epoch_floor = header.epoch
        segment.last_epoch = header.epoch
        position += header.size
    segment.end_offset = expected
    segment.size_bytes = position
    return position, problem, crc_ok and problem is not None


_VERSION_BYTE = bytes([FORMAT_VERSION])


def find_valid_batch(data: bytes, start: int, min_base_offset: int, min_epoch: int) -> int | None:
    """Byte position of the first batch at or after ``start`` that passes
    its CRC, with a base offset in the range a later batch of this segment
    could hold and an epoch no lower than ``min_epoch``; None if there is
    none. Finding one after a bad batch proves the bad batch is damage, not
    a torn write. Candidates are found by the version byte and filtered by
    their header before any CRC is computed, so the cost stays linear."""
    size = len(data)
    # Every record takes at least RECORD_HEADER_BYTES, which bounds the
    # offsets the rest of the segment can hold.
    max_base_offset = min(min_base_offset + (size - start) // RECORD_HEADER_BYTES, U64_MAX)
    # Any such batch has the version byte followed by the leading bytes that
    # every offset in the range shares (big-endian): a needle that long data
    # of repeated bytes or zeros cannot match at every position.
    low, high = _U64.pack(min_base_offset), _U64.pack(max_base_offset)
    shared = 0
    while shared < 8 and low[shared] == high[shared]:
        shared += 1
    needle = _VERSION_BYTE + low[:shared]
    search = start + 8
    while True:
        hit = data.find(needle, search)
        if hit < 0:
            return None
        search = hit + 1
        position = hit - 8
        if position + BATCH_HEADER_BYTES + RECORD_HEADER_BYTES > size:
            return None
        length, _, _, base_offset, epoch, count = struct.unpack_from(">IIBQII", data, position)
        if not min_base_offset <= base_offset <= max_base_offset or epoch < min_epoch:
            continue
        if length < MIN_BATCH_LENGTH or position + 4 + length > size or count == 0:
            continue
        try:
            header = parse_batch(data, position, size)
            decode_records(data, position, header, build=False)
        except BatchProblem:
            continue
        return position


def parse_rewrite(raw: bytes) -> tuple[int, bytes] | None:
    """(byte position, batch) of a ``.rewrite`` redo record, or None if the
    record is incomplete (torn: the segment was not touched yet)."""
    if len(raw) < _REWRITE_HEAD.size:
        return None
    crc, position = _REWRITE_HEAD.unpack_from(raw, 0)
    if zlib.crc32(memoryview(raw)[4:]) != crc:
        return None
    batch = raw[_REWRITE_HEAD.size :]
    try:
        header = parse_batch(batch, 0, len(batch))
        decode_records(batch, 0, header, build=False)
    except BatchProblem:
        return None
    return (position, batch) if header.size == len(batch) else None


def segment_base_of(batch: bytes) -> int:
    """The base offset field of a framed batch."""
    return struct.unpack_from(">Q", batch, 9)[0]


def _claimed(data: bytes, position: int, size: int) -> str:
    """What a damaged batch's header claims, for the recovery log line (it
    may be garbage; it is a hint for the operator, never trusted)."""
    if size - position < BATCH_HEADER_BYTES:
        return ""
    _, _, _, base_offset, epoch, count = struct.unpack_from(">IIBQII", data, position)
    return f"; the damaged header claims base offset {base_offset}, epoch {epoch}, {count} record(s)"
