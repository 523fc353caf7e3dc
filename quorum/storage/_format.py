"""Binary formats of the log batch and the snapshot file (all big-endian).

Log batch (one ``append`` writes one or more; a segment file is nothing but
batches back to back)::

    offset  size  field
    0       4     length        u32  bytes that follow this field
    4       4     crc32         u32  zlib.crc32 of bytes [8, 4 + length)
    8       1     version       u8   FORMAT_VERSION (1)
    9       8     base_offset   u64  offset of the first record
    17      4     epoch         u32  epoch of every record in the batch
    21      4     record_count  u32  >= 1
    25      ...   records, record_count times:
                    u8 kind (RecordKind) | u32 data_length | data

A batch is valid when its length is plausible and fits in the file, the CRC
matches, the version is known, and the records exactly fill the batch with
known kinds. A shorter-than-claimed batch at the end of a file is a *torn*
write; anything else that fails is *corrupt*. Either way the batch and
everything after it is untrusted.

Snapshot file (``<end_offset:020>-<epoch:010>.snapshot``)::

    0       4     magic         b"PKSN"
    4       1     version       u8   1
    5       8     end_offset    u64
    13      4     epoch         u32
    17      8     payload_size  u64
    25      4     payload_crc   u32  zlib.crc32 of the payload
    29      4     header_crc    u32  zlib.crc32 of bytes [0, 29)
    33      ...   payload (opaque state-machine bytes)

FetchSnapshot transfers the whole file (header included) in chunks, so the
receiver checks the same CRCs before it publishes the snapshot.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from itertools import chain
from operator import itemgetter
from typing import NamedTuple

from .._types import PER_BATCH_CHECK_MIN_RECORDS, Entry, RecordKind, SnapshotId, one_epoch_columns

FORMAT_VERSION = 1

_U32 = struct.Struct(">I")
_PREFIX = struct.Struct(">II")  # length, crc32
_FIXED = struct.Struct(">BQII")  # version, base_offset, epoch, record_count
_HEADER = struct.Struct(">IIBQII")
BATCH_HEADER_BYTES = _HEADER.size  # 25
_RECORD_HEADER = struct.Struct(">BI")
RECORD_HEADER_BYTES = _RECORD_HEADER.size  # 5
# The smallest legal value of the length field: crc..record_count plus one
# empty record.
MIN_BATCH_LENGTH = BATCH_HEADER_BYTES - 4 + RECORD_HEADER_BYTES
U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF

KINDS: dict[int, RecordKind] = {kind.value: kind for kind in RecordKind}
_KIND_OF = itemgetter(2)  # an Entry's kind
_DATA_OF = itemgetter(3)  # an Entry's data

TORN = "torn"
CORRUPT = "corrupt"


class BatchProblem(Exception):
    """A batch that must not be trusted. ``kind`` is TORN (cut short by the
    end of the file) or CORRUPT; ``reason`` is for the log line."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason


class BatchHeader(NamedTuple):
    size: int  # bytes of the whole batch, length field included
    base_offset: int
    epoch: int
    count: int
    crc: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count


def record_bytes(entry: Entry) -> int:
    """Bytes one record takes inside a batch (the unit of ``max_bytes``)."""
    return RECORD_HEADER_BYTES + len(entry.data)


def encode_batch(base_offset: int, epoch: int, entries: Sequence[Entry]) -> bytes:
    """One framed batch holding ``entries`` (already validated: contiguous
    from ``base_offset``, all of ``epoch``, known kinds, bytes data)."""
    datas = list(map(_DATA_OF, entries))
    # Each record's header, then its data, interleaved in C: a loop per
    # record cost ~3 ms of a follower's commit of a 10,001-record batch.
    headers = map(_RECORD_HEADER.pack, map(_KIND_OF, entries), map(len, datas))
    body = b"".join(chain.from_iterable(zip(headers, datas)))
    fixed = _FIXED.pack(FORMAT_VERSION, base_offset, epoch, len(entries))
    crc = zlib.crc32(body, zlib.crc32(fixed))
    return b"".join((_PREFIX.pack(len(fixed) + 4 + len(body), crc), fixed, body))


def parse_batch(buf: bytes, pos: int, limit: int) -> BatchHeader:
    """Validate the frame and CRC of the batch at ``buf[pos:]``; ``limit`` is
    the end of the data (the end of the file, in ``buf`` coordinates).

    Raises ``BatchProblem``. Does not look inside the records: see
    ``decode_records``.
    """
    available = limit - pos
    if available < 4:
        raise BatchProblem(TORN, f"short write: {available} byte(s) where a batch length field belongs")
    (length,) = _U32.unpack_from(buf, pos)
    if length < MIN_BATCH_LENGTH:
        raise BatchProblem(CORRUPT, f"implausible batch length {length}")
    size = 4 + length
    if size > available:
        raise BatchProblem(TORN, f"short write: batch claims {size} bytes, only {available} present")
    _, crc, version, base_offset, epoch, count = _HEADER.unpack_from(buf, pos)
    computed = zlib.crc32(memoryview(buf)[pos + 8 : pos + size])
    if computed != crc:
        raise BatchProblem(CORRUPT, f"CRC mismatch (stored {crc:#010x}, computed {computed:#010x})")
    if version != FORMAT_VERSION:
        raise BatchProblem(CORRUPT, f"unknown batch format version {version}")
    if count == 0:
        raise BatchProblem(CORRUPT, "batch with zero records")
    return BatchHeader(size, base_offset, epoch, count, crc)


def decode_records(buf: bytes, pos: int, header: BatchHeader, *, build: bool = True) -> list[Entry]:
    """The records of the (already CRC-checked) batch at ``buf[pos:]``.

    With ``build=False`` only checks the framing and returns ``[]``: used by
    recovery, which must reject a batch whose records do not exactly fill it
    even though its CRC matches (only a writer bug produces one).
    Raises ``BatchProblem``.
    """
    unpack = _RECORD_HEADER.unpack_from
    kinds = KINDS
    end = pos + header.size
    p = pos + BATCH_HEADER_BYTES
    offset = header.base_offset
    epoch = header.epoch
    entries: list[Entry] = []
    append = entries.append
    for index in range(header.count):
        if p + RECORD_HEADER_BYTES > end:
            raise BatchProblem(CORRUPT, f"record {index} of {header.count} overruns the batch")
        kind, data_length = unpack(buf, p)
        p += RECORD_HEADER_BYTES
        q = p + data_length
        if q > end:
            raise BatchProblem(CORRUPT, f"record {index} of {header.count} overruns the batch")
        record_kind = kinds.get(kind)
        if record_kind is None:
            raise BatchProblem(CORRUPT, f"record {index} has unknown kind {kind}")
        if build:
            append(Entry(offset + index, epoch, record_kind, buf[p:q]))
        p = q
    if p != end:
        raise BatchProblem(CORRUPT, f"{end - p} stray byte(s) after the last record")
    return entries


_ONLY_BYTES = {bytes}


def check_append(entries: Sequence[Entry], expected_offset: int, last_epoch: int) -> None:
    """The contract of ``append``, for stores that do not frame batches:
    contiguous offsets from ``expected_offset``, epochs never decreasing
    and not below ``last_epoch``, known kinds, bytes data. Raises
    ``ValueError`` or ``TypeError``."""
    columns = one_epoch_columns(entries, expected_offset) if len(entries) >= PER_BATCH_CHECK_MIN_RECORDS else None
    if columns is not None:
        # The common case, checked per batch: one epoch in range, one known
        # kind, data all of type bytes (a subclass takes the loop) and
        # together no larger than one record may be.
        _, epochs, kinds, datas = columns
        if (
            last_epoch <= epochs[0] <= U32_MAX
            and kinds.count(kinds[0]) == len(kinds)
            and kinds[0] in KINDS
            and set(map(type, datas)) == _ONLY_BYTES
            and sum(map(len, datas)) <= U32_MAX
        ):
            return
    for entry in entries:
        if entry.offset != expected_offset:
            raise ValueError(f"append: entry at offset {entry.offset} where offset {expected_offset} was expected")
        if entry.epoch < last_epoch:
            raise ValueError(f"append: epoch {entry.epoch} at offset {entry.offset} after epoch {last_epoch}")
        if entry.epoch > U32_MAX:
            raise ValueError(f"append: epoch {entry.epoch} does not fit in 32 bits")
        if entry.kind not in KINDS:
            raise ValueError(f"append: unknown record kind {entry.kind!r} at offset {entry.offset}")
        if not isinstance(entry.data, bytes):
            raise TypeError(f"append: data at offset {entry.offset} is {type(entry.data).__name__}, not bytes")
        if len(entry.data) > U32_MAX:
            raise ValueError(f"append: record at offset {entry.offset} is larger than 4 GiB")
        expected_offset += 1
        last_epoch = entry.epoch


# -- snapshots ------------------------------------------------------------------

SNAPSHOT_MAGIC = b"PKSN"
SNAPSHOT_VERSION = 1
_SNAPSHOT_FIXED = struct.Struct(">4sBQIQI")
_SNAPSHOT_HEADER = struct.Struct(">4sBQIQII")
SNAPSHOT_HEADER_BYTES = _SNAPSHOT_HEADER.size  # 33


def encode_snapshot_header(snapshot_id: SnapshotId, payload: bytes) -> bytes:
    """The header that precedes ``payload`` in a snapshot file."""
    fixed = _SNAPSHOT_FIXED.pack(
        SNAPSHOT_MAGIC,
        SNAPSHOT_VERSION,
        snapshot_id.end_offset,
        snapshot_id.epoch,
        len(payload),
        zlib.crc32(payload),
    )
    return fixed + _U32.pack(zlib.crc32(fixed))


class SnapshotHeader(NamedTuple):
    snapshot_id: SnapshotId
    payload_size: int
    payload_crc: int


def parse_snapshot_header(raw: bytes) -> SnapshotHeader:
    """Parse and check the header at the start of ``raw``. Raises
    ``ValueError`` with the reason."""
    if len(raw) < SNAPSHOT_HEADER_BYTES:
        raise ValueError(f"file too short for a snapshot header ({len(raw)} bytes)")
    magic, version, end_offset, epoch, payload_size, payload_crc, header_crc = _SNAPSHOT_HEADER.unpack_from(raw, 0)
    if magic != SNAPSHOT_MAGIC:
        raise ValueError(f"bad magic {magic!r}")
    computed = zlib.crc32(memoryview(raw)[: SNAPSHOT_HEADER_BYTES - 4])
    if computed != header_crc:
        raise ValueError(f"header CRC mismatch (stored {header_crc:#010x}, computed {computed:#010x})")
    if version != SNAPSHOT_VERSION:
        raise ValueError(f"unknown snapshot format version {version}")
    return SnapshotHeader(SnapshotId(end_offset, epoch), payload_size, payload_crc)


def decode_snapshot(raw: bytes) -> tuple[SnapshotId, bytes]:
    """Check a whole snapshot file and return its id and payload. Raises
    ``ValueError`` with the reason."""
    header = parse_snapshot_header(raw)
    actual = len(raw) - SNAPSHOT_HEADER_BYTES
    if actual != header.payload_size:
        raise ValueError(f"payload is {actual} bytes, header says {header.payload_size}")
    payload = raw[SNAPSHOT_HEADER_BYTES:]
    computed = zlib.crc32(payload)
    if computed != header.payload_crc:
        raise ValueError(f"payload CRC mismatch (stored {header.payload_crc:#010x}, computed {computed:#010x})")
    return header.snapshot_id, payload


def encode_snapshot(snapshot_id: SnapshotId, payload: bytes) -> bytes:
    """A whole snapshot file: header then payload."""
    return encode_snapshot_header(snapshot_id, payload) + payload


def is_decimal(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` also accepts "²")."""
    return text.isascii() and text.isdigit()


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}.snapshot"


def parse_snapshot_file_name(name: str) -> SnapshotId | None:
    """The id encoded in a snapshot file name, or None if it is not one."""
    if not name.endswith(".snapshot"):
        return None
    stem = name[: -len(".snapshot")]
    offset_text, dash, epoch_text = stem.partition("-")
    if not dash or len(offset_text) != 20 or len(epoch_text) != 10:
        return None
    if not (is_decimal(offset_text) and is_decimal(epoch_text)):
        return None
    return SnapshotId(int(offset_text), int(epoch_text))
