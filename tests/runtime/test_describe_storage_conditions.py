"""`kraft-quorum describe` over real TCP shows a node's storage conditions
(issue 14): DescribeQuorum version 2 carries the answering node's id, its
failing disk (the errno) and a log repair under way; a version-1 request
still gets the six-field version-1 answer, and a client falls back to
version 1 when a node refuses version 2 (an older pykraft)."""

from __future__ import annotations

import errno
import json
import os
from functools import partial

import pytest
import trio
from click.testing import CliRunner

import quorum.storage._segments as segments_module
from quorum import ErrorCode
from quorum.cli import main
from quorum.client import QuorumClient
from quorum.runtime import KeyValueStateMachine, NodeConfig, open_quorum_node
from quorum.storage import dump_log
from quorum.wire import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ErrorFrame,
    FrameDecoder,
    decode_message,
    encode_message,
)
from loopback import free_ports

CLUSTER = "pykraft"


def single_voter(data_dir) -> NodeConfig:
    return NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, data_dir=data_dir, plaintext=True)


def run_cli(*arguments: str):
    """`kraft-quorum ...` in a thread (the command runs its own trio loop)."""
    return trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(arguments)))


async def ask(port: int, request: DescribeQuorumRequest) -> DescribeQuorumResponse:
    """One DescribeQuorum on a raw connection, decoded as it comes."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(encode_message(request, correlation_id=3, cluster_id=CLUSTER))
        decoder = FrameDecoder()
        with trio.fail_after(10):
            while (payload := decoder.next_frame()) is None:
                decoder.feed(await stream.receive_some(65536))
    decoded = decode_message(payload, expected_cluster_id=CLUSTER)
    assert decoded.version == request.version
    return decoded.message


async def test_describe_shows_a_failing_disk_and_a_version_1_client_gets_version_1(tmp_path, monkeypatch):
    data_dir = tmp_path / "node1"
    failing = {"on": False}
    real_write_all = segments_module.write_all

    def write_all(fd: int, data: bytes) -> None:
        if failing["on"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write_all(fd, data)

    monkeypatch.setattr(segments_module, "write_all", write_all)
    async with open_quorum_node(single_voter(data_dir)) as node, trio.open_nursery() as nursery:
        with trio.fail_after(10):
            await node.wait_for_leader()
        await node.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
        port = node.listen_port
        healthy = await ask(port, DescribeQuorumRequest())
        assert (healthy.node_id, healthy.disk_failure, healthy.repairing) == (1, None, False)

        failing["on"] = True
        # A write the disk refuses: it never commits while the disk fails.
        nursery.start_soon(node.propose, [KeyValueStateMachine.encode_put(b"k", b"lost?")])
        with trio.fail_after(10):
            while (answer := await ask(port, DescribeQuorumRequest())).disk_failure is None:
                await trio.sleep(0.02)
        assert answer.disk_failure == "ENOSPC" and answer.node_id == 1 and answer.repairing is False
        # An old client asks in version 1 and gets the six fields it knows.
        old = await ask(port, DescribeQuorumRequest(version=1))
        assert old.version == 1 and old.node_id is None and old.disk_failure is None and old.repairing is None
        assert old.epoch == answer.epoch

        status = await run_cli("describe", "--bootstrap", f"127.0.0.1:{port}", "--status")
        assert status.exit_code == 0, status.output
        assert "AnsweredBy:    1" in status.output and "Disk:          FAILED (ENOSPC)" in status.output
        assert "Repairing:     no" in status.output
        as_json = await run_cli("describe", "--bootstrap", f"127.0.0.1:{port}", "--json")
        assert json.loads(as_json.output)["disk_failure"] == "ENOSPC"

        failing["on"] = False
        with trio.fail_after(20):
            while (await ask(port, DescribeQuorumRequest())).disk_failure is not None:
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()


def damage_a_middle_batch(data_dir) -> None:
    """Flip a bit in the first of several batches: damage (a valid batch follows)."""
    batches = [item for item in dump_log(data_dir, records=False) if item["type"] == "batch"]
    assert len(batches) >= 2
    with open(batches[0]["file"], "r+b") as segment:
        segment.seek(batches[0]["position"] + 10)
        [byte] = segment.read(1)
        segment.seek(batches[0]["position"] + 10)
        segment.write(bytes([byte ^ 1]))


async def test_describe_shows_a_node_repairing_a_damaged_log(tmp_path):
    data_dir = tmp_path / "node1"
    async with open_quorum_node(single_voter(data_dir)) as node:
        with trio.fail_after(10):
            await node.wait_for_leader()
        for index in range(3):
            await node.propose([KeyValueStateMachine.encode_put(b"k", b"%d" % index)])
    damage_a_middle_batch(data_dir)
    # Restarted as one of three voters whose others are down: it has no
    # leader to repair from yet, so it stays repairing, neither voting nor
    # standing, and says so. (Left the only voter, it would refuse to
    # start: nobody could ever repair it; docs/storage.md, "The only voter".)
    silent_peers = {peer: ("127.0.0.1", port) for peer, port in zip((2, 3), free_ports(2))}
    one_of_three = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0), **silent_peers}, data_dir=data_dir, plaintext=True)
    async with open_quorum_node(one_of_three) as node:
        answer = await ask(node.listen_port, DescribeQuorumRequest())
        assert answer.repairing is True and answer.disk_failure is None and answer.leader_id is None
        status = await run_cli("describe", "--bootstrap", f"127.0.0.1:{node.listen_port}", "--status")
        assert status.exit_code == 0, status.output
        assert "Repairing:     yes" in status.output and "Disk:          ok" in status.output


@pytest.mark.parametrize("supported_max, asked", [(1, [3, 2, 1, 1]), (2, [3, 2, 2])])
async def test_a_client_falls_back_one_version_at_a_time_when_a_node_refuses_one(supported_max, asked):
    """An older node knows DescribeQuorum up to ``supported_max``: it
    answers a later version with INVALID_REQUEST ("version N is not
    supported"); the client asks again one version lower, and keeps to the
    version answered."""
    requests: list[int] = []

    async def old_node(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder()
        async with stream:
            while data := await stream.receive_some(65536):
                decoder.feed(data)
                while (payload := decoder.next_frame()) is not None:
                    envelope_version = payload[2]  # fixarray, type code, version (small ints)
                    requests.append(envelope_version)
                    correlation_id = decode_message(payload, expected_cluster_id=CLUSTER).correlation_id
                    if envelope_version > supported_max:
                        answer = ErrorFrame(
                            code=ErrorCode.INVALID_REQUEST,
                            message=f"version {envelope_version} is not supported (supported: {list(range(1, supported_max + 1))})",
                            correlation_id=correlation_id,
                        )
                    elif envelope_version == 1:
                        answer = DescribeQuorumResponse(leader_id=1, epoch=4, high_watermark=9, repairing=None, repairing_voters=None, version=1)
                    else:
                        answer = DescribeQuorumResponse(leader_id=1, epoch=4, high_watermark=9, node_id=1, repairing_voters=None, version=2)
                    await stream.send_all(encode_message(answer, correlation_id=correlation_id, cluster_id=CLUSTER))

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(partial(trio.serve_tcp, old_node, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        async with QuorumClient([f"127.0.0.1:{port}"], retry_timeout_s=5) as client:
            first = await client.describe()
            second = await client.describe()
        assert first.version == second.version == supported_max and first.epoch == 4
        assert first.repairing_voters is None and (first.repairing is None) == (supported_max == 1)
        assert requests == asked
        nursery.cancel_scope.cancel()
