"""Controller-side scale benchmark for registration/ (no runtime, no network).

    python -m bench.registration_bench [--quick] [--json OUT]

Full size: 1,000 registered brokers, 100,000 partitions at replication
factor 3, of which one broker ("the hot broker") leads 10,000. Measures:

  build            applying the whole metadata log to one ClusterImage, and the
                   controller's own CreateTopics cost for the bulk of it
  activate         Controller.activate: copying the committed image
  fence            the hot broker's session expires: time for tick() to build
                   the batch (every leader change + the fence record), its size
                   in records and bytes, and the time for three ClusterImages
                   (three voters) to apply it
  commit           commit_batch_through_voters(): the batch proposed as one
                   atomic batch to three kraft-quorum voter processes on
                   loopback (fsync on), timed until acknowledged committed
  heartbeats       on_fetch for every broker, N rounds, steady state: us per
                   heartbeat, p50/p99, and the controller's CPU share at 1,000
                   brokers heartbeating every 500 ms (2,000/s)
  memory           tracemalloc of a 100,000-partition image (restored from a
                   snapshot) and of a working copy on top of it
  snapshot         snapshot size, time to take it, time to restore it

Seed 004 estimates 40 s for moving 10,000 leaders with one ZooKeeper write
each; the goal here is well under 0.5 s from decision to commit.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quorum import Entry, RecordKind
from registration import (
    FLAG_CLEAR,
    BrokerHeartbeat,
    BrokerRegistrationChangeRecord,
    BrokerState,
    ClusterImage,
    Controller,
    ControllerConfig,
    CreateTopicsRequest,
    NewTopic,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    encode_record,
)

CLUSTER_ID = "bench-cluster"
HOT_BROKER = 0


@dataclass(frozen=True)
class Sizes:
    brokers: int
    partitions: int
    hot_partitions: int  # led by HOT_BROKER
    partitions_per_topic: int
    heartbeat_rounds: int


FULL = Sizes(brokers=1_000, partitions=100_000, hot_partitions=10_000, partitions_per_topic=100, heartbeat_rounds=20)
QUICK = Sizes(brokers=100, partitions=10_000, hot_partitions=1_000, partitions_per_topic=100, heartbeat_rounds=5)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class Log:
    """An in-memory metadata log: entries appended in order, applied to any
    number of images."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    @property
    def end_offset(self) -> int:
        return len(self.entries)

    def append(self, records: list[bytes]) -> int:
        first = self.end_offset
        self.entries.extend(Entry(first + i, 1, RecordKind.DATA, data) for i, data in enumerate(records))
        return first


def commit_batch_through_voters(
    records: list[bytes],
    first_offset: int,
    images: Sequence[ClusterImage],
    while_committing: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Commit one atomic batch through a real 3-voter quorum and apply it.

    Three ``kraft-quorum node`` processes on loopback, fsync on, each with
    its own data directory; the batch is proposed with
    ``QuorumClient.propose`` (in requests of at most the wire's
    ``records_per_request_max`` records, all in flight at once) and timed
    until the leader acknowledges the last committed (a majority has it
    durable). Each voter then applies the batch
    to its image in parallel with the others; the images here apply it one
    after the other, and the slowest apply is what a voter adds.
    ``while_committing`` runs here once the requests have been sent, as the
    leader's controller catches up while the followers persist the batch
    (its wall and CPU time are returned; the commit's time includes it).
    """
    durable_s, catch_up_s, catch_up_cpu_s = _commit_through_processes(records, while_committing)
    entries = [Entry(first_offset + i, 1, RecordKind.DATA, data) for i, data in enumerate(records)]
    apply_s, apply_cpu_s = [], []
    for image in images:
        cpu_started = time.process_time()
        started = time.perf_counter()
        image.apply(entries)
        apply_s.append(time.perf_counter() - started)
        apply_cpu_s.append(time.process_time() - cpu_started)
    return {
        "durable_s": durable_s,
        "apply_s_per_voter": apply_s,
        "apply_cpu_s_per_voter": apply_cpu_s,
        "catch_up_s": catch_up_s,
        "catch_up_cpu_s": catch_up_cpu_s,
        "total_s": durable_s + max(apply_s),
    }


def _commit_through_processes(records: list[bytes], while_committing: Callable[[], None]) -> tuple[float, float, float]:
    import socket
    import subprocess
    import sys

    import trio

    from quorum.client import QuorumClient
    from quorum.wire import DEFAULT_LIMITS

    ports = []
    for _ in range(3):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        ports.append(probe.getsockname()[1])
        probe.close()
    voters = ",".join(f"{i + 1}@127.0.0.1:{port}" for i, port in enumerate(ports))
    binary = str(Path(sys.executable).parent / "kraft-quorum")
    with tempfile.TemporaryDirectory(prefix="registration-bench-") as directory:
        processes = [
            subprocess.Popen(
                [binary, "node", "--plaintext", "--node-id", str(i + 1), "--voters", voters, "--data-dir", f"{directory}/n{i + 1}",
                 "--log-level", "WARNING"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for i in range(3)
        ]  # fmt: skip
        try:

            async def commit() -> tuple[float, float, float]:
                # A 10,000-record request on a loaded machine can take more
                # than the client's default 5 s to answer; the figure is
                # the time taken, whatever it is.
                bootstrap = [f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports)]
                async with QuorumClient(bootstrap, request_timeout_s=60, retry_timeout_s=60) as client:
                    await client.propose([b"warm-up"])
                    # A client's ProposeRequest holds at most
                    # records_per_request_max (10,000) records, and the batch
                    # is 10,001; the controller proposes in process, with no
                    # such limit. So the batch goes as consecutive requests,
                    # all in flight at once, timed until the last commits.
                    limit = DEFAULT_LIMITS.records_per_request_max
                    chunks = [records[i : i + limit] for i in range(0, len(records), limit)]
                    started = time.perf_counter()
                    async with trio.open_nursery() as nursery:
                        for chunk in chunks:
                            nursery.start_soon(client.propose, chunk)
                        # Let the proposals' frames leave, then work as the
                        # leader's controller would while the batch commits.
                        await trio.sleep(0.002)
                        catch_up_cpu_started = time.process_time()
                        catch_up_started = time.perf_counter()
                        while_committing()
                        catch_up_s = time.perf_counter() - catch_up_started
                        catch_up_cpu_s = time.process_time() - catch_up_cpu_started
                    return time.perf_counter() - started, catch_up_s, catch_up_cpu_s

            return trio.run(commit)
        finally:
            for process in processes:
                process.kill()
                process.wait(timeout=10)


def _unfence(broker_id: int) -> BrokerRegistrationChangeRecord:
    # Registrations are the log's first records: broker i's epoch is i.
    return BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_id, fenced=FLAG_CLEAR)


def build_cluster(sizes: Sizes) -> tuple[Log, Controller, dict[str, Any]]:
    """Register and unfence every broker, create the bulk of the partitions
    through the controller (without the hot broker), and write the hot
    broker's partitions directly (as if reassigned so that it leads them). Returns the log, an active
    controller on a committed image holding all of it, and timings."""
    figures: dict[str, Any] = {}
    metadata_log = Log()
    listeners = (("PLAINTEXT", "127.0.0.1", 9092),)
    racks = [f"rack-{index % 3}" for index in range(sizes.brokers)]
    records: list[bytes] = []
    for broker_id in range(sizes.brokers):
        records.append(
            encode_record(
                RegisterBrokerRecord(
                    broker_id=broker_id, incarnation_id=f"bench-{broker_id}", listeners=listeners, rack=racks[broker_id]
                )
            )
        )
    # Every broker but the hot one is unfenced; the bulk is placed on them,
    # so that the hot broker ends up leading exactly its own partitions.
    for broker_id in range(sizes.brokers):
        if broker_id != HOT_BROKER:
            records.append(
                encode_record(_unfence(broker_id))
            )
    metadata_log.append(records)
    committed = ClusterImage()
    committed.apply(metadata_log.entries)
    controller = Controller(ControllerConfig(cluster_id=CLUSTER_ID), committed)
    controller.activate(0, next_write_offset=metadata_log.end_offset)

    # The bulk: CreateTopics through the controller (placement, records,
    # speculative apply), one request per 100 topics.
    bulk_partitions = sizes.partitions - sizes.hot_partitions
    topic_count = bulk_partitions // sizes.partitions_per_topic
    started = time.perf_counter()
    for first in range(0, topic_count, 100):
        topics = tuple(
            NewTopic(name=f"topic-{index:05d}", partitions=sizes.partitions_per_topic, replication_factor=3)
            for index in range(first, min(first + 100, topic_count))
        )
        reply = controller.handle_request(CreateTopicsRequest(topics=topics), 0)
        assert reply.is_write, reply.response
        assert reply.expected_first_offset == metadata_log.end_offset
        metadata_log.append(reply.records)  # this controller is dropped: no commit needed
    figures["create_topics_s"] = time.perf_counter() - started
    figures["create_topics_partitions"] = topic_count * sizes.partitions_per_topic

    # The hot broker is unfenced, then leads all of its partitions.
    metadata_log.append(
        [encode_record(_unfence(HOT_BROKER))]
    )
    others = [broker_id for broker_id in range(sizes.brokers) if broker_id != HOT_BROKER]
    hot: list[bytes] = []
    hot_topics = sizes.hot_partitions // sizes.partitions_per_topic
    for topic_index in range(hot_topics):
        topic_id = f"hot-topic-id-{topic_index:05d}"
        hot.append(encode_record(TopicRecord(name=f"hot-{topic_index:05d}", topic_id=topic_id)))
        for partition_id in range(sizes.partitions_per_topic):
            n = topic_index * sizes.partitions_per_topic + partition_id
            replicas = (HOT_BROKER, others[n % len(others)], others[(n * 7 + 1) % len(others)])
            if replicas[1] == replicas[2]:
                replicas = (HOT_BROKER, replicas[1], others[(n * 7 + 2) % len(others)])
            hot.append(
                encode_record(
                    PartitionRecord(
                        topic_id=topic_id,
                        partition_id=partition_id,
                        replicas=replicas,
                        isr=replicas,
                        leader=HOT_BROKER,
                    )
                )
            )
    metadata_log.append(hot)

    # Building the image: the whole log applied to a fresh image.
    gc.collect()
    started = time.perf_counter()
    image = ClusterImage()
    image.apply(metadata_log.entries)
    figures["apply_whole_log_s"] = time.perf_counter() - started
    figures["log_records"] = metadata_log.end_offset
    figures["partitions"] = image.partition_count
    figures["hot_broker_leads"] = image.leader_count(HOT_BROKER)
    figures["hot_broker_in_isr_of"] = len(image.partitions_with_replica_in_isr(HOT_BROKER))

    controller = Controller(ControllerConfig(cluster_id=CLUSTER_ID), image)
    gc.collect()
    started = time.perf_counter()
    controller.activate(0, next_write_offset=metadata_log.end_offset)
    figures["activate_copy_s"] = time.perf_counter() - started
    return metadata_log, controller, figures


def bench_fence(metadata_log: Log, controller: Controller, sizes: Sizes) -> dict[str, Any]:
    """The hot broker's session expires; everyone else heartbeated."""
    voters = [controller.image]
    for _ in range(2):
        replica = ClusterImage()
        replica.restore(controller.image.snapshot())
        voters.append(replica)
    now_ms = controller.config.session_timeout_ms + 1
    for broker_id in range(sizes.brokers):
        if broker_id != HOT_BROKER:
            heartbeat = BrokerHeartbeat(broker_id=broker_id, broker_epoch=broker_id).to_extension()
            controller.on_fetch(broker_id, heartbeat, metadata_log.end_offset, now_ms)
    assert controller.take_proposals() == []
    gc.collect()

    cpu_started = time.process_time()
    started = time.perf_counter()
    controller.tick(now_ms)
    proposals = controller.take_proposals()
    build_s = time.perf_counter() - started
    build_cpu_s = time.process_time() - cpu_started

    assert len(proposals) == 1, len(proposals)
    batch = proposals[0]
    first = metadata_log.append(batch.records)
    # The leader's controller applies the batch to its working image while
    # it commits (Controller.catch_up; trees before it applied it in tick).
    commit = commit_batch_through_voters(
        batch.records, first, voters, getattr(controller, "catch_up", lambda: None)
    )
    batch.on_committed(first)
    assert all(image.broker_state(HOT_BROKER) is BrokerState.FENCED for image in voters)
    assert all(image.leader_count(HOT_BROKER) == 0 for image in voters)
    assert len({image.fingerprint() for image in voters}) == 1
    return {
        "batch_build_s": build_s,
        # Process CPU time: on a loaded machine wall time also counts the
        # waits for a CPU; compare trees with these.
        "batch_build_cpu_s": build_cpu_s,
        "apply_cpu_s_per_voter": commit["apply_cpu_s_per_voter"],
        "batch_records": len(batch.records),
        "batch_bytes": sum(len(data) for data in batch.records),
        "commit_through_voters_s": commit["durable_s"],
        "catch_up_s": commit["catch_up_s"],
        "catch_up_cpu_s": commit["catch_up_cpu_s"],
        "apply_s_per_voter": commit["apply_s_per_voter"],
        "decision_to_applied_everywhere_s": build_s + commit["total_s"],
        "leaders_moved": sizes.hot_partitions,
    }


def bench_heartbeats(metadata_log: Log, controller: Controller, sizes: Sizes) -> dict[str, Any]:
    """Steady-state heartbeats: every (online) broker, ``rounds`` times."""
    online = controller.working_image.brokers_in_state(BrokerState.ONLINE)
    working = controller.working_image
    extensions = [
        (broker_id, BrokerHeartbeat(broker_id=broker_id, broker_epoch=working.broker(broker_id).broker_epoch))
        for broker_id in online
    ]
    extensions = [(broker_id, heartbeat.to_extension()) for broker_id, heartbeat in extensions]
    fetch_offset = controller.next_write_offset
    now_ms = 20_000
    latencies_ns: list[int] = []
    clock = time.perf_counter_ns
    gc.collect()
    cpu_started = time.process_time()
    wall_started = time.perf_counter()
    for _ in range(sizes.heartbeat_rounds):
        now_ms += 500
        for broker_id, extension in extensions:
            started = clock()
            controller.on_fetch(broker_id, extension, fetch_offset, now_ms)
            latencies_ns.append(clock() - started)
        controller.tick(now_ms)
    cpu_s = time.process_time() - cpu_started
    wall_s = time.perf_counter() - wall_started
    assert [p for p in controller.take_proposals() if len(p.records) > 1] == []
    latencies_ns.sort()
    count = len(latencies_ns)
    mean_us = sum(latencies_ns) / count / 1e3
    return {
        "heartbeats": count,
        "mean_us": mean_us,
        "p50_us": percentile(latencies_ns, 0.50) / 1e3,
        "p99_us": percentile(latencies_ns, 0.99) / 1e3,
        "max_us": latencies_ns[-1] / 1e3,
        "cpu_us_per_heartbeat": cpu_s / count * 1e6,
        "wall_s": wall_s,
        # 1,000 brokers every 500 ms = 2,000 heartbeats/s (the load).
        "cpu_share_at_2000_per_s": cpu_s / count * 2_000,
    }


def bench_snapshot_and_memory(controller: Controller) -> dict[str, Any]:
    image = controller.image
    gc.collect()
    started = time.perf_counter()
    snapshot = image.snapshot()
    snapshot_s = time.perf_counter() - started
    gc.collect()
    started = time.perf_counter()
    restored = ClusterImage()
    restored.restore(snapshot)
    restore_s = time.perf_counter() - started
    assert restored == image
    started = time.perf_counter()
    fingerprint = image.fingerprint()
    fingerprint_s = time.perf_counter() - started
    del restored
    gc.collect()

    tracemalloc.start()
    baseline, _ = tracemalloc.get_traced_memory()
    measured = ClusterImage()
    measured.restore(snapshot)
    gc.collect()
    image_bytes, _ = tracemalloc.get_traced_memory()
    working = measured.copy()
    gc.collect()
    with_copy_bytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del working, measured
    return {
        "snapshot_bytes": len(snapshot),
        "snapshot_s": snapshot_s,
        "restore_s": restore_s,
        "fingerprint_s": fingerprint_s,
        "fingerprint": fingerprint[:16],
        "image_mib": (image_bytes - baseline) / 2**20,
        "working_copy_extra_mib": (with_copy_bytes - image_bytes) / 2**20,
    }


def run(sizes: Sizes) -> dict[str, Any]:
    log(f"[registration] building {sizes.brokers} brokers, {sizes.partitions} partitions (RF 3)...")
    metadata_log, controller, build = build_cluster(sizes)
    log("[registration] snapshot and memory...")
    snapshot = bench_snapshot_and_memory(controller)
    log(f"[registration] fencing the broker that leads {sizes.hot_partitions} partitions...")
    fence = bench_fence(metadata_log, controller, sizes)
    log(f"[registration] heartbeats: {sizes.brokers} brokers x {sizes.heartbeat_rounds} rounds...")
    heartbeats = bench_heartbeats(metadata_log, controller, sizes)
    return {"sizes": sizes.__dict__, "build": build, "fence": fence, "heartbeats": heartbeats, "snapshot": snapshot}


def format_report(results: dict[str, Any]) -> str:
    sizes, build, fence = results["sizes"], results["build"], results["fence"]
    heartbeats, snapshot = results["heartbeats"], results["snapshot"]
    apply_ms = ", ".join(f"{seconds * 1e3:.0f}" for seconds in fence["apply_s_per_voter"])
    apply_cpu_ms = ", ".join(f"{seconds * 1e3:.0f}" for seconds in fence["apply_cpu_s_per_voter"])
    rows = [
        (
            f"build: apply the whole log ({build['log_records']} records) to one image",
            f"{build['apply_whole_log_s']:.2f} s",
        ),
        (
            f"build: controller CreateTopics, {build['create_topics_partitions']} partitions",
            f"{build['create_topics_s']:.2f} s",
        ),
        ("activate: working copy of the committed image", f"{build['activate_copy_s'] * 1e3:.0f} ms"),
        None,
        (
            "fence: build the batch (tick -> proposal)",
            f"{fence['batch_build_s'] * 1e3:.0f} ms (CPU {fence['batch_build_cpu_s'] * 1e3:.0f} ms)",
        ),
        ("fence: batch size", f"{fence['batch_records']} records, {fence['batch_bytes'] / 1024:.0f} KiB"),
        ("fence: each of three images applies it", f"{apply_ms} ms (CPU {apply_cpu_ms} ms)"),
        ("fence: committed through 3 voter processes (fsync)", f"{fence['commit_through_voters_s'] * 1e3:.0f} ms"),
        (
            "fence: ... the working image catches up meanwhile",
            f"{fence['catch_up_s'] * 1e3:.0f} ms (CPU {fence['catch_up_cpu_s'] * 1e3:.0f} ms)",
        ),
        (
            "fence: decision -> committed and applied (slowest voter)",
            f"{fence['decision_to_applied_everywhere_s'] * 1e3:.0f} ms (seed 004: ~40 s; goal < 500 ms)",
        ),
        None,
        (
            f"heartbeats: {heartbeats['heartbeats']} on_fetch calls",
            f"mean {heartbeats['mean_us']:.1f} us, p50 {heartbeats['p50_us']:.1f} us, "
            f"p99 {heartbeats['p99_us']:.1f} us, max {heartbeats['max_us']:.0f} us",
        ),
        (
            "heartbeats: CPU at 2,000/s (1,000 brokers every 500 ms)",
            f"{heartbeats['cpu_share_at_2000_per_s'] * 100:.1f} % of one core",
        ),
        None,
        (
            "memory: image (tracemalloc)",
            f"{snapshot['image_mib']:.0f} MiB; a working copy adds {snapshot['working_copy_extra_mib']:.1f} MiB",
        ),
        (
            "snapshot: size, time to take",
            f"{snapshot['snapshot_bytes'] / 2**20:.1f} MiB, {snapshot['snapshot_s'] * 1e3:.0f} ms",
        ),
        ("snapshot: restore", f"{snapshot['restore_s'] * 1e3:.0f} ms"),
        ("fingerprint (sha256 of the snapshot)", f"{snapshot['fingerprint_s'] * 1e3:.0f} ms"),
    ]
    lines = [
        f"registration bench: {sizes['brokers']} brokers, {build['partitions']} partitions (RF 3), "
        f"hot broker leads {build['hot_broker_leads']} (in {build['hot_broker_in_isr_of']} ISRs)",
        "",
    ]
    for row in rows:
        lines.append("" if row is None else f"  {row[0]:<62} {row[1]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.registration_bench")
    parser.add_argument("--quick", action="store_true", help="a tenth of the size (100 brokers, 10,000 partitions)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    args = parser.parse_args(argv)
    results = run(QUICK if args.quick else FULL)
    print(format_report(results), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
