"""A synthetic campaign run directory, shaped like the runner's.

Three controllers; node 3 leads epoch 1 and is isolated from 5 s to 12 s
while node 1 takes over epoch 2 (a zombie leader); node 2 is killed from
15 s to 17 s; a heal-all at the end. Six client processes run reads, writes
and cas at a steady rate with log-normal latencies; some cas fail, a few
operations are indeterminate (info) and one never completes. results.json
has a stale-read with two witnesses (a read served by the zombie and the
write it missed) and a passing linearizability check.

``HOSTILE`` is written into a write's value, an error, an option and a
fault's description, so that tests can check that it comes out escaped.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

HOSTILE = '<script>alert("pwn")</script>'
S = 1_000_000_000


def build_run(root: Path, *, duration_s: float = 20.0, rate: float = 120.0, seed: int = 7, with_results: bool = True) -> Path:
    """Write a run directory under ``root`` and return it. ``rate`` is the
    operations invoked per second over all clients."""
    rng = random.Random(seed)
    run_dir = root / "store" / "zombie-leader" / "20260101T000000"
    (run_dir / "logs").mkdir(parents=True)
    end_ns = int(duration_s * S)
    isolate = (int(0.25 * end_ns), int(0.6 * end_ns))
    kill = (int(0.75 * end_ns), int(0.85 * end_ns))
    heal_ns = end_ns - S // 2

    events: list[dict[str, Any]] = []
    clients = 6
    gap_ns = int(clients / rate * S)
    counter = 0
    witnesses: dict[str, dict[str, Any]] = {}
    for process in range(clients):
        t = int(1.9 * S) + process * gap_ns // clients
        while t < end_ns - 2 * S:
            f = rng.choice(("read", "read", "write", "cas"))
            key = rng.choice(("r0", "r1"))
            latency = int(math.exp(rng.gauss(math.log(4e6), 0.6)))
            outcome = "ok"
            error = None
            if f == "cas" and rng.random() < 0.3:
                outcome, error = "fail", "precondition failed"
            elif rng.random() < 0.004:
                outcome, latency, error = "info", 2 * S, "indeterminate: no answer within 2 s"
            counter += 1
            if f == "read":
                invoke_value, value = None, counter
            elif f == "write":
                invoke_value = value = counter
            else:
                invoke_value = value = [counter - 1, counter]
            invoke = {"process": process, "type": "invoke", "f": f, "key": key, "value": invoke_value, "time": t}
            complete = {"process": process, "type": outcome, "f": f, "key": key, "value": value, "time": t + latency}
            if f == "read":
                invoke["mode"] = complete["mode"] = "leader-local"
            if outcome == "ok":
                complete["offset"] = counter
            if error:
                complete["error"] = error
            # The ops the witnesses will name: a write during the isolation,
            # and a read after it, served by the zombie (node 3).
            if f == "write" and outcome == "ok" and "write" not in witnesses and t > isolate[0] + (isolate[1] - isolate[0]) // 10:
                invoke["value"] = complete["value"] = HOSTILE
                witnesses["write"] = complete
                complete["_invoke"] = invoke
            elif f == "read" and outcome == "ok" and "write" in witnesses and "read" not in witnesses and t > witnesses["write"]["time"] + end_ns * 15 // 100:
                witnesses["read"] = complete
                complete["_invoke"] = invoke
            elif f == "cas" and outcome == "fail" and "error" not in witnesses:
                complete["error"] = HOSTILE
                witnesses["error"] = complete
            events += [invoke, complete]
            t += latency + max(1, int(rng.expovariate(1.0) * gap_ns))
    # One operation that never completes.
    events.append({"process": clients, "type": "invoke", "f": "write", "key": "r0", "value": -1, "time": end_ns - 3 * S})
    # The nemesis.
    isolated = {"fault_id": 1, "shape": "isolate", "backend": "proxy", "node": 3, "clients": False, "how": "drop",
                "cut": [[1, 3], [2, 3], [3, 1], [3, 2]], "note": HOSTILE}
    events += [
        {"process": "nemesis", "type": "info", "f": "isolate-leader", "key": None, "time": isolate[0], "value": {"phase": "start", "fault": isolated}},
        {"process": "nemesis", "type": "info", "f": "isolate-leader", "key": None, "time": isolate[1], "value": {"phase": "end", "fault": isolated}},
        {"process": "nemesis", "type": "info", "f": "kill", "key": None, "time": kill[0], "value": {"phase": "start", "fault": {"node": 2}}},
        {"process": "nemesis", "type": "info", "f": "kill", "key": None, "time": kill[1], "value": {"phase": "end", "fault": {"node": 2}}},
        {"process": "nemesis", "type": "info", "f": "heal", "key": None, "time": heal_ns, "value": {"phase": "all"}},
    ]
    events.sort(key=lambda e: (e["time"], e["type"] != "invoke"))
    for index, event in enumerate(events):
        event["index"] = index
    with open(run_dir / "history.jsonl", "w", encoding="utf-8") as out:
        for event in events:
            out.write(json.dumps({k: v for k, v in event.items() if not k.startswith("_")}) + "\n")

    def role(time_s: float, node: str, name: str, epoch: int, leader: str | None) -> dict[str, Any]:
        return {"time": int(time_s * S), "node": node, "kind": "role", "role": name, "epoch": epoch, "leader": leader}

    iso0, iso1, k0, k1 = (x / S for x in (*isolate, *kill))
    roles = [
        role(0.5, "1", "unattached", 0, None), role(0.5, "2", "unattached", 0, None), role(0.5, "3", "unattached", 0, None),
        role(1.7, "3", "prospective", 0, None), role(1.75, "3", "candidate", 1, None), role(1.8, "3", "leader", 1, "3"),
        role(1.81, "1", "follower", 1, "3"), role(1.81, "2", "follower", 1, "3"),
        role(iso0 + 2.0, "1", "prospective", 1, "3"), role(iso0 + 2.02, "1", "candidate", 2, None),
        role(iso0 + 2.05, "1", "leader", 2, "1"), role(iso0 + 2.06, "2", "follower", 2, "1"),
        role(iso1 + 0.1, "3", "unattached", 2, None), role(iso1 + 0.12, "3", "follower", 2, "1"),
        role(k1 + 0.4, "2", "follower", 2, "1"),
    ]
    with open(run_dir / "node-events.jsonl", "w", encoding="utf-8") as out:
        for event in sorted(roles, key=lambda e: (e["node"], e["time"])):
            out.write(json.dumps(event) + "\n")

    options = {"scenario": "zombie-leader", "time_limit_s": duration_s, "controllers": 3, "workload": "register",
               "read_mode": "leader-local", "check_quorum": False, "net": "proxy", "seed": seed, "store": HOSTILE,
               "clients": clients}
    (run_dir / "options.json").write_text(json.dumps(options, indent=2))
    (run_dir / "meta.json").write_text(json.dumps({"model": "register", "fetch_timeout_ms": 2000, "offset_scope": "key",
                                                   "campaign": options, "faults": 2}, indent=2))
    (run_dir / "log-dumps.jsonl").write_text("")
    if with_results:
        (run_dir / "results.json").write_text(json.dumps(results_for(witnesses), indent=1))
    return run_dir


def rendered(complete: dict[str, Any]) -> dict[str, Any]:
    """An operation as the checker renders it in a witness."""
    invoke = complete["_invoke"]
    op = {"index": invoke["index"], "process": invoke["process"], "f": invoke["f"], "key": invoke["key"], "type": complete["type"],
          "time": invoke["time"], "invoke_value": invoke["value"], "complete_index": complete["index"],
          "complete_time": complete["time"], "value": complete["value"]}
    for name in ("offset", "mode"):
        if name in complete:
            op[name] = complete[name]
    return op


def results_for(ops: dict[str, dict[str, Any]]) -> dict[str, Any]:
    read, write = rendered(ops["read"]), rendered(ops["write"])
    stale = [
        {"read": read, "missed_write": write, "rule": "offset", "bound_ms": 3000.0},
        {"read": dict(read, value=HOSTILE), "missed_write": write, "rule": "value", "bound_ms": 3000.0},
    ]
    checks: dict[str, Any] = {
        "stale-read": {"status": "fail", "count": 5, "witnesses": stale},
        "garbage-read": {"status": "pass", "count": 0, "witnesses": []},
        "non-monotonic-read-broker": {"status": "skipped", "count": 0, "witnesses": [], "reason": "no broker reads"},
        "split-brain": {"status": "pass", "count": 0, "witnesses": []},
        "linearizability": {"status": "pass", "count": 0, "witnesses": [], "keys": {"total": 2, "linearizable": 2,
                            "not-linearizable": 0, "unknown": 0}, "unknown_keys": [], "budget_steps": 50_000_000},
    }
    return {"history": "20260101T000000", "path": "history.jsonl", "model": "register", "checker": "spark",
            "valid": False, "stats": {"operations": 0}, "checks": checks}
