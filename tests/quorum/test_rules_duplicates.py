"""Duplicated, delayed and reordered messages are harmless: Raft thesis
§3.1 (the network may duplicate, delay, reorder and lose messages) and
KIP-595's request ids and epoch fencing."""

from __future__ import annotations

import pytest
from harness import REQUEST_TIMEOUT_TICKS, Cluster, messages_of

from quorum import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    Role,
    VoteRequest,
    VoteResponse,
)


@pytest.mark.parametrize("pre_vote", [False, True])
def test_duplicated_vote_grant_is_counted_once(pre_vote):
    """Raft thesis §3.4: a candidate needs votes from a majority of distinct
    servers; the same grant delivered three times is one vote (KIP-996: the
    same holds for pre-votes)."""
    cluster = Cluster(5, pre_vote=pre_vote)
    cluster.stand(1)
    standing_role = cluster.role(1)
    cluster.deliver(VoteRequest, dst=2)
    grant = cluster.take_one(VoteResponse, src=2)

    for _ in range(3):
        cluster.inject(grant)

    assert cluster.role(1) is standing_role
    cluster.deliver(VoteRequest, dst=3)
    cluster.deliver(VoteResponse, src=3)
    assert cluster.role(1) is not standing_role


def test_vote_grant_from_an_earlier_election_is_not_counted():
    """KIP-595 common epoch handling: a late grant from an earlier epoch's
    election is ignored by a candidate standing in a later epoch."""
    cluster = Cluster(5, pre_vote=False)
    cluster.stand(1)
    cluster.deliver(VoteRequest, dst=2)
    late_grant = cluster.take_one(VoteResponse, src=2)
    cluster.drop()
    cluster.tick_until(1, lambda node: node.epoch == 2)  # the election timed out; it stands again
    cluster.deliver(VoteRequest, dst=3)
    cluster.deliver(VoteResponse, src=3)

    cluster.inject(late_grant)

    assert (cluster.role(1), cluster.node(1).epoch) == (Role.CANDIDATE, 2)


def test_stale_fetch_response_is_ignored():
    """KIP-595 request ids: a follower accepts only the answer to the Fetch
    it has in flight; a late answer to an earlier one changes nothing, even
    when it carries records that would fit."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"x")
    late = cluster.take_one(FetchResponse, dst=2)
    cluster.tick(2, times=cluster.node(2).config.ticks(500) + REQUEST_TIMEOUT_TICKS)
    retry = cluster.take_one(FetchRequest, src=2)  # the Fetch now in flight
    assert retry.request_id > late.request_id

    output = cluster.inject(late)

    assert not output
    assert cluster.node(2).log.end_offset == 1


def test_duplicated_old_fetch_does_not_displace_the_parked_newer_one():
    """KIP-595 long poll with a duplicating network: a copy of an older Fetch
    is answered (and ignored by the follower) while the newer Fetch stays
    parked and still gets the next records."""
    cluster = Cluster(3)
    cluster.elect(1)
    older, newer = cluster.sent(2, FetchRequest)[-2:]
    assert older.request_id < newer.request_id

    cluster.inject(older)
    cluster.deliver_all()
    cluster.propose(1, b"x")
    cluster.deliver(FetchResponse, dst=2)

    assert [entry.data for entry in cluster.log_entries(2)][-1:] == [b"x"]


def test_duplicated_begin_quorum_epoch_changes_nothing():
    """KIP-595 BeginQuorumEpoch is idempotent: a follower that already
    follows the sender in that epoch persists nothing and keeps fetching."""
    cluster = Cluster(3)
    cluster.elect(1)
    writes_before = cluster.replica(2).disk.writes

    output = cluster.inject(BeginQuorumEpochRequest(src=1, dst=2, epoch=1))

    assert not output.has_persistence
    assert cluster.replica(2).disk.writes == writes_before
    assert [type(m).__name__ for m in messages_of(output)] == ["BeginQuorumEpochResponse"]
    assert (cluster.role(2), cluster.node(2).leader_id) == (Role.FOLLOWER, 1)


def test_end_quorum_epoch_answer_from_an_earlier_epoch_is_not_an_acknowledgement():
    """KIP-595 common epoch handling (quorum/_messages.py: "a response from a
    lower epoch is ignored"): a resigned leader re-sends EndQuorumEpoch to
    every voter that has not acknowledged this epoch's request; a late answer
    to its resignation of an earlier epoch does not count."""
    cluster = Cluster(3, election_timeout_ms=1500)  # re-sends before it stands
    cluster.elect(1)
    cluster.resign(1)
    cluster.deliver(EndQuorumEpochRequest)
    late_answer = cluster.take_one(EndQuorumEpochResponse, src=2)
    cluster.elect(1)  # node 1 leads again, in epoch 2
    cluster.resign(1)
    cluster.drop()  # this time the EndQuorumEpoch requests are lost

    cluster.inject(late_answer)
    cluster.tick(1, times=REQUEST_TIMEOUT_TICKS)

    assert (late_answer.epoch, cluster.node(1).epoch, cluster.role(1)) == (1, 2, Role.RESIGNED)
    assert sorted(m.dst for m in cluster.pending(EndQuorumEpochRequest, src=1)) == [2, 3]


def test_a_restarted_fetcher_is_not_taken_for_a_duplicate_of_its_former_self():
    """Found by the broker simulator: a restarted node's fetch sequence starts
    again at 1, below the id of its previous process's parked Fetch. Taken
    for network duplicates, every fetch of the new process was answered at
    once (a fetch storm), and an answer meant for the old process could meet
    a new fetch with the same id. The fetch session in the request id tells
    the two processes apart: the parked one is answered (it may be the live
    one: a late copy of an old process's Fetch looks just the same) and the
    new one waits."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.crash(2)
    cluster.restart(2, fetch_session=7)
    cluster.run(200)  # a few long polls: the parked Fetch's sequence is past 1
    parked_id = cluster.sent(2, FetchRequest)[-1].request_id
    assert (parked_id >> 32, parked_id & 0xFFFF_FFFF > 1) == (7, True)

    cluster.crash(2)
    # Sessions are random per process start: this one happens to be lower.
    cluster.restart(2, fetch_session=3)
    cluster.tick_until(2, lambda node: node.leader_id == 1 or bool(cluster.pending(FetchRequest, src=2)))
    cluster.deliver_all(FetchRequest, src=2, dst=1)

    fresh = cluster.sent(2, FetchRequest)[-1]
    assert fresh.request_id >> 32 != parked_id >> 32
    answered = {response.request_id for response in cluster.pending(FetchResponse, src=1, dst=2)}
    # The old process's parked Fetch is answered (nobody is left to hear
    # it); the new one, with nothing new to carry, is parked.
    assert answered == {parked_id}
    cluster.propose(1, b"after-restart")
    cluster.deliver_all()
    assert [entry.data for entry in cluster.log_entries(2)][-1:] == [b"after-restart"]
