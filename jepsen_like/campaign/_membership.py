"""The membership nemesis's choices (KIP-853), apart from the processes it
drives so that they can be tested without any: which voter change comes
next, given the voter set the leader reports, the controllers, the leader
and the controllers that are down. The scenario that carries the changes
out is ``membership`` in ``_scenarios``; docs/nemesis.md describes both.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

#: The kinds of change, as named in the history (``f`` of the nemesis event).
MEMBERSHIP_CHANGES = ("add-voter", "remove-voter", "replace-voter")

#: The nemesis never removes a voter from a set this small: one more
#: removal would leave a single voter, and the next kill would stop the run.
SMALLEST_VOTER_SET = 2


@dataclass(frozen=True, slots=True)
class MembershipMove:
    """One voter change: ``kind`` (one of ``MEMBERSHIP_CHANGES``) of
    controller ``node``."""

    kind: str
    node: int


def choose_membership_move(
    rng: random.Random,
    voters: Sequence[int],
    controllers: Sequence[int],
    leader: int | None,
    down: Collection[int] = (),
    lost_disks: Collection[int] = (),
) -> MembershipMove | None:
    """The next change, drawn from ``rng`` among those that keep a
    majority of every voter set able to commit:

    - add a running controller that is not a voter;
    - remove a voter, the leader included, while more than
      ``SMALLEST_VOTER_SET`` remain;
    - replace a running voter's disk (kill, a new directory formatted with
      ``--join``, remove the old directory id, add the new one) while
      three voters or more remain, never the leader's: the one lost copy
      leaves a majority of the set with its disk.

    ``lost_disks``: voters whose directory id in the set is a disk a
    replacement already destroyed (its removal failed or may not have
    happened). Such a voter can never vote again, so while there is one
    the only change is its removal, as an operator finishing the
    replacement would do: any other removal or replacement could leave the
    set without a live majority for good (a membership campaign did, with
    {1, 4} where voter 1 was a destroyed disk).

    None when nothing fits (no known voter set, or no leader)."""
    if leader is None or not voters:
        return None
    voters = sorted(voters)
    lost = sorted(node for node in voters if node in lost_disks)
    if lost:
        return MembershipMove("remove-voter", rng.choice(lost))
    kinds: list[str] = []
    joiners = [node for node in sorted(controllers) if node not in voters and node not in down]
    if joiners:
        kinds.append("add-voter")
    if len(voters) > SMALLEST_VOTER_SET:
        kinds.append("remove-voter")
    replaceable = [node for node in voters if node != leader and node not in down]
    if len(voters) >= 3 and replaceable:
        kinds.append("replace-voter")
    if not kinds:
        return None
    kind = rng.choice(kinds)
    if kind == "add-voter":
        return MembershipMove(kind, rng.choice(joiners))
    if kind == "remove-voter":
        return MembershipMove(kind, rng.choice(voters))
    return MembershipMove(kind, rng.choice(replaceable))
