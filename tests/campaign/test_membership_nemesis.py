"""The membership nemesis's choices (issue 17, KIP-853), without processes:
every change it picks keeps a majority of the voter set able to commit
(the real-process campaign is ``test_a_membership_campaign...`` in
tests/campaign/test_campaigns.py, in make soak)."""

from __future__ import annotations

import random

from jepsen_like.campaign._membership import MEMBERSHIP_CHANGES, SMALLEST_VOTER_SET, choose_membership_move

CONTROLLERS = [1, 2, 3, 4]


def test_every_choice_is_possible_and_keeps_a_majority():
    seen: set[str] = set()
    for seed in range(2000):
        rng = random.Random(seed)
        voters = sorted(rng.sample(CONTROLLERS, rng.randint(1, 4)))
        leader = rng.choice(voters)
        down = [node for node in CONTROLLERS if node != leader and rng.random() < 0.2]
        move = choose_membership_move(rng, voters, CONTROLLERS, leader, down)
        if move is None:
            continue
        seen.add(move.kind)
        assert move.kind in MEMBERSHIP_CHANGES
        if move.kind == "add-voter":
            assert move.node not in voters and move.node not in down
        elif move.kind == "remove-voter":
            assert move.node in voters and len(voters) > SMALLEST_VOTER_SET
        else:
            # One lost copy in a set of three or more, never the leader's.
            assert move.node in voters and move.node != leader and move.node not in down and len(voters) >= 3
    assert seen == set(MEMBERSHIP_CHANGES)


def test_the_leader_may_be_removed():
    picks = {choose_membership_move(random.Random(seed), [1, 2, 3], [1, 2, 3], 2) for seed in range(200)}
    assert any(move.kind == "remove-voter" and move.node == 2 for move in picks)
    assert not any(move.kind == "replace-voter" and move.node == 2 for move in picks)


def test_nothing_without_a_leader_or_a_voter_set_or_a_possible_change():
    rng = random.Random(1)
    assert choose_membership_move(rng, [1, 2, 3], CONTROLLERS, None) is None
    assert choose_membership_move(rng, [], CONTROLLERS, 1) is None
    # Two voters, the other controllers down: no add, no removal, no replacement.
    assert choose_membership_move(rng, [1, 2], CONTROLLERS, 1, down=[3, 4]) is None


def test_the_progress_line_follows_the_voter_set_only_with_dynamic_voters():
    from jepsen_like.campaign._progress import plain_line

    figures = {
        "phase": "running membership", "elapsed_s": 12.0, "remaining_s": 48.0, "ops_per_s": 40.0, "ok": 10, "fail": 1,
        "info": 0, "faults_now": ["add-voter 4"], "faults_total": 3, "leader": 3, "epoch": 2, "brokers": "",
    }  # fmt: skip
    assert plain_line({**figures, "voters": None}).endswith("leader 3 e2")
    assert plain_line({**figures, "voters": "2,3,4"}).endswith("leader 3 e2 voters 2,3,4")
    assert plain_line({**figures, "voters": ""}).endswith("voters ?")


def test_a_voter_whose_disk_a_replacement_destroyed_is_removed_before_anything_else():
    """A replacement formats the node's new disk first and then removes the
    old directory id; when that removal fails, the set keeps a voter that
    can never vote. Removing or replacing another voter then could leave no
    live majority: a membership campaign ended with the set {1, 4}, voter
    1 a destroyed disk, and no leader for good. The only change then is the
    destroyed disk's removal."""
    for seed in range(200):
        move = choose_membership_move(random.Random(seed), [1, 2, 3, 4], CONTROLLERS, 4, lost_disks=[1])
        assert move is not None and (move.kind, move.node) == ("remove-voter", 1)
    picks = {choose_membership_move(random.Random(seed), [1, 2, 4], CONTROLLERS, 4, lost_disks=[1, 2]) for seed in range(50)}
    assert {(move.kind, move.node) for move in picks} == {("remove-voter", 1), ("remove-voter", 2)}
    # A destroyed disk no longer in the set changes nothing.
    assert choose_membership_move(random.Random(3), [2, 3, 4], CONTROLLERS, 4, lost_disks=[1]) == choose_membership_move(
        random.Random(3), [2, 3, 4], CONTROLLERS, 4
    )
