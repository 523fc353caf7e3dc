"""The broker-lifecycle table (seed 001's states): it is the controller's
rulebook, every entry is reachable through the controller, and the docs'
diagram is generated from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from _registration_helpers import Harness

from registration import (
    TRANSITIONS,
    BrokerEvent,
    BrokerState,
    InvalidTransitionError,
    UnregisterBrokerRequest,
    next_state,
    state_of,
)
from registration.diagram import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "registration.md"


def test_the_docs_embed_exactly_the_generated_diagram():
    """docs/registration.md holds the output of `python -m
    registration.diagram` verbatim, so diagram and code cannot drift."""
    assert render() in DOC.read_text(encoding="utf-8")


def test_a_missing_transition_raises():
    with pytest.raises(InvalidTransitionError):
        next_state(BrokerState.OFFLINE, BrokerEvent.UNFENCE)
    with pytest.raises(InvalidTransitionError):
        next_state(BrokerState.STOPPING, BrokerEvent.FENCE)


def test_flags_map_to_the_seed_states():
    """Seed 001 / KIP-500: Offline = not registered or shut down; Fenced;
    Online; Stopping = controlled shutdown in progress."""
    assert state_of(False, False, False) is BrokerState.OFFLINE
    assert state_of(True, True, True) is BrokerState.OFFLINE
    assert state_of(True, True, False) is BrokerState.FENCED
    assert state_of(True, False, True) is BrokerState.STOPPING
    assert state_of(True, False, False) is BrokerState.ONLINE


def _drive(harness: Harness, event: BrokerEvent) -> None:
    """Make the controller decide ``event`` about broker 1 (broker 2 stays
    online and caught up throughout)."""
    if event is BrokerEvent.REGISTER:
        harness.now_ms += harness.config.heartbeat_interval_ms
        harness.keep_alive(2)
        harness.register(1)
    elif event is BrokerEvent.UNFENCE:
        harness.heartbeat(1)
    elif event is BrokerEvent.FENCE:
        harness.heartbeat(1, want_fence=True)
    elif event is BrokerEvent.SESSION_EXPIRED:
        for _ in range(5):
            harness.advance(2_000)
            harness.keep_alive(2)
    elif event is BrokerEvent.SHUTDOWN_REQUESTED:
        harness.heartbeat(1, want_shutdown=True)
    elif event is BrokerEvent.SHUTDOWN_COMPLETED:
        harness.keep_alive(2)
        harness.heartbeat(1, want_shutdown=True)
    elif event is BrokerEvent.UNREGISTER:
        harness.request(UnregisterBrokerRequest(broker_id=1))


# How to bring broker 1 into each state from scratch.
_REACH = {
    BrokerState.OFFLINE: [BrokerEvent.REGISTER, BrokerEvent.SHUTDOWN_REQUESTED],
    BrokerState.FENCED: [BrokerEvent.REGISTER],
    BrokerState.ONLINE: [BrokerEvent.REGISTER, BrokerEvent.UNFENCE],
    BrokerState.STOPPING: [BrokerEvent.REGISTER, BrokerEvent.UNFENCE, BrokerEvent.SHUTDOWN_REQUESTED],
}


@pytest.mark.parametrize(("state", "event"), list(TRANSITIONS), ids=lambda x: getattr(x, "name", x))
def test_every_transition_is_what_the_controller_does(state, event):
    """Each table entry, driven through the controller, lands the broker in
    the state the table names (in the committed image, on every node)."""
    harness = Harness()
    harness.start_broker(2)
    harness.create_topic("t", 4, 1)
    for step in _REACH[state]:
        _drive(harness, step)
    assert harness.image.broker_state(1) is state

    _drive(harness, event)

    assert harness.image.broker_state(1) is TRANSITIONS[(state, event)]
    harness.check_invariants()
