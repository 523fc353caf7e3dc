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

from jepsen_like.nemesis import ATTACKS, HOSTILE_KINDS, HostileTarget, attacks_of, run_attack, run_kind
from jepsen_like.nemesis._hostile import (
    AUTHENTICATED_ATTACKS,
    HostileStats,
    forged_epoch_vote,
    malformed_frames,
    msgpack_bomb,
    read_answers,
    vote_flood_frame,
)
from quorum.client import QuorumClient
from quorum.runtime import KeyValueStateMachine, NodeConfig, TlsConfig, create_cluster_certificates, open_quorum_node
from quorum import ErrorCode, VoteRequest
from quorum.wire import NODE_LIMITS, DescribeQuorumRequest, DescribeQuorumResponse, ErrorFrame, FrameDecoder, decode_message, encode_message
from loopback import free_ports
from tls_material import certificates_fixture, tls_for

CLUSTER = "pykraft"
ATTACK_S = 1.5

# ``client-hostile``: the authenticated attacker's certificate, from the
# cluster's own CA, granted nothing by the ACL (a client's reads only).
certs = certificates_fixture(nodes=(1, 2, 3), clients=("admin", "hostile"))



async def start_cluster(nursery: trio.Nursery, tmp_path, voters: int = 3, certs=None) -> tuple[list, trio.Event]:
    """``voters`` in-process nodes, in the clear, or over mutual TLS with
    the ACL of ``certs`` when given."""
    addresses = {node_id: ("127.0.0.1", port) for node_id, port in zip(range(1, voters + 1), free_ports(voters))}
    handles: list = [None] * voters
    stop = trio.Event()

    async def run(index: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
        security = (
            {"plaintext": True} if certs is None
            else {"tls": tls_for(certs, f"node-{index + 1}"), "acl_file": certs / "acl.txt"}
        )  # fmt: skip
        config = NodeConfig(
            node_id=index + 1,
            voters=addresses,
            cluster_id=CLUSTER,
            data_dir=tmp_path / f"node{index + 1}",
            # A quick first election; a follower's (and check quorum's)
            # timeout long enough that a loaded machine stalling this one
            # event loop, which runs the three nodes and the attacker, does
            # not end a leadership the attack itself left alone.
            quorum={"election_timeout_ms": 300, "fetch_timeout_ms": 6000},
            **security,
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


def target_of(handles: list, node, source_host: str | None = "127.0.0.66", tls=None) -> HostileTarget:
    return HostileTarget(
        host="127.0.0.1",
        port=node.listen_port,
        node_id=node.node_id,
        voter_ids=tuple(handle.node_id for handle in handles),
        cluster_id=CLUSTER,
        source_host=source_host,
        tls=tls,
    )


def rejected(node, reason: str) -> float:
    return node.runtime.metrics.value("pykraft_quorum_frames_rejected_total", reason=reason) or 0


def denials(node, kind: str = "quorum") -> float:
    return node.runtime.metrics.value("pykraft_authorization_denials_total", kind=kind) or 0


async def good_writes(leader, count: int, tls=None) -> None:
    async with QuorumClient([f"{leader.node_id}@127.0.0.1:{leader.listen_port}"], cluster_id=CLUSTER, retry_timeout_s=10, tls=tls) as client:
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
                    results.append(await run_attack(name, target, ATTACK_S, seed=7, min_connections=1))

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



# =========================================================================
# An authenticated attacker: a client certificate from the cluster's CA
# =========================================================================


async def test_an_authenticated_impostor_of_a_voter_is_refused_by_authorization_and_changes_nothing(tmp_path, certs):
    """A client holding a valid certificate (``client-hostile``) sends what
    only voters send, each claiming another voter's id: a Vote and a
    pre-vote and a BeginQuorumEpoch of the next epoch, and a Fetch. Each
    gets through TLS to the node's decoder and is refused by authorization
    (CLUSTER_AUTHORIZATION_FAILED, counted on both sides): nobody moves to
    the forged epoch, the leader keeps leading and serves a real client."""
    async with trio.open_nursery() as nursery:
        handles, stop = await start_cluster(nursery, tmp_path, certs=certs)
        leader = next(handle for handle in handles if handle.is_leader)
        epoch = leader.runtime.node.epoch
        admin = tls_for(certs, "client-admin")
        await good_writes(leader, 1, tls=admin)
        with trio.fail_after(60):
            stats = await run_attack("voter-impostor", target_of(handles, leader, tls=tls_for(certs, "client-hostile")), ATTACK_S, seed=2)
        assert stats.handshake_failures == 0 and stats.unframed_answers == 0, stats
        # Four forged messages a round, every one answered with a refusal.
        assert stats.frames >= 4 and stats.authorization_refusals == stats.error_frames == stats.frames, stats
        assert denials(leader) == stats.frames
        assert leader.is_leader and all(handle.runtime.node.epoch == epoch for handle in handles)
        with trio.fail_after(30):
            await good_writes(leader, 1, tls=admin)
            async with QuorumClient([f"{leader.node_id}@127.0.0.1:{leader.listen_port}"], cluster_id=CLUSTER, tls=admin) as client:
                assert KeyValueStateMachine.decode_answer((await client.read(b"good0"))[1])[0] == b"v"
        stop.set()


async def test_a_round_of_the_impostor_in_flight_when_the_run_ends_is_read_to_its_end(monkeypatch, autojump_clock):
    """Regression (CI, 2026-11-27: 32 frames sent, 28 refusals read): the
    run's time ran out after a round's four frames were sent and before
    their refusals were read, so four frames looked unanswered. Replayed
    against an in-memory node that answers each frame 0.4 s (virtual)
    after it comes and a run that ends 0.3 s in: the round is read whole."""
    decoded_by_node: list = []

    async def slow_node(stream: trio.abc.Stream) -> None:
        decoder = FrameDecoder()
        async with stream:
            while data := await stream.receive_some(65536):
                decoder.feed(data)
                while (payload := decoder.next_frame()) is not None:
                    envelope = decode_message(payload, expected_cluster_id=CLUSTER)
                    decoded_by_node.append(envelope.message)
                    if isinstance(envelope.message, DescribeQuorumRequest):
                        answer = DescribeQuorumResponse(leader_id=2, epoch=7)
                    else:
                        await trio.sleep(0.4)
                        answer = ErrorFrame(code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, message="not a voter", correlation_id=envelope.correlation_id)
                    await stream.send_all(encode_message(answer, correlation_id=envelope.correlation_id, cluster_id=CLUSTER))

    async with trio.open_nursery() as nursery:

        async def connect(host, port, **_options):
            attacker_end, node_end = trio.testing.memory_stream_pair()
            nursery.start_soon(slow_node, node_end)
            return attacker_end

        monkeypatch.setattr(trio, "open_tcp_stream", connect)
        target = HostileTarget(host="127.0.0.1", port=1, node_id=2, voter_ids=(1, 2, 3), cluster_id=CLUSTER)
        stats = await run_attack("voter-impostor", target, 0.3, seed=2)
        nursery.cancel_scope.cancel()
    assert stats.frames == 4 and stats.authorization_refusals == stats.error_frames == 4, stats
    assert [vote.epoch for vote in decoded_by_node if isinstance(vote, VoteRequest)] == [8, 8]


async def test_the_impostor_without_a_certificate_ends_at_the_handshake(tmp_path, certs):
    """The same forged messages from an attacker with no certificate: the
    handshake refuses them before any frame is read, so nothing is
    refused by authorization (what the test above tells apart)."""
    async with trio.open_nursery() as nursery:
        handles, stop = await start_cluster(nursery, tmp_path, certs=certs)
        leader = next(handle for handle in handles if handle.is_leader)
        with trio.fail_after(60):
            stats = await run_attack("voter-impostor", target_of(handles, leader), 0.5, seed=2)
        assert stats.connections >= 1 and stats.authorization_refusals == stats.error_frames == 0, stats
        assert stats.closed_by_node + stats.unframed_answers >= 1, stats
        assert denials(leader) == 0
        stop.set()


async def test_a_certificate_from_another_ca_never_reaches_the_decoder(tmp_path, certs):
    """An attacker whose certificate comes from another CA. Trusting only
    that CA, it refuses the node's certificate itself: a failed handshake,
    counted, not raised, nothing sent. Trusting the cluster's CA, its side
    of the handshake completes (TLS 1.3: the client finishes before the
    server checks its certificate) and the node refuses it, counts it and
    closes: the forged frames it sent are never read, never answered."""
    other = tmp_path / "other-ca"
    create_cluster_certificates(other, nodes=(), clients=("hostile",))
    async with trio.open_nursery() as nursery:
        handles, stop = await start_cluster(nursery, tmp_path, voters=1, certs=certs)
        [node] = handles
        with trio.fail_after(60):
            own_ca = await run_attack("forged-fields", target_of(handles, node, tls=tls_for(other, "client-hostile")), 0.5, seed=2)
            cluster_ca = TlsConfig(certs / "ca.pem", other / "client-hostile.pem", other / "client-hostile-key.pem")
            refused = await run_attack("voter-impostor", target_of(handles, node, tls=cluster_ca), 0.5, seed=2)
        assert own_ca.connections >= 1 and own_ca.handshake_failures == own_ca.connections and own_ca.frames == 0, own_ca
        assert refused.connections >= 1 and refused.handshake_failures == 0, refused
        assert refused.closed_by_node == refused.connections and refused.error_frames == 0, refused
        verify_failures = node.runtime.metrics.value("pykraft_tls_handshake_failures_total", reason="certificate_verify_failed")
        # (The impostor's connections and its DescribeQuorum ones, one a round.)
        assert verify_failures >= refused.connections
        assert denials(node) == 0 and node.is_leader
        stop.set()


@pytest.mark.parametrize("kind", sorted(HOSTILE_KINDS))
async def test_every_kind_from_an_authenticated_attacker_reaches_the_decoder_and_the_leader_keeps_serving(tmp_path, certs, kind):
    """Each hostile kind sent by a client with a valid certificate: its
    bytes get past the handshake to the frame decoder (answers are frames,
    never a TLS alert), and the leader keeps its leadership and its epoch,
    and serves a real client's writes and reads meanwhile and after."""
    async with trio.open_nursery() as nursery:
        handles, stop = await start_cluster(nursery, tmp_path, certs=certs)
        leader = next(handle for handle in handles if handle.is_leader)
        epoch = leader.runtime.node.epoch
        admin = tls_for(certs, "client-admin")
        target = target_of(handles, leader, tls=tls_for(certs, "client-hostile"))
        with trio.fail_after(90):
            async with trio.open_nursery() as attack:
                results = []

                async def attack_and_keep():
                    results.extend(await run_kind(kind, target, ATTACK_S, seed=7, min_connections=1))

                attack.start_soon(attack_and_keep)
                await good_writes(leader, 5, tls=admin)
            await good_writes(leader, 1, tls=admin)
            async with QuorumClient([f"{leader.node_id}@127.0.0.1:{leader.listen_port}"], cluster_id=CLUSTER, tls=admin) as client:
                assert KeyValueStateMachine.decode_answer((await client.read(b"good0"))[1])[0] == b"v"
        assert [stats.attack for stats in results] == list(attacks_of(kind, authenticated=True))
        for stats in results:
            assert stats.connections >= 1 and stats.unframed_answers == 0, stats
            # Handshakes fail only where the node closes connections past
            # its per-address cap.
            assert stats.handshake_failures == 0 or stats.attack == "connection-flood", stats
        by_name = {stats.attack: stats for stats in results}
        if kind == "garbage":
            # Answered in frames through TLS; the unknown voter's Votes and
            # BeginQuorumEpoch refused by authorization.
            assert sum(stats.error_frames for stats in results) >= 1
            assert by_name["unknown-voter"].authorization_refusals >= 1
        if kind == "forged-field":
            assert by_name["forged-fields"].error_frames >= 1 and by_name["voter-impostor"].authorization_refusals >= 4
        if kind == "flood":
            # Every forged Vote reached the decoder and was refused, not
            # left to the leader lease.
            assert denials(leader) >= 1
        assert leader.is_leader and all(handle.runtime.node.epoch == epoch for handle in handles), kind
        stop.set()


def test_the_authenticated_extras_are_not_plaintext_attacks():
    """``voter-impostor`` is well formed: in the clear it would be a
    voter's own message (the protocol does not authenticate peers), so no
    plaintext kind and no ``ATTACKS`` entry sends it."""
    assert set(AUTHENTICATED_ATTACKS).isdisjoint(ATTACKS)
    for kind in HOSTILE_KINDS:
        assert set(attacks_of(kind, authenticated=False)) <= set(ATTACKS)
        assert attacks_of(kind, authenticated=True)[: len(HOSTILE_KINDS[kind])] == HOSTILE_KINDS[kind]
