"""A schedule (``_schedule.py``) in the simulator: replayed against the
real sans-IO cores, judged by the checker's stale-read check, and shrunk
by delta debugging (issue 20; docs/replay.md).

The replay drives a :class:`Playground` (the browser playground's driver):
each fault and operation becomes one of its actions, applied at its time,
so a replay is also a playground session (``jepsen-like sim
--from-playground`` replays it byte for byte, and the page can load it).

Clients: a campaign's client follows a node's NOT_LEADER hint to the
leader it names; the replay does the same with the node's own view at the
moment the operation is sent (``core.leader_id``), so an operation goes
where a real client's would, not where an oracle would send it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ._cluster import US_PER_MS, InvariantViolation, Simulation
from ._playground import Playground
from ._scenario_kit import _wait_for_leader
from ._schedule import Fault, Operation, Schedule, ScheduleError, Timers

#: After the schedule ends every fault is healed, and the run goes on until
#: every operation has ended: at most this long past the client timeout.
SETTLE_MS = 1_000
#: The shrinker's bound on simulator runs (each is a fraction of a second).
SHRINK_BUDGET_RUNS = 600
#: Duration is shrunk to this resolution.
DURATION_STEP_MS = 100

_Item = TypeVar("_Item")


@dataclass(slots=True)
class SimReplay:
    """What a schedule did in the simulator."""

    schedule: Schedule  # as run: node ids relabelled to the simulator's first leader
    stale_reads: list[dict[str, Any]]
    violation: str | None
    playground: Playground
    # Operations the simulator has no form of (compare-and-set), left out.
    left_out: int = 0
    ops: dict[str, int] = field(default_factory=dict)

    @property
    def anomaly(self) -> str | None:
        """The failure's kind: ``stale-read``, ``invariant`` or None."""
        if self.violation is not None:
            return "invariant"
        return "stale-read" if self.stale_reads else None

    @property
    def session(self) -> dict[str, Any]:
        """The run as a playground session (``--from-playground``)."""
        return self.playground.session()


def replay_schedule(schedule: Schedule, trace: Callable[[str], None] | None = None) -> SimReplay:
    """Run ``schedule`` in the simulator with its seed and timers: wait for
    a first leader (time 0 of the schedule), relabel nodes to it, apply
    every fault and operation at its time, heal, let every operation end,
    and judge the history with the checker's stale-read check. Raises
    ScheduleError when the simulator cannot run it (pre-vote or timers out
    of the playground's range)."""
    timers = schedule.timers
    options = {
        "voters": schedule.voters,
        "check_quorum": timers.check_quorum,
        "pre_vote": timers.pre_vote,
        "tick_ms": timers.tick_ms,
        "election_timeout_ms": timers.election_timeout_ms,
        "fetch_timeout_ms": timers.fetch_timeout_ms,
    }
    try:
        playground = Playground(schedule.seed, options)
    except ValueError as refused:
        raise ScheduleError(f"the simulator cannot run this schedule: {refused}") from None
    sim = playground.sim
    try:
        leader = _wait_for_leader(sim)
    except InvariantViolation as no_leader:
        playground.violation = str(no_leader)
        return SimReplay(schedule, [], playground.violation, playground)
    ran = schedule.relabelled(leader)
    start_us = sim.now_us
    steps: list[tuple[int, int, Callable[[], None]]] = []
    for order, fault in enumerate(ran.faults):
        steps.append((fault.at_ms, 2 * order, lambda fault=fault: _fault(playground, fault, start=True)))
        steps.append((fault.end_ms, 2 * order + 1, lambda fault=fault: _fault(playground, fault, start=False)))
    left_out = 0
    for order, op in enumerate(ran.operations):
        if op.f == "cas":
            left_out += 1
            continue
        steps.append((op.at_ms, 10**9 + order, lambda op=op: _operation(playground, op)))
    # Fault ends before starts at one instant; operations after faults.
    steps.sort(key=lambda step: (step[0], step[1]))
    for at_ms, _, step in steps:
        playground.run_until(start_us + at_ms * US_PER_MS)
        if playground.violation is not None:
            break
        step()
    if playground.violation is None:
        playground.run_until(start_us + ran.duration_ms * US_PER_MS)
        _heal_everything(playground)
        # Until every operation has ended (each times out at the latest).
        deadline_us = sim.now_us + (sim.options.client_timeout_ms + SETTLE_MS) * US_PER_MS
        while _open_operations(sim) and sim.now_us < deadline_us and playground.violation is None:
            playground.run_until(min(deadline_us, sim.now_us + 50 * US_PER_MS))
    if trace is not None:
        for line in playground.trace:
            trace(line)
    ops: dict[str, int] = {}
    for event in sim.history:
        if event["type"] != "invoke":
            ops[event["type"]] = ops.get(event["type"], 0) + 1
    return SimReplay(ran, playground.stale_reads(), playground.violation, playground, left_out, ops)


def _open_operations(sim: Simulation) -> bool:
    """Whether an operation was invoked and has not ended (one process
    per operation: an invoke and its completion share it)."""
    open_processes: set[Any] = set()
    for event in sim.history:
        if event["type"] == "invoke":
            open_processes.add(event["process"])
        else:
            open_processes.discard(event["process"])
    return bool(open_processes)


def _fault(playground: Playground, fault: Fault, *, start: bool) -> None:
    sim = playground.sim
    node = fault.node
    if fault.kind == "isolate":
        for peer in sorted(sim.nodes):
            if peer != node:
                playground.act(do="cut" if start else "mend", node=node, peer=peer)
    elif fault.kind == "kill":
        playground.act(do="crash" if start else "restart", node=node)
    else:
        playground.act(do="pause" if start else "resume", node=node)


def _route(sim: Simulation, node_id: int) -> int:
    """Where a client that first asks ``node_id`` ends up: the leader the
    node names, if it names another (its NOT_LEADER hint), else itself."""
    core = sim.nodes[node_id].core
    if core is not None and core.leader_id is not None and core.leader_id != node_id and core.leader_id in sim.nodes:
        return core.leader_id
    return node_id


def _operation(playground: Playground, op: Operation) -> None:
    node = _route(playground.sim, op.node)
    if op.f == "write":
        playground.act(do="write", node=node, key=op.key, value=str(op.value))
    else:
        playground.act(do="read", node=node, key=op.key, mode=op.mode)


def _heal_everything(playground: Playground) -> None:
    """The campaign's heal: every link, every paused node resumed, every
    killed node started."""
    sim = playground.sim
    playground.act(do="heal")
    for node_id in sorted(sim.nodes):
        node = sim.nodes[node_id]
        if node.paused:
            playground.act(do="resume", node=node_id)
        if node.core is None:
            playground.act(do="restart", node=node_id)


# =========================================================================
# Shrinking
# =========================================================================


@dataclass(slots=True)
class Shrunk:
    """A shrinker's result: the smallest failing schedule it found, how
    many simulator runs it took, and the anomaly it kept."""

    schedule: Schedule
    runs: int
    anomaly: str


def shrink_schedule(schedule: Schedule, budget_runs: int = SHRINK_BUDGET_RUNS) -> Shrunk:
    """Shrink a schedule that fails in the simulator to a smaller one that
    fails the same way: delta debugging over its faults, then over its
    operations, then shifting it earlier and cutting its end. Deterministic
    (the simulator is). Raises ScheduleError when the schedule does not
    fail in the simulator to begin with."""
    first = replay_schedule(schedule)
    anomaly = first.anomaly
    if anomaly is None:
        raise ScheduleError("the schedule does not fail in the simulator: there is nothing to shrink")
    runs = [1]

    def fails(candidate: Schedule) -> bool:
        if runs[0] >= budget_runs:
            return False
        runs[0] += 1
        return replay_schedule(candidate).anomaly == anomaly

    # The schedule as the simulator ran it (its own leader's id), and
    # without the operations it cannot run: every later step keeps its ids.
    current = first.schedule.with_parts(operations=[op for op in first.schedule.operations if op.f != "cas"])
    base = current
    faults = _ddmin(list(current.faults), lambda kept: fails(base.with_parts(faults=kept)))
    current = current.with_parts(faults=faults)
    base = current
    operations = _ddmin(list(current.operations), lambda kept: fails(base.with_parts(operations=kept)))
    current = current.with_parts(operations=operations)
    shifted = _shifted_earlier(current)
    if shifted is not None and fails(shifted):
        current = shifted
    current = _shortest(current, fails)
    return Shrunk(replace(current, origin=f"shrunk from {schedule.origin or 'a schedule'}"[:200]), runs[0], anomaly)


def _shifted_earlier(schedule: Schedule) -> Schedule | None:
    """Every time moved earlier by the first event's (None: nothing to gain)."""
    times = [f.at_ms for f in schedule.faults] + [op.at_ms for op in schedule.operations]
    lead = min(times, default=0)
    if lead <= 0:
        return None
    return Schedule(
        seed=schedule.seed,
        voters=schedule.voters,
        timers=schedule.timers,
        duration_ms=schedule.duration_ms - lead,
        leader=schedule.leader,
        faults=tuple(Fault(f.at_ms - lead, f.duration_ms, f.kind, f.node) for f in schedule.faults),
        operations=tuple(
            Operation(op.at_ms - lead, op.process, op.f, op.key, op.node, op.value, op.mode) for op in schedule.operations
        ),
        origin=schedule.origin,
        not_replayable=schedule.not_replayable,
    )


def _shortest(schedule: Schedule, fails: Callable[[Schedule], bool]) -> Schedule:
    """The shortest duration (to ``DURATION_STEP_MS``) that still fails, by
    bisection; faults are cut short at it."""
    last_event = max([f.at_ms for f in schedule.faults] + [op.at_ms for op in schedule.operations], default=0)
    low, high = last_event // DURATION_STEP_MS + 1, -(-schedule.duration_ms // DURATION_STEP_MS)
    best = schedule
    while low < high:
        middle = (low + high) // 2
        candidate = schedule.with_parts(duration_ms=middle * DURATION_STEP_MS)
        if fails(candidate):
            best, high = candidate, middle
        else:
            low = middle + 1
    if high * DURATION_STEP_MS < best.duration_ms:
        candidate = schedule.with_parts(duration_ms=high * DURATION_STEP_MS)
        if fails(candidate):
            best = candidate
    return best


def _ddmin(items: list[_Item], fails: Callable[[list[_Item]], bool]) -> list[_Item]:
    """Zeller's ddmin: a 1-minimal sublist of ``items`` (in their order)
    for which ``fails`` holds, given that it holds for all of them. Tries
    each chunk alone, then each complement, halving the chunks when
    neither fails."""
    if not items or fails([]):
        return []
    chunks = 2
    while len(items) >= 2:
        size = -(-len(items) // chunks)
        parts = [items[i : i + size] for i in range(0, len(items), size)]
        reduced = False
        for part in parts:
            if fails(part):
                items, chunks, reduced = part, 2, True
                break
        if not reduced and len(parts) > 2:
            for index in range(len(parts)):
                complement = [item for j, part in enumerate(parts) if j != index for item in part]
                if fails(complement):
                    items, chunks, reduced = complement, max(chunks - 1, 2), True
                    break
        if not reduced:
            if chunks >= len(items):
                break
            chunks = min(len(items), 2 * chunks)
    return items


def regression_test_stub(schedule: Schedule, anomaly: str, name: str) -> str:
    """A pytest test that replays ``schedule`` in the simulator and
    asserts the anomaly, ready to paste into tests/sim/."""
    document = schedule.dumps().rstrip("\n")
    check = "replay.stale_reads" if anomaly == "stale-read" else "replay.violation is not None"
    return (
        "import json\n\n"
        "from jepsen_like.sim import parse_schedule, replay_schedule\n\n"
        f"SCHEDULE = r'''{document}'''\n\n\n"
        f"def test_{name}():\n"
        f'    """{schedule.origin or "A shrunk schedule"}: the {anomaly} replays in the simulator."""\n'
        "    replay = replay_schedule(parse_schedule(json.loads(SCHEDULE)))\n"
        f"    assert {check}\n"
    )





# =========================================================================
# A simulator scenario's run as a schedule (``campaign --from-sim``)
# =========================================================================


def schedule_of_scenario(name: str, seed: int, *, check_quorum: bool = True, pre_vote: bool = True) -> tuple[Schedule, Any]:
    """Run scenario ``name`` with ``seed`` and write what it did as a
    schedule: its client operations, and the faults the schedule format
    holds (a voter cut from every other voter, a crash, a pause), from the
    run's recording. Time 0 is the scenario's first operation or fault; the
    node that led then is ``leader``. Returns the schedule and the
    scenario's result. Raises KeyError for an unknown scenario,
    ScheduleError for a scenario with brokers or more nodes than voters."""
    from ._recorder import Recording
    from ._scenarios import default_options, run_scenario

    options = default_options(name, seed)
    if hasattr(options, "brokers") or options.spare_nodes:
        raise ScheduleError(f"scenario {name} runs brokers or spare nodes: a schedule holds voters only")
    options.check_quorum = check_quorum
    options.pre_vote = pre_vote
    recording = options.recorder = Recording()
    result = run_scenario(name, seed, options)
    sim = result.simulation
    voters = options.voters
    client_events = [e for e in sim.history if e["type"] == "invoke" and e["f"] in ("read", "write")]
    pauses = [(time_us, line) for time_us, line in recording.story if line.endswith((" PAUSE", " RESUME"))]
    isolations = _isolations(recording.blocked, voters)
    crashes = _intervals([(us, node, kind == "crash") for us, node, kind in recording.process], voters)
    paused = _intervals([(us, int(line.split()[0][1:]), line.endswith("PAUSE")) for us, line in pauses], voters)
    candidates = [e["time"] // 1000 for e in client_events] + [start for start, _, _ in isolations + crashes + paused]
    start_us = min(candidates, default=0)
    leaders = [(us, node) for us, node, role, _epoch, _leader, _reason in recording.roles if role == "leader" and us <= start_us]
    leader = leaders[-1][1] if leaders else None

    def ms(time_us: int) -> int:
        return max(0, (time_us - start_us) // US_PER_MS)

    faults = [
        Fault(ms(begin), ms(end) - ms(begin), kind, node)
        for kind, spans in (("isolate", isolations), ("kill", crashes), ("pause", paused))
        for begin, end, node in spans
        if begin >= start_us
    ]
    operations = []
    for event in client_events:
        value = event["value"]
        if event["f"] == "write":
            value = int(str(value).lstrip("v")) if str(value).lstrip("v").isdigit() else None
            if value is None:
                continue
        operations.append(
            Operation(ms(event["time"] // 1000), int(event["process"]), event["f"], str(event["key"]), int(event["node"]), value, event.get("mode"))
        )
    end_ms = max([op.at_ms for op in operations] + [f.end_ms for f in faults], default=0)
    timers = Timers(options.tick_ms, options.election_timeout_ms, options.fetch_timeout_ms, check_quorum, pre_vote)
    schedule = Schedule(
        seed=seed,
        voters=voters,
        timers=timers,
        duration_ms=end_ms + 1000,
        leader=leader,
        faults=tuple(sorted(faults, key=lambda f: (f.at_ms, f.node))),
        operations=tuple(operations),
        origin=f"sim {name} seed {seed}" + ("" if check_quorum else " --no-check-quorum"),
    )
    return schedule, result


def _intervals(changes: list[tuple[int, int, bool]], voters: int) -> list[tuple[int, int, int]]:
    """(begin_us, end_us, node) spans from (time, node, on?) changes; a
    span still open at the end is closed by the last change's time."""
    open_at: dict[int, int] = {}
    spans = []
    last = max((us for us, _, _ in changes), default=0)
    for us, node, on in changes:
        if node > voters:
            continue
        if on and node not in open_at:
            open_at[node] = us
        elif not on and node in open_at:
            spans.append((open_at.pop(node), us, node))
    spans += [(begin, last, node) for node, begin in open_at.items()]
    return sorted(spans)


def _isolations(blocked: list[tuple[int, tuple[tuple[int, int], ...]]], voters: int) -> list[tuple[int, int, int]]:
    """Spans during which a voter was cut from every other voter both ways."""
    changes = []
    was: set[int] = set()
    for us, links in blocked:
        cut = set(links)
        now = {
            node
            for node in range(1, voters + 1)
            if all((node, other) in cut and (other, node) in cut for other in range(1, voters + 1) if other != node)
        }
        changes += [(us, node, True) for node in sorted(now - was)] + [(us, node, False) for node in sorted(was - now)]
        was = now
    return _intervals(changes, voters)

__all__ = ["SimReplay", "Shrunk", "regression_test_stub", "replay_schedule", "schedule_of_scenario", "shrink_schedule"]
