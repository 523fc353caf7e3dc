"""Snapshots: KIP-630 (FetchSnapshot) on top of KIP-595 replication."""

from __future__ import annotations

import pytest
from harness import Cluster, Disk, assert_committed_agree, records

from quorum import (
    ElectionState,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Role,
    SnapshotId,
)

STATE = b"0123456789"  # ten bytes: three chunks of at most four


def cluster_with_node_3_left_behind(**overrides) -> Cluster:
    """Node 1 leads; nodes 1 and 2 commit three records node 3 never sees;
    node 1 snapshots them (keeping no record behind the snapshot)."""
    cluster = Cluster(3, snapshot_retained_records=0, snapshot_chunk_bytes_max=4, **overrides)
    cluster.elect(1)
    cluster.block(1, 3)
    cluster.propose(1, b"a", b"b", b"c")
    cluster.deliver_all()
    cluster.take_snapshot(1, data=STATE)
    cluster.heal()
    return cluster


def fetch_snapshot_lines(transcript: list[str]) -> list[str]:
    return [line for line in transcript if " FetchSnap" in line]


def test_snapshot_drops_the_records_it_covers_except_the_retained_ones():
    """KIP-630: once the state machine snapshotted offsets below N, the log
    may forget them, keeping ``snapshot_retained_records`` behind N for
    followers slightly behind; the snapshot and the deletion are persisted."""
    cluster = Cluster(1, snapshot_retained_records=2)
    cluster.elect(1)
    cluster.propose(1, *(b"%d" % i for i in range(10)))  # offsets 1..10

    output = cluster.handle(1, cluster.node(1).snapshot_taken(SnapshotId(8, 1), b"state"))

    assert (output.snapshot, output.delete_before) == ((SnapshotId(8, 1), b"state"), 6)
    assert cluster.node(1).log.start_offset == 6
    disk = cluster.replica(1).disk
    assert (disk.snapshot.snapshot_id, disk.log.start_offset, disk.log.end_offset) == (SnapshotId(8, 1), 6, 11)


def test_snapshot_must_cover_committed_records_only():
    """KIP-630: a snapshot is of the state machine, which holds committed
    records only: a snapshot beyond the high watermark is refused."""
    cluster = Cluster(1)
    cluster.elect(1)
    cluster.hold_disk(1)
    cluster.propose(1, b"uncommitted")

    with pytest.raises(ValueError):
        cluster.node(1).snapshot_taken(SnapshotId(2, 1), b"state")


def test_follower_behind_the_log_start_downloads_the_snapshot_in_chunks_then_fetches():
    """KIP-630: a Fetch below the leader's log start is answered with the
    snapshot id; the follower downloads it chunk by chunk with FetchSnapshot,
    installs it (log reset, state machine reloaded) and fetches records from
    its end."""
    cluster = cluster_with_node_3_left_behind()
    snapshot_id = SnapshotId(4, 1)
    mark = cluster.mark()

    cluster.run_until(lambda: bool(cluster.replica(3).loaded_snapshots), limit=400)
    cluster.propose(1, b"after")
    cluster.deliver_all()

    transcript = cluster.transcript_since(mark)
    assert any(line.startswith("1->3 FetchResp") and "snapshot=4" in line for line in transcript)
    assert [line.split(" ", 4)[-1] for line in fetch_snapshot_lines(transcript)] == [
        "snapshot=4 pos=0", "pos=0 +4/10", "snapshot=4 pos=4", "pos=4 +4/10", "snapshot=4 pos=8", "pos=8 +2/10",
    ]
    [installing] = [output for output in cluster.replica(3).outputs if output.snapshot_loaded]
    assert installing.reset_log and installing.snapshot == (snapshot_id, STATE)
    assert cluster.replica(3).loaded_snapshots == [(snapshot_id, STATE)]
    disk = cluster.replica(3).disk
    assert (disk.snapshot.snapshot_id, disk.log.start_offset) == (snapshot_id, 4)
    assert [entry.data for entry in cluster.log_entries(3)] == [b"after"]


def test_snapshot_not_found_restarts_the_download_from_a_plain_fetch():
    """KIP-630: when the leader replaced the snapshot being downloaded it
    answers SNAPSHOT_NOT_FOUND; the follower starts over with a Fetch, learns
    the new snapshot id and installs that one only."""
    cluster = cluster_with_node_3_left_behind()
    cluster.tick_until(3, lambda node: bool(cluster.pending(FetchRequest, src=3)))
    for kind in (FetchRequest, FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse):
        cluster.deliver(kind)  # node 3 now holds the first chunk of snapshot 4
    assert [m.position for m in cluster.pending(FetchSnapshotRequest, src=3)] == [4]
    cluster.propose(1, b"d")
    cluster.deliver_all(where=lambda message: 3 not in (message.src, message.dst))
    newer = cluster.take_snapshot(1)
    mark = cluster.mark()

    cluster.run_until(lambda: bool(cluster.replica(3).loaded_snapshots), limit=400)

    assert newer == SnapshotId(5, 1)
    assert any("SNAPSHOT_NOT_FOUND" in line for line in cluster.transcript_since(mark))
    assert [snapshot_id for snapshot_id, _ in cluster.replica(3).loaded_snapshots] == [newer]
    assert cluster.node(3).log.start_offset == 5


def test_follower_does_not_commit_its_own_records_on_a_snapshot_answer():
    """Raft thesis §3.6.3 (State Machine Safety) and §3.5 (a follower's
    commit index is bounded by what the leader's consistency check
    validated): an answer that only says "fetch my snapshot" validates
    nothing in the follower's log, so it must not commit the follower's
    records from the high watermark it carries. Here node 3 holds records of
    a lost epoch-2 leadership, below the leader's log start."""
    stale_leader = Disk(ElectionState(epoch=2, voted_for=3, leader_id=3), records(1, 1, 2, 2, 2))
    disks = {1: Disk(ElectionState(epoch=2), records(1, 1)), 2: Disk(ElectionState(epoch=2), records(1, 1)), 3: stale_leader}
    cluster = Cluster(3, disks=disks, down=(3,), snapshot_retained_records=0)
    cluster.elect(1)  # epoch 3; LEADER_CHANGE at offset 2
    cluster.propose(1, b"a", b"b", b"c", b"d", b"e")
    cluster.deliver_all()
    cluster.take_snapshot(1)  # log start 8
    cluster.restart(3)

    cluster.run_until(lambda: bool(cluster.replica(3).loaded_snapshots), limit=1000)

    assert cluster.role(3) is Role.FOLLOWER
    assert_committed_agree(cluster)
