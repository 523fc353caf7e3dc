"""The deterministic simulator: the real quorum cores, a simulated network
and disk, one seed. See ``docs/architecture.md``."""

from ._cluster import InvariantViolation, KeyValueMachine, SimDisk, SimNode, SimOptions, Simulation
from ._network import LinkFaults, Network
from ._result import ScenarioResult
from ._scenarios import SCENARIOS, find_stale_reads, random_options, run_scenario

__all__ = [
    "SCENARIOS",
    "InvariantViolation",
    "KeyValueMachine",
    "LinkFaults",
    "Network",
    "ScenarioResult",
    "SimDisk",
    "SimNode",
    "SimOptions",
    "Simulation",
    "find_stale_reads",
    "random_options",
    "run_scenario",
]
