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
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from jepsen_like.sim import SimOptions, Simulation, find_stale_reads
from jepsen_like.sim._reconfig_scenarios import Operator, membership_move
from jepsen_like.sim._scenario_kit import _heal_and_check_liveness, _Workload

NODES = 5
node_index = st.integers(min_value=0, max_value=NODES - 1)


class ReconfigurationUnderFaults(RuleBasedStateMachine):
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

    def _node(self, index):
        return self.nodes[index % len(self.nodes)]

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

    @rule(duration_ms=st.integers(min_value=1, max_value=4000))
    def time_passes(self, duration_ms):
        self.sim.run_for(duration_ms)

    @rule(index=node_index)
    def isolate(self, index):
        self.sim.network.isolate(self._node(index), self.nodes)

    @rule(src=node_index, dst=node_index)
    def cut_one_way(self, src, dst):
        if self._node(src) != self._node(dst):
            self.sim.network.block(self._node(src), self._node(dst))

    @rule()
    def heal(self):
        self.sim.heal()

    @rule(index=node_index)
    def crash(self, index):
        self.sim.crash(self._node(index))

    @rule(index=node_index)
    def restart(self, index):
        self.sim.restart(self._node(index))

    @rule(key=st.sampled_from(["a", "b"]))
    def write(self, key):
        leader = self.sim.leader()
        self.workload.write(leader if leader is not None else self.nodes[0], key)

    @invariant()
    def reads_keep_their_contract(self):
        if hasattr(self, "sim"):
            options = self.sim.options
            bound_ms = options.check_quorum_factor * options.fetch_timeout_ms
            assert find_stale_reads(self.sim.history, bound_ms) == []

    def teardown(self):
        if not hasattr(self, "sim"):
            return
        self.sim.run_for(self.sim.options.client_timeout_ms)
        _heal_and_check_liveness(self.sim, self.workload)
        self.sim.check_final()


# An example simulates a minute or two of a five-node cluster: a tenth of
# the profile's examples (6 in make test, 200 in make soak).
ReconfigurationUnderFaults.TestCase.settings = settings(
    max_examples=max(1, settings.default.max_examples // 10), stateful_step_count=30
)
TestReconfigurationUnderFaults = ReconfigurationUnderFaults.TestCase
