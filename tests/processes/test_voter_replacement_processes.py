"""Replacing a voter's disk with real `kraft-quorum node` processes
(issue 17, KIP-853): three voters formatted with `kraft-quorum format
--initial-voters`, started without `--voters`; one loses its disk, is
formatted anew (a new directory id) and comes back as an observer; the
operator removes the old (id, directory id) and adds the new one. Writes
keep committing throughout and no acknowledged write is lost."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess

import pytest
import trio

from quorum import ErrorCode
from quorum.cli_errors import EXIT_STORAGE_REFUSED
from quorum.client import IndeterminateError, QuorumClient, VoterChangeRefusedError
from quorum.runtime import KeyValueStateMachine
from quorum.storage import read_data_dir_identity

from cluster import BIN, ProcessCluster

pytestmark = pytest.mark.processes


class Writer:
    """Writes unique keys one after another until stopped; remembers which
    were acknowledged (an indeterminate write may or may not have happened,
    and is not retried: its key is simply not checked)."""

    def __init__(self) -> None:
        self.acknowledged: dict[str, str] = {}
        self.stopped = False

    async def run(self, client: QuorumClient) -> None:
        sequence = 0
        while not self.stopped:
            sequence += 1
            key, value = f"w{sequence}", str(sequence)
            try:
                await client.propose([KeyValueStateMachine.encode_put(key.encode(), value.encode())])
            except IndeterminateError:
                continue
            self.acknowledged[key] = value

    async def commits(self, count: int, timeout_s: float, during: str) -> None:
        """Wait until ``count`` more writes are acknowledged."""
        target = len(self.acknowledged) + count
        with trio.move_on_after(timeout_s):
            while len(self.acknowledged) < target:
                await trio.sleep(0.01)
        assert len(self.acknowledged) >= target, f"writes stopped committing {during}"


async def leader_view(cluster: ProcessCluster):
    """DescribeQuorum answered by the leader every live node agrees on."""
    leader = await cluster.leader()
    async with QuorumClient([f"{leader}@127.0.0.1:{cluster.ports[leader]}"], retry_timeout_s=5) as client:
        return await client.describe()


async def wait_for(predicate, timeout_s: float, what: str):
    """Poll the async ``predicate`` until it returns something true."""
    with trio.move_on_after(timeout_s):
        while True:
            result = await predicate()
            if result:
                return result
            await trio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_replacing_a_voters_disk_under_write_load(tmp_path):
    cluster = ProcessCluster(tmp_path, dynamic=True)
    try:
        for node_id in cluster.ports:
            assert cluster.format(node_id) == cluster.directory_ids[node_id]
        cluster.start_all()
        writer = Writer()
        async with cluster.client(retry_timeout_s=30) as writes, cluster.client(retry_timeout_s=30) as admin:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.run, writes)
                await writer.commits(20, 30, "before anything happened")
                leader = await cluster.leader()
                victim = next(node_id for node_id in sorted(cluster.ports) if node_id != leader)
                old_directory = cluster.directory_ids[victim]

                # The victim's disk is lost; formatted anew it is another replica.
                cluster.kill(victim, signal.SIGKILL)
                shutil.rmtree(cluster.data_dir(victim))
                new_directory = cluster.format(victim, join=True)
                assert new_directory != old_directory
                await writer.commits(20, 30, "with one voter down")

                cluster.start(victim)

                async def observer_caught_up():
                    view = await leader_view(cluster)
                    rows = [r for r in view.observers if r.node_id == victim and r.directory_id == new_directory]
                    return rows and rows[0].log_end_offset is not None and rows[0].log_end_offset > 0 and view

                view = await wait_for(observer_caught_up, 30, f"node {victim} to fetch as an observer")
                # Its id is still a voter, with the old disk, and not counted.
                old_row = next(r for r in view.voters if r.node_id == victim)
                assert (old_row.directory_id, old_row.log_end_offset) == (old_directory, None)
                await writer.commits(20, 30, "with the new disk observing")

                # Adding the new disk under the old one's id is refused.
                with pytest.raises(VoterChangeRefusedError) as refused:
                    await admin.add_voter(victim, new_directory, [f"127.0.0.1:{cluster.ports[victim]}"])
                assert refused.value.code is ErrorCode.DUPLICATE_VOTER
                # So is removing a voter under a directory id it does not have.
                with pytest.raises(VoterChangeRefusedError) as refused:
                    await admin.remove_voter(victim, new_directory)
                assert refused.value.code is ErrorCode.VOTER_NOT_FOUND

                await admin.remove_voter(victim, old_directory)
                await writer.commits(20, 30, "after the old disk was removed")
                await admin.add_voter(victim, new_directory, [f"127.0.0.1:{cluster.ports[victim]}"])
                await writer.commits(20, 30, "after the new disk was added")

                async def replaced():
                    view = await leader_view(cluster)
                    voters = {r.node_id: r for r in view.voters}
                    return (
                        sorted(voters) == sorted(cluster.ports)
                        and voters[victim].directory_id == new_directory
                        and voters[victim].log_end_offset is not None
                        and not view.observers
                        and view
                    )

                view = await wait_for(replaced, 30, "the new voter set")
                assert {r.node_id: r.directory_id for r in view.voters} == {
                    **{node_id: cluster.directory_ids[node_id] for node_id in cluster.ports if node_id != victim},
                    victim: new_directory,
                }
                writer.stopped = True

            # Nothing acknowledged was lost.
            for key, value in writer.acknowledged.items():
                _, answer = await admin.read(key.encode())
                assert KeyValueStateMachine.decode_answer(answer)[0] == value.encode(), key
        assert len(writer.acknowledged) >= 120
    finally:
        cluster.stop_all()


async def test_auto_join_adds_a_new_disk_once_and_never_re_adds_a_removed_one(tmp_path):
    """KIP-853 auto-join: node 2, formatted to join a cluster of one, adds
    itself once caught up. Removed by the operator, it does not add itself
    again, neither at once nor after a restart (Kafka 4.2 did)."""
    cluster = ProcessCluster(tmp_path, voters=2, dynamic=True)
    one = f"1@127.0.0.1:{cluster.ports[1]}"
    try:
        first = cluster.format(1, "--standalone", "--listen", f"127.0.0.1:{cluster.ports[1]}")
        second = cluster.format(2, "--initial-voters", f"{one}:{first}", join=True)
        cluster.start(1)
        cluster.start(2, "--listen", f"127.0.0.1:{cluster.ports[2]}", "--auto-join")
        async with QuorumClient([one], retry_timeout_s=30) as admin:

            async def voters():
                view = await admin.describe()
                return {r.node_id: r.directory_id for r in view.voters}

            await wait_for(lambda: _equals(voters, {1: first, 2: second}), 30, "node 2 to join by itself")
            await admin.remove_voter(2, second)
            refusal = "was a voter and was removed: auto-join does not add it again"
            await wait_for(lambda: _logged(cluster, 2, refusal, 1), 30, "node 2 to see it was removed")
            assert await voters() == {1: first}

            cluster.kill(2, signal.SIGTERM)
            cluster.start(2, "--listen", f"127.0.0.1:{cluster.ports[2]}", "--auto-join")
            await wait_for(lambda: _logged(cluster, 2, refusal, 2), 30, "the restarted node 2 to see it was removed")
            assert await voters() == {1: first}
    finally:
        cluster.stop_all()


async def _equals(get, expected) -> bool:
    return await get() == expected


async def _logged(cluster: ProcessCluster, node_id: int, text: str, times: int) -> bool:
    return cluster.log_text(node_id).count(text) >= times


@pytest.mark.long  # about 20 s; the logic's fast tests: tests/quorum/test_rules_voters.py (upgrade), tests/runtime/test_runtime_voter_changes.py, tests/cli/test_fresh_disk_refusal.py
async def test_a_static_cluster_upgraded_under_write_load_then_a_voter_replaced(tmp_path):
    """KIP-853's kraft.version 0 to 1 without downtime: three nodes started
    with a static --voters list take writes while `upgrade-voters` makes
    their voters dynamic (each with the directory id its first start wrote).
    Then one voter's disk is lost: restarted with --voters on the empty
    directory it refuses to start (the wiped-node hazard); formatted to
    join (``--join --initial-voters`` naming the voters as the upgrade wrote
    them: formatted as the static disks were, the empty disk would count
    itself a voter of the static set, which a node that missed the upgrade
    still counts in; simulator seeds 6521 and 6954) and started again it is
    an observer, and remove-voter / add-voter replace it. No acknowledged
    write is lost."""
    cluster = ProcessCluster(tmp_path)
    try:
        cluster.start_all()
        writer = Writer()
        async with cluster.client(retry_timeout_s=30) as writes, cluster.client(retry_timeout_s=30) as admin:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.run, writes)
                await writer.commits(20, 30, "before the upgrade")
                directories = {n: read_data_dir_identity(cluster.data_dir(n)).directory_id for n in cluster.ports}
                with pytest.raises(VoterChangeRefusedError) as refused:
                    await admin.remove_voter(3)
                assert refused.value.code is ErrorCode.VOTERS_STATIC

                offset = await admin.upgrade_voters()
                assert offset is not None
                await writer.commits(20, 30, "after the upgrade")
                assert await admin.upgrade_voters() is None  # idempotent
                view = await leader_view(cluster)
                assert {r.node_id: r.directory_id for r in view.voters} == directories

                leader = await cluster.leader()
                victim = next(node_id for node_id in sorted(cluster.ports) if node_id != leader)
                cluster.kill(victim, signal.SIGKILL)
                shutil.rmtree(cluster.data_dir(victim))
                cluster.start(victim)  # --voters on an empty directory: refused
                assert cluster.processes.pop(victim).wait(timeout=60) == EXIT_STORAGE_REFUSED
                assert "refuses to start with a static voter list" in cluster.log_text(victim)
                assert not (cluster.data_dir(victim) / "meta.json").exists()
                await writer.commits(20, 30, "with one voter down")

                upgraded = ",".join(f"{n}@127.0.0.1:{cluster.ports[n]}:{directories[n]}" for n in sorted(directories))
                formatted = subprocess.run(
                    [str(BIN / "kraft-quorum"), "format", "--data-dir", str(cluster.data_dir(victim)),
                     "--node-id", str(victim), "--cluster-id", "pykraft", "--join", "--initial-voters", upgraded],
                    capture_output=True, text=True, timeout=60, check=True,
                )  # fmt: skip
                new_directory = json.loads(formatted.stdout)["directory_id"]
                cluster.start(victim)

                async def observer_caught_up():
                    view = await leader_view(cluster)
                    rows = [r for r in view.observers if r.node_id == victim and r.directory_id == new_directory]
                    return rows and rows[0].log_end_offset is not None and rows[0].log_end_offset > 0

                await wait_for(observer_caught_up, 30, f"node {victim}'s new disk to fetch as an observer")
                await admin.remove_voter(victim, directories[victim])
                await writer.commits(20, 30, "after the old disk was removed")
                await admin.add_voter(victim, new_directory, [f"127.0.0.1:{cluster.ports[victim]}"])
                await writer.commits(20, 30, "after the new disk was added")

                async def replaced():
                    view = await leader_view(cluster)
                    return {r.node_id: r.directory_id for r in view.voters} == {**directories, victim: new_directory}

                await wait_for(replaced, 30, "the new voter set")
                writer.stopped = True

            for key, value in writer.acknowledged.items():
                _, answer = await admin.read(key.encode())
                assert KeyValueStateMachine.decode_answer(answer)[0] == value.encode(), key
        assert len(writer.acknowledged) >= 120
    finally:
        cluster.stop_all()
