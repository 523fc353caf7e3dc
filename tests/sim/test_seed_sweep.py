"""Seed sweeps: hundreds of random fault schedules in ``make test``
(``make soak`` runs 10,000). Every failure prints the command that replays it."""

import os

import pytest

from jepsen_like.sim import SimOptions, random_options, run_scenario

SEEDS = int(os.environ.get("PYKRAFT_SWEEP_SEEDS", "200"))


def _failures(seeds, configure=lambda options: options):
    failures = []
    for seed in seeds:
        result = run_scenario("random", seed, configure(random_options(seed)))
        if not result.valid:
            failures.append(f"jepsen-like sim --scenario random --seed {seed}: {result.violation.splitlines()[0]}")
    return failures


def test_random_fault_schedules_are_safe_and_live():
    assert _failures(range(SEEDS)) == []


def _without_pre_vote(options: SimOptions) -> SimOptions:
    options.pre_vote = False
    return options


def test_random_fault_schedules_without_pre_vote_are_still_safe():
    """Pre-vote is about availability, never safety."""
    assert _failures(range(10_000, 10_000 + SEEDS // 4), _without_pre_vote) == []


@pytest.mark.parametrize("seed", range(20_000, 20_000 + 25))
def test_without_check_quorum_only_leader_local_reads_can_go_stale(seed):
    """Check quorum protects leader-local reads only; safety (one leader per
    epoch, log matching, no lost acknowledged write) holds regardless."""
    options = random_options(seed)
    options.check_quorum = False
    result = run_scenario("random", seed, options)
    if not result.valid:
        assert result.failure_class == "correctness"
        assert result.violation.endswith("stale reads")
        assert all(example["mode"] == "leader-local" for example in result.stale_examples)
