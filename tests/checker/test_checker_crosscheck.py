"""Generated little histories: the Spark job and the reference checker must
report exactly the same thing (every check, count, witness and statistic).

Each example is a batch of histories checked in one Spark run: a Spark run
costs seconds, a history milliseconds."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _checker_helpers import MS, comparable
from jepsen_like.checker import check, check_reference

pytestmark = pytest.mark.spark

HISTORIES_PER_BATCH = 24
# The quick profile (make test) runs 3 batches; the long one (make soak) more.
BATCHES = max(3, settings.default.max_examples // 20)

NODES = ["n1", "n2"]
BROKERS = ["b1", "b2"]


@st.composite
def operation_events(draw, model: str, process: int, key_names: list[str], clock_ms: int, offsets: bool, brokers_only: bool):
    """One operation's invoke and (usually) its completion. With
    ``brokers_only`` every read is a broker read with an offset."""
    key = draw(st.sampled_from(key_names))
    if model == "kv":
        f = draw(st.sampled_from(["get", "put", "append"]))
        value = None if f == "get" else draw(st.sampled_from(["a", "b", "c"]))
        result = draw(st.sampled_from(["", "a", "b", "ab", "ba", "c"])) if f == "get" else value
        is_read = f == "get"
    else:
        f = draw(st.sampled_from(["read", "read", "write", "write", "cas"]))
        value = {"read": None, "write": draw(st.integers(0, 3)),
                 "cas": [draw(st.sampled_from([None, 0, 1, 2])), draw(st.integers(0, 3))]}[f]
        result = draw(st.sampled_from([None, 0, 1, 2, 3])) if f == "read" else value
        is_read = f == "read"
    outcome = draw(st.sampled_from(["ok", "ok", "ok", "fail", "info"]))
    start = clock_ms + draw(st.integers(0, 3))
    end = start + draw(st.integers(0, 6))
    invoke = {"process": process, "type": "invoke", "f": f, "key": key, "value": value, "time": start * MS}
    if brokers_only:
        mode = "broker" if is_read else None
    else:
        mode = draw(st.sampled_from([None, "linearizable", "leader-local", "broker"])) if is_read else None
    if mode is not None:
        invoke["mode"] = mode
    if is_read and draw(st.integers(0, 4)) == 0:
        invoke["final"] = True
    if not is_read and draw(st.booleans()):
        invoke["write_id"] = f"w{draw(st.integers(0, 6))}"
    if draw(st.integers(0, 5)) == 0:
        invoke["broker_id"] = draw(st.sampled_from(BROKERS))
        invoke["broker_epoch"] = draw(st.integers(1, 4))
    events = [invoke]
    if outcome == "info" and draw(st.booleans()):
        return events, end, outcome  # no completion at all
    completion = {"process": process, "type": outcome, "f": f, "key": key, "time": end * MS,
                  "value": result if outcome == "ok" else (value if not is_read else None)}
    if outcome == "ok":
        if (brokers_only and is_read) or (offsets and draw(st.integers(0, 3)) > 0):
            completion["offset"] = draw(st.integers(0, 6))
        if invoke.get("mode") == "broker" or draw(st.booleans()):
            completion["node"] = draw(st.sampled_from(BROKERS if invoke.get("mode") == "broker" else NODES))
    events.append(completion)
    return events, end, outcome


@st.composite
def histories(draw):
    """A little campaign: history events, meta, maybe node events and log dumps."""
    model = draw(st.sampled_from(["register", "register", "kv"]))
    key_names = draw(st.sampled_from([["x"], ["x", "y"]]))
    offsets = draw(st.booleans())
    brokers_only = draw(st.integers(0, 3)) == 0
    events = []
    process_count = draw(st.integers(1, 4))
    for process in range(process_count):
        clock = draw(st.integers(0, 4))
        for _ in range(draw(st.integers(0, 5))):
            op_events, end, outcome = draw(operation_events(model, process, key_names, clock, offsets, brokers_only))
            events.extend(op_events)
            if outcome == "info":
                break  # never reused after an info
            clock = end + draw(st.integers(0, 2))
    if draw(st.booleans()):
        events.append({"process": "nemesis", "type": "info", "f": "partition", "key": None, "value": None,
                       "time": draw(st.integers(0, 20)) * MS})
    # Fault windows for the staleness figures: starts and ends, some never
    # ended, some ended without a start, some faults without an id.
    for fault_id in range(draw(st.integers(0, 3))):
        f = draw(st.sampled_from(["partition", "kill"]))
        fault = {"fault_id": fault_id} if draw(st.booleans()) else {"node": draw(st.sampled_from(NODES))}
        for phase in draw(st.sampled_from([["start"], ["end"], ["start", "end"], ["start", "end"]])):
            events.append({"process": "nemesis", "type": "info", "f": f, "key": None,
                           "value": {"phase": phase, "fault": fault}, "time": draw(st.integers(0, 24)) * MS})
    meta = {"fetch_timeout_ms": draw(st.sampled_from([1, 2, 4])), "staleness_bound_ms": draw(st.sampled_from([1, 3])),
            "offset_scope": draw(st.sampled_from(["log", "key"]))}
    if any("broker_id" in event for event in events):
        meta["model"] = "metadata" if model == "register" else "kv"
    node_events = []
    if draw(st.booleans()):
        for _ in range(draw(st.integers(1, 8))):
            time_ns = draw(st.integers(0, 20)) * MS
            kind = draw(st.sampled_from(["role", "broker_registration", "broker_state", "broker_state", "broker_request"]))
            record = {"time": time_ns, "node": draw(st.sampled_from(NODES + BROKERS)), "kind": kind}
            if kind == "role":
                record.update(epoch=draw(st.integers(1, 3)), role=draw(st.sampled_from(["leader", "follower"])),
                              leader=draw(st.sampled_from([None, *NODES])))
            elif kind == "broker_registration":
                record.update(broker_id=draw(st.sampled_from(BROKERS)), broker_epoch=draw(st.integers(1, 4)))
                if draw(st.booleans()):
                    record["offset"] = draw(st.integers(0, 5))
            elif kind == "broker_state":
                record.update(broker_id=draw(st.sampled_from(BROKERS)), state=draw(st.sampled_from(["online", "fenced"])))
            else:
                record.update(broker_id=draw(st.sampled_from(BROKERS)), broker_epoch=draw(st.integers(1, 4)),
                              accepted=draw(st.booleans()))
            node_events.append({name: value for name, value in record.items() if value is not None})
    log_dumps = []
    if draw(st.booleans()):
        for node in NODES:
            hwm = draw(st.integers(0, 4))
            # A node whose early records are in its snapshot: its dump starts later.
            log_start = draw(st.sampled_from([None, 0, 1, 3]))
            for offset in range(log_start or 0, draw(st.integers(0, 4))):
                record = {"node": node, "offset": offset, "epoch": draw(st.integers(1, 2)),
                          "record_hash": draw(st.sampled_from(["h1", "h2"])),
                          "write_id": draw(st.sampled_from([None, "w0", "w1", "w2"])), "hwm": hwm}
                if log_start is not None:
                    record["log_start"] = log_start
                log_dumps.append(record)
    return events, meta, node_events, log_dumps


def _write(directory: Path, history) -> None:
    events, meta, node_events, log_dumps = history
    directory.mkdir(parents=True)
    # Index in time order; a process's own events keep their order at ties.
    ordered = sorted(enumerate(events), key=lambda pair: (pair[1]["time"], pair[0]))
    with (directory / "history.jsonl").open("w") as handle:
        for index, (_, record) in enumerate(ordered):
            handle.write(json.dumps({"index": index, **record}) + "\n")
    (directory / "meta.json").write_text(json.dumps(meta))
    for name, records in (("node-events.jsonl", node_events), ("log-dumps.jsonl", [
        {k: v for k, v in record.items() if v is not None} for record in log_dumps
    ])):
        if records:
            (directory / name).write_text("".join(json.dumps(record) + "\n" for record in records))


@settings(max_examples=BATCHES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(histories(), min_size=HISTORIES_PER_BATCH, max_size=HISTORIES_PER_BATCH))
def test_spark_job_and_reference_agree(spark, batch):
    with tempfile.TemporaryDirectory() as root:
        for number, history in enumerate(batch):
            _write(Path(root) / f"h{number:03d}", history)
        spark_results = {r.history: r for r in check([root], spark=spark, all_keys=True, max_witnesses=1000)}
        for number in range(len(batch)):
            name = f"h{number:03d}"
            reference = check_reference([str(Path(root) / name)], max_witnesses=1000)[0]
            assert comparable(spark_results[name].to_dict()) == comparable(reference.to_dict()), name
