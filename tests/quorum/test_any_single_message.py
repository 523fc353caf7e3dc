"""No single message stops a core, whatever its sender claims (issue 15:
no input crashes a node). The wire refuses what does not decode and the
core's range checks drop numbers no layer can hold; this sweeps what is
left: well-formed messages of every kind, in every role a voter can be in,
from the leader, another voter, a non-voter and the receiver's own id, in
the epoch before, the same, the next and the last one storage holds, with
a grid of the fields rules read (leader ids, grants, request ids, offsets,
errors). Each is handed to a fresh cluster's node; it may be answered,
acted on or dropped, but never raise.

The sweep found two messages that stopped a node through its own
invariants (both now dropped, see test_rules_disruption.py): one naming
the receiver as its sender, and a BeginQuorumEpoch from a second winner of
the receiver's epoch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import cluster_with_node_in

from quorum import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Role,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from quorum._types import EPOCH_MAX

ROLES = (Role.LEADER, Role.FOLLOWER, Role.RESIGNED, Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)
NON_VOTER = 4


def _messages(src: int, dst: int, epoch: int, log_end: int) -> Iterator[object]:
    snapshot = SnapshotId(end_offset=1, epoch=1)
    yield BeginQuorumEpochRequest(src=src, dst=dst, epoch=epoch)
    yield BeginQuorumEpochResponse(src=src, dst=dst, epoch=epoch)
    for successors in ((), (dst,), (src, dst)):
        yield EndQuorumEpochRequest(src=src, dst=dst, epoch=epoch, preferred_successors=successors)
    yield EndQuorumEpochResponse(src=src, dst=dst, epoch=epoch)
    for pre_vote in (False, True):
        for last_epoch, end_offset in ((0, 0), (epoch, log_end + 5), (EPOCH_MAX, 10**6)):
            yield VoteRequest(src=src, dst=dst, epoch=epoch, last_epoch=last_epoch, end_offset=end_offset, pre_vote=pre_vote)
        for granted in (False, True):
            for leader_id in (None, src, dst):
                yield VoteResponse(src=src, dst=dst, epoch=epoch, granted=granted, pre_vote=pre_vote, leader_id=leader_id)
    for fetch_offset, last_fetched_epoch in ((0, 0), (log_end, epoch), (log_end + 3, epoch)):
        for request_id in (0, 1):
            yield FetchRequest(
                src=src, dst=dst, epoch=epoch, fetch_offset=fetch_offset, last_fetched_epoch=last_fetched_epoch,
                request_id=request_id,
            )
    for request_id in (1, 2):
        for leader_id in (None, src, dst):
            for high_watermark in (0, log_end + 10):
                for error in (ErrorCode.NONE, ErrorCode.NOT_LEADER, ErrorCode.FENCED_LEADER_EPOCH):
                    yield FetchResponse(
                        src=src, dst=dst, epoch=epoch, request_id=request_id, leader_id=leader_id,
                        high_watermark=high_watermark, error=error,
                    )
        yield FetchSnapshotRequest(src=src, dst=dst, epoch=epoch, snapshot_id=snapshot, position=0, request_id=request_id)
        yield FetchSnapshotResponse(
            src=src, dst=dst, epoch=epoch, request_id=request_id, leader_id=src, snapshot_id=snapshot, size=10, chunk=b"x"
        )


@pytest.mark.parametrize("role", ROLES, ids=[role.value for role in ROLES])
def test_no_single_message_makes_a_core_raise(role):
    cluster, node_id = cluster_with_node_in(role)
    node = cluster.node(node_id)
    epoch, log_end = node.epoch, node.log.end_offset
    other_voter = next(voter for voter in (1, 2, 3) if voter != node_id)
    raised = []
    for src in (other_voter, NON_VOTER, node_id):
        for message_epoch in sorted({max(0, epoch - 1), epoch, epoch + 1, EPOCH_MAX}):
            for message in _messages(src, node_id, message_epoch, log_end):
                fresh, _ = cluster_with_node_in(role)
                try:
                    fresh.node(node_id).step(message)
                except Exception as error:  # noqa: BLE001 (what is asserted: nothing raises)
                    raised.append(f"{message}: {type(error).__name__}: {error}")
    assert raised == [], f"{len(raised)} messages raised, the first: {raised[:3]}"
