"""Messages exchanged by quorum nodes (KIP-595 RPCs, KIP-996 pre-vote).

Every message is a slotted dataclass naming its sender ``src`` and
receiver ``dst``, and is never changed once built: nothing assigns to a
message's fields (``dataclasses.replace`` makes a new one). That is a
convention, checked by tests/quorum/test_messages_immutable.py, rather than
``frozen=True``: a frozen dataclass sets each field through
``object.__setattr__``, which made building a Fetch or a Fetch answer three
times as dear, and every write builds four of them (docs/benchmarks.md,
"Write-path CPU"). Messages hash and compare by value, as frozen ones did.
A response is an ordinary message addressed back to the
requester; requests that expect one carry a ``request_id`` the response
echoes, so a late or duplicated response is recognised and ignored.

Epoch rules common to every message (KIP-595 "common epoch handling"): a
message from a higher epoch moves the receiver into that epoch before
anything else; a request from a lower epoch is answered with
``FENCED_LEADER_EPOCH`` and the receiver's epoch; a response from a lower
epoch is ignored. A pre-vote is the one exception: its epoch is the one its
sender *would* stand in, so it never moves the receiver's epoch (KIP-996).
The core applies these rules in one place, ``QuorumNode._epoch_prologue``.

Every message is also untrusted input: ``quorum/wire`` checks each field's
type and range before a message is built, so the core only sees messages
that are well formed (not necessarily truthful).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ._types import Entry, OffsetAndEpoch, SnapshotId


class ErrorCode(enum.IntEnum):
    """Error codes, numbered as in Kafka where Kafka has the same error, so
    that a Kafka-literate reader (and a trace) reads them the same way."""

    # The node handled the request but could not answer it (its answer is
    # over the frame limit): the request's outcome is unknown.
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    NOT_LEADER = 6  # NOT_LEADER_OR_FOLLOWER: the response names the leader if known
    BROKER_NOT_AVAILABLE = 8
    CLUSTER_AUTHORIZATION_FAILED = 31  # the sender's principal may not do this (issue 16)
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74  # the requester's epoch is older than ours
    # A Fetch marked ``observer`` (a broker, which never votes) names the id
    # of a voter: two processes share a node id (KIP-631: one id space for
    # brokers and controllers). Kafka's code for a sender that is not the
    # voter the recipient expects.
    INCONSISTENT_VOTER_SET = 94
    UNKNOWN_LEADER_EPOCH = 75  # the requester's epoch is newer than ours
    STALE_BROKER_EPOCH = 77
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    DUPLICATE_BROKER_REGISTRATION = 101
    INCONSISTENT_CLUSTER_ID = 104
    # KIP-853 voter changes (AddRaftVoter / RemoveRaftVoter).
    DUPLICATE_VOTER = 126  # the node is already a voter
    VOTER_NOT_FOUND = 127  # no voter with that id (and directory id)
    # pykraft's own, where Kafka answers REQUEST_TIMED_OUT for both: an
    # operator must tell "retry in a moment" from "the new voter lags".
    VOTER_CHANGE_IN_PROGRESS = 1000  # another change is not yet committed, or the leader has no commit in its epoch yet
    VOTER_NOT_CAUGHT_UP = 1001  # the new voter has not fetched lately or its log ends below the high watermark
    # Kafka answers UNSUPPORTED_VERSION while kraft.version is 0; pykraft
    # says what to do: upgrade the static voter set first (upgrade-voters).
    VOTERS_STATIC = 1002
    # Refused to auto-join only (an AddVoter marked ``auto_join``): an
    # operator removed this disk and has not added it back (issue 17). The
    # node takes it as "removed" for good; an operator's own add-voter of
    # the disk is not refused, and clears the mark.
    VOTER_REMOVED = 1003


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class VoteRequest:
    """Vote or pre-vote (KIP-996 ``PreVote``).

    ``epoch`` is the epoch the candidate stands in: for a real vote, its new
    epoch; for a pre-vote, the epoch it *would* stand in (its current epoch
    + 1). A pre-vote changes nothing at the receiver and persists nothing.
    ``last_epoch``/``end_offset`` describe the candidate's log.
    ``voter_directory_id``: the directory id the candidate's voter set
    names for the receiver (KIP-853 VoterDirectoryId); None when unknown.
    """

    src: int
    dst: int
    epoch: int
    last_epoch: int
    end_offset: int
    pre_vote: bool
    voter_directory_id: str | None = None


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class VoteResponse:
    """The answer to a vote or pre-vote. ``leader_id`` names a leader of
    the responder's epoch if it knows one: a candidate that hears of one
    follows it instead of standing on (KIP-595); a pre-vote answer names
    one only if the responder leads or follows it, i.e. knows it alive
    (KIP-996)."""

    src: int
    dst: int
    epoch: int  # the responder's epoch after handling the request
    granted: bool
    pre_vote: bool  # echoed, so a pre-vote grant never counts as a vote
    leader_id: int | None = None
    error: ErrorCode = ErrorCode.NONE


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class BeginQuorumEpochRequest:
    """The leader (``src``) announces its epoch to a voter, which follows
    it at once instead of waiting for its own fetch timeout to find it
    (KIP-595). Resent to voters that have not fetched lately."""

    src: int
    dst: int
    epoch: int


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class BeginQuorumEpochResponse:
    """Carries only the responder's epoch: the leader learns that a voter
    follows it from the voter's next Fetch, not from this."""

    src: int
    dst: int
    epoch: int
    error: ErrorCode = ErrorCode.NONE


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class EndQuorumEpochRequest:
    """A resigning leader hands over: voters in ``preferred_successors``
    (most up to date first) stand after a delay growing with their position."""

    src: int
    dst: int
    epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class EndQuorumEpochResponse:
    """Acknowledges an EndQuorumEpoch, so the resigned leader stops
    resending it to this voter."""

    src: int
    dst: int
    epoch: int
    error: ErrorCode = ErrorCode.NONE


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class FetchRequest:
    """Pull replication. ``fetch_offset`` is the fetcher's durable log end
    offset: sending it acknowledges every record below it (persist before
    acknowledging). ``read_token`` echoes the token of the last response the
    fetcher received from this leader in this epoch (ReadIndex proof).
    ``extension`` carries application data (a broker's heartbeat)."""

    src: int
    dst: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    request_id: int
    read_token: int = 0
    extension: Any = None
    # The fetcher's directory id (KIP-853 ReplicaDirectoryId): with dynamic
    # voters, the leader counts a voter's acknowledgement only from the
    # disk it was added with. None: not known (a static voter set).
    directory_id: str | None = None
    # The fetcher repairs a damaged log (docs/storage.md, "Repair"): it
    # neither votes nor stands until done. Lets the leader show which
    # voters repair (DescribeQuorum version 3). Sent on the wire only when
    # true: absent, as from a peer that predates it, means not repairing.
    repairing: bool = False
    # The fetcher is an observer for good (a broker, Kafka's
    # process.roles=broker): it never votes, so a node that holds its id
    # as a voter's refuses it (INCONSISTENT_VOTER_SET) rather than take its
    # fetch offset for that voter's acknowledgement. Not in the wire body:
    # a broker says it once per connection, in its Hello (role
    # "observer"), and the receiving transport sets it on every Fetch of
    # that connection, so that a broker and a controller of different
    # releases still read each other's Fetches.
    observer: bool = False


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class FetchResponse:
    """The leader's answer to a Fetch: records after ``fetch_offset``, or
    where the fetcher's log diverges, or the snapshot it must load; and the
    high watermark, which the fetcher adopts only up to its own log end.
    ``read_token`` is fresh in every response (ReadIndex, Raft thesis
    §6.4). An error names the leader the responder knows, if any."""

    src: int
    dst: int
    epoch: int
    request_id: int
    leader_id: int | None
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = 0
    log_start_offset: int = 0
    records: tuple[Entry, ...] = ()
    # Set when the fetcher's log diverges: truncate to at most this end
    # offset of this epoch, then fetch again.
    diverging: OffsetAndEpoch | None = None
    # Set when the fetch offset is behind the log start: fetch this snapshot.
    snapshot_id: SnapshotId | None = None
    read_token: int = 0
    extension: Any = None
    # With an error that names a leader (NOT_LEADER): where that leader
    # listens, "HOST:PORT", from the voter set the responder holds (KIP-853
    # NodeEndpoints). A fetcher that knows only the responder's address (a
    # broker given one controller) reaches the leader through it. Sent on
    # the wire only when set.
    leader_endpoint: str | None = None


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class FetchSnapshotRequest:
    """KIP-630: the next chunk of ``snapshot_id`` from byte ``position``.
    Sent by a follower that a Fetch response told to load the snapshot."""

    src: int
    dst: int
    epoch: int
    snapshot_id: SnapshotId
    position: int
    request_id: int


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class FetchSnapshotResponse:
    """One chunk of a snapshot, with its total ``size`` so the follower
    knows when it has all of it. ``SNAPSHOT_NOT_FOUND`` means the leader
    took a newer one: the follower starts over with a Fetch."""

    src: int
    dst: int
    epoch: int
    request_id: int
    leader_id: int | None
    error: ErrorCode = ErrorCode.NONE
    snapshot_id: SnapshotId | None = None
    position: int = 0
    size: int = 0
    chunk: bytes = b""


Message = (
    VoteRequest
    | VoteResponse
    | BeginQuorumEpochRequest
    | BeginQuorumEpochResponse
    | EndQuorumEpochRequest
    | EndQuorumEpochResponse
    | FetchRequest
    | FetchResponse
    | FetchSnapshotRequest
    | FetchSnapshotResponse
)

MESSAGE_TYPES: tuple[type, ...] = (
    VoteRequest,
    VoteResponse,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)

_SHORT_NAMES = {
    VoteRequest: "Vote",
    VoteResponse: "VoteResp",
    BeginQuorumEpochRequest: "BeginEpoch",
    BeginQuorumEpochResponse: "BeginEpochResp",
    EndQuorumEpochRequest: "EndEpoch",
    EndQuorumEpochResponse: "EndEpochResp",
    FetchRequest: "Fetch",
    FetchResponse: "FetchResp",
    FetchSnapshotRequest: "FetchSnap",
    FetchSnapshotResponse: "FetchSnapResp",
}


def message_type_name(message: Message) -> str:
    """The short type name used in traces ("Fetch", "VoteResp", ...)."""
    return _SHORT_NAMES[type(message)]


def _request_number(request_id: int) -> str:
    """A Fetch request id is ``session << 32 | sequence`` (see QuorumNode):
    the first process of a node shows its plain sequence, a restarted one
    ``session:sequence``."""
    session, sequence = request_id >> 32, request_id & 0xFFFF_FFFF
    return f"{session}:{sequence}" if session else str(sequence)


def describe_message(message: Message) -> str:
    """One deterministic line describing ``message``, for traces and logs."""
    name = message_type_name(message)
    head = f"{message.src}->{message.dst} {name} e{message.epoch}"
    match message:
        case VoteRequest():
            kind = "pre" if message.pre_vote else "vote"
            voter = "" if message.voter_directory_id is None else f" voter-dir={message.voter_directory_id[:8]}"
            return f"{head} {kind} last=e{message.last_epoch}@{message.end_offset}{voter}"
        case VoteResponse():
            kind = "pre" if message.pre_vote else "vote"
            verdict = "granted" if message.granted else "rejected"
            return f"{head} {kind} {verdict} leader={message.leader_id}{_error(message.error)}"
        case BeginQuorumEpochRequest() | BeginQuorumEpochResponse() | EndQuorumEpochResponse():
            return head + _error(getattr(message, "error", ErrorCode.NONE))
        case EndQuorumEpochRequest():
            return f"{head} successors={list(message.preferred_successors)}"
        case FetchRequest():
            return (
                f"{head} #{_request_number(message.request_id)} offset={message.fetch_offset}"
                f" last=e{message.last_fetched_epoch} token={message.read_token}"
                + ("" if message.directory_id is None else f" dir={message.directory_id[:8]}")
                + (" repairing" if message.repairing else "")
            )
        case FetchResponse():
            parts = [f"{head} #{_request_number(message.request_id)}"]
            if message.error:
                parts.append(f"{message.error.name} leader={message.leader_id}")
            else:
                if message.records:
                    first, last = message.records[0].offset, message.records[-1].offset
                    parts.append(f"records={first}..{last}")
                if message.diverging is not None:
                    parts.append(f"diverging=e{message.diverging.epoch}@{message.diverging.offset}")
                if message.snapshot_id is not None:
                    parts.append(f"snapshot={message.snapshot_id.end_offset}")
                parts.append(f"hw={message.high_watermark} token={message.read_token}")
            return " ".join(parts)
        case FetchSnapshotRequest():
            return f"{head} #{_request_number(message.request_id)} snapshot={message.snapshot_id.end_offset} pos={message.position}"
        case FetchSnapshotResponse():
            if message.error:
                return f"{head} #{_request_number(message.request_id)} {message.error.name}"
            return f"{head} #{_request_number(message.request_id)} pos={message.position} +{len(message.chunk)}/{message.size}"
    raise TypeError(f"not a quorum message: {message!r}")


def _error(code: ErrorCode) -> str:
    # Nothing for NONE, so that the common case stays short in traces.
    return f" {code.name}" if code else ""
