"""Bootstrapped from one controller (issue 17 item 4; KIP-853's
``controller.quorum.bootstrap.servers``), in process over real sockets:
three controllers, and a broker and a ``QuorumClient`` that are given only
a follower's address. The follower's NOT_LEADER answers name the leader's
id, epoch and endpoint; both follow them. (The leader killed and another
controller leading: tests/processes/test_bootstrap_processes.py.)"""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest
import trio

from broker_agent import BrokerConfig, open_broker
from loopback import free_ports
from quorum import ErrorCode
from quorum.client import QuorumClient, Server
from quorum.runtime import KeyValueStateMachine, NodeConfig, handle_client_request
from quorum.wire import ApplicationRequest, ProposeRequest, ReadRequest
from registration import BrokerState, ControllerConfig, open_controller_node
from registration.client import AdminClient

QUORUM = {"election_timeout_ms": 300, "fetch_timeout_ms": 600, "fetch_max_wait_ms": 100}
TIMERS = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300}
CONTROLLERS = (1, 2, 3)

pytestmark = pytest.mark.processes  # real sockets


def _configs(data_root=None) -> dict[int, NodeConfig]:
    ports = dict(zip(CONTROLLERS, free_ports(len(CONTROLLERS))))
    voters = {node_id: ("127.0.0.1", port) for node_id, port in ports.items()}
    return {
        node_id: NodeConfig(
            node_id=node_id,
            voters=voters,
            quorum=QUORUM,
            fsync=False,
            plaintext=True,
            data_dir=None if data_root is None else data_root / f"c{node_id}",
        )
        for node_id in CONTROLLERS
    }


def _open(config: NodeConfig):
    return open_controller_node(config, ControllerConfig(cluster_id="pykraft", **TIMERS))


async def _controllers(stack: AsyncExitStack) -> dict:
    return {node_id: await stack.enter_async_context(_open(config)) for node_id, config in _configs().items()}


async def _until(condition, what: str) -> None:
    """Wait (bounded by the test's ``fail_after``) until ``condition()``."""
    while not condition():
        await trio.sleep(0.02)


def _registered(handle) -> dict:
    """controller id -> its registration, in ``handle``'s committed image."""
    return dict(handle.runtime.state_machine.image.controllers)


async def test_a_broker_and_a_client_given_one_follower_reach_the_leader():
    with trio.fail_after(30):
        async with AsyncExitStack() as stack:
            controllers = await _controllers(stack)
            leader = await controllers[1].wait_for_leader()
            follower = next(node_id for node_id in CONTROLLERS if node_id != leader)
            follower_port = controllers[follower].listen_port
            await controllers[follower].wait_for_leader()
            epoch = controllers[leader].runtime.node.epoch

            # The follower's own answers, version 2: the leader's id, epoch
            # and endpoint from the voters it holds; version 1: the id only.
            runtime = controllers[follower].runtime
            for request in (ProposeRequest(records=(b"x",)), ReadRequest(), ApplicationRequest(payload=b"")):
                answer = await handle_client_request(runtime, request)
                assert answer.error is ErrorCode.NOT_LEADER
                assert (answer.leader_hint, answer.leader_epoch) == (leader, epoch)
                assert answer.leader_endpoint == f"127.0.0.1:{controllers[leader].listen_port}"
                assert answer.version == 2
                old = await handle_client_request(runtime, type(request)(**{**_fields(request), "version": 1}))
                assert old.version == 1 and old.leader_hint == leader

            # A client that knows the follower's address only (no id) writes.
            async with QuorumClient([f"127.0.0.1:{follower_port}"], retry_timeout_s=10) as client:
                await client.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
                assert client.last_answered_by == Server(leader, "127.0.0.1", controllers[leader].listen_port)

            # A broker given the follower alone registers with the leader and
            # heartbeats to it (through its fetches, from the leader).
            config = BrokerConfig(
                broker_id=101,
                bootstrap={follower: ("127.0.0.1", follower_port)},
                listen=("127.0.0.1", 0),
                fsync=False,
                quorum=QUORUM,
                **TIMERS,
                plaintext=True,
            )
            broker = await stack.enter_async_context(open_broker(config))
            broker_epoch = await broker.wait_online()
            assert broker.node.runtime.node.leader_id == leader
            assert broker.node.runtime.node.learned_endpoints[leader] == f"127.0.0.1:{controllers[leader].listen_port}"
            async with AdminClient([f"{follower}@127.0.0.1:{follower_port}"]) as admin:
                cluster = await admin.describe_cluster()
            (registered,) = cluster.brokers
            assert (registered.broker_id, registered.broker_epoch) == (101, broker_epoch)
            assert registered.state == BrokerState.ONLINE.value

            # KIP-919: every controller registered itself; the leader's
            # image, describe and the broker's image show where each listens.
            await _until(lambda: set(_registered(controllers[leader])) == set(CONTROLLERS), "3 registrations")
            async with AdminClient([f"127.0.0.1:{follower_port}"]) as admin:
                described = await admin.describe_controllers()
            assert [(c.controller_id, c.listeners) for c in described.controllers] == [
                (node_id, (("CONTROLLER", "127.0.0.1", controllers[node_id].listen_port),)) for node_id in CONTROLLERS
            ]
            broker_image = broker.node.runtime.state_machine.image
            await _until(lambda: set(broker_image.controllers) == set(CONTROLLERS), "the broker's image")


async def test_a_restarted_controller_registers_a_new_incarnation(tmp_path):
    configs = _configs(tmp_path)
    with trio.fail_after(30):
        async with AsyncExitStack() as stack:
            handles = {node_id: await stack.enter_async_context(_open(configs[node_id])) for node_id in (1, 2)}
            async with _open(configs[3]) as third:
                await _until(lambda: set(_registered(third)) == set(CONTROLLERS), "3 registrations")
                first_incarnation = _registered(third)[3].incarnation_id
            async with _open(configs[3]) as third:


                def registered_again() -> bool:
                    # Every node's image holds the restarted process's own registration.
                    mine = _registered(third).get(3)
                    return (
                        mine is not None
                        and mine.incarnation_id != first_incarnation
                        and all(_registered(handle).get(3) == mine for handle in handles.values())
                    )

                await _until(registered_again, "a new incarnation")


def _fields(request) -> dict:
    return {name: getattr(request, name) for name in request.__dataclass_fields__}


async def test_a_broker_given_an_unregistered_voters_id_is_refused_and_stops():
    """Found by hand: a broker started as id 3 (voter 3's id; controller 3
    down, so never registered), bootstrapped from the leader only, was
    registered and then stayed Fenced for ever, its Fetches unanswered
    (the leader routes every message for id 3 to voter 3's address). Now
    its registration is refused, which stops it with the reason, and the
    leader refuses its Fetches by their ``observer`` mark
    (INCONSISTENT_VOTER_SET). Over TCP the broker never learns the epoch,
    so its Fetches could not be counted for voter 3 here anyway; where
    messages reach it (the simulator, an embedder's transport), the mark is
    what keeps them from counting: tests/quorum/test_rules_observer_only.py."""
    with trio.fail_after(30):
        async with AsyncExitStack() as stack:
            configs = _configs()
            controllers = {node_id: await stack.enter_async_context(_open(configs[node_id])) for node_id in (1, 2)}
            leader = await controllers[1].wait_for_leader()
            await _until(lambda: set(_registered(controllers[leader])) == {1, 2}, "controllers 1 and 2 registered")
            broker_config = BrokerConfig(
                broker_id=3,
                bootstrap={leader: ("127.0.0.1", controllers[leader].listen_port)},
                cluster_id="pykraft",
                listen=("127.0.0.1", 0),
                quorum=QUORUM,
                plaintext=True,
                **TIMERS,
            )
            broker = await stack.enter_async_context(open_broker(broker_config))
            await broker.wait_stopped()

            assert broker.stop_error
            assert "broker id 3 is controller 3's id" in broker.stop_reason
            assert 3 not in _registered(controllers[leader])

            # Its replica still fetches from the leader (the node outlives
            # the agent). Each Fetch is refused; none is taken for voter 3's.
            # (The broker does not hear the refusals: they go to voter 3's
            # address. The registration's refusal is what tells it.)
            def refused() -> int:
                return controllers[leader].runtime.node.counters["fetches_refused_observer_with_voter_id"]

            def voter_3_heard() -> bool:
                [voter_3] = [r for r in controllers[leader].runtime.node.describe().voters if r.node_id == 3]
                return voter_3.last_fetch_ms is not None

            await _until(lambda: refused() >= 2 or voter_3_heard(), "the broker's Fetches reach the leader")
            assert not voter_3_heard()
            assert refused() >= 2
