"""The campaign's cluster: ``kraft-controller`` and ``kraft-broker``
processes behind the nemesis's network, the harness's own view of them,
and what is collected from them once the run is over (node events, log
dumps).

Layout (N controllers, M brokers, C clients):

- controller ``i`` (1..N) in zone ``az<i>``;
- broker ``100 + j`` (j = 1..M) in zone ``az<(j - 1) % N + 1>``, so that a
  zone holds a controller and a broker together (seed 003 cases 3 and 4);
- workload client ``client<k>`` in zone ``az<k % N + 1>``;
- ``harness``: an observer client no fault ever cuts, for the runner's
  own questions (who leads, which brokers are Online, final reads).

Every link (controller <-> controller, broker -> controller, client ->
controller, client -> broker) goes through the network's addresses
(``voters_arg``, ``bootstrap_for``), so each can be cut; in netns mode
in-process clients open their sockets under ``client_sockets``.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import shutil
import subprocess
import sys
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import trio

from broker_agent import BrokerConfig
from jepsen_like.nemesis import NetworkTopology
from quorum import Principal, PrincipalKind, RecordKind
from quorum.client import QuorumClient
from quorum.runtime import CertificateAuthority, TlsConfig, create_cluster_certificates
from quorum.storage import FileStorage, new_directory_id, read_data_dir_identity
from registration import RecordDecodeError, RegisterBrokerRecord, TopicRecord, decode_record
from registration.client import AdminClient

from ._processes import NodeProcess, ProcessGroup

logger = logging.getLogger("pykraft.campaign")

BIN = Path(sys.executable).parent
CLUSTER_ID = "campaign"
OBSERVER = "harness"
FIRST_BROKER_ID = 101


@dataclass(slots=True)
class ClusterSettings:
    """Sizes and timers of a campaign's cluster."""

    controllers: int = 3
    brokers: int = 3
    clients: int = 6
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    check_quorum: bool = True
    # Brokers: a short session so that fencing and fast bounces (seed 000)
    # happen within a short campaign; the controllers get the same values.
    session_timeout_ms: int = 3000
    heartbeat_interval_ms: int = 1000
    shutdown_timeout_ms: int = 5000
    snapshot_every_records: int = 5000
    # Mutual TLS on every connection (docs/security.md): a development CA
    # per run, a certificate per member, the harness as client "admin".
    tls: bool = False
    # Each node serves /metrics on a loopback port of its own (Cluster.metrics_ports).
    metrics: bool = False
    # Dynamic voters (KIP-853): the controllers' data directories are
    # formatted with ``kraft-quorum format --initial-voters`` before the
    # first start, so that the voter set may change at run time (the
    # ``membership`` scenario). See ``initial_voter_ids``.
    dynamic_voters: bool = False
    # Every controller runs ``--auto-join`` (KIP-853; dynamic voters only).
    auto_join: bool = False

    @property
    def check_quorum_ms(self) -> float:
        """KAFKA-15489: a leader resigns after 1.5 x fetch timeout without a
        majority fetching from it."""
        return 1.5 * self.fetch_timeout_ms

    def staleness_bound_ms(self) -> int:
        """What an Online broker promises (docs/broker.md): session timeout
        plus the check-quorum window, computed by the broker's own config."""
        config = BrokerConfig(
            broker_id=FIRST_BROKER_ID,
            bootstrap={1: ("127.0.0.1", 1)},
            listen=("127.0.0.1", 0),
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            quorum={"election_timeout_ms": self.election_timeout_ms, "fetch_timeout_ms": self.fetch_timeout_ms},
            plaintext=True,  # only computes the bound; the brokers run with or without TLS as --tls says
        )
        return config.effective_staleness_bound_ms


def controller_ids(settings: ClusterSettings) -> list[int]:
    return list(range(1, settings.controllers + 1))


def initial_voter_ids(settings: ClusterSettings) -> list[int]:
    """The controllers in the first voter set: every one with static voters
    or up to three controllers; with dynamic voters and four or more, all
    but the last, which starts as an observer for the nemesis to add."""
    ids = controller_ids(settings)
    return ids if not settings.dynamic_voters or len(ids) <= 3 else ids[:-1]


def broker_ids(settings: ClusterSettings) -> list[int]:
    return list(range(FIRST_BROKER_ID, FIRST_BROKER_ID + settings.brokers))


def client_name(index: int) -> str:
    return f"client{index}"


def lay_out(network: NetworkTopology, settings: ClusterSettings) -> None:
    """Add the run's members to ``network`` as the module docstring lays
    them out (every system a campaign targets gets the same layout)."""
    zones = [f"az{i}" for i in range(1, settings.controllers + 1)]
    for node_id in controller_ids(settings):
        network.add_node(node_id, "controller", zone=zones[node_id - 1])
    for position, broker_id in enumerate(broker_ids(settings)):
        network.add_node(broker_id, "broker", zone=zones[position % len(zones)])
    for index in range(settings.clients):
        network.add_client(client_name(index), zone=zones[index % len(zones)])
    network.add_client(OBSERVER, observer=True)


@dataclass(slots=True)
class QuorumView:
    """What the controllers say about the quorum, as the harness sees it."""

    leader: int | None
    epoch: int | None
    high_watermarks: dict[int, int]
    # The voter set as the leader answered it (node id -> directory id), or
    # None when the leader did not answer.
    voters: dict[int, str | None] | None = None


class ClusterMembers:
    """Who is in a run, as ``lay_out`` placed them, and waiting for its
    leader: for every system a campaign targets (it has ``settings``,
    ``network`` and an async ``quorum_view()`` asking its own system)."""

    settings: ClusterSettings
    network: NetworkTopology
    # How often ``wait_for_leader`` asks ``quorum_view`` (which a target defines).
    leader_poll_s = 0.1

    @property
    def controller_ids(self) -> list[int]:
        return controller_ids(self.settings)

    @property
    def broker_ids(self) -> list[int]:
        return broker_ids(self.settings)

    @staticmethod
    def client_name(index: int) -> str:
        return client_name(index)

    def zone_of(self, node_id: int) -> str | None:
        return self.network.member(node_id).zone

    def zones(self) -> list[str]:
        return self.network.zones()

    async def wait_for_leader(self, timeout_s: float) -> QuorumView:
        """Raises ``trio.TooSlowError`` when no leader shows in time."""
        with trio.fail_after(timeout_s):
            while True:
                view = await self.quorum_view()
                if view.leader is not None:
                    return view
                await trio.sleep(self.leader_poll_s)


class Cluster(ClusterMembers):
    """Lays the nodes out on ``network`` and starts them as processes."""

    def __init__(self, network: NetworkTopology, settings: ClusterSettings, run_dir: Path) -> None:
        self.network = network
        self.settings = settings
        self.run_dir = run_dir
        self.logs_dir = run_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.processes = ProcessGroup()
        # ``kraft-quorum format --initial-voters``'s argument (dynamic voters).
        self._initial_voters = ""
        self.certs_dir = run_dir / "certs"
        # The harness's certificate, shared by every client it opens.
        self.tls: TlsConfig | None = None
        # The hostile-clients scenario's authenticated attacker
        # (``pykraft://client/hostile``): a client certificate from the run's
        # CA that the ACL grants nothing (a client's reads only), as a
        # compromised or buggy client would hold.
        self.hostile_tls: TlsConfig | None = None
        self._broker_certificates = BrokerCertificates(self.certs_dir)
        if settings.tls:
            create_cluster_certificates(
                self.certs_dir, nodes=self.controller_ids, brokers=self.broker_ids, clients=["admin", HOSTILE_CLIENT]
            )
            self.tls = member_tls_config(self.certs_dir, "client-admin")
            self.hostile_tls = member_tls_config(self.certs_dir, f"client-{HOSTILE_CLIENT}")
        # node id -> its metrics port on 127.0.0.1, when settings.metrics.
        self.metrics_ports: dict[int, int] = {}
        lay_out(network, settings)
        if settings.metrics:
            self.metrics_ports = dict(zip(self.controller_ids + self.broker_ids, _free_ports(settings.controllers + settings.brokers)))
        for node_id in self.controller_ids:
            self.processes.add(NodeProcess(node_id, "controller", self._controller_argv(node_id), self._log(node_id)))
        for broker_id in self.broker_ids:
            self.processes.add(NodeProcess(broker_id, "broker", self._broker_argv(broker_id), self._log(broker_id)))

    # ------------------------------------------------------------------
    # Members' files
    # ------------------------------------------------------------------

    def event_log(self, node_id: int) -> Path:
        return self.logs_dir / f"node{node_id}.events.jsonl"

    def data_dir(self, node_id: int) -> Path:
        return self.run_dir / "data" / f"node{node_id}"

    def _log(self, node_id: int) -> Path:
        return self.logs_dir / f"node{node_id}.log"

    def start_all(self) -> None:
        if self.settings.dynamic_voters:
            self._format_controllers()
        for node in self.processes.nodes.values():
            node.start()

    # ------------------------------------------------------------------
    # Dynamic voters (KIP-853)
    # ------------------------------------------------------------------

    def endpoint(self, node_id: int) -> str:
        """Where controller ``node_id`` listens ("host:port"): the endpoint
        its voter record names. Its peers reach it through the network's
        own addresses (``--voters``), which take precedence."""
        host, port = self.network.listen_address(node_id)
        return f"{host}:{port}"

    def directory_id(self, node_id: int) -> str | None:
        """The directory id of ``node_id``'s data directory (None before it
        is formatted). Raises ``StorageOwnershipError`` for a damaged meta.json."""
        identity = read_data_dir_identity(self.data_dir(node_id))
        return identity.directory_id if identity is not None else None

    def _format_controllers(self) -> None:
        """``kraft-quorum format`` every controller's empty data directory:
        the initial voters with the directory ids the list names, the other
        controllers with ``--join`` (observers until added)."""
        initial = initial_voter_ids(self.settings)
        directories = {node_id: self.directory_id(node_id) or new_directory_id() for node_id in initial}
        self._initial_voters = ",".join(f"{node_id}@{self.endpoint(node_id)}:{directories[node_id]}" for node_id in initial)
        unformatted = [node_id for node_id in self.controller_ids if self.directory_id(node_id) is None]
        # All at once: each is a Python process's start, seconds on a busy machine.
        running = {
            node_id: self._start_format(node_id, ["--directory-id", directories[node_id]] if node_id in directories else ["--join"])
            for node_id in unformatted
        }
        for node_id, (command, process) in running.items():
            self._finish_format(node_id, command, process)

    def format_for_join(self, node_id: int) -> str:
        """A new disk for stopped controller ``node_id``: its data directory
        is deleted and formatted again with ``--join`` (a fresh directory
        id: KIP-853 counts it as another replica). Returns the new id.
        Raises ``RuntimeError`` when the node still runs or format fails."""
        if self.processes.nodes[node_id].running:
            raise RuntimeError(f"node {node_id} still runs: stop it before replacing its disk")
        shutil.rmtree(self.data_dir(node_id), ignore_errors=True)
        self._finish_format(node_id, *self._start_format(node_id, ["--join"]))
        directory_id = self.directory_id(node_id)
        assert directory_id is not None
        return directory_id

    def _start_format(self, node_id: int, extra: list[str]) -> tuple[list[str], subprocess.Popen[str]]:
        command = [
            str(BIN / "kraft-quorum"), "format",
            "--data-dir", str(self.data_dir(node_id)),
            "--node-id", str(node_id),
            "--cluster-id", CLUSTER_ID,
            "--initial-voters", self._initial_voters,
            *extra,
        ]  # fmt: skip
        return command, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def _finish_format(self, node_id: int, command: list[str], process: subprocess.Popen[str]) -> None:
        try:
            stdout, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        with open(self._log(node_id), "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(command)}\n{stdout}{stderr}")
        if process.returncode != 0:
            raise RuntimeError(f"kraft-quorum format for node {node_id} failed ({process.returncode}): {stderr.strip()}")

    # ------------------------------------------------------------------
    # Command lines
    # ------------------------------------------------------------------

    def broker_tls(self, broker_id: int) -> TlsConfig:
        """The certificate of (synthetic) broker ``broker_id``, issued by the
        run's CA on first use. Raises ``ValueError`` without TLS."""
        if self.tls is None:
            raise ValueError("the cluster runs without TLS")
        return self._broker_certificates.config(broker_id)

    def _tls_argv(self, stem: str, *, acl: bool) -> list[str]:
        if self.tls is None:
            return ["--plaintext"]  # chosen explicitly (docs/security.md, "Defaults")
        argv = [
            "--tls-ca", str(self.certs_dir / "ca.pem"),
            "--tls-cert", str(self.certs_dir / f"{stem}.pem"),
            "--tls-key", str(self.certs_dir / f"{stem}-key.pem"),
        ]  # fmt: skip
        return argv + (["--acl-file", str(self.certs_dir / "acl.txt")] if acl else [])

    def _timers(self) -> list[str]:
        settings = self.settings
        return [
            "--election-timeout-ms", str(settings.election_timeout_ms),
            "--fetch-timeout-ms", str(settings.fetch_timeout_ms),
            "--session-timeout-ms", str(settings.session_timeout_ms),
            "--heartbeat-interval-ms", str(settings.heartbeat_interval_ms),
        ]  # fmt: skip

    def _controller_argv(self, node_id: int) -> Any:
        def argv() -> list[str]:
            host, port = self.network.listen_address(node_id)
            command = [
                str(BIN / "kraft-controller"),
                "--node-id", str(node_id),
                "--voters", self.network.voters_arg(node_id),
                "--listen", f"{host}:{port}",
                "--data-dir", str(self.data_dir(node_id)),
                "--cluster-id", CLUSTER_ID,
                "--event-log", str(self.event_log(node_id)),
                "--snapshot-every-records", str(self.settings.snapshot_every_records),
                *self._timers(),
                *self._tls_argv(f"node-{node_id}", acl=True),
            ]  # fmt: skip
            if not self.settings.check_quorum:
                command.append("--no-check-quorum")
            if self.settings.auto_join:
                command.append("--auto-join")
            if node_id in self.metrics_ports:
                command += ["--metrics", f"127.0.0.1:{self.metrics_ports[node_id]}"]
            return self.network.run_in(node_id, command)

        return argv

    def _broker_argv(self, broker_id: int) -> Any:
        def argv() -> list[str]:
            host, port = self.network.listen_address(broker_id)
            command = [
                str(BIN / "kraft-broker"),
                "--broker-id", str(broker_id),
                "--bootstrap", self.network.voters_arg(broker_id),
                "--listen", f"{host}:{port}",
                "--rack", self.zone_of(broker_id) or "none",
                "--data-dir", str(self.data_dir(broker_id)),
                # The broker's copy of the metadata log is a cache it can
                # fetch again; the controllers keep fsync on.
                "--no-fsync",
                "--cluster-id", CLUSTER_ID,
                "--event-log", str(self.event_log(broker_id)),
                "--shutdown-timeout-ms", str(self.settings.shutdown_timeout_ms),
                *self._timers(),
                *self._tls_argv(f"broker-{broker_id}", acl=False),
            ]  # fmt: skip
            if broker_id in self.metrics_ports:
                command += ["--metrics", f"127.0.0.1:{self.metrics_ports[broker_id]}"]
            return self.network.run_in(broker_id, command)

        return argv

    # ------------------------------------------------------------------
    # The harness's view (through the observer, which no fault cuts)
    # ------------------------------------------------------------------

    def observer_sockets(self) -> contextlib.AbstractContextManager[None]:
        return self.network.client_sockets(OBSERVER)

    def observer_bootstrap(self, node_ids: list[int] | None = None) -> list[str]:
        return self.network.bootstrap_for(OBSERVER, node_ids if node_ids is not None else self.controller_ids)

    async def describe_node(self, node_id: int, timeout_s: float = 0.5) -> Any | None:
        """DescribeQuorum from ``node_id`` itself (its own view), or None."""
        if not self.processes.nodes[node_id].running or self.processes.nodes[node_id].paused:
            return None
        with self.observer_sockets():
            try:
                async with QuorumClient(
                    self.observer_bootstrap([node_id]),
                    cluster_id=CLUSTER_ID,
                    retry_timeout_s=timeout_s,
                    request_timeout_s=timeout_s,
                    tls=self.tls,
                    # A broker answers DescribeQuorum from its observer's view.
                    server_kinds=(PrincipalKind.NODE, PrincipalKind.BROKER),
                ) as client:
                    return await client.describe()
            except Exception:  # noqa: BLE001 - a node that does not answer has no view
                return None

    async def quorum_view(self) -> QuorumView:
        """The leader and epoch most running controllers name (highest epoch
        on a tie), and each one's high watermark."""
        answers: dict[int, Any] = {}

        async def ask(node_id: int) -> None:
            answer = await self.describe_node(node_id)
            if answer is not None:
                answers[node_id] = answer

        async with trio.open_nursery() as nursery:
            for node_id in self.controller_ids:
                nursery.start_soon(ask, node_id)
        votes: dict[tuple[int, int], int] = {}
        for answer in answers.values():
            if answer.leader_id is not None:
                key = (answer.leader_id, answer.epoch)
                votes[key] = votes.get(key, 0) + 1
        marks = {node_id: answer.high_watermark for node_id, answer in answers.items()}
        if not votes:
            return QuorumView(None, max((a.epoch for a in answers.values()), default=None), marks)
        (leader, epoch) = max(votes, key=lambda key: (votes[key], key[1]))
        leader_answer = answers.get(leader)
        voters = (
            {replica.node_id: replica.directory_id for replica in leader_answer.voters}
            if leader_answer is not None and leader_answer.leader_id == leader
            else None
        )
        return QuorumView(leader, epoch, marks, voters)

    async def broker_states(self, timeout_s: float = 1.0) -> dict[int, tuple[str, int]]:
        """broker id -> (state, epoch) in the active controller's committed
        image (real brokers only); empty when no controller answers."""
        if not self.broker_ids:
            return {}
        with self.observer_sockets():
            try:
                async with AdminClient(self.observer_bootstrap(), cluster_id=CLUSTER_ID, timeout_s=timeout_s, tls=self.tls) as admin:
                    with trio.fail_after(timeout_s + 0.5):
                        cluster = await admin.describe_cluster()
            except Exception:  # noqa: BLE001 - no controller active now
                return {}
        wanted = set(self.broker_ids)
        return {b.broker_id: (b.state, b.broker_epoch) for b in cluster.brokers if b.broker_id in wanted}

    async def wait_for_brokers_online(
        self, broker_ids: list[int], timeout_s: float, *, not_epochs: dict[int, int] | None = None
    ) -> bool:
        """Whether every broker in ``broker_ids`` is Online in the controller's
        image within ``timeout_s`` (with an epoch other than ``not_epochs``
        names for it: a restarted broker must have registered again)."""
        not_epochs = not_epochs or {}
        with trio.move_on_after(timeout_s):
            while True:
                states = await self.broker_states()
                if all(
                    states.get(broker_id, ("", -1))[0] == "Online" and states[broker_id][1] != not_epochs.get(broker_id)
                    for broker_id in broker_ids
                ):
                    return True
                await trio.sleep(0.2)
        return False

    async def high_watermarks(self) -> dict[int, int]:
        """Each node's own high watermark (controllers and brokers), asked
        before they are stopped."""
        marks: dict[int, int] = {}

        async def ask(node_id: int) -> None:
            answer = await self.describe_node(node_id, timeout_s=2.0)
            if answer is not None:
                marks[node_id] = answer.high_watermark
            else:
                logger.warning("node %d did not say its high watermark", node_id)

        async with trio.open_nursery() as nursery:
            for node_id in self.processes.ids():
                nursery.start_soon(ask, node_id)
        return marks

    # ------------------------------------------------------------------
    # After the run
    # ------------------------------------------------------------------

    def write_log_dumps(self, path: Path, high_watermarks: dict[int, int]) -> int:
        """Every node's committed records (below its own high watermark),
        read back from its data directory once it has stopped, with the
        write each record carries (``write_id``, see ``record_write_id``).
        Returns the number of records written."""
        written = 0
        with open(path, "w", encoding="utf-8") as out:
            for node_id, hwm in sorted(high_watermarks.items()):
                try:
                    storage = FileStorage.open(self.data_dir(node_id), fsync=False)
                except Exception:  # noqa: BLE001 - a node that never wrote has no log
                    logger.exception("cannot open the log of node %d", node_id)
                    continue
                with storage:
                    for entry in storage.log.entries_from():
                        if entry.offset >= hwm:
                            break
                        digest = hashlib.sha256(bytes([int(entry.kind)]) + entry.data).hexdigest()[:16]
                        write_id = record_write_id(entry.data) if entry.kind is RecordKind.DATA else None
                        record = {
                            "node": str(node_id),
                            "offset": entry.offset,
                            "epoch": entry.epoch,
                            "record_hash": digest,
                            "write_id": write_id,
                            "hwm": hwm,
                            # Records below it are in the node's snapshot
                            # (compacted, not in this dump).
                            "log_start": storage.log.log_start_offset,
                        }
                        out.write(json.dumps(record) + "\n")
                        written += 1
        return written

    def write_node_events(self, path: Path, start_wall_ns: int) -> int:
        """The nodes' own event logs (wall-clock ns) as the checker's node
        events (ns since the history began: the same host's clock). Returns
        the number of events written."""
        written = 0
        with open(path, "w", encoding="utf-8") as out:
            for node_id in self.processes.ids():
                for event in _read_events(self.event_log(node_id)):
                    converted = node_event(event, node_id, start_wall_ns)
                    if converted is not None:
                        out.write(json.dumps(converted) + "\n")
                        written += 1
        return written


#: The client name of the hostile-clients scenario's attacker with a
#: certificate (``pykraft://client/hostile``; the ACL names it nowhere).
HOSTILE_CLIENT = "hostile"


def member_tls_config(certs_dir: Path, stem: str) -> TlsConfig:
    """The ``TlsConfig`` the harness connects with as the member whose
    files in ``certs_dir`` are ``STEM.pem`` and ``STEM-key.pem`` (the run's
    CA in ``ca.pem``). Raises ``TlsError`` when they cannot be used.

    Without session resumption: keeping a ticket means reading
    ``SSLObject.session``, and on this host's CPython 3.11 and OpenSSL 3.0
    every read leaks about 6 KiB of OpenSSL memory (a plain-``ssl``
    reproduction shows it too), one per connection the harness opens: some
    1.4 KiB per operation of a long chaos run, where the nodes' own peer
    connections still resume (docs/nemesis.md, "Long runs")."""
    return TlsConfig(certs_dir / "ca.pem", certs_dir / f"{stem}.pem", certs_dir / f"{stem}-key.pem", session_resumption=False)


#: Synthetic brokers whose TLS configuration the harness keeps loaded. Each
#: holds two OpenSSL contexts (about 0.85 MiB of the harness's memory, none
#: of it seen by tracemalloc), and the workload registers a new synthetic
#: broker every few seconds: a 30-minute chaos run kept some 2,000 of them,
#: nearly 2 GiB (docs/nemesis.md, "Long runs").
BROKER_TLS_KEPT = 8


class BrokerCertificates:
    """Synthetic brokers' certificates: issued by the run's CA (in
    ``certs_dir``) on a broker's first use, and loaded as a ``TlsConfig``
    for the ``kept`` brokers used most recently only; an older one is
    loaded again from its files when it comes back."""

    def __init__(self, certs_dir: Path, kept: int = BROKER_TLS_KEPT) -> None:
        if kept < 1:
            raise ValueError("kept must be at least 1")
        self.certs_dir = certs_dir
        self.kept = kept
        self._loaded: collections.OrderedDict[int, TlsConfig] = collections.OrderedDict()

    def __len__(self) -> int:
        """Configurations loaded now (at most ``kept``)."""
        return len(self._loaded)

    def config(self, broker_id: int) -> TlsConfig:
        """Broker ``broker_id``'s configuration. Raises ``TlsError`` when
        its files cannot be used, ``OSError`` when they cannot be written."""
        config = self._loaded.get(broker_id)
        if config is None:
            stem = f"broker-{broker_id}"
            if not (self.certs_dir / f"{stem}.pem").exists():
                CertificateAuthority.load(self.certs_dir).write_member(self.certs_dir, Principal(PrincipalKind.BROKER, str(broker_id)))
            config = self._loaded[broker_id] = member_tls_config(self.certs_dir, stem)
            if len(self._loaded) > self.kept:
                self._loaded.popitem(last=False)
        self._loaded.move_to_end(broker_id)
        return config


def _free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago."""
    sockets = []
    for _ in range(count):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        sockets.append(probe)
    ports = [probe.getsockname()[1] for probe in sockets]
    for probe in sockets:
        probe.close()
    return ports


def _read_events(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    # Line by line: a long run's event log need not fit in memory.
    with open(path, encoding="utf-8", errors="replace") as lines:
        yield from _parsed_events(lines)


def _parsed_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut off by kill -9
        if isinstance(event, dict) and isinstance(event.get("wall_ns"), int):
            yield event


def node_event(event: dict[str, Any], node_id: int, start_wall_ns: int) -> dict[str, Any] | None:
    """One node event-log line in the checker's form (docs/checker.md,
    "Node event logs"), or None for kinds the checker has no use for."""
    kind = event.get("event")
    base = {"time": max(0, event["wall_ns"] - start_wall_ns), "node": str(node_id), "kind": kind}
    if kind == "role":
        leader = event.get("leader")
        return {
            **base,
            "role": event["role"],
            "epoch": event["epoch"],
            "leader": None if leader is None else str(leader),
            "reason": event.get("reason"),
        }
    if kind == "broker_state":
        return {
            **base,
            "broker_id": str(event["broker_id"]),
            "state": event["state"],
            "broker_epoch": event.get("broker_epoch"),
            "reason": event.get("reason"),
        }
    if kind == "broker_registration":
        return {
            **base,
            "broker_id": str(event["broker_id"]),
            "broker_epoch": event["broker_epoch"],
            "offset": event.get("offset"),
            "incarnation_id": event.get("incarnation_id"),
        }
    if kind == "controller_broker_state":
        # The active controller's decision, committed: kept apart from the
        # broker's own broker_state (the checker does not use it).
        return {
            **base,
            "broker_id": str(event["broker_id"]),
            "broker_epoch": event["broker_epoch"],
            "state": event["state"],
            "previous_state": event.get("previous_state"),
            "cause": event.get("cause"),
            "offset": event.get("offset"),
        }
    if kind == "broker_request":
        return {
            **base,
            "broker_id": str(event["broker_id"]),
            "broker_epoch": event["broker_epoch"],
            "accepted": bool(event["accepted"]),
            "request": event.get("op"),
        }
    return None


def record_write_id(data: bytes) -> str | None:
    """The client write a log record carries, named as the workloads name
    it in the history (``write_id``):

    - a register put ``[key, value]`` or cas ``["cas", key, expected, new]``:
      ``"<key>=<value written>"`` (values are unique per write);
    - a ``TopicRecord``: its topic id (the create's answer names it);
    - a ``RegisterBrokerRecord``: ``"broker/<id>=<incarnation id>"``.

    None for anything else (partition records, fences, no-ops...)."""
    try:
        record = decode_record(data)
    except RecordDecodeError:
        record = None
    if isinstance(record, TopicRecord):
        return record.topic_id
    if isinstance(record, RegisterBrokerRecord):
        return f"broker/{record.broker_id}={record.incarnation_id}"
    if record is not None:
        return None
    try:
        command = msgpack.unpackb(data, raw=False)
    except Exception:  # noqa: BLE001 - not a register record either
        return None
    if isinstance(command, list) and len(command) == 2 and isinstance(command[0], bytes) and isinstance(command[1], bytes):
        return f"{command[0].decode(errors='replace')}={command[1].decode(errors='replace')}"
    if isinstance(command, list) and len(command) == 4 and command[0] == "cas" and isinstance(command[1], bytes) and isinstance(command[3], bytes):
        return f"{command[1].decode(errors='replace')}={command[3].decode(errors='replace')}"
    return None
