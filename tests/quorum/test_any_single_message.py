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

import pytest
from harness import cluster_with_node_in, messages_of_every_kind

from quorum import Role
from quorum._types import EPOCH_MAX

ROLES = (Role.LEADER, Role.FOLLOWER, Role.RESIGNED, Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)
NON_VOTER = 4


@pytest.mark.parametrize("role", ROLES, ids=[role.value for role in ROLES])
def test_no_single_message_makes_a_core_raise(role):
    cluster, node_id = cluster_with_node_in(role)
    node = cluster.node(node_id)
    epoch, log_end = node.epoch, node.log.end_offset
    other_voter = next(voter for voter in (1, 2, 3) if voter != node_id)
    raised = []
    for src in (other_voter, NON_VOTER, node_id):
        for message_epoch in sorted({max(0, epoch - 1), epoch, epoch + 1, EPOCH_MAX}):
            for message in messages_of_every_kind(src, node_id, message_epoch, log_end):
                fresh, _ = cluster_with_node_in(role)
                try:
                    fresh.node(node_id).step(message)
                except Exception as error:  # noqa: BLE001 (what is asserted: nothing raises)
                    raised.append(f"{message}: {type(error).__name__}: {error}")
    assert raised == [], f"{len(raised)} messages raised, the first: {raised[:3]}"
