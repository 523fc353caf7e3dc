"""KIP-853 auto-join (``controller.quorum.auto.join.enable``), sans-IO: the
decision both worlds run, the trio node (``quorum.cli.auto_join``) and the
simulator (``jepsen_like.sim``).

A node with auto-join asks the leader to add its disk (node id and
directory id) as a voter once it is caught up, and never again once that
disk has been a voter: an operator who removed it meant it. Kafka 4.2's
auto-join re-added such a voter at its next attempt.

"Has been a voter" is sticky and durable. The host persists it (a marker
in the data directory, a flag on the simulated disk) the moment
``AutoJoin.observe`` or ``AutoJoin.answered`` says so, before the node
handles its next input; it comes back with the disk at the next start and
is gone with a wiped disk (a new directory id, a new disk to add). It is
learned these ways, so that a removal cannot slip past it:

- a voter set in the node's log (the base set or any VOTERS record,
  committed or not) holds this disk: a record that added it and a later
  one that removed it may arrive in one fetch, after which the set in
  force never held it;
- a voter set in the node's log names this disk among the removed ones
  (``VoterSet.removed``): a snapshot may cover both the record that added
  it and the one that removed it, and the node then never sees a set that
  held it;
- the leader answers the node's AddVoter: committed (NONE), or refused
  with VOTER_REMOVED, an operator removed this disk (``answered``). The
  node may crash before it fetches the record that added it, or be cut
  off while an operator adds and removes it; the leader, which decides
  every AddVoter and holds the removal in its voter set, refuses an
  auto-join AddVoter for a removed disk, also one already on its way when
  the operator removed it (``QuorumNode.add_voter``);
- the marker on disk at start.

So a node may ask once for a disk an operator removed (it cannot know
before it hears of the removal), but the leader never adds it, and the node
never asks again. KIP-853 does not guard this (Kafka 4.2's auto-join
re-added a removed controller); the simpler guard, the node's own memory
alone, cannot see an add and a removal that a snapshot swallowed before it
fetched them, which is why the leader decides (issue 17).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, ClassVar

from ._messages import ErrorCode

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

    #: The answers to an auto-join AddVoter that say this disk has been a
    #: voter (``answered``): committed, or refused because an operator
    #: removed it. Every other refusal changes nothing; the node asks again.
    DECISIVE_ANSWERS: ClassVar[frozenset[ErrorCode]] = frozenset({ErrorCode.NONE, ErrorCode.VOTER_REMOVED})

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
        if any(
            voters.holds(self.node_id, self.directory_id) or voters.was_removed(self.node_id, self.directory_id)
            for voters in core.voter_sets_in_log
        ):
            self.was_voter = True
            return True
        return False

    def answered(self, code: ErrorCode) -> bool:
        """The leader answered this node's AddVoter with ``code``: NONE (the
        change is committed) and VOTER_REMOVED (an operator removed this
        disk) both mean this disk has been a voter; any other code changes
        nothing (asked again later). True if the caller must now make "was
        a voter" durable (as ``observe``)."""
        if self.was_voter or code not in self.DECISIVE_ANSWERS:
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
