"""Quorum arithmetic against deliberately dumb definitions.

Each function of ``quorum._quorum_math`` is checked against a brute-force
version written straight from the definition it implements (in the manner
of etcd's ``quorum/quick_test.go``): enumerate every group of voters, and
ask whether one of them is a majority with the property. The fast versions
sort or count; if either ever disagrees with the enumeration, a safety rule
(commit, read confirmation, check quorum) is being computed wrongly.
"""

from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum import QuorumInvariantError
from quorum._quorum_math import (
    check_quorum_met,
    majority,
    next_high_watermark,
    quorum_end_offset,
    read_confirmed,
)

# Up to 7 voters: every subset is enumerated, so keep it small.
_voter_counts = st.integers(min_value=1, max_value=7)
_offsets = st.one_of(st.none(), st.integers(min_value=0, max_value=50))


def _brute_majority(voter_count: int) -> int:
    """The smallest k such that any two k-subsets of the voters share a
    member: checked by enumerating pairs of subsets."""
    voters = range(voter_count)
    for k in range(1, voter_count + 1):
        groups = list(combinations(voters, k))
        if all(set(a) & set(b) for a in groups for b in groups):
            return k
    raise AssertionError("unreachable: the whole set overlaps itself")


def _brute_quorum_end_offset(acknowledged: list[int | None], majority_size: int) -> int:
    """The best offset that some majority has entirely acknowledged: over
    every majority-sized group, the least acknowledgement in it; the best
    such group wins. Unknown counts as holding nothing (-1)."""
    known = [-1 if offset is None else offset for offset in acknowledged]
    return max(min(group) for group in combinations(known, majority_size))


def _brute_read_confirmed(token_needed: int, tokens: list[int], leader_is_voter: bool, majority_size: int) -> bool:
    """Some group of voters of majority size, each of which (the leader by
    being the leader) has confirmed the read."""
    confirmers = ["leader"] if leader_is_voter else []
    confirmers += [index for index, token in enumerate(tokens) if token >= token_needed]
    return any(True for _ in combinations(confirmers, majority_size))


@given(_voter_counts)
def test_majority_is_the_smallest_overlapping_group(voter_count: int) -> None:
    assert majority(voter_count) == _brute_majority(voter_count)


def test_majority_of_no_voters_is_refused() -> None:
    with pytest.raises(ValueError):
        majority(0)


@given(st.data(), _voter_counts)
def test_quorum_end_offset_matches_enumeration(data: st.DataObject, voter_count: int) -> None:
    acknowledged = data.draw(st.lists(_offsets, min_size=voter_count, max_size=voter_count))
    size = majority(voter_count)
    assert quorum_end_offset(acknowledged, size) == _brute_quorum_end_offset(acknowledged, size)


def test_quorum_end_offset_refuses_too_few_voters() -> None:
    with pytest.raises(QuorumInvariantError):
        quorum_end_offset([3], 2)


@given(st.data(), _voter_counts, st.integers(min_value=0, max_value=50), st.integers(min_value=0, max_value=50))
def test_high_watermark_moves_forward_only_past_the_epoch_start(
    data: st.DataObject, voter_count: int, current: int, epoch_start_offset: int
) -> None:
    """Raft thesis §3.6.2: the high watermark advances to what a majority
    holds only once that passes the leader's own first record; it never
    goes back."""
    acknowledged = data.draw(st.lists(_offsets, min_size=voter_count, max_size=voter_count))
    size = majority(voter_count)
    committed_by_majority = _brute_quorum_end_offset(acknowledged, size)
    expected = committed_by_majority if committed_by_majority > max(current, epoch_start_offset) else current
    assert next_high_watermark(current, acknowledged, size, epoch_start_offset) == expected


@given(
    st.data(),
    _voter_counts,
    st.booleans(),
    st.integers(min_value=1, max_value=20),
)
def test_read_confirmation_matches_enumeration(
    data: st.DataObject, voter_count: int, leader_is_voter: bool, token_needed: int
) -> None:
    # The leader's peers among the voters (all voters when it is not one).
    peers = voter_count - 1 if leader_is_voter else voter_count
    tokens = data.draw(st.lists(st.integers(min_value=0, max_value=20), min_size=peers, max_size=peers))
    size = majority(voter_count)
    assert read_confirmed(token_needed, tokens, leader_is_voter, size) == _brute_read_confirmed(
        token_needed, tokens, leader_is_voter, size
    )


@given(st.data(), _voter_counts, st.booleans())
def test_check_quorum_matches_enumeration(data: st.DataObject, voter_count: int, leader_is_voter: bool) -> None:
    """KAFKA-15489: the voters heard from in the window, plus the leader,
    must contain some majority-sized group."""
    peers = voter_count - 1 if leader_is_voter else voter_count
    fetched = data.draw(st.sets(st.integers(min_value=0, max_value=peers - 1), max_size=peers)) if peers else set()
    heard = (["leader"] if leader_is_voter else []) + sorted(fetched)
    size = majority(voter_count)
    expected = any(True for _ in combinations(heard, size))
    assert check_quorum_met(len(fetched), leader_is_voter, size) == expected


def test_single_voter_is_its_own_majority() -> None:
    """KAFKA-16144: a lone voter never resigns for want of fetchers, and
    confirms its own reads and commits."""
    assert check_quorum_met(0, True, majority(1))
    assert read_confirmed(5, [], True, majority(1))
    assert next_high_watermark(0, [3], majority(1), 0) == 3


def _majorities_overlap_brute_force(before: frozenset[int], after: frozenset[int]) -> bool:
    """Every majority of ``before`` meets every majority of ``after``:
    enumerate them all."""
    from itertools import combinations

    def majorities(voters: frozenset[int]) -> list[set[int]]:
        size = len(voters) // 2 + 1
        return [set(group) for group in combinations(sorted(voters), size)]

    return all(a & b for a in majorities(before) for b in majorities(after))


def test_majorities_overlap_matches_brute_force():
    """Raft thesis §4.1: sets differing by one voter always overlap; the
    function agrees with enumeration on every pair of subsets of 1..6."""
    from itertools import combinations

    from quorum._quorum_math import majorities_overlap

    universe = range(1, 7)
    subsets = [frozenset(c) for size in range(1, 7) for c in combinations(universe, size)]
    for before in subsets:
        for after in subsets:
            expected = _majorities_overlap_brute_force(before, after)
            assert majorities_overlap(before, after) == expected, (sorted(before), sorted(after))
            if len(before ^ after) <= 1:
                assert expected
