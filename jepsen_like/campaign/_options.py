"""What a campaign run is told: the scenario, the cluster's shape and
timeouts, the workload and the checker. Its own module because both the
runner and the scenarios read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._cluster import ClusterSettings

#: Scenarios whose controllers are formatted for dynamic voters (KIP-853).
DYNAMIC_VOTER_SCENARIOS = frozenset({"membership"})


@dataclass(slots=True)
class CampaignOptions:
    scenario: str = "chaos"
    # "pykraft" (kraft-controller / kraft-broker) or "kafka" (Apache Kafka
    # 4.4's KRaft, fetched by `make kafka`; see docs/kafka-campaign.md).
    system: str = "pykraft"
    kafka_heap_mb: int = 256
    time_limit_s: float = 60.0
    controllers: int = 3
    brokers: int = 3
    workload: str = "mixed"
    read_mode: str = "linearizable"
    check_quorum: bool = True
    net: str = "proxy"
    seed: int = 0
    store: Path = Path("store")
    clients: int = 6
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    session_timeout_ms: int = 3000
    heartbeat_interval_ms: int = 1000
    quiesce_s: float = 5.0
    check: bool = True
    # "spark" (the checker's job) or "reference" (its pure-Python twin,
    # quadratic: seconds for a short run, no JVM; held to the same verdicts
    # by tests/checker).
    checker: str = "spark"
    # Mutual TLS on every connection, the harness's included (issue 16).
    tls: bool = False
    # Start Debian's Prometheus scraping every node (``--prometheus``); the
    # report links its key queries.
    prometheus: bool = False
    # KIP-853 auto-join on every controller (``--auto-join``; the
    # membership scenario only): a replaced voter's new disk is added by
    # auto-join once the operator has removed the old one, not by the
    # harness (``replace-voter-auto-join``).
    auto_join: bool = False
    # A schedule to follow instead of a named scenario and a random
    # workload (``--replay``, ``--from-sim``; docs/replay.md): a
    # ``jepsen_like.sim.Schedule``.
    schedule: Any = None

    def describe(self) -> dict[str, Any]:
        schedule, self.schedule = self.schedule, None
        try:
            described = asdict(self)
        finally:
            self.schedule = schedule
        described["store"] = str(self.store)
        described["schedule"] = None if schedule is None else (schedule.origin or "given")
        return described

    def cluster_settings(self) -> ClusterSettings:
        return ClusterSettings(
            controllers=self.controllers,
            brokers=self.brokers,
            clients=self.clients,
            election_timeout_ms=self.election_timeout_ms,
            fetch_timeout_ms=self.fetch_timeout_ms,
            check_quorum=self.check_quorum,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            tls=self.tls,
            metrics=self.prometheus,
            dynamic_voters=self.scenario in DYNAMIC_VOTER_SCENARIOS,
            auto_join=self.auto_join,
        )
