"""Real `kraft-controller` and `kraft-broker` processes on loopback, for
tests. Every wait is a bounded poll of a condition; every process is killed
when the cluster is closed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

from broker_agent.client import MetadataClient
from registration.client import AdminClient
from loopback import free_ports

BIN = Path(sys.executable).parent
CONTROLLERS = (1, 2, 3)
BROKERS = (101, 102, 103)
SESSION_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = 500
ELECTION_TIMEOUT_MS = 500
FETCH_TIMEOUT_MS = 1000
QUORUM_ARGS = ("--election-timeout-ms", str(ELECTION_TIMEOUT_MS), "--fetch-timeout-ms", str(FETCH_TIMEOUT_MS))



class BrokerCluster:
    """Three controllers and three brokers as OS processes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        ports = free_ports(len(CONTROLLERS) + len(BROKERS))
        self.controller_ports = dict(zip(CONTROLLERS, ports))
        self.broker_ports = dict(zip(BROKERS, ports[len(CONTROLLERS) :]))
        self.voters_arg = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.controller_ports.items())
        self.processes: dict[int, subprocess.Popen] = {}

    @property
    def controllers(self) -> list[str]:
        return [f"{i}@127.0.0.1:{p}" for i, p in self.controller_ports.items()]

    @property
    def broker_addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.broker_ports.values()]

    def event_log(self, broker_id: int) -> Path:
        return self.directory / f"broker{broker_id}.events.jsonl"

    def events(self, broker_id: int) -> list[dict[str, Any]]:
        path = self.event_log(broker_id)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def _spawn(self, node_id: int, args: list[str]) -> None:
        log = open(self.directory / f"node{node_id}.log", "ab")  # noqa: SIM115 - closed with the process
        self.processes[node_id] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def start_controller(self, node_id: int) -> None:
        self._spawn(
            node_id,
            [
                str(BIN / "kraft-controller"),
                "--plaintext",
                "--node-id", str(node_id),
                "--voters", self.voters_arg,
                "--data-dir", str(self.directory / f"controller{node_id}"),
                "--no-fsync",
                "--session-timeout-ms", str(SESSION_TIMEOUT_MS),
                "--heartbeat-interval-ms", str(HEARTBEAT_INTERVAL_MS),
                *QUORUM_ARGS,
            ],
        )  # fmt: skip

    def start_broker(self, broker_id: int, bootstrap: str | None = None) -> float:
        """Start (or restart) a broker process, given every controller (or
        the ``--bootstrap`` list given); returns when it was spawned
        (``time.monotonic()``)."""
        self._spawn(
            broker_id,
            [
                str(BIN / "kraft-broker"),
                "--plaintext",
                "--broker-id", str(broker_id),
                "--bootstrap", bootstrap or self.voters_arg,
                "--listen", f"127.0.0.1:{self.broker_ports[broker_id]}",
                "--event-log", str(self.event_log(broker_id)),
                "--session-timeout-ms", str(SESSION_TIMEOUT_MS),
                "--heartbeat-interval-ms", str(HEARTBEAT_INTERVAL_MS),
                "--shutdown-timeout-ms", "5000",
                *QUORUM_ARGS,
            ],
        )  # fmt: skip
        return time.monotonic()

    def start_all(self) -> None:
        for node_id in CONTROLLERS:
            self.start_controller(node_id)
        for broker_id in BROKERS:
            self.start_broker(broker_id)

    def signal(self, node_id: int, sig: int) -> None:
        self.processes[node_id].send_signal(sig)

    def kill(self, node_id: int) -> float:
        """kill -9; returns when (``time.monotonic()``)."""
        process = self.processes.pop(node_id)
        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        process.wait(timeout=10)
        return killed_at

    def stop_all(self) -> None:
        for node_id in list(self.processes):
            process = self.processes.pop(node_id)
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
            process.wait(timeout=10)

    def log_text(self, node_id: int) -> str:
        return (self.directory / f"node{node_id}.log").read_text(errors="replace")

    def admin(self) -> AdminClient:
        return AdminClient(self.controllers, timeout_s=5.0)

    def metadata_client(self, **options: Any) -> MetadataClient:
        return MetadataClient(self.broker_addresses, controllers=self.controllers, **options)

    async def broker_states(self, admin: AdminClient) -> dict[int, tuple[str, int]]:
        """broker id -> (state, epoch), in the active controller's image."""
        cluster = await admin.describe_cluster()
        return {broker.broker_id: (broker.state, broker.broker_epoch) for broker in cluster.brokers}

    async def wait_for_states(self, admin: AdminClient, predicate, timeout_s: float, what: str) -> dict[int, tuple[str, int]]:
        with trio.move_on_after(timeout_s):
            while True:
                try:
                    states = await self.broker_states(admin)
                except Exception:  # noqa: BLE001 - no controller active yet
                    states = {}
                if predicate(states):
                    return states
                await trio.sleep(0.02)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last states {states}")
