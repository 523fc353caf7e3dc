"""The embedding API, the metrics endpoint and the CLI's configuration,
on real sockets and files (a single voter needs no peers)."""

import json

import pytest
import trio
from click.testing import CliRunner

from quorum.cli import _node_config, main
from quorum.runtime import KeyValueStateMachine, NodeConfig, open_quorum_node


def single_voter(tmp_path, **extra) -> NodeConfig:
    return NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, data_dir=tmp_path / "node1", **extra, plaintext=True)


async def test_a_single_voter_commits_and_reads_with_no_setup(tmp_path):
    async with open_quorum_node(single_voter(tmp_path)) as node:
        with trio.fail_after(10):
            await node.wait_for_leader()
        offset = await node.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
        read_at = await node.read("linearizable")
        assert read_at > offset
        assert node.state_machine.get(b"k") == (b"v", offset)
        stats = node.statistics()
        assert stats["role"] == "leader" and stats["high_watermark"] == read_at


async def test_a_restarted_single_voter_recovers_its_state_from_disk(tmp_path):
    async with open_quorum_node(single_voter(tmp_path)) as node:
        with trio.fail_after(10):
            await node.wait_for_leader()
        await node.propose([KeyValueStateMachine.encode_put(b"k", b"durable")])
    async with open_quorum_node(single_voter(tmp_path)) as node:
        with trio.fail_after(10):
            await node.wait_for_leader()
            await node.read("linearizable")
        assert node.state_machine.get(b"k")[0] == b"durable"


async def test_metrics_endpoint_serves_prometheus_text(tmp_path):
    config = single_voter(tmp_path, metrics_listen=("127.0.0.1", 0))
    async with open_quorum_node(config) as node:
        with trio.fail_after(10):
            await node.wait_for_leader()
        await node.propose([b"x"])
        port = node.metrics_port
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        body = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some(65536):
                body += chunk
        await stream.aclose()
    text = body.decode()
    assert text.startswith("HTTP/1.1 200 OK")
    assert 'pykraft_quorum_role{node="1",role="leader"} 1.0' in text
    assert 'pykraft_quorum_commit_latency_seconds_count{node="1"} 1.0' in text
    assert "pykraft_quorum_fsync_duration_seconds_bucket" in text


def test_node_configuration_from_a_toml_file_and_flags(tmp_path):
    toml = tmp_path / "node.toml"
    toml.write_text(
        'node_id = 2\nvoters = "1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093"\n'
        'data_dir = "/tmp/x"\nplaintext = true\n[quorum]\nelection_timeout_ms = 500\n'
    )
    import tomllib

    settings = tomllib.loads(toml.read_text())
    settings["fetch_timeout_ms"] = 1500  # a flag overrides the file
    config = _node_config(settings)
    assert config.node_id == 2 and config.listen == ("127.0.0.1", 9092)
    quorum = config.quorum_config()
    assert (quorum.election_timeout_ms, quorum.fetch_timeout_ms) == (500, 1500)


def test_node_command_refuses_a_bad_configuration_with_one_sentence():
    result = CliRunner().invoke(main, ["node", "--node-id", "1"])
    assert result.exit_code == 2
    assert "--voters is required" in result.output


async def test_dump_log_decodes_what_a_node_wrote(tmp_path):
    async with open_quorum_node(single_voter(tmp_path)) as node:
        with trio.fail_after(10):
            await node.wait_for_leader()
        await node.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
    result = CliRunner().invoke(main, ["dump-log", str(tmp_path / "node1"), "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines() if line.strip()]
    assert any(line.get("kind") in ("LEADER_CHANGE", 1, "leader_change") or "LEADER" in json.dumps(line) for line in lines)


def test_a_typo_in_the_toml_file_is_refused_by_name(tmp_path):
    toml = tmp_path / "node.toml"
    toml.write_text('node_id = 1\nvoters = "1@127.0.0.1:9091"\nretention_byte = 1024\n')
    result = CliRunner().invoke(main, ["node", "--config", str(toml)])
    assert result.exit_code == 2
    assert "unknown settings: retention_byte" in result.output


def test_retention_settings_reach_the_node_config():
    config = _node_config(
        {"node_id": 1, "voters": "1@127.0.0.1:9091", "retention_bytes": 4096, "retention_ms": None, "plaintext": True}
    )
    assert (config.retention_bytes, config.retention_ms) == (4096, None)


@pytest.mark.parametrize(
    ("field", "address"),
    [("listen", ("127.0.0.1", 70000)), ("listen", ("127.0.0.1", -1)), ("listen", ("", 9092)), ("listen", "127.0.0.1:9092"),
     ("metrics_listen", ("127.0.0.1", 65536)), ("metrics_listen", ("127.0.0.1", True))],
)
def test_an_address_no_socket_can_listen_on_is_refused_by_the_config(field, address):
    """The embedding API's own edge: the command lines check their flags,
    and a NodeConfig (or a BrokerConfig, which builds one) checks what a
    program hands it, before any port is opened."""
    from broker_agent import BrokerConfig

    with pytest.raises(ValueError, match=f"the {field} (address must be|host must be|port must be an int in 0-65535)"):
        NodeConfig(node_id=1, voters={1: ("127.0.0.1", 9092)}, plaintext=True, **{field: address})
    with pytest.raises(ValueError):
        BrokerConfig(broker_id=101, bootstrap={1: ("127.0.0.1", 9)}, plaintext=True,
                     **{"listen": ("127.0.0.1", 0), field: address})  # fmt: skip
    assert NodeConfig(node_id=1, voters={1: ("127.0.0.1", 9092)}, plaintext=True, listen=("::1", 0)).listen == ("::1", 0)


@pytest.mark.parametrize("count", [-5, True, 2.5])
def test_a_snapshot_interval_that_is_no_count_is_refused(count):
    """Found by hand: ``--snapshot-every-records -5`` ran a node that
    snapshots after every apply (0 means never)."""
    with pytest.raises(ValueError, match="snapshot_every_records must be an int >= 0"):
        NodeConfig(node_id=1, voters={1: ("127.0.0.1", 9092)}, plaintext=True, snapshot_every_records=count)
    assert NodeConfig(node_id=1, voters={1: ("127.0.0.1", 9092)}, plaintext=True, snapshot_every_records=0)
