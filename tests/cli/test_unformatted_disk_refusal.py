"""The wiped-node hazard at start-up (issue 17): a node given a static
``--voters`` list and a data directory with no meta.json asks the voters it
names whether the cluster has dynamic voters, and refuses to start if one
says so (a wiped disk of a dynamic cluster must be formatted and added
again). A static cluster's first start, and a formatted directory, are
never refused."""

from __future__ import annotations

import trio
from click.testing import CliRunner

from loopback import free_ports
from quorum.cli import main, refuse_an_unformatted_disk_in_a_dynamic_cluster
from quorum.cli_errors import EXIT_STORAGE_REFUSED
from quorum.runtime import KeyValueStateMachine, NodeConfig, open_quorum_node
from quorum.storage import StorageOwnershipError, format_data_dir
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
            await refuse_an_unformatted_disk_in_a_dynamic_cluster(wiped)
        assert not (tmp_path / "two" / "meta.json").exists()  # nothing written: it may still be formatted

        result = await run_cli(
            "node", "--node-id", "2", "--voters", f"1@127.0.0.1:{port1},2@127.0.0.1:{port2}",
            "--cluster-id", "c", "--data-dir", str(tmp_path / "two"), "--plaintext",
        )  # fmt: skip
        assert result.exit_code == EXIT_STORAGE_REFUSED, result.output
        assert "voter 1 reports that cluster 'c' has dynamic voters" in result.output

        # A formatted directory is not probed: its meta.json says what it is.
        format_data_dir(tmp_path / "formatted", node_id=2, cluster_id="c", fsync=False)
        formatted = NodeConfig(node_id=2, cluster_id="c", voters=voters, data_dir=tmp_path / "formatted", plaintext=True)
        await refuse_an_unformatted_disk_in_a_dynamic_cluster(formatted)


async def test_a_static_clusters_first_start_is_not_refused(tmp_path):
    """Its peers answer with a static set (no directory ids), or not at all."""
    port1, port2, port3 = free_ports(3)
    voters = {1: ("127.0.0.1", port1), 2: ("127.0.0.1", port2), 3: ("127.0.0.1", port3)}
    first = NodeConfig(node_id=1, cluster_id="c", voters=voters, data_dir=tmp_path / "one", fsync=False, plaintext=True)
    with trio.fail_after(10):
        await refuse_an_unformatted_disk_in_a_dynamic_cluster(first)  # nobody answers yet
    async with open_quorum_node(first):
        second = NodeConfig(node_id=2, cluster_id="c", voters=voters, data_dir=tmp_path / "two", plaintext=True)
        with trio.fail_after(10):
            await refuse_an_unformatted_disk_in_a_dynamic_cluster(second)  # node 1 answers: static
