"""The controller as the trio runtime's leader application, unchanged: three
voters and a broker observer over the in-process network under MockClock.

A smoke test of the seam the lead wires up: ``Controller`` is passed as
``leader_application`` and the ``ClusterImage`` as the state machine; a
broker registers through the leader's controller and is unfenced by the
heartbeats its Fetches carry.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import trio
from _registration_helpers import CLUSTER_ID, LISTENERS

from quorum import QuorumConfig
from quorum.runtime import MemoryNetwork, QuorumRuntime
from quorum.storage import MemoryStorage
from registration import (
    BrokerHeartbeat,
    BrokerState,
    ClusterImage,
    Controller,
    ControllerConfig,
    CreateTopicsRequest,
    ErrorCode,
    NewTopic,
    RegisterBrokerRequest,
)

VOTERS = (1, 2, 3)
BROKER = 101
# No idle no-ops: the log goes quiet, so every node reaches the same offset.
CONFIG = ControllerConfig(cluster_id=CLUSTER_ID, no_op_interval_ms=0)


async def start_cluster(
    nursery: trio.Nursery, network: MemoryNetwork, make_controller: Callable[..., Controller]
) -> tuple[dict[int, QuorumRuntime], dict[int, Any]]:
    """The three voters, each with the controller ``make_controller(config,
    image, runtimes)`` builds (``runtimes``: every node's, filled in as they
    start), and the broker's observer, started."""
    runtimes: dict[int, QuorumRuntime] = {}
    controllers: dict[int, Any] = {}
    for node_id in (*VOTERS, BROKER):
        image = ClusterImage()
        controller = make_controller(CONFIG, image, runtimes) if node_id in VOTERS else None
        runtime = QuorumRuntime(
            QuorumConfig(node_id=node_id, voters=VOTERS),
            image,
            storage=MemoryStorage(),
            transport=network.transport(node_id),
            rng=random.Random(node_id),
            leader_application=controller,
        )
        await nursery.start(runtime.run)
        runtimes[node_id] = runtime
        if controller is not None:
            controllers[node_id] = controller
    return runtimes, controllers


async def write(leader: QuorumRuntime, controller: Controller, request: Any) -> Any:
    """``request`` handled by the active ``controller``, its records proposed
    through ``leader`` and committed: the controller's answer."""
    while (reply := controller.handle_request(request, 0)).response is not None:
        assert reply.response.error is ErrorCode.NOT_LEADER
        await trio.sleep(0.05)
    last = await leader.propose(reply.records)
    return reply.on_committed(last - len(reply.records) + 1)


async def online_broker(
    runtimes: dict[int, QuorumRuntime], controllers: dict[int, Any]
) -> tuple[int, QuorumRuntime, Controller]:
    """Once a controller is active, ``BROKER`` registered through it and
    heartbeating through its Fetches until the leader's working image says
    it is Online: ``(leader id, leader runtime, its controller)``."""
    while not any(c.is_active for c in controllers.values()):
        await trio.sleep(0.05)
    leader_id = next(node_id for node_id, c in controllers.items() if c.is_active)
    leader, controller = runtimes[leader_id], controllers[leader_id]
    request = RegisterBrokerRequest(broker_id=BROKER, incarnation_id="one", cluster_id=CLUSTER_ID, listeners=LISTENERS)
    epoch = (await write(leader, controller, request)).broker_epoch
    runtimes[BROKER].attach_fetch_extension(
        lambda: BrokerHeartbeat(broker_id=BROKER, broker_epoch=epoch).to_extension(), lambda _reply: None
    )
    while controller.working_image.broker_state(BROKER) is not BrokerState.ONLINE:
        await trio.sleep(0.05)
    return leader_id, leader, controller


async def test_controller_drives_registration_and_heartbeats_through_the_runtime(nursery, autojump_clock):
    network = MemoryNetwork()
    runtimes, controllers = await start_cluster(
        nursery, network, lambda config, image, _runtimes: Controller(config, image)
    )

    with trio.fail_after(60):
        while not any(c.is_active for c in controllers.values()):
            await trio.sleep(0.05)
        leader_id = next(node_id for node_id, c in controllers.items() if c.is_active)
        leader, controller = runtimes[leader_id], controllers[leader_id]
        request = RegisterBrokerRequest(
            broker_id=BROKER, incarnation_id="one", cluster_id=CLUSTER_ID, listeners=LISTENERS
        )
        # The runtime activates without the log end offset, so this first
        # batch lands one past the prediction (after the LEADER_CHANGE
        # record): the response is right all the same (it is built from the
        # real offset) and the controller resynchronises.
        while (reply := controller.handle_request(request, 0)).response is not None:
            assert reply.response.error is ErrorCode.NOT_LEADER
            await trio.sleep(0.05)
        last = await leader.propose(reply.records)
        response = reply.on_committed(last - len(reply.records) + 1)
        assert response.error is ErrorCode.NONE
        epoch = response.broker_epoch
        assert leader.state_machine.broker(BROKER).broker_epoch == epoch

        broker = runtimes[BROKER]
        broker.attach_fetch_extension(
            lambda: BrokerHeartbeat(broker_id=BROKER, broker_epoch=epoch).to_extension(),
            lambda _reply: None,
        )
        while broker.state_machine.broker_state(BROKER) is not BrokerState.ONLINE:
            await trio.sleep(0.05)

    images = [runtime.state_machine for runtime in runtimes.values()]
    with trio.fail_after(10):
        while len({image.offset for image in images}) > 1:
            await trio.sleep(0.05)
    assert len({image.fingerprint() for image in images}) == 1
    nursery.cancel_scope.cancel()


class _CatchUpWitness(Controller):
    """The real controller, noting at each ``catch_up`` where its batches end
    and how far each follower's log reaches."""

    def __init__(self, config: ControllerConfig, image: ClusterImage, runtimes: dict[int, QuorumRuntime]) -> None:
        super().__init__(config, image)
        self.runtimes = runtimes
        self.seen: list[tuple[int, dict[int, int]]] = []

    def catch_up(self) -> None:
        logs = {node_id: runtime.node.log.end_offset for node_id, runtime in self.runtimes.items() if node_id in VOTERS}
        self.seen.append((self.next_write_offset, logs))
        super().catch_up()


async def test_the_runtime_catches_the_controller_up_after_the_fence_reached_the_followers(nursery, autojump_clock):
    """Issue 21: the fence's batch goes to the parked followers before the
    leader's working image applies it (ReplicaHost.application_catch_up)."""
    network = MemoryNetwork()
    runtimes, controllers = await start_cluster(nursery, network, _CatchUpWitness)
    with trio.fail_after(120):
        leader_id, leader, controller = await online_broker(runtimes, controllers)
        while runtimes[BROKER].state_machine.broker_state(BROKER) is not BrokerState.ONLINE:
            await trio.sleep(0.05)
        topics = CreateTopicsRequest(topics=(NewTopic(name="t", partitions=20, replication_factor=1),))
        assert (await write(leader, controller, topics)).results[0].error is ErrorCode.NONE
        assert leader.state_machine.leader_count(BROKER) == 20

        network.isolate(BROKER, list(VOTERS))  # its heartbeats stop; its session expires
        while leader.state_machine.broker_state(BROKER) is not BrokerState.FENCED:
            await trio.sleep(0.05)

    fence_end = leader.node.log.end_offset
    followers = [node_id for node_id in VOTERS if node_id != leader_id]
    at_fence = [logs for batches_end, logs in controller.seen if batches_end == fence_end]
    assert at_fence, controller.seen
    for logs in at_fence:  # every catch-up with the fence proposed: the followers hold it
        assert all(logs[node_id] == fence_end for node_id in followers), (logs, fence_end)
    assert leader.state_machine.fingerprint() == controller.working_image.fingerprint()
    nursery.cancel_scope.cancel()


async def test_a_silent_brokers_session_expires_on_time_while_the_leaders_ticker_sleeps(nursery, autojump_clock):
    """Issue 21: the leader's ticker sleeps until the next tick at which a
    timer may act, the controller's session expiry included
    (``Controller.next_tick_due_ms``): a broker that falls silent is fenced
    at the first tick past its session timeout, not at whichever wake-up
    comes next (the followers' Fetches, every 500 ms), and the leader still
    wakes only a few times a second meanwhile."""
    network = MemoryNetwork()
    runtimes, controllers = await start_cluster(nursery, network, lambda config, image, _runtimes: Controller(config, image))
    with trio.fail_after(60):
        _leader_id, leader, controller = await online_broker(runtimes, controllers)

    network.isolate(BROKER, list(VOTERS))  # its heartbeats stop
    due_ms = controller.next_tick_due_ms()  # its session's expiry (no no-ops here)
    assert due_ms is not None
    due_s = leader._tick_time_s(-(-due_ms // leader.config.tick_ms))
    woken = leader.ticker_wakeups
    started_s = trio.current_time()
    with trio.fail_after(20):
        while controller.working_image.broker_state(BROKER) is not BrokerState.FENCED:
            await trio.sleep(0.001)
    assert due_s <= trio.current_time() <= due_s + 0.001 + 1e-9
    assert (leader.ticker_wakeups - woken) / (trio.current_time() - started_s) <= 6
    nursery.cancel_scope.cancel()
