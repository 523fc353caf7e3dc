"""Synthetic metadata-workload histories, clean or with planted anomalies.

The clean history is linearizable by construction: every operation gets a
linearization point inside its interval, reads return the state at that
point, offsets are positions in one log ordered by those points. Around it
the generator writes the node event log (epochs and leaders, broker
registrations, broker states, accepted broker requests) and log dumps that
agree with it. It is vectorised (numpy / pandas), so it makes ten-million-op
histories for benchmarks.

Each planted anomaly is a small scripted scenario on its own key, its own
client processes and (where it needs one) its own broker, so that it
disturbs nothing else: the checker must report exactly it, under the check
named in ``ANOMALY_KINDS`` (and, where a kind implies them, the checks
listed as implied, e.g. a stale linearizable read also makes its key
non-linearizable). ``planted.json`` records what was planted, with the
history indexes a witness must name.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

SLOT_NS = 1_000_000  # base operations are linearized one per millisecond
FETCH_TIMEOUT_MS = 20
CHECK_QUORUM_FACTOR = 1.5
LEADER_LOCAL_BOUND_MS = FETCH_TIMEOUT_MS * CHECK_QUORUM_FACTOR  # 30 ms
STALENESS_BOUND_MS = 50
NODES = ("1", "2", "3")
NEVER_WRITTEN = 0  # the value column's "null": written values start at 1


@dataclass(frozen=True, slots=True)
class AnomalyKind:
    """What planting a kind does, which check must find it, and which
    other checks it may also trip (because they see the same fault)."""

    check: str
    implied: tuple[str, ...]
    description: str


ANOMALY_KINDS: dict[str, AnomalyKind] = {
    "stale-read": AnomalyKind(
        "stale-read", ("linearizability",),
        "a linearizable read returns the value before a write acknowledged before it was invoked",
    ),
    "stale-leader-read": AnomalyKind(
        "stale-read", (), "a leader-local read misses a write acknowledged more than the check-quorum bound before it",
    ),
    "stale-broker-read": AnomalyKind(
        "stale-read", (), "a broker read misses a write acknowledged more than the staleness bound before it",
    ),
    "non-monotonic-read": AnomalyKind(
        "non-monotonic-read-process", (), "a client reads an older offset (from another broker, within the bound) after a newer one",
    ),
    "non-monotonic-broker-read": AnomalyKind(
        "non-monotonic-read-broker", (), "a broker serves an older offset after serving a newer one",
    ),
    "garbage-read": AnomalyKind("garbage-read", ("linearizability",), "a read returns a value nobody wrote"),
    "aborted-read": AnomalyKind("aborted-read", ("linearizability",), "a read returns the value of a failed write"),
    "future-read": AnomalyKind("future-read", ("linearizability",), "a read returns a value written only after it completed"),
    "lost-write": AnomalyKind(
        "lost-write", ("stale-read", "linearizability"),
        "an acknowledged write is missing from every log dump and from the final read",
    ),
    "split-brain": AnomalyKind("split-brain", (), "a second node claims leadership of an existing epoch"),
    "forked-log": AnomalyKind("forked-log", (), "one node holds a different record at a committed offset"),
    "duplicated-write": AnomalyKind("duplicated-write", (), "a write's record is committed at a second offset"),
    "broker-epoch-regression": AnomalyKind("broker-epoch-regression", (), "a broker re-registers with a smaller epoch"),
    "stale-broker-epoch": AnomalyKind(
        "stale-broker-epoch", (), "a request with a broker epoch older than the broker's latest registration is accepted",
    ),
    "fenced-read": AnomalyKind("fenced-broker-read", (), "a broker answers a read while it is fenced"),
    "nonlinearizable": AnomalyKind(
        "linearizability", (), "two reads see a concurrent write in opposite orders (only tier 2 can tell)",
    ),
}


@dataclass(frozen=True, slots=True)
class PlantedAnomaly:
    """One planted anomaly: the check that must find it and what its witness
    must name (history indexes of operations, or epoch / offset / ids)."""

    kind: str
    check: str
    key: str | None
    witness: Mapping[str, Any]
    implied: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SynthesisResult:
    """What :func:`synthesize` wrote."""

    directory: Path
    history_paths: tuple[Path, ...]
    operations: int
    events: int
    planted: tuple[PlantedAnomaly, ...] = field(default_factory=tuple)


def parse_plant_spec(text: str | None) -> dict[str, int]:
    """``"stale-read:2,lost-write:1"`` -> ``{"stale-read": 2, "lost-write": 1}``.
    A kind without a count means one.

    Raises ``ValueError`` for an unknown kind or a bad count.
    """
    counts: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        kind, _, count_text = item.partition(":")
        kind = kind.strip()
        if kind not in ANOMALY_KINDS:
            raise ValueError(f"unknown anomaly kind {kind!r}; known: {', '.join(ANOMALY_KINDS)}")
        try:
            count = int(count_text) if count_text.strip() else 1
        except ValueError:
            raise ValueError(f"bad count in {item!r}") from None
        if count < 0:
            raise ValueError(f"negative count in {item!r}")
        counts[kind] = counts.get(kind, 0) + count
    return counts


# ---------------------------------------------------------------------------
# Scripted scenarios: operations in slot units relative to an anchor time.


@dataclass
class _ScenarioOp:
    name: str
    f: str  # read / write / cas
    invoke_slots: float
    done_slots: float
    lin_slots: float | None = None  # default: the middle of the interval
    outcome: str = "ok"
    mode: str | None = None
    node: str | None = None
    view_slots: float | None = None  # reads: the state they see (default: lin)
    value_override: str | None = None  # reads: JSON text returned instead
    same_as: str | None = None  # reads: return this write's value and offset


@dataclass
class _Scenario:
    kind: str
    key: str
    ops: list[_ScenarioOp]
    expect: dict[str, Any]  # witness fields; str values name scenario ops
    final_value_override: str | None = None  # the key's final read returns this instead
    drop_from_log: tuple[str, ...] = ()  # writes whose records no dump holds
    node_events: list[dict[str, Any]] = field(default_factory=list)  # times in slots relative to anchor


def _scenario(kind: str, number: int) -> _Scenario:
    key = f"plant-{kind}-{number}"
    process_broker = f"pb-{kind}-{number}"
    if kind == "stale-read":
        return _Scenario(kind, key, [
            _ScenarioOp("w1", "write", 0, 0.5),
            _ScenarioOp("w2", "write", 1, 1.5),
            _ScenarioOp("r", "read", 2, 2.5, view_slots=0.75),
        ], {"read": "r", "missed_write": "w2", "rule": "offset"})
    if kind in ("stale-leader-read", "stale-broker-read"):
        mode = "leader-local" if kind == "stale-leader-read" else "broker"
        bound = LEADER_LOCAL_BOUND_MS if mode == "leader-local" else STALENESS_BOUND_MS
        node = NODES[0] if mode == "leader-local" else process_broker
        slots_per_ms = 1_000_000 / SLOT_NS
        return _Scenario(kind, key, [
            _ScenarioOp("w1", "write", 0, 0.5),
            _ScenarioOp("w2", "write", 1, 1.5),
            # Just inside the bound: as stale, but allowed.
            _ScenarioOp("r_ok", "read", 1.5 + bound * slots_per_ms - 2, 1.5 + bound * slots_per_ms - 1.5,
                        mode=mode, node=node, view_slots=0.75),
            _ScenarioOp("r", "read", 1.5 + bound * slots_per_ms + 2, 1.5 + bound * slots_per_ms + 2.5,
                        mode=mode, node=node, view_slots=0.75),
        ], {"read": "r", "missed_write": "w2", "rule": "offset", "bound_ms": float(bound)})
    if kind == "non-monotonic-read":
        return _Scenario(kind, key, [
            _ScenarioOp("w1", "write", 0, 0.5),
            _ScenarioOp("w2", "write", 1, 1.5),
            _ScenarioOp("r1", "read", 2, 2.5, mode="broker", node=process_broker + "-a", view_slots=1.75),
            _ScenarioOp("r2", "read", 3, 3.5, mode="broker", node=process_broker + "-b", view_slots=0.75),
        ], {"read": "r2", "earlier_read": "r1", "same_process": ("r1", "r2")})
    if kind == "non-monotonic-broker-read":
        return _Scenario(kind, key, [
            _ScenarioOp("w1", "write", 0, 0.5),
            _ScenarioOp("w2", "write", 1, 1.5),
            _ScenarioOp("r1", "read", 2, 2.5, mode="broker", node=process_broker, view_slots=1.75),
            _ScenarioOp("r2", "read", 3, 3.5, mode="broker", node=process_broker, view_slots=0.75),
        ], {"read": "r2", "earlier_read": "r1", "node": process_broker})
    if kind == "garbage-read":
        return _Scenario(kind, key, [
            _ScenarioOp("w1", "write", 0, 0.5),
            _ScenarioOp("r", "read", 1, 1.5, value_override=json.dumps(f"garbage-{number}")),
        ], {"read": "r"})
    if kind == "aborted-read":
        return _Scenario(kind, key, [
            _ScenarioOp("w1", "write", 0, 0.5, outcome="fail"),
            _ScenarioOp("r", "read", 1, 1.5, same_as="w1"),
        ], {"read": "r", "failed_write": "w1"})
    if kind == "future-read":
        return _Scenario(kind, key, [
            _ScenarioOp("r", "read", 0, 0.5, same_as="w1"),
            _ScenarioOp("w1", "write", 1, 1.5),
        ], {"read": "r", "write": "w1"})
    if kind == "lost-write":
        return _Scenario(kind, key, [_ScenarioOp("w1", "write", 0, 0.5)],
                         {"write": "w1", "reasons": ["final-log", "final-read-value"]},
                         final_value_override="null", drop_from_log=("w1",))
    if kind == "nonlinearizable":
        return _Scenario(kind, key, [
            _ScenarioOp("w1", "write", 0, 0.5),
            _ScenarioOp("w2", "write", 1, 5, lin_slots=4.5),
            _ScenarioOp("r1", "read", 1.5, 2, same_as="w2"),
            _ScenarioOp("r2", "read", 2.5, 3, same_as="w1"),
        ], {"op": "r2"})
    broker = f"plant-broker-{kind}-{number}"
    if kind == "broker-epoch-regression":
        return _Scenario(kind, key, [], {"broker_id": broker, "broker_epoch": 15, "earlier_broker_epoch": 20}, node_events=[
            {"time": 0, "node": NODES[0], "kind": "broker_registration", "broker_id": broker, "broker_epoch": 20},
            {"time": 1, "node": NODES[0], "kind": "broker_registration", "broker_id": broker, "broker_epoch": 15},
        ])
    if kind == "stale-broker-epoch":
        return _Scenario(kind, key, [], {"broker_id": broker, "broker_epoch": 5, "newer_broker_epoch": 9}, node_events=[
            {"time": 0, "node": NODES[0], "kind": "broker_registration", "broker_id": broker, "broker_epoch": 5},
            {"time": 1, "node": NODES[0], "kind": "broker_registration", "broker_id": broker, "broker_epoch": 9},
            {"time": 2, "node": NODES[0], "kind": "broker_request", "broker_id": broker, "broker_epoch": 5,
             "accepted": True, "request": "heartbeat"},
            # Rejected, or current: both fine.
            {"time": 3, "node": NODES[0], "kind": "broker_request", "broker_id": broker, "broker_epoch": 5,
             "accepted": False, "request": "heartbeat"},
            {"time": 4, "node": NODES[0], "kind": "broker_request", "broker_id": broker, "broker_epoch": 9,
             "accepted": True, "request": "heartbeat"},
        ])
    if kind == "fenced-read":
        return _Scenario(kind, key, [
            _ScenarioOp("r", "read", 3, 3.5, mode="broker", node=broker),
            _ScenarioOp("r_after", "read", 11, 11.5, mode="broker", node=broker),  # unfenced again: fine
        ], {"read": "r", "broker_id": broker}, node_events=[
            {"time": 0, "node": broker, "kind": "broker_state", "broker_id": broker, "state": "online"},
            {"time": 1, "node": broker, "kind": "broker_state", "broker_id": broker, "state": "fenced"},
            {"time": 10, "node": broker, "kind": "broker_state", "broker_id": broker, "state": "online"},
        ])
    # split-brain, forked-log, duplicated-write are edits of the base side
    # files; see _plant_side_edits.
    return _Scenario(kind, key, [], {})


# ---------------------------------------------------------------------------
# The operations table: one row per operation, integer codes for names so
# that ten million operations fit in a couple of gigabytes.

F_NAMES = ("read", "write", "cas")
READ, WRITE, CAS = 0, 1, 2
OUTCOME_NAMES = ("ok", "fail", "info")
OK, FAIL, INFO = 0, 1, 2
MODE_NAMES = ("linearizable", "leader-local", "broker")
NO_MODE = -1
EVENT_TYPE_NAMES = ("invoke", "ok", "fail", "info")
NEMESIS_F = ("start-partition", "stop-partition")
BROKERS = ("101", "102", "103")


class _Names:
    """Names interned as small integer codes."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = []
        self._codes: dict[str, int] = {}
        for name in names:
            self.code(name)

    def code(self, name: str) -> int:
        if name not in self._codes:
            self._codes[name] = len(self.names)
            self.names.append(name)
        return self._codes[name]

    def array(self) -> np.ndarray:
        return np.array(self.names, dtype=object)


def _base_operations(rng: np.random.Generator, ops: int, keys: int, processes: int, nodes: _Names) -> pd.DataFrame:
    """The clean base workload, one operation per slot."""
    slot = np.arange(ops, dtype=np.int64)
    lin = slot * SLOT_NS + SLOT_NS // 2
    # Intervals around the linearization point, short enough that a
    # process's next operation (``processes`` slots later) starts after.
    half_span = max(2, processes * SLOT_NS // 2 - 2)
    draw = rng.random(ops)
    f = np.where(draw < 0.45, READ, np.where(draw < 0.88, WRITE, CAS)).astype(np.int8)
    outcome_draw = rng.random(ops)
    outcome = np.full(ops, OK, dtype=np.int8)
    is_read, is_write, is_cas = f == READ, f == WRITE, f == CAS
    outcome[is_read & (outcome_draw < 0.02)] = FAIL
    outcome[is_read & (outcome_draw >= 0.02) & (outcome_draw < 0.03)] = INFO
    outcome[is_write & (outcome_draw < 0.04)] = FAIL
    outcome[is_write & (outcome_draw >= 0.04) & (outcome_draw < 0.08)] = INFO
    outcome[is_cas & (outcome_draw < 0.3)] = FAIL  # its expected value is not current
    is_info = outcome == INFO
    # A process is never reused after an info: its slot continues under a new id.
    process_slot = slot % processes
    generation = pd.Series(is_info.astype(np.int64)).groupby(process_slot).cumsum().to_numpy() - is_info
    mode_draw = rng.random(ops)
    mode = np.where(~is_read, NO_MODE, np.where(mode_draw < 0.7, 0, np.where(mode_draw < 0.85, 1, 2))).astype(np.int8)
    broker_codes = np.array([nodes.code(b) for b in BROKERS], dtype=np.int16)
    return pd.DataFrame(
        {
            "process": (process_slot + processes * generation).astype(np.int64),
            "f": f,
            "key": rng.integers(0, keys, ops).astype(np.int32),
            "outcome": outcome,
            "has_completion": ~(is_info & (rng.random(ops) < 0.5)),
            "t_inv": lin - rng.integers(1, half_span, ops),
            "t_done": lin + rng.integers(1, half_span, ops),
            "lin": lin,
            "view": lin,
            # An info write took effect in half the cases.
            "applied": (is_write & ((outcome == OK) | (is_info & (rng.random(ops) < 0.5)))) | (is_cas & (outcome == OK)),
            "mode": mode,
            "broker": np.where(mode == 2, broker_codes[rng.integers(0, len(BROKERS), ops)], -1).astype(np.int16),
            "final": False,
            "scenario": np.int32(-1),
        }
    )


def _epochs(ops: int) -> tuple[np.ndarray, list[str]]:
    """Epoch start times and leaders: a new leader every fifth of the run."""
    count = 5
    starts = np.array([i * (ops // count) * SLOT_NS for i in range(count)], dtype=np.int64)
    leaders = [NODES[i % len(NODES)] for i in range(count)]
    return starts, leaders


@dataclass
class _Plan:
    """Everything the writers need, beyond the operations table."""

    key_names: np.ndarray
    node_names: np.ndarray
    value_overrides: dict[int, str]  # op row -> JSON text a read returns instead
    node_events: list[dict[str, Any]]
    dropped_from_log: set[int]  # op rows whose records no dump holds
    forked: dict[int, str]  # offset -> record hash on the last node
    duplicated: list[int]  # op rows whose records are committed again at the end


def synthesize(
    directory: str | Path,
    *,
    ops: int,
    keys: int,
    plant: Mapping[str, int] | None = None,
    seed: int = 0,
    processes: int = 10,
    history_format: str = "jsonl",
    side_format: str = "jsonl",
) -> SynthesisResult:
    """Write a campaign directory (history, meta.json, node events, log
    dumps, planted.json) with ``ops`` base operations over ``keys`` keys and
    the anomalies in ``plant`` (kind -> count).

    ``history_format`` is ``jsonl``, ``parquet`` or ``both``; ``side_format``
    is ``jsonl`` or ``parquet``.

    Raises ``ValueError`` for bad sizes, kinds or formats, and ``OSError``
    when the files cannot be written.
    """
    if ops < 1 or keys < 1 or processes < 1:
        raise ValueError("ops, keys and processes must be at least 1")
    if history_format not in ("jsonl", "parquet", "both"):
        raise ValueError(f"history_format must be jsonl, parquet or both, not {history_format!r}")
    if side_format not in ("jsonl", "parquet"):
        raise ValueError(f"side_format must be jsonl or parquet, not {side_format!r}")
    plant = dict(plant or {})
    for kind, count in plant.items():
        if kind not in ANOMALY_KINDS or count < 0:
            raise ValueError(f"bad plant {kind!r}: {count!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    nodes = _Names(NODES)
    key_names = _Names(f"k{code}" for code in range(keys))

    frame = _base_operations(rng, ops, keys, processes, nodes)
    epoch_starts, leaders = _epochs(ops)
    end_ns = int(frame["t_done"].max()) + SLOT_NS

    # Broker 101 is fenced for a while mid-run (and re-registers): move the
    # broker reads that would overlap that window to broker 102.
    fenced_from_ns = (ops // 2) * SLOT_NS
    fenced_until_ns = fenced_from_ns + max(10, ops // 20) * SLOT_NS
    margin_ns = processes * SLOT_NS
    overlaps = (
        (frame["broker"] == nodes.code("101")).to_numpy()
        & (frame["t_done"] >= fenced_from_ns - margin_ns).to_numpy()
        & (frame["t_inv"] <= fenced_until_ns + margin_ns).to_numpy()
    )
    frame.loc[overlaps, "broker"] = nodes.code("102")

    # Scenarios, spread evenly over the run on their own keys and processes.
    scenarios: list[tuple[int, _Scenario]] = []
    order = [(kind, n) for kind in ANOMALY_KINDS for n in range(plant.get(kind, 0))]
    next_process = int(frame["process"].max()) + 1
    scenario_rows: list[dict[str, Any]] = []
    scenario_op_names: list[str] = []
    same_as: list[tuple[int, str]] = []  # (row among scenario rows, op name in its scenario)
    overrides_by_scenario_row: dict[int, str] = {}
    for position, (kind, number) in enumerate(order):
        anchor_ns = int(ops * (position + 1) / (len(order) + 1)) * SLOT_NS
        scenario = _scenario(kind, number)
        scenarios.append((anchor_ns, scenario))
        same_process = scenario.expect.get("same_process", ())
        shared_process = next_process if same_process else None
        if same_process:
            next_process += 1
        for op in scenario.ops:
            if op.name in same_process:
                process = shared_process
            else:
                process, next_process = next_process, next_process + 1
            lin_slots = op.lin_slots if op.lin_slots is not None else (op.invoke_slots + op.done_slots) / 2
            view_slots = op.view_slots if op.view_slots is not None else lin_slots
            mode = MODE_NAMES.index(op.mode) if (op.f == "read" and op.mode) else NO_MODE
            if op.value_override is not None:
                overrides_by_scenario_row[len(scenario_rows)] = op.value_override
            if op.same_as is not None:
                same_as.append((len(scenario_rows), op.same_as))
            scenario_op_names.append(op.name)
            scenario_rows.append(
                {
                    "process": process, "f": F_NAMES.index(op.f), "key": key_names.code(scenario.key),
                    "outcome": OUTCOME_NAMES.index(op.outcome), "has_completion": True,
                    "t_inv": anchor_ns + int(op.invoke_slots * SLOT_NS) + SLOT_NS // 4,
                    "t_done": anchor_ns + int(op.done_slots * SLOT_NS) + SLOT_NS // 4,
                    "lin": anchor_ns + int(lin_slots * SLOT_NS) + SLOT_NS // 4 + 1,
                    "view": anchor_ns + int(view_slots * SLOT_NS) + SLOT_NS // 4 + 1,
                    "applied": op.f != "read" and op.outcome == "ok",
                    "mode": mode,
                    "broker": nodes.code(op.node) if op.mode == "broker" else -1,
                    "final": False,
                    "scenario": len(scenarios) - 1,
                }
            )
        end_ns = max(end_ns, anchor_ns + 60 * SLOT_NS)
    base_rows = len(frame)
    if scenario_rows:
        frame = pd.concat([frame, pd.DataFrame(scenario_rows).astype(frame.dtypes.to_dict())], ignore_index=True)

    # One final linearizable read per key, after everything, by one process.
    used_keys = np.unique(frame["key"].to_numpy())
    final_start_ns = max(end_ns, int(frame["t_done"].max())) + 10 * SLOT_NS
    final_inv = final_start_ns + np.arange(len(used_keys), dtype=np.int64) * 2 * SLOT_NS
    finals = pd.DataFrame(
        {
            "process": np.int64(next_process), "f": np.int8(READ), "key": used_keys.astype(np.int32),
            "outcome": np.int8(OK), "has_completion": True, "t_inv": final_inv, "t_done": final_inv + SLOT_NS,
            "lin": final_inv + SLOT_NS // 2, "view": final_inv + SLOT_NS // 2, "applied": False,
            "mode": np.int8(0), "broker": np.int16(-1), "final": True, "scenario": np.int32(-1),
        }
    )
    frame = pd.concat([frame, finals.astype(frame.dtypes.to_dict())], ignore_index=True)
    frame["op"] = np.arange(len(frame), dtype=np.int64)
    _compute_values(frame)

    # Scenario reads that return what another of their operations wrote.
    value_overrides = {base_rows + row: text for row, text in overrides_by_scenario_row.items()}
    scenario_row_of = {
        (int(frame.at[base_rows + row, "scenario"]), name): base_rows + row for row, name in enumerate(scenario_op_names)
    }
    for row, source_name in same_as:
        target = base_rows + row
        source = scenario_row_of[(int(frame.at[target, "scenario"]), source_name)]
        frame.at[target, "seen"] = frame.at[source, "written"]
        if frame.at[source, "offset"] >= 0:
            frame.at[target, "offset"] = frame.at[source, "offset"]
    dropped: set[int] = set()
    for number, (_, scenario) in enumerate(scenarios):
        if scenario.final_value_override is not None:
            final_rows = frame.index[frame["final"].to_numpy() & (frame["key"].to_numpy() == key_names.code(scenario.key))]
            for row in final_rows:
                value_overrides[int(row)] = scenario.final_value_override
        for name in scenario.drop_from_log:
            dropped.add(scenario_row_of[(number, name)])

    # Epoch and node for each operation.
    epoch_index = np.clip(np.searchsorted(epoch_starts, frame["lin"].to_numpy(), side="right") - 1, 0, len(epoch_starts) - 1)
    frame["epoch"] = (epoch_index + 1).astype(np.int64)
    leader_codes = np.array([nodes.code(leader) for leader in leaders], dtype=np.int16)[epoch_index]
    frame["node"] = np.where(frame["mode"].to_numpy() == 2, frame["broker"].to_numpy(), leader_codes).astype(np.int16)

    plan = _Plan(
        key_names=key_names.array(),
        node_names=nodes.array(),
        value_overrides=value_overrides,
        node_events=_node_events(epoch_starts, leaders, fenced_from_ns, fenced_until_ns, end_ns, scenarios),
        dropped_from_log=dropped,
        forked={},
        duplicated=[],
    )
    events = _events(frame, ops)
    anomalies = _planted(frame, events, scenarios, scenario_row_of, plan, plant, epoch_starts, leaders, rng)

    history_paths = []
    if history_format in ("jsonl", "both"):
        history_paths.append(_write_history(frame, events, plan, directory / "history.jsonl"))
    if history_format in ("parquet", "both"):
        history_paths.append(_write_history(frame, events, plan, directory / "history.parquet"))
    _write_node_events(plan.node_events, directory / f"node-events.{side_format}")
    _write_log_dumps(frame, plan, directory / f"log-dumps.{side_format}")
    meta = {
        "model": "metadata",
        "check_quorum_factor": CHECK_QUORUM_FACTOR,
        "fetch_timeout_ms": FETCH_TIMEOUT_MS,
        "staleness_bound_ms": STALENESS_BOUND_MS,
        "offset_scope": "log",
        "synthetic": {"ops": ops, "keys": keys, "processes": processes, "seed": seed, "plant": plant},
    }
    (directory / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    (directory / "planted.json").write_text(json.dumps([asdict(a) for a in anomalies], indent=1) + "\n")
    return SynthesisResult(directory, tuple(history_paths), len(frame), len(events["time"]), tuple(anomalies))


def _compute_values(frame: pd.DataFrame) -> None:
    """Written values, offsets, and what every read and cas sees."""
    f = frame["f"].to_numpy()
    is_write, is_cas, is_read = f == WRITE, f == CAS, f == READ
    # Unique written values: the op number + 1 (0 is the initial null).
    frame["written"] = np.where(is_write | is_cas, frame["op"].to_numpy() + 1, NEVER_WRITTEN)
    applied_rows = np.flatnonzero(frame["applied"].to_numpy())
    applied_lin = frame["lin"].to_numpy()[applied_rows]
    by_lin = np.argsort(applied_lin, kind="stable")
    applied_rows, applied_lin = applied_rows[by_lin], applied_lin[by_lin]
    offset = np.full(len(frame), -1, dtype=np.int64)
    # Offset 0 is the log's first record (a leader change); writes follow.
    offset[applied_rows] = np.arange(1, len(applied_rows) + 1, dtype=np.int64)
    table = pd.DataFrame(
        {"key": frame["key"].to_numpy()[applied_rows], "t_w": applied_lin, "value": frame["written"].to_numpy()[applied_rows]}
    )

    def state_at(times: np.ndarray, rows: np.ndarray) -> np.ndarray:
        query = pd.DataFrame({"t": times[rows], "key": frame["key"].to_numpy()[rows], "position": np.arange(len(rows))})
        query = query.sort_values("t", kind="stable")
        merged = pd.merge_asof(query, table, left_on="t", right_on="t_w", by="key", allow_exact_matches=False)
        out = np.empty(len(rows), dtype=np.int64)
        out[merged["position"].to_numpy()] = merged["value"].fillna(NEVER_WRITTEN).astype(np.int64).to_numpy()
        return out

    seen = np.full(len(frame), NEVER_WRITTEN, dtype=np.int64)
    read_rows = np.flatnonzero(is_read)
    view = frame["view"].to_numpy()
    seen[read_rows] = state_at(view, read_rows)
    expected = np.zeros(len(frame), dtype=np.int64)
    cas_rows = np.flatnonzero(is_cas)
    if len(cas_rows):
        current = state_at(frame["lin"].to_numpy(), cas_rows)
        ok = frame["outcome"].to_numpy()[cas_rows] == OK
        # A failing cas expects a value nobody writes.
        expected[cas_rows] = np.where(ok, current, -(frame["op"].to_numpy()[cas_rows] + 1))
    offset[read_rows] = np.searchsorted(applied_lin, view[read_rows], side="left")
    frame["seen"] = seen
    frame["expected"] = expected
    frame["offset"] = offset


def _events(frame: pd.DataFrame, ops: int) -> dict[str, np.ndarray]:
    """Every event as (time, kind, row) in index order: row is the
    operation's row (-1 for nemesis events), kind the event type code."""
    rows = len(frame)
    completed = np.flatnonzero(frame["has_completion"].to_numpy())
    nemesis_times = np.linspace(0, ops * SLOT_NS, num=9, dtype=np.int64)[1:-1] + SLOT_NS // 3
    time_ns = np.concatenate([frame["t_inv"].to_numpy(), frame["t_done"].to_numpy()[completed], nemesis_times])
    order = np.concatenate([np.zeros(rows, np.int8), np.ones(len(completed), np.int8), np.full(len(nemesis_times), 2, np.int8)])
    row = np.concatenate([np.arange(rows, dtype=np.int64), completed, -1 - np.arange(len(nemesis_times), dtype=np.int64)])
    kind = np.concatenate([np.zeros(rows, np.int8), frame["outcome"].to_numpy()[completed] + 1, np.full(len(nemesis_times), 3, np.int8)])
    # Invokes before completions at equal times, then by operation.
    sort = np.lexsort((row, order, time_ns))
    position = np.empty(len(sort), dtype=np.int64)
    position[sort] = np.arange(len(sort), dtype=np.int64)
    return {"time": time_ns[sort], "kind": kind[sort], "row": row[sort], "invoke_index": position[:rows]}


def _node_events(
    epoch_starts: np.ndarray, leaders: list[str], fenced_from_ns: int, fenced_until_ns: int,
    end_ns: int, scenarios: list[tuple[int, _Scenario]],
) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for epoch, (start, leader) in enumerate(zip(epoch_starts.tolist(), leaders), start=1):
        records.append({"time": start, "node": leader, "kind": "role", "epoch": epoch, "role": "leader", "leader": leader})
        for number, node in enumerate(n for n in NODES if n != leader):
            records.append(
                {"time": start + 1000 * (number + 1), "node": node, "kind": "role", "epoch": epoch, "role": "follower", "leader": leader}
            )
    broker_epochs = {broker: 10 + position for position, broker in enumerate(BROKERS)}
    for broker in BROKERS:
        for delay, node in enumerate(NODES):  # every controller reports the registration
            records.append(
                {"time": 100 + delay, "node": node, "kind": "broker_registration", "broker_id": broker,
                 "broker_epoch": broker_epochs[broker], "offset": broker_epochs[broker]}
            )
        records.append({"time": 200, "node": broker, "kind": "broker_state", "broker_id": broker, "state": "online"})
    # Broker 101: fenced, then re-registered with a newer epoch.
    new_epoch = 100
    records.append({"time": fenced_from_ns, "node": "101", "kind": "broker_state", "broker_id": "101", "state": "fenced"})
    for delay, node in enumerate(NODES):
        records.append(
            {"time": fenced_until_ns + delay, "node": node, "kind": "broker_registration", "broker_id": "101",
             "broker_epoch": new_epoch, "offset": new_epoch}
        )
    records.append({"time": fenced_until_ns + 10, "node": "101", "kind": "broker_state", "broker_id": "101", "state": "online"})
    # Accepted heartbeats, each with the broker's epoch at the time.
    for time_ns in np.linspace(1000, end_ns, num=40, dtype=np.int64).tolist():
        for broker in BROKERS:
            if broker == "101" and fenced_from_ns <= time_ns <= fenced_until_ns + 10:
                continue
            epoch = new_epoch if broker == "101" and time_ns > fenced_until_ns else broker_epochs[broker]
            leader = leaders[max(0, int(np.searchsorted(epoch_starts, time_ns, side="right")) - 1)]
            records.append(
                {"time": time_ns, "node": leader, "kind": "broker_request", "broker_id": broker, "broker_epoch": epoch,
                 "accepted": True, "request": "heartbeat"}
            )
    for anchor_ns, scenario in scenarios:
        for event in scenario.node_events:
            records.append({**event, "time": anchor_ns + int(event["time"] * SLOT_NS)})
    return records


def _planted(
    frame: pd.DataFrame, events: dict[str, np.ndarray], scenarios: list[tuple[int, _Scenario]],
    scenario_row_of: Mapping[tuple[int, str], int], plan: _Plan, plant: Mapping[str, int],
    epoch_starts: np.ndarray, leaders: list[str], rng: np.random.Generator,
) -> list[PlantedAnomaly]:
    """What was planted, with history indexes; also makes the side-file
    edits (split brain, forked and duplicated records) into ``plan``."""
    anomalies: list[PlantedAnomaly] = []
    invoke_index = events["invoke_index"]
    for number, (_, scenario) in enumerate(scenarios):
        if scenario.kind in ("split-brain", "forked-log", "duplicated-write"):
            continue
        kind = ANOMALY_KINDS[scenario.kind]
        witness: dict[str, Any] = {}
        for name, value in scenario.expect.items():
            if name == "same_process":
                continue
            if isinstance(value, str) and (number, value) in scenario_row_of:
                witness[name] = int(invoke_index[scenario_row_of[(number, value)]])
            else:
                witness[name] = value
        anomalies.append(PlantedAnomaly(scenario.kind, kind.check, scenario.key if scenario.ops else None, witness, kind.implied))

    for number in range(plant.get("split-brain", 0)):
        epoch = 1 + number % len(leaders)
        impostor = NODES[(NODES.index(leaders[epoch - 1]) + 1 + number // len(leaders)) % len(NODES)]
        plan.node_events.append(
            {"time": int(epoch_starts[epoch - 1]) + 5000 + number, "node": impostor, "kind": "role", "epoch": epoch,
             "role": "leader", "leader": impostor}
        )
        anomalies.append(PlantedAnomaly("split-brain", "split-brain", None, {"epoch": epoch}))
    # Records to fork or duplicate: committed client writes, chosen at random.
    applied = np.flatnonzero(frame["applied"].to_numpy() & (frame["offset"].to_numpy() >= 1))
    applied = np.array([row for row in applied if int(row) not in plan.dropped_from_log], dtype=np.int64)
    wanted = min(len(applied), plant.get("forked-log", 0) + plant.get("duplicated-write", 0))
    targets = rng.choice(applied, size=wanted, replace=False) if wanted else np.array([], dtype=np.int64)
    for position, row in enumerate(targets.tolist()):
        if position < plant.get("forked-log", 0):
            offset = int(frame.at[row, "offset"])
            plan.forked[offset] = f"h{int(frame.at[row, 'op'])}-forked"
            anomalies.append(PlantedAnomaly("forked-log", "forked-log", None, {"offset": offset}))
        else:
            plan.duplicated.append(row)
            anomalies.append(PlantedAnomaly("duplicated-write", "duplicated-write", None, {"write_id": f"w{int(frame.at[row, 'op'])}"}))
    return anomalies


# ---------------------------------------------------------------------------
# Writers: the history and log dumps go out in chunks, so that their text
# never has to fit in memory at once.

_CHUNK_EVENTS = 500_000


def _history_chunks(frame: pd.DataFrame, events: dict[str, np.ndarray], plan: _Plan) -> Iterator[dict[str, np.ndarray]]:
    """The history's columns (object arrays, None for absent), a chunk at a time."""
    columns = {name: frame[name].to_numpy() for name in
               ("process", "f", "key", "outcome", "written", "expected", "seen", "offset", "epoch", "node", "mode", "final", "op")}
    total = len(events["time"])
    for start in range(0, total, _CHUNK_EVENTS):
        stop = min(total, start + _CHUNK_EVENTS)
        row = events["row"][start:stop]
        kind = events["kind"][start:stop]
        nemesis = row < 0
        safe = np.where(nemesis, 0, row)
        get = {name: column[safe] for name, column in columns.items()}
        invoke = kind == 0
        ok = kind == 1
        f = get["f"]
        is_read = f == READ

        def text(values: np.ndarray) -> np.ndarray:
            out = values.astype(str).astype(object)
            out[values == NEVER_WRITTEN] = "null"
            return out

        written = get["written"].astype(str).astype(object)
        write_value = np.where(f == CAS, "[" + text(get["expected"]) + "," + written + "]", written)
        read_value = text(get["seen"])
        if plan.value_overrides:
            for position in np.flatnonzero(np.isin(safe, list(plan.value_overrides)) & ~nemesis):
                read_value[position] = plan.value_overrides[int(safe[position])]
        value = np.where(is_read, np.where(~invoke & ok, read_value, "null"), write_value)
        value[nemesis] = "null"
        f_names = np.array(F_NAMES, dtype=object)[f]
        f_names[nemesis] = np.array(NEMESIS_F, dtype=object)[(-row[nemesis] - 1) % 2]
        process = get["process"].astype(str).astype(object)
        process[nemesis] = "nemesis"
        key = plan.key_names[get["key"]]
        key[nemesis] = None
        mode = get["mode"]
        mode_names = np.where(invoke & is_read & (mode >= 0), np.array(MODE_NAMES + ("",), dtype=object)[mode], None)
        error = np.where(kind == 2, "rejected", np.where(kind == 3, "timeout", None))
        error[nemesis] = None
        yield {
            "index": np.arange(start, stop, dtype=np.int64),
            "time": events["time"][start:stop],
            "process": process,
            "type": np.array(EVENT_TYPE_NAMES, dtype=object)[kind],
            "f": f_names,
            "key": key,
            "value": value,
            "node": np.where(ok & ~nemesis, plan.node_names[get["node"]], None),
            "offset": np.where(ok & ~nemesis & (get["offset"] >= 0), get["offset"], -1),
            "epoch": np.where(ok & ~nemesis, get["epoch"], -1),
            "mode": mode_names,
            "final": np.where(invoke & get["final"] & ~nemesis, True, None),
            "write_id": np.where(invoke & ~is_read & ~nemesis, "w" + get["op"].astype(str).astype(object), None),
            "error": error,
        }


def _write_history(frame: pd.DataFrame, events: dict[str, np.ndarray], plan: _Plan, path: Path) -> Path:
    chunks = _history_chunks(frame, events, plan)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as parquet

        writer = None
        try:
            for chunk in chunks:
                table = pa.table(
                    {
                        **{name: pa.array(chunk[name], type=pa.string()) for name in
                           ("process", "type", "f", "key", "value", "node", "mode", "write_id", "error")},
                        "index": pa.array(chunk["index"]),
                        "time": pa.array(chunk["time"]),
                        "offset": pa.array(chunk["offset"], mask=chunk["offset"] < 0),
                        "epoch": pa.array(chunk["epoch"], mask=chunk["epoch"] < 0),
                        "final": pa.array(chunk["final"], type=pa.bool_()),
                    }
                )
                writer = writer or parquet.ParquetWriter(path, table.schema)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
        return path
    with path.open("w", encoding="utf-8", buffering=1 << 20) as handle:
        for chunk in chunks:
            lines = []
            for index, time_ns, process, kind, f, key, value, node, offset, epoch, mode, final, write_id, error in zip(
                chunk["index"].tolist(), chunk["time"].tolist(), chunk["process"], chunk["type"], chunk["f"], chunk["key"],
                chunk["value"], chunk["node"], chunk["offset"].tolist(), chunk["epoch"].tolist(), chunk["mode"],
                chunk["final"], chunk["write_id"], chunk["error"],
            ):
                process_text = '"nemesis"' if process == "nemesis" else process
                key_text = "null" if key is None else json.dumps(key)
                line = (
                    f'{{"index":{index},"time":{time_ns},"process":{process_text},"type":"{kind}","f":"{f}",'
                    f'"key":{key_text},"value":{value}'
                )
                if node is not None:
                    line += f',"node":"{node}"'
                if offset >= 0:
                    line += f',"offset":{offset}'
                if epoch >= 0:
                    line += f',"epoch":{epoch}'
                if mode is not None:
                    line += f',"mode":"{mode}"'
                if final is not None:
                    line += ',"final":true'
                if write_id is not None:
                    line += f',"write_id":"{write_id}"'
                if error is not None:
                    line += f',"error":"{error}"'
                lines.append(line + "}\n")
            handle.writelines(lines)
    return path


def _write_node_events(records: list[dict[str, Any]], path: Path) -> None:
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as parquet

        frame = pd.DataFrame(records)
        for name in ("epoch", "broker_epoch", "offset", "time"):
            if name in frame:
                frame[name] = pd.array(frame[name], dtype="Int64")
        if "accepted" in frame:
            frame["accepted"] = pd.array(frame["accepted"], dtype="boolean")
        parquet.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
        return
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps({name: value for name, value in record.items() if value is not None}, separators=(",", ":")) + "\n")


def _write_log_dumps(frame: pd.DataFrame, plan: _Plan, path: Path) -> None:
    """Every node's log: a leader-change record at offset 0, then every
    write that took effect, in offset order; all committed."""
    applied = np.flatnonzero(frame["applied"].to_numpy() & (frame["offset"].to_numpy() >= 1))
    applied = applied[np.argsort(frame["offset"].to_numpy()[applied], kind="stable")]
    if plan.dropped_from_log:
        applied = applied[~np.isin(applied, list(plan.dropped_from_log))]
    offset = np.concatenate([[0], frame["offset"].to_numpy()[applied]]).astype(np.int64)
    epoch = np.concatenate([[1], frame["epoch"].to_numpy()[applied]]).astype(np.int64)
    op = frame["op"].to_numpy()[applied].astype(str).astype(object)
    record_hash = np.concatenate([["h-leader-change"], "h" + op]).astype(object)
    write_id = np.concatenate([[None], "w" + op]).astype(object)
    next_offset = int(frame["offset"].max()) + 1
    if plan.duplicated:
        extra_offset = np.arange(next_offset, next_offset + len(plan.duplicated), dtype=np.int64)
        extra_ops = frame["op"].to_numpy()[plan.duplicated].astype(str).astype(object)
        offset = np.concatenate([offset, extra_offset])
        epoch = np.concatenate([epoch, frame["epoch"].to_numpy()[plan.duplicated]])
        record_hash = np.concatenate([record_hash, "h" + extra_ops])
        write_id = np.concatenate([write_id, "w" + extra_ops])
        next_offset += len(plan.duplicated)
    hwm = next_offset

    def node_columns(node: str) -> dict[str, np.ndarray]:
        hashes = record_hash
        if node == NODES[-1] and plan.forked:
            hashes = record_hash.copy()
            for position in np.flatnonzero(np.isin(offset, list(plan.forked))):
                hashes[position] = plan.forked[int(offset[position])]
        return {"node": np.full(len(offset), node, dtype=object), "offset": offset, "epoch": epoch,
                "record_hash": hashes, "write_id": write_id, "hwm": np.full(len(offset), hwm, dtype=np.int64)}

    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as parquet

        writer = None
        try:
            for node in NODES:
                table = pa.table({name: pa.array(values) for name, values in node_columns(node).items()})
                writer = writer or parquet.ParquetWriter(path, table.schema)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
        return
    with path.open("w", encoding="utf-8", buffering=1 << 20) as handle:
        for node in NODES:
            columns = node_columns(node)
            lines = []
            for offset_value, epoch_value, hash_value, write_id_value in zip(
                columns["offset"].tolist(), columns["epoch"].tolist(), columns["record_hash"], columns["write_id"]
            ):
                write_id_text = "" if write_id_value is None else f',"write_id":"{write_id_value}"'
                lines.append(
                    f'{{"node":"{node}","offset":{offset_value},"epoch":{epoch_value},"record_hash":"{hash_value}"'
                    f'{write_id_text},"hwm":{hwm}}}\n'
                )
            handle.writelines(lines)


def read_planted(directory: str | Path) -> list[PlantedAnomaly]:
    """The anomalies :func:`synthesize` planted in ``directory``."""
    raw = json.loads((Path(directory) / "planted.json").read_text())
    return [PlantedAnomaly(item["kind"], item["check"], item["key"], item["witness"], tuple(item["implied"])) for item in raw]


def find_planted(result: Mapping[str, Any], planted: PlantedAnomaly) -> bool:
    """Whether a results dict (``HistoryResult.to_dict()``) reports
    ``planted`` under its check with a witness naming what was planted."""
    check = result["checks"].get(planted.check, {})
    expected = planted.witness
    for witness in check.get("witnesses", []):
        if planted.check == "linearizability":
            if witness.get("key") == planted.key and (witness.get("op") or {}).get("index") == expected["op"]:
                return True
            continue
        if _witness_matches(planted.check, witness, expected):
            return True
    return False


def _witness_matches(check: str, witness: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    def index(name: str) -> int | None:
        value = witness.get(name)
        return value.get("index") if isinstance(value, Mapping) else None

    if check in ("stale-read", "non-monotonic-read-process", "non-monotonic-read-broker", "garbage-read",
                 "aborted-read", "future-read", "fenced-broker-read"):
        for name, value in expected.items():
            if name in ("read", "missed_write", "earlier_read", "failed_write", "write"):
                if index(name) != value:
                    return False
            elif name == "broker_id":
                if (witness.get("fenced_since") or {}).get("broker_id") != value:
                    return False
            elif witness.get(name) != value:
                return False
        return True
    if check == "lost-write":
        return index("write") == expected["write"] and witness.get("reasons") == expected["reasons"]
    if check == "split-brain":
        return witness.get("epoch") == expected["epoch"]
    if check == "forked-log":
        return witness.get("offset") == expected["offset"]
    if check == "duplicated-write":
        return witness.get("write_id") == expected["write_id"]
    if check == "broker-epoch-regression":
        return (
            witness["registration"]["broker_id"] == expected["broker_id"]
            and witness["registration"]["broker_epoch"] == expected["broker_epoch"]
            and witness["earlier_registration"]["broker_epoch"] == expected["earlier_broker_epoch"]
        )
    if check == "stale-broker-epoch":
        request = witness.get("request") or {}
        return (
            request.get("broker_id") == expected["broker_id"]
            and request.get("broker_epoch") == expected["broker_epoch"]
            and witness["newer_registration"]["broker_epoch"] == expected["newer_broker_epoch"]
        )
    return False


__all__ = [
    "ANOMALY_KINDS",
    "AnomalyKind",
    "PlantedAnomaly",
    "SynthesisResult",
    "find_planted",
    "parse_plant_spec",
    "read_planted",
    "synthesize",
]
