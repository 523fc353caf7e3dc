"""The trio API refuses bad input in the caller, before anything is
proposed (issue 18, item 4), and a state machine that raises fails only
its record, for a local proposer and for a client's (real TCP, one voter)."""

from __future__ import annotations

import pytest
import trio

from quorum import ApplyFailedError
from quorum.client import QuorumClient, QuorumClientError
from quorum.runtime import PROPOSAL_BYTES_MAX, NodeConfig, check_records, open_quorum_node


class Strict:
    """Accepts records of digits only; raises on anything else."""

    def __init__(self) -> None:
        self.total = 0

    def apply(self, entries):
        for entry in entries:
            self.total += int(entry.data)  # ValueError for b"x"
        return {}

    def snapshot(self) -> bytes:
        return str(self.total).encode()

    def restore(self, data: bytes) -> None:
        self.total = int(data)


def test_check_records_names_what_is_wrong():
    with pytest.raises(TypeError, match="record 1 is a str, not bytes"):
        check_records([b"ok", "text"])
    with pytest.raises(TypeError, match="list of bytes, not bytes"):
        check_records(b"one record")
    with pytest.raises(ValueError, match="nothing to propose"):
        check_records([])
    with pytest.raises(ValueError, match="10001 records"):
        check_records([b""] * 10_001)
    with pytest.raises(ValueError, match="over the limit"):
        check_records([b"x" * (PROPOSAL_BYTES_MAX // 2), b"x" * (PROPOSAL_BYTES_MAX // 2 + 1)])
    check_records([b"x" * PROPOSAL_BYTES_MAX])


async def test_bad_records_fail_at_the_call_and_a_raising_apply_fails_only_its_record(tmp_path):
    config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, data_dir=tmp_path / "node1", plaintext=True)
    async with open_quorum_node(config, Strict()) as node:
        with trio.fail_after(10):
            await node.wait_for_leader()
        end = node.statistics()["log_end_offset"]
        with pytest.raises(TypeError):
            await node.propose(["12"])
        with pytest.raises(ValueError):
            await node.propose([b"1" * (PROPOSAL_BYTES_MAX + 1)])
        assert node.statistics()["log_end_offset"] == end  # nothing was proposed
        await node.propose([b"5"])
        with pytest.raises(ApplyFailedError, match="ValueError"):
            await node.propose([b"x"])
        async with QuorumClient([f"1@127.0.0.1:{node.listen_port}"], retry_timeout_s=10) as client:
            with pytest.raises(QuorumClientError, match="applying the record at offset"):
                await client.propose([b"y"])
            await client.propose([b"2"])
        first, answers = await node.propose_with_answers([b"3"])
        assert answers == [None]
        assert node.state_machine.total == 10  # the node kept applying after both failures


# --- plaintext is chosen, never a default (issue 16, item 5) ----------------------


def test_a_node_config_must_choose_tls_or_plaintext(tmp_path):
    from broker_agent import BrokerConfig
    from quorum.replicated import Replicated
    from quorum.runtime import TlsConfig, create_cluster_certificates

    voters = {1: ("127.0.0.1", 0)}
    with pytest.raises(ValueError, match=r"no TLS chosen: give tls=TlsConfig\(ca, cert, key\).*or plaintext=True"):
        NodeConfig(node_id=1, voters=voters)
    create_cluster_certificates(tmp_path, nodes=[1])
    tls = TlsConfig(tmp_path / "ca.pem", tmp_path / "node-1.pem", tmp_path / "node-1-key.pem")
    with pytest.raises(ValueError, match="plaintext=True and tls exclude each other"):
        NodeConfig(node_id=1, voters=voters, tls=tls, plaintext=True)
    with pytest.raises(TypeError, match="plaintext must be True or False, got 'yes'"):
        NodeConfig(node_id=1, voters=voters, plaintext="yes")
    assert NodeConfig(node_id=1, voters=voters, tls=tls).tls is tls
    # A broker listens too; a replicated object runs a node: the same choice,
    # refused before any port is opened.
    with pytest.raises(ValueError, match="no TLS chosen"):
        BrokerConfig(broker_id=101, bootstrap={1: ("127.0.0.1", 9)}, listen=("127.0.0.1", 0))
    assert BrokerConfig(broker_id=101, bootstrap={1: ("127.0.0.1", 9)}, listen=("127.0.0.1", 0), plaintext=True).plaintext

    class Counter(Replicated):
        def __init__(self) -> None:
            self.total = 0

    counter = Counter()
    with pytest.raises(ValueError, match="no TLS chosen"):
        counter.start(node_id=1, voters="1@127.0.0.1:1")


async def test_a_plaintext_node_says_so_in_one_startup_line(tmp_path, caplog):
    config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, data_dir=tmp_path / "node1", plaintext=True)
    with caplog.at_level("INFO", logger="pykraft"):
        async with open_quorum_node(config) as node:
            port = node.listen_port
    lines = [record.getMessage() for record in caplog.records if "without TLS" in record.getMessage()]
    assert lines == [
        f"node 1 runs without TLS (plaintext, chosen explicitly): any process that reaches 127.0.0.1:{port} "
        "may speak as any node, broker or client"
    ]
