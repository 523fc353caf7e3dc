"""Apache Kafka's KRaft as real processes on loopback, next to pykraft.

Kafka is fetched, never vendored: ``make kafka`` (``tools/kafka-fetch.sh``,
the pinned ``tools/kafka/pom.xml``) copies Kafka 4.4.0's jars and their
dependencies into ``$PYKRAFT_CACHE/kafka-4.4.0/libs`` (default
``~/.cache/pykraft``). That directory is the whole classpath: this module
formats storage with ``kafka.tools.StorageTool`` and runs ``kafka.Kafka``
itself; no shell script of Kafka's distribution is used.

A :class:`KafkaCluster` is N controllers (``process.roles=controller``,
a static voter set in ``controller.quorum.voters``) and M brokers
(``process.roles=broker``), or N combined nodes, each with its own
directory under the run's directory (``server.properties``, ``data/``,
``server.log``), all listening on 127.0.0.1 only. It stops every process it
started by pid and removes what it created when asked to.

Used by the side-by-side benchmark (``bench/metadata_bench.py``) and by
the campaign's Kafka target (``_kafka_target.py``, which passes each node's
routed listeners through ``node_properties`` and runs ``command(node_id)``
under its own process control); it lives in the campaign package because
that is the layer that runs real processes.

The client side (topic creation and description) goes through
``confluent_kafka`` (the ``bench`` extra), imported only when used.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("pykraft.kafka")

KAFKA_VERSION = "4.4.0"
#: One sentence for every user of Kafka who finds it missing.
FETCH_HINT = "run `make kafka` (tools/kafka-fetch.sh) to fetch it from Maven Central"
#: Written by tools/kafka-fetch.sh once every jar is in place.
COMPLETE_STAMP = ".complete"
LOOPBACK = "127.0.0.1"
FIRST_BROKER_ID = 101
#: Kafka's own start script's heap (``kafka-server-start.sh``: -Xmx1G -Xms1G).
DEFAULT_HEAP_MB = 1024
#: The JVM flags of Kafka's ``kafka-run-class.sh`` (KAFKA_JVM_PERFORMANCE_OPTS).
JVM_FLAGS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
#: Each line starts with the wall clock in ms since the epoch, so that the
#: harness can place a controller's decision (a fence) on its own timeline.
LOG4J2_PROPERTIES = """\
status = warn
appender.file.type = Console
appender.file.name = out
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{UNIX_MILLIS} [%d{HH:mm:ss,SSS}] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = out
"""


class KafkaError(RuntimeError):
    """Base of this module's errors."""


class KafkaNotFetched(KafkaError):
    """Kafka's jars are not in the cache (or java is missing); the message
    says how to get them."""


class KafkaStartError(KafkaError):
    """A Kafka process failed to format, start or become ready in time."""


def kafka_cache_dir() -> Path:
    """Where ``make kafka`` puts Kafka: ``$PYKRAFT_CACHE/kafka-4.4.0``."""
    base = os.environ.get("PYKRAFT_CACHE") or str(Path.home() / ".cache" / "pykraft")
    return Path(base) / f"kafka-{KAFKA_VERSION}"


def kafka_libs_dir() -> Path:
    """The directory whose jars are Kafka's whole classpath."""
    return kafka_cache_dir() / "libs"


def kafka_problem() -> str | None:
    """None when Kafka can run here; otherwise one sentence saying why not
    and how to fix it."""
    if not (kafka_libs_dir() / COMPLETE_STAMP).exists():
        return f"Apache Kafka {KAFKA_VERSION} is not fetched into {kafka_libs_dir()}: {FETCH_HINT}"
    if shutil.which("java") is None:
        return "java is not on PATH (Kafka needs a JDK 17 or newer: apt-get install openjdk-17-jdk-headless)"
    return None


def new_cluster_id(random_bytes: Callable[[int], bytes] = os.urandom) -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding
    (what ``kafka-storage random-uuid`` prints), never starting with ``-``:
    ``kafka-storage format --cluster-id -abc...`` reads such an id as an
    option and fails (one id in 64), which is why Kafka's own
    ``Uuid.randomUuid`` draws again; so does this."""
    while True:
        text = base64.urlsafe_b64encode(random_bytes(16)).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def loopback_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that were free a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind((LOOPBACK, 0))
            sockets.append(probe)
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass(slots=True)
class KafkaNode:
    """One Kafka process: its roles, ports, directory and live process."""

    node_id: int
    roles: tuple[str, ...]  # ("controller",), ("broker",) or ("broker", "controller")
    directory: Path
    controller_port: int | None
    broker_port: int | None
    process: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.running and self.process is not None else None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class KafkaCluster:
    """Kafka controllers and brokers as processes under ``run_dir``.

    ``controllers`` voters with ids 1..N; ``brokers`` brokers with ids
    101..; with ``combined`` the N nodes are controllers and brokers at once
    (``brokers`` must then be 0). ``overrides`` are extra server properties
    for every node, ``node_properties(node)`` more for one node (a
    campaign routes each node's links through its proxy this way: its own
    voter addresses, listeners and advertised listeners).
    ``allocate_ports(count)`` returns free loopback ports: the controllers'
    controller ports, then (combined) their broker ports, then the brokers'
    ports. ``jvm_flags`` replace Kafka's own JVM flags.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        controllers: int = 3,
        brokers: int = 1,
        combined: bool = False,
        heap_mb: int = DEFAULT_HEAP_MB,
        overrides: dict[str, str] | None = None,
        allocate_ports: Callable[[int], list[int]] = loopback_ports,
        node_properties: Callable[[KafkaNode], dict[str, str]] | None = None,
        jvm_flags: tuple[str, ...] = JVM_FLAGS,
    ) -> None:
        if not 1 <= controllers <= 9:
            raise ValueError(f"controllers must be 1..9, not {controllers}")
        if combined and brokers:
            raise ValueError("combined nodes are the brokers: give brokers=0")
        if not combined and not 0 <= brokers <= 20:
            raise ValueError(f"brokers must be 0..20, not {brokers}")
        if not 64 <= heap_mb <= 16384:
            raise ValueError(f"heap_mb must be 64..16384, not {heap_mb}")
        self.run_dir = Path(run_dir)
        self.heap_mb = heap_mb
        self.overrides = dict(overrides or {})
        self.node_properties = node_properties
        self.jvm_flags = tuple(jvm_flags)
        self.cluster_id = new_cluster_id()
        roles_of_voters = ("broker", "controller") if combined else ("controller",)
        ports = allocate_ports(2 * controllers + brokers)
        self.nodes: dict[int, KafkaNode] = {}
        for index in range(controllers):
            node_id = index + 1
            self.nodes[node_id] = KafkaNode(
                node_id,
                roles_of_voters,
                self.run_dir / f"kafka-{node_id}",
                controller_port=ports[index],
                broker_port=ports[controllers + index] if combined else None,
            )
        for index in range(brokers):
            node_id = FIRST_BROKER_ID + index
            self.nodes[node_id] = KafkaNode(
                node_id, ("broker",), self.run_dir / f"kafka-{node_id}", None, ports[2 * controllers + index]
            )
        self._log4j_path = self.run_dir / "kafka-log4j2.properties"
        self._admin: Any = None

    # ------------------------------------------------------------------
    # Members
    # ------------------------------------------------------------------

    @property
    def controller_ids(self) -> list[int]:
        return [node_id for node_id, node in sorted(self.nodes.items()) if "controller" in node.roles]

    @property
    def broker_ids(self) -> list[int]:
        return [node_id for node_id, node in sorted(self.nodes.items()) if "broker" in node.roles]

    @property
    def voters_arg(self) -> str:
        """``controller.quorum.voters``: the static voter set."""
        return ",".join(f"{i}@{LOOPBACK}:{self.nodes[i].controller_port}" for i in self.controller_ids)

    @property
    def bootstrap_servers(self) -> str:
        """The brokers' client listeners, for ``bootstrap.servers``."""
        return ",".join(f"{LOOPBACK}:{self.nodes[i].broker_port}" for i in self.broker_ids)

    # ------------------------------------------------------------------
    # Configuration and storage
    # ------------------------------------------------------------------

    def server_properties(self, node: KafkaNode) -> dict[str, str]:
        """The node's ``server.properties``: Kafka's defaults except for
        loopback listeners, the static voter set, and replication factors
        that one broker can satisfy."""
        listeners = []
        if node.broker_port is not None:
            listeners.append(f"PLAINTEXT://{LOOPBACK}:{node.broker_port}")
        if node.controller_port is not None:
            listeners.append(f"CONTROLLER://{LOOPBACK}:{node.controller_port}")
        properties = {
            "process.roles": ",".join(node.roles),
            "node.id": str(node.node_id),
            "controller.quorum.voters": self.voters_arg,
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(node.data_dir),
        }
        if "broker" in node.roles:
            single = str(min(3, max(1, len(self.broker_ids))))
            properties.update(
                {
                    "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{node.broker_port}",
                    "inter.broker.listener.name": "PLAINTEXT",
                    "offsets.topic.replication.factor": single,
                    "transaction.state.log.replication.factor": single,
                    "transaction.state.log.min.isr": "1",
                    "share.coordinator.state.topic.replication.factor": single,
                    "share.coordinator.state.topic.min.isr": "1",
                    "group.initial.rebalance.delay.ms": "0",
                }
            )
        properties.update(self.overrides)
        if self.node_properties is not None:
            properties.update(self.node_properties(node))
        return properties

    def _java(self, main_class: str, *args: str, heap_mb: int, node: KafkaNode) -> list[str]:
        return [
            "java",
            f"-Xmx{heap_mb}m",
            f"-Xms{heap_mb}m",
            *self.jvm_flags,
            f"-Dlog4j2.configurationFile={self._log4j_path}",
            f"-Dkafka.logs.dir={node.directory}",
            "-cp",
            str(kafka_libs_dir() / "*"),
            main_class,
            *args,
        ]

    def format_storage(self, timeout_s: float = 120.0) -> None:
        """Write every node's configuration and format its storage with the
        cluster id (``kafka.tools.StorageTool format``), all nodes at once.
        Raises ``KafkaNotFetched`` and ``KafkaStartError``."""
        problem = kafka_problem()
        if problem:
            raise KafkaNotFetched(problem)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._log4j_path.write_text(LOG4J2_PROPERTIES, encoding="utf-8")
        formats: list[tuple[KafkaNode, subprocess.Popen[bytes]]] = []
        for node in self.nodes.values():
            node.directory.mkdir(parents=True, exist_ok=True)
            text = "".join(f"{key}={value}\n" for key, value in self.server_properties(node).items())
            node.config_path.write_text(text, encoding="utf-8")
            argv = self._java(
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id", self.cluster_id,
                "--config", str(node.config_path),
                heap_mb=256,
                node=node,
            )  # fmt: skip
            with open(node.directory / "format.log", "wb") as out:
                formats.append((node, subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)))
        deadline = time.monotonic() + timeout_s
        failed: list[str] = []
        for node, process in formats:
            try:
                code = process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_and_reap(process)
                code = None
            if code != 0:
                tail = (node.directory / "format.log").read_text(errors="replace").strip().splitlines()[-3:]
                failed.append(f"node {node.node_id} (exit {code}): {' | '.join(tail)}")
        if failed:
            raise KafkaStartError("kafka-storage format failed: " + "; ".join(failed))

    # ------------------------------------------------------------------
    # Processes
    # ------------------------------------------------------------------

    def command(self, node_id: int) -> list[str]:
        """The argv that runs one node (``kafka.Kafka`` on its
        ``server.properties``), once its storage is formatted."""
        node = self.nodes[node_id]
        return self._java("kafka.Kafka", str(node.config_path), heap_mb=self.heap_mb, node=node)

    def start_node(self, node_id: int) -> None:
        """Start one node on its formatted storage (no wait)."""
        node = self.nodes[node_id]
        if node.running:
            return
        argv = self.command(node_id)
        with open(node.log_path, "ab") as out:
            out.write(f"\n=== start: {' '.join(argv)}\n".encode())
            out.flush()
            node.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        node.pids.append(node.process.pid)

    def start(self, timeout_s: float = 180.0) -> None:
        """Format, start every node and wait until every broker is
        registered and unfenced. Raises ``KafkaNotFetched`` and
        ``KafkaStartError``; on failure every process is stopped."""
        try:
            self.format_storage(timeout_s)
            for node_id in self.nodes:
                self.start_node(node_id)
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop(remove=False)
            raise

    def wait_ready(self, timeout_s: float) -> None:
        """Every node listening, a controller leading, and every broker
        registered and unfenced (it shows in the brokers' metadata).
        Raises ``KafkaStartError``."""
        deadline = time.monotonic() + timeout_s
        self._wait(lambda: all(self._listening(node) for node in self.nodes.values()), deadline, "every node to listen")
        self._wait(lambda: self.active_controller() is not None, deadline, "a controller to lead")
        if self.broker_ids:
            wanted = set(self.broker_ids)
            self._wait(lambda: wanted <= self.unfenced_brokers(2.0), deadline, "every broker to be unfenced")

    def _listening(self, node: KafkaNode) -> bool:
        ports = [p for p in (node.controller_port, node.broker_port) if p is not None]
        return all(_port_open(port) for port in ports)

    def _wait(self, condition: Callable[[], bool], deadline: float, what: str) -> None:
        while True:
            for node in self.nodes.values():
                if node.process is not None and node.process.poll() is not None:
                    raise KafkaStartError(
                        f"kafka node {node.node_id} exited with code {node.process.returncode} while waiting for "
                        f"{what}; log {node.log_path}:\n{node.log_tail()}"
                    )
            try:
                if condition():
                    return
            except Exception as error:  # noqa: BLE001 - "not yet"
                logger.debug("waiting for %s: %r", what, error)
            if time.monotonic() >= deadline:
                raise KafkaStartError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def kill(self, node_id: int) -> None:
        """kill -9 one node and reap it."""
        node = self.nodes[node_id]
        if node.process is not None:
            _kill_and_reap(node.process)
            node.process = None

    def stop(self, *, remove: bool = True) -> None:
        """Stop every node (SIGTERM, SIGKILL after 10 s), close the client,
        and with ``remove`` delete the cluster's directories."""
        self._admin = None
        # Brokers first: a broker's controlled shutdown needs a controller.
        for node in sorted(self.nodes.values(), key=lambda n: "controller" in n.roles):
            if node.process is None:
                continue
            if node.process.poll() is None:
                _signal(node.process.pid, signal.SIGTERM)
                try:
                    node.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    logger.warning("kafka node %d ignored SIGTERM for 10 s; killing it", node.node_id)
            _kill_and_reap(node.process)
            node.process = None
        if remove:
            for node in self.nodes.values():
                shutil.rmtree(node.directory, ignore_errors=True)
            self._log4j_path.unlink(missing_ok=True)

    def rss_bytes(self, node_id: int) -> int | None:
        """VmRSS of a running node, from /proc."""
        pid = self.nodes[node_id].pid
        if pid is None:
            return None
        try:
            for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace").splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            return None
        return None

    # ------------------------------------------------------------------
    # What the controllers say
    # ------------------------------------------------------------------

    def quorum_state(self, node_id: int) -> dict[str, Any] | None:
        """The election state a controller persisted (``quorum-state`` in
        its metadata log directory: leader id and epoch), or None."""
        path = self.nodes[node_id].data_dir / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def active_controller(self) -> int | None:
        """The running controller that names itself leader at the highest
        epoch any running controller has persisted, or None."""
        states = {}
        for node_id in self.controller_ids:
            if self.nodes[node_id].running:
                state = self.quorum_state(node_id)
                if state is not None and isinstance(state.get("leaderEpoch"), int):
                    states[node_id] = state
        if not states:
            return None
        epoch = max(state["leaderEpoch"] for state in states.values())
        for node_id, state in states.items():
            if state["leaderEpoch"] == epoch and state.get("leaderId") == node_id:
                return node_id
        return None

    def fence_logged_ms(self, broker_id: int, since_ms: int) -> int | None:
        """Wall-clock ms at which a controller logged replaying a record
        that fenced ``broker_id``, at or after ``since_ms`` (the earliest
        such line of any controller), or None. Kafka 4.4 logs it at INFO on
        the active controller, which replays a record when it writes it,
        one metadata commit before the record is committed."""
        marks = [f"brokerId={broker_id},", "fenced=1,"]
        earliest: int | None = None
        for node_id in self.controller_ids:
            path = self.nodes[node_id].log_path
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                if "BrokerRegistrationChangeRecord(" not in line or not all(mark in line for mark in marks):
                    continue
                stamp = line.split(" ", 1)[0]
                if stamp.isdigit() and int(stamp) >= since_ms:
                    earliest = int(stamp) if earliest is None else min(earliest, int(stamp))
                    break
        return earliest

    # ------------------------------------------------------------------
    # Client side (confluent_kafka)
    # ------------------------------------------------------------------

    def admin(self) -> Any:
        """A ``confluent_kafka.admin.AdminClient`` on the brokers (one per
        cluster, made on first use); librdkafka's log goes to Python logging."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(
                {"bootstrap.servers": self.bootstrap_servers, "logger": logging.getLogger("pykraft.kafka.client")}
            )
        return self._admin

    def create_topic(self, name: str, *, partitions: int = 1, replication_factor: int = 1, timeout_s: float = 30.0) -> None:
        """Create a topic through the brokers (CreateTopics, forwarded to
        the active controller); returns once Kafka answered it created.
        Raises ``confluent_kafka.KafkaException`` when Kafka refuses it and
        ``concurrent.futures.TimeoutError`` after ``timeout_s``."""
        from confluent_kafka.admin import NewTopic

        futures = self.admin().create_topics(
            [NewTopic(name, partitions, replication_factor)], operation_timeout=timeout_s, request_timeout=timeout_s
        )
        futures[name].result(timeout=timeout_s)

    def topic_partitions(self, name: str, timeout_s: float = 10.0) -> int | None:
        """How many partitions the brokers' metadata gives ``name`` (None
        when it does not know the topic)."""
        metadata = self.admin().list_topics(topic=name, timeout=timeout_s)
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            return None
        return len(topic.partitions)

    def unfenced_brokers(self, timeout_s: float = 5.0) -> set[int]:
        """Broker ids in the brokers' metadata: registered and unfenced."""
        return set(self.admin().list_topics(timeout=timeout_s).brokers)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _kill_and_reap(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        _signal(process.pid, signal.SIGKILL)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        logger.error("kafka process %d did not die", process.pid)
