"""Disk failures in the simulator (issue 14, part 4; docs/storage.md, "Disk
errors"): the simulated disk fails writes with ENOSPC or EIO for windows of
virtual time, and the real host must ride them out without losing or
damaging anything acknowledged."""

import pytest

from jepsen_like.sim import SimOptions, Simulation, random_options, run_scenario


@pytest.mark.parametrize("seed", range(6))
def test_disk_full_one_voter_fails_the_majority_commits_and_the_victim_catches_up(seed):
    """Even seeds fail the leader's disk (it must resign), odd ones a
    follower's (it must stop acknowledging); invariants hold after every
    event and at the end (no acknowledged write lost, committed records on
    a majority of disks, one leader per epoch)."""
    lines = []
    result = run_scenario("disk-full", seed, trace=lines.append)
    assert result.valid, result.violation
    assert result.extra["commits_while_failed"] > 0
    assert result.extra["failed_writes"] >= 1
    assert any("DISK FAILED" in line for line in lines)
    assert any("DISK RESUMED" in line for line in lines)
    if seed % 2 == 0:
        assert any("resigned: disk failed" in line for line in lines)


def test_a_failed_write_leaves_the_simulated_disk_at_its_durable_point_or_torn_past_it():
    """A failed write may leave the first records of its append (a torn
    write); the next attempt cuts them first (return_to_durable_point)."""
    sim = Simulation(3, SimOptions())
    sim.run_until_true(lambda: sim.stable_leader() is not None, 15_000)
    leader = sim.stable_leader()
    assert leader is not None
    disk = sim.nodes[leader].disk
    durable = disk.log.slice(0)
    sim.fail_disk(leader, "ENOSPC", 1000)
    sim.client_write(sim.new_process(), leader, "x", "v1")
    sim.run_for(500)
    assert disk.failed_writes >= 1
    assert disk.log.slice(0)[: len(durable)] == durable
    assert disk.durable_end in (None, len(durable))
    if disk.durable_end is None:
        assert disk.log.slice(0) == durable
    assert sim.nodes[leader].core is not None  # the process is still up
    assert sim.nodes[leader].core.disk_failure == "ENOSPC"
    sim.run_for(3000)
    assert sim.nodes[leader].core.disk_failure is None
    assert disk.log.end_offset > len(durable)
    sim.check_final()


def test_explicit_scenarios_draw_no_disk_failures_and_the_sweep_draws_some():
    assert SimOptions().disk_fault_rate == 0.0
    rates = [random_options(seed).disk_fault_rate for seed in range(200)]
    assert 0 < sum(rate > 0 for rate in rates) < len(rates)


def test_random_seeds_with_disk_failures_stay_valid():
    """Random seeds that draw disk failures, and see some: valid."""
    seen = 0
    for seed in range(200):
        options = random_options(seed)
        if options.disk_fault_rate == 0:
            continue
        result = run_scenario("random", seed, options)
        assert result.valid, f"seed {seed}: {result.violation}"
        seen += sum(node.disk.failed_writes > 0 for node in result.simulation.nodes.values())
        if seen >= 3:
            break
    assert seen >= 3


def test_a_torn_failed_write_left_by_a_crash_is_survived():
    """Seeds where the leader's failing disk tore a write (part of its
    append on disk, never acknowledged) and the leader crashed before the
    next attempt: the torn records survive the crash, as unsynced writes
    may, and the cluster stays valid (nothing acknowledged lost, committed
    records on a majority of disks)."""
    torn_and_crashed = 0
    for seed in range(40):
        sim = Simulation(seed, SimOptions())
        sim.run_until_true(lambda: sim.stable_leader() is not None, 15_000)
        leader = sim.stable_leader()
        assert leader is not None
        disk = sim.nodes[leader].disk
        sim.fail_disk(leader, "EIO", 5000)
        for index in range(3):
            sim.client_write(sim.new_process(), leader, f"k{index}", "v")
        if not sim.run_until_true(lambda: disk.durable_end is not None and disk.log.end_offset > disk.durable_end, 3000, step_ms=1):
            continue
        torn_end = disk.log.end_offset
        sim.crash(leader)
        assert disk.log.end_offset == torn_end  # the torn part stays on the disk
        sim.heal()
        sim.restart(leader)
        for index in range(3):
            current = sim.stable_leader()
            if current is not None:
                sim.client_write(sim.new_process(), current, f"after{index}", "v")
            sim.run_for(500)
        sim.run_for(5000)
        sim.check_final()
        torn_and_crashed += 1
        if torn_and_crashed >= 3:
            break
    assert torn_and_crashed >= 3
