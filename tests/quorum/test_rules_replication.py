"""Pull replication and the high watermark: KIP-595 Fetch, Raft thesis
§3.5 (log replication) and §3.6.2 (committing entries from previous terms)."""

from __future__ import annotations

import dataclasses

import pytest
from harness import (
    FETCH_MAX_WAIT_TICKS,
    FETCH_TIMEOUT_TICKS,
    REQUEST_TIMEOUT_TICKS,
    Cluster,
    Disk,
    assert_committed_agree,
    leader_followed_by_an_observer_only,
    messages_of,
    record,
    records,
)

from quorum import (
    ElectionState,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    OffsetAndEpoch,
    QuorumInvariantError,
    RecordKind,
    Role,
)


def expire_long_polls(cluster: Cluster) -> None:
    """Voters learn a new high watermark with the next records or when
    their parked Fetch expires (Raft thesis §3.5: the commit index rides on
    later AppendEntries), not through a Fetch round trip of its own."""
    cluster.run(FETCH_MAX_WAIT_TICKS)


def leader_view_of(cluster: Cluster, leader: int, replica: int) -> int | None:
    """The end offset the leader believes ``replica`` has acknowledged."""
    description = cluster.node(leader).describe()
    [found] = [r for r in (*description.voters, *description.observers) if r.node_id == replica]
    return found.log_end_offset


def fetch_from(src: int, dst: int, epoch: int, fetch_offset: int, last_fetched_epoch: int) -> FetchRequest:
    return FetchRequest(
        src=src, dst=dst, epoch=epoch, fetch_offset=fetch_offset, last_fetched_epoch=last_fetched_epoch, request_id=99
    )


def test_fetch_returns_the_leaders_records_from_the_fetch_offset():
    """KIP-595 Fetch: the leader answers a valid Fetch with its records
    starting exactly at ``fetch_offset``."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"a", b"b", b"c")  # offsets 1..3

    [response] = messages_of(cluster.inject(fetch_from(3, 1, epoch=1, fetch_offset=2, last_fetched_epoch=1)))

    assert [(entry.offset, entry.data) for entry in response.records] == [(2, b"b"), (3, b"c")]


def test_new_leader_appends_a_leader_change_record_at_the_start_of_its_epoch():
    """KIP-595 LeaderChangeMessage / Raft thesis §6.4: a new leader's first
    act is to append a record of its own epoch (a no-op), at the end of the
    log it won with; it replicates and commits like any other."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"a")
    cluster.deliver_all()
    cluster.crash(1)
    cluster.time_out(3)

    cluster.elect(2)

    leader = cluster.node(2)
    assert leader.epoch_start_offset == 2
    first = leader.log.entry(leader.epoch_start_offset)
    assert (first.kind, first.epoch) == (RecordKind.LEADER_CHANGE, 2)
    expire_long_polls(cluster)
    assert [(e.offset, e.kind, e.epoch) for e in cluster.replica(3).committed if e.offset == 2] == [
        (2, RecordKind.LEADER_CHANGE, 2)
    ]


def test_leader_counts_itself_toward_the_high_watermark_only_once_persisted():
    """Raft thesis §10.2.1 (quorum/_output.py): the leader may replicate
    records before its own disk has them, but counts itself toward the
    majority only for what ``persisted()`` confirmed durable."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.block(1, 3)  # the leader and node 2 must make the majority
    cluster.hold_disk(1)

    cluster.propose(1, b"x")
    cluster.deliver_all()

    assert leader_view_of(cluster, 1, 2) == 2  # node 2 has x durably
    assert cluster.node(1).high_watermark == 1
    cluster.release_disk(1)
    assert cluster.node(1).high_watermark == 2
    assert cluster.committed_data(1) == [b"x"]


def test_single_voter_commits_only_what_its_own_disk_holds():
    """Raft thesis §10.2.1: a single voter is its own majority, so nothing
    commits before ``persisted()`` reports the write durable."""
    cluster = Cluster(1)
    cluster.hold_disk(1)

    cluster.stand(1)
    cluster.propose(1, b"x")

    assert cluster.role(1) is Role.LEADER
    assert (cluster.node(1).high_watermark, cluster.replica(1).committed) == (0, [])
    cluster.release_disk(1)
    assert cluster.node(1).high_watermark == 2
    assert cluster.committed_data(1) == [b"x"]


def test_high_watermark_advances_only_with_a_majority_of_voters():
    """Raft thesis §3.5: a record is committed once the leader knows a
    majority of voters (itself included) store it; fewer is not enough."""
    cluster = Cluster(5)
    cluster.elect(1)
    for other in (3, 4, 5):
        cluster.block(1, other)

    cluster.propose(1, b"x")
    cluster.deliver_all()
    assert (cluster.node(1).high_watermark, leader_view_of(cluster, 1, 2)) == (1, 2)

    cluster.unblock(1, 3)
    cluster.run_until(lambda: leader_view_of(cluster, 1, 3) == 2, limit=3 * REQUEST_TIMEOUT_TICKS)
    assert cluster.node(1).high_watermark == 2


def test_record_of_an_earlier_epoch_on_a_majority_is_not_committed_by_counting():
    """Raft thesis §3.6.2 (Figure 3.7): a leader never commits a record of an
    earlier epoch by counting replicas; it commits it only together with a
    record of its own epoch. Here e2@1 reaches a majority (1, 2, 3) but node
    5 (last epoch 3) could still win and overwrite it."""
    logs = {1: records(1, 2), 2: records(1, 2), 3: records(1), 4: records(1), 5: records(1, 3)}
    disks = {node_id: Disk(ElectionState(epoch=3), log) for node_id, log in logs.items()}
    cluster = Cluster(5, disks=disks, fetch_bytes_max=1)  # one record per response
    cluster.isolate(4)
    cluster.isolate(5)
    cluster.win_election(1)  # epoch 4; LEADER_CHANGE at offset 2
    assert cluster.node(1).epoch_start_offset == 2

    cluster.deliver(FetchRequest, src=3)  # offset 1: gets e2@1
    cluster.deliver(FetchResponse, dst=3)
    cluster.deliver(FetchRequest, src=2)  # offset 2: acknowledges e2@1
    cluster.deliver(FetchRequest, src=3)  # offset 2: acknowledges e2@1

    assert [leader_view_of(cluster, 1, n) for n in (2, 3)] == [2, 2]
    assert cluster.node(1).high_watermark == 0
    assert all(replica.committed == [] for replica in cluster.replicas.values())

    cluster.deliver(FetchResponse)  # the LEADER_CHANGE record, to 2 and 3
    cluster.deliver(FetchRequest)  # offset 3: acknowledges it
    assert cluster.node(1).high_watermark == 3
    assert [(e.offset, e.epoch) for e in cluster.replica(1).committed] == [(0, 1), (1, 2), (2, 4)]


def test_high_watermark_never_moves_backwards():
    """KIP-595: a node's high watermark is monotonic. A follower that hears
    a lower one (here from a freshly restarted leader, which knows none yet)
    keeps its own and commits nothing twice."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"a", b"b")
    cluster.deliver_all()
    expire_long_polls(cluster)
    assert cluster.node(2).high_watermark == 3
    cluster.crash(3)
    cluster.restart(3)  # remembers nothing of the high watermark
    cluster.crash(1)
    cluster.drop()
    cluster.time_out(2)
    mark = cluster.mark()

    cluster.elect(3)

    assert any(line.startswith("3->2 FetchResp e2") and "hw=0" in line for line in cluster.transcript_since(mark))
    watermarks = cluster.replica(2).high_watermarks
    assert watermarks == sorted(watermarks)
    offsets = [entry.offset for entry in cluster.replica(2).committed]
    assert offsets == sorted(set(offsets))
    expire_long_polls(cluster)
    assert cluster.node(2).high_watermark == 4


def test_observer_fetches_never_count_toward_the_high_watermark():
    """KIP-595: only voters make a majority; an observer replicates the log
    but its acknowledgements commit nothing."""
    cluster = leader_followed_by_an_observer_only()

    cluster.propose(1, b"x")
    cluster.deliver_all()
    # An observer is sent a record before it is committed only when its
    # long poll ends (issue 21): let it end.
    config = cluster.node(1).config
    cluster.tick(1, times=config.ticks(config.fetch_max_wait_ms))
    cluster.deliver_all()

    assert leader_view_of(cluster, 1, 4) == 2
    assert cluster.node(1).high_watermark == 1


def test_diverging_follower_truncates_to_the_fork_and_converges():
    """KIP-595 (KIP-101 style divergence): the leader answers a Fetch whose
    last epoch it does not share with the end of that epoch in its log; the
    follower truncates there and fetches again until the logs are equal."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.isolate(1)
    cluster.propose(1, b"lost-1", b"lost-2")  # only node 1 will ever hold these
    cluster.run_until(lambda: any(cluster.node(n).is_leader for n in (2, 3)))
    [leader] = [n for n in (2, 3) if cluster.node(n).is_leader]
    cluster.propose(leader, b"kept")
    cluster.deliver_all()
    mark = cluster.mark()

    cluster.heal()
    cluster.run_until(lambda: cluster.log_entries(1) == cluster.log_entries(leader))

    assert any(line.startswith(f"{leader}->1 FetchResp") and "diverging=e1@1" in line for line in cluster.transcript_since(mark))
    cluster.run_until(lambda: cluster.node(1).high_watermark == cluster.node(leader).high_watermark)
    assert cluster.committed_data(1)[-1:] == [b"kept"]
    assert b"lost-1" not in cluster.committed_data(1)
    assert_committed_agree(cluster)


def test_follower_never_truncates_below_its_high_watermark():
    """Raft thesis §3.6.3 (Leader Completeness): committed records are never
    removed. A (forged) divergence that would cut below the follower's high
    watermark is a broken invariant, not an instruction."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"a", b"b")
    cluster.deliver_all()
    expire_long_polls(cluster)
    assert cluster.node(2).high_watermark == 3
    in_flight = cluster.sent(2, FetchRequest)[-1]
    forged = FetchResponse(
        src=1, dst=2, epoch=1, request_id=in_flight.request_id, leader_id=1, high_watermark=3,
        diverging=OffsetAndEpoch(epoch=1, offset=1),
    )

    with pytest.raises(QuorumInvariantError):
        cluster.inject(forged)


def test_fetch_with_nothing_to_return_is_parked_until_records_are_appended():
    """KIP-595 long poll: the leader holds a Fetch that is up to date and
    answers it as soon as there is something new."""
    cluster = Cluster(3)
    cluster.elect(1)
    assert cluster.pending() == []  # both followers' Fetches are parked

    first, output = cluster.node(1).propose([b"x"])
    cluster.handle(1, output)

    answers = [m for m in messages_of(output) if isinstance(m, FetchResponse)]
    assert sorted(m.dst for m in answers) == [2, 3]
    assert all([entry.offset for entry in m.records] == [first] for m in answers)


def test_parked_fetch_is_answered_empty_once_fetch_max_wait_passes():
    """KIP-595 long poll (fetch.max.wait.ms): a parked Fetch is answered,
    empty, exactly when its maximum wait is over: not earlier."""
    cluster = Cluster(3)
    cluster.elect(1)

    cluster.tick(1, times=FETCH_MAX_WAIT_TICKS - 1)
    assert cluster.pending(FetchResponse) == []
    cluster.tick(1)

    answers = cluster.pending(FetchResponse)
    assert sorted(m.dst for m in answers) == [2, 3]
    assert all(m.records == () and m.error is ErrorCode.NONE for m in answers)


def test_not_leader_response_names_the_leader():
    """KIP-595: a voter that is not the leader answers a Fetch with
    NOT_LEADER_OR_FOLLOWER and the leader it knows."""
    cluster = Cluster(3)
    cluster.elect(2)

    [response] = messages_of(cluster.inject(fetch_from(3, 1, epoch=1, fetch_offset=0, last_fetched_epoch=0)))

    assert (response.error, response.epoch, response.leader_id) == (ErrorCode.NOT_LEADER, 1, 2)


def test_observer_finds_the_leader_through_a_voters_answer():
    """KIP-595 observers: an observer that knows no leader fetches from a
    voter; the answer names the leader, and the observer follows it."""
    cluster = Cluster(3, observers=(4,))
    cluster.elect(2)
    mark = cluster.mark()

    cluster.tick(4)
    cluster.deliver_all()

    transcript = cluster.transcript_since(mark)
    assert transcript[0].startswith("4->1 Fetch")
    assert transcript[1].startswith("1->4 FetchResp e1 #1") and transcript[1].endswith("leader=2")
    assert all(line.startswith(("4->2 Fetch", "2->4 FetchResp")) for line in transcript[2:])
    assert (cluster.role(4), cluster.node(4).leader_id) == (Role.FOLLOWER, 2)
    assert cluster.log_entries(4) == cluster.log_entries(2)


def test_observer_asks_the_next_voter_when_the_one_it_asked_is_unreachable():
    """KIP-595 observers ask the voters in turn. Regression (simulator,
    broker-stampede seed 1): an observer whose turn had come to a dead
    voter heard "connection refused" for every Fetch, which cleared the
    request before its deadline could move the turn on, and asked the dead
    voter forever; after a controller failover those brokers never found
    the new leader."""
    cluster = Cluster(3, observers=(4,))
    cluster.elect(2)
    cluster.crash(1)  # the observer's first turn

    for _ in range(300):
        cluster.tick(2, 3, 4)
        for _request in cluster.drop(FetchRequest, src=4, dst=1):
            # What the transport reports when the connection is refused.
            cluster.handle(4, cluster.node(4).peer_unreachable(1))
        cluster.deliver_all()
        if cluster.role(4) is Role.FOLLOWER:
            break

    assert (cluster.role(4), cluster.node(4).leader_id) == (Role.FOLLOWER, 2)


def test_follower_acknowledges_only_records_its_disk_holds():
    """KIP-595: a Fetch's offset acknowledges every record below it, so a
    follower never sends one before those records are durable."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.hold_disk(2)

    cluster.propose(1, b"x")
    cluster.deliver_all()
    assert cluster.node(2).log.end_offset == 2
    assert leader_view_of(cluster, 1, 2) == 1

    cluster.release_disk(2)
    cluster.deliver_all()
    assert leader_view_of(cluster, 1, 2) == 2


def test_follower_ignores_records_that_do_not_continue_its_log():
    """Raft thesis §3.5 (log matching): a follower appends only records that
    start exactly at its log end; anything else is dropped and re-fetched."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"x")
    response = cluster.take_one(FetchResponse, dst=2)

    cluster.inject(dataclasses.replace(response, records=(record(5, 1),)))

    assert [entry.offset for entry in cluster.log_entries(2)] == [0]


def test_follower_stands_exactly_when_its_fetch_timeout_expires():
    """KIP-595 (controller.quorum.fetch.timeout.ms): a follower that has not
    completed a Fetch for the fetch timeout stands for election; not before."""
    cluster = Cluster(3)
    cluster.elect(1)  # node 2 last heard from node 1 at its tick 0

    waited = cluster.tick_until(2, lambda node: node.role is not Role.FOLLOWER)

    assert waited == FETCH_TIMEOUT_TICKS
    assert cluster.role(2) is Role.PROSPECTIVE


def test_unanswered_fetch_is_sent_again_after_max_wait_plus_request_timeout():
    """KIP-595 (request.timeout.ms): a Fetch whose answer is lost is sent
    again once the leader's maximum wait and the request timeout have both
    passed; earlier, the leader may still be holding it."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"x")
    cluster.drop(FetchResponse, dst=2)
    retry_after = FETCH_MAX_WAIT_TICKS + REQUEST_TIMEOUT_TICKS

    cluster.tick(2, times=retry_after - 1)
    assert cluster.pending(FetchRequest, src=2) == []
    cluster.tick(2)

    [retry] = cluster.pending(FetchRequest, src=2)
    assert retry.fetch_offset == 1


def test_healthy_cluster_keeps_its_leader():
    """Raft thesis §3.4: servers remain followers as long as they hear from
    a valid leader; no timer fires in a healthy cluster."""
    cluster = Cluster(3)
    cluster.elect(1)
    events_before = {n: len(cluster.replica(n).events) for n in (1, 2, 3)}

    cluster.run(2000)

    assert cluster.leaders() == [1]
    assert {n: len(cluster.replica(n).events) for n in (1, 2, 3)} == events_before


def test_voters_learn_the_high_watermark_with_the_next_records_observers_once_it_moves():
    """Raft thesis §3.5: followers learn the commit index from later
    AppendEntries. A voter's acknowledging Fetch that commits records is
    parked like any caught-up Fetch (no extra round trip per write); its
    next records carry the new high watermark. An observer (a broker) is
    answered as soon as the high watermark moves, with the records it
    commits: one answer per commit (issue 21)."""
    cluster = Cluster(3, observers=(4,))
    cluster.elect(1)
    cluster.tick(4)
    cluster.deliver_all()
    mark = cluster.mark()

    cluster.propose(1, b"a")
    cluster.deliver_all()

    responses = [line for line in cluster.transcript_since(mark) if " FetchResp " in line]
    assert sorted(line.split()[0] for line in responses if "records=" in line) == ["1->2", "1->3", "1->4"]
    assert [line.split()[0] for line in responses if "records=" not in line] == []
    assert cluster.node(1).high_watermark == 2
    assert (cluster.node(2).high_watermark, cluster.node(4).high_watermark) == (1, 2)

    cluster.propose(1, b"b")
    cluster.deliver(FetchResponse, dst=2)

    assert cluster.node(2).high_watermark == 2
    assert cluster.committed_data(2) == [b"a"]
