"""Side-by-side metadata benchmark: pykraft against Apache Kafka 4.4's KRaft.

    python -m bench.metadata_bench [--peers pykraft,kafka] [--quick] [--json OUT]

Each system runs as 3 controllers (separate processes) and one broker on
127.0.0.1, data on disk, one system after the other in the same run. Every
row means the same thing on both sides:

  seq commits/s, p50/p99      one client, one topic creation (1 partition,
                              RF 1) at a time, each through the system's own
                              admin path (Kafka: the admin client against the
                              broker; pykraft: the controller client)
  64 in flight commits/s ...  64 topic creations outstanding at all times
  fence p50/max               kill -9 the broker -> the controllers fence it
  failover p50/max            kill -9 the active controller -> the next
                              topic creation that succeeds
  RSS per controller          VmRSS of each controller after the throughput rows

Kafka is fetched by ``make kafka`` (tools/kafka-fetch.sh); without it Kafka's
column says how to get it. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ._common import (
    Cluster,
    cleanup_all,
    concurrent_writes,
    install_cleanup_handlers,
    latency_summary_ms,
    machine_info,
    sequential_writes,
    write_json,
)
from .peers.kafka import KafkaPeer
from .peers.pykraft_metadata import PykraftMetadataCluster
from .quorum_bench import PeerRows, log, run_peers, summary_cell, table_and_notes

PEERS: dict[str, type[Cluster]] = {cls.name: cls for cls in (PykraftMetadataCluster, KafkaPeer)}
DEFAULT_PEERS = "pykraft,kafka"

FULL = {"seq": 500, "concurrent": 3000, "trials": 10, "fence_trials": 5, "row_limit_s": 60.0}
QUICK = {"seq": 100, "concurrent": 640, "trials": 3, "fence_trials": 2, "row_limit_s": 30.0}
#: A broker not fenced this long after its kill counts as a failed trial
#: (both systems' session timeout is 9 s by default).
FENCE_TIMEOUT_S = 30.0

ROWS = [
    ("seq_per_s", "seq topic creations/s"),
    ("seq_latency_ms", "seq p50 / p99 ms"),
    ("inflight_per_s", "64 in flight creations/s"),
    ("inflight_latency_ms", "64 in flight p50 / p99 ms"),
    ("fence_ms", "fence killed broker p50 / max ms"),
    ("failover_ms", "controller failover p50 / max ms"),
    ("rss_mib", "RSS per controller MiB"),
]


def fence_trials(cluster: Any, trials: int, healthy_timeout_s: float = 180.0) -> dict[str, Any]:
    """``cluster.fence_trial`` ``trials`` times, each on a healthy cluster
    (the broker back and unfenced); the summary of the times."""
    times_s: list[float] = []
    failed = 0
    for trial in range(trials):
        cluster.wait_healthy(healthy_timeout_s)
        try:
            elapsed_s = cluster.fence_trial(FENCE_TIMEOUT_S)
        except TimeoutError as error:
            failed += 1
            log(f"  fence trial {trial + 1}: {error}")
            continue
        times_s.append(elapsed_s)
        log(f"  fence trial {trial + 1}: fenced {elapsed_s * 1e3:.0f} ms after the kill")
    return {"trials_ms": [t * 1e3 for t in times_s], "failed_trials": failed, "summary": latency_summary_ms(times_s)}


def run_peer(cluster: Cluster, sizes: dict[str, Any]) -> dict[str, Any]:
    """Every row for one system; a failing row is reported, the others still run."""
    rows = PeerRows(cluster)
    cells, data = rows.cells, rows.data

    log(f"[{cluster.name}] starting 3 controllers and a broker")
    started = time.monotonic()
    cluster.start()
    log(f"[{cluster.name}] up in {time.monotonic() - started:.1f} s")

    def seq() -> None:
        cluster.wait_healthy(60.0)
        result = sequential_writes(cluster, sizes["seq"], max_seconds=sizes["row_limit_s"])
        rows.rate_and_latency("seq_per_s", "seq_latency_ms", result.requests_per_s, result.latency)
        data["sequential"] = result.as_dict()
        log(f"[{cluster.name}] seq: {result.requests_per_s:,.1f}/s p50 {result.latency['p50_ms']:.1f} ms")

    def inflight() -> None:
        cluster.wait_healthy(60.0)
        result = concurrent_writes(cluster, sizes["concurrent"], 64, max_seconds=sizes["row_limit_s"])
        rows.rate_and_latency("inflight_per_s", "inflight_latency_ms", result.requests_per_s, result.latency)
        data["in_flight_64"] = result.as_dict()
        log(f"[{cluster.name}] 64 in flight: {result.requests_per_s:,.1f}/s")

    def fence() -> None:
        result = fence_trials(cluster, sizes["fence_trials"])
        cells["fence_ms"] = summary_cell(result["summary"], result["failed_trials"])
        data["fence"] = result

    # Fencing first, while the broker has few partitions: a restarted Kafka
    # broker loads every partition log before it is unfenced again.
    rows.row(("fence_ms",), fence)
    rows.row(("seq_per_s", "seq_latency_ms"), seq)
    rows.row(("inflight_per_s", "inflight_latency_ms"), inflight)
    rows.row(("rss_mib",), rows.rss)
    rows.row(("failover_ms",), lambda: rows.failover(sizes["trials"]))
    return rows.result(ROWS)


def render(machine: dict[str, str], sizes: dict[str, Any], quick: bool, results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "pykraft metadata benchmark: 3 controllers + 1 broker per system, separate processes, 127.0.0.1, data on disk",
        f"machine: {machine['nproc']} cpus, {machine['cpu_model']}, {machine['memory']}, kernel {machine['kernel']}",
        f"date: {machine['date']}; data dirs under {machine['data_dirs']}; load average at start "
        f"{machine['load_average_at_start']} (other jobs on the machine skew every figure)",
        f"workload: {sizes['seq']} sequential topic creations, {sizes['concurrent']} with 64 in flight, "
        f"{sizes['trials']} controller failovers, {sizes['fence_trials']} broker fences; each throughput row stops "
        f"at {sizes['row_limit_s']:.0f} s" + (" (--quick)" if quick else ""),
        "",
    ]
    lines.extend(table_and_notes(results, ROWS, lambda _name, status: status))
    lines.append("  - all clients are Python on the same cores as the servers: client CPU is part of every figure.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metadata_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peers", default=DEFAULT_PEERS, help=f"comma-separated, from {', '.join(PEERS)}")
    parser.add_argument("--quick", action="store_true", help="fewer creations, 3 failovers and 2 fences")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    args = parser.parse_args(argv)
    names = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    install_cleanup_handlers()
    sizes = dict(QUICK if args.quick else FULL)
    machine = machine_info()
    try:
        results = run_peers(
            [PEERS[name] for name in names],
            lambda cls: cls(log=log),
            lambda cluster: run_peer(cluster, sizes),
            unavailable_status="not available",
            failed_status="failed to start",
        )
    except KeyboardInterrupt:
        log("interrupted: stopping every process and removing temp dirs")
        cleanup_all()
        return 130
    print(render(machine, sizes, args.quick, results), flush=True)
    if args.json:
        write_json(args.json, {"machine": machine, "sizes": sizes, "results": results,
                               "command": " ".join(["python -m bench.metadata_bench", *(argv or sys.argv[1:])])})
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
