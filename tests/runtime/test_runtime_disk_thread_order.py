"""The leader wakes its disk thread only after the frames of the core's run
are written: woken earlier, the thread takes the GIL at the loop's next
release (under TLS inside SSL_write, before the followers' Fetch answers
reach the socket) and runs the Python part of its write first, which put
the leader's own copy ahead of the followers' on the commit path (+0.56 ms
sequential p50 with TLS and node processes; docs/benchmarks.md)."""

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


async def test_the_leader_hands_its_disk_thread_a_batch_only_after_the_runs_frames_are_written(
    tmp_path: Path, monkeypatch
) -> None:
    submitted_in_batch: list[bool] = []
    original = runtime_module.QuorumRuntime._persist_in_thread

    def recorded(self: QuorumRuntime) -> None:
        submitted_in_batch.append(self.transport.in_batch or bool(self.transport.held))
        original(self)

    monkeypatch.setattr(runtime_module.QuorumRuntime, "_persist_in_thread", recorded)
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
                io_in_thread=True,
                snapshot_every_records=0,
            )
            await nursery.start(runtime.run)
            runtimes.append(runtime)
        with trio.fail_after(30):
            while not any(runtime.node.leader_has_committed_own_epoch for runtime in runtimes):
                await trio.sleep(0.01)
            leader = next(runtime for runtime in runtimes if runtime.node.leader_has_committed_own_epoch)
            offsets = [await leader.propose([KeyValueStateMachine.encode_put(b"k%d" % index, b"v")]) for index in range(20)]
        nursery.cancel_scope.cancel()
    for storage in storages:
        storage.close()
    assert offsets == sorted(offsets) and len(set(offsets)) == 20
    assert len(submitted_in_batch) >= 10  # group commit may join some writes
    assert not any(submitted_in_batch)
