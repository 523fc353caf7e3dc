"""AddVoter and RemoveVoter through the trio runtime (issue 17, KIP-853),
under MockClock over an in-process network: what each request is answered,
from the leader and from a node that does not lead."""

from __future__ import annotations

import random

import pytest
import trio

from quorum import ErrorCode, QuorumConfig, Voter
from quorum.runtime import KeyValueStateMachine, MemoryNetwork, QuorumRuntime, handle_client_request
from quorum.storage import MemoryStorage
from quorum.wire import AddVoterRequest, DescribeQuorumRequest, RemoveVoterRequest

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
            io_in_thread=False,
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
