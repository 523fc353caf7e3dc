"""Real `kraft-quorum node` processes on loopback, for tests.

Every wait is a bounded poll of a condition; every process is killed and
every directory removed when the test ends.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import trio

from quorum.client import QuorumClient
from loopback import free_ports

BIN = Path(sys.executable).parent



class ProcessCluster:
    """``dynamic``: the nodes' data directories are formatted with
    ``kraft-quorum format --initial-voters`` (KIP-853) before they first
    start (``format``), and the nodes start without ``--voters``."""

    def __init__(self, directory: Path, voters: int = 3, extra_args: tuple[str, ...] = (), dynamic: bool = False) -> None:
        self.directory = directory
        self.ports = dict(zip(range(1, voters + 1), free_ports(voters)))
        self.voters_arg = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.ports.items())
        self.processes: dict[int, subprocess.Popen] = {}
        self.extra_args = extra_args
        self.dynamic = dynamic
        # The initial voters' directory ids, as the operator chose them.
        self.directory_ids = {node_id: uuid.uuid4().hex for node_id in self.ports}
        self.initial_voters_arg = ",".join(
            f"{i}@127.0.0.1:{p}:{self.directory_ids[i]}" for i, p in self.ports.items()
        )

    def format(self, node_id: int, *args: str, join: bool = False) -> str:
        """``kraft-quorum format`` node ``node_id``'s data directory with the
        initial voters, or with ``args`` instead (``--standalone ...``);
        ``join``: a fresh directory id, as for a replaced disk. Returns the
        directory id it wrote."""
        command = [
            str(BIN / "kraft-quorum"), "format", "--data-dir", str(self.data_dir(node_id)), "--node-id", str(node_id),
            "--cluster-id", "pykraft", *(args or ("--initial-voters", self.initial_voters_arg)),
            *(["--join"] if join else []),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        return json.loads(done.stdout)["directory_id"]

    @property
    def bootstrap(self) -> list[str]:
        return [f"{i}@127.0.0.1:{p}" for i, p in self.ports.items()]

    def data_dir(self, node_id: int) -> Path:
        return self.directory / f"node{node_id}"

    def start(self, node_id: int, *args: str) -> None:
        """Start node ``node_id`` with the cluster's options and ``args``."""
        log = open(self.directory / f"node{node_id}.log", "ab")  # noqa: SIM115 - closed with the process
        self.processes[node_id] = subprocess.Popen(
            [
                str(BIN / "kraft-quorum"),
                "node",
                "--plaintext",
                "--node-id",
                str(node_id),
                *([] if self.dynamic else ["--voters", self.voters_arg]),
                "--data-dir",
                str(self.data_dir(node_id)),
                "--snapshot-every-records",
                "200",
                *self.extra_args,
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def start_all(self) -> None:
        for node_id in self.ports:
            self.start(node_id)

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        process = self.processes.pop(node_id)
        process.send_signal(sig)
        process.wait(timeout=10)

    def stop_all(self) -> None:
        for node_id in list(self.processes):
            process = self.processes.pop(node_id)
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)

    def log_text(self, node_id: int) -> str:
        return (self.directory / f"node{node_id}.log").read_text(errors="replace")

    def client(self, **options) -> QuorumClient:
        return QuorumClient(self.bootstrap, **options)

    async def leader(self, timeout_s: float = 20.0, exclude: int | None = None) -> int:
        """The id of the node every live voter agrees leads, found through
        DescribeQuorum on each live node."""
        with trio.fail_after(timeout_s):
            while True:
                views = set()
                for node_id, port in sorted(self.ports.items()):
                    if node_id not in self.processes:
                        continue
                    try:
                        async with QuorumClient([f"127.0.0.1:{port}"], retry_timeout_s=0.5, request_timeout_s=0.5) as c:
                            answer = await c.describe()
                        views.add(answer.leader_id)
                    except Exception:  # noqa: BLE001 - not up yet
                        views.add(None)
                if len(views) == 1 and None not in views and exclude not in views:
                    return views.pop()
                await trio.sleep(0.05)


def node_pids(cluster: ProcessCluster) -> dict[int, int]:
    return {node_id: process.pid for node_id, process in cluster.processes.items()}


__all__ = ["ProcessCluster", "free_ports", "node_pids"]
