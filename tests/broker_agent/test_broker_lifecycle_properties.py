"""Hypothesis over random input sequences to the broker lifecycle. After
every input, at the time it happened:

- Online ⇒ a fetch that proved the image caught up was sent within the
  session timeout (seed 001: never Online without a fresh fetch);
- ``may_serve`` ⇒ Online (never answering when not Online);
- every state change is an entry of the table;
- broker epochs only grow (KIP-380), and the heartbeat carries the current one;
- at most one registration in flight, and only while Offline;
- once shutdown is asked for, never Online again; once stopped, nothing moves.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_agent import TRANSITIONS, BrokerLifecycle, LifecycleConfig, Register, StateChanged, Stop
from registration import BrokerState, ErrorCode, HeartbeatReply, RegisterBrokerResponse

CONFIG = LifecycleConfig(broker_id=3, session_timeout_ms=2000, heartbeat_interval_ms=500, shutdown_timeout_ms=4000)

likely_true = st.sampled_from([True, True, True, False])
replies = st.builds(
    HeartbeatReply,
    error=st.sampled_from(
        [ErrorCode.NONE] * 6 + [ErrorCode.NOT_LEADER, ErrorCode.STALE_BROKER_EPOCH, ErrorCode.INVALID_REQUEST]
    ),
    is_caught_up=likely_true,
    is_fenced=st.sampled_from([False, False, True]),
    should_shutdown=st.sampled_from([False, False, False, True]),
)
KINDS = ("tick", "registered", "registration_error", "registration_failed", "fetch", "image", "shutdown")
# Weights per state, so that every transition is reached often; every input
# stays possible in every state.
WEIGHTS = {
    BrokerState.OFFLINE: (4, 8, 2, 1, 2, 1, 1),
    BrokerState.FENCED: (3, 1, 1, 1, 10, 2, 1),
    BrokerState.ONLINE: (4, 1, 1, 1, 10, 2, 1),
    BrokerState.STOPPING: (3, 1, 1, 1, 8, 2, 1),
}


def draw_kind(data, state):
    choices = [kind for kind, weight in zip(KINDS, WEIGHTS[state]) for _ in range(weight)]
    return data.draw(st.sampled_from(choices))


@settings(max_examples=max(300, settings.default.max_examples))
@given(st.data())
def test_random_input_sequences_keep_the_lifecycle_safe(data):
    lifecycle = BrokerLifecycle(CONFIG)
    now = 0
    epochs: list[int] = []
    next_epoch = 10
    in_flight = False
    shutdown_asked = False
    stopped = False
    for _ in range(data.draw(st.integers(1, 60))):
        kind = draw_kind(data, lifecycle.state)
        now += data.draw(st.one_of(st.integers(0, 200), st.integers(0, 3000)))
        was_stopped = lifecycle.stopped
        state_before = lifecycle.state
        if kind == "tick":
            actions = lifecycle.tick(now)
        elif kind == "registered":
            next_epoch += data.draw(st.integers(1, 50))
            actions = lifecycle.registration_completed(now, RegisterBrokerResponse(broker_epoch=next_epoch))
            in_flight = False
        elif kind == "registration_error":
            error = data.draw(
                st.sampled_from(
                    [ErrorCode.NOT_LEADER, ErrorCode.DUPLICATE_BROKER_REGISTRATION] * 3 + [ErrorCode.INCONSISTENT_CLUSTER_ID]
                )
            )
            actions = lifecycle.registration_completed(now, RegisterBrokerResponse(error=error))
            in_flight = False
        elif kind == "registration_failed":
            actions = lifecycle.registration_failed(now, "lost")
            in_flight = False
        elif kind == "fetch":
            age = data.draw(st.one_of(st.integers(0, 100), st.integers(0, 3000)))
            epoch = lifecycle.broker_epoch
            current = data.draw(likely_true) and epoch is not None
            actions = lifecycle.fetch_completed(
                now,
                sent_ms=max(0, now - age),
                heartbeat_epoch=epoch if current else (epoch or 0) + 1,
                reply=data.draw(replies),
                metadata_caught_up=data.draw(likely_true),
            )
        elif kind == "image":
            epoch = lifecycle.broker_epoch
            offset = (epoch or 0) + data.draw(st.integers(0, 30))
            which = data.draw(st.sampled_from(["ours"] * 4 + ["none", "other"]))
            registered = {"ours": epoch, "none": None, "other": (epoch or 0) + 1000}[which]
            actions = lifecycle.image_updated(now, image_offset=offset, registered_epoch=registered)
        else:
            actions = lifecycle.shutdown_requested(now)
            shutdown_asked = True

        # -- invariants ------------------------------------------------------
        for action in actions:
            if isinstance(action, StateChanged):
                assert TRANSITIONS[(action.old, action.event)] is action.new
                if action.event.value == "registered":
                    epochs.append(action.broker_epoch)
            if isinstance(action, Register):
                assert not in_flight, "two registrations in flight"
                assert lifecycle.state is BrokerState.OFFLINE
                in_flight = True
            if isinstance(action, Stop):
                stopped = True
        assert epochs == sorted(set(epochs)), "broker epochs must strictly grow"
        state = lifecycle.state
        if state is BrokerState.ONLINE:
            sent = lifecycle.fresh_fetch_sent_ms
            assert sent is not None and now - sent <= CONFIG.session_timeout_ms
            assert not shutdown_asked
        if lifecycle.may_serve(now):
            assert state is BrokerState.ONLINE
        heartbeat = lifecycle.heartbeat
        if state is BrokerState.OFFLINE:
            assert heartbeat is None and lifecycle.broker_epoch is None
        else:
            assert heartbeat is not None and heartbeat.broker_epoch == lifecycle.broker_epoch == epochs[-1]
            assert heartbeat.want_shutdown == (state is BrokerState.STOPPING)
        if was_stopped:
            assert actions == [] and state is state_before is BrokerState.OFFLINE
        assert lifecycle.stopped == stopped
