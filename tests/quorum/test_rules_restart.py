"""What a node remembers across a crash: KIP-595 quorum-state and the
startup rules of Kafka's QuorumState.initialize; Raft thesis §3.8."""

from __future__ import annotations

from harness import Cluster, Disk, assert_committed_agree, messages_of, records

from quorum import (
    ElectionState,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    Role,
    VoteRequest,
    VoteResponse,
)


def vote_for(candidate: int, voter: int, epoch: int) -> VoteRequest:
    """A Vote whose log beats any log in these tests."""
    return VoteRequest(src=candidate, dst=voter, epoch=epoch, last_epoch=epoch, end_offset=100, pre_vote=False)


def lose_pre_vote(cluster: Cluster, node_id: int) -> None:
    """``node_id`` stands, its pre-votes are lost, and the round times out."""
    cluster.tick_until(node_id, lambda node: node.role is Role.PROSPECTIVE)
    cluster.drop()
    cluster.tick_until(node_id, lambda node: node.role is not Role.PROSPECTIVE)
    cluster.drop()


def leave_voter_unattached_with_its_vote(cluster: Cluster, voter: int) -> None:
    """The resigned leader's EndQuorumEpoch reaches only ``voter``, which
    forgets the leader but keeps its vote for it; everything else is lost."""
    cluster.deliver(EndQuorumEpochRequest, dst=voter)
    cluster.drop()
    assert (cluster.role(voter), cluster.node(voter).voted_for) == (Role.UNATTACHED, 1)


def test_leader_restarts_resigned_in_its_epoch_and_cannot_vote_in_it():
    """KIP-595 (Kafka's QuorumState.initialize): a leader that restarts is
    Resigned in the same epoch: it votes for nobody in that epoch and, when it
    stands, stands for the next one."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.crash(1)

    cluster.restart(1)

    assert (cluster.role(1), cluster.node(1).epoch) == (Role.RESIGNED, 1)
    [answer] = messages_of(cluster.inject(vote_for(2, 1, epoch=1)))
    assert not answer.granted
    cluster.drop()
    cluster.tick_until(1, lambda node: node.role is Role.PROSPECTIVE)
    assert {request.epoch for request in cluster.pending(VoteRequest, src=1)} == {2}


def test_former_leader_never_leads_its_epoch_again():
    """KIP-595 (Kafka's QuorumState.initialize: a restarted leader is
    Resigned so that "we will not try to become leader in the same epoch
    again"): however its election state was rewritten after it resigned, a
    node that led an epoch never wins that epoch a second time."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.resign(1)
    leave_voter_unattached_with_its_vote(cluster, 2)
    lose_pre_vote(cluster, 1)
    cluster.crash(1)

    cluster.restart(1)
    cluster.deliver(VoteRequest, dst=2)
    cluster.deliver(VoteResponse, dst=1)

    assert [event.epoch for event in cluster.events(1, Role.LEADER)] == [1]
    assert not (cluster.role(1) is Role.LEADER and cluster.node(1).epoch == 1)


def test_records_a_crashed_leader_lost_are_never_replaced_within_its_epoch():
    """KIP-595 (Kafka's QuorumState.initialize: a restarted leader is
    Resigned "to protect the invariant that each record is uniquely
    identified by offset and epoch, which might otherwise be violated if
    unflushed data is lost"), hence Raft thesis §3.6.3 State Machine Safety:
    a record a leader sent before its own disk had it, then lost in a crash,
    must never be confused with a different record at the same offset and
    epoch."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.hold_disk(1)
    cluster.propose(1, b"unflushed")  # offset 1, epoch 1; sent early to node 3
    cluster.deliver(FetchResponse, dst=3)
    cluster.crash(1)  # node 1's disk never got offset 1
    cluster.drop()
    cluster.restart(1)
    cluster.tick(1)  # the restarted leader announces its resignation
    leave_voter_unattached_with_its_vote(cluster, 2)
    lose_pre_vote(cluster, 1)
    cluster.crash(1)

    cluster.restart(1)
    cluster.deliver(VoteRequest, dst=2)
    cluster.deliver(VoteResponse, dst=1)
    cluster.drop(VoteRequest)
    cluster.run_until(lambda: cluster.node(3).high_watermark >= 2 or cluster.node(3).epoch > 1, limit=400)

    assert_committed_agree(cluster)


def test_voter_restarts_remembering_its_vote():
    """Raft thesis §3.8: votedFor is durable: a voter that restarts in the
    middle of an election refuses a second candidate of the same epoch."""
    cluster = Cluster(3, pre_vote=False)
    cluster.stand(1)
    cluster.deliver(VoteRequest, dst=2)
    cluster.crash(2)

    cluster.restart(2)

    node = cluster.node(2)
    assert (node.role, node.epoch, node.voted_for) == (Role.UNATTACHED, 1, 1)
    [answer] = messages_of(cluster.inject(vote_for(3, 2, epoch=1)))
    assert not answer.granted


def test_candidate_restarts_unattached_keeping_its_vote_and_stands_in_the_next_epoch():
    """pykraft's startup rule (where Kafka's QuorumState.initialize would
    stand again in the same epoch): a voter whose record says it voted for
    itself restarts Unattached, keeping the vote, and stands in the next
    epoch when its timer fires. The record cannot tell a candidate from a
    leader that later lost a pre-vote, and a former leader must never lead
    its epoch twice (see test_former_leader_never_leads_its_epoch_again)."""
    cluster = Cluster(3, pre_vote=False)
    cluster.stand(1)
    cluster.drop()
    cluster.crash(1)

    output = cluster.restart(1)

    node = cluster.node(1)
    assert (node.role, node.epoch, node.voted_for) == (Role.UNATTACHED, 1, 1)
    assert not [m for m in output.messages if isinstance(m, VoteRequest)]
    [answer] = messages_of(cluster.inject(vote_for(2, 1, epoch=1)))
    assert not answer.granted  # its vote in epoch 1 is spent
    cluster.time_out(1)
    assert (cluster.role(1), cluster.node(1).epoch) == (Role.CANDIDATE, 2)


def test_log_ahead_of_the_election_state_restarts_unattached_in_the_logs_epoch():
    """KIP-595 (Kafka's QuorumState.initialize): when the log holds a later
    epoch than the recorded election state, the node starts Unattached in
    the log's epoch, with no vote and no leader, and records that."""
    disk = Disk(ElectionState(epoch=2, voted_for=3), records(1, 4))
    cluster = Cluster(3, disks={1: disk})

    node = cluster.node(1)
    assert (node.role, node.epoch, node.voted_for, node.leader_id) == (Role.UNATTACHED, 4, None, None)
    assert disk.election_state == ElectionState(epoch=4)


def test_follower_restarts_fetching_from_its_known_leader():
    """KIP-595 quorum-state: a follower remembers its epoch's leader and,
    restarted, fetches from it again from the end of its durable log."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"x")
    cluster.deliver_all()
    cluster.crash(2)

    output = cluster.restart(2)

    assert (cluster.role(2), cluster.node(2).leader_id) == (Role.FOLLOWER, 1)
    [fetch] = [m for m in output.messages if isinstance(m, FetchRequest)]
    assert (fetch.dst, fetch.epoch, fetch.fetch_offset) == (1, 1, 2)
