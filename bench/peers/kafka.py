"""Kafka peer of the metadata benchmark: Apache Kafka 4.4's KRaft, 3
controllers (``process.roles=controller``, static voter set) and one broker,
started by ``jepsen_like.campaign.kafka.KafkaCluster`` from the jars that
``make kafka`` fetched.

A "write" here is one metadata commit: the creation of a topic with one
partition (replication factor 1) through Kafka's own admin path, the
confluent-kafka admin client against the broker, which forwards CreateTopics
to the active controller; the answer comes once the controller committed the
records (its metadata log flushed on a majority). Many in flight use the
client's futures.

Leader (active controller): the election state each controller persists
(``quorum-state``). Fence time: from the kill -9 of the broker to the fence
record in the active controller's log (its own wall-clock stamp).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jepsen_like.campaign.kafka import (
    FETCH_HINT,
    KAFKA_VERSION,
    KafkaCluster,
    KafkaError,
    kafka_libs_dir,
    kafka_problem,
)

from .._common import (
    Cluster,
    PeerUnavailable,
    ProcessStartError,
    free_ports,
    make_temp_dir,
    package_version,
    remove_temp_dir,
    run_version_command,
    wait_for,
)
from ._topic_writes import TopicCreationWrites

#: A create that does not answer within this long counts as failed.
REQUEST_TIMEOUT_S = 30.0


class KafkaPeer(TopicCreationWrites, Cluster):
    name = "kafka"
    label = "Kafka 4.4 KRaft"
    request_timeout_s = REQUEST_TIMEOUT_S

    def __init__(self, value_bytes: int = 100, log: Callable[[str], None] = print, heap_mb: int = 1024) -> None:
        self.log = log
        self.heap_mb = heap_mb
        self.workdir: Path | None = None
        self.kafka: KafkaCluster | None = None
        self._topics = 0
        self._lock = threading.Lock()

    @classmethod
    def availability_problem(cls) -> str | None:
        problem = kafka_problem()
        if problem:
            return problem
        if package_version("confluent-kafka") is None:
            return "confluent-kafka is not installed (.venv/bin/python -m pip install confluent-kafka==2.16.1)"
        return None

    # ---- lifecycle ------------------------------------------------------

    def start(self) -> None:
        problem = self.availability_problem()
        if problem:
            raise PeerUnavailable(problem)
        self.workdir = make_temp_dir("kafka")
        self.kafka = KafkaCluster(
            self.workdir, controllers=self.voters, brokers=1, heap_mb=self.heap_mb, allocate_ports=free_ports
        )
        try:
            self.kafka.start(timeout_s=240.0)
        except KafkaError as error:
            raise ProcessStartError(str(error)) from error
        self.wait_healthy(120.0)

    def stop(self) -> None:
        if self.kafka is not None:
            self.kafka.stop(remove=True)
        if self.workdir is not None:
            remove_temp_dir(self.workdir)

    @property
    def _cluster(self) -> KafkaCluster:
        assert self.kafka is not None, "start() first"
        return self.kafka

    @property
    def broker_id(self) -> int:
        return self._cluster.broker_ids[0]

    def leader_index(self) -> int | None:
        leader = self._cluster.active_controller()
        return None if leader is None else self._cluster.controller_ids.index(leader)

    def kill(self, index: int) -> None:
        self._cluster.kill(self._cluster.controller_ids[index])

    def restart(self, index: int) -> None:
        self._cluster.start_node(self._cluster.controller_ids[index])

    def wait_healthy(self, timeout_s: float) -> None:
        cluster = self._cluster
        deadline = time.monotonic() + timeout_s

        def quorum_agrees() -> bool:
            states = [cluster.quorum_state(node_id) for node_id in cluster.controller_ids]
            leaders = {(s.get("leaderId"), s.get("leaderEpoch")) for s in states if s is not None}
            running = all(cluster.nodes[node_id].running for node_id in cluster.nodes)
            return running and len(leaders) == 1 and cluster.active_controller() is not None

        wait_for(quorum_agrees, timeout_s, "every Kafka controller to follow one active controller", 0.1)
        wait_for(lambda: self.broker_id in cluster.unfenced_brokers(2.0), max(1.0, deadline - time.monotonic()),
                 "the Kafka broker to be unfenced", 0.2)
        wait_for(lambda: self._probe_create(), max(1.0, deadline - time.monotonic()), "a Kafka topic creation", 0.2)

    def _probe_create(self) -> bool:
        self._cluster.create_topic(self._next_topics(1)[0], timeout_s=5.0)
        return True

    def rss_bytes(self) -> list[int | None]:
        return [self._cluster.rss_bytes(node_id) for node_id in self._cluster.controller_ids]

    # ---- topic creations ---------------------------------------------------

    def _next_topics(self, count: int) -> list[str]:
        with self._lock:
            first = self._topics
            self._topics += count
        return [f"bench-{first + i:07d}" for i in range(count)]

    def _create_groups(self, sizes: Sequence[int], in_flight: int, deadline: float) -> list[float]:
        """One CreateTopics request per entry of ``sizes`` (that many new
        one-partition topics), ``in_flight`` requests outstanding; returns
        each request's latency (seconds). Raises on the first refusal."""
        from confluent_kafka.admin import NewTopic

        admin = self._cluster.admin()
        slots = threading.Semaphore(in_flight)
        lock = threading.Lock()
        latencies_s: list[float] = []
        errors: list[BaseException] = []
        pending: list[concurrent.futures.Future[Any]] = []
        for size in sizes:
            if time.monotonic() >= deadline or errors:
                break
            if not slots.acquire(timeout=max(0.0, deadline - time.monotonic()) + REQUEST_TIMEOUT_S):
                break
            names = self._next_topics(size)
            started = time.perf_counter()
            futures = admin.create_topics(
                [NewTopic(name, 1, 1) for name in names],
                operation_timeout=REQUEST_TIMEOUT_S,
                request_timeout=REQUEST_TIMEOUT_S,
            )
            remaining = [len(futures)]

            def done(future: concurrent.futures.Future[Any], started: float = started, remaining: list[int] = remaining) -> None:
                finished = time.perf_counter()
                with lock:
                    error = future.exception()
                    if error is not None:
                        errors.append(error)
                    remaining[0] -= 1
                    last = remaining[0] == 0
                    if last:
                        latencies_s.append(finished - started)
                if last:
                    slots.release()

            for future in futures.values():
                future.add_done_callback(done)
            pending.extend(futures.values())
        concurrent.futures.wait(pending, timeout=REQUEST_TIMEOUT_S * 2)
        if errors:
            raise RuntimeError(f"Kafka CreateTopics failed: {errors[0]!r}")
        return latencies_s

    def first_write_after_kill(self, killed_at: float, deadline: float) -> float | None:
        """A topic creation every 20 ms from the kill, earlier ones kept
        waiting; seconds from the kill to the first one Kafka acknowledged."""
        from confluent_kafka.admin import NewTopic

        admin = self._cluster.admin()
        pending: list[concurrent.futures.Future[Any]] = []
        for _ in range(100_000):
            if time.monotonic() >= deadline:
                return None
            name = self._next_topics(1)[0]
            pending.append(admin.create_topics([NewTopic(name, 1, 1)], request_timeout=10.0,
                                               operation_timeout=10.0)[name])
            done, _ = concurrent.futures.wait(pending, timeout=0.02, return_when=concurrent.futures.FIRST_COMPLETED)
            if any(future.exception() is None for future in done):
                return time.perf_counter() - killed_at
            pending = [future for future in pending if not future.done()][-500:]
        return None

    # ---- the fence row ---------------------------------------------------

    def fence_trial(self, timeout_s: float) -> float | None:
        """kill -9 the broker; seconds until the active controller fenced
        it; then start the broker again (``wait_healthy`` waits until it is
        unfenced). Raises ``TimeoutError`` when not fenced in ``timeout_s``."""
        cluster = self._cluster
        since_ms = int(time.time() * 1000)
        cluster.kill(self.broker_id)
        try:
            fenced_ms = wait_for(lambda: cluster.fence_logged_ms(self.broker_id, since_ms), timeout_s,
                                 "the Kafka broker to be fenced", 0.05)
        finally:
            cluster.start_node(self.broker_id)
        return (fenced_ms - since_ms) / 1e3

    # ---- description ----------------------------------------------------

    def versions(self) -> dict[str, str]:
        return {
            "kafka": f"{KAFKA_VERSION} (jars in {kafka_libs_dir()})",
            "java": run_version_command(["java", "-version"]),
            "confluent-kafka": package_version("confluent-kafka") or "?",
        }

    def notes(self) -> list[str]:
        return [
            f"Kafka: {KAFKA_VERSION} from Maven Central ({FETCH_HINT}); 3 controllers (process.roles=controller, "
            "static controller.quorum.voters) and 1 broker, each its own JVM (Kafka's start-script flags: "
            f"-Xmx{self.heap_mb}m -Xms{self.heap_mb}m, G1); every other setting Kafka's default: election timeout "
            "1000 ms, fetch timeout 2000 ms, broker session timeout 9000 ms, heartbeat 2000 ms.",
            "Kafka durability: the KRaft metadata log is flushed (fsync) on the leader and on followers before they "
            "acknowledge, so a topic creation is answered after a majority of controllers has it on disk; the "
            "broker's partition logs (not part of these rows) use Kafka's default of no flush.",
            "Kafka: a topic creation = confluent-kafka AdminClient.create_topics of one topic (1 partition, RF 1) "
            "via the broker, which forwards it to the active controller; the broker also creates the partition's "
            "log directory. 64 in flight = 64 outstanding futures on one client, but the broker forwards to the "
            "controller over one connection with one request in flight (NodeToControllerChannelManagerImpl's "
            "NetworkClient, max in flight 1), so the controller sees them one at a time; the active controller "
            "also lingers up to controller.quorum.append.linger.ms (default 25 ms) before appending a batch.",
            "Kafka: fence = kill -9 of the broker to the fence record in the active controller's log (stamped by "
            "the controller when it writes the record, one commit before it is committed).",
        ]

    def log_dir(self) -> Path | None:
        return self.workdir
