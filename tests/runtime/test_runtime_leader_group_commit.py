"""The leader's write rounds (quorum/runtime/_runtime.py, the persister):
they start only once the frames of the core's run are written, so the
followers' copy of the records, on the commit path, never waits behind the
leader's own (+0.56 ms sequential p50 with TLS and node processes when it
did; docs/benchmarks.md, "TLS on against off"); and proposals handed to the
core by tasks that were ready together share one write and one fsync
(group commit; docs/benchmarks.md, "The runtime's disk path and
wake-ups")."""

from __future__ import annotations

import random
from pathlib import Path

import trio

from quorum import QuorumConfig
from quorum.runtime import KeyValueStateMachine, QuorumRuntime
from quorum.runtime import _runtime as runtime_module
from quorum.runtime._memory_transport import MemoryNetwork, MemoryTransport
from quorum.storage import FileStorage

VOTERS = (1, 2, 3)
PROPOSERS = 10


class BatchingTransport(MemoryTransport):
    """A ``MemoryTransport`` that holds what it is given between
    ``begin_batch`` and ``end_batch``, as ``TcpTransport`` does."""

    def __init__(self, network: MemoryNetwork, node_id: int) -> None:
        super().__init__(network, node_id)
        self.in_batch = False
        self.held: list = []

    def send(self, message) -> None:  # noqa: ANN001
        if self.in_batch:
            self.held.append(message)
        else:
            super().send(message)

    def begin_batch(self) -> None:
        self.in_batch = True

    def end_batch(self) -> None:
        self.in_batch = False
        held, self.held = self.held, []
        for message in held:
            super().send(message)


async def test_the_leaders_write_rounds_follow_the_runs_frames_and_join_ready_proposals(
    tmp_path: Path, monkeypatch, autojump_clock
) -> None:
    # (node, offsets of the round's records, whether the run's frames were still held)
    rounds: list[tuple[int, list[int], bool]] = []
    original = runtime_module.QuorumRuntime._write_batch

    def recorded(self: QuorumRuntime, outputs) -> None:  # noqa: ANN001
        if self.node.is_leader:
            offsets = [entry.offset for output in outputs for entry in output.append]
            rounds.append((self.config.node_id, offsets, self.transport.in_batch or bool(self.transport.held)))
        original(self, outputs)

    monkeypatch.setattr(runtime_module.QuorumRuntime, "_write_batch", recorded)
    network = MemoryNetwork()
    storages = []
    async with trio.open_nursery() as nursery:
        runtimes = []
        for node_id in VOTERS:
            storage = FileStorage.open(tmp_path / f"node-{node_id}", node_id=node_id, cluster_id="order")
            storages.append(storage)
            runtime = QuorumRuntime(
                QuorumConfig(node_id=node_id, voters=VOTERS),
                KeyValueStateMachine(),
                storage=storage,
                transport=BatchingTransport(network, node_id),
                rng=random.Random(node_id),
                snapshot_every_records=0,
            )
            await nursery.start(runtime.run)
            runtimes.append(runtime)
        with trio.fail_after(30):
            while not any(runtime.node.leader_has_committed_own_epoch for runtime in runtimes):
                await trio.sleep(0.01)
            leader = next(runtime for runtime in runtimes if runtime.node.leader_has_committed_own_epoch)
            sequential = [await leader.propose([KeyValueStateMachine.encode_put(b"k%d" % index, b"v")]) for index in range(20)]
            together: list[int] = []

            async def propose(index: int) -> None:
                together.append(await leader.propose([KeyValueStateMachine.encode_put(b"t%d" % index, b"v")]))

            async with trio.open_nursery() as proposers:
                for index in range(PROPOSERS):
                    proposers.start_soon(propose, index)
        nursery.cancel_scope.cancel()
    for storage in storages:
        storage.close()
    assert sequential == sorted(sequential) and len(set(sequential)) == 20
    leader_rounds = [(offsets, held) for node_id, offsets, held in rounds if node_id == leader.config.node_id]
    # Each record went in exactly one round (the followers, a majority, may
    # commit one before the leader's round: the next joins that round).
    written = [offset for offsets, _ in leader_rounds for offset in offsets]
    assert len(written) == len(set(written)) and set(sequential) <= set(written)
    assert not any(held for _, held in leader_rounds)
    # The proposers were ready together: their records went in one round.
    assert sorted(together) == list(range(min(together), min(together) + PROPOSERS))
    assert [sorted(offsets) for offsets, _ in leader_rounds if set(offsets) & set(together)] == [sorted(together)]
