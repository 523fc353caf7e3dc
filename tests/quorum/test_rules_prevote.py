"""Pre-vote: KIP-996 (the Prospective role) on top of KIP-595."""

from __future__ import annotations

import pytest
from harness import Cluster, cluster_with_node_in, messages_of

from quorum import ElectionState, Role, VoteRequest, VoteResponse


def pre_vote_for(cluster: Cluster, receiver: int, *, src: int, log_behind: bool = False) -> VoteRequest:
    """A pre-vote from ``src`` for the epoch after ``receiver``'s, with a log
    as up to date as the receiver's (or one record behind)."""
    node = cluster.node(receiver)
    end = node.log.end_offset - (1 if log_behind else 0)
    return VoteRequest(
        src=src, dst=receiver, epoch=node.epoch + 1, last_epoch=node.log.last_epoch, end_offset=end, pre_vote=True
    )


def answer_to(cluster: Cluster, request: VoteRequest) -> VoteResponse:
    [response] = messages_of(cluster.inject(request))
    assert isinstance(response, VoteResponse) and response.pre_vote
    return response


def test_pre_vote_changes_nothing_and_persists_nothing_at_the_receiver():
    """KIP-996: a pre-vote asks "would you vote for me?": granting it changes
    neither the receiver's epoch, nor its vote, nor its role, and writes
    nothing to disk."""
    cluster, voter = cluster_with_node_in(Role.UNATTACHED)
    before = (cluster.role(voter), cluster.node(voter).epoch, cluster.node(voter).voted_for)
    disk_before = cluster.replica(voter).disk.election_state

    output = cluster.inject(pre_vote_for(cluster, voter, src=3))

    assert output.messages[0].granted
    assert not output.has_persistence
    assert (cluster.role(voter), cluster.node(voter).epoch, cluster.node(voter).voted_for) == before
    assert cluster.replica(voter).disk.election_state == disk_before


def test_leader_refuses_pre_votes():
    """KIP-996: a leader refuses every pre-vote (it is alive), and names
    itself so that the prospective voter can follow it."""
    cluster, leader = cluster_with_node_in(Role.LEADER)

    response = answer_to(cluster, pre_vote_for(cluster, leader, src=3))

    assert not response.granted
    assert response.leader_id == leader
    assert cluster.role(leader) is Role.LEADER


@pytest.mark.parametrize("has_fetched", [True, False])
def test_follower_refuses_pre_votes_once_it_has_fetched_from_its_leader(has_fetched):
    """KIP-996: a follower that has fetched successfully from its leader
    refuses pre-votes (its leader is alive, a healed node must not depose it);
    one that has not fetched yet cannot vouch for the leader and grants."""
    cluster = Cluster(3)
    if not has_fetched:
        cluster.cut(2, 1)  # node 2 hears the leader but its Fetches are lost
    cluster.elect(1)
    assert cluster.role(2) is Role.FOLLOWER

    response = answer_to(cluster, pre_vote_for(cluster, 2, src=3))

    assert response.granted is not has_fetched


@pytest.mark.parametrize("role", [Role.UNATTACHED, Role.PROSPECTIVE, Role.RESIGNED])
def test_voter_without_a_live_leader_grants_pre_votes_to_up_to_date_logs_only(role):
    """KIP-996 with Raft thesis §3.6.1: an Unattached, Prospective or Resigned
    voter grants a pre-vote iff the requester's log is at least as up to date
    as its own."""
    cluster, voter = cluster_with_node_in(role)
    other = 3

    up_to_date = answer_to(cluster, pre_vote_for(cluster, voter, src=other))
    behind = answer_to(cluster, pre_vote_for(cluster, voter, src=other, log_behind=True))

    assert up_to_date.granted
    assert not behind.granted
    assert cluster.role(voter) is role


def test_lost_pre_vote_returns_to_the_known_leader_in_the_same_epoch():
    """KIP-996: a follower that timed out and lost its pre-vote goes back to
    following the leader it knew, in the same epoch, persisting nothing."""
    cluster = Cluster(3)
    cluster.elect(1)
    disk_before = cluster.replica(2).disk.election_state
    cluster.tick_until(2, lambda node: node.role is Role.PROSPECTIVE)
    writes_before = cluster.replica(2).disk.writes

    cluster.deliver_all(VoteRequest, src=2)
    cluster.deliver_all(VoteResponse, dst=2)

    node = cluster.node(2)
    assert (node.role, node.epoch, node.leader_id) == (Role.FOLLOWER, 1, 1)
    assert cluster.replica(2).disk.writes == writes_before
    assert cluster.replica(2).disk.election_state == disk_before


def test_won_pre_vote_makes_a_candidate_in_the_next_epoch():
    """KIP-996: with a majority of pre-votes (itself included) a prospective
    voter becomes a candidate in epoch + 1 and asks for real votes."""
    cluster = Cluster(3)
    cluster.stand(1)
    assert (cluster.role(1), cluster.node(1).epoch) == (Role.PROSPECTIVE, 0)
    mark = cluster.mark()

    cluster.deliver(VoteRequest, dst=2)
    cluster.deliver(VoteResponse)

    assert cluster.transcript_since(mark) == [
        "1->2 Vote e1 pre last=e0@0",
        "2->1 VoteResp e0 pre granted leader=None",
    ]
    assert (cluster.role(1), cluster.node(1).epoch) == (Role.CANDIDATE, 1)
    assert cluster.replica(1).disk.election_state == ElectionState(epoch=1, voted_for=1)
    assert sorted((m.dst, m.epoch, m.pre_vote) for m in cluster.pending(VoteRequest, src=1) if not m.pre_vote) == [
        (2, 1, False),
        (3, 1, False),
    ]


def test_without_pre_vote_a_timed_out_follower_stands_as_candidate_at_once():
    """KIP-595 without KIP-996: a follower whose fetch timeout expires bumps
    its epoch and stands as a candidate directly."""
    cluster = Cluster(3, pre_vote=False)
    cluster.elect(1)

    cluster.tick_until(2, lambda node: node.role is not Role.FOLLOWER)

    assert (cluster.role(2), cluster.node(2).epoch) == (Role.CANDIDATE, 2)
    assert {m.pre_vote for m in cluster.pending(VoteRequest, src=2)} == {False}


@pytest.mark.parametrize("pre_vote", [True, False])
def test_partitioned_voter_bumps_its_epoch_only_without_pre_vote(pre_vote):
    """KIP-996 motivation: with pre-vote a partitioned voter never wins a
    pre-vote, so its epoch stays put and it cannot disrupt the leader when it
    comes back; without it the epoch grows with every election timeout."""
    cluster = Cluster(3, pre_vote=pre_vote)
    cluster.elect(1)
    cluster.isolate(3)

    cluster.run(1000)

    if pre_vote:
        assert cluster.node(3).epoch == 1
    else:
        assert cluster.node(3).epoch > 3
    assert cluster.leaders() == [1]
    assert cluster.node(1).epoch == 1


def test_pre_vote_grant_from_an_earlier_epoch_is_not_counted():
    """KIP-595 common epoch handling (quorum/_messages.py: "a response from a
    lower epoch is ignored") applied to KIP-996: a late pre-vote grant from an
    earlier epoch says nothing about the current leader. Counting it lets a
    voter cut off from a live leader start a real election anyway."""
    cluster = Cluster(3)
    cluster.stand(1)  # prospective in epoch 0
    cluster.deliver(VoteRequest, src=1, dst=2)
    late_grant = cluster.take_one(VoteResponse, src=2)
    assert late_grant.granted and late_grant.epoch == 0
    cluster.drop()
    cluster.elect(3)  # node 3 leads epoch 1; nodes 1 and 2 follow it
    assert [cluster.node(i).leader_id for i in (1, 2)] == [3, 3]
    cluster.isolate(1)
    cluster.tick_until(1, lambda node: node.role is Role.PROSPECTIVE)

    cluster.inject(late_grant)

    assert (cluster.role(1), cluster.node(1).epoch) == (Role.PROSPECTIVE, 1)


def test_resigned_leader_never_follows_itself():
    """KIP-595 (Kafka's QuorumState.transitionToFollower rejects leaderId ==
    localId): a node never becomes a follower of itself. A resigned leader's
    pre-vote may be refused by a follower that still names it as leader; the
    resigned node must not take that as a leader to follow."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.resign(1)
    cluster.drop()  # the EndQuorumEpoch requests are lost
    cluster.tick_until(1, lambda node: node.role is Role.PROSPECTIVE)

    cluster.deliver_all(VoteRequest, src=1)
    refusals = cluster.pending(VoteResponse, dst=1)
    cluster.deliver_all(VoteResponse, dst=1)

    assert [response.leader_id for response in refusals] == [1, 1]
    node = cluster.node(1)
    assert not (node.role is Role.FOLLOWER and node.leader_id == 1), f"node 1 follows itself in epoch {node.epoch}"
    assert cluster.pending(src=1, dst=1) == []
