"""Metadata records: encoding, validation, and a decoder that accepts a
record or raises RecordDecodeError, never anything else (the h11 fuzzer's
property)."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from registration import (
    RECORD_TYPES,
    BrokerRegistrationChangeRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RecordDecodeError,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    decode_record,
    describe_record,
    encode_record,
)

broker_ids = st.integers(min_value=0, max_value=2**31)
texts = st.text(min_size=1, max_size=20)
id_tuples = st.lists(broker_ids, min_size=1, max_size=5, unique=True).map(tuple)


@st.composite
def partition_records(draw):
    replicas = draw(id_tuples)
    isr = tuple(draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True)))
    leader = draw(st.sampled_from((-1, *isr)))
    return PartitionRecord(
        topic_id=draw(texts),
        partition_id=draw(st.integers(0, 10_000)),
        replicas=replicas,
        isr=isr,
        leader=leader,
        leader_epoch=draw(st.integers(0, 2**31)),
        partition_epoch=draw(st.integers(0, 2**31)),
    )


records = st.one_of(
    st.builds(
        RegisterBrokerRecord,
        broker_id=broker_ids,
        incarnation_id=texts,
        listeners=st.lists(
            st.tuples(texts, texts, st.integers(0, 65535)), min_size=1, max_size=3, unique_by=lambda l: l[0]
        ).map(tuple),
        rack=st.none() | texts,
    ),
    st.builds(
        BrokerRegistrationChangeRecord,
        broker_id=broker_ids,
        broker_epoch=st.integers(0, 2**62),
        fenced=st.sampled_from((-1, 0, 1)),
        in_controlled_shutdown=st.sampled_from((-1, 0, 1)),
    ),
    st.builds(UnregisterBrokerRecord, broker_id=broker_ids, broker_epoch=st.integers(0, 2**62)),
    st.builds(
        TopicRecord,
        name=st.from_regex(r"[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,30}", fullmatch=True),
        topic_id=texts,
        unclean_leader_election=st.booleans(),
    ),
    partition_records(),
    st.builds(
        PartitionChangeRecord,
        topic_id=texts,
        partition_id=st.integers(0, 10_000),
        isr=st.none() | id_tuples,
        leader=st.integers(-2, 2**31),
        replicas=st.none() | id_tuples,
    ),
    st.builds(RemoveTopicRecord, topic_id=texts),
    st.just(NoOpRecord()),
    st.builds(
        RegisterControllerRecord,
        controller_id=broker_ids,
        incarnation_id=texts,
        listeners=st.lists(
            st.tuples(texts, texts, st.integers(0, 65535)), min_size=1, max_size=3, unique_by=lambda l: l[0]
        ).map(tuple),
        directory_id=st.none() | texts,
        features=st.lists(
            st.tuples(texts, st.integers(0, 5), st.integers(5, 32767)), max_size=3, unique_by=lambda f: f[0]
        ).map(tuple),
    ),
)


@given(records)
def test_every_record_round_trips(record):
    """Records are versioned msgpack [type_code, version, [fields]]."""
    data = encode_record(record)

    assert decode_record(data) == record
    decoded = msgpack.unpackb(data)
    assert decoded[0] == type(record).TYPE_CODE and decoded[1] == 0
    assert describe_record(record).startswith(type(record).__name__)


def test_type_codes_are_kafkas_metadata_api_keys():
    """KIP-631 record API keys (reference §4.5)."""
    codes = {cls.__name__: cls.TYPE_CODE for cls in RECORD_TYPES}
    assert codes == {
        "RegisterBrokerRecord": 0,
        "UnregisterBrokerRecord": 1,
        "TopicRecord": 2,
        "PartitionRecord": 3,
        "PartitionChangeRecord": 5,
        "RemoveTopicRecord": 9,
        "BrokerRegistrationChangeRecord": 17,
        "NoOpRecord": 20,
        "RegisterControllerRecord": 27,  # KIP-919
    }


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_to_a_record_or_raise_record_decode_error(data):
    try:
        decode_record(data)
    except RecordDecodeError:
        pass


@given(records, st.data())
def test_mutated_records_decode_or_raise_record_decode_error(record, data):
    """Change one field of a valid encoding to any msgpack value: the decoder
    still answers with a record or RecordDecodeError."""
    type_code, version, fields = msgpack.unpackb(encode_record(record))
    values = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.text(max_size=5),
        st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
    )
    mutated = data.draw(st.sampled_from(["type", "version", "field", "extra"]))
    if mutated == "type":
        type_code = data.draw(values)
    elif mutated == "version":
        version = data.draw(values)
    elif mutated == "field" and fields:
        fields[data.draw(st.integers(0, len(fields) - 1))] = data.draw(values)
    else:
        fields.append(data.draw(values))
    try:
        decode_record(msgpack.packb([type_code, version, fields]))
    except RecordDecodeError:
        pass


@pytest.mark.parametrize(
    "make",
    [
        lambda: PartitionRecord(topic_id="t", partition_id=0, replicas=(1, 2), isr=(3,), leader=3),
        lambda: PartitionRecord(topic_id="t", partition_id=0, replicas=(1, 2), isr=(1,), leader=2),
        lambda: PartitionRecord(topic_id="t", partition_id=0, replicas=(1, 1), isr=(1,), leader=1),
        lambda: PartitionRecord(topic_id="t", partition_id=0, replicas=(1,), isr=(), leader=-1),
        lambda: PartitionChangeRecord(topic_id="t", partition_id=0, leader=-3),
        lambda: BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=0, fenced=2),
        lambda: BrokerRegistrationChangeRecord(broker_id=True, broker_epoch=0),
        lambda: RegisterBrokerRecord(broker_id=1, incarnation_id="", listeners=(("a", "h", 1),)),
        lambda: RegisterBrokerRecord(broker_id=1, incarnation_id="i", listeners=()),
        lambda: RegisterBrokerRecord(broker_id=1, incarnation_id="i", listeners=(("a", "h", 1), ("a", "g", 2))),
        lambda: RegisterBrokerRecord(broker_id=1, incarnation_id="i", listeners=(("a", "h", 70000),)),
        lambda: TopicRecord(name="bad name", topic_id="x"),
        lambda: TopicRecord(name="t", topic_id="x", unclean_leader_election=1),
    ],
)
def test_records_validate_their_fields(make):
    with pytest.raises(ValueError):
        make()


def test_unknown_versions_and_types_are_refused():
    data = msgpack.unpackb(encode_record(RemoveTopicRecord(topic_id="x")))
    for bad in ([9, 1, ["x"]], [77, 0, ["x"]], [9, 0, ["x", "y"]], [9, 0], "x", [9, 0, ["x"], 1]):
        with pytest.raises(RecordDecodeError):
            decode_record(msgpack.packb(bad))
    assert decode_record(msgpack.packb(data)) == RemoveTopicRecord(topic_id="x")
    with pytest.raises(RecordDecodeError):
        decode_record(encode_record(NoOpRecord()) + b"\x00")  # trailing bytes
    with pytest.raises(TypeError):
        encode_record("not a record")
