"""Issue 14, with real processes and real files: one flipped byte in the
middle of a voter's log while another voter is down must not lose a single
acknowledged write. The damaged node starts repairing (it neither votes nor
stands), the cluster waits for the down voter, commits again when it
returns, and the damaged node repairs its log from the new leader."""

from __future__ import annotations

import signal

import trio
from cluster import ProcessCluster

from quorum.runtime import KeyValueStateMachine
from quorum.storage._repair import REPAIR_MARKER_FILE_NAME


def put(key: str, value: str) -> bytes:
    return KeyValueStateMachine.encode_put(key.encode(), value.encode())


def flip_middle_byte(data_dir):
    segment = sorted((data_dir / "log").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x40
    segment.write_bytes(bytes(data))


async def wait_for(condition, timeout_s: float) -> None:
    with trio.fail_after(timeout_s):
        while not condition():
            await trio.sleep(0.05)


async def test_a_damaged_voter_with_another_down_loses_no_acknowledged_write(tmp_path):
    cluster = ProcessCluster(tmp_path)
    cluster.start_all()
    try:
        acknowledged: dict[str, str] = {}
        async with cluster.client(retry_timeout_s=20) as client:
            for i in range(30):
                await client.propose([put(f"a{i}", "1")])
                acknowledged[f"a{i}"] = "1"
            leader = await cluster.leader()
            damaged, down = (node for node in sorted(cluster.ports) if node != leader)
            cluster.kill(down)
            # Committed by the leader and the soon-damaged node alone.
            for i in range(150):
                await client.propose([put(f"b{i}", "2")])
                acknowledged[f"b{i}"] = "2"
        cluster.kill(leader, signal.SIGKILL)
        cluster.kill(damaged, signal.SIGKILL)
        flip_middle_byte(cluster.data_dir(damaged))

        # The node holding the tail is down; the other two come back.
        cluster.start(down)
        cluster.start(damaged)
        await wait_for(lambda: "repairs its log from a leader" in cluster.log_text(damaged), 30)
        line = next(text for text in cluster.log_text(damaged).splitlines() if "is damaged at byte" in text)
        assert str(cluster.data_dir(damaged) / "log") in line and "keeping offsets below" in line
        assert (cluster.data_dir(damaged) / REPAIR_MARKER_FILE_NAME).exists()
        # The quorum waits: the damaged node does not help elect the short log.
        led_before = {node: cluster.log_text(node).count("role=leader") for node in (down, damaged)}
        # The returned node stands again and again, and never wins.
        await wait_for(lambda: cluster.log_text(down).split("recovered")[-1].count("role=prospective") >= 3, 60)
        assert {node: cluster.log_text(node).count("role=leader") for node in (down, damaged)} == led_before
        assert cluster.processes[damaged].poll() is None

        cluster.start(leader)
        await cluster.leader(timeout_s=30)
        # The marker goes first (durably), then the line is logged: wait for
        # both (the fresh-clone run of cb8f47b read the log in between).
        await wait_for(
            lambda: not (cluster.data_dir(damaged) / REPAIR_MARKER_FILE_NAME).exists()
            and "the log is repaired" in cluster.log_text(damaged),
            30,
        )
        assert list(cluster.data_dir(damaged).glob("damaged-*/*.log")), "the damage is kept aside"

        # The repaired node counts again: with the node that held the tail
        # down once more, it and the returned node serve every write.
        cluster.kill(leader, signal.SIGKILL)
        async with cluster.client(retry_timeout_s=30) as client:
            await client.propose([put("after", "3")])
            for key, value in sorted(acknowledged.items()):
                _, answer = await client.read(key.encode())
                assert KeyValueStateMachine.decode_answer(answer)[0] == value.encode(), key
    finally:
        cluster.stop_all()


async def test_describe_statistics_and_metrics_show_a_repairing_node(autojump_clock):
    """The runtime, in process under MockClock: a node started from storage
    with a repair under way says so in describe(), statistics() and the
    ``pykraft_quorum_repairing`` gauge, and clears it (and storage's repair)
    once its log is repaired from the leader."""
    import random

    from quorum import QuorumConfig, RepairState
    from quorum.runtime import MemoryNetwork, QuorumRuntime
    from quorum.storage import MemoryStorage

    network = MemoryNetwork()
    storages = {node_id: MemoryStorage() for node_id in (1, 2, 3)}
    runtimes: dict[int, QuorumRuntime] = {}

    async with trio.open_nursery() as nursery:

        async def start(node_id):
            runtime = QuorumRuntime(
                QuorumConfig(node_id=node_id, voters=(1, 2, 3)),
                KeyValueStateMachine(),
                storage=storages[node_id],
                transport=network.transport(node_id),
                rng=random.Random(node_id),
            )
            await nursery.start(runtime.run)
            runtimes[node_id] = runtime

        await start(1)
        await start(2)
        await runtimes[1].wait_until(lambda: runtimes[1].node.leader_id is not None)
        leader = runtimes[1] if runtimes[1].node.is_leader else runtimes[2]
        for i in range(5):
            await leader.propose([put(f"k{i}", "v")])
        storages[3].repair = RepairState(damaged_from_offset=0, restart_epoch=0, acknowledged_end=6)
        await start(3)
        repairing = runtimes[3]
        assert repairing.describe().repairing and repairing.statistics()["repairing"]
        assert repairing.metrics.value("pykraft_quorum_repairing") == 1
        assert repairing.metrics.health_check() == (False, "repairing a damaged log")

        await repairing.wait_until(lambda: repairing.node.repairing is None)
        assert not repairing.describe().repairing and not repairing.statistics()["repairing"]
        assert repairing.metrics.value("pykraft_quorum_repairing") == 0
        assert storages[3].repair is None
        nursery.cancel_scope.cancel()
