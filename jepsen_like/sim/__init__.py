"""The deterministic simulator: the real quorum cores, a simulated network
and disk, one seed. See ``docs/architecture.md``.

The named scenarios (``SCENARIOS``, ``run_scenario``, ``random_options``)
and the read contract (``find_stale_reads``, judged by the checker) are
imported on first use, so that a page that only drives a ``Simulation``
(the browser playground) does not load them at start; so are schedules
(``Schedule``, ``replay_schedule``, ``shrink_schedule``: docs/replay.md).
"""

from importlib import import_module
from typing import Any

from ._cluster import InvariantViolation, KeyValueMachine, SimDisk, SimNode, SimOptions, Simulation
from ._network import LinkFaults, Network
from ._result import ScenarioResult

# Public names imported by ``__getattr__`` when first asked for.
_LAZY = {
    "SCENARIOS": "jepsen_like.sim._scenarios",
    "random_options": "jepsen_like.sim._scenarios",
    "run_scenario": "jepsen_like.sim._scenarios",
    "find_stale_reads": "jepsen_like.sim._reads",
    **{
        name: "jepsen_like.sim._schedule"
        for name in ("MAX_DURATION_MS", "MAX_FAULTS", "MAX_OPERATIONS", "MAX_SCHEDULE_BYTES", "Fault", "Operation", "Schedule", "ScheduleError", "Timers", "loads_schedule", "parse_schedule")
    },
    "SimReplay": "jepsen_like.sim._schedule_replay",
    "Shrunk": "jepsen_like.sim._schedule_replay",
    "regression_test_stub": "jepsen_like.sim._schedule_replay",
    "replay_schedule": "jepsen_like.sim._schedule_replay",
    "shrink_schedule": "jepsen_like.sim._schedule_replay",
    "schedule_of_scenario": "jepsen_like.sim._schedule_replay",
}


def __getattr__(name: str) -> Any:
    """The lazily imported public names (PEP 562); raises AttributeError
    for any other name."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "MAX_DURATION_MS",
    "MAX_FAULTS",
    "MAX_OPERATIONS",
    "MAX_SCHEDULE_BYTES",
    "SCENARIOS",
    "Fault",
    "InvariantViolation",
    "KeyValueMachine",
    "LinkFaults",
    "Network",
    "Operation",
    "ScenarioResult",
    "Schedule",
    "ScheduleError",
    "Shrunk",
    "SimDisk",
    "SimNode",
    "SimOptions",
    "SimReplay",
    "Simulation",
    "Timers",
    "find_stale_reads",
    "loads_schedule",
    "parse_schedule",
    "random_options",
    "regression_test_stub",
    "replay_schedule",
    "run_scenario",
    "schedule_of_scenario",
    "shrink_schedule",
]
