"""Apache Kafka 4.4's KRaft as a campaign target (``--system kafka``).

The same layout as a pykraft campaign (``_cluster``): controllers 1..N in
zones ``az<i>``, brokers 101.., workload clients and the harness, every
link through the nemesis's proxy. Kafka tells its peers where to
reconnect (a controller leader sends its own controller endpoints in
BeginQuorumEpoch and Fetch answers, KIP-853; a broker answers a client with
its advertised addresses), so each member gets listeners of its own
(``ProxyNetwork(per_source_listener_roles=...)``: one port on the node per
member that links to it) and each listener advertises that member's own
proxy link. Listener names are the members': ``NODE2``, ``NODE101``,
``CLIENT0``, ``HARNESS``.

- a controller listens on ``NODE<x>`` for every other node ``x`` and lists
  them all in ``controller.listener.names``, its own ``NODE<n>`` first:
  Kafka looks a leader's endpoint up by the first controller listener name
  of the node that connects, so node ``x`` always reaches a controller
  through link ``x -> controller``. ``controller.quorum.voters`` names the
  voters at the same links (its own entry at its listen address). A zombie
  leader or a broker cut from the controllers is a proxy rule, as for
  pykraft;
- a broker has one listener per client (``CLIENT0``, ``HARNESS``...), and
  advertises on it the client's own links to every broker: Kafka answers a
  client with the addresses of the listener the request came in on, so
  each client keeps using its own, cuttable, links after bootstrap;
- brokers replicate from each other on ``INTERNAL``, advertised at their
  listen address: one address per broker for every other broker, which a
  per-pair proxy link cannot be. The workload never produces, so that
  traffic is empty fetches; it is the one path the nemesis does not cut.

The processes are ``NodeProcess`` objects running the argv of
``KafkaCluster.command`` (the adapter in ``kafka.py``): the scenarios kill,
pause and restart them by pid as they do pykraft's. The harness reads the
quorum from the controllers' ``quorum-state`` files (leader and epoch) and
the brokers' liveness from the harness's own Metadata answers; the node
events are Kafka's own log lines (``role`` from the Raft client's
"Completed transition to ..." lines, ``controller_broker_state`` from the
active controller's replayed broker registration changes), on the
history's clock. Once the run is over the Kafka data directories are
removed; the logs stay in ``logs/``.

``docs/kafka-campaign.md`` says what the checker holds Kafka to.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from jepsen_like.nemesis import NetworkTopology, ProxyNetwork

from ._cluster import OBSERVER, ClusterMembers, ClusterSettings, QuorumView, broker_ids, client_name, controller_ids, lay_out
from ._processes import NodeProcess, ProcessGroup
from .kafka import KafkaCluster, KafkaNode, KafkaNotFetched, kafka_problem

logger = logging.getLogger("pykraft.campaign")

#: Campaign JVMs: small heaps and quick starts on a shared 2-core machine
#: (the C1 compiler only, one GC thread); Kafka's own flags are for servers.
CAMPAIGN_JVM_FLAGS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:CICompilerCount=1",
    "-Xss512k",
    "-Djava.awt.headless=true",
)
DEFAULT_KAFKA_HEAP_MB = 256
INTERNAL_LISTENER = "INTERNAL"


def listener_name(member_id: int | str) -> str:
    """A member's own listener on the nodes it talks to: ``NODE<id>`` for a
    node, the client's id in capitals for a client."""
    if isinstance(member_id, int):
        return f"NODE{member_id}"
    return re.sub(r"[^A-Z0-9_]", "_", member_id.upper())


def client_problem() -> str | None:
    """None when the Kafka client the workload uses can be imported; else
    one sentence saying how to install it."""
    try:
        import confluent_kafka  # noqa: F401 - only whether it imports
    except ImportError:
        return "the Kafka campaign's client is missing: pip install confluent-kafka==2.16.1 (the bench extra)"
    return None


@dataclass(slots=True, frozen=True)
class ControllerAnswer:
    """What one controller's persisted election state says (the shape of
    pykraft's DescribeQuorum answer the scenarios read)."""

    leader_id: int | None
    epoch: int | None
    high_watermark: int | None = None


class KafkaCampaignCluster(ClusterMembers):
    """Kafka controllers and brokers laid out on ``network`` (a
    ``ProxyNetwork`` with per-client broker listeners). The same interface
    as ``Cluster``, for the runner and the scenarios.

    Raises ``KafkaNotFetched`` when Kafka is not in the cache and
    ``ValueError`` when ``network`` cannot route Kafka (not the proxy)."""

    # Each look at the quorum asks a controller over the admin client.
    leader_poll_s = 0.2

    def __init__(self, network: NetworkTopology, settings: ClusterSettings, run_dir: Path, *, heap_mb: int = DEFAULT_KAFKA_HEAP_MB) -> None:
        problem = kafka_problem() or client_problem()
        if problem:
            raise KafkaNotFetched(problem)
        if not isinstance(network, ProxyNetwork) or not {"controller", "broker"} <= set(network.per_source_listener_roles):
            raise ValueError("a Kafka campaign needs --net proxy with a listener per source (each member's links are listeners of their own)")
        if settings.controllers < 1 or settings.brokers < 1:
            raise ValueError("a Kafka campaign needs at least one controller and one broker (clients talk to brokers)")
        self.network: ProxyNetwork = network
        self.settings = settings
        self.run_dir = run_dir
        # A Kafka campaign runs without pykraft's TLS (the runner refuses
        # --tls): the clients' endpoints carry no certificate.
        self.tls: None = None
        self.logs_dir = run_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.processes = ProcessGroup()
        lay_out(network, settings)
        self.kafka = KafkaCluster(
            run_dir / "kafka",
            controllers=settings.controllers,
            brokers=settings.brokers,
            heap_mb=heap_mb,
            overrides=self._common_properties(),
            allocate_ports=self._listen_ports,
            node_properties=self._routed_properties,
            jvm_flags=CAMPAIGN_JVM_FLAGS,
        )
        for node_id, node in sorted(self.kafka.nodes.items()):
            role = "controller" if "controller" in node.roles else "broker"
            self.processes.add(NodeProcess(node_id, role, self._argv(node_id), self.logs_dir / f"node{node_id}.log"))
        self._observer_admins: dict[int, Any] = {}

    # ------------------------------------------------------------------
    # Members
    # ------------------------------------------------------------------

    def broker_tls(self, broker_id: int) -> None:
        """No certificates in a Kafka campaign (see ``tls``)."""
        del broker_id
        return None


    # ------------------------------------------------------------------
    # Configuration
    # ------------------------------------------------------------------

    def _common_properties(self) -> dict[str, str]:
        settings = self.settings
        return {
            # The same timers as the pykraft side (KIP-595's names).
            "controller.quorum.election.timeout.ms": str(settings.election_timeout_ms),
            "controller.quorum.fetch.timeout.ms": str(settings.fetch_timeout_ms),
            "broker.session.timeout.ms": str(settings.session_timeout_ms),
            "broker.heartbeat.interval.ms": str(settings.heartbeat_interval_ms),
            # A Metadata request must never create the topic it asks about.
            "auto.create.topics.enable": "false",
            "num.network.threads": "1",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            # The log cleaner's dedupe buffer (128 MB by default) is
            # allocated at start-up: it alone would not fit a small heap.
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        }

    def _listen_ports(self, count: int) -> list[int]:
        """The ports ``KafkaCluster`` asks for, in its order: the
        controllers' controller ports, the (unused) combined broker ports,
        the brokers' ports: the network's listen addresses."""
        controllers = [self.network.listen_address(node_id)[1] for node_id in self.controller_ids]
        brokers = [self.network.listen_address(node_id)[1] for node_id in self.broker_ids]
        ports = controllers + [0] * len(controllers) + brokers
        assert len(ports) == count, (len(ports), count)
        return ports

    def _routed_properties(self, node: KafkaNode) -> dict[str, str]:
        network, node_id = self.network, node.node_id
        own = listener_name(node_id)

        def per_source(sources: list[Any]) -> tuple[list[str], list[str], list[str]]:
            names, listeners, advertised = [], [], []
            for src in sources:
                name = listener_name(src)
                listen_host, listen_port = network.source_listen_address(node_id, src)
                link_host, link_port = network.address_for(src, node_id)
                names.append(name)
                listeners.append(f"{name}://{listen_host}:{listen_port}")
                advertised.append(f"{name}://{link_host}:{link_port}")
            return names, listeners, advertised

        properties = {"controller.quorum.voters": network.voters_arg(node_id, self.controller_ids)}
        host, port = network.listen_address(node_id)
        if "broker" not in node.roles:
            names, listeners, advertised = per_source([other for other in network.nodes() if other != node_id])
            # Its own name at its listen address (its entry in the voters;
            # the harness probes it there); nobody else dials by that name.
            properties.update(
                {
                    # The first name is the one this node dials others by.
                    "controller.listener.names": ",".join([own, *names]),
                    "listeners": ",".join([f"{own}://{host}:{port}", *listeners]),
                    "advertised.listeners": ",".join([f"{own}://{host}:{port}", *advertised]),
                    "listener.security.protocol.map": ",".join(f"{name}:PLAINTEXT" for name in [own, *names]),
                }
            )
            return properties
        names, listeners, advertised = per_source(network.clients() + network.observers())
        properties.update(
            {
                "controller.listener.names": own,
                "listeners": ",".join([f"{INTERNAL_LISTENER}://{host}:{port}", *listeners]),
                "advertised.listeners": ",".join([f"{INTERNAL_LISTENER}://{host}:{port}", *advertised]),
                "inter.broker.listener.name": INTERNAL_LISTENER,
                "listener.security.protocol.map": ",".join(f"{name}:PLAINTEXT" for name in [own, INTERNAL_LISTENER, *names]),
            }
        )
        return properties

    def _argv(self, node_id: int) -> Any:
        def argv() -> list[str]:
            return self.network.run_in(node_id, self.kafka.command(node_id))

        return argv

    def start_all(self) -> None:
        """Format every node's storage (once), then start every node.
        Raises ``KafkaStartError`` when formatting fails."""
        if not all((node.data_dir / "meta.properties").exists() for node in self.kafka.nodes.values()):
            self.kafka.format_storage()
        for node in self.processes.nodes.values():
            node.start()

    # ------------------------------------------------------------------
    # The harness's view
    # ------------------------------------------------------------------

    def observer_sockets(self) -> Any:
        return self.network.client_sockets(OBSERVER)

    def observer_bootstrap(self, node_ids: list[int] | None = None) -> list[str]:
        return self.network.bootstrap_for(OBSERVER, node_ids if node_ids is not None else self.broker_ids)

    def _controller_up(self, node_id: int) -> bool:
        node = self.processes.nodes[node_id]
        if not node.running or node.paused:
            return False
        host, port = self.network.listen_address(node_id)
        try:
            with socket.create_connection((host, port), timeout=0.3):
                return True
        except OSError:
            return False

    def _election_state(self, node_id: int) -> ControllerAnswer | None:
        state = self.kafka.quorum_state(node_id)
        if state is None:
            return None
        leader = state.get("leaderId")
        epoch = state.get("leaderEpoch")
        return ControllerAnswer(
            leader if isinstance(leader, int) and leader >= 0 else None, epoch if isinstance(epoch, int) else None
        )

    async def describe_node(self, node_id: int, timeout_s: float = 0.5) -> ControllerAnswer | None:
        """A running, listening controller's persisted election state
        (Kafka writes it on every change of epoch or leader), or None."""
        if node_id not in self.controller_ids:
            return None
        if not await trio.to_thread.run_sync(self._controller_up, node_id):
            return None
        return self._election_state(node_id)

    async def quorum_view(self) -> QuorumView:
        """The leader at the highest epoch any running controller has
        persisted (a zombie's own state names an older epoch)."""
        answers = {}
        for node_id in self.controller_ids:
            answer = await self.describe_node(node_id)
            if answer is not None and answer.epoch is not None:
                answers[node_id] = answer
        if not answers:
            return QuorumView(None, None, {})
        epoch = max(answer.epoch for answer in answers.values() if answer.epoch is not None)
        leaders = {answer.leader_id for answer in answers.values() if answer.epoch == epoch and answer.leader_id is not None}
        leader = leaders.pop() if len(leaders) == 1 else None
        return QuorumView(leader, epoch, {})

    def _observer_admin(self, broker_id: int) -> Any:
        admin = self._observer_admins.get(broker_id)
        if admin is None:
            from confluent_kafka.admin import AdminClient

            host, port = self.network.address_for(OBSERVER, broker_id)
            admin = AdminClient(
                {"bootstrap.servers": f"{host}:{port}", "logger": logging.getLogger("pykraft.kafka.client"), "log_level": 3}
            )
            self._observer_admins[broker_id] = admin
        return admin

    def _live_brokers(self, timeout_s: float) -> set[int] | None:
        for broker_id in self.broker_ids:
            node = self.processes.nodes[broker_id]
            if not node.running or node.paused:
                continue
            try:
                return set(self._observer_admin(broker_id).list_topics(timeout=timeout_s).brokers)
            except Exception:  # noqa: BLE001 - try the next broker
                continue
        return None

    async def broker_states(self, timeout_s: float = 1.0) -> dict[int, tuple[str, int]]:
        """broker id -> ("Online" | "Fenced", -1): Online when a broker's
        Metadata answer to the harness lists it (Kafka lists registered,
        unfenced brokers). Kafka's broker epochs are not in Metadata
        answers: -1. Empty when no broker answers."""
        live = await trio.to_thread.run_sync(self._live_brokers, timeout_s)
        if live is None:
            return {}
        return {broker_id: ("Online" if broker_id in live else "Fenced", -1) for broker_id in self.broker_ids}

    async def wait_for_brokers_online(
        self, broker_ids: list[int], timeout_s: float, *, not_epochs: dict[int, int] | None = None
    ) -> bool:
        """Whether every broker in ``broker_ids`` is listed in the
        brokers' metadata within ``timeout_s``. ``not_epochs`` is ignored:
        Kafka does not show broker epochs to clients (a restarted broker
        is fenced by its new registration, so it shows again only once
        registered anew)."""
        with trio.move_on_after(timeout_s):
            while True:
                states = await self.broker_states()
                if all(states.get(broker_id, ("",))[0] == "Online" for broker_id in broker_ids):
                    return True
                await trio.sleep(0.3)
        return False

    async def high_watermarks(self) -> dict[int, int]:
        """Kafka's high watermarks are not collected (no log dumps)."""
        return {}

    # ------------------------------------------------------------------
    # After the run
    # ------------------------------------------------------------------

    def write_log_dumps(self, path: Path, high_watermarks: dict[int, int]) -> int:
        """None: the Kafka target is checked from its history and its
        final reads (docs/kafka-campaign.md). Returns 0."""
        return 0

    def write_node_events(self, path: Path, start_wall_ns: int) -> int:
        """Role changes (every node's Raft client, brokers are observers)
        and the active controller's broker fences and unfences, from the
        Kafka logs, as the checker's node events. Returns how many."""
        events: list[dict[str, Any]] = []
        for node_id in self.processes.ids():
            log_path = self.processes.nodes[node_id].log_path
            try:
                text = log_path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            events.extend(kafka_node_events(text, node_id, start_wall_ns))
        events.sort(key=lambda event: (event["time"], event["node"]))
        with open(path, "w", encoding="utf-8") as out:
            for event in events:
                out.write(json.dumps(event) + "\n")
        return len(events)

    def discard_data(self) -> None:
        """Remove every Kafka data directory and configuration the run
        created (the processes are stopped by then; logs stay in ``logs/``)."""
        self._observer_admins.clear()
        shutil.rmtree(self.kafka.run_dir, ignore_errors=True)


# ---------------------------------------------------------------------------
# Kafka's log lines as node events
# ---------------------------------------------------------------------------

_TRANSITION = re.compile(r"^(\d{13}) .*Completed transition to (\w+?)(?:State)?\((.*)\) from ")
_CHECK_QUORUM = re.compile(r"^(\d{13}) .*Did not receive fetch request from the majority of the voters within (\d+)ms")
_EPOCH = re.compile(r"\bepoch=(\d+)")
_LEADER = re.compile(r"\bleader(?:Id)?=(?:OptionalInt\[)?(\d+)")
_FENCE = re.compile(r"^(\d{13}) .*Replayed BrokerRegistrationChangeRecord.*brokerId=(\d+), brokerEpoch=(\d+), fenced=(-?\d+)")
_ROLE_NAMES = {
    "Leader": "leader",
    "Follower": "follower",
    "Candidate": "candidate",
    "Prospective": "prospective",
    "Resigned": "resigned",
    "Unattached": "unattached",
}


def kafka_node_events(text: str, node_id: int, start_wall_ns: int) -> list[dict[str, Any]]:
    """Node events (docs/checker.md, "Node event logs") from one Kafka
    node's log, whose lines start with the wall clock in ms (the adapter's
    log4j pattern): a ``role`` event for each "Completed transition to
    XState(...)" of its Raft client (a resignation that follows the leader's
    check-quorum line says so in its ``reason``), and a
    ``controller_broker_state`` for each broker fence (``fenced=1``) or
    unfence (``fenced=-1``) it replayed. Unreadable lines are skipped."""
    events: list[dict[str, Any]] = []
    check_quorum: str | None = None
    for line in text.splitlines():
        match = _CHECK_QUORUM.match(line)
        if match:
            check_quorum = f"check quorum: no Fetch from a majority of the voters within {match.group(2)} ms"
            continue
        match = _TRANSITION.match(line)
        if match:
            stamp, state, body = match.groups()
            role = _ROLE_NAMES.get(state)
            epoch = _EPOCH.search(body)
            if role is None or epoch is None:
                continue
            leader: str | None = None
            reason = "kafka: " + state + ("State" if state != "Leader" else "")
            if role in ("leader", "resigned"):
                leader = str(node_id)
                if role == "resigned" and check_quorum is not None:
                    reason = f"kafka: {check_quorum}"
            else:
                named = _LEADER.search(body)
                leader = named.group(1) if named else None
            check_quorum = None
            events.append(
                {
                    "time": max(0, int(stamp) * 1_000_000 - start_wall_ns),
                    "node": str(node_id),
                    "kind": "role",
                    "role": role,
                    "epoch": int(epoch.group(1)),
                    "leader": leader if role != "resigned" else None,
                    "reason": reason,
                }
            )
            continue
        match = _FENCE.match(line)
        if match:
            stamp, broker_id, broker_epoch, fenced = match.groups()
            if fenced not in ("1", "-1"):
                continue
            events.append(
                {
                    "time": max(0, int(stamp) * 1_000_000 - start_wall_ns),
                    "node": str(node_id),
                    "kind": "controller_broker_state",
                    "broker_id": broker_id,
                    "broker_epoch": int(broker_epoch),
                    "state": "fenced" if fenced == "1" else "online",
                    "previous_state": None,
                    "cause": "kafka: BrokerRegistrationChangeRecord",
                    "offset": None,
                }
            )
    return events


__all__ = ["CAMPAIGN_JVM_FLAGS", "DEFAULT_KAFKA_HEAP_MB", "KafkaCampaignCluster", "client_problem", "kafka_node_events", "listener_name"]
