"""Controller registration (KIP-919; issue 17 item 4): each controller
registers itself with the active controller, recorded in the metadata log
as a ``RegisterControllerRecord`` so that brokers and ``describe`` see the
controllers and where they listen; a restart registers a new incarnation,
which replaces the old; no epoch, no fencing."""

import pytest
from _registration_helpers import CLUSTER_ID, Harness

from registration import (
    ClusterImage,
    DescribeControllersRequest,
    ErrorCode,
    NoOpRecord,
    RegisterControllerRecord,
    RegisterControllerRequest,
    SnapshotDecodeError,
    decode_message,
    decode_record,
    encode_message,
    encode_record,
)
from registration._authorization import refuse_controller_request
from registration._service import SUPPORTED_FEATURES, registration_recorded
from quorum import AccessControlList, Principal, PrincipalKind, VoterSet

LISTENERS = (("CONTROLLER", "127.0.0.1", 9093),)


def _request(controller_id: int = 2, incarnation: str = "c2-i1", **overrides) -> RegisterControllerRequest:
    fields = dict(
        controller_id=controller_id,
        incarnation_id=incarnation,
        cluster_id=CLUSTER_ID,
        listeners=LISTENERS,
        directory_id="dir-2",
        features=SUPPORTED_FEATURES,
    )
    fields.update(overrides)
    return RegisterControllerRequest(**fields)


def test_a_registration_is_written_and_answered_once_committed():
    harness = Harness()
    request = _request()
    assert not registration_recorded(harness.image, request)

    response = harness.request(request)

    assert response.error is ErrorCode.NONE
    (record,) = harness.batch_records()
    assert record == RegisterControllerRecord(
        controller_id=2, incarnation_id="c2-i1", listeners=LISTENERS, directory_id="dir-2", features=SUPPORTED_FEATURES
    )
    registration = harness.image.controller(2)
    assert registration.listeners == LISTENERS and registration.directory_id == "dir-2"
    assert registration_recorded(harness.image, request)
    # Every replica's image holds it (brokers apply the same records).
    assert all(image.controller(2) == registration for image in harness.images)


def test_a_retry_writes_no_second_registration_and_a_restart_replaces_the_first():
    harness = Harness()
    harness.request(_request())
    harness.request(_request())  # a retry: the same incarnation
    assert isinstance(harness.batch_records()[0], NoOpRecord)

    restarted = _request(incarnation="c2-i2", listeners=(("CONTROLLER", "127.0.0.1", 9094),))
    assert not registration_recorded(harness.image, restarted)
    harness.request(restarted)
    assert harness.image.controller(2).incarnation_id == "c2-i2"
    assert harness.image.controller(2).listeners == (("CONTROLLER", "127.0.0.1", 9094),)
    assert list(harness.image.controllers) == [2]


def test_describe_lists_the_registered_controllers_in_id_order():
    harness = Harness()
    for controller_id in (3, 1, 2):
        harness.request(_request(controller_id, f"c{controller_id}-i1", directory_id=None))
    described = harness.request(DescribeControllersRequest())
    assert [c.controller_id for c in described.controllers] == [1, 2, 3]
    assert described.offset == harness.image.offset
    assert described.controllers[0].features == SUPPORTED_FEATURES
    assert decode_message(encode_message(described)) == described


def test_another_clusters_controller_is_refused_and_nothing_is_written():
    harness = Harness()
    log_end = harness.log_end
    response = harness.request(_request(cluster_id="other"))
    assert response.error is ErrorCode.INCONSISTENT_CLUSTER_ID
    assert harness.log_end == log_end


def test_a_snapshot_keeps_the_controllers_and_stays_format_1_without_any():
    harness = Harness()
    harness.register(7)
    without = harness.image.snapshot()
    restored = ClusterImage()
    restored.restore(without)
    assert restored == harness.image and without[1] == 1  # [1, ...]: format 1, as before
    harness.request(_request())
    restored.restore(harness.image.snapshot())
    assert restored == harness.image
    assert restored.controller(2) == harness.image.controller(2)


@pytest.mark.parametrize(
    "controllers",
    [
        [[2, "", [["CONTROLLER", "h", 1]], None, []]],  # empty incarnation
        [[2, "i", [], None, []]],  # no listener
        [[2, "i", [["CONTROLLER", "h", 1]], None, [["kraft.version", 2, 1]]]],  # min above max
    ],
)
def test_a_snapshot_with_a_malformed_controller_is_refused(controllers):
    import msgpack

    data = msgpack.packb([2, 5, [], [], controllers], use_bin_type=True)
    with pytest.raises(SnapshotDecodeError):
        ClusterImage().restore(data)


def test_the_record_round_trips_and_checks_its_fields():
    record = RegisterControllerRecord(
        controller_id=1, incarnation_id="x", listeners=LISTENERS, directory_id=None, features=(("kraft.version", 0, 1),)
    )
    assert decode_record(encode_record(record)) == record
    with pytest.raises(ValueError, match="appears twice"):
        RegisterControllerRecord(
            controller_id=1, incarnation_id="x", listeners=LISTENERS, features=(("f", 0, 1), ("f", 0, 2))
        )


def test_only_the_controllers_own_node_certificate_may_register_it():
    payload = encode_message(_request(2))
    acl = AccessControlList()
    assert refuse_controller_request(Principal(PrincipalKind.NODE, 2), payload, acl) is None
    assert "may not register controller 2" in refuse_controller_request(Principal(PrincipalKind.NODE, 3), payload, acl)
    assert refuse_controller_request(Principal(PrincipalKind.BROKER, 2), payload, acl) is not None


def test_a_broker_with_a_controllers_id_is_refused_for_good():
    """Found by hand: a broker started as id 1, bootstrapped from controller
    2 only, registered beside controller 1. Its metadata fetches, sent as
    node 1, could be taken for voter 1's acknowledgements."""
    from registration import RegisterBrokerRequest

    harness = Harness()
    harness.request(_request(controller_id=2))
    broker = RegisterBrokerRequest(broker_id=2, incarnation_id="b2", cluster_id=CLUSTER_ID, listeners=LISTENERS)

    response = harness.request(broker)

    assert response.error is ErrorCode.INVALID_REQUEST
    assert "broker id 2 is controller 2's id" in response.message
    assert harness.image.broker(2) is None
    other = RegisterBrokerRequest(broker_id=7, incarnation_id="b7", cluster_id=CLUSTER_ID, listeners=LISTENERS)
    assert harness.request(other).error is ErrorCode.NONE


def test_a_broker_with_a_voters_id_is_refused_though_no_controller_registered_it():
    """The same mistake with a voter that has not registered as a controller
    (down since before the leader's election, or a static voter that never
    will): the voter set the host hands over (``note_voters``) decides."""
    from registration import RegisterBrokerRequest

    harness = Harness()
    harness.controller.note_voters(VoterSet.of_ids((1, 2, 3)))
    refused = RegisterBrokerRequest(broker_id=3, incarnation_id="b3", cluster_id=CLUSTER_ID, listeners=LISTENERS)
    accepted = RegisterBrokerRequest(broker_id=4, incarnation_id="b4", cluster_id=CLUSTER_ID, listeners=LISTENERS)

    response = harness.request(refused)
    assert response.error is ErrorCode.INVALID_REQUEST
    assert "broker id 3 is controller 3's id" in response.message
    assert harness.request(accepted).error is ErrorCode.NONE
