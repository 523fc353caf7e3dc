"""KIP-853 auto-join (``controller.quorum.auto.join.enable``), sans-IO: the
decision both worlds run, the trio node (``quorum.cli.auto_join``) and the
simulator (``jepsen_like.sim``).

A node with auto-join asks the leader to add its disk (node id and
directory id) as a voter once it is caught up, and never again once that
disk has been a voter: an operator who removed it meant it. Kafka 4.2's
auto-join re-added such a voter at its next attempt.

"Has been a voter" is sticky and durable. The host persists it (a marker
in the data directory, a flag on the simulated disk) the moment
``AutoJoin.observe`` or ``AutoJoin.joined`` says so, before the node
handles its next input; it comes back with the disk at the next start and
is gone with a wiped disk (a new directory id, a new disk to add). It is
learned three ways, so that a removal cannot slip past it:

- a voter set in the node's log (the base set or any VOTERS record,
  committed or not) holds this disk: a record that added it and a later
  one that removed it may arrive in one fetch, after which the set in
  force never held it;
- the node's own AddVoter was committed (``joined``): the node may crash
  before it fetches the record that added it, and by the time it is back
  a snapshot may cover both that record and its removal;
- the marker on disk at start.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._node import QuorumNode


class AutoJoinAction(enum.Enum):
    """What auto-join does now."""

    #: This disk is a voter (and is remembered as one).
    VOTER = "voter"
    #: This disk was a voter and is not: never added again by auto-join.
    REMOVED = "removed"
    #: The voter set holds this node id with another directory: an operator
    #: removes that one first (a wiped voter's old disk).
    ID_TAKEN = "id-taken"
    #: No known leader, a log under repair, or not caught up yet.
    WAIT = "wait"
    #: Ask the leader to add this disk.
    JOIN = "join"


class AutoJoin:
    """One node's auto-join state: its id, its disk's directory id, and
    whether that disk has been a voter (``was_voter``, read from the
    durable marker at start). Pure: reads the core, does no IO."""

    __slots__ = ("node_id", "directory_id", "was_voter")

    def __init__(self, node_id: int, directory_id: str | None, *, was_voter: bool) -> None:
        self.node_id = node_id
        self.directory_id = directory_id
        self.was_voter = was_voter

    def observe(self, core: QuorumNode) -> bool:
        """Look at the voter sets in ``core``'s log. True exactly once, the
        first time one of them holds this disk: the caller must then make
        "was a voter" durable before the node handles its next input. Call
        it after every change of the node's log, or at least of its voter
        set, and at start."""
        if self.was_voter:
            return False
        if any(voters.holds(self.node_id, self.directory_id) for voters in core.voter_sets_in_log):
            self.was_voter = True
            return True
        return False

    def joined(self) -> bool:
        """The leader answered that this node's AddVoter was committed. True
        if the caller must now make "was a voter" durable (as ``observe``)."""
        if self.was_voter:
            return False
        self.was_voter = True
        return True

    def action(self, core: QuorumNode) -> AutoJoinAction:
        """What to do now, from ``core``'s view (after ``observe``)."""
        if core.is_voter:
            return AutoJoinAction.VOTER
        if self.was_voter:
            return AutoJoinAction.REMOVED
        if self.node_id in core.voters:
            return AutoJoinAction.ID_TAKEN
        if core.leader_id is None or core.repairing is not None or core.log.end_offset < core.high_watermark:
            return AutoJoinAction.WAIT
        return AutoJoinAction.JOIN
