"""The quorum's commit of the fence's batch, in each voter process's CPU time.

    python -m bench.fence_commit_cpu [--rounds 6] [--quick] [--settle-s 0.3]

The batch is the one ``bench.registration_bench`` fences with (its cluster
built, every other broker heartbeating, the hot broker's session expiring:
10,001 records, 331 KiB at full size). Then ``--rounds`` times: three fresh
``kraft-quorum node`` processes on loopback (fsync on), a warm-up record,
and the batch proposed as ``registration_bench`` proposes it (requests of
at most the wire's ``records_per_request_max`` records, all in flight at
once), timed until the last is committed. Each voter process's CPU time
(user and system, every thread, from ``/proc/PID/task/*/schedstat``) is
taken from just before the proposal to ``--settle-s`` after the commit, so
that the followers' learning of the high watermark and their apply (to the
key-value machine these nodes run) count too. Printed per round: the wall
time, the leader's CPU and the followers', and their sum; then the minimum
and median of the wall time and of the sum.

On two cores shared by three voters the commit is bound by their CPU, so
the sum is what a change to the quorum's path moves first, and it depends
far less on other load than the wall time does. Compare trees alternating,
``PYTHONPATH=<tree>``, as for ``bench.fence_cpu_bench`` (which times the
controller's in-process stages). Linux only (schedstat).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import trio

from quorum.client import QuorumClient
from quorum.wire import DEFAULT_LIMITS
from registration import BrokerHeartbeat

from ._common import ManagedProcess, free_ports, make_temp_dir, remove_temp_dir
from .registration_bench import FULL, HOT_BROKER, QUICK, Sizes, build_cluster, log


def fence_batch(sizes: Sizes) -> list[bytes]:
    """The records of the hot broker's fence, as the controller proposes them."""
    metadata_log, controller, _ = build_cluster(sizes)
    now_ms = controller.config.session_timeout_ms + 1
    for broker_id in range(sizes.brokers):
        if broker_id != HOT_BROKER:
            heartbeat = BrokerHeartbeat(broker_id=broker_id, broker_epoch=broker_id).to_extension()
            controller.on_fetch(broker_id, heartbeat, metadata_log.end_offset, now_ms)
    controller.tick(now_ms)
    (proposal,) = controller.take_proposals()
    return list(proposal.records)


def on_cpu_s(pid: int) -> float:
    """CPU time of every thread of ``pid`` so far (schedstat: nanoseconds)."""
    total_ns = 0
    for path in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total_ns += int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total_ns / 1e9


def commit_once(records: list[bytes], settle_s: float) -> tuple[float, float, list[float]]:
    """Three fresh voters commit ``records`` once: (wall s, leader CPU s,
    followers' CPU s)."""
    ports = free_ports(3)
    voters = ",".join(f"{index + 1}@127.0.0.1:{port}" for index, port in enumerate(ports))
    binary = str(Path(sys.executable).parent / "kraft-quorum")
    directory = make_temp_dir("fence-commit")
    processes = [
        ManagedProcess(
            f"n{index + 1}",
            [binary, "node", "--plaintext", "--node-id", str(index + 1), "--voters", voters,
             "--data-dir", str(directory / f"n{index + 1}"), "--log-level", "WARNING"],
            directory / f"n{index + 1}.out",
        )
        for index in range(3)
    ]  # fmt: skip
    try:
        for process in processes:
            process.start()

        async def commit() -> tuple[float, int, list[float]]:
            bootstrap = [f"{index + 1}@127.0.0.1:{port}" for index, port in enumerate(ports)]
            async with QuorumClient(bootstrap, request_timeout_s=60, retry_timeout_s=60) as client:
                await client.propose([b"warm-up"])
                leader_id = (await client.describe()).leader_id
                await trio.sleep(settle_s)
                limit = DEFAULT_LIMITS.records_per_request_max
                chunks = [records[start : start + limit] for start in range(0, len(records), limit)]
                cpu_before = [on_cpu_s(process.pid) for process in processes]
                started = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for chunk in chunks:
                        nursery.start_soon(client.propose, chunk)
                wall_s = time.perf_counter() - started
                await trio.sleep(settle_s)
                cpu = [on_cpu_s(process.pid) - before for process, before in zip(processes, cpu_before)]
                return wall_s, leader_id, cpu

        wall_s, leader_id, cpu = trio.run(commit)
    finally:
        for process in processes:
            process.terminate()
        remove_temp_dir(directory)
    if leader_id is None:
        raise RuntimeError("no leader named after the warm-up committed")
    followers = [seconds for index, seconds in enumerate(cpu) if index + 1 != leader_id]
    return wall_s, cpu[leader_id - 1], followers


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fence_commit_cpu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--quick", action="store_true", help="a tenth of the size (a 1,001-record batch)")
    parser.add_argument("--settle-s", type=float, default=0.3, help="CPU counted this long after the commit too")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.settle_s < 0:
        parser.error("--rounds must be at least 1 and --settle-s not negative")
    log("[fence-commit] building the cluster and the fence's batch...")
    records = fence_batch(QUICK if args.quick else FULL)
    print(f"fence batch: {len(records)} records, {sum(map(len, records)) / 1024:.0f} KiB; "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    walls, sums = [], []
    for round_index in range(args.rounds):
        wall_s, leader_s, followers_s = commit_once(records, args.settle_s)
        walls.append(wall_s)
        sums.append(leader_s + sum(followers_s))
        print(
            f"  round {round_index + 1}: committed in {wall_s * 1e3:.0f} ms; CPU leader {leader_s * 1e3:.1f} ms, "
            f"followers {', '.join(f'{seconds * 1e3:.1f}' for seconds in followers_s)} ms, "
            f"sum {sums[-1] * 1e3:.1f} ms (load {os.getloadavg()[0]:.2f})",
            flush=True,
        )
    print(
        f"wall min {min(walls) * 1e3:.0f} ms, median {statistics.median(walls) * 1e3:.0f} ms; "
        f"CPU of the three voters min {min(sums) * 1e3:.0f} ms, median {statistics.median(sums) * 1e3:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
