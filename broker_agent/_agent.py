"""The broker agent on trio: an observer of the metadata quorum that
registers, heartbeats through its fetches, keeps the cluster image, serves
clients, and drives the sans-IO ``BrokerLifecycle``.

::

    async with open_broker(config) as broker:
        await broker.wait_online()
        async for change in broker.leadership_changes():
            ...

What a broker decides is sans-IO and shared with the simulator
(``_driver.BrokerDriver``: lifecycle, heartbeats through fetches, image
updates, timers, client answers); this module binds it to trio, TCP, the
clock, the registration task, metrics and the leadership iterator.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from quorum import Operation
from quorum.runtime import QuorumNodeHandle, QuorumRuntime, open_quorum_node, require
from quorum.runtime import handle_client_request
from quorum.wire import ApplicationRequest, ApplicationResponse
from registration import BrokerState, RegisterBrokerRequest, RegisterBrokerResponse
from registration.client import AdminClient

from ._config import BrokerConfig
from ._driver import BrokerDriver
from ._driver import WatchedMetadata as _WatchedMetadata
from ._errors import BrokerStoppedError
from ._heartbeats import FetchAnswered
from ._lifecycle import (
    Action,
    LifecycleEvent,
    Register,
    SetHeartbeat,
    StateChanged,
    Stop,
)
from ._notices import BrokerNotice, BrokerStateNotice, LeadershipChange, PartitionRole
from ._protocol import ErrorCode, MetadataRequest, MetadataResponse

logger = logging.getLogger("pykraft.broker")

Registrar = Callable[[RegisterBrokerRequest], Awaitable[RegisterBrokerResponse]]
EventSink = Callable[[dict[str, Any]], None]

# The agent task wakes at least this often (metrics, leadership refresh).
_AGENT_WAKE_S = 0.1


class _Subscription:
    def __init__(self) -> None:
        self.queue: deque[BrokerNotice] = deque()
        self.wakeup = trio.Event()
        self.closed = False

    def push(self, event: BrokerNotice) -> None:
        self.queue.append(event)
        self.wakeup.set()

    def close(self) -> None:
        self.closed = True
        self.wakeup.set()


class _AgentPort:
    """The agent's side of its ``BrokerDriver`` (``_driver.BrokerPort``)."""

    __slots__ = ("_agent",)

    def __init__(self, agent: BrokerAgent) -> None:
        self._agent = agent

    def perform(self, actions: list[Action]) -> None:
        self._agent._perform(actions)

    def fetches_answered(self, answered: list[FetchAnswered]) -> None:
        self._agent._record_fetches(answered)

    def image_applied(self) -> None:
        self._agent._refresh_roles()


class BrokerAgent:
    """Drives one broker over a running observer ``runtime``. ``register``
    sends a RegisterBroker to the active controller (raises on failure);
    ``listeners`` are what the broker registers. Run with ``await
    nursery.start(agent.run)``; ``handle_request`` answers clients.

    ``open_broker`` wires it to TCP; tests drive it over ``MemoryNetwork``.
    """

    def __init__(
        self,
        config: BrokerConfig,
        runtime: QuorumRuntime,
        metadata: _WatchedMetadata,
        *,
        register: Registrar,
        listeners: tuple[tuple[str, str, int], ...],
        incarnation_id: str,
        event_sink: EventSink | None = None,
    ) -> None:
        self.config = config
        self.runtime = runtime
        self.metadata = metadata
        self.incarnation_id = incarnation_id
        self.listeners = listeners
        self._register = register
        self._event_sink = event_sink or (lambda event: None)
        self._wakeup = trio.Event()
        self._state_changed = trio.Event()
        self._stopped = trio.Event()
        self.stop_reason: str | None = None
        self.stop_error = False
        self._registrations_send, self._registrations_receive = trio.open_memory_channel[Register](math.inf)
        self._subscriptions: list[_Subscription] = []
        self._roles: dict[tuple[str, int], LeadershipChange] = {}
        self._first_registration_start_ms: int | None = None
        # Registration retries are jittered (a controller restart or a
        # start-up storm must not make every broker retry in step); the seed
        # is the incarnation id, unique per process.
        self.driver = BrokerDriver(
            config.lifecycle_config(),
            runtime.host,
            _AgentPort(self),
            cluster_id=config.cluster_id,
            rng=random.Random(incarnation_id),
        )
        self.lifecycle = self.driver.lifecycle
        self.heartbeats = self.driver.heartbeats
        metadata.on_change = self._on_image_change

    # ------------------------------------------------------------------
    # Queries
    # ------------------------------------------------------------------

    @property
    def state(self) -> BrokerState:
        return self.lifecycle.state

    @property
    def broker_epoch(self) -> int | None:
        return self.lifecycle.broker_epoch

    @property
    def image_offset(self) -> int:
        """Every committed metadata record below this offset is reflected in
        the image (records of other kinds are skipped, not missed)."""
        return self.driver.image_offset

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def now_ms(self) -> int:
        return int(trio.current_time() * 1000)

    # ------------------------------------------------------------------
    # The trio task
    # ------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until the lifecycle stops (or cancelled)."""
        self.runtime.attach_fetch_extension(self._provide_heartbeat, self._consume_reply)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._registration_task)
                self.driver.start(self.now_ms())
                task_status.started()
                while not self.lifecycle.stopped:
                    timeout_s = _AGENT_WAKE_S
                    due_ms = self.lifecycle.next_timer_ms()
                    if due_ms is not None:
                        timeout_s = min(timeout_s, max(0.0, (due_ms - self.now_ms()) / 1000))
                    with trio.move_on_after(timeout_s):
                        await self._wakeup.wait()
                    self._wakeup = trio.Event()
                    self._step()
                nursery.cancel_scope.cancel()
        finally:
            self.runtime.detach_fetch_extension()
            self._mark_stopped(self.stop_reason or "agent task ended", self.stop_error)

    def _step(self) -> None:
        now = self.now_ms()
        self.driver.step(now)
        self._update_metrics(now)

    async def _registration_task(self) -> None:
        async for attempt in self._registrations_receive:
            request = RegisterBrokerRequest(
                broker_id=self.config.broker_id,
                incarnation_id=self.incarnation_id,
                cluster_id=self.config.cluster_id,
                listeners=self.listeners,
                rack=self.config.rack,
            )
            if self._first_registration_start_ms is None:
                self._first_registration_start_ms = self.now_ms()
            response: RegisterBrokerResponse | None = None
            failure = "timed out"
            with trio.move_on_after(self.config.registration_timeout_ms / 1000):
                try:
                    response = await self._register(request)
                except Exception as error:  # noqa: BLE001 - any failure to reach the controller is retried
                    failure = f"{type(error).__name__}: {error}"
            if response is None:
                self._count_registration_error("unreachable" if failure != "timed out" else "timed_out")
                logger.info("broker %d: registration attempt %d failed: %s", self.config.broker_id, attempt.attempt, failure)
                self.driver.registration_failed(self.now_ms(), failure)
            else:
                if response.error:
                    self._count_registration_error(response.error.name)
                    logger.info(
                        "broker %d: registration attempt %d refused: %s %s",
                        self.config.broker_id,
                        attempt.attempt,
                        response.error.name,
                        response.message,
                    )
                self.driver.registration_completed(self.now_ms(), response)
            self._wakeup.set()

    # ------------------------------------------------------------------
    # The core's hooks (run in the core task; synchronous, never block)
    # ------------------------------------------------------------------

    def _provide_heartbeat(self) -> Any:
        return self.driver.provide(self.now_ms())

    def _consume_reply(self, extension: Any) -> None:
        self.driver.consume(self.now_ms(), extension)
        self._wakeup.set()  # the agent task settles it if no Fetch follows in this step

    def _record_fetches(self, fetches: list[FetchAnswered]) -> None:
        metrics = self.runtime.metrics
        histogram = metrics.histogram(
            "pykraft_broker_fetch_latency_seconds",
            "Metadata fetches answered with a heartbeat reply, sent to answered (includes the leader's long poll).",
        )
        for answered in fetches:
            latency_s = max(0, answered.completed_ms - answered.sent_ms) / 1000
            histogram.observe(latency_s)
            metrics.set_gauge("pykraft_broker_last_fetch_latency_seconds", latency_s, "The last metadata fetch, sent to answered.")

    def _on_image_change(self) -> None:
        self.driver.note_image_changed()
        self._wakeup.set()

    # ------------------------------------------------------------------
    # Actions
    # ------------------------------------------------------------------

    def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Register):
                self._registrations_send.send_nowait(action)
            elif isinstance(action, SetHeartbeat):
                pass  # the provider reads lifecycle.heartbeat for every Fetch
            elif isinstance(action, StateChanged):
                self._on_state_changed(action)
            elif isinstance(action, Stop):
                self.stop_reason, self.stop_error = action.reason, action.error
                (logger.error if action.error else logger.info)(
                    "broker %d stopping: %s", self.config.broker_id, action.reason
                )
                self._wakeup.set()

    def _on_state_changed(self, change: StateChanged) -> None:
        broker_id = self.config.broker_id
        logger.info(
            "broker %d: %s -> %s (%s: %s), epoch %s",
            broker_id,
            change.old.value,
            change.new.value,
            change.event.value,
            change.reason,
            change.broker_epoch,
        )
        if change.event is LifecycleEvent.REGISTERED:
            now = self.now_ms()
            first = self._first_registration_start_ms
            self._emit(
                {
                    "event": "broker_registration",
                    "broker_id": broker_id,
                    "broker_epoch": change.broker_epoch,
                    "offset": change.broker_epoch,
                    "incarnation_id": self.incarnation_id,
                    "attempts": self.lifecycle.registration_attempts,
                    "registration_ms": None if first is None else now - first,
                }
            )
            self._first_registration_start_ms = None
        self._emit(
            {
                "event": "broker_state",
                "broker_id": broker_id,
                "state": change.new.value.lower(),
                "broker_epoch": change.broker_epoch,
                "lifecycle_event": change.event.value,
                "reason": change.reason,
            }
        )
        notice = BrokerStateNotice(change.new, change.broker_epoch, change.reason)
        for subscription in self._subscriptions:
            subscription.push(notice)
        self._refresh_roles()
        changed, self._state_changed = self._state_changed, trio.Event()
        changed.set()

    def _mark_stopped(self, reason: str, error: bool) -> None:
        if self._stopped.is_set():
            return
        self.stop_reason, self.stop_error = reason, error
        self._stopped.set()
        for subscription in self._subscriptions:
            subscription.close()
        changed, self._state_changed = self._state_changed, trio.Event()
        changed.set()

    def _emit(self, event: dict[str, Any]) -> None:
        try:
            self._event_sink(event)
        except Exception:  # noqa: BLE001 - the event log must never stop the broker
            logger.exception("broker %d: cannot write an event", self.config.broker_id)

    # ------------------------------------------------------------------
    # Leaderships
    # ------------------------------------------------------------------

    def current_roles(self) -> dict[tuple[str, int], LeadershipChange]:
        """This broker's partitions and its role in each, from the image;
        empty unless Online (a broker that is not Online leads nothing)."""
        if self.lifecycle.state is not BrokerState.ONLINE:
            return {}
        image = self.metadata.image
        me = self.config.broker_id
        offset = self.image_offset
        roles: dict[tuple[str, int], LeadershipChange] = {}
        for partition in image.iter_partitions():
            if me not in partition.replicas:
                continue
            topic = image.topic_by_id(partition.topic_id)
            if topic is None:
                continue
            role = PartitionRole.LEADER if partition.leader == me else PartitionRole.FOLLOWER
            roles[(topic.name, partition.partition_id)] = LeadershipChange(
                topic.name, partition.partition_id, role, partition.leader_epoch, partition.leader, offset
            )
        return roles

    def _refresh_roles(self) -> None:
        if not self._subscriptions:
            return
        roles = self.current_roles()
        previous = self._roles
        changes: list[LeadershipChange] = []
        for key in sorted(set(previous) | set(roles)):
            new = roles.get(key)
            old = previous.get(key)
            if new is None:
                assert old is not None
                changes.append(
                    LeadershipChange(key[0], key[1], PartitionRole.NONE, old.leader_epoch, old.leader_id, self.image_offset)
                )
            elif old is None or (old.role, old.leader_epoch, old.leader_id) != (new.role, new.leader_epoch, new.leader_id):
                changes.append(new)
        self._roles = roles
        for subscription in self._subscriptions:
            for change in changes:
                subscription.push(change)

    async def leadership_changes(self) -> AsyncIterator[BrokerNotice]:
        """This broker's state notices and partition role changes, starting
        with the current state and roles; ends when the broker stops."""
        subscription = _Subscription()
        if not self._subscriptions:
            self._roles = self.current_roles()
        self._subscriptions.append(subscription)
        subscription.push(BrokerStateNotice(self.state, self.broker_epoch, "current state"))
        for change in self._roles.values():
            subscription.push(change)
        try:
            while True:
                while subscription.queue:
                    yield subscription.queue.popleft()
                if subscription.closed or self.stopped:
                    return
                subscription.wakeup = trio.Event()
                await subscription.wakeup.wait()
        finally:
            self._subscriptions.remove(subscription)

    # ------------------------------------------------------------------
    # Waiting and local calls
    # ------------------------------------------------------------------

    async def wait_for_state(self, predicate: Callable[[BrokerState], bool]) -> BrokerState:
        """Wait until ``predicate(state)``; raises ``BrokerStoppedError`` if
        the broker stops first."""
        while not predicate(self.state):
            if self.stopped:
                raise BrokerStoppedError(f"broker {self.config.broker_id} stopped: {self.stop_reason}")
            await self._state_changed.wait()
        return self.state

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def request_shutdown(self) -> None:
        """Begin a controlled shutdown (idempotent); see ``shutdown``."""
        self.driver.shutdown_requested(self.now_ms())
        self._wakeup.set()

    # ------------------------------------------------------------------
    # Serving clients
    # ------------------------------------------------------------------

    async def handle_request(self, runtime: QuorumRuntime, request: Any) -> Any:
        """The observer node's request handler: broker requests (inside
        ``ApplicationRequest``) are answered here; quorum requests get the
        quorum's own answers (DescribeQuorum from this observer's view,
        NOT_LEADER for proposals and reads)."""
        if isinstance(request, ApplicationRequest):
            return ApplicationResponse(payload=self.answer(request.payload).to_payload(), version=request.version)
        return await handle_client_request(runtime, request)

    def answer(self, payload: bytes) -> MetadataResponse:
        """Answer one client payload (``BrokerDriver.serve``). Never raises on
        a client's input."""
        served = self.driver.serve(payload, self.now_ms())
        if served.request_event is not None:
            self._emit(served.request_event)
        self._count(served.op, served.response.error)
        return served.response

    def _count_registration_error(self, reason: str) -> None:
        self.runtime.metrics.add_to_counter(
            "pykraft_broker_registration_errors_total", 1,
            "Registration attempts that failed (timed_out, unreachable) or were refused (the error code).",
            reason=reason,
        )  # fmt: skip

    def _count(self, op: str | None, error: ErrorCode) -> None:
        self.runtime.metrics.add_to_counter(
            "pykraft_broker_requests_total", 1, "Client requests by op and answer.", op=op or "malformed", error=error.name
        )

    # ------------------------------------------------------------------
    # Metrics
    # ------------------------------------------------------------------

    def _update_metrics(self, now_ms: int) -> None:
        metrics = self.runtime.metrics
        for state in BrokerState:
            metrics.set_gauge(
                "pykraft_broker_state", 1 if state is self.state else 0, "1 for the broker's own state.", state=state.value
            )
        epoch = self.lifecycle.broker_epoch
        metrics.set_gauge("pykraft_broker_epoch", -1 if epoch is None else epoch, "Broker epoch (KIP-380), -1 if none.")
        metrics.set_gauge("pykraft_broker_image_offset", self.image_offset, "Metadata records reflected in the image.")
        metrics.set_gauge(
            "pykraft_broker_metadata_lag_records",
            self.runtime.apply_lag()[0],
            "Records the controllers committed (their leader's high watermark in a Fetch answer) not yet in the image.",
        )
        fresh = self.lifecycle.fresh_fetch_sent_ms
        metrics.set_gauge(
            "pykraft_broker_metadata_age_seconds",
            -1 if fresh is None else (now_ms - fresh) / 1000,
            "Since the fetch that last proved the image caught up was sent; -1 if none.",
        )

    def statistics(self) -> dict[str, Any]:
        fresh = self.lifecycle.fresh_fetch_sent_ms
        return {
            "broker_id": self.config.broker_id,
            "state": self.state.value,
            "broker_epoch": self.broker_epoch,
            "incarnation_id": self.incarnation_id,
            "image_offset": self.image_offset,
            "metadata_age_ms": None if fresh is None else self.now_ms() - fresh,
            "leader_id": self.runtime.node.leader_id,
        }


# ---------------------------------------------------------------------------
# The embedding API
# ---------------------------------------------------------------------------


class Broker:
    """What ``open_broker`` yields."""

    def __init__(self, agent: BrokerAgent, node: QuorumNodeHandle) -> None:
        self._agent = agent
        self.node = node

    @property
    def broker_id(self) -> int:
        return self._agent.config.broker_id

    @property
    def state(self) -> BrokerState:
        return self._agent.state

    @property
    def broker_epoch(self) -> int | None:
        """The current broker epoch (KIP-380), None when not registered."""
        return self._agent.broker_epoch

    @property
    def incarnation_id(self) -> str:
        return self._agent.incarnation_id

    @property
    def image(self) -> Any:
        """The cluster image (``registration.ClusterImage``); read-only."""
        return self._agent.metadata.image

    @property
    def image_offset(self) -> int:
        return self._agent.image_offset

    @property
    def listen_port(self) -> int | None:
        return self.node.listen_port

    @property
    def metrics_port(self) -> int | None:
        return self.node.metrics_port

    @property
    def stopped(self) -> bool:
        return self._agent.stopped

    @property
    def stop_reason(self) -> str | None:
        return self._agent.stop_reason

    def may_serve(self) -> bool:
        """Would the broker answer a client right now?"""
        return self._agent.lifecycle.may_serve(self._agent.now_ms())

    async def wait_online(self) -> int:
        """Wait until Online; returns the broker epoch. Raises
        ``BrokerStoppedError`` if the broker stops first."""
        await self._agent.wait_for_state(lambda state: state is BrokerState.ONLINE)
        epoch = self._agent.broker_epoch
        assert epoch is not None
        return epoch

    async def wait_fenced(self) -> None:
        """Wait until the broker is not Online (fenced, stopping, offline).
        Raises ``BrokerStoppedError`` if it stops first."""
        await self._agent.wait_for_state(lambda state: state is not BrokerState.ONLINE)

    async def wait_for_state(self, predicate: Callable[[BrokerState], bool]) -> BrokerState:
        """Raises ``BrokerStoppedError`` if the broker stops first."""
        return await self._agent.wait_for_state(predicate)

    def leadership_changes(self) -> AsyncIterator[BrokerNotice]:
        """An async iterator of ``BrokerStateNotice`` (starting with the
        current state) and ``LeadershipChange`` (this broker's role per
        partition, with the leader epoch to use as a fencing token). When the
        broker leaves Online every role goes to ``none``: stop acting as a
        leader at once. Ends when the broker stops."""
        return self._agent.leadership_changes()

    def current_roles(self) -> dict[tuple[str, int], LeadershipChange]:
        return self._agent.current_roles()

    def request_shutdown(self) -> None:
        """Begin a controlled shutdown without waiting."""
        self._agent.request_shutdown()

    async def wait_stopped(self) -> None:
        """Wait until the broker has stopped (``stop_reason`` says why)."""
        await self._agent.wait_stopped()

    @property
    def stop_error(self) -> bool:
        """True when the broker stopped because the cluster refused it."""
        return self._agent.stop_error

    async def shutdown(self) -> None:
        """Controlled shutdown: ask the controller to move this broker's
        leaderships off (want_shutdown) and wait until it says shut down, or
        the shutdown timeout passes. Returns once stopped."""
        self._agent.request_shutdown()
        await self._agent.wait_stopped()

    def answer(self, request: MetadataRequest) -> MetadataResponse:
        """Answer ``request`` in-process, exactly as a client over the wire
        would be answered."""
        return self._agent.answer(request.to_payload())

    def statistics(self) -> dict[str, Any]:
        return self._agent.statistics()


def _event_sink(path: Any) -> tuple[EventSink, Callable[[], None]]:
    if path is None:
        return (lambda event: None), (lambda: None)
    handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by the returned closer

    def sink(event: dict[str, Any]) -> None:
        handle.write(json.dumps({"wall_ns": time.time_ns(), **event}) + "\n")
        handle.flush()

    return sink, handle.close


@asynccontextmanager
async def open_broker(config: BrokerConfig, *, incarnation_id: str | None = None) -> AsyncIterator[Broker]:
    """Run a broker for the duration of the ``async with`` block.

    It fetches the metadata log as an observer of ``config.bootstrap``,
    registers with a fresh incarnation id (``uuid4``, unless given), and
    serves clients on ``config.listen`` once Online. Leaving the block
    normally does a controlled shutdown first (unless
    ``controlled_shutdown_on_exit`` is off); leaving it by an exception
    does not.

    Raises ``ValueError`` for a bad config and what ``open_quorum_node``
    raises (a port in use, another node's data directory).
    """
    incarnation = incarnation_id or str(uuid.uuid4())
    metadata = _WatchedMetadata()
    agent_ref: list[BrokerAgent] = []

    async def handle(runtime: QuorumRuntime, request: Any) -> Any:
        if not agent_ref:
            return await handle_client_request(runtime, request)
        return await agent_ref[0].handle_request(runtime, request)

    sink, close_sink = _event_sink(config.event_log)
    try:
        # Every broker request a client sends is a read.
        async with open_quorum_node(
            config.node_config(), metadata, request_handler=handle, authorize_application=require(Operation.READ)
        ) as node:
            host = config.listen[0]
            port = node.listen_port
            assert port is not None
            timeout_s = config.registration_timeout_ms / 1000
            async with AdminClient(
                config.bootstrap_list, cluster_id=config.cluster_id, timeout_s=timeout_s, tls=config.tls
            ) as admin:

                async def register(request: RegisterBrokerRequest) -> RegisterBrokerResponse:
                    # The controllers the broker's replica knows (the log's
                    # voter set, the leaders NOT_LEADER answers named), not
                    # only the bootstrap list (KIP-853).
                    admin.quorum_client.learn_servers(agent_ref[0].driver.known_controllers())
                    return await admin.register_broker(request)

                agent = BrokerAgent(
                    config,
                    node.runtime,
                    metadata,
                    register=register,
                    listeners=((config.listener_name, host, port),),
                    incarnation_id=incarnation,
                    event_sink=sink,
                )
                agent_ref.append(agent)
                broker = Broker(agent, node)
                async with trio.open_nursery() as nursery:
                    await nursery.start(agent.run)
                    yield broker
                    if config.controlled_shutdown_on_exit and not agent.stopped:
                        with trio.move_on_after(config.shutdown_timeout_ms / 1000 + 1):
                            await broker.shutdown()
                    nursery.cancel_scope.cancel()
    finally:
        close_sink()
