"""CPU time per committed write through ``QuorumRuntime``, without disks or
sockets: three voters on a ``MemoryNetwork`` with ``MemoryStorage``, driven
by trio's ``MockClock`` (so timers cost no waiting), all in one process.

    python -m bench.write_cpu_bench [--writes 3000] [--rounds 3]

It measures the Python cost of the write path alone (core, host, runtime,
state machine), which the TCP-and-fsync rows of ``bench.quorum_bench`` bury
under disk and scheduling noise; process CPU time is far less sensitive to
other load on the machine than wall-clock throughput. Compare two trees by
running it under each (``PYTHONPATH=<tree>``), alternating, several rounds.
Prints the median of ``--rounds`` for one writer at a time and for 64
writers in flight, in microseconds of CPU per committed write, and for one
writer proposing batches of 100 records, per committed record (all three
voters' work, since they share the process).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import msgpack
import trio
import trio.testing

from quorum import QuorumConfig, Role
from quorum.runtime import KeyValueStateMachine, MemoryNetwork, Metrics, QuorumRuntime
from quorum.storage import MemoryStorage

IN_FLIGHT = 64
BATCH_RECORDS = 100


async def one_round(writes: int, metrics_enabled: bool = True) -> tuple[float, float, float]:
    """(sequential, 64 in flight) CPU µs per committed write, and (batches
    of ``BATCH_RECORDS``) CPU µs per committed record; with the nodes'
    metrics kept or not (bench/metrics_cost_bench.py compares)."""
    network = MemoryNetwork()
    runtimes: list[QuorumRuntime] = []
    record = msgpack.packb([b"k", b"v" * 100])
    async with trio.open_nursery() as nursery:
        for node_id in (1, 2, 3):
            runtime = QuorumRuntime(
                QuorumConfig(node_id=node_id, voters=(1, 2, 3)),
                KeyValueStateMachine(),
                storage=MemoryStorage(),
                transport=network.transport(node_id),
                rng=random.Random(node_id),
                snapshot_every_records=1000,
                metrics=Metrics(node_id, enabled=metrics_enabled),
            )
            await nursery.start(runtime.run)
            runtimes.append(runtime)
        with trio.fail_after(60):
            while not any(r.role is Role.LEADER and r.node.leader_has_committed_own_epoch for r in runtimes):
                await trio.sleep(0.05)
        leader = next(r for r in runtimes if r.role is Role.LEADER)

        started = time.process_time()
        for _ in range(writes):
            await leader.propose([record])
        sequential_us = (time.process_time() - started) / writes * 1e6

        per_writer = writes // IN_FLIGHT

        async def writer() -> None:
            for _ in range(per_writer):
                await leader.propose([record])

        started = time.process_time()
        async with trio.open_nursery() as writers:
            for _ in range(IN_FLIGHT):
                writers.start_soon(writer)
        in_flight_us = (time.process_time() - started) / (IN_FLIGHT * per_writer) * 1e6

        batches = max(1, writes // 10)
        batch = [record] * BATCH_RECORDS
        started = time.process_time()
        for _ in range(batches):
            await leader.propose(batch)
        batched_record_us = (time.process_time() - started) / (batches * BATCH_RECORDS) * 1e6
        nursery.cancel_scope.cancel()
    return sequential_us, in_flight_us, batched_record_us


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.write_cpu_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=3000, help="committed writes per measurement (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the median is printed (default 3)")
    parser.add_argument("--quick", action="store_true", help="1,000 writes, one round")
    args = parser.parse_args(argv)
    writes, rounds = (1000, 1) if args.quick else (args.writes, args.rounds)
    if writes < IN_FLIGHT or rounds < 1:
        parser.error(f"--writes must be at least {IN_FLIGHT} and --rounds at least 1")
    results = [trio.run(one_round, writes, clock=trio.testing.MockClock(autojump_threshold=0)) for _ in range(rounds)]
    sequential = statistics.median(result[0] for result in results)
    in_flight = statistics.median(result[1] for result in results)
    batched = statistics.median(result[2] for result in results)
    print(f"write path CPU per committed write (3 voters in one process, median of {rounds}):")
    print(f"  sequential          {sequential:7.1f} µs")
    print(f"  {IN_FLIGHT} in flight        {in_flight:7.1f} µs")
    print(f"batches of {BATCH_RECORDS}, per committed record:")
    print(f"  one writer          {batched:7.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
