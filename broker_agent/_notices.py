"""What a broker tells the service that embeds it: its role for each
partition it replicates, and its own state changes (``leadership_changes``).

Plain values, sans-IO; the trio agent (``_agent``) yields them.
"""

from __future__ import annotations

from dataclasses import dataclass

from registration import BrokerState


class PartitionRole:
    LEADER = "leader"
    FOLLOWER = "follower"
    NONE = "none"  # not a replica any more, or the broker is not Online


@dataclass(frozen=True, slots=True)
class LeadershipChange:
    """This broker's role for one partition changed. ``leader_epoch`` is the
    fencing token a leader stamps on what it writes: a store that refuses
    any epoch below the highest it has seen refuses a deposed leader."""

    topic: str
    partition: int
    role: str  # PartitionRole
    leader_epoch: int
    leader_id: int
    image_offset: int


@dataclass(frozen=True, slots=True)
class BrokerStateNotice:
    """The broker's own state changed (Fenced: stop acting as a leader now)."""

    state: BrokerState
    broker_epoch: int | None
    reason: str


#: What ``Broker.leadership_changes()`` yields.
BrokerNotice = LeadershipChange | BrokerStateNotice
