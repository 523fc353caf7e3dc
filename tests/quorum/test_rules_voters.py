"""Dynamic voters (KIP-853; Raft thesis §4 single-server changes): one rule
per test, driven through the scripted ``Cluster``."""

from __future__ import annotations

import dataclasses

import pytest
from harness import CHECK_QUORUM_TICKS, FETCH_TIMEOUT_TICKS, Cluster, Disk, Replica, make_config, messages_of, record

from quorum import (
    AutoJoin,
    AutoJoinAction,
    BeginQuorumEpochRequest,
    ErrorCode,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    NotLeaderError,
    RecordKind,
    ReconfigurationError,
    Role,
    Voter,
    VoterSet,
    VoteRequest,
)
from quorum._voters import REMOVED_VOTERS_MAX, join_snapshot, split_snapshot


def directory(node_id: int, generation: int = 0) -> str:
    """The directory id ``format`` would have written (one per disk)."""
    return f"dir-{node_id}-{generation}"


def dynamic_cluster(voters: int = 3, *, observers: tuple[int, ...] = (), **overrides) -> Cluster:
    """Voters ``1..voters`` bootstrapped with their directory ids, plus
    observers (formatted without being voters), all started."""
    bootstrap = tuple(Voter(node_id, directory(node_id)) for node_id in range(1, voters + 1))
    ids = tuple(range(1, voters + 1)) + tuple(observers)
    cluster = Cluster(voters, observers=observers, down=ids, bootstrap_voters=bootstrap, **overrides)
    for node_id in ids:
        replica = cluster.replicas[node_id]
        replica.config = dataclasses.replace(replica.config, directory_id=directory(node_id))
        cluster.restart(node_id)
    return cluster


def wipe(cluster: Cluster, node_id: int, generation: int = 1) -> None:
    """``node_id`` loses its disk and is formatted again: a new directory id."""
    if cluster.replicas[node_id].up:
        cluster.crash(node_id)
    replica = cluster.replicas[node_id]
    replica.disk = Disk()
    replica.config = dataclasses.replace(replica.config, directory_id=directory(node_id, generation))
    cluster.restart(node_id)


def add(cluster: Cluster, leader: int, node_id: int, generation: int = 0) -> int:
    offset, output = cluster.node(leader).add_voter(Voter(node_id, directory(node_id, generation)))
    cluster.handle(leader, output)
    return offset


def remove(cluster: Cluster, leader: int, node_id: int) -> int:
    offset, output = cluster.node(leader).remove_voter(node_id)
    cluster.handle(leader, output)
    return offset


def caught_up_observer(voters: int = 3, observer: int = 4, **overrides) -> Cluster:
    """Leader 1 of voters 1..``voters``, with ``observer`` fetching and
    caught up; replication settled."""
    cluster = dynamic_cluster(voters, observers=(observer,), **overrides)
    cluster.elect(1)
    cluster.tick(observer)  # an observer fetches on its own clock
    cluster.deliver_all()
    assert cluster.node(observer).leader_id == 1
    return cluster


def settle(cluster: Cluster, *observers: int) -> None:
    """Deliver everything; observers fetch once more so that they learn the
    high watermark."""
    cluster.deliver_all()
    for node_id in observers:
        cluster.tick(node_id, times=60)
        cluster.deliver_all()


# -- the record: in force on append, undone by truncation ---------------------------


def test_a_voter_set_record_is_in_force_on_append_before_it_commits():
    """Raft thesis §4.1: a server uses the latest configuration in its log,
    committed or not. The leader counts the new majority (3 of 4) at once,
    and a follower holds the new set as soon as it appends the record."""
    cluster = caught_up_observer()
    offset = add(cluster, 1, 4)

    assert cluster.node(1).voters.ids == (1, 2, 3, 4)
    assert cluster.node(1).high_watermark <= offset
    cluster.deliver(FetchResponse, dst=2)  # the record reaches node 2 only
    assert cluster.node(2).voters.ids == (1, 2, 3, 4)
    assert cluster.node(2).high_watermark <= offset
    assert cluster.node(3).voters.ids == (1, 2, 3)


def test_the_new_majority_counts_for_commitment_at_once():
    """With 4 voters a majority is 3: the leader and one follower no longer
    commit the record that made the set (nor anything after it)."""
    cluster = caught_up_observer()
    cluster.block(1, 3)
    cluster.block(1, 4)
    offset = add(cluster, 1, 4)
    cluster.run(30)

    assert cluster.node(2).log.end_offset > offset
    assert cluster.node(1).high_watermark == offset

    cluster.heal()
    cluster.run(200)
    assert cluster.node(1).high_watermark > offset


def test_truncating_an_uncommitted_voter_record_restores_the_previous_set():
    """KIP-853: a VOTERS record that a later leader truncates takes its set
    with it: the node reverts to the set before it."""
    cluster = caught_up_observer()
    cluster.isolate(1)
    add(cluster, 1, 4)  # only on node 1
    assert cluster.node(1).voters.ids == (1, 2, 3, 4)

    cluster.time_out(3)
    cluster.elect(2)  # epoch 2, among 2 and 3
    cluster.run(CHECK_QUORUM_TICKS + 1, nodes=(1,))  # node 1 resigns
    cluster.heal()
    cluster.run(400)

    assert cluster.node(1).role is Role.FOLLOWER and cluster.node(1).leader_id == 2
    assert cluster.node(1).voters.ids == (1, 2, 3)
    changed = [output.voters_changed for output in cluster.replica(1).outputs if output.voters_changed is not None]
    assert [voters.ids for voters in changed] == [(1, 2, 3, 4), (1, 2, 3)]


def test_a_voter_record_with_a_malformed_payload_is_dropped():
    """Hostile input: a Fetch answer carrying a VOTERS record that is not a
    voter set is dropped and counted; the follower's log does not move."""
    cluster = caught_up_observer()
    follower = cluster.node(2)
    end = follower.log.end_offset
    request = cluster.sent(2, FetchRequest)[-1]
    bad = FetchResponse(
        src=1,
        dst=2,
        epoch=follower.epoch,
        request_id=request.request_id,
        leader_id=1,
        high_watermark=0,
        log_start_offset=0,
        records=(record(end, follower.epoch, b"not json", RecordKind.VOTERS),),
    )
    cluster.inject(bad)

    assert follower.log.end_offset == end
    assert follower.counters["messages_out_of_range"] == 1


def test_a_static_cluster_refuses_voter_changes_until_it_is_upgraded():
    cluster = Cluster(3, observers=(4,))
    cluster.elect(1)
    with pytest.raises(ReconfigurationError, match="static voter set: upgrade it") as refused:
        cluster.node(1).add_voter(Voter(4))
    assert refused.value.code is ErrorCode.VOTERS_STATIC
    with pytest.raises(ReconfigurationError, match="static") as refused:
        cluster.node(1).remove_voter(3)
    assert refused.value.code is ErrorCode.VOTERS_STATIC


# -- upgrading a static voter set to a dynamic one (KIP-853 kraft.version 1) -------

ENDPOINTS = {1: ("h1:9091",), 2: ("h2:9092",), 3: ("h3:9093",)}


def static_cluster(voters: int = 3, **overrides) -> Cluster:
    """Static voters ``1..voters``, each disk with its directory id (as a
    first start without ``format`` writes one), started and led by 1."""
    cluster = Cluster(voters, down=tuple(range(1, voters + 1)), **overrides)
    for node_id in range(1, voters + 1):
        replica = cluster.replicas[node_id]
        replica.config = dataclasses.replace(replica.config, directory_id=directory(node_id))
        cluster.restart(node_id)
    cluster.elect(1)
    settle(cluster)
    return cluster


def upgrade(cluster: Cluster, leader: int) -> int | None:
    offset, output = cluster.node(leader).upgrade_voters(ENDPOINTS)
    cluster.handle(leader, output)
    return offset


def test_upgrade_writes_the_static_set_with_each_voters_directory_id_and_endpoints():
    """The leader learned each voter's directory id from its Fetches: the
    first VOTERS record names every disk that acknowledged records, and
    every replica holds it (and is dynamic) from the moment it appends it."""
    cluster = static_cluster()
    assert not cluster.node(1).dynamic_voters
    offset = upgrade(cluster, 1)
    cluster.run(100)

    expected = VoterSet(tuple(Voter(n, directory(n), ENDPOINTS[n]) for n in (1, 2, 3)))
    for node_id in (1, 2, 3):
        node = cluster.node(node_id)
        assert node.dynamic_voters and node.voters == expected and node.is_voter
        assert node.high_watermark > offset
    assert not cluster.node(1).config.dynamic_voters  # the log decides, not the configuration


def test_upgrade_is_idempotent_and_one_change_at_a_time():
    cluster = static_cluster()
    cluster.isolate(1)
    upgrade(cluster, 1)
    with pytest.raises(ReconfigurationError) as refused:
        upgrade(cluster, 1)  # not committed yet: in progress, retry
    assert refused.value.code is ErrorCode.VOTER_CHANGE_IN_PROGRESS
    cluster.heal()
    settle(cluster)
    end = cluster.node(1).log.end_offset
    assert upgrade(cluster, 1) is None  # done: nothing appended
    assert cluster.node(1).log.end_offset == end


def test_upgrade_waits_for_every_voters_directory_id():
    """A voter not heard within the fetch timeout: its disk is not known,
    and naming none would let any disk vote as it."""
    cluster = static_cluster()
    cluster.crash(3)
    cluster.run(FETCH_TIMEOUT_TICKS + 1, nodes=(1, 2))
    with pytest.raises(ReconfigurationError, match="voter 3's directory id is not known") as refused:
        upgrade(cluster, 1)
    assert refused.value.code is ErrorCode.VOTER_NOT_CAUGHT_UP
    assert not cluster.node(1).dynamic_voters


def test_an_uncommitted_upgrade_truncated_by_a_new_leader_leaves_the_set_static():
    cluster = static_cluster()
    cluster.isolate(1)
    upgrade(cluster, 1)  # only on node 1
    assert cluster.node(1).dynamic_voters
    cluster.time_out(3)
    cluster.elect(2)
    cluster.run(CHECK_QUORUM_TICKS + 1, nodes=(1,))
    cluster.heal()
    cluster.run(400)

    assert cluster.node(1).leader_id == 2
    assert not any(cluster.node(n).dynamic_voters for n in (1, 2, 3))
    with pytest.raises(ReconfigurationError) as refused:
        cluster.node(2).add_voter(Voter(4))
    assert refused.value.code is ErrorCode.VOTERS_STATIC


def test_a_committed_upgrade_survives_a_leader_change_and_a_restart_with_the_static_list():
    """The new leader holds the committed record and is dynamic; a node
    restarted with its old static configuration reads the set from its
    log, and from its snapshot once the record left the log."""
    cluster = static_cluster(snapshot_retained_records=0)
    upgrade(cluster, 1)
    settle(cluster)
    cluster.crash(1)
    cluster.run(3000)
    (leader,) = cluster.leaders()
    follower = 5 - leader  # the other of 2 and 3
    assert cluster.node(leader).dynamic_voters and upgrade(cluster, leader) is None
    cluster.crash(follower)
    cluster.restart(follower)
    node = cluster.node(follower)
    assert node.dynamic_voters and node.voters.get(follower).directory_id == directory(follower)

    cluster.propose(leader, b"after the upgrade")
    cluster.run(100)
    cluster.take_snapshot(follower)
    cluster.crash(follower)
    cluster.restart(follower)
    node3 = cluster.node(follower)
    assert node3.log.start_offset > 0 and split_snapshot(node3.snapshot.data)[0] == node3.voters
    assert node3.dynamic_voters and node3.voters.get(1).endpoints == ENDPOINTS[1]


def test_a_snapshot_taken_before_the_upgrade_holds_the_state_machine_alone():
    cluster = static_cluster(snapshot_retained_records=0)
    cluster.propose(1, b"before")
    settle(cluster)
    cluster.take_snapshot(2, data=b"state")
    assert cluster.node(2).snapshot.data == b"state"
    upgrade(cluster, 1)
    settle(cluster)
    cluster.crash(2)
    cluster.restart(2)
    assert cluster.node(2).dynamic_voters  # from the record after the snapshot


def test_a_disk_formatted_to_join_installs_a_snapshot_from_before_the_upgrade_and_restarts_from_it():
    """A leader whose newest snapshot predates the upgrade sends it, without
    a voter set, to a disk formatted to join the upgraded cluster (its
    configuration names the upgrade's set: dynamic voters). The joiner
    installed nothing: it dropped the snapshot as "not a dynamic-voter
    snapshot" and asked again, until that leader snapshotted once more
    (the sweep's seed 180174). It installs it, learns the set from the
    VOTERS record after it, and restarts from that snapshot."""
    cluster = static_cluster(snapshot_retained_records=0)
    cluster.propose(1, b"before the upgrade")
    settle(cluster)
    snapshot_id = cluster.take_snapshot(1, data=b"state")
    upgrade(cluster, 1)
    settle(cluster)
    leader = cluster.node(1)
    assert leader.snapshot.data == b"state" and leader.log.start_offset == snapshot_id.end_offset
    upgraded_set = leader.voters

    joiner = Replica(
        4,
        make_config(4, cluster.voter_ids, bootstrap_voters=upgraded_set.voters, directory_id=directory(4)),
        Disk(),
    )
    assert joiner.config.dynamic_voters
    cluster.replicas[4] = joiner
    cluster.restart(4)
    settle(cluster, 4)
    node4 = cluster.node(4)
    assert node4.snapshot is not None and node4.snapshot.data == b"state"
    assert node4.log.end_offset == leader.log.end_offset
    assert node4.dynamic_voters and node4.voters == upgraded_set and not node4.is_voter
    assert node4.counters["messages_out_of_range"] == 0

    cluster.crash(4)
    cluster.restart(4)  # from the snapshot without a voter set, then the record
    node4 = cluster.node(4)
    assert node4.snapshot.data == b"state" and node4.dynamic_voters and node4.voters == upgraded_set


def test_after_the_upgrade_a_wiped_voter_is_replaced_by_remove_and_add():
    cluster = static_cluster()
    upgrade(cluster, 1)
    settle(cluster)
    wipe(cluster, 3)  # restarted with its static configuration, on an empty disk
    cluster.run(1000)
    assert cluster.node(3).dynamic_voters and not cluster.node(3).is_voter  # it learned the set
    remove(cluster, 1, 3)
    settle(cluster, 3)
    add(cluster, 1, 3, generation=1)
    settle(cluster, 3)
    assert cluster.node(1).voters.get(3) == Voter(3, directory(3, generation=1))
    assert cluster.node(3).is_voter


# -- the leader's rules: one change at a time, after a commit in its epoch ---------


def test_add_voter_refuses_a_replica_that_is_not_caught_up():
    cluster = dynamic_cluster(3, observers=(4,))
    cluster.elect(1)
    with pytest.raises(ReconfigurationError, match="not fetched") as refused:
        cluster.node(1).add_voter(Voter(4, directory(4)))
    assert refused.value.code is ErrorCode.VOTER_NOT_CAUGHT_UP
    cluster.tick(4)
    cluster.deliver_all()
    with pytest.raises(ReconfigurationError, match="directory") as refused:
        cluster.node(1).add_voter(Voter(4, directory(4, generation=9)))
    assert refused.value.code is ErrorCode.VOTER_NOT_CAUGHT_UP
    add(cluster, 1, 4)
    assert cluster.node(1).voters.get(4) == Voter(4, directory(4))


def test_add_voter_refuses_a_replica_behind_the_high_watermark():
    cluster = caught_up_observer()
    cluster.block(1, 4)
    cluster.propose(1, b"x")
    settle(cluster)
    cluster.unblock(1, 4)
    with pytest.raises(ReconfigurationError, match="not caught up") as refused:
        cluster.node(1).add_voter(Voter(4, directory(4)))
    assert refused.value.code is ErrorCode.VOTER_NOT_CAUGHT_UP


def test_one_voter_change_at_a_time():
    """Raft thesis §4.1: the next change waits until the last one commits."""
    cluster = caught_up_observer()
    add(cluster, 1, 4)
    with pytest.raises(ReconfigurationError, match="one change at a time") as refused:
        cluster.node(1).remove_voter(3)
    assert refused.value.code is ErrorCode.VOTER_CHANGE_IN_PROGRESS
    settle(cluster, 4)
    assert not cluster.node(1).voter_change_pending
    with pytest.raises(ReconfigurationError, match="already a voter") as refused:
        cluster.node(1).add_voter(Voter(4, directory(4)))
    assert refused.value.code is ErrorCode.DUPLICATE_VOTER
    remove(cluster, 1, 3)
    assert cluster.node(1).voters.ids == (1, 2, 4)


def test_a_new_leader_changes_voters_only_after_committing_in_its_epoch():
    """The single-server change bug (raft-dev, 2015): a new leader must
    commit a record of its own epoch before it appends a change."""
    cluster = dynamic_cluster(3)
    cluster.win_election(1)  # the followers' first Fetches still in flight
    with pytest.raises(ReconfigurationError, match="own epoch") as refused:
        cluster.node(1).remove_voter(3)
    assert refused.value.code is ErrorCode.VOTER_CHANGE_IN_PROGRESS
    cluster.deliver_all()
    remove(cluster, 1, 3)


def test_only_a_leader_changes_voters_and_never_the_last_one():
    cluster = dynamic_cluster(1)
    cluster.elect(1)
    with pytest.raises(ReconfigurationError, match="last voter") as refused:
        cluster.node(1).remove_voter(1)
    assert refused.value.code is ErrorCode.INVALID_REQUEST
    with pytest.raises(ReconfigurationError, match="not a voter") as refused:
        cluster.node(1).remove_voter(7)
    assert refused.value.code is ErrorCode.VOTER_NOT_FOUND
    bigger = dynamic_cluster(3)
    bigger.elect(1)
    with pytest.raises(NotLeaderError):
        bigger.node(2).remove_voter(3)


def test_the_2015_single_server_change_bug_cannot_happen():
    """Ongaro's raft-dev report (2015): voters {1,2,3,4}. Leader 1 adds 5,
    and the record reaches only 5. Node 2 wins epoch 2 (votes of 2, 3, 4)
    and at once removes 1, committed by {2, 3, 4} without ever committing
    a record of epoch 2 under the old set. Node 1 then wins epoch 3 with 4
    and 5 ({1..5}: 3 of 5) and overwrites the committed removal.

    With the rule, node 2 may not change voters before its LEADER_CHANGE is
    committed by 3 of {1,2,3,4}; that record then reaches a voter of every
    majority node 1 could gather, which refuses it: its log is behind."""
    cluster = dynamic_cluster(4, observers=(5,))
    cluster.elect(1)
    cluster.tick(5)
    cluster.deliver_all()
    for peer in (2, 3, 4):
        cluster.block(1, peer)
    add(cluster, 1, 5)
    cluster.deliver_all()  # the record reaches node 5 only
    assert cluster.node(5).voters.ids == (1, 2, 3, 4, 5)

    cluster.time_out(3, 4)
    cluster.win_election(2)
    with pytest.raises(ReconfigurationError, match="own epoch"):
        cluster.node(2).remove_voter(1)
    cluster.deliver_all()  # 3 and 4 fetch: epoch 2 is committed under {1..4}
    offset = remove(cluster, 2, 1)
    cluster.deliver_all()
    assert cluster.node(2).high_watermark > offset
    committed = [entry for entry in cluster.log_entries(2) if entry.offset < cluster.node(2).high_watermark]

    # Node 1 stands for epoch 3 with its set {1..5}; everyone may answer it.
    cluster.heal()
    cluster.block(1, 2)
    cluster.block(1, 3)
    cluster.crash(1)
    cluster.restart(1)
    cluster.run(3000)

    assert 1 not in cluster.leaders()
    for node_id in (2, 3, 4):
        assert cluster.log_entries(node_id)[: len(committed)] == committed


# -- removal, the leader's own included ----------------------------------------------


def test_a_removed_leader_leads_until_the_change_commits_then_hands_over():
    """Raft thesis §4.2.2: the leader replicates its own removal without
    counting itself, resigns once it is committed, and the remaining voters
    hear its EndQuorumEpoch though it is no longer in their set."""
    cluster = dynamic_cluster(3)
    cluster.elect(1)
    offset = remove(cluster, 1, 1)
    assert cluster.node(1).role is Role.LEADER
    assert not cluster.node(1).is_voter

    cluster.deliver(FetchResponse)  # the record reaches 2 and 3
    cluster.deliver(FetchRequest)  # their acknowledgement commits it
    assert cluster.node(1).high_watermark > offset
    assert cluster.node(1).role is Role.RESIGNED
    hand_overs = cluster.pending(EndQuorumEpochRequest, src=1)
    assert {message.dst for message in hand_overs} == {2, 3}

    cluster.run(2000)
    leaders = cluster.leaders()
    assert leaders in ([2], [3])
    assert cluster.node(1).role is Role.FOLLOWER and cluster.node(1).leader_id == leaders[0]
    assert cluster.node(2).counters["messages_refused_not_voter"] == 0


def test_a_removed_leader_observes_as_soon_as_every_voter_has_its_end_quorum_epoch():
    """Before: it stayed Resigned, answering clients and its observers that
    it knew no leader, until its election timeout (writes stopped 1.5 s with
    node processes). Now the last acknowledgement of its EndQuorumEpoch
    makes it an observer, which fetches and finds the new leader."""
    from quorum import EndQuorumEpochResponse

    cluster = dynamic_cluster(3)
    cluster.elect(1)
    remove(cluster, 1, 1)
    cluster.deliver(FetchResponse)
    cluster.deliver(FetchRequest)
    assert cluster.node(1).role is Role.RESIGNED
    cluster.deliver(EndQuorumEpochRequest, dst=2)
    cluster.deliver(EndQuorumEpochResponse, src=2)
    assert cluster.node(1).role is Role.RESIGNED  # 3 has not acknowledged yet
    cluster.deliver(EndQuorumEpochRequest, dst=3)
    cluster.deliver(EndQuorumEpochResponse, src=3)
    assert cluster.node(1).role is Role.UNATTACHED and not cluster.node(1).is_voter
    assert cluster.node(1).epoch == 1  # its own epoch: it keeps its vote record (§3.8)

    new_leader = cluster.run_until(lambda: cluster.leaders() in ([2], [3])) and cluster.leaders()[0]
    cluster.run_until(lambda: cluster.node(1).leader_id == new_leader)
    assert cluster.node(1).role is Role.FOLLOWER


def test_a_resigned_voter_stays_resigned_after_the_hand_over():
    """A leader that resigned but is still a voter may have to stand again
    (its election timeout is the backstop when nobody takes over): the
    acknowledgements do not hurry it out of Resigned. Only a node that can
    no longer stand has nothing left to wait for."""
    from quorum import EndQuorumEpochResponse

    cluster = dynamic_cluster(3)
    cluster.elect(1)
    output = cluster.node(1).resign()
    cluster.handle(1, output)
    assert cluster.node(1).role is Role.RESIGNED and cluster.node(1).is_voter
    cluster.deliver(EndQuorumEpochRequest)
    cluster.deliver(EndQuorumEpochResponse)
    assert cluster.node(1).role is Role.RESIGNED


def test_a_voter_that_missed_the_upgrade_hears_a_candidate_whose_set_names_its_disk():
    """A static voter whose log ends before the upgrade to dynamic voters
    (it was down when the leader wrote it) holds the static set. A
    candidate outside that set whose Vote names this node's disk proves the
    upgrade (Raft thesis §4.1: grant to a candidate outside the latest
    configuration); one that names no disk of ours is refused as before
    (the sweep's seed 17247 was stuck without it)."""
    from harness import messages_of

    cluster = Cluster(3, down=(1, 2, 3))
    for node_id in (1, 2, 3):
        replica = cluster.replicas[node_id]
        replica.config = dataclasses.replace(replica.config, directory_id=directory(node_id))
        cluster.restart(node_id)
    assert not cluster.node(3).dynamic_voters

    def vote(voter_directory_id):
        request = VoteRequest(
            src=5, dst=3, epoch=4, last_epoch=0, end_offset=cluster.node(3).log.end_offset, pre_vote=False,
            voter_directory_id=voter_directory_id,
        )  # fmt: skip
        [answer] = messages_of(cluster.inject(request))
        return answer

    refused = vote(None)
    assert not refused.granted and refused.error is ErrorCode.INVALID_REQUEST
    assert vote(directory(3)).granted
    assert cluster.node(3).voted_for == 5


def test_a_removed_voter_never_stands_and_grants_no_vote():
    cluster = dynamic_cluster(3)
    cluster.elect(1)
    remove(cluster, 1, 3)
    settle(cluster)
    assert cluster.node(3).voters.ids == (1, 2)

    cluster.isolate(3)
    cluster.tick(3, times=3 * FETCH_TIMEOUT_TICKS)
    assert cluster.node(3).role in (Role.UNATTACHED, Role.FOLLOWER)
    assert cluster.sent(3, VoteRequest) == []

    cluster.heal()
    node3 = cluster.node(3)
    cluster.inject(VoteRequest(src=2, dst=3, epoch=node3.epoch + 1, last_epoch=9, end_offset=99, pre_vote=False))
    assert node3.voted_for is None
    assert node3.counters["votes_refused_not_voter"] == 1


def test_two_voters_commit_without_the_removed_third():
    """After 3 is removed from {1, 2, 3}, a majority is 2 of {1, 2}: with 3
    gone for good, 1 and 2 still commit."""
    cluster = dynamic_cluster(3)
    cluster.elect(1)
    remove(cluster, 1, 3)
    settle(cluster)
    cluster.crash(3)
    first = cluster.propose(1, b"after")
    cluster.run(100)
    assert cluster.node(1).high_watermark > first


# -- directory ids: a wiped disk is not the voter it was ------------------------------


def test_a_wiped_voter_is_an_observer_whose_fetches_do_not_count():
    """KIP-853: node 3 comes back with an empty disk and a new directory
    id. It neither stands nor votes, and the leader does not count its
    acknowledgements: with node 2 away, nothing commits."""
    cluster = dynamic_cluster(3)
    cluster.elect(1)
    wipe(cluster, 3)
    assert not cluster.node(3).is_voter
    cluster.crash(2)
    first = cluster.propose(1, b"needs a real majority")
    cluster.run(200)

    assert cluster.node(3).log.end_offset > first  # it replicates...
    assert cluster.node(1).high_watermark <= first  # ...but does not count
    assert cluster.sent(3, VoteRequest) == []


def test_describe_shows_a_wiped_voters_new_disk_as_an_observer():
    """DescribeQuorum on the leader: voter 3 is still the old disk, with no
    progress (its fetches are not counted); the new disk fetching under id 3
    is an observer with its own directory id and progress. The wiped node
    describes itself the same way."""
    cluster = dynamic_cluster(3)
    cluster.elect(1)
    wipe(cluster, 3)
    cluster.run(50)

    leader_view = cluster.node(1).describe()
    old = next(r for r in leader_view.voters if r.node_id == 3)
    assert (old.directory_id, old.log_end_offset, old.last_fetch_ms) == (directory(3), None, None)
    (new,) = leader_view.observers
    assert (new.node_id, new.directory_id) == (3, directory(3, generation=1))
    assert new.log_end_offset == cluster.node(1).log.end_offset and new.last_fetch_ms is not None
    own_view = cluster.node(3).describe()
    assert [(r.node_id, r.directory_id) for r in own_view.observers] == [(3, directory(3, generation=1))]
    assert next(r for r in own_view.voters if r.node_id == 3).log_end_offset is None

    remove(cluster, 1, 3)
    settle(cluster, 3)
    add(cluster, 1, 3, generation=1)
    settle(cluster, 3)
    leader_view = cluster.node(1).describe()
    assert not leader_view.observers
    assert next(r for r in leader_view.voters if r.node_id == 3).directory_id == directory(3, generation=1)


def test_a_wiped_voter_is_replaced_by_removing_and_adding_it_again():
    cluster = dynamic_cluster(3)
    cluster.elect(1)
    wipe(cluster, 3)
    remove(cluster, 1, 3)
    settle(cluster, 3)
    add(cluster, 1, 3, generation=1)
    settle(cluster, 3)

    voters = cluster.node(1).voters
    assert voters.get(3) == Voter(3, directory(3, generation=1))
    assert cluster.node(3).is_voter
    cluster.crash(2)
    first = cluster.propose(1, b"counted again")
    cluster.run(200)
    assert cluster.node(1).high_watermark > first


def test_an_observer_named_a_voter_by_a_deposed_leader_stands_when_no_voter_can_win():
    """The sweep's seed 571925, replayed by hand. Leader 1, cut off, adds
    observer 5's disk ({1, 2, 3, 5}, uncommitted, only in 1's log); 2 wins
    epoch 2 with 3's vote and 3 crashes; observer 5 copies 2's records; 2's
    disk is lost. After the heal no voter can win: 1 needs 3 of {1, 2, 3, 5}
    and 5's log (epoch 2) outranks it; 3 needs 1, whose log is longer; 2 is
    another disk. Observer 5, named a voter by 1's request (Raft thesis
    §4.1), stands counting its own set {1, 2, 3}, wins with 1 and 3, leads
    until its epoch commits, and hands over: a voter leads again and
    commits."""
    cluster = caught_up_observer(observer=5)
    cluster.isolate(1)
    add(cluster, 1, 5)  # in force on 1 at once; it never leaves node 1
    assert cluster.node(1).voters.ids == (1, 2, 3, 5)

    cluster.time_out(3)
    cluster.tick_until(5, lambda node: node.role is Role.UNATTACHED)  # 5 looks for a leader
    cluster.win_election(2)  # epoch 2, among 2 and 3; 3 crashes before it fetches
    cluster.crash(3)
    cluster.run_until(lambda: cluster.node(5).log.last_epoch == 2)
    wipe(cluster, 2)
    cluster.restart(3)
    cluster.heal()
    cluster.run_until(lambda: cluster.node(5).named_voter_by == 1)
    assert not cluster.node(5).is_voter and cluster.node(3).log.last_epoch == 1

    cluster.run_until(lambda: any(cluster.node(n).is_leader for n in (1, 3)))
    leader = next(n for n in (1, 3) if cluster.node(n).is_leader)
    [led] = cluster.events(5, Role.LEADER)  # 5 led once, before the voter that leads now
    [resigned] = cluster.events(5, Role.RESIGNED)
    assert resigned.epoch == led.epoch < cluster.node(leader).epoch
    assert resigned.reason == "not a voter of its own set: its epoch is committed, handing over"
    assert cluster.node(1).voters.ids == (1, 2, 3)  # 5's log replaced 1's uncommitted record
    first = cluster.propose(leader, b"committed again")
    cluster.run_until(lambda: cluster.node(leader).high_watermark > first)


def test_a_candidate_outside_the_set_that_names_this_disk_makes_it_stand_too():
    """The candidate need not be a voter of this node's set (it may have
    been added with this node, in the same deposed leader's log): refused
    as a candidate whose log is behind, it still names this disk."""
    cluster = caught_up_observer(observer=5)
    cluster.crash(5)
    cluster.restart(5)
    node5 = cluster.node(5)
    request = VoteRequest(
        src=4, dst=5, epoch=node5.epoch + 1, last_epoch=0, end_offset=0, pre_vote=True,
        voter_directory_id=directory(5),
    )  # fmt: skip
    [answer] = messages_of(cluster.inject(request))
    assert not answer.granted and answer.error is ErrorCode.INVALID_REQUEST
    assert node5.named_voter_by == 4
    stranger = dataclasses.replace(request, voter_directory_id=directory(5, generation=1))
    cluster.crash(5)
    cluster.restart(5)
    node5 = cluster.node(5)
    cluster.inject(stranger)  # another disk of id 5 named: not this one
    assert node5.named_voter_by is None


def test_an_observer_named_a_voter_follows_a_live_leader_instead_of_standing():
    """A node named a voter by a candidate whose log is behind its own
    stands only while no leader is known: the first leader it follows ends
    it (a live leader's voters refuse its pre-vote and name that leader)."""
    cluster = caught_up_observer(observer=5)
    node5 = cluster.node(5)
    cluster.crash(5)
    cluster.restart(5)  # it follows the leader it recorded, and has not fetched yet
    request = VoteRequest(
        src=3, dst=5, epoch=node5.epoch + 1, last_epoch=0, end_offset=0, pre_vote=True,
        voter_directory_id=directory(5),
    )  # fmt: skip
    node5 = cluster.node(5)
    assert node5.role is Role.FOLLOWER
    [answer] = messages_of(cluster.inject(request))
    assert not answer.granted and node5.named_voter_by == 3
    cluster.run_until(lambda: node5.named_voter_by is None)
    assert node5.role is Role.FOLLOWER and node5.leader_id == 1
    cluster.run(3 * FETCH_TIMEOUT_TICKS)
    assert cluster.node(1).is_leader and node5.leader_id == 1
    assert cluster.sent(5, VoteRequest) == []


# -- everything else follows the set --------------------------------------------------


def test_check_quorum_follows_the_voter_set():
    """A single voter never resigns (KAFKA-16144); once a second voter is
    added, a leader it stops fetching from resigns at check quorum."""
    cluster = caught_up_observer(voters=1, observer=2)
    cluster.tick(1, times=2 * CHECK_QUORUM_TICKS)
    assert cluster.role(1) is Role.LEADER
    cluster.deliver_all()
    add(cluster, 1, 2)
    settle(cluster, 2)
    assert cluster.node(2).voters.ids == (1, 2)
    cluster.isolate(1)
    cluster.run(CHECK_QUORUM_TICKS + 5, nodes=(1,))
    assert cluster.role(1) is Role.RESIGNED


def test_grow_one_to_three_then_elect_from_the_new_set():
    cluster = dynamic_cluster(1, observers=(2, 3))
    cluster.elect(1)
    for node_id in (2, 3):
        cluster.tick(node_id)
        settle(cluster, 2, 3)
        add(cluster, 1, node_id)
        settle(cluster, 2, 3)
    assert [cluster.node(node_id).voters.ids for node_id in (1, 2, 3)] == [(1, 2, 3)] * 3
    cluster.crash(1)
    cluster.run(3000)
    assert cluster.leaders() in ([2], [3])


def test_read_index_needs_a_majority_of_the_current_set():
    """ReadIndex (Raft thesis §6.4) over {1, 2, 3, 4}: the leader and one
    follower confirm 2 of 4, which is not a majority."""
    cluster = caught_up_observer()
    add(cluster, 1, 4)
    settle(cluster, 4)
    cluster.block(1, 3)
    cluster.block(1, 4)
    cluster.read_index(1, "r")
    cluster.run(100)
    assert cluster.replica(1).reads == []
    cluster.heal()
    cluster.run(200)
    assert [read.read_id for read in cluster.replica(1).reads] == ["r"]


# -- snapshots ---------------------------------------------------------------------


def test_a_snapshot_carries_the_voter_set_to_a_follower_that_installs_it():
    """A dynamic cluster's snapshot holds the set in force at its end: a
    replica that installs it learns a set whose record it never saw."""
    cluster = caught_up_observer(observer=4, snapshot_retained_records=0)
    cluster.crash(3)
    add(cluster, 1, 4)
    settle(cluster, 4)
    cluster.propose(1, b"x")
    settle(cluster, 4)
    snapshot_id = cluster.take_snapshot(1)
    voters, state = split_snapshot(cluster.node(1).snapshot.data)
    assert voters.ids == (1, 2, 3, 4)
    assert state == f"state below {snapshot_id.end_offset}".encode()
    assert cluster.node(1).log.start_offset == snapshot_id.end_offset

    wipe(cluster, 3)  # empty log: it must take the snapshot
    cluster.run(300)
    assert cluster.node(3).snapshot is not None
    assert cluster.node(3).voters.ids == (1, 2, 3, 4)
    assert not cluster.node(3).is_voter  # the set names its old directory


def test_a_restarted_node_reads_its_voter_set_from_its_snapshot():
    cluster = caught_up_observer(snapshot_retained_records=0)
    add(cluster, 1, 4)
    settle(cluster, 4)
    cluster.propose(1, b"x")
    settle(cluster, 4)
    cluster.take_snapshot(2)
    cluster.crash(2)
    cluster.restart(2)
    assert cluster.node(2).log.start_offset > 0
    assert cluster.node(2).voters.ids == (1, 2, 3, 4)


def test_snapshot_bytes_round_trip_and_refuse_foreign_bytes():
    voters = VoterSet((Voter(1, "a", ("h:1",)), Voter(2)))
    assert split_snapshot(join_snapshot(voters, b"state")) == (voters, b"state")
    with pytest.raises(ValueError):
        split_snapshot(b"plain state machine bytes")
    with pytest.raises(ValueError):
        split_snapshot(join_snapshot(voters, b"")[:-3])


@pytest.mark.parametrize(
    "payload",
    [b"", b"[]", b'{"voters":[]}', b'{"voters":[[1,null,[]],[1,null,[]]]}', b'{"voters":[[-1,null,[]]]}',
     b'{"voters":[[1,"",[]]]}', b'{"voters":[[1,null,[7]]]}', b"\xff",
     # Nested past the JSON decoder's stack: a RecursionError escaped, which
     # a node meets as a crash where a refused record is skipped.
     b"[" * 100_000 + b"]" * 100_000],
)
def test_a_voter_set_payload_is_checked(payload):
    with pytest.raises(ValueError):
        VoterSet.decode(payload)


def test_a_leader_that_removed_itself_and_crashed_stands_again():
    """Found by the sweep (random, seed 14): leader 1 of {1, 2} removes
    itself; the record reaches nobody before it crashes. Node 2 holds
    {1, 2} and needs node 1's vote, which a non-voter never grants; node 1
    holds {2} and the longer log. Raft thesis §4.2.2 (Figure 4.6): a node
    whose own removal is the uncommitted last change still stands, counting
    only the votes of its set; it wins with node 2's vote, commits its
    removal, and hands over."""
    cluster = dynamic_cluster(2)
    cluster.elect(1)
    cluster.block(1, 2)
    remove(cluster, 1, 1)
    cluster.drop()  # the record reaches nobody
    cluster.crash(1)
    cluster.restart(1)
    assert cluster.node(1).removal_pending and not cluster.node(1).is_voter
    assert cluster.node(2).voters.ids == (1, 2)
    cluster.heal()
    cluster.run(5000)

    assert cluster.node(2).voters.ids == (2,)
    assert cluster.leaders() == [2]
    assert cluster.node(2).leader_has_committed_own_epoch
    assert not cluster.node(1).removal_pending
    assert cluster.node(1).role in (Role.FOLLOWER, Role.UNATTACHED)


def test_a_voter_added_without_the_record_votes_when_the_candidate_names_its_disk():
    """Found by the sweep (random, seed 221): leader 1 of {1} adds 2, and
    the record reaches nobody before node 1 loses its leadership (check
    quorum, now counted over {1, 2}). Node 1 needs node 2's vote; node 2
    holds {1} and is no voter in its own eyes. KIP-853: the candidate's
    VoteRequest names the directory id its set has for node 2, and a node
    so named votes (once per epoch, as any voter)."""
    cluster = caught_up_observer(voters=1, observer=2)
    cluster.isolate(1)
    add(cluster, 1, 2)
    cluster.drop()
    cluster.run(CHECK_QUORUM_TICKS + 1, nodes=(1,))
    assert cluster.role(1) is Role.RESIGNED
    assert cluster.node(2).voters.ids == (1,)
    cluster.heal()
    cluster.run(3000)

    assert cluster.leaders() == [1]
    assert cluster.node(1).leader_has_committed_own_epoch
    assert cluster.node(2).voters.ids == (1, 2) and cluster.node(2).is_voter


def test_a_non_voter_named_with_another_disk_does_not_vote():
    """The exception is for the disk the candidate's set names: a node whose
    disk was wiped (a new directory id) is not that voter."""
    cluster = dynamic_cluster(3)
    cluster.elect(1)
    wipe(cluster, 3)
    node3 = cluster.node(3)
    cluster.inject(
        VoteRequest(
            src=2, dst=3, epoch=node3.epoch + 1, last_epoch=9, end_offset=99, pre_vote=False,
            voter_directory_id=directory(3, generation=0),
        )
    )  # fmt: skip
    assert node3.voted_for is None
    assert node3.counters["votes_refused_other_directory"] == 1


def voter_cut_off_while_4_replaced_2() -> Cluster:
    """Voters {1, 2, 3} with 1 leading; node 3 is cut off while 1 adds 4
    and removes 2, both committed: {1, 3, 4}, which node 3 does not know
    (it still holds {1, 2, 3}). Node 3 stays cut off."""
    cluster = caught_up_observer()
    cluster.isolate(3)
    add(cluster, 1, 4)
    settle(cluster, 4)
    remove(cluster, 1, 2)
    settle(cluster, 4)
    assert cluster.node(4).voters.ids == (1, 3, 4) and not cluster.node(1).voter_change_pending
    assert cluster.node(3).voters.ids == (1, 2, 3)
    return cluster


def test_a_voter_with_a_stale_set_votes_for_an_up_to_date_candidate_outside_it():
    """Found by the sweep (random, seed 918): voters {1, 2, 3}; node 3 is cut
    off while 1 adds 4 and removes 2: {1, 3, 4}. Leader 1 dies. Node 4 needs
    node 3's vote, and node 3 still holds {1, 2, 3}, without node 4. Raft
    thesis §4.1: a server grants its vote to a candidate outside its latest
    configuration (whose log is up to date: it may hold a later one)."""
    cluster = voter_cut_off_while_4_replaced_2()
    cluster.crash(1)
    cluster.heal()
    cluster.run(4000)

    assert cluster.leaders() == [4]
    assert cluster.node(4).leader_has_committed_own_epoch
    assert cluster.node(3).voters.ids == (1, 3, 4)


def test_a_voter_with_a_stale_set_follows_the_candidate_outside_it_that_it_elected():
    """Found by the sweep (random, seed 266758): as above, but nobody else
    can tell node 3 who leads (node 2, removed, is down too). Node 4 wins
    epoch with node 3's vote and sends it BeginQuorumEpoch; node 3 refused
    it as coming from a non-voter, never fetched, and node 4 resigned by
    check quorum again and again: nothing committed. A node follows the
    candidate it voted for in that very epoch."""
    cluster = voter_cut_off_while_4_replaced_2()
    cluster.crash(1)
    cluster.crash(2)
    cluster.heal()
    cluster.run(4000)

    assert cluster.leaders() == [4]
    assert cluster.node(4).leader_has_committed_own_epoch
    assert cluster.node(3).role is Role.FOLLOWER and cluster.node(3).leader_id == 4
    assert cluster.node(3).voters.ids == (1, 3, 4)
    assert cluster.node(3).counters["messages_refused_not_voter"] == 0


def test_a_begin_quorum_epoch_from_a_non_voter_it_did_not_elect_is_still_refused():
    """The exception above is for the vote this node gave in this epoch: a
    non-voter claiming an epoch whose vote went elsewhere (or nowhere)
    is refused as before, and moves nothing."""
    cluster = Cluster(3)
    node2 = cluster.node(2)
    cluster.inject(VoteRequest(src=3, dst=2, epoch=node2.epoch + 1, last_epoch=0, end_offset=0, pre_vote=False))
    assert node2.voted_for == 3
    epoch = node2.epoch

    output = cluster.inject(BeginQuorumEpochRequest(src=9, dst=2, epoch=epoch))

    assert node2.role is Role.UNATTACHED and node2.leader_id is None and node2.epoch == epoch
    assert all(message.error == ErrorCode.INVALID_REQUEST for message in messages_of(output))
    assert node2.counters["messages_refused_not_voter"] == 1


def test_a_wiped_voter_restarted_with_a_static_voter_list_cannot_lose_a_committed_write():
    """The wiped-node hazard (issue 17): node 3 of a dynamic cluster loses
    its disk and is restarted with a static voter list instead of being
    formatted: an empty log, a new directory id, and in its own eyes a
    voter of {1, 2, 3}. A write committed by {1, 3} (node 2 cut off) must
    survive node 1's death: node 2, which lacks it, must not win node 3's
    vote. KIP-853: a Vote names the disk the candidate's set holds for the
    receiver, and any other disk refuses it, whatever its own voter list
    says."""
    cluster = dynamic_cluster(3)
    cluster.elect(1)
    cluster.isolate(2)
    first = cluster.propose(1, b"committed by 1 and 3")
    cluster.run(50, nodes=(1, 3))
    assert cluster.node(1).high_watermark > first

    cluster.crash(3)
    replica = cluster.replicas[3]
    replica.disk = Disk()
    replica.config = dataclasses.replace(
        replica.config, bootstrap_voters=(), voters=(1, 2, 3), directory_id=directory(3, generation=1)
    )
    cluster.restart(3)
    assert not cluster.node(3).config.dynamic_voters and cluster.node(3).is_voter
    cluster.crash(1)
    cluster.heal()
    cluster.run(3000)

    assert cluster.leaders() == []
    assert cluster.node(3).counters["votes_refused_other_directory"] > 0
    assert cluster.node(3).voted_for is None


# -- auto-join: the leader refuses a disk an operator removed (issue 17) ------------------


def auto_join_add(cluster: Cluster, leader: int, node_id: int, generation: int = 0) -> int:
    """``node_id``'s auto-join asks ``leader`` to add its disk."""
    offset, output = cluster.node(leader).add_voter(Voter(node_id, directory(node_id, generation)), auto_join=True)
    cluster.handle(leader, output)
    return offset


def added_then_removed_while_cut_off(**overrides) -> Cluster:
    """Observer 4 caught up, then cut off from everyone; meanwhile an
    operator adds its disk and removes it again, both committed: node 4
    never fetched a voter set holding its disk."""
    cluster = caught_up_observer(**overrides)
    cluster.isolate(4)
    add(cluster, 1, 4)
    settle(cluster)
    remove(cluster, 1, 4)
    settle(cluster)
    assert not cluster.node(1).voter_change_pending and cluster.node(1).voters.ids == (1, 2, 3)
    return cluster


def test_auto_join_is_refused_for_a_removed_disk_after_a_snapshot_covering_the_add_and_the_removal():
    """The sweep's seed 57641: node 4 was added while cut off, snapshots
    compacted the log past the add, the operator removed it, and its next
    auto-join asked again. The leader's voter set remembers the removal
    (in its snapshot too), and refuses that disk to auto-join."""
    cluster = added_then_removed_while_cut_off(snapshot_retained_records=0)
    removed_at = cluster.node(1).log.end_offset - 1
    cluster.propose(1, b"x")
    settle(cluster)
    for node_id in (1, 2, 3):
        cluster.take_snapshot(node_id)
        assert cluster.node(node_id).log.start_offset > removed_at
    # The snapshot's voter set carries the removal, through a restart too.
    voters, _state = split_snapshot(cluster.node(1).snapshot.data)
    assert voters.ids == (1, 2, 3) and voters.was_removed(4, directory(4))
    cluster.crash(1)
    cluster.restart(1)
    cluster.elect(1)

    # Node 4's own view: never a voter, nothing removed; it would join.
    decision = AutoJoin(4, directory(4), was_voter=False)
    assert not decision.observe(cluster.node(4))
    assert decision.action(cluster.node(4)) is AutoJoinAction.JOIN
    with pytest.raises(ReconfigurationError, match="auto-join does not add it back") as refused:
        auto_join_add(cluster, 1, 4)
    assert refused.value.code is ErrorCode.VOTER_REMOVED
    assert cluster.node(1).voters.ids == (1, 2, 3) and not cluster.node(1).voter_change_pending
    # The refusal is as good as having seen itself a voter: sticky.
    assert decision.answered(ErrorCode.VOTER_REMOVED)
    assert decision.action(cluster.node(4)) is AutoJoinAction.REMOVED
    assert not decision.answered(ErrorCode.VOTER_REMOVED)  # remembered once


def test_a_node_learns_from_a_snapshot_that_its_disk_was_removed():
    """Without asking: the snapshot it installs lists its disk as removed,
    though no voter set it ever held had it as a voter."""
    cluster = added_then_removed_while_cut_off(snapshot_retained_records=0)
    cluster.propose(1, b"x")
    settle(cluster)
    cluster.take_snapshot(1)
    decision = AutoJoin(4, directory(4), was_voter=False)
    cluster.heal()
    cluster.run(300)
    node = cluster.node(4)
    assert node.snapshot is not None and not any(voters.holds(4, directory(4)) for voters in node.voter_sets_in_log)
    assert decision.observe(node)
    assert decision.action(node) is AutoJoinAction.REMOVED


def test_an_auto_join_request_on_its_way_when_the_operator_removes_the_disk_does_not_land():
    """The race: node 4 decides to join (its view: not a voter) and its
    AddVoter travels while the operator adds and removes the disk. Arriving
    while the removal is uncommitted it is told to retry (the removal might
    still be undone by a leader change, and the mark with it); arriving
    after, it is refused for good, at whichever node leads by then."""
    cluster = caught_up_observer()
    decision = AutoJoin(4, directory(4), was_voter=False)
    assert decision.action(cluster.node(4)) is AutoJoinAction.JOIN  # the request leaves
    cluster.isolate(4)
    add(cluster, 1, 4)
    settle(cluster)
    remove(cluster, 1, 4)
    with pytest.raises(ReconfigurationError) as refused:
        auto_join_add(cluster, 1, 4)
    assert refused.value.code is ErrorCode.VOTER_CHANGE_IN_PROGRESS
    assert not decision.answered(refused.value.code)  # asks again later
    settle(cluster)
    with pytest.raises(ReconfigurationError) as refused:
        auto_join_add(cluster, 1, 4)
    assert refused.value.code is ErrorCode.VOTER_REMOVED
    # A new leader holds the same set, so refuses the same.
    cluster.crash(1)
    cluster.run(3000)
    (leader,) = cluster.leaders()
    with pytest.raises(ReconfigurationError) as refused:
        auto_join_add(cluster, leader, 4)
    assert refused.value.code is ErrorCode.VOTER_REMOVED


def test_an_operator_may_add_a_removed_disk_back_which_clears_the_mark():
    cluster = added_then_removed_while_cut_off()
    cluster.heal()
    cluster.run(300)
    # An operator's add (not auto-join) of the removed disk is done.
    add(cluster, 1, 4)
    settle(cluster, 4)
    assert cluster.node(1).voters.get(4) == Voter(4, directory(4))
    assert not cluster.node(1).voters.was_removed(4, directory(4))
    assert cluster.node(1).voters.removed == ()
    # Removed again: marked again.
    remove(cluster, 1, 4)
    settle(cluster, 4)
    assert cluster.node(1).voters.was_removed(4, directory(4))


def test_auto_join_may_add_a_new_disk_of_a_removed_node():
    """The mark is the disk's, not the node id's: a wiped node formatted
    again is another disk, which auto-join may add."""
    cluster = added_then_removed_while_cut_off()
    wipe(cluster, 4)
    cluster.heal()
    cluster.run(300)
    auto_join_add(cluster, 1, 4, generation=1)
    settle(cluster, 4)
    assert cluster.node(1).voters.get(4) == Voter(4, directory(4, 1))
    assert cluster.node(1).voters.was_removed(4, directory(4))


def test_a_voter_set_remembers_the_last_removed_disks_only():
    """``REMOVED_VOTERS_MAX`` bounds every VOTERS record and snapshot
    header: the oldest mark goes first; removing a disk again moves its
    mark to the end."""
    first = VoterSet((Voter(1, "keep"),))
    voters = first
    for node_id in range(2, REMOVED_VOTERS_MAX + 3):
        voters = voters.with_voter(Voter(node_id, f"d{node_id}")).without(node_id)
    assert len(voters.removed) == REMOVED_VOTERS_MAX
    assert not voters.was_removed(2, "d2")  # the 65th removal pushed out the first
    assert voters.was_removed(3, "d3") and voters.removed[-1] == (REMOVED_VOTERS_MAX + 2, f"d{REMOVED_VOTERS_MAX + 2}")
    assert VoterSet.decode(voters.encode()) == voters
    # Removing a disk again moves its mark to the end (the last to go).
    again = voters.with_voter(Voter(3, "d3")).without(3)
    assert again.removed[-1] == (3, "d3") and len(again.removed) == REMOVED_VOTERS_MAX
    # A voter without a directory id (a static voter) leaves no mark.
    assert VoterSet((Voter(1), Voter(2))).without(2).removed == ()
    with pytest.raises(ValueError, match="at most"):
        VoterSet(first.voters, tuple((node_id, "x") for node_id in range(2, REMOVED_VOTERS_MAX + 3)))


def test_voter_set_records_of_version_1_still_load_and_a_set_without_removals_is_written_as_before():
    """Records and snapshots written before version 2 load with no removed
    disk, and a set with none is written byte for byte as then."""
    old = b'{"voters":[[1,"dir-1-0",["h:1"]],[2,null,[]]]}'
    voters = VoterSet.decode(old)
    assert voters.removed == () and voters.ids == (1, 2)
    assert voters.encode() == old
    old_snapshot = b"KVS1" + len(old).to_bytes(4, "big") + old + b"state"
    assert split_snapshot(old_snapshot) == (voters, b"state")
    removed = voters.without(1)
    assert removed.encode() == b'{"removed":[[1,"dir-1-0"]],"version":2,"voters":[[2,null,[]]]}'
    assert split_snapshot(join_snapshot(removed, b"s")) == (removed, b"s")


@pytest.mark.parametrize(
    "payload",
    [
        b'{"version":2,"voters":[[1,null,[]]],"removed":[]}',  # version 2 names a removal
        b'{"version":3,"voters":[[1,null,[]]],"removed":[[2,"a"]]}',
        b'{"voters":[[1,null,[]]],"removed":[[2,"a"]]}',  # removals without version 2
        b'{"version":2,"voters":[[1,null,[]]],"removed":[[2,null]]}',
        b'{"version":2,"voters":[[1,null,[]]],"removed":[[2,"a"],[2,"a"]]}',
        b'{"version":2,"voters":[[1,"a",[]]],"removed":[[1,"a"]]}',  # a voter is not removed
        b'{"version":2,"voters":[[1,null,[]]],"removed":[[-2,"a"]]}',
        b'{"version":2,"voters":[[1,null,[]]],"removed":[[2,"a b"]]}',
        b'{"version":2,"voters":[[1,null,[]]],"removed":"2"}',
    ],
)
def test_a_version_2_voter_set_payload_is_checked(payload):
    with pytest.raises(ValueError):
        VoterSet.decode(payload)
