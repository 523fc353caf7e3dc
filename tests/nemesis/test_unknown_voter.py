"""A process claiming a voter id the cluster does not have (issue 15, found
by the hostile-clients nemesis's ``unknown-voter`` attack), over real TCP:
the core refuses every message only voters send when it comes from another
id (quorum/_node.py ``_epoch_prologue``; the sans-IO rules are in
tests/quorum/test_rules_disruption.py)."""

from __future__ import annotations

import pytest
import trio

from jepsen_like.nemesis import HostileStats
from jepsen_like.nemesis._hostile import UNKNOWN_VOTER_ID, forged_frame, one_shot
from test_hostile import CLUSTER, good_writes, start_cluster, target_of

# Type code and body of a quorum message from voter id 4242 (no such voter)
# to node ``dst`` claiming epoch ``epoch`` (docs/protocol.md field order).
_FROM_A_NON_VOTER = {
    "BeginQuorumEpochRequest": lambda dst, epoch: (3, [UNKNOWN_VOTER_ID, dst, epoch]),
    "EndQuorumEpochRequest": lambda dst, epoch: (5, [UNKNOWN_VOTER_ID, dst, epoch, []]),
    "VoteResponse": lambda dst, epoch: (2, [UNKNOWN_VOTER_ID, dst, epoch, False, False, None, 0]),
}


@pytest.mark.parametrize("kind", sorted(_FROM_A_NON_VOTER))
async def test_a_quorum_message_from_an_unknown_voter_id_does_not_depose_the_leader(tmp_path, kind):
    """Issue 15 ("a process claiming an unknown voter id"). Before the fix
    the core's epoch prologue refused only a Vote from a non-voter: a
    BeginQuorumEpoch, an EndQuorumEpoch or a VoteResponse from one with a
    later epoch moved the leader into that epoch, and after a
    BeginQuorumEpoch every node named voter 4242 as its leader until an
    election. One frame deposed a healthy leader; now it moves nothing."""
    async with trio.open_nursery() as nursery:
        handles, stop = await start_cluster(nursery, tmp_path)
        leader = next(handle for handle in handles if handle.is_leader)
        epoch = leader.runtime.node.epoch
        type_code, body = _FROM_A_NON_VOTER[kind](leader.node_id, epoch + 1)
        stats = HostileStats(kind)
        with trio.fail_after(20):
            # The node reads the frame within the half second one_shot
            # waits for an answer (none comes: it is dropped, or obeyed).
            await one_shot(target_of(handles, leader), stats, forged_frame(type_code, body, CLUSTER), wait_s=0.5)
        assert stats.connections == 1
        assert [handle.runtime.node.epoch for handle in handles] == [epoch] * len(handles), kind
        assert leader.is_leader and all(handle.runtime.node.leader_id == leader.node_id for handle in handles)
        with trio.fail_after(20):
            # A good write after it commits in the same epoch.
            await good_writes(leader, 1)
        assert leader.runtime.node.epoch == epoch
        stop.set()
