"""``Controller.next_tick_due_ms``: the earliest time at which ``tick`` may
act (a session expiry, a no-op), which the quorum host folds into the tick
the trio runtime's ticker sleeps until (issue 21). Conservative: ``tick``
never acts before it."""

from __future__ import annotations

import random

from _registration_helpers import Harness

from registration import BrokerState, ControllerConfig

BROKERS = (1, 2, 3)


def observe(harness: Harness) -> tuple[int, list[BrokerState]]:
    return harness.log_end, [harness.working.broker_state(broker) for broker in BROKERS]


def test_tick_never_acts_before_the_predicted_time_and_acts_at_it() -> None:
    """Seeded: brokers heartbeat at random times (some stop, are fenced,
    come back); the controller is ticked every ms. Before
    ``next_tick_due_ms`` a tick changes nothing; at it, one does (a fence
    or a no-op), so the prediction is also not needlessly early."""
    rng = random.Random(5)
    config = ControllerConfig(cluster_id="test-cluster", session_timeout_ms=300, heartbeat_interval_ms=50, no_op_interval_ms=700)
    harness = Harness(config=config)
    assert harness.controller.next_tick_due_ms() == 700  # the no-op only
    for broker in BROKERS:
        harness.start_broker(broker)
    quiet = acted = 0
    for _ in range(6000):
        harness.now_ms += 1
        if rng.random() < 0.01:
            broker = rng.choice(BROKERS)
            if harness.working.broker_state(broker) is BrokerState.ONLINE or rng.random() < 0.3:
                harness.heartbeat(broker)
        due = harness.controller.next_tick_due_ms()
        assert due is not None and due >= harness.now_ms
        before = observe(harness)
        harness.advance(0)  # tick at now_ms, propose what it queued
        changed = observe(harness) != before
        if harness.now_ms < due:
            quiet += 1
            assert not changed, (harness.now_ms, due)
        else:
            assert changed, (harness.now_ms, due)
            acted += 1
    assert quiet > 5000 and acted > 5


def test_an_inactive_controller_has_no_timer() -> None:
    harness = Harness()
    harness.start_broker(1)
    harness.controller.deactivate()
    assert harness.controller.next_tick_due_ms() is None
