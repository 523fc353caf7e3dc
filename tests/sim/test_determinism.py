"""One seed, one run: the simulator replays a seed exactly."""

import pytest

from jepsen_like.sim import run_scenario


@pytest.mark.parametrize("scenario", ["random", "flapping-network", "zombie-leader"])
def test_the_same_seed_replays_the_same_trace_and_history(scenario):
    first: list[str] = []
    second: list[str] = []
    a = run_scenario(scenario, 42, trace=first.append, full_trace=True)
    b = run_scenario(scenario, 42, trace=second.append, full_trace=True)
    assert first == second
    assert a.simulation.history == b.simulation.history
    assert a.summary() == b.summary()


def test_different_seeds_draw_different_runs():
    a = run_scenario("random", 1)
    b = run_scenario("random", 2)
    assert a.simulation.history != b.simulation.history
