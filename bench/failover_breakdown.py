"""Where a pykraft failover spends its time: ``bench.quorum_bench``'s
failover row (kill -9 the leader, a propose every 20 ms until one commits),
with each trial taken apart from the nodes' own log lines.

    python -m bench.failover_breakdown [--trials 12] [--timers fast]

Per trial, in ms from the kill (the nodes log role changes and lost
connections at INFO, with millisecond timestamps; the kill's wall time is
taken here):

  noticed      a survivor's connection to the killed leader closed
  stood        the first survivor turned Prospective (after its random wait)
  leader       a survivor won the election (pre-vote, vote, two fsyncs)
  followed     the other survivor accepted it (BeginQuorumEpoch)
  committed    the first write committed (what quorum_bench reports)

``candidates`` above 1 is a split vote.
"""

from __future__ import annotations

import argparse
import datetime
import re
import statistics
import sys
import time
from pathlib import Path

from ._common import install_cleanup_handlers, wait_for_leader
from .peers.pykraft_peer import PykraftCluster

_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \S+ (.*)$")
STAGES = (
    ("noticed", re.compile(r"connection to node \d+ at \S+ lost")),
    ("stood", re.compile(r"role=prospective")),
    ("leader", re.compile(r"role=leader")),
    ("followed", re.compile(r"role=follower")),
)


def log_events(paths: list[Path]) -> list[tuple[float, str]]:
    """(wall time s, text) of every INFO line of the nodes' logs."""
    events = []
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            match = _LINE.match(line)
            if match:
                wall = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                events.append((wall, match[2]))
    return sorted(events)


def take_apart(events: list[tuple[float, str]], killed_at: float, committed_ms: float) -> dict[str, float | None]:
    """The stages of one trial, in ms from ``killed_at`` (None: not seen
    before the commit)."""
    window = [(round((wall - killed_at) * 1e3), text) for wall, text in events
              if killed_at <= wall <= killed_at + committed_ms / 1e3 + 0.05]
    stages: dict[str, float | None] = {
        name: next((ms for ms, text in window if pattern.search(text)), None) for name, pattern in STAGES
    }
    stages["committed"] = committed_ms
    stages["candidates"] = sum(1 for _, text in window if "role=candidate" in text)
    return stages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover_breakdown", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--timers", default="default", help="kraft-quorum node --timers (default: default)")
    args = parser.parse_args(argv)
    install_cleanup_handlers()
    cluster = PykraftCluster(log=lambda message: print(message, file=sys.stderr),
                             node_args=lambda index: ["--timers", args.timers])
    kills: list[tuple[float, float]] = []  # (wall time of the kill, ms to the first commit)
    cluster.start()
    try:
        for _ in range(args.trials):
            cluster.wait_healthy(60.0)
            leader = wait_for_leader(cluster, 60.0)
            wall, killed_at = time.time(), time.perf_counter()
            cluster.kill(leader)
            elapsed_s = cluster.first_write_after_kill(killed_at, time.monotonic() + 30.0)
            if elapsed_s is not None:
                kills.append((wall, elapsed_s * 1e3))
            cluster.restart(leader)
        cluster.wait_healthy(60.0)
        events = log_events([process.log_path for process in cluster.processes])
    finally:
        cluster.stop()
    rows = [take_apart(events, wall, committed_ms) for wall, committed_ms in kills]
    names = [name for name, _ in STAGES] + ["committed", "candidates"]
    print(f"--timers {args.timers}, {len(rows)} of {args.trials} trials committed; ms from the kill")
    print("  ".join(f"{name:>10}" for name in names))
    for row in rows:
        print("  ".join(f"{'-' if row[name] is None else f'{row[name]:.0f}':>10}" for name in names))
    medians = []
    for name in names:
        values = [row[name] for row in rows if row[name] is not None]
        medians.append(f"{statistics.median(values):.0f}" if values else "-")
    print("  ".join(f"{value:>10}" for value in medians) + "  (medians)")
    return 0 if len(rows) == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
