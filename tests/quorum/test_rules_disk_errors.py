"""Disk errors are conditions, not crashes (issue 14, part 3; docs/storage.md,
"Disk errors"): after ``persist_failed`` a node acknowledges nothing past its
durable point, a leader resigns, no vote is granted, and the next
``persisted`` resumes it. Persist before you acknowledge (Raft thesis §3.8):
a Fetch offset is an acknowledgement, so none may pass the durable log."""

from __future__ import annotations

import pytest
from harness import (
    ELECTION_TIMEOUT_TICKS,
    FETCH_TIMEOUT_TICKS,
    Cluster,
    assert_committed_agree,
)

from quorum import EndQuorumEpochRequest, FetchRequest, Role, VoteRequest, VoteResponse


def test_a_leader_whose_disk_fails_resigns_at_once_and_hands_over():
    """The failed leader resigns with EndQuorumEpoch at once, although its
    disk holds every later message back; a healthy voter takes over and
    commits, and nothing committed before is lost."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"a", b"b")
    cluster.deliver_all()
    committed_before = cluster.committed_data(1)
    assert b"b" in committed_before

    events_before = len(cluster.events(1))
    cluster.fail_disk(1, "EIO")
    cluster.propose(1, b"lost?")  # a write that cannot be made durable here
    node = cluster.node(1)
    assert node.role is Role.RESIGNED
    assert node.describe().disk_failure == "EIO"
    assert node.counters["disk_failures"] == 1
    assert {m.dst for m in cluster.pending(EndQuorumEpochRequest, src=1)} == {2, 3}

    cluster.run_until(lambda: any(cluster.node(n).is_leader for n in (2, 3)))
    [new_leader] = [n for n in (2, 3) if cluster.node(n).is_leader]
    cluster.propose(new_leader, b"c")
    cluster.run(FETCH_TIMEOUT_TICKS)
    assert b"c" in cluster.committed_data(new_leader)
    for data in committed_before:
        assert data in cluster.committed_data(new_leader)
    # The failed node never stood: its vote for itself could not be recorded.
    later_roles = {e.role for e in cluster.events(1)[events_before:] if not e.reason.startswith("disk")}
    assert not later_roles & {Role.PROSPECTIVE, Role.CANDIDATE, Role.LEADER}
    assert cluster.node(1).counters["stands_refused_disk_failed"] >= 1
    assert_committed_agree(cluster)


def test_a_follower_whose_disk_fails_acknowledges_nothing_past_its_durable_log():
    """No Fetch leaves with an offset past what the follower's disk holds,
    and it stops fetching; the healthy majority keeps committing."""
    on_the_wire: list = []

    def watch(kind, node_id, item):
        if kind == "send" and node_id == 2:
            on_the_wire.extend(item)

    cluster = Cluster(3, observer=watch)
    cluster.elect(1)
    cluster.fail_disk(2, "ENOSPC")
    for payload in (b"x", b"y", b"z"):
        cluster.propose(1, payload)
        cluster.run(10)
    cluster.run(2 * FETCH_TIMEOUT_TICKS)
    assert cluster.node(1).is_leader
    assert b"z" in cluster.committed_data(1)
    durable_end = cluster.replicas[2].disk.log.end_offset
    assert cluster.node(2).log.end_offset >= durable_end
    fetches = [m for m in on_the_wire if isinstance(m, FetchRequest)]
    assert fetches and all(fetch.fetch_offset <= durable_end for fetch in fetches)
    # The one Fetch the records' output carried waits with it on the disk.
    assert max(m.fetch_offset for m in cluster.sent(2, FetchRequest)) > durable_end
    leader_view = {r.node_id: r.log_end_offset for r in cluster.node(1).describe().voters}
    assert leader_view[2] is not None and leader_view[2] <= durable_end
    assert cluster.node(2).describe().disk_failure == "ENOSPC"
    # Not fetching: nothing of node 2 is in flight or waiting on its disk.
    assert not cluster.pending(FetchRequest, src=2)


def test_no_vote_is_granted_while_the_vote_cannot_be_persisted():
    """§3.8: a vote is durable before it is granted. A voter that knows
    its disk fails (a write failed) refuses votes and pre-votes, and
    records no vote. (Before any write fails it cannot know: a vote it then
    grants waits on the disk like any answer, and leaves only once durable.)"""
    cluster = Cluster(3, pre_vote=False)
    cluster.elect(1)
    cluster.fail_disk(2, "EIO")
    # The core learns of the failure from the first write that fails.
    cluster.propose(1, b"w")
    cluster.run_until(lambda: cluster.node(2).disk_failure == "EIO")
    cluster.isolate(1)
    # Node 2 outlives its leader lease (§4.2.3), so that it hears votes.
    cluster.tick(2, 3, times=ELECTION_TIMEOUT_TICKS)
    cluster.tick_until(3, lambda node: node.role is Role.CANDIDATE, limit=10 * ELECTION_TIMEOUT_TICKS)
    cluster.deliver(VoteRequest, dst=2)
    assert cluster.node(2).epoch == cluster.node(3).epoch
    assert cluster.node(2).voted_for is None
    # Node 3 cannot win: node 1 is cut off and node 2 refuses.
    cluster.run(ELECTION_TIMEOUT_TICKS, nodes=(2, 3))
    assert not cluster.node(3).is_leader
    assert cluster.node(2).voted_for is None
    # Once the disk is back the held answers leave: every one a refusal.
    cluster.repair_disk(2)
    answers = [m for m in cluster.pending(VoteResponse, src=2) if not m.pre_vote]
    assert answers and not any(answer.granted for answer in answers)


def test_the_node_resumes_by_itself_and_catches_up_without_losing_anything():
    """After the disk takes writes again the follower resumes fetching from
    its durable point, catches up with the leader, and every committed
    record is on a majority of disks."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.fail_disk(3, "ENOSPC")
    for payload in (b"p", b"q"):
        cluster.propose(1, payload)
        cluster.run(20)
    cluster.run(FETCH_TIMEOUT_TICKS)
    cluster.repair_disk(3)
    assert cluster.node(3).disk_failure is None
    cluster.propose(1, b"r")
    cluster.run(FETCH_TIMEOUT_TICKS)
    leader = cluster.node(1)
    assert leader.is_leader
    assert cluster.replicas[3].disk.log.end_offset == leader.log.end_offset
    assert cluster.committed_data(3)[-3:] == [b"p", b"q", b"r"]
    for node_id in (1, 2, 3):
        assert cluster.replicas[node_id].disk.log.slice(0) == leader.log.slice(0)
    assert [e.reason for e in cluster.events(3) if "disk" in e.reason] == ["disk failed (ENOSPC)", "disk resumed"]
    assert_committed_agree(cluster)


def test_a_failed_leader_resumes_as_a_follower_of_its_successor():
    """The resigned leader's disk comes back: it follows the new leader and
    its log converges; what it proposed but never made durable is either
    committed by the new leader or replaced, never acknowledged as lost."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.fail_disk(1, "ENOSPC")
    cluster.propose(1, b"maybe")
    cluster.run_until(lambda: any(cluster.node(n).is_leader for n in (2, 3)))
    [new_leader] = [n for n in (2, 3) if cluster.node(n).is_leader]
    cluster.propose(new_leader, b"after")
    cluster.run(FETCH_TIMEOUT_TICKS)
    cluster.repair_disk(1)
    cluster.run(2 * FETCH_TIMEOUT_TICKS)
    assert cluster.node(1).role is Role.FOLLOWER
    assert cluster.node(1).leader_id == new_leader
    assert cluster.replicas[1].disk.log.slice(0) == cluster.node(new_leader).log.slice(0)
    assert_committed_agree(cluster)


def test_persist_failed_for_an_output_never_handed_out_is_a_driver_bug():
    cluster = Cluster(3)
    node = cluster.node(1)
    with pytest.raises(ValueError):
        node.persist_failed(10_000, "EIO")


def test_no_pre_vote_is_granted_while_the_disk_fails():
    """KIP-996: a pre-vote promises a vote; a node that could not record
    one refuses, although it would grant it with a healthy disk."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.fail_disk(2, "ENOSPC")
    cluster.propose(1, b"w")
    cluster.run_until(lambda: cluster.node(2).disk_failure == "ENOSPC")
    cluster.isolate(1)
    # Node 2 learns that its leader's process is gone (so a healthy node 2
    # would grant pre-votes again), and both outlive the leader lease.
    cluster.handle(2, cluster.node(2).peer_unreachable(1))
    cluster.tick(2, 3, times=ELECTION_TIMEOUT_TICKS)
    cluster.tick_until(3, lambda node: node.role is Role.PROSPECTIVE, limit=10 * ELECTION_TIMEOUT_TICKS)
    [request] = cluster.deliver(VoteRequest, dst=2)
    assert request.pre_vote
    cluster.repair_disk(2)
    [answer] = [m for m in cluster.pending(VoteResponse, src=2) if m.pre_vote]
    assert not answer.granted
