"""Role-scoped state of the core: one object per role, made on entering it.

A ``QuorumNode`` holds exactly one of these in ``_state`` (as Kafka's
``EpochState`` family does): ``_enter_role`` builds the new role's object and
drops the old one, so no field can outlive the role it belongs to. A leader's
replica table cannot leak into its next term as a follower; a candidate's
tally cannot count a grant from an earlier round; a fetch in flight cannot be
matched against a response after the node has changed epoch (every epoch
change is a role change, see ``_node.py``).

Which role owns which timer:

=============  =========================================================
role           timers (absolute tick numbers, compared with ``>=``)
=============  =========================================================
Unattached     ``election_deadline`` (voters); the fetcher's request
               deadline and retry tick (observers looking for a leader)
Prospective,   ``election_deadline``: the pre-vote or vote round's timeout,
Candidate      or the end of the candidate's backoff
Follower       ``fetch_deadline`` (KIP-595 fetch timeout) and the
               fetcher's request deadline and retry tick
Leader         ``check_quorum_deadline`` (KAFKA-15489),
               ``begin_epoch_deadline``, each parked fetch's expiry
Resigned       ``election_deadline``, ``end_epoch_deadline`` (resend of
               EndQuorumEpoch until acknowledged)
=============  =========================================================

The mutable objects are slotted dataclasses; the records a role only reads
(a fetch in flight, a parked request) are frozen.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ._messages import FetchRequest
from ._quorum_math import check_quorum_met
from ._types import SnapshotId


# ---------------------------------------------------------------------------
# Records shared by the roles
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one replica (voter or observer), learned only
    from that replica's own Fetch requests (KIP-595 is pull-based: the
    leader never pushes, so every field here is an acknowledgement)."""

    node_id: int
    is_voter: bool
    # The replica's fetch offset: it sends it only once the records below it
    # are durable (it is the acknowledgement, _output.py), so the leader may
    # count it toward the high watermark. None until its first valid Fetch.
    end_offset: int | None = None
    last_fetch_tick: int | None = None
    # Highest read token it echoed: proves a Fetch left it after the leader
    # handed that token out (ReadIndex, Raft thesis §6.4).
    acked_read_token: int = 0
    # The high watermark in the last Fetch response sent to it: an observer
    # is answered at once whenever the high watermark moved past this.
    high_watermark_sent: int = -1
    # The process (fetch session) of its latest Fetch: a new one is a
    # restart, which knows no high watermark yet.
    fetch_session: int | None = None
    # The directory id its latest Fetch carried (KIP-853): ``is_voter``
    # holds only while it is the one the voter set names.
    directory_id: str | None = None
    # Its latest Fetch said it repairs a damaged log (it votes for nobody
    # until done): shown by DescribeQuorum, never used to decide anything.
    repairing: bool = False


@dataclass(frozen=True, slots=True)
class PendingRead:
    """A ReadIndex read waiting for a majority to prove this node still
    leads (Raft thesis §6.4)."""

    read_id: Any
    # A Fetch echoing a token >= this one left its voter after the read
    # arrived, so it proves leadership at a time after the read began.
    token_needed: int


@dataclass(slots=True)
class ParkedFetch:
    """A Fetch the leader holds until it has news or ``expire_tick``
    (KIP-595 long poll; Kafka's ``fetch.max.wait.ms``). Never changed once
    built; not ``frozen=True``, whose per-field ``object.__setattr__``
    costs about 0.5 µs on every Fetch served (as ``FetchInFlight`` on every
    Fetch sent)."""

    request: FetchRequest
    expire_tick: int
    # The fetch-extension hook's answer (a broker heartbeat's result),
    # computed when the request arrived and sent with the eventual answer.
    response_extension: Any


@dataclass(slots=True)
class FetchInFlight:
    """The one Fetch or FetchSnapshot request a fetcher has outstanding.

    A response is accepted only if it answers this request, from this
    target: anything else is a late or duplicated answer to a request the
    node has already given up on, and must not move its log or timers.
    Never changed once built (a new request gets a new one)."""

    request_id: int
    target: int
    # Past this tick the request is presumed lost and another is sent.
    deadline_tick: int


@dataclass(slots=True)
class SnapshotDownload:
    """A KIP-630 snapshot being fetched from the leader, chunk by chunk."""

    snapshot_id: SnapshotId
    buffer: bytearray


@dataclass(slots=True)
class PendingPersist:
    """An output whose persistence the driver has not yet reported durable:
    once it is, the log is durable up to ``end_offset``. The end is clamped
    when the log is truncated or reset below it, so that the leader never
    counts records it has since dropped (Raft thesis §10.2.1)."""

    persist_seq: int
    end_offset: int


# ---------------------------------------------------------------------------
# One object per role
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class FetcherState:
    """What a node that pulls records keeps (KIP-595): a follower fetching
    from its leader, or an observer asking the voters in turn for one."""

    # A fetcher sends as soon as this tick comes and nothing is in flight;
    # pushed back by ``retry_backoff_ms`` after an error or a refusal.
    next_fetch_tick: int
    # The token of the last response from the leader, echoed in the next
    # Fetch; see ``ReplicaState.acked_read_token``.
    read_token: int = 0
    in_flight: FetchInFlight | None = None
    download: SnapshotDownload | None = None
    # The high watermark the last answer from the leader carried, as sent
    # (ours is bounded by our log); None after an answer that took no
    # records (an error, a divergence, a snapshot) or before any. Whether
    # our log holds everything the leader had committed when it answered
    # (a broker's freshness proof) is ``log end >= this``.
    answered_high_watermark: int | None = None

    def accept(self, request_id: int, src: int) -> bool:
        """Is a response with ``request_id`` from ``src`` the answer to the
        request in flight? Clears it if so. Any other answer is late or
        duplicated and must not move the log: its records were chosen for a
        position the fetcher may no longer be at."""
        in_flight = self.in_flight
        if in_flight is None or in_flight.request_id != request_id or in_flight.target != src:
            return False
        self.in_flight = None
        return True


@dataclass(slots=True)
class UnattachedState:
    """Unattached: an epoch without a known leader (KIP-595).

    A voter waits out ``election_deadline`` and then stands; an observer
    cannot stand, so it has a ``fetcher`` that asks the voters in turn
    until one names the leader."""

    election_deadline: int
    fetcher: FetcherState | None = None


@dataclass(slots=True)
class FollowerState:
    """Follower: knows the leader of its epoch and fetches from it."""

    fetcher: FetcherState
    # KIP-595 fetch timeout: no successful Fetch from the leader by this
    # tick and a voter stands (an observer goes looking for a new leader).
    fetch_deadline: int
    # The tick of the last successful answer from the leader (a Fetch or
    # FetchSnapshot answer); None until the first, and again once the
    # transport reports the leader's process gone. Two rules read it:
    # KIP-996 refuses pre-votes once it is set (the leader is alive, and a
    # node healed from a partition must not depose it), and the leader
    # lease (Raft thesis §4.2.3) ignores every Vote and pre-vote while it
    # is recent (``heard_from_leader_within``).
    leader_fetch_tick: int | None = None
    # The transport reported the leader's connection reset: stand after one
    # random wait instead of the whole fetch timeout (fast failover).
    leader_unreachable: bool = False

    @property
    def fetched_from_leader(self) -> bool:
        """KIP-996: has the leader answered a Fetch of ours since we began
        following it (and not been reported gone since)?"""
        return self.leader_fetch_tick is not None

    def heard_from_leader_within(self, now: int, window_ticks: int) -> bool:
        """Did the leader answer us less than ``window_ticks`` ago?"""
        return self.leader_fetch_tick is not None and now - self.leader_fetch_tick < window_ticks


@dataclass(slots=True)
class CandidacyState:
    """Prospective (KIP-996 pre-vote) or Candidate: one election round.

    Named so as not to collide with ``_types.ElectionState``, the durable
    epoch/vote record. Grants and refusals are counted per round: a new
    round is a new object, so a late answer to an earlier round is never
    counted toward this one (and answers from another epoch are dropped by
    the epoch prologue before they reach the tally)."""

    election_deadline: int
    granted: set[int]
    rejected: set[int] = field(default_factory=set)
    # A candidate that lost or timed out waits a random backoff before the
    # next round (KIP-595 election backoff), so that split votes resolve.
    backing_off: bool = False
    # A pre-vote round begun because the transport reported our leader's
    # process gone (``QuorumNode.peer_unreachable``): the other survivors
    # stand at about the same time, and such a round grants a pre-vote only
    # to a node that outranks it (``QuorumNode._on_pre_vote_request``).
    leader_crashed: bool = False


@dataclass(slots=True)
class LeaderState:
    """Leader of ``epoch``: the replica table and everything that proves,
    term after term, that this node still leads."""

    # Offset of the LEADER_CHANGE record this leader wrote first: the high
    # watermark may only pass it (Raft thesis §3.6.2).
    epoch_start_offset: int
    replicas: dict[int, ReplicaState]
    # KAFKA-15489: resign unless a majority of voters fetches by this tick.
    check_quorum_deadline: int
    # Resend BeginQuorumEpoch to voters that have not fetched lately.
    begin_epoch_deadline: int
    # Voters heard from since the check-quorum window last restarted.
    fetched_voters: set[int] = field(default_factory=set)
    parked: dict[int, ParkedFetch] = field(default_factory=dict)
    # No parked fetch expires before this tick (``QuorumNode.next_timer_tick``
    # keeps it): recomputed over ``parked`` only once it has passed, so the
    # prediction costs O(1) per input however many brokers are parked. A
    # fetch parked later expires later (its expiry is the tick it was parked
    # plus the same long-poll wait), so parking never lowers it.
    parked_expiry_floor: int = 0
    # Observers whose parked Fetch is due an answer since the high
    # watermark last moved, in id order (answered a bounded group per step).
    observers_due: deque[int] = field(default_factory=deque)
    # Tokens restart with each leadership: echoes from another term's
    # tokens can never reach this object.
    next_read_token: int = 1
    pending_reads: list[PendingRead] = field(default_factory=list)

    def take_read_token(self) -> int:
        """A fresh token for the next Fetch response: an echo of it proves a
        Fetch sent after this response left (Raft thesis §6.4)."""
        token = self.next_read_token
        self.next_read_token += 1
        return token

    def reads_wait_on(self, replica: ReplicaState) -> bool:
        """Whether a pending read still needs this voter's next round trip
        (then its Fetch is answered at once instead of parked)."""
        if not self.pending_reads:
            return False  # the common case, on every Fetch: no generator
        return replica.is_voter and any(replica.acked_read_token < read.token_needed for read in self.pending_reads)

    def record_voter_fetch(self, voter: int, *, leader_is_voter: bool, majority_size: int, next_deadline: int) -> None:
        """KAFKA-15489: a check-quorum window ends as soon as a majority
        (the leader included) has fetched in it; the deadline then moves to
        ``next_deadline``, a whole check-quorum period ahead."""
        self.fetched_voters.add(voter)
        if check_quorum_met(len(self.fetched_voters), leader_is_voter, majority_size):
            self.fetched_voters.clear()
            self.check_quorum_deadline = next_deadline

    def preferred_successors(self) -> tuple[int, ...]:
        """Voters ranked for EndQuorumEpoch (KIP-595): the most up to date
        first, since only a voter whose log is at least as up to date as a
        majority's can win (Raft thesis §3.6.1); ties by node id, so the
        ranking depends on nothing but the acknowledgements."""
        ranked = sorted(
            (replica for replica in self.replicas.values() if replica.is_voter),
            key=lambda replica: (-(replica.end_offset if replica.end_offset is not None else -1), replica.node_id),
        )
        return tuple(replica.node_id for replica in ranked)


@dataclass(slots=True)
class ResignedState:
    """Resigned: led this epoch and is handing over (KIP-595
    EndQuorumEpoch). It answers no Fetch and serves no read: only a later
    epoch can make it leader again (one leader per epoch, Raft thesis §3.4),
    and a restart keeps it here, since it may have lost unflushed records of
    the epoch it led (``QuorumNode._initialize``)."""

    election_deadline: int
    end_epoch_deadline: int
    # Voters ranked by their acknowledged log end: the most up to date
    # stands first. Empty after a restart (the table was lost with memory).
    successors: tuple[int, ...] = ()
    end_epoch_acked: set[int] = field(default_factory=set)


RoleState = UnattachedState | FollowerState | CandidacyState | LeaderState | ResignedState
