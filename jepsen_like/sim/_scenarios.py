"""Named simulator scenarios.

Each scenario takes a seed and options, drives a ``Simulation`` through a
fault story, heals everything, checks liveness (a leader is elected and a
new write commits within a bound) and the end-of-run validations, and
returns a ``ScenarioResult``. A run never raises for a protocol failure:
violations are reported in the result, classed as ``crash`` (the core
raised), ``correctness`` (an invariant or the read contract broke) or
``liveness`` (no progress after healing).
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable

from quorum import QuorumInvariantError, Role, VoteRequest

from ._broker_scenarios import BROKER_SCENARIOS
from ._cluster import InvariantViolation, Simulation, SimOptions
from ._network import LinkFaults
from ._reads import find_stale_reads
from ._reconfig_scenarios import RECONFIG_SCENARIOS, damage_survivable, random_reconfiguration
from ._scenario_kit import (
    LIVENESS_BOUND_MS,
    _count_ops,
    _every,
    _heal_and_check_liveness,
    _last_data_committed,
    _wait_for_leader,
    _Workload,
)
from ._result import ScenarioResult


# =========================================================================
# Scenarios
# =========================================================================


def zombie_leader(sim: Simulation, result: ScenarioResult) -> None:
    """KAFKA-15489 (seed 002): the leader is cut off from the other voters.
    Reads go to it and to the new leader, in both modes."""
    workload = _Workload(sim)
    old_leader = _wait_for_leader(sim)
    for _ in range(3):
        workload.write(old_leader)
        sim.run_for(100)
    others = [n for n in sorted(sim.nodes) if n != old_leader]
    isolated_at = sim.now_ms
    sim.network.isolate(old_leader, others)
    sim._say(f"PARTITION n{old_leader} | {others}")
    result.extra["isolated_leader"] = old_leader

    def new_side_leader() -> int | None:
        leader = None
        for node_id in others:
            core = sim.nodes[node_id].core
            if core is not None and core.role is Role.LEADER:
                leader = node_id
        return leader

    duration_ms = 10_000
    until = isolated_at + duration_ms
    _every(sim, 250, until, lambda: workload.write(new_side_leader()))
    for mode in ("leader-local", "linearizable"):
        _every(sim, 200, until, lambda mode=mode: workload.read(old_leader, mode))
        _every(sim, 200, until, lambda mode=mode: workload.read(new_side_leader(), mode))
    first_new_leader: list[float] = []

    def watch() -> None:
        if not first_new_leader and new_side_leader() is not None and sim.nodes[new_side_leader()].core.leader_has_committed_own_epoch:  # type: ignore[union-attr]
            first_new_leader.append(sim.now_ms)

    _every(sim, 10, until, watch)
    sim.run_until(until + sim.options.client_timeout_ms)
    resigned = [t / 1000 for t, node, _ in sim.resignations if node == old_leader and t / 1000 >= isolated_at]
    result.leader_resign_ms = round(resigned[0] - isolated_at, 3) if resigned else None
    result.failover_ms = round(first_new_leader[0] - isolated_at, 3) if first_new_leader else None
    _heal_and_check_liveness(sim, workload)


def leader_crash(sim: Simulation, result: ScenarioResult) -> None:
    """kill -9 of the leader; a client keeps writing to whoever leads.
    ``failover_ms``: crash -> first write committed by the next leader."""
    workload = _Workload(sim)
    leader = _wait_for_leader(sim)
    for _ in range(3):
        workload.write(leader)
        sim.run_for(50)
    sim.run_for(sim._rng.uniform(0, 500))
    old_epoch = sim.nodes[leader].core.epoch  # type: ignore[union-attr]
    crashed_at = sim.now_ms
    sim.crash(leader)
    committed_at: list[float] = []

    def probe() -> None:
        if committed_at:
            return
        current = sim.stable_leader()
        if current is not None and current != leader:
            workload.write(current)
        for event in sim.history:
            if event["type"] == "ok" and event["f"] == "write" and event["time"] > crashed_at * 1e6:
                committed_at.append(event["time"] / 1e6)
                return

    until = crashed_at + 15_000
    _every(sim, 20, until, probe)
    sim.run_until_true(lambda: bool(committed_at), 15_000)
    if not committed_at:
        raise InvariantViolation("liveness", "no write committed after the leader crashed")
    # The time the client saw the acknowledgement: one client hop after the
    # commit, and up to one 20 ms probe period after the new leader was ready.
    result.failover_ms = round(committed_at[0] - crashed_at, 3)
    result.extra["old_epoch"] = old_epoch
    sim.run_for(200)
    _heal_and_check_liveness(sim, workload)


def partition_heal_disruption(sim: Simulation, result: ScenarioResult) -> None:
    """A follower is isolated for many election timeouts, then healed. With
    pre-vote the healthy leader keeps its leadership; without, the healed
    node's higher epoch deposes it."""
    workload = _Workload(sim)
    leader = _wait_for_leader(sim)
    epoch = sim.nodes[leader].core.epoch  # type: ignore[union-attr]
    follower = [n for n in sorted(sim.nodes) if n != leader][0]
    sim.network.isolate(follower, [n for n in sorted(sim.nodes) if n != follower])
    sim._say(f"PARTITION n{follower} alone")
    isolated_for_ms = 10 * sim.options.election_timeout_ms
    _every(sim, 300, sim.now_ms + isolated_for_ms, lambda: workload.write(sim.leader()))
    sim.run_for(isolated_for_ms)
    result.extra["isolated_epoch"] = sim.nodes[follower].core.epoch  # type: ignore[union-attr]
    sim.heal()
    sim.run_for(3 * sim.options.fetch_timeout_ms)
    current = sim.leader()
    current_epoch = sim.nodes[current].core.epoch if current is not None else None  # type: ignore[union-attr]
    result.extra["leader_kept"] = current == leader and current_epoch == epoch
    result.extra["epoch_before"] = epoch
    result.extra["epoch_after"] = current_epoch
    _heal_and_check_liveness(sim, workload)


def minority_partition(sim: Simulation, result: ScenarioResult) -> None:
    """A follower is cut off while writes continue; after healing it
    catches up."""
    workload = _Workload(sim, keys=("x", "y"))
    leader = _wait_for_leader(sim)
    follower = [n for n in sorted(sim.nodes) if n != leader][-1]
    sim.network.isolate(follower, [n for n in sorted(sim.nodes) if n != follower])
    sim._say(f"PARTITION n{follower} alone")
    until = sim.now_ms + 5000
    _every(sim, 100, until, lambda: workload.write(sim.leader(), sim._rng.choice(workload.keys)))
    _every(sim, 150, until, lambda: workload.read(sim.leader(), "linearizable", sim._rng.choice(workload.keys)))
    sim.run_until(until + 500)
    sim.heal()
    target = sim.nodes[leader].core.high_watermark  # type: ignore[union-attr]
    caught_up = sim.run_until_true(lambda: sim.nodes[follower].core.high_watermark >= target, 5000)  # type: ignore[union-attr]
    result.extra["follower_caught_up"] = caught_up
    if not caught_up:
        raise InvariantViolation("liveness", f"n{follower} did not catch up to {target} after healing")
    _heal_and_check_liveness(sim, workload)


def flapping_network(sim: Simulation, result: ScenarioResult) -> None:
    """Links fail and recover every few hundred ms, with loss, duplication
    and reordering, while clients write and read."""
    sim.network.faults = LinkFaults(
        delay_min_ms=0.5, delay_max_ms=3.0, drop_rate=0.05, duplicate_rate=0.02, reorder_rate=0.05
    )
    workload = _Workload(sim, keys=("x", "y", "z"))
    _wait_for_leader(sim, timeout_ms=30_000)
    until = sim.now_ms + 10_000
    nodes = sorted(sim.nodes)

    def flap() -> None:
        sim.network.heal()
        choice = sim._rng.random()
        if choice < 0.4:
            victim = sim._rng.choice(nodes)
            sim.network.isolate(victim, nodes)
            sim._say(f"FLAP isolate n{victim}")
        elif choice < 0.7:
            src, dst = sim._rng.sample(nodes, 2)
            sim.network.block(src, dst)
            sim._say(f"FLAP cut n{src}->n{dst}")
        else:
            sim._say("FLAP all links up")
        sim.schedule(sim._rng.uniform(100, 600), flap if sim.now_ms < until else (lambda: None))

    sim.schedule(0, flap)
    _every(sim, 80, until, lambda: workload.write(sim.leader(), sim._rng.choice(workload.keys)))
    _every(sim, 120, until, lambda: workload.read(sim.leader(), "linearizable", sim._rng.choice(workload.keys)))
    _every(sim, 120, until, lambda: workload.read(sim.leader(), "leader-local", sim._rng.choice(workload.keys)))
    sim.run_until(until + sim.options.client_timeout_ms)
    _heal_and_check_liveness(sim, workload)


# The vote flood: how long, how often, and the longest wait between two
# committed writes that still counts as "writes go on" (a client writes
# every 100 ms; an election would cost at least one election timeout).
VOTE_FLOOD_MS = 5000
VOTE_FLOOD_PERIOD_MS = 2.0
VOTE_FLOOD_WRITE_GAP_MAX_MS = 500


def vote_flood(sim: Simulation, result: ScenarioResult) -> None:
    """Issue 15: a rogue process outside the cluster floods every voter
    with forged Votes and pre-votes, each claiming another voter as its
    sender, an up-to-date log and an epoch higher than the last, while a
    client keeps writing. The leader lease (Raft thesis §4.2.3) must keep
    the leader and every epoch where they were, and the writes committing.
    Figures: ``epoch_rise`` (largest epoch after the flood minus before),
    ``write_gap_max_ms`` (longest wait between committed writes during the
    flood), ``forged`` (messages injected)."""
    workload = _Workload(sim)
    leader = _wait_for_leader(sim)
    voters = sorted(sim.nodes)
    rogue = max(voters) + 1000  # not a voter, not an observer
    epoch_before = max(node.core.epoch for node in sim.nodes.values() if node.core is not None)
    roles_before = len(sim.role_log)
    started = sim.now_ms
    until = started + VOTE_FLOOD_MS
    forged = {"count": 0, "epoch": epoch_before}
    sim._say(f"ROGUE n{rogue} floods every voter with Votes and pre-votes of rising epochs")

    def flood() -> None:
        for dst in voters:
            for pre_vote in (False, True):
                forged["count"] += 1
                forged["epoch"] += 1
                others = [voter for voter in voters if voter != dst]
                claimed = others[forged["count"] % len(others)]
                sim.inject(
                    VoteRequest(
                        src=claimed,
                        dst=dst,
                        epoch=forged["epoch"],
                        last_epoch=forged["epoch"],
                        end_offset=1_000_000,
                        pre_vote=pre_vote,
                    ),
                    sender=rogue,
                )

    _every(sim, VOTE_FLOOD_PERIOD_MS, until, flood)
    _every(sim, 100, until, lambda: workload.write(sim.leader()))
    sim.run_until(until + 200)

    epoch_after = max(node.core.epoch for node in sim.nodes.values() if node.core is not None)
    changes = sim.role_log[roles_before:]
    acked = sorted(
        op["time"] / 1e6 for op in sim.history if op["f"] == "write" and op["type"] == "ok" and op["time"] / 1e6 >= started
    )
    gaps = [later - earlier for earlier, later in zip([started, *acked], [*acked, until])]
    result.extra.update(
        {
            "forged": forged["count"],
            "forged_epoch_max": forged["epoch"],
            "epoch_rise": epoch_after - epoch_before,
            "leader_kept": sim.leader() == leader and not changes,
            "writes_ok": len([t for t in acked if t <= until]),
            "write_gap_max_ms": round(max(gaps), 3),
            "votes_ignored_leader_alive": sum(
                node.core.counters["votes_ignored_leader_alive"] for node in sim.nodes.values() if node.core is not None
            ),
        }
    )
    if changes or epoch_after != epoch_before:
        first = changes[0] if changes else None
        detail = f"n{first.node_id} {first.role.value} e{first.epoch} ({first.reason})" if first else "no role change"
        raise InvariantViolation(
            "liveness", f"the flood moved the cluster: epoch {epoch_before} -> {epoch_after}; first change {detail}"
        )
    if max(gaps) > VOTE_FLOOD_WRITE_GAP_MAX_MS:
        raise InvariantViolation("liveness", f"no write committed for {max(gaps):.0f} ms during the flood")
    _heal_and_check_liveness(sim, workload)


vote_flood.figures = ("epoch_rise", "write_gap_max_ms", "forged")  # type: ignore[attr-defined]
# Three or five voters, drawn from the seed.
vote_flood.options_factory = lambda seed: SimOptions(voters=random.Random(seed ^ 0xF100D).choice((3, 5)))  # type: ignore[attr-defined]


def random_faults(sim: Simulation, result: ScenarioResult) -> None:
    """Everything at random from the seed: crashes and restarts (never more
    than a minority down), partitions of every shape, lossy links,
    snapshots, and clients reading in both modes on every node; with
    ``reconfigure``, voters added, removed and wiped too
    (``random_reconfiguration``)."""
    rng = sim._rng
    nodes = sorted(sim.nodes)
    workload = _Workload(sim, keys=("a", "b", "c"))
    _wait_for_leader(sim, timeout_ms=30_000)
    until = sim.now_ms + rng.uniform(5000, 12_000)
    minority = (len(nodes) - 1) // 2

    def fault() -> None:
        if sim.now_ms >= until:
            return
        roll = rng.random()
        down = [n for n in nodes if sim.nodes[n].core is None]
        # A voter repairing a damaged log does not vote: it counts as down.
        repairing = [n for n in nodes if n not in down and sim.nodes[n].disk.repair is not None]
        # A disk stays under repair while its node is down, too: a second
        # damaged log beside it would leave no majority to elect the leader
        # that repairs either (seed 222840: n2, damaged, crashed again
        # before its repair; then n3's log was damaged, and n1 alone stood).
        under_repair = any(
            sim.nodes[n].disk.repair is not None or sim.nodes[n].disk.damaged_from is not None for n in nodes
        )
        if roll < 0.2 and len(down) + len(repairing) < minority:
            victim = rng.choice([n for n in nodes if n not in down])
            sim.crash(victim)
            damage_rate = sim.options.disk_damage_rate
            if damage_rate and not under_repair and damage_survivable(sim) and rng.random() < damage_rate:
                sim.damage_disk(victim)
            # One copy of the election state rolled back: always found and
            # undone at the next start, so any node may take it.
            rollback_rate = sim.options.election_rollback_rate
            if rollback_rate and rng.random() < rollback_rate:
                sim.roll_back_election_state(victim)
        elif roll < 0.35 and down:
            sim.restart(rng.choice(down))
        elif roll < 0.5:
            sim.network.heal()
            sim.network.isolate(rng.choice(nodes), nodes)
            sim._say("NEMESIS isolate one")
        elif roll < 0.6:
            sim.network.heal()
            shuffled = nodes[:]
            rng.shuffle(shuffled)
            cut = rng.randrange(1, len(nodes))
            sim.network.split(shuffled[:cut], shuffled[cut:])
            sim._say(f"NEMESIS split {shuffled[:cut]} | {shuffled[cut:]}")
        elif roll < 0.7:
            src, dst = rng.sample(nodes, 2)
            sim.network.block(src, dst)
            sim._say(f"NEMESIS one-way n{src}->n{dst}")
        elif roll < 0.8:
            sim.network.faults = LinkFaults(
                delay_min_ms=0.5,
                delay_max_ms=rng.uniform(1, 10),
                drop_rate=rng.uniform(0, 0.1),
                duplicate_rate=rng.uniform(0, 0.05),
                reorder_rate=rng.uniform(0, 0.1),
            )
            sim._say("NEMESIS lossy links")
        else:
            sim.network.heal()
            sim._say("NEMESIS links healed")
        sim.schedule(rng.uniform(200, 1500), fault)

    sim.schedule(rng.uniform(0, 500), fault)
    if sim.options.reconfigure:
        random_reconfiguration(sim, rng, until)
    keys = workload.keys

    def client_round() -> None:
        node = rng.choice(nodes)
        roll = rng.random()
        if roll < 0.5:
            workload.write(sim.leader() if rng.random() < 0.8 else node, rng.choice(keys))
        elif roll < 0.75:
            workload.read(node, "linearizable", rng.choice(keys))
        else:
            workload.read(node, "leader-local", rng.choice(keys))

    _every(sim, 40, until, client_round)
    sim.run_until(until + sim.options.client_timeout_ms)
    _heal_and_check_liveness(sim, workload)


def disk_full(sim: Simulation, result: ScenarioResult) -> None:
    """One voter's disk fails every write (ENOSPC or EIO, from the seed)
    for a few seconds, then takes writes again (issue 14, part 3). The
    victim is the leader on even seeds (it must resign at once) and a
    follower on odd ones (it must stop acknowledging). The healthy majority
    keeps committing meanwhile; the victim stays up, resumes by itself and
    catches up. Figures: ``commits_while_failed``, ``catch_up_ms``."""
    rng = sim._rng
    workload = _Workload(sim)
    leader = _wait_for_leader(sim)
    for _ in range(3):
        workload.write(leader)
        sim.run_for(50)
    followers = [n for n in sorted(sim.nodes) if n != leader]
    victim = leader if sim.seed % 2 == 0 else rng.choice(followers)
    error = rng.choice(("ENOSPC", "EIO"))
    duration_ms = rng.uniform(2000, 5000)
    failed_at = sim.now_ms
    sim.fail_disk(victim, error, duration_ms)
    recovered_at = failed_at + duration_ms

    def client_round() -> None:
        workload.write(sim.stable_leader())

    _every(sim, 50, recovered_at, client_round)
    committed_before = len(sim.committed)
    sim.run_until(recovered_at)
    victim_node = sim.nodes[victim]
    if victim_node.core is None:
        raise InvariantViolation("crash", f"n{victim} went down when its disk failed")
    if sim.leader() == victim:
        raise InvariantViolation("liveness", f"n{victim} still leads with a failing disk")
    result.extra["commits_while_failed"] = len(sim.committed) - committed_before
    if result.extra["commits_while_failed"] == 0:
        raise InvariantViolation("liveness", "the healthy majority committed nothing while one disk failed")
    result.extra["failed_writes"] = victim_node.disk.failed_writes
    result.extra["torn_writes"] = victim_node.disk.torn_writes

    def caught_up() -> bool:
        current = sim.stable_leader()
        core = victim_node.core
        if current is None or core is None or core.disk_failure is not None:
            return False
        leader_core = sim.nodes[current].core
        assert leader_core is not None
        return victim_node.disk.log.end_offset >= leader_core.high_watermark
    if not sim.run_until_true(caught_up, 15_000):
        raise InvariantViolation("liveness", f"n{victim} did not resume and catch up after its disk recovered")
    result.extra["catch_up_ms"] = round(sim.now_ms - recovered_at, 3)
    _heal_and_check_liveness(sim, workload)


def damaged_log(sim: Simulation, result: ScenarioResult) -> None:
    """Issue 14: three voters; one (T) goes down and writes go on with the
    other two; then both crash, and one of them (D) restarts with a bit
    flipped in the middle of what was written while T was down, beside T.
    The node holding the tail (L) is down, so the cluster must wait: D
    neither votes nor stands while it repairs. When L returns, a leader is
    elected without D's help, commits again, and D repairs its log.
    ``extra``: ``waited_ms`` (without a leader, as it must), ``repair_ms``
    (L's restart -> D repaired), ``damaged_offset``."""
    workload = _Workload(sim)
    leader = _wait_for_leader(sim)
    for _ in range(3):
        workload.write(leader)
        sim.run_for(50)
    damaged, down = [n for n in sorted(sim.nodes) if n != leader][:2]
    sim.crash(down)
    tail_from = sim.nodes[down].disk.log.end_offset
    for _ in range(20):
        workload.write(leader)
        sim.run_for(sim._rng.uniform(20, 60))
    sim.run_for(sim.options.client_timeout_ms)
    sim.crash(leader)
    sim.crash(damaged)
    tail_end = sim.nodes[damaged].disk.log.end_offset
    offset = (tail_from + tail_end) // 2
    if not sim.damage_disk(damaged, offset):
        raise InvariantViolation("scenario", f"could not damage n{damaged} at offset {offset} (log [{tail_from}, {tail_end}))")
    result.extra["damaged_offset"] = offset
    sim.restart(down)
    sim.restart(damaged)
    waited_from = sim.now_ms
    sim.run_for(sim._rng.uniform(5000, 10_000))
    if sim.leader() is not None:
        raise InvariantViolation("damaged-log", f"n{sim.leader()} was elected while n{leader}, holding the tail, was down")
    if sim.nodes[damaged].disk.repair is None:
        raise InvariantViolation("damaged-log", f"n{damaged} finished its repair without a leader")
    result.extra["waited_ms"] = round(sim.now_ms - waited_from, 3)
    sim.restart(leader)
    returned = sim.now_ms
    if not sim.run_until_true(lambda: sim.nodes[damaged].disk.repair is None, LIVENESS_BOUND_MS):
        raise InvariantViolation("liveness", f"n{damaged} did not repair its log within {LIVENESS_BOUND_MS} ms")
    result.extra["repair_ms"] = round(sim.now_ms - returned, 3)
    _heal_and_check_liveness(sim, workload)


def election_rollback(sim: Simulation, result: ScenarioResult) -> None:
    """Issue 14: one voter (F) votes in a few elections; then, while it is
    down, one copy of its election state is rolled back to the oldest copy
    kept (the primary on even seeds, the witness on odd ones). Its restart
    must take the newer copy, so it remembers every vote it cast, and the
    cluster goes on. ``extra``: ``generations_back`` (how far the copy went
    back), ``copy``."""
    workload = _Workload(sim)
    leader = _wait_for_leader(sim)
    follower = [n for n in sorted(sim.nodes) if n != leader][0]
    for _ in range(3):
        # The leader crashes; F helps elect the next one (two of three up).
        current = _wait_for_leader(sim)
        if current == follower:
            sim.crash(current)
            sim.restart(current)
            current = _wait_for_leader(sim)
        workload.write(current)
        sim.run_for(100)
        sim.crash(current)
        _wait_for_leader(sim)
        sim.restart(current)
        sim.run_for(200)
    disk = sim.nodes[follower].disk
    sim.crash(follower)
    before = (disk.election_generation, disk.election_state)
    copy = "primary" if sim.seed % 2 == 0 else "witness"
    if not sim.roll_back_election_state(follower, copy, 8):
        raise InvariantViolation("scenario", f"n{follower} wrote no older election state to roll back to")
    rolled = disk.election_generation if copy == "primary" else disk.election_witness.generation
    result.extra["copy"] = copy
    result.extra["generations_back"] = before[0] - rolled
    sim.restart(follower)
    if sim.nodes[follower].core is None:
        raise InvariantViolation("liveness", f"n{follower} refused to start after one copy was rolled back")
    if (disk.election_generation, disk.election_state) != before:
        raise InvariantViolation(
            "election-rollback",
            f"n{follower} restarted with {disk.election_state} (generation {disk.election_generation}) instead of "
            f"{before[1]} (generation {before[0]})",
        )
    for _ in range(5):
        workload.write(sim.stable_leader())
        sim.run_for(100)
    _heal_and_check_liveness(sim, workload)


SCENARIOS: dict[str, Callable[[Simulation, ScenarioResult], None]] = {
    "zombie-leader": zombie_leader,
    "leader-crash": leader_crash,
    "partition-heal-disruption": partition_heal_disruption,
    "minority-partition": minority_partition,
    "flapping-network": flapping_network,
    "vote-flood": vote_flood,
    "random": random_faults,
    "disk-full": disk_full,
    "damaged-log": damaged_log,
    "election-rollback": election_rollback,
    **RECONFIG_SCENARIOS,
    **BROKER_SCENARIOS,
}


def random_options(seed: int) -> SimOptions:
    """Options drawn from the seed, for sweeps."""
    rng = random.Random(seed ^ 0x5EED)
    voters = rng.choice((3, 3, 3, 5))
    snapshot_every_records = rng.choice((0, 0, 20))
    disk_latency_max_ms = rng.choice((1.0, 5.0))
    # Drawn last, so the draws above keep their values.
    disk_fault_rate = rng.choice((0.0, 0.0, 0.0, 0.002))
    # Drawn after it, for the same reason.
    disk_damage_rate = rng.choice((0.0, 0.0, 0.0, 0.5))
    # Dynamic voters and the membership nemesis (KIP-853), after those: a
    # run that draws no reconfiguration replays as it did before.
    reconfigure = rng.random() < 0.3
    # After those too: election-state rollbacks at crashes.
    election_rollback_rate = rng.choice((0.0, 0.0, 0.0, 0.5))
    # After those: KIP-853 auto-join on every node, with the membership nemesis.
    auto_join = rng.random() < 0.5
    # After those: some reconfiguration seeds start with static voters that
    # the membership nemesis upgrades first (issue 17; ``migrate_voters``).
    migrate = reconfigure and rng.random() < 0.3
    return SimOptions(
        voters=voters,
        snapshot_every_records=snapshot_every_records,
        disk_latency_max_ms=disk_latency_max_ms,
        disk_fault_rate=disk_fault_rate,
        disk_damage_rate=disk_damage_rate,
        election_rollback_rate=election_rollback_rate,
        dynamic_voters=reconfigure and not migrate,
        migrate_voters=migrate,
        spare_nodes=2 if reconfigure else 0,
        reconfigure=reconfigure,
        auto_join=reconfigure and auto_join,
    )


def default_options(name: str, seed: int) -> SimOptions:
    """The options scenario ``name`` runs with when none are given: drawn
    from the seed for ``random`` and for scenarios that carry an
    ``options_factory``; the defaults otherwise."""
    factory = getattr(SCENARIOS.get(name), "options_factory", None)
    if factory is not None:
        return factory(seed)
    return random_options(seed) if name == "random" else SimOptions()


def run_scenario(
    name: str,
    seed: int,
    options: SimOptions | None = None,
    *,
    trace: Callable[[str], None] | None = None,
    full_trace: bool = False,
) -> ScenarioResult:
    """Run one named scenario with one seed. Never raises for a protocol
    failure: it is reported in the result."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}")
    if options is None:
        options = default_options(name, seed)
    # A scenario may run on a Simulation of its own (``simulation_factory``).
    factory = getattr(SCENARIOS[name], "simulation_factory", Simulation)
    sim = factory(seed, options, trace=trace, full_trace=full_trace)
    result = ScenarioResult(scenario=name, seed=seed, options=sim.options.describe())
    try:
        SCENARIOS[name](sim, result)
        sim.check_final()
    except InvariantViolation as violation:
        result.valid = False
        result.failure_class = "liveness" if violation.kind == "liveness" else "correctness"
        result.violation = str(violation)
    except QuorumInvariantError as error:
        result.valid = False
        result.failure_class = "correctness"
        result.violation = f"core invariant: {error}"
    except Exception as error:  # noqa: BLE001 - any other exception is a crash to report
        result.valid = False
        result.failure_class = "crash"
        result.violation = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
    bound_ms = options.check_quorum_factor * options.fetch_timeout_ms
    stale = find_stale_reads(sim.history, bound_ms, getattr(sim.options, "staleness_bound_ms", None))
    result.stale_reads = len(stale)
    result.stale_examples = stale[:5]
    if stale and result.valid:
        result.valid = False
        result.failure_class = "correctness"
        result.violation = f"{len(stale)} stale reads"
    result.ops = _count_ops(sim.history)
    result.virtual_ms = sim.now_ms
    result.events = sim.events_processed
    result.extra.setdefault("history_events", len(sim.history))
    result.simulation = sim
    return result
