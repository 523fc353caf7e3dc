"""Schedules (issue 20, docs/replay.md): the format and its validation, a
recorded campaign schedule replayed in the simulator, and the shrinker
turning the zombie-leader run (check quorum off) into a small schedule
that still fails there, and passes once check quorum is on."""

import dataclasses
import json
from functools import cache

import pytest
from click.testing import CliRunner

from jepsen_like.sim import (
    MAX_SCHEDULE_BYTES,
    Fault,
    Operation,
    Schedule,
    ScheduleError,
    Timers,
    loads_schedule,
    parse_schedule,
    replay_schedule,
    schedule_of_scenario,
    shrink_schedule,
)
from jepsen_like.sim.cli import sim_command


def small_schedule(**changes):
    schedule = Schedule(
        seed=3,
        voters=3,
        timers=Timers(check_quorum=False),
        duration_ms=9000,
        leader=2,
        faults=(Fault(500, 7000, "isolate", 2),),
        operations=(
            Operation(100, 1, "write", "r0", 2, 1),
            Operation(4000, 2, "write", "r0", 1, 2),
            Operation(7000, 3, "read", "r0", 2, None, "leader-local"),
            Operation(7100, 4, "cas", "r0", 1, [2, 3]),
        ),
        origin="a test",
    )
    return dataclasses.replace(schedule, **changes)


def document(**changes):
    raw = small_schedule().to_json()
    raw.update(changes)
    return raw


def test_a_schedule_survives_its_own_file_format():
    schedule = small_schedule()
    assert loads_schedule(schedule.dumps()) == schedule
    assert parse_schedule(json.loads(schedule.dumps())).to_json() == schedule.to_json()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"format": "playground"}, "'format' must be 'pykraft-schedule'"),
        ({"version": 2}, "'version' 2 is not one this pykraft reads"),
        ({"extra": 1}, "unknown fields: extra"),
        ({"seed": -1}, "'seed' -1 is outside"),
        ({"nodes": {"voters": 9}}, "'voters' 9 is outside 1..7"),
        ({"timers": {"tick_ms": 10, "election_timeout_ms": 5, "fetch_timeout_ms": 2000, "check_quorum": True, "pre_vote": True}}, "'election_timeout_ms' 5 is outside"),
        ({"faults": [{"at_ms": 0, "duration_ms": 10, "kind": "meteor", "node": 1}]}, "fault 1: 'kind' must be one of isolate, kill, pause"),
        ({"faults": [{"at_ms": 8000, "duration_ms": 5000, "kind": "kill", "node": 1}]}, "fault 1: 'duration_ms' 5000 is outside 0..1000"),
        ({"operations": [{"at_ms": 1, "process": 1, "f": "write", "key": "r0", "node": 4, "value": 1}]}, "operation 1: 'node' 4 is outside 1..3"),
        ({"operations": [{"at_ms": 1, "process": 1, "f": "read", "key": "r0", "node": 1, "mode": "psychic"}]}, "a read's 'mode' must be one of"),
        ({"operations": [{"at_ms": 1, "process": 1, "f": "cas", "key": "r0", "node": 1, "value": 3}]}, "a cas's 'value' is [expected, new]"),
        ({"operations": [{"at_ms": 5, "process": 1, "f": "write", "key": "r0", "node": 1, "value": 1}, {"at_ms": 1, "process": 2, "f": "write", "key": "r0", "node": 1, "value": 2}]}, "in the order of their 'at_ms'"),
        ({"operations": [{}] * 100_001}, "'operations' holds 100001 entries; at most 100000"),
    ],
)
def test_a_malformed_schedule_is_refused_with_the_field_and_the_reason(changes, message):
    with pytest.raises(ScheduleError) as refused:
        parse_schedule(document(**changes))
    assert message in str(refused.value)


def test_a_file_too_large_or_not_json_is_refused():
    with pytest.raises(ScheduleError, match="at most"):
        loads_schedule(b" " * (MAX_SCHEDULE_BYTES + 1))
    with pytest.raises(ScheduleError, match="not JSON"):
        loads_schedule(b"{")
    # Nested past the decoder's stack: a clear refusal, not a RecursionError
    # escaping as "a bug in pykraft" (found by hand).
    with pytest.raises(ScheduleError, match="nests too deeply"):
        loads_schedule(b"[" * 100_000 + b"]" * 100_000)


def test_relabelling_swaps_the_recorded_leader_with_the_replay_s_own():
    moved = small_schedule().relabelled(3)
    assert moved.leader == 3
    assert [f.node for f in moved.faults] == [3]
    assert [op.node for op in moved.operations] == [3, 1, 3, 1]


@cache
def zombie_run():
    """The simulator's zombie-leader run (seed 7, check quorum off) as a
    schedule, cut to its first 8 s (the isolation began at 0.3 s)."""
    schedule, result = schedule_of_scenario("zombie-leader", 7, check_quorum=False)
    assert not result.valid and result.stale_reads > 0
    return schedule.with_parts(duration_ms=8000)


@cache
def zombie_schedule():
    """``zombie_run`` with every 16th operation (11 of them): small enough
    to shrink in a few seconds (a real campaign's thousands shrink the same
    way in tests/campaign/test_replay.py, marked long)."""
    schedule = zombie_run()
    return schedule.with_parts(operations=schedule.operations[::16])


def test_a_scenario_run_becomes_a_schedule_that_fails_the_same_way():
    schedule = zombie_run()
    assert [(f.kind, f.node) for f in schedule.faults] == [("isolate", schedule.leader)]
    replay = replay_schedule(schedule)
    assert replay.anomaly == "stale-read"
    # The zombie (the isolated leader) answered the stale reads.
    assert {stale["node"] for stale in replay.stale_reads} == {schedule.leader}
    # The replay is a playground session too: it replays byte for byte.
    from jepsen_like.sim._playground import Playground

    again = Playground.replay(json.loads(json.dumps(replay.session)))
    assert again.trace == replay.playground.trace


@cache
def shrunk_zombie():
    return shrink_schedule(zombie_schedule())


def test_the_zombie_leader_schedule_shrinks_to_one_fault_and_two_operations_and_still_fails():
    shrunk = shrunk_zombie()
    small = shrunk.schedule
    assert shrunk.anomaly == "stale-read"
    assert [f.kind for f in small.faults] == ["isolate"]
    # A write the new leader acknowledged, and a leader-local read at the zombie.
    assert [op.f for op in small.operations] == ["write", "read"]
    assert small.duration_ms < zombie_schedule().duration_ms
    assert replay_schedule(small).stale_reads
    # The same schedule with check quorum on: the zombie resigns in time.
    fixed = dataclasses.replace(small, timers=dataclasses.replace(small.timers, check_quorum=True))
    assert replay_schedule(fixed).anomaly is None


def test_a_schedule_that_does_not_fail_is_not_shrunk():
    fixed = zombie_schedule()
    fixed = dataclasses.replace(fixed, timers=dataclasses.replace(fixed.timers, check_quorum=True))
    with pytest.raises(ScheduleError, match="does not fail in the simulator"):
        shrink_schedule(fixed)


def test_a_recorded_campaign_schedule_replays_in_the_simulator(tmp_path):
    """A campaign's history (as ``_write_schedule`` reads it) becomes a
    schedule, and the simulator reproduces its stale read."""
    from jepsen_like.campaign import CampaignOptions
    from jepsen_like.campaign._replay import schedule_of_run

    start_ns = 5_000_000_000
    ms = lambda t: start_ns + t * 1_000_000  # noqa: E731
    fault = {"fault_id": 1, "shape": "isolate", "backend": "proxy", "node": 1, "clients": False}
    events = [
        {"process": "nemesis", "type": "info", "f": "isolate-leader", "key": None, "value": {"phase": "start", "fault": fault}, "time": ms(300)},
        {"process": 0, "type": "invoke", "f": "write", "key": "r0", "value": 1, "time": ms(100)},
        {"process": 0, "type": "ok", "f": "write", "key": "r0", "value": 1, "node": "1", "offset": 3, "time": ms(110)},
        {"process": 1, "type": "invoke", "f": "write", "key": "r0", "value": 2, "time": ms(4000)},
        {"process": 1, "type": "ok", "f": "write", "key": "r0", "value": 2, "node": "2", "offset": 6, "time": ms(4010)},
        {"process": 2, "type": "invoke", "f": "read", "key": "r0", "value": None, "mode": "leader-local", "time": ms(8000)},
        {"process": 2, "type": "ok", "f": "read", "key": "r0", "value": 1, "mode": "leader-local", "node": "1", "time": ms(8001)},
        {"process": 3, "type": "invoke", "f": "create_topic", "key": "topic/t0", "value": None, "time": ms(8100)},
        {"process": "nemesis", "type": "info", "f": "isolate-leader", "key": None, "value": {"phase": "end", "fault": fault}, "time": ms(12300)},
    ]
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps({"index": i, **e}) + "\n" for i, e in enumerate(events)))
    options = CampaignOptions(scenario="zombie-leader", controllers=3, check_quorum=False, seed=11, time_limit_s=14)
    schedule = schedule_of_run(history, options, leader=1, start_ns=start_ns, origin="test run")
    assert schedule.faults == (Fault(300, 12000, "isolate", 1),)
    assert [(op.at_ms, op.f, op.node) for op in schedule.operations] == [(100, "write", 1), (4000, "write", 2), (8000, "read", 1)]
    assert schedule.not_replayable == ("1 metadata operations (topics, brokers): a schedule holds register operations only",)
    assert loads_schedule(schedule.dumps()) == schedule
    # A fault that healed after the time limit (a busy host) stretches the schedule.
    late = schedule_of_run(history, dataclasses.replace(options, time_limit_s=12), leader=1, start_ns=start_ns, origin="late")
    assert late.duration_ms == 12300 and loads_schedule(late.dumps()) == late
    replay = replay_schedule(schedule)
    assert replay.anomaly == "stale-read"
    assert [stale["process"] for stale in replay.stale_reads] == [replay.stale_reads[0]["process"]]


def test_sim_from_campaign_reproduces_shrinks_and_prints_the_replay_command_and_a_test(tmp_path):
    path = tmp_path / "schedule.json"
    path.write_text(shrunk_zombie().schedule.dumps())  # small: the CLI's own shrinking takes few runs
    result = CliRunner().invoke(sim_command, ["--from-campaign", str(tmp_path), "--trace", "none"])
    assert "does not fail" not in result.output
    assert result.exit_code == 1, result.output
    assert "INVALID (stale-read" in result.output and "reproduced in the simulator" in result.output
    shrunk_path = tmp_path / "schedule.shrunk.json"
    assert f"replay: jepsen-like sim --from-campaign {shrunk_path} --no-shrink" in result.output
    assert "def test_shrunk_schedule_still_fails():" in result.output
    # The stub runs as printed.
    stub = result.output.split("regression test (paste into tests/sim/):\n", 1)[1]
    code = "\n".join(line[8:] for line in stub.splitlines())
    namespace: dict = {}
    exec(compile(code, "stub", "exec"), namespace)  # noqa: S102 - the CLI's own output
    namespace["test_shrunk_schedule_still_fails"]()
    again = CliRunner().invoke(sim_command, ["--from-campaign", str(shrunk_path), "--no-shrink", "--trace", "none"])
    assert again.exit_code == 1 and "reproduced in the simulator" in again.output


def test_sim_from_campaign_refuses_a_file_that_is_not_a_schedule(tmp_path):
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps({"format": "pykraft-schedule", "version": 1, "seed": "seven"}))
    result = CliRunner().invoke(sim_command, ["--from-campaign", str(path)])
    assert result.exit_code == 2
    assert "is not a schedule" in result.stderr and "'seed' must be an integer" in result.stderr
