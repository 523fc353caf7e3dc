"""The wiped-node hazard at start-up (issue 17): a node given a static
``--voters`` list and a fresh disk (no meta.json, or one formatted without
``--initial-voters`` that holds no log) asks the voters it names whether
the cluster has dynamic voters, and refuses to start if one says so (a
wiped disk of a dynamic cluster must be formatted with ``--join
--initial-voters`` and added again; simulator seeds 6521 and 6954). A
static cluster's first start, a disk formatted for dynamic voters, a disk
with a log and the disk the voter set names are never refused."""

from __future__ import annotations

import json
import shutil

import trio
from click.testing import CliRunner

from loopback import free_ports
from quorum.cli import main
from quorum.client import QuorumClient, refuse_a_fresh_static_disk_in_a_dynamic_cluster
from quorum.cli_errors import EXIT_STORAGE_REFUSED
from quorum.runtime import KeyValueStateMachine, NodeConfig, open_quorum_node
from quorum.storage import StorageOwnershipError, format_data_dir, holds_log, read_data_dir_identity
from quorum import Voter

import pytest


def run_cli(*arguments: str):
    """`kraft-quorum ...` in a thread (the command runs its own trio loop)."""
    return trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(arguments)))


async def test_a_wiped_voter_of_a_dynamic_cluster_refuses_to_start_with_a_static_voter_list(tmp_path):
    port1, port2 = free_ports(2)
    format_data_dir(
        tmp_path / "one", node_id=1, cluster_id="c", directory_id="disk-1", fsync=False,
        bootstrap_voters=(Voter(1, "disk-1", (f"127.0.0.1:{port1}",)),),
    )  # fmt: skip
    running = NodeConfig(node_id=1, cluster_id="c", data_dir=tmp_path / "one", fsync=False, plaintext=True)
    async with open_quorum_node(running) as node:
        with trio.fail_after(30):
            await node.wait_for_leader()
        voters = {1: ("127.0.0.1", port1), 2: ("127.0.0.1", port2)}
        wiped = NodeConfig(node_id=2, cluster_id="c", voters=voters, data_dir=tmp_path / "two", plaintext=True)
        with pytest.raises(StorageOwnershipError, match="refuses to start with a static voter list"):
            await refuse_a_fresh_static_disk_in_a_dynamic_cluster(wiped)
        assert not (tmp_path / "two" / "meta.json").exists()  # nothing written: it may still be formatted

        result = await run_cli(
            "node", "--node-id", "2", "--voters", f"1@127.0.0.1:{port1},2@127.0.0.1:{port2}",
            "--cluster-id", "c", "--data-dir", str(tmp_path / "two"), "--plaintext",
        )  # fmt: skip
        assert result.exit_code == EXIT_STORAGE_REFUSED, result.output
        assert "voter 1 reports that cluster 'c' has dynamic voters" in result.output

        # A directory formatted for dynamic voters is not probed: its
        # meta.json says what it is.
        format_data_dir(
            tmp_path / "formatted", node_id=2, cluster_id="c", fsync=False,
            bootstrap_voters=(Voter(1, "disk-1", (f"127.0.0.1:{port1}",)),),
        )  # fmt: skip
        formatted = NodeConfig(node_id=2, cluster_id="c", voters=voters, data_dir=tmp_path / "formatted", plaintext=True)
        await refuse_a_fresh_static_disk_in_a_dynamic_cluster(formatted)


async def test_a_static_clusters_first_start_is_not_refused(tmp_path):
    """Its peers answer with a static set (no directory ids), or not at all."""
    port1, port2, port3 = free_ports(3)
    voters = {1: ("127.0.0.1", port1), 2: ("127.0.0.1", port2), 3: ("127.0.0.1", port3)}
    first = NodeConfig(node_id=1, cluster_id="c", voters=voters, data_dir=tmp_path / "one", fsync=False, plaintext=True)
    with trio.fail_after(10):
        await refuse_a_fresh_static_disk_in_a_dynamic_cluster(first)  # nobody answers yet
    async with open_quorum_node(first):
        second = NodeConfig(node_id=2, cluster_id="c", voters=voters, data_dir=tmp_path / "two", plaintext=True)
        with trio.fail_after(10):
            await refuse_a_fresh_static_disk_in_a_dynamic_cluster(second)  # node 1 answers: static


async def test_a_disk_replaced_after_an_upgrade_is_refused_formatted_static_and_joins_formatted_to_join(tmp_path):
    """Three static voters are upgraded to dynamic voters (``upgrade-voters``);
    node 3 stops and its disk is replaced. Formatted as the static disks
    were (no ``--initial-voters``) and started with ``--voters``, the empty
    disk would count itself a voter of the static set: it is refused, with
    exit status 3, before anything is written. Formatted with ``--join
    --initial-voters`` naming the voters as the upgrade wrote them it
    starts, and fetches the log as an observer. Node 3's old disk, which
    holds a log, and a fresh disk the voter set names, are not refused."""
    ports = dict(zip((1, 2, 3), free_ports(3)))
    voters = {node_id: ("127.0.0.1", port) for node_id, port in ports.items()}
    voters_text = ",".join(f"{node_id}@127.0.0.1:{port}" for node_id, port in ports.items())

    def config(node_id: int, data_dir=None) -> NodeConfig:
        return NodeConfig(
            node_id=node_id, cluster_id="c", voters=voters, data_dir=data_dir or tmp_path / str(node_id),
            fsync=False, plaintext=True,
        )  # fmt: skip

    async with (
        open_quorum_node(config(1), KeyValueStateMachine()) as one,
        open_quorum_node(config(2), KeyValueStateMachine()) as two,
        QuorumClient([f"{n}@127.0.0.1:{p}" for n, p in ports.items()], cluster_id="c", retry_timeout_s=30) as admin,
    ):
        async with open_quorum_node(config(3), KeyValueStateMachine()) as three:
            with trio.fail_after(30):
                upgraded_at = await admin.upgrade_voters()
                await three.runtime.wait_until(lambda: three.runtime.node.log.end_offset > upgraded_at)
        directories = {node_id: read_data_dir_identity(tmp_path / str(node_id)).directory_id for node_id in ports}
        with trio.fail_after(10):
            await refuse_a_fresh_static_disk_in_a_dynamic_cluster(config(3))  # its old disk holds a log

        # The fresh disk the voter set names (its directory id) is not refused.
        format_data_dir(tmp_path / "named", node_id=3, cluster_id="c", directory_id=directories[3], fsync=False)
        with trio.fail_after(10):
            await refuse_a_fresh_static_disk_in_a_dynamic_cluster(config(3, tmp_path / "named"))

        shutil.rmtree(tmp_path / "3")  # node 3's disk is lost; the new one is formatted the static way
        result = await run_cli("format", "--data-dir", str(tmp_path / "3"), "--node-id", "3", "--cluster-id", "c")
        assert result.exit_code == 0 and json.loads(result.output)["voters"] == "static", result.output
        result = await run_cli(
            "node", "--node-id", "3", "--voters", voters_text, "--data-dir", str(tmp_path / "3"), "--plaintext"
        )
        assert result.exit_code == EXIT_STORAGE_REFUSED, result.output
        assert "holds no log and its meta.json names no voters" in result.output
        assert "reports that cluster 'c' has dynamic voters, so node 3 refuses to start" in result.output
        assert "kraft-quorum format --join --initial-voters" in result.output
        assert not holds_log(tmp_path / "3") and not (tmp_path / "3" / "quorum-state.json").exists()

        shutil.rmtree(tmp_path / "3")
        upgraded = ",".join(f"{n}@127.0.0.1:{ports[n]}:{directories[n]}" for n in sorted(ports))
        result = await run_cli(
            "format", "--data-dir", str(tmp_path / "3"), "--node-id", "3", "--cluster-id", "c",
            "--join", "--initial-voters", upgraded,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        new_directory = json.loads(result.output)["directory_id"]
        with trio.fail_after(10):
            await refuse_a_fresh_static_disk_in_a_dynamic_cluster(config(3))  # dynamic: not even asked
        async with open_quorum_node(config(3), KeyValueStateMachine()) as three:
            core = three.runtime.node
            with trio.fail_after(30):
                await three.runtime.wait_until(lambda: core.log.end_offset > upgraded_at)
            assert core.dynamic_voters and not core.is_voter
            leader = one if one.is_leader else two
            with trio.fail_after(30):
                await leader.runtime.wait_until(
                    lambda: any(row.node_id == 3 and row.directory_id == new_directory for row in leader.describe().observers)
                )
            assert {row.node_id: row.directory_id for row in leader.describe().voters} == directories
