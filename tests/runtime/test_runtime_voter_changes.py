"""AddVoter and RemoveVoter through the trio runtime (issue 17, KIP-853),
under MockClock over an in-process network: what each request is answered,
from the leader and from a node that does not lead."""

from __future__ import annotations

import random

import pytest
import trio

from loopback import free_ports
from quorum import BeginQuorumEpochRequest, ErrorCode, QuorumConfig, Voter, VoterSet
from quorum.runtime import (
    KeyValueStateMachine,
    MemoryNetwork,
    MemoryTransport,
    QuorumRuntime,
    TcpTransport,
    handle_client_request,
)
from quorum.storage import MemoryStorage
from quorum.wire import AddVoterRequest, DescribeQuorumRequest, RemoveVoterRequest, UpgradeVotersRequest

BOOTSTRAP = (Voter(1, "disk-1", ("127.0.0.1:9091",)),)


@pytest.fixture
async def one_voter_and_an_observer(nursery):
    """Node 1, the only voter of a dynamic cluster, and node 2 with disk
    "disk-2", observing."""
    network = MemoryNetwork()
    runtimes = {}
    for node_id in (1, 2):
        config = QuorumConfig(node_id=node_id, bootstrap_voters=BOOTSTRAP, directory_id=f"disk-{node_id}")
        runtime = QuorumRuntime(
            config,
            KeyValueStateMachine(),
            storage=MemoryStorage(),
            transport=network.transport(node_id),
            rng=random.Random(node_id),
        )
        await nursery.start(runtime.run)
        runtimes[node_id] = runtime
    leader, observer = runtimes[1], runtimes[2]
    with trio.fail_after(30):
        await leader.wait_until(lambda: leader.node.leader_has_committed_own_epoch)
        await leader.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
        await observer.wait_until(lambda: observer.node.log.end_offset >= leader.node.high_watermark)
    yield leader, observer
    nursery.cancel_scope.cancel()


async def test_the_leader_adds_and_removes_a_caught_up_observer(one_voter_and_an_observer, autojump_clock):
    leader, observer = one_voter_and_an_observer
    added = await handle_client_request(leader, AddVoterRequest(node_id=2, directory_id="disk-2", endpoints=("127.0.0.1:9092",)))
    assert added.error is ErrorCode.NONE and added.offset is not None
    assert leader.node.high_watermark > added.offset  # answered once committed
    assert leader.node.voters.get(2) == Voter(2, "disk-2", ("127.0.0.1:9092",))
    with trio.fail_after(10):
        await observer.wait_until(lambda: observer.node.is_voter)

    described = await handle_client_request(leader, DescribeQuorumRequest())
    assert [(r.node_id, r.directory_id) for r in described.voters] == [(1, "disk-1"), (2, "disk-2")]
    assert described.version == 3 and not described.observers

    again = await handle_client_request(leader, AddVoterRequest(node_id=2, directory_id="disk-2"))
    assert again.error is ErrorCode.DUPLICATE_VOTER and "already a voter" in again.message
    unknown = await handle_client_request(leader, RemoveVoterRequest(node_id=7))
    assert unknown.error is ErrorCode.VOTER_NOT_FOUND
    other_disk = await handle_client_request(leader, RemoveVoterRequest(node_id=2, directory_id="disk-9"))
    assert other_disk.error is ErrorCode.VOTER_NOT_FOUND

    removed = await handle_client_request(leader, RemoveVoterRequest(node_id=2, directory_id="disk-2"))
    assert removed.error is ErrorCode.NONE and removed.offset > added.offset
    assert leader.node.voters.ids == (1,)


async def test_auto_join_of_a_removed_disk_is_refused_and_an_operator_may_add_it_back(
    one_voter_and_an_observer, autojump_clock
):
    """Issue 17 through the runtime: an AddVoter marked auto-join (version
    2) for a disk an operator removed is answered VOTER_REMOVED; the
    operator's own AddVoter (version 1) adds it back."""
    leader, observer = one_voter_and_an_observer
    disk = {"node_id": 2, "directory_id": "disk-2", "endpoints": ("127.0.0.1:9092",)}
    joined = await handle_client_request(leader, AddVoterRequest(**disk, auto_join=True, version=2))
    assert joined.error is ErrorCode.NONE
    removed = await handle_client_request(leader, RemoveVoterRequest(node_id=2, directory_id="disk-2"))
    assert removed.error is ErrorCode.NONE
    with trio.fail_after(10):
        await observer.wait_until(lambda: observer.node.log.end_offset >= leader.node.high_watermark)
    again = await handle_client_request(leader, AddVoterRequest(**disk, auto_join=True, version=2))
    assert again.error is ErrorCode.VOTER_REMOVED and "auto-join does not add it back" in again.message
    assert leader.node.voters.ids == (1,)
    by_operator = await handle_client_request(leader, AddVoterRequest(**disk))
    assert by_operator.error is ErrorCode.NONE and leader.node.voters.ids == (1, 2)
    assert leader.node.voters.removed == ()


async def test_a_replica_that_never_fetched_is_not_caught_up(one_voter_and_an_observer, autojump_clock):
    leader, _ = one_voter_and_an_observer
    answer = await handle_client_request(leader, AddVoterRequest(node_id=3, directory_id="disk-3"))
    assert answer.error is ErrorCode.VOTER_NOT_CAUGHT_UP and "has not fetched" in answer.message
    # The observer, under another directory id than the one asked for.
    answer = await handle_client_request(leader, AddVoterRequest(node_id=2, directory_id="disk-9"))
    assert answer.error is ErrorCode.VOTER_NOT_CAUGHT_UP and "fetches with directory disk-2" in answer.message
    assert leader.node.voters.ids == (1,)


async def test_a_node_that_does_not_lead_names_the_leader(one_voter_and_an_observer, autojump_clock):
    _, observer = one_voter_and_an_observer
    for request in (AddVoterRequest(node_id=2, directory_id="disk-2"), RemoveVoterRequest(node_id=1)):
        answer = await handle_client_request(observer, request)
        assert (answer.error, answer.leader_hint) == (ErrorCode.NOT_LEADER, 1)


class AddressBook(MemoryTransport):
    """An in-process transport that also keeps the addresses the runtime
    gives it, as the TCP transport does."""

    def __init__(self, network: MemoryNetwork, node_id: int) -> None:
        super().__init__(network, node_id)
        self.addresses: dict[int, tuple[str, int]] = {}

    def learn_voter_address(self, node_id: int, address: tuple[str, int]) -> None:
        self.addresses[node_id] = address


async def test_every_replica_learns_where_an_added_voter_listens(nursery, autojump_clock):
    """A voter added at run time is reached at its endpoint by every node
    that holds the new set, not only by the leader it fetched from."""
    network = MemoryNetwork()
    bootstrap = (Voter(1, "disk-1", ("127.0.0.1:9091",)), Voter(2, "disk-2", ("127.0.0.1:9092",)))
    runtimes, books = {}, {}
    for node_id in (1, 2, 3):
        config = QuorumConfig(node_id=node_id, bootstrap_voters=bootstrap, directory_id=f"disk-{node_id}")
        books[node_id] = AddressBook(network, node_id)
        runtimes[node_id] = QuorumRuntime(
            config, KeyValueStateMachine(), storage=MemoryStorage(), transport=books[node_id],
            rng=random.Random(node_id),
        )  # fmt: skip
        await nursery.start(runtimes[node_id].run)
    with trio.fail_after(30):
        leader = None
        while leader is None:
            leader = next((r for r in runtimes.values() if r.node.leader_has_committed_own_epoch), None)
            await trio.sleep(0.01)
        await runtimes[3].wait_until(lambda: runtimes[3].node.log.end_offset >= leader.node.high_watermark)
        answer = await handle_client_request(
            leader, AddVoterRequest(node_id=3, directory_id="disk-3", endpoints=("[::1]:9093",))
        )
        assert answer.error is ErrorCode.NONE
        for node_id in (1, 2):
            await runtimes[node_id].wait_until(lambda node_id=node_id: 3 in runtimes[node_id].node.voters)
    assert books[1].addresses == {2: ("127.0.0.1", 9092), 3: ("::1", 9093)}
    assert books[2].addresses == {1: ("127.0.0.1", 9091), 3: ("::1", 9093)}
    assert books[3].addresses == {1: ("127.0.0.1", 9091), 2: ("127.0.0.1", 9092)}
    nursery.cancel_scope.cancel()


async def test_the_tcp_transport_dials_a_voter_it_learns_of():
    """Node 1 starts knowing no peer; told where voter 2 listens, it
    connects and delivers to it."""
    (port_1, port_2) = free_ports(2)
    received: list = []
    one = TcpTransport(1, cluster_id="c", listen=("127.0.0.1", port_1), peer_addresses={})
    two = TcpTransport(2, cluster_id="c", listen=("127.0.0.1", port_2), peer_addresses={})
    async with trio.open_nursery() as nursery:
        await nursery.start(one.run, lambda message: None, lambda peer: None)
        await nursery.start(two.run, received.append, lambda peer: None)
        one.learn_voter_address(2, ("127.0.0.1", port_2))
        assert 2 in one.voter_ids
        with trio.fail_after(10):
            while not received:
                one.send(BeginQuorumEpochRequest(src=1, dst=2, epoch=1))
                await trio.sleep(0.05)
        assert received[0] == BeginQuorumEpochRequest(src=1, dst=2, epoch=1)
        nursery.cancel_scope.cancel()


async def test_upgrade_voters_makes_a_static_cluster_dynamic_once(nursery, autojump_clock):
    """UpgradeVoters through the runtime (KIP-853 kraft.version 0 to 1): a
    static pair refuses AddVoter with VOTERS_STATIC; the upgrade writes
    the static voters with their directory ids and the endpoints of the
    leader's voter list; asked again, it appends nothing; AddVoter works."""
    network = MemoryNetwork()
    runtimes = {}
    for node_id in (1, 2, 3):
        voters = (1, 2)
        config = QuorumConfig(node_id=node_id, voters=voters, directory_id=f"disk-{node_id}")
        runtime = QuorumRuntime(
            config, KeyValueStateMachine(), storage=MemoryStorage(), transport=network.transport(node_id),
            rng=random.Random(node_id),
        )  # fmt: skip
        runtime.voter_endpoints = {1: ("127.0.0.1:9091",), 2: ("127.0.0.1:9092",)}
        await nursery.start(runtime.run)
        runtimes[node_id] = runtime
    with trio.fail_after(30):
        await runtimes[1].wait_until(lambda: any(r.node.leader_has_committed_own_epoch for r in runtimes.values()))
    leader = next(r for r in runtimes.values() if r.node.leader_has_committed_own_epoch)
    follower = runtimes[3 - leader.config.node_id]
    with trio.fail_after(30):
        await runtimes[3].wait_until(lambda: runtimes[3].node.log.end_offset >= leader.node.high_watermark)

    refused = await handle_client_request(leader, AddVoterRequest(node_id=3, directory_id="disk-3"))
    assert refused.error is ErrorCode.VOTERS_STATIC and "upgrade-voters" in refused.message
    not_leader = await handle_client_request(follower, UpgradeVotersRequest())
    assert not_leader.error is ErrorCode.NOT_LEADER and not_leader.leader_hint == leader.config.node_id

    upgraded = await handle_client_request(leader, UpgradeVotersRequest())
    assert upgraded.error is ErrorCode.NONE and leader.node.high_watermark > upgraded.offset
    assert leader.node.voters == VoterSet(
        (Voter(1, "disk-1", ("127.0.0.1:9091",)), Voter(2, "disk-2", ("127.0.0.1:9092",)))
    )
    again = await handle_client_request(leader, UpgradeVotersRequest())
    assert again.error is ErrorCode.NONE and again.offset is None and "dynamic already" in again.message

    with trio.fail_after(30):
        await runtimes[3].wait_until(lambda: runtimes[3].node.log.end_offset >= leader.node.high_watermark)
    added = await handle_client_request(leader, AddVoterRequest(node_id=3, directory_id="disk-3", endpoints=("127.0.0.1:9093",)))
    assert added.error is ErrorCode.NONE, added
    with trio.fail_after(30):
        await runtimes[3].wait_until(lambda: runtimes[3].node.is_voter)
    nursery.cancel_scope.cancel()
