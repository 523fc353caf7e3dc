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


async def _controllers(stack: AsyncExitStack) -> dict:
    ports = dict(zip(CONTROLLERS, free_ports(len(CONTROLLERS))))
    voters = {node_id: ("127.0.0.1", port) for node_id, port in ports.items()}
    handles = {}
    for node_id in CONTROLLERS:
        config = NodeConfig(node_id=node_id, voters=voters, quorum=QUORUM, fsync=False, plaintext=True)
        handles[node_id] = await stack.enter_async_context(
            open_controller_node(config, ControllerConfig(cluster_id="pykraft", **TIMERS))
        )
    return handles


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


def _fields(request) -> dict:
    return {name: getattr(request, name) for name in request.__dataclass_fields__}
