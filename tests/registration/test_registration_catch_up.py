"""A fence's batch is proposed before the controller's working image applies
it (``Controller.catch_up``, issue 21): nothing the controller decides may
see the image behind, and once caught up the image is what applying the
batch at once gives."""

from __future__ import annotations

import pytest
from _registration_helpers import Harness

from quorum import Entry, RecordKind
from registration import BrokerState, ClusterImage, CreateTopicsRequest, ErrorCode, NewTopic


def _cluster() -> Harness:
    harness = Harness()
    for broker_id in (1, 2, 3):
        harness.start_broker(broker_id)
    harness.create_topic("t", 6, 3)
    return harness


def _expire(harness: Harness, *kept_alive: int) -> None:
    """Brokers not in ``kept_alive`` have not been heard from past the
    session timeout; the controller's tick fences them (proposals not
    taken yet)."""
    harness.now_ms += harness.config.session_timeout_ms + 1
    for broker_id in kept_alive:
        harness.heartbeat(broker_id)
    harness.controller.tick(harness.now_ms)


def test_a_fence_is_proposed_before_the_working_image_applies_it_and_every_read_catches_up():
    harness = _cluster()
    working = harness.controller.working_image  # the object, without the property's catch-up
    led_before = working.leader_count(1)
    assert led_before > 0

    _expire(harness, 2, 3)
    (proposal,) = harness.controller.take_proposals()

    assert working.broker_state(1) is BrokerState.ONLINE and working.leader_count(1) == led_before
    expected = ClusterImage()
    expected.restore(harness.image.snapshot())
    first = proposal.expected_first_offset
    expected.apply([Entry(first + i, 1, RecordKind.DATA, data) for i, data in enumerate(proposal.records)])
    caught_up = harness.controller.working_image  # a read catches up
    assert caught_up is working
    assert working.broker_state(1) is BrokerState.FENCED and working.leader_count(1) == 0
    assert working.fingerprint() == expected.fingerprint()

    harness.append(proposal.records, proposal.on_committed)
    harness.commit()
    assert harness.image.fingerprint() == harness.working.fingerprint()
    harness.check_invariants()


def test_catch_up_is_idempotent_and_a_second_fence_in_the_same_tick_sees_the_first():
    harness = _cluster()
    _expire(harness, 3)
    harness.controller.catch_up()
    fingerprint = harness.controller.working_image.fingerprint()
    harness.controller.catch_up()
    assert harness.controller.working_image.fingerprint() == fingerprint
    proposals = harness.controller.take_proposals()
    assert len(proposals) == 2  # brokers 1 and 2, one batch each
    for proposal in proposals:
        harness.append(proposal.records, proposal.on_committed)
    harness.commit()
    assert harness.image.broker_state(1) is BrokerState.FENCED
    assert harness.image.broker_state(2) is BrokerState.FENCED
    assert harness.image.fingerprint() == harness.working.fingerprint()
    harness.check_invariants()  # no partition led by a fenced broker: the second fence saw the first


def test_a_working_image_that_refuses_the_put_off_batch_stops_decisions_until_the_controller_resynchronises():
    harness = _cluster()
    working = harness.controller.working_image
    _expire(harness, 2, 3)
    (proposal,) = harness.controller.take_proposals()
    # A bug's stand-in: the working image moved on behind the controller's
    # back, so the batch no longer lands where the controller applies it.
    working.apply([Entry(working.offset, 1, RecordKind.LEADER_CHANGE, b"")])

    with pytest.raises(ValueError, match="below the image's offset"):
        harness.controller.catch_up()
    request = CreateTopicsRequest(topics=(NewTopic(name="u", partitions=1, replication_factor=1),))
    refused = harness.controller.handle_request(request, harness.now_ms).response
    assert refused.error is ErrorCode.NOT_LEADER and "resynchronising" in refused.message

    harness.append(proposal.records, proposal.on_committed)
    harness.commit()  # the batch commits: the controller starts over from the committed image
    assert harness.working is not working
    assert harness.working.fingerprint() == harness.image.fingerprint()
    assert harness.create_topic("u", 1, 1).error is ErrorCode.NONE
