"""Domain types shared by every layer of the quorum.

Offsets are log positions (the first record is offset 0); an *end offset* is
one past the last record, as in Kafka. Epochs are Raft terms (KIP-595 calls
them epochs); epoch 0 is "nothing has happened yet".
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from collections.abc import Sequence
from typing import NamedTuple, NewType

NodeId = NewType("NodeId", int)
Epoch = NewType("Epoch", int)
Offset = NewType("Offset", int)

# The ranges every layer can hold, defined once: the wire decoder refuses a
# value outside them, the core drops a message carrying one (it must never
# persist what it could not read back), and the core never makes one itself.
# All are non-negative.
#
# Node ids are Kafka int32s.
NODE_ID_MAX = 2**31 - 1
# The segment format stores a batch's epoch in 32 bits (quorum/storage,
# ``_format.py``); the wire could carry more, storage could not.
EPOCH_MAX = 2**32 - 1
# Offsets (positions in the log, sizes and positions in a snapshot) and
# request ids and read tokens: int64s, as Kafka's, so that any other
# implementation of the wire can hold them.
OFFSET_MAX = 2**63 - 1
INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """A log position with the epoch of the record just before it.

    Ordered by epoch first, then offset: that is Raft's "more up to date"
    comparison (Raft thesis §3.6.1) when ``offset`` is an end offset and
    ``epoch`` the epoch of the last record.
    """

    epoch: int
    offset: int


class RecordKind(enum.IntEnum):
    """What a log record carries. Control records belong to the quorum."""

    DATA = 0
    # Written by every new leader as the first record of its epoch, so that the
    # high watermark can advance only on a record of the leader's own epoch
    # (Raft thesis §3.6.2; KIP-595 LeaderChangeMessage).
    LEADER_CHANGE = 1
    # A dynamic cluster's voter set (KIP-853 VotersRecord; Raft thesis §4.1
    # single-server changes): the whole set after one voter was added or
    # removed. It takes effect on every node as soon as it is appended,
    # committed or not, and is undone if the record is truncated.
    VOTERS = 2


# The members, read once. In Python 3.11 reading ``RecordKind.DATA`` passes
# through ``EnumType.__getattr__`` (about 1,000 machine instructions, a
# module global about 30), and the replication path asks once or more per
# record on each node.
DATA_KIND = RecordKind.DATA
VOTERS_KIND = RecordKind.VOTERS


class Entry(NamedTuple):
    """One record of the replicated log.

    A named tuple rather than a frozen dataclass: the replication path
    builds and reads one per record, and a tuple costs a fraction of a
    dataclass to build (no per-field ``object.__setattr__``). Its fields are
    also in wire order, so the codec hands it to msgpack as it is. Offsets
    and epochs are never negative: every producer (a proposal, the wire
    decoder, the segment reader) guarantees it.
    """

    offset: int
    epoch: int
    kind: RecordKind
    data: bytes


# Below this many records, the record-by-record loops cost less than the
# per-batch check's fixed part (building the columns): single-record
# proposals and short Fetch answers keep the loops. Under cachegrind, the
# stores' check_append takes about 7,000 instructions for two records per
# batch against about 6,300 by the loop, and the loop 12,500 for four.
PER_BATCH_CHECK_MIN_RECORDS = 4


def one_epoch_columns(
    entries: Sequence[Entry], first_offset: int
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[RecordKind, ...], tuple[bytes, ...]] | None:
    """The columns ``(offsets, epochs, kinds, datas)`` of ``entries`` when
    they are numbered ``first_offset``, ``first_offset + 1``, ... without a
    gap and all carry one epoch; None otherwise, and for no entries.

    That is the shape of nearly every batch (one proposal, one Fetch answer
    within a leader's epoch), and this checks it over the whole batch in C
    rather than a record at a time in Python. The log, the stores and the
    core's check of a Fetch answer check the columns against their own
    bounds, and fall back to their record-by-record loops (which say what
    is wrong) only when this returns None; they ask only for batches of at
    least ``PER_BATCH_CHECK_MIN_RECORDS``. Raises nothing for entries that
    are ``Entry`` tuples."""
    if not entries:
        return None
    offsets, epochs, kinds, datas = zip(*entries)
    if epochs.count(epochs[0]) != len(epochs) or offsets != tuple(range(first_offset, first_offset + len(offsets))):
        return None
    return offsets, epochs, kinds, datas


@dataclass(frozen=True, slots=True)
class SnapshotId:
    """A snapshot covers every record below ``end_offset``; ``epoch`` is the
    epoch of the last record it covers (KIP-630)."""

    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What a voter must remember across restarts (KIP-595 quorum-state).

    ``voted_for`` and ``leader_id`` are None when unknown. Written atomically
    and durably before any message that depends on it is sent (Raft thesis
    §3.8: a server must not vote twice in one term).
    """

    epoch: int
    voted_for: int | None = None
    leader_id: int | None = None
