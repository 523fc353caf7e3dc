"""Three controllers and some brokers in one trio run, over the in-process
network, for agent tests under ``MockClock``.

The brokers are ``BrokerAgent``s over observer runtimes, exactly as
``open_broker`` builds them, except that the transport is ``MemoryNetwork``
and registration calls the active controller's runtime directly.
"""

from __future__ import annotations

import random
from typing import Any

import trio

from broker_agent import BrokerAgent, BrokerConfig
from broker_agent._agent import _WatchedMetadata
from quorum import NotLeaderError, QuorumConfig
from quorum.runtime import MemoryNetwork, QuorumRuntime
from quorum.storage import MemoryStorage
from registration import (
    Controller,
    ControllerApplication,
    ControllerConfig,
    ControllerStateMachine,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    decode_message,
    encode_message,
)

VOTERS = (1, 2, 3)
CLUSTER_ID = "pykraft"
QUORUM = {"election_timeout_ms": 500, "fetch_timeout_ms": 1000}
SESSION_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = 500


class MemoryCluster:
    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.network = MemoryNetwork()
        self.controllers: dict[int, QuorumRuntime] = {}
        self.controller_brains: dict[int, Controller] = {}
        self.brokers: dict[int, BrokerAgent] = {}
        self._scopes: dict[int, trio.CancelScope] = {}
        self.events: list[dict[str, Any]] = []

    async def start_controllers(self, *, snapshot_every_records: int = 10_000, **quorum: Any) -> None:
        for node_id in VOTERS:
            await self.start_controller(node_id, snapshot_every_records=snapshot_every_records, **quorum)

    async def start_controller(self, node_id: int, *, snapshot_every_records: int = 10_000, **quorum: Any) -> None:
        """Controller ``node_id`` of the static voter set ``VOTERS`` (an
        observer if it is not among them), on a disk whose directory id is
        ``controller-ID`` (as a first start writes one)."""
        machine = ControllerStateMachine()
        controller = Controller(
            ControllerConfig(
                cluster_id=CLUSTER_ID,
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            ),
            machine.image,
        )
        runtime = QuorumRuntime(
            QuorumConfig(node_id=node_id, voters=VOTERS, directory_id=f"controller-{node_id}", **{**QUORUM, **quorum}),
            machine,
            storage=MemoryStorage(),
            transport=self.network.transport(node_id),
            rng=random.Random(node_id),
            leader_application=ControllerApplication(controller, machine.image),
            snapshot_every_records=snapshot_every_records,
        )
        await self._start(node_id, runtime.run)
        self.controllers[node_id] = runtime
        self.controller_brains[node_id] = controller

    async def _start(self, node_id: int, run: Any) -> None:
        scope = trio.CancelScope()

        async def runner(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await run(task_status=task_status)

        self._scopes[node_id] = scope
        await self.nursery.start(runner)

    def stop(self, node_id: int) -> None:
        """Like kill -9: the node's tasks end, its peers see a reset."""
        self._scopes.pop(node_id).cancel()

    @property
    def active_controller(self) -> Controller | None:
        return next((c for c in self.controller_brains.values() if c.is_active), None)

    async def register(self, request: RegisterBrokerRequest) -> RegisterBrokerResponse:
        for node_id in sorted(self.controllers):
            runtime = self.controllers[node_id]
            if node_id not in self._scopes:
                continue
            try:
                payload = await runtime.application_request(encode_message(request))
            except NotLeaderError:
                continue
            return decode_message(payload)
        raise ConnectionError("no active controller")

    def broker_config(self, broker_id: int, **overrides: Any) -> BrokerConfig:
        settings: dict[str, Any] = dict(
            broker_id=broker_id,
            bootstrap={node_id: ("127.0.0.1", 9000 + node_id) for node_id in VOTERS},
            listen=("127.0.0.1", 0),
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            shutdown_timeout_ms=5000,
            quorum=dict(QUORUM),
        )
        settings.update(overrides)
        return BrokerConfig(**settings, plaintext=True)

    async def start_broker(self, broker_id: int, incarnation_id: str | None = None, **overrides: Any) -> BrokerAgent:
        config = self.broker_config(broker_id, **overrides)
        metadata = _WatchedMetadata()
        runtime = QuorumRuntime(
            config.quorum_config(),
            metadata,
            storage=MemoryStorage(),
            transport=self.network.transport(broker_id),
            rng=random.Random(broker_id),
        )
        agent = BrokerAgent(
            config,
            runtime,
            metadata,
            register=self.register,
            listeners=(("PLAINTEXT", "127.0.0.1", 10_000 + broker_id),),
            incarnation_id=incarnation_id or f"incarnation-{broker_id}-{len(self.events)}",
            event_sink=lambda event, broker_id=broker_id: self.events.append({"node": broker_id, **event}),
        )

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(runtime.run)
                await nursery.start(agent.run)
                task_status.started()
                await agent.wait_stopped()
                nursery.cancel_scope.cancel()

        await self._start(broker_id, run)
        self.brokers[broker_id] = agent
        return agent

    def controller_view(self, broker_id: int) -> Any:
        """The broker's state in the active controller's committed image."""
        for node_id, runtime in self.controllers.items():
            brain = self.controller_brains[node_id]
            if brain.is_active:
                return runtime.state_machine.image.broker_state(broker_id)
        return None


async def controller_request(cluster: MemoryCluster, request: Any) -> Any:
    """Send a registration request to the active controller; retries while
    no controller is active."""
    with trio.fail_after(30):
        while True:
            for node_id in sorted(cluster.controllers):
                if node_id not in cluster._scopes:
                    continue
                try:
                    payload = await cluster.controllers[node_id].application_request(encode_message(request))
                except NotLeaderError:
                    continue
                return decode_message(payload)
            await trio.sleep(0.05)
