"""The controller: the sans-IO brain that runs on the quorum leader.

It turns requests (RegisterBroker, CreateTopics, ...), heartbeats (the
``extension`` of brokers' Fetches, seed 001) and the passing of time into
metadata records, proposed as atomic batches. It never reads a clock
(``now_ms`` comes in with every call), does no IO and draws no randomness,
so the same inputs give the same records.

Two images:

- the **committed** image, passed to the constructor, is the quorum state
  machine: the runtime applies committed records to it;
- the **working** image is a copy made at ``activate`` to which the
  controller applies every batch it proposes *at once*, so that each
  decision sees the earlier, still uncommitted ones (Kafka's controller
  replays its own records before they commit). Records land at predicted
  offsets: ``next_write_offset`` (the leader's log end at activation) plus
  everything proposed since. The runtime must propose batches in the order
  the controller made them. If a batch commits anywhere else (another
  writer, or a wrong starting offset), the controller refuses new work until
  its in-flight batches have committed, then copies the committed image
  again.

Liveness (last heartbeat, fetch offsets) is leader-local soft state, never
replicated; what it decides (fence, unfence, shutdown) is written as
records (KIP-631). A new leader gives every registered broker a fresh
session (KAFKA-18138).
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from quorum import TIMER_MS_MAX, VoterSet, check_int_setting, collector_paused

from ._election import PartitionChange, elect_leader, election_change
from ._errors import ErrorCode, NotActiveError, RegistrationInvariantError
from ._image import BrokerRegistration, ClusterImage
from ._lifecycle import BrokerEvent, BrokerState, next_state
from ._placement import place_replicas
from ._records import (
    FLAG_CLEAR,
    FLAG_SET,
    FLAG_UNCHANGED,
    BrokerRegistrationChangeRecord,
    NoOpRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    encode_partition_changes,
    encode_records,
    topic_name_problem,
)
from ._requests import (
    BrokerDescription,
    BrokerHeartbeat,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ControllerDescription,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeControllersRequest,
    DescribeControllersResponse,
    DESCRIBE_PARTITIONS_MAX,
    LIST_TOPICS_PAGE_MAX,
    DescribeTopicsRequest,
    DescribeTopicsResponse,
    HeartbeatReply,
    ListTopicsRequest,
    ListTopicsResponse,
    PartitionDescription,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    RegisterControllerRequest,
    RegisterControllerResponse,
    Request,
    Response,
    TopicDescription,
    TopicListing,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    error_response,
)

logger = logging.getLogger("pykraft.registration")


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    """Controller settings. Defaults are Kafka's (KIP-631, KIP-835).

    Raises ``ValueError`` on construction for inconsistent values, and for
    a timer that is not an int or is over ``quorum.TIMER_MS_MAX`` (an hour).
    """

    cluster_id: str
    # broker.session.timeout.ms: no heartbeat for this long -> fenced.
    session_timeout_ms: int = 9_000
    # broker.heartbeat.interval.ms: a broker silent for this long is no longer
    # "heartbeating", so a new incarnation of its id may take over at once.
    heartbeat_interval_ms: int = 2_000
    # metadata.max.idle.interval.ms (KIP-835): a NoOpRecord after this long
    # without a write, so that an idle log still shows progress. 0: never.
    no_op_interval_ms: int = 500
    # A bound on one CreateTopics request's partitions (one atomic batch,
    # appended and applied between two inputs of the controller's loop).
    # Kafka's controller bounds any user operation to 10,000 records
    # (QuorumController.MAX_RECORDS_PER_USER_OP). A million, the bound
    # before, held the loop for minutes: every broker missed its session
    # and was fenced, a million partition changes more.
    max_partitions_per_request: int = 10_000

    def __post_init__(self) -> None:
        if not isinstance(self.cluster_id, str) or not self.cluster_id:
            raise ValueError("cluster_id must be a non-empty string")
        # Past an hour (quorum.TIMER_MS_MAX) a dead broker is never fenced
        # and its partitions never move: the session is fencing by name only.
        check_int_setting("heartbeat_interval_ms", self.heartbeat_interval_ms, 1, TIMER_MS_MAX, unit="ms")
        check_int_setting("session_timeout_ms", self.session_timeout_ms, 1, TIMER_MS_MAX, unit="ms")
        check_int_setting("no_op_interval_ms", self.no_op_interval_ms, 0, TIMER_MS_MAX, unit="ms")
        if self.session_timeout_ms <= self.heartbeat_interval_ms:
            raise ValueError(
                f"session_timeout_ms ({self.session_timeout_ms}) must exceed "
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms})"
            )
        if type(self.max_partitions_per_request) is not int or self.max_partitions_per_request < 1:
            raise ValueError("max_partitions_per_request must be >= 1")


@dataclass(slots=True)
class Proposal:
    """An atomic batch to append (the shape of ``quorum.runtime.Proposal``).

    ``on_committed(first_offset)`` must be called once the whole batch is
    committed *and applied to the committed image*. ``expected_first_offset``
    is where the controller predicted the batch lands (for an assertion).
    """

    records: list[bytes]
    on_committed: Callable[[int], Any] | None = None
    expected_first_offset: int = -1


@dataclass(frozen=True, slots=True)
class Reply:
    """What ``handle_request`` returns: exactly one of

    - ``response``: answer now;
    - ``records`` + ``on_committed``: propose ``records`` as one atomic batch
      (after anything ``take_proposals`` holds); once it is committed and
      applied, ``on_committed(first_offset)`` returns the response;
    - ``on_read_confirmed``: a linearizable read; once a ReadIndex round has
      confirmed leadership and the committed image has applied up to the read
      offset, ``on_read_confirmed()`` returns the response.
    """

    response: Response | None = None
    records: list[bytes] = field(default_factory=list)
    on_committed: Callable[[int], Response] | None = None
    on_read_confirmed: Callable[[], Response] | None = None
    expected_first_offset: int = -1

    @property
    def is_write(self) -> bool:
        return self.on_committed is not None

    @property
    def is_read(self) -> bool:
        return self.on_read_confirmed is not None


@dataclass(slots=True)
class _Session:
    """Leader-local soft state of one registered broker (KIP-631
    ``BrokerHeartbeatManager``)."""

    last_contact_ms: int
    fetch_offset: int = -1  # -1: no fetch seen by this controller yet
    # End offset of the batch that put the broker in controlled shutdown,
    # once that batch has committed (Kafka's controlledShutdownOffset).
    controlled_shutdown_end_offset: int | None = None


@dataclass(slots=True, eq=False)  # compared by identity
class _PendingBatch:
    expected_first_offset: int
    record_count: int


_UNFENCED = (BrokerState.ONLINE, BrokerState.STOPPING)


class Controller:
    """The active controller's brain. See the module docstring.

    ``image`` is the committed image: the state machine the runtime applies
    committed records to. Nothing happens until ``activate``.
    """

    def __init__(self, config: ControllerConfig, image: ClusterImage) -> None:
        self.config = config
        self.image = image
        self._working: ClusterImage | None = None
        self._generation = 0  # bumped by activate/deactivate: stale callbacks do nothing
        self._next_write_offset = 0
        self._pending: deque[_PendingBatch] = deque()
        self._out_of_sync = False
        self._sessions: dict[int, _Session] = {}
        # Unfenced (Online, Stopping) brokers, least recently heard first:
        # session expiry looks at the front only.
        self._expiry_order: dict[int, None] = {}
        self._proposals: list[Proposal] = []
        self._last_write_ms = 0
        # Batches proposed whose application to the working image is put off
        # until the proposal has left (``catch_up``), each with the broker
        # state its batch must reach: (changes, records, first offset,
        # (broker id, state)).
        self._behind: list[tuple[Sequence[PartitionChange], list[Record], int, tuple[int, BrokerState]]] = []
        # The quorum's voters, as the host last said (``note_voters``).
        self._voters: VoterSet | None = None

    # ------------------------------------------------------------------
    # Leadership
    # ------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self._working is not None

    @property
    def working_image(self) -> ClusterImage:
        """The speculative image (committed + proposed), caught up with
        every batch proposed (``catch_up``). Raises ``NotActiveError`` when
        not active, and what ``catch_up`` raises."""
        if self._working is None:
            raise NotActiveError("the controller is not active")
        if self._behind:
            self.catch_up()
        return self._working

    def catch_up(self) -> None:
        """Apply to the working image the batches whose application was put
        off until their proposal had left: a fence's, or a controlled
        shutdown's, partition changes (10,000 for a broker that leads
        10,000 partitions). The batch is proposed once encoded, so that the
        leader replicates and persists it while this applies it (issue 21:
        about 30 ms of the fence's 50 ms of CPU); every read of the working
        image catches up first, so no decision sees it behind. The runtime
        calls it once the messages that carry the batch have left
        (``quorum.ReplicaHost.application_catch_up``); it does nothing when
        the image is not behind.

        Raises ``InvalidRecordError`` or ``ValueError`` when the image
        refuses the batch (a change that does not fit; its offset moved past
        the batch), ``RegistrationInvariantError`` when it does not reach
        the state the broker's transition says: controller bugs, as when
        ``_write`` applied the batch at once. The controller then refuses
        new work until its batches have committed and starts over from the
        committed image."""
        behind, self._behind = self._behind, []
        if not behind or self._working is None:
            return
        working = self._working
        try:
            with collector_paused():  # see _write
                for changes, records, first, _target in behind:
                    self._apply_batch(working, changes, records, first)
            for _changes, _records, _first, (broker_id, state) in behind:
                self._check_state(broker_id, state)
        except BaseException:
            # The image holds part of what was proposed: never decide on it.
            self._out_of_sync = True
            raise

    @property
    def next_write_offset(self) -> int:
        """Where the controller expects its next batch to land."""
        return self._next_write_offset

    @property
    def pending_batch_count(self) -> int:
        """Batches proposed and not yet known to be committed."""
        return len(self._pending)

    def activate(self, now_ms: int, next_write_offset: int | None = None) -> None:
        """Start leading. Call once this node leads *and* the committed image
        has applied every record before its epoch's first one (KAFKA-15345).

        ``next_write_offset`` is the leader's log end offset (where the first
        proposal will land); without it the controller guesses the committed
        image's offset and, when wrong, resynchronises after its first batch
        commits. Every registered broker gets a fresh session (KAFKA-18138).

        Cost: one ``ClusterImage.copy()`` (a few dict copies and the leaders
        index set by set: about 12 ms of CPU at 100,000 partitions and 1,000
        brokers, docs/benchmarks.md "The fence, a fifth time").

        Raises ``ValueError`` when ``next_write_offset`` is below the
        committed image's offset.
        """
        self.deactivate()
        self._generation += 1
        self._working = self.image.copy()
        self._next_write_offset = self.image.offset if next_write_offset is None else next_write_offset
        if self._next_write_offset < self.image.offset:
            raise ValueError(f"next_write_offset {next_write_offset} is below the image offset {self.image.offset}")
        self._last_write_ms = now_ms
        self._sessions = {}
        self._rebuild_sessions(now_ms)

    def deactivate(self) -> None:
        """Stop leading: drop the working image, soft state and queued
        proposals. Callbacks of batches proposed before still build their
        responses, but change nothing here."""
        self._generation += 1
        self._working = None
        self._pending.clear()
        self._out_of_sync = False
        self._sessions = {}
        self._expiry_order = {}
        self._proposals = []
        self._behind = []

    def _rebuild_sessions(self, now_ms: int) -> None:
        """Sessions for the working image's brokers: existing ones kept,
        missing ones fresh (contact ``now_ms``); expiry order rebuilt."""
        working = self.working_image
        sessions = {}
        for broker_id in sorted(working.brokers):
            session = self._sessions.get(broker_id) or _Session(last_contact_ms=now_ms)
            stopping = working.broker_state(broker_id) is BrokerState.STOPPING
            if stopping and session.controlled_shutdown_end_offset is None:
                # Its controlled-shutdown batch is in the committed image.
                session.controlled_shutdown_end_offset = self.image.offset
            sessions[broker_id] = session
        self._sessions = sessions
        unfenced = [broker_id for broker_id in sessions if working.broker_state(broker_id) in _UNFENCED]
        unfenced.sort(key=lambda broker_id: (sessions[broker_id].last_contact_ms, broker_id))
        self._expiry_order = dict.fromkeys(unfenced)

    # ------------------------------------------------------------------
    # Writing
    # ------------------------------------------------------------------

    def _write(
        self,
        records: list[Record],
        now_ms: int,
        changes: Sequence[PartitionChange] = (),
        target: tuple[int, BrokerState] | None = None,
    ) -> tuple[list[bytes], _PendingBatch]:
        """Encode the batch (``changes``, partition changes as their record's
        field values, then ``records``), apply it to the working image at its
        predicted offsets, and remember it as in flight. With ``target``
        (broker id, the state the batch moves it to), the application waits
        for ``catch_up``: the batch is proposed first."""
        working = self.working_image  # caught up: batches apply in log order
        first = self._next_write_offset
        # A batch can hold 10,000 partition changes (a fence): the cyclic
        # collector would walk its young objects dozens of times.
        with collector_paused():
            # The changes are validated as their records would validate
            # themselves (encode_partition_changes), then applied with the
            # image's own checks: the records are never built.
            encoded = encode_partition_changes(changes)
            encoded += encode_records(records)
            if target is None:
                self._apply_batch(working, changes, records, first)
        count = len(changes) + len(records)
        self._next_write_offset = first + count
        batch = _PendingBatch(first, count)
        self._pending.append(batch)
        self._last_write_ms = now_ms
        if target is not None:
            self._behind.append((changes, records, first, target))
        return encoded, batch

    @staticmethod
    def _apply_batch(
        working: ClusterImage, changes: Sequence[PartitionChange], records: list[Record], first: int
    ) -> None:
        working.apply_partition_changes(changes, first)
        for index, record in enumerate(records, first + len(changes)):
            working.apply_record(record, index)

    def _committed_callback(
        self, batch: _PendingBatch, then: Callable[[int], Any] | None, *, always: bool
    ) -> Callable[[int], Any]:
        generation = self._generation

        def on_committed(first_offset: int) -> Any:
            current = generation == self._generation
            if current:
                self._batch_committed(batch, first_offset)
            if then is not None and (always or current):
                return then(first_offset)
            return None

        return on_committed

    def _queue(
        self,
        records: list[Record],
        now_ms: int,
        then: Callable[[int], Any] | None = None,
        changes: Sequence[PartitionChange] = (),
        target: tuple[int, BrokerState] | None = None,
    ) -> None:
        encoded, batch = self._write(records, now_ms, changes, target)
        on_committed = self._committed_callback(batch, then, always=False)
        self._proposals.append(Proposal(encoded, on_committed, batch.expected_first_offset))

    def _write_reply(
        self,
        records: list[Record],
        now_ms: int,
        respond: Callable[[int], Response],
        changes: Sequence[PartitionChange] = (),
    ) -> Reply:
        encoded, batch = self._write(records, now_ms, changes)
        on_committed = self._committed_callback(batch, respond, always=True)
        return Reply(records=encoded, on_committed=on_committed, expected_first_offset=batch.expected_first_offset)

    def _batch_committed(self, batch: _PendingBatch, first_offset: int) -> None:
        if not any(pending is batch for pending in self._pending):
            return
        if self._pending[0] is not batch or first_offset != batch.expected_first_offset:
            if not self._out_of_sync:
                logger.warning(
                    "a controller batch committed at offset %d, predicted %d: refusing new work until "
                    "in-flight batches commit, then copying the committed image",
                    first_offset,
                    batch.expected_first_offset,
                )
            self._out_of_sync = True
        self._pending.remove(batch)
        if self._out_of_sync and not self._pending:
            self._resynchronise(first_offset + batch.record_count)

    def _resynchronise(self, next_write_offset: int) -> None:
        """Start over from the committed image, which now holds every batch
        this controller proposed."""
        self._working = self.image.copy()
        self._behind = []  # the committed image holds those batches
        self._next_write_offset = max(next_write_offset, self.image.offset)
        self._out_of_sync = False
        self._rebuild_sessions(self._last_write_ms)
        logger.info("controller resynchronised at offset %d", self._next_write_offset)

    def note_log_end(self, end_offset: int) -> None:
        """The leader's log now ends at ``end_offset``: records of other
        writers (a register workload sharing the log) were appended since
        this controller's last batch, so its next batch lands there. Call it
        before every decision (request, heartbeat, tick)."""
        if self._working is not None and end_offset > self._next_write_offset:
            self._next_write_offset = end_offset

    def note_voters(self, voters: VoterSet) -> None:
        """The voter set in force on the leader: no broker registers under
        one of its ids (``register_broker``). Call it before every request."""
        self._voters = voters

    def take_proposals(self) -> list[Proposal]:
        """The batches queued by ``on_fetch`` and ``tick``, oldest first;
        propose each as one atomic batch, in this order."""
        proposals, self._proposals = self._proposals, []
        return proposals

    # ------------------------------------------------------------------
    # Heartbeats (the brokers' metadata fetches, seed 001)
    # ------------------------------------------------------------------

    def on_fetch(self, replica_id: int, extension: Any, fetch_offset: int, now_ms: int) -> dict[str, Any]:
        """The heartbeat in a broker's Fetch; returns the response's extension
        (``HeartbeatReply.to_extension()``). Signature of
        ``quorum.runtime.LeaderApplication.on_fetch``; ``replica_id`` is the
        fetcher's node id, informational only (the heartbeat names the broker).

        Never raises on a remote's input: a malformed extension gets
        INVALID_REQUEST, a stale or unknown epoch STALE_BROKER_EPOCH.
        """
        if self._working is None:
            return HeartbeatReply(error=ErrorCode.NOT_LEADER).to_extension()
        try:
            heartbeat = BrokerHeartbeat.from_extension(extension)
        except (ValueError, TypeError) as error:
            logger.info("malformed heartbeat from node %s: %s", replica_id, error)
            return HeartbeatReply(error=ErrorCode.INVALID_REQUEST).to_extension()
        if type(fetch_offset) is not int or fetch_offset < 0:
            return HeartbeatReply(error=ErrorCode.INVALID_REQUEST).to_extension()
        return self.heartbeat(heartbeat, fetch_offset, now_ms).to_extension()

    def heartbeat(self, heartbeat: BrokerHeartbeat, fetch_offset: int, now_ms: int) -> HeartbeatReply:
        """Handle one heartbeat (KIP-631 ``processBrokerHeartbeat``).

        ``is_fenced`` reports the *committed* registration, so a broker
        serves only once its unfencing is in the log; ``should_shutdown``
        is the controller's decision (its conditions rest on committed
        facts).
        """
        if self._working is None:
            return HeartbeatReply(error=ErrorCode.NOT_LEADER)
        working = self.working_image
        broker_id = heartbeat.broker_id
        registration = working.broker(broker_id)
        if registration is None or registration.broker_epoch != heartbeat.broker_epoch:
            # KIP-380: a request from another generation changes nothing,
            # not even the session.
            return HeartbeatReply(error=ErrorCode.STALE_BROKER_EPOCH)
        session = self._sessions[broker_id]
        session.last_contact_ms = now_ms
        session.fetch_offset = fetch_offset
        if broker_id in self._expiry_order:
            del self._expiry_order[broker_id]
            self._expiry_order[broker_id] = None
        # KIP-631 IsCaughtUp: the broker holds its own registration record.
        caught_up = fetch_offset > registration.broker_epoch
        if not self._out_of_sync:
            state = registration.state
            if state is BrokerState.FENCED:
                if heartbeat.want_shutdown:
                    self._shut_down_fenced(registration, now_ms)
                elif not heartbeat.want_fence and caught_up:
                    self._unfence(registration, now_ms)
            elif state is BrokerState.ONLINE:
                if heartbeat.want_shutdown:
                    self._begin_controlled_shutdown(registration, now_ms)
                elif heartbeat.want_fence:
                    self._fence(registration, BrokerEvent.FENCE, now_ms)
            elif state is BrokerState.STOPPING and self._controlled_shutdown_done(broker_id, session):
                self._complete_controlled_shutdown(registration, now_ms)
        committed = self.image.broker(broker_id)
        is_fenced = committed is None or committed.broker_epoch != registration.broker_epoch or committed.fenced
        # The working image again: a decision above may have put off its batch.
        should_shutdown = self.working_image.broker_state(broker_id) is BrokerState.OFFLINE
        return HeartbeatReply(
            error=ErrorCode.NONE, is_caught_up=caught_up, is_fenced=is_fenced, should_shutdown=should_shutdown
        )

    def _controlled_shutdown_done(self, broker_id: int, session: _Session) -> bool:
        """KIP-631: the stopping broker leads nothing, and every other online
        broker has fetched past the batch that moved its leaderships."""
        end_offset = session.controlled_shutdown_end_offset
        if end_offset is None or self.working_image.leader_count(broker_id):
            return False
        for other in self.working_image.brokers_in_state(BrokerState.ONLINE):
            if other != broker_id and self._sessions[other].fetch_offset < end_offset:
                return False
        return True

    # ------------------------------------------------------------------
    # Broker state changes; each is one atomic batch
    # ------------------------------------------------------------------

    def _transition(self, registration: BrokerRegistration, event: BrokerEvent) -> BrokerState:
        return next_state(registration.state, event)

    def _check_state(self, broker_id: int, expected: BrokerState) -> None:
        actual = self.working_image.broker_state(broker_id)
        if actual is not expected:
            raise RegistrationInvariantError(
                f"controller bug: broker {broker_id} is {actual.value}, the table says {expected.value}"
            )

    def _sync_expiry(self, broker_id: int) -> None:
        self._expire_as(broker_id, self.working_image.broker_state(broker_id))

    def _expire_as(self, broker_id: int, state: BrokerState) -> None:
        """Keep ``broker_id`` in the expiry order if ``state`` is unfenced."""
        if state in _UNFENCED:
            self._expiry_order.setdefault(broker_id, None)
        else:
            self._expiry_order.pop(broker_id, None)

    def _removal_changes(self, broker_id: int) -> list[PartitionChange]:
        """Partition changes taking ``broker_id`` out of every ISR (except as
        a last member) and moving its leaderships (seed 004 section A), as
        their records' field values (``_write`` encodes and applies them)."""
        working = self.working_image
        online = set(working.brokers_in_state(BrokerState.ONLINE))
        online.discard(broker_id)
        is_acceptable = online.__contains__
        topic_by_id = working.topic_by_id
        changes: list[PartitionChange] = []
        topic_id_before, unclean_allowed = None, False
        # One election per partition the broker is in: 10,000 changes for a
        # broker that leads 10,000 partitions (see _write).
        with collector_paused():
            for state in working.partitions_in_isr_of(broker_id):
                topic_id = state.topic_id
                if topic_id != topic_id_before:  # sorted by key: a topic's partitions in a row
                    topic = topic_by_id(topic_id)
                    assert topic is not None
                    topic_id_before, unclean_allowed = topic_id, topic.unclean_leader_election
                change = election_change(state, is_acceptable, broker_id, unclean_allowed)
                if change is not None:
                    changes.append(change)
        return changes

    def _fence(self, registration: BrokerRegistration, event: BrokerEvent, now_ms: int) -> None:
        """Fence an unfenced broker: its partition changes, then its fence
        record (KIP-631 ``handleBrokerFenced``), in one batch."""
        target = self._transition(registration, event)
        changes = self._removal_changes(registration.broker_id)
        record = BrokerRegistrationChangeRecord(
            broker_id=registration.broker_id,
            broker_epoch=registration.broker_epoch,
            fenced=FLAG_SET,
            in_controlled_shutdown=FLAG_CLEAR if registration.in_controlled_shutdown else FLAG_UNCHANGED,
        )
        # Proposed before the working image applies it (catch_up checks the
        # state then); the state the batch reaches is the transition's.
        self._queue([record], now_ms, changes=changes, target=(registration.broker_id, target))
        self._expire_as(registration.broker_id, target)

    def _unfence(self, registration: BrokerRegistration, now_ms: int) -> None:
        """Unfence, then elect leaders for offline partitions the broker can
        now lead (KIP-631: unfencing re-elects ``partitionsWithNoLeader``)."""
        target = self._transition(registration, BrokerEvent.UNFENCE)
        broker_id = registration.broker_id
        working = self.working_image
        records: list[Record] = [
            BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=registration.broker_epoch, fenced=FLAG_CLEAR
            )
        ]
        leaderless = working.partitions_without_leader()
        # The Online set only when there is something to elect: every broker
        # unfences through here, 5,000 of them after a controller failover.
        online = set(working.brokers_in_state(BrokerState.ONLINE)) if leaderless else set()
        online.add(broker_id)
        for topic_id, partition_id in leaderless:
            partition = working.partition(topic_id, partition_id)
            topic = working.topic_by_id(topic_id)
            assert partition is not None and topic is not None
            change = elect_leader(
                partition, is_acceptable=online.__contains__, unclean_allowed=topic.unclean_leader_election
            )
            if change is not None:
                records.append(change)
        self._queue(records, now_ms)
        self._check_state(broker_id, target)
        self._sync_expiry(broker_id)

    def _begin_controlled_shutdown(self, registration: BrokerRegistration, now_ms: int) -> None:
        """Online -> Stopping: move leaderships and ISR memberships off the
        broker and mark it in controlled shutdown, in one batch; the batch's
        end offset is what the other brokers must fetch past."""
        target = self._transition(registration, BrokerEvent.SHUTDOWN_REQUESTED)
        broker_id = registration.broker_id
        changes = self._removal_changes(broker_id)
        record = BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=registration.broker_epoch, in_controlled_shutdown=FLAG_SET
        )
        session = self._sessions[broker_id]
        session.controlled_shutdown_end_offset = None
        count = len(changes) + 1

        def committed(first_offset: int) -> None:
            session.controlled_shutdown_end_offset = first_offset + count

        self._queue([record], now_ms, committed, changes=changes, target=(broker_id, target))
        self._expire_as(broker_id, target)

    def _complete_controlled_shutdown(self, registration: BrokerRegistration, now_ms: int) -> None:
        """Stopping -> Offline: fenced, still marked in controlled shutdown
        (a clean shutdown; Kafka's SHUTDOWN_NOW)."""
        target = self._transition(registration, BrokerEvent.SHUTDOWN_COMPLETED)
        record = BrokerRegistrationChangeRecord(
            broker_id=registration.broker_id, broker_epoch=registration.broker_epoch, fenced=FLAG_SET
        )
        self._queue([record], now_ms)
        self._check_state(registration.broker_id, target)
        self._sync_expiry(registration.broker_id)

    def _shut_down_fenced(self, registration: BrokerRegistration, now_ms: int) -> None:
        """Fenced -> Offline: a fenced broker leads nothing, so it may go at
        once (KIP-631: FENCED + WantShutDown -> SHUTDOWN_NOW)."""
        target = self._transition(registration, BrokerEvent.SHUTDOWN_REQUESTED)
        record = BrokerRegistrationChangeRecord(
            broker_id=registration.broker_id, broker_epoch=registration.broker_epoch, in_controlled_shutdown=FLAG_SET
        )
        self._queue([record], now_ms)
        self._check_state(registration.broker_id, target)

    # ------------------------------------------------------------------
    # Time
    # ------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Let time pass: fence every unfenced broker not heard from for
        longer than the session timeout (one batch each, oldest first, so each
        fencing sees the previous one), and write a NoOpRecord when the log
        has been idle for ``no_op_interval_ms`` (KIP-835)."""
        if self._working is None or self._out_of_sync:
            return
        deadline_ms = now_ms - self.config.session_timeout_ms
        while self._expiry_order:
            broker_id = next(iter(self._expiry_order))
            if self._sessions[broker_id].last_contact_ms >= deadline_ms:
                break
            registration = self.working_image.broker(broker_id)
            assert registration is not None
            logger.info("broker %d: no heartbeat for %d ms, fencing it", broker_id, self.config.session_timeout_ms)
            self._fence(registration, BrokerEvent.SESSION_EXPIRED, now_ms)
        interval_ms = self.config.no_op_interval_ms
        if interval_ms and now_ms - self._last_write_ms >= interval_ms:
            self._queue([NoOpRecord()], now_ms)

    def next_tick_due_ms(self) -> int | None:
        """The earliest ``now_ms`` at which ``tick`` may act: the session
        of the broker heard from least recently expires (``tick`` fences
        it once more than ``session_timeout_ms`` has passed), or the no-op
        interval runs out. None while ``tick`` does nothing (inactive,
        resynchronising, no unfenced broker and no no-op interval); any
        request or heartbeat may bring it nearer, so ask again after one."""
        if self._working is None or self._out_of_sync:
            return None
        due_ms = None
        if self._expiry_order:
            broker_id = next(iter(self._expiry_order))
            due_ms = self._sessions[broker_id].last_contact_ms + self.config.session_timeout_ms + 1
        interval_ms = self.config.no_op_interval_ms
        if interval_ms:
            no_op_ms = self._last_write_ms + interval_ms
            if due_ms is None or no_op_ms < due_ms:
                due_ms = no_op_ms
        return due_ms

    # ------------------------------------------------------------------
    # Requests
    # ------------------------------------------------------------------

    def handle_request(self, request: Request, now_ms: int) -> Reply:
        """Handle an admin or broker request. See ``Reply`` for what the
        caller does with the result.

        Raises ``TypeError`` for an object that is not a controller request
        (the caller's fault); everything a remote can send is answered.
        """
        if self._working is None or self._out_of_sync:
            reason = "not the active controller" if self._working is None else "the controller is resynchronising"
            return Reply(response=error_response(request, ErrorCode.NOT_LEADER, reason))
        match request:
            case RegisterBrokerRequest():
                return self._register_broker(request, now_ms)
            case UnregisterBrokerRequest():
                return self._unregister_broker(request, now_ms)
            case CreateTopicsRequest():
                return self._create_topics(request, now_ms)
            case DeleteTopicsRequest():
                return self._delete_topics(request, now_ms)
            case DescribeClusterRequest():
                return self._read(request.linearizable, lambda: self.describe_cluster(now_ms))
            case DescribeTopicsRequest():
                names = request.names
                return self._read(request.linearizable, lambda: self.describe_topics(names))
            case ListTopicsRequest():
                after = request.after
                return self._read(request.linearizable, lambda: self.list_topics(after))
            case RegisterControllerRequest():
                return self._register_controller(request, now_ms)
            case DescribeControllersRequest():
                return self._read(request.linearizable, self.describe_controllers)
        raise TypeError(f"not a controller request: {type(request).__name__}")

    def _read(self, linearizable: bool, answer: Callable[[], Response]) -> Reply:
        if linearizable:
            return Reply(on_read_confirmed=answer)
        return Reply(response=answer())

    def _register_broker(self, request: RegisterBrokerRequest, now_ms: int) -> Reply:
        """KIP-631 registration with KIP-380 bounce detection."""
        if request.cluster_id != self.config.cluster_id:
            return _reply(
                RegisterBrokerResponse(
                    error=ErrorCode.INCONSISTENT_CLUSTER_ID,
                    message=f"this is cluster {self.config.cluster_id!r}, not {request.cluster_id!r}",
                )
            )
        working = self.working_image
        broker_id = request.broker_id
        voters = self._voters
        if working.controller(broker_id) is not None or (voters is not None and voters.get(broker_id) is not None):
            # One id space for controllers and brokers (KIP-631 node.id): a
            # registered controller's id, or a voter's (one that has not
            # registered yet, or never will: a static voter of a cluster
            # whose controllers are not pykraft's). A broker fetching the
            # metadata log under a voter's id would have its fetch offsets
            # taken for the voter's acknowledgements; the leader refuses
            # such Fetches (INCONSISTENT_VOTER_SET), and this refusal stops
            # the broker with the reason.
            return _reply(
                RegisterBrokerResponse(
                    error=ErrorCode.INVALID_REQUEST,
                    message=(
                        f"broker id {broker_id} is controller {broker_id}'s id: give the broker an id no "
                        f"controller has (brokers and controllers share one id space)"
                    ),
                )
            )
        existing = working.broker(broker_id)
        if existing is not None and existing.incarnation_id == request.incarnation_id:
            return self._register_again(request, existing, now_ms)
        records: list[Record] = []
        changes: list[PartitionChange] = []
        if existing is not None:
            state = existing.state
            session = self._sessions[broker_id]
            silent_ms = now_ms - session.last_contact_ms
            # Two live processes with one id is a misconfiguration (KIP-631
            # DUPLICATE_BROKER_REGISTRATION). But a previous incarnation that
            # has missed a heartbeat interval, or shut down cleanly (Offline,
            # or Stopping: KAFKA-19047), is a bounce (KIP-380), handled now
            # rather than after the whole session timeout.
            if state in (BrokerState.FENCED, BrokerState.ONLINE) and silent_ms < self.config.heartbeat_interval_ms:
                return _reply(
                    RegisterBrokerResponse(
                        error=ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                        message=(
                            f"broker {broker_id} incarnation {existing.incarnation_id!r} (epoch "
                            f"{existing.broker_epoch}) was heard from {silent_ms} ms ago"
                        ),
                    )
                )
            next_state(state, BrokerEvent.REGISTER)
            if state in _UNFENCED:
                # KIP-380 "onBrokerFailure(bounced) first, then
                # onBrokerStartUp": the old generation's leaderships and ISR
                # memberships go, then its fence, then the new registration.
                changes = self._removal_changes(broker_id)
                records.append(
                    BrokerRegistrationChangeRecord(
                        broker_id=broker_id,
                        broker_epoch=existing.broker_epoch,
                        fenced=FLAG_SET,
                        in_controlled_shutdown=FLAG_CLEAR if existing.in_controlled_shutdown else FLAG_UNCHANGED,
                    )
                )
        else:
            next_state(BrokerState.OFFLINE, BrokerEvent.REGISTER)
        records.append(
            RegisterBrokerRecord(
                broker_id=broker_id,
                incarnation_id=request.incarnation_id,
                listeners=request.listeners,
                rack=request.rack,
            )
        )
        # KIP-631: the broker epoch is the offset of the registration record,
        # the batch's last (after the changes, which _write puts first).
        index = len(changes) + len(records) - 1
        reply = self._write_reply(
            records, now_ms, lambda first_offset: RegisterBrokerResponse(broker_epoch=first_offset + index), changes
        )
        self._sessions[broker_id] = _Session(last_contact_ms=now_ms)
        self._check_state(broker_id, BrokerState.FENCED)
        self._sync_expiry(broker_id)
        return reply

    def _register_again(self, request: RegisterBrokerRequest, existing: BrokerRegistration, now_ms: int) -> Reply:
        """The same incarnation again: a retry, answered with the same epoch
        (KIP-631)."""
        if existing.listeners != request.listeners or existing.rack != request.rack:
            return _reply(
                RegisterBrokerResponse(
                    error=ErrorCode.INVALID_REQUEST,
                    message="a registration retry must carry the same listeners and rack",
                )
            )
        session = self._sessions[request.broker_id]
        session.last_contact_ms = max(session.last_contact_ms, now_ms)
        if request.broker_id in self._expiry_order:
            del self._expiry_order[request.broker_id]
            self._expiry_order[request.broker_id] = None
        committed = self.image.broker(request.broker_id)
        if committed is not None and committed.incarnation_id == request.incarnation_id:
            return _reply(RegisterBrokerResponse(broker_epoch=committed.broker_epoch))
        # The first registration is still in flight: answer once a no-op
        # behind it commits, from the committed image.
        broker_id, incarnation_id = request.broker_id, request.incarnation_id

        def respond(_first_offset: int) -> RegisterBrokerResponse:
            registration = self.image.broker(broker_id)
            if registration is None or registration.incarnation_id != incarnation_id:
                return RegisterBrokerResponse(
                    error=ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                    message=f"broker {broker_id} was registered again by another incarnation",
                )
            return RegisterBrokerResponse(broker_epoch=registration.broker_epoch)

        return self._write_reply([NoOpRecord()], now_ms, respond)

    def _register_controller(self, request: RegisterControllerRequest, now_ms: int) -> Reply:
        """KIP-919: record where a controller listens, the directory it
        votes with and the features it supports; answered once committed.
        The same registration again (a retry) writes nothing new: it is
        answered once a no-op behind the first commits. Unlike a broker's,
        a controller's registration has no epoch and no session: a
        controller's liveness is the quorum's to judge (check quorum,
        elections), and what brokers need from the record (where the
        controllers are) does not go stale when one is down."""
        if request.cluster_id != self.config.cluster_id:
            return _reply(
                RegisterControllerResponse(
                    error=ErrorCode.INCONSISTENT_CLUSTER_ID,
                    message=f"this is cluster {self.config.cluster_id!r}, not {request.cluster_id!r}",
                )
            )
        record = RegisterControllerRecord(
            controller_id=request.controller_id,
            incarnation_id=request.incarnation_id,
            listeners=request.listeners,
            directory_id=request.directory_id,
            features=request.features,
        )
        existing = self.working_image.controller(request.controller_id)
        same = existing is not None and (
            existing.incarnation_id,
            existing.listeners,
            existing.directory_id,
            existing.features,
        ) == (record.incarnation_id, record.listeners, record.directory_id, record.features)
        return self._write_reply(
            [NoOpRecord() if same else record], now_ms, lambda _first_offset: RegisterControllerResponse()
        )

    def describe_controllers(self) -> DescribeControllersResponse:
        """The committed image's registered controllers, with its offset."""
        image = self.image
        return DescribeControllersResponse(
            offset=image.offset,
            controllers=tuple(
                ControllerDescription(
                    controller_id=c.controller_id,
                    incarnation_id=c.incarnation_id,
                    listeners=c.listeners,
                    directory_id=c.directory_id,
                    features=c.features,
                )
                for _, c in sorted(image.controllers.items())
            ),
        )

    def _unregister_broker(self, request: UnregisterBrokerRequest, now_ms: int) -> Reply:
        broker_id = request.broker_id
        registration = self.working_image.broker(broker_id)
        if registration is None:
            return _reply(
                UnregisterBrokerResponse(
                    error=ErrorCode.BROKER_ID_NOT_REGISTERED, message=f"broker {broker_id} is not registered"
                )
            )
        target = next_state(registration.state, BrokerEvent.UNREGISTER)
        changes = self._removal_changes(broker_id)
        record = UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=registration.broker_epoch)
        reply = self._write_reply([record], now_ms, lambda _first_offset: UnregisterBrokerResponse(), changes)
        self._sessions.pop(broker_id, None)
        self._check_state(broker_id, target)
        self._sync_expiry(broker_id)
        return reply

    def _create_topics(self, request: CreateTopicsRequest, now_ms: int) -> Reply:
        working = self.working_image
        online = [
            (broker_id, working.brokers[broker_id].rack)
            for broker_id in working.brokers_in_state(BrokerState.ONLINE)
        ]
        name_counts = Counter(topic.name for topic in request.topics)
        results: list[CreateTopicResult] = []
        records: list[Record] = []
        partitions_so_far = 0
        ids_taken: set[str] = set()
        for new in request.topics:
            name = new.name
            problem = _topic_problem(new, name_counts[name], working, len(online), self.config)
            if problem is not None:
                code, message = problem
                results.append(CreateTopicResult(name=name, error=code, message=message))
                continue
            if partitions_so_far + new.partitions > self.config.max_partitions_per_request:
                results.append(
                    CreateTopicResult(
                        name=name,
                        error=ErrorCode.INVALID_PARTITIONS,
                        message=f"more than {self.config.max_partitions_per_request} partitions in one request",
                    )
                )
                continue
            topic_id = self._new_topic_id(name, self._next_write_offset + len(records), ids_taken)
            ids_taken.add(topic_id)
            records.append(
                TopicRecord(name=name, topic_id=topic_id, unclean_leader_election=new.unclean_leader_election)
            )
            # Rotate the first replica by the partitions that exist, so that
            # leadership spreads evenly across topics.
            assignments = place_replicas(
                online,
                partition_count=new.partitions,
                replication_factor=new.replication_factor,
                start=working.partition_count + partitions_so_far,
            )
            for partition_id, replicas in enumerate(assignments):
                records.append(
                    PartitionRecord(
                        topic_id=topic_id,
                        partition_id=partition_id,
                        replicas=replicas,
                        isr=replicas,
                        leader=replicas[0],
                    )
                )
            partitions_so_far += new.partitions
            results.append(CreateTopicResult(name=name, topic_id=topic_id))
        response = CreateTopicsResponse(results=tuple(results))
        if not records:
            return _reply(response)
        return self._write_reply(records, now_ms, lambda _first_offset: response)

    def _new_topic_id(self, name: str, offset: int, taken: set[str]) -> str:
        """A topic id unique in this log, without randomness: a hash of the
        cluster, the name and the offset of its TopicRecord, printed as Kafka
        prints a Uuid (22 characters of URL-safe base64)."""
        working = self.working_image
        attempt = 0
        while True:
            digest = hashlib.sha256(f"{self.config.cluster_id}/{name}/{offset}/{attempt}".encode()).digest()[:16]
            topic_id = base64.urlsafe_b64encode(digest).decode().rstrip("=")
            if topic_id not in taken and working.topic_by_id(topic_id) is None:
                return topic_id
            attempt += 1

    def _delete_topics(self, request: DeleteTopicsRequest, now_ms: int) -> Reply:
        working = self.working_image
        name_counts = Counter(request.names)
        results: list[DeleteTopicResult] = []
        records: list[Record] = []
        for name in request.names:
            topic = working.topic(name)
            if name_counts[name] > 1:
                results.append(
                    DeleteTopicResult(name=name, error=ErrorCode.INVALID_REQUEST, message="named twice in one request")
                )
            elif topic is None:
                results.append(
                    DeleteTopicResult(
                        name=name, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message=f"no topic named {name!r}"
                    )
                )
            else:
                records.append(RemoveTopicRecord(topic_id=topic.topic_id))
                results.append(DeleteTopicResult(name=name))
        response = DeleteTopicsResponse(results=tuple(results))
        if not records:
            return _reply(response)
        return self._write_reply(records, now_ms, lambda _first_offset: response)

    # ------------------------------------------------------------------
    # Describe (from the committed image; leader-local unless linearizable)
    # ------------------------------------------------------------------

    def describe_cluster(self, now_ms: int | None = None) -> DescribeClusterResponse:
        """The committed image's brokers and counts, with its offset; with
        ``now_ms``, how long ago each broker's last heartbeat was heard."""
        image = self.image

        def heard_ms_ago(broker_id: int) -> int | None:
            session = self._sessions.get(broker_id)
            if now_ms is None or session is None:
                return None
            return max(0, now_ms - session.last_contact_ms)

        brokers = tuple(
            BrokerDescription(
                broker_id=registration.broker_id,
                broker_epoch=registration.broker_epoch,
                incarnation_id=registration.incarnation_id,
                state=registration.state.value,
                listeners=registration.listeners,
                rack=registration.rack,
                last_heartbeat_ms_ago=heard_ms_ago(registration.broker_id),
            )
            for _, registration in sorted(image.brokers.items())
        )
        return DescribeClusterResponse(
            offset=image.offset,
            cluster_id=self.config.cluster_id,
            brokers=brokers,
            topic_count=len(image.topics),
            partition_count=image.partition_count,
            offline_partition_count=len(image.partitions_without_leader()),
        )

    def list_topics(self, after: str | None) -> ListTopicsResponse:
        """The committed image's topics in name order from after ``after``,
        at most ``LIST_TOPICS_PAGE_MAX``; ``more`` when others follow."""
        image = self.image
        page, more = image.topic_names_after(after, LIST_TOPICS_PAGE_MAX)
        listings = []
        for name in page:
            topic = image.topics[name]
            listings.append(
                TopicListing(name=name, topic_id=topic.topic_id, partition_count=image.partition_count_of(name))
            )
        return ListTopicsResponse(offset=image.offset, topics=tuple(listings), more=more)

    def describe_topics(self, names: tuple[str, ...] | None) -> DescribeTopicsResponse:
        """The committed image's topics ``names`` (all when None), with its
        offset; an unknown name gets UNKNOWN_TOPIC_OR_PARTITION. More than
        ``DESCRIBE_PARTITIONS_MAX`` partitions in all are refused with
        INVALID_REQUEST, counted before any is described."""
        image = self.image
        wanted = sorted(image.topics) if names is None else names
        partitions_wanted = sum(image.partition_count_of(name) for name in wanted if image.topic(name) is not None)
        if partitions_wanted > DESCRIBE_PARTITIONS_MAX:
            which = "every topic holds" if names is None else f"the {len(wanted)} topics asked for hold"
            return DescribeTopicsResponse(
                error=ErrorCode.INVALID_REQUEST,
                message=(
                    f"{which} {partitions_wanted} partitions, more than one answer describes "
                    f"({DESCRIBE_PARTITIONS_MAX}): name fewer topics (ListTopics names them all)"
                ),
            )
        descriptions = []
        for name in wanted:
            topic = image.topic(name)
            if topic is None:
                descriptions.append(TopicDescription(name=name, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            partitions = tuple(
                PartitionDescription(
                    partition_id=p.partition_id,
                    replicas=p.replicas,
                    isr=p.isr,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                )
                for p in image.partitions_of(name)
            )
            descriptions.append(
                TopicDescription(
                    name=name,
                    topic_id=topic.topic_id,
                    unclean_leader_election=topic.unclean_leader_election,
                    partitions=partitions,
                )
            )
        return DescribeTopicsResponse(offset=image.offset, topics=tuple(descriptions))


def _reply(response: Response) -> Reply:
    return Reply(response=response)


def _topic_problem(
    new: Any, name_count: int, working: ClusterImage, online_count: int, config: ControllerConfig
) -> tuple[ErrorCode, str] | None:
    """Why topic ``new`` cannot be created, as (error, message), or None."""
    problem = topic_name_problem(new.name)
    if problem is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, problem
    if name_count > 1:
        return ErrorCode.INVALID_REQUEST, f"topic {new.name!r} is named twice in one request"
    if working.topic(new.name) is not None:
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {new.name!r} already exists"
    if new.partitions < 1:
        return ErrorCode.INVALID_PARTITIONS, f"a topic needs at least one partition, got {new.partitions}"
    if new.partitions > config.max_partitions_per_request:
        return ErrorCode.INVALID_PARTITIONS, f"at most {config.max_partitions_per_request} partitions per request"
    if new.replication_factor < 1:
        return ErrorCode.INVALID_REPLICATION_FACTOR, f"replication factor must be >= 1, got {new.replication_factor}"
    if new.replication_factor > online_count:
        return (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {new.replication_factor} needs as many online brokers; {online_count} are online",
        )
    return None
