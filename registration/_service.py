"""The controller as a quorum service: what a ``kraft-controller`` process
runs.

- ``ControllerStateMachine``: the replicated state of a controller node —
  the ``ClusterImage`` (registration records) beside a key-value register
  map (the harness's register workload); records are told apart by their
  first element.
- ``ControllerApplication``: adapts the sans-IO ``Controller`` to the quorum
  runtime's ``LeaderApplication``: requests arrive as msgpack payloads
  (``[wire_name, [fields]]``) and answers leave the same way. While active
  it writes node events for the broker-state decisions its committed image
  applies (``broker_registration``, ``controller_broker_state``).
- ``open_controller_node``: a quorum voter running all of it.

Everything but ``open_controller_node`` is sans-IO: the simulator imports
this module (and hosts ``ControllerApplication`` in ``quorum.ReplicaHost``,
as the runtime does) without the trio runtime, which
``open_controller_node`` imports when called.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

from quorum import Entry, KeyValueStateMachine, VoterSet

from ._controller import Controller, ControllerConfig, Proposal
from ._errors import ErrorCode, RecordDecodeError
from ._image import BrokerRegistration, ClusterImage
from ._lifecycle import BrokerState
from ._records import (
    FLAG_SET,
    BrokerRegistrationChangeRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
    decode_record,
)
from ._authorization import refuse_controller_request
from ._requests import RegisterControllerRequest, decode_message, encode_message

if TYPE_CHECKING:
    from quorum.runtime import NodeConfig, QuorumNodeHandle

logger = logging.getLogger("pykraft.controller")


# Registration records are msgpack ``[type_code:int, version, ...]``: a
# fixarray header, then a fixint (ControllerStateMachine.apply tells them
# so); key-value records start with a key (bytes) or ``"cas"``.
# Records that change a broker's registration (its type code is the byte
# after the array header).
_BROKER_RECORD_TYPES = frozenset(
    (RegisterBrokerRecord.TYPE_CODE, UnregisterBrokerRecord.TYPE_CODE, BrokerRegistrationChangeRecord.TYPE_CODE)
)

#: ``(offset, before, after)``: the registration record at ``offset``
#: changed a broker's registration from ``before`` to ``after`` (None:
#: not registered).
BrokerChangeObserver = Callable[[int, BrokerRegistration | None, BrokerRegistration | None], None]


class ControllerStateMachine:
    """The cluster image and the register map, as one quorum state machine.

    ``broker_observer``, when set, is told every broker registration change
    the committed image applies, one record at a time."""

    # The host may hand committed records over in runs, not one per call
    # (quorum.StateMachine): the image logs and skips a record it cannot
    # decode or that does not fit, identically on every replica, and never
    # raises for a record (ClusterImage.apply); the register map declares
    # the same; the broker observer's event log catches its own errors.
    # One record per call cost a fence's 10,001 records on every voter
    # about 40 % more CPU than the run in one call: no collector pause, no
    # index updates made together (docs/benchmarks.md, "The fence, again").
    # A bug that raises all the same stops the node, as the host documents,
    # rather than leaving replicas to differ.
    apply_never_raises = True

    def __init__(self) -> None:
        self.image = ClusterImage()
        self.registers = KeyValueStateMachine()
        self.broker_observer: BrokerChangeObserver | None = None

    def apply(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        # Registration records apart from key-value ones (see above), in
        # one pass: a fence hands a voter 10,001 entries at once, and two
        # passes calling a function per entry cost 2 ms of its apply
        # (docs/benchmarks.md, "The fence, a fifth time").
        metadata: list[Entry] = []
        registers: list[Entry] = []
        to_metadata, to_registers = metadata.append, registers.append
        for entry in entries:
            data = entry[3]  # Entry.data; an Entry is a named tuple
            if len(data) >= 2 and 0x90 <= data[0] <= 0x9F and data[1] <= 0x7F:
                to_metadata(entry)
            else:
                to_registers(entry)
        if metadata:
            if self.broker_observer is None:
                self.image.apply(metadata)
            else:
                self._apply_observed(metadata, self.broker_observer)
        return self.registers.apply(registers) if registers else {}

    def _apply_observed(self, metadata: list[Entry], observer: BrokerChangeObserver) -> None:
        """``image.apply``, but each broker record alone, so its before and
        after are known; runs of other records (partition changes: most of
        a big batch) go through in one call."""
        run: list[Entry] = []
        for entry in metadata:
            if entry.data[1] not in _BROKER_RECORD_TYPES:
                run.append(entry)
                continue
            if run:
                self.image.apply(run)
                run = []
            try:
                broker_id = decode_record(entry.data).broker_id  # type: ignore[union-attr]
            except RecordDecodeError:
                self.image.apply([entry])  # logged and skipped there
                continue
            before = self.image.broker(broker_id)
            self.image.apply([entry])
            after = self.image.broker(broker_id)
            if after is not before:  # unchanged: already applied, or refused
                observer(entry.offset, before, after)
        if run:
            self.image.apply(run)

    def query(self, query: bytes) -> bytes | None:
        return self.registers.query(query)

    def snapshot(self) -> bytes:
        return msgpack.packb([self.image.snapshot(), self.registers.snapshot()], use_bin_type=True)

    def restore(self, data: bytes) -> None:
        image, registers = msgpack.unpackb(data, raw=False)
        self.image.restore(image)
        self.registers.restore(registers)


@dataclass(slots=True)
class _Reply:
    """The runtime's view of a controller ``Reply`` (answers as payloads)."""

    response: bytes | None = None
    records: list[bytes] = field(default_factory=list)
    on_committed: Callable[[int], bytes] | None = None
    on_read_confirmed: Callable[[], bytes] | None = None


class ControllerApplication:
    """``LeaderApplication`` for the quorum runtime, around ``Controller``.

    Given ``state_machine`` and ``emit`` (a node event sink), it reports,
    while active, each broker-state decision as its committed image applies
    it: one event per state change, none per heartbeat. Standby
    controllers stay silent (a restarted one replays old records)."""

    def __init__(
        self,
        controller: Controller,
        image: ClusterImage,
        *,
        state_machine: ControllerStateMachine | None = None,
        emit: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.controller = controller
        self.image = image
        self.metrics: Any = None  # the runtime's Metrics, once the node is open
        self.heartbeat_seconds: Any = None  # its heartbeat histogram, likewise
        self._state_machine = state_machine
        self._emit = emit if state_machine is not None else None
        # Which decision the next fence records come from, for the metric.
        self._fence_causes = "session expired"
        # Fence records proposed, by predicted offset -> cause: the applied
        # record says "fenced", not why.
        self._fence_cause_at: dict[int, str] = {}

    def activate(self, now_ms: int, next_write_offset: int) -> None:
        self.controller.activate(now_ms, next_write_offset)
        if self._state_machine is not None and (self._emit is not None or self.metrics is not None):
            self._state_machine.broker_observer = self._broker_changed
        logger.info("controller active at offset %d", next_write_offset)

    def deactivate(self) -> None:
        self.controller.deactivate()
        if self._state_machine is not None:
            self._state_machine.broker_observer = None
        self._fence_cause_at.clear()
        logger.info("controller inactive")

    def _note_fences(self, records: Sequence[bytes], first_offset: int, cause: str) -> int:
        """Count the fence records of a batch predicted at ``first_offset``;
        remember their cause for the events."""
        fences = 0
        for index, data in enumerate(records):
            if len(data) >= 2 and data[1] == BrokerRegistrationChangeRecord.TYPE_CODE and _is_fence(data):
                fences += 1
                if self._emit is not None and first_offset >= 0:
                    self._fence_cause_at[first_offset + index] = cause
        return fences

    def _broker_changed(self, offset: int, before: BrokerRegistration | None, after: BrokerRegistration | None) -> None:
        if self.metrics is not None:
            old = before.state if before is not None else BrokerState.OFFLINE
            new = after.state if after is not None else BrokerState.OFFLINE
            if old is not new:
                self.metrics.add_to_counter(
                    "pykraft_controller_broker_state_transitions_total", 1,
                    "Broker state changes the active controller applied, by from and to state.",
                    from_state=old.value.lower(), to_state=new.value.lower(),
                )  # fmt: skip
        if self._emit is None:
            return
        cause = self._fence_cause_at.pop(offset, None)
        try:
            for event in broker_change_events(offset, before, after, fence_cause=cause):
                assert self._emit is not None
                self._emit(event)
        except Exception:  # noqa: BLE001 - the event log must never stop the controller
            logger.exception("cannot write the event for the record at offset %d", offset)

    def note_log_end(self, end_offset: int) -> None:
        self.controller.note_log_end(end_offset)

    def note_voters(self, voters: VoterSet) -> None:
        self.controller.note_voters(voters)

    def on_fetch(self, replica_id: int, extension: Any, fetch_offset: int, now_ms: int) -> Any:
        started = time.perf_counter()
        reply = self.controller.on_fetch(replica_id, extension, fetch_offset, now_ms)
        if self.heartbeat_seconds is not None:
            self.heartbeat_seconds.observe(time.perf_counter() - started)
        self._fence_causes = "requested by the broker"
        return reply

    def tick(self, now_ms: int) -> None:
        self._fence_causes = "session expired"
        self.controller.tick(now_ms)

    def next_tick_due_ms(self) -> int | None:
        return self.controller.next_tick_due_ms()

    def catch_up(self) -> None:
        self.controller.catch_up()

    def take_proposals(self) -> list[Proposal]:
        proposals = self.controller.take_proposals()
        if self.metrics is not None or self._emit is not None:
            for proposal in proposals:
                fences = self._note_fences(proposal.records, proposal.expected_first_offset, self._fence_causes)
                if fences and self.metrics is not None:
                    self.metrics.add_to_counter(
                        "pykraft_controller_fence_events_total", fences, "Brokers fenced, by cause.", cause=self._fence_causes
                    )
        return proposals

    def _count_request_error(self, request: str, error: str) -> None:
        if self.metrics is not None:
            self.metrics.add_to_counter(
                "pykraft_controller_request_errors_total", 1,
                "Controller requests (registrations, heartbeats' replies aside) answered with an error, by request and error.",
                request=request, error=error,
            )  # fmt: skip

    def collect_metrics(self, node: Any) -> list[Any]:
        """At scrape time: the controller's state (Kafka's
        ActiveControllerCount, ActiveBrokerCount, FencedBrokerCount,
        LastAppliedRecordOffset, LastCommittedRecordOffset). ``node`` is the
        quorum node handle; imports the exposition types on use (this
        module is otherwise sans-IO)."""
        from prometheus_client.core import GaugeMetricFamily

        label = str(node.runtime.config.node_id)
        active = self.controller.is_active
        brokers = GaugeMetricFamily(
            "pykraft_controller_brokers", "Registered brokers by state (committed image).", labels=["node", "state"]
        )
        for state in BrokerState:
            brokers.add_metric([label, state.value.lower()], len(self.image.brokers_in_state(state)))
        is_active = GaugeMetricFamily("pykraft_controller_active", "1 while this controller is the active one.", labels=["node"])
        is_active.add_metric([label], 1 if active else 0)
        runtime = node.runtime
        applied = GaugeMetricFamily(
            "pykraft_controller_last_applied_record_offset", "Offset of the last record the image applied, -1 if none.",
            labels=["node"],
        )  # fmt: skip
        applied.add_metric([label], runtime.host.applied_offset - 1)
        committed = GaugeMetricFamily(
            "pykraft_controller_last_committed_record_offset", "Offset of the last committed record, -1 if none.",
            labels=["node"],
        )  # fmt: skip
        # As far as this node knows: on a standby, its leader's high
        # watermark (its own stops at its log end, where it applies).
        committed.add_metric([label], runtime.host.applied_offset + runtime.apply_lag()[0] - 1)
        return [brokers, is_active, applied, committed]

    def handle_request(self, payload: bytes, now_ms: int) -> _Reply:
        try:
            request = decode_message(payload)
        except ValueError as error:
            logger.warning("malformed controller request: %s", error)
            self._count_request_error("malformed", "INVALID_REQUEST")
            return _Reply(response=_error_payload(f"malformed request: {error}"))
        try:
            reply = self.controller.handle_request(request, now_ms)
        except TypeError as error:  # a response type sent as a request, say
            self._count_request_error(type(request).__name__, "INVALID_REQUEST")
            return _Reply(response=_error_payload(str(error)))
        error_code = getattr(reply.response, "error", ErrorCode.NONE)
        if error_code is not ErrorCode.NONE:
            self._count_request_error(type(request).__name__, error_code.name)
        if reply.on_committed is not None:
            fences = self._note_fences(reply.records, reply.expected_first_offset, "bounce or unregistration")
            if fences and self.metrics is not None:
                self.metrics.add_to_counter(
                    "pykraft_controller_fence_events_total", fences, "Brokers fenced, by cause.", cause="bounce or unregistration"
                )
            on_committed = reply.on_committed
            return _Reply(records=list(reply.records), on_committed=lambda first: encode_message(on_committed(first)))
        if reply.on_read_confirmed is not None:
            on_read = reply.on_read_confirmed
            return _Reply(on_read_confirmed=lambda: encode_message(on_read()))
        assert reply.response is not None
        return _Reply(response=encode_message(reply.response))


def broker_change_events(
    offset: int, before: BrokerRegistration | None, after: BrokerRegistration | None, *, fence_cause: str | None = None
) -> list[dict[str, Any]]:
    """The node events (before the sink stamps them) for one applied record
    that changed a broker's registration: a ``broker_registration`` for a
    new registration, then a ``controller_broker_state`` when the state (as
    the controller sees it) or the epoch changed. ``fence_cause`` says why a
    fence record was written, when the caller knows.

    ``controller_broker_state`` is not ``broker_state``: that kind is the
    broker's own view, and the checker's fenced-broker-read check holds a
    broker to it; the controller decides earlier than the broker learns."""
    old = before.state if before is not None else BrokerState.OFFLINE
    new = after.state if after is not None else BrokerState.OFFLINE
    current = after if after is not None else before
    assert current is not None
    events: list[dict[str, Any]] = []
    registered = after is not None and (before is None or before.broker_epoch != after.broker_epoch)
    if registered:
        assert after is not None
        events.append(
            {
                "event": "broker_registration",
                "broker_id": after.broker_id,
                "broker_epoch": after.broker_epoch,
                "offset": offset,
                "incarnation_id": after.incarnation_id,
            }
        )
    if old is new and not registered:
        return events  # a flag that does not change the state
    if registered:
        cause = "registered" if before is None else f"registered a new incarnation (epoch {before.broker_epoch} replaced)"
    elif after is None:
        cause = "unregistered"
    elif new is BrokerState.ONLINE:
        cause = "unfenced"
    elif new is BrokerState.STOPPING:
        cause = "controlled shutdown started"
    elif new is BrokerState.OFFLINE:
        cause = "controlled shutdown completed" if old is BrokerState.STOPPING else "shut down while fenced"
    else:
        cause = f"fenced: {fence_cause}" if fence_cause else "fenced"
    events.append(
        {
            "event": "controller_broker_state",
            "broker_id": current.broker_id,
            "broker_epoch": current.broker_epoch,
            "state": new.value.lower(),
            "previous_state": old.value.lower(),
            "cause": cause,
            "offset": offset,
        }
    )
    return events


def _is_fence(data: bytes) -> bool:
    try:
        record = decode_record(data)
    except RecordDecodeError:
        return False
    return isinstance(record, BrokerRegistrationChangeRecord) and record.fenced == FLAG_SET


def _error_payload(message: str) -> bytes:
    return msgpack.packb(["error", [int(ErrorCode.INVALID_REQUEST), message[:500]]], use_bin_type=True)


#: The feature versions this code supports, as a controller registers them
#: (KIP-919 ``SupportedFeatures``): ``kraft.version`` 0 (a static voter
#: set) and 1 (KIP-853 dynamic voters).
SUPPORTED_FEATURES: tuple[tuple[str, int, int], ...] = (("kraft.version", 0, 1),)
#: The listener name a controller registers its quorum address under.
CONTROLLER_LISTENER = "CONTROLLER"


def registration_recorded(image: ClusterImage, request: RegisterControllerRequest) -> bool:
    """Does ``image`` hold exactly the registration ``request`` asks for
    (this incarnation, listeners, directory and features)? Until it does,
    the controller process registers (again)."""
    current = image.controller(request.controller_id)
    return current is not None and (
        current.incarnation_id,
        current.listeners,
        current.directory_id,
        current.features,
    ) == (request.incarnation_id, request.listeners, request.directory_id, request.features)


async def _register_controller(node: Any, config: Any, image: ClusterImage, request: RegisterControllerRequest) -> None:
    """KIP-919: while this node is a voter, register it as a controller
    with the active controller (which may be this node) until the
    committed image holds the registration, and again whenever it stops
    holding it; retried with a backoff. Over TLS the node's own
    certificate authorizes it. Never returns (cancel it)."""
    import trio

    from .client import AdminClient

    backoff_s = 0.1
    while True:
        if registration_recorded(image, request) or not node.runtime.node.is_voter:
            # Registered; or an observer (a node added later registers
            # once it votes).
            backoff_s = 0.1
            await trio.sleep(0.5)
            continue
        runtime = node.runtime
        # Every voter this node knows of, at the first endpoint the voter
        # set names, else its --voters address: a NOT_LEADER answer names
        # the leader (and where it listens) in any case.
        addresses = dict(config.voters)
        addresses[config.node_id] = ((config.listen or ("127.0.0.1", 0))[0], node.listen_port)  # the bound port
        bootstrap = [f"{voter_id}@{host}:{port}" for voter_id, (host, port) in sorted(addresses.items()) if port]
        for voter in runtime.node.voters.voters:
            if voter.endpoints and voter.node_id not in addresses:
                bootstrap.append(f"{voter.node_id}@{voter.endpoints[0]}")
        try:
            async with AdminClient(bootstrap, cluster_id=config.cluster_id, timeout_s=5.0, tls=config.tls) as admin:
                response = await admin.register_controller(request)
            if response.error:
                logger.info("node %d: controller registration refused: %s %s", config.node_id, response.error.name, response.message)
            else:
                logger.info("node %d: registered as a controller (incarnation %s)", config.node_id, request.incarnation_id)
                continue
        except Exception as error:  # noqa: BLE001 - any failure to reach the active controller is retried
            logger.debug("node %d: controller registration failed: %s", config.node_id, error)
        await trio.sleep(backoff_s)
        backoff_s = min(backoff_s * 2, 2.0)


@asynccontextmanager
async def open_controller_node(
    config: NodeConfig, controller_config: ControllerConfig | None = None
) -> AsyncIterator[QuorumNodeHandle]:
    """A quorum voter that runs the controller when it leads. Raises as
    ``open_quorum_node``."""
    # The trio runtime is imported here, on use: the rest of this module is
    # sans-IO and the simulator imports it.
    import trio

    from quorum.runtime import FINE_BUCKETS_S, EventLog, open_quorum_node

    machine = ControllerStateMachine()
    controller = Controller(controller_config or ControllerConfig(cluster_id=config.cluster_id), machine.image)
    events = EventLog(config.event_log)
    application = ControllerApplication(
        controller, machine.image, state_machine=machine, emit=events.emit if events.enabled else None
    )
    try:
        async with open_quorum_node(
            config,
            machine,
            leader_application=application,
            event_log=events,
            authorize_application=refuse_controller_request,
        ) as node:
            application.metrics = node.runtime.metrics
            node.runtime.metrics.add_collector(lambda: application.collect_metrics(node))
            application.heartbeat_seconds = node.runtime.metrics.histogram(
                "pykraft_controller_heartbeat_seconds", "Time to handle one broker heartbeat.", FINE_BUCKETS_S
            )
            # KIP-919: a fresh incarnation per process start.
            registration = RegisterControllerRequest(
                controller_id=config.node_id,
                incarnation_id=str(uuid.uuid4()),
                cluster_id=config.cluster_id,
                listeners=((CONTROLLER_LISTENER, (config.listen or ("", 0))[0], node.listen_port),),
                directory_id=node.runtime.config.directory_id,
                features=SUPPORTED_FEATURES,
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_register_controller, node, config, machine.image, registration)
                yield node
                nursery.cancel_scope.cancel()
    finally:
        events.close()
