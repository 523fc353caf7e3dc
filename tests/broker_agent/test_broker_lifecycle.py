"""The broker lifecycle table, one test per transition (each citing the
seed or KIP it comes from), then the rules around it: registration retries,
stale replies, freshness, want_fence / want_shutdown."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from broker_agent import (
    TRANSITIONS,
    BrokerLifecycle,
    InvalidTransitionError,
    LifecycleConfig,
    LifecycleEvent,
    Register,
    SetHeartbeat,
    StateChanged,
    Stop,
    next_state,
)
from registration import BrokerState, ErrorCode, HeartbeatReply, RegisterBrokerResponse

SESSION_MS = 2000
CONFIG = LifecycleConfig(broker_id=7, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500, shutdown_timeout_ms=5000)
EPOCH = 40
E = LifecycleEvent
S = BrokerState

UNFENCED = HeartbeatReply(is_caught_up=True, is_fenced=False)
FENCED_REPLY = HeartbeatReply(is_caught_up=True, is_fenced=True)


def changes(actions):
    return [(a.old, a.event, a.new) for a in actions if isinstance(a, StateChanged)]


def fetch(lifecycle, now, reply, *, sent=None, caught_up=True, epoch=None):
    return lifecycle.fetch_completed(
        now,
        sent_ms=now - 5 if sent is None else sent,
        heartbeat_epoch=lifecycle.broker_epoch if epoch is None else epoch,
        reply=reply,
        metadata_caught_up=caught_up,
    )


def fenced(now=0, epoch=EPOCH) -> BrokerLifecycle:
    lifecycle = BrokerLifecycle(CONFIG)
    assert any(isinstance(a, Register) for a in lifecycle.tick(now))
    lifecycle.registration_completed(now, RegisterBrokerResponse(broker_epoch=epoch))
    assert lifecycle.state is S.FENCED
    return lifecycle


def online(now=100, epoch=EPOCH) -> BrokerLifecycle:
    lifecycle = fenced(0, epoch)
    fetch(lifecycle, now, UNFENCED)
    assert lifecycle.state is S.ONLINE
    return lifecycle


def stopping(now=200) -> BrokerLifecycle:
    lifecycle = online()
    lifecycle.shutdown_requested(now)
    assert lifecycle.state is S.STOPPING
    return lifecycle


# ---------------------------------------------------------------------------
# One test per transition
# ---------------------------------------------------------------------------


def test_offline_registered_fenced():
    """Seed 001 "Register Flow": the controller records the broker Fenced
    and answers with its epoch (KIP-631 BrokerRegistration)."""
    lifecycle = BrokerLifecycle(CONFIG)
    assert lifecycle.tick(0) == [Register(1)]
    actions = lifecycle.registration_completed(3, RegisterBrokerResponse(broker_epoch=EPOCH))
    assert changes(actions) == [(S.OFFLINE, E.REGISTERED, S.FENCED)]
    assert lifecycle.broker_epoch == EPOCH
    heartbeat = lifecycle.heartbeat
    assert (heartbeat.broker_id, heartbeat.broker_epoch, heartbeat.want_fence, heartbeat.want_shutdown) == (7, EPOCH, False, False)


def test_fenced_caught_up_and_unfenced_online():
    """Seed 001: "Once the Controller determines the broker as having caught
    up ... the new broker learns that it has caught up"; KIP-631 RUNNING
    once IsFenced is false."""
    lifecycle = fenced()
    assert changes(fetch(lifecycle, 50, UNFENCED)) == [(S.FENCED, E.CAUGHT_UP_AND_UNFENCED, S.ONLINE)]


def test_online_controller_fenced_fenced():
    """KIP-631: the controller fenced the broker (session expired there)."""
    lifecycle = online()
    assert changes(fetch(lifecycle, 300, FENCED_REPLY)) == [(S.ONLINE, E.CONTROLLER_FENCED, S.FENCED)]
    assert lifecycle.heartbeat.want_fence is False  # it wants back in


def test_online_session_lost_fenced():
    """Seed 001: "It will re-enter the fenced state if it can't contact the
    active controller"; seed 003 case 2: cut from the controller, the broker
    must not keep serving an old view."""
    lifecycle = online(now=100)  # the fresh fetch was sent at 95
    assert lifecycle.tick(95 + SESSION_MS) == []
    actions = lifecycle.tick(95 + SESSION_MS + 1)
    assert changes(actions) == [(S.ONLINE, E.SESSION_LOST, S.FENCED)]
    # Ask the controller to fence us too, so our leaderships move even if
    # only its answers are lost (a one-way cut).
    assert lifecycle.heartbeat.want_fence is True


def test_online_shutdown_requested_stopping():
    """Seed 001 "Stopping": SIGINT → migrate leaders off; KIP-631
    WantShutDown."""
    lifecycle = online()
    assert changes(lifecycle.shutdown_requested(200)) == [(S.ONLINE, E.SHUTDOWN_REQUESTED, S.STOPPING)]
    assert lifecycle.heartbeat.want_shutdown is True


def test_fenced_shutdown_requested_stopping():
    """KIP-631: a Fenced broker asking to shut down is let go at once by the
    controller; telling it marks the registration cleanly Offline."""
    lifecycle = fenced()
    assert changes(lifecycle.shutdown_requested(10)) == [(S.FENCED, E.SHUTDOWN_REQUESTED, S.STOPPING)]


def test_stopping_should_shutdown_offline():
    """Seed 001: "the active controller will ask the broker to finally go
    offline, by returning a special result code in the MetadataFetchResponse"."""
    lifecycle = stopping()
    actions = fetch(lifecycle, 300, HeartbeatReply(is_caught_up=True, is_fenced=False, should_shutdown=True))
    assert changes(actions) == [(S.STOPPING, E.SHOULD_SHUTDOWN, S.OFFLINE)]
    assert actions[-1] == Stop("the controller says shut down")
    assert lifecycle.stopped and lifecycle.heartbeat is None


def test_stopping_shutdown_timeout_offline():
    """Seed 001: "the broker will shut down if the leaders can't be moved in
    a predetermined amount of time"."""
    lifecycle = stopping(now=200)
    assert lifecycle.next_timer_ms() == 200 + CONFIG.shutdown_timeout_ms
    assert lifecycle.tick(200 + CONFIG.shutdown_timeout_ms - 1) == []
    actions = lifecycle.tick(200 + CONFIG.shutdown_timeout_ms)
    assert changes(actions) == [(S.STOPPING, E.SHUTDOWN_TIMEOUT, S.OFFLINE)]
    assert isinstance(actions[-1], Stop) and lifecycle.stopped


@pytest.mark.parametrize("make", [fenced, online])
def test_registration_gone_offline_then_register_again(make):
    """KIP-631 ``resendBrokerRegistrationUnlessZkMode``: the broker registers
    again when its registration is gone from the metadata."""
    lifecycle = make()
    state = lifecycle.state
    assert lifecycle.image_updated(400, image_offset=EPOCH, registered_epoch=None) == []  # not applied yet
    actions = lifecycle.image_updated(400, image_offset=EPOCH + 5, registered_epoch=None)
    assert changes(actions) == [(state, E.REGISTRATION_GONE, S.OFFLINE)]
    assert lifecycle.broker_epoch is None and lifecycle.heartbeat is None
    assert lifecycle.tick(400) == [Register(2)]  # at once
    lifecycle.registration_completed(410, RegisterBrokerResponse(broker_epoch=EPOCH + 9))
    assert lifecycle.state is S.FENCED and lifecycle.broker_epoch == EPOCH + 9


@pytest.mark.parametrize("make", [fenced, online])
def test_epoch_refused_offline_then_register_again(make):
    """KIP-380: a heartbeat with a stale epoch gets STALE_BROKER_EPOCH; the
    broker's registration is no longer the current one."""
    lifecycle = make()
    state = lifecycle.state
    actions = fetch(lifecycle, 400, HeartbeatReply(error=ErrorCode.STALE_BROKER_EPOCH))
    assert changes(actions) == [(state, E.EPOCH_REFUSED, S.OFFLINE)]
    assert lifecycle.tick(400) == [Register(2)]


def test_stopping_registration_gone_offline_and_stop():
    lifecycle = stopping()
    actions = lifecycle.image_updated(300, image_offset=EPOCH + 5, registered_epoch=None)
    assert changes(actions) == [(S.STOPPING, E.REGISTRATION_GONE, S.OFFLINE)]
    assert isinstance(actions[-1], Stop) and lifecycle.tick(300) == []  # no re-registration


def test_stopping_epoch_refused_offline_and_stop():
    lifecycle = stopping()
    actions = fetch(lifecycle, 300, HeartbeatReply(error=ErrorCode.STALE_BROKER_EPOCH))
    assert changes(actions) == [(S.STOPPING, E.EPOCH_REFUSED, S.OFFLINE)]
    assert isinstance(actions[-1], Stop)


def test_offline_shutdown_requested_stops_at_once():
    """Kafka: not RUNNING when shutdown is requested → no controlled shutdown."""
    lifecycle = BrokerLifecycle(CONFIG)
    actions = lifecycle.shutdown_requested(0)
    assert changes(actions) == [(S.OFFLINE, E.SHUTDOWN_REQUESTED, S.OFFLINE)]
    assert isinstance(actions[-1], Stop) and lifecycle.tick(10) == []


def test_every_transition_of_the_table_is_tested_above():
    tested = {
        (S.OFFLINE, E.REGISTERED),
        (S.FENCED, E.CAUGHT_UP_AND_UNFENCED),
        (S.ONLINE, E.CONTROLLER_FENCED),
        (S.ONLINE, E.SESSION_LOST),
        (S.ONLINE, E.SHUTDOWN_REQUESTED),
        (S.FENCED, E.SHUTDOWN_REQUESTED),
        (S.STOPPING, E.SHOULD_SHUTDOWN),
        (S.STOPPING, E.SHUTDOWN_TIMEOUT),
        (S.FENCED, E.REGISTRATION_GONE),
        (S.ONLINE, E.REGISTRATION_GONE),
        (S.FENCED, E.EPOCH_REFUSED),
        (S.ONLINE, E.EPOCH_REFUSED),
        (S.STOPPING, E.REGISTRATION_GONE),
        (S.STOPPING, E.EPOCH_REFUSED),
        (S.OFFLINE, E.SHUTDOWN_REQUESTED),
    }
    assert tested == set(TRANSITIONS)


def test_a_missing_transition_raises():
    with pytest.raises(InvalidTransitionError, match="no transition from Offline on 'session lost'"):
        next_state(S.OFFLINE, E.SESSION_LOST)


# ---------------------------------------------------------------------------
# The rules around the table
# ---------------------------------------------------------------------------


def test_registration_retries_back_off_exponentially_capped_at_the_heartbeat_interval():
    lifecycle = BrokerLifecycle(CONFIG)
    now, waits = 0, []
    assert lifecycle.tick(now) == [Register(1)]
    for attempt in range(2, 7):
        lifecycle.registration_completed(now, RegisterBrokerResponse(error=ErrorCode.DUPLICATE_BROKER_REGISTRATION))
        due = lifecycle.next_timer_ms()
        waits.append(due - now)
        assert lifecycle.tick(due - 1) == []
        now = due
        assert lifecycle.tick(now) == [Register(attempt)]
    assert waits == [100, 200, 400, 500, 500]


def registration_retry_waits(lifecycle, error=ErrorCode.NOT_LEADER, attempts=6):
    """The waits between refused registrations, each answered at once."""
    now, waits = 0, []
    assert lifecycle.tick(now) == [Register(1)]
    for attempt in range(2, attempts + 2):
        lifecycle.registration_completed(now, RegisterBrokerResponse(error=error))
        due = lifecycle.next_timer_ms()
        waits.append(due - now)
        assert lifecycle.tick(due - 1) == []
        now = due
        assert lifecycle.tick(now) == [Register(attempt)]
    return waits


def test_jittered_registration_retries_wait_between_half_the_backoff_and_all_of_it():
    waits = registration_retry_waits(BrokerLifecycle(CONFIG, random.Random(7)))
    for wait, backoff in zip(waits, [100, 200, 400, 500, 500, 500]):
        assert backoff // 2 <= wait <= backoff
    assert waits != [100, 200, 400, 500, 500, 500]
    # The generator is the only source: the same seed, the same waits.
    assert registration_retry_waits(BrokerLifecycle(CONFIG, random.Random(7))) == waits


def test_brokers_refused_together_do_not_retry_together():
    # A controller restart answers 1,000 registrations NOT_LEADER at the
    # same instant (review finding: without jitter all 1,000 retried in the
    # same millisecond, and again in each later round).
    def first_retry_ms(rng):
        lifecycle = BrokerLifecycle(CONFIG, rng)
        lifecycle.tick(0)
        lifecycle.registration_completed(0, RegisterBrokerResponse(error=ErrorCode.NOT_LEADER))
        return lifecycle.next_timer_ms()

    assert {first_retry_ms(None) for _ in range(1_000)} == {100}
    retries = Counter(first_retry_ms(random.Random(f"incarnation-{broker}")) for broker in range(1_000))
    assert set(retries) <= set(range(50, 101))
    assert len(retries) >= 45 and max(retries.values()) <= 60


def test_one_registration_in_flight_at_a_time_and_failures_are_retried():
    lifecycle = BrokerLifecycle(CONFIG)
    assert lifecycle.tick(0) == [Register(1)]
    assert lifecycle.tick(10_000) == []  # still in flight
    lifecycle.registration_failed(10_000, "timed out")
    assert lifecycle.tick(10_100) == [Register(2)]


def test_a_refusal_for_good_stops_the_broker():
    lifecycle = BrokerLifecycle(CONFIG)
    lifecycle.tick(0)
    actions = lifecycle.registration_completed(
        1, RegisterBrokerResponse(error=ErrorCode.INCONSISTENT_CLUSTER_ID, message="wrong cluster")
    )
    assert actions == [Stop("registration refused: INCONSISTENT_CLUSTER_ID wrong cluster", error=True)]
    assert lifecycle.stopped and lifecycle.tick(10_000) == []


def test_answers_nobody_waits_for_are_ignored():
    lifecycle = BrokerLifecycle(CONFIG)
    assert lifecycle.registration_completed(0, RegisterBrokerResponse(broker_epoch=3)) == []
    assert lifecycle.state is S.OFFLINE
    # A reply to an earlier incarnation's heartbeat changes nothing (KIP-380).
    lifecycle = online(epoch=EPOCH)
    assert fetch(lifecycle, 300, HeartbeatReply(error=ErrorCode.STALE_BROKER_EPOCH), epoch=EPOCH - 1) == []
    assert fetch(lifecycle, 300, FENCED_REPLY, epoch=EPOCH - 1) == []
    assert lifecycle.state is S.ONLINE


def test_epochs_only_grow():
    """KIP-380: a registration answered with an epoch not above the last one
    is not adopted; the broker asks again."""
    lifecycle = online(epoch=EPOCH)
    fetch(lifecycle, 300, HeartbeatReply(error=ErrorCode.STALE_BROKER_EPOCH))
    lifecycle.tick(300)
    assert lifecycle.registration_completed(301, RegisterBrokerResponse(broker_epoch=EPOCH)) == []
    assert lifecycle.state is S.OFFLINE
    assert lifecycle.tick(401) == [Register(3)]


def test_unfencing_needs_a_fresh_caught_up_fetch_and_the_controllers_word():
    lifecycle = fenced()
    assert fetch(lifecycle, 50, UNFENCED, caught_up=False) == []  # image not proven caught up
    assert fetch(lifecycle, 60, HeartbeatReply(is_caught_up=False, is_fenced=False)) == []
    assert fetch(lifecycle, 70, FENCED_REPLY) == []
    # Caught up long ago: an answer to a fetch sent before a pause proves nothing now.
    assert fetch(lifecycle, 10_000, UNFENCED, sent=10_000 - SESSION_MS - 1) == []
    assert lifecycle.state is S.FENCED
    assert changes(fetch(lifecycle, 10_010, UNFENCED)) == [(S.FENCED, E.CAUGHT_UP_AND_UNFENCED, S.ONLINE)]


def test_may_serve_is_checked_against_the_clock_at_the_moment_of_the_answer():
    """A broker resumed after SIGSTOP refuses before any timer fires."""
    lifecycle = online(now=100)
    assert lifecycle.may_serve(95 + SESSION_MS)
    assert not lifecycle.may_serve(95 + SESSION_MS + 1)
    assert lifecycle.state is S.ONLINE  # until the next input moves it


def test_a_late_answer_to_an_old_fetch_does_not_keep_the_broker_online():
    lifecycle = online(now=100)
    actions = fetch(lifecycle, 5000, UNFENCED, sent=150)
    assert changes(actions) == [(S.ONLINE, E.SESSION_LOST, S.FENCED)]


def test_not_leader_replies_still_count_for_freshness():
    """The data came from the leader; only its controller is not active yet."""
    lifecycle = online(now=100)
    fetch(lifecycle, 1000, HeartbeatReply(error=ErrorCode.NOT_LEADER))
    assert lifecycle.fresh_fetch_sent_ms == 995
    assert lifecycle.may_serve(995 + SESSION_MS)


def test_want_fence_clears_once_fresh_again():
    lifecycle = online(now=100)
    lifecycle.tick(100 + SESSION_MS)
    assert lifecycle.heartbeat.want_fence is True
    actions = fetch(lifecycle, 3000, FENCED_REPLY)
    assert SetHeartbeat(lifecycle.heartbeat) in actions and lifecycle.heartbeat.want_fence is False


def test_a_second_shutdown_request_changes_nothing():
    lifecycle = stopping(now=200)
    assert lifecycle.shutdown_requested(300) == []
    assert lifecycle.next_timer_ms() == 200 + CONFIG.shutdown_timeout_ms


def test_time_must_not_go_backwards():
    lifecycle = online(now=100)
    with pytest.raises(ValueError, match="time went backwards"):
        lifecycle.tick(50)
    with pytest.raises(ValueError, match="cannot complete"):
        fetch(lifecycle, 200, UNFENCED, sent=300)


@pytest.mark.parametrize(
    "settings",
    [
        {"broker_id": -1},
        {"broker_id": True},
        {"session_timeout_ms": 0},
        {"session_timeout_ms": 500, "heartbeat_interval_ms": 500},
        {"shutdown_timeout_ms": 1.5},
    ],
)
def test_bad_config_is_refused_with_a_clear_error(settings):
    values = {"broker_id": 1, **settings}
    with pytest.raises(ValueError):
        LifecycleConfig(**values)
