"""The rules and checks both hypothesis state machines over the simulator
share (test_stateful.py, test_reconfig_stateful.py): five nodes, time
passing, a node cut off, a one-way cut, healing, crashes and restarts; the
read contract after every step; at the end everything heals and the cluster
must elect a leader and commit a write, and the simulation's final checks
pass. A subclass sets ``self.sim``, ``self.workload`` and ``self.nodes`` in
its ``@initialize`` rule and adds its own rules."""

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from jepsen_like.sim import find_stale_reads
from jepsen_like.sim._scenario_kit import _heal_and_check_liveness

NODES = 5
node_index = st.integers(min_value=0, max_value=NODES - 1)


class SimulatedClusterMachine(RuleBasedStateMachine):
    def _node(self, index):
        return self.nodes[index % len(self.nodes)]

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
