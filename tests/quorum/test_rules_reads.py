"""Linearizable reads: ReadIndex, Raft thesis §6.4 (the core's read
tokens stand in for heartbeats)."""

from __future__ import annotations

import dataclasses

import pytest
from harness import CHECK_QUORUM_TICKS, Cluster, Disk, records

from quorum import (
    ElectionState,
    FetchRequest,
    FetchResponse,
    NotLeaderError,
    ReadFailed,
    ReadReady,
)


def reads(cluster: Cluster, node_id: int = 1) -> list[ReadReady | ReadFailed]:
    return cluster.replica(node_id).reads


def test_fetch_sent_before_the_read_arrived_does_not_confirm_it():
    """Raft thesis §6.4: the leader serves a read only after a majority
    proved, after the read arrived, that it still leads. Fetches already in
    flight when the read arrived prove nothing; the next ones do."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"x")
    cluster.deliver(FetchResponse)  # both followers now have a Fetch in flight

    cluster.read_index(1, "r")
    cluster.deliver(FetchRequest)  # the Fetches sent before the read arrive
    assert reads(cluster) == []

    cluster.deliver(FetchResponse)
    cluster.deliver(FetchRequest, src=2)  # sent after the read: echoes a newer token
    assert reads(cluster) == [ReadReady("r", 2)]


def test_a_read_token_this_leadership_never_handed_out_confirms_nothing():
    """A token proves a Fetch left after the leader handed it out; one this
    leadership never handed out (another leader's, carried by a node that
    was an observer when it got it, or forged) proves nothing. Sweep seed
    418285: an observer echoed an earlier leader's higher token, was then
    added as a voter, and the leader served a linearizable read from the
    minority side of a partition with it."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"x")
    cluster.deliver_all()
    cluster.read_index(1, "r")
    cluster.deliver(FetchResponse)  # the parked Fetches answered: fresh ones come
    fetch = next(m for m in cluster.pending(FetchRequest, src=2))
    cluster.drop(FetchRequest)
    cluster.inject(dataclasses.replace(fetch, read_token=10**6))
    assert reads(cluster) == []
    cluster.deliver(FetchResponse)
    cluster.deliver(FetchRequest, src=2)  # its own next Fetch, a token it was given
    assert reads(cluster) == [ReadReady("r", 2)]


def test_read_releases_parked_fetches_so_that_fresh_ones_can_confirm_it():
    """Raft thesis §6.4 with KIP-595 long polls: Fetches parked at the leader
    were sent before the read; the read answers them at once so that the
    followers' next Fetches, which do count, come back without waiting."""
    cluster = Cluster(3)
    cluster.elect(1)

    output = cluster.read_index(1, "r")

    assert sorted(m.dst for m in output.early_messages if isinstance(m, FetchResponse)) == [2, 3]
    assert output.reads == []
    cluster.deliver(FetchResponse)
    cluster.deliver(FetchRequest, src=3)
    assert reads(cluster) == [ReadReady("r", 1)]


def test_read_waits_until_the_leader_has_committed_a_record_of_its_epoch():
    """Raft thesis §6.4 step 1: a new leader does not know the commit index
    until a record of its own epoch is committed; a read waits for that even
    when a majority has already confirmed the leadership."""
    logs = {1: records(1, 2), 2: records(1), 3: records(1)}
    cluster = Cluster(3, disks={n: Disk(ElectionState(epoch=2), log) for n, log in logs.items()}, fetch_bytes_max=1)
    cluster.win_election(1)  # epoch 3; LEADER_CHANGE at offset 2
    cluster.read_index(1, "r")

    cluster.deliver(FetchRequest)
    cluster.deliver(FetchResponse)  # e2@1, one record per response
    cluster.deliver(FetchRequest)  # a majority confirms, at offset 2
    assert not cluster.node(1).leader_has_committed_own_epoch
    assert reads(cluster) == []

    cluster.deliver(FetchResponse)  # the LEADER_CHANGE record
    cluster.deliver(FetchRequest)
    assert reads(cluster) == [ReadReady("r", 3)]


def test_leader_that_loses_leadership_fails_its_pending_reads():
    """Raft thesis §6.4: a read the leader has not confirmed when it stops
    leading fails, and never succeeds later."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.isolate(1)
    cluster.read_index(1, "r")

    cluster.tick(1, times=CHECK_QUORUM_TICKS)
    cluster.heal()
    cluster.run(3 * CHECK_QUORUM_TICKS)

    assert [type(read) for read in reads(cluster)] == [ReadFailed]
    assert reads(cluster)[0].read_id == "r"


def test_single_voter_serves_reads_at_once():
    """Raft thesis §6.4: a single voter is its own majority: once it has
    committed a record of its epoch, a read is ready in the same output."""
    cluster = Cluster(1)
    cluster.elect(1)
    cluster.propose(1, b"x")

    output = cluster.read_index(1, "r")

    assert output.reads == [ReadReady("r", 2)]


@pytest.mark.parametrize("action", ["read_index", "propose"])
def test_follower_refuses_leader_actions_and_names_the_leader(action):
    """KIP-595 / Raft thesis §6.2: only the leader takes writes and
    linearizable reads; a follower refuses with a hint to the leader."""
    cluster = Cluster(3)
    cluster.elect(1)
    follower = cluster.node(2)

    with pytest.raises(NotLeaderError) as refused:
        follower.read_index("r") if action == "read_index" else follower.propose([b"x"])

    assert (refused.value.leader_id, refused.value.epoch) == (1, 1)
