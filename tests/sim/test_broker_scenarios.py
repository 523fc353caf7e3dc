"""Brokers and the controller in the simulator: the three broker scenarios
(seeds 000, 001, 003 case 2) hold their promises, replay exactly, and
their checks fail when the behaviour they check is switched off."""

import dataclasses
import json

import pytest
from click.testing import CliRunner

from jepsen_like.sim import InvariantViolation, find_stale_reads, run_scenario
from jepsen_like.sim._broker_scenarios import broker_options
from jepsen_like.sim._brokers import BrokerSimOptions, BrokerSimulation
from jepsen_like.sim import cli as sim_cli
from jepsen_like.sim.cli import sim_command, sweep_command
from registration import BrokerState

OPTIONS = BrokerSimOptions()
SELF_FENCE_BOUND_MS = OPTIONS.session_timeout_ms + OPTIONS.heartbeat_interval_ms


def _fields(options: BrokerSimOptions) -> dict:
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}


def _settled_cleanly(result) -> None:
    """After the story, every partition is led by an Online broker and
    every broker is Online in the committed log."""
    sim = result.simulation
    assert sim.truth_leaderless() == []
    for broker_id in sim.broker_options.broker_ids:
        assert sim.truth.image.broker_state(broker_id) is BrokerState.ONLINE


# =========================================================================
# fast-bounce (seed 000, KIP-380)
# =========================================================================


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_bounce_registers_the_new_incarnation_and_refuses_the_old_epoch(seed):
    result = run_scenario("fast-bounce", seed)
    assert result.valid, result.violation
    extra = result.extra
    sim = result.simulation
    victim = extra["victim"]
    # The controller saw the bounce: a new epoch for the new process, well
    # before the old session could have expired.
    assert extra["new_broker_epoch"] > extra["old_broker_epoch"]
    assert sim.truth.image.broker(victim).incarnation_id == sim.processes[victim].incarnation_id
    assert extra["bounce_reregistered_ms"] < OPTIONS.session_timeout_ms
    # The old process's want-shutdown heartbeat, replayed, was refused; so
    # was a client still holding the old epoch.
    assert extra["old_heartbeat_refused"] is True
    assert extra["stale_epoch_refusals"] >= 1
    refused = [op for op in sim.history if op.get("error") == "STALE_BROKER_EPOCH"]
    assert refused and all(op["broker_epoch"] == extra["old_broker_epoch"] for op in refused)
    _settled_cleanly(result)


def test_a_broker_refuses_a_request_meant_for_another_epoch_and_the_client_forgets_it():
    sim = BrokerSimulation(5, BrokerSimOptions())
    assert sim.run_until_true(lambda: sim.broker_state(101) is BrokerState.ONLINE, 20_000)
    epoch = sim.broker_process(101).lifecycle.broker_epoch
    reader = sim.new_reader((101,), pinned=True)
    reader.known_epochs[101] = epoch + 1000
    sim.read_metadata(reader, "cluster_metadata")
    sim.run_for(100)
    assert sim.history[-1]["error"] == "STALE_BROKER_EPOCH"
    assert 101 not in reader.known_epochs
    sim.read_metadata(reader, "cluster_metadata")
    sim.run_for(100)
    assert sim.history[-1]["type"] == "ok"
    assert reader.known_epochs[101] == epoch


def test_without_epoch_checks_a_broker_answering_another_epochs_request_is_caught():
    sim = BrokerSimulation(5, BrokerSimOptions(broker_epoch_checks=False))
    assert sim.run_until_true(lambda: sim.broker_state(101) is BrokerState.ONLINE, 20_000)
    reader = sim.new_reader((101,), pinned=True)
    reader.known_epochs[101] = sim.broker_process(101).lifecycle.broker_epoch + 1000
    sim.read_metadata(reader, "cluster_metadata")
    with pytest.raises(InvariantViolation, match="stale-epoch-accepted"):
        sim.run_for(100)


def test_fast_bounce_without_epoch_checks_reports_the_stale_heartbeat_accepted():
    options = BrokerSimOptions(**{**_fields(broker_options(0)), "broker_epoch_checks": False})
    result = run_scenario("fast-bounce", 0, options)
    assert not result.valid
    assert result.failure_class == "correctness"
    assert result.violation.startswith("stale-epoch-accepted")


# =========================================================================
# broker-cut-from-controller (seeds 001, 003 case 2)
# =========================================================================


@pytest.mark.parametrize(
    ("seed", "cut"), [(0, "both ways"), (2, "controller to broker"), (3, "broker to controller")]
)
def test_a_broker_cut_from_the_controller_fences_itself_and_clients_move_on(seed, cut):
    result = run_scenario("broker-cut-from-controller", seed)
    assert result.valid, result.violation
    extra = result.extra
    assert extra["cut"] == cut
    assert 0 < extra["self_fence_ms"] <= SELF_FENCE_BOUND_MS
    assert extra["victim_answers_after_session"] == 0
    assert extra["victim_refusals"] > 0
    assert extra["reads_ok_elsewhere_during_cut"] > 0
    # The controller fenced it too: by session expiry, or (one-way cut, its
    # heartbeats still arriving) on its want_fence.
    assert extra["controller_fence_ms"] is not None
    assert result.stale_reads == 0
    _settled_cleanly(result)


def test_without_self_fencing_the_cut_broker_serves_stale_metadata_and_is_caught():
    options = BrokerSimOptions(**{**_fields(broker_options(2)), "self_fencing": False})
    result = run_scenario("broker-cut-from-controller", 2, options)
    assert not result.valid
    assert result.failure_class == "correctness"
    assert result.violation.startswith("slow-self-fence")
    assert result.extra["victim_answers_after_session"] > 0
    victim = result.extra["victim"]
    assert result.stale_reads > 0
    assert {example["node"] for example in result.stale_examples} == {victim}


def test_find_stale_reads_holds_broker_reads_to_the_staleness_bound():
    ms = 1_000_000
    history = [
        {"index": 0, "time": 0, "process": 1, "type": "invoke", "f": "create_topic", "key": "metadata", "value": "a"},
        {"index": 1, "time": 10 * ms, "process": 1, "type": "ok", "f": "create_topic", "key": "metadata", "value": "a", "offset": 7},
        # Invoked 5 s after the write was acknowledged, saw offset 6: within a 6 s bound.
        {"index": 2, "time": 5010 * ms, "process": 2, "type": "invoke", "f": "list_topics", "key": "metadata", "value": None, "mode": "broker"},
        {"index": 3, "time": 5011 * ms, "process": 2, "type": "ok", "f": "list_topics", "key": "metadata", "value": 7, "mode": "broker", "offset": 6},
        # Invoked 7 s after: stale.
        {"index": 4, "time": 7010 * ms, "process": 2, "type": "invoke", "f": "describe_topic", "key": "metadata", "value": None, "mode": "broker"},
        {"index": 5, "time": 7011 * ms, "process": 2, "type": "ok", "f": "describe_topic", "key": "metadata", "value": 7, "mode": "broker", "offset": 6, "node": 101},
    ]
    stale = find_stale_reads(history, 3000, broker_bound_ms=6000)
    assert [(example["node"], example["missed_offset"]) for example in stale] == [(101, 7)]
    with pytest.raises(ValueError, match="staleness_bound_ms"):
        find_stale_reads(history, 3000)


# =========================================================================
# controlled-shutdown (seed 001 "Stopping")
# =========================================================================


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_controlled_shutdown_moves_every_leadership_before_the_broker_goes_offline(seed):
    result = run_scenario("controlled-shutdown", seed)
    assert result.valid, result.violation
    extra = result.extra
    assert extra["partitions_led"] > 0
    assert extra["stop_reason"] == "the controller says shut down"
    assert extra["leadership_moved_ms"] <= extra["broker_offline_ms"]
    assert extra["leadership_moved_ms"] <= extra["controller_offline_ms"]
    _settled_cleanly(result)


def test_a_broker_that_gives_up_its_controlled_shutdown_at_once_is_caught():
    options = BrokerSimOptions(**{**_fields(broker_options(0)), "shutdown_timeout_ms": 1})
    result = run_scenario("controlled-shutdown", 0, options)
    assert not result.valid
    assert result.failure_class == "correctness"
    assert result.violation.startswith("leadership-not-moved")
    assert "shutdown timeout" in result.violation


# =========================================================================
# Sweeps, determinism, the command line
# =========================================================================


@pytest.mark.parametrize(
    ("scenario", "seeds"),
    [("fast-bounce", range(10, 18)), ("broker-cut-from-controller", range(10, 14)), ("controlled-shutdown", range(10, 18))],
)
def test_a_small_seed_sweep_is_valid(scenario, seeds):
    failures = []
    for seed in seeds:
        result = run_scenario(scenario, seed)
        if not result.valid:
            failures.append((seed, result.failure_class, (result.violation or "").splitlines()[0]))
    assert failures == []


@pytest.mark.parametrize("scenario", ["fast-bounce", "broker-cut-from-controller", "controlled-shutdown"])
def test_the_same_seed_replays_the_same_story_history_and_summary(scenario):
    first: list[str] = []
    second: list[str] = []
    a = run_scenario(scenario, 3, trace=first.append, full_trace=scenario == "fast-bounce")
    b = run_scenario(scenario, 3, trace=second.append, full_trace=scenario == "fast-bounce")
    assert first == second
    assert a.simulation.history == b.simulation.history
    assert a.summary() == b.summary()


def test_seeds_draw_different_broker_runs():
    a = run_scenario("controlled-shutdown", 1)
    b = run_scenario("controlled-shutdown", 2)
    assert a.simulation.history != b.simulation.history


def test_jepsen_like_sim_runs_a_broker_scenario_with_a_story():
    outcome = CliRunner().invoke(sim_command, ["--scenario", "fast-bounce", "--seed", "0", "--json"])
    assert outcome.exit_code == 0, outcome.output
    lines = outcome.output.splitlines()
    assert lines[0].startswith("SEED=0 scenario=fast-bounce")
    story = "\n".join(lines)
    for expected in ("REGISTER attempt 1", "Fenced -> Online", "SHUTDOWN b", "NEMESIS kill -9", "STALE_BROKER_EPOCH"):
        assert expected in story
    summary = json.loads(lines[-1])
    assert summary["valid"] is True
    assert summary["new_broker_epoch"] > summary["old_broker_epoch"]


def test_jepsen_like_sweep_reports_the_scenarios_figures():
    outcome = CliRunner().invoke(sweep_command, ["--scenario", "controlled-shutdown", "--seeds", "2", "--json"])
    assert outcome.exit_code == 0, outcome.output
    summary = json.loads(outcome.output.splitlines()[-1])
    assert summary["failures"] == 0
    assert summary["leadership_moved_ms"]["n"] == 2
    assert "leadership_moved_ms:" in outcome.output


def test_jepsen_like_sweep_takes_the_broker_count_and_replays_with_it(monkeypatch):
    ran = []
    real_run = sim_cli.run_scenario

    def recording_run(scenario, seed, options=None, **kwargs):
        ran.append(options.brokers)
        result = real_run(scenario, seed, options, **kwargs)
        result.valid, result.failure_class, result.violation = False, "liveness", "made up to see the replay line"
        return result

    monkeypatch.setattr(sim_cli, "run_scenario", recording_run)
    outcome = CliRunner().invoke(sweep_command, ["--scenario", "broker-stampede", "--brokers", "12", "--seeds", "2", "--json"])
    assert outcome.exit_code == 1, outcome.output
    assert ran == [12, 12]
    assert "replay: jepsen-like sim --scenario broker-stampede --seed 0 --brokers 12" in outcome.output
    assert json.loads(outcome.output.splitlines()[-1])["brokers"] == 12


def test_jepsen_like_sweep_refuses_a_broker_count_for_a_scenario_without_brokers():
    outcome = CliRunner().invoke(sweep_command, ["--scenario", "random", "--brokers", "3", "--seeds", "1"])
    assert outcome.exit_code == 2
    assert "--brokers: random runs no brokers" in outcome.output


@pytest.mark.parametrize("seeds", ["0", "-1"])
def test_jepsen_like_sweep_refuses_a_seed_count_below_one(seeds):
    """Found by hand: ``--seeds -1`` reported "-1 seeds, 0 failures,
    -339672.5 seeds/s" and exit 0: a sweep that checked nothing, passing."""
    outcome = CliRunner().invoke(sweep_command, ["--seeds", seeds])
    assert outcome.exit_code == 2
    assert f"Invalid value for '--seeds': {seeds} is not in the range x>=1" in outcome.output
