"""Simulator scenarios with brokers and the controller (seeds 000, 001, 003).

Each runs on a ``BrokerSimulation`` (``_brokers.py``): three voters running
the controller, three brokers, metadata readers moving between brokers and
an admin client creating a topic every ``WRITE_PERIOD_MS``. Each brings the
cluster up (every broker Online, topic ``orders`` with 6 partitions led
across the brokers), runs its fault story while checking its promise as an
invariant, then heals and requires the cluster to settle: a controller,
every live broker Online in its own view and in the committed log, every
partition led by an Online broker, and a new topic committed.

- ``fast-bounce`` (seed 000, KIP-380): a broker asks for a controlled
  shutdown, is killed during it and restarts well within the session
  timeout. The controller registers the new incarnation with a new broker
  epoch; requests carrying the old epoch (a client's; a replayed
  want-shutdown heartbeat of the old process) are refused with
  STALE_BROKER_EPOCH; no partition is left without an Online leader.
- ``broker-cut-from-controller`` (seeds 001 and 003 case 2): a broker loses
  the controllers (both ways, or one way) but not its clients. It fences
  itself within the session timeout (+ one heartbeat interval), answers no
  client once no fresh fetch covers the moment, no broker answer is staler
  than the bound, and clients keep succeeding on the other brokers.
- ``controlled-shutdown`` (seed 001 "Stopping"): every partition the broker
  led has a new leader in the committed log before the broker goes Offline
  (its own view and the controller's).
- ``broker-stampede`` (issue 15 part 4): 1,000 brokers by default; the
  active controller is killed and every broker comes back to the new one
  at once, with voters that take time to serve what they read
  (``SimOptions.service_quorum_us``). The new leader must keep its
  leadership and serve each live voter's Fetches within the fetch timeout
  of each other (checked every 10 ms), writes must commit, and every broker
  must be heard unfenced by the new controller and be Online again.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from quorum import FetchRequest
from registration import BrokerHeartbeat, BrokerState

from ._brokers import BrokerSimOptions, BrokerSimulation, MetadataReader
from ._cluster import InvariantViolation, Simulation
from ._network import LinkFaults
from ._result import ScenarioResult

BROKER_LIVENESS_BOUND_MS = 30_000
READ_PERIOD_MS = 50
WRITE_PERIOD_MS = 400
READERS = 3
# fast-bounce: the broker stays down for a time drawn in
# [BOUNCE_DOWN_MIN_MS, session timeout x BOUNCE_DOWN_MAX_FRACTION].
BOUNCE_DOWN_MIN_MS = 20.0
BOUNCE_DOWN_MAX_FRACTION = 0.5


def broker_options(seed: int) -> BrokerSimOptions:
    """The options a broker scenario draws from its seed: three or five
    voters, three or four brokers, slower or lossy links (loss, duplicates,
    reordering), slower disks, snapshots (which brokers then load)."""
    rng = random.Random(seed ^ 0xB20CE5)
    return BrokerSimOptions(
        voters=rng.choice((3, 3, 5)),
        brokers=rng.choice((3, 3, 4)),
        faults=LinkFaults(
            delay_min_ms=0.5,
            delay_max_ms=rng.choice((2.0, 2.0, 5.0)),
            drop_rate=rng.choice((0.0, 0.0, 0.002)),
            duplicate_rate=rng.choice((0.0, 0.0, 0.01)),
            reorder_rate=rng.choice((0.0, 0.0, 0.02)),
        ),
        disk_latency_max_ms=rng.choice((1.0, 5.0)),
        snapshot_every_records=rng.choice((0, 0, 40)),
    )


def _sim(sim: Simulation) -> BrokerSimulation:
    assert isinstance(sim, BrokerSimulation), "broker scenarios run on a BrokerSimulation"
    return sim


# =========================================================================
# Shared pieces
# =========================================================================


class _Traffic:
    """Readers going round the brokers, optional pinned readers, and the
    admin client's topic creations, until ``stop()``."""

    def __init__(self, sim: BrokerSimulation) -> None:
        self.sim = sim
        self.running = True
        self.readers = [sim.new_reader(start=i) for i in range(READERS)]
        self.pinned: list[MetadataReader] = []
        for reader in self.readers:
            self._repeat(READ_PERIOD_MS, lambda reader=reader: sim.read_metadata(reader))
        self._topic_number = 0
        self._repeat(WRITE_PERIOD_MS, self._write)

    def pin(self, broker_id: int) -> MetadataReader:
        """A reader that asks only ``broker_id``."""
        reader = self.sim.new_reader((broker_id,), pinned=True)
        self.pinned.append(reader)
        self._repeat(READ_PERIOD_MS, lambda: self.sim.read_metadata(reader))
        return reader

    def _repeat(self, period_ms: float, action: Callable[[], None]) -> None:
        def fire() -> None:
            if self.running:
                action()
                self.sim.schedule(period_ms, fire)

        self.sim.schedule(0, fire)

    def _write(self) -> None:
        self._topic_number += 1
        self.sim.create_topic(f"t{self._topic_number}", 2, 2)

    def stop(self) -> None:
        self.running = False


def _create_topic_until_ok(sim: BrokerSimulation, name: str, partitions: int, replication_factor: int) -> None:
    deadline = sim.now_ms + BROKER_LIVENESS_BOUND_MS
    while sim.now_ms < deadline:
        outcome: list[str] = []
        sim.create_topic(name, partitions, replication_factor, on_done=outcome.append)
        sim.run_until_true(lambda: bool(outcome), sim.options.client_timeout_ms + 100)
        if outcome == ["ok"]:
            return
        sim.run_for(100)
    raise InvariantViolation("liveness", f"topic {name} not created within {BROKER_LIVENESS_BOUND_MS} ms")


def _bring_up(sim: BrokerSimulation, result: ScenarioResult) -> None:
    """A controller, every broker Online, topic ``orders`` everywhere."""
    brokers = sim.broker_options.broker_ids
    if not sim.run_until_true(lambda: sim.active_controller() is not None, 15_000):
        raise InvariantViolation("liveness", "no active controller within 15000 ms")
    if not sim.run_until_true(lambda: all(sim.broker_state(b) is BrokerState.ONLINE for b in brokers), 20_000):
        states = {f"b{b}": sim.broker_state(b).value for b in brokers}
        raise InvariantViolation("liveness", f"brokers not Online within 20000 ms: {states}")
    result.extra["startup_online_ms"] = round(sim.now_ms, 3)
    _create_topic_until_ok(sim, "orders", 6, 3)

    def everywhere() -> bool:
        return all(sim.nodes[b].machine.image.topic("orders") is not None for b in brokers)

    if not sim.run_until_true(everywhere, 5000):
        raise InvariantViolation("liveness", "topic orders did not reach every broker within 5000 ms")


def _pick_leading_broker(sim: BrokerSimulation) -> int:
    image = sim.truth.image
    leading = [b for b in sim.broker_options.broker_ids if image.leader_count(b) > 0]
    return sim._rng.choice(leading or list(sim.broker_options.broker_ids))


def _settle(sim: BrokerSimulation, result: ScenarioResult, expected: tuple[int, ...], label: str = "settle") -> None:
    """Heal the network, restart any voter that is down, and require the
    cluster to converge within the bound (a liveness check)."""
    sim.heal()
    for voter in sim.broker_options.voter_ids:
        sim.restart(voter)
    started = sim.now_ms

    def settled() -> bool:
        image = sim.truth.image
        return (
            sim.active_controller() is not None
            and all(sim.broker_state(b) is BrokerState.ONLINE for b in expected)
            and all(image.broker_state(b) is BrokerState.ONLINE for b in expected)
            and not sim.truth_leaderless()
        )

    if not sim.run_until_true(settled, BROKER_LIVENESS_BOUND_MS):
        own = {f"b{b}": sim.broker_state(b).value for b in expected}
        committed = {f"b{b}": sim.truth.image.broker_state(b).value for b in expected}
        leaderless = sim.truth_leaderless()[:5]
        raise InvariantViolation(
            "liveness",
            f"not settled {BROKER_LIVENESS_BOUND_MS} ms after healing: brokers {own}, committed {committed},"
            f" partitions without an Online leader {leaderless}",
        )
    _create_topic_until_ok(sim, f"{label}-check", 1, 1)
    result.extra[f"{label}_ms"] = round(sim.now_ms - started, 3)


def _first(values: list[float]) -> float | None:
    return values[0] if values else None


def _since(at: float | None, start: float) -> float | None:
    return None if at is None else round(at - start, 3)


def _finish(sim: BrokerSimulation, result: ScenarioResult) -> None:
    """Let the last client operations end, and report counts."""
    sim.run_for(sim.options.client_timeout_ms)
    result.extra["registrations_sent"] = sim.registrations_sent
    result.extra["broker_reads_ok"] = sum(
        1 for op in sim.history if op["type"] == "ok" and op.get("mode") == "broker"
    )
    result.extra["topics_created"] = sum(1 for op in sim.history if op["type"] == "ok" and op["f"] == "create_topic")


# =========================================================================
# fast-bounce (seed 000)
# =========================================================================


def fast_bounce(sim_: Simulation, result: ScenarioResult) -> None:
    """A broker in controlled shutdown is killed and restarts faster than
    the session timeout (seed 000, KIP-380)."""
    sim = _sim(sim_)
    options = sim.broker_options
    rng = sim._rng
    _bring_up(sim, result)
    victim = _pick_leading_broker(sim)
    traffic = _Traffic(sim)
    traffic.pin(victim)
    sim.run_for(1000)
    process = sim.broker_process(victim)
    assert process is not None and process.lifecycle.broker_epoch is not None
    old_epoch = process.lifecycle.broker_epoch
    result.extra["victim"] = victim
    result.extra["old_broker_epoch"] = old_epoch
    sim._say(f"SHUTDOWN b{victim} (controlled)")
    sim._perform(process, process.lifecycle.shutdown_requested(sim.now_ms_int()))
    sim.run_for(rng.uniform(0, 600))
    result.extra["broker_state_at_crash"] = sim.broker_state(victim).value
    result.extra["controller_state_at_crash"] = sim.truth.image.broker_state(victim).value
    old_heartbeat = process.lifecycle.heartbeat or BrokerHeartbeat(
        broker_id=victim, broker_epoch=old_epoch, want_shutdown=True
    )
    sim._say(f"NEMESIS kill -9 b{victim} (fast bounce)")
    sim.crash(victim)
    sim.run_for(rng.uniform(BOUNCE_DOWN_MIN_MS, options.session_timeout_ms * BOUNCE_DOWN_MAX_FRACTION))
    restarted_at = sim.now_ms
    sim.restart(victim)
    new_process = sim.processes[victim]

    if not sim.run_until_true(lambda: sim.highest_registered_epoch.get(victim, -1) > old_epoch, BROKER_LIVENESS_BOUND_MS):
        raise InvariantViolation("liveness", f"b{victim} not registered again within {BROKER_LIVENESS_BOUND_MS} ms")
    registered = next(
        change for change in sim.truth_changes
        if change.broker_id == victim and change.broker_epoch is not None and change.broker_epoch > old_epoch
    )
    result.extra["new_broker_epoch"] = registered.broker_epoch
    result.extra["bounce_reregistered_ms"] = round(registered.time_ms - restarted_at, 3)

    # The old process's last heartbeat (a want-shutdown one) arrives late.
    replayed_at = sim.now_ms
    replayed = sim.replay_heartbeat(victim, old_heartbeat)
    sim.run_for(100)
    refused = [
        seen for seen in sim.heartbeats_seen
        if seen.time_ms >= replayed_at and seen.broker_id == victim and seen.broker_epoch == old_epoch
    ]
    result.extra["old_heartbeat_refused"] = bool(replayed and refused and all(s.error.name == "STALE_BROKER_EPOCH" for s in refused))

    def online_again() -> bool:
        return sim.broker_state(victim) is BrokerState.ONLINE and sim.processes[victim] is new_process

    if not sim.run_until_true(online_again, BROKER_LIVENESS_BOUND_MS):
        raise InvariantViolation("liveness", f"b{victim}'s new incarnation not Online within {BROKER_LIVENESS_BOUND_MS} ms")
    online = next(
        record.time_ms for record in sim.broker_states
        if record.incarnation_id == new_process.incarnation_id and record.new is BrokerState.ONLINE
    )
    result.extra["bounce_online_ms"] = round(online - restarted_at, 3)
    sim.run_for(1000)
    traffic.stop()
    _settle(sim, result, options.broker_ids)
    registration = sim.truth.image.broker(victim)
    assert registration is not None
    if registration.incarnation_id != new_process.incarnation_id or registration.broker_epoch <= old_epoch:
        raise InvariantViolation(
            "bounce-missed",
            f"the committed log registers b{victim} as {registration.incarnation_id} e{registration.broker_epoch},"
            f" not the new incarnation {new_process.incarnation_id} above e{old_epoch}",
        )
    result.extra["stale_epoch_refusals"] = sum(
        1 for _, broker, asked in sim.stale_epoch_refusals if broker == victim and asked == old_epoch
    )
    _finish(sim, result)


fast_bounce.simulation_factory = BrokerSimulation  # type: ignore[attr-defined]
fast_bounce.options_factory = broker_options  # type: ignore[attr-defined]
fast_bounce.figures = (  # type: ignore[attr-defined]
    "bounce_reregistered_ms",
    "bounce_online_ms",
    "stale_epoch_refusals",
    "settle_ms",
)


# =========================================================================
# broker-cut-from-controller (seeds 001, 003 case 2)
# =========================================================================

CUT_MODES = ("both ways", "both ways", "controller to broker", "broker to controller")


def broker_cut_from_controller(sim_: Simulation, result: ScenarioResult) -> None:
    """A broker loses the controllers but not its clients."""
    sim = _sim(sim_)
    options = sim.broker_options
    rng = sim._rng
    _bring_up(sim, result)
    victim = rng.choice(options.broker_ids)
    # By the seed itself, so that a given seed keeps its kind of cut.
    mode = CUT_MODES[sim.seed % len(CUT_MODES)]
    result.extra["victim"] = victim
    result.extra["cut"] = mode
    traffic = _Traffic(sim)
    traffic.pin(victim)
    sim.run_for(rng.uniform(500, 1500))
    cut_at = sim.now_ms
    for voter in options.voter_ids:
        if mode in ("both ways", "broker to controller"):
            sim.network.block(victim, voter)
        if mode in ("both ways", "controller to broker"):
            sim.network.block(voter, victim)
    sim._say(f"PARTITION b{victim} | controllers ({mode}); clients still reach it")
    # A fresh fetch was sent before the cut, so none covers a moment past
    # cut + session timeout (+1: whole-ms clocks).
    serve_limit_ms = cut_at + options.session_timeout_ms + 1
    self_fenced: list[float] = []
    served_late: list[float] = []

    def on_answer(broker_id: int, response: Any) -> None:
        if broker_id == victim and sim.now_ms > serve_limit_ms:
            served_late.append(sim.now_ms)

    def on_state(record: Any) -> None:
        if record.broker_id == victim and record.old is BrokerState.ONLINE and not self_fenced:
            self_fenced.append(record.time_ms)

    sim.answer_watchers.append(on_answer)
    sim.state_watchers.append(on_state)
    # Long enough for a broker that kept serving to show stale answers (the
    # checks below run after it, so a broken run reports those too).
    sim.run_until(cut_at + options.session_timeout_ms + options.staleness_bound_ms + 3000)
    fence_bound_ms = options.session_timeout_ms + options.heartbeat_interval_ms
    result.extra["self_fence_ms"] = _since(_first(self_fenced), cut_at)
    result.extra["victim_answers_after_session"] = len(served_late)
    if not self_fenced or self_fenced[0] - cut_at > fence_bound_ms:
        raise InvariantViolation(
            "slow-self-fence",
            f"b{victim} did not fence itself within {fence_bound_ms} ms of the cut"
            f" ({'never' if not self_fenced else f'after {self_fenced[0] - cut_at:.0f} ms'})",
        )
    if served_late:
        raise InvariantViolation(
            "served-after-session",
            f"b{victim} answered {len(served_late)} client requests after no fetch could cover them,"
            f" the first {served_late[0] - cut_at:.0f} ms after it was cut from the controllers",
        )
    fenced = [
        change.time_ms for change in sim.truth_changes
        if change.broker_id == victim and change.time_ms >= cut_at and change.new is not BrokerState.ONLINE
    ]
    result.extra["controller_fence_ms"] = _since(_first(fenced), cut_at)
    elsewhere = [
        op for op in sim.history
        if op["type"] == "ok" and op.get("mode") == "broker" and op["node"] != victim and op["time"] > self_fenced[0] * 1e6
    ]
    result.extra["reads_ok_elsewhere_during_cut"] = len(elsewhere)
    if not elsewhere:
        raise InvariantViolation("liveness", "no client read succeeded on another broker during the cut")
    victim_refusals = [
        op for op in sim.history
        if op["type"] == "fail" and op.get("mode") == "broker" and op["node"] == victim and op["time"] > cut_at * 1e6
    ]
    result.extra["victim_refusals"] = len(victim_refusals)
    sim.answer_watchers.remove(on_answer)
    healed_at = sim.now_ms
    sim.heal()
    if not sim.run_until_true(lambda: sim.broker_state(victim) is BrokerState.ONLINE, BROKER_LIVENESS_BOUND_MS):
        raise InvariantViolation("liveness", f"b{victim} not Online again within {BROKER_LIVENESS_BOUND_MS} ms of healing")
    result.extra["rejoin_online_ms"] = round(sim.now_ms - healed_at, 3)
    sim.run_for(1000)
    traffic.stop()
    _settle(sim, result, options.broker_ids)
    _finish(sim, result)


broker_cut_from_controller.simulation_factory = BrokerSimulation  # type: ignore[attr-defined]
broker_cut_from_controller.options_factory = broker_options  # type: ignore[attr-defined]
broker_cut_from_controller.figures = (  # type: ignore[attr-defined]
    "self_fence_ms",
    "controller_fence_ms",
    "rejoin_online_ms",
    "reads_ok_elsewhere_during_cut",
    "settle_ms",
)


# =========================================================================
# controlled-shutdown (seed 001 "Stopping")
# =========================================================================


def controlled_shutdown(sim_: Simulation, result: ScenarioResult) -> None:
    """Leadership moves away before the broker goes Offline."""
    sim = _sim(sim_)
    options = sim.broker_options
    rng = sim._rng
    _bring_up(sim, result)
    victim = _pick_leading_broker(sim)
    traffic = _Traffic(sim)
    sim.run_for(rng.uniform(500, 1500))
    led = sorted(sim.truth.image.partitions_led_by(victim))
    result.extra["victim"] = victim
    result.extra["partitions_led"] = len(led)
    requested_at = sim.now_ms
    moved: list[float] = []
    controller_offline: list[float] = []
    broker_offline: list[float] = []

    def not_moved() -> list[str]:
        image = sim.truth.image
        problems = []
        for key in led:
            partition = image.partition(*key)
            if partition is not None and partition.leader in (victim, -1):
                topic = image.topic_by_id(key[0])
                problems.append(f"{topic.name if topic else key[0]}-{key[1]} leader {partition.leader}")
        return problems

    def on_record(offset: int) -> None:
        image = sim.truth.image
        if not moved and image.leader_count(victim) == 0 and not not_moved():
            moved.append(sim.now_ms)
        if not controller_offline and image.broker_state(victim) is BrokerState.OFFLINE:
            controller_offline.append(sim.now_ms)
            if image.leader_count(victim):
                raise InvariantViolation(
                    "offline-while-leading", f"committed@{offset}: b{victim} Offline while leading {image.leader_count(victim)} partitions"
                )

    def on_state(record: Any) -> None:
        if record.broker_id == victim and record.new is BrokerState.OFFLINE and not broker_offline:
            broker_offline.append(record.time_ms)
            problems = not_moved()
            if problems:
                raise InvariantViolation(
                    "leadership-not-moved",
                    f"b{victim} went Offline ({record.event}) with partitions it led not moved: {problems[:5]}",
                )

    sim.truth_watchers.append(on_record)
    sim.state_watchers.append(on_state)
    process = sim.broker_process(victim)
    assert process is not None
    sim._say(f"SHUTDOWN b{victim} (controlled), leading {len(led)} partitions")
    sim._perform(process, process.lifecycle.shutdown_requested(sim.now_ms_int()))
    bound_ms = options.shutdown_timeout_ms + 5000
    if not sim.run_until_true(lambda: victim in sim.exited, bound_ms):
        raise InvariantViolation("liveness", f"b{victim} did not finish its controlled shutdown within {bound_ms} ms")
    result.extra["stop_reason"] = sim.exited[victim]
    result.extra["leadership_moved_ms"] = _since(_first(moved), requested_at)
    result.extra["broker_offline_ms"] = _since(_first(broker_offline), requested_at)
    sim.run_until_true(lambda: bool(controller_offline), 5000)
    result.extra["controller_offline_ms"] = _since(_first(controller_offline), requested_at)
    if not controller_offline:
        raise InvariantViolation("liveness", f"the committed log never showed b{victim} Offline")
    sim.run_for(500)
    others = tuple(b for b in options.broker_ids if b != victim)
    _settle(sim, result, others, label="settle_without")
    sim.restart(victim)
    traffic.stop()
    _settle(sim, result, options.broker_ids)
    _finish(sim, result)


controlled_shutdown.simulation_factory = BrokerSimulation  # type: ignore[attr-defined]
controlled_shutdown.options_factory = broker_options  # type: ignore[attr-defined]
controlled_shutdown.figures = (  # type: ignore[attr-defined]
    "leadership_moved_ms",
    "broker_offline_ms",
    "controller_offline_ms",
    "partitions_led",
    "settle_ms",
)



# =========================================================================
# broker-stampede (issue 15 part 4)
# =========================================================================

#: A voter's service time per input in ``broker-stampede``: a broker's or
#: voter's Fetch costs the leader about 110 us end to end (20 % of a core
#: for 1,815 heartbeats/s, bench/heartbeat_bench.py); a controller request
#: (RegisterBroker: a proposal, its answer) is put at 500 us.
STAMPEDE_SERVICE_QUORUM_US = 110
STAMPEDE_SERVICE_CLIENT_US = 500
STAMPEDE_BROKERS = 1000
#: The cluster runs this long before the leader is killed.
STAMPEDE_STEADY_MS = 2000
#: After every broker is back, the leader must hold on this much longer.
STAMPEDE_HOLD_MS = 3000


def stampede_options(seed: int) -> BrokerSimOptions:
    """``broker-stampede``: three voters, 1,000 brokers, voters that take
    time to serve what they read (``SimOptions.service_quorum_us``; from
    the kill on). The seed draws nothing here: the network and disks are
    the defaults."""
    del seed
    return BrokerSimOptions(
        voters=3,
        brokers=STAMPEDE_BROKERS,
        service_quorum_us=STAMPEDE_SERVICE_QUORUM_US,
        service_client_us=STAMPEDE_SERVICE_CLIENT_US,
    )


def broker_stampede(sim_: Simulation, result: ScenarioResult) -> None:
    """Every broker registered and heartbeating; the controller leader is
    killed; all brokers find the new leader and heartbeat (or register
    again) at once. Checked: the new leader keeps its leadership (no later
    election), each live voter's Fetches are served at the new leader
    within the fetch timeout of each other, writes commit meanwhile, and
    every broker is back (heard by the new controller, Online in its own
    view and in the committed log)."""
    sim = _sim(sim_)
    options = sim.broker_options
    brokers = options.broker_ids
    voters = options.voter_ids
    # The voters serve at no cost until the kill: the cluster's start, a
    # stampede of its own (every broker registering at once), is not what
    # this scenario measures, and at 1,000 brokers it costs minutes of
    # simulation.
    service_us = (options.service_quorum_us, options.service_client_us)
    options.service_quorum_us = options.service_client_us = 0
    _bring_up(sim, result)
    traffic = _Traffic(sim)
    sim.run_for(STAMPEDE_STEADY_MS)
    old_leader = sim.active_controller()
    if old_leader is None:
        raise InvariantViolation("liveness", "no active controller before the kill")

    # What the new leader serves, from the kill on.
    served_fetches: dict[int, list[float]] = {}  # live voter -> times its Fetches were served
    voter_wait_max_us = [0]
    broker_fetches: list[float] = []
    heard_ok: set[int] = set()
    watch = {"leader": None}

    def on_served(node: Any, payload: Any, waited_us: int) -> None:
        if node.node_id != watch["leader"] or not isinstance(payload, FetchRequest):
            return
        if payload.src in voters:
            served_fetches.setdefault(payload.src, []).append(sim.now_ms)
            voter_wait_max_us[0] = max(voter_wait_max_us[0], waited_us)
        else:
            broker_fetches.append(sim.now_ms)

    sim.served_watchers.append(on_served)
    heartbeats_before = len(sim.heartbeats_seen)
    registrations_before = sim.registrations_sent
    killed_at = sim.now_ms
    sim._say(f"NEMESIS kill -9 n{old_leader} (the active controller) under {len(brokers)} brokers")
    sim.crash(old_leader)
    options.service_quorum_us, options.service_client_us = service_us
    if not sim.run_until_true(lambda: sim.leader() not in (None, old_leader), BROKER_LIVENESS_BOUND_MS, 1):
        raise InvariantViolation("liveness", f"no new leader within {BROKER_LIVENESS_BOUND_MS} ms of the kill")
    leader = sim.leader()
    assert leader is not None
    watch["leader"] = leader
    elected_at = sim.now_ms
    leader_node = sim.nodes[leader]
    assert leader_node.core is not None
    epoch = leader_node.core.epoch
    result.failover_ms = round(elected_at - killed_at, 3)
    roles_before = len(sim.role_log)
    topics_before = _topics_created(sim)
    live_voters = [v for v in voters if v not in (leader, old_leader)]
    watching = [True]

    def leadership_lost() -> InvariantViolation | None:
        later = [event for event in sim.role_log[roles_before:] if event.epoch > epoch]
        if not later and sim.leader() == leader:
            return None
        first = later[0] if later else None
        return InvariantViolation(
            "leadership-lost",
            f"n{leader} lost the leadership of epoch {epoch} during the stampede"
            + (f": n{first.node_id} {first.role.value} e{first.epoch} ({first.reason})" if first else ""),
        )

    def watchdog() -> None:
        # Checked as it happens (every 10 ms), so that a starved voter is
        # named as such, not as a liveness failure later.
        if not watching[0]:
            return
        lost = leadership_lost()
        if lost is not None:
            raise lost
        for voter in live_voters:
            last = (served_fetches.get(voter) or [elected_at])[-1]
            if sim.now_ms - last >= options.fetch_timeout_ms:
                raise InvariantViolation(
                    "voter-starved",
                    f"n{voter}'s Fetches went {sim.now_ms - last:.0f} ms without being served at n{leader}"
                    f" (fetch timeout {options.fetch_timeout_ms} ms)",
                )
        sim.schedule(10, watchdog)

    watchdog()

    def back() -> bool:
        seen = sim.heartbeats_seen
        while seen_index[0] < len(seen):
            beat = seen[seen_index[0]]
            seen_index[0] += 1
            if beat.error.name == "NONE" and beat.time_ms >= elected_at:
                heard_ok.add(beat.broker_id)
        image = sim.truth.image
        return len(heard_ok) == len(brokers) and all(
            sim.broker_state(b) is BrokerState.ONLINE and image.broker_state(b) is BrokerState.ONLINE for b in brokers
        )

    seen_index = [heartbeats_before]
    if not sim.run_until_true(back, BROKER_LIVENESS_BOUND_MS):
        missing = [b for b in brokers if b not in heard_ok][:5]
        raise InvariantViolation(
            "liveness", f"brokers not back {BROKER_LIVENESS_BOUND_MS} ms after the kill (not heard from: {missing} ...)"
        )
    back_at = sim.now_ms
    if sim.active_controller() != leader:
        raise InvariantViolation("leadership-lost", f"n{leader}'s controller is not the active one")
    sim.run_for(STAMPEDE_HOLD_MS)
    window_end = sim.now_ms

    watching[0] = False
    lost = leadership_lost()
    if lost is not None:
        raise lost
    gap_max_ms = 0.0
    for voter in live_voters:
        times = [elected_at, *served_fetches.get(voter, []), window_end]
        gap_max_ms = max(gap_max_ms, max(b - a for a, b in zip(times, times[1:])))
    result.extra.update(
        brokers=len(brokers),
        killed=old_leader,
        new_leader=leader,
        voter_fetch_gap_max_ms=round(gap_max_ms, 3),
        voter_fetch_wait_max_ms=round(voter_wait_max_us[0] / 1000, 3),
        leader_queue_peak=leader_node.service_queue_peak,
        broker_fetches_peak_100ms=_busiest(broker_fetches, 100.0),
        heartbeats_after_kill=len(sim.heartbeats_seen) - heartbeats_before,
        registrations_after_kill=sim.registrations_sent - registrations_before,
        all_back_ms=round(back_at - killed_at, 3),
        topics_created_during=_topics_created(sim) - topics_before,
    )
    if gap_max_ms >= options.fetch_timeout_ms:  # pragma: no cover - the watchdog raises first
        raise InvariantViolation("voter-starved", f"a voter's Fetches went {gap_max_ms:.0f} ms without being served")
    if result.extra["topics_created_during"] == 0:
        raise InvariantViolation("liveness", "no write committed during the stampede")
    traffic.stop()
    sim.served_watchers.remove(on_served)
    _settle(sim, result, brokers)
    _finish(sim, result)


def _busiest(times_ms: list[float], window_ms: float) -> int:
    """The most of ``times_ms`` (ascending) within any ``window_ms``."""
    most, first = 0, 0
    for last, time_ms in enumerate(times_ms):
        while time_ms - times_ms[first] >= window_ms:
            first += 1
        most = max(most, last - first + 1)
    return most


def _topics_created(sim: BrokerSimulation) -> int:
    return sum(1 for op in sim.history if op["type"] == "ok" and op["f"] == "create_topic")


broker_stampede.simulation_factory = BrokerSimulation  # type: ignore[attr-defined]
broker_stampede.options_factory = stampede_options  # type: ignore[attr-defined]
broker_stampede.figures = (  # type: ignore[attr-defined]
    "voter_fetch_gap_max_ms",
    "voter_fetch_wait_max_ms",
    "leader_queue_peak",
    "all_back_ms",
)


BROKER_SCENARIOS: dict[str, Callable[[Simulation, ScenarioResult], None]] = {
    "fast-bounce": fast_bounce,
    "broker-cut-from-controller": broker_cut_from_controller,
    "controlled-shutdown": controlled_shutdown,
    "broker-stampede": broker_stampede,
}
