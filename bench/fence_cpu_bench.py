"""The CPU cost of fencing the broker that leads 10,000 partitions, in process.

    python -m bench.fence_cpu_bench [--quick] [--rounds 5]

The cluster of ``bench.registration_bench`` (1,000 brokers, 100,000
partitions, the hot broker leading 10,000), then ``--rounds`` times: a fresh
controller on a restored image, every other broker heartbeating, the hot
broker's session expiring; timed in process CPU time (``time.process_time``)
are the controller's ``tick`` building the batch (leader elections, the
records) until it is proposed, the controller's working image catching up
with it (``Controller.catch_up``: the runtime runs it once the batch has
left, while the followers persist it) and a voter's image
applying the committed batch (decoding and applying 10,001 records), at
once and one record per call (a ``ControllerStateMachine`` fed as
``quorum.ReplicaHost`` feeds a state machine that may raise, so that an
exception stays with its record: how every voter applied the fence until
``ControllerStateMachine`` declared ``apply_never_raises``). No voter
processes, no disk: CPU time is far less sensitive to other load than
wall time, so run it under each tree (``PYTHONPATH=<tree>``), alternating,
to compare two trees. Prints the minimum and median of each, and a digest
of the batch and of the image after it (equal digests: the same records
committed, the same image).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
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
    ControllerStateMachine,
)

from .registration_bench import CLUSTER_ID, FULL, HOT_BROKER, QUICK, build_cluster, log


def fence_once(snapshot: bytes, next_offset: int, brokers: int) -> tuple[float, float, float, float, str, str]:
    """One fence on fresh images: (build CPU s, catch-up CPU s, apply CPU
    s, apply one record per call CPU s, batch digest, image fingerprint)."""
    committed = ClusterImage()
    committed.restore(snapshot)
    controller = Controller(ControllerConfig(cluster_id=CLUSTER_ID), committed)
    controller.activate(0, next_write_offset=next_offset)
    now_ms = controller.config.session_timeout_ms + 1
    for broker_id in range(brokers):
        if broker_id != HOT_BROKER:
            heartbeat = BrokerHeartbeat(broker_id=broker_id, broker_epoch=broker_id).to_extension()
            controller.on_fetch(broker_id, heartbeat, next_offset, now_ms)
    voter = ClusterImage()
    voter.restore(snapshot)
    gc.collect()
    started = time.process_time()
    controller.tick(now_ms)
    proposals = controller.take_proposals()
    build_s = time.process_time() - started
    # getattr: the same file times trees from before Controller.catch_up
    # (their tick applies the batch to the working image itself).
    catch_up = getattr(controller, "catch_up", lambda: None)
    started = time.process_time()
    catch_up()
    catch_up_s = time.process_time() - started
    assert len(proposals) == 1, len(proposals)
    records = proposals[0].records
    entries = [Entry(next_offset + index, 1, RecordKind.DATA, data) for index, data in enumerate(records)]
    gc.collect()
    started = time.process_time()
    voter.apply(entries)
    apply_s = time.process_time() - started
    assert voter.broker_state(HOT_BROKER) is BrokerState.FENCED and voter.leader_count(HOT_BROKER) == 0
    fingerprint = voter.fingerprint()
    assert controller.working_image.fingerprint() == fingerprint
    host_fed = ControllerStateMachine()
    host_fed.image.restore(snapshot)
    gc.collect()
    started = time.process_time()
    for entry in entries:
        host_fed.apply([entry])
    per_record_s = time.process_time() - started
    assert host_fed.image.fingerprint() == fingerprint
    digest = hashlib.sha256(b"".join(len(data).to_bytes(4, "big") + data for data in records)).hexdigest()
    return build_s, catch_up_s, apply_s, per_record_s, digest, fingerprint


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 brokers, 10,000 partitions")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    log(f"[fence-cpu] building {sizes.brokers} brokers, {sizes.partitions} partitions (RF 3)...")
    metadata_log, controller, _ = build_cluster(sizes)
    snapshot = controller.image.snapshot()
    del controller
    builds, catch_ups, applies, per_records, digests = [], [], [], [], set()
    for _ in range(max(1, args.rounds)):
        build_s, catch_up_s, apply_s, per_record_s, digest, fingerprint = fence_once(
            snapshot, metadata_log.end_offset, sizes.brokers
        )
        builds.append(build_s * 1e3)
        catch_ups.append(catch_up_s * 1e3)
        applies.append(apply_s * 1e3)
        per_records.append(per_record_s * 1e3)
        digests.add((digest[:16], fingerprint[:16]))
    assert len(digests) == 1, digests
    (digest, fingerprint), = digests
    print(f"fence of the broker leading {sizes.hot_partitions} partitions, {len(builds)} rounds, process CPU:")
    print(f"  build the batch (tick)   min {min(builds):6.1f} ms   median {statistics.median(builds):6.1f} ms")
    print(f"  working image catches up min {min(catch_ups):6.1f} ms   median {statistics.median(catch_ups):6.1f} ms")
    print(f"  a voter applies it       min {min(applies):6.1f} ms   median {statistics.median(applies):6.1f} ms")
    print(f"  ... one record per call  min {min(per_records):6.1f} ms   median {statistics.median(per_records):6.1f} ms")
    print(f"  batch sha256 {digest}, image fingerprint {fingerprint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
