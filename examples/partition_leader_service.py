"""A leader-per-partition service on the broker agent, in a page.

Each service instance embeds ``open_broker``: the quorum tells it which
partitions it leads, with a **leader epoch** per partition. The instance
writes only for the partitions it leads, stamping every write with that
epoch: the store refuses any write whose epoch is below the highest it has
seen for the partition, so a deposed leader (paused, partitioned, slow to
hear the news) can never overwrite its successor. When the broker is
fenced, every role goes to "none" at once and the instance stops writing.

Run the demo (a controller and three instances in one process)::

    python examples/partition_leader_service.py --seconds 10
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import trio

from broker_agent import BrokerConfig, BrokerStateNotice, LeadershipChange, PartitionRole, open_broker

# ---------------------------------------------------------------------------
# The store: any storage with a conditional write will do (a database row
# with "WHERE epoch <= ?", an object store with preconditions...).
# ---------------------------------------------------------------------------


@dataclass
class FencedStore:
    highest_epoch: dict[tuple[str, int], int] = field(default_factory=dict)
    writes: dict[tuple[str, int], list[tuple[int, int, str]]] = field(default_factory=dict)
    refused: list[tuple[tuple[str, int], int, int]] = field(default_factory=list)

    def write(self, partition: tuple[str, int], leader_epoch: int, writer: int, value: str) -> bool:
        """Accept the write unless a later leader epoch has been seen."""
        if leader_epoch < self.highest_epoch.get(partition, -1):
            self.refused.append((partition, leader_epoch, writer))
            return False
        self.highest_epoch[partition] = leader_epoch
        self.writes.setdefault(partition, []).append((leader_epoch, writer, value))
        return True


# ---------------------------------------------------------------------------
# The service instance
# ---------------------------------------------------------------------------


async def lead(store: FencedStore, me: int, change: LeadershipChange, period_s: float) -> None:
    """The leader's work for one partition: here, one write per period."""
    partition, sequence = (change.topic, change.partition), 0
    while True:
        sequence += 1
        if not store.write(partition, change.leader_epoch, me, f"{me}:{sequence}"):
            return  # fenced by a newer leader: stop at once
        await trio.sleep(period_s)


async def run_instance(config: BrokerConfig, store: FencedStore, *, period_s: float = 0.05) -> None:
    async with open_broker(config) as broker, trio.open_nursery() as nursery:
        leading: dict[tuple[str, int], trio.CancelScope] = {}

        async def start_leading(change: LeadershipChange, task_status=trio.TASK_STATUS_IGNORED) -> None:
            with trio.CancelScope() as scope:
                task_status.started(scope)
                await lead(store, config.broker_id, change, period_s)

        async for event in broker.leadership_changes():
            if isinstance(event, BrokerStateNotice):
                continue  # leaving Online also turns every role to "none"
            key = (event.topic, event.partition)
            if key in leading:  # any change ends the current term
                leading.pop(key).cancel()
            if event.role == PartitionRole.LEADER:
                leading[key] = await nursery.start(start_leading, event)
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------------
# The demo: one controller voter and three instances in one process
# ---------------------------------------------------------------------------


async def demo(seconds: float, *, partitions: int = 6, instances: int = 3) -> FencedStore:
    from quorum.runtime import NodeConfig
    from registration import ControllerConfig
    from registration import open_controller_node
    from registration.client import AdminClient

    quorum = {"election_timeout_ms": 500, "fetch_timeout_ms": 1000}
    timers = dict(session_timeout_ms=2000, heartbeat_interval_ms=500)
    store = FencedStore()
    controller_config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, quorum=quorum, plaintext=True)
    async with open_controller_node(controller_config, ControllerConfig(cluster_id="pykraft", **timers)) as controller:
        bootstrap = {1: ("127.0.0.1", controller.listen_port)}
        async with trio.open_nursery() as nursery:
            scopes = []
            for broker_id in range(101, 101 + instances):
                config = BrokerConfig(
                    broker_id=broker_id, bootstrap=bootstrap, listen=("127.0.0.1", 0), quorum=quorum, plaintext=True, **timers
                )
                scope = trio.CancelScope()
                scopes.append(scope)
                nursery.start_soon(_cancellable, scope, run_instance, config, store)
            async with AdminClient([f"1@127.0.0.1:{controller.listen_port}"]) as admin:
                while (await admin.create_topic("jobs", partitions=partitions, replication_factor=instances)).results[0].error:
                    await trio.sleep(0.1)  # until every instance is Online
            await trio.sleep(seconds / 2)
            scopes[0].cancel()  # the first instance dies: its partitions get new leaders
            await trio.sleep(seconds / 2)
            nursery.cancel_scope.cancel()
    return store


async def _cancellable(scope: trio.CancelScope, function, *args) -> None:
    with scope:
        await function(*args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    store = trio.run(demo, parser.parse_args().seconds)
    for partition, writes in sorted(store.writes.items()):
        epochs = sorted({(epoch, writer) for epoch, writer, _ in writes})
        print(f"{partition[0]}-{partition[1]}: {len(writes)} writes; (leader epoch, writer): {epochs}")
    print(f"refused stale writes: {store.refused}")


if __name__ == "__main__":
    main()
