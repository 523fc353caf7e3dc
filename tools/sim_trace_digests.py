"""Digests of the simulator's full traces and histories for fixed seeds: the
guard for a refactor that must not change behaviour (issue 13). Run it on the
commit before the change and after it, and diff the two outputs; a digest
that moved is a behaviour change to explain.

    PYTHONPATH=. .venv/bin/python tools/sim_trace_digests.py > before.json

Random seeds that draw simulated disk faults or damage change whenever the
options drawn from the seed change (jepsen_like.sim.random_options)."""

from __future__ import annotations

import hashlib
import json

from jepsen_like.sim import run_scenario

CASES = [("random", seed) for seed in (1, 2, 3, 15, 43, 105)] + [
    ("zombie-leader", 7),
    ("flapping-network", 42),
    ("partition-heal-disruption", 3),
    ("fast-bounce", 1),
    ("fast-bounce", 2),
    ("broker-cut-from-controller", 1),
    ("controlled-shutdown", 1),
]


def digests() -> dict[str, str]:
    result: dict[str, str] = {}
    for scenario, seed in CASES:
        lines: list[str] = []
        run = run_scenario(scenario, seed, trace=lines.append, full_trace=True)
        text = "\n".join(lines).encode() + json.dumps(run.simulation.history, sort_keys=True, default=str).encode()
        result[f"{scenario}:{seed}"] = hashlib.sha256(text).hexdigest()[:16]
    return result


if __name__ == "__main__":
    print(json.dumps(digests(), indent=1))
