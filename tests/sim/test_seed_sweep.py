"""Seed sweeps: hundreds of random fault schedules in ``make test``
(``make soak`` runs 10,000). Every failure prints the command that replays it."""

import os

import pytest

from jepsen_like.sim import SimOptions, find_stale_reads, random_options, run_scenario

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


# Random schedules rarely make a zombie leader serve a stale read (about one
# seed in two hundred with check quorum off). A plain range of 25 seeds held
# none, so the assertions below never ran; these are the seeds of 20,000 to
# 21,999 that did go stale when this test was written, beside that range.
STALE_WITHOUT_CHECK_QUORUM_SEEDS = (20669, 21230, 21250, 21336, 21424, 21462, 21485, 21503, 21646, 21866)


def test_without_check_quorum_only_leader_local_reads_can_go_stale():
    """Check quorum protects leader-local reads only; safety (one leader per
    epoch, log matching, no lost acknowledged write) holds regardless. At
    least one of the seeds must produce stale reads, or this test proves
    nothing."""
    stale_seeds = []
    for seed in (*range(20_000, 20_000 + 25), *STALE_WITHOUT_CHECK_QUORUM_SEEDS):
        options = random_options(seed)
        options.check_quorum = False
        result = run_scenario("random", seed, options)
        replay = f"jepsen-like sim --scenario random --seed {seed} --no-check-quorum"
        if result.valid:
            continue
        # Anything but stale reads is a safety or liveness failure.
        assert result.failure_class == "correctness", f"{replay}: {result.violation}"
        assert result.violation == f"{result.stale_reads} stale reads", f"{replay}: {result.violation}"
        every_stale_read = find_stale_reads(result.simulation.history, options.check_quorum_factor * options.fetch_timeout_ms)
        assert len(every_stale_read) == result.stale_reads > 0
        assert {example["mode"] for example in every_stale_read} == {"leader-local"}, replay
        stale_seeds.append(seed)
    assert stale_seeds, (
        "no seed served a stale read with check quorum off, so this test checks nothing: the schedules drifted. "
        "Find seeds that do (jepsen-like sweep --scenario random --no-check-quorum --start 20000 --seeds 2000) "
        "and put them in STALE_WITHOUT_CHECK_QUORUM_SEEDS."
    )
