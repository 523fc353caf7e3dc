"""The browser playground's driver: a live simulation a learner steers.

The playground page (``playground/``, built by ``tools/build_playground.py``)
runs this module under Pyodide; its JavaScript only draws :meth:`Playground.view`
and forwards clicks as actions. ``jepsen-like sim --from-playground FILE``
replays a saved session through this same class, so a replay in Python is the
same code as the page, and its trace is byte-identical.

A session is the whole state: a seed, a few options, and the learner's
actions, each stamped with the virtual time (in microseconds) at which it was
applied. Applying an action at time T means: process every event due at or
before T, then act. Because the simulator orders events by (time, sequence)
and draws every random choice from the seed, running to T in one go or in
many small steps reaches the same state, so the session replays exactly.

The file format (``format`` 1)::

    {"format": 1, "seed": 7,
     "options": {"voters": 3, "check_quorum": true, "pre_vote": true,
                 "snapshot_every_records": 0, "brokers": false},
     (optional options: "tick_ms", "election_timeout_ms", "fetch_timeout_ms",
      the nodes' timers, as a replayed campaign schedule sets them)
     "actions": [{"at_us": 2500000, "do": "crash", "node": 2}, ...],
     "until_us": 9000000}

Actions (``do``): ``crash``, ``restart``, ``pause``, ``resume`` (a node: a
voter 1..N or a broker 101, 102, ...); ``add_broker`` (with the option
``brokers``, under which the voters host the controller); ``cut`` / ``mend``
(the link between ``node`` and ``peer``, both ways); ``heal`` (every link);
``write`` (``node``, ``key``, ``value``; with brokers: create topic
``value`` through the active controller); ``read`` (``node``, ``key``,
``mode``: linearizable or leader-local; with brokers: list topics through
broker ``node``); ``set`` (``node``, ``option``: check_quorum or pre_vote,
``on``): a voter's own setting, which takes effect when its process next
starts (as a changed configuration does); ``cut_zone`` / ``mend_zone``
(``zone``): every link between the nodes of one zone and all the others, as
they are at that moment (an availability zone cut off, seed 003).

Zones (:func:`zones`): voter i in ``az((i - 1) % Z + 1)`` and the j-th
broker (101, 102, ...) in ``az((j - 1) % Z + 1)``, with Z = min(3, voters):
a zone holds voters and brokers together, as in the fault-injection
campaign's clusters (``jepsen_like/campaign/_cluster.py``, one zone per
controller there; at most three here, as in a typical cloud region, so that
with five voters one zone holds two of them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from quorum import QuorumConfig

from ._cluster import US_PER_MS, InvariantViolation, SimOptions, Simulation
from ._recorder import Recording

FORMAT = 1
MAX_VOTERS = 7
MAX_ACTIONS = 100_000
# A session may run this long (virtual): bounds what a shared file can cost.
MAX_TIME_US = 3_600 * 1_000_000
MAX_TEXT = 64
READ_MODES = ("linearizable", "leader-local")
# Timer options a session may set (a replayed schedule's, docs/replay.md):
# name -> (least, most), in ms. Absent: the simulator's defaults.
TIMER_OPTIONS_MS = {"tick_ms": (1, 1_000), "election_timeout_ms": (10, 600_000), "fetch_timeout_ms": (10, 600_000)}
NODE_OPTIONS = ("check_quorum", "pre_vote")
# Dropped messages stay on screen (marked) this long after they were sent.
DROPPED_SHOWN_US = 30 * US_PER_MS
_NODE_ACTIONS = ("crash", "restart", "pause", "resume")
_ZONE_ACTIONS = ("cut_zone", "mend_zone")
# Availability zones a cluster spreads over (fewer when it has fewer voters).
MAX_ZONES = 3


class PlaygroundError(ValueError):
    """A session file or an action that cannot be applied (the learner's or
    the file's fault); the message says which field and why."""


@dataclass(frozen=True, slots=True)
class Action:
    """One thing the learner did, at virtual time ``at_us``."""

    at_us: int
    do: str
    node: int | None = None
    peer: int | None = None
    key: str | None = None
    value: str | None = None
    mode: str | None = None
    option: str | None = None
    on: bool | None = None
    zone: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__ if getattr(self, name) is not None}


def _own_config(options: SimOptions, node_id: int, config: QuorumConfig) -> QuorumConfig:
    """``config`` with the node's own check quorum and pre-vote settings."""
    own = options.overrides.get(node_id, {})
    return QuorumConfig(
        node_id=config.node_id,
        voters=config.voters,
        tick_ms=config.tick_ms,
        election_timeout_ms=config.election_timeout_ms,
        fetch_timeout_ms=config.fetch_timeout_ms,
        check_quorum=own.get("check_quorum", config.check_quorum),
        check_quorum_factor=config.check_quorum_factor,
        pre_vote=own.get("pre_vote", config.pre_vote),
        fast_failover=config.fast_failover,
        snapshot_retained_records=config.snapshot_retained_records,
    )


class _NodeOptions(SimOptions):
    """SimOptions with per-node overrides of check quorum and pre-vote."""

    __slots__ = ("overrides",)

    def quorum_config(self, node_id: int, directory_id: str | None = None) -> QuorumConfig:
        return _own_config(self, node_id, SimOptions.quorum_config(self, node_id, directory_id))


@cache
def _with_brokers() -> tuple[type[SimOptions], type[Simulation]]:
    """The options and simulation classes of a cluster with brokers.

    Imported on first use: the controller's and the broker's brains are
    much of what the page would otherwise load before its first screen,
    which has none (a Python import in the browser runs every dataclass
    decorator of the modules it loads)."""
    from ._brokers import BrokerSimOptions, BrokerSimulation

    class _BrokerNodeOptions(BrokerSimOptions):
        """SimOptions with per-node overrides, for a cluster with brokers."""

        __slots__ = ("overrides",)

        def quorum_config(self, node_id: int, directory_id: str | None = None) -> QuorumConfig:
            return _own_config(self, node_id, BrokerSimOptions.quorum_config(self, node_id, directory_id))

    return _BrokerNodeOptions, BrokerSimulation


def _field(raw: Mapping[str, Any], name: str, kind: type, where: str) -> Any:
    value = raw.get(name)
    if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise PlaygroundError(f"{where}: {name!r} must be an integer, not {value!r}")
    if kind is bool and not isinstance(value, bool):
        raise PlaygroundError(f"{where}: {name!r} must be true or false, not {value!r}")
    if kind is str and (not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT):
        raise PlaygroundError(f"{where}: {name!r} must be a string of 1 to {MAX_TEXT} characters, not {value!r}")
    return value


def zones(nodes: Sequence[int], voters: int) -> dict[str, list[int]]:
    """Each zone's nodes (zones and nodes in order) in a cluster of
    ``voters`` voters: voter i in ``az((i - 1) % Z + 1)``, the j-th broker
    (in id order) in ``az((j - 1) % Z + 1)``, Z = min(3, voters)."""
    found: dict[str, list[int]] = {}
    brokers_seen = 0
    for node_id in sorted(nodes):
        if node_id <= voters:
            position = node_id - 1
        else:
            position, brokers_seen = brokers_seen, brokers_seen + 1
        found.setdefault(f"az{position % min(MAX_ZONES, voters) + 1}", []).append(node_id)
    return dict(sorted(found.items()))


def parse_action(raw: Any, nodes: Sequence[int], voters: int, where: str = "action") -> Action:
    """Validate one action from the page or a file against the cluster's
    ``nodes`` (voters 1..``voters``, then brokers); raises PlaygroundError."""
    if not isinstance(raw, Mapping):
        raise PlaygroundError(f"{where}: must be an object, not {raw!r}")
    at_us = _field(raw, "at_us", int, where)
    if not 0 <= at_us <= MAX_TIME_US:
        raise PlaygroundError(f"{where}: 'at_us' {at_us} is outside 0..{MAX_TIME_US}")
    do = raw.get("do")

    def node(name: str = "node", among: Sequence[int] = nodes) -> int:
        value = _field(raw, name, int, where)
        if value not in among:
            raise PlaygroundError(f"{where}: {name!r} {value} is not a node ({', '.join(map(str, among))})")
        return value

    if do in _NODE_ACTIONS:
        return Action(at_us, do, node=node())
    if do in ("cut", "mend"):
        a, b = node(), node("peer")
        if a == b:
            raise PlaygroundError(f"{where}: a link joins two different nodes, not n{a} and itself")
        return Action(at_us, do, node=a, peer=b)
    if do in ("heal", "add_broker"):
        return Action(at_us, do)
    if do in _ZONE_ACTIONS:
        zone = _field(raw, "zone", str, where)
        members = zones(nodes, voters)
        if zone not in members:
            raise PlaygroundError(f"{where}: 'zone' must be one of {', '.join(members)}, not {zone!r}")
        if len(members) == 1:
            raise PlaygroundError(f"{where}: zone {zone} holds every node: there is nothing to cut it from")
        return Action(at_us, do, zone=zone)
    if do == "write":
        return Action(at_us, do, node=node(), key=_field(raw, "key", str, where), value=_field(raw, "value", str, where))
    if do == "read":
        mode = raw.get("mode")
        if mode not in READ_MODES:
            raise PlaygroundError(f"{where}: 'mode' must be one of {', '.join(READ_MODES)}, not {mode!r}")
        return Action(at_us, do, node=node(), key=_field(raw, "key", str, where), mode=mode)
    if do == "set":
        option = raw.get("option")
        if option not in NODE_OPTIONS:
            raise PlaygroundError(f"{where}: 'option' must be one of {', '.join(NODE_OPTIONS)}, not {option!r}")
        return Action(at_us, do, node=node(among=range(1, voters + 1)), option=option, on=_field(raw, "on", bool, where))
    raise PlaygroundError(f"{where}: unknown 'do' {do!r}")


class Playground:
    """A live simulation plus the actions that steered it (module docstring).

    ``trace`` holds the simulator's story lines, exactly as ``jepsen-like
    sim`` prints them. Raises PlaygroundError for bad options.
    """

    def __init__(self, seed: int, options: Mapping[str, Any] | None = None) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
            raise PlaygroundError(f"'seed' must be an integer in 0..2**63-1, not {seed!r}")
        options = dict(options or {})
        unknown = sorted(set(options) - {"voters", "check_quorum", "pre_vote", "snapshot_every_records", "brokers", *TIMER_OPTIONS_MS})
        if unknown:
            raise PlaygroundError(f"options: unknown {', '.join(unknown)}")
        voters = options.get("voters", 3)
        if not isinstance(voters, int) or isinstance(voters, bool) or not 1 <= voters <= MAX_VOTERS:
            raise PlaygroundError(f"options: 'voters' must be 1..{MAX_VOTERS}, not {voters!r}")
        for name in (*NODE_OPTIONS, "brokers"):
            if not isinstance(options.get(name, name != "brokers"), bool):
                raise PlaygroundError(f"options: {name!r} must be true or false")
        snapshot_every = options.get("snapshot_every_records", 0)
        if not isinstance(snapshot_every, int) or isinstance(snapshot_every, bool) or not 0 <= snapshot_every <= 100_000:
            raise PlaygroundError(f"options: 'snapshot_every_records' must be 0..100000, not {snapshot_every!r}")
        timers = {}
        for name, (least, most) in TIMER_OPTIONS_MS.items():
            if name in options:
                value = options[name]
                if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
                    raise PlaygroundError(f"options: {name!r} must be {least}..{most}, not {value!r}")
                timers[name] = value
        self.seed = seed
        self.options = {
            "voters": voters,
            "check_quorum": options.get("check_quorum", True),
            "pre_vote": options.get("pre_vote", True),
            "snapshot_every_records": snapshot_every,
            **timers,
        }
        # With brokers: the voters host the controller, and brokers join
        # one by one (``add_broker``); client writes create topics and
        # client reads ask a broker for its metadata.
        self.brokers = options.get("brokers", False)
        if self.brokers:
            self.options["brokers"] = True
        options_class, simulation_class = _with_brokers() if self.brokers else (_NodeOptions, Simulation)
        sim_options = options_class(
            voters=voters,
            check_quorum=self.options["check_quorum"],
            pre_vote=self.options["pre_vote"],
            snapshot_every_records=snapshot_every,
            **timers,
        )
        if self.brokers:
            sim_options.brokers = 0
        sim_options.overrides = {}
        self.recording = Recording()
        sim_options.recorder = self.recording
        self.trace: list[str] = []
        self.actions: list[Action] = []
        self.violation: str | None = None
        self._stale_reads: tuple[int, list[dict[str, Any]]] = (0, [])  # (history length judged, verdict)
        self.sim = simulation_class(seed, sim_options, trace=self.trace.append)

    # -- time -------------------------------------------------------------------

    @property
    def now_us(self) -> int:
        return self.sim.now_us

    def run_until(self, time_us: int) -> None:
        """Advance virtual time to ``time_us`` (no-op if already past); a
        broken invariant stops the clock and is kept in ``violation``."""
        if self.violation is not None or time_us <= self.sim.now_us:
            return
        try:
            self.sim.run_until_us(min(time_us, MAX_TIME_US))
        except InvariantViolation as broken:
            self.violation = str(broken)
            self.trace.append(f"{self.sim.now_ms:10.3f} INVARIANT BROKEN {broken}")

    def step(self) -> None:
        """Advance to the next moment anything happens (every event due
        then is handled, so that a step is a place an action can replay at)."""
        next_us = self.sim.next_event_us
        if next_us is not None:
            self.run_until(next_us)

    # -- actions ----------------------------------------------------------------

    def apply(self, raw: Any) -> Action:
        """Validate and apply an action at its ``at_us`` (which may not lie
        in the past); it is recorded. Raises PlaygroundError."""
        if len(self.actions) >= MAX_ACTIONS:
            raise PlaygroundError(f"a session holds at most {MAX_ACTIONS} actions")
        where = f"action {len(self.actions) + 1}"
        action = parse_action(raw, sorted(self.sim.nodes), self.options["voters"], where)
        if action.do == "add_broker" and not self.brokers:
            raise PlaygroundError(f"{where}: brokers need a cluster started with brokers")
        if self.brokers and action.do == "read" and action.node <= self.options["voters"]:
            raise PlaygroundError(f"{where}: with brokers, clients read metadata through a broker, not voter n{action.node}")
        if action.at_us < self.sim.now_us:
            raise PlaygroundError(f"action {len(self.actions) + 1}: at {action.at_us} us, before now ({self.sim.now_us} us)")
        self.run_until(action.at_us)
        self.actions.append(action)
        self._do(action)
        return action

    def act(self, **fields: Any) -> Action:
        """Apply an action now (the page's buttons)."""
        return self.apply({"at_us": self.sim.now_us, **fields})

    def _do(self, action: Action) -> None:
        sim = self.sim
        do = action.do
        if do in _NODE_ACTIONS:
            getattr(sim, do)(action.node)
        elif do == "cut":
            sim.network.block(action.node, action.peer)
            sim.network.block(action.peer, action.node)
            self.trace.append(f"{sim.now_ms:10.3f} PARTITION {self._name(action.node)} | {self._name(action.peer)}")
        elif do == "mend":
            sim.network.unblock(action.node, action.peer)
            sim.network.unblock(action.peer, action.node)
            self.trace.append(f"{sim.now_ms:10.3f} HEAL {self._name(action.node)} - {self._name(action.peer)}")
        elif do in _ZONE_ACTIONS:
            inside = zones(sim.nodes, self.options["voters"])[action.zone]
            outside = [node_id for node_id in sorted(sim.nodes) if node_id not in inside]
            if do == "cut_zone":
                sim.network.split(inside, outside)
                word, joint = "PARTITION", "|"
            else:
                sim.network.rejoin(inside, outside)
                word, joint = "HEAL", "-"
            names = lambda ids: " ".join(self._name(node_id) for node_id in ids)  # noqa: E731
            self.trace.append(f"{sim.now_ms:10.3f} {word} zone {action.zone} ({names(inside)}) {joint} {names(outside)}")
        elif do == "heal":
            sim.heal()
        elif do == "add_broker":
            sim.add_broker()
        elif do == "write" and self.brokers:
            # An admin creates topic VALUE through the active controller.
            sim.create_topic(action.value, 1, 1)
        elif do == "write":
            sim.client_write(sim.new_process(), action.node, action.key, action.value)
        elif do == "read" and self.brokers:
            sim.read_metadata(sim.new_reader((action.node,), pinned=True), op="list_topics")
        elif do == "read":
            sim.client_read(sim.new_process(), action.node, action.key, action.mode)
        elif do == "set":
            sim.options.overrides.setdefault(action.node, {})[action.option] = action.on
            state = "on" if action.on else "off"
            self.trace.append(f"{sim.now_ms:10.3f} n{action.node} {action.option} {state} (from its next start)")

    def _name(self, node_id: int) -> str:
        """As the simulator's trace names them: voters nN, brokers bN."""
        return f"{'b' if node_id > self.options['voters'] else 'n'}{node_id}"

    # -- sessions ---------------------------------------------------------------

    def session(self) -> dict[str, Any]:
        """The whole state as a small JSON-able document (module docstring)."""
        return {
            "format": FORMAT,
            "seed": self.seed,
            "options": dict(self.options),
            "actions": [action.to_json() for action in self.actions],
            "until_us": self.sim.now_us,
        }

    @classmethod
    def replay(cls, document: Any, until_us: int | None = None) -> Playground:
        """Rebuild a session: the same seed, the same actions at the same
        times, run to ``until_us`` (default: the document's). Rewinding is
        replaying to an earlier time: the actions after it are dropped.
        Raises PlaygroundError for a malformed document."""
        if not isinstance(document, Mapping):
            raise PlaygroundError("a playground session is a JSON object")
        if document.get("format") != FORMAT:
            raise PlaygroundError(f"'format' must be {FORMAT}, not {document.get('format')!r}")
        actions = document.get("actions", [])
        if not isinstance(actions, list) or len(actions) > MAX_ACTIONS:
            raise PlaygroundError(f"'actions' must be a list of at most {MAX_ACTIONS} actions")
        end = document.get("until_us", 0) if until_us is None else until_us
        if not isinstance(end, int) or isinstance(end, bool) or not 0 <= end <= MAX_TIME_US:
            raise PlaygroundError(f"'until_us' must be an integer in 0..{MAX_TIME_US}, not {end!r}")
        options = document.get("options", {})
        if not isinstance(options, Mapping):
            raise PlaygroundError("'options' must be an object")
        playground = cls(document.get("seed"), options)
        for raw in actions:
            if isinstance(raw, Mapping) and isinstance(raw.get("at_us"), int) and raw["at_us"] > end:
                break
            playground.apply(raw)
        playground.run_until(end)
        return playground

    # -- the view ---------------------------------------------------------------

    def view(self) -> dict[str, Any]:
        """What the page draws, as JSON-able data: nodes (role, epoch, vote,
        log with committed records and epochs, high watermark, timers),
        links cut, messages in flight (and just dropped), client operations
        with the stale reads flagged, the trace's tail."""
        sim = self.sim
        now = sim.now_us
        nodes = []
        zone_members = zones(sim.nodes, self.options["voters"])
        zone_by_node = {node_id: zone for zone, members in zone_members.items() for node_id in members}
        for node_id, node in sorted(sim.nodes.items()):
            core = node.core
            is_broker = node_id > self.options["voters"]
            entry: dict[str, Any] = {"id": node_id, "up": core is not None, "paused": node.paused, "broker": None, "zone": zone_by_node[node_id]}
            if is_broker:
                process = sim.broker_process(node_id)
                beats = [seen for seen in sim.heartbeats_seen if seen.broker_id == node_id]
                entry["broker"] = {
                    "state": sim.broker_state(node_id).value,
                    "epoch": process.lifecycle.broker_epoch if process is not None else None,
                    "heartbeats": len(beats),
                    "last_heartbeat_ms": beats[-1].time_ms if beats else None,
                }
            own = sim.options.overrides.get(node_id, {})
            entry["settings"] = {name: own.get(name, self.options[name]) for name in NODE_OPTIONS}
            if core is not None:
                log = core.log
                first = max(log.start_offset, log.end_offset - 40)
                entry.update(
                    role=core.role.value,
                    epoch=core.epoch,
                    leader=core.leader_id,
                    vote=core.voted_for,
                    hw=core.high_watermark,
                    log_start=log.start_offset,
                    snapshot_end=core.snapshot.snapshot_id.end_offset if core.snapshot is not None else None,
                    log_end=log.end_offset,
                    log=[[e.offset, e.epoch] for e in log.slice(first)],
                    # A timer the node's settings switched off never fires: not drawn.
                    timers={
                        name: max(0, left) * sim.options.tick_ms
                        for name, left in core.timers.items()
                        if name != "check_quorum" or core.config.check_quorum
                    },
                    check_quorum=core.config.check_quorum,
                    pre_vote=core.config.pre_vote,
                )
            nodes.append(entry)
        messages = []
        for sent, arrive, src, dst, kind, epoch, outcome, _ in reversed(self.recording.messages):
            if sent < now - 200 * US_PER_MS:
                break
            if arrive is not None and sent <= now < arrive:
                messages.append({"src": src, "dst": dst, "type": kind, "epoch": epoch, "sent_us": sent, "arrive_us": arrive, "dropped": outcome not in ("pending", "delivered")})
            elif arrive is None and sent <= now < sent + DROPPED_SHOWN_US:
                messages.append({"src": src, "dst": dst, "type": kind, "epoch": epoch, "sent_us": sent, "arrive_us": None, "dropped": True})
        messages.reverse()
        stale = {e["process"] for e in self.stale_reads()}
        return {
            "now_us": now,
            "seed": self.seed,
            "voters": self.options["voters"],
            "brokers": self.brokers,
            "leader": sim.leader(),
            "nodes": nodes,
            "cut": sorted([a, b] for a, b in sim.network.blocked_links if a < b),
            "zones": zone_members,
            "messages": messages,
            "ops": self._ops(stale),
            "trace": self.trace[-60:],
            "trace_lines": len(self.trace),
            "events": sim.events_processed,
            "violation": self.violation,
            "actions": len(self.actions),
        }

    def stale_reads(self) -> list[dict[str, Any]]:
        """The reads that broke their contract, judged by the checker's own
        stale-read check (``find_stale_reads``: the verdict ``run_scenario``
        and the replay page give too): a leader-local read may miss writes
        acknowledged less than one check-quorum window
        (``check_quorum_factor`` x ``fetch_timeout_ms``) before it; a
        broker's, less than design.md's staleness bound. Judged again only
        when the history has grown (the page asks every frame)."""
        history = self.sim.history
        if self._stale_reads[0] != len(history):
            # On first use: the checker is not needed before the first operation.
            from ._reads import find_stale_reads

            options = self.sim.options
            leader_local_bound_ms = options.check_quorum_factor * options.fetch_timeout_ms
            stale = find_stale_reads(history, leader_local_bound_ms, getattr(options, "staleness_bound_ms", None))
            self._stale_reads = (len(history), stale)
        return self._stale_reads[1]

    def _ops(self, stale: set[int]) -> list[dict[str, Any]]:
        """Client operations, invoke paired with completion."""
        open_ops: dict[int, dict[str, Any]] = {}
        ops: list[dict[str, Any]] = []
        for event in self.sim.history:
            if event["type"] == "invoke":
                op = {"process": event["process"], "f": event["f"], "key": event["key"], "value": event["value"], "node": event.get("node"), "mode": event.get("mode"), "start_us": event["time"] // 1000, "end_us": None, "type": "pending", "stale": False}
                open_ops[event["process"]] = op
                ops.append(op)
                continue
            op = open_ops.pop(event["process"], None)
            if op is None:
                continue
            op.update(end_us=event["time"] // 1000, type=event["type"], error=event.get("error"))
            if event["f"] == "read" and event["type"] == "ok":
                op["value"] = event["value"]
            op["stale"] = event["process"] in stale
        return ops[-50:]

    def view_json(self) -> str:
        return json.dumps(self.view(), sort_keys=True)


def replay_trace(document: Any, emit: Callable[[str], None]) -> Playground:
    """Replay a session and hand each trace line to ``emit`` (the CLI)."""
    playground = Playground.replay(document)
    for line in playground.trace:
        emit(line)
    return playground


class PageDriver:
    """What the page calls (through Pyodide), in JSON strings both ways: a
    playground plus the actions a rewind set aside, which play again as
    time moves forward until the learner does something new."""

    def __init__(self, seed: int = 7, options: Mapping[str, Any] | None = None) -> None:
        self.playground = Playground(seed, options)
        self.future: list[dict[str, Any]] = []
        self.horizon_us = 0  # the furthest time this session reached

    @classmethod
    def from_json(cls, seed: int, options_json: str) -> PageDriver:
        """A new session (the page's constructor); raises PlaygroundError."""
        try:
            options = json.loads(options_json)
        except json.JSONDecodeError as bad:
            raise PlaygroundError(f"options are not JSON: {bad}") from None
        except RecursionError:
            raise PlaygroundError("options nest too deeply") from None
        return cls(seed, options)

    def advance(self, until_us: int) -> None:
        """Move time forward to ``until_us``, replaying set-aside actions."""
        playground = self.playground
        while self.future and self.future[0]["at_us"] <= until_us:
            playground.apply(self.future.pop(0))
        playground.run_until(until_us)
        self.horizon_us = max(self.horizon_us, playground.now_us)

    def step(self) -> None:
        self.playground.step()
        self.horizon_us = max(self.horizon_us, self.playground.now_us)

    def act(self, fields_json: str) -> str:
        """Apply an action now; '' or the reason it was refused."""
        try:
            fields = json.loads(fields_json)
            if not isinstance(fields, dict):
                raise PlaygroundError("an action is a JSON object")
            self.playground.act(**{k: v for k, v in fields.items() if k != "at_us"})
        except (PlaygroundError, TypeError, json.JSONDecodeError) as refused:
            return str(refused)
        except RecursionError:
            return "the action nests too deeply"
        self.future.clear()
        return ""

    def rewind(self, to_us: int) -> None:
        """Go back to ``to_us`` (a replay from the seed); later actions wait."""
        document = self.session()
        document["actions"] = [*document["actions"], *self.future]
        self.playground = Playground.replay(document, until_us=min(to_us, MAX_TIME_US))
        self.future = document["actions"][len(self.playground.actions):]

    def session(self) -> dict[str, Any]:
        return self.playground.session()

    def session_json(self) -> str:
        document = self.session()
        document["actions"] = [*document["actions"], *self.future]
        document["until_us"] = max(document["until_us"], self.horizon_us)
        return json.dumps(document, sort_keys=True)

    def load(self, document_json: str, until_us: int | None = None) -> str:
        """Replace the session by a saved one, replayed to its end (or to
        ``until_us``); '' or why the document was refused."""
        try:
            document = json.loads(document_json)
            playground = Playground.replay(document, until_us=until_us)
        except (PlaygroundError, json.JSONDecodeError) as refused:
            return str(refused)
        except RecursionError:
            return "the session nests too deeply"
        self.playground = playground
        self.future = []
        self.horizon_us = playground.now_us
        return ""

    def view_json(self) -> str:
        view = self.playground.view()
        view["horizon_us"] = self.horizon_us
        view["future"] = len(self.future)
        return json.dumps(view, sort_keys=True)

    def trace_text(self) -> str:
        """The whole trace, one line each, as ``--from-playground`` prints it."""
        return "".join(line + "\n" for line in self.playground.trace)
