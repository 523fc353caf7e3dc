"""``HeartbeatChannel``: which fetch answers prove the image caught up
(seed 001: every fetch is a heartbeat; the broker may serve only within the
session timeout of such a proof), against a scripted observer view."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_agent import BrokerLifecycle, HeartbeatChannel, LifecycleConfig, StateChanged
from quorum import Role
from registration import BrokerState, ErrorCode, HeartbeatReply, RegisterBrokerResponse

UNFENCED = HeartbeatReply(is_caught_up=True, is_fenced=False).to_extension()


@dataclass
class Log:
    end_offset: int = 50


@dataclass
class FakeObserver:
    role: Role = Role.FOLLOWER
    leader_id: int | None = 1
    epoch: int = 3
    current_tick: int = 100
    high_watermark: int = 50
    answered_high_watermark: int | None = None
    log: Log = field(default_factory=Log)


def registered() -> tuple[HeartbeatChannel, FakeObserver]:
    lifecycle = BrokerLifecycle(LifecycleConfig(broker_id=9, session_timeout_ms=2000, heartbeat_interval_ms=500))
    node = FakeObserver()
    channel = HeartbeatChannel(lifecycle, node)
    assert channel.provide(0) is None  # no epoch, no heartbeat
    lifecycle.tick(0)
    lifecycle.registration_completed(0, RegisterBrokerResponse(broker_epoch=40))
    return channel, node


def answer(channel, node, *, sent=1000, done=1100, appended=0, leader_hw=None, reply=UNFENCED, same_step=True):
    """A fetch built at ``sent``, answered at ``done`` with ``appended``
    records and the leader's high watermark ``leader_hw`` (None: the end of
    those records); the core appends them and moves its high watermark
    (bounded by its log), then (same step) builds the next Fetch."""
    extension = channel.provide(sent)
    assert extension["broker_epoch"] == 40
    channel.consume(done, reply)
    node.log.end_offset += appended
    node.answered_high_watermark = node.log.end_offset if leader_hw is None else leader_hw
    node.high_watermark = min(node.answered_high_watermark, node.log.end_offset)
    if same_step:
        channel.provide(done)
    else:
        node.current_tick += 1
        channel.settle(done)
    return [a for a in channel.take_actions() if isinstance(a, StateChanged)]


def test_an_empty_answer_from_the_leader_proves_the_image_caught_up():
    channel, node = registered()
    changes = answer(channel, node)
    assert [c.new for c in changes] == [BrokerState.ONLINE]
    assert channel.lifecycle.fresh_fetch_sent_ms == 1000  # dated from the send, not the answer
    [answered] = channel.take_answered()
    assert answered.metadata_caught_up and answered.completed_ms == 1100


def test_records_not_all_committed_prove_it_too():
    channel, node = registered()
    assert answer(channel, node, appended=3, leader_hw=51)
    assert channel.lifecycle.state is BrokerState.ONLINE


def test_records_ending_at_the_leaders_high_watermark_prove_it_too():
    """The leader answers a broker's parked Fetch when its high watermark
    moves, with the records up to it (issue 21): such an answer proves."""
    channel, node = registered()
    assert answer(channel, node, appended=3)
    assert channel.lifecycle.state is BrokerState.ONLINE


def test_an_answer_cut_below_the_leaders_high_watermark_proves_nothing():
    channel, node = registered()
    assert answer(channel, node, appended=3, leader_hw=60) == []
    assert channel.lifecycle.fresh_fetch_sent_ms is None


def test_an_answer_that_took_no_position_proves_nothing():
    """An error, a divergence or a snapshot: the core keeps no high
    watermark of the answer (``answered_high_watermark`` None)."""
    channel, node = registered()
    channel.provide(1000)
    channel.consume(1100, UNFENCED)
    node.answered_high_watermark = None
    channel.provide(1100)
    assert channel.take_actions() == [] and channel.lifecycle.fresh_fetch_sent_ms is None


def test_an_answer_followed_by_no_fetch_in_its_step_proves_nothing_but_its_reply_counts():
    channel, node = registered()
    assert answer(channel, node, same_step=False) == []
    changes = answer(channel, node, reply=HeartbeatReply(error=ErrorCode.STALE_BROKER_EPOCH).to_extension(), same_step=False)
    assert [(c.event.value, c.new) for c in changes] == [("epoch refused", BrokerState.OFFLINE)]


def test_an_answer_that_came_with_a_leader_change_proves_nothing():
    channel, node = registered()
    node.role, node.leader_id = Role.UNATTACHED, None
    extension = channel.provide(1000)
    channel.consume(1100, UNFENCED)
    node.role, node.leader_id = Role.FOLLOWER, 2  # the core followed the answer's leader
    channel.provide(1100)
    assert channel.take_actions() == [] and channel.lifecycle.fresh_fetch_sent_ms is None
    assert extension is not None


def test_an_answer_to_a_fetch_sent_before_a_pause_proves_nothing_now():
    channel, node = registered()
    assert answer(channel, node, sent=1000, done=1000 + 2001) == []


def test_unreadable_replies_are_counted_and_ignored():
    channel, node = registered()
    channel.provide(1000)
    channel.consume(1100, {"bogus": 1})
    channel.consume(1100, "nope")
    assert channel.unreadable_replies == 2
    channel.provide(1100)
    assert channel.take_actions() == []
