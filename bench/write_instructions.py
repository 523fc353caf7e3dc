"""One phase of ``bench.write_cpu_bench``'s setup (three voters in one
process on a ``MemoryNetwork``, ``MemoryStorage``, trio's ``MockClock``),
run alone, for instruction counts under cachegrind:

    PYTHONHASHSEED=0 PYTHONPATH=<tree> valgrind --tool=cachegrind --cache-sim=no \\
        .venv/bin/python bench/write_instructions.py sequential|in-flight|batched COUNT

COUNT is writes for ``sequential`` and ``in-flight`` (64 writers, COUNT // 64
each) and batches of 100 records for ``batched``. The difference of two runs
with different COUNTs, divided by the difference in writes (or records),
is the count per write with start-up cancelled out (docs/benchmarks.md,
"Instructions per write"). Run as a file, not as a module, so that it
imports the ``quorum`` of the tree on ``PYTHONPATH``; it uses only what
26026ee already had, so the same script measures an old tree too.
"""

from __future__ import annotations

import inspect
import random
import sys

import msgpack
import trio
import trio.testing

from quorum import QuorumConfig, Role
from quorum.runtime import KeyValueStateMachine, MemoryNetwork, Metrics, QuorumRuntime
from quorum.storage import MemoryStorage

IN_FLIGHT = 64
BATCH_RECORDS = 100
PHASES = ("sequential", "in-flight", "batched")


def _metrics(node_id: int) -> Metrics:
    # Older trees take no node id.
    return Metrics(node_id) if "node_id" in inspect.signature(Metrics.__init__).parameters else Metrics()


async def run_phase(phase: str, count: int) -> None:
    """Elect a leader among three voters, then run ``phase`` ``count`` times."""
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
                metrics=_metrics(node_id),
            )
            await nursery.start(runtime.run)
            runtimes.append(runtime)
        with trio.fail_after(60):
            while not any(r.role is Role.LEADER and r.node.leader_has_committed_own_epoch for r in runtimes):
                await trio.sleep(0.05)
        leader = next(r for r in runtimes if r.role is Role.LEADER)
        if phase == "sequential":
            for _ in range(count):
                await leader.propose([record])
        elif phase == "in-flight":

            async def writer() -> None:
                for _ in range(count // IN_FLIGHT):
                    await leader.propose([record])

            async with trio.open_nursery() as writers:
                for _ in range(IN_FLIGHT):
                    writers.start_soon(writer)
        else:
            batch = [record] * BATCH_RECORDS
            for _ in range(count):
                await leader.propose(batch)
        nursery.cancel_scope.cancel()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in PHASES or not argv[1].isdigit():
        print(f"usage: python bench/write_instructions.py {'|'.join(PHASES)} COUNT", file=sys.stderr)
        return 2
    trio.run(run_phase, argv[0], int(argv[1]), clock=trio.testing.MockClock(autojump_threshold=0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
