"""A fault-injection campaign against real processes on this machine.

One run: start the cluster behind the nemesis's network, wait until it is
ready, run the workload and the nemesis for the time limit, heal every
fault, let the cluster quiesce, read every key a last time, dump each
node's committed log, stop everything, and check the history with the
Spark checker. Everything lands in ``store/<campaign>/<timestamp>/``;
``store/latest`` points at the newest run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trio

from jepsen_like.nemesis import NetworkTopology, open_network
from quorum.client import QuorumClient
from quorum.runtime import KeyValueStateMachine
from quorum.storage import FileStorage

from ._history import HistoryRecorder
from ._processes import NodeProcess, ProcessGroup
from ._workloads import RegisterWorkload, RegisterWorkloadOptions

logger = logging.getLogger("pykraft.campaign")

BIN = Path(sys.executable).parent
CLUSTER_ID = "campaign"


@dataclass(slots=True)
class CampaignOptions:
    scenario: str = "chaos"
    time_limit_s: float = 60.0
    controllers: int = 3
    workload: str = "register"
    read_mode: str = "linearizable"
    check_quorum: bool = True
    net: str = "proxy"
    seed: int = 0
    store: Path = Path("store")
    clients: int = 6
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    quiesce_s: float = 5.0
    check: bool = True

    def describe(self) -> dict[str, Any]:
        described = asdict(self)
        described["store"] = str(self.store)
        return described


@dataclass(slots=True)
class CampaignResult:
    run_dir: Path
    valid: bool | None
    ops: dict[str, int]
    faults: int
    anomalies: dict[str, int] = field(default_factory=dict)
    checker_error: str | None = None
    report: Path | None = None


class Campaign:
    """One run. ``await Campaign(options).run()``."""

    def __init__(self, options: CampaignOptions, *, status: Callable[[str], None] | None = None) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self.run_dir = (options.store / options.scenario / stamp).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "logs").mkdir(exist_ok=True)
        latest = options.store / "latest"
        with contextlib.suppress(FileNotFoundError):
            latest.unlink()
        latest.symlink_to(self.run_dir)
        self.processes = ProcessGroup()
        self.status = status or (lambda line: None)
        self.faults_injected = 0
        self.start_wall_ns = time.time_ns()
        self.history: HistoryRecorder | None = None
        self.network: NetworkTopology | None = None

    # =====================================================================
    # The run
    # =====================================================================

    async def run(self) -> CampaignResult:
        options = self.options
        (self.run_dir / "options.json").write_text(json.dumps(options.describe(), indent=2))
        with open_network(options.net, run_id=f"{options.seed:x}{int(time.time()) % 100000:x}") as network:
            self.network = network
            self._lay_out(network)
            self.history = HistoryRecorder(self.run_dir / "history.jsonl")
            try:
                for node in self.processes.nodes.values():
                    node.start()
                self.status("waiting for a leader")
                await self._wait_for_leader(timeout_s=30)
                deadline = trio.current_time() + options.time_limit_s
                workload = RegisterWorkload(
                    self.history,
                    lambda index: _rotated(network.bootstrap_for(f"client{index % options.clients}"), index),
                    _workload_options(options),
                    cluster_id=CLUSTER_ID,
                    rng=random.Random(self.rng.getrandbits(64)),
                )
                self.status(f"running {options.scenario} for {options.time_limit_s:.0f} s")
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(workload.run, deadline)
                    nursery.start_soon(self._nemesis, deadline)
                await self._heal_everything()
                self.status("quiescing")
                await self._wait_for_leader(timeout_s=30)
                await trio.sleep(options.quiesce_s)
                await self._final_reads(workload)
                high_watermarks = await self._high_watermarks()
            finally:
                self.processes.stop_all()
                self.history.close()
            self._write_log_dumps(high_watermarks)
            self._write_node_events()
            self._write_meta()
        result = CampaignResult(self.run_dir, None, dict(self.history.counts), self.faults_injected)
        if options.check:
            self.status("checking the history with Spark")
            self._check(result)
        try:
            from jepsen_like.report import write_report

            result.report = write_report(self.run_dir)
        except Exception:  # noqa: BLE001 - the run's data stays; the report is a convenience
            logger.exception("the report failed")
        return result

    def _lay_out(self, network: NetworkTopology) -> None:
        options = self.options
        for node_id in range(1, options.controllers + 1):
            network.add_node(node_id, "controller", zone=f"az{node_id}")
        for index in range(options.clients):
            network.add_client(f"client{index}")
        for node_id in network.nodes():
            self.processes.add(
                NodeProcess(
                    node_id,
                    "controller",
                    argv=self._argv_for(network, node_id),
                    log_path=self.run_dir / "logs" / f"node{node_id}.log",
                )
            )

    def _argv_for(self, network: NetworkTopology, node_id: int) -> Callable[[], list[str]]:
        options = self.options

        def argv() -> list[str]:
            host, port = network.listen_address(node_id)
            command = [
                str(BIN / "kraft-quorum"),
                "node",
                "--node-id", str(node_id),
                "--voters", network.voters_arg(node_id),
                "--listen", f"{host}:{port}",
                "--data-dir", str(self.run_dir / "data" / f"node{node_id}"),
                "--cluster-id", CLUSTER_ID,
                "--event-log", str(self.run_dir / "logs" / f"node{node_id}.events.jsonl"),
                "--election-timeout-ms", str(options.election_timeout_ms),
                "--fetch-timeout-ms", str(options.fetch_timeout_ms),
                "--snapshot-every-records", "5000",
            ]  # fmt: skip
            if not options.check_quorum:
                command.append("--no-check-quorum")
            return network.run_in(node_id, command)

        return argv

    # =====================================================================
    # The nemesis
    # =====================================================================

    async def _nemesis(self, deadline_s: float) -> None:
        scenario = NEMESIS_SCENARIOS[self.options.scenario]
        await scenario(self, deadline_s)

    async def fault(self, name: str, start: Callable[[], Any], stop: Callable[[], Any], duration_s: float) -> None:
        """Run one fault for ``duration_s``, recorded at both ends."""
        assert self.history is not None
        described = start()
        value = described.as_history_value() if hasattr(described, "as_history_value") else described
        self.history.nemesis(name, {"phase": "start", "fault": value})
        self.faults_injected += 1
        self.status(f"fault: {name} {value}")
        try:
            await trio.sleep(duration_s)
        finally:
            stop()
            self.history.nemesis(name, {"phase": "end", "fault": value})

    async def current_leader(self) -> int | None:
        """The leader as most reachable controllers see it (None if unknown)."""
        assert self.network is not None
        views: dict[int, int] = {}
        for node_id in self.network.nodes(role="controller"):
            if not self.processes.nodes[node_id].running:
                continue
            try:
                host, port = self.network.listen_address(node_id)
                async with QuorumClient([f"{host}:{port}"], cluster_id=CLUSTER_ID, retry_timeout_s=0.5, request_timeout_s=0.5) as client:
                    answer = await client.describe()
            except Exception:  # noqa: BLE001 - a node that does not answer has no view
                continue
            if answer.leader_id is not None:
                views[answer.leader_id] = views.get(answer.leader_id, 0) + 1
        if not views:
            return None
        return max(sorted(views), key=lambda leader: views[leader])

    async def _wait_for_leader(self, timeout_s: float) -> int:
        with trio.fail_after(timeout_s):
            while True:
                leader = await self.current_leader()
                if leader is not None:
                    return leader
                await trio.sleep(0.1)

    async def _heal_everything(self) -> None:
        assert self.network is not None and self.history is not None
        self.network.heal()
        for node in self.processes.nodes.values():
            node.resume()
            if not node.running:
                node.start()
        self.history.nemesis("heal", {"phase": "all"})

    # =====================================================================
    # After the run
    # =====================================================================

    async def _final_reads(self, workload: RegisterWorkload) -> None:
        """One linearizable read of every key touched, after healing: lost
        acknowledged writes show up here."""
        assert self.history is not None and self.network is not None
        keys = sorted(workload.touched_keys())
        process = 1_000_000
        async with QuorumClient(self.network.bootstrap_for("client0"), cluster_id=CLUSTER_ID, retry_timeout_s=10) as client:
            for key in keys:
                self.history.record(process, "invoke", "read", key, None, mode="linearizable", final=True)
                try:
                    read_offset, answer = await client.read(key.encode(), mode="linearizable")
                except Exception as error:  # noqa: BLE001 - recorded, the checker decides
                    self.history.record(process, "info", "read", key, None, mode="linearizable", error=str(error)[:200])
                    process += 1
                    continue
                found, version = KeyValueStateMachine.decode_answer(answer) if answer else (None, -1)
                value = int(found) if found is not None else None
                self.history.record(process, "ok", "read", key, value, mode="linearizable", offset=version, read_offset=read_offset, final=True)

    async def _high_watermarks(self) -> dict[int, int]:
        """Each node's own high watermark, before it is stopped."""
        assert self.network is not None
        marks: dict[int, int] = {}
        for node_id in self.network.nodes():
            host, port = self.network.listen_address(node_id)
            try:
                async with QuorumClient([f"{host}:{port}"], cluster_id=CLUSTER_ID, retry_timeout_s=2) as client:
                    marks[node_id] = (await client.describe()).high_watermark
            except Exception:  # noqa: BLE001 - no mark, no dump comparison for it
                logger.warning("node %d did not say its high watermark", node_id)
        return marks

    def _write_log_dumps(self, high_watermarks: dict[int, int]) -> None:
        """Every node's committed records (below its own high watermark),
        read back from its data directory once it has stopped."""
        with open(self.run_dir / "log-dumps.jsonl", "w", encoding="utf-8") as out:
            for node_id, hwm in sorted(high_watermarks.items()):
                data_dir = self.run_dir / "data" / f"node{node_id}"
                try:
                    storage = FileStorage.open(data_dir, fsync=False)
                except Exception:  # noqa: BLE001 - a node that never wrote has no log
                    logger.exception("cannot open the log of node %d", node_id)
                    continue
                with storage:
                    for entry in storage.log.entries_from():
                        if entry.offset >= hwm:
                            break
                        digest = hashlib.sha256(bytes([int(entry.kind)]) + entry.data).hexdigest()[:16]
                        record = {"node": str(node_id), "offset": entry.offset, "epoch": entry.epoch, "record_hash": digest, "hwm": hwm}
                        out.write(json.dumps(record) + "\n")

    def _write_node_events(self) -> None:
        with open(self.run_dir / "node-events.jsonl", "w", encoding="utf-8") as out:
            # The nodes' own event logs (wall-clock ns) become the checker's
            # node events (ns since the run began, one clock: this host's).
            for raw in sorted((self.run_dir / "logs").glob("node*.events.jsonl")):
                for line in raw.read_text().splitlines():
                    event = json.loads(line)
                    if event.get("event") != "role":
                        continue
                    out.write(
                        json.dumps(
                            {
                                "time": max(0, event["wall_ns"] - self.start_wall_ns),
                                "node": str(event["node"]),
                                "kind": "role",
                                "role": event["role"],
                                "epoch": event["epoch"],
                                "leader": None if event["leader"] is None else str(event["leader"]),
                            }
                        )
                        + "\n"
                    )

    def _write_meta(self) -> None:
        options = self.options
        meta = {
            "model": "register",
            "check_quorum_factor": 1.5,
            "fetch_timeout_ms": options.fetch_timeout_ms,
            "offset_scope": "key",
            "campaign": options.describe(),
            "faults": self.faults_injected,
        }
        (self.run_dir / "meta.json").write_text(json.dumps(meta, indent=2))

    def _check(self, result: CampaignResult) -> None:
        from jepsen_like.checker import check, write_results

        try:
            [checked] = check([str(self.run_dir)])
        except Exception as error:  # noqa: BLE001 - reported, not raised: the run's data stays
            logger.exception("the checker failed")
            result.checker_error = f"{type(error).__name__}: {error}"
            return
        write_results([checked], self.run_dir / "results.json")
        result.valid = checked.valid
        result.anomalies = {
            name: int(check.get("count", 0)) for name, check in checked.checks.items() if check.get("status") == "fail"
        }


def _workload_options(options: CampaignOptions) -> RegisterWorkloadOptions:
    workload = RegisterWorkloadOptions(clients=options.clients, read_mode=options.read_mode)
    if options.scenario == "zombie-leader":
        # A stale leader-local read is one that misses a write acknowledged
        # more than check_quorum_factor x fetch_timeout before it: the keys
        # must live through whole partitions for the checker to see one.
        workload.keys_live = 2
        workload.ops_per_key = 10**9
        # Clients stuck on the zombie wait out their writes; reads are what
        # it answers, so they should be most of what clients do.
        workload.read_fraction = 0.8
    return workload


def _rotated(bootstrap: list[str], index: int) -> list[str]:
    """Each client starts at a different node, so that clients are spread
    over the cluster (some keep talking to a node cut off from the others,
    as real clients do)."""
    shift = index % len(bootstrap)
    return bootstrap[shift:] + bootstrap[:shift]


# =========================================================================
# Named campaigns: each drives faults until the deadline
# =========================================================================


async def _zombie_leader(campaign: Campaign, deadline_s: float) -> None:
    """KAFKA-15489: cut the leader from the other controllers (not from its
    clients) for longer than the check-quorum timeout, again and again."""
    network = campaign.network
    assert network is not None
    # Long enough for a new leader to be elected (the fetch timeout) and its
    # writes to age past the check-quorum bound while the old one serves.
    isolation_s = 3 * options_bound_s(campaign.options) + 4
    while trio.current_time() + isolation_s + 3 < deadline_s:
        await trio.sleep(3)
        leader = await campaign.current_leader()
        if leader is None:
            continue
        await campaign.fault("isolate-leader", lambda: network.isolate(leader), network.heal, isolation_s)


def options_bound_s(options: CampaignOptions) -> float:
    """check_quorum_factor x fetch_timeout, in seconds."""
    return 1.5 * options.fetch_timeout_ms / 1000


async def _chaos(campaign: Campaign, deadline_s: float) -> None:
    """Everything at random: partitions of every shape, kill -9 and
    restart, SIGSTOP / SIGCONT."""
    network = campaign.network
    assert network is not None
    rng = random.Random(campaign.rng.getrandbits(64))
    nodes = campaign.processes.nodes
    while trio.current_time() + 6 < deadline_s:
        await trio.sleep(rng.uniform(1.0, 3.0))
        choice = rng.random()
        victim_id = rng.choice(sorted(nodes))
        victim = nodes[victim_id]
        if choice < 0.25:
            leader = await campaign.current_leader()
            target = leader if leader is not None else victim_id
            await campaign.fault("isolate", lambda: network.isolate(target), network.heal, rng.uniform(2, 6))
        elif choice < 0.45:
            await campaign.fault("partition-halves", lambda: network.split_random_halves(rng), network.heal, rng.uniform(2, 6))
        elif choice < 0.6:
            await campaign.fault("kill", lambda: (victim.kill(), {"node": victim_id})[1], victim.start, rng.uniform(1, 4))
        elif choice < 0.75:
            await campaign.fault("pause", lambda: (victim.pause(), {"node": victim_id})[1], victim.resume, rng.uniform(1, 4))
        else:
            others = [n for n in sorted(nodes) if n != victim_id]
            await campaign.fault(
                "one-way-cut", lambda: network.cut_one_way(victim_id, others), network.heal, rng.uniform(2, 5)
            )


NEMESIS_SCENARIOS: dict[str, Callable[[Campaign, float], Awaitable[None]]] = {
    "zombie-leader": _zombie_leader,
    "chaos": _chaos,
}
