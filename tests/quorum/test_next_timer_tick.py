"""``QuorumNode.next_timer_tick`` and ``ReplicaHost.next_timer_tick``: the
tick before which ticking does nothing, what the trio runtime's ticker
sleeps until (issue 21). The one property: every tick fed before the
predicted one produces no output and changes no state. Checked here over
seeded random schedules of the scripted cluster (ticks, deliveries in any
order, losses, proposals, reads, crashes, restarts, failing disks), and by
the simulator on every tick of every run (``timer-prediction``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from harness import Cluster
from test_replica_host import Counter, elect, new_host

from quorum import QuorumNode, Role

Predictor = Callable[[QuorumNode], int]


def fingerprint(node: QuorumNode) -> tuple[Any, ...]:
    """What a tick could change: role and epoch, commit and log, the role's
    whole state (deadlines, fetcher, parked fetches, replica table)."""
    return (
        node.role,
        node.epoch,
        node.leader_id,
        node.high_watermark,
        node.log.end_offset,
        repr(node._state),
        node.counters,
    )


def first_miss(seed: int, predict: Predictor, steps: int = 2500) -> tuple[str | None, int]:
    """Drive a cluster of three voters and an observer through a seeded
    random schedule; before each tick, ask ``predict`` for the node's next
    acting tick. Returns the first tick that acted before its prediction
    (None if none did) and how many ticks were predicted quiet."""
    rng = random.Random(seed)
    cluster = Cluster(
        3,
        observers=(4,),
        seed=seed,
        check_quorum=rng.random() < 0.8,
        pre_vote=rng.random() < 0.8,
        retry_backoff_ms=rng.choice((20, 100)),
    )
    quiet = 0
    for _ in range(steps):
        live = cluster.live()
        roll = rng.random()
        if roll < 0.55:
            node_id = rng.choice(live)
            node = cluster.node(node_id)
            predicted = predict(node)
            if predicted <= node.current_tick:
                return f"n{node_id} predicted tick {predicted} at tick {node.current_tick}", quiet
            before = fingerprint(node)
            output = cluster.tick_once(node_id)
            if node.current_tick < predicted:
                quiet += 1
                if output or fingerprint(node) != before:
                    return f"n{node_id} acted at tick {node.current_tick}, predicted {predicted}", quiet
        elif roll < 0.80:
            if cluster.in_flight:
                message = cluster.in_flight[rng.randrange(len(cluster.in_flight))]
                cluster.deliver(where=lambda candidate, chosen=message: candidate is chosen)
        elif roll < 0.86:
            if cluster.in_flight:
                message = cluster.in_flight[rng.randrange(len(cluster.in_flight))]
                cluster.drop(where=lambda candidate, chosen=message: candidate is chosen)
        elif roll < 0.91:
            for node_id in cluster.leaders():
                cluster.propose(node_id, b"x%d" % rng.randrange(100))
        elif roll < 0.94:
            for node_id in cluster.leaders():
                cluster.handle(node_id, cluster.node(node_id).read_index(rng.randrange(1 << 20)))
        elif roll < 0.96:
            if len(live) > 2:
                cluster.crash(rng.choice(live))
        elif roll < 0.98:
            down = [node_id for node_id in cluster.replicas if not cluster.replicas[node_id].up]
            if down:
                cluster.restart(rng.choice(down))
        elif roll < 0.99:
            node_id = rng.choice(live)
            if cluster.replicas[node_id].disk_failure is None:
                cluster.fail_disk(node_id)
            else:
                cluster.repair_disk(node_id)
        else:
            a, b = rng.sample(sorted(cluster.replicas), 2)
            if rng.random() < 0.5:
                cluster.block(a, b)
            else:
                cluster.heal()
    return None, quiet


@pytest.mark.parametrize("seed", range(24))
def test_no_tick_before_the_predicted_one_acts(seed: int) -> None:
    miss, quiet = first_miss(seed, lambda node: node.next_timer_tick)
    assert miss is None, miss
    assert quiet > 100  # the schedule exercised the prediction


def test_a_prediction_one_tick_late_is_caught() -> None:
    """The check has teeth: predicting each timer one tick late is caught
    on the first seed (a timer fires at the tick the prediction names)."""
    miss, _quiet = first_miss(0, lambda node: node.next_timer_tick + 1)
    assert miss is not None and "acted at tick" in miss


def test_an_idle_leader_and_follower_are_quiet_between_long_polls() -> None:
    """What the runtime saves: in a settled cluster the leader's next
    acting tick is its parked fetches' expiry (a long poll, 50 ticks), the
    follower's its request deadline or fetch timeout, the observer's too."""
    cluster = Cluster(3, observers=(4,))
    cluster.elect(1)
    cluster.tick(4)
    cluster.deliver_all()
    leader, follower = cluster.node(1), cluster.node(2)
    assert leader.next_timer_tick - leader.current_tick == 50  # fetch_max_wait_ms / tick_ms
    assert follower.next_timer_tick - follower.current_tick >= 50
    assert cluster.node(4).next_timer_tick - cluster.node(4).current_tick >= 50


def test_a_lone_voter_without_check_quorum_sleeps_until_its_begin_epoch_resend() -> None:
    cluster = Cluster(1)
    cluster.elect(1)
    node = cluster.node(1)
    # Check quorum does not apply to a lone voter (KAFKA-16144): only the
    # BeginQuorumEpoch resend (half the fetch timeout, 100 ticks) and the
    # earliest expiry a fetch parked from now on could have.
    assert node.next_timer_tick - node.current_tick == 50


# --- the host and its leader application -------------------------------------


class Timed(Counter):
    """A leader application with one timer, at ``due_ms``."""

    def __init__(self) -> None:
        super().__init__()
        self.due_ms: int | None = None
        self.fired_at: list[int] = []

    def next_tick_due_ms(self) -> int | None:
        return self.due_ms

    def tick(self, now_ms: int) -> None:
        if self.due_ms is not None and now_ms >= self.due_ms:
            self.fired_at.append(now_ms)
            self.due_ms = None


def test_the_hosts_next_tick_includes_the_applications_timer_rounded_up_to_a_tick() -> None:
    application = Timed()
    host, disk, _machine = new_host(application=application)
    elect(host, disk)
    core_due = host.core.next_timer_tick
    assert host.next_timer_tick() == core_due  # no application timer
    application.due_ms = host.now_ms + 25  # 2.5 ticks of 10 ms: acts at the third
    expected = host.core.current_tick + 3
    assert expected < core_due
    assert host.next_timer_tick() == expected
    while host.core.current_tick < expected:
        assert not application.fired_at
        host.tick()
        disk.settle(host)
    assert application.fired_at == [expected * 10]


def test_an_application_without_a_prediction_is_ticked_every_tick() -> None:
    application = Counter()  # no next_tick_due_ms
    host, disk, _machine = new_host(application=application)
    elect(host, disk)
    assert host.application_active
    assert host.next_timer_tick() == host.core.current_tick + 1


def test_an_inactive_applications_timer_does_not_count() -> None:
    application = Timed()
    application.due_ms = 0
    host, _disk, _machine = new_host(application=application)
    assert not host.application_active and host.core.role is not Role.LEADER
    assert host.next_timer_tick() == host.core.next_timer_tick
