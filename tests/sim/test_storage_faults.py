"""Storage faults in the simulator (issue 14): a bit flipped in a sealed
record of a voter's durable log, and a lost election state. Invariants
after every event (no acknowledged write lost, logs agree on committed
offsets, at most one leader per epoch, Leader Completeness) are the
simulator's own."""

from __future__ import annotations

import pytest

import quorum._node as core_module
from jepsen_like.sim import SimOptions, Simulation, random_options, run_scenario


@pytest.mark.parametrize("seed", range(5))
def test_damaged_log_scenario_waits_then_repairs_without_losing_a_write(seed):
    result = run_scenario("damaged-log", seed)
    assert result.valid, result.violation
    assert result.extra["waited_ms"] >= 5000  # no leader the whole time
    assert 0 < result.extra["repair_ms"] < 5000
    assert result.ops.get("ok", 0) >= 20


def test_without_the_repair_rule_the_scenario_loses_committed_records(monkeypatch):
    """The scenario reproduces issue 14: with the damaged node voting as if
    its log were merely short, a leader without the committed tail wins."""
    monkeypatch.setattr(core_module.QuorumNode, "_votes", property(lambda self: self.config.is_voter))
    result = run_scenario("damaged-log", 1)
    assert not result.valid
    assert "leader-completeness" in result.violation


def test_a_damaged_disk_is_found_at_the_next_start_and_repaired():
    sim = Simulation(3, SimOptions())
    sim.run_until_true(lambda: sim.stable_leader() is not None, 15_000)
    leader = sim.stable_leader()
    for i in range(10):
        sim.client_write(sim.new_process(), leader, "x", f"v{i}")
        sim.run_for(30)
    sim.run_for(1000)
    victim = next(n for n in sorted(sim.nodes) if n != leader)
    end = sim.nodes[victim].disk.log.end_offset
    sim.crash(victim)
    assert sim.damage_disk(victim, end // 2)
    sim.restart(victim)
    disk = sim.nodes[victim].disk
    assert disk.repair is not None and disk.repair.damaged_from_offset == end // 2
    assert disk.repair.acknowledged_end == end
    assert sim.nodes[victim].core.repairing == disk.repair
    assert sim.run_until_true(lambda: disk.repair is None, 10_000)
    assert sim.nodes[victim].core.repairing is None
    assert sim.nodes[victim].core.log.end_offset >= end
    sim.check_final()


def test_a_lost_election_state_beside_a_log_is_refused_and_the_rest_go_on():
    sim = Simulation(4, SimOptions())
    sim.run_until_true(lambda: sim.stable_leader() is not None, 15_000)
    leader = sim.stable_leader()
    sim.client_write(sim.new_process(), leader, "x", "v")
    sim.run_for(1000)
    victim = next(n for n in sorted(sim.nodes) if n != leader)
    sim.crash(victim)
    sim.nodes[victim].disk.lose_election_state()
    sim.restart(victim)
    assert sim.nodes[victim].core is None  # refused, as FileStorage refuses
    sim.client_write(sim.new_process(), leader, "x", "w")
    sim.run_for(1000)
    assert any(op["type"] == "ok" and op.get("value") == "w" for op in sim.history)
    sim.check_final()


def test_random_options_enable_disk_damage_for_some_seeds_only():
    rates = [random_options(seed).disk_damage_rate for seed in range(200)]
    assert 0 < sum(1 for rate in rates if rate) < 100
    assert "disk_damage_rate" not in SimOptions().describe()


def test_random_schedules_with_disk_damage_stay_safe_and_live():
    seeds = [seed for seed in range(300) if random_options(seed).disk_damage_rate][:25]
    damaged = 0
    for seed in seeds:
        lines: list[str] = []
        result = run_scenario("random", seed, trace=lines.append)
        assert result.valid, f"jepsen-like sim --scenario random --seed {seed}: {result.violation}"
        damaged += any("DISK DAMAGE" in line for line in lines)
    assert damaged > 0, "no schedule damaged a disk: the test would prove nothing"


@pytest.mark.parametrize("seed", range(4))
def test_election_rollback_scenario_takes_the_newer_copy(seed):
    lines: list[str] = []
    result = run_scenario("election-rollback", seed, trace=lines.append)
    assert result.valid, result.violation
    assert result.extra["generations_back"] >= 2
    copy = result.extra["copy"]
    assert any(f"the {copy} was rolled back to generation" in line for line in lines), lines


def test_a_rolled_back_copy_is_undone_at_the_next_start_and_the_vote_is_kept():
    sim = Simulation(3, SimOptions())
    sim.run_until_true(lambda: sim.stable_leader() is not None, 15_000)
    first = sim.stable_leader()
    sim.crash(first)
    sim.run_until_true(lambda: sim.stable_leader() not in (None, first), 15_000)
    voter = next(n for n in sorted(sim.nodes) if n not in (first, sim.stable_leader()))
    disk = sim.nodes[voter].disk
    sim.restart(first)
    sim.run_for(500)
    newest = (disk.election_generation, disk.election_state)
    assert disk.election_state.voted_for is not None
    sim.crash(voter)
    assert sim.roll_back_election_state(voter, "primary", 8)
    assert disk.election_generation < newest[0]
    sim.restart(voter)
    assert (disk.election_generation, disk.election_state) == newest
    assert disk.election_witness.generation == newest[0]
    sim.run_for(1000)
    sim.check_final()


def test_a_disk_never_votes_twice_in_one_epoch_is_checked():
    """The simulator's double-vote invariant fires on a disk that records a
    second vote in an epoch (what an undetected rollback would allow)."""
    from jepsen_like.sim import InvariantViolation
    from quorum import ElectionState

    sim = Simulation(3, SimOptions())
    node = sim.nodes[1]
    sim._check_one_vote_per_epoch(node, ElectionState(4, voted_for=2))
    sim._check_one_vote_per_epoch(node, ElectionState(4, voted_for=2, leader_id=2))
    with pytest.raises(InvariantViolation, match="voted for n2 and then for n3 in epoch 4"):
        sim._check_one_vote_per_epoch(node, ElectionState(4, voted_for=3))


def test_random_options_enable_election_rollbacks_for_some_seeds_only():
    rates = [random_options(seed).election_rollback_rate for seed in range(200)]
    assert 0 < sum(1 for rate in rates if rate) < 100
    assert "election_rollback_rate" not in SimOptions().describe()


def test_random_schedules_with_election_rollbacks_stay_safe_and_live():
    seeds = [seed for seed in range(300) if random_options(seed).election_rollback_rate][:20]
    rolled = 0
    for seed in seeds:
        lines: list[str] = []
        result = run_scenario("random", seed, trace=lines.append)
        assert result.valid, f"jepsen-like sim --scenario random --seed {seed}: {result.violation}"
        rolled += any("ELECTION STATE ROLLBACK" in line for line in lines)
    assert rolled > 0, "no schedule rolled an election state back: the test would prove nothing"
