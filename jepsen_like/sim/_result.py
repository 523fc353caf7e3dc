"""What a simulator scenario run reports. Its own module because the
quorum scenarios (``_scenarios``) and the broker scenarios
(``_broker_scenarios``) both fill it in, and the former list the latter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ScenarioResult:
    scenario: str
    seed: int
    options: dict[str, Any]
    valid: bool = True
    failure_class: str | None = None  # crash | correctness | liveness
    violation: str | None = None
    stale_reads: int = 0
    stale_examples: list[dict[str, Any]] = field(default_factory=list)
    leader_resign_ms: float | None = None
    failover_ms: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)
    virtual_ms: float = 0.0
    events: int = 0
    # The finished simulation, for tests and the visual replay; not in the summary.
    simulation: Any = None

    def summary(self) -> dict[str, Any]:
        result = {
            "scenario": self.scenario,
            "seed": self.seed,
            "valid": self.valid,
            "failure_class": self.failure_class,
            "violation": self.violation,
            "stale_reads": self.stale_reads,
            "leader_resign_ms": self.leader_resign_ms,
            "failover_ms": self.failover_ms,
            "ops": self.ops,
            "virtual_ms": round(self.virtual_ms, 3),
            "events": self.events,
            "options": self.options,
        }
        result.update(self.extra)
        return result
