"""Read a campaign run directory into what the report draws.

Everything here tolerates damage: a missing file, a truncated last line, an
event of an unknown shape. What could not be read is counted in
``RunData.warnings`` and said in the report, never raised.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

NEMESIS = "nemesis"
CLIENT_TYPES = ("invoke", "ok", "fail", "info")
OUTCOMES = ("ok", "fail", "info")
# The order op types are listed and drawn in; others follow alphabetically.
# Metadata operations (an ``op`` field beside the register ``f``) are drawn
# under their own names.
OP_ORDER = (
    "read", "write", "cas",
    "create_topic", "delete_topic", "describe_topic", "describe_topic (broker)",
    "register_broker", "unregister_broker", "describe_cluster",
)  # fmt: skip
# A broker's lane shows its state (from broker_state node events) the way a
# controller's shows its Raft role.
BROKER_STATES = ("online", "fenced", "stopping", "offline")
#: Operations the report holds at most (a few hundred bytes each). A longer
#: run's operations are thinned to one in 2, 4, 8, ... as they are read, so
#: that memory stays bounded; the header counts every operation
#: (docs/report.md, "Long runs").
OPS_KEPT_MAX = 200_000


@dataclass(slots=True)
class Op:
    """One client operation: an invoke and (usually) its completion."""

    index: int
    process: Any
    f: str
    key: Any
    invoke_value: Any
    time_ns: int
    outcome: str | None = None  # ok / fail / info; None: never completed
    value: Any = None
    complete_index: int | None = None
    complete_ns: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # mode, offset, read_offset, error, final

    @property
    def latency_ms(self) -> float | None:
        if self.complete_ns is None:
            return None
        return max(0, self.complete_ns - self.time_ns) / 1e6


@dataclass(slots=True)
class Fault:
    """One nemesis fault window (``end_ns`` None: never ended in the history)."""

    f: str
    start_ns: int
    end_ns: int | None
    fault: Any
    start_index: int | None = None
    end_index: int | None = None
    # What the end event said, where it adds to the start (a voter change's
    # outcome and the voter set after it); None when it did not end.
    end_fault: Any = None

    def label(self) -> str:
        return describe_fault(self.f, self.fault)

    def target_nodes(self) -> list[str]:
        return fault_targets(self.fault)


@dataclass(slots=True)
class RoleSpan:
    node: str
    role: str
    epoch: Any
    leader: Any
    start_ns: int
    end_ns: int


@dataclass(slots=True)
class RunData:
    run_dir: Path
    ops: list[Op] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    instants: list[tuple[int, str, Any]] = field(default_factory=list)  # (time, f, value): heal-all and the like
    role_events: list[dict[str, Any]] = field(default_factory=list)  # roles, and brokers' states
    nodes: list[str] = field(default_factory=list)
    broker_nodes: set[str] = field(default_factory=set)
    results: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    end_ns: int = 0
    files: dict[str, Path] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # prometheus.json of a run with --prometheus: its URL and key queries.
    prometheus: dict[str, Any] = field(default_factory=dict)
    # Every operation's outcome ("pending": never completed), counted
    # whether or not ``ops`` kept it; ``ops`` holds one in ``ops_sampled_every``.
    outcome_totals: Counter[str] = field(default_factory=Counter)
    ops_sampled_every: int = 1

    @property
    def op_types(self) -> list[str]:
        present = {op.f for op in self.ops}
        ordered = [f for f in OP_ORDER if f in present]
        return ordered + sorted(present - set(OP_ORDER))

    @property
    def scenario(self) -> str:
        scenario = self.options.get("scenario") or (self.meta.get("campaign") or {}).get("scenario")
        return str(scenario) if scenario is not None else self.run_dir.parent.name

    def role_spans(self) -> dict[str, list[RoleSpan]]:
        return role_spans(self.role_events, self.nodes, self.faults, self.end_ns)

    def non_voter_spans(self) -> dict[str, list[tuple[int, int]]]:
        return non_voter_spans(self.faults, self.nodes, self.broker_nodes, self.end_ns)


# =========================================================================
# Reading
# =========================================================================


def _json_lines(path: Path, warnings: list[str]) -> Iterator[dict[str, Any]]:
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(event, dict):
                yield event
            else:
                bad += 1
    if bad:
        warnings.append(f"{path.name}: {bad} unreadable line(s) skipped")


def _json_file(path: Path, warnings: list[str]) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        warnings.append(f"{path.name}: unreadable ({type(error).__name__})")
        return None


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value and abs(value) < 1e30:
        return int(value)
    return None


def load_run(run_dir: Path) -> RunData:
    run_dir = Path(run_dir)
    data = RunData(run_dir=run_dir)
    warnings = data.warnings
    for name in ("history.jsonl", "node-events.jsonl", "results.json", "meta.json", "options.json", "log-dumps.jsonl", "logs"):
        if (run_dir / name).exists():
            data.files[name] = run_dir / name

    if "meta.json" in data.files:
        meta = _json_file(data.files["meta.json"], warnings)
        data.meta = meta if isinstance(meta, dict) else {}
    if "options.json" in data.files:
        options = _json_file(data.files["options.json"], warnings)
        data.options = options if isinstance(options, dict) else {}
    if not data.options and isinstance(data.meta.get("campaign"), dict):
        data.options = dict(data.meta["campaign"])
    if (run_dir / "prometheus.json").exists():
        prometheus = _json_file(run_dir / "prometheus.json", warnings)
        data.prometheus = prometheus if isinstance(prometheus, dict) else {}
    if "results.json" in data.files:
        results = _json_file(data.files["results.json"], warnings)
        if isinstance(results, dict):
            data.results = results
        elif results is not None:
            warnings.append("results.json: not a JSON object")

    end_ns = 0
    if "history.jsonl" in data.files:
        end_ns = _read_history(data.files["history.jsonl"], data)
    else:
        warnings.append("history.jsonl: missing")

    if "node-events.jsonl" in data.files:
        for event in _json_lines(data.files["node-events.jsonl"], warnings):
            time_ns = _as_int(event.get("time"))
            kind = event.get("kind")
            if kind not in ("role", "broker_state") or time_ns is None or event.get("node") is None:
                continue
            if kind == "broker_state":
                # A broker's state drawn as its "role"; the epoch is its broker epoch.
                node = str(event.get("broker_id", event["node"]))
                data.broker_nodes.add(node)
                event = {"kind": kind, "node": node, "time": time_ns, "role": str(event.get("state")),
                         "epoch": event.get("broker_epoch"), "leader": None, "reason": event.get("reason")}  # fmt: skip
            else:
                event = dict(event, node=str(event["node"]), time=time_ns)
            data.role_events.append(event)
            end_ns = max(end_ns, time_ns)
    data.role_events.sort(key=lambda e: (e["time"], e["node"]))

    nodes = {e["node"] for e in data.role_events}
    controllers = _as_int(data.options.get("controllers"))
    if controllers is not None and 0 < controllers <= 64:
        nodes.update(str(n) for n in range(1, controllers + 1))
    brokers = _as_int(data.options.get("brokers"))
    if brokers is not None and 0 < brokers <= 64:
        # The campaign numbers its brokers from 101.
        data.broker_nodes.update(str(n) for n in range(101, 101 + brokers))
        nodes.update(data.broker_nodes)
    data.nodes = sorted(nodes, key=node_order)
    for fault in data.faults:
        end_ns = max(end_ns, fault.end_ns or fault.start_ns)
    data.end_ns = max(end_ns, 1)
    return data


def node_order(node: Any) -> tuple[int, Any]:
    """Nodes in numeric order (ids as numbers or as digit strings), named
    ones after."""
    text = str(node)
    return (0, int(text)) if text.isdigit() else (1, text)


def _read_history(path: Path, data: RunData, ops_kept_max: int = OPS_KEPT_MAX) -> int:
    pending: dict[Any, Op] = {}
    open_faults: dict[Any, Fault] = {}
    orphans = 0
    end_ns = 0
    finished = 0

    def keep(op: Op) -> None:
        nonlocal finished
        data.outcome_totals[op.outcome or "pending"] += 1
        finished += 1
        if finished % data.ops_sampled_every:
            return
        data.ops.append(op)
        if len(data.ops) > ops_kept_max:
            del data.ops[1::2]
            data.ops_sampled_every *= 2

    for position, event in enumerate(_json_lines(path, data.warnings)):
        time_ns = _as_int(event.get("time"))
        if time_ns is None:
            continue
        end_ns = max(end_ns, time_ns)
        index = _as_int(event.get("index"))
        index = position if index is None else index
        process = event.get("process")
        if process == NEMESIS:
            _nemesis_event(event, time_ns, index, open_faults, data)
            continue
        kind = event.get("type")
        if kind not in CLIENT_TYPES:
            continue
        try:
            hash(process)
        except TypeError:
            process = json.dumps(process)
        extra = {
            name: event[name]
            for name in ("mode", "offset", "read_offset", "error", "final", "node")
            if name in event and event[name] is not None
        }
        if kind == "invoke":
            if process in pending:  # a second invoke: the first never completed
                keep(pending.pop(process))
            pending[process] = Op(
                index=index, process=process, f=_op_name(event), key=event.get("key"),
                invoke_value=event.get("value"), time_ns=time_ns, extra=extra,
            )
            continue
        op = pending.pop(process, None)
        if op is None:
            orphans += 1
            continue
        op.outcome = kind
        op.value = event.get("value")
        op.complete_index = index
        op.complete_ns = max(time_ns, op.time_ns)
        op.extra.update(extra)
        keep(op)
    for op in pending.values():
        keep(op)
    data.ops.sort(key=lambda op: op.index)
    if data.ops_sampled_every > 1:
        data.warnings.append(
            f"history.jsonl: {finished:,} operations; the charts and tables below draw one in {data.ops_sampled_every}"
            f" ({len(data.ops):,}), the counts above are of all"
        )
    for fault in open_faults.values():
        data.faults.append(fault)
    data.faults.sort(key=lambda fault: (fault.start_ns, fault.f))
    if orphans:
        data.warnings.append(f"history.jsonl: {orphans} completion(s) without an invoke skipped")
    return end_ns


def _op_name(event: Mapping[str, Any]) -> str:
    """What an operation is drawn as: the metadata operation (``op``) when
    the history names one (its ``f`` is then the register model's
    read/write/cas), a broker read marked as such; else ``f``."""
    op = event.get("op")
    if isinstance(op, str) and op:
        return f"{op} (broker)" if event.get("mode") == "broker" else op
    return str(event.get("f"))


def _fault_key(f: str, fault: Any) -> Any:
    if isinstance(fault, Mapping) and fault.get("fault_id") is not None:
        return (f, "id", json.dumps(fault["fault_id"], sort_keys=True))
    return (f, "value", json.dumps(fault, sort_keys=True, default=str))


def _nemesis_event(event: Mapping[str, Any], time_ns: int, index: int, open_faults: dict[Any, Fault], data: RunData) -> None:
    f = str(event.get("f"))
    value = event.get("value")
    phase = value.get("phase") if isinstance(value, Mapping) else None
    fault = value.get("fault") if isinstance(value, Mapping) else value
    if phase == "start":
        key = _fault_key(f, fault)
        if key in open_faults:  # started twice: close the first where the second begins
            earlier = open_faults.pop(key)
            earlier.end_ns = time_ns
            data.faults.append(earlier)
        open_faults[key] = Fault(f=f, start_ns=time_ns, end_ns=None, fault=fault, start_index=index)
    elif phase == "end":
        key = _fault_key(f, fault)
        started = open_faults.pop(key, None)
        if started is None:
            # An end without a start: the fault ran from the start of the run.
            data.faults.append(Fault(f=f, start_ns=0, end_ns=time_ns, fault=fault, end_index=index))
        else:
            started.end_ns = time_ns
            started.end_index = index
            if fault != started.fault:
                started.end_fault = fault
            data.faults.append(started)
    else:
        data.instants.append((time_ns, f, value))
        if phase == "all":  # heal everything: whatever is still open ends here
            for key in list(open_faults):
                started = open_faults.pop(key)
                started.end_ns = time_ns
                started.end_index = index
                data.faults.append(started)


# =========================================================================
# Failed and indeterminate operations: why, and where
# =========================================================================

# An error code as the system names it (NOT_LEADER, STALE_BROKER_EPOCH).
_ERROR_CODE = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
_ADDRESS = re.compile(r"\b[\w.-]*\w:\d{2,5}\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
NO_ERROR = "no error recorded"
NO_NODE = "not recorded"
REASON_CHARS_MAX = 80


def failure_reason(error: Any) -> str:
    """What a failed or indeterminate operation's ``error`` comes to, for
    counting alike ones together: the first error code it names
    (``NOT_LEADER``), else its text without the ``indeterminate:`` prefix
    the campaign adds (the outcome says that), with addresses as ``ADDR``
    and numbers as ``N`` (``connect: [Errno N] Connection refused``), cut
    to ``REASON_CHARS_MAX`` characters."""
    if error is None:
        return NO_ERROR
    text = error if isinstance(error, str) else json.dumps(error, sort_keys=True, default=str)
    text = " ".join(text.split())
    if text.startswith("indeterminate: "):
        text = text[len("indeterminate: ") :]
    code = _ERROR_CODE.search(text)
    if code:
        return code.group(0)
    text = _NUMBER.sub("N", _ADDRESS.sub("ADDR", text)) or NO_ERROR
    return text if len(text) <= REASON_CHARS_MAX else text[: REASON_CHARS_MAX - 1] + "…"


def failure_breakdown(ops: Iterable[Op]) -> dict[tuple[str, str, str], int]:
    """Failed (``fail``) and indeterminate (``info``) operations counted by
    (reason, node, outcome): the reason from :func:`failure_reason`, the
    node the history names for the operation (the one that refused it or
    stopped answering), else ``NO_NODE``."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for op in ops:
        if op.outcome in ("fail", "info"):
            node = op.extra.get("node")
            counts[(failure_reason(op.extra.get("error")), NO_NODE if node is None else str(node), op.outcome)] += 1
    return dict(counts)


# =========================================================================
# Faults: what they are called and whom they hit
# =========================================================================


def _nodes_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def describe_fault(f: str, fault: Any) -> str:
    """A short label: ``isolate-leader n3``, ``kill n1``, ``1,2 | 3``, ``1 → 2,3``."""
    if not isinstance(fault, Mapping):
        return f
    if "side_a" in fault and "side_b" in fault:
        return f"{f} {_nodes_text(fault['side_a'])} | {_nodes_text(fault['side_b'])}"
    if "src" in fault and "dst" in fault:
        return f"{f} {_nodes_text(fault['src'])} → {_nodes_text(fault['dst'])}"
    if "node" in fault:
        # A hostile-clients window by the attacker holding a certificate
        # (--tls runs both attackers, one after the other, at one node).
        certificate = " (cert)" if fault.get("authenticated") is True else ""
        return f"{f} n{_nodes_text(fault['node'])}{certificate}"
    if "nodes" in fault:
        return f"{f} n{_nodes_text(fault['nodes'])}"
    if "zone" in fault:
        nodes = [v for v in fault.get("inside", ()) if isinstance(v, int) and not isinstance(v, bool)] if isinstance(fault.get("inside"), list) else []
        inside = f" (n{_nodes_text(nodes)})" if nodes else ""
        return f"{f} {fault['zone']}{inside}"
    return f


def fault_targets(fault: Any) -> list[str]:
    """The nodes a fault is about (hatched in their lanes): the isolated,
    killed or paused node, a one-way cut's sources, a partition's minority."""
    if not isinstance(fault, Mapping):
        return []

    def listed(value: Any) -> list[str]:
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value if isinstance(v, (int, str))]
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return [str(value)]
        return []

    if "node" in fault:
        return listed(fault["node"])
    if "nodes" in fault:
        return listed(fault["nodes"])
    if "inside" in fault:  # a zone: its nodes (the clients in it are not lanes)
        return [node for node in listed(fault["inside"]) if node.isdigit()]
    if "src" in fault:
        return listed(fault["src"])
    if "side_a" in fault and "side_b" in fault:
        a, b = listed(fault["side_a"]), listed(fault["side_b"])
        return a if len(a) <= len(b) else b
    return []


# =========================================================================
# Roles
# =========================================================================


#: Faults that kill -9 the node they are about when they start (a dead
#: process has no role): ``kill``, and the storage campaign's faults that
#: damage a stopped node's files or restart every voter.
KILLING_FAULTS = (
    "kill",
    "storage-flip-byte",
    "storage-torn-write",
    "storage-election-state-lost",
    "storage-election-state-rollback",
    "restart-all-voters",
    "replace-voter",
    "replace-voter-auto-join",
)

#: The membership nemesis's voter changes (issue 17, KIP-853): their events
#: carry the voter set before (start) and after (end) as lists of node ids.
#: ``replace-voter-auto-join``: a replacement whose new disk auto-join added.
MEMBERSHIP_FAULTS = ("add-voter", "remove-voter", "replace-voter", "replace-voter-auto-join")


def non_voter_spans(
    faults: list[Fault], nodes: list[str], broker_nodes: set[str], end_ns: int
) -> dict[str, list[tuple[int, int]]]:
    """For a run whose voters changed: when each controller was not a voter,
    as (start, end) spans, from the voter sets the membership faults
    recorded (the first one's set before, from the start of the run; each
    one's set after, from its end). Empty when no fault recorded a set."""
    changes: list[tuple[int, list[str]]] = []
    for fault in sorted(faults, key=lambda fault: fault.start_ns):
        if fault.f not in MEMBERSHIP_FAULTS:
            continue
        before = fault.fault.get("voters_before") if isinstance(fault.fault, Mapping) else None
        after = fault.end_fault.get("voters_after") if isinstance(fault.end_fault, Mapping) else None
        if not changes and isinstance(before, list):
            changes.append((0, [str(node) for node in before]))
        if isinstance(after, list) and fault.end_ns is not None:
            changes.append((fault.end_ns, [str(node) for node in after]))
    if not changes:
        return {}
    changes.sort(key=lambda change: change[0])
    spans: dict[str, list[tuple[int, int]]] = {}
    for node in nodes:
        if node in broker_nodes:
            continue
        out: list[tuple[int, int]] = []
        for position, (start, voters) in enumerate(changes):
            end = changes[position + 1][0] if position + 1 < len(changes) else max(end_ns, start)
            if node in voters or end <= start:
                continue
            if out and out[-1][1] == start:
                out[-1] = (out[-1][0], end)
            else:
                out.append((start, end))
        spans[node] = out
    return spans


def role_spans(events: list[dict[str, Any]], nodes: list[str], faults: list[Fault], end_ns: int) -> dict[str, list[RoleSpan]]:
    """Each node's role over time: one span per change of (role, epoch,
    leader). A span ends at the node's next change, where a kill of the node
    begins (a dead process has no role), or at the end of the run."""
    kills: dict[str, list[int]] = defaultdict(list)
    for fault in faults:
        if fault.f in KILLING_FAULTS:
            for node in fault.target_nodes():
                kills[node].append(fault.start_ns)
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_node[event["node"]].append(event)
    spans: dict[str, list[RoleSpan]] = {node: [] for node in nodes}
    for node, node_events in by_node.items():
        out = spans.setdefault(node, [])
        for position, event in enumerate(node_events):
            start = event["time"]
            end = node_events[position + 1]["time"] if position + 1 < len(node_events) else max(end_ns, start)
            for kill_ns in kills.get(node, ()):
                if start <= kill_ns < end:
                    end = kill_ns
            span = RoleSpan(node, str(event.get("role")), event.get("epoch"), event.get("leader"), start, end)
            previous = out[-1] if out else None
            if (
                previous is not None
                and previous.end_ns == start
                and (previous.role, previous.epoch, previous.leader) == (span.role, span.epoch, span.leader)
            ):
                previous.end_ns = end  # the same state again: one span
            elif end > start or position + 1 == len(node_events):
                out.append(span)
    return spans


# =========================================================================
# Witnesses
# =========================================================================


def is_operation(value: Any) -> bool:
    """An operation as the checker renders it (index, process, f, time)."""
    return isinstance(value, Mapping) and "index" in value and "f" in value and "time" in value and "process" in value


def is_node_event(value: Any) -> bool:
    return isinstance(value, Mapping) and "node" in value and "time" in value and ("role" in value or "kind" in value)


def witness_operations(witness: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """The operations a witness names, as (their role in it, operation), in
    the witness's order: the first is the one the anomaly is about."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    if not isinstance(witness, Mapping):
        return found
    for name, value in witness.items():
        if is_operation(value):
            found.append((str(name), value))
        elif isinstance(value, list):
            for position, item in enumerate(value):
                if is_operation(item):
                    found.append((f"{name}[{position}]", item))
    return found


def witness_node_events(witness: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """Node events a witness names (split-brain claims, fencing events)."""
    found: list[tuple[str, Mapping[str, Any]]] = []

    def walk(name: str, value: Any, depth: int) -> None:
        if depth > 4:
            return
        if is_node_event(value) and not is_operation(value):
            found.append((name, value))
        elif isinstance(value, Mapping):
            for key, inner in value.items():
                walk(f"{name}.{key}" if name else str(key), inner, depth + 1)
        elif isinstance(value, list):
            for position, item in enumerate(value):
                walk(f"{name}[{position}]", item, depth + 1)

    walk("", witness, 0)
    return found
