"""The broker's client protocol and configuration: strict decoding, and any
input answered with a clear error, never a crash (design.md: bad input)."""

from __future__ import annotations

import msgpack
import pytest
import trio
from _memory_cluster import MemoryCluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_agent import BrokerConfig, ErrorCode, MetadataRequest, MetadataResponse, ProtocolError

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=12,
)
request_like = st.fixed_dictionaries(
    {"op": st.sampled_from(["list_topics", "describe_topic", "find_leader", "cluster_metadata", "nope"])},
    optional={
        "topic": values | st.text(min_size=1, max_size=10),
        "partition": values | st.integers(0, 5),
        "broker_epoch": values | st.integers(0, 100),
        "min_image_offset": values | st.integers(0, 100),
        "extra": values,
    },
)


@pytest.mark.parametrize(
    "request_",
    [
        MetadataRequest(op="cluster_metadata"),
        MetadataRequest(op="list_topics", broker_epoch=4, min_image_offset=9),
        MetadataRequest(op="describe_topic", topic="orders"),
        MetadataRequest(op="find_leader", topic="orders", partition=3, broker_epoch=0),
    ],
)
def test_requests_round_trip(request_):
    assert MetadataRequest.from_payload(request_.to_payload()) == request_


def test_responses_round_trip():
    response = MetadataResponse(
        error=ErrorCode.NONE, message="", broker_id=3, broker_epoch=-1, state="Fenced", image_offset=0, body={"topics": ["a"]}
    )
    assert MetadataResponse.from_payload(response.to_payload()) == response


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb([1, 2]), "a map with an op"),
        (msgpack.packb({"op": "drop_table"}), "op must be one of"),
        (msgpack.packb({"op": "list_topics", "topic": "x"}), "takes no topic"),
        (msgpack.packb({"op": "describe_topic"}), "needs topic"),
        (msgpack.packb({"op": "find_leader", "topic": "t", "partition": -1}), "partition must be an int >= 0"),
        (msgpack.packb({"op": "find_leader", "topic": "t", "partition": True}), "partition must be an int >= 0"),
        (msgpack.packb({"op": "list_topics", "broker_epoch": "7"}), "broker_epoch must be an int"),
        (msgpack.packb({"op": "describe_topic", "topic": ""}), "topic must be a string"),
    ],
)
def test_malformed_requests_are_refused_with_a_clear_error(payload, problem):
    with pytest.raises(ProtocolError, match=problem):
        MetadataRequest.from_payload(payload)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(request_like | values)
def test_any_payload_decodes_or_raises_protocol_error(data):
    try:
        payload = msgpack.packb(data, use_bin_type=True)
    except (OverflowError, ValueError):
        return
    try:
        request = MetadataRequest.from_payload(payload)
    except ProtocolError:
        return
    assert MetadataRequest.from_payload(request.to_payload()) == request


async def test_the_agent_answers_any_payload_without_raising(nursery, autojump_clock):
    cluster = MemoryCluster(nursery)
    await cluster.start_controllers()
    agent = await cluster.start_broker(101)
    with trio.fail_after(30):
        await agent.wait_for_state(lambda state: state.value == "Online")

    @settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(st.binary(max_size=64) | (request_like | values).map(lambda v: _pack(v)))
    def check(payload):
        response = agent.answer(payload)
        assert response.broker_id == 101 and response.image_offset >= 0
        assert response.error in (
            ErrorCode.NONE,
            ErrorCode.INVALID_REQUEST,
            ErrorCode.STALE_BROKER_EPOCH,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.OFFSET_NOT_AVAILABLE,
        )
        MetadataResponse.from_payload(response.to_payload())

    check()


def _pack(value) -> bytes:
    try:
        return msgpack.packb(value, use_bin_type=True)
    except (OverflowError, ValueError):
        return b"\x00"


BASE = dict(broker_id=101, bootstrap={1: ("127.0.0.1", 9001)}, listen=("127.0.0.1", 0))


@pytest.mark.parametrize(
    ("settings_", "problem"),
    [
        ({"broker_id": 1}, "is a controller voter id"),
        ({"broker_id": -4}, "broker_id must be"),
        ({"bootstrap": {}}, "at least one controller"),
        ({"cluster_id": ""}, "cluster_id"),
        ({"session_timeout_ms": 400, "heartbeat_interval_ms": 500}, "must exceed"),
        ({"staleness_bound_ms": 100}, "below what this broker can keep"),
        ({"quorum": {"bogus_ms": 1}}, "unknown quorum settings"),
        ({"rack": ""}, "rack"),
    ],
)
def test_bad_config_is_refused_with_a_clear_error(settings_, problem):
    with pytest.raises(ValueError, match=problem):
        BrokerConfig(**{**BASE, **settings_}, plaintext=True)


def test_the_staleness_bound_is_the_session_plus_check_quorum():
    config = BrokerConfig(**BASE, session_timeout_ms=2000, heartbeat_interval_ms=500, quorum={"fetch_timeout_ms": 1000}, plaintext=True)
    assert config.effective_staleness_bound_ms == 2000 + 1500
    assert BrokerConfig(**BASE, staleness_bound_ms=20_000, plaintext=True).effective_staleness_bound_ms == 20_000
