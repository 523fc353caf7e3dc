"""ZooKeeper peer: a 3-server ensemble on loopback, driven with kazoo.

Server: Debian's `zookeeper` package (3.8 on bookworm; needs a JRE, which the
package pulls in).  Each server is `java ... QuorumPeerMain zoo.cfg` started
directly (not via zkServer.sh, so kill -9 hits the server itself), with its
own zoo.cfg and `myid` in its data dir, and distinct client / quorum / election
ports on 127.0.0.1.  Heap -Xmx1000m, as zkEnv.sh's default.  forceSync=yes
(the default, written out explicitly): the transaction log is fsync'ed
(FileChannel.force) before a proposal is acknowledged, on leader and followers,
with group commit in SyncRequestProcessor.

Client: kazoo (PyPI, pinned in the `bench` extra), connected to the leader's
client port for the throughput rows:
- sequential: `client.set(path, value)` (setData on one of 1000 pre-created
  znodes), one at a time;
- 64 in flight: `client.set_async(...)` round-robin over 4 kazoo clients
  (4 sessions, all on the leader), one semaphore keeping 64 outstanding in
  total; completions via `rawlink`.  (One session tops out near 1,200/s here;
  see SESSIONS_FOR_IN_FLIGHT);
- batch of 100: one `client.transaction()` (a ZooKeeper `multi`) holding 100
  `set_data` ops on 100 distinct znodes, `commit()`; one txn in the log;
- failover: a kazoo client given all three servers, fast reconnect
  (KazooRetry delay 10 ms, max 100 ms); `set_async` attempts every 20 ms,
  first success wins (kazoo queues requests while it reconnects).
"""

from __future__ import annotations

import glob
import logging
import shutil
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .._common import (
    LOOPBACK,
    Cluster,
    ManagedProcess,
    PeerUnavailable,
    debian_package_version,
    free_ports,
    key_for,
    make_temp_dir,
    make_value,
    package_version,
    remove_temp_dir,
    wait_for,
    wait_for_leader,
)

INSTALL_HINT_SERVER = "install it with: apt-get update && apt-get install -y zookeeper"
INSTALL_HINT_CLIENT = "install the client with: .venv/bin/pip install -e '.[bench]' (kazoo)"
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_BINDING_JAR = Path("/usr/share/java/slf4j-simple.jar")
KEY_SPACE = 1000
#: One kazoo session tops out near 1,200 writes/s here with 64 outstanding
#: (its one connection thread); four sessions sharing the 64 slots do ~2x.
SESSIONS_FOR_IN_FLIGHT = 4
ROOT = "/bench"


def _path(index: int) -> str:
    return "/" + key_for(index, KEY_SPACE)


def four_letter_word(port: int, word: bytes, timeout_s: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (srvr, ruok, ...) and read the answer."""
    with socket.create_connection((LOOPBACK, port), timeout=timeout_s) as connection:
        connection.sendall(word)
        chunks = []
        for _ in range(100):
            chunk = connection.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def server_mode(port: int) -> str | None:
    try:
        answer = four_letter_word(port, b"srvr")
    except OSError:
        return None
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


class ZooKeeperCluster(Cluster):
    name = "zookeeper"
    label = "ZooKeeper"

    def __init__(self, value_bytes: int = 100, log: Callable[[str], None] = print) -> None:
        self.value_bytes = value_bytes
        self.log = log
        self.workdir: Path | None = None
        self.processes: list[ManagedProcess] = []
        self.client_ports: list[int] = []
        self._clients: list = []
        self._client_port: int | None = None
        self._write_counter = 0

    @classmethod
    def availability_problem(cls) -> str | None:
        if not ZOOKEEPER_JAR.exists():
            return f"ZooKeeper not installed ({INSTALL_HINT_SERVER})"
        if shutil.which("java") is None:
            return f"java not found ({INSTALL_HINT_SERVER}, which pulls in a JRE)"
        if package_version("kazoo") is None:
            return f"kazoo not installed ({INSTALL_HINT_CLIENT})"
        return None

    # ---- lifecycle ------------------------------------------------------

    def start(self) -> None:
        problem = self.availability_problem()
        if problem:
            raise PeerUnavailable(problem)
        self.workdir = make_temp_dir("zookeeper")
        ports = free_ports(3 * self.voters)
        self.client_ports = ports[0 : self.voters]
        quorum_ports = ports[self.voters : 2 * self.voters]
        election_ports = ports[2 * self.voters : 3 * self.voters]
        servers = "\n".join(
            f"server.{i + 1}={LOOPBACK}:{quorum_ports[i]}:{election_ports[i]}" for i in range(self.voters)
        )
        classpath = [str(ZOOKEEPER_JAR)]
        if SLF4J_BINDING_JAR.exists():
            classpath.append(str(SLF4J_BINDING_JAR))
        for i in range(self.voters):
            server_dir = self.workdir / f"zk{i + 1}"
            data_dir = server_dir / "data"
            data_dir.mkdir(parents=True)
            (data_dir / "myid").write_text(f"{i + 1}\n")
            config = server_dir / "zoo.cfg"
            config.write_text(
                "\n".join(
                    [
                        "tickTime=2000",
                        "initLimit=10",
                        "syncLimit=5",
                        f"dataDir={data_dir}",
                        f"clientPort={self.client_ports[i]}",
                        f"clientPortAddress={LOOPBACK}",
                        "forceSync=yes",
                        "maxClientCnxns=0",
                        "admin.enableServer=false",
                        "4lw.commands.whitelist=srvr,ruok,mntr,stat",
                        servers,
                        "",
                    ]
                )
            )
            argv = [
                "java",
                "-Xmx1000m",
                "-Dzookeeper.log.dir=" + str(server_dir),
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-cp",
                ":".join(classpath),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(config),
            ]
            self.processes.append(ManagedProcess(f"zookeeper-{i + 1}", argv, server_dir / "server.log"))
        for process in self.processes:
            process.start()
        self.wait_healthy(90.0)
        self._create_znodes()

    def _create_znodes(self) -> None:
        client = self._leader_client()
        client.ensure_path(ROOT)
        for start in range(0, KEY_SPACE, 100):
            transaction = client.transaction()
            for i in range(start, min(start + 100, KEY_SPACE)):
                transaction.create(_path(i), b"")
            results = transaction.commit()
            errors = [r for r in results if isinstance(r, Exception)]
            if errors:
                raise RuntimeError(f"creating znodes: {errors[0]!r}")

    def _new_client(self, ports: Sequence[int], fast_reconnect: bool = False):  # noqa: ANN202
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        hosts = ",".join(f"{LOOPBACK}:{port}" for port in ports)
        kwargs = {}
        if fast_reconnect:
            kwargs["connection_retry"] = KazooRetry(max_tries=-1, delay=0.01, backoff=1.5, max_delay=0.1,
                                                     max_jitter=0.0)
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # reconnect chatter during failover
        client = KazooClient(hosts=hosts, timeout=10.0, **kwargs)
        client.start(timeout=20.0)
        return client

    def _leader_clients(self, sessions: int = 1) -> list:
        """`sessions` kazoo clients (one session each) on the leader's client port."""
        port = self.client_ports[wait_for_leader(self, 30.0)]
        if self._client_port != port:
            self._close_client()
            self._client_port = port
        while len(self._clients) < sessions:
            self._clients.append(self._new_client([port]))
        return self._clients[:sessions]

    def _leader_client(self):  # noqa: ANN202
        return self._leader_clients(1)[0]

    def _close_client(self) -> None:
        for client in self._clients:
            try:
                client.stop()
                client.close()
            except Exception:  # noqa: BLE001
                pass
        self._clients = []
        self._client_port = None

    def stop(self) -> None:
        self._close_client()
        for process in self.processes:
            process.terminate(grace_s=5.0)
        if self.workdir is not None:
            remove_temp_dir(self.workdir)

    def leader_index(self) -> int | None:
        for i, port in enumerate(self.client_ports):
            if self.processes[i].is_alive() and server_mode(port) == "leader":
                return i
        return None

    def wait_healthy(self, timeout_s: float) -> None:
        def all_serving() -> bool:
            modes = [server_mode(port) for port in self.client_ports]
            return modes.count("leader") == 1 and modes.count("follower") == self.voters - 1

        wait_for(all_serving, timeout_s, "a ZooKeeper leader and serving followers", 0.1, self.processes)

    def kill(self, index: int) -> None:
        self.processes[index].kill9()

    def restart(self, index: int) -> None:
        self.processes[index].start()

    def rss_bytes(self) -> list[int | None]:
        return [process.rss_bytes() for process in self.processes]

    # ---- writes ---------------------------------------------------------

    def _next_index(self, count: int = 1) -> int:
        base = self._write_counter
        self._write_counter += count
        return base

    def write(self, value: bytes) -> None:
        self._leader_client().set(_path(self._next_index()), value)

    def run_sequential(self, values: Sequence[bytes], deadline: float) -> list[float]:
        client = self._leader_client()
        latencies_s: list[float] = []
        for value in values:
            if time.monotonic() >= deadline:
                break
            path = _path(self._next_index())
            started = time.perf_counter()
            client.set(path, value)
            latencies_s.append(time.perf_counter() - started)
        return latencies_s

    def write_batch(self, values: Sequence[bytes]) -> None:
        client = self._leader_client()
        base = self._next_index(len(values))
        transaction = client.transaction()
        for i, value in enumerate(values):
            transaction.set_data(_path(base + i), value)
        results = transaction.commit()
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            raise RuntimeError(f"ZooKeeper multi failed: {errors[0]!r}")

    def write_many(self, values: Sequence[bytes], in_flight: int, deadline: float) -> list[float]:
        clients = self._leader_clients(SESSIONS_FOR_IN_FLIGHT)
        base = self._next_index(len(values))
        slots = threading.Semaphore(in_flight)
        lock = threading.Lock()
        latencies_s: list[float] = []
        errors: list[BaseException] = []
        outstanding = [0]
        all_done = threading.Event()
        all_done.set()

        def completed(started: float, async_result) -> None:  # noqa: ANN001
            finished = time.perf_counter()
            with lock:
                if async_result.exception is not None:
                    errors.append(async_result.exception)
                else:
                    latencies_s.append(finished - started)
                outstanding[0] -= 1
                if outstanding[0] == 0:
                    all_done.set()
            slots.release()

        for i, value in enumerate(values):
            if time.monotonic() >= deadline or errors:
                break
            if not slots.acquire(timeout=max(0.0, deadline - time.monotonic()) + 30.0):
                break
            with lock:
                outstanding[0] += 1
                all_done.clear()
            started = time.perf_counter()
            async_result = clients[i % len(clients)].set_async(_path(base + i), value)
            async_result.rawlink(lambda result, started=started: completed(started, result))
        all_done.wait(timeout=60.0)
        if errors:
            raise RuntimeError(f"ZooKeeper setData failed: {errors[0]!r}")
        return latencies_s

    def write_batches_concurrently(
        self, batches: Sequence[Sequence[bytes]], clients: int, deadline: float
    ) -> list[float]:
        # One kazoo session per client (each its own connection), each with
        # one multi outstanding at a time.
        sessions = self._leader_clients(clients)
        latencies_s: list[float] = []
        errors: list[BaseException] = []
        lock = threading.Lock()
        next_index = [0]
        base = self._next_index(sum(len(batch) for batch in batches))

        def worker(client) -> None:  # noqa: ANN001
            while time.monotonic() < deadline and not errors:
                with lock:
                    i = next_index[0]
                    if i >= len(batches):
                        return
                    next_index[0] += 1
                first = base + i * len(batches[i])
                transaction = client.transaction()
                for j, value in enumerate(batches[i]):
                    transaction.set_data(_path(first + j), value)
                started = time.perf_counter()
                try:
                    results = transaction.commit()
                except Exception as exc:  # noqa: BLE001 - reported after the workers stop
                    errors.append(exc)
                    return
                failed = [r for r in results if isinstance(r, Exception)]
                if failed:
                    errors.append(failed[0])
                    return
                with lock:
                    latencies_s.append(time.perf_counter() - started)

        threads = [threading.Thread(target=worker, args=(session,), daemon=True) for session in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=max(1.0, deadline - time.monotonic()) + 60.0)
        if errors:
            raise RuntimeError(f"ZooKeeper multi failed: {errors[0]!r}")
        return latencies_s

    def first_write_after_kill(self, killed_at: float, deadline: float) -> float | None:
        client = self._failover_client
        if client is None:
            raise RuntimeError("prepare_failover() was not called")
        pending: list = []
        for attempt in range(1, 10_001):
            if time.monotonic() >= deadline:
                break
            pending.append(client.set_async(_path(attempt), make_value(attempt, self.value_bytes, b"fo")))
            pause_until = time.monotonic() + 0.02
            while time.monotonic() < pause_until:
                for result in pending:
                    if result.ready() and result.successful():
                        return time.perf_counter() - killed_at
                time.sleep(0.001)
            pending = [r for r in pending if not r.ready()][-200:]
        return None

    #: A kazoo client on all servers, connected before each kill.
    _failover_client = None

    def prepare_failover(self) -> None:
        if self._failover_client is None:
            self._failover_client = self._new_client(self.client_ports, fast_reconnect=True)

    def finish_failover(self) -> None:
        if self._failover_client is not None:
            try:
                self._failover_client.stop()
                self._failover_client.close()
            except Exception:  # noqa: BLE001
                pass
            self._failover_client = None

    # ---- description ----------------------------------------------------

    def versions(self) -> dict[str, str]:
        jars = sorted(glob.glob("/usr/share/java/zookeeper-[0-9]*.jar"))
        return {
            "zookeeper": Path(jars[0]).stem.replace("zookeeper-", "") if jars else "?",
            "debian package zookeeper": debian_package_version("zookeeper") or "?",
            "kazoo": package_version("kazoo") or "?",
        }

    def notes(self) -> list[str]:
        return [
            "ZooKeeper: forceSync=yes (default): txn log fsync (FileChannel.force) before ACK on leader and "
            "followers, group commit; tickTime 2000 ms, initLimit 10, syncLimit 5; java -Xmx1000m.",
            "ZooKeeper: seq = kazoo set() (setData) on the leader's client port; 64 in flight = set_async "
            f"round-robin over {SESSIONS_FOR_IN_FLIGHT} kazoo sessions on the leader, 64 outstanding in total "
            "(one session: ~1,200/s here); batch = one kazoo transaction (multi) of 100 set_data.",
            "ZooKeeper: failover = a kazoo client on all 3 servers (reconnect retry 10-100 ms); a set_async every "
            "20 ms, earlier ones kept; time of the first success. Includes kazoo's reconnect.",
        ]

    def log_dir(self) -> Path | None:
        return self.workdir
