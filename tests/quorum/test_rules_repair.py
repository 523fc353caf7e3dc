"""A voter repairing a damaged log (issue 14; Protocol-Aware Recovery,
Alagappan et al., FAST '18: "a damaged log is not a short log").

The property: a node with a damaged log neither votes nor stands until it
has repaired its log from a leader (up to everything it may have
acknowledged, or past a record of an epoch it cast no vote in), and the
repair is durable; then it votes again. With one voter down and another
damaged, a three-voter quorum waits rather than losing writes.
"""

from __future__ import annotations

import pytest
from harness import Cluster, assert_committed_agree, messages_of

from quorum import FetchRequest, RecordKind, RepairState, Role, VoteRequest


def vote_request(candidate: int, voter: int, epoch: int, *, pre_vote: bool = False) -> VoteRequest:
    """A Vote whose log beats any log in these tests."""
    return VoteRequest(src=candidate, dst=voter, epoch=epoch, last_epoch=epoch, end_offset=1000, pre_vote=pre_vote)


def cluster_with_tail_only_on_1_and_2() -> Cluster:
    """Node 1 leads epoch 1; node 3 went down after the first write, and
    writes 2..6 were committed by nodes 1 and 2 alone."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"w1")
    cluster.deliver_all()
    cluster.crash(3)
    for number in range(2, 7):
        cluster.propose(1, f"w{number}".encode())
        cluster.run(1, nodes=(1, 2))
    cluster.run(3, nodes=(1, 2))
    assert cluster.node(1).high_watermark == cluster.node(1).log.end_offset
    assert cluster.node(2).log.end_offset == cluster.node(1).log.end_offset
    return cluster


def restart_damaged(cluster: Cluster, node_id: int, damaged_from_offset: int) -> RepairState:
    cluster.crash(node_id)
    repair = cluster.damage(node_id, damaged_from_offset)
    cluster.restart(node_id, repairing=repair)
    return repair


@pytest.mark.parametrize("pre_vote", [False, True])
def test_a_repairing_voter_grants_no_vote(pre_vote):
    """Not a vote nor a pre-vote, however good the candidate's log."""
    cluster = cluster_with_tail_only_on_1_and_2()
    cluster.crash(1)
    restart_damaged(cluster, 2, damaged_from_offset=2)

    [answer] = messages_of(cluster.inject(vote_request(3, 2, epoch=5, pre_vote=pre_vote)))

    assert not answer.granted
    assert cluster.node(2).voted_for != 3
    assert cluster.node(2).counters["votes_refused_repairing"] == 1


def test_a_repairing_voter_never_stands_and_looks_for_a_leader():
    """Its election timer never makes it a candidate: like an observer, it
    asks the voters in turn for the leader, the others only (it once asked
    itself too, a turn the runtime, with no connection to itself, lost for
    a whole request timeout)."""
    cluster = cluster_with_tail_only_on_1_and_2()
    cluster.crash(1)
    restart_damaged(cluster, 2, damaged_from_offset=2)
    cluster.drop()

    cluster.tick(2, times=2000)

    assert {event.role for event in cluster.events(2)} <= {Role.UNATTACHED, Role.FOLLOWER}
    assert not cluster.sent(2, VoteRequest)
    assert {request.dst for request in cluster.sent(2, FetchRequest)} == {1, 3}


def test_with_one_voter_down_and_one_damaged_the_quorum_waits_then_repairs():
    """The issue's case: node 1 (which holds the acknowledged tail) is down,
    node 3 returns with a short log, node 2 restarts with its log damaged in
    the middle. No leader is elected (node 3 cannot win without node 2's
    vote); when node 1 returns, it is elected, commits again, and node 2
    repairs itself. No committed write is lost."""
    cluster = cluster_with_tail_only_on_1_and_2()
    committed = cluster.committed_data(1)
    cluster.crash(1)
    cluster.restart(3)
    restart_damaged(cluster, 2, damaged_from_offset=2)

    cluster.run(3000)

    assert cluster.leaders() == []
    assert cluster.node(2).repairing is not None

    cluster.restart(1)
    cluster.run_until(lambda: cluster.leaders() == [1] and cluster.node(2).repairing is None)
    cluster.propose(1, b"after")
    cluster.run_until(lambda: cluster.committed_data(2)[-1:] == [b"after"])

    held = [entry.data for entry in cluster.log_entries(2) if entry.kind is RecordKind.DATA]
    assert held == [*committed, b"after"]
    assert any("log repaired" in event.reason for event in cluster.events(2))
    assert_committed_agree(cluster)


def test_without_the_rule_the_damaged_voter_elects_a_leader_lacking_the_tail():
    """The same story with node 2 restarted as an ordinary voter on its
    short log (what happened in issue 14): node 3 wins, and the committed
    tail is gone from the leader. This is what the rule prevents."""
    cluster = cluster_with_tail_only_on_1_and_2()
    committed_end = cluster.node(1).high_watermark
    cluster.crash(1)
    cluster.restart(3)
    cluster.crash(2)
    cluster.damage(2, damaged_from_offset=2)
    cluster.restart(2)

    cluster.run_until(lambda: bool(cluster.leaders()))

    [leader] = cluster.leaders()
    assert cluster.node(leader).log.end_offset < committed_end


def test_repair_is_not_finished_before_the_records_are_durable():
    """Following the leader of its own epoch, the node is repaired only once
    its durable log reaches the end of what it had before the damage (it may
    have acknowledged all of it)."""
    cluster = cluster_with_tail_only_on_1_and_2()
    repair = restart_damaged(cluster, 2, damaged_from_offset=2)
    assert repair.acknowledged_end == cluster.node(1).log.end_offset
    cluster.hold_disk(2)

    cluster.run(50, nodes=(1, 2))

    assert cluster.node(2).log.end_offset >= repair.acknowledged_end
    assert cluster.node(2).repairing is not None
    cluster.release_disk(2)
    cluster.run(5, nodes=(1, 2))
    assert cluster.node(2).repairing is None


def test_repair_is_not_finished_short_of_what_the_node_may_have_acknowledged():
    """Following the leader of its own epoch, the node holds the leader's
    whole log but not yet up to the end of what it had before the damage:
    still repairing, still no vote; repaired once the leader's committed
    log reaches that end."""
    cluster = cluster_with_tail_only_on_1_and_2()
    end = cluster.node(1).log.end_offset
    cluster.crash(2)
    cluster.damage(2, damaged_from_offset=2)
    repair = RepairState(damaged_from_offset=2, restart_epoch=1, acknowledged_end=end + 3)
    cluster.restart(2, repairing=repair)

    cluster.run(100, nodes=(1, 2))

    assert cluster.node(2).log.end_offset == end and cluster.node(2).high_watermark == end
    assert cluster.node(2).repairing is not None
    cluster.propose(1, b"x1", b"x2")
    cluster.run(100, nodes=(1, 2))
    assert cluster.node(2).high_watermark == end + 2
    assert cluster.node(2).repairing is not None
    cluster.propose(1, b"x3")
    cluster.run(100, nodes=(1, 2))
    assert cluster.node(2).high_watermark >= end + 3
    assert cluster.node(2).repairing is None


def test_an_unknown_acknowledged_end_is_repaired_past_a_later_epochs_record():
    """When the damage hides how far the log went, only a leader of an epoch
    the node cast no vote in (one elected without its help) repairs it, once
    the node holds that leader's log past the leader's first record."""
    cluster = cluster_with_tail_only_on_1_and_2()
    cluster.crash(2)
    cluster.damage(2, damaged_from_offset=2)
    unknown = RepairState(damaged_from_offset=2, restart_epoch=1, acknowledged_end=None)
    cluster.restart(2, repairing=unknown)

    cluster.run(100, nodes=(1, 2))
    assert cluster.node(1).is_leader and cluster.node(1).epoch == 1
    assert cluster.node(2).repairing is not None, "the leader of the restart epoch is not enough"

    cluster.restart(3)
    cluster.crash(1)
    cluster.restart(1)
    cluster.run_until(lambda: bool(cluster.leaders()) and cluster.node(2).repairing is None)
    assert cluster.node(cluster.leaders()[0]).epoch > 1
    assert_committed_agree(cluster)


def test_a_repair_interrupted_by_a_crash_starts_again():
    """A node that crashes while repairing restarts repairing (storage keeps
    the marker until the repair is durable): still no vote."""
    cluster = cluster_with_tail_only_on_1_and_2()
    cluster.crash(1)
    repair = restart_damaged(cluster, 2, damaged_from_offset=2)
    cluster.run(10, nodes=(2,))
    cluster.crash(2)
    cluster.restart(2, repairing=repair)

    [answer] = messages_of(cluster.inject(vote_request(3, 2, epoch=9)))

    assert not answer.granted


def test_an_observer_repairs_too_and_finishes_from_the_leader():
    """Before: "an observer has nothing to repair" dropped the repair while
    storage kept its marker, so a disk added as a voter later came back
    from its next restart repairing again, unable to vote (the sweep's seed
    12712). An observer's damaged log may lack the record that made it a
    voter; it repairs like a voter, and finishes once it holds what it may
    have acknowledged."""
    cluster = Cluster(3, observers=(4,))
    cluster.elect(1)
    for number in range(1, 4):
        cluster.propose(1, f"w{number}".encode())
    cluster.run(20)
    assert cluster.node(4).log.end_offset == cluster.node(1).log.end_offset
    repair = restart_damaged(cluster, 4, damaged_from_offset=1)
    assert cluster.node(4).repairing == repair and not cluster.node(4).is_voter

    cluster.run(20)

    assert cluster.node(4).repairing is None
    assert cluster.node(4).log.end_offset == cluster.node(1).log.end_offset
    # An observer never voted: it goes on observing (it said "voting again").
    [repaired] = [event for event in cluster.events(4) if event.reason.startswith("log repaired")]
    assert repaired.reason.endswith("): observing")


def test_repair_state_is_validated():
    with pytest.raises(ValueError):
        RepairState(damaged_from_offset=-1, restart_epoch=0, acknowledged_end=None)
    with pytest.raises(ValueError):
        RepairState(damaged_from_offset=5, restart_epoch=0, acknowledged_end=4)


def test_a_repair_found_again_keeps_the_earliest_damage_and_the_largest_bounds():
    recorded = RepairState(damaged_from_offset=10, restart_epoch=3, acknowledged_end=40)
    assert recorded.merged_with(RepairState(20, 5, 60)) == RepairState(10, 5, 60)
    assert recorded.merged_with(RepairState(5, 3, None)) == RepairState(5, 3, None)
    # The same damage, its end hidden by files a crashed repair moved aside.
    assert recorded.merged_with(RepairState(10, 3, None)) == recorded


def test_the_leader_shows_which_voters_repair_from_their_fetches():
    """A repairing voter says so in its Fetch (``FetchRequest.repairing``);
    the leader's describe lists it among ``repairing_voters`` until a Fetch
    says it is done. Only the leader knows: a follower lists nobody."""
    cluster = cluster_with_tail_only_on_1_and_2()
    end = cluster.node(1).log.end_offset
    assert cluster.node(1).describe().repairing_voters == ()
    cluster.crash(2)
    cluster.damage(2, damaged_from_offset=2)
    cluster.restart(2, repairing=RepairState(damaged_from_offset=2, restart_epoch=1, acknowledged_end=end + 1))

    cluster.run(100, nodes=(1, 2))

    fetches = cluster.sent(2, FetchRequest)
    assert fetches and fetches[-1].repairing
    assert cluster.node(1).describe().repairing_voters == (2,)
    assert cluster.node(2).describe().repairing_voters == ()
    cluster.propose(1, b"x1")
    cluster.run(300, nodes=(1, 2))
    assert cluster.node(2).repairing is None
    assert not cluster.sent(2, FetchRequest)[-1].repairing
    assert cluster.node(1).describe().repairing_voters == ()
