"""The sans-IO Raft core: one ``QuorumNode`` per replica.

A ``QuorumNode`` is fed inputs and returns an ``Output`` for each (see
``_output.py`` for the contract a driver must honour):

- ``tick()`` — one step of logical time (``config.tick_ms``);
- ``step(message)`` — a message received from a peer;
- ``propose(payloads)``, ``read_index(read_id)``, ``resign()``,
  ``snapshot_taken(...)`` — local actions;
- ``persisted(seq)`` — the driver made an output's persistence durable;
- ``peer_unreachable(peer)`` — the transport could not reach a peer.

It never does IO, never reads a clock and draws randomness only from the
injected ``random.Random``. The protocol is KIP-595 (pull-based Raft with
epochs), with KIP-996 pre-vote, KAFKA-15489 check quorum, KIP-630 snapshots,
and ReadIndex reads (Raft thesis §6.4), which Kafka does not have.

Theory of operation
===================

State. A node holds three kinds of state, and each lives in one place:

- *Durable* state, which the driver writes before anything that depends on
  it leaves (``Output``): the election record (epoch, vote, leader;
  ``_set_election_state``), the log and the snapshot.
- *Node* state that outlives roles: the high watermark (monotonic per
  node), the durable log end and the outputs not yet durable, the logical
  clock, the fetch request counter, the election retry count and an
  observer's rotation through the voters (each says at its definition why
  it must survive a change of role).
- *Role* state, one object per role (``_role_state.py``, as Kafka's
  ``EpochState`` family): ``UnattachedState``, ``FollowerState``,
  ``CandidacyState`` (Prospective and Candidate), ``LeaderState``,
  ``ResignedState``. ``_enter_role`` is the only way to change role: it
  checks the change against the transition table (``_roles.py``), lets a
  leader answer whoever waits on it, and replaces the object. A follower
  or an observer without a leader also holds a ``FetcherState``.

Time. Timers are absolute tick numbers, owned by the role that uses them
and fired by ``tick()`` through the role: an election deadline
(Unattached voters, Prospective, Candidate, Resigned), the fetch timeout
(Follower), the check-quorum deadline and BeginQuorumEpoch resend and
parked-fetch expiries (Leader), the EndQuorumEpoch resend (Resigned), and a
fetcher's request deadline. Election timeouts are random (Raft thesis §3.4)
from the injected generator, drawn in a fixed order, so that one seed
replays one history. ``next_timer_tick`` names the earliest tick at which
``tick()`` may act: a driver may sleep until it (the trio runtime's ticker,
issue 21), asking again after every other input, as long as it still
feeds every tick in order.

Messages. Every message passes the epoch prologue first
(``_epoch_prologue``): a later epoch is adopted, an earlier one refused
(request) or dropped (response); only then does the handler look at the
role. Every change of epoch is a change of role, so no role object ever
sees two epochs. Before the epoch is read, the prologue drops a message
carrying a number no layer can hold, refuses a Vote that is not between
voters, and refuses every Vote and pre-vote while this node knows of a live
leader (the leader lease, Raft thesis §4.2.3): a server that lost touch
with the leader, or a stranger flooding rising epochs, cannot depose a
leader that a majority still hears.

Acknowledgements. Replication is pull-based (KIP-595): the leader learns a
replica's progress only from that replica's Fetch. Its ``fetch_offset``
*is* the acknowledgement of every record below it, which is why a
fetcher's Fetch may leave only after its log is durable (the ``Output``
contract). The leader counts itself through ``persisted`` only (Raft
thesis §10.2.1: it replicates in parallel with its own write). A voter's
Fetch also echoes the last read token it received, which confirms
ReadIndex reads (§6.4), and counts toward check quorum (KAFKA-15489).
Votes are acknowledged by VoteResponse, leadership announcements by the
first Fetch that follows them, resignations by EndQuorumEpochResponse.

Repair. A voter whose storage found its log damaged (not merely torn) is
built with a ``RepairState`` and acts as an observer: it grants no vote,
never stands, and fetches from the leader until its log provably holds
every committed record it may have acknowledged (``_maybe_finish_repair``;
Protocol-Aware Recovery, FAST '18; docs/storage.md, "Repair").

Voters. The voter set is node state that outlives roles: static (the
config's ``voters``) or, with ``bootstrap_voters``, dynamic (KIP-853): the
last VOTERS record in the log, committed or not, else the snapshot's or
the bootstrap set (Raft thesis §4.1). It is put in force where the log
changes (``_note_voter_records``, ``_truncate_log``, ``_install_snapshot``)
and every count reads it: majorities, check quorum, pre-vote, elections,
the high watermark and ReadIndex. A voter is an id and a directory id: a
wiped disk is another replica. A leader appends one change at a time, only
after committing a record of its own epoch (``_reconfiguring_leader``);
a leader that removed itself resigns once that is committed (``_flush``).

Commitment. The high watermark is the largest offset a majority of voters
has acknowledged, once that passes the leader's LEADER_CHANGE record
(Raft thesis §3.6.2); the arithmetic is in ``_quorum_math.py``. Followers
learn it from Fetch responses, bounded by their own validated log.

Errors (``_errors.py``). ``QuorumInvariantError`` is the one "bug in us"
error: a safety rule would be broken, and the node must stop rather than go
on with a corrupt view. ``NotLeaderError`` is the caller's, and retriable
elsewhere. Misuse by the driver (a message for another node, a snapshot of
uncommitted records) is a ``ValueError`` or ``TypeError``, as for any
Python API. A peer's malformed message is stopped at the edge
(``quorum/wire`` validates every field, records included), and the core
checks again that every number fits the ranges of ``_types.py``: one that
does not is dropped and counted (``counters``, ``CoreHooks.protocol_error``),
never raised, since the simulator and embedders feed the core directly. A
well-formed message the core disagrees with is refused with an error code,
or dropped.
Only one that would break a safety rule (truncate below the high
watermark, a second leader in one epoch) raises ``QuorumInvariantError``:
one side has a bug.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from typing import Any, Callable, TypeVar

from ._config import QuorumConfig
from ._errors import NotLeaderError, QuorumError, QuorumInvariantError, ReconfigurationError
from ._log import MemoryLog
from ._messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
    describe_message,
)
from ._output import NO_OUTPUT, Output, ReadFailed, ReadReady, Role, RoleChange
from ._quorum_math import next_high_watermark, read_confirmed
from ._role_state import (
    CandidacyState,
    FetcherState,
    FetchInFlight,
    FollowerState,
    LeaderState,
    ParkedFetch,
    PendingPersist,
    PendingRead,
    ReplicaState,
    ResignedState,
    RoleState,
    SnapshotDownload,
    UnattachedState,
)
from ._roles import Trigger, describe_transition, transition_allowed
from ._types import (
    DATA_KIND,
    EPOCH_MAX,
    INT64_MAX,
    NODE_ID_MAX,
    OFFSET_MAX,
    PER_BATCH_CHECK_MIN_RECORDS,
    VOTERS_KIND,
    ElectionState,
    Entry,
    OffsetAndEpoch,
    RecordKind,
    SnapshotId,
    one_epoch_columns,
)
from ._voters import (
    VOTERS_MAX,
    Voter,
    VoterSet,
    check_endpoint,
    join_snapshot,
    snapshot_header_problem,
    snapshot_holds_voters,
    split_snapshot,
    voter_set_problem,
)

# The errors live in _errors.py; ``quorum/__init__.py`` imports them from here.
__all__ = [
    "CoreHooks",
    "NotLeaderError",
    "QuorumDescription",
    "QuorumError",
    "QuorumInvariantError",
    "QuorumNode",
    "ReconfigurationError",
    "ReplicaDescription",
    "Snapshot",
]


@dataclass(frozen=True, slots=True)
class RepairState:
    """A node whose durable log was found damaged, repairing it (Protocol-
    Aware Recovery, Alagappan et al., FAST '18: a damaged log is not a short
    log). Given to ``QuorumNode`` at construction from the durable repair
    marker storage wrote when it cut the damage (docs/storage.md, "Repair").

    ``damaged_from_offset``: the first offset storage could not trust; the
    log handed to the core ends there. ``restart_epoch``: the epoch of the
    election state when the damage was found; every vote this node ever
    cast is in an epoch at or below it. ``acknowledged_end``: the end of
    what was on disk before the damage (an upper bound of every offset the
    node may have acknowledged), or None if the damage hides it.
    """

    damaged_from_offset: int
    restart_epoch: int
    acknowledged_end: int | None

    def __post_init__(self) -> None:
        for name in ("damaged_from_offset", "restart_epoch"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"RepairState.{name} must be a non-negative int, got {value!r}")
        end = self.acknowledged_end
        if end is not None and (not isinstance(end, int) or end < self.damaged_from_offset):
            raise ValueError(f"RepairState.acknowledged_end must be None or >= damaged_from_offset, got {end!r}")

    def merged_with(self, found: RepairState) -> RepairState:
        """This repair, recorded, and damage ``found`` at a later start: the
        earliest damage, the later restart epoch (every vote was cast at or
        below it), the largest acknowledged end, unknown if either is, except
        when ``found`` is this same damage with the end hidden by files a
        crashed repair had already moved aside (the record kept it)."""
        ends = (self.acknowledged_end, found.acknowledged_end)
        if found.acknowledged_end is None and found.damaged_from_offset == self.damaged_from_offset:
            ends = (self.acknowledged_end, self.acknowledged_end)
        return RepairState(
            damaged_from_offset=min(self.damaged_from_offset, found.damaged_from_offset),
            restart_epoch=max(self.restart_epoch, found.restart_epoch),
            acknowledged_end=None if ends[0] is None or ends[1] is None else max(ends[0], ends[1]),
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A state-machine snapshot of every record below
    ``snapshot_id.end_offset`` (KIP-630). The core never looks inside
    ``data``: it stores it, serves it in chunks and hands it back."""

    snapshot_id: SnapshotId
    data: bytes


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """One replica as DescribeQuorum reports it. Only a leader knows other
    replicas' progress (it learns it from their Fetches); any other node
    reports its own log end and nothing for the rest."""

    node_id: int
    log_end_offset: int | None
    last_fetch_ms: int | None  # logical ms since this node started
    # The directory id the voter set names (voters), or the one the
    # replica's latest Fetch carried (observers); None when not known.
    directory_id: str | None = None


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    """DescribeQuorum: what this node knows of the quorum."""

    node_id: int
    role: Role
    epoch: int
    leader_id: int | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    voters: tuple[ReplicaDescription, ...]
    observers: tuple[ReplicaDescription, ...]
    # What the disk last said when a write or fsync failed ("ENOSPC",
    # "EIO"), while it has not yet succeeded again; None when healthy.
    disk_failure: str | None = None
    # This node repairs a damaged log (``RepairState``): it neither votes
    # nor stands.
    repairing: bool = False
    # A leader's view of its peers: the voters whose latest Fetch said they
    # repair a damaged log (``FetchRequest.repairing``); empty on any
    # other role.
    repairing_voters: tuple[int, ...] = ()


# The fetch-extension hook: called by the leader for every valid Fetch that
# carries an extension (a broker's heartbeat); its result is returned in the
# response's ``extension``. Must be deterministic and do no IO.
FetchExtensionHandler = Callable[[FetchRequest], Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreHooks:
    """The host's hooks into a ``QuorumNode``, given once at construction.

    Each is optional, must be deterministic and must do no IO: the core calls
    them in the middle of a step, and a replayed seed must call them with the
    same arguments in the same order.

    - ``fetch_extension_handler`` — on the leader, for every valid Fetch that
      carries an ``extension`` (a broker's heartbeat); its
      result goes back in the response's ``extension``.
    - ``fetch_extension_provider`` — on a follower or observer, for the
      ``extension`` of each Fetch it sends.
    - ``fetch_extension_consumer`` — on a follower or observer, with the
      ``extension`` of each answer to its Fetch.
    - ``protocol_error`` — with a one-line description of each message the
      core dropped because no correct peer sends it: a number outside what
      the wire and storage can hold (``_types.py``), or records out of log
      order; and of each broker's Fetch refused for naming a voter's id,
      on either side (INCONSISTENT_VOTER_SET). The peer's fault, or an
      operator's; every such drop
      is also counted (``QuorumNode.counters``); a host that logs them
      should log the first and count the rest, since a hostile peer can
      send them at any rate.
    """

    fetch_extension_handler: FetchExtensionHandler | None = None
    fetch_extension_provider: Callable[[], Any] | None = None
    fetch_extension_consumer: Callable[[Any], None] | None = None
    protocol_error: Callable[[str], None] | None = None


_NO_HOOKS = CoreHooks()
_new_tuple = tuple.__new__  # builds an Entry from its fields without a Python call
# Observers answered per step once the high watermark moved (issue 21):
# 5,000 brokers' answers in one step would hold up a voter's Fetch behind
# them in the driver (it sends and encodes a step's answers before it steps
# the core again); 512 at ~15 us each (core and encoding) are ~8 ms, and
# 5,000 are answered within 10 steps, at most 10 ticks (100 ms) when no
# message arrives meanwhile.
OBSERVER_ANSWERS_PER_STEP_MAX = 512
# ...and at most about this many records in those answers. An answer carries
# every record its broker lacks (up to ``fetch_bytes_max``, 8 MiB), and
# encoding costs ~0.4 us a record: when 5,000 brokers start at once, each
# one's first heartbeat appends an unfencing record, and brokers lagging by
# thousands of records made 512 answers a step ~250 ms of encoding, 16 such
# steps between two reads of a voter's connection (the runtime's observer
# batch), and the followers' fetch timeouts fired (issue 21, 2026-11-26,
# docs/benchmarks.md). 16,384 records are ~7 ms, as 512 short answers are.
# At least one answer goes out per step, however many records it carries.
OBSERVER_ANSWER_RECORDS_PER_STEP_MAX = 16_384
_LEADER = Role.LEADER

# What ``QuorumNode.counters`` counts: inputs the core turned away without
# acting on them, and stands it could not make.
_COUNTER_NAMES = (
    # A number outside what the wire and storage hold (_field_out_of_range),
    # or a Fetch answer's records out of log order.
    "messages_out_of_range",
    # A message naming this very node as its sender: forged, or from a
    # second process configured with this node's id.
    "messages_from_own_id",
    # A BeginQuorumEpoch from another node than the one this node knows
    # won the epoch (itself included): forged, or a peer's bug.
    "messages_contradicting_leader",
    # A Vote or pre-vote while a live leader is known (Raft thesis §4.2.3).
    "votes_ignored_leader_alive",
    # A Vote or pre-vote from a non-voter, or to one (only voters vote).
    "votes_refused_not_voter",
    # Any other message a non-voter cannot send (a BeginQuorumEpoch, an
    # EndQuorumEpoch, an answer to a request only voters receive), and a
    # Fetch from a non-voter claiming a later epoch.
    "messages_refused_not_voter",
    # A Vote or pre-vote to a voter repairing a damaged log (RepairState).
    "votes_refused_repairing",
    # A Vote or pre-vote naming another disk of this node id than ours
    # (KIP-853 VoterDirectoryId): the candidate's set holds a replica whose
    # votes and acknowledgements this disk never held.
    "votes_refused_other_directory",
    # An election timer fired at EPOCH_MAX: there is no next epoch to stand in.
    "stands_refused_epoch_max",
    # A write or fsync the driver reported failed (``persist_failed``), one
    # per failure condition, and an election timer that fired meanwhile.
    "disk_failures",
    "stands_refused_disk_failed",
    # A Fetch marked ``observer`` (a broker) naming a voter's id: two
    # processes configured with one node id (INCONSISTENT_VOTER_SET).
    "fetches_refused_observer_with_voter_id",
    # This node's own Fetches refused so (a broker given a voter's id).
    "own_fetches_refused_voter_id",
)

# The two halves of the protocol, as the epoch prologue sees them: a request
# from an earlier epoch is refused (its sender must learn ours), a response
# from one is dropped (it answers a question we no longer ask).
_Request = FetchRequest | FetchSnapshotRequest | VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest
_Response = FetchResponse | FetchSnapshotResponse | VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse
_REQUEST_TYPES = (FetchRequest, FetchSnapshotRequest, VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest)
_RESPONSE_TYPES = (FetchResponse, FetchSnapshotResponse, VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse)
_MESSAGE_TYPES = _REQUEST_TYPES + _RESPONSE_TYPES
# What any node may send, voter or not: fetches (observers fetch), votes
# (refused later, with their own answer) and answers to a fetch (accepted
# only as the answer to the request in flight, ``FetcherState.accept``).
_ANY_SENDER_TYPES = (FetchRequest, FetchSnapshotRequest, VoteRequest, FetchResponse, FetchSnapshotResponse)


def _later_epoch_reason(request: _Request) -> str:
    """The RoleChange reason when ``request`` brings news of a later epoch."""
    match request:
        case FetchRequest():
            return "fetch from a later epoch"
        case FetchSnapshotRequest():
            return "snapshot fetch from a later epoch"
        case VoteRequest():
            return f"vote request from {request.src} in a later epoch"
        case BeginQuorumEpochRequest():
            return f"{request.src} began epoch {request.epoch}"
        case EndQuorumEpochRequest():
            return f"{request.src} ended epoch {request.epoch}"


# Each message type's plain numeric fields and the largest value each may
# take (all are non-negative; None, where a field is optional, passes). One
# table, read by ``_field_out_of_range`` on every message a node receives.
_NUMERIC_FIELDS: dict[type, tuple[tuple[str, int], ...]] = {
    VoteRequest: (
        ("src", NODE_ID_MAX), ("epoch", EPOCH_MAX), ("last_epoch", EPOCH_MAX), ("end_offset", OFFSET_MAX),
    ),
    VoteResponse: (("src", NODE_ID_MAX), ("epoch", EPOCH_MAX), ("leader_id", NODE_ID_MAX)),
    FetchRequest: (
        ("src", NODE_ID_MAX), ("epoch", EPOCH_MAX), ("fetch_offset", OFFSET_MAX), ("last_fetched_epoch", EPOCH_MAX),
        ("request_id", INT64_MAX), ("read_token", INT64_MAX),
    ),
    FetchResponse: (
        ("src", NODE_ID_MAX), ("epoch", EPOCH_MAX), ("request_id", INT64_MAX), ("leader_id", NODE_ID_MAX),
        ("high_watermark", OFFSET_MAX), ("log_start_offset", OFFSET_MAX), ("read_token", INT64_MAX),
    ),
    FetchSnapshotRequest: (
        ("src", NODE_ID_MAX), ("epoch", EPOCH_MAX), ("position", OFFSET_MAX), ("request_id", INT64_MAX),
    ),
    FetchSnapshotResponse: (
        ("src", NODE_ID_MAX), ("epoch", EPOCH_MAX), ("request_id", INT64_MAX), ("leader_id", NODE_ID_MAX),
        ("position", OFFSET_MAX), ("size", OFFSET_MAX),
    ),
}  # fmt: skip
_COMMON_FIELDS = (("src", NODE_ID_MAX), ("epoch", EPOCH_MAX))


def _compile_range_test(fields: tuple[tuple[str, int], ...]) -> Callable[[Any], bool]:
    """A function telling, in one expression, whether every field of
    ``fields`` is None or within its range: the table's common case. A loop
    over the table with ``getattr`` cost twice as much on every message
    received, and the loop remains to describe what does not fit. Built
    from the constant table above only, never from input."""
    terms = [f"(m.{name} is None or 0 <= m.{name} <= {highest})" for name, highest in fields]
    return eval("lambda m: " + " and ".join(terms))  # noqa: S307 - names and numbers from _NUMERIC_FIELDS


_FIELDS_IN_RANGE: dict[type, Callable[[Any], bool]] = {
    kind: _compile_range_test(fields) for kind, fields in _NUMERIC_FIELDS.items()
}
_COMMON_FIELDS_IN_RANGE = _compile_range_test(_COMMON_FIELDS)


def _field_out_of_range(message: _Request | _Response) -> str | None:
    """The first number in ``message`` that lies outside what the wire and
    storage can hold (the limits in ``_types.py``), described; None when
    every one fits.

    The wire decoder refuses such messages first, but the core defends
    itself as well: the simulator and embedders hand it messages directly,
    and a value the core adopted (an epoch, a record) would be persisted
    and could not be read back, or sent and could not be decoded. A Fetch
    answer's records are also checked for what the log requires of them:
    contiguous offsets, epochs that never decrease and none later than the
    leader's own. Every message passes through here, so the common case
    (everything in range) costs one table lookup and a comparison per
    field."""
    kind = type(message)
    if not _FIELDS_IN_RANGE.get(kind, _COMMON_FIELDS_IN_RANGE)(message):
        for name, highest in _NUMERIC_FIELDS.get(kind, _COMMON_FIELDS):
            value = getattr(message, name)
            if value is not None and not 0 <= value <= highest:
                return f"{name} {value} outside 0..{highest}"
    if kind is FetchRequest:
        if type(message.repairing) is not bool:
            return f"repairing {message.repairing!r} is not a bool"
        if type(message.observer) is not bool:
            return f"observer {message.observer!r} is not a bool"
    if kind is FetchResponse:
        if message.leader_endpoint is not None:
            try:
                check_endpoint(message.leader_endpoint, "leader_endpoint")
            except ValueError as error:
                return str(error)
        if message.diverging is not None:
            problem = _offset_and_epoch_problem("diverging", message.diverging.offset, message.diverging.epoch)
            if problem is not None:
                return problem
        if message.snapshot_id is not None:
            problem = _snapshot_id_problem(message.snapshot_id)
            if problem is not None:
                return problem
        if message.records:
            return _records_problem(message.records, message.epoch)
    elif kind is FetchSnapshotRequest or (kind is FetchSnapshotResponse and message.snapshot_id is not None):
        return _snapshot_id_problem(message.snapshot_id)
    elif kind is EndQuorumEpochRequest:
        for successor in message.preferred_successors:
            if not 0 <= successor <= NODE_ID_MAX:
                return f"preferred_successors {successor} outside 0..{NODE_ID_MAX}"
    return None


def _snapshot_id_problem(snapshot_id: SnapshotId) -> str | None:
    return _offset_and_epoch_problem("snapshot", snapshot_id.end_offset, snapshot_id.epoch, offset_name="end offset")


def _offset_and_epoch_problem(what: str, offset: int, epoch: int, *, offset_name: str = "offset") -> str | None:
    if not 0 <= epoch <= EPOCH_MAX:
        return f"{what} epoch {epoch} outside 0..{EPOCH_MAX}"
    if not 0 <= offset <= OFFSET_MAX:
        return f"{what} {offset_name} {offset} outside 0..{OFFSET_MAX}"
    return None


def _records_problem(records: Sequence[Entry], leader_epoch: int) -> str | None:
    """What is wrong with a Fetch answer's records, or None: offsets must
    run on without a gap and end within ``OFFSET_MAX``, and epochs never
    decrease (KIP-595: a log is ordered by epoch) nor pass the epoch of the
    leader that sent them (it holds no records of a later one). A VOTERS
    record must hold a valid voter set (a static cluster's first one is its
    upgrade to dynamic voters, ``QuorumNode.upgrade_voters``)."""
    expected = records[0].offset
    if expected < 0 or expected + len(records) - 1 > OFFSET_MAX:
        return f"records {expected}..{expected + len(records) - 1} outside 0..{OFFSET_MAX}"
    if len(records) >= PER_BATCH_CHECK_MIN_RECORDS:
        columns = one_epoch_columns(records, expected)
        if columns is not None:
            # The common case, checked per batch: one epoch in range, no
            # VOTERS record (those take the loop, which checks their sets).
            epoch, kinds = columns[1][0], columns[2]
            if 0 <= epoch <= leader_epoch and kinds.count(DATA_KIND) == len(kinds):
                return None
    previous_epoch = 0
    for entry in records:
        if entry.offset != expected:
            return f"record at offset {entry.offset} where {expected} was expected"
        if not previous_epoch <= entry.epoch <= leader_epoch:
            return f"record epoch {entry.epoch} at offset {entry.offset} outside {previous_epoch}..{leader_epoch}"
        if entry.kind is VOTERS_KIND:
            problem = voter_set_problem(entry.data)
            if problem is not None:
                return f"voter set record at offset {entry.offset}: {problem}"
        previous_epoch = entry.epoch
        expected += 1
    return None


def _log_up_to_date(request: VoteRequest, log: MemoryLog) -> bool:
    """Raft thesis §3.6.1 election restriction: grant only to a candidate
    whose log is at least as up to date as ours (last epoch first, then
    length), so that the winner holds every committed record."""
    return OffsetAndEpoch(request.last_epoch, request.end_offset) >= log.last


def _check_fetch_position(
    log: MemoryLog, snapshot: Snapshot | None, request: FetchRequest
) -> tuple[OffsetAndEpoch | None, SnapshotId | None]:
    """KIP-595 offset validation: is the fetcher's log a prefix of ours?
    Returns (None, None) if so; else where it diverges (it truncates
    there), or the snapshot it must load because we no longer hold the
    records it lacks (KIP-630)."""
    offset, epoch = request.fetch_offset, request.last_fetched_epoch
    if snapshot is not None:
        # KIP-630: behind our log start, or at it with another epoch, or
        # with an epoch older than anything we hold: only the snapshot
        # can bring this fetcher back onto the committed history.
        if (
            offset < log.start_offset
            or (offset == log.start_offset and epoch != log.start_epoch)
            or epoch < log.start_epoch
        ):
            return None, snapshot.snapshot_id
    if epoch == log.last_epoch and offset <= log.end_offset:
        # The common case (every Fetch of a follower in step), decided as
        # below but without building the OffsetAndEpoch: our last epoch is
        # never below our start epoch, and our log of it ends at our end.
        return None, None
    found = log.end_offset_for_epoch(epoch)
    if found is None:
        # No snapshot and an epoch below our start epoch (0): a malformed
        # request; send the fetcher back to the start.
        return OffsetAndEpoch(log.start_epoch, log.start_offset), None
    if found.epoch != epoch or offset > found.offset:
        # KIP-595 DivergingEpoch: where our log of that epoch ends (or
        # the next epoch we have begins); the fetcher truncates there.
        return found, None
    return None, None


# A role-state class, for _role_state's typed lookup.
_S = TypeVar("_S", UnattachedState, FollowerState, CandidacyState, LeaderState, ResignedState, FetcherState)


class QuorumNode:
    """One replica of the metadata log. See the module docstring.

    Construct it with what durable storage recovered (``election_state``,
    ``log``, ``snapshot``); a fresh node passes nothing.
    """

    def __init__(
        self,
        config: QuorumConfig,
        *,
        rng: random.Random,
        election_state: ElectionState | None = None,
        log: MemoryLog | None = None,
        snapshot: Snapshot | None = None,
        hooks: CoreHooks = _NO_HOOKS,
        fetch_session: int = 0,
        repairing: RepairState | None = None,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self._rng = rng
        self._snapshot = snapshot
        self._log = log if log is not None else MemoryLog(snapshot.snapshot_id if snapshot else None)
        self._hooks = hooks
        self._tick = 0
        self._out = Output()
        self._persist_seq = 0
        # Outputs handed to the driver whose persistence it has not yet
        # reported durable, oldest first (see ``persisted``).
        self._unpersisted: deque[PendingPersist] = deque()
        # The log end the driver has made durable: all the leader may count
        # of itself toward the high watermark (Raft thesis §10.2.1).
        self._durable_end = self._log.end_offset
        # Set by ``persist_failed`` (the errno name), cleared by the next
        # ``persisted``: while set, this node acknowledges nothing, grants
        # no vote, does not stand and does not fetch (docs/storage.md,
        # "Disk errors").
        self._disk_failure: str | None = None
        # The high watermark: every record below it is committed. Per-node
        # monotonic. After a restart it is only known up to the snapshot.
        self._hw = self._log.start_offset if snapshot else 0
        self._hw = max(self._hw, snapshot.snapshot_id.end_offset if snapshot else 0)

        # The durable election state (KIP-595 quorum-state) and the role
        # derived from it. ``_persisted_election`` is the last record handed
        # to the driver, so that an unchanged record is not rewritten.
        stored = election_state or ElectionState(epoch=0)
        self._epoch = stored.epoch
        self._voted_for = stored.voted_for
        self._leader_id = stored.leader_id
        self._persisted_election = stored
        self._role = Role.UNATTACHED
        # The role's own state; replaced on every change of role. This
        # placeholder is never used: _initialize enters the recovered role.
        self._state: RoleState = UnattachedState(election_deadline=0)
        # True until _initialize has picked the role recovered from disk: the
        # transition table (_roles.py) knows that first change as a start.
        self._starting = True

        # Node-wide state that outlives roles on purpose (each says why).
        # Consecutive candidacies without hearing of a leader: they span
        # Candidate -> Prospective -> Candidate rounds, so the election
        # backoff keeps growing until someone wins (KIP-595 backoff); reset
        # when a later epoch or a leader is learned.
        self._election_retries = 0
        # Fetch request ids are ``fetch_session << 32 | sequence``. The
        # session tells one process of a node from the next: a restarted
        # node's sequence starts again at 1, and without it the leader would
        # take every fetch of the new process for a network duplicate of the
        # old process's parked one (see _serve_fetch). The runtime draws
        # it at random per process start, the simulator uses the incarnation.
        if not 0 <= fetch_session < 1 << 31:
            raise ValueError("fetch_session must be in [0, 2**31)")
        self._fetch_request_id = fetch_session << 32
        # An observer without a leader asks the voters in turn; it resumes
        # the rotation where it stopped, rather than asking the same
        # (possibly dead) voter first every time it loses its leader.
        self._bootstrap_index = 0
        # Where the leaders that NOT_LEADER answers named listen (node id ->
        # "HOST:PORT", KIP-853 NodeEndpoints): a fetcher that was given one
        # controller's address (a broker) reaches the leader it is sent to
        # through the host, which reads ``learned_endpoints``, and an
        # observer without a leader also asks them in turn. Node state: it
        # outlives roles (the next leader is found the same way). Replaced,
        # never changed in place, so a host sees a change by identity.
        self._learned_endpoints: Mapping[int, str] = {}
        # Where the static voters listen (the config's), for the NOT_LEADER
        # answers of a cluster whose voter set names no endpoints.
        self._static_endpoints = dict(config.voter_endpoints)
        # How often each kind of input was turned away (``counters``); for
        # the host's metrics and logs, never part of a decision.
        self._counters: dict[str, int] = dict.fromkeys(_COUNTER_NAMES, 0)
        # The voter set (KIP-853), node state that outlives roles: the set
        # in force at the log start (the snapshot's, or the bootstrap or
        # static set), and every VOTERS record in the log, oldest first. The
        # set in force is the last record's, committed or not (Raft thesis
        # §4.1: a server uses the latest configuration in its log); a
        # truncated record takes its set with it.
        self._base_voters = config.initial_voter_set
        # Is the base set dynamic (KIP-853 kraft.version 1): bootstrapped,
        # or the set of a snapshot taken after a static cluster's upgrade
        # (``upgrade_voters``)? With a VOTERS record in the log, the
        # cluster is dynamic whatever the base (``dynamic_voters``).
        self._base_dynamic = config.dynamic_voters
        if snapshot is not None:
            # A snapshot says which it is (``snapshot_taken`` writes the set
            # iff the voters were dynamic at its end). Without the header it
            # was taken before a static cluster's upgrade, even on a node
            # formatted to join the upgraded cluster: a leader whose newest
            # snapshot predates the upgrade sends that one (the sweep's seed
            # 180174). The log after it holds the upgrade's VOTERS record.
            self._base_dynamic = snapshot_holds_voters(snapshot.data)
            if self._base_dynamic:
                self._base_voters = split_snapshot(snapshot.data)[0]
        self._voter_records: list[tuple[int, VoterSet]] = []
        self._voters = self._base_voters
        self._voter_ids = frozenset(self._voters.ids)
        self._is_voter = self._holds_self(self._voters)
        self._note_voter_records(self._log.slice(self._log.start_offset))
        # A node repairing a damaged log acts as an observer until its log
        # is repaired from a leader (``_maybe_finish_repair``): it grants
        # no vote and never stands. A node that is an observer by what its
        # damaged log says repairs too: the damage may have cut the record
        # that made it a voter, and a leader's records, or a candidate whose
        # set names its disk (``_addressed_as_voter``), may make it one again
        # before it holds all it acknowledged (then it must not vote, FAST
        # '18; sweep seed 306014). Before, the repair was dropped here and
        # its durable marker kept: a disk added as a voter later came back
        # from its next restart repairing a damage long since repaired,
        # unable to vote (with another damaged voter, no majority could
        # elect anyone: the sweep's seed 12712).
        self._repair = repairing
        # The candidate whose vote request named this node a voter, with
        # this very disk, that its own log does not (``_note_named_voter``):
        # then this node stands too. Memory only: the next such request
        # tells it again.
        self._named_voter_by: int | None = None

        self._initialize(stored)

    # =====================================================================
    # Queries
    # =====================================================================

    @property
    def role(self) -> Role:
        """The role (KIP-595, KIP-996 names); it changes only through the
        transition table in ``_roles.py``."""
        return self._role

    @property
    def repairing(self) -> RepairState | None:
        """The repair under way (this voter then neither votes nor stands),
        or None: a sound voter, or an observer."""
        return self._repair

    @property
    def _votes(self) -> bool:
        """Does this node take part in elections: a voter whose log is not
        under repair. Protocol-Aware Recovery (FAST '18): a node must not
        vote with a copy of the log it knows to be damaged, nor stand."""
        return self._is_voter and self._repair is None

    @property
    def _stands(self) -> bool:
        """Does this node stand for election when its timer fires: a voter
        that votes (``_votes``), or a node whose own removal is the last,
        uncommitted change in its log (Raft thesis §4.2.2, Figure 4.6: it
        may still be needed to commit that change; a leader that removed
        itself and crashed may hold the only copy). Such a node counts
        only the votes of its set, which lacks itself, and grants none.

        A node that a candidate's set names as a voter, with this disk,
        while its own log's set does not, and whose log is ahead of that
        candidate's, stands as well (``_note_named_voter``)."""
        return self._votes or (self._repair is None and (self.removal_pending or self._named_voter_by is not None))

    @property
    def named_voter_by(self) -> int | None:
        """The candidate whose vote request named this node a voter that
        its own log does not, and whose log is behind this node's: this
        node then stands, counting the votes of its own set
        (``_note_named_voter``). None otherwise, and once it leads or its
        leader answers a Fetch."""
        return self._named_voter_by

    def _holds_self(self, voters: VoterSet) -> bool:
        """Is this node (its id and disk) a voter of ``voters``? Never for
        an observer for good (``QuorumConfig.observer_only``, a broker):
        a set naming its id names another process, a controller."""
        return not self.config.observer_only and voters.holds(self.node_id, self.config.directory_id)

    @property
    def removal_pending(self) -> bool:
        """Is this node's own removal the last voter change in its log,
        not yet known to be committed (it was a voter of the set before)?"""
        if self._is_voter or not self._voter_records or self._voter_records[-1][0] < self._hw:
            return False
        return self._holds_self(self.voters_at(self._voter_records[-1][0]))

    @property
    def epoch(self) -> int:
        """The latest epoch this node knows; never decreases (KIP-595)."""
        return self._epoch

    @property
    def leader_id(self) -> int | None:
        """The leader this node knows of; None when unknown, and for a
        resigned leader (which still records itself, so that it restarts
        Resigned, but leads no more)."""
        return None if self._role is Role.RESIGNED else self._leader_id

    @property
    def voted_for(self) -> int | None:
        """Whom this node voted for in ``epoch`` (Raft thesis §3.4: at most
        one vote per epoch, kept across restarts)."""
        return self._voted_for

    @property
    def high_watermark(self) -> int:
        """Every record below this offset is committed. Monotonic on each
        node; on a new leader it may lag the cluster's until
        ``leader_has_committed_own_epoch`` (Raft thesis §3.6.2)."""
        return self._hw

    @property
    def answered_high_watermark(self) -> int | None:
        """A follower's or observer's: the high watermark the last answer
        from its leader carried, unbounded by this node's log (``None``
        after an answer that took no records' position: an error, a
        divergence, a snapshot; and in every role that does not fetch).
        The log holds every record the leader had committed when it
        answered iff ``log.end_offset >=`` this (a broker's freshness
        proof, ``broker_agent``)."""
        fetcher = self._fetcher
        return None if fetcher is None else fetcher.answered_high_watermark

    @property
    def log(self) -> MemoryLog:
        """The in-memory log. Read only: mutate it through inputs."""
        return self._log

    @property
    def snapshot(self) -> Snapshot | None:
        """The latest snapshot, taken here or fetched from the leader."""
        return self._snapshot

    @property
    def current_tick(self) -> int:
        """Ticks since this node started: its only notion of time."""
        return self._tick

    @property
    def timers(self) -> dict[str, int]:
        """The current role's timers, by name (``election``, ``fetch``,
        ``check_quorum``, ...): ticks left until each fires, for views
        (the browser playground draws them as bars). A copy."""
        state = self._state
        return {
            name[: -len("_deadline")]: getattr(state, name) - self._tick
            for name in sorted(getattr(type(state), "__slots__", ()))
            if name.endswith("_deadline")
        }

    @property
    def next_timer_tick(self) -> int:
        """The earliest tick at which ``tick()`` may act: before it, every
        tick only advances ``current_tick`` (no output, no change of state),
        so a driver may leave its clock asleep until then, as long as it
        asks again after every other input (any input may set a nearer
        timer) and still feeds every tick in order. Conservative, never
        later than the first tick that acts; always after ``current_tick``.
        O(1) but for a leader's parked fetches, recomputed once their
        earliest expiry has passed."""
        now = self._tick
        state = self._state
        if isinstance(state, FollowerState):
            due = min(state.fetch_deadline, self._fetcher_due(state.fetcher))
        elif isinstance(state, LeaderState):
            if state.observers_due:
                return now + 1  # answered a bounded group per input (_flush)
            due = state.begin_epoch_deadline
            alone = len(self._voters) == 1 and self._is_voter  # as _tick_leader
            if self.config.check_quorum and not alone and state.check_quorum_deadline < due:
                due = state.check_quorum_deadline
            floor = state.parked_expiry_floor
            if floor <= now:
                # Passed (or never computed): the parked fetches' earliest
                # expiry, or, with none parked, the earliest one parked from
                # now on could have.
                floor = min(
                    (parked.expire_tick for parked in state.parked.values()),
                    default=now + self.config.ticks(self.config.fetch_max_wait_ms),
                )
                state.parked_expiry_floor = floor
            if floor < due:
                due = floor
        elif isinstance(state, UnattachedState):
            if state.fetcher is None:
                due = state.election_deadline
            else:
                due = self._fetcher_due(state.fetcher)
                if self._named_voter_by is not None and self._stands and state.election_deadline < due:
                    due = state.election_deadline  # named a voter elsewhere (tick)
        elif isinstance(state, ResignedState):
            due = min(state.election_deadline, state.end_epoch_deadline)
        else:
            due = state.election_deadline
        return due if due > now else now + 1

    @staticmethod
    def _fetcher_due(fetcher: FetcherState) -> int:
        """When a fetcher's tick may act: its request's deadline, or with
        none in flight the tick from which it may send the next."""
        in_flight = fetcher.in_flight
        return in_flight.deadline_tick if in_flight is not None else fetcher.next_fetch_tick

    @property
    def counters(self) -> dict[str, int]:
        """How often this node turned an input away, by kind (a copy):
        ``messages_out_of_range`` (dropped: a number no layer can hold, or
        records out of log order), ``messages_from_own_id`` (dropped: it
        names this node as its sender), ``messages_contradicting_leader``
        (dropped: a BeginQuorumEpoch from another than the epoch's known
        leader),
        ``votes_ignored_leader_alive`` (refused under the leader lease),
        ``votes_refused_not_voter``, ``votes_refused_other_directory``,
        ``stands_refused_epoch_max``."""
        return dict(self._counters)

    @property
    def is_leader(self) -> bool:
        """True while this node leads its epoch."""
        return self._role is Role.LEADER

    @property
    def epoch_start_offset(self) -> int:
        """Offset of this leader's LEADER_CHANGE record (leaders only: 0
        when this node does not lead)."""
        state = self._state
        return state.epoch_start_offset if isinstance(state, LeaderState) else 0

    @property
    def leader_has_committed_own_epoch(self) -> bool:
        """True when this node leads and a record of its own epoch is
        committed: only then is its high watermark the cluster's."""
        state = self._state
        return isinstance(state, LeaderState) and self._hw > state.epoch_start_offset

    @property
    def voters(self) -> VoterSet:
        """The voter set in force here: the last VOTERS record in the log,
        committed or not, else the snapshot's, bootstrap or static set."""
        return self._voters

    @property
    def is_voter(self) -> bool:
        """Is this node (its id and directory id) in its own voter set?"""
        return self._is_voter

    @property
    def voter_sets_in_log(self) -> tuple[VoterSet, ...]:
        """The base voter set (the snapshot's, bootstrap or static) and
        the set of every VOTERS record in the log, committed or not, oldest
        first (auto-join asks whether any of them held this disk)."""
        return (self._base_voters, *(voters for _offset, voters in self._voter_records))

    @property
    def dynamic_voters(self) -> bool:
        """Does this cluster have dynamic voters (KIP-853, Kafka's
        ``kraft.version`` 1): bootstrapped with them, or a static cluster
        whose leader wrote its first VOTERS record (``upgrade_voters``)?
        Read from the log and snapshot, not the configuration: a node of an
        upgraded cluster restarted with its old ``--voters`` list is
        dynamic all the same. Until then voter changes are refused
        (``VOTERS_STATIC``)."""
        return self._base_dynamic or bool(self._voter_records)

    def _dynamic_at(self, offset: int) -> bool:
        """Were the voters dynamic for a record at ``offset``?"""
        return self._base_dynamic or (bool(self._voter_records) and self._voter_records[0][0] < offset)

    @property
    def voter_change_pending(self) -> bool:
        """Is the last VOTERS record in the log not yet committed?"""
        return bool(self._voter_records) and self._voter_records[-1][0] >= self._hw

    def describe(self) -> QuorumDescription:
        """DescribeQuorum, answered from this node's own view."""
        voters: list[ReplicaDescription] = []
        observers: list[ReplicaDescription] = []
        # Only a leader hears from replicas; any other role knows itself.
        state = self._state
        replicas = state.replicas if isinstance(state, LeaderState) else {}
        for node_id in sorted(self._voter_ids | set(replicas)):
            voter = self._voters.get(node_id)
            own = node_id == self.node_id
            replica = replicas.get(node_id)
            fetching_directory_id = self.config.directory_id if own else (replica.directory_id if replica else None)
            if self._role is Role.LEADER and own:
                # A leader is current with itself at every tick.
                progress = (self._log.end_offset, self._tick * self.config.tick_ms)
            elif replica is not None:
                last_ms = None if replica.last_fetch_tick is None else replica.last_fetch_tick * self.config.tick_ms
                progress = (replica.end_offset, last_ms)
            elif own:
                progress = (self._log.end_offset, None)
            else:
                progress = (None, None)
            # A voter's id fetching with another disk (KIP-853: a wiped disk
            # formatted anew) is an observer until it is added; the voter it
            # replaces shows no progress.
            another_disk = (
                voter is not None
                and voter.directory_id is not None
                and fetching_directory_id is not None
                and fetching_directory_id != voter.directory_id
            )
            if voter is None or another_disk:
                observers.append(ReplicaDescription(node_id, *progress, fetching_directory_id))
            if voter is not None:
                shown = (None, None) if another_disk else progress
                voters.append(ReplicaDescription(node_id, *shown, voter.directory_id))
        return QuorumDescription(
            node_id=self.node_id,
            role=self._role,
            epoch=self._epoch,
            leader_id=self.leader_id,
            high_watermark=self._hw,
            log_start_offset=self._log.start_offset,
            log_end_offset=self._log.end_offset,
            voters=tuple(voters),
            observers=tuple(observers),
            disk_failure=self._disk_failure,
            repairing=self._repair is not None,
            repairing_voters=tuple(
                node_id for node_id, replica in sorted(replicas.items()) if replica.repairing and node_id in self._voter_ids
            )
            if self._role is Role.LEADER
            else (),
        )

    # =====================================================================
    # Inputs
    # =====================================================================

    def tick(self) -> Output:
        """Advance logical time by one tick and fire any due timer."""
        self._tick += 1
        now = self._tick
        # Each role fires only the timers it owns (_role_state.py).
        state = self._state
        if isinstance(state, LeaderState):
            self._tick_leader(now, state)
        elif isinstance(state, FollowerState):
            self._tick_follower(now, state)
        elif isinstance(state, UnattachedState):
            # A node named a voter elsewhere (``_note_named_voter``) keeps
            # looking for a leader as the observer it is, and stands when
            # its timer fires.
            # (An observer looking for a leader stands only once named: its
            # log cannot change while it looks, so the flag is asked first.)
            if now >= state.election_deadline and (
                state.fetcher is None or (self._named_voter_by is not None and self._stands)
            ):
                named_by = self._named_voter_by
                reason = "election timeout" if named_by is None else f"election timeout, named a voter by {named_by}"
                self._stand(reason, Trigger.ELECTION_TIMEOUT)
            elif state.fetcher is not None:
                # An observer: a request unanswered by its deadline is
                # presumed lost, and the next voter is asked.
                fetcher = state.fetcher
                if fetcher.in_flight is not None and now >= fetcher.in_flight.deadline_tick:
                    fetcher.in_flight = None
                    self._bootstrap_index += 1
                self._maybe_send_fetch(now)
        elif isinstance(state, CandidacyState):
            if now >= state.election_deadline:
                if self._role is Role.PROSPECTIVE:
                    # KIP-996: a pre-vote that no majority answered is lost.
                    self._lose_pre_vote("pre-vote timed out")
                elif state.backing_off:
                    self._stand("election backoff over", Trigger.ELECTION_TIMEOUT)
                else:
                    self._start_backoff(state)
        elif isinstance(state, ResignedState):
            if now >= state.election_deadline:
                # Nobody took over: stand ourselves, in a later epoch.
                self._stand("resigned leader's election timeout", Trigger.ELECTION_TIMEOUT)
            elif now >= state.end_epoch_deadline:
                self._send_end_quorum_epoch(state)
        return self._flush()

    def step(self, message: Message) -> Output:
        """Handle a message from a peer. Messages not addressed to this node
        are a driver bug (``ValueError``); anything but a quorum message is
        a ``TypeError``."""
        if message.dst != self.node_id:
            raise ValueError(f"message for node {message.dst} delivered to node {self.node_id}")
        if not isinstance(message, _MESSAGE_TYPES):
            raise TypeError(f"not a quorum message: {message!r}")
        if not self._epoch_prologue(message):
            return self._flush()
        # Same epoch: each handler dispatches on the role.
        match message:
            case FetchRequest():
                self._serve_fetch(self._leading, message)
            case FetchResponse():
                # Second: the cases are tried in order, and these two are
                # nearly every message a replica gets.
                self._on_fetch_response(message)
            case FetchSnapshotRequest():
                self._serve_fetch_snapshot(self._leading, message)
            case VoteRequest() if message.pre_vote:
                self._on_pre_vote_request(message)
            case VoteRequest():
                self._on_vote_request(message)
            case BeginQuorumEpochRequest():
                self._on_begin_quorum_epoch(message)
            case EndQuorumEpochRequest():
                self._on_end_quorum_epoch(message)
            case FetchSnapshotResponse():
                self._on_fetch_snapshot_response(message)
            case VoteResponse():
                self._on_vote_response(message)
            case EndQuorumEpochResponse():
                if isinstance(self._state, ResignedState):
                    # Acknowledged: stop resending EndQuorumEpoch to it.
                    self._state.end_epoch_acked.add(message.src)
                    self._observe_once_handed_over(self._state)
            case BeginQuorumEpochResponse():
                pass  # the Fetch that follows is the acknowledgement that counts
        return self._flush()

    def propose(self, payloads: Sequence[bytes]) -> tuple[int, Output]:
        """Append ``payloads`` as data records in this leader's epoch.

        Returns the offset of the first record and the output. A record at
        offset ``o`` is committed when a later output's ``committed`` holds
        an entry at ``o`` with this epoch; an entry at ``o`` with another
        epoch means this proposal was lost.

        Raises ``NotLeaderError`` when this node is not the leader.
        """
        if self._role is not Role.LEADER:
            raise NotLeaderError(self._leader_hint(), self._epoch)
        # Only a leader appends (Raft thesis §3.5: the leader's log is the
        # one every other log converges to); the records carry its epoch.
        first = self._log.end_offset
        if payloads:
            self._append_as_leader(DATA_KIND, payloads)
        return first, self._flush()

    def add_voter(self, voter: Voter, *, auto_join: bool = False) -> tuple[int, Output]:
        """Add ``voter`` to the voter set (KIP-853 AddRaftVoter): append a
        VOTERS record, in force here and on each replica from the moment it
        is appended (Raft thesis §4.1). Returns the record's offset (the
        change is done once it is committed) and the output.

        The new voter must be caught up: it fetched from this leader within
        the fetch timeout, with ``voter.directory_id`` when given, and its
        log reaches the high watermark. Otherwise a majority that needs it
        could not commit until it caught up (§4.2.1).

        ``auto_join``: the node asks to add itself (KIP-853 auto-join), not
        an operator. It is refused for a disk an operator removed and has
        not added back (``VoterSet.removed``, carried by every VOTERS record
        and snapshot): the leader decides every AddVoter, and its set in
        force knows of the removal even when a snapshot swallowed both the
        record that added the disk and the one that removed it before the
        node fetched either, and even for an AddVoter that was on its way
        when the operator removed the disk (issue 17). An operator's add
        (``auto_join`` False) of such a disk is what they asked for: it is
        done, and the disk is no longer a removed one.

        Raises ``NotLeaderError`` when this node does not lead, and
        ``ReconfigurationError`` when the change is refused (see
        ``_reconfiguring_leader``; the voter is already one; VOTER_REMOVED
        for auto-join; not caught up).
        """
        leader = self._reconfiguring_leader()
        if voter.node_id in self._voters:
            raise ReconfigurationError(f"node {voter.node_id} is already a voter", ErrorCode.DUPLICATE_VOTER)
        replica = leader.replicas.get(voter.node_id)
        # The disk to add: the one named, else the one fetching under that id.
        directory_id = voter.directory_id if voter.directory_id is not None or replica is None else replica.directory_id
        if auto_join and self._voters.was_removed(voter.node_id, directory_id):
            # Checked after _reconfiguring_leader: with no change pending,
            # the removal that set the mark is committed, not one a leader
            # change may still undo.
            raise ReconfigurationError(
                f"an operator removed node {voter.node_id}'s disk {directory_id}: auto-join does not add it back"
                f" (an operator may, with add-voter)",
                ErrorCode.VOTER_REMOVED,
            )
        window = self.config.ticks(self.config.fetch_timeout_ms)
        if replica is None or replica.last_fetch_tick is None or self._tick - replica.last_fetch_tick >= window:
            raise ReconfigurationError(
                f"node {voter.node_id} has not fetched from this leader within the fetch timeout",
                ErrorCode.VOTER_NOT_CAUGHT_UP,
            )
        if voter.directory_id is not None and replica.directory_id != voter.directory_id:
            raise ReconfigurationError(
                f"node {voter.node_id} fetches with directory {replica.directory_id}, not {voter.directory_id}",
                ErrorCode.VOTER_NOT_CAUGHT_UP,
            )
        if replica.end_offset is None or replica.end_offset < self._hw:
            raise ReconfigurationError(
                f"node {voter.node_id} is not caught up: its log ends at {replica.end_offset},"
                f" the high watermark is {self._hw}",
                ErrorCode.VOTER_NOT_CAUGHT_UP,
            )
        if voter.directory_id is None and replica.directory_id is not None:
            # The voter is the replica that proved itself caught up: its disk.
            voter = Voter(voter.node_id, replica.directory_id, voter.endpoints)
        return self._append_voter_set(self._voters.with_voter(voter))

    def remove_voter(self, node_id: int, directory_id: str | None = None) -> tuple[int, Output]:
        """Remove voter ``node_id`` (with ``directory_id`` when given) from
        the voter set (KIP-853 RemoveRaftVoter); returns as ``add_voter``.
        A leader that removes itself leads on without counting itself and
        resigns once the change is committed (Raft thesis §4.2.2).

        Raises ``NotLeaderError`` when this node does not lead, and
        ``ReconfigurationError`` when the change is refused (see
        ``_reconfiguring_leader``; not a voter; the last voter)."""
        self._reconfiguring_leader()
        voter = self._voters.get(node_id)
        if voter is None or (directory_id is not None and voter.directory_id not in (None, directory_id)):
            raise ReconfigurationError(f"node {node_id} (directory {directory_id}) is not a voter", ErrorCode.VOTER_NOT_FOUND)
        if len(self._voters) == 1:
            raise ReconfigurationError(f"node {node_id} is the last voter")
        return self._append_voter_set(self._voters.without(node_id))

    def _reconfiguring_leader(self, *, upgrading: bool = False) -> LeaderState:
        """This leader's state, if it may append a voter change now.

        One change at a time, and only once the leader has committed a
        record of its own epoch (Raft thesis §4.1 and the fix to the
        single-server change bug reported on raft-dev in 2015: a new leader
        may hold an uncommitted change of an earlier epoch that a rival's
        log lacks; a second change appended on top of it can produce two
        sets whose majorities do not overlap). Committing the LEADER_CHANGE
        record first settles the earlier change, one way or the other.

        Raises ``NotLeaderError``, or ``ReconfigurationError`` for a static
        voter set (unless ``upgrading`` it), a leader without a commit in
        its epoch, or a change not yet committed."""
        if not self.dynamic_voters and not upgrading:
            raise ReconfigurationError(
                "this cluster has a static voter set: upgrade it to dynamic voters first (kraft-quorum upgrade-voters)",
                ErrorCode.VOTERS_STATIC,
            )
        if self._role is not Role.LEADER:
            raise NotLeaderError(self._leader_hint(), self._epoch)
        if not self.leader_has_committed_own_epoch:
            raise ReconfigurationError(
                "the leader has not yet committed a record of its own epoch", ErrorCode.VOTER_CHANGE_IN_PROGRESS
            )
        if self.voter_change_pending:
            raise ReconfigurationError(
                f"the voter change at offset {self._voter_records[-1][0]} is not yet committed: one change at a time",
                ErrorCode.VOTER_CHANGE_IN_PROGRESS,
            )
        return self._leading

    def upgrade_voters(self, endpoints: Mapping[int, Sequence[str]]) -> tuple[int | None, Output]:
        """Upgrade a static voter set to a dynamic one without downtime
        (KIP-853's ``kraft.version`` 0 to 1): append the first VOTERS
        record, holding the static voters, each with the directory id it
        fetches with and its ``endpoints`` (``"host:port"``, given by the
        host, which knows where the voters listen). Returns the record's
        offset (the upgrade is done once it is committed), or None when the
        voters are dynamic already (nothing appended: the operation is
        idempotent, and a command retried after a leader change finds the
        upgrade done or, uncommitted, in progress).

        Every voter's directory id must be known: this leader's own, and
        every other voter's from a Fetch within the fetch timeout (a disk
        named in the set is the one that acknowledged records; the core
        refuses any other disk's votes from then on).

        Raises ``NotLeaderError``; ``ReconfigurationError`` when the
        leader has not committed in its epoch or a change is pending
        (VOTER_CHANGE_IN_PROGRESS, retry), or a voter's directory id is not
        known (VOTER_NOT_CAUGHT_UP, retry once it fetches); ``ValueError``
        for an endpoint that is not a printable string."""
        leader = self._reconfiguring_leader(upgrading=True)
        if self.dynamic_voters:
            return None, self._flush()
        window = self.config.ticks(self.config.fetch_timeout_ms)
        voters = []
        for node_id in self._voters.ids:
            if node_id == self.node_id:
                directory_id = self.config.directory_id
            else:
                replica = leader.replicas.get(node_id)
                fresh = replica is not None and replica.last_fetch_tick is not None
                fresh = fresh and self._tick - replica.last_fetch_tick < window  # type: ignore[union-attr, operator]
                directory_id = replica.directory_id if fresh else None  # type: ignore[union-attr]
            if directory_id is None:
                raise ReconfigurationError(
                    f"voter {node_id}'s directory id is not known: it has not fetched from this leader within the "
                    f"fetch timeout with a directory id (a data directory from before directory ids)",
                    ErrorCode.VOTER_NOT_CAUGHT_UP,
                )
            voters.append(Voter(node_id, directory_id, tuple(endpoints.get(node_id, ()))))
        return self._append_voter_set(VoterSet(tuple(voters)))

    def _append_voter_set(self, voters: VoterSet) -> tuple[int, Output]:
        offset = self._log.end_offset
        self._append_as_leader(RecordKind.VOTERS, [voters.encode()])
        return offset, self._flush()

    def read_index(self, read_id: Any) -> Output:
        """Start a linearizable read (ReadIndex, Raft thesis §6.4).

        The answer arrives as ``ReadReady(read_id, offset)`` in this or a
        later output, once a majority of voters have sent Fetches provably
        after this call; or as ``ReadFailed`` if leadership is lost first.

        Raises ``NotLeaderError`` when this node is not the leader.
        """
        if self._role is not Role.LEADER:
            raise NotLeaderError(self._leader_hint(), self._epoch)
        leader = self._leading
        # Only a Fetch echoing a token handed out from now on proves that
        # this node still led after the read arrived (Raft thesis §6.4).
        leader.pending_reads.append(PendingRead(read_id, leader.next_read_token))
        # Voters' Fetches parked now were sent before the read arrived and
        # prove nothing about it; answer them so that fresh ones come back.
        # Observers' prove nothing ever (only voters' tokens count).
        if self.config.observers_answered_on_commit:
            self._answer_parked_voters(leader)
        else:
            self._answer_all_parked(leader)
        self._check_pending_reads(leader)
        return self._flush()

    def resign(self) -> Output:
        """Graceful resignation (shutdown): hand leadership over with
        EndQuorumEpoch. A no-op unless this node leads."""
        if self._role is Role.LEADER:
            self._become_resigned("resigned on request", Trigger.RESIGN_REQUESTED)
        return self._flush()

    def persisted(self, persist_seq: int) -> Output:
        """The driver made output ``persist_seq`` (and all before it) durable."""
        # Outputs are made durable in order (_output.py), so one sequence
        # number settles every earlier output too.
        while self._unpersisted and self._unpersisted[0].persist_seq <= persist_seq:
            self._durable_end = self._unpersisted.popleft().end_offset
        if self._disk_failure is not None:
            self._disk_resumed()
        if self._repair is not None:
            self._maybe_finish_repair()
        if self._role is Role.LEADER:
            # The leader's own write now counts toward the majority
            # (Raft thesis §10.2.1).
            self._maybe_advance_high_watermark()
        return self._flush()

    def persist_failed(self, persist_seq: int, error: str) -> Output:
        """The driver could not make output ``persist_seq`` durable: a write
        or an fsync failed with ``error`` (an errno name such as "ENOSPC" or
        "EIO"). A condition, not a crash: the driver keeps that output and
        every later one, returns its disk to the last durable point and
        retries them in order (never trusting a failed fsync: the kernel may
        have dropped the dirty pages, PostgreSQL's "fsyncgate"), then reports
        ``persisted`` as usual, which ends the condition.

        Meanwhile the messages of those outputs stay with the driver, so
        nothing is acknowledged past the durable point; and this node stops
        producing work it cannot make durable: a leader resigns (KIP-595
        EndQuorumEpoch, so that a voter with a healthy disk takes over), and
        no role grants a vote, stands or fetches until the disk is back.
        Raises ``ValueError`` for a sequence number never handed out."""
        if not 0 < persist_seq <= self._persist_seq:
            raise ValueError(f"persist_failed({persist_seq}): no such output (last was {self._persist_seq})")
        first_report = self._disk_failure is None
        self._disk_failure = error
        if first_report:
            self._counters["disk_failures"] += 1
            if self._role is Role.LEADER:
                # The resignation's own event carries the reason: an event
                # with role LEADER here would read as a leader taking office
                # (found by the sweep, seed 19008: a partitioned stale leader
                # of an old epoch looked like a new leader lacking commits).
                self._become_resigned(f"resigned: disk failed ({error})", Trigger.RESIGN_REQUESTED)
            else:
                self._event(f"disk failed ({error})")
        return self._flush()

    @property
    def disk_failure(self) -> str | None:
        """The errno name of the disk failure in force (``persist_failed``),
        or None while the disk is healthy."""
        return self._disk_failure

    def _disk_resumed(self) -> None:
        # A write reached the disk again: acknowledge and take part again.
        # A follower's fetch loop was paused (``_maybe_send_fetch``).
        self._disk_failure = None
        self._event("disk resumed")
        self._maybe_send_fetch(self._tick)

    def peer_unreachable(self, peer: int) -> Output:
        """The transport could not reach ``peer`` (connection refused or
        reset). A follower whose leader is gone stands soon instead of
        waiting out the whole fetch timeout."""
        fetcher = self._fetcher
        if fetcher is not None and fetcher.in_flight is not None and fetcher.in_flight.target == peer:
            # No answer will come: retry after the backoff, not the deadline.
            fetcher.in_flight = None
            fetcher.next_fetch_tick = self._tick + self.config.ticks(self.config.retry_backoff_ms)
            if self._role is Role.UNATTACHED:
                # An observer looking for its leader asks the next voter, as
                # it does when a request times out: asking the dead one again
                # would find nobody, ever (broker-stampede seed 1: brokers
                # whose turn had come to the killed controller never found
                # the new one).
                self._bootstrap_index += 1
        state = self._state
        if (
            self.config.fast_failover
            and self._stands
            and isinstance(state, FollowerState)
            and peer == self._leader_id
            and not state.leader_unreachable
        ):
            # One random wait per loss of the leader (not one per report:
            # the minimum of many draws would bunch the followers together).
            state.leader_unreachable = True
            soon = self._tick + self._rng.randrange(self.config.ticks(self.config.unreachable_leader_wait_ms))
            state.fetch_deadline = min(state.fetch_deadline, soon)
            # Our leader's process is gone: grant pre-votes again (KIP-996
            # refuses them only while the leader is known to be alive), and
            # the leader lease ends with it (Raft thesis §4.2.3).
            state.leader_fetch_tick = None
        return self._flush()

    def snapshot_taken(self, snapshot_id: SnapshotId, data: bytes) -> Output:
        """The state machine made a snapshot of every record below
        ``snapshot_id.end_offset``. Records well behind it are dropped
        (``config.snapshot_retained_records`` are kept for slow followers).

        Raises ``ValueError`` if the snapshot is not of committed records or
        its epoch does not match the log.
        """
        end = snapshot_id.end_offset
        # KIP-630: a snapshot may only cover committed records, or a
        # follower could load state that a later leader overwrites.
        if end > self._hw:
            raise ValueError(f"snapshot end {end} is beyond the high watermark {self._hw}")
        if self._snapshot is not None and end <= self._snapshot.snapshot_id.end_offset:
            return self._flush()  # not newer than ours: nothing to gain
        if self._log.epoch_at(end - 1) not in (snapshot_id.epoch, None) and end > 0:
            raise ValueError(f"snapshot epoch {snapshot_id.epoch} does not match the log at {end - 1}")
        if self._dynamic_at(end):
            # The records that made the set may leave the log with this
            # snapshot: it carries the set in force at its end (KIP-853).
            data = join_snapshot(self.voters_at(end), data)
        self._snapshot = Snapshot(snapshot_id, data)
        self._out.snapshot = (snapshot_id, data)
        # Keep a tail of records behind the snapshot, so that a follower a
        # little behind catches up with records, not a whole snapshot.
        keep_from = end - self.config.snapshot_retained_records
        if keep_from > self._log.start_offset:
            epoch_before = self._log.epoch_at(keep_from - 1)
            if epoch_before is None:
                raise QuorumInvariantError(f"node {self.node_id}: no record at {keep_from - 1}, inside its own log")
            self._log.delete_before(keep_from, epoch_before)
            self._out.delete_before = keep_from
            if self._voter_records:
                # The set in force at the new log start becomes the base;
                # the set in force now does not change.
                self._base_dynamic = self._dynamic_at(keep_from)
                self._base_voters = self.voters_at(keep_from)
                self._voter_records = [record for record in self._voter_records if record[0] >= keep_from]
        return self._flush()

    # =====================================================================
    # The epoch prologue: every message passes here first
    # =====================================================================
    #
    # KIP-595 common epoch handling (Raft thesis §3.3: "if one server's
    # current term is smaller than the other's, it updates its current term
    # to the larger value ... if a server receives a request with a stale
    # term number, it rejects the request"), in one place for every message:
    #
    # - a later epoch is adopted before anything else: as a follower of the
    #   leader the message names (BeginQuorumEpoch names its sender, a
    #   response its ``leader_id``), else Unattached;
    # - a request from an earlier epoch is refused with FENCED_LEADER_EPOCH,
    #   so its sender learns our epoch; a response from an earlier epoch
    #   answers a question we no longer ask, and is dropped;
    # - a message of our own epoch goes to its handler, which dispatches on
    #   the role (the leader-only requests are refused NOT_LEADER here).
    #
    # One exception: a pre-vote (KIP-996) claims no epoch. It asks whether
    # we *would* vote in the next one, so it never moves our epoch; only a
    # stale one is refused.
    #
    # Three guards come before the epoch is even read:
    #
    # - a message carrying a number that the wire and storage cannot hold
    #   (``_types.py``) is dropped and counted, and the host is told
    #   (``CoreHooks.protocol_error``): adopting such an epoch would make a
    #   node persist what it cannot read back, and a winner write a
    #   LEADER_CHANGE record its own log refuses;
    # - only voters vote: a Vote or pre-vote from a non-voter, or to an
    #   observer, is refused without moving the epoch (an observer whose
    #   epoch a stranger could raise would carry that epoch to the leader in
    #   its next Fetch);
    # - the leader lease (Raft thesis §4.2.3, "disruptive servers"; etcd's
    #   ``inLease``): a voter that has heard from a live leader within the
    #   minimum election timeout, and a leader (check quorum makes it resign
    #   once it has lost its majority), refuse every Vote and pre-vote,
    #   whatever its epoch, and raise none. Such a request comes from a
    #   server that lost touch with a leader the rest still hear, or from
    #   nobody honest; obeying it deposes a healthy leader and stops writes
    #   (a flood of them with rising epochs stops them for as long as it
    #   lasts). Real elections are not slowed: a voter leaves the lease as
    #   soon as its leader resigns (EndQuorumEpoch ends the follower role),
    #   its process is reported gone (``peer_unreachable``) or its answers
    #   stop for an election timeout, and a fetch timeout (when a follower
    #   stands) is longer than that. Like etcd's, the lease rests on check
    #   quorum: with check quorum off (the teaching switch) there is none.

    def _epoch_prologue(self, message: _Request | _Response) -> bool:
        """Epoch handling of any message; True when its handler should run.
        See the comment above for the rules and where they come from."""
        problem = _field_out_of_range(message)
        if problem is not None:
            self._drop_malformed(message, problem)
            return False
        if message.src == self.node_id:
            # No node sends a message to itself: this one is forged, or comes
            # from a second process configured with this node's id (an
            # operator's mistake). Acting on it would have this node follow,
            # vote for or answer itself; a BeginQuorumEpoch from "itself"
            # stopped the node (found by the wire fuzzer's long profile).
            self._drop_malformed(
                message, f"it names this node, {self.node_id}, as its sender", counter="messages_from_own_id"
            )
            return False
        if type(message) is FetchRequest and message.observer and message.src in self._voter_ids:
            # A broker (an observer for good) with a voter's id: two
            # processes share a node id (KIP-631: one id space). Its fetch
            # offset is no acknowledgement of that voter's (persist before
            # acknowledging: the broker's log is another log), and counting
            # it could commit a record a majority does not hold. With a
            # static voter set no directory id tells the two apart
            # (KIP-853's check needs known disks), so the mark does.
            self._count_and_report(
                "fetches_refused_observer_with_voter_id",
                f"refused a broker's Fetch from node id {message.src}: that id is a voter's "
                "(a broker and a controller configured with one node id?)",
            )
            self._refuse(message, ErrorCode.INCONSISTENT_VOTER_SET)
            return False
        if type(message) is FetchRequest and message.epoch == self._epoch and self._role is Role.LEADER:
            # The common case, taken on every Fetch a leader serves, decided
            # as the rules below decide it: anyone may fetch (observers
            # too), and the epoch is the leader's own.
            return True
        if (
            message.src not in self._voter_ids
            and not isinstance(message, _ANY_SENDER_TYPES)
            and not (isinstance(message, EndQuorumEpochRequest) and self._hands_over(message))
            and not (isinstance(message, BeginQuorumEpochRequest) and self._elected_by_us(message))
        ):
            # Only voters lead, hand over or answer what this node sends to
            # voters; observers only fetch (KIP-595; Kafka refuses such a
            # sender with INCONSISTENT_VOTER_SET). Without this, one forged
            # BeginQuorumEpoch from an unknown id deposes a healthy leader.
            # (A VoteRequest from a non-voter gets its own refusal below.)
            # Fetch answers are matched to the request in flight instead: a
            # fetcher asks a leader its own set may not hold yet (a new node
            # learning the set from the log), and a leader that removed
            # itself leads until the change commits (Raft thesis §4.2.2);
            # that leader's hand-over is heard too (``_hands_over``), and so
            # is the victory of a candidate we voted for (``_elected_by_us``).
            self._counters["messages_refused_not_voter"] += 1
            if isinstance(message, _RESPONSE_TYPES):
                return False
            self._refuse(message, ErrorCode.INVALID_REQUEST)
            return False
        if isinstance(message, _RESPONSE_TYPES):
            if isinstance(message, (FetchResponse, FetchSnapshotResponse)):
                # Only the answer to the request in flight is an answer at
                # all; any other is a duplicate or comes too late.
                fetcher = self._fetcher
                if fetcher is None or not fetcher.accept(message.request_id, message.src):
                    return False
                if isinstance(message, FetchResponse) and message.leader_endpoint is not None:
                    self._learn_endpoint(message)
                consumer = self._hooks.fetch_extension_consumer
                if isinstance(message, FetchResponse) and message.extension is not None and consumer is not None:
                    # The host hears every answer to its Fetch, whatever its
                    # epoch (a broker's heartbeat result rides on it).
                    consumer(message.extension)
            if message.epoch > self._epoch:
                # BeginQuorumEpoch and EndQuorumEpoch answers name no leader.
                acknowledgement = isinstance(message, (BeginQuorumEpochResponse, EndQuorumEpochResponse))
                leader = None if acknowledgement else message.leader_id
                self._adopt_later_epoch(message.epoch, leader, f"learned of epoch {message.epoch} from {message.src}")
                return False
            # A late answer from an earlier epoch (say, a grant from an earlier
            # round) must not count now.
            return message.epoch == self._epoch
        # A request.
        pre_vote = isinstance(message, VoteRequest) and message.pre_vote
        if message.epoch < self._epoch:
            self._refuse(message, ErrorCode.FENCED_LEADER_EPOCH)
            return False
        if isinstance(message, VoteRequest):
            if self._names_another_disk(message):
                self._counters["votes_refused_other_directory"] += 1
                self._reply_vote(message, granted=False, error=ErrorCode.INVALID_REQUEST)
                return False
            if self._repair is not None and message.src in self._voter_ids:
                self._counters["votes_refused_repairing"] += 1
                self._reply_vote(message, granted=False)
                return False
            if not (self._votes or self._addressed_as_voter(message)) or not self._hears_candidate(message):
                self._counters["votes_refused_not_voter"] += 1
                # A candidate outside our set whose log is behind ours may
                # still name us a voter: then we may be the one to stand.
                self._note_named_voter(message)
                self._reply_vote(message, granted=False, error=ErrorCode.INVALID_REQUEST)
                return False
            if self._leader_lease_holds():
                self._counters["votes_ignored_leader_alive"] += 1
                self._reply_vote(message, granted=False)
                return False
        if message.epoch > self._epoch and message.src not in self._voter_ids and not isinstance(message, VoteRequest):
            # An observer's Fetch from a later epoch: an honest observer only
            # learns epochs from voters, who will tell us themselves; a
            # non-voter alone never moves this node's epoch (as Kafka's
            # leader answers UNKNOWN_LEADER_EPOCH without adopting it). A
            # candidate outside our set that we hear (``_hears_candidate``)
            # does: its set may be later than ours.
            self._counters["messages_refused_not_voter"] += 1
            self._refuse(message, ErrorCode.UNKNOWN_LEADER_EPOCH)
            return False
        if message.epoch > self._epoch and not pre_vote:
            # Even a leader steps down for a later epoch's Vote: the
            # disruption pre-vote exists to prevent. A Vote keeps our
            # running timer (see _become_unattached's ``keep_timer``).
            leader = message.src if isinstance(message, BeginQuorumEpochRequest) else None
            self._adopt_later_epoch(
                message.epoch, leader, _later_epoch_reason(message), keep_timer=isinstance(message, VoteRequest)
            )
            if isinstance(message, (FetchRequest, FetchSnapshotRequest)):
                # We have only just learned of the epoch: we do not lead it,
                # and do not know who does.
                self._refuse(message, ErrorCode.UNKNOWN_LEADER_EPOCH)
                return False
        if isinstance(message, (FetchRequest, FetchSnapshotRequest)) and self._role is not Role.LEADER:
            # KIP-595: only the leader serves fetches; the error names the
            # leader we know, so the fetcher can go there.
            self._refuse(message, ErrorCode.NOT_LEADER)
            return False
        return True

    def _names_another_disk(self, request: VoteRequest) -> bool:
        """KIP-853: does the candidate's voter set name, for this node id,
        a directory id other than this disk's? Then the voter it counts on
        is another replica: one whose vote in this epoch and whose
        acknowledged records may be lost with its disk. Refused whatever
        this node's own voter list says: a wiped voter restarted with a
        static voter list (an empty log, a new directory id) would
        otherwise hand a candidate that lacks a committed record the
        majority it needs (issue 17). A node that knows no directory id of
        its own (in memory, or a directory older than directory ids) is
        no disk a set can name."""
        named = request.voter_directory_id
        return named is not None and named != self.config.directory_id

    def _addressed_as_voter(self, request: VoteRequest) -> bool:
        """KIP-853: is this node, not a voter of its own set, named as a
        voter by the candidate's set, with this very disk? A voter just
        added may not hold the record that added it when the leader is
        lost; without its vote the new set could never elect anyone (a set
        of two whose other member waits for it). Safe: the candidate counts
        the votes of its own set, and this node still votes once per epoch
        (Raft thesis §4.1: it is the candidate's configuration that counts).
        A node repairing its log or whose disk failed never votes."""
        return (
            self._repair is None
            and not self.config.observer_only
            and self.config.directory_id is not None
            and request.voter_directory_id == self.config.directory_id
        )

    def _hears_candidate(self, request: VoteRequest) -> bool:
        """Is ``request``'s sender a candidate this node may answer: a voter
        of its set, or, with dynamic voters, any candidate whose log is at
        least as up to date as ours. Raft thesis §4.1: a server grants its
        vote to a candidate outside its latest configuration, for that
        candidate may hold a later one (a voter that missed its own
        addition's record, or this node's removal, would otherwise never
        get a majority together). The candidate counts only the votes of
        its own set; a stale or removed node cannot pass the log check, and
        a live leader's lease still refuses it (§4.2.3).

        A node whose log ends before its static cluster's upgrade to
        dynamic voters (KIP-853; down while ``upgrade-voters`` ran) still
        holds the static set, yet a candidate whose set names this node's
        own disk is proof of the upgrade: it is heard as well. Before, such a
        node refused every candidate outside the static set, and with one
        more voter unable to vote no majority of the upgraded set could
        elect anyone (the sweep's seed 17247). A static cluster's candidates
        outside the set, which name no disk of ours, are refused as before."""
        if request.src in self._voter_ids:
            return True
        if not (self.dynamic_voters or self._addressed_as_voter(request)):
            return False
        return _log_up_to_date(request, self._log)

    def _elected_by_us(self, request: BeginQuorumEpochRequest) -> bool:
        """Is ``request`` the victory of the candidate this node voted for
        in this very epoch? ``_hears_candidate`` grants a vote to a
        candidate outside our voter set, for its set may be later than ours
        (KIP-853; Raft thesis §4.1); refusing its BeginQuorumEpoch then
        would leave a voter that elected it unable to follow it, and when
        that vote was part of the only majority, no leader would ever hold
        one (the sweep's seed 266758: n2, behind the records that added n5
        and removed n3, elected n5 and refused it five epochs running while
        n5 resigned by check quorum each time). Not a forgery's way in: no
        healthy leader is deposed, for the epoch is ours and our vote in it
        went to the sender, the only node that can lead it (§3.4)."""
        return request.epoch == self._epoch and self._voted_for == request.src

    def _hands_over(self, request: EndQuorumEpochRequest) -> bool:
        """Is ``request`` our own leader resigning in our epoch? A leader
        that removed itself from the voter set resigns once the change is
        committed (Raft thesis §4.2.2); its voters must hear the hand-over,
        or they would wait out a whole fetch timeout."""
        return (
            self._role is Role.FOLLOWER and request.epoch == self._epoch and request.src == self._leader_id
        )

    def _drop_malformed(self, message: Message, problem: str, *, counter: str = "messages_out_of_range") -> None:
        """A peer sent what no correct node sends: count it (under
        ``counter``, one of ``_COUNTER_NAMES``) and tell the host
        (``CoreHooks.protocol_error``); the caller drops it."""
        self._count_and_report(counter, f"dropped {describe_message(message)}: {problem}")

    def _count_and_report(self, counter: str, description: str) -> None:
        """Count under ``counter`` (one of ``_COUNTER_NAMES``) and tell the
        host ``description`` (``CoreHooks.protocol_error``)."""
        self._counters[counter] += 1
        report = self._hooks.protocol_error
        if report is not None:
            report(description)

    def _leader_lease_holds(self) -> bool:
        """Raft thesis §4.2.3: does this node know of a live leader? A
        leader does (itself: check quorum makes it resign when it is not
        heard by a majority); a follower does while its leader answered it
        within the minimum election timeout. See the comment above."""
        if not self.config.check_quorum:
            return False
        state = self._state
        if isinstance(state, LeaderState):
            return True
        if isinstance(state, FollowerState):
            return state.heard_from_leader_within(self._tick, self.config.ticks(self.config.election_timeout_ms))
        return False

    def _adopt_later_epoch(self, epoch: int, leader: int | None, reason: str, *, keep_timer: bool = False) -> None:
        """Move into ``epoch`` (Raft thesis §3.3): as a follower when the
        message names its leader (any other node: a message naming us as
        the leader of an epoch we never stood in is not believed), else
        Unattached, to learn the leader or stand."""
        if leader is not None and leader != self.node_id:
            self._become_follower(epoch, leader, reason=reason)
        else:
            self._become_unattached(epoch, reason=reason, keep_timer=keep_timer)

    def _refuse(self, request: _Request, code: ErrorCode) -> None:
        """Answer ``request`` with error ``code`` and nothing else. The
        leader hint is the leader we know, except as Resigned (we are
        recorded as leader, but lead no more) and, for a pre-vote, unless
        we lead or follow (KIP-996: only a live leader is named)."""
        match request:
            case FetchRequest():
                self._send_fetch_error(request, code)
            case FetchSnapshotRequest():
                self._reply_fetch_snapshot(request, code)
            case VoteRequest():
                self._reply_vote(request, granted=False, error=code)
            case BeginQuorumEpochRequest():
                self._send(BeginQuorumEpochResponse(src=self.node_id, dst=request.src, epoch=self._epoch, error=code))
            case EndQuorumEpochRequest():
                self._send(EndQuorumEpochResponse(src=self.node_id, dst=request.src, epoch=self._epoch, error=code))

    def _leader_hint(self) -> int | None:
        """The leader to name to others: a Resigned node still records
        itself as leader (so that a restart keeps it Resigned) but must not
        send anyone to itself."""
        return self._leader_id if self._role is not Role.RESIGNED else None

    # =====================================================================
    # Initialisation and role transitions
    # =====================================================================

    def _initialize(self, stored: ElectionState) -> None:
        """Startup rules (KIP-595 QuorumState.initialize), with one change: a
        node that voted for itself restarts Unattached, keeping the vote,
        rather than standing again in the same epoch. Its record may say
        (epoch, voted_for=self, leader=None) after it *led* that epoch and
        lost a later pre-vote; standing again would let it lead the same
        epoch twice and overwrite records it lost in the crash. It stands in
        the next epoch when its timer fires."""
        if self._log.last_epoch > self._epoch:
            # The log saw a later epoch than the election state recorded
            # (its records were written first): epochs never go back, so
            # the log's wins (KIP-595 QuorumState.initialize).
            self._become_unattached(
                self._log.last_epoch, reason="log is ahead of the election state", trigger=Trigger.START
            )
        elif stored.leader_id == self.node_id and self._stands:
            # A leader that restarts must not lead or vote again in the same
            # epoch: it may have lost unflushed records of that epoch. It
            # resigns at once (the first tick sends EndQuorumEpoch), with no
            # successor ranking: the replica table died with the process.
            resigned = ResignedState(election_deadline=self._draw_election_deadline(), end_epoch_deadline=self._tick)
            self._enter_role(Role.RESIGNED, Trigger.START, resigned)
            self._event("restarted after leading")
        elif stored.leader_id is not None and stored.leader_id != self.node_id:
            # Resume following; the fetch timeout finds out if it is gone.
            self._become_follower(self._epoch, stored.leader_id, reason="restarted", trigger=Trigger.START)
        else:
            # Keep the recorded vote: a second vote in the same epoch could
            # elect two leaders in it (Raft thesis §3.8).
            self._become_unattached(self._epoch, voted_for=stored.voted_for, reason="started", trigger=Trigger.START)
        self._starting = False
        # Anything sent during construction is discarded by the first
        # _flush() only if the driver ignores it; drivers call
        # ``initial_output()`` to collect it.

    def initial_output(self) -> Output:
        """What the node produced while starting (messages, events)."""
        return self._flush()

    def _set_election_state(self, epoch: int, voted_for: int | None, leader_id: int | None) -> None:
        # Raft thesis §3.8: a vote or an epoch must be durable before any
        # message that depends on it leaves; the Output contract orders the
        # write before the sends (_output.py).
        self._epoch, self._voted_for, self._leader_id = epoch, voted_for, leader_id
        state = ElectionState(epoch=epoch, voted_for=voted_for, leader_id=leader_id)
        if state != self._persisted_election:
            self._persisted_election = state
            self._out.election_state = state

    def _enter_role(self, role: Role, trigger: Trigger, state: RoleState) -> None:
        """Every change of role goes through here: checked against the
        transition table (``_roles.py``, which also draws the diagram in
        docs/raft.md), then the old role's state is dropped and ``state``
        takes its place. Raises ``QuorumInvariantError`` for a change the
        table does not have."""
        source = None if self._starting else self._role
        if not transition_allowed(source, role, trigger):
            transition = describe_transition(source, role, trigger)
            raise QuorumInvariantError(f"node {self.node_id}: no role transition {transition} (epoch {self._epoch})")
        self._leave_role()
        self._role = role
        self._state = state

    def _leave_role(self) -> None:
        """The one duty a role has on leaving: a leader answers whoever
        waits on it, so that nobody waits out a timeout on a node that can
        no longer answer (reads fail, parked fetches hear NOT_LEADER). Every
        other field is dropped with the role's object."""
        state = self._state
        if isinstance(state, LeaderState):
            for read in state.pending_reads:
                self._out.reads.append(ReadFailed(read.read_id, None, "leadership lost"))
            for replica_id in sorted(state.parked):
                self._send_fetch_error(state.parked[replica_id].request, ErrorCode.NOT_LEADER, leader_hint=None)
            state.parked.clear()

    def _become_unattached(
        self,
        epoch: int,
        *,
        voted_for: int | None = None,
        reason: str,
        keep_timer: bool = False,
        trigger: Trigger = Trigger.LATER_EPOCH,
    ) -> None:
        """``keep_timer``: learning a later epoch from a candidate whose vote
        we may refuse must not postpone our own candidacy (Raft thesis §3.4:
        the timer restarts only on hearing from a leader or granting a vote).
        Otherwise a node with a stale log that keeps standing would hold
        every up-to-date voter back forever."""
        # Raft thesis §3.3: a node's term (epoch) never decreases; going
        # back would let it vote twice in an epoch it already voted in.
        if epoch < self._epoch:
            raise QuorumInvariantError(f"epoch would go backwards: {self._epoch} -> {epoch}")
        if trigger is Trigger.LATER_EPOCH and epoch == self._epoch and not self._starting:
            raise QuorumInvariantError(f"node {self.node_id}: a later epoch was claimed, but {epoch} is its own")
        if epoch > self._epoch:
            # Someone else's epoch: our streak of failed candidacies ends.
            self._election_retries = 0
        old = self._state
        running_deadline = None
        if keep_timer:
            if isinstance(old, FollowerState):
                running_deadline = old.fetch_deadline
            elif isinstance(old, (UnattachedState, CandidacyState)):
                running_deadline = old.election_deadline
        # Drawn even when the running timer is kept: the order of draws is
        # part of what a seed replays, so it does not depend on the branch.
        deadline = self._draw_election_deadline()
        if running_deadline is not None:
            deadline = running_deadline
        fetcher = None
        if not self._stands:
            # A read token means something only to the leader that handed it
            # out, in that leadership (Raft thesis §6.4): a node that looks
            # for a leader echoes none. Carried over, an observer's token
            # from an earlier leader once reached the next one, which counted
            # it when the observer became a voter and served a linearizable
            # read it had not confirmed (sweep seed 418285).
            fetcher = FetcherState(next_fetch_tick=self._tick)
        self._enter_role(Role.UNATTACHED, trigger, UnattachedState(election_deadline=deadline, fetcher=fetcher))
        # Unattached knows no leader; a vote is kept only in its own epoch
        # (callers pass ``voted_for`` only when the epoch does not change).
        self._set_election_state(epoch, voted_for, None)
        self._event(reason)

    def _become_follower(
        self, epoch: int, leader_id: int, *, reason: str, trigger: Trigger = Trigger.LEADER_FOUND
    ) -> None:
        """Follow ``leader_id`` in ``epoch`` and send the first Fetch at
        once: that Fetch is what tells the leader we accepted it."""
        if leader_id == self.node_id:
            raise QuorumInvariantError(f"node {self.node_id} cannot follow itself (epoch {epoch})")
        if epoch < self._epoch:
            # Raft thesis §3.3: epochs never decrease.
            raise QuorumInvariantError(f"epoch would go backwards: {self._epoch} -> {epoch}")
        if self._role is Role.LEADER and epoch == self._epoch:
            # Raft thesis §3.4 election safety: at most one leader per epoch.
            raise QuorumInvariantError(f"two leaders in epoch {epoch}: {self.node_id} and {leader_id}")
        if epoch > self._epoch:
            self._election_retries = 0
        # A follower of a new leader starts with read token 0: tokens are
        # per leadership, and echoing another leader's would confirm reads
        # that this fetch proves nothing about (Raft thesis §6.4).
        follower = FollowerState(
            fetcher=FetcherState(next_fetch_tick=self._tick),
            fetch_deadline=self._tick + self.config.ticks(self.config.fetch_timeout_ms),
        )
        self._enter_role(Role.FOLLOWER, trigger, follower)
        # Keep our vote if the epoch is the one we voted in (§3.8: one vote
        # per epoch, even after learning who won).
        voted = self._voted_for if epoch == self._epoch else None
        self._set_election_state(epoch, voted, leader_id)
        self._event(reason)
        self._maybe_send_fetch(self._tick)

    def _stand(self, reason: str, trigger: Trigger) -> None:
        """An election timer fired: pre-vote first (KIP-996) unless disabled."""
        if not self._stands:
            if isinstance(self._state, ResignedState):
                # A leader removed from the voter set (KIP-853) handed over;
                # it now follows the new leader as an observer, keeping its
                # vote record for this epoch (Raft thesis §3.8).
                self._become_unattached(
                    self._epoch, voted_for=self._voted_for, reason="not a voter: observing", trigger=trigger
                )
            return
        if self._disk_failure is not None:
            # The vote for ourselves could not be made durable (§3.8), so
            # no VoteRequest could leave: try again after another timeout.
            self._counters["stands_refused_disk_failed"] += 1
            self._rearm_election_timer()
            return
        if self._epoch >= EPOCH_MAX:
            # No next epoch can be persisted (_types.py): stay in this role
            # and try again after another election timeout, rather than
            # write an election state or a record no restart could read.
            self._counters["stands_refused_epoch_max"] += 1
            self._rearm_election_timer()
            return
        # A lone voter has nobody to disrupt, so it skips the pre-vote.
        if self.config.pre_vote and not (len(self._voters) == 1 and self._is_voter):
            self._become_prospective(reason, trigger)
        else:
            self._become_candidate(reason, trigger)

    def _rearm_election_timer(self) -> None:
        """Stay in this role and stand again after another election timeout."""
        state = self._state
        if isinstance(state, FollowerState):
            state.fetch_deadline = self._draw_election_deadline()
        elif isinstance(state, (UnattachedState, CandidacyState, ResignedState)):
            state.election_deadline = self._draw_election_deadline()

    def _become_prospective(self, reason: str, trigger: Trigger) -> None:
        """KIP-996: ask whether a majority would vote for us in the next
        epoch, without bumping ours, so that a node that cannot win (a
        stale log, or a partition's minority) disrupts nobody."""
        leader = self._leader_id if self._leader_id != self.node_id else None
        previous = self._state
        candidacy = CandidacyState(
            election_deadline=self._draw_election_deadline(),
            granted={self.node_id},
            leader_crashed=isinstance(previous, FollowerState) and previous.leader_unreachable,
        )
        self._enter_role(Role.PROSPECTIVE, trigger, candidacy)
        # Keep the last known leader (in memory only: the epoch is not
        # bumped, KIP-996): losing the pre-vote returns to it.
        self._leader_id = leader
        self._event(reason)
        self._request_votes(pre_vote=True)

    def _become_candidate(self, reason: str, trigger: Trigger) -> None:
        """Raft thesis §3.4: stand in the next epoch, voting for ourselves."""
        candidacy = CandidacyState(election_deadline=0, granted={self.node_id})
        self._enter_role(Role.CANDIDATE, trigger, candidacy)
        self._election_retries += 1
        # Raft thesis §3.4: a new epoch and a vote for ourselves, both
        # durable before any VoteRequest leaves (§3.8).
        self._set_election_state(self._epoch + 1, self.node_id, None)
        candidacy.election_deadline = self._draw_election_deadline()
        self._event(reason)
        if len(candidacy.granted & self._voter_ids) >= self._voters.majority:
            self._become_leader()  # a single voter is its own majority
        else:
            self._request_votes(pre_vote=False)

    def _become_leader(self) -> None:
        """Raft thesis §3.4: a majority voted for us. Every voter starts
        unacknowledged: nothing learned in another role is trusted."""
        replicas = {
            voter: ReplicaState(voter, is_voter=self._voters.holds(voter, None))
            for voter in self._voters.ids
            if voter != self.node_id
        }
        leader = LeaderState(
            epoch_start_offset=self._log.end_offset,
            replicas=replicas,
            # KAFKA-15489: the first window starts with the leadership.
            check_quorum_deadline=self._tick + self.config.ticks(self.config.check_quorum_ms),
            begin_epoch_deadline=self._tick,
        )
        self._enter_role(Role.LEADER, Trigger.WON_ELECTION, leader)
        self._election_retries = 0
        # Elected outside its own set, it leads until its epoch commits
        # (``_flush``), and then hands over for good.
        self._named_voter_by = None
        # Recorded durably, so that a restart knows it led this epoch and
        # never leads it again (_initialize).
        self._set_election_state(self._epoch, self._voted_for, self.node_id)
        self._event("won the election")
        # A record of the new epoch, so the high watermark can advance
        # (Raft thesis §3.6.2: commit only records of the current term).
        self._append_as_leader(RecordKind.LEADER_CHANGE, [f"leader={self.node_id} epoch={self._epoch}".encode()])
        # KIP-595 BeginQuorumEpoch: voters learn of us without waiting for
        # their fetch timeout to find us.
        self._send_begin_quorum_epoch(leader, force=True)

    def _become_resigned(self, reason: str, trigger: Trigger) -> None:
        """Stop leading this epoch (check quorum or a requested shutdown)
        and hand over with EndQuorumEpoch (KIP-595). The ranking is taken
        before the leader state is dropped with the role."""
        successors = self._leading.preferred_successors()
        resigned = ResignedState(
            election_deadline=self._draw_election_deadline(), end_epoch_deadline=self._tick, successors=successors
        )
        self._enter_role(Role.RESIGNED, trigger, resigned)
        self._event(reason)
        self._send_end_quorum_epoch(resigned)

    def _observe_once_handed_over(self, resigned: ResignedState) -> None:
        """A leader removed from the voter set (KIP-853) cannot stand, so
        its Resigned role is only there to hand over. Once every voter has
        acknowledged its EndQuorumEpoch it observes at once, fetching to
        learn the new leader, instead of waiting out an election timeout
        without one: meanwhile it would answer clients, and the observers
        fetching from it, that it knows no leader (writes stopped for 1.5 s
        with node processes, bench.voter_change_bench). A node that still
        stands (its removal uncommitted, Raft thesis §4.2.2) keeps waiting."""
        if self._stands:
            return
        if all(voter in resigned.end_epoch_acked for voter in self._voters.ids if voter != self.node_id):
            self._become_unattached(
                self._epoch, voted_for=self._voted_for, reason="not a voter: handed over, observing", trigger=Trigger.HANDED_OVER
            )

    def _lose_pre_vote(self, reason: str) -> None:
        """KIP-996: a lost pre-vote returns to the known leader, or to
        Unattached, in the same epoch."""
        leader = self._leader_id
        if leader is not None and leader != self.node_id:
            self._become_follower(self._epoch, leader, reason=reason, trigger=Trigger.LOST_PRE_VOTE)
        else:
            self._become_unattached(
                self._epoch, voted_for=self._voted_for, reason=reason, trigger=Trigger.LOST_PRE_VOTE
            )

    def _start_backoff(self, candidacy: CandidacyState) -> None:
        """Candidate lost or timed out: wait a random time below
        min(base * 2^retries, max). The cap bounds the range, not the draw,
        so competing candidates keep drawing different waits."""
        candidacy.backing_off = True
        exponent = min(self._election_retries, 20)
        window_ms = min(self.config.election_backoff_base_ms * 2**exponent, self.config.election_backoff_max_ms)
        candidacy.election_deadline = self._tick + 1 + self._rng.randrange(self.config.ticks(window_ms))

    def _draw_election_deadline(self) -> int:
        """A fresh election timeout, random in [base, 2 * base) (Raft thesis
        §3.4: randomised timeouts make split votes rare). The only source of
        randomness is the injected ``random.Random``."""
        base = self.config.ticks(self.config.election_timeout_ms)
        return self._tick + base + self._rng.randrange(base)

    def _role_state(self, kind: type[_S]) -> _S:
        """The current role's state, which must be a ``kind`` (or, for
        ``FetcherState``, hold one). Raises ``QuorumInvariantError``
        otherwise: role-specific code reached from another role is a bug."""
        state = self._fetcher if kind is FetcherState else self._state
        if not isinstance(state, kind):
            raise QuorumInvariantError(f"node {self.node_id} has no {kind.__name__} as {self._role.value}")
        return state

    @property
    def _leading(self) -> LeaderState:
        """This leader's state (raises as ``_role_state`` does). On every
        Fetch a leader serves: one type test, not a call to ``_role_state``."""
        state = self._state
        if type(state) is LeaderState:
            return state
        return self._role_state(LeaderState)

    @property
    def _fetcher(self) -> FetcherState | None:
        """The fetch loop of a follower or of an observer looking for its
        leader; None in every role that does not pull records."""
        state = self._state
        if isinstance(state, (FollowerState, UnattachedState)):
            return state.fetcher
        return None

    def _event(self, reason: str) -> None:
        # Recorded after the change, so the event shows the new role and
        # epoch; the simulator's invariant checks (one leader per epoch)
        # read these.
        self._out.events.append(
            RoleChange(self._tick, self.node_id, self._role, self._epoch, self.leader_id, reason)
        )

    # =====================================================================
    # Timers
    # =====================================================================

    def _tick_leader(self, now: int, leader: LeaderState) -> None:
        # KAFKA-15489 check quorum: resign when a majority of voters has not
        # fetched within check_quorum_factor * fetch_timeout. A single voter
        # is its own majority (KAFKA-16144).
        alone = len(self._voters) == 1 and self._is_voter
        if self.config.check_quorum and not alone and now >= leader.check_quorum_deadline:
            self._become_resigned("check quorum: no fetch from a majority of voters", Trigger.CHECK_QUORUM)
            return
        # KIP-595 long poll over: answer with whatever there is (at least
        # the high watermark), so the fetcher's request does not time out.
        # Voters' at once; brokers' within the step bounds of the observers
        # due an answer (_answer_due_observers), the rest by the next ticks,
        # still expired then: a broker's answer carries every record it
        # lacks, and the log may run far past the high watermark while the
        # voters fall behind.
        expired = [rid for rid, parked in leader.parked.items() if now >= parked.expire_tick]
        voters = self._voter_ids
        answered = 0
        records = 0
        for replica_id in expired:
            if replica_id in voters:
                self._answer_fetch(leader, leader.parked.pop(replica_id))
            elif answered < OBSERVER_ANSWERS_PER_STEP_MAX and records < OBSERVER_ANSWER_RECORDS_PER_STEP_MAX:
                records += self._answer_fetch(leader, leader.parked.pop(replica_id))
                answered += 1
        if now >= leader.begin_epoch_deadline:
            # A voter that missed BeginQuorumEpoch and has not fetched would
            # otherwise stand and depose us (KIP-595 resends it).
            self._send_begin_quorum_epoch(leader, force=False)

    def _tick_follower(self, now: int, follower: FollowerState) -> None:
        if self._stands and now >= follower.fetch_deadline:
            # KIP-595 fetch timeout: the leader is presumed gone.
            if follower.leader_unreachable:
                self._stand("leader unreachable: its connection was reset", Trigger.FETCH_TIMEOUT)
            else:
                self._stand("fetch timeout: no fetch from the leader", Trigger.FETCH_TIMEOUT)
            return
        if not self._stands and now >= follower.fetch_deadline:
            # An observer that lost its leader goes looking for the new one.
            self._become_unattached(self._epoch, reason="fetch timeout", trigger=Trigger.FETCH_TIMEOUT)
            return
        fetcher = follower.fetcher
        if fetcher.in_flight is not None and now >= fetcher.in_flight.deadline_tick:
            fetcher.in_flight = None  # lost; send another
        self._maybe_send_fetch(now)

    # =====================================================================
    # Leader: appends, high watermark, fetches, reads
    # =====================================================================

    def _append_as_leader(self, kind: RecordKind, payloads: Sequence[bytes]) -> None:
        # Records go out to parked fetchers before they are durable here
        # (Raft thesis §10.2.1: the leader writes in parallel with
        # replicating); the leader counts itself only once ``persisted``
        # says so (_maybe_advance_high_watermark).
        offset = self._log.end_offset
        # tuple.__new__ straight, as the wire decoder builds records: the
        # named tuple's own __new__ is a Python call per record.
        offsets = range(offset, offset + len(payloads))
        entries = list(map(_new_tuple, repeat(Entry), zip(offsets, repeat(self._epoch), repeat(kind), payloads)))
        self._log.append(entries)
        self._out.append.extend(entries)
        if not self.config.observers_answered_on_commit:
            self._answer_all_parked(self._leading)
            if kind is VOTERS_KIND:
                self._note_voter_records(entries)
            return
        if kind is VOTERS_KIND:
            # First, so that a voter this record adds gets it now: the
            # majority that commits it may need that voter (§4.1).
            self._note_voter_records(entries)
        # Only voters need records before they are committed: their
        # acknowledgements commit them. An observer (a broker) applies
        # committed records only; it hears of these when the high
        # watermark passes them (_advance_high_watermark), one answer per
        # commit instead of one per append and one per commit.
        self._answer_parked_voters(self._leading)

    def _maybe_advance_high_watermark(self) -> None:
        leader = self._leading
        # The leader's own acknowledgement is its *durable* end (§10.2.1);
        # a replica's is its fetch offset, which it sends only once the
        # records below it are durable (_output.py).
        # Counted over the voter set in force, even when the record that
        # made it is not yet committed (Raft thesis §4.1); a leader that
        # removed itself does not count itself (§4.2.2).
        replicas = leader.replicas
        acknowledged: list[int | None] = []
        for voter in self._voters.ids:
            if voter == self.node_id:
                acknowledged.append(self._durable_end if self._is_voter else None)
            else:
                replica = replicas.get(voter)
                acknowledged.append(replica.end_offset if replica is not None and replica.is_voter else None)
        new_hw = next_high_watermark(self._hw, acknowledged, self._voters.majority, leader.epoch_start_offset)
        if new_hw > self._hw:
            self._advance_high_watermark(new_hw)

    def _advance_high_watermark(self, new_hw: int) -> None:
        # Monotonic on every node: a committed record is never uncommitted,
        # so the state machine never applies a record twice or unapplies one.
        if new_hw <= self._hw:
            return
        old = self._hw
        self._hw = new_hw
        # Records below the log start are in the snapshot, applied already.
        self._out.committed.extend(self._log.slice(max(old, self._log.start_offset), new_hw))
        state = self._state
        if isinstance(state, LeaderState):
            # Observers (brokers) learn the new high watermark, and the
            # records up to it, at once: every observer parked now is due,
            # answered at the end of this step after any voter's answer,
            # a bounded group per step (_answer_due_observers). Voters
            # learn it with the next records or when their long poll
            # expires, as Raft followers learn the commit index from later
            # AppendEntries (Raft thesis §3.5): answering them now would add
            # a Fetch round trip to every write, on every node.
            voters = self._voter_ids
            observers = sorted(rid for rid in state.parked if rid not in voters)
            if self.config.observers_answered_on_commit:
                state.observers_due = deque(observers)
            else:
                for replica_id in observers:
                    self._answer_fetch(state, state.parked.pop(replica_id))
            self._check_pending_reads(state)

    def _serve_fetch(self, leader: LeaderState, request: FetchRequest) -> None:
        """A Fetch in this leader's epoch (the prologue checked both)."""
        # KIP-595: a position no log can have is refused before it can be
        # counted as an acknowledgement.
        if request.fetch_offset < 0 or request.last_fetched_epoch < 0 or request.last_fetched_epoch > self._epoch:
            self._send_fetch_error(request, ErrorCode.INVALID_REQUEST)
            return
        replica = leader.replicas.get(request.src)
        if replica is None:
            # An observer's first Fetch this leadership.
            replica = ReplicaState(request.src, is_voter=False)
            leader.replicas[request.src] = replica
        # KIP-853: a voter counts only from the disk it was added with; the
        # same id with a wiped disk is another replica.
        replica.directory_id = request.directory_id
        replica.is_voter = self._voters.holds(request.src, request.directory_id)
        replica.repairing = request.repairing
        replica.last_fetch_tick = self._tick
        fetch_session = request.request_id >> 32
        if replica.fetch_session != fetch_session:
            # A new process of this fetcher: it knows no high watermark yet.
            replica.fetch_session = fetch_session
            replica.high_watermark_sent = -1
        # Tokens only grow: a reordered older Fetch must not withdraw a
        # confirmation already given (Raft thesis §6.4). A token this
        # leadership never handed out proves nothing (another leader's, or
        # forged): it is not counted.
        if request.read_token < leader.next_read_token:
            replica.acked_read_token = max(replica.acked_read_token, request.read_token)
        if replica.is_voter:
            leader.record_voter_fetch(
                request.src,
                leader_is_voter=self._is_voter,
                majority_size=self._voters.majority,
                next_deadline=self._tick + self.config.ticks(self.config.check_quorum_ms),
            )
        extension = None
        handler = self._hooks.fetch_extension_handler
        if request.extension is not None and handler is not None:
            extension = handler(request)

        diverging, snapshot_id = _check_fetch_position(self._log, self._snapshot, request)
        if diverging is not None or snapshot_id is not None:
            # KIP-595: the fetcher's log is not a prefix of ours, so its
            # fetch offset acknowledges nothing: it must not be counted
            # toward the high watermark until it has truncated.
            leader.parked.pop(request.src, None)
            self._send(
                FetchResponse(
                    src=self.node_id,
                    dst=request.src,
                    epoch=self._epoch,
                    request_id=request.request_id,
                    leader_id=self.node_id,
                    high_watermark=self._hw,
                    log_start_offset=self._log.start_offset,
                    diverging=diverging,
                    snapshot_id=snapshot_id,
                    read_token=leader.take_read_token(),
                    extension=extension,
                )
            )
            self._check_pending_reads(leader)
            return
        # A validated fetch offset is the replica's acknowledgement that
        # everything below it is durable there (_output.py).
        replica.end_offset = request.fetch_offset
        if replica.is_voter:
            self._maybe_advance_high_watermark()
        self._check_pending_reads(leader)
        parked = ParkedFetch(request, self._tick + self.config.ticks(self.config.fetch_max_wait_ms), extension)
        previous = leader.parked.get(request.src)
        if previous is not None and previous.request.request_id >> 32 != fetch_session:
            # Another process of this fetcher (a restart, or a late copy of
            # an old process's request): which one is alive is unknown, so
            # the parked one is answered now rather than left to wait out
            # its sender's request timeout. The sender that is gone ignores
            # the answer (its request id is not in flight anywhere).
            self._answer_fetch(leader, leader.parked.pop(request.src))
            previous = None
        # A request older than the one already parked (same process) is a
        # network duplicate: answer it, but keep waiting on the newer one.
        stale = previous is not None and previous.request.request_id > request.request_id
        # Park a fetch that has nothing new to carry (KIP-595 long poll),
        # unless a read is waiting on this fetcher's next round trip.
        # A voter's news is any record it lacks; it learns the high
        # watermark with its next records. An observer (a broker) applies
        # committed records only: its news is a move of the high watermark
        # or a committed record it lacks (it gets every record it lacks).
        if replica.is_voter:
            has_news = request.fetch_offset < self._log.end_offset
        elif self.config.observers_answered_on_commit:
            has_news = request.fetch_offset < self._hw or self._hw > replica.high_watermark_sent
        else:
            has_news = request.fetch_offset < self._log.end_offset or self._hw > replica.high_watermark_sent
        if stale or has_news or leader.reads_wait_on(replica):
            if not stale:
                leader.parked.pop(request.src, None)
            self._answer_fetch(leader, parked)
        else:
            leader.parked[request.src] = parked

    def _answer_fetch(self, leader: LeaderState, parked: ParkedFetch) -> int:
        """Answer a validated Fetch with the records after its offset (up to
        ``fetch_bytes_max``), our high watermark and a fresh read token;
        returns how many records the answer carries."""
        request = parked.request
        replica = leader.replicas.get(request.src)
        if replica is not None:
            replica.high_watermark_sent = self._hw
        # Records not yet durable here may go out (Raft thesis §10.2.1):
        # they count toward commitment only through acknowledgements.
        records = tuple(self._log.slice(request.fetch_offset, bytes_max=self.config.fetch_bytes_max))
        self._send(
            FetchResponse(
                src=self.node_id,
                dst=request.src,
                epoch=self._epoch,
                request_id=request.request_id,
                leader_id=self.node_id,
                high_watermark=self._hw,
                log_start_offset=self._log.start_offset,
                records=records,
                read_token=leader.take_read_token(),
                extension=parked.response_extension,
            )
        )
        return len(records)

    def _answer_parked_voters(self, leader: LeaderState) -> None:
        """Answer every voter's parked Fetch (new records, or a read that
        needs their next round trip): a few, looked up by id, however many
        observers wait."""
        # In id order: the order of messages must depend on nothing but the
        # inputs, so that a seed replays exactly.
        parked = leader.parked
        if not parked:
            return
        for voter_id in sorted(self._voter_ids):
            fetch = parked.pop(voter_id, None)
            if fetch is not None:
                self._answer_fetch(leader, fetch)

    def _answer_all_parked(self, leader: LeaderState) -> None:
        """Every parked Fetch, in replica id order (without
        ``observers_answered_on_commit``: on every append and read)."""
        parked, leader.parked = leader.parked, {}
        for replica_id in sorted(parked):
            self._answer_fetch(leader, parked[replica_id])

    def _answer_due_observers(self, leader: LeaderState) -> None:
        """Answer up to ``OBSERVER_ANSWERS_PER_STEP_MAX`` observers due
        since the high watermark moved, carrying about
        ``OBSERVER_ANSWER_RECORDS_PER_STEP_MAX`` records at most (at least
        one answer), in id order (drawn when it moved). Called at the end
        of every step (``_flush``), after the step's own answers, a voter's
        among them: thousands of brokers' answers never go out ahead of a
        voter's, no step's share of them costs more than a few ms to
        encode, and the rest wait a step each (a tick comes every
        ``tick_ms``; each message is a step too)."""
        due = leader.observers_due
        parked = leader.parked
        voters = self._voter_ids
        replicas = leader.replicas
        hw = self._hw
        answered = 0
        records = 0
        while due and answered < OBSERVER_ANSWERS_PER_STEP_MAX and records < OBSERVER_ANSWER_RECORDS_PER_STEP_MAX:
            replica_id = due.popleft()
            # Skipped: answered meanwhile (a Fetch parks only once its
            # sender knows the high watermark), or a voter now.
            if replica_id in parked and replica_id not in voters and replicas[replica_id].high_watermark_sent < hw:
                records += self._answer_fetch(leader, parked.pop(replica_id))
                answered += 1

    def _check_pending_reads(self, leader: LeaderState) -> None:
        """Serve every read a majority has confirmed (Raft thesis §6.4)."""
        # Until a record of its own epoch is committed, a new leader's high
        # watermark may be behind the cluster's: reads wait (§6.4 step 1).
        if not leader.pending_reads or not self.leader_has_committed_own_epoch:
            return
        voter_tokens = [replica.acked_read_token for replica in leader.replicas.values() if replica.is_voter]
        still_waiting: list[PendingRead] = []
        for read in leader.pending_reads:
            if read_confirmed(read.token_needed, voter_tokens, self._is_voter, self._voters.majority):
                self._out.reads.append(ReadReady(read.read_id, self._hw))
            else:
                still_waiting.append(read)
        leader.pending_reads = still_waiting

    def _send_fetch_error(self, request: FetchRequest, code: ErrorCode, *, leader_hint: Any = "current") -> None:
        if leader_hint == "current":
            leader_hint = self._leader_hint()
        self._send(
            FetchResponse(
                src=self.node_id,
                dst=request.src,
                epoch=self._epoch,
                request_id=request.request_id,
                leader_id=leader_hint,
                error=code,
                high_watermark=self._hw,
                log_start_offset=self._log.start_offset,
                leader_endpoint=self.endpoint_of(leader_hint),
            )
        )

    def endpoint_of(self, node_id: int | None) -> str | None:
        """Where ``node_id`` listens ("HOST:PORT") as far as this node
        knows: the first endpoint the voter set in force names for it, else
        the config's static endpoint, else one a NOT_LEADER answer named;
        None when not known (or ``node_id`` is None). What NOT_LEADER
        answers name with the leader (KIP-853)."""
        if node_id is None:
            return None
        voter = self._voters.get(node_id)
        if voter is not None and voter.endpoints:
            return voter.endpoints[0]
        return self._static_endpoints.get(node_id) or self._learned_endpoints.get(node_id)

    @property
    def learned_endpoints(self) -> Mapping[int, str]:
        """Where the leaders named by NOT_LEADER answers listen (node id ->
        "HOST:PORT", validated): the host tells its transport, so that this
        node reaches a leader it had no address for. A new object whenever
        it changes; do not modify it."""
        return self._learned_endpoints

    def _learn_endpoint(self, response: FetchResponse) -> None:
        """Keep the endpoint a fetch answer gives for the leader it names."""
        named, endpoint = response.leader_id, response.leader_endpoint
        if named is None or endpoint is None or named == self.node_id or self._learned_endpoints.get(named) == endpoint:
            return
        learned = dict(self._learned_endpoints)
        learned.pop(named, None)
        if len(learned) >= VOTERS_MAX:
            # Bounded: a peer that names ever new leaders displaces the
            # oldest it named, never grows the map.
            del learned[next(iter(learned))]
        learned[named] = endpoint
        self._learned_endpoints = learned

    def _reply_fetch_snapshot(self, request: FetchSnapshotRequest, code: ErrorCode, **fields: Any) -> None:
        self._send(
            FetchSnapshotResponse(
                src=self.node_id,
                dst=request.src,
                epoch=self._epoch,
                request_id=request.request_id,
                leader_id=self._leader_hint(),
                error=code,
                **fields,
            )
        )

    def _serve_fetch_snapshot(self, leader: LeaderState, request: FetchSnapshotRequest) -> None:
        """KIP-630 FetchSnapshot in this leader's epoch: one chunk."""
        reply = partial(self._reply_fetch_snapshot, request)
        replica = leader.replicas.get(request.src)
        if replica is None:
            replica = leader.replicas[request.src] = ReplicaState(
                request.src, is_voter=self._voters.holds(request.src, None)
            )
        # A snapshot fetch is a fetch: it counts for check quorum
        # (KAFKA-15489), or a leader would resign while feeding a snapshot
        # to a majority that is catching up.
        replica.last_fetch_tick = self._tick
        if replica.is_voter:
            leader.record_voter_fetch(
                request.src,
                leader_is_voter=self._is_voter,
                majority_size=self._voters.majority,
                next_deadline=self._tick + self.config.ticks(self.config.check_quorum_ms),
            )
        snapshot = self._snapshot
        if snapshot is None or snapshot.snapshot_id != request.snapshot_id:
            # We took a newer snapshot since: the fetcher starts over from a
            # Fetch, which names the new one (KIP-630).
            reply(ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        size = len(snapshot.data)
        # An untrusted position is checked before it is used as an index.
        if request.position < 0 or request.position > size:
            reply(ErrorCode.POSITION_OUT_OF_RANGE)
            return
        chunk = snapshot.data[request.position : request.position + self.config.snapshot_chunk_bytes_max]
        reply(
            ErrorCode.NONE,
            snapshot_id=snapshot.snapshot_id,
            position=request.position,
            size=size,
            chunk=bytes(chunk),
        )

    def _send_begin_quorum_epoch(self, leader: LeaderState, *, force: bool) -> None:
        """Announce the epoch to voters that have not fetched lately (the
        announcement doubles as a heartbeat for voters that missed it)."""
        # Half the fetch timeout: a voter hears from us at least twice
        # before its own fetch timeout could make it stand.
        half_fetch = self.config.ticks(self.config.fetch_timeout_ms / 2)
        for voter in self._voters.ids:
            if voter == self.node_id:
                continue
            replica = leader.replicas[voter]
            recent = replica.last_fetch_tick is not None and self._tick - replica.last_fetch_tick < half_fetch
            if force or not recent:
                self._send(BeginQuorumEpochRequest(src=self.node_id, dst=voter, epoch=self._epoch))
        leader.begin_epoch_deadline = self._tick + half_fetch

    def _send_end_quorum_epoch(self, resigned: ResignedState) -> None:
        # Resent to every voter that has not acknowledged, until one stands
        # (our own election timer is the backstop if none does).
        successors = resigned.successors
        if not successors:
            # After a restart the ranking is lost: name every other voter.
            successors = tuple(voter for voter in self._voters.ids if voter != self.node_id)
        for voter in self._voters.ids:
            if voter != self.node_id and voter not in resigned.end_epoch_acked:
                self._send(
                    EndQuorumEpochRequest(
                        src=self.node_id, dst=voter, epoch=self._epoch, preferred_successors=successors
                    )
                )
        resigned.end_epoch_deadline = self._tick + self.config.ticks(self.config.request_timeout_ms)

    # =====================================================================
    # Follower and observer: fetching
    # =====================================================================

    def _maybe_send_fetch(self, now: int) -> None:
        # One request in flight at a time: the fetch offset is the
        # acknowledgement, and two in flight could acknowledge out of order.
        fetcher = self._fetcher
        if fetcher is None or fetcher.in_flight is not None or now < fetcher.next_fetch_tick:
            return
        if self._disk_failure is not None:
            # The Fetch could not leave before the records it acknowledges
            # are durable, and fetching more would only pile up writes the
            # disk refuses: wait for ``persisted`` (``_disk_resumed``).
            return
        if self._role is Role.FOLLOWER:
            target = self._leader_id  # KIP-595: fetch only from the leader
        else:
            # An observer without a leader asks the voters in turn, and the
            # leaders it was sent to before (they may lead again, or know
            # who does); a non-leader answers NOT_LEADER with the leader it
            # knows and where it listens. Never itself: a voter that does
            # not stand (one repairing its log) would ask itself, and the
            # runtime has no connection to itself, so that turn was lost
            # for a whole request timeout (the simulator delivered it).
            targets = tuple(node for node in self._voters.ids if node != self.node_id)
            learned = self._learned_endpoints
            if learned and not self._is_voter:
                targets = targets + tuple(sorted(node for node in learned if node not in self._voters))
            if not targets:
                return  # the only voter is this node: nobody to ask
            target = targets[self._bootstrap_index % len(targets)]
        if target is None:
            return
        # Unique per process (the session is in the high bits), so the
        # leader can tell a retry from a duplicate (_serve_fetch).
        self._fetch_request_id += 1
        # The leader may hold the request for its long poll, then answer:
        # give it that long plus a request timeout before presuming it lost.
        deadline = now + self.config.ticks(self.config.fetch_max_wait_ms + self.config.request_timeout_ms)
        fetcher.in_flight = FetchInFlight(self._fetch_request_id, target, deadline)
        download = fetcher.download
        if download is not None:
            # KIP-630: resume the snapshot where the last chunk ended.
            self._send(
                FetchSnapshotRequest(
                    src=self.node_id,
                    dst=target,
                    epoch=self._epoch,
                    snapshot_id=download.snapshot_id,
                    position=len(download.buffer),
                    request_id=self._fetch_request_id,
                )
            )
            return
        # The fetch offset is our log end, which the Output contract holds
        # back until it is durable: leaving, it acknowledges those records.
        provider = self._hooks.fetch_extension_provider
        self._send(
            FetchRequest(
                src=self.node_id,
                dst=target,
                epoch=self._epoch,
                fetch_offset=self._log.end_offset,
                last_fetched_epoch=self._log.last_epoch,
                request_id=self._fetch_request_id,
                read_token=fetcher.read_token,
                extension=provider() if provider is not None else None,
                directory_id=self.config.directory_id,
                repairing=self._repair is not None,
                observer=self.config.observer_only,
            )
        )

    def _learn_leader(self, response: FetchResponse | FetchSnapshotResponse) -> bool:
        """An answer in our epoch that names its leader: an observer (or a
        voter) that knew no leader follows it. True if the node did."""
        named = response.leader_id
        if named is None or named == self.node_id:
            return False
        if self._leader_id is None and self._role in (Role.UNATTACHED, Role.PROSPECTIVE):
            self._become_follower(response.epoch, named, reason=f"{response.src} named leader {named}")
            return True
        if self._role is Role.LEADER:
            # Raft thesis §3.4 election safety: one leader per epoch.
            raise QuorumInvariantError(
                f"{response.src} names {named} leader of epoch {response.epoch}, which this node leads"
            )
        return False

    def _on_fetch_response(self, response: FetchResponse) -> None:
        """The answer to our Fetch, in our epoch (the prologue checked it
        answers the request in flight)."""
        if self._learn_leader(response):
            return
        # Accepted, and no change of role since: the fetch loop still exists.
        fetcher = self._role_state(FetcherState)
        fetcher.answered_high_watermark = None
        if response.error:
            if response.error is ErrorCode.INCONSISTENT_VOTER_SET:
                # Our id is a voter's there (a broker given a controller's
                # id): nothing we fetch will be served. Said in the log;
                # the broker's registration is refused for the same reason
                # and stops it. Until then, ask again after the backoff.
                self._count_and_report(
                    "own_fetches_refused_voter_id",
                    f"node {response.src} refuses this node's Fetches: node id {self.node_id} is one of its"
                    " voters' ids; give this broker an id no controller has",
                )
            # NOT_LEADER in our epoch with no leader named: the leader
            # resigned. Wait a little and ask again (an observer asks the
            # next voter).
            if self._role is Role.UNATTACHED:
                self._bootstrap_index += 1
            fetcher.next_fetch_tick = self._tick + self.config.ticks(self.config.retry_backoff_ms)
            return
        state = self._state
        if not isinstance(state, FollowerState) or response.src != self._leader_id:
            # Only the leader's log is copied (KIP-595): an answer from a
            # voter that is not our leader carries nothing to take.
            return
        # KIP-595: a successful answer from the leader restarts the fetch
        # timeout, and proves it alive to the pre-vote rule (KIP-996) and
        # the leader lease (Raft thesis §4.2.3).
        state.leader_fetch_tick = self._tick
        state.leader_unreachable = False
        state.fetch_deadline = self._tick + self.config.ticks(self.config.fetch_timeout_ms)
        # A live leader: a node named a voter elsewhere need stand no more.
        self._named_voter_by = None
        # Echoed in the next Fetch, which proves to the leader that we
        # heard it after it handed out this token (Raft thesis §6.4).
        fetcher.read_token = max(fetcher.read_token, response.read_token)
        fetcher.next_fetch_tick = self._tick
        if response.diverging is not None:
            # Our log is not a prefix of the leader's: truncate and ask again.
            # The high watermark must not move on such a response: it is
            # only meaningful for a log the leader has validated (KIP-595).
            self._truncate_diverging(response.diverging)
        elif response.snapshot_id is not None:
            # KIP-630: the leader no longer has the records we need.
            fetcher.download = SnapshotDownload(response.snapshot_id, bytearray())
        elif response.records and response.records[0].offset == self._log.end_offset and (
            response.records[0].epoch < self._log.last_epoch
        ):
            # The leader validated our position, so its records continue our
            # last epoch or a later one (KIP-595); these the log would refuse.
            first = response.records[0]
            self._drop_malformed(response, f"record epoch {first.epoch} at {first.offset} below our last epoch")
        elif not response.records or response.records[0].offset == self._log.end_offset:
            # The leader validated our log up to the fetch offset; the
            # records extend it. Learn the high watermark, bounded by our log.
            if response.records:
                self._log.append(response.records)
                self._out.append.extend(response.records)
                # In force on append (Raft thesis §4.1; KIP-853), the first
                # one of a static cluster too (its upgrade).
                self._note_voter_records(response.records)
            fetcher.answered_high_watermark = response.high_watermark
            # Bounded by our own log: a follower cannot commit records it
            # does not hold yet (the high watermark may run ahead of them).
            self._advance_high_watermark(min(response.high_watermark, self._log.end_offset))
            if self._repair is not None:
                self._maybe_finish_repair()
        self._maybe_send_fetch(self._tick)

    def _maybe_finish_repair(self) -> None:
        """End the repair once this node's log provably holds every record
        it may have acknowledged that is committed (docs/storage.md,
        "Repair"). Only what a leader of our epoch validated and we hold
        durably counts: the high watermark, bounded by the durable log end
        (the log is a prefix of the leader's up to there). Either of:

        (a) that reaches ``acknowledged_end``: every offset we may have
            acknowledged before the damage is again held, as the leader has
            it, and the leader holds every committed record (Leader
            Completeness, Raft thesis §3.6.3: it was elected by intact logs,
            ours included only from before the damage);
        (b) it passes a record of an epoch later than ``restart_epoch``: we
            cast no vote in such an epoch (none before the damage, none
            while repairing), so its leader was elected without our help
            and held every committed record when it was elected; we now
            hold its log up to past that point. This ends a repair whose
            damaged tail was never committed and that no leader will
            rewrite, and one whose ``acknowledged_end`` is unknown.
        """
        repair = self._repair
        if repair is None or not isinstance(self._state, FollowerState):
            return
        held = min(self._hw, self._durable_end)
        done = repair.acknowledged_end is not None and held >= repair.acknowledged_end
        if not done and self._log.last_epoch > repair.restart_epoch:
            found = self._log.end_offset_for_epoch(repair.restart_epoch)
            first_later = found.offset if found is not None else self._log.start_offset
            done = held > first_later
        if done:
            self._repair = None
            # An observer (a broker's replica) never votes: "observing".
            after = "voting again" if self._is_voter else "observing"
            self._event(
                f"log repaired up to offset {held} from leader {self._leader_id} (damage found at offset "
                f"{repair.damaged_from_offset}): {after}"
            )

    # =====================================================================
    # The voter set (KIP-853; Raft thesis §4.1)
    # =====================================================================

    def _note_voter_records(self, entries: Sequence[Entry]) -> None:
        """Appended records: each VOTERS record among them takes effect
        now, committed or not (Raft thesis §4.1). Raises ``ValueError`` for
        a payload that is not a voter set (the wire checked a peer's; one
        from our own storage is damage)."""
        found = False
        for entry in entries:
            if entry.kind is VOTERS_KIND:
                self._voter_records.append((entry.offset, VoterSet.decode(entry.data)))
                found = True
        if found:
            self._voters_changed()

    def voters_at(self, offset: int) -> VoterSet:
        """The voter set in force for a record at ``offset`` (the last
        VOTERS record before it, else the base)."""
        voters = self._base_voters
        for record_offset, record_voters in self._voter_records:
            if record_offset >= offset:
                break
            voters = record_voters
        return voters

    def _voters_changed(self) -> None:
        """The last VOTERS record changed (appended, truncated, or a
        snapshot replaced the log): put its set in force. A leader re-reads
        its replica table, since majorities are now counted over the new
        set: the high watermark and reads may move at once."""
        voters = self._voter_records[-1][1] if self._voter_records else self._base_voters
        if voters == self._voters:
            return
        was_alone = len(self._voters) == 1 and self._is_voter
        self._voters = voters
        self._voter_ids = frozenset(voters.ids)
        self._is_voter = self._holds_self(voters)
        self._out.voters_changed = voters
        state = self._state
        if isinstance(state, LeaderState):
            for voter in voters.ids:
                if voter != self.node_id and voter not in state.replicas:
                    state.replicas[voter] = ReplicaState(voter, is_voter=False)
            for replica in state.replicas.values():
                replica.is_voter = voters.holds(replica.node_id, replica.directory_id)
            state.fetched_voters = {voter for voter in state.fetched_voters if state.replicas[voter].is_voter}
            if was_alone and not (len(voters) == 1 and self._is_voter):
                # A leader alone was its own majority and kept no
                # check-quorum window (KAFKA-16144): its deadline is long
                # past. The voter it just gained gets a whole window to
                # fetch, or the leader would resign at its next tick
                # (found by the sweep, seed 46403: a single voter resigned
                # 3 ms after auto-join added a second).
                state.check_quorum_deadline = self._tick + self.config.ticks(self.config.check_quorum_ms)
            self._maybe_advance_high_watermark()
            self._check_pending_reads(state)

    def _truncate_diverging(self, diverging: OffsetAndEpoch) -> None:
        # KIP-595: keep our records of the diverging epoch only up to where
        # the leader's records of it end; if we have no records of that
        # epoch, keep what precedes our next epoch. Repeated rounds converge
        # on the fork point.
        ours = self._log.end_offset_for_epoch(diverging.epoch)
        if ours is None:
            target = self._log.start_offset
        elif ours.epoch == diverging.epoch:
            target = min(diverging.offset, ours.offset)
        else:
            target = ours.offset
        target = max(target, self._log.start_offset)
        # Never truncate what might be committed (Raft thesis §3.6: Leader
        # Completeness). A leader asking us to is a bug on one side.
        if target < self._hw:
            raise QuorumInvariantError(
                f"node {self.node_id} told to truncate to {target}, below its high watermark {self._hw}"
            )
        self._truncate_log(target)

    def _truncate_log(self, end_offset: int) -> None:
        """Drop our records from ``end_offset`` on, from the log and from
        the output not yet handed out, so the driver writes a consistent
        tail (truncate first, then append: _output.py)."""
        if end_offset >= self._log.end_offset:
            return
        self._log.truncate_to(end_offset)
        if self._voter_records and self._voter_records[-1][0] >= end_offset:
            # An uncommitted voter change truncated: the set before it is in
            # force again (KIP-853; Raft thesis §4.1).
            while self._voter_records and self._voter_records[-1][0] >= end_offset:
                self._voter_records.pop()
            self._voters_changed()
        out = self._out
        out.append = [entry for entry in out.append if entry.offset < end_offset]
        out.truncate_to = end_offset if out.truncate_to is None else min(out.truncate_to, end_offset)
        # Truncated records are durable nowhere here any more: the leader
        # (after a later election) must not count them (Raft thesis §10.2.1).
        self._durable_end = min(self._durable_end, end_offset)
        for pending in self._unpersisted:
            pending.end_offset = min(pending.end_offset, end_offset)

    def _on_fetch_snapshot_response(self, response: FetchSnapshotResponse) -> None:
        """A chunk of the snapshot we are downloading (KIP-630)."""
        if self._learn_leader(response):
            return
        state = self._state
        if not isinstance(state, FollowerState) or state.fetcher.download is None:
            return
        fetcher = state.fetcher
        download = fetcher.download
        if response.error or response.snapshot_id != download.snapshot_id or response.position != len(download.buffer):
            # The leader moved on (a newer snapshot) or we lost our place:
            # start over from a plain Fetch.
            fetcher.download = None
            fetcher.next_fetch_tick = self._tick + self.config.ticks(self.config.retry_backoff_ms)
            return
        # A chunk from the leader is a successful fetch (KIP-595 timeout).
        state.leader_fetch_tick = self._tick
        self._named_voter_by = None
        state.fetch_deadline = self._tick + self.config.ticks(self.config.fetch_timeout_ms)
        download.buffer += response.chunk
        if len(download.buffer) >= response.size:
            fetcher.download = None
            snapshot = Snapshot(download.snapshot_id, bytes(download.buffer))
            if (problem := snapshot_header_problem(snapshot.data)) is not None:
                # The header begins but does not decode: damage, not a
                # snapshot of either kind.
                self._drop_malformed(response, f"snapshot {download.snapshot_id.end_offset}: {problem}")
                fetcher.next_fetch_tick = self._tick + self.config.ticks(self.config.retry_backoff_ms)
                return
            # Without the header it was taken before the cluster's upgrade
            # to dynamic voters, whatever this node's format: its leader's
            # newest snapshot may predate the upgrade (KIP-853: a kraft.version
            # 0 snapshot, the voters of that time). Refused, a disk
            # formatted to join after the upgrade could not catch up until
            # that leader snapshotted again (the sweep's seed 180174).
            self._install_snapshot(snapshot)
        self._maybe_send_fetch(self._tick)

    def _install_snapshot(self, snapshot: Snapshot) -> None:
        """KIP-630: replace the whole log with a snapshot from the leader.
        Records already in this output are dropped with the old log: the
        driver resets the log to the snapshot instead of writing them."""
        snapshot_id = snapshot.snapshot_id
        self._snapshot = snapshot
        self._log.reset(snapshot_id)
        # A snapshot taken while the voters were dynamic carries the set in
        # force at its end (checked on arrival,
        # ``_on_fetch_snapshot_response``); one taken while they were static
        # (before the cluster's upgrade) is the state machine's bytes alone:
        # this node's initial set stands in until the log's first VOTERS
        # record (the static set; on a disk formatted to join, the set it
        # was given, with directory ids, so it is no voter by id alone).
        self._base_dynamic = snapshot_holds_voters(snapshot.data)
        self._base_voters = split_snapshot(snapshot.data)[0] if self._base_dynamic else self.config.initial_voter_set
        self._voter_records.clear()
        self._voters_changed()
        out = self._out
        out.snapshot = (snapshot_id, snapshot.data)
        out.reset_log = True
        out.append = []
        out.truncate_to = None
        out.snapshot_loaded = (snapshot_id, snapshot.data)
        out.committed = []
        self._durable_end = min(self._durable_end, snapshot_id.end_offset)
        for pending in self._unpersisted:
            pending.end_offset = snapshot_id.end_offset
        # A snapshot from the leader covers committed records only (it
        # takes none beyond its high watermark, snapshot_taken).
        self._hw = max(self._hw, snapshot_id.end_offset)

    # =====================================================================
    # Elections
    # =====================================================================

    def _request_votes(self, *, pre_vote: bool) -> None:
        """Ask every other voter. The request carries our last epoch and
        log end, which voters compare with theirs (Raft thesis §3.6.1)."""
        last = self._log.last
        # A pre-vote asks about the epoch we would stand in, without
        # moving to it (KIP-996); a vote is in the epoch we already took.
        epoch = self._epoch + 1 if pre_vote else self._epoch
        for voter in self._voters.voters:
            if voter.node_id != self.node_id:
                self._send(
                    VoteRequest(
                        src=self.node_id,
                        dst=voter.node_id,
                        epoch=epoch,
                        last_epoch=last.epoch,
                        end_offset=last.offset,
                        pre_vote=pre_vote,
                        voter_directory_id=voter.directory_id,
                    )
                )

    def _reply_vote(self, request: VoteRequest, *, granted: bool, error: ErrorCode = ErrorCode.NONE) -> None:
        # A pre-vote answer names a leader only when it is known alive (we
        # lead or follow it): the prospective node then joins it instead of
        # standing (KIP-996).
        if request.pre_vote:
            hint = self._leader_id if self._role in (Role.LEADER, Role.FOLLOWER) else None
        else:
            hint = self._leader_hint()
        self._send(
            VoteResponse(
                src=self.node_id,
                dst=request.src,
                epoch=self._epoch,
                granted=granted,
                pre_vote=request.pre_vote,
                leader_id=hint,
                error=error,
            )
        )

    def _note_named_voter(self, request: VoteRequest) -> None:
        """Raft thesis §4.1 and §4.2.2: a node that looks for a leader, not
        a voter of the set its own log holds, and asked for its vote by a
        candidate whose set names this node, with this disk, as a voter
        (``_addressed_as_voter``: the candidate holds a voter change this
        log lacks, committed or not), but whose log is behind ours: that
        candidate cannot have our vote, and may need it (the sweep's seed
        571925: a leader cut off in a minority appended the VOTERS record
        that added us, the majority elected another leader whose records
        we copied as an observer, and that leader's disk was then lost;
        the deposed leader's set needed our vote, our log outranked it, and
        no voter of our set could win without the deposed leader's vote,
        which its longer log withheld: no leader ever again). So this node
        stands itself when its timer fires (``_stands``), as a voter whose
        removal is pending does.

        Safe as any candidacy: it counts only the votes of the set in its
        own log, which lacks itself (a leader outside its set, §4.2.2), and
        every voter checks its log (§3.6.1). Elected, it leads until a
        record of its epoch is committed, so a majority of its set holds
        its log, and then hands over (``_flush``). A live leader's voters
        refuse its pre-vote and name that leader, whom it then follows; the
        first answer from a leader ends its candidacy."""
        state = self._state
        looking = isinstance(state, UnattachedState) or (
            isinstance(state, FollowerState) and not state.fetched_from_leader
        )
        if (
            self._named_voter_by is not None
            or self._stands
            or not looking
            or not self._addressed_as_voter(request)
            or _log_up_to_date(request, self._log)
        ):
            return
        self._named_voter_by = request.src
        if isinstance(state, UnattachedState):
            # It stands after an election timeout, not at once: the
            # candidate may still win with other votes. (A follower stands
            # at its fetch timeout, unless the leader answers first.)
            state.election_deadline = self._draw_election_deadline()

    def _on_vote_request(self, request: VoteRequest) -> None:
        """A Vote in our epoch (Raft thesis §3.4, §3.6.1)."""
        # Grant only if: we are a voter; we neither lead, follow nor stand
        # in this epoch (a candidate has voted for itself); no leader is
        # known for it; we have not voted for anyone else in it (§3.4: one
        # vote per epoch); and the candidate's log is as up to date as ours
        # (§3.6.1), so that the winner holds every committed record.
        granted = False
        if (
            (self._votes or self._addressed_as_voter(request))
            # §3.8: a vote the disk cannot record is never granted.
            and self._disk_failure is None
            and self._role in (Role.UNATTACHED, Role.PROSPECTIVE)
            and self._leader_id is None
            and self._voted_for in (None, request.src)
            and _log_up_to_date(request, self._log)
        ):
            granted = True
            # Raft thesis §3.4: granting a vote restarts the election timer,
            # so that we do not stand against the candidate we just chose.
            deadline = self._draw_election_deadline()
            if self._role is Role.PROSPECTIVE or self._voted_for is None:
                # §3.8: the vote is recorded, and durable before the
                # response leaves (the Output contract orders it). A node
                # that does not stand keeps looking for the leader.
                fetcher = None if self._stands else FetcherState(next_fetch_tick=self._tick)
                self._enter_role(
                    Role.UNATTACHED, Trigger.GRANTED_VOTE, UnattachedState(election_deadline=deadline, fetcher=fetcher)
                )
                self._set_election_state(self._epoch, request.src, None)
                self._event(f"voted for {request.src}")
            else:
                self._role_state(UnattachedState).election_deadline = deadline
        if not granted:
            self._note_named_voter(request)
        self._reply_vote(request, granted=granted)

    def _on_pre_vote_request(self, request: VoteRequest) -> None:
        """KIP-996: grant iff we would vote in that epoch; change nothing.

        A leader refuses; so does a follower that has fetched from its
        leader since it began following: its leader is alive, and a healed
        node must not depose it.

        A prospective node that stood because its leader's process is gone
        (``CandidacyState.leader_crashed``) grants only a node that
        outranks it (``_outranks_us``): the survivors stand within
        ``unreachable_leader_wait_ms`` of each other, and two that granted
        each other would both stand in the next epoch and split the vote,
        which costs an election timeout and a backoff when the crashed
        leader is the voter that would have broken the tie
        (docs/benchmarks.md, "Failover"). It is about to vote for itself
        in that epoch anyway; by a total order exactly one of two such
        nodes grants the other, unless that one refused our own pre-vote
        (it had not seen the reset yet): we cannot win without it, so it
        must be able to. For the same reason a follower of a crashed
        leader that grants a pre-vote waits an election timeout before it
        stands itself: the node it granted is about to stand in the next
        epoch, and standing too would split that vote. A pre-vote decides
        nothing durable, so this is about liveness only.
        """
        granted = (
            request.epoch > self._epoch
            and (self._votes or self._addressed_as_voter(request))
            # Could not vote for real (§3.8), so it must not encourage.
            and self._disk_failure is None
            and self._role is not Role.LEADER
            and not (isinstance(self._state, FollowerState) and self._state.fetched_from_leader)
            and _log_up_to_date(request, self._log)
            and not (
                isinstance(self._state, CandidacyState)
                and self._state.leader_crashed
                # One that refused us (it had not yet seen the reset) stands
                # on its own later: without its grant we cannot win.
                and request.src not in self._state.rejected
                and not self._outranks_us(request)
            )
        )
        state = self._state
        if granted and isinstance(state, FollowerState) and state.leader_unreachable:
            state.fetch_deadline = max(state.fetch_deadline, self._tick + self.config.ticks(self.config.election_timeout_ms))
        if not granted:
            self._note_named_voter(request)
        self._reply_vote(request, granted=granted)

    def _outranks_us(self, request: VoteRequest) -> bool:
        """Does ``request``'s candidate rank above this node: a log more up
        to date (§3.6.1), or as up to date and a lower id? A total order,
        so of two prospective nodes exactly one grants the other. Only
        pre-votes read it: it never decides a real vote."""
        theirs = OffsetAndEpoch(request.last_epoch, request.end_offset)
        return theirs > self._log.last or (theirs == self._log.last and request.src < self.node_id)

    def _on_vote_response(self, response: VoteResponse) -> None:
        """An answer in our epoch; it counts only toward the round of the
        same kind (pre-vote or vote) that is running."""
        names_another_leader = response.leader_id is not None and response.leader_id != self.node_id
        if response.pre_vote:
            if self._role is not Role.PROSPECTIVE:
                return
            if names_another_leader and self._leader_id is None:
                # Someone follows a live leader of our epoch: join it.
                self._become_follower(self._epoch, response.leader_id, reason="pre-vote named a leader")
                return
        else:
            if self._role is not Role.CANDIDATE:
                return
            if names_another_leader and not response.granted:
                # Someone else already won this epoch (§3.4: one leader).
                self._become_follower(self._epoch, response.leader_id, reason="vote response named a leader")
                return
        # Sets, not counters: a duplicated answer is counted once.
        candidacy = self._role_state(CandidacyState)
        (candidacy.granted if response.granted else candidacy.rejected).add(response.src)
        majority = self._voters.majority
        # Only the voters of our set count: ourselves too, unless we stand
        # while our own removal is pending (``_stands``).
        if len(candidacy.granted & self._voter_ids) >= majority:
            # Raft thesis §3.4: a majority of the voters, ourselves included.
            if response.pre_vote:
                self._become_candidate("won the pre-vote", Trigger.WON_PRE_VOTE)
            else:
                self._become_leader()
        elif len(candidacy.rejected & self._voter_ids) > len(self._voters) - majority:
            # Too many refusals for any majority to remain: lost already, so
            # do not wait out the timer.
            if response.pre_vote:
                self._lose_pre_vote("lost the pre-vote")
            elif not candidacy.backing_off:
                self._start_backoff(candidacy)

    def _on_begin_quorum_epoch(self, request: BeginQuorumEpochRequest) -> None:
        """KIP-595 BeginQuorumEpoch in our epoch: its sender won it."""
        if self._leader_id is not None and self._leader_id != request.src:
            # At most one candidate wins an epoch (Raft thesis §3.4), and this
            # node already knows who won this one (itself, if it leads or
            # led it): a second winner is forged (a plaintext peer can claim
            # any id) or a peer's bug. Following it would break election
            # safety here; a leader's own invariant stopped the node.
            self._drop_malformed(
                request,
                f"node {self._leader_id} is the leader of epoch {self._epoch}",
                counter="messages_contradicting_leader",
            )
            return
        # Only a candidate that won sends it, and at most one wins an epoch
        # (§3.4), so following it is safe in any role but its own.
        if self._leader_id != request.src or self._role is not Role.FOLLOWER:
            self._become_follower(request.epoch, request.src, reason=f"{request.src} began epoch {request.epoch}")
        self._send(BeginQuorumEpochResponse(src=self.node_id, dst=request.src, epoch=self._epoch, error=ErrorCode.NONE))

    def _on_end_quorum_epoch(self, request: EndQuorumEpochRequest) -> None:
        """KIP-595 EndQuorumEpoch in our epoch: its sender resigned."""
        # Keep our vote: the epoch does not change, and a second vote in it
        # could elect a second leader (§3.8).
        if self._role is Role.FOLLOWER and self._leader_id == request.src:
            self._become_unattached(
                self._epoch,
                voted_for=self._voted_for,
                reason=f"leader {request.src} resigned",
                trigger=Trigger.LEADER_RESIGNED,
            )
        if self._role is Role.UNATTACHED and self._stands:
            # The most up-to-date successor stands at once, the next
            # after a short wait, and so on (KIP-595 EndQuorumEpoch).
            successors = request.preferred_successors
            if self.node_id in successors:
                position = successors.index(self.node_id)
                if position == 0:
                    delay_ticks = 0  # stand on the next tick
                else:
                    delay_ms = min(
                        self.config.election_backoff_max_ms,
                        self.config.election_backoff_base_ms * 2 ** (position - 1),
                    )
                    delay_ticks = self.config.ticks(delay_ms)
                unattached = self._role_state(UnattachedState)
                unattached.election_deadline = min(unattached.election_deadline, self._tick + delay_ticks)
        self._send(EndQuorumEpochResponse(src=self.node_id, dst=request.src, epoch=self._epoch, error=ErrorCode.NONE))

    # =====================================================================
    # Output assembly
    # =====================================================================

    def _send(self, message: Message) -> None:
        if isinstance(message, (FetchResponse, FetchSnapshotResponse)) or (
            # A leader resigning because its disk failed hands over at once:
            # EndQuorumEpoch depends on nothing durable here, and the
            # outputs ahead of it may wait on the disk for a long time.
            isinstance(message, EndQuorumEpochRequest) and self._disk_failure is not None
        ):
            # Depends on nothing being durable here (see _output.py): the
            # leader's records count only through acknowledgements, and an
            # error only repeats the epoch the request itself carried.
            self._out.early_messages.append(message)
        else:
            # Votes, fetches (acknowledgements) and epoch announcements wait
            # until this output's persistence is durable (Raft thesis §3.8).
            self._out.messages.append(message)

    def _flush(self) -> Output:
        """Hand the output of one input to the driver. An output with
        persistence work gets the next sequence number; ``persisted`` with
        that number later tells us how far the log is durable."""
        if (
            self._role is _LEADER
            and not self._is_voter
            and not self.voter_change_pending
            and self.leader_has_committed_own_epoch
        ):
            # A leader that removed itself led until the change committed
            # (Raft thesis §4.2.2: it replicates it without counting
            # itself); now it hands over and keeps no vote (KIP-853). One
            # elected outside its own set (``_note_named_voter``) leads
            # until a record of its epoch is committed: a majority of the
            # set then holds its log, and the next leader comes from it.
            removed = bool(self._voter_records) and self.voters_at(self._voter_records[-1][0]).holds(
                self.node_id, self.config.directory_id
            )
            reason = (
                "removed from the voter set: the change is committed"
                if removed
                else "not a voter of its own set: its epoch is committed, handing over"
            )
            self._become_resigned(reason, Trigger.RESIGN_REQUESTED)
        state = self._state
        if isinstance(state, LeaderState) and state.observers_due:
            self._answer_due_observers(state)
        out = self._out
        if not out and not out.reset_log:
            # Empty (``reset_log`` is the one field ``bool`` leaves out): it
            # stays in the making for the next input.
            return NO_OUTPUT
        self._out = Output()
        if out.has_persistence:
            self._persist_seq += 1
            out.persist_seq = self._persist_seq
            self._unpersisted.append(PendingPersist(self._persist_seq, self._log.end_offset))
        return out
