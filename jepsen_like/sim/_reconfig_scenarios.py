"""Simulator scenarios that change the voter set (KIP-853; Raft thesis §4
single-server changes) while the network, the processes and the disks
fail: grow 1 -> 3 -> 5 and shrink 5 -> 3, replace a voter whose disk was
wiped, remove the leader, remove a partitioned voter, add a voter that then
dies; and the random reconfiguration nemesis of the sweep.

An ``Operator`` asks the leader for one change at a time and retries until
the change is committed (a leader change may lose an uncommitted one). The
simulation checks after every output that a node votes only while it is a
voter of the set it holds, and that every voter set appended to a log
overlaps the one before it (``Simulation._check_voters``); at the end, every
committed record is on a majority of the last committed set.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from quorum import NotLeaderError, ReconfigurationError, RecordKind, ReplicaHost, Voter, VoterSet

from ._cluster import InvariantViolation, Simulation, SimOptions
from ._result import ScenarioResult
from ._scenario_kit import _every, _heal_and_check_liveness, _wait_for_leader, _Workload

# An operator gives up on one change after this long (faults included).
CHANGE_TIMEOUT_MS = 20_000
# How often the operator looks at the cluster while a change is under way.
OPERATOR_PERIOD_MS = 50


class Operator:
    """Changes voters through whichever node leads, one change at a time.

    ``change`` returns once the change is committed (True) or the timeout
    passed (False), running the simulation meanwhile."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def voters(self) -> VoterSet:
        """The last committed voter set (the bootstrap set before any)."""
        committed = self.sim.committed_voters()
        return committed if committed is not None else self.sim.options.quorum_config(1).initial_voter_set

    def directory_of(self, node_id: int) -> str | None:
        return self.sim.nodes[node_id].disk.directory_id

    def add(self, node_id: int, timeout_ms: float = CHANGE_TIMEOUT_MS) -> bool:
        voter = Voter(node_id, self.directory_of(node_id))
        return self._change(f"add n{node_id}", self._adding(voter), lambda voters: voters.get(node_id) == voter, timeout_ms)

    def remove(self, node_id: int, timeout_ms: float = CHANGE_TIMEOUT_MS) -> bool:
        return self._change(f"remove n{node_id}", self._removing(node_id), lambda voters: node_id not in voters, timeout_ms)

    def try_add(self, node_id: int) -> bool:
        """Ask the leader once to add ``node_id``'s current disk."""
        return self.try_once(f"add n{node_id}", self._adding(Voter(node_id, self.directory_of(node_id))))

    def try_remove(self, node_id: int, description: str | None = None) -> bool:
        """Ask the leader once to remove ``node_id``."""
        return self.try_once(description or f"remove n{node_id}", self._removing(node_id))

    def upgrade(self, timeout_ms: float = CHANGE_TIMEOUT_MS) -> bool:
        """Upgrade the static voter set to dynamic voters through the
        leader's ``upgrade_voters`` (what ``kraft-quorum upgrade-voters``
        asks of it), asking again after a refusal or a leader change until
        a VOTERS record is committed."""
        return self._change("upgrade voters", self._upgrading, lambda _voters: self.upgraded, timeout_ms)

    def try_upgrade(self) -> bool:
        """Ask the leader once to upgrade the static voter set."""
        return self.try_once("upgrade voters", self._upgrading)

    @property
    def upgraded(self) -> bool:
        """Is a VOTERS record committed (the voters are dynamic for good)?"""
        return self.sim.committed_voters() is not None

    @staticmethod
    def _upgrading(host: ReplicaHost) -> int | None:
        # No endpoints: the simulator's nodes are reached by id.
        return host.upgrade_voters({})

    def _adding(self, voter: Voter) -> Callable[[ReplicaHost], int]:
        def apply(host: ReplicaHost) -> int:
            offset = host.add_voter(voter)
            # The operator wants this disk again: auto-join may add it too.
            self.sim.removed_by_operator.discard((voter.node_id, voter.directory_id))
            return offset

        return apply

    def _removing(self, node_id: int) -> Callable[[ReplicaHost], int]:
        def apply(host: ReplicaHost) -> int:
            held = host.core.voters.get(node_id)
            offset = host.remove_voter(node_id)
            # From now on auto-join must never ask to add this disk again
            # (the simulation checks every request it makes).
            if held is not None:
                self.sim.removed_by_operator.add((node_id, held.directory_id))
            return offset

        return apply

    def try_once(self, description: str, apply: Callable[[ReplicaHost], int | None]) -> bool:
        """Ask the current leader once (no waiting): True if it appended."""
        sim = self.sim
        leader = sim.stable_leader()
        if leader is None:
            return False
        host = sim.nodes[leader].host
        assert host is not None
        if host.core.voter_change_pending:
            return False
        try:
            offset = apply(host)
        except (NotLeaderError, ReconfigurationError) as refused:
            sim._say_full(f"OPERATOR {description} at n{leader} refused: {refused}")
            return False
        if offset is None:
            sim._say_full(f"OPERATOR {description} at n{leader}: the voters are dynamic already")
            return False
        sim._say(f"OPERATOR {description} at n{leader}: voters record at offset {offset}")
        return True

    def _change(
        self,
        description: str,
        apply: Callable[[ReplicaHost], int | None],
        done: Callable[[VoterSet], bool],
        timeout_ms: float,
    ) -> bool:
        sim = self.sim
        deadline = sim.now_ms + timeout_ms
        while sim.now_ms < deadline:
            if done(self.voters()):
                return True
            self.try_once(description, apply)
            sim.run_for(OPERATOR_PERIOD_MS)
        return done(self.voters())


def dynamic_options(voters: int, spare_nodes: int) -> Callable[[int], SimOptions]:
    """An ``options_factory``: a dynamic-voter cluster of this shape."""

    def factory(seed: int) -> SimOptions:
        del seed
        return SimOptions(voters=voters, dynamic_voters=True, spare_nodes=spare_nodes)

    return factory


def _write_continuously(sim: Simulation, until_ms: float) -> None:
    """A client writing to whoever leads, every 100 ms until ``until_ms``."""
    workload = _Workload(sim, keys=("a", "b"))
    _every(sim, 100, until_ms, lambda: workload.write(sim.leader(), sim._rng.choice(workload.keys)))


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise InvariantViolation("liveness", f"{what} was not committed within {CHANGE_TIMEOUT_MS} ms")


def _finish(sim: Simulation, result: ScenarioResult, operator: Operator) -> None:
    _heal_and_check_liveness(sim, _Workload(sim))
    result.extra["final_voters"] = list(operator.voters().ids)


def grow_and_shrink(sim: Simulation, result: ScenarioResult) -> None:
    """One voter grows to 3, then 5, under writes, a leader crash and a
    partition; then shrinks to 3 by removing the leader and a partitioned
    voter. ``add_ms``: how long each caught-up voter took to be added."""
    operator = Operator(sim)
    _wait_for_leader(sim)
    _write_continuously(sim, sim.now_ms + 60_000)
    added_ms: list[float] = []
    for node_id in (2, 3):
        started = sim.now_ms
        _require(operator.add(node_id), f"adding n{node_id}")
        added_ms.append(round(sim.now_ms - started, 3))
    sim.crash(_wait_for_leader(sim))
    _wait_for_leader(sim)
    sim.heal()
    for node_id in sorted(sim.nodes):
        sim.restart(node_id)
    # A voter is cut off while the next two join.
    isolated = sim._rng.choice((1, 2, 3))
    sim.network.isolate(isolated, sorted(sim.nodes))
    sim._say(f"PARTITION n{isolated} alone")
    for node_id in (4, 5):
        started = sim.now_ms
        _require(operator.add(node_id), f"adding n{node_id}")
        added_ms.append(round(sim.now_ms - started, 3))
    # Shrink: the partitioned voter, then whoever leads.
    _require(operator.remove(isolated), f"removing the partitioned n{isolated}")
    leader = _wait_for_leader(sim)
    _require(operator.remove(leader), f"removing the leader n{leader}")
    if len(operator.voters()) != 3:
        raise InvariantViolation("scenario", f"expected 3 voters, got {operator.voters().describe()}")
    result.extra["add_ms"] = added_ms
    _finish(sim, result, operator)


grow_and_shrink.options_factory = dynamic_options(1, 4)  # type: ignore[attr-defined]


def replace_voter(sim: Simulation, result: ScenarioResult) -> None:
    """A follower's disk is wiped: it comes back with a new directory id,
    an observer that neither votes nor counts. The operator removes its old
    self and adds it again under the new directory, while another voter is
    partitioned for a while and the leader crashes once."""
    operator = Operator(sim)
    leader = _wait_for_leader(sim)
    _write_continuously(sim, sim.now_ms + 60_000)
    sim.run_for(500)
    victim, other = [node_id for node_id in sorted(sim.nodes) if node_id != leader][:2]
    sim.wipe_disk(victim)
    if sim.nodes[victim].core.is_voter:  # type: ignore[union-attr]
        raise InvariantViolation("directory-id", f"n{victim} with a wiped disk still counts itself a voter")
    sim.network.isolate(other, sorted(sim.nodes))
    sim._say(f"PARTITION n{other} alone")
    sim.schedule(3000, sim.network.heal)
    _require(operator.remove(victim), f"removing the wiped n{victim}")
    sim.crash(_wait_for_leader(sim))
    sim.schedule(2000, lambda: [sim.restart(node_id) for node_id in sorted(sim.nodes)])
    started = sim.now_ms
    _require(operator.add(victim), f"adding n{victim} with its new disk")
    result.extra["replace_ms"] = round(sim.now_ms - started, 3)
    _finish(sim, result, operator)


replace_voter.options_factory = dynamic_options(3, 0)  # type: ignore[attr-defined]


def remove_leader(sim: Simulation, result: ScenarioResult) -> None:
    """The leader removes itself under write load (Raft thesis §4.2.2): it
    leads until the change commits, then hands over. ``unavailable_ms``:
    from the change's commit to the first write the next leader commits."""
    operator = Operator(sim)
    leader = _wait_for_leader(sim)
    _write_continuously(sim, sim.now_ms + 30_000)
    sim.run_for(500)
    _require(operator.remove(leader), f"removing the leader n{leader}")
    committed_at = sim.now_ms
    first_write: list[float] = []

    def next_write() -> bool:
        for event in sim.history:
            if event["type"] == "ok" and event["f"] == "write" and event["time"] > committed_at * 1e6:
                first_write.append(event["time"] / 1e6)
                return True
        return False

    if not sim.run_until_true(next_write, 10_000):
        raise InvariantViolation("liveness", "no write committed after the leader removed itself")
    result.extra["unavailable_ms"] = round(first_write[0] - committed_at, 3)
    if sim.leader() == leader:
        raise InvariantViolation("removed-leader", f"n{leader} still leads after removing itself")
    _finish(sim, result, operator)


remove_leader.options_factory = dynamic_options(3, 0)  # type: ignore[attr-defined]


def remove_partitioned_voter(sim: Simulation, result: ScenarioResult) -> None:
    """A voter of five is partitioned and removed by the other four; after
    healing it learns of its removal and disrupts nobody."""
    operator = Operator(sim)
    leader = _wait_for_leader(sim)
    _write_continuously(sim, sim.now_ms + 30_000)
    victim = [node_id for node_id in sorted(sim.nodes) if node_id != leader][-1]
    sim.network.isolate(victim, sorted(sim.nodes))
    sim._say(f"PARTITION n{victim} alone")
    sim.run_for(3000)
    _require(operator.remove(victim), f"removing the partitioned n{victim}")
    epoch = sim.nodes[sim.leader()].core.epoch  # type: ignore[index,union-attr]
    sim.heal()
    if not sim.run_until_true(lambda: victim not in sim.nodes[victim].core.voters, 10_000):  # type: ignore[union-attr]
        raise InvariantViolation("liveness", f"n{victim} never learned it was removed")
    current = sim.leader()
    result.extra["leader_kept"] = current is not None and sim.nodes[current].core.epoch == epoch  # type: ignore[union-attr]
    _finish(sim, result, operator)


remove_partitioned_voter.options_factory = dynamic_options(5, 0)  # type: ignore[attr-defined]


def add_voter_that_dies(sim: Simulation, result: ScenarioResult) -> None:
    """A fourth voter is added and dies at once: three of four still commit;
    the operator then removes the dead voter."""
    operator = Operator(sim)
    _wait_for_leader(sim)
    _write_continuously(sim, sim.now_ms + 30_000)
    _require(operator.add(4), "adding n4")
    sim.crash(4)
    before = len(sim.committed)
    if not sim.run_until_true(lambda: len(sim.committed) > before + 3, 10_000):
        raise InvariantViolation("liveness", "three of four voters did not commit")
    _require(operator.remove(4), "removing the dead n4")
    _finish(sim, result, operator)


add_voter_that_dies.options_factory = dynamic_options(3, 1)  # type: ignore[attr-defined]


def upgrade_static_voters(sim: Simulation, result: ScenarioResult) -> None:
    """Three static voters (two more nodes observe) are upgraded to dynamic
    voters under writes, through the leader's ``upgrade_voters``, the core
    path ``kraft-quorum upgrade-voters`` takes (issue 17). Before, a voter
    change is refused; while a partitioned voter has not fetched within the
    fetch timeout its directory id is unknown and the upgrade is refused;
    the leader that appends the upgrade crashes at once (the next leader
    commits that record or loses it, and the operator asks again: the
    upgrade is idempotent); every node then restarts with its static
    configuration and holds dynamic voters, read from its log. Membership
    goes on: a spare node is added, the leader removed, a voter's disk
    wiped and replaced under a partition, the second spare added.
    ``upgrade_ms``: from the first request to the committed VOTERS record."""
    operator = Operator(sim)
    leader = _wait_for_leader(sim)
    _write_continuously(sim, sim.now_ms + 120_000)
    sim.run_for(500)
    if operator.try_add(4):
        raise InvariantViolation("static-voters", "a static voter set accepted an AddVoter before its upgrade")
    started = sim.now_ms
    cut_off = [node_id for node_id in operator.voters().ids if node_id != leader][-1]
    sim.network.isolate(cut_off, sorted(sim.nodes))
    sim._say(f"PARTITION n{cut_off} alone")
    sim.run_for(1.5 * sim.options.fetch_timeout_ms)
    if operator.try_upgrade():
        raise InvariantViolation("upgrade-voters", f"the upgrade was appended while n{cut_off}'s directory id was unknown")
    sim.heal()
    if not sim.run_until_true(operator.try_upgrade, CHANGE_TIMEOUT_MS, step_ms=OPERATOR_PERIOD_MS):
        raise InvariantViolation("liveness", "no leader appended the upgrade after the partition healed")
    appended_by = sim.leader()
    assert appended_by is not None
    sim.crash(appended_by)
    sim.schedule(1000, lambda: sim.restart(appended_by))
    _require(operator.upgrade(), "upgrading the static voters")
    result.extra["upgrade_ms"] = round(sim.now_ms - started, 3)
    for node_id in sorted(sim.nodes):
        sim.crash(node_id)
        sim.run_for(300)
        sim.restart(node_id)
        _wait_for_leader(sim)
    if not sim.run_until_true(lambda: all(node.core is not None and node.core.dynamic_voters for node in sim.nodes.values()), 10_000):
        raise InvariantViolation("upgrade-voters", "a node restarted with its static configuration does not hold dynamic voters")
    _require(operator.add(4), "adding n4 after the upgrade")
    leader = _wait_for_leader(sim)
    _require(operator.remove(leader), f"removing the leader n{leader}")
    victim = [node_id for node_id in operator.voters().ids if node_id != _wait_for_leader(sim)][0]
    sim.wipe_disk(victim)
    _require(operator.remove(victim), f"removing the wiped n{victim}'s old disk")
    _require(operator.add(victim), f"adding n{victim} with its new disk")
    isolated = [node_id for node_id in operator.voters().ids if node_id != _wait_for_leader(sim)][0]
    sim.network.isolate(isolated, sorted(sim.nodes))
    sim._say(f"PARTITION n{isolated} alone")
    sim.schedule(3000, sim.network.heal)
    _require(operator.add(5), "adding n5")
    upgraded = sim.first_committed_voters()
    assert upgraded is not None
    result.extra["upgraded_voters"] = [f"{voter.node_id}@{voter.directory_id}" for voter in upgraded.voters]
    _finish(sim, result, operator)


def _upgrade_options(voters: int, spare_nodes: int) -> Callable[[int], SimOptions]:
    def factory(seed: int) -> SimOptions:
        del seed
        return SimOptions(voters=voters, migrate_voters=True, spare_nodes=spare_nodes)

    return factory


upgrade_static_voters.options_factory = _upgrade_options(3, 2)  # type: ignore[attr-defined]


def _auto_join_options(voters: int, spare_nodes: int, **more: Any) -> Callable[[int], SimOptions]:
    def factory(seed: int) -> SimOptions:
        del seed
        return SimOptions(voters=voters, dynamic_voters=True, spare_nodes=spare_nodes, auto_join=True, **more)

    return factory


def _holds_disk(operator: Operator, node_id: int) -> bool:
    """Does the last committed voter set hold ``node_id`` with its current disk?"""
    return operator.voters().holds(node_id, operator.directory_of(node_id))


def auto_join_wiped_voter(sim: Simulation, result: ScenarioResult) -> None:
    """Every node runs auto-join (KIP-853). A follower's disk is wiped: it
    comes back formatted afresh, with a new directory id, and waits while
    the voter set holds its id with the old directory; once the operator
    removes that one, auto-join adds the new disk, with no operator add.
    ``rejoin_ms``: from the removal's commit to the new disk's."""
    operator = Operator(sim)
    leader = _wait_for_leader(sim)
    _write_continuously(sim, sim.now_ms + 60_000)
    sim.run_for(500)
    victim = [node_id for node_id in sorted(sim.nodes) if node_id != leader][0]
    sim.wipe_disk(victim)
    sim.run_for(3 * sim.options.fetch_timeout_ms)
    if _holds_disk(operator, victim):
        raise InvariantViolation("auto-join", f"n{victim}'s new disk joined while its old one was still a voter")
    _require(operator.remove(victim), f"removing the wiped n{victim}'s old disk")
    removed_at = sim.now_ms
    if not sim.run_until_true(lambda: _holds_disk(operator, victim), CHANGE_TIMEOUT_MS):
        raise InvariantViolation("liveness", f"auto-join never added n{victim}'s new disk")
    result.extra["rejoin_ms"] = round(sim.now_ms - removed_at, 3)
    _finish(sim, result, operator)


auto_join_wiped_voter.options_factory = _auto_join_options(3, 0)  # type: ignore[attr-defined]


def auto_join_removed_stays_out(sim: Simulation, result: ScenarioResult) -> None:
    """Every node runs auto-join. A fourth node joins by itself, dies the
    moment its addition commits, and is removed by the operator while it is
    down; snapshots then cover both changes. It restarts, again after a
    leader change, and once more under a partition: auto-join never asks
    to add that disk again (the simulation fails the run at the first such
    request; Kafka 4.2 re-added it)."""
    operator = Operator(sim)
    _wait_for_leader(sim)
    _write_continuously(sim, sim.now_ms + 90_000)
    newcomer = max(sim.nodes)
    if not sim.run_until_true(lambda: _holds_disk(operator, newcomer), CHANGE_TIMEOUT_MS):
        raise InvariantViolation("liveness", f"auto-join never added n{newcomer}")
    sim.crash(newcomer)
    _require(operator.remove(newcomer), f"removing n{newcomer}")
    sim.run_for(10_000)
    sim.restart(newcomer)
    sim.run_for(3 * sim.options.fetch_timeout_ms)
    sim.crash(_wait_for_leader(sim))
    _wait_for_leader(sim)
    sim.crash(newcomer)
    sim.run_for(1000)
    for node_id in sorted(sim.nodes):
        sim.restart(node_id)
    sim.network.isolate(newcomer, sorted(sim.nodes))
    sim._say(f"PARTITION n{newcomer} alone")
    sim.run_for(5000)
    sim.heal()
    sim.run_for(5 * sim.options.fetch_timeout_ms)
    if newcomer in operator.voters():
        raise InvariantViolation("auto-join-re-add", f"n{newcomer} is a voter again after the operator removed it")
    result.extra["remembered"] = sim.nodes[newcomer].disk.auto_join_was_voter
    _finish(sim, result, operator)


auto_join_removed_stays_out.options_factory = _auto_join_options(3, 1, snapshot_every_records=20)  # type: ignore[attr-defined]


RECONFIG_SCENARIOS = {
    "reconfig-auto-join-wiped": auto_join_wiped_voter,
    "reconfig-auto-join-removed": auto_join_removed_stays_out,
    "reconfig-grow-shrink": grow_and_shrink,
    "reconfig-replace-voter": replace_voter,
    "reconfig-remove-leader": remove_leader,
    "reconfig-remove-partitioned": remove_partitioned_voter,
    "reconfig-add-then-dies": add_voter_that_dies,
    "reconfig-upgrade-voters": upgrade_static_voters,
}


def _sets_in_force(sim: Simulation, operator: Operator) -> list[VoterSet]:
    """The last committed voter set and every set a node holds, up or down
    (a crashed node's uncommitted set may be committed once it restarts
    and leads): each may be the one a future majority is counted in."""
    sets = [operator.voters()]
    for _node_id, node in sorted(sim.nodes.items()):
        if node.core is not None:
            held = node.core.voters
        else:
            held = _last_voters_on_disk(node.disk.log)
        if held is not None and held not in sets:
            sets.append(held)
    return sets


def _last_voters_on_disk(log: Any) -> VoterSet | None:
    for offset in range(log.end_offset - 1, log.start_offset - 1, -1):
        entry = log.entry(offset)
        if entry is not None and entry.kind is RecordKind.VOTERS:
            return VoterSet.decode(entry.data)
    return None


def damage_survivable(sim: Simulation) -> bool:
    """May the nemesis damage a voter's log now? Always without dynamic
    voters (the random scenario's own rule applies). With them, only while
    every voter set in force has three voters or more and none of them lost
    its disk: a damaged voter neither votes nor counts until a leader
    repairs it, so in a set of two, or beside a wiped voter, no majority is
    left to elect that leader (a stall the protocol cannot and should not
    avoid: Raft survives the loss of a minority of copies, not more)."""
    if not sim.options.reconfigure:
        return True
    operator = Operator(sim)
    for voters in _sets_in_force(sim, operator):
        if len(voters) < 3:
            return False
        if any(sim.nodes[node_id].disk.damaged_from is not None for node_id in voters.ids):
            return False
        if any(not voters.holds(node_id, operator.directory_of(node_id)) for node_id in voters.ids):
            return False
    return True


def membership_move(
    sim: Simulation,
    operator: Operator,
    roll: float,
    choose: Callable[[list[int]], int],
    coin: Callable[[], float],
    smallest: int = 1,
) -> None:
    """One move of the membership nemesis, chosen by ``roll`` in [0, 1):
    add a caught-up non-voter (below 0.4), remove a voter, the leader
    included, while more than ``smallest`` remain (below 0.75), or wipe a
    disk. ``choose`` picks a node from a list, ``coin`` draws in [0, 1)
    (whether a voter may be the one wiped): the sweep passes its seeded
    random source, the hypothesis test its draws. A voter whose disk was
    wiped is removed before anything else changes, and at most one voter
    of three or more is ever wiped at a time: more would lose acknowledged
    records legitimately (each wipe is a lost copy, and Raft survives only
    a minority of them)."""
    nodes = sorted(sim.nodes)
    voters = operator.voters()
    wiped = sorted(
        {
            node_id
            for voter_set in _sets_in_force(sim, operator)
            for node_id in voter_set.ids
            if not voter_set.holds(node_id, operator.directory_of(node_id))
        }
    )
    if wiped:
        # Remove a wiped voter of the current set. One that only an
        # older set in force (a stale node's log) still holds with its
        # old disk is not removed: the current set may have re-added it
        # with its new disk, and removing that healthy voter beside
        # another wiped one would leave no majority (sweep seeds 16276
        # and 17203). Nothing else changes until the sets agree.
        current_wiped = [node_id for node_id in wiped if node_id in voters.ids and not voters.holds(node_id, operator.directory_of(node_id))]
        if current_wiped:
            operator.try_remove(current_wiped[0], f"remove wiped n{current_wiped[0]}")
    elif roll < 0.4:
        candidates = [node_id for node_id in nodes if node_id not in voters and sim.nodes[node_id].core is not None]
        if candidates and len(voters) < 5:
            operator.try_add(choose(candidates))
    elif roll < 0.75:
        if len(voters) > smallest:
            operator.try_remove(choose(list(voters.ids)))
    else:
        # A wipe loses that disk's copy. Any node outside every set in
        # force may lose it; a voter only while every set in force has
        # three voters or more, none wiped (checked above) and none with
        # a damaged log (found at the next start, or under repair): one
        # lost copy per set at a time, which Raft survives.
        sets = _sets_in_force(sim, operator)
        # A node whose auto-join ask is on its way may be a voter before its
        # disk is gone: wiping it then would lose the only copy of a set of
        # two (sweep seed 336093: {n2} added n5, whose disk had been wiped
        # while its ask travelled, and no majority was left).
        members = sorted({node_id for voter_set in sets for node_id in voter_set.ids} | sim.auto_join_asks_in_flight())
        damaged = any(
            sim.nodes[node_id].disk.repair is not None or sim.nodes[node_id].disk.damaged_from is not None
            for node_id in members
        )
        victims = [node_id for node_id in nodes if node_id not in members]
        if min(len(voter_set) for voter_set in sets) >= 3 and not damaged and coin() < 0.5:
            victims = [node_id for node_id in members if node_id != sim.leader()]
        if victims:
            sim.wipe_disk(choose(victims))


def random_reconfiguration(sim: Simulation, rng: random.Random, until_ms: float) -> None:
    """The sweep's membership nemesis: every so often, one
    ``membership_move`` drawn from the seed; with ``migrate_voters``, the
    upgrade of the static set first (asked again until committed)."""
    operator = Operator(sim)
    # With log damage drawn too, sets stay at three voters or more (see
    # ``damage_survivable``).
    smallest = 3 if sim.options.disk_damage_rate else 1

    def step() -> None:
        if sim.now_ms >= until_ms:
            return
        if sim.options.migrate_voters and not operator.upgraded:
            # A static set is upgraded first (issue 17): until then the
            # leader refuses every change (VOTERS_STATIC), and a wiped
            # static voter would still count, its copy lost.
            operator.try_upgrade()
        else:
            membership_move(sim, operator, rng.random(), rng.choice, rng.random, smallest)
        sim.schedule(rng.uniform(300, 1500), step)

    sim.schedule(rng.uniform(0, 500), step)
