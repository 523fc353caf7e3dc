"""Disruption resistance: the leader lease (Raft thesis §4.2.3, "disruptive
servers"; etcd's ``inLease``), votes between voters only, and the ranges a
message's numbers must lie in before the core acts on it.

The rule, one test (or a parametrized family) per sentence:

- a voter that has heard from a live leader within the minimum election
  timeout ignores Vote and pre-vote requests: it grants nothing and raises
  no epoch; a leader (which satisfies check quorum, or it would have
  resigned) does the same;
- a voter leaves the lease when its leader resigns (EndQuorumEpoch), when
  the transport reports the leader's process gone, and after an election
  timeout of silence; a restarted voter has none; with check quorum off
  (the teaching switch) there is none at all;
- only voters vote: a Vote from a non-voter, or to an observer, moves
  nothing;
- a message carrying a number that the wire and storage cannot hold
  (``quorum/_types.py``) is dropped and counted, never raised, and a voter
  never stands in an epoch past the last one storage can hold;
- a message naming its receiver as its sender is dropped and counted
  (no node sends one to itself), and so is a BeginQuorumEpoch from another
  node than the leader the receiver knows for that epoch (§3.4).
"""

from __future__ import annotations

import random

import pytest
from harness import (
    ELECTION_TIMEOUT_TICKS,
    Cluster,
    Disk,
    cluster_with_node_in,
    make_config,
    messages_of,
    messages_of_every_kind,
    outlive_leader_lease,
)

from quorum import (
    BeginQuorumEpochRequest,
    CoreHooks,
    ElectionState,
    EndQuorumEpochRequest,
    Entry,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    QuorumNode,
    RecordKind,
    Role,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from quorum._types import EPOCH_MAX, NODE_ID_MAX, OFFSET_MAX
from quorum.storage import MemoryLogStore


def up_to_date_vote(cluster: Cluster, src: int, dst: int, *, epoch_ahead: int = 5, pre_vote: bool = False) -> VoteRequest:
    """A Vote (or pre-vote) from ``src`` that ``dst`` would grant on log
    grounds alone (Raft thesis §3.6.1): ``src`` claims ``dst``'s own log."""
    node = cluster.node(dst)
    return VoteRequest(
        src=src,
        dst=dst,
        epoch=node.epoch + (1 if pre_vote else epoch_ahead),
        last_epoch=node.log.last_epoch,
        end_offset=node.log.end_offset,
        pre_vote=pre_vote,
    )


def answer(output) -> VoteResponse:
    [response] = [message for message in messages_of(output) if isinstance(message, VoteResponse)]
    return response


def unmoved(cluster: Cluster, node_id: int) -> tuple:
    node = cluster.node(node_id)
    return (node.role, node.epoch, node.leader_id, node.voted_for, cluster.replica(node_id).disk.election_state)


# =========================================================================
# The lease: a voter that hears a live leader ignores votes
# =========================================================================


@pytest.mark.parametrize("pre_vote", [False, True], ids=["vote", "pre-vote"])
def test_follower_that_heard_its_leader_within_the_election_timeout_grants_nothing_and_raises_no_epoch(pre_vote):
    """Raft thesis §4.2.3: "if a server receives a RequestVote request within
    the minimum election timeout of hearing from a current leader, it does
    not update its term or grant its vote". The follower's leader answered
    its last Fetch just now; a Vote from a later epoch with an up-to-date
    log is refused, and nothing moves or is persisted. (For a pre-vote,
    KIP-996 already refused it; the lease keeps that.)"""
    cluster = Cluster(3)
    cluster.elect(1)
    before = unmoved(cluster, 2)

    output = cluster.inject(up_to_date_vote(cluster, 3, 2, pre_vote=pre_vote))

    response = answer(output)
    assert not response.granted
    assert (response.epoch, response.leader_id) == (1, 1)
    assert not output.has_persistence
    assert unmoved(cluster, 2) == before
    assert cluster.node(2).counters["votes_ignored_leader_alive"] == 1


def test_the_lease_lasts_exactly_one_minimum_election_timeout_after_the_leader_last_answered():
    """Raft thesis §4.2.3 ("within the minimum election timeout"): one tick
    short of an election timeout of silence the Vote is still refused; at
    the timeout the follower adopts the candidate's epoch and votes, as
    Raft's plain rule (§3.3) says."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.tick(2, times=ELECTION_TIMEOUT_TICKS - 1)
    refused = answer(cluster.inject(up_to_date_vote(cluster, 3, 2)))
    cluster.tick(2)

    granted = answer(cluster.inject(up_to_date_vote(cluster, 3, 2)))

    assert not refused.granted and refused.epoch == 1
    assert granted.granted and granted.epoch == 6
    node = cluster.node(2)
    assert (node.role, node.epoch, node.voted_for) == (Role.UNATTACHED, 6, 3)


@pytest.mark.parametrize("pre_vote", [False, True], ids=["vote", "pre-vote"])
def test_leader_with_check_quorum_grants_nothing_and_raises_no_epoch(pre_vote):
    """etcd's lease (a leader with checkQuorum is always in it): a leader
    refuses every Vote and pre-vote, whatever its epoch, and keeps leading:
    check quorum makes it resign once a majority stops hearing it, so while
    it leads, the voters that vouch for it are still there. It names itself,
    so that an honest requester can follow it. (A pre-vote, KIP-996 already
    refused.)"""
    cluster = Cluster(3)
    cluster.elect(1)
    before = unmoved(cluster, 1)

    output = cluster.inject(up_to_date_vote(cluster, 3, 1, pre_vote=pre_vote))

    response = answer(output)
    assert not response.granted
    assert (response.epoch, response.leader_id) == (1, 1)
    assert not output.has_persistence
    assert unmoved(cluster, 1) == before
    assert cluster.leaders() == [1]


def test_a_flood_of_rising_epochs_leaves_a_healthy_cluster_leading_and_committing():
    """The attack measured against real processes (issue 15): forged Votes
    and pre-votes with ever higher epochs, claiming to come from the other
    voters, at every voter. None moves an epoch, the leader keeps leading,
    and a write proposed during the flood commits everywhere."""
    cluster = Cluster(3)
    cluster.elect(1)
    epoch = 1
    for round_number in range(200):
        for dst in cluster.voter_ids:
            for pre_vote in (False, True):
                src = cluster.voter_ids[(dst + round_number) % 3]
                if src == dst:
                    continue
                epoch += 1
                cluster.inject(
                    VoteRequest(src=src, dst=dst, epoch=epoch, last_epoch=epoch, end_offset=10**6, pre_vote=pre_vote)
                )
        cluster.run(1)
        if round_number == 100:
            cluster.propose(1, b"written during the flood")

    assert cluster.leaders() == [1]
    assert [cluster.node(i).epoch for i in cluster.voter_ids] == [1, 1, 1]
    assert all(cluster.committed_data(i) == [b"written during the flood"] for i in cluster.voter_ids)


# =========================================================================
# Real elections still happen: what ends the lease
# =========================================================================


@pytest.mark.parametrize("pre_vote", [True, False])
def test_end_quorum_epoch_ends_the_lease_so_the_preferred_successor_wins_at_once(pre_vote):
    """KIP-595 EndQuorumEpoch (Kafka leaves FollowerState there; etcd's
    leadership transfer bypasses the lease): voters told the leader resigned
    no longer hear a live leader, so the preferred successor wins on the
    next tick, well within the lease the followers held a moment before."""
    cluster = Cluster(3, pre_vote=pre_vote)
    cluster.elect(1)
    cluster.resign(1)
    [successor, _] = cluster.pending(EndQuorumEpochRequest, dst=2)[0].preferred_successors
    cluster.deliver_all(EndQuorumEpochRequest)

    cluster.tick(successor)
    cluster.deliver_all()

    assert cluster.leaders() == [successor]
    assert cluster.node(successor).epoch == 2


def test_a_follower_told_its_leader_process_is_gone_grants_at_once():
    """fast_failover: when the transport reports the leader's connection
    reset, the follower stops vouching for it (KIP-996) and its lease ends:
    a Vote from a later epoch is granted without waiting out the lease."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.crash(1)
    cluster.handle(3, cluster.node(3).peer_unreachable(1))

    response = answer(cluster.inject(up_to_date_vote(cluster, 2, 3, epoch_ahead=1)))

    assert response.granted
    assert (cluster.node(3).epoch, cluster.node(3).voted_for) == (2, 2)


def test_a_survivor_that_granted_a_pre_vote_waits_an_election_timeout_before_it_stands():
    """A follower of a crashed leader that grants a pre-vote does not stand
    within ``unreachable_leader_wait_ms`` any more: the node it granted is
    about to stand in the next epoch, and a second candidate would split
    that vote (seen on three real processes: both survivors stood within
    2 ms, one having just granted the other's pre-vote)."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.crash(1)
    cluster.handle(2, cluster.node(2).peer_unreachable(1))

    response = answer(cluster.inject(up_to_date_vote(cluster, 3, 2, pre_vote=True)))
    waited = cluster.tick_until(2, lambda node: node.role is not Role.FOLLOWER)

    assert response.granted
    assert ELECTION_TIMEOUT_TICKS <= waited <= 2 * ELECTION_TIMEOUT_TICKS


def test_a_restarted_voter_has_no_lease_until_its_leader_answers():
    """A voter that restarts as a follower of the leader it recorded has not
    heard from it in this process: it cannot vouch for it, and grants."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.crash(2)
    cluster.drop()
    cluster.restart(2)
    assert (cluster.role(2), cluster.node(2).leader_id) == (Role.FOLLOWER, 1)

    response = answer(cluster.inject(up_to_date_vote(cluster, 3, 2, epoch_ahead=1)))

    assert response.granted


def test_a_follower_that_lost_its_leader_for_an_election_timeout_grants():
    """A partition: no answer from the leader for an election timeout. The
    follower's own fetch timeout (twice as long) has not fired, but a
    candidate that timed out already is granted its vote."""
    cluster = Cluster(3)
    cluster.elect(1)
    outlive_leader_lease(cluster, 2)

    response = answer(cluster.inject(up_to_date_vote(cluster, 3, 2, epoch_ahead=1)))

    assert response.granted


def test_with_check_quorum_off_there_is_no_lease():
    """The teaching switch keeps Raft's plain rule (§3.3): etcd ties its
    lease to checkQuorum too, since only check quorum guarantees that a
    leader which lost its majority steps down. A follower that just heard
    its leader, and the leader itself, step into a later epoch's Vote; the
    zombie leader of KAFKA-15489 behaves as it did."""
    cluster = Cluster(3, check_quorum=False)
    cluster.elect(1)

    follower_answer = answer(cluster.inject(up_to_date_vote(cluster, 3, 2)))
    leader_answer = answer(cluster.inject(up_to_date_vote(cluster, 3, 1, epoch_ahead=7)))

    assert follower_answer.granted and cluster.node(2).epoch == 6
    assert leader_answer.granted and cluster.node(1).epoch == 8
    assert cluster.role(1) is Role.UNATTACHED


# =========================================================================
# Only voters vote
# =========================================================================


@pytest.mark.parametrize("pre_vote", [False, True], ids=["vote", "pre-vote"])
def test_observer_refuses_votes_and_keeps_its_epoch(pre_vote):
    """Raft thesis §3.4 counts votes among voters only (Kafka answers an
    observer's Vote INCONSISTENT_VOTER_SET). An observer whose epoch a
    stranger could raise would carry that epoch to the leader in its next
    Fetch and depose it; it refuses, and moves nothing."""
    cluster = Cluster(3, observers=(4,))
    cluster.elect(1)
    cluster.tick(4)
    cluster.deliver_all()
    assert cluster.node(4).leader_id == 1
    before = unmoved(cluster, 4)

    response = answer(cluster.inject(up_to_date_vote(cluster, 3, 4, pre_vote=pre_vote)))

    assert (response.granted, response.error) == (False, ErrorCode.INVALID_REQUEST)
    assert unmoved(cluster, 4) == before


@pytest.mark.parametrize("pre_vote", [False, True], ids=["vote", "pre-vote"])
def test_vote_from_a_non_voter_is_refused_and_moves_nothing(pre_vote):
    """Only a voter can stand (Raft thesis §3.4). A Vote from any other id is
    refused by a voter that would otherwise grant it (no leader known, no
    vote cast): a granted one would spend this voter's one vote of the epoch
    on a node that can never lead."""
    cluster, voter = cluster_with_node_in(Role.UNATTACHED)
    before = unmoved(cluster, voter)

    response = answer(cluster.inject(up_to_date_vote(cluster, 9, voter, epoch_ahead=1, pre_vote=pre_vote)))

    assert (response.granted, response.error) == (False, ErrorCode.INVALID_REQUEST)
    assert unmoved(cluster, voter) == before
    assert cluster.node(voter).counters["votes_refused_not_voter"] == 1


_FROM_A_STRANGER = {
    "BeginQuorumEpoch": lambda epoch: BeginQuorumEpochRequest(src=9, dst=1, epoch=epoch),
    "EndQuorumEpoch": lambda epoch: EndQuorumEpochRequest(src=9, dst=1, epoch=epoch, preferred_successors=(2,)),
    "VoteResponse": lambda epoch: VoteResponse(
        src=9, dst=1, epoch=epoch, granted=False, pre_vote=False, leader_id=None, error=ErrorCode.NONE
    ),
}


@pytest.mark.parametrize("kind", sorted(_FROM_A_STRANGER))
def test_a_message_only_voters_send_is_refused_from_a_non_voter_and_moves_nothing(kind):
    """Found by the hostile-clients nemesis: one BeginQuorumEpoch,
    EndQuorumEpoch or VoteResponse from an id outside the voter set, with
    the next epoch, moved the leader into that epoch (and a BeginQuorumEpoch
    named the stranger leader). Only voters lead, hand over or answer what a
    node sends to voters (KIP-595; Kafka: INCONSISTENT_VOTER_SET): such a
    message is refused (a request) or dropped (an answer), and counted."""
    cluster = Cluster(3)
    cluster.elect(1)
    before = unmoved(cluster, 1)

    output = cluster.inject(_FROM_A_STRANGER[kind](cluster.node(1).epoch + 1))

    assert unmoved(cluster, 1) == before
    assert cluster.node(1).role is Role.LEADER
    assert not output.has_persistence
    assert all(message.error == ErrorCode.INVALID_REQUEST for message in messages_of(output))
    assert cluster.node(1).counters["messages_refused_not_voter"] == 1


def test_an_observers_fetch_from_a_later_epoch_does_not_move_the_leader():
    """A broker (an observer) once carried a stranger's epoch to the leader
    in its next Fetch, and the leader adopted it. A non-voter alone never
    moves a node's epoch: the leader answers UNKNOWN_LEADER_EPOCH and keeps
    leading (honest observers learn epochs from voters, who tell the leader
    themselves)."""
    cluster = Cluster(3, observers=(4,))
    cluster.elect(1)
    before = unmoved(cluster, 1)
    epoch = cluster.node(1).epoch

    output = cluster.inject(FetchRequest(src=4, dst=1, epoch=epoch + 3, fetch_offset=0, last_fetched_epoch=0, request_id=1))

    [response] = [message for message in messages_of(output) if isinstance(message, FetchResponse)]
    assert response.error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert unmoved(cluster, 1) == before
    assert cluster.node(1).counters["messages_refused_not_voter"] == 1


# =========================================================================
# Numbers no layer can hold
# =========================================================================

_TOO_LARGE_EPOCH = EPOCH_MAX + 1
_FETCH = {"fetch_offset": 0, "last_fetched_epoch": 0, "request_id": 1}
_SNAPSHOT = SnapshotId(10, 1)

# (name, message to node 1 of a fresh cluster, the field the report names)
_OUT_OF_RANGE = [
    ("vote epoch past 32 bits", VoteRequest(src=2, dst=1, epoch=_TOO_LARGE_EPOCH, last_epoch=0, end_offset=0, pre_vote=False), "epoch"),
    ("pre-vote last epoch", VoteRequest(src=2, dst=1, epoch=1, last_epoch=_TOO_LARGE_EPOCH, end_offset=0, pre_vote=True), "last_epoch"),
    ("vote end offset negative", VoteRequest(src=2, dst=1, epoch=1, last_epoch=0, end_offset=-1, pre_vote=False), "end_offset"),
    ("begin epoch", BeginQuorumEpochRequest(src=2, dst=1, epoch=2**40), "epoch"),
    ("sender id", BeginQuorumEpochRequest(src=NODE_ID_MAX + 1, dst=1, epoch=1), "src"),
    ("successor id", EndQuorumEpochRequest(src=2, dst=1, epoch=0, preferred_successors=(3, -1)), "preferred_successors"),
    ("fetch offset", FetchRequest(src=2, dst=1, epoch=0, **{**_FETCH, "fetch_offset": OFFSET_MAX + 1}), "fetch_offset"),
    ("fetch last epoch", FetchRequest(src=2, dst=1, epoch=0, **{**_FETCH, "last_fetched_epoch": -1}), "last_fetched_epoch"),
    ("fetch request id", FetchRequest(src=2, dst=1, epoch=0, **{**_FETCH, "request_id": 2**63}), "request_id"),
    ("fetch read token", FetchRequest(src=2, dst=1, epoch=0, read_token=-5, **_FETCH), "read_token"),
    ("answer leader id", FetchResponse(src=2, dst=1, epoch=0, request_id=1, leader_id=-1), "leader_id"),
    ("answer high watermark", FetchResponse(src=2, dst=1, epoch=0, request_id=1, leader_id=2, high_watermark=-1), "high_watermark"),
    (
        "answer snapshot epoch",
        FetchResponse(src=2, dst=1, epoch=0, request_id=1, leader_id=2, snapshot_id=SnapshotId(5, _TOO_LARGE_EPOCH)),
        "snapshot epoch",
    ),
    (
        "snapshot position",
        FetchSnapshotRequest(src=2, dst=1, epoch=0, snapshot_id=_SNAPSHOT, position=-1, request_id=1),
        "position",
    ),
    (
        "snapshot answer size",
        FetchSnapshotResponse(src=2, dst=1, epoch=0, request_id=1, leader_id=2, size=OFFSET_MAX + 1),
        "size",
    ),
    (
        "record epoch past 32 bits",
        FetchResponse(
            src=2, dst=1, epoch=2, request_id=1, leader_id=2, records=(Entry(0, _TOO_LARGE_EPOCH, RecordKind.DATA, b""),)
        ),
        "record epoch",
    ),
    (
        "record offset past int64",
        FetchResponse(src=2, dst=1, epoch=0, request_id=1, leader_id=2, records=(Entry(OFFSET_MAX + 1, 0, RecordKind.DATA, b""),)),
        "records",
    ),
]


@pytest.mark.parametrize(("message", "field"), [case[1:] for case in _OUT_OF_RANGE], ids=[case[0] for case in _OUT_OF_RANGE])
def test_message_with_a_number_no_layer_can_hold_is_dropped_counted_and_reported(message, field):
    """quorum/_types.py: epochs fit storage's 32 bits, offsets and ids the
    wire's int64 and int32. The wire decoder refuses anything else, but the
    core is fed directly by the simulator and by embedders: it drops such a
    message without answering it or moving anything, never raises, counts
    it and reports it to the host."""
    reports: list[str] = []
    node = QuorumNode(make_config(1, (1, 2, 3)), rng=random.Random(0), hooks=CoreHooks(protocol_error=reports.append))
    node.initial_output()

    output = node.step(message)

    assert not output
    assert (node.role, node.epoch) == (Role.UNATTACHED, 0)
    assert node.counters["messages_out_of_range"] == 1
    [report] = reports
    assert field in report


def _follower_with_a_fetch_in_flight() -> tuple[Cluster, FetchRequest]:
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"x")
    cluster.deliver(FetchResponse, dst=2)
    [request] = cluster.pending(FetchRequest, src=2)
    return cluster, request


@pytest.mark.parametrize(
    "records_of",
    [
        pytest.param(lambda end, epoch: (Entry(end, epoch + 1, RecordKind.DATA, b"later"),), id="epoch-past-the-leaders"),
        pytest.param(
            lambda end, epoch: (Entry(end, epoch, RecordKind.DATA, b"a"), Entry(end + 2, epoch, RecordKind.DATA, b"b")),
            id="gap",
        ),
        pytest.param(
            lambda end, epoch: (Entry(end, epoch, RecordKind.DATA, b"a"), Entry(end + 1, epoch - 1, RecordKind.DATA, b"b")),
            id="epoch-going-back",
        ),
        pytest.param(lambda end, epoch: (Entry(end, 0, RecordKind.DATA, b"older"),), id="epoch-below-the-log"),
    ],
)
def test_fetch_answer_with_records_the_log_cannot_take_is_dropped(records_of):
    """KIP-595: a leader's records run on without gaps, in epochs that never
    decrease and never pass its own. An answer to the very Fetch in flight
    whose records break that, or that would take the log back to an
    earlier epoch than its last, is dropped like any malformed message (it
    used to be appended, or to raise from the log): nothing is appended or
    committed, and the follower simply fetches again."""
    cluster, request = _follower_with_a_fetch_in_flight()
    follower = cluster.node(2)
    end_before = follower.log.end_offset
    forged = FetchResponse(
        src=1,
        dst=2,
        epoch=request.epoch,
        request_id=request.request_id,
        leader_id=1,
        high_watermark=end_before + 2,
        records=records_of(end_before, request.epoch),
    )

    output = cluster.inject(forged)

    assert not output.append and not output.committed
    assert follower.log.end_offset == end_before
    assert follower.counters["messages_out_of_range"] == 1


def test_forged_vote_past_32_bits_cannot_make_a_winner_write_a_record_storage_refuses():
    """The crash measured against real processes (issue 15): a Vote forged
    with epoch 2**32 moved a voter into that epoch; when it next stood and
    won, its LEADER_CHANGE record carried an epoch the segment format cannot
    hold, and the append raised ("epoch does not fit in 32 bits"). Replayed
    here: the forged Vote is dropped, and every record every node holds
    after the next election is one storage accepts."""
    cluster = Cluster(3)
    forged = VoteRequest(src=3, dst=2, epoch=2**32, last_epoch=0, end_offset=0, pre_vote=False)

    cluster.inject(forged)
    cluster.stand(2)
    cluster.deliver_all()

    assert cluster.leaders() == [2]
    for node_id in cluster.voter_ids:
        MemoryLogStore().append(cluster.log_entries(node_id))  # raised "does not fit in 32 bits"
        assert cluster.node(node_id).epoch == 1


@pytest.mark.parametrize("pre_vote", [True, False])
def test_voter_in_the_last_epoch_storage_can_hold_never_stands_past_it(pre_vote):
    """quorum/_types.py EPOCH_MAX: there is no next epoch to persist. A voter
    whose election timer fires in the last one stays where it is (no
    pre-vote for EPOCH_MAX + 1, no candidacy), counts it, and tries again
    after another election timeout, writing nothing."""
    cluster = Cluster(3, pre_vote=pre_vote, disks={1: Disk(ElectionState(epoch=EPOCH_MAX))})
    writes_before = cluster.replica(1).disk.writes

    cluster.tick(1, times=5 * ELECTION_TIMEOUT_TICKS)

    node = cluster.node(1)
    assert (node.role, node.epoch) == (Role.UNATTACHED, EPOCH_MAX)
    assert cluster.pending(src=1) == []
    assert cluster.replica(1).disk.writes == writes_before
    assert 2 <= node.counters["stands_refused_epoch_max"] <= 5


@pytest.mark.parametrize("leads", [False, True], ids=["unattached", "leader"])
@pytest.mark.parametrize("later_epoch", [1, EPOCH_MAX], ids=["next-epoch", "last-epoch"])
def test_a_message_naming_the_receiver_as_its_sender_is_dropped_counted_and_reported(leads, later_epoch):
    """No node sends a message to itself, so one that names its receiver as
    its sender is forged, or comes from a second process given the same
    node id. Found by the wire fuzzer's long profile against a running
    node: a BeginQuorumEpoch "from itself" in the last epoch storage holds
    made the node follow itself, and the core stopped the node
    (``cannot follow itself``). Every kind of message is now dropped before
    any rule reads it: nothing is answered, persisted or moved."""
    reports: list[str] = []
    if leads:
        cluster = Cluster(3)
        cluster.elect(1)
        node = cluster.node(1)
    else:
        node = QuorumNode(make_config(1, (1, 2, 3)), rng=random.Random(0), hooks=CoreHooks(protocol_error=reports.append))
        node.initial_output()
    before = (node.role, node.epoch, node.log.end_offset)
    # Every kind of message, each naming node 1, the receiver, as its sender.
    messages = list(messages_of_every_kind(1, 1, node.epoch + 1 if later_epoch == 1 else later_epoch, node.log.end_offset))

    outputs = [node.step(message) for message in messages]

    assert not any(outputs)
    assert (node.role, node.epoch, node.log.end_offset) == before
    assert node.counters["messages_from_own_id"] == len(messages)
    if not leads:  # the harness's cluster gives its cores no hooks
        assert len(reports) == len(messages)
        assert all("names this node, 1, as its sender" in report for report in reports)


@pytest.mark.parametrize("receiver", [1, 3], ids=["the-leader", "a-follower"])
def test_a_second_winner_of_a_known_leaders_epoch_is_dropped(receiver):
    """Raft thesis §3.4: at most one candidate wins an epoch. A
    BeginQuorumEpoch in the receiver's epoch from another node than the
    leader it knows for that epoch (itself, for the leader) is forged (a
    plaintext peer can claim any id) or a peer's bug: it is dropped and
    counted. Before, the leader raised its own invariant ("two leaders in
    epoch 1") and stopped, and a follower switched to the impostor. The
    cluster then commits on as if nothing was sent."""
    cluster = Cluster(3)
    cluster.elect(1)
    node = cluster.node(receiver)
    before = (node.role, node.epoch, node.leader_id)

    output = cluster.inject(BeginQuorumEpochRequest(src=2, dst=receiver, epoch=node.epoch))

    assert not output
    assert (node.role, node.epoch, node.leader_id) == before
    assert node.counters["messages_contradicting_leader"] == 1
    cluster.propose(1, b"after")
    cluster.run_until(lambda: cluster.committed_data(receiver)[-1:] == [b"after"])
    assert cluster.leaders() == [1]
