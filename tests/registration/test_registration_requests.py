"""Requests, responses and heartbeats: validation and wire round trips
(bad input is a ValueError, never anything else)."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import quorum
from registration import (
    BrokerDescription,
    BrokerHeartbeat,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeTopicsRequest,
    DescribeTopicsResponse,
    ErrorCode,
    HeartbeatReply,
    ListTopicsRequest,
    ListTopicsResponse,
    NewTopic,
    PartitionDescription,
    RegisterBrokerRecord,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    RegisterControllerRequest,
    TopicDescription,
    TopicListing,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    message_from_wire,
)

LISTENERS = (("PLAINTEXT", "h", 9092),)

MESSAGES = [
    RegisterBrokerRequest(broker_id=1, incarnation_id="i", cluster_id="c", listeners=LISTENERS, rack="r"),
    RegisterBrokerResponse(broker_epoch=12),
    RegisterBrokerResponse(error=ErrorCode.DUPLICATE_BROKER_REGISTRATION, message="no"),
    UnregisterBrokerRequest(broker_id=3),
    UnregisterBrokerResponse(error=ErrorCode.BROKER_ID_NOT_REGISTERED),
    CreateTopicsRequest(topics=(NewTopic(name="t", partitions=3, replication_factor=2, unclean_leader_election=True),)),
    CreateTopicsResponse(
        results=(
            CreateTopicResult(name="t", topic_id="x"),
            CreateTopicResult(name="u", error=ErrorCode.TOPIC_ALREADY_EXISTS),
        )
    ),
    DeleteTopicsRequest(names=("t", "u")),
    DeleteTopicsResponse(results=(DeleteTopicResult(name="t"),)),
    DescribeClusterRequest(linearizable=True),
    DescribeClusterResponse(
        offset=5,
        cluster_id="c",
        brokers=(
            BrokerDescription(broker_id=1, broker_epoch=0, incarnation_id="i", state="Online", listeners=LISTENERS),
        ),
        topic_count=1,
        partition_count=2,
    ),
    DescribeTopicsRequest(),
    DescribeTopicsRequest(names=("a",)),
    ListTopicsRequest(),
    ListTopicsRequest(after="t", linearizable=True),
    ListTopicsResponse(offset=4, topics=(TopicListing(name="t", topic_id="x", partition_count=3),), more=True),
    ListTopicsResponse(error=ErrorCode.NOT_LEADER, message="not the active controller"),
    DescribeTopicsResponse(
        offset=9,
        topics=(
            TopicDescription(
                name="t",
                topic_id="x",
                partitions=(
                    PartitionDescription(
                        partition_id=0, replicas=(1, 2), isr=(1,), leader=1, leader_epoch=2, partition_epoch=3
                    ),
                ),
            ),
            TopicDescription(name="u", error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ),
    ),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_messages_round_trip_through_msgpack(message):
    wire = msgpack.unpackb(msgpack.packb(message.to_wire()))

    assert message_from_wire(wire) == message
    assert type(message).from_wire(wire) == message


wire_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4),
    max_leaves=12,
)


@given(st.sampled_from(MESSAGES), st.data())
def test_malformed_wire_data_raises_value_error_only(message, data):
    """A remote's bytes are accepted or refused with ValueError, never
    anything else (the h11 fuzzer's property)."""
    name, fields = message.to_wire()
    if data.draw(st.booleans()) and fields:
        fields[data.draw(st.integers(0, len(fields) - 1))] = data.draw(wire_values)
    else:
        fields = data.draw(wire_values)
    try:
        message_from_wire([name, fields])
    except ValueError:
        pass


@given(wire_values)
def test_anything_at_all_decodes_or_raises_value_error(value):
    try:
        message_from_wire(value)
    except ValueError:
        pass


def test_heartbeat_extensions_round_trip_and_are_strict():
    heartbeat = BrokerHeartbeat(broker_id=1, broker_epoch=7, want_fence=True)
    reply = HeartbeatReply(error=ErrorCode.NONE, is_caught_up=True, is_fenced=False, should_shutdown=True)

    assert BrokerHeartbeat.from_extension(heartbeat.to_extension()) == heartbeat
    assert HeartbeatReply.from_extension(msgpack.unpackb(msgpack.packb(reply.to_extension()))) == reply
    assert HeartbeatReply.from_extension({"error": 6}).error is ErrorCode.NOT_LEADER
    extension = heartbeat.to_extension()
    for bad in ({**extension, "extra": 1}, {"broker_id": 1}, [], {**extension, "want_fence": 1}):
        with pytest.raises(ValueError):
            BrokerHeartbeat.from_extension(bad)
    with pytest.raises(ValueError):
        HeartbeatReply.from_extension({"error": 12345})


def test_requests_validate_shapes():
    with pytest.raises(ValueError):
        RegisterBrokerRequest(broker_id=-1, incarnation_id="i", cluster_id="c", listeners=LISTENERS)
    with pytest.raises(ValueError):
        CreateTopicsRequest(topics=())
    with pytest.raises(ValueError):
        NewTopic(name="t", partitions=True, replication_factor=1)
    with pytest.raises(ValueError):
        DeleteTopicsRequest(names=("t", 3))


def test_a_registration_names_a_bounded_number_of_listeners_and_hosts():
    """Found by hand: a 1 MiB RegisterBroker held some 30,000 listeners,
    kept in every image, snapshot and DescribeCluster answer. A request may
    name 16, with hosts of at most 255 characters; a record already in a
    log is read as it was written."""
    many = tuple((f"L{index}", "h", 9092) for index in range(17))
    with pytest.raises(ValueError, match="at most 16 listeners may be registered, got 17"):
        RegisterBrokerRequest(broker_id=1, incarnation_id="i", cluster_id="c", listeners=many)
    with pytest.raises(ValueError, match="a listener host has at most 255 characters, got 256"):
        RegisterBrokerRequest(broker_id=1, incarnation_id="i", cluster_id="c", listeners=(("L", "h" * 256, 1),))
    with pytest.raises(ValueError, match="at most 16 listeners"):
        RegisterControllerRequest(controller_id=1, incarnation_id="i", cluster_id="c", listeners=many)
    RegisterBrokerRequest(broker_id=1, incarnation_id="i", cluster_id="c", listeners=many[:16])
    RegisterBrokerRecord(broker_id=1, incarnation_id="i", listeners=many)  # as written before


@pytest.mark.parametrize(
    "listeners, rack, phrase",
    [
        ((("L", "h\nforged log line", 1),), None, "listener host must be printable"),
        ((("L\x1b[2J", "h", 1),), None, "listener name must be printable"),
        ((("L", "h", 1),), "r1\nfake", "rack must be printable"),
    ],
)
def test_a_registration_brings_only_printable_text(listeners, rack, phrase):
    """Found by hand: a broker registered with the rack 'r1\\nfake', which
    log lines, event logs and describe output would show as two lines. The
    record types still read such text as written."""
    with pytest.raises(ValueError, match=phrase):
        RegisterBrokerRequest(broker_id=1, incarnation_id="i", cluster_id="c", listeners=listeners, rack=rack)
    if rack is None:
        with pytest.raises(ValueError, match=phrase):
            RegisterControllerRequest(controller_id=1, incarnation_id="i", cluster_id="c", listeners=listeners)
    RegisterBrokerRecord(broker_id=1, incarnation_id="i", listeners=listeners, rack=rack)  # as written before


def test_error_codes_shared_with_the_quorum_have_its_numbers():
    """Kafka's numbers everywhere: registration.ErrorCode extends
    quorum.ErrorCode's values, which it reuses unchanged."""
    for code in quorum.ErrorCode:
        if code.name in ErrorCode.__members__:
            assert ErrorCode[code.name] == code
    assert ErrorCode.STALE_BROKER_EPOCH == quorum.ErrorCode.STALE_BROKER_EPOCH == 77
    assert (ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) == (36, 3)
    assert (ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.INVALID_TOPIC_EXCEPTION) == (38, 17)
