"""A Spark standalone cluster on this machine, and the checker run on it.

    python -m bench.spark_standalone [PATH ...] [--ops N] [--workers 2]
        [--worker-cores 1] [--worker-memory 3g] [--work-dir DIR] [--keep]
        [-- EXTRA CHECK ARGS]

Starts a master and ``--workers`` workers from the pyspark distribution in
this virtualenv (``$SPARK_HOME/bin/spark-class``, in the foreground: each
is a child of this process, so that it is stopped by its pid), all on
127.0.0.1, with their logs and scratch space under a temporary directory;
waits until the master counts every worker; runs ``jepsen-like check`` on
``PATH`` (or on a synthetic history of ``--ops`` operations made under that
directory) against ``spark://127.0.0.1:PORT``; then stops exactly the
processes it started, whatever happened, and deletes the directory it made
(``--keep`` keeps it). Prints the check's wall time, the peak resident
memory of every process of the cluster and of the check (read from
``/proc``), and the load average; exits with the check's exit code
(``make checker-standalone``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from bench._common import LOOPBACK, free_ports

REPO = Path(__file__).resolve().parent.parent
# Seconds for the master and its workers to come up: tens of seconds on a
# quiet 2-core machine, over four minutes at load average 50.
START_TIMEOUT_S = 600.0
# Seconds a daemon gets to exit after SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 20.0


class ClusterError(RuntimeError):
    """The cluster did not come up (a daemon exited, or the workers did not
    register in time); the message ends with the daemon's log tail."""


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class Daemon:
    """One process this module started (its pid is the JVM's: spark-class
    execs java), and the file its output goes to."""

    name: str
    process: subprocess.Popen
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Daemons:
    """The processes started so far; :meth:`stop_all` stops exactly these,
    by pid, the last started first: SIGTERM, then SIGKILL after
    ``stop_timeout_s``."""

    stop_timeout_s: float = STOP_TIMEOUT_S
    started: list[Daemon] = field(default_factory=list)

    def start(self, name: str, command: Sequence[str], log_path: Path, env: dict[str, str]) -> Daemon:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                list(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        daemon = Daemon(name, process, log_path)
        self.started.append(daemon)
        return daemon

    def stop_all(self) -> None:
        for daemon in reversed(self.started):
            if daemon.process.poll() is None:
                daemon.process.send_signal(signal.SIGTERM)
        for daemon in reversed(self.started):
            try:
                daemon.process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                daemon.process.kill()
                daemon.process.wait()


@dataclass(frozen=True)
class Cluster:
    master_url: str
    web_url: str
    daemons: Daemons
    directory: Path


def _daemon_env(home: Path, directory: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": LOOPBACK,
        "SPARK_LOG_DIR": str(directory / "logs"),
        "SPARK_WORKER_DIR": str(directory / "work"),
        "SPARK_LOCAL_DIRS": str(directory / "local"),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        # The master's REST submission server listens on a fixed port
        # (6066) by default: a second cluster on the machine would clash.
        "SPARK_MASTER_OPTS": (os.environ.get("SPARK_MASTER_OPTS", "") + " -Dspark.master.rest.enabled=false").strip(),
    })
    return env


def _alive_workers(web_url: str) -> int | None:
    """Workers the master counts as alive (None: its web UI is not up yet)."""
    try:
        with urllib.request.urlopen(f"{web_url}/json/", timeout=5) as answer:
            state = json.load(answer)
    except (OSError, ValueError):
        return None
    return int(state.get("aliveworkers", 0))


def _wait_until(condition, daemons: Daemons, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        for daemon in daemons.started:
            if daemon.process.poll() is not None:
                raise ClusterError(
                    f"{daemon.name} exited with code {daemon.process.returncode} before {what}:\n{daemon.log_tail()}"
                )
        if condition():
            return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {d.name}\n{d.log_tail(10)}" for d in daemons.started)
            raise ClusterError(f"no {what} after {timeout_s:.0f} s:\n{tails}")
        time.sleep(0.5)


@contextmanager
def standalone_cluster(
    directory: Path, *, workers: int = 2, worker_cores: int = 1, worker_memory: str = "3g",
    start_timeout_s: float = START_TIMEOUT_S, stop_timeout_s: float = STOP_TIMEOUT_S, home: Path | None = None,
) -> Iterator[Cluster]:
    """A master and ``workers`` workers on 127.0.0.1, each a child of this
    process, logs and scratch space under ``directory``; stopped (exactly
    those processes) when the block exits, however it exits.

    Raises :class:`ClusterError` when the cluster does not come up within
    ``start_timeout_s``, ``ValueError`` for a worker count below 1.
    ``home``: the Spark distribution (default :func:`spark_home`)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    home = home or spark_home()
    spark_class = str(home / "bin" / "spark-class")
    env = _daemon_env(home, directory)
    # All at once, so no two daemons are handed the same port (bench._common
    # remembers what it gave out and draws below the ephemeral range).
    master_port, web_port, *worker_ports = free_ports(2 + 2 * workers)
    master_url, web_url = f"spark://{LOOPBACK}:{master_port}", f"http://{LOOPBACK}:{web_port}"
    daemons = Daemons(stop_timeout_s=stop_timeout_s)
    try:
        daemons.start(
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(master_port),
             "--webui-port", str(web_port)],
            directory / "logs" / "master.log", env,
        )
        # The workers start alongside the master (they retry until it
        # answers): three JVMs starting at once, not one after the other.
        for number in range(1, workers + 1):
            work = directory / "work" / f"worker-{number}"
            work.mkdir(parents=True, exist_ok=True)
            daemons.start(
                f"worker {number}",
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK, "--port", str(worker_ports[2 * number - 2]),
                 "--webui-port", str(worker_ports[2 * number - 1]), "--cores", str(worker_cores), "--memory", worker_memory,
                 "--work-dir", str(work), master_url],
                directory / "logs" / f"worker-{number}.log", env,
            )
        _wait_until(lambda: (_alive_workers(web_url) or 0) >= workers, daemons, start_timeout_s, f"{workers} workers registered")
        yield Cluster(master_url, web_url, daemons, directory)
    finally:
        daemons.stop_all()


class PeakMemory:
    """Samples, every ``interval_s``, the peak resident memory (VmHWM) of
    every live descendant of this process, by pid (a process's own peak:
    sampling late loses nothing while it lives)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.peak_kb: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> None:
        for pid, name, hwm_kb in _descendants_memory(os.getpid()):
            if hwm_kb > self.peak_kb.get(pid, ("", 0))[1]:
                self.peak_kb[pid] = (name, hwm_kb)

    def by_role_mb(self) -> dict[str, float]:
        """Peak MB per role, largest first: the JVM's main class (Master,
        Worker, CoarseGrainedExecutorBackend, SparkSubmit) or the command."""
        return {
            f"{name} (pid {pid})": round(kb / 1024)
            for pid, (name, kb) in sorted(self.peak_kb.items(), key=lambda item: -item[1][1])
        }


def _descendants_memory(root: int) -> list[tuple[int, str, int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found = []
    pending = list(children.get(root, []))
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        hwm = [line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")]
        if hwm:
            found.append((pid, _role(argv), int(hwm[0])))
    return found


def _role(argv: list[bytes]) -> str:
    """A JVM's main class (Spark's launcher is ``Main``); for any other
    process (the spark-class shell and its subshells, Python), its first
    words."""
    words = [word.decode(errors="replace") for word in argv if word]
    if not words:
        return "?"
    if Path(words[0]).name == "java":
        for word in words:
            if word.startswith("org.apache.spark."):
                return word.rsplit(".", 1)[1]
    return " ".join([Path(words[0]).name, *words[1:3]])


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    """The command line: paths, options, and what follows ``--`` (passed to
    ``jepsen-like check``). Raises ``SystemExit`` (argparse) on bad usage,
    also when neither paths nor ``--ops`` are given."""
    argv = list(argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(prog="python -m bench.spark_standalone", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="histories to check (default: a synthetic one, --ops)")
    parser.add_argument("--ops", type=int, default=None, help="synthesize a history of this many operations to check")
    parser.add_argument("--keys", type=int, default=1000, help="keys of the synthetic history")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-cores", type=int, default=1)
    parser.add_argument("--worker-memory", default="3g", help="each worker's memory, also its executor's (Spark size)")
    parser.add_argument("--driver-memory", default="2g", help="the checker's driver JVM (Spark size)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="logs, scratch space, synthetic history (default: a temporary directory); "
                             "deleted afterwards unless --keep or it existed before")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--spark-home", type=Path, default=None, help="the Spark distribution (default: pyspark's)")
    parser.add_argument("--start-timeout-s", type=float, default=START_TIMEOUT_S,
                        help="seconds for the master and every worker to come up")
    arguments = parser.parse_args(argv)
    if not arguments.paths and arguments.ops is None:
        parser.error("give histories to check, or --ops N for a synthetic one")
    if arguments.ops is not None and arguments.ops < 1:
        parser.error(f"--ops must be positive, got {arguments.ops}")
    if arguments.workers < 1 or arguments.worker_cores < 1:
        parser.error("--workers and --worker-cores must be at least 1")
    arguments.extra = extra
    return arguments


def check_command(arguments: argparse.Namespace, paths: Sequence[str], master_url: str, directory: Path) -> list[str]:
    """``jepsen-like check`` against ``master_url``: one executor per worker
    with the worker's cores and memory, a driver reachable on 127.0.0.1."""
    conf = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.driver.memory": arguments.driver_memory,
        "spark.executor.cores": str(arguments.worker_cores),
        "spark.executor.memory": arguments.worker_memory,
        "spark.cores.max": str(arguments.workers * arguments.worker_cores),
        "spark.local.dir": str(directory / "local"),
    }
    command = [sys.executable, "-m", "jepsen_like.checker", "check", *paths, "--spark-master", master_url,
               "--spark-log", str(directory / "logs" / "check-spark.log")]
    for name, value in conf.items():
        command += ["--spark-conf", f"{name}={value}"]
    return command + list(arguments.extra)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checker on a fresh standalone cluster; returns the check's
    exit code (2 for bad usage, 5 when the cluster did not come up)."""
    arguments = parse_arguments(sys.argv[1:] if argv is None else argv)
    # Deleted afterwards (unless --keep) only if this run made it.
    made_directory = arguments.work_dir is None or not arguments.work_dir.exists()
    directory = arguments.work_dir or Path(tempfile.mkdtemp(prefix="spark-standalone-"))
    directory.mkdir(parents=True, exist_ok=True)
    # A SIGTERM (a CI timeout, kill) unwinds like Ctrl-C, through the
    # finally blocks that stop the cluster.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        paths = [str(Path(path).resolve()) for path in arguments.paths]
        if not paths:
            from jepsen_like.checker import synthesize

            made = synthesize(directory / "history", ops=arguments.ops, keys=arguments.keys, processes=20, seed=1)
            print(f"synthesized {made.operations:,} operations ({made.events:,} events) in {directory / 'history'}", flush=True)
            paths = [str(directory / "history")]
        with PeakMemory() as memory:
            with standalone_cluster(
                directory, workers=arguments.workers, worker_cores=arguments.worker_cores,
                worker_memory=arguments.worker_memory, home=arguments.spark_home,
                start_timeout_s=arguments.start_timeout_s,
            ) as cluster:
                print(f"cluster up: {cluster.master_url} ({arguments.workers} workers x {arguments.worker_cores} cores, "
                      f"{arguments.worker_memory} each), logs in {directory / 'logs'}", flush=True)
                load_before = os.getloadavg()
                started = time.monotonic()
                completed = subprocess.run(check_command(arguments, paths, cluster.master_url, directory), cwd=REPO)
                wall_s = time.monotonic() - started
                load_after = os.getloadavg()
        print(f"check: exit {completed.returncode}, {wall_s:.1f} s wall; load average "
              f"{load_before[0]:.1f} before, {load_after[0]:.1f} after (1 min)", flush=True)
        print("peak RSS MB: " + json.dumps(memory.by_role_mb()), flush=True)
        return completed.returncode
    except ClusterError as error:
        print(f"the standalone cluster did not come up: {error}", file=sys.stderr)
        return 5
    finally:
        signal.signal(signal.SIGTERM, previous)
        if made_directory and not arguments.keep:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
