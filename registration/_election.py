"""Partition leader election: one partition, one decision, as a record.

The rules are Kafka's (``PartitionChangeBuilder``, without KIP-966 ELR; seed
004 section A "select the new leader from the ISR"):

- the broker being removed leaves the ISR, unless it is the last member: an
  ISR is never written empty, and the partition is then offline (leader -1)
  until that broker comes back;
- the current leader stays if it is still acceptable and in the ISR;
- otherwise the new leader is the first replica, in assignment order, that is
  in the ISR and acceptable (online);
- otherwise, only where the topic allows unclean election, the first
  acceptable replica at all, with the ISR reset to it alone (data may be
  lost: Kafka's ``unclean.leader.election.enable``);
- otherwise no leader.
"""

from __future__ import annotations

from collections.abc import Callable

from ._image import PartitionState
from ._records import LEADER_UNCHANGED, NO_LEADER, PartitionChangeRecord


#: A ``PartitionChangeRecord`` as its field values, in field order: topic
#: id, partition id, isr (None: unchanged), leader, replicas (None).
PartitionChange = tuple[str, int, tuple[int, ...] | None, int, None]


def elect_leader(
    partition: PartitionState,
    *,
    is_acceptable: Callable[[int], bool],
    removing: int | None = None,
    unclean_allowed: bool = False,
) -> PartitionChangeRecord | None:
    """The change that applies the rules above to ``partition``, or None
    when nothing changes.

    ``is_acceptable(broker_id)`` says whether a broker may lead (online, or
    the broker being unfenced); ``removing`` is the broker leaving the ISR
    (fenced, stopping, bounced or unregistered).
    """
    values = election_change(partition, is_acceptable, removing, unclean_allowed)
    if values is None:
        return None
    topic_id, partition_id, isr, leader, _replicas = values
    return PartitionChangeRecord(topic_id=topic_id, partition_id=partition_id, isr=isr, leader=leader)


def election_change(
    partition: PartitionState,
    is_acceptable: Callable[[int], bool],
    removing: int | None,
    unclean_allowed: bool,
) -> PartitionChange | None:
    """``elect_leader``'s change as the ``PartitionChangeRecord``'s field
    values (topic id, partition id, isr, leader, replicas), or None: for
    callers that encode and apply it without the record object
    (``encode_partition_changes``, ``ClusterImage.apply_partition_changes``;
    a fence makes 10,000)."""
    isr = partition.isr
    if removing is not None and removing in isr and len(isr) > 1:
        at = isr.index(removing)  # ids in an ISR are distinct
        isr = isr[:at] + isr[at + 1 :]
    leader = partition.leader
    if leader == NO_LEADER or leader == removing or leader not in isr or not is_acceptable(leader):
        leader = NO_LEADER
        for broker_id in partition.replicas:
            if broker_id in isr and broker_id != removing and is_acceptable(broker_id):
                leader = broker_id
                break
        else:
            if unclean_allowed:
                for broker_id in partition.replicas:
                    if broker_id != removing and is_acceptable(broker_id):
                        leader, isr = broker_id, (broker_id,)
                        break
    if leader == partition.leader and isr == partition.isr:
        return None
    return (
        partition.topic_id,
        partition.partition_id,
        None if isr == partition.isr else isr,
        LEADER_UNCHANGED if leader == partition.leader else leader,
        None,
    )
