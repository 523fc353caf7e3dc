"""The browser playground's Python side (jepsen_like/sim/_playground.py,
_lessons.py) and ``jepsen-like sim --from-playground``: a session of seed +
timed actions replays exactly, in one go or in steps, after a rewind, and
through the CLI byte for byte; bad sessions are refused with a sentence;
pause is SIGSTOP; every lesson's check passes for its solution and fails
where the lesson says it must."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from _playground_solutions import SOLUTIONS, recorded_session, solve_in_python
from click.testing import CliRunner

from jepsen_like.checker import check_reference
from jepsen_like.sim._lessons import LESSONS, check_json, lesson, lessons_json
from jepsen_like.sim._playground import PageDriver, Playground, PlaygroundError
from jepsen_like.sim.cli import sim_command

S = 1_000_000
ROOT = Path(__file__).resolve().parents[2]


def test_a_session_replays_to_the_same_trace_and_view():
    original = recorded_session()
    document = json.loads(json.dumps(original.session()))
    assert document["until_us"] == 12 * S and len(document["actions"]) == 15
    replayed = Playground.replay(document)
    assert replayed.trace == original.trace
    assert replayed.view() == original.view()
    assert any("PAUSE" in line for line in original.trace) and any("check_quorum off" in line for line in original.trace)
    assert any("PARTITION zone az3 (n3) | n1 n2" in line for line in original.trace)
    assert any("HEAL zone az3 (n3) - n1 n2" in line for line in original.trace)


def test_a_zone_is_cut_from_the_rest_in_one_action_and_mended_in_one():
    """Brokers share their voter's zone (as the campaign lays clusters out):
    cutting az1 cuts n1 and b101 from everyone else, not from each other."""
    playground = broker_session()  # voters 1-3, brokers 101 and 102
    assert playground.view()["zones"] == {"az1": [1, 101], "az2": [2, 102], "az3": [3]}
    playground.act(do="heal")
    playground.act(do="cut_zone", zone="az1")
    inside, outside = (1, 101), (2, 3, 102)
    assert playground.sim.network.blocked_links == {(a, b) for x in inside for y in outside for a, b in ((x, y), (y, x))}
    playground.act(do="cut", node=2, peer=3)
    playground.act(do="mend_zone", zone="az1")
    assert playground.sim.network.blocked_links == {(2, 3), (3, 2)}  # a link cut on its own stays cut
    for zone, complaint in (("az9", "must be one of az1, az2, az3"), (["az1"], "must be a string")):
        with pytest.raises(PlaygroundError, match=complaint):
            playground.act(do="cut_zone", zone=zone)
    with pytest.raises(PlaygroundError, match="holds every node"):
        Playground(7, {"voters": 1}).act(do="cut_zone", zone="az1")


def test_time_in_small_steps_reaches_the_same_state_as_one_jump():
    """What makes live play replayable: the page advances in frames."""
    whole = Playground.replay(recorded_session().session())
    stepped = Playground(7)
    for action in recorded_session().session()["actions"]:
        while stepped.now_us < action["at_us"]:
            stepped.run_until(min(action["at_us"], stepped.now_us + 16_667))
        stepped.apply(action)
    while stepped.now_us < 12 * S:
        stepped.step()
        stepped.run_until(min(12 * S, stepped.now_us + 33_000))
    assert stepped.trace == whole.trace


def test_the_cli_prints_the_same_trace_byte_for_byte(tmp_path):
    original = recorded_session()
    path = tmp_path / "session.json"
    path.write_text(json.dumps(original.session()), encoding="utf-8")
    outcome = CliRunner().invoke(sim_command, ["--from-playground", str(path)])
    assert outcome.exit_code == 0, outcome.stderr
    assert outcome.stdout == "".join(line + "\n" for line in original.trace)
    assert "VALID" in outcome.stderr


def test_rewind_replays_and_keeps_later_actions_until_the_learner_acts():
    original = recorded_session()
    driver = PageDriver()
    assert driver.load(json.dumps(original.session())) == ""
    driver.rewind(4_500_000)
    assert driver.playground.now_us == 4_500_000 and len(driver.future) == 15 - 5
    driver.advance(12 * S)
    assert driver.playground.trace == original.trace
    driver.rewind(4 * S)
    assert driver.act(json.dumps({"do": "crash", "node": 3})) == ""
    assert driver.future == []
    assert json.loads(driver.session_json())["actions"][-1] == {"at_us": 4 * S, "do": "crash", "node": 3}


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"format": 2}, "'format' must be 1"),
        ({"seed": -1}, "'seed'"),
        ({"options": {"voters": 99}}, "'voters'"),
        ({"options": {"turbo": True}}, "unknown turbo"),
        ({"actions": [{"at_us": 5, "do": "explode"}]}, "unknown 'do'"),
        ({"actions": [{"at_us": 5, "do": "crash", "node": 9}]}, "not a node"),
        ({"actions": [{"at_us": 5, "do": "cut", "node": 1, "peer": 1}]}, "two different nodes"),
        ({"actions": [{"at_us": 5, "do": "read", "node": 1, "key": "x", "mode": "psychic"}]}, "'mode'"),
        ({"actions": [{"at_us": 5, "do": "write", "node": 1, "key": "x" * 100, "value": "1"}]}, "'key'"),
        ({"actions": [{"at_us": 9, "do": "heal"}, {"at_us": 5, "do": "heal"}]}, "before now"),
        ({"actions": [{"at_us": True, "do": "heal"}]}, "'at_us' must be an integer"),
        ({"until_us": 10**13}, "'until_us'"),
    ],
)
def test_a_bad_session_is_refused_with_a_sentence(change, complaint, tmp_path):
    document = {"format": 1, "seed": 7, "options": {}, "actions": [], "until_us": 10, **change}
    with pytest.raises(PlaygroundError, match=complaint):
        Playground.replay(document)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    outcome = CliRunner().invoke(sim_command, ["--from-playground", str(path)])
    assert outcome.exit_code == 2 and complaint.split("'")[0] in outcome.stderr and outcome.stdout == ""


def test_the_page_driver_answers_a_refused_action_with_its_reason():
    driver = PageDriver()
    assert "unknown 'do'" in driver.act(json.dumps({"do": "explode"}))
    assert "JSON object" in driver.act("[1]")
    # Nested past the decoder's stack (found by hand: a RecursionError
    # escaped the page's driver and the command line alike).
    deep = "[" * 100_000 + "]" * 100_000
    assert driver.act(deep) == "the action nests too deeply"
    assert driver.load(deep) == "the session nests too deeply"
    with pytest.raises(PlaygroundError, match="nest too deeply"):
        PageDriver.from_json(7, deep)
    assert driver.playground.actions == []


def test_a_session_file_nested_too_deeply_is_refused_with_a_sentence(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"format": 1, "actions": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    outcome = CliRunner().invoke(sim_command, ["--from-playground", str(path)])
    assert outcome.exit_code == 2 and "its JSON nests too deeply" in outcome.stderr and outcome.stdout == ""


def test_a_paused_leader_handles_nothing_and_the_others_move_on():
    playground = Playground(7)
    playground.run_until(3 * S)
    leader = playground.sim.leader()
    core = playground.sim.nodes[leader].core
    ticks = core.current_tick
    playground.act(do="pause", node=leader)
    playground.run_until(8 * S)
    assert core.current_tick == ticks and core.role.value == "leader" and core.epoch == 1
    assert playground.sim.leader() != leader and playground.sim.leader() is not None
    playground.act(do="resume", node=leader)
    playground.run_until(9 * S)
    assert core.role.value != "leader" and core.epoch > 1


def test_a_node_setting_applies_from_its_next_start():
    playground = Playground(7)
    playground.run_until(2 * S)
    playground.act(do="set", node=2, option="pre_vote", on=False)
    assert playground.sim.nodes[2].core.config.pre_vote is True
    playground.act(do="crash", node=2)
    playground.act(do="restart", node=2)
    assert playground.sim.nodes[2].core.config.pre_vote is False
    assert playground.sim.nodes[3].core.config.pre_vote is True
    node = next(n for n in playground.view()["nodes"] if n["id"] == 2)
    assert node["settings"] == {"check_quorum": True, "pre_vote": False} and node["pre_vote"] is False


def test_the_view_shows_timers_logs_messages_and_drops():
    playground = Playground(7)
    playground.run_until(3 * S)
    playground.act(do="write", node=1, key="x", value="1")
    playground.act(do="cut", node=1, peer=2)
    playground.run_until(3_002_000)
    view = playground.view()
    leader = next(n for n in view["nodes"] if n["id"] == 1)
    follower = next(n for n in view["nodes"] if n["id"] == 3)
    assert leader["role"] == "leader" and set(leader["timers"]) >= {"check_quorum"}
    assert 0 < follower["timers"]["fetch"] <= 2000
    assert leader["log"][-1] == [leader["log_end"] - 1, 1] and leader["hw"] < leader["log_end"]
    assert view["cut"] == [[1, 2]] and view["leader"] == 1
    in_flight, dropped = [], []
    while playground.now_us < 6 * S:  # fine steps first: a message flies for 0.5 to 2 ms
        playground.run_until(playground.now_us + (250 if playground.now_us < 3_100_000 else 10_000))
        view = playground.view()
        in_flight += [(view["now_us"], m) for m in view["messages"] if not m["dropped"]]
        dropped += [m for m in view["messages"] if m["dropped"]]
    assert in_flight and all(m["sent_us"] <= now < m["arrive_us"] for now, m in in_flight)
    assert dropped and all({m["src"], m["dst"]} == {1, 2} for m in dropped)


@pytest.mark.parametrize("lesson_id", [found.id for found in LESSONS])
def test_each_lesson_is_solved_by_its_solution_and_not_before(lesson_id):
    found = lesson(lesson_id)
    playground = found.start()
    assert found.check(playground)[0] is False
    solve_in_python(playground, SOLUTIONS[lesson_id])
    done, detail = found.check(playground)
    assert done, detail
    driver = PageDriver(found.seed, found.options)
    driver.playground = playground
    assert json.loads(check_json(lesson_id, driver)) == {"done": True, "detail": detail}


@pytest.mark.parametrize(
    ("lesson_id", "options", "why"),
    [
        ("zombie-leader", {"check_quorum": True}, "no stale read"),
        ("check-quorum", {"check_quorum": False}, "cut the leader"),
    ],
)
def test_the_zombie_needs_check_quorum_off(lesson_id, options, why):
    """KAFKA-15489: with check quorum off the cut-off leader serves a
    stale leader-local read; with it on it resigns and cannot."""
    found = lesson(lesson_id)
    playground = Playground(found.seed, {**found.options, **options})
    solve_in_python(playground, SOLUTIONS[lesson_id])
    done, detail = found.check(playground)
    assert not done and why in detail


def test_pre_vote_off_lets_the_lone_node_force_an_election():
    found = lesson("pre-vote")
    playground = Playground(found.seed, {**found.options, "pre_vote": False})
    solve_in_python(playground, SOLUTIONS["pre-vote"])
    done, detail = found.check(playground)
    assert not done and "an election happened" in detail


def test_the_lesson_menu_lists_every_lesson_with_its_text():
    menu = json.loads(lessons_json())
    assert [entry["id"] for entry in menu] == [found.id for found in LESSONS]
    assert all(entry["goal"] and entry["hint"] and entry["title"] for entry in menu)


def test_the_build_ships_the_simulators_import_graph_and_pure_python_msgpack():
    """What the page loads: the modules the driver imports (the core, the
    controller's and the broker's brains, the simulator), msgpack's
    pure-Python fallback, and nothing of the runtime (trio, sockets)."""
    spec = importlib.util.spec_from_file_location("build_playground", ROOT / "tools" / "build_playground.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    shipped = [arcname for arcname, _ in builder.python_sources()]
    for needed in ("jepsen_like/sim/_playground.py", "jepsen_like/sim/_lessons.py", "quorum/_node.py", "registration/_controller.py", "broker_agent/_driver.py", "msgpack/fallback.py"):
        assert needed in shipped
    # the checker's pure-Python reference checks judge the page's reads; its Spark job stays out
    assert "jepsen_like/checker/_reference.py" in shipped
    spark_side = ("jepsen_like/checker/_job.py", "jepsen_like/checker/_frames.py", "jepsen_like/checker/_tier1.py", "jepsen_like/checker/_synth.py")
    assert not [name for name in shipped if name.startswith(("quorum/runtime", "quorum/storage", *spark_side)) or not name.endswith(".py")]


def test_learn_raft_links_every_lesson():
    text = (ROOT / "docs" / "learn-raft.md").read_text(encoding="utf-8")
    for found in LESSONS:
        assert f"#lesson={found.id}" in text, found.id


def broker_session() -> Playground:
    playground = Playground(7, {"brokers": True})
    playground.run_until(3 * S)
    playground.act(do="add_broker")
    playground.run_until(6 * S)
    playground.act(do="write", node=1, key="k", value="orders")
    playground.act(do="read", node=101, key="k", mode="linearizable")
    playground.act(do="add_broker")
    playground.run_until(8 * S)
    for voter in (1, 2, 3):
        playground.act(do="cut", node=voter, peer=102)
    playground.act(do="crash", node=101)
    playground.act(do="restart", node=101)
    playground.run_until(14 * S)
    return playground


def test_brokers_register_heartbeat_fence_and_replay_exactly(tmp_path):
    original = broker_session()
    assert original.violation is None
    brokers = {n["id"]: n["broker"] for n in original.view()["nodes"] if n["broker"] is not None}
    assert set(brokers) == {101, 102}
    assert brokers[101]["state"] == "Online" and brokers[101]["heartbeats"] > 0
    assert brokers[102]["state"] == "Fenced", "cut off from the controller for 6 s: past its 3 s session"
    assert any("REGISTER" in line for line in original.trace) and any("create_topic orders" in line for line in original.trace)
    ops = original.view()["ops"]
    assert [op["f"] for op in ops] == ["create_topic", "list_topics"] and all(op["type"] == "ok" for op in ops)
    replayed = Playground.replay(json.loads(json.dumps(original.session())))
    assert replayed.trace == original.trace
    path = tmp_path / "brokers.json"
    path.write_text(json.dumps(original.session()), encoding="utf-8")
    outcome = CliRunner().invoke(sim_command, ["--from-playground", str(path)])
    assert outcome.exit_code == 0 and outcome.stdout == "".join(line + "\n" for line in original.trace)


def test_broker_actions_are_refused_where_they_make_no_sense():
    plain = Playground(7)
    with pytest.raises(PlaygroundError, match="brokers need a cluster started with brokers"):
        plain.act(do="add_broker")
    with_brokers = Playground(7, {"brokers": True})
    with pytest.raises(PlaygroundError, match="not a node"):
        with_brokers.act(do="crash", node=101)  # not added yet
    with_brokers.act(do="add_broker")
    with pytest.raises(PlaygroundError, match="through a broker"):
        with_brokers.act(do="read", node=1, key="k", mode="linearizable")
    with pytest.raises(PlaygroundError, match="not a node"):
        with_brokers.act(do="set", node=101, option="pre_vote", on=False)


def test_stale_reads_are_judged_by_the_checkers_own_check(tmp_path):
    """A leader-local read may miss a write acknowledged less than one
    check-quorum window earlier (run_scenario's verdict says the same); a
    later one is stale, and the page's view flags exactly that read: the one
    the checker's reference path flags in the same history read from disk."""
    playground = Playground(7, {"check_quorum": False})
    playground.run_until(3 * S)
    playground.act(do="cut", node=1, peer=2)
    playground.act(do="cut", node=1, peer=3)
    playground.run_until(7 * S)
    playground.act(do="write", node=3, key="k", value="new")
    playground.run_until(7_500_000)
    assert [op["type"] for op in playground.view()["ops"]] == ["ok"]
    playground.act(do="read", node=1, key="k", mode="leader-local")  # 0.5 s after the write's ack
    playground.run_until(11 * S)
    assert [op["value"] for op in playground.view()["ops"]] == ["new", None] and playground.stale_reads() == []
    playground.act(do="read", node=1, key="k", mode="leader-local")  # 4 s after it
    playground.run_until(11_500_000)
    (stale,) = playground.stale_reads()
    flagged = [op for op in playground.view()["ops"] if op["stale"]]
    assert [op["process"] for op in flagged] == [stale["process"]] and flagged[0]["start_us"] == 11 * S
    history_dir = tmp_path / "page-history"
    history_dir.mkdir()
    (history_dir / "history.jsonl").write_text("".join(json.dumps(event) + "\n" for event in playground.sim.history), encoding="utf-8")
    options = playground.sim.options
    (history_dir / "meta.json").write_text(json.dumps({"fetch_timeout_ms": options.fetch_timeout_ms, "check_quorum_factor": options.check_quorum_factor}), encoding="utf-8")
    [checked] = check_reference([str(history_dir)])
    witnesses = checked.checks["stale-read"]["witnesses"]
    assert [witness["read"]["process"] for witness in witnesses] == [stale["process"]]
