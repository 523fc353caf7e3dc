"""``kraft-quorum format`` (KIP-853 directory ids): meta.json gets the node
id, the cluster id, a fresh random directory id and, for a dynamic-voter
cluster, the bootstrap voters; storage reads them back."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from quorum import Voter
from quorum.cli import main
from quorum.storage import FileStorage, StorageOwnershipError, format_data_dir


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_format_writes_a_fresh_random_directory_id_each_time(tmp_path):
    first = run("format", "--data-dir", str(tmp_path / "a"), "--node-id", "1", "--cluster-id", "c")
    second = run("format", "--data-dir", str(tmp_path / "b"), "--node-id", "1", "--cluster-id", "c")
    assert first.exit_code == second.exit_code == 0, first.output + second.output
    one, two = json.loads(first.output), json.loads(second.output)
    assert one["voters"] == "static"
    assert len(one["directory_id"]) == 32 and one["directory_id"] != two["directory_id"]
    storage = FileStorage.open(tmp_path / "a", node_id=1, cluster_id="c", fsync=False)
    try:
        assert storage.identity.directory_id == one["directory_id"]
        assert storage.identity.bootstrap_voters == ()
    finally:
        storage.close()


def test_format_refuses_a_formatted_or_used_directory(tmp_path):
    assert run("format", "--data-dir", str(tmp_path), "--node-id", "1", "--cluster-id", "c").exit_code == 0
    again = run("format", "--data-dir", str(tmp_path), "--node-id", "1", "--cluster-id", "c")
    assert again.exit_code != 0
    assert "already formatted" in again.output
    used = tmp_path / "used"
    FileStorage.open(used, node_id=2, cluster_id="c", fsync=False).close()  # a first open writes meta.json
    with pytest.raises(StorageOwnershipError):
        format_data_dir(used, node_id=2, cluster_id="c", fsync=False)


def test_format_standalone_bootstraps_a_dynamic_cluster_of_one(tmp_path):
    result = run(
        "format", "--data-dir", str(tmp_path), "--node-id", "1", "--cluster-id", "c",
        "--standalone", "--listen", "127.0.0.1:9093",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    storage = FileStorage.open(tmp_path, node_id=1, cluster_id="c", fsync=False)
    try:
        identity = storage.identity
    finally:
        storage.close()
    assert identity.bootstrap_voters == (Voter(1, shown["directory_id"], ("127.0.0.1:9093",)),)


def test_format_with_initial_voters_takes_this_nodes_directory_id_from_the_list(tmp_path):
    voters = "1@h1:9093:aaaa,2@h2:9093:bbbb,3@h3:9093:cccc"
    result = run("format", "--data-dir", str(tmp_path), "--node-id", "2", "--cluster-id", "c", "--initial-voters", voters)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["directory_id"] == "bbbb"
    storage = FileStorage.open(tmp_path, fsync=False)
    try:
        assert [voter.node_id for voter in storage.identity.bootstrap_voters] == [1, 2, 3]
        assert storage.identity.bootstrap_voters[0] == Voter(1, "aaaa", ("h1:9093",))
    finally:
        storage.close()


def test_format_join_gives_a_replaced_disk_a_fresh_directory_id(tmp_path):
    """KIP-853: node 2's disk is replaced. Formatted with --join and the
    cluster's initial voters, it gets a new directory id (never the one the
    list names for node 2), so it starts as an observer until it is added."""
    voters = "1@h1:9093:aaaa,2@h2:9093:bbbb,3@h3:9093:cccc"
    result = run(
        "format", "--data-dir", str(tmp_path), "--node-id", "2", "--cluster-id", "c", "--initial-voters", voters, "--join"
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    directory_id = json.loads(result.output)["directory_id"]
    assert len(directory_id) == 32 and directory_id != "bbbb"
    storage = FileStorage.open(tmp_path, fsync=False)
    try:
        assert storage.identity.directory_id == directory_id
        assert storage.identity.bootstrap_voters[1] == Voter(2, "bbbb", ("h2:9093",))
    finally:
        storage.close()


@pytest.mark.parametrize(
    "args",
    [
        ["--join"],  # no initial voters to join
        ["--join", "--initial-voters", "1@h1:9093:aaaa", "--directory-id", "aaaa"],  # the old disk's id
        ["--join", "--standalone", "--listen", "h:1", "--initial-voters", "1@h1:9093:aaaa"],
        ["--initial-voters", "1@h1:9093"],  # no directory id
        ["--initial-voters", "x@h1:9093:aaaa"],
        ["--initial-voters", "1@h1:9093:aaaa,1@h2:9093:bbbb"],  # an id twice
        ["--standalone"],  # no --listen
        ["--standalone", "--listen", "h:1", "--initial-voters", "1@h1:9093:aaaa"],
        ["--directory-id", "has space"],
    ],
)
def test_format_refuses_bad_arguments_and_writes_nothing(tmp_path, args):
    result = run("format", "--data-dir", str(tmp_path / "d"), "--node-id", "1", "--cluster-id", "c", *args)
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "d" / "meta.json").exists()


@pytest.mark.parametrize(
    "node_id, cluster_id",
    [
        ("2147483648", "c"),  # past Kafka's int32 node ids: no node could start from it
        ("99999999999999999999", "c"),  # past what msgpack carries
        ("1", "a\nb"),  # a newline would forge a line in every log naming the cluster
        ("1", "a\x1b[2Jb"),  # an escape code would clear the operator's terminal
    ],
)
def test_format_refuses_ids_no_node_could_run_with_and_writes_nothing(tmp_path, node_id, cluster_id):
    result = run("format", "--data-dir", str(tmp_path / "d"), "--node-id", node_id, "--cluster-id", cluster_id)
    assert result.exit_code == 2, result.output
    assert "2147483647" in result.output or "printable" in result.output, result.output
    assert not (tmp_path / "d" / "meta.json").exists()


@pytest.mark.parametrize("node_id, cluster_id", [(2**31, "c"), (True, "c"), (1, "a\nb"), (1, "x" * 256)])
def test_format_data_dir_refuses_ids_a_node_could_not_run_with(tmp_path, node_id, cluster_id):
    with pytest.raises(ValueError, match="node_id|cluster_id"):
        format_data_dir(tmp_path / "d", node_id=node_id, cluster_id=cluster_id, fsync=False)
    assert not (tmp_path / "d" / "meta.json").exists()


def test_a_damaged_bootstrap_voter_list_refuses_to_start(tmp_path):
    format_data_dir(tmp_path, node_id=1, cluster_id="c", bootstrap_voters=(Voter(1, "aaaa"),), fsync=False)
    meta = tmp_path / "meta.json"
    meta.write_text(meta.read_text().replace('"aaaa"', '""'))
    with pytest.raises(StorageOwnershipError):
        FileStorage.open(tmp_path, fsync=False)


def test_a_node_formatted_for_dynamic_voters_starts_without_a_voter_list(tmp_path):
    """The node's configuration comes from meta.json: the bootstrap voters
    (where to reach them, and the cluster's first voter set) and this
    disk's directory id."""
    from quorum.runtime import NodeConfig

    voters = "1@127.0.0.1:9191:aaaa,2@127.0.0.1:9192:bbbb"
    assert run("format", "--data-dir", str(tmp_path), "--node-id", "2", "--cluster-id", "c", "--initial-voters", voters).exit_code == 0
    config = NodeConfig(node_id=2, cluster_id="c", data_dir=tmp_path, plaintext=True)
    assert config.voters == {1: ("127.0.0.1", 9191), 2: ("127.0.0.1", 9192)}
    assert config.listen == ("127.0.0.1", 9192)
    quorum = config.quorum_config()
    assert quorum.dynamic_voters and quorum.directory_id == "bbbb"
    assert quorum.initial_voter_set.get(1) == Voter(1, "aaaa", ("127.0.0.1:9191",))

    with pytest.raises(ValueError, match="differs from .*meta.json"):
        NodeConfig(node_id=2, cluster_id="c", data_dir=tmp_path, quorum={"directory_id": "cccc"}, plaintext=True).quorum_config()
    with pytest.raises(ValueError, match="no voters"):
        NodeConfig(node_id=1, data_dir=tmp_path / "never-formatted", plaintext=True)
    with pytest.raises(ValueError, match="auto_join needs a data directory formatted for dynamic voters"):
        NodeConfig(node_id=1, voters={1: ("127.0.0.1", 9191)}, data_dir=tmp_path / "static", auto_join=True, plaintext=True)
    assert NodeConfig(node_id=2, cluster_id="c", data_dir=tmp_path, auto_join=True, plaintext=True).auto_join


def test_a_node_started_without_a_cluster_id_takes_the_formatted_one(tmp_path):
    """Before: `kraft-quorum node --data-dir D` on a directory formatted
    with `--cluster-id c` refused to start, because its cluster id had
    defaulted to "pykraft"."""
    from quorum.runtime import NodeConfig

    voters = "1@127.0.0.1:9191:aaaa"
    assert run("format", "--data-dir", str(tmp_path), "--node-id", "1", "--cluster-id", "c", "--initial-voters", voters).exit_code == 0
    assert NodeConfig(node_id=1, data_dir=tmp_path, plaintext=True).cluster_id == "c"
    unformatted = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 9191)}, data_dir=tmp_path / "fresh", plaintext=True)
    assert unformatted.cluster_id == "pykraft"
    assert NodeConfig(node_id=1, voters={1: ("127.0.0.1", 9191)}, plaintext=True).cluster_id == "pykraft"
    # Given, it must match: storage refuses a directory of another cluster.
    with pytest.raises(StorageOwnershipError):
        FileStorage.open(tmp_path, node_id=1, cluster_id=NodeConfig(node_id=1, cluster_id="d", data_dir=tmp_path, plaintext=True).cluster_id, fsync=False)
