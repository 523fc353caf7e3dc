"""CPU, context switches and system calls per write, per process, on three
``kraft-quorum node`` processes (fsync on; plaintext, or mutual TLS with
``--tls``), around three of
``bench.quorum_bench``'s rows:

    PYTHONPATH=<tree> .venv/bin/python bench/write_syscalls.py [--rows idle,seq,inflight,batch]
        [--seq-writes 800] [--inflight-writes 8000] [--batches 300] [--idle-s 4] [--pids-file PATH] [--tls]

Run as a file, not as a module, so that it drives the ``quorum`` (and the
``bench.peers`` cluster) of the tree on ``PYTHONPATH``: the same script
measures an old tree too. Rows: ``seq`` one write at a time; ``inflight``
64 writes outstanding; ``batch`` one client's batches of 100 records (per
record); ``idle`` nothing for ``--idle-s`` seconds, whose rate is then
taken off every later row ("net of idle"): each node's ticker costs about
20 ms of CPU a second on a loaded machine, several hundred µs per write
when a loaded machine manages only 100 sequential writes a second.

CPU comes from ``/proc/PID/stat`` (utime + stime, in clock ticks) and from
``perf stat``'s task-clock; context switches and system calls from ``perf
stat`` software events and syscall tracepoints, which count the same on a
quiet or a loaded machine (the counts of a row still depend a little on how
writes group, which load changes). Without ``perf`` the syscall columns are
left out. docs/benchmarks.md, "System calls per write", has figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench.peers.pykraft_peer import PykraftCluster, PykraftTlsCluster

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
VALUE = b"x" * 100
IN_FLIGHT = 64
BATCH_RECORDS = 100
# perf event -> column name
EVENTS = {
    "task-clock": "task_clock_ms",
    "context-switches": "cs",
    "raw_syscalls:sys_enter": "syscalls",
    "syscalls:sys_enter_futex": "futex",
    "syscalls:sys_enter_epoll_wait": "epoll_wait",
    "syscalls:sys_enter_epoll_ctl": "epoll_ctl",
    "syscalls:sys_enter_recvfrom": "recvfrom",
    "syscalls:sys_enter_sendto": "sendto",
    "syscalls:sys_enter_read": "read",
    "syscalls:sys_enter_write": "write",
    "syscalls:sys_enter_fdatasync": "fdatasync",
}


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


class PerfCounters:
    """``perf stat`` attached to one process until ``stop``."""

    def __init__(self, pid: int, output: Path) -> None:
        self.output = output
        self.process = subprocess.Popen(
            ["perf", "stat", "-x", ",", "-o", str(output), "-e", ",".join(EVENTS), "-p", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> dict[str, float]:
        self.process.send_signal(signal.SIGINT)
        self.process.wait()
        counts: dict[str, float] = {}
        for line in self.output.read_text().splitlines():
            parts = line.split(",")
            if len(parts) > 3 and parts[2] in EVENTS:
                try:
                    counts[EVENTS[parts[2]]] = float(parts[0])
                except ValueError:  # "<not counted>"
                    pass
        return counts


def run_row(cluster: PykraftCluster, row: str, args: argparse.Namespace) -> int:
    """Run ``row``; returns the writes (records) it made."""
    deadline = time.monotonic() + 120
    if row == "idle":
        time.sleep(args.idle_s)
        return 1
    if row == "seq":
        cluster.run_sequential([VALUE] * args.seq_writes, deadline)
        return args.seq_writes
    if row == "inflight":
        cluster.write_many([VALUE] * args.inflight_writes, IN_FLIGHT, deadline)
        return args.inflight_writes
    if row == "batch":
        cluster.write_batches([[VALUE] * BATCH_RECORDS for _ in range(args.batches)], deadline)
        return args.batches * BATCH_RECORDS
    raise SystemExit(f"unknown row {row!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="idle,seq,inflight,batch")
    parser.add_argument("--seq-writes", type=int, default=800)
    parser.add_argument("--inflight-writes", type=int, default=8000)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--idle-s", type=float, default=4.0)
    parser.add_argument("--pids-file", type=Path, help="write the node pids (and the leader's) here, as JSON")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--tls", action="store_true", help="mutual TLS on every connection (PykraftTlsCluster)")
    args = parser.parse_args()
    use_perf = shutil.which("perf") is not None
    scratch = Path(tempfile.mkdtemp(prefix="write-syscalls-"))
    cluster = (PykraftTlsCluster if args.tls else PykraftCluster)(log=lambda line: None)
    cluster.start()
    results: dict = {"pythonpath": os.environ.get("PYTHONPATH"), "rows": {}}
    try:
        leader = cluster.leader_index()
        assert leader is not None
        pids = [process.pid for process in cluster.processes]
        names = [f"n{i + 1}{'*' if i == leader else ''}" for i in range(len(pids))] + ["client"]
        if args.pids_file:
            args.pids_file.write_text(json.dumps({"leader": pids[leader], "pids": pids}))
        cluster.write_many([VALUE] * 2000, IN_FLIGHT, time.monotonic() + 30)  # warm-up
        idle_cpu_per_s: list[float] | None = None
        idle_counts_per_s: list[dict[str, float]] | None = None
        for row in args.rows.split(","):
            counters = [PerfCounters(pid, scratch / f"perf-{i}.txt") for i, pid in enumerate(pids)] if use_perf else []
            time.sleep(0.2)  # perf attached
            cpu_before = [process_cpu_s(pid) for pid in pids] + [own_cpu_s()]
            load = os.getloadavg()[0]
            started = time.monotonic()
            writes = run_row(cluster, row, args)
            wall_s = time.monotonic() - started
            cpu_after = [process_cpu_s(pid) for pid in pids] + [own_cpu_s()]
            counts = [counter.stop() for counter in counters]
            cpu_s = [after - before for before, after in zip(cpu_before, cpu_after)]
            figures = {"writes": writes, "wall_s": wall_s, "load": load, "cpu_us": [c / writes * 1e6 for c in cpu_s]}
            print(f"{row:8s} {writes} writes in {wall_s:.2f} s, load {load:.1f}; CPU µs per write: "
                  + "  ".join(f"{name} {value:.0f}" for name, value in zip(names, figures["cpu_us"])), flush=True)
            if row == "idle":
                idle_cpu_per_s = [c / wall_s for c in cpu_s]
                idle_counts_per_s = [{k: v / wall_s for k, v in c.items()} for c in counts]
            elif idle_cpu_per_s is not None:
                figures["net_cpu_us"] = [(c - rate * wall_s) / writes * 1e6 for c, rate in zip(cpu_s, idle_cpu_per_s)]
                print("         net of idle: " + "  ".join(
                    f"{name} {value:.0f}" for name, value in zip(names, figures["net_cpu_us"])), flush=True)
            per_write = []
            for i, node_counts in enumerate(counts):
                idle = idle_counts_per_s[i] if idle_counts_per_s and row != "idle" else {}
                net = {k: (v - idle.get(k, 0.0) * wall_s) / writes for k, v in node_counts.items()}
                if "task_clock_ms" in net:
                    net["task_clock_us"] = net.pop("task_clock_ms") * 1000
                per_write.append(net)
                if row != "idle":
                    print(f"         {names[i]:4s} per write{' (net of idle)' if idle else ''}: "
                          + " ".join(f"{k} {v:.2f}" for k, v in net.items()), flush=True)
            figures["per_write"] = per_write
            results["rows"][row] = figures
    finally:
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
