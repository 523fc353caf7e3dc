"""pykraft peer of the metadata benchmark: 3 ``kraft-controller`` voters and
one ``kraft-broker``, the counterpart of Kafka's 3 controllers and one broker.

A "write" is one metadata commit: the creation of a topic with one partition
(replication factor 1) through pykraft's controller client
(``registration.client.AdminClient``), answered once the controller's
records are committed (fsync on a majority of voters). Leader discovery,
the event loop and the hedged failover attempts are the pykraft quorum
peer's (``PykraftCluster``). Fence time: from the kill -9 of the broker to
the earliest ``controller_broker_state`` "fenced" event in the controllers'
event logs (stamped when a controller applies the committed fence record).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._common import (
    LOOPBACK,
    ManagedProcess,
    PeerUnavailable,
    free_ports,
    make_temp_dir,
    port_is_open,
    wait_for,
)
from .pykraft_peer import CLUSTER_ID, PykraftCluster, _AsyncRunner
from ._topic_writes import TopicCreationWrites

BROKER_ID = 101
#: A create that does not answer within this long counts as failed.
REQUEST_TIMEOUT_S = 30.0


def _executable(name: str) -> str | None:
    beside_python = Path(sys.executable).parent / name
    return str(beside_python) if beside_python.exists() else shutil.which(name)


class PykraftMetadataCluster(TopicCreationWrites, PykraftCluster):
    name = "pykraft"
    label = "pykraft"
    request_timeout_s = REQUEST_TIMEOUT_S

    def __init__(self, value_bytes: int = 100, log: Callable[[str], None] = print) -> None:
        super().__init__(value_bytes, log)
        self.broker: ManagedProcess | None = None
        self._topics = 0

    @classmethod
    def availability_problem(cls) -> str | None:
        missing = [name for name in ("kraft-controller", "kraft-broker") if _executable(name) is None]
        if missing:
            return f"{', '.join(missing)} not found (make venv installs them)"
        return None

    # ---- lifecycle ------------------------------------------------------

    def start(self) -> None:
        problem = self.availability_problem()
        if problem:
            raise PeerUnavailable(problem)
        self.runner = _AsyncRunner(use_trio=True)
        self.workdir = make_temp_dir("pykraft-metadata")
        self.ports = free_ports(self.voters + 1)
        broker_port = self.ports.pop()
        voters = ",".join(self.endpoints)
        for i in range(self.voters):
            argv = [
                str(_executable("kraft-controller")),
                "--plaintext",
                "--node-id", str(i + 1),
                "--voters", voters,
                "--data-dir", str(self.workdir / f"controller{i + 1}"),
                "--cluster-id", CLUSTER_ID,
                "--event-log", str(self.event_log(i + 1)),
                "--log-level", "WARNING",
            ]  # fmt: skip
            self.processes.append(ManagedProcess(f"kraft-controller-{i + 1}", argv, self.workdir / f"controller{i + 1}.log"))
        self.broker = ManagedProcess(
            "kraft-broker",
            [
                str(_executable("kraft-broker")),
                "--plaintext",
                "--broker-id", str(BROKER_ID),
                "--bootstrap", voters,
                "--listen", f"{LOOPBACK}:{broker_port}",
                "--cluster-id", CLUSTER_ID,
                "--log-level", "WARNING",
            ],  # fmt: skip
            self.workdir / "broker.log",
        )
        for process in [*self.processes, self.broker]:
            process.start()
        self.wait_healthy(90.0)

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.terminate(grace_s=5.0)
        super().stop()

    def event_log(self, node_id: int) -> Path:
        assert self.workdir is not None
        return self.workdir / f"controller{node_id}.events.jsonl"

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        wait_for(lambda: all(port_is_open(p) for p in self.ports), timeout_s, "every kraft-controller to listen",
                 0.1, self.processes)
        wait_for(self._all_caught_up, max(1.0, deadline - time.monotonic()), "every kraft-controller to catch up",
                 0.2, self.processes)
        wait_for(self._broker_online, max(1.0, deadline - time.monotonic()), "the kraft-broker to be Online", 0.2,
                 self.processes)

    def _broker_online(self) -> bool:
        from registration.client import AdminClient

        async def main() -> bool:
            async with AdminClient(self.endpoints, cluster_id=CLUSTER_ID, timeout_s=5.0) as admin:
                cluster = await self.runner.with_timeout(5.0, admin.describe_cluster)
            return any(b.broker_id == BROKER_ID and b.state == "Online" for b in cluster.brokers)

        return self._run(main)

    # ---- topic creations ---------------------------------------------------

    def _next_topics(self, count: int) -> list[str]:
        first = self._topics
        self._topics += count
        return [f"bench-{first + i:07d}" for i in range(count)]

    async def _create(self, admin: Any, names: Sequence[str]) -> None:
        """One CreateTopics request for ``names``; raises on any refusal."""
        from registration import CreateTopicsRequest, CreateTopicsResponse, NewTopic

        request = CreateTopicsRequest(topics=tuple(NewTopic(name=n, partitions=1, replication_factor=1) for n in names))
        response = await self.runner.with_timeout(
            REQUEST_TIMEOUT_S, lambda: admin.request(request, CreateTopicsResponse, idempotent=False)
        )
        failed = [r for r in response.results if r.error.name != "NONE"]
        if response.error.name != "NONE" or failed:
            raise RuntimeError(f"pykraft CreateTopics failed: {response.error.name} {failed[:1]}")

    def _create_groups(self, sizes: Sequence[int], in_flight: int, deadline: float) -> list[float]:
        """One CreateTopics request per entry of ``sizes``, ``in_flight``
        tasks on one client; returns each request's latency (seconds)."""
        from registration.client import AdminClient

        async def main() -> list[float]:
            latencies_s: list[float] = []
            next_index = 0
            async with AdminClient(self.endpoints, cluster_id=CLUSTER_ID, timeout_s=REQUEST_TIMEOUT_S) as admin:

                async def worker() -> None:
                    nonlocal next_index
                    while next_index < len(sizes) and time.monotonic() < deadline:
                        names = self._next_topics(sizes[next_index])
                        next_index += 1
                        started = time.perf_counter()
                        await self._create(admin, names)
                        latencies_s.append(time.perf_counter() - started)

                await self.runner.gather([worker] * in_flight)
            return latencies_s

        return self._run(main)

    def first_write_after_kill(self, killed_at: float, deadline: float) -> float | None:
        from registration.client import AdminClient

        async def main() -> float | None:
            async with AdminClient(self.endpoints, cluster_id=CLUSTER_ID, timeout_s=10.0) as admin:
                return await self.runner.hedged(lambda n: self._create(admin, self._next_topics(1)), killed_at, deadline)

        return self._run(main)

    # ---- the fence row ---------------------------------------------------

    def _fenced_ns(self, since_ns: int) -> int | None:
        earliest = None
        for node_id in range(1, self.voters + 1):
            path = self.event_log(node_id)
            if not path.exists():
                continue
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line cut off by kill -9
                if (isinstance(event, dict) and event.get("event") == "controller_broker_state"
                        and event.get("broker_id") == BROKER_ID and event.get("state") == "fenced"
                        and isinstance(event.get("wall_ns"), int) and event["wall_ns"] >= since_ns):
                    earliest = event["wall_ns"] if earliest is None else min(earliest, event["wall_ns"])
                    break
        return earliest

    def fence_trial(self, timeout_s: float) -> float | None:
        """kill -9 the broker; seconds until a controller applied the
        committed fence; then start the broker again (``wait_healthy``
        waits until it is Online). Raises ``TimeoutError`` when not fenced
        in ``timeout_s``."""
        assert self.broker is not None
        since_ns = time.time_ns()
        self.broker.kill9()
        try:
            fenced_ns = wait_for(lambda: self._fenced_ns(since_ns), timeout_s, "the kraft-broker to be fenced", 0.05)
        finally:
            self.broker.start()
        return (fenced_ns - since_ns) / 1e9

    # ---- description ----------------------------------------------------

    def notes(self) -> list[str]:
        return [
            "pykraft: 3 kraft-controller voters and 1 kraft-broker (defaults: election timeout 1000 ms, fetch "
            "timeout 2000 ms, check quorum and pre-vote on, broker session timeout 9000 ms, heartbeat 2000 ms).",
            "pykraft durability: kraft-controller --fsync (the default): every voter fsyncs its log before it "
            "acknowledges, so a topic creation is answered after a majority of controllers has it on disk; the "
            "broker keeps its copy of the metadata log in memory (no --data-dir).",
            "pykraft: a topic creation = one CreateTopics request (1 topic, 1 partition, RF 1) through "
            "registration.client.AdminClient to the active controller; 64 in flight = 64 trio tasks on one client.",
            "pykraft: fence = kill -9 of the broker to the first controller_broker_state 'fenced' event in the "
            "controllers' event logs (a controller applying the committed fence record).",
        ]
