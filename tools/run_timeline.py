"""A campaign run's timeline as text, for pages that put two runs side by
side (docs/side-by-side.md): the faults, each controller's Raft role
changes, brokers' fences and unfences, and what the clients saw while each
fault lasted. It reads what ``report.html`` reads (``jepsen_like.report.load_run``).

    .venv/bin/python tools/run_timeline.py RUN_DIR [--from-s S]

Times are seconds since the history began. Runs of ``prospective`` /
``unattached`` changes (a cut-off node asking for pre-votes again and
again) are folded into one line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from jepsen_like.report import load_run

QUIET_ROLES = ("prospective", "unattached", "candidate")


def _node_label(node: Any) -> str:
    return f"n{node}"


def _role_lines(events: list[dict[str, Any]], brokers: set[str]) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    folded: dict[str, list[dict[str, Any]]] = {}

    def flush(node: str) -> None:
        run = folded.pop(node, [])
        if not run:
            return
        roles = "/".join(dict.fromkeys(e["role"] for e in run))
        epochs = sorted({e["epoch"] for e in run})
        epoch = f"e{epochs[0]}" if len(epochs) == 1 else f"e{epochs[0]}-{epochs[-1]}"
        times = f"{run[0]['time'] / 1e9:.2f}-{run[-1]['time'] / 1e9:.2f} s" if len(run) > 1 else ""
        count = f" x{len(run)}" if len(run) > 1 else ""
        lines.append((run[0]["time"], f"{_node_label(node)} {roles} {epoch}{count} {times}".rstrip()))

    for event in events:
        node = str(event["node"])
        if event.get("kind") == "role" and node not in brokers:
            if event["role"] in QUIET_ROLES:
                folded.setdefault(node, []).append(event)
                continue
            flush(node)
            text = f"{_node_label(node)} {event['role']} e{event['epoch']}"
            if event["role"] == "follower" and event.get("leader") is not None:
                text += f" (leader n{event['leader']})"
            reason = str(event.get("reason") or "")
            if event["role"] == "resigned" and reason:
                text += f" ({reason.removeprefix('kafka: ')})"
            lines.append((event["time"], text))
        elif event.get("kind") == "controller_broker_state":
            lines.append((event["time"], f"controller n{node}: broker {event['broker_id']} {event['state']}"))
        elif event.get("kind") == "broker_state" and event.get("state") in ("fenced", "online"):
            lines.append((event["time"], f"broker {event['broker_id']} itself: {event['state']}"))
    for node in list(folded):
        flush(node)
    return lines


def timeline(run_dir: Path, from_s: float = 0.0) -> list[str]:
    """The run's timeline, one line per event, from ``from_s`` seconds on."""
    data = load_run(run_dir)
    events = []
    path = run_dir / "node-events.jsonl"
    if path.exists():
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    events.sort(key=lambda e: (e["time"], str(e["node"])))
    # The run's own brokers (101..): pykraft's metadata workload also
    # registers synthetic brokers (1001..), left out here.
    campaign = data.meta.get("campaign") or data.options
    brokers = {str(101 + index) for index in range(int(campaign.get("brokers", 0) or 0))}
    events = [e for e in events if "broker_id" not in e or str(e["broker_id"]) in brokers]
    lines = _role_lines(events, brokers)
    for fault in data.faults:
        lines.append((fault.start_ns, f"FAULT {fault.label()} starts"))
        if fault.end_ns is not None:
            lines.append((fault.end_ns, f"FAULT {fault.label()} ends: {_during(data, fault)}"))
    for time_ns, f, _value in data.instants:
        lines.append((time_ns, f"{f} (every fault healed)"))
    lines.sort(key=lambda item: item[0])
    lines = _merge_controller_views(lines)
    return [f"{time_ns / 1e9:7.2f}  {text}" for time_ns, text in lines if time_ns / 1e9 >= from_s]


def _merge_controller_views(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """``controller n1: broker 101 fenced`` from several controllers
    within a second: one line naming them all."""
    merged: list[tuple[int, str]] = []
    for time_ns, text in lines:
        if text.startswith("controller n"):
            who, _, what = text.partition(": ")
            joined = False
            for position in range(len(merged) - 1, -1, -1):
                earlier_ns, earlier = merged[position]
                if time_ns - earlier_ns > 1_000_000_000:
                    break
                if earlier.startswith("controller") and earlier.endswith(": " + what):
                    names = earlier.partition(": ")[0].removeprefix("controllers ").removeprefix("controller ").split(",")
                    names = list(dict.fromkeys([*names, who.removeprefix("controller ")]))
                    label = "controllers" if len(names) > 1 else "controller"
                    merged[position] = (earlier_ns, f"{label} {','.join(names)}: {what}")
                    joined = True
                    break
            if not joined:
                merged.append((time_ns, text))
            continue
        merged.append((time_ns, text))
    return merged


def _during(data: Any, fault: Any) -> str:
    """What the clients saw from the fault's start to its end: outcomes of
    the operations invoked, and reads answered by the fault's target."""
    inside = [op for op in data.ops if fault.start_ns <= op.time_ns <= fault.end_ns]
    counts = {outcome: sum(1 for op in inside if op.outcome == outcome) for outcome in ("ok", "fail", "info")}
    text = f"ops invoked during it: ok {counts['ok']}, fail {counts['fail']}, info {counts['info']}"
    targets = set(fault.target_nodes())
    broker_reads = [op for op in inside if op.extra.get("mode") == "broker" and str(op.extra.get("node")) in targets]
    if broker_reads:
        ok = sum(1 for op in broker_reads if op.outcome == "ok")
        text += f"; reads answered by n{'/'.join(sorted(targets))}: ok {ok}, refused {len(broker_reads) - ok}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--from-s", type=float, default=0.0, help="leave out what happened before (start-up)")
    args = parser.parse_args(argv)
    for line in timeline(args.run_dir, args.from_s):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
