"""Quorum arithmetic: the few pure functions every safety argument rests on.

Kept apart from the node so that each can be checked against a deliberately
dumb brute-force definition (``tests/quorum/test_quorum_math.py``, in the
manner of etcd's ``quorum/quick_test.go``): the node only gathers the
inputs (acknowledged offsets, echoed read tokens, voters heard from) and
acts on the answer.

Everything counts *voters* only. Observers (brokers) replicate the log but
never count toward a majority: they are not in the voter set that every
two majorities must share a member of (Raft thesis §3.6.3: the overlap of
two majorities is what carries committed records and votes forward).
"""

from __future__ import annotations

from collections.abc import Iterable

from ._errors import QuorumInvariantError


def majority(voter_count: int) -> int:
    """The smallest number of voters any two groups of which overlap: more
    than half (Raft thesis §3.4). Raises ``ValueError`` for no voters."""
    if voter_count < 1:
        raise ValueError(f"a quorum needs at least one voter, not {voter_count}")
    return voter_count // 2 + 1


def quorum_end_offset(acknowledged_end_offsets: Iterable[int | None], majority_size: int) -> int:
    """The largest end offset that at least ``majority_size`` voters have
    acknowledged as durable: the ``majority_size``-th largest of the
    acknowledgements. A voter not heard from yet (None) counts as -1, i.e.
    as holding nothing.

    The leader includes its own durable end (never its unflushed end: it
    counts itself only once ``persisted`` says so, Raft thesis §10.2.1).
    Raises ``QuorumInvariantError`` when fewer voters than a majority are
    given: the caller miscounted the voter set, a bug in us."""
    offsets = sorted([-1 if offset is None else offset for offset in acknowledged_end_offsets], reverse=True)
    if len(offsets) < majority_size:
        raise QuorumInvariantError(f"{len(offsets)} acknowledgements cannot make a majority of {majority_size}")
    return offsets[majority_size - 1]


def next_high_watermark(
    current: int,
    acknowledged_end_offsets: Iterable[int | None],
    majority_size: int,
    epoch_start_offset: int,
) -> int:
    """The leader's high watermark after a new acknowledgement.

    It moves only forward (the high watermark is monotonic per node), and
    only past ``epoch_start_offset``, the leader's own LEADER_CHANGE record:
    a leader must not commit records of earlier epochs by counting replicas,
    only together with one of its own epoch (Raft thesis §3.6.2, Figure
    3.7). Raises what ``quorum_end_offset`` raises."""
    candidate = quorum_end_offset(acknowledged_end_offsets, majority_size)
    if candidate > epoch_start_offset and candidate > current:
        return candidate
    return current


def read_confirmed(
    token_needed: int,
    voter_acked_read_tokens: Iterable[int],
    leader_is_voter: bool,
    majority_size: int,
) -> bool:
    """Whether a majority of voters has proved, after a read arrived, that
    this node still leads (ReadIndex, Raft thesis §6.4).

    A voter proves it by echoing a read token at least ``token_needed``: a
    Fetch carrying it left the voter after the leader handed the token out,
    hence after the read arrived; a voter answering Fetches from this leader
    had not moved to a later epoch then. The leader confirms itself."""
    confirmations = 1 if leader_is_voter else 0
    confirmations += sum(1 for token in voter_acked_read_tokens if token >= token_needed)
    return confirmations >= majority_size


def check_quorum_met(voters_fetched: int, leader_is_voter: bool, majority_size: int) -> bool:
    """Whether the voters that fetched within the current check-quorum
    window make a majority together with the leader (KAFKA-15489: a leader
    that is not fetched from by a majority must resign, or it serves stale
    reads forever from the minority side of a partition). The leader never
    fetches from itself, so it counts itself; a single voter is its own
    majority (KAFKA-16144)."""
    return voters_fetched + (1 if leader_is_voter else 0) >= majority_size


def majorities_overlap(voters_before: Iterable[int], voters_after: Iterable[int]) -> bool:
    """Whether every majority of ``voters_before`` shares a member with
    every majority of ``voters_after``: the property that lets a
    configuration change take effect on append (Raft thesis §4.1: sets that
    differ by one voter always overlap, so two leaders, one per set, can
    never be elected in one epoch).

    The worst case puts each majority on the voters the other set lacks
    first; the two then meet only if what is left over cannot be placed on
    the shared voters without a common member. Raises ``ValueError`` for an
    empty set."""
    before, after = set(voters_before), set(voters_after)
    shared = before & after
    spill_before = max(0, majority(len(before)) - len(before - after))
    spill_after = max(0, majority(len(after)) - len(after - before))
    return spill_before + spill_after > len(shared)
