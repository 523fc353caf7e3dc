"""Brokers given one controller (issue 17 item 4, KIP-853's
``controller.quorum.bootstrap.servers``): in the simulator, brokers whose
voter list names only voter 3 register with the leader (another voter),
heartbeat to it, and follow the next leader when it is killed. The
follower's NOT_LEADER answers name the leader and where it listens."""

from jepsen_like.sim._brokers import BrokerSimOptions, BrokerSimulation, sim_endpoint
from registration import BrokerState

GIVEN = 3
BOUND_MS = 30_000


def _all_online(sim: BrokerSimulation) -> bool:
    return all(sim.broker_state(broker) is BrokerState.ONLINE for broker in sim.broker_options.broker_ids)


def test_brokers_given_one_follower_register_and_follow_the_next_leader():
    # Seed 0: voter 1 leads first, voter 2 next; neither is the voter the
    # brokers were given (asserted below, so the seed keeps its meaning).
    sim = BrokerSimulation(0, BrokerSimOptions(brokers=2, broker_bootstrap=(GIVEN,)))
    assert sim.run_until_true(lambda: _all_online(sim), BOUND_MS)
    first = sim.leader()
    assert first is not None and first != GIVEN
    for broker in sim.broker_options.broker_ids:
        core = sim.nodes[broker].core
        assert core.voters.ids == (GIVEN,)  # all it was given
        assert core.leader_id == first
        # Learned from the follower's NOT_LEADER answer.
        assert core.learned_endpoints[first] == sim_endpoint(first)
        assert sim.broker_process(broker).driver.registration_target(1) == first

    sim.crash(first)
    assert sim.run_until_true(lambda: sim.leader() not in (None, first), BOUND_MS)
    second = sim.leader()
    assert second != GIVEN
    took_over_ms = sim.now_ms
    # Every broker heartbeats to the new leader (only the active controller
    # records heartbeats) and is Online.
    assert sim.run_until_true(
        lambda: _all_online(sim)
        and {seen.broker_id for seen in sim.heartbeats_seen if seen.time_ms > took_over_ms and not seen.error}
        == set(sim.broker_options.broker_ids),
        BOUND_MS,
    )
    for broker in sim.broker_options.broker_ids:
        core = sim.nodes[broker].core
        assert core.leader_id == second
        assert core.learned_endpoints[second] == sim_endpoint(second)
        assert list(sim.broker_process(broker).driver.known_controllers()) == [second, GIVEN, first]
