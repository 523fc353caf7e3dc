"""A hypothesis state machine over reconfigurations (KIP-853; Raft thesis §4).

Hypothesis chooses the schedule: voters added, removed (the leader
included) and replaced after a disk wipe, with or without auto-join on
every node, interleaved with time passing, partitions, one-way cuts,
crashes and restarts, and writes. The membership moves are the sweep's
(``membership_move``: its rules keep at most one lost copy per voter set),
only the choices are hypothesis's. The simulation checks after every
event that no epoch has two leaders, that a node votes only as a voter of
the set it holds, that consecutive voter sets have overlapping majorities,
that committed records never change and that auto-join never asks for a
disk an operator removed; at the end everything heals and the cluster
must elect a leader and commit a write, with every committed record on a
majority of the last voter set.
"""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from _stateful_base import NODES, SimulatedClusterMachine
from jepsen_like.sim import SimOptions, Simulation
from jepsen_like.sim._reconfig_scenarios import Operator, membership_move
from jepsen_like.sim._scenario_kit import _Workload


class ReconfigurationUnderFaults(SimulatedClusterMachine):
    @initialize(
        seed=st.integers(min_value=0, max_value=2**32 - 1),
        voters=st.sampled_from([1, 3, 3, 5]),
        auto_join=st.booleans(),
        snapshot_every=st.sampled_from([0, 10]),
    )
    def start(self, seed, voters, auto_join, snapshot_every):
        options = SimOptions(
            voters=voters,
            dynamic_voters=True,
            spare_nodes=NODES - voters,
            auto_join=auto_join,
            snapshot_every_records=snapshot_every,
        )
        self.sim = Simulation(seed, options)
        self.operator = Operator(self.sim)
        self.workload = _Workload(self.sim, keys=("a", "b"))
        self.nodes = sorted(self.sim.nodes)

    @rule(data=st.data(), roll=st.floats(min_value=0, max_value=1, exclude_max=True))
    def change_voters(self, data, roll):
        """One membership move, then time for it to commit (or not)."""
        membership_move(
            self.sim,
            self.operator,
            roll,
            lambda nodes: data.draw(st.sampled_from(sorted(nodes))),
            lambda: data.draw(st.floats(min_value=0, max_value=1, exclude_max=True)),
        )
        self.sim.run_for(data.draw(st.integers(min_value=0, max_value=1500)))

    @rule(key=st.sampled_from(["a", "b"]))
    def write(self, key):
        leader = self.sim.leader()
        self.workload.write(leader if leader is not None else self.nodes[0], key)


# An example simulates a minute or two of a five-node cluster: a tenth of
# the profile's examples (6 in make test, 200 in make soak).
ReconfigurationUnderFaults.TestCase.settings = settings(
    max_examples=max(1, settings.default.max_examples // 10), stateful_step_count=30
)
TestReconfigurationUnderFaults = ReconfigurationUnderFaults.TestCase
