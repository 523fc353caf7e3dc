"""Disk errors in the trio runtime, on real files (issue 14, part 3;
docs/storage.md, "Disk errors"): a write that fails with ENOSPC or an fsync
that fails with EIO leaves the node up, not acknowledging, shown in its
statistics and metrics; once the disk takes writes again it resumes by
itself, and every data directory reads back whole and sound.

The faults are injected at the segment log's own IO seam (``write_all`` and
``data_sync`` in ``quorum.storage._segments``), for one node's directory
only; everything else is the real runtime over real files, under MockClock.
"""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest
import trio

import quorum.storage._segments as segments_module
from quorum import NotLeaderError, ProposalLostError, ProposalOutcomeUnknownError, QuorumConfig
from quorum.runtime import KeyValueStateMachine, MemoryNetwork, QuorumRuntime
from quorum.storage import FileStorage, check_storage

VOTERS = (1, 2, 3)


class DiskFaults:
    """Makes the log writes or fsyncs of the files under ``failing_dir``
    fail with an errno while it is set. A failing write first writes half
    its bytes (a real ENOSPC may), so the log must roll back a torn tail."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.failing_dir: Path | None = None
        self.write_errno: int | None = None
        self.fsync_errno: int | None = None
        self.failures = 0
        real_write_all = segments_module.write_all
        real_data_sync = segments_module.data_sync

        def write_all(fd: int, data: bytes) -> None:
            if self.write_errno is not None and self._mine(fd):
                self.failures += 1
                os.write(fd, data[: len(data) // 2])
                raise OSError(self.write_errno, os.strerror(self.write_errno))
            real_write_all(fd, data)

        def data_sync(fd: int) -> None:
            if self.fsync_errno is not None and self._mine(fd):
                self.failures += 1
                raise OSError(self.fsync_errno, os.strerror(self.fsync_errno))
            real_data_sync(fd)

        monkeypatch.setattr(segments_module, "write_all", write_all)
        monkeypatch.setattr(segments_module, "data_sync", data_sync)

    def _mine(self, fd: int) -> bool:
        assert self.failing_dir is not None
        return os.readlink(f"/proc/self/fd/{fd}").startswith(str(self.failing_dir))

    def fail(self, directory: Path, *, write: int | None = None, fsync: int | None = None) -> None:
        self.failing_dir, self.write_errno, self.fsync_errno = directory, write, fsync

    def repair(self) -> None:
        self.write_errno = self.fsync_errno = None


class FileCluster:
    def __init__(self, nursery: trio.Nursery, root: Path) -> None:
        self.nursery = nursery
        self.root = root
        self.network = MemoryNetwork()
        self.runtimes: dict[int, QuorumRuntime] = {}
        self.storages: dict[int, FileStorage] = {}

    def directory(self, node_id: int) -> Path:
        return self.root / f"node-{node_id}"

    async def start_all(self) -> None:
        for node_id in VOTERS:
            storage = FileStorage.open(self.directory(node_id), node_id=node_id, cluster_id="disk-errors")
            runtime = QuorumRuntime(
                QuorumConfig(node_id=node_id, voters=VOTERS),
                KeyValueStateMachine(),
                storage=storage,
                transport=self.network.transport(node_id),
                rng=random.Random(node_id),
                snapshot_every_records=0,
            )
            await self.nursery.start(runtime.run)
            self.runtimes[node_id], self.storages[node_id] = runtime, storage

    async def leader(self, exclude: int | None = None) -> QuorumRuntime:
        with trio.fail_after(60):
            while True:
                for node_id, runtime in sorted(self.runtimes.items()):
                    if node_id != exclude and runtime.node.leader_has_committed_own_epoch:
                        return runtime
                await trio.sleep(0.01)

    async def write(self, key: bytes, value: bytes, exclude: int | None = None) -> int:
        """Commit one put through whoever leads (retrying while leadership
        moves); returns its offset."""
        with trio.fail_after(60):
            while True:
                leader = await self.leader(exclude)
                try:
                    return await leader.propose([KeyValueStateMachine.encode_put(key, value)])
                except (NotLeaderError, ProposalLostError, ProposalOutcomeUnknownError):
                    await trio.sleep(0.05)

    def close(self) -> None:
        for storage in self.storages.values():
            storage.close()


async def check_sound_and_equal(cluster: FileCluster, nursery: trio.Nursery) -> None:
    """Stop every node; every directory is sound and holds the same log."""
    nursery.cancel_scope.cancel()
    await trio.sleep(0)
    cluster.close()
    logs = []
    for node_id in VOTERS:
        report = check_storage(cluster.directory(node_id))
        assert report.verdict == "sound", report.lines
        with FileStorage.open(cluster.directory(node_id)) as storage:
            logs.append(list(storage.entries_from()))
    assert logs[0] and logs[0] == logs[1] == logs[2]


@pytest.mark.parametrize("fault", ["write-enospc", "fsync-eio"])
async def test_a_leader_whose_disk_fails_stays_up_resigns_and_resumes(tmp_path, monkeypatch, autojump_clock, fault):
    """The leader's disk fails (its writes run in its persister task, as
    in production)."""
    faults = DiskFaults(monkeypatch)
    async with trio.open_nursery() as nursery:
        cluster = FileCluster(nursery, tmp_path)
        await cluster.start_all()
        for index in range(5):
            await cluster.write(b"k", b"before-%d" % index)
        leader = await cluster.leader()
        victim = leader.config.node_id
        if fault == "write-enospc":
            faults.fail(cluster.directory(victim), write=errno.ENOSPC)
            name = "ENOSPC"
        else:
            faults.fail(cluster.directory(victim), fsync=errno.EIO)
            name = "EIO"
        # The write that meets the failure: it may still commit (on the
        # followers' disks: a majority without the leader's), or be refused.
        with trio.fail_after(30):
            try:
                await leader.propose([KeyValueStateMachine.encode_put(b"k", b"during")])
            except (NotLeaderError, ProposalLostError, ProposalOutcomeUnknownError):
                pass
        new_leader = await cluster.leader(exclude=victim)
        assert new_leader.config.node_id != victim
        assert not leader.node.is_leader
        assert leader.statistics()["disk_failure"] == name
        assert leader.node.describe().disk_failure == name
        assert leader.metrics.value("pykraft_quorum_disk_failed") == 1
        rendered = leader.metrics.text()
        assert f'pykraft_quorum_disk_failed{{node="{victim}"}} 1.0' in rendered
        assert f'pykraft_quorum_disk_failures_total{{errno="{name}",node="{victim}"}}' in rendered
        assert leader.metrics.health_check() == (False, f"disk writes fail ({name})")
        # The healthy majority keeps committing while the disk fails.
        for index in range(5):
            await cluster.write(b"k", b"while-%d" % index, exclude=victim)
        await trio.sleep(3)  # some retries fail meanwhile (backoff)
        assert leader.statistics()["disk_failure"] == name
        failures_while_down = faults.failures
        assert failures_while_down >= 2

        faults.repair()
        with trio.fail_after(60):
            await leader.wait_until(
                lambda: leader.statistics()["disk_failure"] is None
                and leader.node.log.end_offset >= new_leader.node.high_watermark
            )
        assert leader.metrics.value("pykraft_quorum_disk_failed") == 0
        last = await cluster.write(b"k", b"after")
        with trio.fail_after(60):
            for runtime in cluster.runtimes.values():
                await runtime.wait_until(lambda runtime=runtime: runtime.applied_offset > last)
        await check_sound_and_equal(cluster, nursery)


async def test_a_follower_whose_fsync_fails_stops_acknowledging_and_catches_up(tmp_path, monkeypatch, autojump_clock):
    faults = DiskFaults(monkeypatch)
    async with trio.open_nursery() as nursery:
        cluster = FileCluster(nursery, tmp_path)
        await cluster.start_all()
        await cluster.write(b"k", b"first")
        leader = await cluster.leader()
        victim = next(node_id for node_id in VOTERS if node_id != leader.config.node_id)
        follower = cluster.runtimes[victim]
        faults.fail(cluster.directory(victim), fsync=errno.EIO)
        durable_before = follower.node.log.end_offset
        for index in range(5):
            await cluster.write(b"k", b"v%d" % index)
        await trio.sleep(2)
        assert follower.statistics()["disk_failure"] == "EIO"
        # The leader never heard an acknowledgement past the durable point.
        view = {r.node_id: r.log_end_offset for r in leader.node.describe().voters}
        assert view[victim] is not None and view[victim] <= durable_before + 1
        faults.repair()
        with trio.fail_after(60):
            await follower.wait_until(
                lambda: follower.statistics()["disk_failure"] is None
                and follower.node.log.end_offset >= leader.node.high_watermark
            )
        await check_sound_and_equal(cluster, nursery)
