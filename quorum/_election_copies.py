"""Which copy of the election state to trust at a start: the rule both
worlds share (``quorum.storage.ElectionStateFile`` on real files, the
simulator's ``SimDisk`` in memory). Sans-IO: it compares what was read.

The election state is kept twice, as a **primary** and a **witness**, each
stamped with a ``generation`` that grows by one at every write. A write
replaces the primary durably, then the witness durably, and only then does
anything that depends on the new state leave the node (a vote, an epoch
announcement: Raft thesis §3.8). Two facts follow, and the rule rests on
them:

* the primary is never behind the witness (it is written first), except
  after a fault that rolled the primary back;
* every state any message ever depended on is in **both** copies (the
  message waited for the second write). A crash between the two writes
  leaves the primary one generation ahead with a state nobody heard of.

So a copy older than the other one was rolled back (or lost the last write
of a crash), and the newer copy is the truth. What no local rule can see is
both copies rolled back together (a whole file system restored): the log
cross-check (``rolled_back_by_log``) catches it only when the log already
holds a later epoch (docs/storage.md, "Election state rolled back").
"""

from __future__ import annotations

from dataclasses import dataclass

from ._errors import QuorumError
from ._types import ElectionState


@dataclass(frozen=True, slots=True)
class ElectionCopy:
    """One stored copy: its generation (0 for a file written before
    generations existed) and the state it holds."""

    generation: int
    state: ElectionState


@dataclass(frozen=True, slots=True)
class ElectionChoice:
    """What a start uses: ``copy``; ``stale``: the names of the copies
    ("primary", "witness") to write again from it; ``finding``: what was
    found, for one log line (None when the copies agree)."""

    copy: ElectionCopy
    stale: tuple[str, ...] = ()
    finding: str | None = None


class UndecidableElectionStateError(QuorumError):
    """The copies disagree in a way no rule can settle (for instance one
    generation holding two different states); the node must refuse."""


def choose_election_copy(primary: ElectionCopy, witness: ElectionCopy | str | None) -> ElectionChoice:
    """The copy to trust, given an intact ``primary`` and the ``witness``
    (a copy, None when there is none, or a string saying why it is damaged).

    A missing or damaged primary is the caller's to refuse: the witness may
    lag the primary by the last write of a crash, so it cannot stand in for
    a primary that is gone. Raises ``UndecidableElectionStateError``.
    """
    if witness is None:
        if primary.generation == 0:
            # A data directory from before the witness existed: nothing was
            # lost, the witness is written now.
            return ElectionChoice(primary, ("witness",), "no witness yet (written before witnesses existed): writing one")
        return ElectionChoice(
            primary, ("witness",), f"the witness is missing; the primary (generation {primary.generation}) is never behind it"
        )
    if isinstance(witness, str):
        return ElectionChoice(
            primary,
            ("witness",),
            f"the witness is damaged ({witness}); the primary (generation {primary.generation}) is never behind it",
        )
    if primary.generation == witness.generation:
        if primary.state != witness.state:
            raise UndecidableElectionStateError(
                f"both copies claim generation {primary.generation} but hold different states "
                f"({_describe(primary.state)} and {_describe(witness.state)})"
            )
        return ElectionChoice(primary)
    if primary.generation == witness.generation + 1:
        return ElectionChoice(
            primary,
            ("witness",),
            f"the witness is one generation behind ({witness.generation} < {primary.generation}): a write interrupted "
            f"between the two copies, before anything depended on it",
        )
    if primary.generation > witness.generation:
        return ElectionChoice(
            primary,
            ("witness",),
            f"the witness was rolled back to generation {witness.generation} ({_describe(witness.state)}); "
            f"keeping the primary's generation {primary.generation} ({_describe(primary.state)})",
        )
    return ElectionChoice(
        witness,
        ("primary",),
        f"the primary was rolled back to generation {primary.generation} ({_describe(primary.state)}); "
        f"taking the witness's generation {witness.generation} ({_describe(witness.state)})",
    )


def rolled_back_by_log(state: ElectionState, log_last_epoch: int) -> str | None:
    """Why ``state`` must be a rolled-back copy, or None: a node persists an
    epoch before it appends or installs anything of that epoch, so a log
    (or snapshot) whose last epoch is above the stored epoch proves the
    state went back in time."""
    if log_last_epoch > state.epoch:
        return f"the log holds records of epoch {log_last_epoch}, above the stored epoch {state.epoch}"
    return None


def _describe(state: ElectionState) -> str:
    return f"epoch {state.epoch}, voted for {state.voted_for}, leader {state.leader_id}"
