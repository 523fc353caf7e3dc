"""The role-transition table of the core: every role change a ``QuorumNode``
may make, and what triggers it.

``QuorumNode`` routes every change of role through one method that looks
the change up here and raises ``QuorumInvariantError`` when the table has no
such row, so the table is the code's own description of itself. The same
rows draw the state diagram in ``docs/raft.md`` (``python -m
quorum.diagram``), so the diagram cannot drift from the code.

The rows follow KIP-595's state machine, with KIP-996's Prospective role and
KAFKA-15489's check quorum. ``None`` as the source is the process starting
(the role it recovers into from its durable election state).

What the table guarantees, by omission: no row enters Leader except from
Candidate on a won election (a leader is always elected, Raft thesis §3.4);
no row leaves Resigned for Leader (a resigned leader leads again only after
a new election, in a later epoch); an observer, which never times out into
an election (``QuorumNode._stand``), only ever takes rows into Unattached
and Follower. Each role's state object (``_role_state.py``) is made on the
row's target and dropped on the next row taken.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ._output import Role


class Trigger(enum.Enum):
    """Why a node changes role. The RoleChange event's ``reason`` says the
    particulars (which peer, which epoch); the trigger is the rule."""

    START = "process start"
    ELECTION_TIMEOUT = "election timeout"
    FETCH_TIMEOUT = "fetch timeout"
    WON_PRE_VOTE = "won the pre-vote"
    LOST_PRE_VOTE = "lost the pre-vote"
    WON_ELECTION = "won the election"
    LATER_EPOCH = "later epoch seen"
    GRANTED_VOTE = "granted a vote"
    LEADER_FOUND = "learned the leader"
    LEADER_RESIGNED = "leader resigned"
    CHECK_QUORUM = "check quorum"
    RESIGN_REQUESTED = "resign requested"
    HANDED_OVER = "handed over"


@dataclass(frozen=True, slots=True)
class RoleTransition:
    """One allowed change: ``source`` (None: the process starts) to
    ``target`` on ``trigger``; ``rule`` says where the rule comes from."""

    source: Role | None
    target: Role
    trigger: Trigger
    rule: str


# Short names keep each row on one line, so the table reads as a table.
_U, _P, _C, _L, _F, _R = Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE, Role.LEADER, Role.FOLLOWER, Role.RESIGNED
_ALL_ROLES = (_U, _P, _C, _L, _F, _R)

ROLE_TRANSITIONS: tuple[RoleTransition, ...] = (
    # Recovery from the durable election state (KIP-595 QuorumState.initialize).
    RoleTransition(None, _U, Trigger.START, "no leader recorded, or the log is ahead of the election state"),
    RoleTransition(None, _F, Trigger.START, "another node recorded as leader of the epoch"),
    RoleTransition(None, _R, Trigger.START, "led this epoch before the restart: never lead it again"),
    # Standing for election: pre-vote first (KIP-996) unless disabled or alone.
    RoleTransition(_U, _P, Trigger.ELECTION_TIMEOUT, "Raft thesis §3.4; KIP-996"),
    RoleTransition(_U, _C, Trigger.ELECTION_TIMEOUT, "Raft thesis §3.4 (pre-vote off, or a single voter)"),
    RoleTransition(_F, _P, Trigger.FETCH_TIMEOUT, "KIP-595 fetch timeout; KIP-996"),
    RoleTransition(_F, _C, Trigger.FETCH_TIMEOUT, "KIP-595 fetch timeout (pre-vote off)"),
    RoleTransition(_F, _U, Trigger.FETCH_TIMEOUT, "an observer looks for the new leader"),
    RoleTransition(_C, _P, Trigger.ELECTION_TIMEOUT, "election backoff over: pre-vote again (KIP-996)"),
    RoleTransition(_C, _C, Trigger.ELECTION_TIMEOUT, "election backoff over: stand in the next epoch (pre-vote off)"),
    RoleTransition(_R, _P, Trigger.ELECTION_TIMEOUT, "a resigned leader stands once nobody took over"),
    RoleTransition(_R, _C, Trigger.ELECTION_TIMEOUT, "a resigned leader stands (pre-vote off)"),
    RoleTransition(_R, _U, Trigger.ELECTION_TIMEOUT, "a leader removed from the voter set observes (KIP-853)"),
    RoleTransition(_R, _U, Trigger.HANDED_OVER, "a removed leader observes once every voter has its EndQuorumEpoch"),
    # Pre-vote and vote outcomes.
    RoleTransition(_P, _C, Trigger.WON_PRE_VOTE, "KIP-996: a majority would vote"),
    RoleTransition(_P, _F, Trigger.LOST_PRE_VOTE, "KIP-996: back to the known leader, same epoch"),
    RoleTransition(_P, _U, Trigger.LOST_PRE_VOTE, "KIP-996: no known leader, same epoch"),
    RoleTransition(_C, _L, Trigger.WON_ELECTION, "Raft thesis §3.4: a majority of votes"),
    # Voting: at most one vote per epoch, recorded before it is sent (§3.8).
    RoleTransition(_U, _U, Trigger.GRANTED_VOTE, "Raft thesis §3.4"),
    RoleTransition(_P, _U, Trigger.GRANTED_VOTE, "a prospective voter votes for a real candidate"),
    # Leadership ends.
    RoleTransition(_L, _R, Trigger.CHECK_QUORUM, "KAFKA-15489: no fetch from a majority within the timeout"),
    RoleTransition(_L, _R, Trigger.RESIGN_REQUESTED, "graceful shutdown: EndQuorumEpoch"),
    RoleTransition(_F, _U, Trigger.LEADER_RESIGNED, "KIP-595 EndQuorumEpoch from our leader"),
    # Common epoch handling (KIP-595): any role moves into a later epoch it
    # hears of, and follows a leader it learns of (BeginQuorumEpoch, or a
    # response naming the leader).
    *(RoleTransition(role, _U, Trigger.LATER_EPOCH, "KIP-595 common epoch handling") for role in _ALL_ROLES),
    *(RoleTransition(role, _F, Trigger.LEADER_FOUND, "KIP-595 BeginQuorumEpoch or a response naming the leader") for role in _ALL_ROLES),
)

# Looked up on every change of role: a set, not a scan of the rows.
_ALLOWED: frozenset[tuple[Role | None, Role, Trigger]] = frozenset(
    (row.source, row.target, row.trigger) for row in ROLE_TRANSITIONS
)


def transition_allowed(source: Role | None, target: Role, trigger: Trigger) -> bool:
    """Whether the table has the row (``source`` None: the process starts)."""
    return (source, target, trigger) in _ALLOWED


def _name(role: Role | None) -> str:
    # "[*]" is mermaid's start state; the same name serves error messages.
    return "[*]" if role is None else role.value.capitalize()


def describe_transition(source: Role | None, target: Role, trigger: Trigger) -> str:
    """One line naming a transition, for error messages."""
    return f"{_name(source)} -> {_name(target)} on {trigger.value!r}"


def state_diagram_mermaid() -> str:
    """The table as a mermaid ``stateDiagram-v2``: one arrow per pair of
    roles, labelled with every trigger that takes it, in table order."""
    labels: dict[tuple[Role | None, Role], list[str]] = {}
    for row in ROLE_TRANSITIONS:
        triggers = labels.setdefault((row.source, row.target), [])
        if row.trigger.value not in triggers:
            triggers.append(row.trigger.value)
    lines = ["stateDiagram-v2"]
    for (source, target), triggers in labels.items():
        lines.append(f"    {_name(source)} --> {_name(target)}: {', '.join(triggers)}")
    return "\n".join(lines)


def transition_table_markdown() -> str:
    """The table as markdown, one row per allowed transition."""
    lines = ["| from | to | trigger | rule |", "|---|---|---|---|"]
    for row in ROLE_TRANSITIONS:
        source = "(start)" if row.source is None else _name(row.source)
        lines.append(f"| {source} | {_name(row.target)} | {row.trigger.value} | {row.rule} |")
    return "\n".join(lines)
