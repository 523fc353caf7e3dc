"""The reference checker: every check as its plain definition, in pure Python.

It is deliberately simple (most tier-1 checks are quadratic, and tier 2 is a
recursive search over sets, not the linked-list WGL search): its job is to be
obviously right on little histories, so that tests can hold the Spark job to
it. Each function's docstring is the definition of its check; the Spark job
(``_tier1``) must find exactly the same anomalies with the same witnesses.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Sequence

from jepsen_like.checker._errors import HistoryFormatError
from jepsen_like.checker._load import (
    HistoryMeta,
    HistorySource,
    discover_histories,
    history_events,
    model_override_name,
    pair_operations,
    read_history_events,
    read_log_dumps,
    read_node_events,
    resolve_model_name,
)
from jepsen_like.checker._model_catalog import MODEL_DEFAULT, get_model
from jepsen_like.checker._models import (
    APPEND,
    CAS,
    FAIL,
    MODE_BROKER,
    MODE_LEADER_LOCAL,
    MODE_LINEARIZABLE,
    OK,
    QUERY_KINDS,
    READ,
    WRITE,
    Model,
    Operation,
    canonical_json,
    cas_arguments,
    dropped_by_search,
    is_tier2_candidate,
    render_operation,
)
from jepsen_like.checker._report import (
    CHECK_NAMES,
    DEFAULT_MAX_WITNESSES,
    HistoryResult,
    linearizability_check,
    skip_reasons,
    deadline_check,
    skipped,
    tier1_check,
)
from jepsen_like.checker._staleness import ReadStaleness, bound_ns_of_mode, fault_windows, summarize
from jepsen_like.checker._wgl import (
    BUDGET_DEADLINE,
    DEFAULT_BUDGET_STEPS,
    LINEARIZABLE,
    NOT_LINEARIZABLE,
    UNKNOWN,
    BudgetMeter,
    KeyVerdict,
    KeyBudget,
    OutOfBudget,
    check_operations,
    deadline_reason,
)

# Before every time in a history: the "completion" of the initial value.
NEVER_NS = -(2**62)

NODE_EVENT_FIELDS = (
    "time", "node", "kind", "epoch", "role", "leader", "broker_id", "broker_epoch",
    "offset", "state", "accepted", "request",
)
LOG_RECORD_FIELDS = ("node", "offset", "epoch", "record_hash", "write_id", "hwm", "log_start")


def render_node_event(event: Mapping[str, Any]) -> dict[str, Any]:
    return {name: event[name] for name in NODE_EVENT_FIELDS if event.get(name) is not None}


def render_log_record(record: Mapping[str, Any]) -> dict[str, Any]:
    return {name: record[name] for name in LOG_RECORD_FIELDS if record.get(name) is not None}


def compact(witness: dict[str, Any]) -> dict[str, Any]:
    """Drop absent parts of a witness (both checkers do, so they compare)."""
    return {name: value for name, value in witness.items() if value is not None}


def bound_ns(op: Operation, meta: HistoryMeta) -> int:
    """How long before a read's invoke a write must have been acknowledged
    for the read to have to reflect it: 0 for linearizable reads.

    Raises :class:`HistoryFormatError` when the history has a leader-local or
    broker read and its meta does not declare the bound.
    """
    bound = bound_ns_of_mode(op.mode, meta)
    if bound is None:
        if op.mode == MODE_LEADER_LOCAL:
            raise HistoryFormatError(
                f"read at index {op.index} is leader-local, but the history's meta gives no fetch_timeout_ms"
            )
        raise HistoryFormatError(
            f"read at index {op.index} is a broker read, but the history's meta gives no staleness_bound_ms"
        )
    return bound


class _History:
    """A history's operations, indexed the ways the checks need."""

    def __init__(self, operations: Sequence[Operation], model: Model) -> None:
        self.operations = operations
        self.model = model
        self.initial_text = canonical_json(model.initial_value)
        self.kind = {op.index: model.kind_of(op.f) for op in operations}
        keys_with_appends = {op.key for op in operations if self.kind[op.index] is APPEND}
        self.register_like = lambda key: key not in keys_with_appends
        self.ok_reads = [op for op in operations if self.kind[op.index] is READ and op.outcome == OK]
        self.by_index = {op.index: op for op in operations}
        self.writers_by_value: dict[tuple[str | None, str], list[Operation]] = defaultdict(list)
        for op in operations:
            if self.kind[op.index] in (WRITE, CAS):
                self.writers_by_value[(op.key, self.written_text(op))].append(op)

    def written_text(self, op: Operation) -> str:
        if self.kind[op.index] is CAS:
            return canonical_json(cas_arguments(op)[1])
        return canonical_json(op.invoke_value)

    def ok_writers(self, key: str | None, kinds: tuple[str, ...]) -> list[Operation]:
        return [op for op in self.operations if op.key == key and op.outcome == OK and self.kind[op.index] in kinds]

    def possible_writers(self, key: str | None, value_text: str) -> list[Operation]:
        return [op for op in self.writers_by_value.get((key, value_text), []) if op.outcome != FAIL]

    def writer_done_ns(self, read: Operation) -> tuple[bool, int, Operation | None]:
        """(applicable, when the written value was certainly in place, writer):
        the value-uniqueness rule applies when the read's value has exactly one
        writer that may have happened and it returned ok, or is the initial
        value and nothing wrote it."""
        value_text = canonical_json(read.value)
        writers = self.possible_writers(read.key, value_text)
        if value_text == self.initial_text and not writers:
            return True, NEVER_NS, None
        if len(writers) == 1 and writers[0].outcome == OK:
            return True, writers[0].return_ns, writers[0]  # type: ignore[return-value]
        return False, 0, None


@dataclass(frozen=True)
class _Measured:
    """A read's staleness, with what the stale-read witness names."""

    figures: ReadStaleness
    missed: Operation | None
    rule: str | None
    read_from: Operation | None


def read_staleness(history: _History, meta: HistoryMeta) -> list[_Measured]:
    """Every ok read's staleness (docs/checker.md, "Staleness"). The writes a
    read missed are, by two sound rules, the ok writes acknowledged strictly
    before its invoke such that:

    - offset: the write (write/cas/append) on the read's key has an offset
      larger than the read's;
    - value (keys without appends): the read's value has exactly one possible
      writer ``w`` (ok) or is the initial value nobody wrote, and the write
      (write/cas) on the key was invoked after ``w`` completed.

    The first missed write is the one with the smallest (completion, index)
    of either rule (``rule`` says which found it; ``offset`` when both), and
    the staleness is the read's invoke minus its completion (0 when the read
    missed nothing). ``offsets_behind``, for reads with an offset, is the
    largest offset of an ok write on the key acknowledged before the invoke
    minus the read's offset (0 when none is larger).
    """
    measured = []
    for read in history.ok_reads:
        offset_first, value_first, read_from, offsets_behind = None, None, None, None
        if read.offset is not None:
            acknowledged = [
                w for w in history.ok_writers(read.key, (WRITE, CAS, APPEND))
                if w.offset is not None and w.return_ns < read.call_ns
            ]
            newer = [w for w in acknowledged if w.offset > read.offset]
            offsets_behind = max((w.offset for w in newer), default=read.offset) - read.offset
            if newer:
                offset_first = min(newer, key=lambda w: (w.return_ns, w.index))
        if history.register_like(read.key):
            applicable, writer_done_ns, writer = history.writer_done_ns(read)
            if applicable:
                later = [
                    w for w in history.ok_writers(read.key, (WRITE, CAS))
                    if w.call_ns > writer_done_ns and w.return_ns < read.call_ns
                ]
                if later:
                    value_first, read_from = min(later, key=lambda w: (w.return_ns, w.index)), writer
        missed, rule = offset_first, "offset" if offset_first is not None else None
        if value_first is not None and (
            offset_first is None or (value_first.return_ns, value_first.index) < (offset_first.return_ns, offset_first.index)
        ):
            missed, rule = value_first, "value"
        figures = ReadStaleness(
            index=read.index,
            mode=read.mode or MODE_LINEARIZABLE,
            node=read.extra.get("node"),
            invoke_ns=read.call_ns,
            staleness_ns=read.call_ns - missed.return_ns if missed is not None else 0,  # type: ignore[operator]
            offsets_behind=offsets_behind,
            bound_ns=bound_ns(read, meta),
            missed_write=missed.index if missed is not None else None,
        )
        measured.append(_Measured(figures, missed, rule, read_from if rule == "value" else None))
    return measured


def stale_reads(history: _History, meta: HistoryMeta, measured: Sequence[_Measured] | None = None) -> list[tuple[Any, dict[str, Any]]]:
    """An ok read is stale if the first write it missed
    (:func:`read_staleness`) was acknowledged more than its bound (0 for
    linearizable reads) before it was invoked: if its staleness exceeds its
    bound. The witness names the read, that write, the rule that found it
    (and, for the value rule, ``read_from``, the writer of the value read),
    the bound, the staleness and, for reads with an offset, the lag in
    offsets. ``measured``: :func:`read_staleness`'s answer, when the caller
    has it already.
    """
    found = []
    for read in measured if measured is not None else read_staleness(history, meta):
        figures = read.figures
        if figures.staleness_ns > figures.bound_ns:
            witness = {
                "read": render_operation(history.by_index[figures.index]),
                "missed_write": render_operation(read.missed),  # type: ignore[arg-type]
                "read_from": render_operation(read.read_from) if read.read_from is not None else None,
                "rule": read.rule,
                "bound_ms": figures.bound_ns / 1_000_000,
                "staleness_ms": figures.staleness_ns / 1_000_000,
                "offsets_behind": figures.offsets_behind,
            }
            found.append((figures.index, compact(witness)))
    return found


def non_monotonic_reads_by_process(history: _History, meta: HistoryMeta) -> list[tuple[Any, dict[str, Any]]]:
    """An ok read with an offset is non-monotonic if an earlier ok read of the
    same process (and key, when offsets are per key) returned a larger offset.
    The witness is the earlier read with the largest (offset, index)."""
    by_session: dict[tuple, list[Operation]] = defaultdict(list)
    for read in history.ok_reads:
        if read.offset is not None:
            by_session[(read.process, read.key if meta.offset_scope == "key" else None)].append(read)
    found = []
    for reads in by_session.values():
        for read in reads:
            earlier = [q for q in reads if (q.call_ns, q.index) < (read.call_ns, read.index)]
            if earlier:
                best = max(earlier, key=lambda q: (q.offset, q.index))
                if best.offset > read.offset:
                    found.append((read.index, {"read": render_operation(read), "earlier_read": render_operation(best)}))
    return found


def non_monotonic_reads_by_broker(history: _History, meta: HistoryMeta) -> list[tuple[Any, dict[str, Any]]]:
    """An ok broker read with an offset is non-monotonic if the same broker
    (``node``) answered an earlier read, completed before this one was
    invoked, with a larger offset (and the same key, when offsets are per
    key). The witness is that earlier read with the largest (offset, index)."""
    by_broker: dict[tuple, list[Operation]] = defaultdict(list)
    for read in history.ok_reads:
        if read.mode == MODE_BROKER and read.offset is not None and read.extra.get("node") is not None:
            by_broker[(read.extra["node"], read.key if meta.offset_scope == "key" else None)].append(read)
    found = []
    for reads in by_broker.values():
        for read in reads:
            earlier = [q for q in reads if q.return_ns < read.call_ns]
            if earlier:
                best = max(earlier, key=lambda q: (q.offset, q.index))
                if best.offset > read.offset:
                    found.append(
                        (read.index, {"read": render_operation(read), "earlier_read": render_operation(best), "node": read.extra["node"]})
                    )
    return found


def unwritten_reads(history: _History) -> dict[str, list[tuple[Any, dict[str, Any]]]]:
    """For ok reads of keys without appends whose value is not the initial one:

    - garbage-read: no write or cas (of any outcome) wrote that value;
    - aborted-read: every write/cas of that value failed (witness: the first);
    - future-read: every write/cas of it that did not fail was invoked after
      the read completed (witness: the first invoked).
    """
    found: dict[str, list] = {"garbage-read": [], "aborted-read": [], "future-read": []}
    for read in history.ok_reads:
        if not history.register_like(read.key):
            continue
        value_text = canonical_json(read.value)
        if value_text == history.initial_text:
            continue
        writers = history.writers_by_value.get((read.key, value_text), [])
        possible = [w for w in writers if w.outcome != FAIL]
        rendered = render_operation(read)
        if not writers:
            found["garbage-read"].append((read.index, {"read": rendered}))
        elif not possible:
            first = min(writers, key=lambda w: w.index)
            found["aborted-read"].append((read.index, {"read": rendered, "failed_write": render_operation(first)}))
        elif all(w.call_ns > read.return_ns for w in possible):
            first = min(possible, key=lambda w: (w.call_ns, w.index))
            found["future-read"].append((read.index, {"read": rendered, "write": render_operation(first)}))
    return found


def final_reads(history: _History) -> dict[str | None, Operation]:
    """The last ok read marked ``final`` of each key, by (invoke, index)."""
    last: dict[str | None, Operation] = {}
    for read in history.ok_reads:
        if read.extra.get("final") is True:
            current = last.get(read.key)
            if current is None or (read.call_ns, read.index) > (current.call_ns, current.index):
                last[read.key] = read
    return last


def lost_writes(history: _History, log_records: Sequence[Mapping[str, Any]]) -> list[tuple[Any, dict[str, Any]]]:
    """An ok write/cas/append is lost, for any of these reasons:

    - final-read-offset: it completed before its key's final read was
      invoked, and its offset is larger than the final read's;
    - final-read-value (keys without appends; write/cas): it completed before
      the final read was invoked, and the final value is the initial value
      nobody wrote, or has exactly one possible writer ``w`` (ok) that
      completed before this write was invoked;
    - final-read-append (keys with appends; append): it completed before the
      final read was invoked, its element is not in the final value, and no
      put that did not fail could have come after it (every such put
      completed before this append was invoked);
    - final-log: it carries a ``write_id`` that no node's log dump holds at
      a committed offset (offset < that node's hwm), and a dump could hold
      it: its offset is at or past the lowest ``log_start`` of the dumps
      (the records below a node's ``log_start`` are in its snapshot), or,
      without an offset, every dump starts at 0.
    """
    finals = final_reads(history)
    committed_write_ids = {r["write_id"] for r in log_records if r.get("write_id") is not None and r["offset"] < r["hwm"]}
    lowest_log_start = min((r.get("log_start") or 0 for r in log_records), default=0)
    found = []
    for op in history.operations:
        kind = history.kind[op.index]
        if op.outcome != OK or kind not in (WRITE, CAS, APPEND):
            continue
        reasons = []
        final = finals.get(op.key)
        if final is not None and op.return_ns < final.call_ns:
            if op.offset is not None and final.offset is not None and op.offset > final.offset:
                reasons.append("final-read-offset")
            if history.register_like(op.key) and kind in (WRITE, CAS):
                applicable, writer_done_ns, _ = history.writer_done_ns(final)
                if applicable and op.call_ns > writer_done_ns:
                    reasons.append("final-read-value")
            if kind is APPEND and isinstance(final.value, str) and isinstance(op.invoke_value, str):
                later_put = any(
                    other.key == op.key
                    and history.kind[other.index] is WRITE
                    and other.outcome != FAIL
                    and (other.return_ns is None or other.return_ns >= op.call_ns)
                    for other in history.operations
                )
                if op.invoke_value not in final.value and not later_put:
                    reasons.append("final-read-append")
        in_dumps = op.offset >= lowest_log_start if op.offset is not None else lowest_log_start == 0
        if log_records and in_dumps and op.extra.get("write_id") is not None and op.extra["write_id"] not in committed_write_ids:
            reasons.append("final-log")
        if reasons:
            uses_final_read = any(reason.startswith("final-read") for reason in reasons)
            witness = {
                "write": render_operation(op),
                "reasons": sorted(reasons),
                "final_read": render_operation(final) if uses_final_read else None,  # type: ignore[arg-type]
            }
            found.append((op.index, compact(witness)))
    return found


def split_brains(node_events: Sequence[Mapping[str, Any]]) -> list[tuple[Any, dict[str, Any]]]:
    """Two different leaders claimed for one epoch. A role event claims
    ``node`` leads ``epoch`` when its role is leader, and claims ``leader``
    leads it when it names one. Witness: each leader's earliest claim, by
    (time, node, role, leader)."""
    claims: dict[int, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for event in node_events:
        if event["kind"] != "role":
            continue
        if event["role"] == "leader":
            claims[event["epoch"]][event["node"]].append(event)
        if event.get("leader") is not None:
            claims[event["epoch"]][event["leader"]].append(event)
    found = []
    for epoch, by_leader in claims.items():
        if len(by_leader) > 1:
            witness_claims = [
                {
                    "leader": leader,
                    "event": render_node_event(
                        min(events, key=lambda e: (e["time"], e["node"], e.get("role") or "", e.get("leader") or ""))
                    ),
                }
                for leader, events in sorted(by_leader.items())
            ]
            found.append((epoch, {"epoch": epoch, "claims": witness_claims}))
    return found


def committed(log_records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Log records below their node's high watermark (Kafka's hwm is the
    offset of the first record not yet committed)."""
    return [record for record in log_records if record["offset"] < record["hwm"]]


def forked_logs(log_records: Sequence[Mapping[str, Any]]) -> list[tuple[Any, dict[str, Any]]]:
    """Two committed records at one offset that differ in epoch or hash.
    Witness: one record (lowest node) per distinct (epoch, record_hash)."""
    by_offset: dict[int, dict[tuple, list]] = defaultdict(lambda: defaultdict(list))
    for record in committed(log_records):
        by_offset[record["offset"]][(record["epoch"], record["record_hash"])].append(record)
    found = []
    for offset, variants in by_offset.items():
        if len(variants) > 1:
            records = [render_log_record(min(rs, key=lambda r: r["node"])) for _, rs in sorted(variants.items())]
            found.append((offset, {"offset": offset, "records": records}))
    return found


def duplicated_writes(log_records: Sequence[Mapping[str, Any]]) -> list[tuple[Any, dict[str, Any]]]:
    """One write id committed at two offsets. Witness: one record (lowest
    node) per offset."""
    by_write: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for record in committed(log_records):
        if record.get("write_id") is not None:
            by_write[record["write_id"]][record["offset"]].append(record)
    found = []
    for write_id, by_offset in by_write.items():
        if len(by_offset) > 1:
            records = [render_log_record(min(rs, key=lambda r: r["node"])) for _, rs in sorted(by_offset.items())]
            found.append(((min(by_offset), write_id), {"write_id": write_id, "records": records}))
    return found


def registrations(node_events: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Broker registrations per broker, one per (broker_epoch, offset) at its
    first report (several controllers may report the same one), in
    (time, offset, broker_epoch) order."""
    first: dict[tuple, Mapping[str, Any]] = {}
    for event in node_events:
        if event["kind"] == "broker_registration":
            identity = (event["broker_id"], event["broker_epoch"], event.get("offset"))
            current = first.get(identity)
            if current is None or (event["time"], event["node"]) < (current["time"], current["node"]):
                first[identity] = event
    by_broker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in first.values():
        rendered = {name: event[name] for name in ("broker_id", "broker_epoch", "offset", "time", "node") if event.get(name) is not None}
        by_broker[event["broker_id"]].append(rendered)
    for regs in by_broker.values():
        regs.sort(key=_registration_order)
    return by_broker


def _registration_order(reg: Mapping[str, Any]) -> tuple:
    return (reg["time"], reg.get("offset", -1), reg["broker_epoch"])


def _registration_rank(reg: Mapping[str, Any]) -> tuple:
    return (reg["broker_epoch"], reg["time"], reg.get("offset", -1))


def broker_epoch_regressions(node_events: Sequence[Mapping[str, Any]]) -> list[tuple[Any, dict[str, Any]]]:
    """A broker registration whose broker epoch is not larger than that of
    every earlier registration of the same broker. Witness: the earlier
    registration with the largest (broker_epoch, time, offset)."""
    found = []
    for broker_id, regs in registrations(node_events).items():
        for position, reg in enumerate(regs):
            if position == 0:
                continue
            best = max(regs[:position], key=_registration_rank)
            if best["broker_epoch"] >= reg["broker_epoch"]:
                order = (broker_id, *_registration_order(reg))
                found.append((order, {"registration": reg, "earlier_registration": best}))
    return found


def stale_broker_epochs(
    history: _History, node_events: Sequence[Mapping[str, Any]]
) -> list[tuple[Any, dict[str, Any]]]:
    """A request acted on although it carried a stale broker epoch: an
    accepted ``broker_request`` event, or an ok history operation carrying
    ``broker_id`` and ``broker_epoch`` (at its invoke time), for which a
    registration of that broker with a larger epoch was reported strictly
    earlier. Witness: that registration with the largest (broker_epoch, time,
    offset)."""
    regs = registrations(node_events)
    requests: list[tuple[str, int, int, int, dict[str, Any]]] = []
    for event in node_events:
        if event["kind"] == "broker_request" and event["accepted"] is True:
            requests.append((event["broker_id"], event["broker_epoch"], event["time"], -1, render_node_event(event)))
    for op in history.operations:
        if op.outcome == OK and op.extra.get("broker_id") is not None and op.extra.get("broker_epoch") is not None:
            requests.append((op.extra["broker_id"], op.extra["broker_epoch"], op.call_ns, op.index, render_operation(op)))
    found = []
    for broker_id, broker_epoch, time_ns, index, rendered in requests:
        newer = [r for r in regs.get(broker_id, []) if r["time"] < time_ns and r["broker_epoch"] > broker_epoch]
        if newer:
            best = max(newer, key=_registration_rank)
            found.append(((time_ns, broker_id, broker_epoch, index), {"request": rendered, "newer_registration": best}))
    return found


def fenced_broker_reads(history: _History, node_events: Sequence[Mapping[str, Any]]) -> list[tuple[Any, dict[str, Any]]]:
    """An ok broker read answered while its broker (``node``) was fenced the
    whole time: the broker reported ``fenced`` strictly before the read was
    invoked, and reported no other state from then until the read completed
    (inclusive). Witness: the latest such fenced report, by (time, node)."""
    states: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for event in node_events:
        if event["kind"] == "broker_state":
            states[event["broker_id"]].append(event)
    found = []
    for read in history.ok_reads:
        node = read.extra.get("node")
        if read.mode != MODE_BROKER or node is None:
            continue
        fenced = [e for e in states.get(node, []) if e["state"] == "fenced" and e["time"] < read.call_ns]
        if not fenced:
            continue
        since = max(fenced, key=lambda e: (e["time"], e["node"]))
        unfenced = any(
            e["state"] != "fenced" and since["time"] <= e["time"] <= read.return_ns for e in states[node]
        )
        if not unfenced:
            found.append((read.index, {"read": render_operation(read), "fenced_since": render_node_event(since)}))
    return found


# ---------------------------------------------------------------------------
# Tier 2, naively: a depth-first search over sets of linearized operations.


def linearizable_naive(operations: Sequence[Operation], model: Model, meter: BudgetMeter | None = None) -> bool:
    """Whether ``operations`` (one key) are linearizable, by trying every
    order: the next operation may be any not yet linearized one invoked no
    later than the earliest return among the ``ok`` operations not yet
    linearized; ``info`` operations need never be linearized. Failed
    configurations (set, state) are remembered. Exponential: small inputs only.

    ``meter``, if given, is charged a step per model step tried and a state
    per configuration entered (the same limits as the fast search's, not
    the same counts).

    Raises :class:`OutOfBudget` when ``meter``'s budget runs out.
    """
    relevant = [op for op in operations if not dropped_by_search(op, model)]
    prepared = [model.prepare(op) for op in relevant]
    must = frozenset(i for i, op in enumerate(relevant) if op.outcome == OK)
    failed: set[tuple[frozenset, Hashable]] = set()

    def extend(done: frozenset, state: Hashable) -> bool:
        pending_ok = must - done
        if not pending_ok:
            return True
        if (done, state) in failed:
            return False
        if meter is not None:
            meter.charge_state()
        earliest_return = min(relevant[i].return_ns for i in pending_ok)  # type: ignore[type-var]
        for i, op in enumerate(relevant):
            if i not in done and op.call_ns <= earliest_return:
                if meter is not None:
                    meter.charge_step()
                legal, new_state = model.step(state, prepared[i])
                if legal and extend(done | {i}, new_state):
                    return True
        failed.add((done, state))
        return False

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(relevant) + 100))
    try:
        return extend(frozenset(), model.initial_state)
    finally:
        sys.setrecursionlimit(limit)


def first_unlinearizable_naive(
    operations: Sequence[Operation], model: Model, meter: BudgetMeter | None = None
) -> Operation | None:
    """The operation whose completion ends the shortest non-linearizable
    prefix (operations open at that point pending), or None if the whole
    history is linearizable. Plain scan over prefixes, charged to ``meter``
    if given.

    Raises :class:`OutOfBudget` when ``meter``'s budget runs out."""
    relevant = [op for op in operations if not dropped_by_search(op, model)]
    returns = sorted((op for op in relevant if op.outcome == OK), key=lambda op: (op.return_ns, op.index))
    for cut in returns:
        prefix = []
        for op in relevant:
            if op.call_ns > cut.return_ns:
                continue
            if op.outcome == OK and (op.return_ns, op.index) > (cut.return_ns, cut.index):
                op = Operation(op.index, op.process, op.f, op.key, "info", op.invoke_value, None, op.call_ns, None, extra=op.extra)
            prefix.append(op)
        if not linearizable_naive(prefix, model, meter):
            return cut
    return None


def tier2_relevant(op: Operation, model: Model) -> bool:
    """Whether the search looks at ``op``: a model operation, not a bounded
    read, not failed, and (for reads and other queries) ok."""
    return is_tier2_candidate(op, model) and not dropped_by_search(op, model)


def linearizability_naive(history: _History, max_witnesses: int, limits: KeyBudget) -> dict[str, Any]:
    """The linearizability entry, key by key with the naive search, each key
    within ``limits`` (out of it: ``unknown``, as the fast search says)."""
    by_key: dict[str | None, list[Operation]] = defaultdict(list)
    for op in history.operations:
        if tier2_relevant(op, history.model):
            by_key[op.key].append(op)
    key_results = []
    # Cheapest keys first, as the Spark job orders them: a deadline then
    # leaves the costly keys unknown, not the ones any search decides at once.
    for key, operations in sorted(by_key.items(), key=lambda item: (len(item[1]), canonical_json(item[0]))):
        meter = BudgetMeter(limits)
        result: dict[str, Any] = {"key": key, "ops": len(operations), "witness": None}
        try:
            if limits.deadline_passed():
                raise OutOfBudget(BUDGET_DEADLINE, deadline_reason())
            if history.model.key_check is not None:  # the model's own check (the counter's bounds)
                found = history.model.key_check(operations, history.model)
                failing, witness = found if found is not None else (None, None)
            else:
                failing = first_unlinearizable_naive(operations, history.model, meter)
                witness = {"op": render_operation(failing), "minimal": True} if failing is not None else None
        except OutOfBudget as exhausted:
            result.update(verdict=UNKNOWN, reason=str(exhausted), budget=exhausted.budget)
        else:
            result.update(verdict=NOT_LINEARIZABLE if failing is not None else LINEARIZABLE, witness=witness)
        result.update(steps=meter.steps, states=meter.states, seconds=meter.elapsed_s())
        key_results.append(result)
    return linearizability_check(key_results, limits, max_witnesses=max_witnesses)


# ---------------------------------------------------------------------------


def input_counts(
    history: _History, node_events: Sequence[Mapping[str, Any]], log_records: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """The counts ``_report.skip_reasons`` decides by."""
    ok_reads = history.ok_reads
    broker_reads = [r for r in ok_reads if r.mode == MODE_BROKER and r.extra.get("node") is not None]
    kinds = Counter(event["kind"] for event in node_events)
    return {
        "ok_reads": len(ok_reads),
        "ok_reads_with_offset": sum(1 for r in ok_reads if r.offset is not None),
        "ok_broker_reads": len(broker_reads),
        "ok_broker_reads_with_offset": sum(1 for r in broker_reads if r.offset is not None),
        "ok_register_reads": sum(1 for r in ok_reads if history.register_like(r.key)),
        "ok_final_reads": sum(1 for r in ok_reads if r.extra.get("final") is True),
        "broker_requests": sum(1 for e in node_events if e["kind"] == "broker_request" and e["accepted"] is True)
        + sum(
            1 for op in history.operations
            if op.outcome == OK and op.extra.get("broker_id") is not None and op.extra.get("broker_epoch") is not None
        ),
        "role_events": kinds["role"],
        "broker_registrations": kinds["broker_registration"],
        "broker_state_events": kinds["broker_state"],
        "log_dump_records": len(log_records),
        "tier2_operations": sum(1 for op in history.operations if tier2_relevant(op, history.model)),
    }


def check_source_reference(
    source: HistorySource,
    *,
    model: str | Model | None = None,
    max_witnesses: int = DEFAULT_MAX_WITNESSES,
    initial_value: Any = MODEL_DEFAULT,
    limits: KeyBudget = KeyBudget(),
) -> HistoryResult:
    """Check one history with the reference checker (``initial_value``: the
    model's initial state, when not its own; ``None`` is Jepsen's nil;
    ``limits``: each key's search budget and the check's deadline, past
    which the checks not yet run are ``unknown``).

    Raises :class:`HistoryFormatError` for malformed input.
    """
    events = read_history_events(source)
    operations, nemesis_events = pair_operations(source, events)
    model_name = resolve_model_name(source, {op.f for op in operations}, model_override_name(model))
    try:
        the_model = get_model(model if isinstance(model, Model) else model_name, source.meta.initial_value if initial_value is MODEL_DEFAULT else initial_value)
    except ValueError as error:  # an initial value this history's model has no state for
        raise HistoryFormatError(f"{source.path}: {error}") from None
    unknown = sorted({op.f for op in operations if the_model.kind_of(op.f) is None})
    if the_model.strict and unknown:
        raise HistoryFormatError(
            f"{source.path}: operations {', '.join(unknown)} are not part of the {model_name} model "
            "(--model picks another: set, counter, mutex, ...; --model metadata accepts metadata operations)"
        )
    history = _History(operations, the_model)
    for op in history.operations:  # values must fit the model, as the Spark job requires
        if history.kind[op.index] is not None and not (history.kind[op.index] in QUERY_KINDS and op.outcome != OK):
            try:
                the_model.prepare(op)
            except HistoryFormatError as error:
                raise HistoryFormatError(f"{source.path}: {error}") from None
    node_events = read_node_events(source.node_event_paths)
    log_records = read_log_dumps(source.log_dump_paths)
    meta = source.meta
    for read in history.ok_reads:
        bound_ns(read, meta)  # raises when a bound the history needs is missing

    counts = input_counts(history, node_events, log_records)
    reasons = skip_reasons(counts)
    unwritten = unwritten_reads(history)
    measured = read_staleness(history, meta)
    windows = fault_windows(event for event in events if event["process"] == "nemesis")
    compute: dict[str, Callable[[], list]] = {
        "stale-read": lambda: stale_reads(history, meta, measured),
        "non-monotonic-read-process": lambda: non_monotonic_reads_by_process(history, meta),
        "non-monotonic-read-broker": lambda: non_monotonic_reads_by_broker(history, meta),
        "garbage-read": lambda: unwritten["garbage-read"],
        "aborted-read": lambda: unwritten["aborted-read"],
        "future-read": lambda: unwritten["future-read"],
        "lost-write": lambda: lost_writes(history, log_records),
        "split-brain": lambda: split_brains(node_events),
        "forked-log": lambda: forked_logs(log_records),
        "duplicated-write": lambda: duplicated_writes(log_records),
        "broker-epoch-regression": lambda: broker_epoch_regressions(node_events),
        "stale-broker-epoch": lambda: stale_broker_epochs(history, node_events),
        "fenced-broker-read": lambda: fenced_broker_reads(history, node_events),
    }
    checks: dict[str, Any] = {}
    for name in CHECK_NAMES:
        if reasons[name] is not None:
            checks[name] = skipped(reasons[name])
        elif name == "linearizability":
            checks[name] = linearizability_naive(history, max_witnesses, limits)
        elif limits.deadline_passed():
            checks[name] = deadline_check("this check ran")
        else:
            checks[name] = tier1_check(compute[name](), None, max_witnesses)
    stats = {
        "events": len(events),
        "nemesis_events": nemesis_events,
        "operations": len(operations),
        "ok": sum(1 for op in operations if op.outcome == OK),
        "fail": sum(1 for op in operations if op.outcome == FAIL),
        "info": sum(1 for op in operations if op.outcome == "info"),
        "keys": len({op.key for op in operations}),
        "node_events": len(node_events),
        **counts,
    }
    return HistoryResult(
        history=source.name, path=str(source.path), model=model_name, checker="reference", stats=stats, checks=checks,
        staleness=summarize((read.figures for read in measured), windows, meta),
    )


def check_reference(
    paths: Sequence[str] | str,
    *,
    model: str | Model | None = None,
    max_witnesses: int = DEFAULT_MAX_WITNESSES,
    initial_value: Any = MODEL_DEFAULT,
    history_format: str | None = None,
    limits: KeyBudget = KeyBudget(),
    independent: bool = False,
) -> list[HistoryResult]:
    """Check histories (files, directories, campaign directories; JSON
    lines, Parquet or Jepsen EDN) with the pure-Python reference checker.
    Meant for little histories: tier 1 is quadratic and tier 2 exponential
    (within ``limits``, as the Spark job's keys: see :class:`KeyBudget`).
    ``initial_value``: as for :func:`check_source_reference`;
    ``history_format``: the format of the files named in ``paths`` whatever
    their names say; ``independent``: values are Jepsen's independent
    ``[key value]`` tuples, each key its own object (as a history's meta can
    say; see :func:`discover_histories`).

    Raises :class:`HistoryFormatError` for malformed input, and
    ``ValueError`` for an unknown model or an initial value that does not
    fit it.
    """
    if isinstance(paths, str):
        paths = [paths]
    if model is not None:
        get_model(model, initial_value)
    return [
        check_source_reference(
            source, model=model, max_witnesses=max_witnesses, initial_value=initial_value, limits=limits
        )
        for source in discover_histories(paths, history_format=history_format, independent=independent)
    ]


def stale_reads_of_events(
    events: Sequence[Mapping[str, Any]], meta: HistoryMeta, *, model: str | None = None, name: str = "history"
) -> list[dict[str, Any]]:
    """The stale-read check (:func:`stale_reads`) on a history held in
    memory: ``events`` as a history file's lines (docs/checker.md; they are
    copied, not changed), ``meta`` as its meta file. The witnesses, one per
    stale read in the order of the reads' invokes, as ``check_reference``
    lists them (``read``, ``missed_write``, ``rule``, ``bound_ms``, and
    ``read_from`` for the value rule). For a live view of a history that
    keeps growing (the browser playground), where reading a file per look
    would be silly.

    Raises :class:`HistoryFormatError` for a malformed event or pairing, or
    for a leader-local or broker read whose bound ``meta`` does not give.
    """
    checked = history_events((f"{name}: event {position}", dict(event)) for position, event in enumerate(events))
    source = HistorySource(name=name, path=Path(name), file_format="jsonl", meta=meta)
    operations, _ = pair_operations(source, checked)
    the_model = get_model(resolve_model_name(source, {op.f for op in operations}, model))
    return [witness for _, witness in stale_reads(_History(operations, the_model), meta)]


def search_history(
    path: str | Path,
    *,
    model: str | Model,
    budget_steps: int = DEFAULT_BUDGET_STEPS,
) -> dict[str | None, KeyVerdict]:
    """The linearizability search alone, in this process, on one history
    file: each key's :class:`KeyVerdict` (the same search the Spark job runs
    per key, without its other checks or a Spark session). For quick
    feedback on small runs, such as a test's own campaign.

    Raises :class:`HistoryFormatError` for malformed input, ``ValueError``
    for an unknown model or a non-positive budget.
    """
    source = discover_histories([str(path)])[0]
    operations, _ = pair_operations(source, read_history_events(source))
    the_model = get_model(model)
    by_key: dict[str | None, list[Operation]] = defaultdict(list)
    for op in operations:
        if is_tier2_candidate(op, the_model):
            by_key[op.key].append(op)
    return {key: check_operations(ops, the_model, budget_steps=budget_steps) for key, ops in by_key.items()}
