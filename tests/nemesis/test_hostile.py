"""The hostile-client attacks (jepsen_like/nemesis/_hostile.py) against
in-process nodes on loopback: each attack does what it says (the node
answers or closes as the limits of issue 15 say it must), and the leader
it hits keeps its leadership and serves a well-behaved client meanwhile.

Attacks run for a fixed short window; every wait on the cluster is on a
condition bounded by ``fail_after``."""

from __future__ import annotations

import random

import msgpack
import pytest
import trio
import trio.testing

from jepsen_like.nemesis import ATTACKS, HOSTILE_KINDS, HostileTarget, run_attack, run_kind
from jepsen_like.nemesis._hostile import (
    HostileStats,
    forged_epoch_vote,
    malformed_frames,
    msgpack_bomb,
    read_answers,
    vote_flood_frame,
)
from quorum.client import QuorumClient
from quorum.runtime import KeyValueStateMachine, NodeConfig, open_quorum_node
from quorum.wire import NODE_LIMITS, FrameDecoder, decode_message
from loopback import free_ports
from tls_material import certificates_fixture, tls_for

CLUSTER = "pykraft"
ATTACK_S = 1.5

certs = certificates_fixture(nodes=(1,))



async def start_cluster(nursery: trio.Nursery, tmp_path, voters: int = 3) -> tuple[list, trio.Event]:
    addresses = {node_id: ("127.0.0.1", port) for node_id, port in zip(range(1, voters + 1), free_ports(voters))}
    handles: list = [None] * voters
    stop = trio.Event()

    async def run(index: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
        config = NodeConfig(
            node_id=index + 1,
            voters=addresses,
            data_dir=tmp_path / f"node{index + 1}",
            quorum={"election_timeout_ms": 300, "fetch_timeout_ms": 1500},
            plaintext=True,
        )
        async with open_quorum_node(config) as node:
            handles[index] = node
            task_status.started()
            await stop.wait()

    for index in range(voters):
        await nursery.start(run, index)
    with trio.fail_after(30):
        while not any(handle.is_leader for handle in handles):
            await trio.sleep(0.01)
    return handles, stop


def target_of(handles: list, node, source_host: str | None = "127.0.0.66") -> HostileTarget:
    return HostileTarget(
        host="127.0.0.1",
        port=node.listen_port,
        node_id=node.node_id,
        voter_ids=tuple(handle.node_id for handle in handles),
        cluster_id=CLUSTER,
        source_host=source_host,
    )


def rejected(node, reason: str) -> float:
    return node.runtime.metrics.value("pykraft_quorum_frames_rejected_total", reason=reason) or 0


async def good_writes(leader, count: int) -> None:
    async with QuorumClient([f"{leader.node_id}@127.0.0.1:{leader.listen_port}"], retry_timeout_s=10) as client:
        for index in range(count):
            await client.propose([KeyValueStateMachine.encode_put(b"good%d" % index, b"v")])


@pytest.mark.parametrize("name", sorted(ATTACKS))
async def test_each_attack_leaves_the_leader_leading_and_serving(tmp_path, name):
    async with trio.open_nursery() as nursery:
        handles, stop = await start_cluster(nursery, tmp_path)
        leader = next(handle for handle in handles if handle.is_leader)
        epoch = leader.runtime.node.epoch
        target = target_of(handles, leader)
        with trio.fail_after(60):
            async with trio.open_nursery() as attack:
                results = []

                async def attack_and_keep(name=name):
                    results.append(await run_attack(name, target, ATTACK_S, seed=7))

                attack.start_soon(attack_and_keep)
                # A well-behaved client writes while the attack runs.
                await good_writes(leader, 5)
            [stats] = results
            await good_writes(leader, 1)
        assert stats.connections >= 1, stats
        assert leader.is_leader and all(handle.runtime.node.epoch == epoch for handle in handles), name
        stop.set()


async def test_a_forged_epoch_is_answered_with_an_error_and_counted(tmp_path):
    async with trio.open_nursery() as nursery:
        handles, stop = await start_cluster(nursery, tmp_path)
        follower = next(handle for handle in handles if not handle.is_leader)
        stats = await run_attack("forged-epoch", target_of(handles, follower), 0.5, seed=1)
        assert stats.error_frames >= 1 and stats.error_frames == stats.frames
        assert rejected(follower, "protocol_error") == stats.frames
        stop.set()


async def test_oversized_frames_and_bombs_are_closed_by_the_node(tmp_path):
    async with trio.open_nursery() as nursery:
        handles, stop = await start_cluster(nursery, tmp_path, voters=1)
        [node] = handles
        results = await run_kind("oversize", target_of(handles, node), ATTACK_S, seed=3)
        by_name = {stats.attack: stats for stats in results}
        assert set(by_name) == set(HOSTILE_KINDS["oversize"])
        # Every one of them: the node closes the connection, answering nothing.
        for stats in results:
            assert stats.closed_by_node >= 1 and stats.error_frames == 0, stats
        assert rejected(node, "frame_too_large") >= by_name["huge-length"].connections
        stop.set()


async def test_garbage_at_a_tls_node_ends_at_its_handshake_and_the_attacker_counts_the_alert(tmp_path, certs):
    """A campaign run with --tls: the attacker has no certificate and
    speaks pykraft frames in the clear. The node answers with a TLS alert,
    whose record header reads as a frame length of hundreds of MiB: the
    attacker used to raise on it ("frame ... over the limit"), which ended
    the whole hostile-clients campaign at its first attack."""
    config = NodeConfig(
        node_id=1, voters={1: ("127.0.0.1", 0)}, cluster_id=CLUSTER, data_dir=tmp_path / "node1",
        quorum={"election_timeout_ms": 300}, tls=tls_for(certs, "node-1"), acl_file=certs / "acl.txt",
    )
    async with open_quorum_node(config) as node:
        with trio.fail_after(30):
            await node.wait_for_leader()
        target = HostileTarget(host="127.0.0.1", port=node.listen_port, node_id=1, voter_ids=(1,), cluster_id=CLUSTER)
        results = await run_kind("garbage", target, ATTACK_S, seed=5)
        assert {stats.attack for stats in results} == set(HOSTILE_KINDS["garbage"])
        # Every attack ends at the handshake: refused, never answered in frames.
        for stats in results:
            assert stats.connections >= 1 and stats.closed_by_node + stats.unframed_answers >= 1, stats
            assert stats.error_frames == 0, stats
        assert node.is_leader


async def test_an_answer_that_is_not_framed_ends_the_read_and_is_counted():
    """What a TLS node sends a client that spoke in the clear: an alert
    record (content type 21, TLS 1.2, two bytes), whose first four bytes
    read as a frame of 352,518,912 bytes."""
    send_stream, receive_stream = trio.testing.memory_stream_one_way_pair()
    await send_stream.send_all(bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46]))
    stats = HostileStats("random-bytes")
    with trio.fail_after(5):
        answers = await read_answers(receive_stream, stats, CLUSTER, wait_s=2.0)
    assert answers == [] and stats.unframed_answers == 1 and stats.closed_by_node == 0


async def test_the_vote_flood_claims_other_voters_and_rising_epochs(tmp_path):
    target = HostileTarget(host="127.0.0.1", port=1, node_id=2, voter_ids=(1, 2, 3), cluster_id=CLUSTER)
    decoded = []
    for count in range(1, 5):
        decoder = FrameDecoder()
        decoder.feed(vote_flood_frame(target, 10 + count, count))
        decoded.append(decode_message(decoder.next_frame(), expected_cluster_id=CLUSTER).message)
    assert [vote.epoch for vote in decoded] == [11, 12, 13, 14]
    assert {vote.src for vote in decoded} == {1, 3} and all(vote.dst == 2 for vote in decoded)
    assert [vote.pre_vote for vote in decoded] == [True, False, True, False]


def test_the_forged_frames_are_what_they_claim():
    target = HostileTarget(host="127.0.0.1", port=1, node_id=2, voter_ids=(1, 2, 3), cluster_id=CLUSTER)
    envelope = msgpack.unpackb(forged_epoch_vote(target)[4:])
    assert envelope[0] == 1 and envelope[3] == CLUSTER and envelope[4][:4] == [1, 2, 2**32 + 1, 2**32 + 1]
    bomb = msgpack_bomb(NODE_LIMITS.small_frame_bytes_max - 8, CLUSTER, in_fetch_extension=True, dst=2)
    assert len(bomb) - 4 <= NODE_LIMITS.small_frame_bytes_max
    assert int.from_bytes(bomb[:4], "big") == len(bomb) - 4
    for data in malformed_frames(target, random.Random(0)):
        assert int.from_bytes(data[:4], "big") == len(data) - 4

