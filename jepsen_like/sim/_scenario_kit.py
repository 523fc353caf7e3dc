"""The pieces every simulator scenario shares: a workload of unique-valued
writes and reads, waiting for a leader, scheduling, and the final heal and
liveness check (a leader is elected and a new write commits within a
bound)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._cluster import InvariantViolation, Simulation

# After healing, a leader must be elected and a write committed within this.
LIVENESS_BOUND_MS = 20_000


class _Workload:
    """Unique-valued writes and reads of a few keys, issued on a schedule."""

    def __init__(self, sim: Simulation, keys: tuple[str, ...] = ("x",)) -> None:
        self.sim = sim
        self.keys = keys
        self.counter = 0
        self.busy: set[int] = set()

    def next_value(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def write(self, node_id: int | None, key: str | None = None) -> None:
        if node_id is None:
            return
        process = self.sim.new_process()
        self.sim.client_write(process, node_id, key or self.keys[0], self.next_value())

    def read(self, node_id: int | None, mode: str, key: str | None = None) -> None:
        if node_id is None:
            return
        process = self.sim.new_process()
        self.sim.client_read(process, node_id, key or self.keys[0], mode)


def _wait_for_leader(sim: Simulation, timeout_ms: float = 15_000) -> int:
    if not sim.run_until_true(lambda: sim.stable_leader() is not None, timeout_ms):
        raise InvariantViolation("liveness", f"no leader elected within {timeout_ms} ms")
    leader = sim.stable_leader()
    assert leader is not None
    return leader


def _heal_and_check_liveness(sim: Simulation, workload: _Workload) -> float:
    """Heal every fault, restart every node, and require a leader and a new
    committed write within the bound. Returns the time it took (ms)."""
    sim.heal()
    for node_id in sorted(sim.nodes):
        sim.restart(node_id)
    started = sim.now_ms
    committed_before = len(sim.committed)
    deadline = started + LIVENESS_BOUND_MS
    while sim.now_ms < deadline:
        leader = sim.stable_leader()
        if leader is not None:
            workload.write(leader)
            if sim.run_until_true(lambda: len(sim.committed) > committed_before and _last_data_committed(sim, started), 1000):
                return sim.now_ms - started
        else:
            sim.run_for(50)
    raise InvariantViolation("liveness", f"no write committed within {LIVENESS_BOUND_MS} ms of healing")


def _last_data_committed(sim: Simulation, since_ms: float) -> bool:
    since_ns = since_ms * 1e6
    return any(op["type"] == "ok" and op["f"] == "write" and op["time"] >= since_ns for op in sim.history)


def _count_ops(history: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in history:
        if event["type"] != "invoke":
            counts[event["type"]] = counts.get(event["type"], 0) + 1
    return counts


def _every(sim: Simulation, period_ms: float, until_ms: float, action: Callable[[], None]) -> None:
    """Schedule ``action`` every ``period_ms`` until ``until_ms``."""

    def fire() -> None:
        if sim.now_ms <= until_ms:
            action()
            sim.schedule(period_ms, fire)

    sim.schedule(0, fire)
