"""A campaign's schedule (issue 20; docs/replay.md): written after every
run as ``schedule.json`` from what the run recorded, and run again on real
processes by ``jepsen-like campaign --replay PATH``.

The format is ``jepsen_like.sim``'s (one definition for both worlds). A
campaign's history is the source: its nemesis events give the faults, with
their times; its client invokes give the operations; the options give the
seed, the nodes and the timers. What the format cannot hold (broker
faults, shapes other than a node cut from the others, metadata operations)
is named in ``not_replayable``, and such a schedule is refused by
``--replay`` rather than run with parts missing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio

from jepsen_like.sim import MAX_DURATION_MS, MAX_FAULTS, MAX_OPERATIONS, MAX_SCHEDULE_BYTES, Fault, Operation, Schedule, ScheduleError, Timers, loads_schedule

from ._options import CampaignOptions
from ._scenarios import RunningCampaign, kill_and_restart, pause_node

SCHEDULE_FILE = "schedule.json"
# Nemesis names that are a node cut from every other node, not from clients.
_ISOLATE_NAMES = ("isolate", "isolate-leader")
# A schedule's ``origin`` is at most this long (jepsen_like.sim's MAX_TEXT).
_ORIGIN_MAX = 200


def schedule_path(path: Path) -> Path:
    """A run directory's schedule, or ``path`` itself when it is a file."""
    return path / SCHEDULE_FILE if path.is_dir() else path


def read_schedule(path: Path) -> Schedule:
    """Load and validate the schedule at ``path`` (a run directory or a
    schedule file). Raises ScheduleError (unreadable, too large, invalid)."""
    file = schedule_path(path)
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_SCHEDULE_BYTES + 1)
    except OSError as error:
        raise ScheduleError(f"cannot read {file}: {error.strerror or error}") from None
    return loads_schedule(data)


def schedule_of_run(
    history_path: Path,
    options: CampaignOptions,
    leader: int | None,
    start_ns: int,
    origin: str,
    *,
    operations_max: int = MAX_OPERATIONS,
    faults_max: int = MAX_FAULTS,
) -> Schedule:
    """The schedule a finished run followed, from its history: time 0 is
    ``start_ns`` on the history's clock (the workload's start), ``leader``
    the leader then.

    A run longer than one schedule holds (more than ``operations_max``
    register operations or ``faults_max`` faults, or longer than
    ``MAX_DURATION_MS``) gets the schedule of its first part, which its
    loader accepts and ``--replay`` runs: every fault and operation that
    began before the first one that did not fit (the window's end), and
    ``origin`` ends with where the window ends and why (docs/replay.md).
    The history is read line by line, and what is held does not grow with
    its length past the window's operations. Raises ``OSError`` when the
    history cannot be read."""
    voters = options.controllers
    faults: list[Fault] = []
    operations: list[Operation] = []
    not_replayable: list[str] = []
    started: dict[str, int] = {}
    invokes: dict[Any, tuple[int, dict[str, Any]]] = {}
    node_of_process: dict[Any, int] = {}
    others = 0
    fault_starts = 0
    window_end: tuple[int, str] | None = None  # (ms, why) once something did not fit

    def at_ms(event: dict[str, Any]) -> int:
        return max(0, round((event["time"] - start_ns) / 1e6))

    def answered_by(event: dict[str, Any]) -> int | None:
        node = event.get("node")
        try:
            node_id = int(node) if node is not None else None
        except (TypeError, ValueError):
            return None
        return node_id if node_id is not None and 1 <= node_id <= voters else None

    def fits(time_ms: int, full: bool, limit: str) -> bool:
        """Whether what begins at ``time_ms`` is in the window (``full``:
        the window already holds as many as ``limit`` says it may)."""
        nonlocal window_end
        if window_end is None and (full or time_ms >= MAX_DURATION_MS):
            window_end = (time_ms, limit if full else "an hour at most")
        return window_end is None or (time_ms < window_end[0] and not full)

    with open(history_path, encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            if event["process"] == "nemesis":
                time_ms = at_ms(event)
                value = event.get("value")
                if isinstance(value, dict) and value.get("phase") == "start":
                    if not fits(time_ms, fault_starts >= faults_max, f"{faults_max:,} faults at most"):
                        continue  # left out, and so is its end
                    fault_starts += 1
                _nemesis_event(event, time_ms, voters, started, faults, not_replayable)
                continue
            if event.get("final") or event["time"] < start_ns:
                continue
            key = event.get("key")
            register = isinstance(key, str) and not key.startswith(("topic/", "broker/")) and event["f"] in ("read", "write", "cas")
            if event["type"] == "invoke":
                time_ms = at_ms(event)
                kept = len(operations) + len(invokes)
                if not fits(time_ms, register and kept >= operations_max, f"{operations_max:,} operations at most"):
                    continue
                if register:
                    invokes[event["process"]] = (time_ms, event)
                else:
                    others += 1
                continue
            opened = invokes.pop(event["process"], None)
            node = answered_by(event)
            if node is not None:
                node_of_process[event["process"]] = node
            if opened is not None:
                invoked_ms, invoke = opened
                first_node = node or node_of_process.get(event["process"]) or 1 + int(event["process"]) % voters
                operations.append(_operation(invoke, invoked_ms, first_node))
            if event["type"] == "info":
                # The process ends here (its client takes a fresh one).
                node_of_process.pop(event["process"], None)
    for invoked_ms, invoke in invokes.values():  # never completed: the run ended first
        operations.append(_operation(invoke, invoked_ms, node_of_process.get(invoke["process"]) or 1 + int(invoke["process"]) % voters))
    if others:
        not_replayable.append(f"{others} metadata operations (topics, brokers): a schedule holds register operations only")
    for name, begun in sorted(started.items()):
        not_replayable.append(f"fault {name} started at {begun} ms never ended")
    operations.sort(key=lambda op: (op.at_ms, op.process))
    timers = Timers(
        election_timeout_ms=options.election_timeout_ms, fetch_timeout_ms=options.fetch_timeout_ms, check_quorum=options.check_quorum
    )
    # A fault heals (and an operation starts) a few ms after its time on a
    # busy host: the schedule lasts until the last of them.
    planned_ms = round(options.time_limit_s * 1000) if window_end is None else window_end[0]
    duration_ms = min(MAX_DURATION_MS, max([planned_ms] + [f.end_ms for f in faults] + [op.at_ms for op in operations]))
    faults = [Fault(f.at_ms, min(f.duration_ms, duration_ms - f.at_ms), f.kind, f.node) for f in faults]
    if window_end is not None:
        note = f" (its first {window_end[0] / 1000:,.1f} s: {window_end[1]})"
        origin = origin[: _ORIGIN_MAX - len(note)] + note
    return Schedule(
        seed=options.seed,
        voters=voters,
        timers=timers,
        duration_ms=duration_ms,
        leader=leader if leader is not None and 1 <= leader <= voters else None,
        faults=tuple(sorted(faults, key=lambda f: (f.at_ms, f.node))),
        operations=tuple(operations),
        origin=origin[:_ORIGIN_MAX],
        not_replayable=tuple(not_replayable[:50]),
    )


def _operation(invoke: dict[str, Any], invoked_ms: int, node: int) -> Operation:
    # Interned: a window's 100,000 operations share a few kinds, modes and
    # keys (a key lives 120 operations) rather than each holding copies.
    mode = invoke.get("mode") if invoke["f"] == "read" else None
    return Operation(
        at_ms=invoked_ms,
        process=int(invoke["process"]),
        f=sys.intern(invoke["f"]),
        key=sys.intern(invoke["key"]),
        node=node,
        value=invoke.get("value"),
        mode=sys.intern(mode) if isinstance(mode, str) else mode,
    )


def _nemesis_event(
    event: dict[str, Any], time_ms: int, voters: int, started: dict[str, int], faults: list[Fault], not_replayable: list[str]
) -> None:
    value = event.get("value")
    if not isinstance(value, dict) or value.get("phase") not in ("start", "end"):
        return  # "heal" (phase all) and notes
    fault = value.get("fault")
    name = event["f"]
    label = f"{name} {json.dumps(fault, sort_keys=True)}"
    if value["phase"] == "start":
        started[label] = time_ms
        return
    begun = started.pop(label, None)
    if begun is None:
        return
    node = fault.get("node") if isinstance(fault, dict) else None
    if name in _ISOLATE_NAMES and isinstance(fault, dict) and fault.get("shape") == "isolate" and not fault.get("clients"):
        kind = "isolate"
    elif name in ("kill", "pause"):
        kind = name
    else:
        not_replayable.append(f"fault {name} at {begun} ms: the schedule format has no such fault")
        return
    if not isinstance(node, int) or not 1 <= node <= voters:
        not_replayable.append(f"fault {name} at {begun} ms hit node {node}, not a voter")
        return
    faults.append(Fault(begun, max(0, time_ms - begun), kind, node))


def write_schedule(run_dir: Path, schedule: Schedule) -> Path:
    """``schedule`` as ``run_dir/schedule.json``, written a line at a time.
    Raises ``OSError``."""
    path = run_dir / SCHEDULE_FILE
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(schedule.text_parts())
    return path


def options_for(schedule: Schedule, options: CampaignOptions) -> CampaignOptions:
    """``options`` set to run ``schedule``: its nodes (no brokers), timers,
    seed and duration, the register workload. Raises ScheduleError for a
    schedule a real cluster cannot run."""
    if schedule.not_replayable:
        raise ScheduleError("this schedule cannot be run again on real processes: " + "; ".join(schedule.not_replayable))
    if not schedule.timers.pre_vote:
        raise ScheduleError("kraft-controller always runs pre-vote: a schedule with pre_vote false has no real-process form")
    if schedule.timers.tick_ms != Timers().tick_ms:
        raise ScheduleError(f"kraft-controller ticks every {Timers().tick_ms} ms; the schedule asks for {schedule.timers.tick_ms}")
    options.scenario = "replay"
    options.controllers = schedule.voters
    options.brokers = 0
    options.workload = "register"
    options.seed = schedule.seed
    options.check_quorum = schedule.timers.check_quorum
    options.election_timeout_ms = schedule.timers.election_timeout_ms
    options.fetch_timeout_ms = schedule.timers.fetch_timeout_ms
    options.time_limit_s = schedule.duration_ms / 1000
    options.schedule = schedule
    return options


async def run_faults(campaign: RunningCampaign, schedule: Schedule, started_s: float) -> None:
    """Inject every fault of ``schedule`` at its time (from ``started_s``,
    trio's clock), each healed after its duration."""
    network = campaign.network
    assert network is not None

    async def one(fault: Fault) -> None:
        await trio.sleep_until(started_s + fault.at_ms / 1000)
        duration_s = fault.duration_ms / 1000
        if fault.kind == "isolate":
            await campaign.net_fault("isolate", lambda: network.isolate(fault.node), duration_s)
        elif fault.kind == "kill":
            await kill_and_restart(campaign, fault.node, duration_s)
        else:
            await pause_node(campaign, fault.node, duration_s)

    async with trio.open_nursery() as nursery:
        for fault in schedule.faults:
            nursery.start_soon(one, fault)
