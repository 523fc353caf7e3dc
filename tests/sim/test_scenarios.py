"""The named simulator scenarios: what each one must show."""

import pytest

from jepsen_like.sim import SimOptions, run_scenario

CHECK_QUORUM_BOUND_MS = 1.5 * 2000  # check_quorum_factor x fetch_timeout_ms (defaults)
TICK_MS = 10


def test_zombie_leader_with_check_quorum_resigns_and_serves_no_stale_reads():
    """KAFKA-15489, seed 002: the isolated leader resigns within
    check_quorum_factor x fetch_timeout (+ one tick); no read breaks its
    contract."""
    result = run_scenario("zombie-leader", 7)
    assert result.valid, result.violation
    assert result.stale_reads == 0
    assert result.leader_resign_ms is not None
    assert 0 < result.leader_resign_ms <= CHECK_QUORUM_BOUND_MS + TICK_MS


def test_zombie_leader_without_check_quorum_serves_stale_reads():
    """With check quorum off, the isolated leader answers leader-local reads
    forever, and they miss writes committed by the new leader."""
    result = run_scenario("zombie-leader", 7, SimOptions(check_quorum=False))
    assert not result.valid
    assert result.stale_reads > 0
    assert result.leader_resign_ms is None
    assert {example["mode"] for example in result.stale_examples} == {"leader-local"}


@pytest.mark.parametrize("check_quorum", [True, False])
def test_zombie_leader_linearizable_reads_are_never_stale(check_quorum):
    """ReadIndex reads through the isolated leader cannot complete: the
    leader cannot hear a majority after the read arrives."""
    result = run_scenario("zombie-leader", 11, SimOptions(check_quorum=check_quorum))
    sim = result.simulation
    isolated = result.extra["isolated_leader"]
    served_by_zombie = [
        op
        for op in sim.history
        if op["f"] == "read" and op["type"] == "ok" and op.get("mode") == "linearizable" and op["node"] == isolated
        and op["time"] > 1e9 * 3  # well after the partition began
    ]
    tried_on_zombie = [
        op
        for op in sim.history
        if op["f"] == "read" and op["type"] == "invoke" and op.get("mode") == "linearizable" and op["node"] == isolated
        and op["time"] > 1e9 * 3
    ]
    # Otherwise the assertions below hold for want of a read to judge.
    assert len(tried_on_zombie) >= 10, "the scenario no longer sends linearizable reads through the isolated leader"
    assert all(example["mode"] != "linearizable" for example in result.stale_examples)
    # Reads through the zombie either fail or were served before it lost the
    # majority; none of those is stale (checked above).
    assert len(served_by_zombie) <= 5


@pytest.mark.parametrize("seed", range(5))
def test_pre_vote_keeps_a_healthy_leader_after_a_partition_heals(seed):
    """KIP-996: a node isolated for many election timeouts cannot depose the
    leader when it comes back."""
    result = run_scenario("partition-heal-disruption", seed)
    assert result.valid, result.violation
    assert result.extra["leader_kept"] is True
    assert result.extra["isolated_epoch"] == result.extra["epoch_before"]


@pytest.mark.parametrize("seed", range(5))
def test_without_pre_vote_a_healed_node_deposes_the_leader(seed):
    """The disruption pre-vote exists to prevent: the isolated node's epoch
    grows. The voters refuse its Votes while they hear the leader (the
    leader lease, Raft thesis §4.2.3), but it cannot follow a leader of an
    earlier epoch: its refusal of the leader's BeginQuorumEpoch carries its
    later epoch back, and that forces the leader out."""
    result = run_scenario("partition-heal-disruption", seed, SimOptions(pre_vote=False))
    assert result.valid, result.violation  # safe, merely disruptive
    assert result.extra["isolated_epoch"] > result.extra["epoch_before"]
    assert result.extra["leader_kept"] is False


@pytest.mark.parametrize("seed", range(3))
def test_a_flood_of_forged_votes_neither_deposes_the_leader_nor_stops_writes(seed):
    """Issue 15 (Raft thesis §4.2.3): a rogue process floods every voter with
    Votes and pre-votes of ever higher epochs, forged as coming from the
    other voters. The leader lease refuses every one: no epoch moves, the
    leader keeps leading, and a write every 100 ms keeps committing."""
    result = run_scenario("vote-flood", seed)
    assert result.valid, result.violation
    assert result.extra["leader_kept"] is True
    assert result.extra["epoch_rise"] == 0
    assert result.extra["forged"] > 10_000 and result.extra["forged_epoch_max"] > 10_000
    assert result.extra["votes_ignored_leader_alive"] == result.extra["forged"]
    assert result.extra["write_gap_max_ms"] < 200
    assert result.extra["writes_ok"] >= 45


def test_without_check_quorum_there_is_no_lease_and_the_flood_stops_writes():
    """The teaching switch turns the lease off with check quorum (as etcd
    ties its lease to checkQuorum): the same flood then drives the epoch up
    by thousands and no write commits while it lasts, as measured against
    real processes in issue 15."""
    result = run_scenario("vote-flood", 0, SimOptions(check_quorum=False))
    assert not result.valid and result.failure_class == "liveness"
    assert result.extra["epoch_rise"] > 1000
    assert result.extra["writes_ok"] == 0


def test_leader_crash_fails_over_within_the_unreachable_leader_wait_without_split_votes():
    """A crashed leader's followers learn of it from the transport (the
    kernel resets the dead process's connections) and stand after a random
    wait in [0, unreachable_leader_wait_ms) (250 ms by default). The median
    failover is within that wait; and no run splits the vote, which would
    cost an election timeout and a backoff (1000 ms or more): survivors
    that stand together grant each other's pre-vote only in rank order
    (docs/benchmarks.md, "Failover"). Before both changes these 60 seeds
    read a median of 406 ms and a worst of 1346 ms.
    """
    failovers = []
    for seed in range(60):
        result = run_scenario("leader-crash", seed)
        assert result.valid, result.violation
        failovers.append(result.failover_ms)
    failovers.sort()
    unreachable_leader_wait_ms, election_timeout_ms = 250, 1000
    assert failovers[len(failovers) // 2] <= unreachable_leader_wait_ms
    assert failovers[-1] < election_timeout_ms


@pytest.mark.parametrize("name", ["minority-partition", "flapping-network"])
@pytest.mark.parametrize("seed", range(3))
def test_fault_scenarios_stay_safe_and_live(name, seed):
    result = run_scenario(name, seed)
    assert result.valid, result.violation
    assert result.ops.get("ok", 0) > 0


def test_unknown_scenario_is_refused_with_the_known_names():
    with pytest.raises(KeyError, match="zombie-leader"):
        run_scenario("no-such-scenario", 1)
