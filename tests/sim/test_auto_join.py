"""KIP-853 auto-join in the simulator: the very decision the trio node runs
(``quorum.AutoJoin``), on every node of a simulated cluster. A wiped
voter's new disk joins by itself once the operator removed the old one; a
disk the operator removed is never added again (Kafka 4.2 re-added it),
across restarts, leader changes and snapshots that cover both the
addition and the removal; the simulation's check of that does fire."""

from __future__ import annotations

import pytest

from jepsen_like.sim import InvariantViolation, SimOptions, Simulation, run_scenario
from jepsen_like.sim._reconfig_scenarios import Operator
from jepsen_like.sim._scenario_kit import _wait_for_leader, _Workload
from quorum import AutoJoinAction, RecordKind


# Seed 1 of each runs in the tests below.
@pytest.mark.parametrize("name", ["reconfig-auto-join-wiped", "reconfig-auto-join-removed"])
@pytest.mark.parametrize("seed", [2])
def test_auto_join_scenarios_stay_safe_and_live(name, seed):
    result = run_scenario(name, seed)
    assert result.valid, f"jepsen-like sim --scenario {name} --seed {seed}: {result.violation}"
    assert result.stale_reads == 0


def test_a_wiped_voter_rejoins_by_itself_with_its_new_disk():
    story: list[str] = []
    result = run_scenario("reconfig-auto-join-wiped", 1, trace=story.append)
    sim = result.simulation
    assert result.valid, result.violation
    victim = next(node_id for node_id, node in sorted(sim.nodes.items()) if node.disk_generation == 1)
    # Added by its own request, not by the operator.
    assert any(f"n{victim} AUTO-JOIN at" in line for line in story)
    assert not any(f"OPERATOR add n{victim}" in line for line in story)
    assert sim.committed_voters().holds(victim, f"d{victim}-1")
    assert result.extra["rejoin_ms"] > 0


def test_a_removed_auto_join_node_stays_out_across_restarts_and_leader_changes():
    result = run_scenario("reconfig-auto-join-removed", 1)
    assert result.valid, result.violation
    assert result.extra["final_voters"] == [1, 2, 3]
    assert result.extra["remembered"] is True


def _sim(story: list[str] | None = None, **more) -> Simulation:
    options = SimOptions(voters=3, dynamic_voters=True, spare_nodes=1, auto_join=True, **more)
    return Simulation(3, options, trace=(story if story is not None else []).append)


def test_the_committed_answer_alone_keeps_a_removed_disk_out():
    """n4's own AddVoter commits while n4 is cut off (it never fetches the
    record adding it); the operator removes it; snapshots then cover both
    records, so the log n4 later fetches never shows it as a voter. The
    leader's answer that its AddVoter committed keeps it out (and so
    would the removal that the snapshot's voter set lists)."""
    story: list[str] = []
    sim = _sim(story, snapshot_every_records=20)
    operator = Operator(sim)
    leader = _wait_for_leader(sim)
    workload = _Workload(sim)
    newcomer = sim.nodes[4]
    # Cut n4 off the moment it asks to join (its request is on its way):
    # no fetch response can bring it the record that adds it.
    assert sim.run_until_true(lambda: any("n4 AUTO-JOIN asks" in line for line in story), 10_000, step_ms=0.01)
    sim.network.isolate(4, sorted(sim.nodes))
    assert not newcomer.core.is_voter and not newcomer.disk.auto_join_was_voter
    assert sim.run_until_true(lambda: 4 in operator.voters(), 5000)
    assert sim.run_until_true(lambda: newcomer.disk.auto_join_was_voter, 1000)
    assert operator.remove(4)
    removed_at = max(offset for offset, (_epoch, kind, _data) in sim.committed.items() if kind == int(RecordKind.VOTERS))
    for _ in range(150):
        workload.write(sim.leader())
        sim.run_for(20)
    # Every voter's log now starts after both changes: n4 gets a snapshot.
    assert all(sim.nodes[node_id].core.log.start_offset > removed_at for node_id in (1, 2, 3))
    sim.heal()
    sim.crash(4)
    sim.restart(4)
    sim.run_for(5 * sim.options.fetch_timeout_ms)
    assert not any(voters.holds(4, "d4-0") for voters in newcomer.core.voter_sets_in_log)
    assert newcomer.auto_join.action(newcomer.core) is AutoJoinAction.REMOVED
    assert 4 not in operator.voters()


def test_the_re_add_check_fires():
    """The simulation fails a run in which a leader lets auto-join add a
    disk the operator removed (here: marked as removed in the simulation's
    books only, so the leader's voter set does not know it)."""
    sim = _sim()
    sim.removed_by_operator.add((4, "d4-0"))
    with pytest.raises(InvariantViolation, match="auto-join-re-add"):
        sim.run_for(10_000)

