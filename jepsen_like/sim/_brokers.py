"""Brokers and the controller in the deterministic simulator.

``BrokerSimulation`` is a ``Simulation`` whose voters run the real
controller and whose brokers are observer quorum nodes driven by the real
broker lifecycle, all from one seed:

- a **voter** is a ``quorum.ReplicaHost`` (the host the trio runtime
  drives) replaying the log into a ``ControllerStateMachine`` and hosting
  ``ControllerApplication`` as its leader application: activation, ticks,
  heartbeats, batches and requests go through the very code the
  ``kraft-controller`` process runs; the simulator only watches (trace
  lines, the KIP-380 check of every heartbeat answered);
- a **broker** is an observer ``ReplicaHost`` driven by a
  ``broker_agent.BrokerDriver`` — the driver ``broker_agent.BrokerAgent``
  runs: lifecycle, heartbeats through the fetch extension, image updates,
  timers and client answers. It is stepped right after every core step, so
  a reply's catch-up is judged exactly; RegisterBroker goes to a voter over
  the simulated network (partitions apply) and times out like the agent's.

Clients stand outside the network (like the register workload's): metadata
readers pick brokers, carry the broker epoch they last saw (KIP-380) and the
highest image offset they have seen, and move to the next broker on a
retriable error; an admin client creates topics through the active
controller.

Checked as events happen, beside the quorum's own invariants:

- ``stale-epoch-accepted``: a heartbeat, or a client request, carrying an
  older broker epoch than the broker's current one was acted on (KIP-380);
- ``broker-epoch-regress``: a broker id registered with an epoch not above
  its previous one;
- ``online-before-unfenced`` / ``served-before-unfenced``: a broker went
  Online, or answered a client, with an epoch the committed log never
  unfenced;
- ``served-while-not-online``: an answer from a broker that is not Online;
- ``non-monotonic-client``: a client saw an image older than one it had seen.

"Truth" is the committed log as the simulator saw it (first commit of each
offset on any node), replayed into a ``ControllerStateMachine`` of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker_agent import (
    Action,
    BrokerDriver,
    BrokerLifecycle,
    FetchAnswered,
    LifecycleConfig,
    MetadataRequest,
    MetadataResponse,
    Register,
    SetHeartbeat,
    StateChanged,
    Stop,
    WatchedMetadata,
)
from broker_agent import ErrorCode as BrokerErrorCode
from jepsen_like import HarnessInvariantError
from quorum import Entry, FetchRequest, NotLeaderError, ProposalLostError, QuorumConfig, ReadNotConfirmedError, RecordKind
from registration import (
    BrokerHeartbeat,
    BrokerRegistrationChangeRecord,
    BrokerState,
    Controller,
    ControllerApplication,
    ControllerConfig,
    ControllerStateMachine,
    CreateTopicsRequest,
    ErrorCode,
    HeartbeatReply,
    NewTopic,
    RecordDecodeError,
    RegisterBrokerRecord,
    RegisterBrokerRequest,
    Request,
    Response,
    UnregisterBrokerRecord,
    decode_message,
    decode_record,
    encode_message,
    error_response,
)

from ._cluster import US_PER_MS, InvariantViolation, SimNode, SimOptions, Simulation

#: Broker node ids are BROKER_ID_BASE + 1, + 2, ... (never a voter id).
BROKER_ID_BASE = 100
#: A session timeout no run reaches: the broker never self-fences.
_NEVER_MS = 10**12
READ_OPS = ("cluster_metadata", "describe_topic", "list_topics")


def sim_endpoint(node_id: int) -> str:
    """The endpoint a simulated voter is named at ("HOST:PORT")."""
    return f"n{node_id}.sim:9093"


@dataclass(slots=True)
class BrokerSimOptions(SimOptions):
    """``SimOptions`` plus the brokers' and the controller's settings.

    ``self_fencing`` and ``broker_epoch_checks`` exist only to prove that
    the scenarios' checks can fail: off, a broker never fences itself (its
    lifecycle gets a session timeout no run reaches), and broker epochs are
    ignored (a broker answers requests meant for another incarnation, and
    the controller's heartbeat handler is given the registered epoch in
    place of the one the heartbeat carried).
    """

    brokers: int = 3
    cluster_id: str = "pykraft-sim"
    session_timeout_ms: int = 3000
    heartbeat_interval_ms: int = 1000
    shutdown_timeout_ms: int = 15_000
    registration_timeout_ms: int = 2000
    no_op_interval_ms: int = 500
    self_fencing: bool = True
    broker_epoch_checks: bool = True
    # The controllers a broker is given (its replica's voter list, as
    # ``kraft-broker --bootstrap``); empty: every voter. One follower is
    # enough: its NOT_LEADER answers name the leader (KIP-853).
    broker_bootstrap: tuple[int, ...] = ()

    @classmethod
    def from_options(cls, options: SimOptions | None) -> BrokerSimOptions:
        """``options`` as broker options (defaults for the broker fields)."""
        if isinstance(options, BrokerSimOptions):
            return options
        if options is None:
            return cls()
        return cls(**{f.name: getattr(options, f.name) for f in dataclasses.fields(SimOptions)})

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(BROKER_ID_BASE + i for i in range(1, self.brokers + 1))

    @property
    def voter_ids(self) -> tuple[int, ...]:
        return tuple(range(1, self.voters + 1))

    @property
    def staleness_bound_ms(self) -> float:
        """design.md's promise for an Online broker's answers:
        session timeout + the check-quorum window (docs/broker.md)."""
        return self.session_timeout_ms + self.check_quorum_factor * self.fetch_timeout_ms

    def quorum_config(self, node_id: int, directory_id: str | None = None) -> QuorumConfig:
        """A voter's config, or a broker's: an observer given the voter
        list ``broker_bootstrap`` (when set) as a static list, as
        ``BrokerConfig`` gives a trio broker its ``bootstrap``."""
        config = SimOptions.quorum_config(self, node_id, directory_id)
        if node_id > BROKER_ID_BASE:
            config = dataclasses.replace(config, observer_only=True)  # as BrokerConfig's
        if not self.broker_bootstrap:
            return config
        # Where each voter "listens", so that NOT_LEADER answers name it as
        # a trio node's do (the simulated network routes by id).
        config = dataclasses.replace(config, voter_endpoints=tuple((voter, sim_endpoint(voter)) for voter in self.voter_ids))
        if node_id <= BROKER_ID_BASE:
            return config
        return dataclasses.replace(config, voters=self.broker_bootstrap, bootstrap_voters=(), directory_id=None)

    def controller_config(self) -> ControllerConfig:
        return ControllerConfig(
            cluster_id=self.cluster_id,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            no_op_interval_ms=self.no_op_interval_ms,
        )

    def lifecycle_config(self, broker_id: int) -> LifecycleConfig:
        return LifecycleConfig(
            broker_id=broker_id,
            session_timeout_ms=self.session_timeout_ms if self.self_fencing else _NEVER_MS,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            shutdown_timeout_ms=self.shutdown_timeout_ms,
        )

    def describe(self) -> dict[str, Any]:
        described = SimOptions.describe(self)
        described.update(
            brokers=self.brokers,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            shutdown_timeout_ms=self.shutdown_timeout_ms,
            staleness_bound_ms=self.staleness_bound_ms,
            self_fencing=self.self_fencing,
            broker_epoch_checks=self.broker_epoch_checks,
        )
        if self.broker_bootstrap:
            described.update(broker_bootstrap=list(self.broker_bootstrap))
        return described


# =========================================================================
# State machines (the simulator's machine interface around the real ones)
# =========================================================================


class SimControllerApplication(ControllerApplication):
    """The controller as a voter hosts it (``registration.ControllerApplication``),
    watched by the simulation: activation and deactivation are traced, and
    every heartbeat answered is checked (KIP-380). With
    ``broker_epoch_checks`` off it is handed the registered epoch in place
    of the one a heartbeat carried (test-only breakage)."""

    def __init__(self, sim: BrokerSimulation, node: SimNode, machine: ControllerStateMachine) -> None:
        controller = Controller(sim.broker_options.controller_config(), machine.image)
        super().__init__(controller, machine.image)
        self._sim = sim
        self._node = node

    def activate(self, now_ms: int, next_write_offset: int) -> None:
        super().activate(now_ms, next_write_offset)
        core = self._node.core
        assert core is not None
        self._sim._say(f"n{self._node.node_id} CONTROLLER active e{core.epoch} at offset {next_write_offset}")

    def deactivate(self) -> None:
        super().deactivate()
        self._sim._say(f"n{self._node.node_id} CONTROLLER inactive")

    def on_fetch(self, replica_id: int, extension: Any, fetch_offset: int, now_ms: int) -> Any:
        sent = extension if self._sim.broker_options.broker_epoch_checks else self._with_registered_epoch(extension)
        reply = super().on_fetch(replica_id, sent, fetch_offset, now_ms)
        self._sim._check_heartbeat(extension, reply)
        return reply

    def _with_registered_epoch(self, extension: Any) -> Any:
        try:
            heartbeat = BrokerHeartbeat.from_extension(extension)
        except (ValueError, TypeError):
            return extension
        registration = self.controller.working_image.broker(heartbeat.broker_id)
        if registration is None:
            return extension
        return dataclasses.replace(heartbeat, broker_epoch=registration.broker_epoch).to_extension()


# =========================================================================
# Brokers, clients, observations
# =========================================================================


@dataclass(slots=True, eq=False)
class BrokerProcess:
    """One incarnation of a broker process."""

    broker_id: int
    incarnation: int
    incarnation_id: str
    started_ms: float
    driver: BrokerDriver | None = None  # set once built (it needs the process)
    alive: bool = True
    stopped: bool = False
    stop_reason: str | None = None

    @property
    def lifecycle(self) -> BrokerLifecycle:
        assert self.driver is not None
        return self.driver.lifecycle


class _BrokerSimPort:
    """A simulated broker process's side of its ``BrokerDriver``."""

    def __init__(self, sim: BrokerSimulation, process: BrokerProcess) -> None:
        self.sim = sim
        self.process = process

    def perform(self, actions: list[Action]) -> None:
        self.sim._perform(self.process, actions)

    def fetches_answered(self, answered: list[FetchAnswered]) -> None:
        pass  # metrics only

    def image_applied(self) -> None:
        pass  # the agent reports partition roles; nobody subscribes here


@dataclass(frozen=True, slots=True)
class BrokerStateRecord:
    """A broker's own state change, as its lifecycle reported it."""

    time_ms: float
    broker_id: int
    incarnation_id: str
    old: BrokerState
    new: BrokerState
    event: str
    broker_epoch: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class TruthChange:
    """A broker's registration changed in the committed log."""

    time_ms: float
    offset: int
    broker_id: int
    broker_epoch: int | None
    old: BrokerState
    new: BrokerState


@dataclass(frozen=True, slots=True)
class HeartbeatSeen:
    """A heartbeat the active controller answered."""

    time_ms: float
    broker_id: int
    broker_epoch: int
    want_shutdown: bool
    error: ErrorCode


@dataclass(slots=True, eq=False)
class MetadataReader:
    """A simulated client of the brokers (what ``broker_agent.client``'s
    ``MetadataClient`` does, one request at a time): it asks
    ``brokers[index]``, carries the epoch it last saw for that broker and
    the highest image offset it has seen, and moves to the next broker on
    a retriable error or a timeout (a ``pinned`` reader never moves)."""

    process: int
    brokers: tuple[int, ...]
    index: int = 0
    pinned: bool = False
    known_epochs: dict[int, int] = field(default_factory=dict)
    highest_image_offset: int = 0
    busy: bool = False


def node_name(node_id: int) -> str:
    return f"b{node_id}" if node_id > BROKER_ID_BASE else f"n{node_id}"


# =========================================================================
# The simulation
# =========================================================================


class BrokerSimulation(Simulation):
    """Voters running the controller, brokers as observers, clients of both.
    See the module docstring."""

    def __init__(
        self,
        seed: int,
        options: SimOptions | None = None,
        *,
        trace: Callable[[str], None] | None = None,
        full_trace: bool = False,
    ) -> None:
        self.broker_options = BrokerSimOptions.from_options(options)
        self.processes: dict[int, BrokerProcess] = {}
        self.exited: dict[int, str] = {}  # broker id -> why its last process ended itself
        # Truth: the committed log, replayed.
        self.truth = ControllerStateMachine()
        self._truth_offset = 0
        self._truth_brokers: dict[int, tuple[int | None, BrokerState]] = {}
        self.truth_changes: list[TruthChange] = []
        self.highest_registered_epoch: dict[int, int] = {}
        self.ever_unfenced: set[tuple[int, int]] = set()
        # Observations
        self.broker_states: list[BrokerStateRecord] = []
        self.heartbeats_seen: list[HeartbeatSeen] = []
        self.registrations_sent = 0
        self.stale_epoch_refusals: list[tuple[float, int, int]] = []  # (time, broker, epoch asked)
        self.answers_by_broker: dict[int, dict[str, int]] = {}
        # Client requests a broker process holds: a crash resets their connections.
        self._reads_in_flight: dict[int, dict[int, Callable[[], None]]] = {}
        # Watchers the scenarios install (called synchronously, in order).
        self.state_watchers: list[Callable[[BrokerStateRecord], None]] = []
        self.truth_watchers: list[Callable[[int], None]] = []
        self.answer_watchers: list[Callable[[int, MetadataResponse], None]] = []
        super().__init__(seed, self.broker_options, trace=trace, full_trace=full_trace)
        for broker_id in self.broker_options.broker_ids:
            self.nodes[broker_id] = SimNode(broker_id, self.broker_options)
            self.max_epoch_seen[broker_id] = 0
            self._start(broker_id)

    def add_broker(self) -> int:
        """Start a new broker process (the next free id): it registers with
        the active controller, then heartbeats through its fetches. Its id."""
        broker_id = max([BROKER_ID_BASE, *(n for n in self.nodes if self.is_broker(n))]) + 1
        self.nodes[broker_id] = SimNode(broker_id, self.broker_options)
        self.max_epoch_seen[broker_id] = 0
        self._say(f"b{broker_id} ADDED")
        self._start(broker_id)
        return broker_id

    # =====================================================================
    # Time
    # =====================================================================

    def now_ms_int(self) -> int:
        """The brokers' clock: whole ms of virtual time."""
        return self.now_us // US_PER_MS

    def is_broker(self, node_id: int) -> bool:
        return node_id > BROKER_ID_BASE

    # =====================================================================
    # Processes
    # =====================================================================

    def _new_machine(self, node_id: int) -> Any:
        return WatchedMetadata() if self.is_broker(node_id) else ControllerStateMachine()

    def _new_application(self, node_id: int, machine: Any) -> Any:
        if self.is_broker(node_id):
            return None
        return SimControllerApplication(self, self.nodes[node_id], machine)

    def _start(self, node_id: int) -> None:
        super()._start(node_id)
        node = self.nodes[node_id]
        core = node.core
        assert core is not None
        if not self.is_broker(node_id):
            return
        process = BrokerProcess(
            broker_id=node_id,
            incarnation=node.incarnation,
            incarnation_id=f"b{node_id}-incarnation-{node.incarnation}",
            started_ms=self.now_ms,
        )
        host = node.host
        assert host is not None and isinstance(host.state_machine, WatchedMetadata)
        driver = BrokerDriver(
            self.broker_options.lifecycle_config(node_id),
            host,
            _BrokerSimPort(self, process),
            cluster_id=self.broker_options.cluster_id,
        )
        process.driver = driver
        host.state_machine.on_change = driver.note_image_changed
        self.processes[node_id] = process
        self.exited.pop(node_id, None)
        host.attach_fetch_extension(
            lambda: driver.provide(self.now_ms_int()), lambda extension: driver.consume(self.now_ms_int(), extension)
        )
        driver.start(self.now_ms_int())

    def crash(self, node_id: int) -> None:
        process = self.processes.get(node_id)
        if process is not None and self.nodes[node_id].core is not None:
            process.alive = False
            # The kernel resets the clients' connections: they learn at once.
            held = self._reads_in_flight.pop(node_id, {})
            for token in sorted(held):
                self._push(self._client_delay_us(), "action", 0, 0, held[token])
        super().crash(node_id)

    def restart(self, node_id: int) -> None:
        if self.nodes[node_id].core is None and self.is_broker(node_id):
            self._say(f"b{node_id} RESTART as incarnation {self.nodes[node_id].incarnation + 1}")
            self._start(node_id)
            return
        super().restart(node_id)

    def _step_event(self, event: Any) -> None:
        super()._step_event(event)
        if event.kind == "action":
            return
        node = self.nodes.get(event.node)
        if node is None or node.core is None or node.incarnation != event.incarnation:
            return
        if self.is_broker(node.node_id):
            self._drive_broker(node)

    # =====================================================================
    # The controller on the voters (hosted by their ReplicaHost)
    # =====================================================================

    def _check_heartbeat(self, extension: Any, reply: Any) -> None:
        try:
            heartbeat = BrokerHeartbeat.from_extension(extension)
            answer = HeartbeatReply.from_extension(reply)
        except (ValueError, TypeError):
            return
        self.heartbeats_seen.append(
            HeartbeatSeen(self.now_ms, heartbeat.broker_id, heartbeat.broker_epoch, heartbeat.want_shutdown, answer.error)
        )
        newest = self.highest_registered_epoch.get(heartbeat.broker_id, -1)
        if answer.error is ErrorCode.NONE and heartbeat.broker_epoch < newest:
            raise InvariantViolation(
                "stale-epoch-accepted",
                f"the controller acted on b{heartbeat.broker_id}'s heartbeat for epoch {heartbeat.broker_epoch}"
                f" (want_shutdown={heartbeat.want_shutdown}) after epoch {newest} was committed",
            )

    def _controller_call(
        self, node: SimNode, request: Request, respond: Callable[[Response, tuple[int, int] | None], None]
    ) -> None:
        """A request to the controller on voter ``node``, through its host
        (``ReplicaHost.application_request``). ``respond(response, (first,
        last))`` gets the offsets of a committed write, None otherwise; a
        write whose outcome is unknown gets no answer (its client times out)."""
        host = node.host
        assert host is not None

        def done(answer: Any, error: BaseException | None, offsets: tuple[int, int] | None) -> None:
            if error is None:
                respond(decode_message(answer), offsets)
            elif isinstance(error, NotLeaderError):
                respond(error_response(request, ErrorCode.NOT_LEADER, "not the active controller"), None)
            elif isinstance(error, ProposalLostError):
                respond(error_response(request, ErrorCode.NOT_LEADER, f"the write at offset {error.offset} was lost"), None)
            elif isinstance(error, ReadNotConfirmedError):
                respond(error_response(request, ErrorCode.NOT_LEADER, "leadership lost before the read"), None)

        host.application_request(encode_message(request), done)

    def active_controller(self) -> int | None:
        """The voter whose controller is active, in the highest epoch."""
        best: tuple[int, int] | None = None
        for node_id in self.broker_options.voter_ids:
            node = self.nodes[node_id]
            if node.host is not None and node.host.application_active:
                if best is None or node.core.epoch > best[0]:
                    best = (node.core.epoch, node_id)
        return best[1] if best else None

    # =====================================================================
    # Brokers (BrokerAgent's wiring, sans trio)
    # =====================================================================

    def _current(self, process: BrokerProcess) -> bool:
        return process.alive and self.processes.get(process.broker_id) is process

    def _drive_broker(self, node: SimNode) -> None:
        """Right after every core step of a broker: ``BrokerDriver.step``."""
        process = self.processes[node.node_id]
        if not self._current(process):
            return
        assert process.driver is not None
        process.driver.step(self.now_ms_int())

    def _perform(self, process: BrokerProcess, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Register):
                self._send_registration(process, action.attempt)
            elif isinstance(action, SetHeartbeat):
                pass  # the provider reads lifecycle.heartbeat for every Fetch
            elif isinstance(action, StateChanged):
                self._on_broker_state(process, action)
            elif isinstance(action, Stop):
                process.stopped = True
                process.stop_reason = action.reason
                self._say(f"b{process.broker_id} STOP ({action.reason})")
                self.schedule(0, lambda process=process: self._exit(process))

    def _on_broker_state(self, process: BrokerProcess, change: StateChanged) -> None:
        record = BrokerStateRecord(
            self.now_ms,
            process.broker_id,
            process.incarnation_id,
            change.old,
            change.new,
            change.event.value,
            change.broker_epoch,
            change.reason,
        )
        self.broker_states.append(record)
        epoch = "" if change.broker_epoch is None else f" e{change.broker_epoch}"
        self._say(f"b{process.broker_id}{epoch} {change.old.value} -> {change.new.value} ({change.event.value}: {change.reason})")
        if change.new is BrokerState.ONLINE and (process.broker_id, change.broker_epoch) not in self.ever_unfenced:
            raise InvariantViolation(
                "online-before-unfenced",
                f"b{process.broker_id} went Online with epoch {change.broker_epoch}, which the committed log never unfenced",
            )
        for watcher in list(self.state_watchers):
            watcher(record)

    def _exit(self, process: BrokerProcess) -> None:
        """The broker process ends itself after its lifecycle stopped."""
        if not self._current(process):
            return
        self.exited[process.broker_id] = process.stop_reason or "stopped"
        self._say(f"b{process.broker_id} EXIT")
        self.crash(process.broker_id)

    # -- registration -------------------------------------------------------

    def _node_to_node(self, src: int, dst: int, at_node: Callable[[SimNode], None]) -> None:
        """A request or answer over the simulated network (partitions, loss
        and duplication apply); dropped if ``dst``'s process changes first."""
        target = self.nodes[dst]
        for delay_ms in self.network.deliveries(src, dst):
            self._push(int(delay_ms * US_PER_MS), "client", dst, target.incarnation, at_node)

    def _send_registration(self, process: BrokerProcess, attempt: int) -> None:
        """RegisterBroker to the leader the observer knows (else the
        controllers it knows, in turn), timed out like the agent's
        registration task."""
        broker_id = process.broker_id
        assert process.driver is not None
        # The broker's own choice (``BrokerDriver.registration_target``):
        # its voter set always names a controller.
        target = process.driver.registration_target(attempt)
        assert target is not None and target in self.nodes
        request = RegisterBrokerRequest(
            broker_id=broker_id,
            incarnation_id=process.incarnation_id,
            cluster_id=self.broker_options.cluster_id,
            listeners=(("PLAINTEXT", f"b{broker_id}.sim", 9092),),
        )
        self.registrations_sent += 1
        self._say(f"b{broker_id} REGISTER attempt {attempt} -> n{target}")
        done = {"flag": False}

        def finish(response: Any) -> None:
            if done["flag"] or not self._current(process):
                return
            done["flag"] = True
            now = self.now_ms_int()
            assert process.driver is not None
            if response is None:
                process.driver.registration_failed(now, "timed out")
            else:
                if response.error is not ErrorCode.NONE:
                    self._say(f"b{broker_id} registration refused: {response.error.name} {response.message}")
                process.driver.registration_completed(now, response)

        def at_voter(voter: SimNode) -> None:
            def respond(response: Response, _offsets: tuple[int, int] | None) -> None:
                self._node_to_node(target, broker_id, lambda _node: finish(response))

            self._controller_call(voter, request, respond)

        self._node_to_node(broker_id, target, at_voter)
        self.schedule(self.broker_options.registration_timeout_ms, lambda: finish(None))

    # -- serving ------------------------------------------------------------

    def _serve(self, node: SimNode, request: MetadataRequest) -> MetadataResponse:
        """``BrokerDriver.serve`` (as ``BrokerAgent.answer``); then the
        simulator's checks of the answer."""
        process = self.processes[node.node_id]
        assert process.driver is not None
        sent = request if self.broker_options.broker_epoch_checks else dataclasses.replace(request, broker_epoch=None)
        response = process.driver.serve(sent.to_payload(), self.now_ms_int()).response
        self._check_answer(process, request, response)
        return response

    def _check_answer(self, process: BrokerProcess, request: MetadataRequest, response: MetadataResponse) -> None:
        broker_id = process.broker_id
        counts = self.answers_by_broker.setdefault(broker_id, {})
        counts[response.error.name] = counts.get(response.error.name, 0) + 1
        epoch = process.lifecycle.broker_epoch
        asked = request.broker_epoch
        if response.error is BrokerErrorCode.STALE_BROKER_EPOCH:
            self.stale_epoch_refusals.append((self.now_ms, broker_id, asked if asked is not None else -1))
        if response.error is not BrokerErrorCode.NONE:
            return
        if asked is not None and asked != epoch:
            raise InvariantViolation(
                "stale-epoch-accepted", f"b{broker_id} at epoch {epoch} answered a request meant for epoch {asked}"
            )
        if process.lifecycle.state is not BrokerState.ONLINE:
            raise InvariantViolation("served-while-not-online", f"b{broker_id} answered while {process.lifecycle.state.value}")
        if (broker_id, epoch) not in self.ever_unfenced:
            raise InvariantViolation(
                "served-before-unfenced", f"b{broker_id} answered with epoch {epoch}, which the committed log never unfenced"
            )
        for watcher in list(self.answer_watchers):
            watcher(broker_id, response)

    def broker_process(self, broker_id: int) -> BrokerProcess | None:
        """The live process of ``broker_id`` (None when down)."""
        process = self.processes.get(broker_id)
        return process if process is not None and self._current(process) else None

    def broker_state(self, broker_id: int) -> BrokerState:
        """The broker's own state (Offline when its process is down)."""
        process = self.broker_process(broker_id)
        return BrokerState.OFFLINE if process is None else process.lifecycle.state

    # =====================================================================
    # Clients
    # =====================================================================

    def new_reader(self, brokers: tuple[int, ...] | None = None, *, start: int = 0, pinned: bool = False) -> MetadataReader:
        return MetadataReader(
            self.new_process(), brokers or self.broker_options.broker_ids, index=start, pinned=pinned
        )

    def read_metadata(self, reader: MetadataReader, op: str | None = None, topic: str = "orders") -> None:
        """One request from ``reader`` to its current broker (nothing if it
        is still waiting for the previous one)."""
        if reader.busy:
            return
        reader.busy = True
        broker_id = reader.brokers[reader.index % len(reader.brokers)]
        op = op or self._rng.choice(READ_OPS)
        epoch = reader.known_epochs.get(broker_id)
        request = MetadataRequest(
            op=op,
            topic=topic if op == "describe_topic" else None,
            broker_epoch=epoch,
            min_image_offset=reader.highest_image_offset or None,
        )
        process = reader.process
        self._record(process, "invoke", op, "metadata", None, node=broker_id, mode="broker", broker_epoch=epoch)
        done = {"flag": False}

        self._read_ids += 1
        token = self._read_ids

        def complete(response: MetadataResponse | None, error: str | None = None) -> None:
            if done["flag"]:
                return
            done["flag"] = True
            reader.busy = False
            self._reads_in_flight.get(broker_id, {}).pop(token, None)
            if response is not None and response.error is BrokerErrorCode.NONE:
                if response.image_offset < reader.highest_image_offset:
                    raise InvariantViolation(
                        "non-monotonic-client",
                        f"p{process} saw image offset {response.image_offset} after {reader.highest_image_offset}",
                    )
                reader.highest_image_offset = response.image_offset
                reader.known_epochs[broker_id] = response.broker_epoch
                # The image reflects every record below image_offset.
                self._record(
                    process, "ok", op, "metadata", response.image_offset, node=broker_id, mode="broker",
                    broker_epoch=epoch, offset=response.image_offset - 1,
                )
                self._say_full(f"client p{process} {op} via b{broker_id}: ok image offset {response.image_offset}")
                return
            if response is not None:
                error = response.error.name
                if response.error is BrokerErrorCode.STALE_BROKER_EPOCH:
                    reader.known_epochs.pop(broker_id, None)
            type_ = "info" if error == "timeout" else "fail"
            self._record(process, type_, op, "metadata", None, node=broker_id, mode="broker", broker_epoch=epoch, error=error)
            line = f"client p{process} {op} via b{broker_id} (epoch {epoch}): {type_} {error}"
            # A refused epoch is the story (KIP-380); other refusals are routine.
            (self._say if error == "STALE_BROKER_EPOCH" else self._say_full)(line)
            if not reader.pinned:
                reader.index += 1

        def at_broker(node: SimNode) -> None:
            response = self._serve(node, request)
            self._push(self._client_delay_us(), "action", 0, 0, lambda: complete(response))

        if self.nodes[broker_id].core is not None:
            self._reads_in_flight.setdefault(broker_id, {})[token] = lambda: complete(None, "connection reset")
        self._to_node(broker_id, at_broker, lambda: complete(None, "unreachable"))
        self.schedule(self.options.client_timeout_ms, lambda: complete(None, "timeout"))

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, on_done: Callable[[str], None] | None = None
    ) -> None:
        """An admin client creates a topic through the active controller
        (the voter that leads, as the sim's register clients do)."""
        process = self.new_process()
        self._record(process, "invoke", "create_topic", "metadata", name)
        leader = self.leader()
        done = {"flag": False}

        def complete(type_: str, offsets: tuple[int, int] | None = None, error: str | None = None) -> None:
            if done["flag"]:
                return
            done["flag"] = True
            offset = offsets[1] if offsets is not None and type_ == "ok" else None
            self._record(process, type_, "create_topic", "metadata", name, node=leader, offset=offset, error=error)
            self._say(f"admin p{process} create_topic {name} via n{leader}: {type_}{' ' + error if error else ''}")
            if on_done is not None:
                on_done(type_)

        if leader is None:
            self.schedule(0, lambda: complete("fail", error="no leader"))
            return
        request = CreateTopicsRequest(topics=(NewTopic(name=name, partitions=partitions, replication_factor=replication_factor),))

        def at_voter(node: SimNode) -> None:
            def respond(response: Any, offsets: tuple[int, int] | None) -> None:
                result = response.results[0] if getattr(response, "results", None) else None
                if response.error is ErrorCode.NONE and result is not None and result.error is ErrorCode.NONE:
                    outcome = ("ok", offsets, None)
                else:
                    code = result.error if result is not None and result.error is not ErrorCode.NONE else response.error
                    outcome = ("fail", None, code.name)
                self._push(self._client_delay_us(), "action", 0, 0, lambda: complete(*outcome))

            self._controller_call(node, request, respond)

        self._to_node(leader, at_voter, lambda: complete("fail", error="unreachable"))
        self.schedule(self.options.client_timeout_ms, lambda: complete("info", error="timeout"))

    # =====================================================================
    # Truth: the committed log, replayed
    # =====================================================================

    def _on_commit(self, node: SimNode, entries: list[Entry]) -> None:
        super()._on_commit(node, entries)
        for entry in entries:
            if entry.offset < self._truth_offset:
                continue
            if entry.offset > self._truth_offset:  # pragma: no cover - a simulator bug
                raise HarnessInvariantError(f"offset {entry.offset} committed before offset {self._truth_offset} was seen")
            self._truth_offset = entry.offset + 1
            if entry.kind is not RecordKind.DATA:
                continue
            self.truth.apply([entry])
            try:
                record = decode_record(entry.data)
            except RecordDecodeError:
                continue
            if isinstance(record, (RegisterBrokerRecord, BrokerRegistrationChangeRecord, UnregisterBrokerRecord)):
                self._note_truth_broker(record.broker_id, entry.offset)
            for watcher in list(self.truth_watchers):
                watcher(entry.offset)

    def _note_truth_broker(self, broker_id: int, offset: int) -> None:
        registration = self.truth.image.broker(broker_id)
        epoch = None if registration is None else registration.broker_epoch
        state = BrokerState.OFFLINE if registration is None else registration.state
        previous = self._truth_brokers.get(broker_id, (None, BrokerState.OFFLINE))
        if previous == (epoch, state):
            return
        if epoch is not None and epoch != previous[0]:
            newest = self.highest_registered_epoch.get(broker_id, -1)
            if epoch <= newest:
                raise InvariantViolation(
                    "broker-epoch-regress", f"b{broker_id} registered with epoch {epoch} after epoch {newest}"
                )
            self.highest_registered_epoch[broker_id] = epoch
        if state is BrokerState.ONLINE and epoch is not None:
            self.ever_unfenced.add((broker_id, epoch))
        self._truth_brokers[broker_id] = (epoch, state)
        self.truth_changes.append(TruthChange(self.now_ms, offset, broker_id, epoch, previous[1], state))
        self._say(f"committed@{offset}: b{broker_id} e{epoch} {previous[1].value} -> {state.value}")

    def truth_leaderless(self) -> list[str]:
        """Partitions without a leader that is Online in the committed log."""
        image = self.truth.image
        problems = []
        for partition in sorted(image.iter_partitions(), key=lambda p: p.key):
            if partition.leader < 0 or image.broker_state(partition.leader) is not BrokerState.ONLINE:
                topic = image.topic_by_id(partition.topic_id)
                name = topic.name if topic is not None else partition.topic_id
                problems.append(f"{name}-{partition.partition_id} (leader {partition.leader})")
        return problems

    def check_final(self) -> None:
        super().check_final()
        for op in self.history:
            if op["f"] == "create_topic" and op["type"] == "ok" and self.truth.image.topic(op["value"]) is None:
                raise InvariantViolation("lost-write", f"acknowledged topic {op['value']!r} is not in the committed log")

    # =====================================================================
    # Replays (nemesis)
    # =====================================================================

    def replay_heartbeat(self, broker_id: int, heartbeat: BrokerHeartbeat) -> bool:
        """Deliver a copy of an old Fetch carrying ``heartbeat`` to the
        leader, as a retry or a duplicate of an earlier incarnation's would
        arrive (KIP-380: "If controller receives old ControlledShutdownRequest
        (due to retries) after the broker has been bounced"). It asks for
        nothing new (the leader's log end) and its request id matches no
        fetch of the live process, which drops the answer. Returns whether a
        leader was there to receive it."""
        leader_id = self.leader()
        if leader_id is None:
            return False
        leader = self.nodes[leader_id]
        assert leader.core is not None
        message = FetchRequest(
            src=broker_id,
            dst=leader_id,
            epoch=leader.core.epoch,
            fetch_offset=leader.core.log.end_offset,
            last_fetched_epoch=leader.core.log.last_epoch,
            request_id=0,
            read_token=0,
            extension=heartbeat.to_extension(),
            observer=True,
        )
        self._say(f"NEMESIS replay b{broker_id}'s heartbeat e{heartbeat.broker_epoch} (want_shutdown={heartbeat.want_shutdown}) to n{leader_id}")
        self._push(self._client_delay_us(), "deliver", leader_id, leader.incarnation, message)
        return True
