"""Three real ``kraft-quorum node`` processes wired through each backend:
the voters maps from ``voters_arg`` work, isolating the leader makes the
other two elect a new one while the isolated leader resigns (check quorum,
KAFKA-15489), and after a heal all three agree again. The test process
reaches the nodes as client ``c1`` (in netns mode from c1's namespace,
through ``client_sockets``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from jepsen_like.nemesis import NetnsNetwork, ProxyNetwork
from quorum.client import QuorumClient

pytestmark = pytest.mark.processes

BIN = Path(sys.executable).parent
NODE_IDS = (1, 2, 3)
WAIT_S = 30.0
POLL_S = 0.05


NETNS_AVAILABLE, NETNS_REASON = NetnsNetwork.available()
BACKENDS = [
    "proxy",
    pytest.param(
        "netns",
        marks=[pytest.mark.netns, pytest.mark.skipif(not NETNS_AVAILABLE, reason=f"netns backend unavailable: {NETNS_REASON}")],
    ),
]


async def leader_seen_by(net, node_id: int) -> int | None:
    host, port = net.address_for("c1", node_id)
    with net.client_sockets("c1"):
        try:
            async with QuorumClient([f"{host}:{port}"], retry_timeout_s=0.5, request_timeout_s=0.5) as client:
                return (await client.describe()).leader_id
        except Exception:  # noqa: BLE001 - not up, or not answering yet
            return None


async def wait_for(predicate, what: str):
    """Poll the async ``predicate`` until it returns something truthy."""
    with trio.fail_after(WAIT_S):
        while True:
            result = await predicate()
            if result:
                return result
            await trio.sleep(POLL_S)


@pytest.mark.parametrize("kind", BACKENDS)
async def test_isolating_the_leader_elects_another_and_heal_reunites(kind, tmp_path):
    processes: list[subprocess.Popen] = []
    with ProxyNetwork() if kind == "proxy" else NetnsNetwork() as net:
        for node_id in NODE_IDS:
            net.add_node(node_id, "controller", zone=f"az{node_id}")
        net.add_client("c1", observer=True)  # the test's own view: never cut
        try:
            for node_id in NODE_IDS:
                host, port = net.listen_address(node_id)
                argv = [
                    str(BIN / "kraft-quorum"), "node", "--plaintext", "--node-id", str(node_id),
                    "--voters", net.voters_arg(node_id), "--listen", f"{host}:{port}",
                    "--election-timeout-ms", "300", "--fetch-timeout-ms", "1000",
                ]  # fmt: skip
                with open(tmp_path / f"node{node_id}.log", "wb") as log:
                    processes.append(subprocess.Popen(net.run_in(node_id, argv), stdout=log, stderr=subprocess.STDOUT))

            async def agreed_leader(nodes=NODE_IDS):
                views = {await leader_seen_by(net, node) for node in nodes}
                return views.pop() if len(views) == 1 and None not in views else None

            leader = await wait_for(agreed_leader, "a leader all three agree on")
            fault = await trio.to_thread.run_sync(net.isolate, leader)
            assert fault.shape == "isolate"
            others = tuple(node for node in NODE_IDS if node != leader)

            async def new_leader_and_old_resigned():
                new = await agreed_leader(others)
                return new if new is not None and new != leader and await leader_seen_by(net, leader) != leader else None

            new_leader = await wait_for(new_leader_and_old_resigned, "a new leader, and the old one resigned")
            await trio.to_thread.run_sync(net.heal)
            assert await wait_for(agreed_leader, "all three agreeing after the heal") in NODE_IDS
            assert new_leader != leader
        finally:
            for process in processes:
                process.kill()
                process.wait(timeout=10)
