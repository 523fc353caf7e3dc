"""A synthetic campaign run crowded on purpose, for the layout tests.

Twelve seconds, three controllers and two brokers. Fourteen faults start
0.35 s apart with labels of every length (so their names compete for the
same rows), two heals come 0.1 s apart after them, twelve stale reads are
invoked within one second at nearly the same latency (so their labels compete for
the same spot), and ten op types are drawn (one colour each). Node 3 leads
epoch 1 and keeps believing it while node 1 leads epoch 2: two leaders from
4 s to 7 s. Failed and indeterminate operations carry the errors the
campaign records, some with the node that refused them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

S = 1_000_000_000
MS = 1_000_000

OP_KINDS = (
    # (f in the register model, op name or None, mode)
    ("read", None, "leader-local"),
    ("write", None, None),
    ("cas", None, None),
    ("cas", "create_topic", None),
    ("write", "delete_topic", None),
    ("read", "describe_topic", None),
    ("read", "describe_topic", "broker"),
    ("write", "register_broker", None),
    ("write", "unregister_broker", None),
    ("read", "describe_cluster", None),
)

FAILURES = (
    # (type, error, node or None)
    ("fail", "127.0.0.1:40001 refused the request: NOT_LEADER: node 2 follows 1", "2"),
    ("fail", "UNKNOWN_TOPIC_OR_PARTITION", "1"),
    ("fail", "no node served the request within 5.0 s: 127.0.0.1:40003 is not the leader", None),
    ("fail", "precondition failed", None),
    ("info", "indeterminate: NoAnswerError: no answer from 127.0.0.1:40003 within 1.0 s", "3"),
    ("info", "indeterminate: connection lost", None),
    ("fail", "connect: [Errno 111] Connection refused", "101"),
)

FAULTS = (
    ("isolate-leader", {"node": 3}),
    ("partition-halves", {"side_a": [1, 2], "side_b": [3]}),
    ("kill", {"node": 2}),
    ("one-way-cut", {"src": [1], "dst": [2, 3]}),
    ("pause", {"node": 1}),
    ("storage-torn-write", {"node": 1}),
    ("hostile-slowloris", {"node": 2}),
    ("isolate-zone", {"zone": "az1", "inside": [1, 101]}),
    ("disk-full", {"node": 3}),
    ("fast-bounce", {"node": 101}),
    ("partition-random", {"side_a": [1], "side_b": [2, 3, 101, 102]}),
    ("kill", {"node": 3}),
    ("pause", {"node": 2}),
    ("isolate-leader", {"node": 1}),
)


def build_crowded_run(root: Path, *, seed: int = 3) -> Path:
    """Write the run directory under ``root`` and return it."""
    rng = random.Random(seed)
    run_dir = root / "store" / "crowded" / "20260102T000000"
    run_dir.mkdir(parents=True)
    end_ns = 12 * S
    events: list[dict[str, Any]] = []
    counter = 0
    stale: list[dict[str, Any]] = []
    missed: dict[str, Any] | None = None
    for process in range(10):
        f, op, mode = OP_KINDS[process]
        t = S + process * 37 * MS
        while t < end_ns - S:
            counter += 1
            latency = int(rng.uniform(2, 12) * MS)
            invoke: dict[str, Any] = {"process": process, "type": "invoke", "f": f, "key": f"k{counter % 3}", "value": counter, "time": t}
            if op:
                invoke["op"] = op
            if mode:
                invoke["mode"] = mode
            complete = dict(invoke, type="ok", time=t + latency)
            if counter % 9 == 0:
                kind, error, node = FAILURES[(counter // 9) % len(FAILURES)]
                complete.update(type=kind, error=error)
                if node is not None:
                    complete["node"] = node
            else:
                complete["node"] = str(1 + counter % 3)
            if f == "write" and op is None and missed is None and t > 3 * S and complete["type"] == "ok":
                missed = {"invoke": invoke, "complete": complete}
            events += [invoke, complete]
            t += latency + int(rng.uniform(20, 60) * MS)
    # Twelve stale reads close together: invoked 80 ms apart, latencies alike.
    for number in range(12):
        t = 6 * S + number * 80 * MS
        invoke = {"process": 20 + number, "type": "invoke", "f": "read", "key": "k0", "value": None, "time": t, "mode": "leader-local"}
        complete = dict(invoke, type="ok", value=1, time=t + 5 * MS + number * 100_000, node="3", offset=1)
        events += [invoke, complete]
        stale.append({"invoke": invoke, "complete": complete})
    for number, (f, fault) in enumerate(FAULTS):
        fault = dict(fault, fault_id=number + 1)
        start = int((1.5 + 0.35 * number) * S)
        end = start + int((0.3 + 0.25 * (number % 5)) * S)
        events.append({"process": "nemesis", "type": "info", "f": f, "key": None, "time": start, "value": {"phase": "start", "fault": fault}})
        events.append({"process": "nemesis", "type": "info", "f": f, "key": None, "time": end, "value": {"phase": "end", "fault": fault}})
    for time_ns in (int(8.9 * S), int(9.0 * S)):
        events.append({"process": "nemesis", "type": "info", "f": "heal", "key": None, "time": time_ns, "value": {"phase": "all"}})
    events.sort(key=lambda e: (e["time"], e["type"] != "invoke"))
    for index, event in enumerate(events):
        event["index"] = index
    with open(run_dir / "history.jsonl", "w", encoding="utf-8") as out:
        for event in events:
            out.write(json.dumps(event) + "\n")

    def role(time_s: float, node: str, name: str, epoch: int, leader: str | None) -> dict[str, Any]:
        return {"time": int(time_s * S), "node": node, "kind": "role", "role": name, "epoch": epoch, "leader": leader}

    def broker(time_s: float, broker_id: str, state: str, epoch: int) -> dict[str, Any]:
        return {"time": int(time_s * S), "node": broker_id, "kind": "broker_state", "broker_id": broker_id,
                "state": state, "broker_epoch": epoch, "reason": "test"}  # fmt: skip

    node_events = [
        role(0.5, "1", "unattached", 0, None), role(0.5, "2", "unattached", 0, None), role(0.5, "3", "unattached", 0, None),
        role(0.9, "3", "candidate", 1, None), role(1.0, "3", "leader", 1, "3"),
        role(1.01, "1", "follower", 1, "3"), role(1.01, "2", "follower", 1, "3"),
        role(3.9, "1", "candidate", 2, None), role(4.0, "1", "leader", 2, "1"), role(4.01, "2", "follower", 2, "1"),
        role(7.0, "3", "resigned", 1, None), role(7.1, "3", "follower", 2, "1"),
        broker(1.2, "101", "fenced", 5), broker(1.4, "101", "online", 5), broker(5.0, "101", "fenced", 5), broker(5.5, "101", "online", 9),
        broker(1.3, "102", "fenced", 6), broker(1.5, "102", "online", 6), broker(9.0, "102", "stopping", 6), broker(9.2, "102", "offline", 6),
    ]  # fmt: skip
    with open(run_dir / "node-events.jsonl", "w", encoding="utf-8") as out:
        for event in node_events:
            out.write(json.dumps(event) + "\n")
    options = {"scenario": "crowded", "controllers": 3, "brokers": 2, "workload": "metadata", "read_mode": "leader-local"}
    (run_dir / "options.json").write_text(json.dumps(options))
    (run_dir / "meta.json").write_text(json.dumps({"model": "register", "campaign": options, "faults": len(FAULTS)}))
    assert missed is not None
    witnesses = [{"read": _rendered(s), "missed_write": _rendered(missed), "rule": "offset", "bound_ms": 3000.0} for s in stale]
    results = {
        "history": run_dir.name, "path": "history.jsonl", "model": "register", "checker": "spark", "valid": False,
        "stats": {"operations": counter}, "checks": {"stale-read": {"status": "fail", "count": len(witnesses), "witnesses": witnesses}},
    }  # fmt: skip
    (run_dir / "results.json").write_text(json.dumps(results))
    # The memory timeline the runner writes every 10 s (here every second
    # of the 12): the harness flat after start-up, a node killed mid-run.
    rows = ["elapsed_s,operations,harness_rss_bytes,python_blocks,nodes_rss_bytes"]
    for second in range(12):
        harness = (100 + min(second, 3) * 25 + rng.randrange(4)) * 2**20
        nodes = (300 - (60 if second in (8, 9) else 0) + second) * 2**20
        rows.append(f"{second}.0,{second * 250},{harness},{500_000 + rng.randrange(50_000)},{nodes}")
    (run_dir / "memory.csv").write_text("\n".join(rows) + "\n")
    return run_dir


def _rendered(op: dict[str, Any]) -> dict[str, Any]:
    """An operation as the checker renders it in a witness."""
    invoke, complete = op["invoke"], op["complete"]
    return {"index": invoke["index"], "process": invoke["process"], "f": invoke["f"], "key": invoke["key"], "type": complete["type"],
            "time": invoke["time"], "invoke_value": invoke["value"], "complete_index": complete["index"],
            "complete_time": complete["time"], "value": complete["value"], "offset": complete.get("offset")}  # fmt: skip
