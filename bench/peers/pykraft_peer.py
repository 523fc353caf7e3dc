"""pykraft peer: 3 `kraft-quorum node` processes, driven with `quorum.client`.

The plug-in contract with the pykraft runtime (being written by the lead):

server, one process per voter, listening on its own entry of --voters:
    .venv/bin/kraft-quorum node --node-id N \\
        --voters 1@127.0.0.1:P1,2@127.0.0.1:P2,3@127.0.0.1:P3 \\
        --data-dir DIR --cluster-id bench

client:
    from quorum.client import QuorumClient
    async with QuorumClient(["127.0.0.1:P1", ...], cluster_id="bench") as c:
        offset = await c.propose([b"record", ...])   # returns once committed;
                                                       # retries at the leader hint
The client runs under trio when `quorum.client` imports trio (the runtime is
trio-based), otherwise under asyncio.

Bootstrap entries are given as `ID@127.0.0.1:P` (QuorumClient also takes
plain `HOST:PORT`; with ids a NOT_LEADER hint goes straight to the leader).

Leader discovery (failover row, health checks): `await c.describe()` on a
client bootstrapped with one live node only, read `.leader_id`; the node
that names itself is the leader.  If a QuorumClient has no describe(), the
module falls back to `leader()` or the attributes `leader_id`,
`leader_node_id`, `leader_hint`, `leader_endpoint`, `leader`; with none of
those the failover row reads "n/a" and the other rows still run.

How each row is driven:
- sequential: one client, `await c.propose([value])`, one at a time;
- 64 in flight: one client, 64 tasks each looping `await c.propose([value])`;
- batch of 100: `await c.propose(values)` with 100 records (one request);
- failover: a client on all 3 voters; from the kill, a new propose every
  20 ms without abandoning the earlier ones; first commit wins.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from .._common import (
    LOOPBACK,
    Cluster,
    FailoverNotSupported,
    ManagedProcess,
    PeerUnavailable,
    free_ports,
    hedged_first_success,
    make_temp_dir,
    make_value,
    package_version,
    port_is_open,
    remove_temp_dir,
    wait_for,
)

NOT_AVAILABLE = "not available yet"
CLUSTER_ID = "bench"
LEADER_ATTRIBUTES = ("leader_id", "leader_node_id", "leader_hint", "leader_endpoint", "leader")


def kraft_quorum_executable() -> str | None:
    beside_python = Path(sys.executable).parent / "kraft-quorum"
    if beside_python.exists():
        return str(beside_python)
    return shutil.which("kraft-quorum")


def _client_class() -> Any:
    return importlib.import_module("quorum.client").QuorumClient


def _has_describe() -> bool:
    return callable(getattr(_client_class(), "describe", None))


def _uses_trio() -> bool:
    module = importlib.import_module("quorum.client")
    if "trio" in vars(module):
        return True
    try:
        return "import trio" in inspect.getsource(module)
    except (OSError, TypeError):
        return False


class _AsyncRunner:
    """Runs one benchmark phase inside one trio or asyncio event loop."""

    def __init__(self, use_trio: bool) -> None:
        self.use_trio = use_trio

    def run(self, main: Callable[[], Awaitable[Any]]) -> Any:
        if self.use_trio:
            import trio

            return trio.run(main)
        import asyncio

        return asyncio.run(main())  # type: ignore[arg-type]

    async def with_timeout(self, seconds: float, awaitable_fn: Callable[[], Awaitable[Any]]) -> Any:
        if self.use_trio:
            import trio

            with trio.fail_after(seconds):
                return await awaitable_fn()
        import asyncio

        return await asyncio.wait_for(awaitable_fn(), seconds)

    async def gather(self, fns: Sequence[Callable[[], Awaitable[Any]]]) -> None:
        if self.use_trio:
            import trio

            async with trio.open_nursery() as nursery:
                for fn in fns:
                    nursery.start_soon(fn)
            return
        import asyncio

        await asyncio.gather(*(fn() for fn in fns))

    async def hedged(self, attempt: Callable[[int], Awaitable[Any]], killed_at: float, deadline: float,
                     interval_s: float = 0.02) -> float | None:
        if not self.use_trio:
            return await hedged_first_success(attempt, killed_at, deadline, interval_s)
        import trio

        result: list[float] = []

        async def one(n: int, cancel_scope: trio.CancelScope) -> None:
            try:
                with trio.fail_after(10.0):
                    ok = await attempt(n)
            except Exception:  # noqa: BLE001 - a failed attempt
                return
            if ok is not False and not result:
                result.append(time.perf_counter() - killed_at)
                cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            for n in range(1, 100_001):
                if result or time.monotonic() >= deadline:
                    break
                nursery.start_soon(one, n, nursery.cancel_scope)
                await trio.sleep(interval_s)
            nursery.cancel_scope.cancel()
        return result[0] if result else None


class PykraftCluster(Cluster):
    name = "pykraft"
    label = "pykraft"
    # Mutual TLS on every connection (docs/security.md): PykraftTlsCluster.
    tls = False

    def __init__(
        self,
        value_bytes: int = 100,
        log: Callable[[str], None] = print,
        node_args: Callable[[int], list[str]] | None = None,
    ) -> None:
        self.value_bytes = value_bytes
        self.log = log
        # Extra flags for voter i (0-based): bench/metrics_cost_bench.py
        # turns metrics on or off with them.
        self.node_args = node_args or (lambda index: [])
        self.workdir: Path | None = None
        self.processes: list[ManagedProcess] = []
        self.ports: list[int] = []
        self.runner: _AsyncRunner | None = None
        self._leader_query_missing = False
        self._tls_config: Any = None

    @classmethod
    def availability_problem(cls) -> str | None:
        problems = []
        if kraft_quorum_executable() is None:
            problems.append("no kraft-quorum executable")
        try:
            if importlib.util.find_spec("quorum.client") is None:
                problems.append("no quorum.client module")
            else:
                _client_class()
        except Exception as exc:  # noqa: BLE001 - import error in a work in progress
            problems.append(f"quorum.client does not import ({type(exc).__name__}: {exc})")
        if problems:
            return f"{NOT_AVAILABLE}: " + "; ".join(problems)
        return None

    @property
    def endpoints(self) -> list[str]:
        return [f"{i + 1}@{LOOPBACK}:{port}" for i, port in enumerate(self.ports)]

    # ---- lifecycle ------------------------------------------------------

    def start(self) -> None:
        problem = self.availability_problem()
        if problem:
            raise PeerUnavailable(problem)
        executable = kraft_quorum_executable()
        assert executable is not None
        self.runner = _AsyncRunner(_uses_trio())
        self.workdir = make_temp_dir("pykraft")
        self.ports = free_ports(self.voters)
        tls_argv: Callable[[int], list[str]] = lambda node_id: ["--plaintext"]  # noqa: E731
        if self.tls:
            from quorum.runtime import TlsConfig, create_cluster_certificates

            certs = self.workdir / "certs"
            create_cluster_certificates(certs, nodes=range(1, self.voters + 1), clients=["admin"])
            self._tls_config = TlsConfig(certs / "ca.pem", certs / "client-admin.pem", certs / "client-admin-key.pem")

            def tls_argv(node_id: int) -> list[str]:
                return [
                    "--tls-ca", str(certs / "ca.pem"),
                    "--tls-cert", str(certs / f"node-{node_id}.pem"),
                    "--tls-key", str(certs / f"node-{node_id}-key.pem"),
                    "--acl-file", str(certs / "acl.txt"),
                ]  # fmt: skip

        voters = ",".join(f"{i + 1}@{LOOPBACK}:{port}" for i, port in enumerate(self.ports))
        for i in range(self.voters):
            argv = [
                executable, "node",
                "--node-id", str(i + 1),
                "--voters", voters,
                "--data-dir", str(self.workdir / f"node{i + 1}"),
                "--cluster-id", CLUSTER_ID,
                *tls_argv(i + 1),
                *self.node_args(i),
            ]  # fmt: skip
            self.processes.append(ManagedProcess(f"pykraft-{i + 1}", argv, self.workdir / f"node{i + 1}.log"))
        for process in self.processes:
            process.start()
        self.wait_healthy(60.0)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate(grace_s=5.0)
        if self.workdir is not None:
            remove_temp_dir(self.workdir)

    def kill(self, index: int) -> None:
        self.processes[index].kill9()

    def restart(self, index: int) -> None:
        self.processes[index].start()

    def rss_bytes(self) -> list[int | None]:
        return [process.rss_bytes() for process in self.processes]

    def wait_healthy(self, timeout_s: float) -> None:
        wait_for(lambda: all(port_is_open(p) for p in self.ports), timeout_s, "all kraft-quorum nodes to listen",
                 0.1, self.processes)
        # A committed write proves a leader with a quorum; then every voter
        # must have fetched up to it (a restarted node has caught up).
        wait_for(lambda: self._probe_write(5.0), timeout_s, "a committed pykraft write", 0.2, self.processes)
        if _has_describe():
            wait_for(self._all_caught_up, timeout_s, "every pykraft voter to catch up", 0.2, self.processes)

    def _probe_write(self, timeout_s: float) -> bool:
        async def main() -> bool:
            async with self._client() as client:
                await self.runner.with_timeout(timeout_s, lambda: client.propose([b"bench-probe"]))
            return True

        return self._run(main)

    def _describe_each(self, timeout_s: float = 2.0) -> list[Any]:
        """describe() from every live voter separately (None where it fails)."""

        async def main() -> list[Any]:
            answers: list[Any] = [None] * self.voters

            async def ask(i: int) -> None:
                try:
                    async with self._client([self.endpoints[i]]) as client:
                        answers[i] = await self.runner.with_timeout(timeout_s, client.describe)
                except Exception:  # noqa: BLE001 - that node does not answer now
                    answers[i] = None

            await self.runner.gather(
                [lambda i=i: ask(i) for i in range(self.voters) if self.processes[i].is_alive()]
            )
            return answers

        return self._run(main)

    def _all_caught_up(self) -> bool:
        answers = self._describe_each()
        for i, answer in enumerate(answers):
            if answer is not None and getattr(answer, "leader_id", None) == i + 1:
                offsets = [getattr(v, "log_end_offset", None) for v in getattr(answer, "voters", ())]
                if len(offsets) < self.voters or any(o is None for o in offsets):
                    return False
                return max(offsets) - min(offsets) <= 1 and all(a is not None for a in answers)
        return False

    # ---- client plumbing -------------------------------------------------

    def _client(self, endpoints: Sequence[str] | None = None) -> Any:
        if self.tls:
            return _client_class()(list(endpoints or self.endpoints), cluster_id=CLUSTER_ID, tls=self._tls_config)
        return _client_class()(list(endpoints or self.endpoints), cluster_id=CLUSTER_ID)

    def _run(self, main: Callable[[], Awaitable[Any]]) -> Any:
        assert self.runner is not None, "start() first"
        return self.runner.run(main)

    def _index_of(self, leader: Any) -> int | None:
        if leader is None or isinstance(leader, bool):
            return None
        if isinstance(leader, int):
            return leader - 1 if 1 <= leader <= self.voters else None
        text = str(leader)
        for i, endpoint in enumerate(self.endpoints):
            if text.endswith(endpoint) or text == str(self.ports[i]):
                return i
        if text.isdigit():
            return self._index_of(int(text))
        return None

    async def _leader_from(self, client: Any) -> Any:
        method = getattr(client, "leader", None)
        if callable(method):
            value = method()
            return await value if inspect.isawaitable(value) else value
        for attribute in LEADER_ATTRIBUTES:
            if hasattr(client, attribute):
                value = getattr(client, attribute)
                return await value if inspect.isawaitable(value) else value
        self._leader_query_missing = True
        return None

    def leader_index(self) -> int | None:
        if _has_describe():
            answers = self._describe_each()
            for i, answer in enumerate(answers):
                if answer is not None and getattr(answer, "leader_id", None) == i + 1:
                    return i
            return None

        async def main() -> Any:
            async with self._client() as client:
                await self.runner.with_timeout(5.0, lambda: client.propose([b"bench-leader-probe"]))
                return await self._leader_from(client)

        try:
            index = self._index_of(self._run(main))
        except Exception:  # noqa: BLE001
            return None
        if self._leader_query_missing:
            raise FailoverNotSupported(
                "n/a (QuorumClient exposes no leader: add describe(), leader() or a leader_id attribute)"
            )
        if index is not None and not self.processes[index].is_alive():
            return None
        return index

    # ---- writes ---------------------------------------------------------

    def write(self, value: bytes) -> None:
        async def main() -> None:
            async with self._client() as client:
                await self.runner.with_timeout(30.0, lambda: client.propose([value]))

        self._run(main)

    def write_batch(self, values: Sequence[bytes]) -> None:
        self.write_batches([values], time.monotonic() + 60.0)

    def run_sequential(self, values: Sequence[bytes], deadline: float) -> list[float]:
        async def main() -> list[float]:
            latencies_s: list[float] = []
            async with self._client() as client:
                for value in values:
                    if time.monotonic() >= deadline:
                        break
                    started = time.perf_counter()
                    await self.runner.with_timeout(30.0, lambda value=value: client.propose([value]))
                    latencies_s.append(time.perf_counter() - started)
            return latencies_s

        return self._run(main)

    def write_batches(self, batches: Sequence[Sequence[bytes]], deadline: float) -> list[float]:
        async def main() -> list[float]:
            latencies_s: list[float] = []
            async with self._client() as client:
                for batch in batches:
                    if time.monotonic() >= deadline:
                        break
                    started = time.perf_counter()
                    await self.runner.with_timeout(30.0, lambda batch=batch: client.propose(list(batch)))
                    latencies_s.append(time.perf_counter() - started)
            return latencies_s

        return self._run(main)

    def write_batches_concurrently(
        self, batches: Sequence[Sequence[bytes]], clients: int, deadline: float
    ) -> list[float]:
        async def main() -> list[float]:
            latencies_s: list[float] = []
            next_index = 0

            async def worker() -> None:
                nonlocal next_index
                async with self._client() as client:  # a connection of its own
                    while next_index < len(batches) and time.monotonic() < deadline:
                        batch = list(batches[next_index])
                        next_index += 1
                        started = time.perf_counter()
                        await self.runner.with_timeout(30.0, lambda batch=batch: client.propose(batch))
                        latencies_s.append(time.perf_counter() - started)

            await self.runner.gather([worker] * clients)
            return latencies_s

        return self._run(main)

    def write_many(self, values: Sequence[bytes], in_flight: int, deadline: float) -> list[float]:
        async def main() -> list[float]:
            latencies_s: list[float] = []
            next_index = 0
            async with self._client() as client:

                async def worker() -> None:
                    nonlocal next_index
                    while next_index < len(values) and time.monotonic() < deadline:
                        value = values[next_index]
                        next_index += 1
                        started = time.perf_counter()
                        await self.runner.with_timeout(30.0, lambda: client.propose([value]))
                        latencies_s.append(time.perf_counter() - started)

                await self.runner.gather([worker] * in_flight)
            return latencies_s

        return self._run(main)

    def first_write_after_kill(self, killed_at: float, deadline: float) -> float | None:
        async def main() -> float | None:
            async with self._client() as client:
                return await self.runner.hedged(
                    lambda n: client.propose([make_value(n, self.value_bytes, b"failover")]), killed_at, deadline
                )

        return self._run(main)

    # ---- description ----------------------------------------------------

    def versions(self) -> dict[str, str]:
        lib = "trio" if self.runner and self.runner.use_trio else "asyncio"
        return {"pykraft": package_version("pykraft") or "?", "client event loop": lib}

    def notes(self) -> list[str]:
        notes = [
            "pykraft: seq = one QuorumClient, propose([v]) one at a time; 64 in flight = 64 tasks on one client; "
            "batch = propose(100 records) (one request); failover = a propose every 20 ms from the kill on a "
            "client bootstrapped with all 3, first commit wins.",
            "pykraft: kraft-quorum node defaults: --fsync on (fsync before acknowledging), election timeout "
            "1000 ms, fetch timeout 2000 ms, check quorum and pre-vote on.",
        ]
        if self._leader_query_missing:
            notes.append("pykraft: QuorumClient exposes no leader id (tried leader(), "
                         + ", ".join(LEADER_ATTRIBUTES) + "): failover not measured.")
        return notes

    def log_dir(self) -> Path | None:
        return self.workdir


class PykraftFastCluster(PykraftCluster):
    """The same three nodes with ``--timers fast`` (docs/operations.md,
    "Timers"): the failover of the aggressive timer profile."""

    name = "pykraft-fast"
    label = "pykraft (--timers fast)"

    def __init__(
        self,
        value_bytes: int = 100,
        log: Callable[[str], None] = print,
        node_args: Callable[[int], list[str]] | None = None,
    ) -> None:
        more = node_args or (lambda index: [])
        super().__init__(value_bytes, log, lambda index: ["--timers", "fast", *more(index)])

    def notes(self) -> list[str]:
        return [
            *super().notes(),
            "pykraft-fast: --timers fast: election timeout 500 ms, fetch timeout 1000 ms, a follower whose leader's "
            "connection is reset stands within 50 ms (unreachable_leader_wait_ms).",
        ]


class PykraftTlsCluster(PykraftCluster):
    """The same three nodes with mutual TLS 1.3 on every connection (a
    development CA made with ``kraft-quorum certs``'s code in the work
    directory; the client is ``pykraft://client/admin``)."""

    name = "pykraft-tls"
    label = "pykraft (TLS)"
    tls = True
