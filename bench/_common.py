"""Shared machinery for the quorum benchmarks.

Process management (each server with its own log file in a temp dir, bounded
waits, kill -9, SIGTERM, RSS), loopback port allocation, latency statistics,
the workload runners and the result table.  Every peer (etcd, ZooKeeper,
PySyncObj, pykraft) plugs in by subclassing :class:`Cluster`.

Rules kept here for every peer:
- all traffic goes to 127.0.0.1 only;
- every wait and every loop is bounded in count and in time;
- every process and temp dir created through this module is removed at exit,
  also on Ctrl-C / SIGTERM (see :func:`install_cleanup_handlers`).
"""

from __future__ import annotations

import abc
import asyncio
import atexit
import dataclasses
import datetime
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"

# --------------------------------------------------------------------------
# Cleanup registry: every process and temp dir we create is tracked here.
# --------------------------------------------------------------------------

_registry_lock = threading.Lock()
_live_processes: list[ManagedProcess] = []
_temp_dirs: list[Path] = []
_cleanup_installed = False


def cleanup_all() -> None:
    """Kill every tracked process (SIGTERM, then SIGKILL) and remove temp dirs."""
    with _registry_lock:
        processes = list(_live_processes)
        dirs = list(_temp_dirs)
        _live_processes.clear()
        _temp_dirs.clear()
    for process in processes:
        try:
            process.terminate(grace_s=3.0)
        except Exception:  # noqa: BLE001 - cleanup must go on
            pass
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


def _raise_keyboard_interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def install_cleanup_handlers() -> None:
    """atexit + SIGTERM/SIGHUP -> KeyboardInterrupt, so `finally` blocks run."""
    global _cleanup_installed
    if _cleanup_installed:
        return
    _cleanup_installed = True
    atexit.register(cleanup_all)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _raise_keyboard_interrupt)


def make_temp_dir(prefix: str) -> Path:
    """A fresh temp dir, removed at exit.  Warns if it is on tmpfs (fsync no-op)."""
    path = Path(tempfile.mkdtemp(prefix=f"pykraft-bench-{prefix}-"))
    with _registry_lock:
        _temp_dirs.append(path)
    fs_type = filesystem_type(path)
    if fs_type in {"tmpfs", "ramfs"}:
        print(
            f"WARNING: {path} is on {fs_type}: fsync is a no-op there; set TMPDIR to a "
            "disk-backed directory for meaningful numbers",
            file=sys.stderr,
        )
    return path


def remove_temp_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with _registry_lock:
        if path in _temp_dirs:
            _temp_dirs.remove(path)


def filesystem_type(path: Path) -> str:
    """File system type of the mount holding `path`, from /proc/mounts."""
    best_mount, best_type = "", "unknown"
    real = os.path.realpath(path)
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount_point, fs_type = fields[1], fields[2]
                if (real == mount_point or real.startswith(mount_point.rstrip("/") + "/")) and len(
                    mount_point
                ) > len(best_mount):
                    best_mount, best_type = mount_point, fs_type
    except OSError:
        pass
    return best_type


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


class ProcessStartError(RuntimeError):
    pass


@dataclasses.dataclass
class ManagedProcess:
    """One server process, with stdout+stderr going to its own log file."""

    name: str
    argv: list[str]
    log_path: Path
    cwd: Path | None = None
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None
    _log_file: Any = None

    def start(self) -> None:
        if self.is_alive():
            raise ProcessStartError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
        self._log_file.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
        self._log_file.flush()
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=env,
                # Own session: a terminal Ctrl-C reaches only us; we stop it.
                start_new_session=True,
            )
        except OSError as exc:
            self._log_file.close()
            raise ProcessStartError(f"{self.name}: cannot start {self.argv[0]}: {exc}") from exc
        with _registry_lock:
            if self not in _live_processes:
                _live_processes.append(self)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def is_alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill9(self, wait_s: float = 10.0) -> None:
        """SIGKILL the process and reap it (bounded)."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reap(wait_s)

    def terminate(self, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`; also kills the process group."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Leftover children in its session (for example a forked compactor).
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._reap(5.0)

    def _reap(self, wait_s: float) -> None:
        assert self.popen is not None
        try:
            self.popen.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        if self._log_file is not None and not self._log_file.closed:
            self._log_file.close()
        if self.popen.poll() is not None:
            with _registry_lock:
                if self in _live_processes:
                    _live_processes.remove(self)

    def rss_bytes(self) -> int | None:
        return rss_bytes(self.pid) if self.is_alive() else None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


def rss_bytes(pid: int | None) -> int | None:
    """Resident set size from /proc/PID/status VmRSS (kB -> bytes)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def wait_for(
    condition: Callable[[], Any],
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    processes: Sequence[ManagedProcess] = (),
) -> Any:
    """Poll `condition` until it returns a truthy value; bounded by `timeout_s`.

    Exceptions from `condition` count as "not yet".  Fails fast if one of
    `processes` has exited.
    """
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    attempts = 0
    max_attempts = int(timeout_s / max(interval_s, 0.001)) + 10
    while attempts < max_attempts:
        attempts += 1
        for process in processes:
            if process.popen is not None and not process.is_alive():
                raise ProcessStartError(
                    f"{process.name} exited with code {process.popen.returncode} while waiting "
                    f"for {what}; log {process.log_path}:\n{process.log_tail()}"
                )
        try:
            result = condition()
            if result:
                return result
        except FailoverNotSupported:
            raise
        except Exception as exc:  # noqa: BLE001 - "not yet"
            last_error = exc
        if time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    detail = f" (last error: {last_error!r})" if last_error else ""
    raise TimeoutError(f"timed out after {timeout_s:.1f} s waiting for {what}{detail}")


def port_is_open(port: int, host: str = LOOPBACK, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_for_port(port: int, timeout_s: float, processes: Sequence[ManagedProcess] = ()) -> None:
    wait_for(lambda: port_is_open(port), timeout_s, f"127.0.0.1:{port} to accept", processes=processes)


_allocated_ports: set[int] = set()


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1.

    Drawn from 20000-31999, below Linux's default ephemeral range
    (32768-60999), so that the benchmark's own outgoing client connections
    cannot grab a port a server is about to bind (or re-bind on restart).
    """
    rng = random.Random()
    ports: list[int] = []
    attempts = 0
    while len(ports) < count and attempts < 10_000:
        attempts += 1
        port = rng.randrange(20000, 32000)
        if port in ports or port in _allocated_ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                continue
        ports.append(port)
    if len(ports) < count:
        raise RuntimeError(f"could not find {count} free ports on 127.0.0.1")
    _allocated_ports.update(ports)
    return ports


def run_version_command(argv: list[str], timeout_s: float = 15.0) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def package_version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def debian_package_version(package: str) -> str | None:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status} ${Version}", package],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or "install ok installed" not in out.stdout:
        return None
    return out.stdout.split()[-1]


# --------------------------------------------------------------------------
# Latency statistics
# --------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted sequence."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary_ms(latencies_s: Sequence[float]) -> dict[str, float]:
    values = sorted(latencies_s)
    if not values:
        return {"count": 0, "p50_ms": math.nan, "p99_ms": math.nan, "max_ms": math.nan, "mean_ms": math.nan}
    return {
        "count": len(values),
        "p50_ms": percentile(values, 0.50) * 1e3,
        "p99_ms": percentile(values, 0.99) * 1e3,
        "max_ms": values[-1] * 1e3,
        "mean_ms": sum(values) / len(values) * 1e3,
    }


# --------------------------------------------------------------------------
# The plug-in point: one Cluster per system under test
# --------------------------------------------------------------------------


class PeerUnavailable(RuntimeError):
    """The system is not installed here; the message says how to install it."""


class FailoverNotSupported(RuntimeError):
    """The peer cannot tell who the leader is, so the failover row is n/a."""


class Cluster(abc.ABC):
    """A 3-voter cluster of one system, on loopback, with its clients.

    Subclasses implement the abstract methods.  The bulk entry points
    (`run_sequential`, `write_many`, `write_batches`, `first_write_after_kill`)
    have generic implementations on top of `write`/`write_batch`/`try_write`;
    a peer whose client is async overrides them to run a whole phase inside
    one event loop.
    """

    #: Short name used on the command line (`--peers`).
    name: str = "?"
    #: Column header in the table.
    label: str = "?"
    voters: int = 3

    @classmethod
    def availability_problem(cls) -> str | None:
        """None when runnable here; otherwise why not and how to install it."""
        return None

    @abc.abstractmethod
    def start(self) -> None:
        """Start all voters (bounded) and wait until a leader is elected."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop clients and servers; remove the cluster's temp dir."""

    @abc.abstractmethod
    def leader_index(self) -> int | None:
        """Index (0..voters-1) of the current leader, None if unknown right now."""

    @abc.abstractmethod
    def kill(self, index: int) -> None:
        """kill -9 voter `index`."""

    @abc.abstractmethod
    def restart(self, index: int) -> None:
        """Start voter `index` again on its old data dir (no wait)."""

    @abc.abstractmethod
    def wait_healthy(self, timeout_s: float) -> None:
        """Wait until all voters are up and agree on a leader; bounded."""

    @abc.abstractmethod
    def write(self, value: bytes) -> None:
        """One committed write, sequential client; raises on failure."""

    @abc.abstractmethod
    def write_batch(self, values: Sequence[bytes]) -> None:
        """One request carrying all `values` (or the closest the system has)."""

    @abc.abstractmethod
    def rss_bytes(self) -> list[int | None]:
        """RSS of each voter process, in voter order."""

    # ---- generic bulk entry points -------------------------------------

    def try_write(self, value: bytes, timeout_s: float) -> bool:
        """One attempt at a committed write, during failover; True on success."""
        try:
            self.write(value)
            return True
        except Exception:  # noqa: BLE001 - failover attempt
            return False

    def run_sequential(self, values: Sequence[bytes], deadline: float) -> list[float]:
        latencies_s: list[float] = []
        for value in values:
            if time.monotonic() >= deadline:
                break
            started = time.perf_counter()
            self.write(value)
            latencies_s.append(time.perf_counter() - started)
        return latencies_s

    @abc.abstractmethod
    def write_many(self, values: Sequence[bytes], in_flight: int, deadline: float) -> list[float]:
        """Write `values` keeping `in_flight` requests outstanding.

        Returns the per-request latencies (seconds) of the writes that
        committed before `deadline`.
        """

    def write_batches(self, batches: Sequence[Sequence[bytes]], deadline: float) -> list[float]:
        latencies_s: list[float] = []
        for batch in batches:
            if time.monotonic() >= deadline:
                break
            started = time.perf_counter()
            self.write_batch(batch)
            latencies_s.append(time.perf_counter() - started)
        return latencies_s

    @abc.abstractmethod
    def write_batches_concurrently(
        self, batches: Sequence[Sequence[bytes]], clients: int, deadline: float
    ) -> list[float]:
        """`clients` clients, each sending one batch (one request, as in
        `write_batch`) at a time, taking the next batch from `batches` until
        none is left or `deadline` passes. Returns the per-batch latencies
        (seconds)."""

    def first_write_after_kill(self, killed_at: float, deadline: float) -> float | None:
        """Seconds from `killed_at` (perf_counter) to the first committed write."""
        attempt = 0
        while time.monotonic() < deadline and attempt < 100_000:
            attempt += 1
            if self.try_write(make_value(attempt, 100, b"failover"), timeout_s=1.0):
                return time.perf_counter() - killed_at
            time.sleep(0.005)
        return None

    def prepare_failover(self) -> None:
        """Called before each kill, with the cluster healthy (connect clients here)."""

    def finish_failover(self) -> None:
        """Called once after the failover trials."""

    # ---- description ----------------------------------------------------

    def versions(self) -> dict[str, str]:
        return {}

    def notes(self) -> list[str]:
        """Caveats printed under the table: fsync semantics, how batches are done..."""
        return []

    def log_dir(self) -> Path | None:
        return None


async def timed_requests_on_connections(
    port: int,
    count: int,
    connections: int,
    deadline: float,
    one_request: Callable[[int, asyncio.StreamReader, asyncio.StreamWriter], Any],
) -> list[float]:
    """Requests ``0 .. count-1`` over ``connections`` TCP connections to
    ``LOOPBACK:port``, each connection taking the next index as soon as its
    previous request is answered, until all are sent or ``time.monotonic()``
    passes ``deadline``. ``await one_request(i, reader, writer)`` sends
    request ``i`` and waits for (and checks) its answer. Returns each
    request's latency in seconds."""
    latencies_s: list[float] = []
    next_index = 0

    async def connection_worker() -> None:
        nonlocal next_index
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        try:
            while next_index < count and time.monotonic() < deadline:
                i = next_index
                next_index += 1
                started = time.perf_counter()
                await one_request(i, reader, writer)
                latencies_s.append(time.perf_counter() - started)
        finally:
            writer.close()

    await asyncio.gather(*(connection_worker() for _ in range(connections)))
    return latencies_s


async def hedged_first_success(
    attempt: Callable[[int], Any],
    killed_at: float,
    deadline: float,
    interval_s: float = 0.02,
    attempt_timeout_s: float = 10.0,
    max_outstanding: int = 200,
) -> float | None:
    """Seconds from `killed_at` to the first attempt that commits.

    A new attempt (`await attempt(n)`, truthy on commit, may raise) starts
    every `interval_s` without abandoning the earlier ones, so a request that
    hangs at a follower still waiting for the dead leader does not hide the
    moment the new leader starts committing: the resolution is `interval_s`
    plus one write latency.  Bounded by `deadline`, `attempt_timeout_s` and
    `max_outstanding`.
    """
    done = asyncio.Event()
    result: list[float] = []
    tasks: set[asyncio.Task[None]] = set()

    async def one(n: int) -> None:
        try:
            ok = await asyncio.wait_for(attempt(n), attempt_timeout_s)
        except Exception:  # noqa: BLE001 - a failed attempt
            return
        if ok and not result:
            result.append(time.perf_counter() - killed_at)
            done.set()

    n = 0
    try:
        while not done.is_set() and time.monotonic() < deadline and n < 100_000:
            n += 1
            tasks = {t for t in tasks if not t.done()}
            if len(tasks) >= max_outstanding:
                oldest = next(iter(tasks))
                oldest.cancel()
            task = asyncio.ensure_future(one(n))
            tasks.add(task)
            try:
                await asyncio.wait_for(done.wait(), interval_s)
            except asyncio.TimeoutError:
                pass
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return result[0] if result else None


def make_value(index: int, size_bytes: int, tag: bytes = b"v") -> bytes:
    head = tag + b"-%08d-" % index
    return (head + b"x" * size_bytes)[:size_bytes] if size_bytes > len(head) else head


def key_for(index: int, key_space: int) -> str:
    return f"bench/k{index % key_space:05d}"


# --------------------------------------------------------------------------
# Workload runners
# --------------------------------------------------------------------------


@dataclasses.dataclass
class WorkloadResult:
    requests: int
    records: int
    elapsed_s: float
    latency: dict[str, float]
    note: str = ""

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s > 0 else math.nan

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "records": self.records,
            "elapsed_s": self.elapsed_s,
            "requests_per_s": self.requests_per_s,
            "records_per_s": self.records_per_s,
            "latency": self.latency,
            "note": self.note,
        }


def _time_note(done: int, wanted: int, max_seconds: float) -> str:
    return f"stopped by the {max_seconds:.0f} s limit after {done}/{wanted}" if done < wanted else ""


def sequential_writes(
    cluster: Cluster, n: int, value_bytes: int = 100, max_seconds: float = 60.0, warmup: int = 20
) -> WorkloadResult:
    """One client, one write at a time, each waiting for commit."""
    cluster.run_sequential([make_value(i, value_bytes, b"warm") for i in range(warmup)], time.monotonic() + 30)
    values = [make_value(i, value_bytes) for i in range(n)]
    started = time.perf_counter()
    latencies_s = cluster.run_sequential(values, time.monotonic() + max_seconds)
    elapsed_s = time.perf_counter() - started
    return WorkloadResult(len(latencies_s), len(latencies_s), elapsed_s, latency_summary_ms(latencies_s),
                          _time_note(len(latencies_s), n, max_seconds))


def concurrent_writes(
    cluster: Cluster, n: int, in_flight: int = 64, value_bytes: int = 100, max_seconds: float = 60.0
) -> WorkloadResult:
    """`in_flight` single-record writes outstanding at all times."""
    cluster.write_many([make_value(i, value_bytes, b"warm") for i in range(in_flight * 2)], in_flight,
                       time.monotonic() + 30)
    values = [make_value(i, value_bytes) for i in range(n)]
    started = time.perf_counter()
    latencies_s = cluster.write_many(values, in_flight, time.monotonic() + max_seconds)
    elapsed_s = time.perf_counter() - started
    return WorkloadResult(len(latencies_s), len(latencies_s), elapsed_s, latency_summary_ms(latencies_s),
                          _time_note(len(latencies_s), n, max_seconds))


def batched_records(
    cluster: Cluster, n_batches: int, batch: int = 100, value_bytes: int = 100, max_seconds: float = 60.0
) -> WorkloadResult:
    """One client sending batches of `batch` records, one batch at a time."""
    batches = [[make_value(b * batch + i, value_bytes) for i in range(batch)] for b in range(n_batches)]
    cluster.write_batches(batches[:2], time.monotonic() + 30)  # warm-up
    started = time.perf_counter()
    latencies_s = cluster.write_batches(batches, time.monotonic() + max_seconds)
    elapsed_s = time.perf_counter() - started
    return WorkloadResult(len(latencies_s), len(latencies_s) * batch, elapsed_s,
                          latency_summary_ms(latencies_s), _time_note(len(latencies_s), n_batches, max_seconds))


def concurrent_batched_records(
    cluster: Cluster, n_batches: int, clients: int, batch: int = 100, value_bytes: int = 100,
    max_seconds: float = 60.0,
) -> WorkloadResult:
    """`clients` clients, each sending batches of `batch` records, one batch
    at a time (so up to `clients` batches in flight)."""
    batches = [[make_value(b * batch + i, value_bytes, b"c") for i in range(batch)] for b in range(n_batches)]
    cluster.write_batches_concurrently(batches[:clients], clients, time.monotonic() + 30)  # warm-up
    started = time.perf_counter()
    latencies_s = cluster.write_batches_concurrently(batches, clients, time.monotonic() + max_seconds)
    elapsed_s = time.perf_counter() - started
    return WorkloadResult(len(latencies_s), len(latencies_s) * batch, elapsed_s,
                          latency_summary_ms(latencies_s), _time_note(len(latencies_s), n_batches, max_seconds))


def _known_leader(cluster: Cluster) -> tuple[int] | None:
    index = cluster.leader_index()
    return (index,) if index is not None else None


def wait_for_leader(cluster: Cluster, timeout_s: float) -> int:
    """Index of the leader, waiting (bounded) until one is known."""
    return wait_for(lambda: _known_leader(cluster), timeout_s, f"a {cluster.name} leader", interval_s=0.1)[0]


@dataclasses.dataclass
class FailoverResult:
    trials_ms: list[float]
    failed_trials: int
    summary: dict[str, float]
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def failover_trials(
    cluster: Cluster,
    trials: int = 10,
    per_trial_timeout_s: float = 30.0,
    healthy_timeout_s: float = 60.0,
    max_seconds: float = 600.0,
    log: Callable[[str], None] = lambda _msg: None,
) -> FailoverResult:
    """kill -9 the leader, time the first committed write, restart; `trials` times."""
    trial_ms: list[float] = []
    failed = 0
    overall_deadline = time.monotonic() + max_seconds
    for trial in range(trials):
        if time.monotonic() >= overall_deadline:
            break
        cluster.wait_healthy(healthy_timeout_s)
        cluster.prepare_failover()
        leader = wait_for_leader(cluster, healthy_timeout_s)
        killed_at = time.perf_counter()
        cluster.kill(leader)
        elapsed_s = cluster.first_write_after_kill(killed_at, time.monotonic() + per_trial_timeout_s)
        if elapsed_s is None:
            failed += 1
            dead = [p.name for p in getattr(cluster, "processes", []) if not p.is_alive()]
            log(f"  failover trial {trial + 1}: no committed write within {per_trial_timeout_s:.0f} s "
                f"(not running: {', '.join(dead) or 'none'})")
            survivors_dead = [name for i, name in enumerate(p.name for p in getattr(cluster, "processes", []))
                              if i != leader and name in dead]
            if survivors_dead:
                for process in getattr(cluster, "processes", []):
                    if process.name in survivors_dead:
                        log(f"  --- {process.name} log tail:\n{process.log_tail(12)}")
                raise RuntimeError(
                    f"trial {trial + 1}: after kill -9 of voter {leader}, the surviving voters exited too "
                    f"({', '.join(survivors_dead)}); their log tails are on stderr"
                )
        else:
            trial_ms.append(elapsed_s * 1e3)
            log(f"  failover trial {trial + 1}: killed voter {leader}, first write after {elapsed_s * 1e3:.0f} ms")
        cluster.restart(leader)
    cluster.wait_healthy(healthy_timeout_s)
    cluster.finish_failover()
    summary = latency_summary_ms([ms / 1e3 for ms in trial_ms])
    note = _time_note(len(trial_ms) + failed, trials, max_seconds)
    return FailoverResult(trial_ms, failed, summary, note)


# --------------------------------------------------------------------------
# Machine description and output
# --------------------------------------------------------------------------


def machine_info() -> dict[str, str]:
    cpu_model = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            mem_kib = int(meminfo.readline().split()[1])
        memory = f"{mem_kib / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        memory = "unknown"
    tmp = Path(tempfile.gettempdir())
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": str(os.cpu_count()),
        "cpu_model": cpu_model,
        "memory": memory,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "data_dirs": f"{tmp} ({filesystem_type(tmp)})",
        "load_average_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def format_table(columns: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    """Plain text, aligned: first column left-aligned, the others right-aligned."""
    label_width = max([len(label) for label, _ in rows] + [0])
    widths = [len(c) for c in columns]
    for _, cells in rows:
        for i, cell in enumerate(cells):
            widths[i] = max(widths[i], len(cell))
    lines = [" " * label_width + "  " + "  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines.append("-" * len(lines[0]))
    for label, cells in rows:
        lines.append(label.ljust(label_width) + "  " + "  ".join(c.rjust(w) for c, w in zip(cells, widths)))
    return "\n".join(lines)


def write_json(path: str | Path, payload: Any) -> None:
    def default(obj: Any) -> Any:
        if isinstance(obj, float) and math.isnan(obj):
            return None
        return str(obj)

    text = json.dumps(_nan_to_none(payload), indent=2, default=default, sort_keys=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    return obj
