"""Leader election: Raft thesis §3.4, §3.6.1, §3.8 and KIP-595's Vote,
BeginQuorumEpoch and common epoch handling."""

from __future__ import annotations

import pytest
from harness import (
    ELECTION_TIMEOUT_TICKS,
    FETCH_TIMEOUT_TICKS,
    TICK_MS,
    Cluster,
    Disk,
    cluster_with_node_in,
    make_config,
    messages_of,
    outlive_leader_lease,
    records,
)

from quorum import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    ElectionState,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchSnapshotRequest,
    RecordKind,
    Role,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)


def vote_request(src: int, dst: int, epoch: int, last_epoch: int = 0, end_offset: int = 0, *, pre_vote: bool = False) -> VoteRequest:
    return VoteRequest(src=src, dst=dst, epoch=epoch, last_epoch=last_epoch, end_offset=end_offset, pre_vote=pre_vote)


def only_response(output, kind):
    [response] = [message for message in messages_of(output) if isinstance(message, kind)]
    return response


def test_voter_times_out_only_after_its_randomised_election_timeout():
    """Raft thesis §3.4 / KIP-595 (controller.quorum.election.timeout.ms): a
    voter that hears from no leader stands after a timeout drawn uniformly
    from [T, 2T), so that voters rarely stand together."""
    waits = [Cluster(3, seed=seed).stand(1) for seed in range(40)]

    assert all(ELECTION_TIMEOUT_TICKS <= wait < 2 * ELECTION_TIMEOUT_TICKS for wait in waits), waits
    assert len(set(waits)) > 10, "the timeout is not randomised"


def test_candidate_persists_its_vote_for_itself_before_its_vote_requests_leave():
    """Raft thesis §3.8: a candidate records its vote for itself durably
    before asking for votes; the core puts both in one output, and the
    contract sends messages only after that output is durable."""
    cluster = Cluster(3, pre_vote=False)
    cluster.hold_disk(1)

    cluster.stand(1)

    standing = cluster.last_output(1)
    assert standing.election_state == ElectionState(epoch=1, voted_for=1)
    assert sorted(m.dst for m in standing.messages if isinstance(m, VoteRequest)) == [2, 3]
    assert cluster.pending(VoteRequest) == []
    cluster.release_disk(1)
    assert cluster.replica(1).disk.election_state == ElectionState(epoch=1, voted_for=1)
    assert len(cluster.pending(VoteRequest, src=1)) == 2


def test_voter_persists_its_vote_in_the_output_that_grants_it():
    """Raft thesis §3.8: a granted vote goes out only once the vote is
    durable, so a restarted voter cannot vote twice in one epoch."""
    cluster = Cluster(3, pre_vote=False)
    cluster.stand(1)

    output = cluster.inject(cluster.take_one(VoteRequest, dst=2))

    assert output.election_state == ElectionState(epoch=1, voted_for=1)
    assert only_response(output, VoteResponse).granted


def test_voter_grants_at_most_one_vote_per_epoch():
    """Raft thesis §3.4: each server votes for at most one candidate per
    term (first come, first served); asking again gets the same answer."""
    cluster = Cluster(3, pre_vote=False)
    cluster.stand(1)
    cluster.stand(2)
    cluster.drop(dst=1)
    cluster.drop(dst=2)

    first = cluster.inject(cluster.take_one(VoteRequest, src=1, dst=3))
    second = cluster.inject(cluster.take_one(VoteRequest, src=2, dst=3))
    repeated = cluster.inject(vote_request(1, 3, epoch=1))

    assert only_response(first, VoteResponse).granted
    assert not only_response(second, VoteResponse).granted
    assert only_response(repeated, VoteResponse).granted
    assert cluster.replica(3).disk.election_state == ElectionState(epoch=1, voted_for=1)


@pytest.mark.parametrize(
    ("candidate_last_epoch", "candidate_end_offset", "granted"),
    [
        pytest.param(3, 1, True, id="later-last-epoch-shorter-log"),
        pytest.param(2, 3, True, id="same-last-epoch-same-length"),
        pytest.param(2, 4, True, id="same-last-epoch-longer-log"),
        pytest.param(2, 2, False, id="same-last-epoch-shorter-log"),
        pytest.param(1, 10, False, id="earlier-last-epoch-longer-log"),
    ],
)
def test_voter_grants_only_a_candidate_whose_log_is_at_least_as_up_to_date(candidate_last_epoch, candidate_end_offset, granted):
    """Raft thesis §3.6.1: a voter grants its vote only to a candidate whose
    log is at least as up to date as its own: the later last epoch wins;
    with equal last epochs, the longer log."""
    voter_log = records(1, 1, 2)  # last epoch 2, end offset 3
    cluster = Cluster(3, disks={2: Disk(ElectionState(epoch=4), voter_log)})

    output = cluster.inject(vote_request(1, 2, epoch=5, last_epoch=candidate_last_epoch, end_offset=candidate_end_offset))

    assert only_response(output, VoteResponse).granted is granted
    assert cluster.node(2).voted_for == (1 if granted else None)


def _messages_from_a_later_epoch(epoch: int) -> dict[str, object]:
    common = {"src": 3, "dst": 2, "epoch": epoch}
    return {
        "Vote": VoteRequest(**common, last_epoch=0, end_offset=0, pre_vote=False),
        "BeginQuorumEpoch": BeginQuorumEpochRequest(**common),
        "EndQuorumEpoch": EndQuorumEpochRequest(**common, preferred_successors=(2,)),
        "Fetch": FetchRequest(**common, fetch_offset=0, last_fetched_epoch=0, request_id=1),
        "FetchSnapshot": FetchSnapshotRequest(**common, snapshot_id=SnapshotId(1, 1), position=0, request_id=1),
        "VoteResp": VoteResponse(**common, granted=False, pre_vote=False),
        "BeginQuorumEpochResp": BeginQuorumEpochResponse(**common),
        "EndQuorumEpochResp": EndQuorumEpochResponse(**common),
    }


@pytest.mark.parametrize("kind", list(_messages_from_a_later_epoch(0)))
def test_message_from_a_later_epoch_moves_the_receiver_into_that_epoch(kind):
    """KIP-595 common epoch handling (quorum/_messages.py): a message from a
    higher epoch moves the receiver into that epoch before anything else,
    whatever the message is. (The receiver is a follower whose leader has
    been silent for an election timeout: while it still hears its leader, a
    Vote is refused instead; test_rules_disruption.py.)"""
    cluster, follower = cluster_with_node_in(Role.FOLLOWER)
    outlive_leader_lease(cluster, follower)

    output = cluster.inject(_messages_from_a_later_epoch(7)[kind])

    assert cluster.node(follower).epoch == 7
    assert all(message.epoch == 7 for message in messages_of(output))
    assert cluster.replica(follower).disk.election_state.epoch == 7


@pytest.mark.parametrize("role", list(Role))
def test_vote_from_a_later_epoch_moves_every_role_into_that_epoch(role):
    """KIP-595 / Raft thesis §3.3: any role that sees a Vote from a higher
    epoch steps into that epoch (and, the candidate's log being up to date,
    votes for it) once it knows of no live leader (§4.2.3): a follower whose
    leader has been silent for an election timeout, and a leader only with
    check quorum off (test_rules_disruption.py has the lease itself)."""
    cluster, node_id = cluster_with_node_in(role, **({"check_quorum": False} if role is Role.LEADER else {}))
    if role is Role.FOLLOWER:
        outlive_leader_lease(cluster, node_id)
    candidate = 3 if node_id != 3 else 1
    epoch = cluster.node(node_id).epoch + 5

    output = cluster.inject(vote_request(candidate, node_id, epoch, last_epoch=epoch - 1, end_offset=10))

    node = cluster.node(node_id)
    assert (node.role, node.epoch, node.voted_for) == (Role.UNATTACHED, epoch, candidate)
    assert only_response(output, VoteResponse).granted


def _requests_from_an_earlier_epoch() -> dict[str, tuple[int, object]]:
    """(receiver, request) with epoch 0, sent to a cluster in epoch 1 led by node 1."""

    def stale(dst: int) -> dict[str, int]:
        return {"src": 3, "dst": dst, "epoch": 0}

    return {
        "Vote": (2, VoteRequest(**stale(2), last_epoch=1, end_offset=5, pre_vote=False)),
        "BeginQuorumEpoch": (2, BeginQuorumEpochRequest(**stale(2))),
        "EndQuorumEpoch": (2, EndQuorumEpochRequest(**stale(2), preferred_successors=(2,))),
        "Fetch-to-leader": (1, FetchRequest(**stale(1), fetch_offset=0, last_fetched_epoch=0, request_id=9)),
        "Fetch-to-follower": (2, FetchRequest(**stale(2), fetch_offset=0, last_fetched_epoch=0, request_id=9)),
        "FetchSnapshot-to-leader": (1, FetchSnapshotRequest(**stale(1), snapshot_id=SnapshotId(1, 1), position=0, request_id=9)),
    }


@pytest.mark.parametrize("kind", list(_requests_from_an_earlier_epoch()))
def test_request_from_an_earlier_epoch_is_fenced_with_the_receivers_epoch(kind):
    """KIP-595 common epoch handling (quorum/_messages.py; Kafka's
    validateVoterOnlyRequest / validateLeaderOnlyRequest check the epoch
    first): a request from a lower epoch changes nothing and is answered
    with FENCED_LEADER_EPOCH and the receiver's epoch."""
    cluster = Cluster(3)
    cluster.elect(1)
    receiver, request = _requests_from_an_earlier_epoch()[kind]
    role_before = cluster.role(receiver)

    output = cluster.inject(request)

    [response] = messages_of(output)
    assert (response.epoch, response.error) == (1, ErrorCode.FENCED_LEADER_EPOCH)
    assert (cluster.role(receiver), cluster.node(receiver).epoch) == (role_before, 1)
    assert not getattr(response, "granted", False)


def test_split_vote_backs_off_then_stands_again_in_the_next_epoch():
    """Raft thesis §3.4 / KIP-595: when no candidate gets a majority, each
    waits a random backoff (not its whole election timeout) and stands again
    in a new epoch."""
    cluster = Cluster(4, pre_vote=False)
    cluster.stand(1)
    cluster.stand(2)
    # Node 3 hears node 1 first, node 4 hears node 2 first: two votes each.
    cluster.deliver(VoteRequest, src=1, dst=3)
    cluster.deliver(VoteRequest, src=2, dst=4)
    cluster.deliver_all()

    assert (cluster.role(1), cluster.node(1).epoch) == (Role.CANDIDATE, 1)
    assert cluster.pending() == []
    backoff = cluster.tick_until(1, lambda node: node.epoch == 2)

    backoff_max_ticks = make_config(1, (1, 2, 3, 4)).ticks(1000)
    assert 1 <= backoff <= backoff_max_ticks
    assert sorted((m.dst, m.epoch) for m in cluster.pending(VoteRequest, src=1)) == [(2, 2), (3, 2), (4, 2)]


def test_single_voter_elects_itself_and_commits_alone():
    """Raft thesis §3.4 / KAFKA-16144: a single voter is its own majority: it
    needs no pre-vote, no vote and no follower to lead and to commit."""
    cluster = Cluster(1)

    cluster.stand(1)
    cluster.propose(1, b"alone")

    node = cluster.node(1)
    assert (node.role, node.epoch) == (Role.LEADER, 1)
    assert cluster.sent(1) == []
    assert [entry.kind for entry in cluster.replica(1).committed] == [RecordKind.LEADER_CHANGE, RecordKind.DATA]
    assert cluster.committed_data(1) == [b"alone"]


def test_candidate_told_of_the_winner_of_its_epoch_follows_it():
    """KIP-595 BeginQuorumEpoch: a candidate that learns another voter won its
    epoch stops standing and follows the winner in that epoch."""
    cluster = Cluster(3, pre_vote=False)
    cluster.stand(1)
    cluster.stand(2)
    cluster.drop(src=2)  # node 2's requests are lost; node 1 wins with node 3

    cluster.deliver_all(where=lambda message: 2 not in (message.src, message.dst))
    assert cluster.role(1) is Role.LEADER
    cluster.deliver_all()

    node = cluster.node(2)
    assert (node.role, node.epoch, node.leader_id) == (Role.FOLLOWER, 1, 1)
    assert cluster.replica(2).disk.election_state == ElectionState(epoch=1, voted_for=2, leader_id=1)


def test_refused_candidate_does_not_postpone_the_voters_own_candidacy():
    """Raft thesis §3.4: a voter restarts its election timer only when it
    hears from a leader or grants a vote. Learning a later epoch from a
    candidate it refuses (a stale log) must not push its own election back,
    or a stale node standing again and again would stall the cluster."""
    def cluster_where_node_2_has_a_log() -> Cluster:
        return Cluster(3, disks={2: Disk(ElectionState(epoch=1), records(1, 1))})

    undisturbed = cluster_where_node_2_has_a_log().stand(2)
    cluster = cluster_where_node_2_has_a_log()
    cluster.tick(2, times=undisturbed // 2)

    refused = only_response(cluster.inject(vote_request(3, 2, epoch=5)), VoteResponse)
    waited = undisturbed // 2 + cluster.stand(2)

    assert not refused.granted and cluster.node(2).epoch == 5
    assert waited == undisturbed


@pytest.mark.parametrize("fast_failover", [True, False])
def test_follower_told_its_leader_is_unreachable_stands_within_an_election_timeout(fast_failover):
    """quorum/_config.py fast_failover: when the transport reports the
    leader's process gone, a follower stands after a random wait below the
    election timeout instead of the whole fetch timeout; without the option
    only the fetch timeout applies."""
    cluster = Cluster(3, fast_failover=fast_failover)
    cluster.elect(1)
    cluster.crash(1)

    cluster.handle(2, cluster.node(2).peer_unreachable(1))
    waited = cluster.tick_until(2, lambda node: node.role is not Role.FOLLOWER)

    if fast_failover:
        assert 1 <= waited <= ELECTION_TIMEOUT_TICKS // 4  # unreachable_leader_wait_ms: None, a quarter
    else:
        assert waited == FETCH_TIMEOUT_TICKS


def test_the_wait_after_the_leader_is_reported_gone_is_drawn_below_unreachable_leader_wait_ms():
    """quorum/_config.py unreachable_leader_wait_ms bounds the random wait
    of a follower whose leader's process is gone (most of what a crashed
    leader costs; docs/benchmarks.md, "Failover"), and the draws spread
    over it: two survivors standing in the same tick would split the vote."""
    waits = []
    for seed in range(40):
        cluster = Cluster(3, seed=seed, unreachable_leader_wait_ms=50 * TICK_MS)
        cluster.elect(1)
        cluster.crash(1)
        cluster.handle(2, cluster.node(2).peer_unreachable(1))
        waits.append(cluster.tick_until(2, lambda node: node.role is not Role.FOLLOWER))

    assert all(1 <= wait <= 50 for wait in waits), waits
    assert len(set(waits)) > 20, waits


def _both_survivors_stand_before_any_pre_vote_arrives(cluster: Cluster) -> None:
    cluster.elect(1)
    cluster.crash(1)
    for survivor in (2, 3):
        cluster.handle(survivor, cluster.node(survivor).peer_unreachable(1))
    for survivor in (2, 3):
        cluster.stand(survivor)  # nothing delivered yet: both are Prospective


def test_survivors_of_a_crashed_leader_that_stand_together_do_not_split_the_vote():
    """quorum/_node.py _on_pre_vote_request: two survivors that stood at
    about the same time because their leader's process is gone grant a
    pre-vote only to the one that outranks the other (as up to date, lower
    id): one stands in the next epoch and wins it. Granting each other, both
    would stand, split the vote, and wait out an election timeout and a
    backoff (docs/benchmarks.md, "Failover")."""
    cluster = Cluster(3)
    _both_survivors_stand_before_any_pre_vote_arrives(cluster)

    cluster.deliver_all()

    assert cluster.leaders() == [2]
    assert [event.role for event in cluster.events(3) if event.role is Role.CANDIDATE] == []
    assert cluster.node(3).epoch == cluster.node(2).epoch == 2


def test_a_survivor_grants_the_pre_vote_of_a_more_up_to_date_one_whatever_its_id():
    """The rank is the log first (Raft thesis §3.6.1): a survivor missing
    the leader's last record grants the pre-vote of one that has it, even
    with a higher id, and that one (which refuses it) wins."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.cut(1, 2)  # node 2 misses the next record
    cluster.propose(1, b"x")
    cluster.deliver_all()
    assert cluster.node(3).log.end_offset > cluster.node(2).log.end_offset
    cluster.crash(1)
    for survivor in (2, 3):
        cluster.handle(survivor, cluster.node(survivor).peer_unreachable(1))
    for survivor in (2, 3):
        cluster.stand(survivor)

    cluster.deliver_all()

    assert cluster.leaders() == [3]


def test_a_survivor_grants_the_pre_vote_of_one_that_refused_its_own():
    """A survivor that stood before the other saw the reset was refused by
    it (that one still heard its leader lately): when the other stands in
    turn, the first grants it whatever their ranks, since it cannot win
    without it. Refusing by rank, both would wait out their pre-vote
    rounds (an election timeout) with no leader."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.crash(1)
    cluster.handle(2, cluster.node(2).peer_unreachable(1))
    cluster.stand(2)
    cluster.deliver_all()  # node 3 has not seen the reset: it refuses node 2
    assert cluster.role(2) is Role.PROSPECTIVE
    cluster.handle(3, cluster.node(3).peer_unreachable(1))
    cluster.stand(3)  # outranked by node 2 (same log, higher id)

    cluster.deliver_all()

    assert cluster.leaders() == [3]
