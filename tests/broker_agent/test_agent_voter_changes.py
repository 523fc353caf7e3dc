"""Brokers follow the controllers' voter set (issue 17, KIP-853, item 4):
the broker's observer reads the voter set from the metadata log (VOTERS
records, and snapshots that carry it), so after the controllers' static
set is upgraded, a controller added and the leading one removed and
stopped, every broker fetches from the new leader among the new voters and
stays Online. Before, a broker started with a static bootstrap list
dropped every fetch answer holding a VOTERS record, fell behind and fenced
itself."""

from __future__ import annotations

import trio
from _memory_cluster import VOTERS, MemoryCluster, controller_request

from quorum import Voter
from registration import BrokerState, CreateTopicsRequest, NewTopic

BROKERS = (101, 102)


async def wait_until(predicate, timeout_s=30.0):
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.01)


def endpoint(node_id: int) -> tuple[str, ...]:
    """Where ``MemoryCluster`` says a controller listens (its bootstrap)."""
    return (f"127.0.0.1:{9000 + node_id}",)


async def test_brokers_follow_upgrade_add_and_removal_of_the_leading_controller(nursery, autojump_clock):
    cluster = MemoryCluster(nursery)
    await cluster.start_controllers(snapshot_every_records=20)
    agents = [await cluster.start_broker(broker_id) for broker_id in BROKERS]
    with trio.fail_after(30):
        for agent in agents:
            await agent.wait_for_state(lambda state: state is BrokerState.ONLINE)
    old_leader = next(node_id for node_id, brain in cluster.controller_brains.items() if brain.is_active)
    leading = cluster.controllers[old_leader]

    assert await leading.upgrade_voters({node_id: endpoint(node_id) for node_id in VOTERS}) is not None
    await cluster.start_controller(4)
    newcomer = cluster.controllers[4]
    await wait_until(lambda: newcomer.node.log.end_offset >= leading.node.high_watermark)
    await leading.add_voter(Voter(4, "controller-4", endpoint(4)))
    await leading.remove_voter(old_leader)
    cluster.stop(old_leader)

    new_voters = tuple(sorted({*VOTERS, 4} - {old_leader}))
    topic = NewTopic(name="after-the-change", partitions=2, replication_factor=1)
    response = await controller_request(cluster, CreateTopicsRequest(topics=(topic,)))
    assert not response.results[0].error, response
    await wait_until(lambda: all("after-the-change" in agent.metadata.image.topics for agent in agents))
    for agent in agents:
        core = agent.runtime.node
        assert core.voters.ids == new_voters and core.dynamic_voters
        assert core.leader_id in new_voters
        assert core.counters["messages_out_of_range"] == 0
        assert agent.state is BrokerState.ONLINE
