"""Check quorum (KAFKA-15489) and graceful hand-over (KIP-595
EndQuorumEpoch)."""

from __future__ import annotations

from harness import CHECK_QUORUM_TICKS, Cluster, leader_followed_by_an_observer_only

from quorum import EndQuorumEpochRequest, Role


def test_isolated_leader_resigns_exactly_when_check_quorum_expires():
    """KAFKA-15489: a leader that no majority of voters has fetched from for
    check_quorum_factor x fetch_timeout resigns: not a tick earlier, and on
    the tick it expires."""
    cluster = Cluster(3)
    cluster.elect(1)  # the followers' last Fetches arrived at this tick
    cluster.isolate(1)

    cluster.tick(1, times=CHECK_QUORUM_TICKS - 1)
    assert cluster.role(1) is Role.LEADER
    cluster.tick(1)

    assert (cluster.role(1), cluster.node(1).epoch) == (Role.RESIGNED, 1)
    assert "check quorum" in cluster.events(1)[-1].reason


def test_leader_fetched_from_by_a_majority_keeps_leading():
    """KAFKA-15489: check quorum needs a majority, not every voter: a leader
    still fetched from by one of two followers keeps leading."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.isolate(3)

    cluster.run(5 * CHECK_QUORUM_TICKS)

    assert cluster.events(1, Role.RESIGNED) == []
    assert (cluster.leaders(), cluster.node(1).epoch) == ([1], 1)


def test_single_voter_leader_never_resigns():
    """KAFKA-16144: a single voter is its own majority; check quorum never
    makes it resign."""
    cluster = Cluster(1)
    cluster.elect(1)

    cluster.tick(1, times=10 * CHECK_QUORUM_TICKS)

    assert cluster.role(1) is Role.LEADER


def test_without_check_quorum_an_isolated_leader_stays_leader():
    """KAFKA-15489 (the zombie leader): with check quorum off nothing tells
    an isolated leader it lost its majority."""
    cluster = Cluster(3, check_quorum=False)
    cluster.elect(1)
    cluster.isolate(1)

    cluster.tick(1, times=10 * CHECK_QUORUM_TICKS)

    assert cluster.role(1) is Role.LEADER


def test_observer_fetches_do_not_keep_a_leader_in_office():
    """KAFKA-15489 / KIP-595: check quorum counts voters only; a leader
    fetched from by an observer alone still resigns on time."""
    cluster = leader_followed_by_an_observer_only()
    mark = cluster.mark()

    cluster.run(CHECK_QUORUM_TICKS - 1, nodes=(1, 4))
    assert cluster.role(1) is Role.LEADER
    cluster.run(1, nodes=(1, 4))

    assert cluster.role(1) is Role.RESIGNED
    observer_fetches = [line for line in cluster.transcript_since(mark) if line.startswith("4->1 Fetch ")]
    assert len(observer_fetches) >= 3  # one per long poll


def staggered_followers() -> Cluster:
    """Five voters led by node 1, whose followers acknowledged different
    amounts: node 4 everything (offset 4), node 2 up to 3, node 5 up to 2,
    node 3 only the LEADER_CHANGE record (1)."""
    cluster = Cluster(5)
    cluster.elect(1)
    for lagging, payload in ((3, b"a"), (5, b"b"), (2, b"c")):
        cluster.block(1, lagging)
        cluster.propose(1, payload)
        cluster.deliver_all()
    cluster.heal()
    return cluster


def test_resigning_leader_names_successors_most_up_to_date_first():
    """KIP-595 EndQuorumEpoch: a resigning leader sends every voter the same
    preferred successors, ordered by the offsets they acknowledged, most up
    to date first."""
    cluster = staggered_followers()

    cluster.resign(1)

    requests = cluster.pending(EndQuorumEpochRequest)
    assert sorted(request.dst for request in requests) == [2, 3, 4, 5]
    assert {request.preferred_successors for request in requests} == {(4, 2, 5, 3)}


def test_first_preferred_successor_stands_at_once_and_keeps_the_most_records():
    """KIP-595 EndQuorumEpoch: the first preferred successor stands on its
    next tick (the others wait longer), wins, and commits the records only
    it had."""
    cluster = staggered_followers()
    cluster.resign(1)
    cluster.deliver(EndQuorumEpochRequest)

    cluster.tick(2, 4)

    assert cluster.role(4) is Role.PROSPECTIVE
    assert cluster.role(2) is Role.UNATTACHED
    cluster.deliver_all()
    assert cluster.leaders() == [4]
    assert cluster.committed_data(4) == [b"a", b"b", b"c"]
