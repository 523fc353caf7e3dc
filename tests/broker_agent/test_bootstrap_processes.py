"""A `kraft-broker` process given ONE follower controller's address
(issue 17 item 4; KIP-853's ``controller.quorum.bootstrap.servers``): it
registers with the leader, and keeps heartbeating after the leader is
killed and a controller it was never given leads. Clients given only that
follower's address write through it. The fast, in-process sibling is
tests/broker_agent/test_bootstrap_one_controller.py; the simulator's is
tests/sim/test_broker_bootstrap.py."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
import trio
from _processes import BIN, CONTROLLERS, SESSION_TIMEOUT_MS, BrokerCluster

from quorum.client import QuorumClient
from registration.client import AdminClient

pytestmark = [pytest.mark.processes, pytest.mark.long]

BROKER = 101
WAIT_S = 30


async def leader_seen_by(addresses: list[str], exclude: tuple[int, ...] = ()) -> int:
    """The leader the nodes at ``addresses`` agree on (none of ``exclude``),
    once every one of them names it."""
    with trio.fail_after(WAIT_S):
        while True:
            named = set()
            for address in addresses:
                try:
                    async with QuorumClient([address], retry_timeout_s=1, request_timeout_s=1) as client:
                        named.add((await client.describe()).leader_id)
                except Exception:  # noqa: BLE001 - not up yet, or electing
                    named.add(None)
            if len(named) == 1 and (leader := named.pop()) is not None and leader not in exclude:
                return leader
            await trio.sleep(0.05)


async def wait_online(admin: AdminClient, cluster: BrokerCluster) -> int:
    states = await cluster.wait_for_states(
        admin, lambda states: states.get(BROKER, ("",))[0] == "Online", WAIT_S, f"broker {BROKER} Online"
    )
    return states[BROKER][1]


def test_a_broker_given_one_follower_follows_a_leader_it_was_never_given(tmp_path):
    cluster = BrokerCluster(tmp_path)
    try:
        for node_id in CONTROLLERS:
            cluster.start_controller(node_id)
        trio.run(_story, cluster)
    finally:
        cluster.stop_all()


async def _story(cluster: BrokerCluster) -> None:
    address = {node_id: f"127.0.0.1:{port}" for node_id, port in cluster.controller_ports.items()}
    everyone = list(address.values())
    first = await leader_seen_by(everyone)
    given = min(node_id for node_id in CONTROLLERS if node_id != first)
    cluster.start_broker(BROKER, bootstrap=f"{given}@{address[given]}")
    async with cluster.admin() as admin:
        epoch = await wait_online(admin, cluster)

    # The leader dies. If the broker's one controller wins the election,
    # the old leader comes back and that one is paused until another
    # leads: either way a controller the broker was never given leads.
    cluster.kill(first)
    leader = await leader_seen_by([a for n, a in address.items() if n != first], exclude=(first,))
    if leader == given:
        cluster.start_controller(first)
        await leader_seen_by(everyone)
        cluster.signal(given, signal.SIGSTOP)
        leader = await leader_seen_by([a for n, a in address.items() if n != given], exclude=(given,))
        cluster.signal(given, signal.SIGCONT)
    assert leader != given

    async with cluster.admin() as admin:
        # The new leader's image has the broker Online, with the epoch it
        # registered with, and keeps it so for twice the session timeout:
        # the new controller hears its heartbeats (it fences a broker it
        # has not heard from within one session timeout).
        assert await wait_online(admin, cluster) == epoch
        held_until = time.monotonic() + 2 * SESSION_TIMEOUT_MS / 1000
        while time.monotonic() < held_until:
            states = await cluster.broker_states(admin)
            assert states[BROKER] == ("Online", epoch), states
            await trio.sleep(0.1)
    assert f"voter {leader} is at {address[leader]}" in cluster.log_text(BROKER)

    # KIP-919: every controller registered itself, the one restarted with
    # its new incarnation; `kraft-cluster describe --controllers` shows them.
    with trio.fail_after(WAIT_S):
        while True:
            described = subprocess.run(
                [str(BIN / "kraft-cluster"), "describe", "--controllers", "--bootstrap", address[given]],
                capture_output=True, text=True, timeout=WAIT_S,
            )  # fmt: skip
            if described.returncode == 0 and "3 controller(s) registered" in described.stdout:
                break
            await trio.sleep(0.1)
    for node_id in CONTROLLERS:
        assert f"CONTROLLER://{address[node_id]}" in described.stdout, described.stdout
    assert "kraft.version=0-1" in described.stdout

    # A client given the follower alone writes (a topic) and reads.
    async with AdminClient([address[given]], timeout_s=WAIT_S) as admin:
        created = await admin.create_topic("bootstrapped", partitions=1, replication_factor=1)
        assert not created.results[0].error
        assert admin.quorum_client.last_answered_by.node_id == leader
