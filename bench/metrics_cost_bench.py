"""What metrics cost on the hot path (issue 25): the same 3-voter
`kraft-quorum node` cluster with metrics off (`--no-metrics-enabled`) and
on (`--metrics`, every node scraped once a second meanwhile, as a
Prometheus would, more often than its 15 s default), in the same run.

    python -m bench.metrics_cost_bench [--quick] [--rounds N] [--json OUT]

Rows: sequential write p50 (one client, one committed write at a time) and
batched records/s (one client, batches of 100). The variants alternate
(off, on, then on, off, ...) so that drift of the machine falls on both;
each cell is the median over rounds. The goal: within 3 %.

On a loaded machine those wall-clock rows are noise far above 3 %, so two
more rows measure the metrics' own cost where load barely reaches: process
CPU per committed write through ``QuorumRuntime`` (bench.write_cpu_bench:
three voters in one process, memory storage and network, mock clock), one
writer and 64 in flight, metrics off and on, alternating.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
import urllib.request
from typing import Any

import trio
import trio.testing

from ._common import (
    batched_records,
    cleanup_all,
    format_table,
    free_ports,
    install_cleanup_handlers,
    machine_info,
    make_value,
    sequential_writes,
    write_json,
)
from .peers.pykraft_peer import PykraftCluster
from .write_cpu_bench import one_round as cpu_per_write_round

FULL = {"seq": 2000, "batches": 300, "rounds": 3, "warmup_s": 3.0, "row_limit_s": 60.0, "cpu_writes": 3000, "cpu_rounds": 6}
QUICK = {"seq": 400, "batches": 60, "rounds": 2, "warmup_s": 2.0, "row_limit_s": 30.0, "cpu_writes": 2000, "cpu_rounds": 4}
SCRAPE_INTERVAL_S = 1.0
VALUE_BYTES = 100


class _Scraper:
    """GET /metrics from every node every SCRAPE_INTERVAL_S, in a thread of
    the bench process (not the nodes'), until stopped."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.scrapes = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def _run(self) -> None:
        # A scrape at once, then one every interval: a quick row on a quiet
        # machine ends within the first interval.
        while True:
            for port in self.ports:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:  # noqa: S310
                        answer.read()
                    self.scrapes += 1
                except OSError:
                    self.failures += 1
            if self._stop.wait(SCRAPE_INTERVAL_S):
                return

    def __enter__(self) -> _Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def measure(variant: str, sizes: dict[str, Any]) -> dict[str, float]:
    """One cluster with metrics ``variant`` ("on" or "off"): its seq p50 and
    batched records/s."""
    metrics_ports = free_ports(3) if variant == "on" else []

    def node_args(index: int) -> list[str]:
        if variant == "off":
            return ["--no-metrics-enabled"]
        return ["--metrics", f"127.0.0.1:{metrics_ports[index]}"]

    cluster = PykraftCluster(VALUE_BYTES, log=lambda line: None, node_args=node_args)
    cluster.start()
    try:
        values = [make_value(i, VALUE_BYTES, b"warmup") for i in range(100_000)]
        cluster.write_many(values, 64, time.monotonic() + sizes["warmup_s"])
        scraper = _Scraper(metrics_ports)
        with scraper if variant == "on" else contextlib.nullcontext():
            seq = sequential_writes(cluster, sizes["seq"], VALUE_BYTES, sizes["row_limit_s"])
            batches = batched_records(cluster, sizes["batches"], 100, VALUE_BYTES, sizes["row_limit_s"])
        if variant == "on" and (scraper.scrapes == 0 or scraper.failures):
            raise RuntimeError(f"scrapes: {scraper.scrapes} ok, {scraper.failures} failed")
    finally:
        cluster.stop()
    return {"seq_p50_ms": seq.latency["p50_ms"], "batch_records_per_s": batches.records_per_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_cost_bench")
    parser.add_argument("--quick", action="store_true", help="fewer writes, 2 rounds")
    parser.add_argument("--rounds", type=int, help="off/on pairs (default 3, 2 with --quick)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else FULL)
    rounds = args.rounds or sizes["rounds"]
    install_cleanup_handlers()
    samples: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    cpu_samples: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    try:
        for round_index in range(rounds):
            order = ("off", "on") if round_index % 2 == 0 else ("on", "off")
            for variant in order:
                figures = measure(variant, sizes)
                samples[variant].append(figures)
                print(f"[metrics_cost] round {round_index + 1} metrics {variant}: seq p50 {figures['seq_p50_ms']:.2f} ms, "
                      f"batched {figures['batch_records_per_s']:,.0f} records/s", file=sys.stderr, flush=True)
        # The CPU rows: no processes, no sockets (see the module docstring).
        for round_index in range(sizes["cpu_rounds"]):
            for enabled in (False, True) if round_index % 2 == 0 else (True, False):
                sequential_us, in_flight_us, _batched_record_us = trio.run(
                    cpu_per_write_round, sizes["cpu_writes"], enabled, clock=trio.testing.MockClock(autojump_threshold=0)
                )
                cpu_samples["on" if enabled else "off"].append(
                    {"cpu_sequential_us": sequential_us, "cpu_in_flight_us": in_flight_us}
                )
    finally:
        cleanup_all()
    median = {
        variant: {
            key: statistics.median(sample[key] for sample in runs)
            for runs in (samples[variant], cpu_samples[variant])
            for key in runs[0]
        }
        for variant in ("off", "on")
    }

    def change(key: str) -> float:
        return 100.0 * (median["on"][key] - median["off"][key]) / median["off"][key]

    rows = [
        ("seq write p50 ms", [f"{median['off']['seq_p50_ms']:.2f}", f"{median['on']['seq_p50_ms']:.2f}", f"{change('seq_p50_ms'):+.1f} %"]),
        ("batched records/s", [f"{median['off']['batch_records_per_s']:,.0f}", f"{median['on']['batch_records_per_s']:,.0f}",
                               f"{change('batch_records_per_s'):+.1f} %"]),
        ("CPU µs per write, sequential", [f"{median['off']['cpu_sequential_us']:.1f}", f"{median['on']['cpu_sequential_us']:.1f}",
                                          f"{change('cpu_sequential_us'):+.1f} %"]),
        ("CPU µs per write, 64 in flight", [f"{median['off']['cpu_in_flight_us']:.1f}", f"{median['on']['cpu_in_flight_us']:.1f}",
                                            f"{change('cpu_in_flight_us'):+.1f} %"]),
    ]  # fmt: skip
    machine = machine_info()
    print(f"\nMetrics cost: 3 kraft-quorum voters, fsync on, {rounds} off/on rounds (median), "
          f"{sizes['seq']} sequential writes, {sizes['batches']} batches of 100; CPU rows: {sizes['cpu_rounds']} "
          f"rounds of {sizes['cpu_writes']} writes"
          + (" (--quick)" if args.quick else "")
          + f"; {machine['nproc']} x {machine['cpu_model']}, load {machine['load_average_at_start']}")
    print(format_table(["metrics off", "metrics on (scraped 1/s)", "on vs off"], rows))
    if args.json:
        write_json(args.json, {"sizes": sizes, "rounds": rounds, "samples": samples, "cpu_samples": cpu_samples,
                               "median": median, "machine": machine})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
