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
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from ._config import QuorumConfig
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
)
from ._output import Output, ReadFailed, ReadReady, Role, RoleChange
from ._roles import Trigger, describe_transition, transition_allowed
from ._types import ElectionState, Entry, OffsetAndEpoch, RecordKind, SnapshotId


class QuorumError(Exception):
    """Base class of the errors the core raises."""


class NotLeaderError(QuorumError):
    """A local action needs the leader, and this node is not it (caller's
    fault, retriable elsewhere). ``leader_id`` is a hint, possibly None."""

    def __init__(self, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"not the leader (leader hint {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class QuorumInvariantError(QuorumError):
    """A safety invariant would be broken. Never caught inside the core: the
    node must stop rather than continue with a corrupt view."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: SnapshotId
    data: bytes


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one replica (voter or observer)."""

    node_id: int
    is_voter: bool
    end_offset: int | None = None  # acknowledged (durable) log end offset
    last_fetch_tick: int | None = None
    acked_read_token: int = 0
    high_watermark_sent: int = -1  # in the last Fetch response to it
    fetch_session: int | None = None  # of its latest Fetch (its process)


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    node_id: int
    log_end_offset: int | None
    last_fetch_ms: int | None  # logical ms since this node started


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


@dataclass(slots=True)
class _PendingRead:
    read_id: Any
    token_needed: int  # a fetch echoing a token >= this was sent after the read arrived


@dataclass(slots=True)
class _ParkedFetch:
    request: FetchRequest
    expire_tick: int
    response_extension: Any


@dataclass(slots=True)
class _SnapshotDownload:
    snapshot_id: SnapshotId
    buffer: bytearray


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
    """

    fetch_extension_handler: FetchExtensionHandler | None = None
    fetch_extension_provider: Callable[[], Any] | None = None
    fetch_extension_consumer: Callable[[Any], None] | None = None


_NO_HOOKS = CoreHooks()


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
        # (persist seq, log end offset it makes durable); clamped on truncation.
        self._unpersisted: deque[list[int]] = deque()
        self._durable_end = self._log.end_offset
        # The high watermark: every record below it is committed. Per-node
        # monotonic. After a restart it is only known up to the snapshot.
        self._hw = self._log.start_offset if snapshot else 0
        self._hw = max(self._hw, snapshot.snapshot_id.end_offset if snapshot else 0)

        # election state (durable) and role (derived)
        stored = election_state or ElectionState(epoch=0)
        self._epoch = stored.epoch
        self._voted_for = stored.voted_for
        self._leader_id = stored.leader_id
        self._persisted_election = stored
        self._role = Role.UNATTACHED
        # True until _initialize has picked the role recovered from disk: the
        # transition table (_roles.py) knows that first change as a start.
        self._starting = True

        # timers, in ticks
        self._election_deadline = 0
        self._fetch_deadline = 0
        self._backing_off = False
        self._election_retries = 0

        # follower / observer
        # Fetch request ids are ``fetch_session << 32 | sequence``. The
        # session tells one process of a node from the next: a restarted
        # node's sequence starts again at 1, and without it the leader would
        # take every fetch of the new process for a network duplicate of the
        # old process's parked one (see _on_fetch). The runtime draws it at
        # random per process start, the simulator uses the incarnation.
        if not 0 <= fetch_session < 1 << 31:
            raise ValueError("fetch_session must be in [0, 2**31)")
        self._fetch_request_id = fetch_session << 32
        self._fetch_in_flight: tuple[int, int, int] | None = None  # (request id, target, deadline)
        self._next_fetch_tick = 0
        self._fetched_from_leader = False
        self._leader_unreachable = False
        self._read_token = 0
        self._download: _SnapshotDownload | None = None
        self._bootstrap_index = 0

        # prospective / candidate
        self._granted: set[int] = set()
        self._rejected: set[int] = set()

        # leader
        self._replicas: dict[int, ReplicaState] = {}
        self._epoch_start_offset = 0
        self._check_quorum_deadline = 0
        self._fetched_voters: set[int] = set()
        self._parked: dict[int, _ParkedFetch] = {}
        self._next_read_token = 1
        self._pending_reads: list[_PendingRead] = []
        self._begin_epoch_deadline = 0

        # resigned
        self._end_epoch_acked: set[int] = set()
        self._end_epoch_deadline = 0
        self._successors: tuple[int, ...] = ()

        self._initialize(stored)

    # =====================================================================
    # Queries
    # =====================================================================

    @property
    def role(self) -> Role:
        return self._role

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def leader_id(self) -> int | None:
        """The leader this node knows of; None when unknown, and for a
        resigned leader (which still records itself, so that it restarts
        Resigned, but leads no more)."""
        return None if self._role is Role.RESIGNED else self._leader_id

    @property
    def voted_for(self) -> int | None:
        return self._voted_for

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def log(self) -> MemoryLog:
        """The in-memory log. Read only: mutate it through inputs."""
        return self._log

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    @property
    def current_tick(self) -> int:
        return self._tick

    @property
    def is_leader(self) -> bool:
        return self._role is Role.LEADER

    @property
    def epoch_start_offset(self) -> int:
        """Offset of this leader's LEADER_CHANGE record (leaders only)."""
        return self._epoch_start_offset

    @property
    def leader_has_committed_own_epoch(self) -> bool:
        """True when this node leads and a record of its own epoch is
        committed: only then is its high watermark the cluster's."""
        return self._role is Role.LEADER and self._hw > self._epoch_start_offset

    def describe(self) -> QuorumDescription:
        """DescribeQuorum, answered from this node's own view."""
        voters: list[ReplicaDescription] = []
        observers: list[ReplicaDescription] = []
        for node_id in sorted(set(self.config.voters) | set(self._replicas)):
            if self._role is Role.LEADER and node_id == self.node_id:
                description = ReplicaDescription(node_id, self._log.end_offset, self._tick * self.config.tick_ms)
            elif self._role is Role.LEADER and node_id in self._replicas:
                replica = self._replicas[node_id]
                last_ms = None if replica.last_fetch_tick is None else replica.last_fetch_tick * self.config.tick_ms
                description = ReplicaDescription(node_id, replica.end_offset, last_ms)
            elif node_id == self.node_id:
                description = ReplicaDescription(node_id, self._log.end_offset, None)
            else:
                description = ReplicaDescription(node_id, None, None)
            (voters if node_id in self.config.voter_set else observers).append(description)
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
        )

    # =====================================================================
    # Inputs
    # =====================================================================

    def tick(self) -> Output:
        """Advance logical time by one tick and fire any due timer."""
        self._tick += 1
        now = self._tick
        role = self._role
        if role is Role.LEADER:
            self._tick_leader(now)
        elif role is Role.FOLLOWER:
            self._tick_follower(now)
        elif role is Role.UNATTACHED:
            if self.config.is_voter and now >= self._election_deadline:
                self._stand("election timeout", Trigger.ELECTION_TIMEOUT)
            elif not self.config.is_voter:
                if self._fetch_in_flight is not None and now >= self._fetch_in_flight[2]:
                    self._fetch_in_flight = None
                    self._bootstrap_index += 1
                self._maybe_send_fetch(now)
        elif role is Role.PROSPECTIVE:
            if now >= self._election_deadline:
                self._lose_pre_vote("pre-vote timed out")
        elif role is Role.CANDIDATE:
            if now >= self._election_deadline:
                if self._backing_off:
                    self._stand("election backoff over", Trigger.ELECTION_TIMEOUT)
                else:
                    self._start_backoff()
        elif role is Role.RESIGNED:
            if now >= self._election_deadline:
                self._stand("resigned leader's election timeout", Trigger.ELECTION_TIMEOUT)
            elif now >= self._end_epoch_deadline:
                self._send_end_quorum_epoch()
        return self._flush()

    def step(self, message: Message) -> Output:
        """Handle a message from a peer. Messages not addressed to this node
        are a driver bug (``ValueError``)."""
        if message.dst != self.node_id:
            raise ValueError(f"message for node {message.dst} delivered to node {self.node_id}")
        match message:
            case FetchRequest():
                self._on_fetch_request(message)
            case FetchResponse():
                self._on_fetch_response(message)
            case VoteRequest():
                self._on_vote_request(message)
            case VoteResponse():
                self._on_vote_response(message)
            case BeginQuorumEpochRequest():
                self._on_begin_quorum_epoch(message)
            case EndQuorumEpochRequest():
                self._on_end_quorum_epoch(message)
            case FetchSnapshotRequest():
                self._on_fetch_snapshot_request(message)
            case FetchSnapshotResponse():
                self._on_fetch_snapshot_response(message)
            case BeginQuorumEpochResponse() | EndQuorumEpochResponse():
                self._on_ack_response(message)
            case _:
                raise TypeError(f"not a quorum message: {message!r}")
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
            raise NotLeaderError(self._leader_id if self._role is not Role.RESIGNED else None, self._epoch)
        first = self._log.end_offset
        if payloads:
            self._append_as_leader(RecordKind.DATA, payloads)
        return first, self._flush()

    def read_index(self, read_id: Any) -> Output:
        """Start a linearizable read (ReadIndex, Raft thesis §6.4).

        The answer arrives as ``ReadReady(read_id, offset)`` in this or a
        later output, once a majority of voters have sent Fetches provably
        after this call; or as ``ReadFailed`` if leadership is lost first.

        Raises ``NotLeaderError`` when this node is not the leader.
        """
        if self._role is not Role.LEADER:
            raise NotLeaderError(self._leader_id if self._role is not Role.RESIGNED else None, self._epoch)
        self._pending_reads.append(_PendingRead(read_id, self._next_read_token))
        # Fetches parked now were sent before the read arrived and prove
        # nothing about it; answer them so that fresh ones come back.
        self._complete_parked_fetches()
        self._check_pending_reads()
        return self._flush()

    def resign(self) -> Output:
        """Graceful resignation (shutdown): hand leadership over with
        EndQuorumEpoch. A no-op unless this node leads."""
        if self._role is Role.LEADER:
            self._become_resigned("resigned on request", Trigger.RESIGN_REQUESTED)
        return self._flush()

    def persisted(self, persist_seq: int) -> Output:
        """The driver made output ``persist_seq`` (and all before it) durable."""
        while self._unpersisted and self._unpersisted[0][0] <= persist_seq:
            _, end = self._unpersisted.popleft()
            self._durable_end = end
        if self._role is Role.LEADER:
            self._maybe_advance_high_watermark()
        return self._flush()

    def peer_unreachable(self, peer: int) -> Output:
        """The transport could not reach ``peer`` (connection refused or
        reset). A follower whose leader is gone stands soon instead of
        waiting out the whole fetch timeout."""
        if self._fetch_in_flight is not None and self._fetch_in_flight[1] == peer:
            self._fetch_in_flight = None
            self._next_fetch_tick = self._tick + self.config.ticks(self.config.retry_backoff_ms)
        if (
            self.config.fast_failover
            and self.config.is_voter
            and self._role is Role.FOLLOWER
            and peer == self._leader_id
            and not self._leader_unreachable
        ):
            # One random wait per loss of the leader (not one per report:
            # the minimum of many draws would bunch the followers together).
            self._leader_unreachable = True
            soon = self._tick + self._rng.randrange(self.config.ticks(self.config.election_timeout_ms))
            self._fetch_deadline = min(self._fetch_deadline, soon)
            # Our leader's process is gone: grant pre-votes again (KIP-996
            # refuses them only while the leader is known to be alive).
            self._fetched_from_leader = False
        return self._flush()

    def snapshot_taken(self, snapshot_id: SnapshotId, data: bytes) -> Output:
        """The state machine made a snapshot of every record below
        ``snapshot_id.end_offset``. Records well behind it are dropped
        (``config.snapshot_retained_records`` are kept for slow followers).

        Raises ``ValueError`` if the snapshot is not of committed records or
        its epoch does not match the log.
        """
        end = snapshot_id.end_offset
        if end > self._hw:
            raise ValueError(f"snapshot end {end} is beyond the high watermark {self._hw}")
        if self._snapshot is not None and end <= self._snapshot.snapshot_id.end_offset:
            return self._flush()
        if self._log.epoch_at(end - 1) not in (snapshot_id.epoch, None) and end > 0:
            raise ValueError(f"snapshot epoch {snapshot_id.epoch} does not match the log at {end - 1}")
        self._snapshot = Snapshot(snapshot_id, data)
        self._out.snapshot = (snapshot_id, data)
        keep_from = end - self.config.snapshot_retained_records
        if keep_from > self._log.start_offset:
            epoch_before = self._log.epoch_at(keep_from - 1)
            assert epoch_before is not None
            self._log.delete_before(keep_from, epoch_before)
            self._out.delete_before = keep_from
        return self._flush()

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
            # The log saw a later epoch than the election state recorded.
            self._become_unattached(
                self._log.last_epoch, reason="log is ahead of the election state", trigger=Trigger.START
            )
        elif stored.leader_id == self.node_id and self.config.is_voter:
            # A leader that restarts must not lead or vote again in the same
            # epoch: it may have lost unflushed records of that epoch.
            self._enter_role(Role.RESIGNED, Trigger.START)
            self._end_epoch_acked = set()
            self._reset_election_timer()
            self._end_epoch_deadline = self._tick
            self._event("restarted after leading")
        elif stored.leader_id is not None and stored.leader_id != self.node_id:
            self._become_follower(self._epoch, stored.leader_id, reason="restarted", trigger=Trigger.START)
        else:
            self._become_unattached(self._epoch, voted_for=stored.voted_for, reason="started", trigger=Trigger.START)
        self._starting = False
        # Anything sent during construction is discarded by the first
        # _flush() only if the driver ignores it; drivers call
        # ``initial_output()`` to collect it.

    def initial_output(self) -> Output:
        """What the node produced while starting (messages, events)."""
        return self._flush()

    def _set_election_state(self, epoch: int, voted_for: int | None, leader_id: int | None) -> None:
        self._epoch, self._voted_for, self._leader_id = epoch, voted_for, leader_id
        state = ElectionState(epoch=epoch, voted_for=voted_for, leader_id=leader_id)
        if state != self._persisted_election:
            self._persisted_election = state
            self._out.election_state = state

    def _enter_role(self, role: Role, trigger: Trigger) -> None:
        """Every change of role goes through here: checked against the
        transition table (``_roles.py``, which also draws the diagram in
        docs/raft.md), then the old role's state is undone. Raises
        ``QuorumInvariantError`` for a change the table does not have."""
        source = None if self._starting else self._role
        if not transition_allowed(source, role, trigger):
            raise QuorumInvariantError(
                f"node {self.node_id}: no role transition {describe_transition(source, role, trigger)} (epoch {self._epoch})"
            )
        self._leave_role()
        self._role = role

    def _leave_role(self) -> None:
        """Undo role-specific state before any transition."""
        if self._role is Role.LEADER:
            self._fail_pending_reads("leadership lost")
            for replica_id in sorted(self._parked):
                self._send_fetch_error(self._parked[replica_id].request, ErrorCode.NOT_LEADER, leader_hint=None)
            self._parked.clear()
            self._replicas.clear()
        self._fetch_in_flight = None
        self._download = None
        self._backing_off = False
        self._granted = set()
        self._rejected = set()

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
        if epoch < self._epoch:
            raise QuorumInvariantError(f"epoch would go backwards: {self._epoch} -> {epoch}")
        if trigger is Trigger.LATER_EPOCH and epoch == self._epoch and not self._starting:
            raise QuorumInvariantError(f"node {self.node_id}: a later epoch was claimed, but {epoch} is its own")
        if epoch > self._epoch:
            self._election_retries = 0
        running_deadline = None
        if keep_timer:
            if self._role is Role.FOLLOWER:
                running_deadline = self._fetch_deadline
            elif self._role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE):
                running_deadline = self._election_deadline
        self._enter_role(Role.UNATTACHED, trigger)
        self._set_election_state(epoch, voted_for, None)
        self._reset_election_timer()
        if running_deadline is not None:
            self._election_deadline = running_deadline
        self._next_fetch_tick = self._tick
        self._event(reason)

    def _become_follower(
        self, epoch: int, leader_id: int, *, reason: str, trigger: Trigger = Trigger.LEADER_FOUND
    ) -> None:
        if leader_id == self.node_id:
            raise QuorumInvariantError(f"node {self.node_id} cannot follow itself (epoch {epoch})")
        if epoch < self._epoch:
            raise QuorumInvariantError(f"epoch would go backwards: {self._epoch} -> {epoch}")
        if self._role is Role.LEADER and epoch == self._epoch:
            raise QuorumInvariantError(f"two leaders in epoch {epoch}: {self.node_id} and {leader_id}")
        if epoch > self._epoch:
            self._election_retries = 0
        self._enter_role(Role.FOLLOWER, trigger)
        voted = self._voted_for if epoch == self._epoch else None
        self._set_election_state(epoch, voted, leader_id)
        self._fetched_from_leader = False
        self._leader_unreachable = False
        self._read_token = 0
        self._fetch_deadline = self._tick + self.config.ticks(self.config.fetch_timeout_ms)
        self._next_fetch_tick = self._tick
        self._event(reason)
        self._maybe_send_fetch(self._tick)

    def _stand(self, reason: str, trigger: Trigger) -> None:
        """An election timer fired: pre-vote first (KIP-996) unless disabled."""
        if not self.config.is_voter:
            return
        if self.config.pre_vote and len(self.config.voters) > 1:
            self._become_prospective(reason, trigger)
        else:
            self._become_candidate(reason, trigger)

    def _become_prospective(self, reason: str, trigger: Trigger) -> None:
        leader = self._leader_id if self._leader_id != self.node_id else None
        self._enter_role(Role.PROSPECTIVE, trigger)
        # Keep the last known leader: losing the pre-vote returns to it.
        self._leader_id = leader
        self._granted = {self.node_id}
        self._rejected = set()
        self._reset_election_timer()
        self._event(reason)
        self._request_votes(pre_vote=True)

    def _become_candidate(self, reason: str, trigger: Trigger) -> None:
        self._enter_role(Role.CANDIDATE, trigger)
        self._election_retries += 1
        self._set_election_state(self._epoch + 1, self.node_id, None)
        self._granted = {self.node_id}
        self._rejected = set()
        self._reset_election_timer()
        self._event(reason)
        if len(self._granted) >= self.config.majority:
            self._become_leader()
        else:
            self._request_votes(pre_vote=False)

    def _become_leader(self) -> None:
        self._enter_role(Role.LEADER, Trigger.WON_ELECTION)
        self._election_retries = 0
        self._set_election_state(self._epoch, self._voted_for, self.node_id)
        self._replicas = {
            voter: ReplicaState(voter, is_voter=True) for voter in self.config.voters if voter != self.node_id
        }
        self._fetched_voters = set()
        self._check_quorum_deadline = self._tick + self._check_quorum_ticks()
        self._next_read_token = 1
        self._pending_reads = []
        self._epoch_start_offset = self._log.end_offset
        self._event("won the election")
        # A record of the new epoch, so the high watermark can advance
        # (Raft thesis §3.6.2: commit only records of the current term).
        self._append_as_leader(RecordKind.LEADER_CHANGE, [f"leader={self.node_id} epoch={self._epoch}".encode()])
        self._begin_epoch_deadline = self._tick
        self._send_begin_quorum_epoch(force=True)

    def _become_resigned(self, reason: str, trigger: Trigger) -> None:
        successors = self._preferred_successors()
        self._enter_role(Role.RESIGNED, trigger)
        self._end_epoch_acked = set()
        self._successors = successors
        self._reset_election_timer()
        self._event(reason)
        self._send_end_quorum_epoch()

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

    def _start_backoff(self) -> None:
        """Candidate lost or timed out: wait a random time below
        min(base * 2^retries, max). The cap bounds the range, not the draw,
        so competing candidates keep drawing different waits."""
        self._backing_off = True
        exponent = min(self._election_retries, 20)
        window_ms = min(self.config.election_backoff_base_ms * 2**exponent, self.config.election_backoff_max_ms)
        self._election_deadline = self._tick + 1 + self._rng.randrange(self.config.ticks(window_ms))

    def _reset_election_timer(self) -> None:
        base = self.config.ticks(self.config.election_timeout_ms)
        self._election_deadline = self._tick + base + self._rng.randrange(base)

    def _check_quorum_ticks(self) -> int:
        return self.config.ticks(self.config.check_quorum_ms)

    def _event(self, reason: str) -> None:
        self._out.events.append(
            RoleChange(self._tick, self.node_id, self._role, self._epoch, self.leader_id, reason)
        )

    # =====================================================================
    # Timers
    # =====================================================================

    def _tick_leader(self, now: int) -> None:
        # KAFKA-15489 check quorum: resign when a majority of voters has not
        # fetched within check_quorum_factor * fetch_timeout. A single voter
        # is its own majority (KAFKA-16144).
        if self.config.check_quorum and len(self.config.voters) > 1 and now >= self._check_quorum_deadline:
            self._become_resigned("check quorum: no fetch from a majority of voters", Trigger.CHECK_QUORUM)
            return
        expired = [rid for rid, parked in self._parked.items() if now >= parked.expire_tick]
        for replica_id in expired:
            self._answer_fetch(self._parked.pop(replica_id))
        if now >= self._begin_epoch_deadline:
            self._send_begin_quorum_epoch(force=False)

    def _tick_follower(self, now: int) -> None:
        if self.config.is_voter and now >= self._fetch_deadline:
            if self._leader_unreachable:
                self._stand("leader unreachable: its connection was reset", Trigger.FETCH_TIMEOUT)
            else:
                self._stand("fetch timeout: no fetch from the leader", Trigger.FETCH_TIMEOUT)
            return
        if not self.config.is_voter and now >= self._fetch_deadline:
            # An observer that lost its leader goes looking for the new one.
            self._become_unattached(self._epoch, reason="fetch timeout", trigger=Trigger.FETCH_TIMEOUT)
            return
        if self._fetch_in_flight is not None and now >= self._fetch_in_flight[2]:
            self._fetch_in_flight = None  # lost; send another
        self._maybe_send_fetch(now)

    # =====================================================================
    # Leader: appends, high watermark, fetches, reads
    # =====================================================================

    def _append_as_leader(self, kind: RecordKind, payloads: Sequence[bytes]) -> None:
        offset = self._log.end_offset
        entries = [Entry(offset + i, self._epoch, kind, payload) for i, payload in enumerate(payloads)]
        self._log.append(entries)
        self._out.append.extend(entries)
        self._complete_parked_fetches()

    def _maybe_advance_high_watermark(self) -> None:
        offsets = [self._durable_end if self.node_id in self.config.voter_set else -1]
        offsets += [
            replica.end_offset if replica.end_offset is not None else -1
            for replica in self._replicas.values()
            if replica.is_voter
        ]
        offsets.sort(reverse=True)
        candidate = offsets[self.config.majority - 1]
        # Only once a record of this epoch is committed (Raft thesis §3.6.2).
        if candidate > self._epoch_start_offset and candidate > self._hw:
            self._advance_high_watermark(candidate)

    def _advance_high_watermark(self, new_hw: int) -> None:
        if new_hw <= self._hw:
            return
        old = self._hw
        self._hw = new_hw
        self._out.committed.extend(self._log.slice(max(old, self._log.start_offset), new_hw))
        if self._role is Role.LEADER:
            # Observers (brokers) learn the new high watermark at once.
            # Voters learn it with the next records or when their long poll
            # expires, as Raft followers learn the commit index from later
            # AppendEntries (Raft thesis §3.5): answering them now would add
            # a Fetch round trip to every write, on every node.
            self._complete_parked_fetches(observers_only=True)
            self._check_pending_reads()

    def _on_fetch_request(self, request: FetchRequest) -> None:
        # KIP-595: the epoch is checked before anything else.
        if request.epoch < self._epoch:
            self._send_fetch_error(request, ErrorCode.FENCED_LEADER_EPOCH)
            return
        if self._role is not Role.LEADER or request.epoch > self._epoch:
            code = ErrorCode.NOT_LEADER if request.epoch <= self._epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
            if request.epoch > self._epoch:
                # A fetcher knows of a later epoch than ours: learn it.
                self._become_unattached(request.epoch, reason="fetch from a later epoch")
            self._send_fetch_error(request, code)
            return
        if request.fetch_offset < 0 or request.last_fetched_epoch < 0 or request.last_fetched_epoch > self._epoch:
            self._send_fetch_error(request, ErrorCode.INVALID_REQUEST)
            return
        replica = self._replicas.get(request.src)
        if replica is None:
            replica = ReplicaState(request.src, is_voter=request.src in self.config.voter_set)
            self._replicas[request.src] = replica
        replica.last_fetch_tick = self._tick
        fetch_session = request.request_id >> 32
        if replica.fetch_session != fetch_session:
            # A new process of this fetcher: it knows no high watermark yet.
            replica.fetch_session = fetch_session
            replica.high_watermark_sent = -1
        replica.acked_read_token = max(replica.acked_read_token, request.read_token)
        if replica.is_voter:
            self._record_voter_fetch(request.src)
        extension = None
        handler = self._hooks.fetch_extension_handler
        if request.extension is not None and handler is not None:
            extension = handler(request)

        diverging, snapshot_id = self._validate_fetch_position(request)
        if diverging is not None or snapshot_id is not None:
            self._parked.pop(request.src, None)
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
                    read_token=self._take_read_token(),
                    extension=extension,
                )
            )
            self._check_pending_reads()
            return
        replica.end_offset = request.fetch_offset
        if replica.is_voter:
            self._maybe_advance_high_watermark()
        self._check_pending_reads()
        parked = _ParkedFetch(request, self._tick + self.config.ticks(self.config.fetch_max_wait_ms), extension)
        previous = self._parked.get(request.src)
        if previous is not None and previous.request.request_id >> 32 != fetch_session:
            # Another process of this fetcher (a restart, or a late copy of
            # an old process's request): which one is alive is unknown, so
            # the parked one is answered now rather than left to wait out
            # its sender's request timeout. The sender that is gone ignores
            # the answer (its request id is not in flight anywhere).
            self._answer_fetch(self._parked.pop(request.src))
            previous = None
        # A request older than the one already parked (same process) is a
        # network duplicate: answer it, but keep waiting on the newer one.
        stale = previous is not None and previous.request.request_id > request.request_id
        # Park a fetch that has nothing new to carry (KIP-595 long poll),
        # unless a read is waiting on this fetcher's next round trip.
        # An observer (a broker) also wants every move of the high
        # watermark at once; a voter learns it with its next records.
        has_news = request.fetch_offset < self._log.end_offset or (
            not replica.is_voter and self._hw > replica.high_watermark_sent
        )
        if stale or has_news or self._pending_reads_need(replica):
            if not stale:
                self._parked.pop(request.src, None)
            self._answer_fetch(parked)
        else:
            self._parked[request.src] = parked

    def _validate_fetch_position(self, request: FetchRequest) -> tuple[OffsetAndEpoch | None, SnapshotId | None]:
        """KIP-595 offset validation: is the fetcher's log a prefix of ours?"""
        log = self._log
        offset, epoch = request.fetch_offset, request.last_fetched_epoch
        if self._snapshot is not None:
            # KIP-630: behind our log start, or at it with another epoch, or
            # with an epoch older than anything we hold: only the snapshot
            # can bring this fetcher back onto the committed history.
            if (
                offset < log.start_offset
                or (offset == log.start_offset and epoch != log.start_epoch)
                or epoch < log.start_epoch
            ):
                return None, self._snapshot.snapshot_id
        found = log.end_offset_for_epoch(epoch)
        if found is None:
            # No snapshot and an epoch below our start epoch (0): a malformed
            # request; send the fetcher back to the start.
            return OffsetAndEpoch(log.start_epoch, log.start_offset), None
        if found.epoch != epoch or offset > found.offset:
            return found, None
        return None, None

    def _answer_fetch(self, parked: _ParkedFetch) -> None:
        request = parked.request
        replica = self._replicas.get(request.src)
        if replica is not None:
            replica.high_watermark_sent = self._hw
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
                read_token=self._take_read_token(),
                extension=parked.response_extension,
            )
        )

    def _complete_parked_fetches(self, *, observers_only: bool = False) -> None:
        if not self._parked:
            return
        if observers_only:
            voters = self.config.voter_set
            for replica_id in sorted(self._parked):
                if replica_id not in voters:
                    self._answer_fetch(self._parked.pop(replica_id))
            return
        parked, self._parked = self._parked, {}
        for replica_id in sorted(parked):
            self._answer_fetch(parked[replica_id])

    def _take_read_token(self) -> int:
        token = self._next_read_token
        self._next_read_token += 1
        return token

    def _record_voter_fetch(self, voter: int) -> None:
        self._fetched_voters.add(voter)
        # The leader counts itself: it never fetches from itself.
        if len(self._fetched_voters) + (1 if self.config.is_voter else 0) >= self.config.majority:
            self._fetched_voters.clear()
            self._check_quorum_deadline = self._tick + self._check_quorum_ticks()

    def _pending_reads_need(self, replica: ReplicaState) -> bool:
        return replica.is_voter and any(
            replica.acked_read_token < read.token_needed for read in self._pending_reads
        )

    def _check_pending_reads(self) -> None:
        """Serve every read a majority has confirmed (Raft thesis §6.4)."""
        if not self._pending_reads or not self.leader_has_committed_own_epoch:
            return
        still_waiting: list[_PendingRead] = []
        for read in self._pending_reads:
            confirmations = 1 if self.config.is_voter else 0
            confirmations += sum(
                1
                for replica in self._replicas.values()
                if replica.is_voter and replica.acked_read_token >= read.token_needed
            )
            if confirmations >= self.config.majority:
                self._out.reads.append(ReadReady(read.read_id, self._hw))
            else:
                still_waiting.append(read)
        self._pending_reads = still_waiting

    def _fail_pending_reads(self, reason: str) -> None:
        for read in self._pending_reads:
            self._out.reads.append(ReadFailed(read.read_id, None, reason))
        self._pending_reads = []

    def _send_fetch_error(self, request: FetchRequest, code: ErrorCode, *, leader_hint: Any = "current") -> None:
        if leader_hint == "current":
            leader_hint = self._leader_id if self._role is not Role.RESIGNED else None
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
            )
        )

    def _on_fetch_snapshot_request(self, request: FetchSnapshotRequest) -> None:
        def reply(code: ErrorCode, **fields: Any) -> None:
            self._send(
                FetchSnapshotResponse(
                    src=self.node_id,
                    dst=request.src,
                    epoch=self._epoch,
                    request_id=request.request_id,
                    leader_id=self._leader_id if self._role is not Role.RESIGNED else None,
                    error=code,
                    **fields,
                )
            )

        if request.epoch < self._epoch:
            reply(ErrorCode.FENCED_LEADER_EPOCH)
            return
        if request.epoch > self._epoch:
            # A fetcher knows of a later epoch than ours: learn it (as Fetch does).
            self._become_unattached(request.epoch, reason="snapshot fetch from a later epoch")
            reply(ErrorCode.UNKNOWN_LEADER_EPOCH)
            return
        if self._role is not Role.LEADER:
            reply(ErrorCode.NOT_LEADER)
            return
        replica = self._replicas.setdefault(
            request.src, ReplicaState(request.src, is_voter=request.src in self.config.voter_set)
        )
        replica.last_fetch_tick = self._tick
        if replica.is_voter:
            self._record_voter_fetch(request.src)
        snapshot = self._snapshot
        if snapshot is None or snapshot.snapshot_id != request.snapshot_id:
            reply(ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        size = len(snapshot.data)
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

    def _send_begin_quorum_epoch(self, *, force: bool) -> None:
        """Announce the epoch to voters that have not fetched lately (the
        announcement doubles as a heartbeat for voters that missed it)."""
        half_fetch = self.config.ticks(self.config.fetch_timeout_ms / 2)
        for voter in self.config.voters:
            if voter == self.node_id:
                continue
            replica = self._replicas[voter]
            recent = replica.last_fetch_tick is not None and self._tick - replica.last_fetch_tick < half_fetch
            if force or not recent:
                self._send(BeginQuorumEpochRequest(src=self.node_id, dst=voter, epoch=self._epoch))
        self._begin_epoch_deadline = self._tick + half_fetch

    def _preferred_successors(self) -> tuple[int, ...]:
        ranked = sorted(
            (replica for replica in self._replicas.values() if replica.is_voter),
            key=lambda replica: (-(replica.end_offset if replica.end_offset is not None else -1), replica.node_id),
        )
        return tuple(replica.node_id for replica in ranked)

    def _send_end_quorum_epoch(self) -> None:
        successors = self._successors
        if not successors:
            successors = tuple(voter for voter in self.config.voters if voter != self.node_id)
        for voter in self.config.voters:
            if voter != self.node_id and voter not in self._end_epoch_acked:
                self._send(
                    EndQuorumEpochRequest(
                        src=self.node_id, dst=voter, epoch=self._epoch, preferred_successors=successors
                    )
                )
        self._end_epoch_deadline = self._tick + self.config.ticks(self.config.request_timeout_ms)

    # =====================================================================
    # Follower and observer: fetching
    # =====================================================================

    def _fetch_target(self) -> int | None:
        if self._role is Role.FOLLOWER:
            return self._leader_id
        if self._role is Role.UNATTACHED and not self.config.is_voter:
            # An observer without a leader asks the voters in turn; a
            # non-leader answers NOT_LEADER with the leader it knows.
            voters = self.config.voters
            return voters[self._bootstrap_index % len(voters)]
        return None

    def _maybe_send_fetch(self, now: int) -> None:
        if self._fetch_in_flight is not None or now < self._next_fetch_tick:
            return
        target = self._fetch_target()
        if target is None:
            return
        self._fetch_request_id += 1
        deadline = now + self.config.ticks(self.config.fetch_max_wait_ms + self.config.request_timeout_ms)
        self._fetch_in_flight = (self._fetch_request_id, target, deadline)
        if self._download is not None:
            self._send(
                FetchSnapshotRequest(
                    src=self.node_id,
                    dst=target,
                    epoch=self._epoch,
                    snapshot_id=self._download.snapshot_id,
                    position=len(self._download.buffer),
                    request_id=self._fetch_request_id,
                )
            )
            return
        self._send(
            FetchRequest(
                src=self.node_id,
                dst=target,
                epoch=self._epoch,
                fetch_offset=self._log.end_offset,
                last_fetched_epoch=self._log.last_epoch,
                request_id=self._fetch_request_id,
                read_token=self._read_token,
                extension=self._fetch_extension(),
            )
        )

    def _fetch_extension(self) -> Any:
        provider = self._hooks.fetch_extension_provider
        return provider() if provider is not None else None

    def _accept_response(self, response: FetchResponse | FetchSnapshotResponse) -> bool:
        """Is this the answer to the fetch in flight? Clears it if so."""
        in_flight = self._fetch_in_flight
        if in_flight is None or in_flight[0] != response.request_id or in_flight[1] != response.src:
            return False
        self._fetch_in_flight = None
        return True

    def _on_fetch_response(self, response: FetchResponse) -> None:
        if not self._accept_response(response):
            return
        consumer = self._hooks.fetch_extension_consumer
        if response.extension is not None and consumer is not None:
            consumer(response.extension)
        if self._handle_response_epoch(response.epoch, response.leader_id, response.src, response.error):
            return
        if response.error:
            # NOT_LEADER in our epoch with no leader named: the leader
            # resigned. Wait a little and ask again (an observer asks the
            # next voter).
            if self._role is Role.UNATTACHED:
                self._bootstrap_index += 1
            self._next_fetch_tick = self._tick + self.config.ticks(self.config.retry_backoff_ms)
            return
        if self._role is not Role.FOLLOWER or response.src != self._leader_id:
            return
        self._fetched_from_leader = True
        self._leader_unreachable = False
        self._fetch_deadline = self._tick + self.config.ticks(self.config.fetch_timeout_ms)
        self._read_token = max(self._read_token, response.read_token)
        self._next_fetch_tick = self._tick
        if response.diverging is not None:
            # Our log is not a prefix of the leader's: truncate and ask again.
            # The high watermark must not move on such a response: it is
            # only meaningful for a log the leader has validated (KIP-595).
            self._truncate_diverging(response.diverging)
        elif response.snapshot_id is not None:
            self._download = _SnapshotDownload(response.snapshot_id, bytearray())
        elif not response.records or response.records[0].offset == self._log.end_offset:
            # The leader validated our log up to the fetch offset; the
            # records extend it. Learn the high watermark, bounded by our log.
            if response.records:
                self._log.append(response.records)
                self._out.append.extend(response.records)
            self._advance_high_watermark(min(response.high_watermark, self._log.end_offset))
        self._maybe_send_fetch(self._tick)

    def _truncate_diverging(self, diverging: OffsetAndEpoch) -> None:
        # KIP-595: keep our records of the diverging epoch only up to where
        # the leader's end; if we have no records of that epoch, keep what
        # precedes our next epoch. Repeated rounds converge on the fork point.
        ours = self._log.end_offset_for_epoch(diverging.epoch)
        if ours is None:
            target = self._log.start_offset
        elif ours.epoch == diverging.epoch:
            target = min(diverging.offset, ours.offset)
        else:
            target = ours.offset
        target = max(target, self._log.start_offset)
        if target < self._hw:
            raise QuorumInvariantError(
                f"node {self.node_id} told to truncate to {target}, below its high watermark {self._hw}"
            )
        self._truncate_log(target)

    def _truncate_log(self, end_offset: int) -> None:
        if end_offset >= self._log.end_offset:
            return
        self._log.truncate_to(end_offset)
        out = self._out
        out.append = [entry for entry in out.append if entry.offset < end_offset]
        out.truncate_to = end_offset if out.truncate_to is None else min(out.truncate_to, end_offset)
        self._durable_end = min(self._durable_end, end_offset)
        for pending in self._unpersisted:
            pending[1] = min(pending[1], end_offset)

    def _on_fetch_snapshot_response(self, response: FetchSnapshotResponse) -> None:
        if not self._accept_response(response):
            return
        if self._handle_response_epoch(response.epoch, response.leader_id, response.src, response.error):
            return
        download = self._download
        if download is None or self._role is not Role.FOLLOWER:
            return
        if response.error or response.snapshot_id != download.snapshot_id or response.position != len(download.buffer):
            # The leader moved on (a newer snapshot) or we lost our place:
            # start over from a plain Fetch.
            self._download = None
            self._next_fetch_tick = self._tick + self.config.ticks(self.config.retry_backoff_ms)
            return
        self._fetched_from_leader = True
        self._fetch_deadline = self._tick + self.config.ticks(self.config.fetch_timeout_ms)
        download.buffer += response.chunk
        if len(download.buffer) >= response.size:
            self._install_snapshot(Snapshot(download.snapshot_id, bytes(download.buffer)))
        self._maybe_send_fetch(self._tick)

    def _install_snapshot(self, snapshot: Snapshot) -> None:
        """KIP-630: replace the whole log with a snapshot from the leader."""
        self._download = None
        snapshot_id = snapshot.snapshot_id
        self._snapshot = snapshot
        self._log.reset(snapshot_id)
        out = self._out
        out.snapshot = (snapshot_id, snapshot.data)
        out.reset_log = True
        out.append = []
        out.truncate_to = None
        out.snapshot_loaded = (snapshot_id, snapshot.data)
        out.committed = []
        self._durable_end = min(self._durable_end, snapshot_id.end_offset)
        for pending in self._unpersisted:
            pending[1] = snapshot_id.end_offset
        self._hw = max(self._hw, snapshot_id.end_offset)

    # =====================================================================
    # Elections
    # =====================================================================

    def _request_votes(self, *, pre_vote: bool) -> None:
        last = self._log.last
        epoch = self._epoch + 1 if pre_vote else self._epoch
        for voter in self.config.voters:
            if voter != self.node_id:
                self._send(
                    VoteRequest(
                        src=self.node_id,
                        dst=voter,
                        epoch=epoch,
                        last_epoch=last.epoch,
                        end_offset=last.offset,
                        pre_vote=pre_vote,
                    )
                )

    def _log_is_up_to_date(self, request: VoteRequest) -> bool:
        # Raft thesis §3.6.1: compare the last epochs, then the log lengths.
        return OffsetAndEpoch(request.last_epoch, request.end_offset) >= self._log.last

    def _on_vote_request(self, request: VoteRequest) -> None:
        if request.pre_vote:
            self._on_pre_vote_request(request)
            return
        if request.epoch > self._epoch:
            # Even a leader steps down for a higher-epoch Vote: the
            # disruption pre-vote exists to prevent.
            self._become_unattached(
                request.epoch, reason=f"vote request from {request.src} in a later epoch", keep_timer=True
            )
        granted = False
        if (
            request.epoch == self._epoch
            and self.config.is_voter
            and self._role in (Role.UNATTACHED, Role.PROSPECTIVE)
            and self._leader_id is None
            and self._voted_for in (None, request.src)
            and self._log_is_up_to_date(request)
        ):
            granted = True
            if self._role is Role.PROSPECTIVE or self._voted_for is None:
                self._enter_role(Role.UNATTACHED, Trigger.GRANTED_VOTE)
                self._set_election_state(self._epoch, request.src, None)
                self._event(f"voted for {request.src}")
            self._reset_election_timer()
        self._send(
            VoteResponse(
                src=self.node_id,
                dst=request.src,
                epoch=self._epoch,
                granted=granted,
                pre_vote=False,
                leader_id=self._leader_id if self._role is not Role.RESIGNED else None,
                error=ErrorCode.FENCED_LEADER_EPOCH if request.epoch < self._epoch else ErrorCode.NONE,
            )
        )

    def _on_pre_vote_request(self, request: VoteRequest) -> None:
        """KIP-996: grant iff we would vote in that epoch; change nothing.

        A leader refuses; so does a follower that has fetched from its
        leader since it began following: its leader is alive, and a healed
        node must not depose it.
        """
        granted = (
            request.epoch > self._epoch
            and self.config.is_voter
            and self._role is not Role.LEADER
            and not (self._role is Role.FOLLOWER and self._fetched_from_leader)
            and self._log_is_up_to_date(request)
        )
        self._send(
            VoteResponse(
                src=self.node_id,
                dst=request.src,
                epoch=self._epoch,
                granted=granted,
                pre_vote=True,
                leader_id=self._leader_id if self._role in (Role.LEADER, Role.FOLLOWER) else None,
                error=ErrorCode.FENCED_LEADER_EPOCH if request.epoch < self._epoch else ErrorCode.NONE,
            )
        )

    def _on_vote_response(self, response: VoteResponse) -> None:
        if response.epoch > self._epoch:
            self._handle_response_epoch(response.epoch, response.leader_id, response.src, response.error)
            return
        # Only answers from our own epoch count: a late grant from an earlier
        # round must not make a candidate of us now.
        if response.epoch != self._epoch:
            return
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
                self._become_follower(self._epoch, response.leader_id, reason="vote response named a leader")
                return
        (self._granted if response.granted else self._rejected).add(response.src)
        majority = self.config.majority
        if len(self._granted) >= majority:
            if response.pre_vote:
                self._become_candidate("won the pre-vote", Trigger.WON_PRE_VOTE)
            else:
                self._become_leader()
        elif len(self._rejected) > len(self.config.voters) - majority:
            if response.pre_vote:
                self._lose_pre_vote("lost the pre-vote")
            elif not self._backing_off:
                self._start_backoff()

    def _on_begin_quorum_epoch(self, request: BeginQuorumEpochRequest) -> None:
        if request.epoch < self._epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH
        else:
            code = ErrorCode.NONE
            if request.epoch > self._epoch or self._leader_id != request.src or self._role is not Role.FOLLOWER:
                self._become_follower(request.epoch, request.src, reason=f"{request.src} began epoch {request.epoch}")
        self._send(BeginQuorumEpochResponse(src=self.node_id, dst=request.src, epoch=self._epoch, error=code))

    def _on_end_quorum_epoch(self, request: EndQuorumEpochRequest) -> None:
        if request.epoch < self._epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH
        else:
            code = ErrorCode.NONE
            if request.epoch > self._epoch:
                self._become_unattached(request.epoch, reason=f"{request.src} ended epoch {request.epoch}")
            elif self._role is Role.FOLLOWER and self._leader_id == request.src:
                self._become_unattached(
                    self._epoch,
                    voted_for=self._voted_for,
                    reason=f"leader {request.src} resigned",
                    trigger=Trigger.LEADER_RESIGNED,
                )
            if self._role is Role.UNATTACHED and self.config.is_voter:
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
                    self._election_deadline = min(self._election_deadline, self._tick + delay_ticks)
        self._send(EndQuorumEpochResponse(src=self.node_id, dst=request.src, epoch=self._epoch, error=code))

    def _on_ack_response(self, response: BeginQuorumEpochResponse | EndQuorumEpochResponse) -> None:
        if response.epoch > self._epoch:
            self._handle_response_epoch(response.epoch, None, response.src, response.error)
            return
        if isinstance(response, EndQuorumEpochResponse) and self._role is Role.RESIGNED and response.epoch == self._epoch:
            self._end_epoch_acked.add(response.src)

    def _handle_response_epoch(self, epoch: int, leader_id: int | None, src: int, error: ErrorCode) -> bool:
        """KIP-595 common response handling. Returns True if the response
        was consumed by an epoch or leader change."""
        if epoch > self._epoch:
            if leader_id is not None and leader_id != self.node_id:
                self._become_follower(epoch, leader_id, reason=f"learned of epoch {epoch} from {src}")
            else:
                self._become_unattached(epoch, reason=f"learned of epoch {epoch} from {src}")
            return True
        if epoch == self._epoch and leader_id is not None and leader_id != self.node_id:
            if self._leader_id is None and self._role in (Role.UNATTACHED, Role.PROSPECTIVE):
                self._become_follower(epoch, leader_id, reason=f"{src} named leader {leader_id}")
                return True
            if self._role is Role.LEADER:
                raise QuorumInvariantError(f"{src} names {leader_id} leader of epoch {epoch}, which this node leads")
        return False

    # =====================================================================
    # Output assembly
    # =====================================================================

    def _send(self, message: Message) -> None:
        if isinstance(message, (FetchResponse, FetchSnapshotResponse)):
            # Depends on nothing being durable here (see _output.py).
            self._out.early_messages.append(message)
        else:
            self._out.messages.append(message)

    def _flush(self) -> Output:
        out = self._out
        self._out = Output()
        if out.has_persistence:
            self._persist_seq += 1
            out.persist_seq = self._persist_seq
            self._unpersisted.append([self._persist_seq, self._log.end_offset])
        return out
