"""The controller's CPU for N brokers' first heartbeats, in process.

    python -m bench.unfence_cpu_bench [--brokers 5000] [--rounds 3]

N brokers registered (fenced, as after registration or a controller
failover that finds them fenced), 10 topics of 100 partitions; then each
broker's first heartbeat arrives, caught up, and unfences it: one batch
per broker, as in ``bench.heartbeat_bench``'s first seconds. Timed in
process CPU time (``time.process_time``): all N ``on_fetch`` calls, then
N more (steady state: every broker Online). No runtime, no network, no
disk: run it under each tree (``PYTHONPATH=<tree>``), alternating, to
compare them. It imports nothing of ``bench`` so that it runs against a
tree without this file (``python bench/unfence_cpu_bench.py``).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Sequence

from quorum import Entry, RecordKind
from registration import (
    BrokerHeartbeat,
    BrokerState,
    ClusterImage,
    Controller,
    ControllerConfig,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    encode_record,
)

CLUSTER_ID = "unfence-bench"


def _cluster(brokers: int) -> ClusterImage:
    records: list = [
        RegisterBrokerRecord(broker_id=b, incarnation_id=f"b{b}", listeners=(("PLAINTEXT", "127.0.0.1", 9092),))
        for b in range(brokers)
    ]
    for topic in range(10):
        records.append(TopicRecord(name=f"t{topic}", topic_id=f"topic-id-{topic}"))
        for p in range(100):
            replicas = tuple((topic * 100 + p + k) % brokers for k in range(3))
            records.append(
                PartitionRecord(
                    topic_id=f"topic-id-{topic}", partition_id=p, replicas=replicas, isr=replicas, leader=replicas[0]
                )
            )
    image = ClusterImage()
    image.apply([Entry(i, 1, RecordKind.DATA, encode_record(r)) for i, r in enumerate(records)])
    return image


def storm_once(snapshot: bytes, brokers: int) -> tuple[float, float, int]:
    """(CPU s of the N first heartbeats, CPU s of N more, batches proposed)."""
    image = ClusterImage()
    image.restore(snapshot)
    end = image.offset
    controller = Controller(ControllerConfig(cluster_id=CLUSTER_ID), image)
    controller.activate(0, next_write_offset=end)
    heartbeats = [BrokerHeartbeat(broker_id=b, broker_epoch=b).to_extension() for b in range(brokers)]
    gc.collect()
    started = time.process_time()
    for broker_id, heartbeat in enumerate(heartbeats):
        controller.on_fetch(broker_id, heartbeat, end, 1_000)
    first_s = time.process_time() - started
    batches = len(controller.take_proposals())
    assert controller.working_image.brokers_in_state(BrokerState.ONLINE) == list(range(brokers))
    started = time.process_time()
    for broker_id, heartbeat in enumerate(heartbeats):
        controller.on_fetch(broker_id, heartbeat, end + brokers, 1_500)
    steady_s = time.process_time() - started
    return first_s, steady_s, batches


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    snapshot = _cluster(args.brokers).snapshot()
    firsts, steadies = [], []
    for _ in range(max(1, args.rounds)):
        first_s, steady_s, batches = storm_once(snapshot, args.brokers)
        assert batches == args.brokers, batches
        firsts.append(first_s * 1e3)
        steadies.append(steady_s * 1e3)
    print(f"{args.brokers} brokers' heartbeats on one controller, {len(firsts)} rounds, process CPU:")
    for label, values in (("first heartbeats (each unfences)", firsts), ("next heartbeats (all Online)", steadies)):
        print(f"  {label:<33} min {min(values):8.1f} ms   median {statistics.median(values):8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
