"""The leader shows which voters repair a damaged log (issue 14): a
repairing voter says so in its Fetch, and the leader's describe and its
``pykraft_quorum_voter_repairing`` gauge name it until it is done.

The follower's damage is a flipped bit in its **last** batch, which is
whole: damage, not a torn tail (docs/storage.md, "Torn tail or damage"). Its
header cannot be trusted, so the repair bounds what it may have
acknowledged by its bytes, past the leader's log end: the follower keeps
repairing (and the leader keeps showing it) until the leader's committed
log passes that bound.
"""

from __future__ import annotations

import random

import trio
from quorum import QuorumConfig
from quorum.runtime import KeyValueStateMachine, MemoryNetwork, QuorumRuntime
from quorum.storage import FileStorage, dump_log

VOTERS = (1, 2, 3)


def flip_last_batch(data_dir) -> None:
    """Flip one bit in the middle of the log's last batch: a whole batch
    failing its CRC with no zeroed sector, so damage, not a torn tail."""
    batches = [item for item in dump_log(data_dir, records=False) if item["type"] == "batch"]
    last = batches[-1]
    position = last["position"] + last["size_bytes"] // 2
    with open(last["file"], "r+b") as segment:
        segment.seek(position)
        [byte] = segment.read(1)
        segment.seek(position)
        segment.write(bytes([byte ^ 0x10]))


async def test_the_leader_shows_a_repairing_voter_in_describe_and_metrics(tmp_path, autojump_clock):
    network = MemoryNetwork()
    runtimes: dict[int, QuorumRuntime] = {}
    scopes: dict[int, trio.CancelScope] = {}
    storages: dict[int, FileStorage] = {}

    async def start(nursery: trio.Nursery, node_id: int, **options) -> None:
        storage = FileStorage.open(tmp_path / f"node-{node_id}", node_id=node_id, cluster_id="c", **options)
        runtime = QuorumRuntime(
            QuorumConfig(node_id=node_id, voters=VOTERS),
            KeyValueStateMachine(),
            storage=storage,
            transport=network.transport(node_id),
            rng=random.Random(node_id),
            snapshot_every_records=0,
        )
        scope = trio.CancelScope()

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await runtime.run(task_status=task_status)

        await nursery.start(run)
        runtimes[node_id], scopes[node_id], storages[node_id] = runtime, scope, storage

    async def leader() -> QuorumRuntime:
        with trio.fail_after(60):
            while True:
                for runtime in runtimes.values():
                    if runtime.node.leader_has_committed_own_epoch:
                        return runtime
                await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        for node_id in VOTERS:
            await start(nursery, node_id)
        first = await leader()
        for index in range(3):
            await first.propose([KeyValueStateMachine.encode_put(b"k", b"%d" % index)])
        # The last batch is large, so its bytes bound many offsets.
        last = await first.propose([KeyValueStateMachine.encode_put(b"big", b"x" * 1000)])
        follower = next(n for n in VOTERS if n != first.config.node_id)
        with trio.fail_after(30):
            await runtimes[follower].wait_until(lambda: runtimes[follower].node.log.end_offset > last)
        scopes[follower].cancel()
        await trio.sleep(0.1)
        storages[follower].close()
        flip_last_batch(tmp_path / f"node-{follower}")
        await start(nursery, follower, repair_damage=True)
        repair = storages[follower].repair
        assert repair is not None and repair.acknowledged_end > last + 100

        current = await leader()
        with trio.fail_after(30):
            await current.wait_until(lambda: current.node.describe().repairing_voters == (follower,))
        assert current.metrics.value("pykraft_quorum_voter_repairing", voter=str(follower)) == 1
        assert runtimes[follower].node.describe().repairing_voters == ()

        while current.node.high_watermark <= repair.acknowledged_end:
            await current.propose([KeyValueStateMachine.encode_put(b"k", b"more")])
        with trio.fail_after(30):
            await current.wait_until(lambda: current.node.describe().repairing_voters == ())
        assert runtimes[follower].node.repairing is None
        assert current.metrics.value("pykraft_quorum_voter_repairing", voter=str(follower)) == 0
        nursery.cancel_scope.cancel()
    for storage in storages.values():
        storage.close()
