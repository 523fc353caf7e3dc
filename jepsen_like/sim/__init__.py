"""The deterministic simulator: the real quorum cores, a simulated network
and disk, one seed. See ``docs/architecture.md``.

The named scenarios (``SCENARIOS``, ``run_scenario``, ``random_options``)
and the read contract (``find_stale_reads``, judged by the checker) are
imported on first use, so that a page that only drives a ``Simulation``
(the browser playground) does not load them at start.
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
