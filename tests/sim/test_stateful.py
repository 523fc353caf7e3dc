"""A hypothesis state machine over the simulator.

Hypothesis chooses the schedule: time passing, network faults of every
shape, crashes and restarts, proposals and reads in both modes. The
simulator checks its invariants after every event (one leader per epoch,
monotonic epochs and high watermarks, log matching of committed records,
leader completeness); after each step the read contract is checked; at the
end everything heals and the cluster must elect a leader and commit a new
write (liveness), with every acknowledged write committed.
"""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from _stateful_base import SimulatedClusterMachine, node_index
from jepsen_like.sim import LinkFaults, SimOptions, Simulation
from jepsen_like.sim._scenarios import _Workload

keys = st.sampled_from(["a", "b"])


class QuorumUnderFaults(SimulatedClusterMachine):
    @initialize(
        seed=st.integers(min_value=0, max_value=2**32 - 1),
        voters=st.sampled_from([1, 3, 3, 5]),
        pre_vote=st.booleans(),
        snapshot_every=st.sampled_from([0, 5]),
    )
    def start(self, seed, voters, pre_vote, snapshot_every):
        options = SimOptions(voters=voters, pre_vote=pre_vote, snapshot_every_records=snapshot_every)
        self.sim = Simulation(seed, options)
        self.workload = _Workload(self.sim, keys=("a", "b"))
        self.nodes = sorted(self.sim.nodes)

    @rule()
    def messages_in_flight_arrive(self):
        self.sim.run_for(3)

    @rule(
        drop=st.floats(min_value=0, max_value=0.3),
        duplicate=st.floats(min_value=0, max_value=0.2),
        reorder=st.floats(min_value=0, max_value=0.3),
    )
    def links_turn_lossy(self, drop, duplicate, reorder):
        self.sim.network.faults = LinkFaults(drop_rate=drop, duplicate_rate=duplicate, reorder_rate=reorder)

    @rule(data=st.data())
    def split(self, data):
        side = data.draw(st.lists(st.sampled_from(self.nodes), unique=True))
        self.sim.network.split(side, [n for n in self.nodes if n not in side])

    @rule(index=node_index, key=keys, to_leader=st.booleans())
    def propose(self, index, key, to_leader):
        target = self.sim.leader() if to_leader else self._node(index)
        self.workload.write(target if target is not None else self._node(index), key)

    @rule(index=node_index, key=keys, mode=st.sampled_from(["linearizable", "leader-local"]))
    def read(self, index, key, mode):
        self.workload.read(self._node(index), mode, key)


# Each example is cheap (a few ms of wall time): three times the profile.s
# examples, so the long profile scales it too.
QuorumUnderFaults.TestCase.settings = settings(
    max_examples=3 * settings.default.max_examples, stateful_step_count=40
)
TestQuorumUnderFaults = QuorumUnderFaults.TestCase
