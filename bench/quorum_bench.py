"""Side-by-side benchmark: pykraft against etcd, ZooKeeper and PySyncObj.

    python -m bench.quorum_bench [--peers pykraft,etcd,zookeeper,pysyncobj,pysyncobj-batch]
                                 [--quick] [--trials N] [--rows failover] [--json OUT]

Every system runs as 3 voters (separate processes) on 127.0.0.1 with its data
on disk and fsync as described in the notes under the table, one system after
the other in the same run, each measured with the same Python-side workload:

  seq writes/s, p50/p99      one client, one committed write at a time
  64 in flight writes/s ...  64 single-record writes outstanding at all times
  batched records/s          one client sending batches of 100 records
  N clients batched rec/s    8 clients, each sending batches of 100 records
  failover p50/max           kill -9 the leader -> first committed write
  RSS per node               VmRSS of each voter after the throughput rows

A system that is not installed is skipped with the command that installs it;
pykraft reads "not available yet" until `kraft-quorum node` and
`quorum.client` exist.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from ._common import (
    Cluster,
    FailoverNotSupported,
    PeerUnavailable,
    ProcessStartError,
    batched_records,
    cleanup_all,
    concurrent_batched_records,
    concurrent_writes,
    failover_trials,
    format_table,
    install_cleanup_handlers,
    machine_info,
    make_value,
    sequential_writes,
    write_json,
)
from .peers.etcd import EtcdCluster
from .peers.pykraft_peer import PykraftCluster, PykraftFastCluster, PykraftTlsCluster
from .peers.pysyncobj_peer import PySyncObjBatchingCluster, PySyncObjCluster, PySyncObjMsyncCluster
from .peers.zookeeper import ZooKeeperCluster

PEERS: dict[str, type[Cluster]] = {
    cls.name: cls
    for cls in (
        PykraftCluster,
        PykraftFastCluster,
        PykraftTlsCluster,
        EtcdCluster,
        ZooKeeperCluster,
        PySyncObjCluster,
        PySyncObjBatchingCluster,
        PySyncObjMsyncCluster,
    )
}
DEFAULT_PEERS = "pykraft,etcd,zookeeper,pysyncobj,pysyncobj-batch"

# (sequential writes, 64-in-flight writes, batches of 100 from one client and
#  from BATCH_CLIENTS clients, failover trials, warm-up seconds, per-row time
#  limit in seconds)
FULL = {"seq": 2000, "concurrent": 20000, "batches": 300, "batches_concurrent": 1000, "trials": 10,
        "warmup_s": 5.0, "row_limit_s": 60.0}
QUICK = {"seq": 300, "concurrent": 3000, "batches": 30, "batches_concurrent": 200, "trials": 3,
         "warmup_s": 2.0, "row_limit_s": 20.0}
# Clients of the concurrent batch row, each with its own connection and one
# batch of 100 in flight.
BATCH_CLIENTS = 8

# What --rows chooses from, in the order they run.
ROW_GROUPS = ("seq", "inflight", "batch", "batch8", "rss", "failover")

ROWS = [
    ("seq_writes_per_s", "seq writes/s"),
    ("seq_latency_ms", "seq p50 / p99 ms"),
    ("inflight_writes_per_s", "64 in flight writes/s"),
    ("inflight_latency_ms", "64 in flight p50 / p99 ms"),
    ("batch_records_per_s", "1 client batched rec/s"),
    ("batch_latency_ms", "1 client batch p50/p99 ms"),
    ("batch8_records_per_s", f"{BATCH_CLIENTS} clients batched rec/s"),
    ("batch8_latency_ms", f"{BATCH_CLIENTS} clients batch p50/p99 ms"),
    ("failover_ms", "failover p50 / max ms"),
    ("rss_mib", "RSS per node MiB"),
]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fmt_rate(value: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.0f}"


def _fmt_ms(value: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _pair(a: float, b: float) -> str:
    return f"{_fmt_ms(a)} / {_fmt_ms(b)}"


def _innermost(exc: BaseException) -> BaseException:
    """The first leaf of a (trio) exception group, for a one-line reason."""
    for _ in range(20):
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        else:
            break
    return exc


def warm_up(cluster: Cluster, seconds: float, value_bytes: int) -> None:
    """Bounded warm-up (JIT, caches, connections): 64-in-flight writes for `seconds`."""
    values = [make_value(i, value_bytes, b"warmup") for i in range(100_000)]
    cluster.write_many(values, 64, time.monotonic() + seconds)


def summary_cell(summary: dict[str, float], failed_trials: int) -> str:
    """``p50 / max`` of a trials summary, with the failed trials if any."""
    text = _pair(summary["p50_ms"], summary["max_ms"])
    return text + (f" ({failed_trials} failed)" if failed_trials else "")


class PeerRows:
    """The table cells, JSON data and notes of one system's rows (shared by
    the quorum and metadata benchmarks): each row runs through ``row``, so a
    failing row is reported and the others still run."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.cells: dict[str, str] = {}
        self.data: dict[str, Any] = {}
        self.errors: list[str] = []

    def row(self, keys: tuple[str, ...], fn: Callable[[], None]) -> None:
        """Run ``fn``; if it raises, its cells ``keys`` read "error" ("n/a"
        for ``FailoverNotSupported``) and the reason goes to the notes."""
        try:
            fn()
        except FailoverNotSupported as exc:
            for key in keys:
                self.cells[key] = "n/a"
            self.data[keys[0]] = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - report and continue
            exc = _innermost(exc)
            log(f"  {self.cluster.name}: {keys[0]} failed: {exc!r}")
            log(traceback.format_exc(limit=3))
            for key in keys:
                self.cells.setdefault(key, "error")
            self.data[keys[0]] = {"error": repr(exc)}
            first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
            self.errors.append(f"{self.cluster.label}: {keys[0]} failed: {type(exc).__name__}: {first_line}")

    def rate_and_latency(self, rate_key: str, latency_key: str, rate: float, latency: dict[str, float]) -> None:
        """Cells of a throughput row: the rate and ``p50 / p99`` ms."""
        self.cells[rate_key] = _fmt_rate(rate)
        self.cells[latency_key] = _pair(latency["p50_ms"], latency["p99_ms"])

    def rss(self) -> None:
        """The RSS row: MiB of each process of the cluster."""
        values = self.cluster.rss_bytes()
        self.cells["rss_mib"] = " / ".join("dead" if v is None else f"{v / 2**20:.0f}" for v in values)
        self.data["rss_bytes"] = values

    def failover(self, trials: int) -> None:
        """The failover row: ``failover_trials`` ``trials`` times."""
        result = failover_trials(self.cluster, trials, log=log)
        self.cells["failover_ms"] = summary_cell(result.summary, result.failed_trials)
        self.data["failover"] = result.as_dict()

    def result(self, rows: Sequence[tuple[str, str]]) -> dict[str, Any]:
        """The system's result; a cell of ``rows`` no row filled reads "-"."""
        for key, _label in rows:
            self.cells.setdefault(key, "-")
        return {"status": "ok", "cells": self.cells, "data": self.data, "versions": self.cluster.versions(),
                "notes": self.cluster.notes() + self.errors}


def table_and_notes(
    results: dict[str, dict[str, Any]], rows: Sequence[tuple[str, str]], status_cell: Callable[[str, str], str]
) -> list[str]:
    """The lines of the table (a column per system, ``status_cell(name,
    status)`` filling the column of a system that did not run), the versions
    (each once) and the notes of ``results``."""
    names = list(results)
    table_rows = []
    for key, label in rows:
        cells = []
        for name in names:
            result = results[name]
            if result["status"] == "ok":
                cells.append(result["cells"].get(key, "-"))
            else:
                cells.append(status_cell(name, result["status"]))
        table_rows.append((label, cells))
    lines = [format_table([results[n].get("label", n) for n in names], table_rows), "", "versions:"]
    seen = set()
    for name in names:
        for what, version in results[name].get("versions", {}).items():
            if (what, version) not in seen:
                seen.add((what, version))
                lines.append(f"  {what}: {version}")
    lines.append("notes:")
    for name in names:
        result = results[name]
        if result["status"] == "ok":
            lines.extend(f"  - {note}" for note in result["notes"])
        else:
            lines.append(f"  - {result.get('label', name)}: {result['status']}: {result['reason']}")
    return lines


def run_peer(cluster: Cluster, sizes: dict[str, Any], value_bytes: int) -> dict[str, Any]:
    """Every row for one system; a failing row is reported, the others still run."""
    rows = PeerRows(cluster)
    data, errors = rows.data, rows.errors

    log(f"[{cluster.name}] starting 3 voters")
    started = time.monotonic()
    cluster.start()
    log(f"[{cluster.name}] up in {time.monotonic() - started:.1f} s; warming up {sizes['warmup_s']:.0f} s")
    try:
        warm_up(cluster, sizes["warmup_s"], value_bytes)
    except Exception as exc:  # noqa: BLE001 - the rows will show what is wrong
        exc = _innermost(exc)
        log(f"[{cluster.name}] warm-up failed: {exc!r}")
        errors.append(f"{cluster.label}: warm-up failed: {type(exc).__name__}: {exc}")

    def seq() -> None:
        cluster.wait_healthy(30.0)
        result = sequential_writes(cluster, sizes["seq"], value_bytes, sizes["row_limit_s"])
        rows.rate_and_latency("seq_writes_per_s", "seq_latency_ms", result.requests_per_s, result.latency)
        data["sequential"] = result.as_dict()
        log(f"[{cluster.name}] seq: {result.requests_per_s:,.0f}/s p50 {result.latency['p50_ms']:.2f} ms")

    def inflight() -> None:
        cluster.wait_healthy(30.0)
        result = concurrent_writes(cluster, sizes["concurrent"], 64, value_bytes, sizes["row_limit_s"])
        rows.rate_and_latency("inflight_writes_per_s", "inflight_latency_ms", result.requests_per_s, result.latency)
        data["in_flight_64"] = result.as_dict()
        log(f"[{cluster.name}] 64 in flight: {result.requests_per_s:,.0f}/s")

    def batches() -> None:
        cluster.wait_healthy(30.0)
        result = batched_records(cluster, sizes["batches"], 100, value_bytes, sizes["row_limit_s"])
        rows.rate_and_latency("batch_records_per_s", "batch_latency_ms", result.records_per_s, result.latency)
        data["batched_100"] = result.as_dict()
        log(f"[{cluster.name}] batches: {result.records_per_s:,.0f} records/s")

    def concurrent_batches() -> None:
        cluster.wait_healthy(30.0)
        result = concurrent_batched_records(cluster, sizes["batches_concurrent"], BATCH_CLIENTS, 100, value_bytes,
                                            sizes["row_limit_s"])
        rows.rate_and_latency("batch8_records_per_s", "batch8_latency_ms", result.records_per_s, result.latency)
        data[f"batched_100_{BATCH_CLIENTS}_clients"] = result.as_dict()
        log(f"[{cluster.name}] batches from {BATCH_CLIENTS} clients: {result.records_per_s:,.0f} records/s")

    chosen = sizes.get("rows", ROW_GROUPS)
    for group, keys, fn in (
        ("seq", ("seq_writes_per_s", "seq_latency_ms"), seq),
        ("inflight", ("inflight_writes_per_s", "inflight_latency_ms"), inflight),
        ("batch", ("batch_records_per_s", "batch_latency_ms"), batches),
        ("batch8", ("batch8_records_per_s", "batch8_latency_ms"), concurrent_batches),
        ("rss", ("rss_mib",), rows.rss),
        ("failover", ("failover_ms",), lambda: rows.failover(sizes["trials"])),
    ):
        if group in chosen:
            rows.row(keys, fn)
    return rows.result(ROWS)


def run_peers(
    peers: Sequence[type[Cluster]],
    make_cluster: Callable[[type[Cluster]], Cluster],
    run: Callable[[Cluster], dict[str, Any]],
    *,
    unavailable_status: str,
    failed_status: str,
) -> dict[str, dict[str, Any]]:
    """Each system in turn: its result from ``run`` (the cluster stopped
    afterwards), or a result with ``unavailable_status`` when it is not
    installed, ``failed_status`` when it did not start (its processes' log
    tails go to the log). Raises ``KeyboardInterrupt`` (stop everything with
    ``cleanup_all``)."""
    results: dict[str, dict[str, Any]] = {}
    for cls in peers:
        name = cls.name
        problem = cls.availability_problem()
        if problem:
            log(f"[{name}] skipped: {problem}")
            results[name] = {"status": unavailable_status, "reason": problem, "label": cls.label}
            continue
        cluster = make_cluster(cls)
        try:
            results[name] = run(cluster)
        except (PeerUnavailable, ProcessStartError, TimeoutError) as exc:
            log(f"[{name}] could not run: {exc}")
            for process in getattr(cluster, "processes", []):
                log(f"--- {process.name} log tail ({process.log_path}):\n{process.log_tail(20)}")
            results[name] = {"status": failed_status, "reason": str(exc).splitlines()[0]}
        finally:
            cluster.stop()
        results[name]["label"] = cls.label
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.quorum_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peers", default=DEFAULT_PEERS,
                        help=f"comma-separated, from {', '.join(PEERS)} (default: {DEFAULT_PEERS})")
    parser.add_argument("--quick", action="store_true", help="fewer requests and 3 failover trials")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    parser.add_argument("--value-bytes", type=int, default=100, help="bytes per record (default 100)")
    parser.add_argument("--trials", type=int, help="failover trials (default 10, 3 with --quick)")
    parser.add_argument("--rows", default=",".join(ROW_GROUPS),
                        help=f"comma-separated rows to run, from {', '.join(ROW_GROUPS)} (default: all; the others "
                             "read \"-\"), e.g. --rows failover")
    args = parser.parse_args(argv)
    args.row_names = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown_rows = [r for r in args.row_names if r not in ROW_GROUPS]
    if unknown_rows or not args.row_names:
        parser.error(f"unknown or no row(s) {', '.join(unknown_rows)}; known: {', '.join(ROW_GROUPS)}")
    args.peer_names = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in args.peer_names if p not in PEERS]
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_cleanup_handlers()
    sizes = dict(QUICK if args.quick else FULL)
    if args.trials is not None:
        sizes["trials"] = max(1, min(args.trials, 100))
    sizes["rows"] = tuple(args.row_names)
    machine = machine_info()
    try:
        results = run_peers(
            [PEERS[name] for name in args.peer_names],
            lambda cls: cls(value_bytes=args.value_bytes, log=log),
            lambda cluster: run_peer(cluster, sizes, args.value_bytes),
            unavailable_status="skipped",
            failed_status="failed",
        )
    except KeyboardInterrupt:
        log("interrupted: stopping every process and removing temp dirs")
        cleanup_all()
        return 130

    print(render(machine, sizes, args, results))
    if args.json:
        write_json(args.json, {"machine": machine, "sizes": sizes, "value_bytes": args.value_bytes,
                               "command": " ".join(["python -m bench.quorum_bench", *(argv or sys.argv[1:])]),
                               "results": results})
        log(f"wrote {args.json}")
    return 0


def render(machine: dict[str, str], sizes: dict[str, Any], args: argparse.Namespace,
           results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "pykraft quorum benchmark: 3 voters per system, separate processes, 127.0.0.1, data on disk",
        f"machine: {machine['nproc']} cpus, {machine['cpu_model']}, {machine['memory']}, "
        f"kernel {machine['kernel']}, python {machine['python']}",
        f"date: {machine['date']}; data dirs under {machine['data_dirs']}; "
        f"load average at start {machine['load_average_at_start']} (other jobs on the machine skew every figure)",
        f"workload: {args.value_bytes}-byte records; seq {sizes['seq']} writes, 64 in flight {sizes['concurrent']} "
        f"writes, {sizes['batches']} batches of 100 from 1 client, {sizes['batches_concurrent']} from "
        f"{BATCH_CLIENTS} clients, {sizes['trials']} failover trials; "
        f"{sizes['warmup_s']:.0f} s warm-up; each row stops at {sizes['row_limit_s']:.0f} s"
        + (" (--quick)" if args.quick else ""),
        "",
    ]

    def status_cell(name: str, status: str) -> str:
        if status == "skipped":
            return "not available yet" if name == "pykraft" else "not installed"
        return "failed to start"

    lines.extend(table_and_notes(results, ROWS, status_cell))
    lines.append("  - failover = kill -9 of the leader to the first committed write, client retrying every 20 ms; "
                 "each system's own election timeouts (defaults) dominate it.")
    lines.append("  - all clients are Python on the same 2 cores as the 3 servers: client CPU is part of every figure.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
