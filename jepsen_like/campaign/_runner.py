"""A fault-injection campaign against real processes on this machine.

One run: start the cluster (``kraft-controller`` voters and ``kraft-broker``
observers, or with ``system="kafka"`` Apache Kafka's controllers and
brokers: ``_kafka_target``) behind the nemesis's network, wait until it is ready, run the
workload and the nemesis for the time limit, heal every fault, let the
cluster quiesce, read every key a last time, dump every node's committed
log, stop everything, and check the history with the Spark checker.
Everything lands in ``store/<campaign>/<timestamp>/``; ``store/latest``
points at the newest run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import random
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from jepsen_like.nemesis import NetFault, NetworkTopology, open_network

from ._cluster import CLUSTER_ID, Cluster, QuorumView, _free_ports
from ._history import HistoryRecorder
from ._kafka_target import KafkaCampaignCluster
from ._kafka_workload import KafkaWorkload
from ._memory import MemoryTimeline, growth_per_operation
from ._options import DYNAMIC_VOTER_SCENARIOS, CampaignOptions
from ._processes import NodeProcess, ProcessGroup
from ._replay import run_faults, schedule_of_run, write_schedule
from ._scenarios import NEMESIS_SCENARIOS, SMALL_DISK_SCENARIOS
from ._storage_faults import SmallDisk, small_disk_unavailable
from ._workloads import ClientEndpoints, Workload, WorkloadOptions

logger = logging.getLogger("pykraft.campaign")

SYSTEMS = ("pykraft", "kafka")
#: Scenarios that speak pykraft's own wire protocol.
# Scenarios that speak pykraft's protocol (hostile clients) or damage its
# storage format: they have no Kafka form.
PYKRAFT_ONLY_SCENARIOS = frozenset({"hostile-clients", "storage", "membership"})


@dataclass(slots=True)
class CampaignResult:
    run_dir: Path
    valid: bool | str | None
    ops: dict[str, int]
    faults: int
    anomalies: dict[str, int] = field(default_factory=dict)
    checker_error: str | None = None
    report: Path | None = None
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    operations: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)  # wall time of each phase
    # The harness process's peak resident memory (its own, not the nodes'
    # or Spark's JVM) and the run directory's size on disk, at the end.
    peak_rss_bytes: int = 0
    peak_rss_recording_bytes: int = 0  # the same when the history was written, before checker and report
    disk_bytes: int = 0
    # Least-squares growth of the harness's RSS and of Python's allocated
    # blocks per operation over the run's last three quarters (memory.csv).
    rss_growth_per_operation_bytes: float | None = None
    python_blocks_per_operation: float | None = None


class Campaign:
    """One run. ``await Campaign(options).run()``.

    While it runs, ``phase``, ``view`` (leader and epoch),
    ``broker_view``, ``active_faults`` and ``history.counts`` say what is
    going on (the live display reads them)."""

    def __init__(
        self, options: CampaignOptions, *, status: Callable[[str], None] | None = None, spark: Any = None
    ) -> None:
        """``spark``: a SparkSession for the checker to reuse (else it
        starts its own). Raises ``ValueError`` for impossible options."""
        if options.controllers < 1:
            raise ValueError("a campaign needs at least one controller")
        if options.brokers < 0 or options.clients < 1:
            raise ValueError("brokers must be >= 0 and clients >= 1")
        if options.checker not in ("spark", "reference"):
            raise ValueError(f"checker must be 'spark' or 'reference', got {options.checker!r}")
        if options.prometheus and options.net != "proxy":
            raise ValueError("--prometheus needs --net proxy: in network namespaces the metrics endpoints are not on this host's loopback")
        if options.schedule is not None and options.system != "pykraft":
            raise ValueError("a schedule runs on pykraft's own nodes only")
        if options.schedule is None and options.scenario not in NEMESIS_SCENARIOS:
            raise ValueError(f"unknown scenario {options.scenario!r}; choose one of {', '.join(sorted(NEMESIS_SCENARIOS))}")
        if options.auto_join and (options.scenario not in DYNAMIC_VOTER_SCENARIOS or options.schedule is not None):
            raise ValueError(
                f"--auto-join needs dynamic voters: only the {', '.join(sorted(DYNAMIC_VOTER_SCENARIOS))} scenario has them"
            )
        if options.system not in SYSTEMS:
            raise ValueError(f"system must be one of {', '.join(SYSTEMS)}, got {options.system!r}")
        if options.system == "kafka":
            if options.net != "proxy":
                raise ValueError("a Kafka campaign runs on --net proxy only (docs/kafka-campaign.md)")
            if options.scenario in PYKRAFT_ONLY_SCENARIOS:
                raise ValueError(
                    f"scenario {options.scenario!r} speaks pykraft's protocol or damages its files; it has no Kafka form"
                )
            if options.tls or options.prometheus:
                raise ValueError("--tls and --prometheus set up pykraft's own listeners and endpoints: not for a Kafka campaign")
            if options.brokers < 1:
                raise ValueError("a Kafka campaign needs at least one broker (its clients talk to brokers)")
        self.options = options
        self.spark = spark
        self.settings = options.cluster_settings()
        self.phase_seconds: dict[str, float] = {}
        self._phase_started: tuple[str, float] | None = None
        self.rng = random.Random(options.seed)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        run_dir = (options.store / options.scenario / stamp).resolve()
        suffix = 1
        while run_dir.exists():  # two runs in one second
            suffix += 1
            run_dir = (options.store / options.scenario / f"{stamp}-{suffix}").resolve()
        self.run_dir = run_dir
        self.run_dir.mkdir(parents=True)
        latest = options.store / "latest"
        with contextlib.suppress(FileNotFoundError):
            latest.unlink()
        latest.symlink_to(self.run_dir)
        self.status = status or (lambda line: None)
        self.faults_injected = 0
        self.faults_by_kind: dict[str, int] = {}
        self.active_faults: dict[int, str] = {}
        self._fault_tokens = iter(range(1, 10**9))
        self.history: HistoryRecorder | None = None
        self.network: NetworkTopology | None = None
        self.cluster: Cluster | KafkaCampaignCluster | None = None
        self.small_disk: tuple[int, SmallDisk] | None = None
        self.small_disk_unavailable: str | None = None
        self.phase = "starting"
        self.view = QuorumView(None, None, {})
        self.broker_view: dict[int, tuple[str, int]] = {}
        self.started_s: float | None = None
        self.started_ns: int | None = None  # the workload's start on the history's clock
        self.leader_at_start: int | None = None
        self.deadline_s: float | None = None
        self.prometheus: Any = None  # a jepsen_like.prometheus.Prometheus with --prometheus

    @property
    def processes(self) -> ProcessGroup:
        assert self.cluster is not None
        return self.cluster.processes

    def _phase(self, phase: str) -> None:
        now = time.monotonic()
        if self._phase_started is not None:
            name, since = self._phase_started
            self.phase_seconds[name] = round(self.phase_seconds.get(name, 0.0) + now - since, 2)
        self._phase_started = (phase, now)
        self.phase = phase
        self.status(phase)

    # =====================================================================
    # The run
    # =====================================================================

    async def run(self) -> CampaignResult:
        options = self.options
        (self.run_dir / "options.json").write_text(json.dumps(options.describe(), indent=2))
        run_id = f"{options.seed % 4096:x}{int(time.time()) % 100000:x}"[:6]
        (self.run_dir / "network.json").write_text(json.dumps({"backend": options.net, "run_id": run_id}))
        high_watermarks: dict[int, int] = {}
        network_options: dict[str, Any] = {"per_source_listener_roles": ("controller", "broker")} if options.system == "kafka" else {}
        with open_network(options.net, run_id=run_id, **network_options) as network, contextlib.ExitStack() as disks:
            self.network = network
            cluster = self.cluster = self._make_cluster(network)
            self.history = HistoryRecorder(self.run_dir / "history.jsonl", parquet=self.run_dir / "history.parquet")
            try:
                self._mount_small_disk(disks)
                self._phase(f"starting {options.controllers} controllers and {options.brokers} brokers ({options.system})")
                await trio.to_thread.run_sync(cluster.start_all)
                if options.prometheus:
                    self._phase("starting Prometheus")
                    self.prometheus = await trio.to_thread.run_sync(self._start_prometheus, cluster)
                self._phase("waiting for a leader")
                self.view = await cluster.wait_for_leader(timeout_s=60)
                if cluster.broker_ids:
                    self._phase("waiting for the brokers to be Online")
                    if not await cluster.wait_for_brokers_online(cluster.broker_ids, timeout_s=45):
                        logger.warning("not every broker came Online before the workload started")
                workload = self._make_workload()
                schedule = options.schedule
                if schedule is not None and self.view.leader is not None:
                    # Node ids follow the leader (docs/replay.md).
                    schedule = schedule.relabelled(self.view.leader)
                self.leader_at_start = self.view.leader
                self.started_s = trio.current_time()
                self.started_ns = self.history.now_ns()
                self.deadline_s = self.started_s + options.time_limit_s
                self._phase(f"running {options.scenario}")
                memory = MemoryTimeline(self.run_dir / "memory.csv", lambda: self.history.counts["invoke"], self._node_pids)
                disks.callback(memory.close)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch)
                    nursery.start_soon(memory.run, self.started_s)
                    async with trio.open_nursery() as run_nursery:
                        if schedule is None:
                            run_nursery.start_soon(workload.run, self.deadline_s)
                            run_nursery.start_soon(self._nemesis, self.deadline_s)
                        else:
                            assert isinstance(workload, Workload)
                            run_nursery.start_soon(workload.run_schedule, schedule.operations, self.started_s)
                            run_nursery.start_soon(run_faults, self, schedule, self.started_s)
                            run_nursery.start_soon(trio.sleep_until, self.deadline_s)
                    self._phase("healing")
                    await self._heal_everything()
                    self._phase("quiescing")
                    await cluster.wait_for_leader(timeout_s=60)
                    if cluster.broker_ids:
                        await cluster.wait_for_brokers_online(cluster.broker_ids, timeout_s=30)
                    await trio.sleep(options.quiesce_s)
                    self._phase("final reads")
                    await workload.final_reads(self.observer_endpoints())
                    high_watermarks = await cluster.high_watermarks()
                    nursery.cancel_scope.cancel()
            finally:
                self._phase("stopping the cluster")
                cluster.processes.stop_all()
                if self.prometheus is not None:
                    self.prometheus.stop()
                self.history.close()
                if options.system == "kafka":
                    # Also on Ctrl-C: nothing of Kafka's outlives the run
                    # but its logs (in logs/).
                    cluster.discard_data()
            self._phase("collecting node events and log dumps")
            if cluster.write_log_dumps(self.run_dir / "log-dumps.jsonl", high_watermarks) == 0 and options.system == "kafka":
                (self.run_dir / "log-dumps.jsonl").unlink(missing_ok=True)
            cluster.write_node_events(self.run_dir / "node-events.jsonl", self.history.start_wall_ns)
            self._write_meta()
            if self.started_ns is not None:
                self._write_schedule()
        counts = dict(self.history.counts)
        result = CampaignResult(
            self.run_dir, None, counts, self.faults_injected, faults_by_kind=dict(self.faults_by_kind), operations=counts.get("invoke", 0),
            peak_rss_recording_bytes=peak_rss_bytes(),
        )
        if options.check:
            self._phase("checking the history with Spark" if options.checker == "spark" else "checking the history (reference checker)")
            self._check(result)
        self._phase("writing the report")
        try:
            from jepsen_like.report import write_report

            result.report = write_report(self.run_dir)
        except Exception:  # noqa: BLE001 - the run's data stays; the report is a convenience
            logger.exception("the report failed")
        self._phase("done")
        result.phase_seconds = dict(self.phase_seconds)
        result.peak_rss_bytes = peak_rss_bytes()
        result.disk_bytes = directory_bytes(self.run_dir)
        if (self.run_dir / "memory.csv").exists():
            growth = growth_per_operation(self.run_dir / "memory.csv")
            if growth is not None:
                result.rss_growth_per_operation_bytes, result.python_blocks_per_operation = growth
        return result

    def _node_pids(self) -> list[int]:
        return [node.process.pid for node in self.processes.nodes.values() if node.running and node.process is not None]

    def _mount_small_disk(self, disks: contextlib.ExitStack) -> None:
        """For a scenario in ``SMALL_DISK_SCENARIOS``: the last controller's
        data directory becomes a size-capped tmpfs before it first starts
        (unmounted, its files copied back, when ``disks`` closes, after the
        log dumps). Without root it stays a plain directory, and the run
        says so once (status line, history, meta.json)."""
        assert self.cluster is not None and self.history is not None
        if self.options.scenario not in SMALL_DISK_SCENARIOS:
            return
        reason = small_disk_unavailable()
        if reason is not None:
            self.status(f"no small disk: {reason}; the disk-full faults are left out")
            self.history.nemesis("small-disk-unavailable", {"reason": reason})
            self.small_disk_unavailable = reason
            return
        node_id = self.cluster.controller_ids[-1]
        disk = SmallDisk(self.cluster.data_dir(node_id))
        disks.callback(disk.close)
        self.small_disk = (node_id, disk)
    def _make_cluster(self, network: NetworkTopology) -> Cluster | KafkaCampaignCluster:
        if self.options.system == "kafka":
            return KafkaCampaignCluster(network, self.settings, self.run_dir, heap_mb=self.options.kafka_heap_mb)
        return Cluster(network, self.settings, self.run_dir)

    def _make_workload(self) -> Workload | KafkaWorkload:
        assert self.history is not None
        options = self.options
        rng = random.Random(self.rng.getrandbits(64))
        if options.system == "kafka":
            return KafkaWorkload(self.history, self.client_endpoints, _workload_options(options), rng=rng)
        return Workload(self.history, self.client_endpoints, _workload_options(options), cluster_id=CLUSTER_ID, rng=rng)

    def client_endpoints(self, index: int) -> ClientEndpoints:
        """How workload client ``index`` reaches the cluster: every
        controller and broker through its own (cuttable) links."""
        assert self.network is not None and self.cluster is not None
        network, cluster = self.network, self.cluster
        name = cluster.client_name(index % self.options.clients)
        controllers = _rotated(network.bootstrap_for(name, cluster.controller_ids), index)
        brokers = {broker_id: network.address_for(name, broker_id) for broker_id in cluster.broker_ids}
        return ClientEndpoints(controllers, brokers, lambda: network.client_sockets(name), cluster.tls, self._broker_tls())

    def observer_endpoints(self) -> ClientEndpoints:
        """The harness's own (never cut): for the final reads."""
        assert self.network is not None and self.cluster is not None
        network, cluster = self.network, self.cluster
        brokers = {broker_id: network.address_for("harness", broker_id) for broker_id in cluster.broker_ids}
        return ClientEndpoints(cluster.observer_bootstrap(), brokers, cluster.observer_sockets, cluster.tls, self._broker_tls())

    def _broker_tls(self) -> Callable[[int], Any] | None:
        """Each synthetic broker's certificate with TLS; None without (a
        plaintext run registers them through the clients' own connection:
        ``Cluster.broker_tls`` raises there)."""
        assert self.cluster is not None
        return self.cluster.broker_tls if self.cluster.tls is not None else None

    async def _watch(self) -> None:
        """Keep ``view`` and ``broker_view`` fresh for the display."""
        assert self.cluster is not None
        while True:
            self.view = await self.cluster.quorum_view()
            self.broker_view = await self.cluster.broker_states()
            await trio.sleep(1.0)

    # =====================================================================
    # The nemesis
    # =====================================================================

    async def _nemesis(self, deadline_s: float) -> None:
        scenario = NEMESIS_SCENARIOS[self.options.scenario]
        await scenario(self, deadline_s)

    async def fault(self, name: str, start: Callable[[], Any], stop: Callable[[], Any], duration_s: float) -> None:
        """Run one fault for ``duration_s``, recorded at both ends.
        ``start`` and ``stop`` are synchronous (a signal, a network rule)."""

        async def body(value: Any) -> None:
            try:
                await trio.sleep(duration_s)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(stop)

        await self.fault_with(name, lambda: trio.to_thread.run_sync(start), body)

    async def net_fault(self, name: str, make: Callable[[], NetFault], duration_s: float) -> None:
        """A network fault, healed by itself (other faults stay)."""
        assert self.network is not None
        network = self.network
        made: list[NetFault] = []

        def start() -> NetFault:
            made.append(make())
            return made[0]

        def stop() -> None:
            if made and made[0] in network.active_faults():
                network.heal(made[0])

        await self.fault(name, start, stop, duration_s)

    async def fault_with(
        self, name: str, start: Callable[[], Awaitable[Any]], body: Callable[[Any], Awaitable[None]]
    ) -> None:
        """The general form: ``value = await start()``, recorded as the
        fault's start; ``await body(value)`` runs (and undoes) it; the end
        is recorded when it returns or fails."""
        assert self.history is not None
        described = await start()
        value = described.as_history_value() if hasattr(described, "as_history_value") else described
        self.history.nemesis(name, {"phase": "start", "fault": value})
        self.faults_injected += 1
        self.faults_by_kind[name] = self.faults_by_kind.get(name, 0) + 1
        token = next(self._fault_tokens)
        self.active_faults[token] = _fault_label(name, value)
        self.status(f"fault: {self.active_faults[token]}")
        try:
            await body(value)
        finally:
            del self.active_faults[token]
            self.history.nemesis(name, {"phase": "end", "fault": value})

    async def current_leader(self) -> int | None:
        """The leader as most reachable controllers see it now (None if unknown)."""
        assert self.cluster is not None
        self.view = await self.cluster.quorum_view()
        return self.view.leader

    async def _heal_everything(self) -> None:
        assert self.network is not None and self.history is not None
        await trio.to_thread.run_sync(self.network.heal)
        for node in self.processes.nodes.values():
            node.resume()
            if not node.running:
                node.start()
        self.history.nemesis("heal", {"phase": "all"})

    # =====================================================================
    # After the run
    # =====================================================================

    def _start_prometheus(self, cluster: Cluster) -> Any:
        """Start Prometheus scraping every node's metrics endpoint (and
        evaluating docs/prometheus/alerts.yml), its data in the run
        directory; write ``prometheus.json`` (the key queries and their
        links, and the command that serves the data again after the run)
        for the report. Raises ``PrometheusError`` when it does not start."""
        from jepsen_like.prometheus import ALERT_RULES, KEY_QUERIES, scrape_config, start_prometheus

        directory = self.run_dir / "prometheus"
        targets = {
            "pykraft": [("127.0.0.1", cluster.metrics_ports[node_id]) for node_id in cluster.controller_ids + cluster.broker_ids]
        }
        [port] = _free_ports(1)
        server = start_prometheus(directory, scrape_config(targets, rule_files=[ALERT_RULES]), port)
        described = {
            "url": server.url,
            "serve_again": (
                f"prometheus --config.file={directory / 'prometheus.yml'} --storage.tsdb.path={directory / 'data'}"
                f" --web.listen-address=127.0.0.1:{port}"
            ),
            "queries": [{"name": name, "promql": promql, "link": server.graph_link(promql)} for name, promql in KEY_QUERIES.items()],
        }
        (self.run_dir / "prometheus.json").write_text(json.dumps(described, indent=2))
        self.status(f"Prometheus at {server.url} (queries in prometheus.json and the report)")
        return server

    def _write_schedule(self) -> None:
        """``schedule.json``: the run's faults and operations as a schedule
        (docs/replay.md) that ``--replay`` and ``sim --from-campaign`` read."""
        assert self.history is not None and self.started_ns is not None
        options = self.options
        origin = f"campaign {options.scenario} seed {options.seed} ({self.run_dir.name})"
        if options.schedule is not None and options.schedule.origin:
            origin = f"replay of {options.schedule.origin}"
        schedule = schedule_of_run(self.history.path, options, self.leader_at_start, self.started_ns, origin)
        if options.system != "pykraft":
            schedule = dataclasses.replace(schedule, not_replayable=(f"system {options.system}: a schedule runs on pykraft", *schedule.not_replayable))
        write_schedule(self.run_dir, schedule)

    def _write_meta(self) -> None:
        options = self.options
        meta: dict[str, Any] = {
            "system": options.system,
            "model": "register" if options.workload == "register" and options.system == "pykraft" else "metadata",
            "check_quorum_factor": 1.5,
            "fetch_timeout_ms": options.fetch_timeout_ms,
            # Register reads carry their key's version; see _workloads.py.
            "offset_scope": "key",
            "campaign": options.describe(),
            "faults": self.faults_injected,
            "faults_by_kind": self.faults_by_kind,
        }
        if self.small_disk is not None:
            meta["small_disk"] = {"node": self.small_disk[0], "size_bytes": self.small_disk[1].size_bytes}
        elif self.small_disk_unavailable is not None:
            meta["small_disk"] = {"unavailable": self.small_disk_unavailable}
        if options.brokers:
            meta["staleness_bound_ms"] = self.settings.staleness_bound_ms()
            meta["broker_session_timeout_ms"] = options.session_timeout_ms
        (self.run_dir / "meta.json").write_text(json.dumps(meta, indent=2))

    def _check(self, result: CampaignResult) -> None:
        from jepsen_like.checker import check, check_reference, write_results

        try:
            if self.options.checker == "reference":
                [checked] = check_reference([str(self.run_dir)])
            else:
                # A session started here writes Spark's output to the run's logs.
                [checked] = check([str(self.run_dir)], spark=self.spark, spark_log=self.run_dir / "logs" / "spark.log")
        except Exception as error:  # noqa: BLE001 - reported, not raised: the run's data stays
            logger.exception("the checker failed")
            result.checker_error = f"{type(error).__name__}: {error}"
            return
        write_results([checked], self.run_dir / "results.json")
        result.valid = checked.valid
        result.anomalies = {
            name: int(check.get("count", 0)) for name, check in checked.checks.items() if check.get("status") == "fail"
        }


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux reports
    ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def directory_bytes(directory: Path) -> int:
    """Bytes of the files under ``directory`` (symbolic links not followed)."""
    total = 0
    for path in directory.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
    return total


def _fault_label(name: str, value: Any) -> str:
    if isinstance(value, dict):
        for field_name in ("node", "zone", "nodes"):
            if field_name in value:
                return f"{name} {value[field_name]}"
        if "side_a" in value and "side_b" in value:
            return f"{name} {value['side_a']}|{value['side_b']}"
        if "src" in value and "dst" in value:
            return f"{name} {value['src']}->{value['dst']}"
    return name


def _workload_options(options: CampaignOptions) -> WorkloadOptions:
    workload = WorkloadOptions(kind=options.workload, clients=options.clients, read_mode=options.read_mode)
    if options.scenario == "zombie-leader":
        # A stale leader-local read is one that misses a write acknowledged
        # more than check_quorum_factor x fetch_timeout before it: the keys
        # must live through whole partitions for the checker to see one.
        workload.keys_live = 2
        workload.ops_per_key = 10**9
        # Clients stuck on the zombie wait out their writes; reads are what
        # it answers, so they should be most of what clients do.
        workload.read_fraction = 0.8
        workload.metadata_fraction = 0.2
        # Clients keep going back to the node they know (the zombie answers
        # their reads), as Kafka clients do until their metadata refreshes.
        workload.fail_over_after_info = False
    return workload


def _rotated(bootstrap: list[str], index: int) -> list[str]:
    """Each client starts at a different node, so that clients are spread
    over the cluster (some keep talking to a node cut off from the others,
    as real clients do)."""
    shift = index % len(bootstrap)
    return bootstrap[shift:] + bootstrap[:shift]

__all__ = ["Campaign", "CampaignResult"]
