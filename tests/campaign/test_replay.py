"""Schedules on real processes (issue 20, docs/replay.md): what a
campaign can run again and what it refuses, and the zombie-leader round
trip: found by a real campaign, reproduced and shrunk in the simulator, and
the shrunk schedule failing on real processes again."""

import dataclasses
import json

import pytest
from click.testing import CliRunner

from jepsen_like.campaign import Campaign, CampaignOptions
from jepsen_like.campaign._replay import options_for, read_schedule
from jepsen_like.campaign.cli import campaign_command
from jepsen_like.sim import Fault, Operation, Schedule, ScheduleError, Timers, replay_schedule, shrink_schedule


def schedule(**changes):
    base = Schedule(
        seed=5,
        voters=3,
        timers=Timers(check_quorum=False, election_timeout_ms=900),
        duration_ms=7000,
        leader=1,
        faults=(Fault(0, 6000, "isolate", 1),),
        operations=(Operation(3000, 1, "write", "r0", 2, 1), Operation(6500, 2, "read", "r0", 1, None, "leader-local")),
        origin="a test",
    )
    return dataclasses.replace(base, **changes)


def test_a_schedule_sets_the_campaign_s_nodes_timers_seed_and_duration(tmp_path):
    (tmp_path / "schedule.json").write_text(schedule().dumps())
    options = options_for(read_schedule(tmp_path), CampaignOptions(brokers=3, workload="mixed"))
    assert (options.controllers, options.brokers, options.workload, options.seed) == (3, 0, "register", 5)
    assert (options.check_quorum, options.election_timeout_ms, options.time_limit_s) == (False, 900, 7.0)
    assert options.describe()["schedule"] == "a test"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"not_replayable": ("fault bridge at 5 ms: the schedule format has no such fault",)}, "cannot be run again on real processes: fault bridge"),
        ({"timers": Timers(pre_vote=False)}, "always runs pre-vote"),
        ({"timers": Timers(tick_ms=5)}, "ticks every 10 ms"),
    ],
)
def test_a_schedule_real_processes_cannot_follow_is_refused(changes, message):
    with pytest.raises(ScheduleError, match=message):
        options_for(schedule(**changes), CampaignOptions())


def test_campaign_replay_refuses_a_bad_file_before_starting_anything(tmp_path):
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps({"format": "pykraft-schedule", "version": 1, "seed": 1, "nodes": {"voters": 0}}))
    result = CliRunner().invoke(campaign_command, ["--replay", str(path), "--store", str(tmp_path / "store")])
    assert result.exit_code == 2
    assert "'voters' 0 is outside 1..7" in result.output
    assert not (tmp_path / "store").exists()


@pytest.mark.processes
@pytest.mark.long  # two campaigns and a shrink of some 3,000 operations: a few minutes on 2 cores (make soak)
async def test_the_zombie_leader_found_on_real_processes_shrinks_in_the_simulator_and_fails_on_real_processes_again(tmp_path):
    found = await Campaign(
        CampaignOptions(
            store=tmp_path / "store", scenario="zombie-leader", check_quorum=False, read_mode="leader-local",
            workload="register", brokers=0, time_limit_s=25, quiesce_s=2.0, checker="reference", seed=1,
        )
    ).run()  # fmt: skip
    assert found.anomalies.get("stale-read", 0) > 0
    recorded = read_schedule(found.run_dir)
    assert not recorded.not_replayable and recorded.faults and recorded.operations
    assert replay_schedule(recorded).anomaly == "stale-read"
    shrunk = shrink_schedule(recorded)
    small = shrunk.schedule
    assert len(small.faults) == 1 and len(small.operations) <= 3 and small.duration_ms < recorded.duration_ms
    # Real timing is not the simulator's (docs/replay.md): docs/replay.md
    # gives the measured rate; three tries make a spurious failure rare.
    for attempt in range(3):
        again = await Campaign(options_for(small, CampaignOptions(store=tmp_path / f"again-{attempt}", quiesce_s=2.0, checker="reference"))).run()
        if again.anomalies.get("stale-read", 0) > 0:
            break
    else:
        pytest.fail(f"the shrunk schedule did not fail on real processes in 3 tries: {small.dumps()}")
    assert read_schedule(again.run_dir).origin.startswith("replay of shrunk from campaign zombie-leader")


@pytest.mark.parametrize(
    ("scenario", "message"),
    [("no-such-scenario", "unknown scenario 'no-such-scenario'"), ("fast-bounce", "a schedule holds voters only")],
)
def test_campaign_from_sim_refuses_a_scenario_it_cannot_follow(tmp_path, scenario, message):
    result = CliRunner().invoke(campaign_command, ["--from-sim", scenario, "--store", str(tmp_path / "store")])
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "store").exists()
