"""Issue 15 part 4 in the simulator: the service model (a voter takes time
to serve what it reads, quorum messages first: ``quorum.service_class``)
and the ``broker-stampede`` scenario (the controller leader killed under
many brokers, which all come back to the new one at once)."""

import json

import pytest
from click.testing import CliRunner

from jepsen_like.sim import InvariantViolation, SimOptions, Simulation, run_scenario
from jepsen_like.sim import _cluster  # its _disk_holds, to stand in for what the disks hold
from jepsen_like.sim._broker_scenarios import stampede_options
from jepsen_like.sim.cli import sim_command
from quorum import FetchRequest, Role

# Fewer brokers than the scenario's 1,000, so that the test runs in seconds.
BROKERS = 40


def test_the_stampede_keeps_the_new_leader_and_serves_its_voters():
    outcome = CliRunner().invoke(
        sim_command, ["--scenario", "broker-stampede", "--seed", "3", "--brokers", str(BROKERS), "--trace", "none", "--json"]
    )

    assert outcome.exit_code == 0, outcome.output
    summary = json.loads(outcome.output.strip().splitlines()[-1])
    options = stampede_options(3)
    assert summary["valid"] and summary["brokers"] == BROKERS
    assert summary["new_leader"] != summary["killed"]
    # The brokers did come back at once: most of them queued at the leader.
    assert summary["leader_queue_peak"] >= BROKERS // 2
    assert summary["heartbeats_after_kill"] >= BROKERS
    # Voters' quorum messages are served before the brokers': a voter's
    # Fetch waits at most for the input being served (a controller request
    # at worst) and the other voter's.
    assert summary["voter_fetch_wait_max_ms"] <= (options.service_client_us + options.service_quorum_us) / 1000
    assert summary["voter_fetch_gap_max_ms"] < options.fetch_timeout_ms
    assert summary["topics_created_during"] > 0
    assert summary["all_back_ms"] < 30_000


def _expensive_stampede(priority: bool):
    """20 brokers whose Fetches cost the voters 120 ms each: 2.4 s a round."""
    options = stampede_options(1)
    options.brokers = 20
    options.service_quorum_us = 120_000
    options.service_priority = priority
    return run_scenario("broker-stampede", 1, options)


def test_voters_first_keeps_the_leader_when_the_brokers_fetches_fill_the_fetch_timeout():
    """Overloaded, the brokers pay, not the voters: their Fetches take a
    round of 2.4 s, so they do not all get back (their session is 3 s), but
    no voter starves and the leader keeps its leadership (the watchdog
    would have said so first)."""
    result = _expensive_stampede(priority=True)

    assert not result.valid
    assert result.violation.startswith("liveness: brokers not back"), result.violation
    assert len(result.simulation.leaders_by_epoch) == 2  # the first leader and the new one


def test_the_stampede_check_fails_when_the_brokers_fetches_are_served_in_arrival_order():
    """What the scenario checks can fail, and what the rule buys: in arrival
    order, the 20 brokers' Fetches keep a voter's waiting 2.4 s, past the
    fetch timeout."""
    result = _expensive_stampede(priority=False)

    assert not result.valid
    assert result.violation.startswith("voter-starved: "), result.violation


def _voter_fetch_waits(priority: bool) -> list[int]:
    """Microseconds each voter's Fetch waited at the leader while 200
    client writes, read at one instant, were being served (1 ms each)."""
    sim = Simulation(5, SimOptions(service_quorum_us=100, service_client_us=1000, service_priority=priority))
    assert sim.run_until_true(lambda: sim.stable_leader() is not None, 15_000)
    leader = sim.stable_leader()
    waits: list[int] = []

    def on_served(node, payload, waited_us):
        if node.node_id == leader and isinstance(payload, FetchRequest):
            waits.append(waited_us)

    sim.served_watchers.append(on_served)
    for value in range(200):
        sim.client_write(sim.new_process(), leader, "x", value)
    sim.run_for(300)
    assert sim.nodes[leader].core.role is Role.LEADER
    return waits


def test_a_voter_serves_quorum_messages_before_client_requests():
    """The runtime's rule, modelled: a voter's Fetch read behind 200 client
    requests waits for the one being served, not for the others."""
    first = _voter_fetch_waits(priority=True)
    in_order = _voter_fetch_waits(priority=False)

    # At most the client request in service and the other voter's Fetch.
    assert first and max(first) <= 1000 + 100
    assert max(in_order) >= 100_000


def test_brokers_is_refused_for_a_scenario_without_brokers():
    outcome = CliRunner().invoke(sim_command, ["--scenario", "zombie-leader", "--brokers", "5", "--trace", "none"])

    assert outcome.exit_code == 2
    assert "zombie-leader runs no brokers" in outcome.output


def test_final_durability_counts_the_voters_disks_not_the_brokers(monkeypatch):
    """A committed record must be on a majority of the voters' disks;
    brokers (observers) hold logs too, but their disks make no majority.
    Seed 0 of the 1,000-broker scenario failed with "committed offset 2072
    is on 30 disks, fewer than a majority": the check counted every node,
    so 3 voters and 27 brokers were short of 501. Counting brokers could
    also have passed a record no voter majority held."""
    options = stampede_options(3)
    options.brokers = BROKERS
    simulation = run_scenario("broker-stampede", 3, options).simulation
    assert simulation.committed and len(simulation.nodes) == options.voters + BROKERS
    voters = options.voters

    # Every voter holds every committed record, no broker does: durable.
    monkeypatch.setattr(_cluster, "_disk_holds", lambda node, offset, record: node.node_id <= voters)
    simulation.check_final_durability()

    # Every broker holds them, and one voter: lost.
    monkeypatch.setattr(_cluster, "_disk_holds", lambda node, offset, record: node.node_id == 1 or node.node_id > voters)
    with pytest.raises(InvariantViolation, match="lost-write"):
        simulation.check_final_durability()
