"""Hand-written histories, one per rule and edge of each check, run through
both checkers: the Spark job (all cases in one run) and the reference.

Each case names the anomalies it must produce, with the operations their
witnesses must name; every other check must pass (or have nothing to look
at)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from _checker_helpers import MS, Case, comparable, write_campaign
from jepsen_like.checker import check, check_reference

pytestmark = pytest.mark.spark

META_BOUNDS = {"fetch_timeout_ms": 10, "check_quorum_factor": 1.5, "staleness_bound_ms": 20}  # 15 ms and 20 ms


@dataclass(frozen=True)
class Op:
    """In an expected witness: the operation the case named so."""

    name: str


@dataclass
class Expected:
    valid: bool
    anomalies: dict[str, list[dict[str, Any]]]  # check -> expected witnesses (partial)
    case: Case | None = None
    # The results' staleness section: each listed group (partial) must be there.
    staleness: dict[str, list[dict[str, Any]]] | None = None


def _stale_offset(directory: Path) -> Expected:
    case = Case()
    case.op("w1", 1, "write", "x", "a", start_ms=0, end_ms=1, offset=1)
    case.op("w2", 2, "write", "x", "b", start_ms=2, end_ms=3, offset=2)
    case.op("r", 3, "read", "x", None, start_ms=4, end_ms=5, result="a", offset=1)
    # Faults in the same history are ignored by every check.
    case.raw({"process": "nemesis", "type": "info", "f": "start-partition", "key": None, "value": ["n1"], "time": 2 * MS})
    case.raw({"process": "nemesis", "type": "info", "f": "stop-partition", "key": None, "value": None, "time": 6 * MS})
    write_campaign(directory, case)
    return Expected(False, {
        "stale-read": [{"read": Op("r"), "missed_write": Op("w2"), "rule": "offset", "bound_ms": 0.0}],
        "linearizability": [{"key": "x", "op": Op("r")}],
    }, case)


def _equal_times_are_concurrent(directory: Path) -> Expected:
    case = Case()
    case.op("w1", 1, "write", "x", "a", start_ms=0, end_ms=1, offset=1)
    case.op("w2", 2, "write", "x", "b", start_ms=2, end_ms=4, offset=2)
    # Invoked at the instant w2 was acknowledged: concurrent, may precede it.
    case.op("r", 3, "read", "x", None, start_ms=4, end_ms=5, result="a", offset=1)
    write_campaign(directory, case)
    return Expected(True, {}, case)


def _stale_by_value(directory: Path) -> Expected:
    case = Case()
    case.op("w1", 1, "write", "x", 1, start_ms=0, end_ms=1)
    case.op("w2", 2, "write", "x", 2, start_ms=2, end_ms=3)
    case.op("r", 3, "read", "x", None, start_ms=4, end_ms=5, result=1)
    case.op("w3", 5, "write", "y", 1, start_ms=0, end_ms=1)
    case.op("r0", 4, "read", "y", None, start_ms=2, end_ms=3, result=None)  # the initial value, after w3
    write_campaign(directory, case)
    return Expected(False, {
        "stale-read": [
            {"read": Op("r"), "missed_write": Op("w2"), "read_from": Op("w1"), "rule": "value"},
            {"read": Op("r0"), "missed_write": Op("w3"), "rule": "value"},
        ],
        "linearizability": [{"key": "x", "op": Op("r")}, {"key": "y", "op": Op("r0")}],
    }, case)


def _info_write_explains_read(directory: Path) -> Expected:
    case = Case()
    # An info write may take effect any time after its invoke: here, after w2.
    case.op("w1", 1, "write", "x", 1, start_ms=0, end_ms=1, outcome="info", error="timeout")
    case.op("w2", 2, "write", "x", 2, start_ms=2, end_ms=3)
    case.op("r", 3, "read", "x", None, start_ms=4, end_ms=5, result=1)
    # An invoke with no completion at all is info too.
    case.op("w3", 4, "write", "y", 7, start_ms=0, end_ms=None)
    case.op("r2", 5, "read", "y", None, start_ms=10, end_ms=11, result=7)
    write_campaign(directory, case)
    return Expected(True, {}, case)


def _leader_local_bound(directory: Path) -> Expected:
    case = Case()
    case.op("w1", 1, "write", "x", "a", start_ms=0, end_ms=1, offset=1)
    case.op("w2", 2, "write", "x", "b", start_ms=2, end_ms=3, offset=2)
    leader_local = {"mode": "leader-local"}
    # Acknowledged 14 ms before: within the 15 ms bound.
    case.op("inside", 3, "read", "x", None, start_ms=17, end_ms=18, result="a", offset=1, invoke_extra=leader_local)
    # Exactly 15 ms: still not "more than" the bound.
    case.op("edge", 4, "read", "x", None, start_ms=18, end_ms=19, result="a", offset=1, invoke_extra=leader_local)
    case.op("outside", 5, "read", "x", None, start_ms=19, end_ms=20, result="a", offset=1, invoke_extra=leader_local)
    write_campaign(directory, case, meta=META_BOUNDS)
    return Expected(False, {
        "stale-read": [{"read": Op("outside"), "missed_write": Op("w2"), "rule": "offset", "bound_ms": 15.0}],
    }, case)


def _staleness_figures(directory: Path) -> Expected:
    """Known staleness figures: per read, the first write it missed (the
    earliest acknowledged before its invoke that it does not reflect), per
    mode against its bound (leader-local 15 ms, broker 20 ms), per node and
    per fault window."""
    case = Case()
    case.op("w1", 1, "write", "x", "a", start_ms=0, end_ms=1, offset=1)
    case.op("w2", 2, "write", "x", "b", start_ms=2, end_ms=3, offset=2)
    case.op("w3", 3, "write", "x", "c", start_ms=4, end_ms=6, offset=3)
    fault = {"fault_id": 7, "nodes": ["n2"]}
    case.raw({"process": "nemesis", "type": "info", "f": "partition", "key": None,
              "value": {"phase": "start", "fault": fault}, "time": 5 * MS})
    case.raw({"process": "nemesis", "type": "info", "f": "partition", "key": None,
              "value": {"phase": "end", "fault": fault}, "time": 30 * MS})
    linearizable, leader_local, broker = {"mode": "linearizable"}, {"mode": "leader-local"}, {"mode": "broker"}
    # Invoked at the instant w3 was acknowledged: concurrent with it, missed nothing.
    case.op("r_conc", 10, "read", "x", None, start_ms=6, end_ms=7, result="b", offset=2, node="n1", invoke_extra=linearizable)
    case.op("r_lin", 11, "read", "x", None, start_ms=7, end_ms=8, result="c", offset=3, node="n1", invoke_extra=linearizable)
    # Missed w3 (acknowledged at 6): 6 ms behind, within 15 ms: counted, not an anomaly.
    case.op("r_ll2", 12, "read", "x", None, start_ms=12, end_ms=13, result="b", offset=2, node="n2", invoke_extra=leader_local)
    # Missed w2 (at 3) and w3: the first is w2, 17 ms behind, beyond 15 ms; 2 offsets behind.
    case.op("r_ll", 13, "read", "x", None, start_ms=20, end_ms=21, result="a", offset=1, node="n2", invoke_extra=leader_local)
    # Missed w3: 34 ms behind, beyond the broker's 20 ms.
    case.op("r_b", 14, "read", "x", None, start_ms=40, end_ms=41, result="b", offset=2, node="b1", invoke_extra=broker)
    case.op("r_b2", 15, "read", "x", None, start_ms=43, end_ms=44, result="c", offset=3, node="b1", invoke_extra=broker)
    # No offsets on y: the value rule finds the missed write wy2 (at 3), 47 ms behind.
    case.op("wy1", 4, "write", "y", 1, start_ms=0, end_ms=1)
    case.op("wy2", 5, "write", "y", 2, start_ms=2, end_ms=3)
    case.op("r_val", 16, "read", "y", None, start_ms=50, end_ms=51, result=1, node="n1", invoke_extra=linearizable)
    write_campaign(directory, case, meta=META_BOUNDS)
    return Expected(False, {
        "stale-read": [
            {"read": Op("r_ll"), "missed_write": Op("w2"), "rule": "offset", "bound_ms": 15.0, "staleness_ms": 17.0, "offsets_behind": 2},
            {"read": Op("r_b"), "missed_write": Op("w3"), "rule": "offset", "bound_ms": 20.0, "staleness_ms": 34.0, "offsets_behind": 1},
            {"read": Op("r_val"), "missed_write": Op("wy2"), "read_from": Op("wy1"), "rule": "value", "bound_ms": 0.0, "staleness_ms": 47.0},
        ],
        "linearizability": [{"key": "y", "op": Op("r_val")}],
    }, case, staleness={
        "by_mode": [
            {"mode": "linearizable", "reads": 3, "missed_writes": 1, "beyond_bound": 1, "max_ms": 47.0, "p50_ms": 0.0,
             "p90_ms": 47.0, "max_offsets_behind": 0, "histogram": [2, 0, 0, 1, 0, 0, 0],
             "worst_read": Op("r_val"), "worst_missed_write": Op("wy2")},
            {"mode": "leader-local", "reads": 2, "missed_writes": 2, "beyond_bound": 1, "max_ms": 17.0, "p50_ms": 6.0,
             "p99_ms": 17.0, "max_offsets_behind": 2, "worst_read": Op("r_ll"), "worst_missed_write": Op("w2")},
            {"mode": "broker", "reads": 2, "missed_writes": 1, "beyond_bound": 1, "max_ms": 34.0, "p50_ms": 0.0,
             "max_offsets_behind": 1, "worst_read": Op("r_b"), "worst_missed_write": Op("w3")},
        ],
        "by_node": [
            {"mode": "linearizable", "node": "n1", "reads": 3, "max_ms": 47.0},
            {"mode": "leader-local", "node": "n2", "reads": 2, "max_ms": 17.0},
            {"mode": "broker", "node": "b1", "reads": 2, "max_ms": 34.0},
        ],
        "by_window": [
            {"window": "partition #7", "start_ns": 5 * MS, "end_ns": 30 * MS, "mode": "linearizable", "reads": 2, "max_ms": 0.0,
             "worst_read": None},
            {"window": "partition #7", "mode": "leader-local", "reads": 2, "beyond_bound": 1, "max_ms": 17.0},
            {"window": "no fault", "start_ns": None, "mode": "linearizable", "reads": 1, "max_ms": 47.0},
            {"window": "no fault", "mode": "broker", "reads": 2, "max_ms": 34.0},
        ],
    })


def _broker_monotonic(directory: Path) -> Expected:
    case = Case()
    case.op("w1", 1, "write", "x", "a", start_ms=0, end_ms=1, offset=1)
    case.op("w2", 2, "write", "x", "b", start_ms=2, end_ms=3, offset=2)
    broker = {"mode": "broker"}
    case.op("b1", 3, "read", "x", None, start_ms=4, end_ms=5, result="b", offset=2, node="b1", invoke_extra=broker)
    # Another client, same broker, later, older: broker went backwards.
    case.op("b2", 4, "read", "x", None, start_ms=6, end_ms=7, result="a", offset=1, node="b1", invoke_extra=broker)
    # The first client, another broker, older: the client went backwards.
    case.op("b3", 3, "read", "x", None, start_ms=8, end_ms=9, result="a", offset=1, node="b2", invoke_extra=broker)
    # Concurrent with b1 on the same broker: not "after" it.
    case.op("b4", 5, "read", "x", None, start_ms=4.5, end_ms=5.5, result="a", offset=1, node="b1", invoke_extra=broker)
    write_campaign(directory, case, meta=META_BOUNDS)
    return Expected(False, {
        "non-monotonic-read-broker": [{"read": Op("b2"), "earlier_read": Op("b1"), "node": "b1"}],
        "non-monotonic-read-process": [{"read": Op("b3"), "earlier_read": Op("b1")}],
    }, case)


def _unwritten_values(directory: Path) -> Expected:
    case = Case()
    case.op("garbage", 1, "read", "g", None, start_ms=0, end_ms=1, result=7)
    case.op("failed", 2, "write", "h", 5, start_ms=0, end_ms=1, outcome="fail", error="not-leader")
    case.op("aborted", 3, "read", "h", None, start_ms=2, end_ms=3, result=5)
    case.op("future", 4, "read", "i", None, start_ms=0, end_ms=1, result=9)
    case.op("later", 5, "write", "i", 9, start_ms=2, end_ms=3)
    # A cas that fails did not happen; one that succeeds wrote its new value.
    case.op("cas_ok", 6, "cas", "j", [None, 4], start_ms=0, end_ms=1)
    case.op("cas_fail", 7, "cas", "j", [1, 8], start_ms=2, end_ms=3, outcome="fail")
    case.op("reads_cas", 8, "read", "j", None, start_ms=4, end_ms=5, result=4)
    write_campaign(directory, case)
    return Expected(False, {
        "garbage-read": [{"read": Op("garbage")}],
        "aborted-read": [{"read": Op("aborted"), "failed_write": Op("failed")}],
        "future-read": [{"read": Op("future"), "write": Op("later")}],
        "linearizability": [{"key": "g", "op": Op("garbage")}, {"key": "h", "op": Op("aborted")}, {"key": "i", "op": Op("future")}],
    }, case)


def _lost_by_final_read(directory: Path) -> Expected:
    case = Case()
    case.op("w1", 1, "write", "x", 1, start_ms=0, end_ms=1, offset=1, invoke_extra={"write_id": "w1"})
    case.op("w2", 2, "write", "x", 2, start_ms=2, end_ms=3, offset=2, invoke_extra={"write_id": "w2"})
    case.op("final", 3, "read", "x", None, start_ms=10, end_ms=11, result=1, offset=1, invoke_extra={"final": True})
    dumps = [
        {"node": node, "offset": offset, "epoch": 1, "record_hash": f"h{offset}", "write_id": write_id, "hwm": 3}
        for node in ("n1", "n2")
        for offset, write_id in ((0, None), (1, "w1"), (2, "w2"))
    ]
    write_campaign(directory, case, log_dumps=dumps)
    return Expected(False, {
        "lost-write": [{"write": Op("w2"), "reasons": ["final-read-offset", "final-read-value"], "final_read": Op("final")}],
        "stale-read": [{"read": Op("final"), "missed_write": Op("w2"), "rule": "offset"}],
        "linearizability": [{"key": "x", "op": Op("final")}],
    }, case)


def _lost_append_kv(directory: Path) -> Expected:
    case = Case()
    case.op("a1", 1, "append", "k", "x", start_ms=0, end_ms=1)
    case.op("a2", 2, "append", "k", "y", start_ms=2, end_ms=3)
    case.op("final", 3, "get", "k", None, start_ms=10, end_ms=11, result="x", invoke_extra={"final": True})
    # A put that may come after the append explains its absence.
    case.op("a3", 4, "append", "k2", "z", start_ms=0, end_ms=1)
    case.op("put", 5, "put", "k2", "q", start_ms=0.5, end_ms=5)
    case.op("final2", 3, "get", "k2", None, start_ms=12, end_ms=13, result="q", invoke_extra={"final": True})
    write_campaign(directory, case)
    return Expected(False, {
        "lost-write": [{"write": Op("a2"), "reasons": ["final-read-append"], "final_read": Op("final")}],
        "linearizability": [{"key": "k", "op": Op("final")}],
    }, case)


def _lost_from_log(directory: Path) -> Expected:
    case = Case()
    case.op("w1", 1, "write", "x", 1, start_ms=0, end_ms=1, offset=1, invoke_extra={"write_id": "w1"})
    case.op("w2", 2, "write", "x", 2, start_ms=2, end_ms=3, offset=2, invoke_extra={"write_id": "w2"})
    dumps = [
        {"node": "n1", "offset": 0, "epoch": 1, "record_hash": "h0", "hwm": 2},
        {"node": "n1", "offset": 1, "epoch": 1, "record_hash": "h1", "write_id": "w1", "hwm": 2},
        # Divergent records above the high watermark are legal (not committed)...
        {"node": "n1", "offset": 2, "epoch": 2, "record_hash": "other", "write_id": "w9", "hwm": 2},
        {"node": "n2", "offset": 0, "epoch": 1, "record_hash": "h0", "hwm": 2},
        {"node": "n2", "offset": 1, "epoch": 1, "record_hash": "h1", "write_id": "w1", "hwm": 2},
        # ...and do not count as holding the write.
        {"node": "n2", "offset": 2, "epoch": 1, "record_hash": "h2", "write_id": "w2", "hwm": 2},
    ]
    write_campaign(directory, case, log_dumps=dumps)
    return Expected(False, {"lost-write": [{"write": Op("w2"), "reasons": ["final-log"]}]}, case)


def _forked_and_duplicated(directory: Path) -> Expected:
    case = Case()
    case.op("w1", 1, "write", "x", 1, start_ms=0, end_ms=1, invoke_extra={"write_id": "w1"})
    case.op("w2", 2, "write", "x", 2, start_ms=2, end_ms=3, invoke_extra={"write_id": "w2"})
    base = [(0, "h0", None), (1, "hA", "w1")]
    dumps = [
        {"node": node, "offset": offset, "epoch": 1, "record_hash": record_hash, "write_id": write_id, "hwm": hwm}
        for node, hwm, extra in (
            ("n1", 3, [(2, "hB", "w2")]),
            ("n2", 3, [(2, "hC", "w3")]),
            ("n3", 4, [(2, "hB", "w2"), (3, "hA", "w1")]),
        )
        for offset, record_hash, write_id in base + extra
    ]
    write_campaign(directory, case, log_dumps=dumps)
    return Expected(False, {
        "forked-log": [{"offset": 2, "records": [
            {"node": "n1", "offset": 2, "epoch": 1, "record_hash": "hB", "write_id": "w2", "hwm": 3},
            {"node": "n2", "offset": 2, "epoch": 1, "record_hash": "hC", "write_id": "w3", "hwm": 3},
        ]}],
        "duplicated-write": [{"write_id": "w1", "records": [
            {"node": "n1", "offset": 1, "epoch": 1, "record_hash": "hA", "write_id": "w1", "hwm": 3},
            {"node": "n3", "offset": 3, "epoch": 1, "record_hash": "hA", "write_id": "w1", "hwm": 4},
        ]}],
    }, case)


def _split_brain(directory: Path) -> Expected:
    case = Case()
    case.op("w", 1, "write", "x", 1, start_ms=0, end_ms=1)
    role = lambda at_ms, node, epoch, role_name, leader: {  # noqa: E731
        "time": at_ms * MS, "node": node, "kind": "role", "epoch": epoch, "role": role_name, "leader": leader,
    }
    events = [
        role(0, "n1", 1, "leader", "n1"),
        role(1, "n2", 1, "follower", "n1"),
        role(5, "n2", 2, "leader", "n2"),
        role(6, "n3", 2, "follower", "n3"),  # n3 believes n3 leads epoch 2
        # An old leader that still believes it leads an older epoch: fine.
        role(7, "n1", 1, "leader", "n1"),
        {"time": 8 * MS, "node": "n1", "kind": "snapshot", "offset": 3},  # a kind the checker does not use
    ]
    write_campaign(directory, case, node_events=events)
    return Expected(False, {"split-brain": [{"epoch": 2, "claims": [
        {"leader": "n2", "event": {"time": 5 * MS, "node": "n2", "kind": "role", "epoch": 2, "role": "leader", "leader": "n2"}},
        {"leader": "n3", "event": {"time": 6 * MS, "node": "n3", "kind": "role", "epoch": 2, "role": "follower", "leader": "n3"}},
    ]}]}, case)


def _broker_epochs(directory: Path) -> Expected:
    case = Case()
    case.op("heartbeat", 1, "heartbeat", None, None, start_ms=8, end_ms=8.5,
            invoke_extra={"broker_id": "b1", "broker_epoch": 10})
    case.op("current", 2, "heartbeat", None, None, start_ms=9, end_ms=9.5,
            invoke_extra={"broker_id": "b1", "broker_epoch": 20})
    registration = lambda at_ms, node, broker, epoch, offset=None: {  # noqa: E731
        "time": at_ms * MS, "node": node, "kind": "broker_registration", "broker_id": broker,
        "broker_epoch": epoch, **({"offset": offset} if offset is not None else {}),
    }
    request = lambda at_ms, broker, epoch, accepted: {  # noqa: E731
        "time": at_ms * MS, "node": "n1", "kind": "broker_request", "broker_id": broker, "broker_epoch": epoch,
        "accepted": accepted, "request": "heartbeat",
    }
    events = [
        registration(1, "n1", "b1", 10), registration(2, "n2", "b1", 10),  # one registration, reported twice
        registration(5, "n1", "b1", 20),
        registration(9, "n1", "b1", 15),  # smaller than 20
        registration(1, "n1", "b2", 7, offset=7),
        registration(3, "n1", "b2", 7, offset=30),  # a second registration with the same epoch
        request(5, "b1", 10, True),  # at the same instant as the newer registration: concurrent
        request(6, "b1", 10, True),  # after it: stale, and accepted
        request(7, "b1", 10, False),  # stale but rejected: fine
    ]
    write_campaign(directory, case, meta={"model": "metadata"}, node_events=events)
    return Expected(False, {
        "broker-epoch-regression": [
            {"registration": {"broker_id": "b1", "broker_epoch": 15, "time": 9 * MS, "node": "n1"},
             "earlier_registration": {"broker_id": "b1", "broker_epoch": 20, "time": 5 * MS, "node": "n1"}},
            {"registration": {"broker_id": "b2", "broker_epoch": 7, "offset": 30, "time": 3 * MS, "node": "n1"},
             "earlier_registration": {"broker_id": "b2", "broker_epoch": 7, "offset": 7, "time": 1 * MS, "node": "n1"}},
        ],
        "stale-broker-epoch": [
            {"request": request(6, "b1", 10, True),
             "newer_registration": {"broker_id": "b1", "broker_epoch": 20, "time": 5 * MS, "node": "n1"}},
            {"request": Op("heartbeat"),
             "newer_registration": {"broker_id": "b1", "broker_epoch": 20, "time": 5 * MS, "node": "n1"}},
        ],
    }, case)


def _fenced_reads(directory: Path) -> Expected:
    case = Case()
    broker = {"mode": "broker"}
    case.op("while_fenced", 1, "read", "x", None, start_ms=12, end_ms=13, result=None, node="b1", invoke_extra=broker)
    case.op("unfenced_during", 2, "read", "x", None, start_ms=15, end_ms=21, result=None, node="b1", invoke_extra=broker)
    case.op("before", 3, "read", "x", None, start_ms=9, end_ms=11, result=None, node="b1", invoke_extra=broker)
    case.op("same_instant", 4, "read", "x", None, start_ms=10, end_ms=11, result=None, node="b1", invoke_extra=broker)
    state = lambda at_ms, name: {"time": at_ms * MS, "node": "b1", "kind": "broker_state", "broker_id": "b1", "state": name}  # noqa: E731
    write_campaign(directory, case, meta=META_BOUNDS, node_events=[state(0, "online"), state(10, "fenced"), state(20, "online")])
    return Expected(False, {"fenced-broker-read": [{"read": Op("while_fenced"), "fenced_since": state(10, "fenced")}]}, case)


CASES: dict[str, Callable[[Path], Expected]] = {
    "stale_offset": _stale_offset,
    "equal_times_are_concurrent": _equal_times_are_concurrent,
    "stale_by_value": _stale_by_value,
    "info_write_explains_read": _info_write_explains_read,
    "leader_local_bound": _leader_local_bound,
    "broker_monotonic": _broker_monotonic,
    "staleness_figures": _staleness_figures,
    "unwritten_values": _unwritten_values,
    "lost_by_final_read": _lost_by_final_read,
    "lost_append_kv": _lost_append_kv,
    "lost_from_log": _lost_from_log,
    "forked_and_duplicated": _forked_and_duplicated,
    "split_brain": _split_brain,
    "broker_epochs": _broker_epochs,
    "fenced_reads": _fenced_reads,
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> tuple[Path, dict[str, Expected]]:
    root = tmp_path_factory.mktemp("semantics")
    expected = {name: build(root / name) for name, build in CASES.items()}
    return root, expected


@pytest.fixture(scope="module")
def spark_results(spark, cases):
    root, _ = cases
    return {result.history: result for result in check([str(root)], spark=spark, all_keys=True, max_witnesses=50)}


def _matches(actual: Any, wanted: Any, case: Case) -> bool:
    if isinstance(wanted, Op):
        if isinstance(actual, int):  # an invoke index (staleness figures)
            return actual == case.index[wanted.name]
        return isinstance(actual, dict) and actual.get("index") == case.index[wanted.name]
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(_matches(actual.get(name), value, case) for name, value in wanted.items())
    return actual == wanted


def _assert_expected(result, expected: Expected) -> None:
    case = expected.case
    assert case is not None
    data = result.to_dict()
    for name, check_result in data["checks"].items():
        wanted = expected.anomalies.get(name, [])
        if not wanted:
            assert check_result["status"] in ("pass", "skipped"), (name, check_result)
            continue
        assert check_result["status"] == "fail", (name, check_result)
        assert check_result["count"] == len(wanted), (name, check_result)
        for witness in wanted:
            assert any(_matches(actual, witness, case) for actual in check_result["witnesses"]), (name, witness, check_result["witnesses"])
    assert data["valid"] is expected.valid
    for section, groups in (expected.staleness or {}).items():
        assert len(data["staleness"][section]) == len(groups), (section, data["staleness"][section])
        for actual, wanted in zip(data["staleness"][section], groups):
            assert _matches(actual, wanted, case), (section, wanted, actual)


@pytest.mark.parametrize("name", list(CASES))
def test_spark_job_finds_exactly_the_case_anomalies(name, cases, spark_results):
    _, expected = cases
    _assert_expected(spark_results[name], expected[name])


@pytest.mark.parametrize("name", list(CASES))
def test_reference_finds_exactly_the_case_anomalies_and_agrees(name, cases, spark_results):
    root, expected = cases
    reference = check_reference([str(root / name)], max_witnesses=50)[0]
    _assert_expected(reference, expected[name])
    assert comparable(reference.to_dict()) == comparable(spark_results[name].to_dict())
