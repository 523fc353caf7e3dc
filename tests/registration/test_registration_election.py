"""One test per partition-leadership rule: who leads after a broker is
fenced, unfenced or stopping; the last ISR member; unclean election; leader
and partition epochs; one batch per event (KIP-631 reference §4.6, seed 004).
"""

from __future__ import annotations

from _registration_helpers import Harness

from registration import (
    LEADER_UNCHANGED,
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    BrokerState,
    PartitionChangeRecord,
    PartitionState,
    elect_leader,
)


def _cluster(brokers=(1, 2, 3)) -> Harness:
    harness = Harness()
    for broker_id in brokers:
        harness.start_broker(broker_id)
    return harness


def _expire(harness: Harness, broker_id: int, *, alive: tuple[int, ...]) -> None:
    """Let ``broker_id``'s session expire while ``alive`` keep heartbeating."""
    for _ in range(5):
        harness.advance(2_000)
        harness.keep_alive(*alive)
    assert harness.image.broker_state(broker_id) is BrokerState.FENCED


def test_a_fenced_leader_is_replaced_by_the_first_isr_replica_in_assignment_order():
    """Seed 004 A / KIP-631 §4.6: when the leader is fenced, the new leader is
    the first replica, in assignment order, that is in the ISR and online."""
    harness = _cluster((1, 2, 3, 4))
    harness.create_topic("t", 4, 3)
    led_by_1 = [p for p in harness.image.partitions_of("t") if p.leader == 1]
    assert led_by_1

    _expire(harness, 1, alive=(2, 3, 4))

    for before in led_by_1:
        after = harness.partition("t", before.partition_id)
        expected = next(b for b in before.replicas if b != 1)
        assert after.leader == expected
        assert 1 not in after.isr


def test_a_replica_that_is_not_online_is_skipped():
    """KIP-631 §4.6: an ISR member that is fenced cannot be elected, even if
    it comes first in assignment order."""
    harness = _cluster()
    harness.create_topic("t", 1, 3)
    replicas = harness.partition("t").replicas
    first, second, third = replicas
    harness.heartbeat(second, want_fence=True)  # second leaves the ISR

    harness.heartbeat(first, want_fence=True)

    assert harness.partition("t").leader == third


def test_a_fenced_follower_leaves_the_isr_without_a_leader_change():
    """KIP-631 §4.6: a fenced follower leaves the ISR; the leader stays, so
    the leader epoch stays and only the partition epoch moves."""
    harness = _cluster()
    harness.create_topic("t", 1, 3)
    before = harness.partition("t")
    follower = before.replicas[1]

    harness.heartbeat(follower, want_fence=True)

    after = harness.partition("t")
    assert (after.leader, after.leader_epoch) == (before.leader, before.leader_epoch)
    assert after.isr == tuple(b for b in before.isr if b != follower)
    assert after.partition_epoch == before.partition_epoch + 1


def test_the_last_isr_member_stays_in_the_isr_and_the_partition_goes_offline():
    """KIP-631 §4.6 (no ELR): an ISR is never written empty; when its last
    member is fenced it stays in the ISR and the leader becomes none."""
    harness = _cluster((1,))
    harness.create_topic("t", 1, 1)

    harness.heartbeat(1, want_fence=True)

    partition = harness.partition("t")
    assert (partition.isr, partition.leader) == ((1,), NO_LEADER)
    assert harness.image.partitions_without_leader() == [partition.key]


def test_unfencing_the_last_isr_member_re_elects_it():
    """KIP-631: unfencing a broker re-elects the offline partitions it can
    lead, in the same batch as its unfence record."""
    harness = _cluster((1,))
    harness.create_topic("t", 2, 1)
    harness.heartbeat(1, want_fence=True)
    offline = harness.partition("t")

    harness.heartbeat(1)

    partition = harness.partition("t")
    assert partition.leader == 1
    assert partition.leader_epoch == offline.leader_epoch + 1
    records = harness.batch_records()
    assert isinstance(records[0], BrokerRegistrationChangeRecord) and records[0].fenced == -1
    assert len(records) == 3  # the unfence, then both partitions


def test_unclean_election_only_where_the_topic_allows_it():
    """KIP-631 §4.6 / unclean.leader.election.enable: with the whole ISR
    fenced, a topic that allows unclean election elects an online out-of-sync
    replica with the ISR reset to it; other topics stay offline."""
    harness = _cluster((1, 2))
    harness.create_topic("clean", 1, 2)
    harness.create_topic("unclean", 1, 2, unclean=True)
    # Broker 2 leaves every ISR, then broker 1 (now the last member) is fenced.
    harness.heartbeat(2, want_fence=True)
    harness.heartbeat(1, want_fence=True)
    assert harness.partition("clean").leader == NO_LEADER
    assert harness.partition("unclean").leader == NO_LEADER

    harness.heartbeat(2)  # broker 2 is unfenced: it holds no ISR seat anywhere

    assert harness.partition("clean").leader == NO_LEADER
    unclean = harness.partition("unclean")
    assert (unclean.leader, unclean.isr) == (2, (2,))


def test_every_leadership_change_bumps_the_leader_epoch():
    """KIP-631 PartitionChangeRecord: applying a change that names a leader
    bumps the leader epoch; every change bumps the partition epoch."""
    harness = _cluster()
    harness.create_topic("t", 1, 3)
    epochs = [(harness.partition("t").leader_epoch, harness.partition("t").partition_epoch)]

    for _ in range(2):
        leader = harness.partition("t").leader
        harness.heartbeat(leader, want_fence=True)
        epochs.append((harness.partition("t").leader_epoch, harness.partition("t").partition_epoch))

    assert epochs == [(0, 0), (1, 1), (2, 2)]


def test_all_changes_caused_by_one_event_go_out_as_one_batch():
    """Seed 004 discussion 1 (one ZooKeeper write per partition made failover
    take 40 s): fencing a broker writes all its partition changes and its
    fence record as one atomic batch."""
    harness = _cluster()
    harness.create_topic("t", 30, 3)
    batches_before = len(harness.batches)

    harness.heartbeat(1, want_fence=True)

    assert len(harness.batches) == batches_before + 1
    records = harness.batch_records()
    assert len(records) == 31
    assert all(isinstance(r, PartitionChangeRecord) for r in records[:-1])


def test_fencing_touches_only_the_partitions_with_the_broker_in_their_isr():
    """The image indexes partitions by leader and by ISR member, so fencing a
    broker writes (and looks at) its partitions only."""
    harness = _cluster((1, 2, 3, 4, 5))
    harness.create_topic("t", 50, 2)
    in_isr = harness.image.partitions_with_replica_in_isr(3)

    harness.heartbeat(3, want_fence=True)

    changed = {(r.topic_id, r.partition_id) for r in harness.batch_records()[:-1]}
    assert changed == in_isr


def test_a_stopping_broker_is_never_elected():
    """KIP-631 §4.6: only active brokers (unfenced, not in controlled
    shutdown) are acceptable leaders."""
    harness = _cluster()
    harness.create_topic("t", 6, 3)
    harness.heartbeat(2, want_shutdown=True)

    harness.heartbeat(1, want_fence=True)

    assert {p.leader for p in harness.image.partitions_of("t")} == {3}
    harness.check_invariants()


def test_elect_leader_keeps_a_valid_leader_and_writes_nothing():
    """Kafka's PartitionChangeBuilder: no change, no record."""
    partition = PartitionState("t", 0, (1, 2, 3), (1, 2, 3), 2, 4, 9)

    assert elect_leader(partition, is_acceptable=lambda b: True) is None
    change = elect_leader(partition, is_acceptable=lambda b: True, removing=3)
    assert change == PartitionChangeRecord(topic_id="t", partition_id=0, isr=(1, 2), leader=LEADER_UNCHANGED)
