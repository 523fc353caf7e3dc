"""Spurious elections of an idle quorum: three ``kraft-quorum node``
processes, no writes, for N minutes.

    python -m bench.idle_elections [--minutes 10] [--timers fast] [--keep-logs DIR]

Each node appends its role changes to an event log (``--event-log``); at the
end the script counts, over the whole run after the first leader:

  pre-votes       prospective roles entered (a follower gave up on its leader)
  elections       candidacies (an epoch bump by a candidate)
  leader changes  distinct (epoch, leader) pairs after the first
  max epoch       the highest epoch any node reached

A quiet quorum should show none. A pre-vote or an election with nobody
killed means a follower missed its leader's answers for a fetch timeout, or
the leader missed a majority's Fetches for its check quorum: on a loaded
machine, mostly a process that was not scheduled for that long. To tell,
this process also samples its own scheduling: it sleeps 50 ms at a time and
records how late it woke (a stall it suffered, which the nodes on the same
cores likely suffered too), with the load average every 10 s; each role
change is printed beside the longest stall seen in the 5 s before it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from ._common import (
    LOOPBACK,
    ManagedProcess,
    cleanup_all,
    free_ports,
    install_cleanup_handlers,
    make_temp_dir,
    port_is_open,
    remove_temp_dir,
    wait_for,
)
from .peers.pykraft_peer import kraft_quorum_executable

VOTERS = 3
SAMPLE_S = 0.05
LOAD_EVERY_S = 10.0
STALL_WINDOW_S = 5.0


def read_role_events(paths: list[Path]) -> list[dict]:
    """The role changes of every node's event log, by wall time."""
    events = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "role":
                events.append(event)
    return sorted(events, key=lambda event: event["wall_ns"])


def watched(events: list[dict], since_ns: int, until_ns: int) -> list[dict]:
    """The events of the watch (the start-up election before it and the
    shutdown's resignation after it are not spurious)."""
    return [event for event in events if since_ns < event["wall_ns"] <= until_ns]


def count_elections(events: list[dict], first_leader: tuple[int, int]) -> dict[str, int]:
    """Pre-votes, candidacies, leaders other than ``first_leader`` (epoch,
    id) and the max epoch among ``events``."""
    leaders = {(event["epoch"], event["leader"]) for event in events if event["leader"] is not None}
    leaders.discard(first_leader)
    return {
        "pre_votes": sum(1 for event in events if event["role"] == "prospective"),
        "elections": sum(1 for event in events if event["role"] == "candidate"),
        "leader_changes": len(leaders),
        "max_epoch": max((event["epoch"] for event in events), default=first_leader[0]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_elections", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to watch (default 10)")
    parser.add_argument("--timers", default="default", help="kraft-quorum node --timers (default: default)")
    parser.add_argument("--keep-logs", metavar="DIR", type=Path,
                        help="copy the nodes' logs and event logs into DIR (the work directory is removed)")
    args = parser.parse_args(argv)
    executable = kraft_quorum_executable()
    if executable is None:
        print("no kraft-quorum executable beside this python or on PATH", file=sys.stderr)
        return 2
    install_cleanup_handlers()
    workdir = make_temp_dir("idle-elections")
    ports = free_ports(VOTERS)
    voters = ",".join(f"{i + 1}@{LOOPBACK}:{port}" for i, port in enumerate(ports))
    event_logs = [workdir / f"events{i + 1}.jsonl" for i in range(VOTERS)]
    processes = [
        ManagedProcess(
            f"pykraft-{i + 1}",
            [executable, "node", "--node-id", str(i + 1), "--voters", voters, "--data-dir", str(workdir / f"node{i + 1}"),
             "--cluster-id", "idle", "--plaintext", "--timers", args.timers, "--event-log", str(event_logs[i])],
            workdir / f"node{i + 1}.log",
        )
        for i in range(VOTERS)
    ]
    stalls: list[tuple[float, float]] = []  # (wall s, how late the sampler woke, s)
    loads: list[float] = []
    try:
        for process in processes:
            process.start()
        wait_for(lambda: all(port_is_open(p) for p in ports), 60.0, "every node to listen", 0.1, processes)
        # Settled: a leader, and both others following it.
        wait_for(lambda: sum(e["role"] in ("leader", "follower") for e in read_role_events(event_logs)) >= VOTERS,
                 60.0, "a leader and its followers", 0.2, processes)
        first = [e for e in read_role_events(event_logs) if e["role"] == "leader"][-1]
        started = time.time()
        print(f"3 nodes with --timers {args.timers}, idle for {args.minutes:g} min; load average at start "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        end = time.monotonic() + args.minutes * 60
        next_load = time.monotonic()
        while (now := time.monotonic()) < end:
            if now >= next_load:
                loads.append(os.getloadavg()[0])
                next_load = now + LOAD_EVERY_S
            time.sleep(SAMPLE_S)
            late_s = time.monotonic() - now - SAMPLE_S
            stalls.append((time.time(), late_s))
        stopped = time.time()
        dead = [p.name for p in processes if not p.is_alive()]
    except KeyboardInterrupt:
        cleanup_all()
        return 130
    finally:
        for process in processes:
            process.terminate(grace_s=5.0)
    events = watched(read_role_events(event_logs), int(started * 1e9), int(stopped * 1e9))
    counts = count_elections(events, (first["epoch"], first["leader"]))
    for event in events:
        if event["role"] == "unattached":
            continue
        at_s = event["wall_ns"] / 1e9
        window = [late for wall, late in stalls if at_s - STALL_WINDOW_S <= wall <= at_s]
        print(f"  +{at_s - started:7.1f} s  node {event['node']} {event['role']} epoch {event['epoch']} "
              f"({event['reason']}); longest sampler stall in the {STALL_WINDOW_S:g} s before: "
              f"{max(window, default=0.0) * 1e3:.0f} ms")
    lates = sorted(late for _, late in stalls)
    print(f"pre-votes {counts['pre_votes']}, elections {counts['elections']}, leader changes "
          f"{counts['leader_changes']}, max epoch {counts['max_epoch']} (node {first['leader']} led epoch "
          f"{first['epoch']} at the start)")
    if lates:
        print(f"sampler stalls: p50 {lates[len(lates) // 2] * 1e3:.1f} ms, p99 {lates[int(len(lates) * 0.99)] * 1e3:.0f} ms, "
              f"max {lates[-1] * 1e3:.0f} ms; {sum(1 for x in lates if x > 0.25)} over 250 ms")
    if loads:
        print(f"load average (1 min) over the run: min {min(loads):.1f}, mean {sum(loads) / len(loads):.1f}, "
              f"max {max(loads):.1f}; at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for process in processes:
        if process.name in dead:
            print(f"{process.name} exited during the run; its log ends:\n{process.log_tail(15)}")
    if args.keep_logs is not None:
        args.keep_logs.mkdir(parents=True, exist_ok=True)
        for path in [*event_logs, *(process.log_path for process in processes)]:
            if path.exists():
                shutil.copy(path, args.keep_logs / path.name)
        print(f"logs copied to {args.keep_logs}")
    remove_temp_dir(workdir)
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main())
