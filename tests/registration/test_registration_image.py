"""The cluster image: applying records, snapshots, copies, queries, and
determinism across nodes and processes (KIP-631 records; KIP-630
snapshots)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
from _registration_helpers import LISTENERS, Harness

from quorum import Entry, RecordKind, collector_paused
from registration import (
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    BrokerState,
    ClusterImage,
    InvalidRecordError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RecordDecodeError,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    SnapshotDecodeError,
    TopicRecord,
    UnregisterBrokerRecord,
    decode_record,
    encode_record,
)

REPO = Path(__file__).resolve().parents[2]


def _entries(records, first_offset=0):
    return [Entry(first_offset + i, 1, RecordKind.DATA, encode_record(r)) for i, r in enumerate(records)]


def _sample_records():
    return [
        RegisterBrokerRecord(broker_id=1, incarnation_id="one", listeners=LISTENERS, rack="r1"),
        RegisterBrokerRecord(broker_id=2, incarnation_id="two", listeners=LISTENERS),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=0, fenced=-1),
        BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=1, fenced=-1),
        TopicRecord(name="t", topic_id="tid", unclean_leader_election=True),
        PartitionRecord(topic_id="tid", partition_id=0, replicas=(1, 2), isr=(1, 2), leader=1),
        PartitionRecord(topic_id="tid", partition_id=1, replicas=(2, 1), isr=(2,), leader=2, leader_epoch=3),
        TopicRecord(name="u", topic_id="uid"),
        PartitionRecord(topic_id="uid", partition_id=0, replicas=(2,), isr=(2,), leader=NO_LEADER),
        NoOpRecord(),
    ]


def _image(records=None) -> ClusterImage:
    image = ClusterImage()
    image.apply(_entries(_sample_records() if records is None else records))
    return image


def test_register_broker_record_sets_the_epoch_to_its_offset_and_fences():
    """KIP-631: RegisterBrokerRecord has no epoch field; the epoch is the
    record's offset, and a new registration is fenced."""
    image = ClusterImage()

    image.apply_record(RegisterBrokerRecord(broker_id=4, incarnation_id="x", listeners=LISTENERS), 17)

    registration = image.broker(4)
    assert (registration.broker_epoch, registration.fenced, image.offset) == (17, True, 18)
    assert image.broker_state(4) is BrokerState.FENCED


def test_registration_change_and_unregister_apply_only_to_the_current_epoch():
    """KIP-380: records name the broker epoch they are about; one about
    another generation does not fit the image and changes nothing."""
    image = _image()

    with pytest.raises(InvalidRecordError):
        image.apply_record(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, fenced=1), image.offset)
    with pytest.raises(InvalidRecordError):
        image.apply_record(UnregisterBrokerRecord(broker_id=2, broker_epoch=0), image.offset)
    assert image == _image()


def test_partition_change_bumps_leader_epoch_only_when_it_names_a_leader():
    """KIP-631 PartitionChangeRecord replay: leader != -2 bumps the leader
    epoch (even naming the same leader); every change bumps the partition
    epoch."""
    image = _image()
    offset = image.offset

    image.apply_record(PartitionChangeRecord(topic_id="tid", partition_id=0, isr=(1,)), offset)
    assert (image.partition("tid", 0).leader_epoch, image.partition("tid", 0).partition_epoch) == (0, 1)
    image.apply_record(PartitionChangeRecord(topic_id="tid", partition_id=0, leader=1), offset + 1)
    assert (image.partition("tid", 0).leader_epoch, image.partition("tid", 0).partition_epoch) == (1, 2)
    image.apply_record(PartitionChangeRecord(topic_id="tid", partition_id=0, leader=NO_LEADER), offset + 2)
    assert image.partition("tid", 0).leader == NO_LEADER
    assert image.partitions_without_leader() == [("tid", 0), ("uid", 0)]
    image.check_indexes()


def test_a_partition_change_that_breaks_the_partition_is_refused():
    image = _image()

    for change in (
        PartitionChangeRecord(topic_id="tid", partition_id=0, isr=(2,)),  # leader 1 not in the ISR
        PartitionChangeRecord(topic_id="tid", partition_id=0, isr=(1, 3)),  # 3 not a replica
        PartitionChangeRecord(topic_id="tid", partition_id=9, leader=1),  # no such partition
    ):
        with pytest.raises(InvalidRecordError):
            image.apply_record(change, image.offset)
    assert image == _image()


def test_remove_topic_removes_its_partitions_and_index_entries():
    image = _image()

    image.apply_record(RemoveTopicRecord(topic_id="tid"), image.offset)

    assert sorted(image.topics) == ["u"] and image.partition_count == 1
    assert image.partitions_led_by(1) == frozenset()
    image.check_indexes()


def test_a_listing_follows_topics_created_and_removed_and_a_copy_keeps_its_own():
    """The sorted names are cached between pages (a million names are not
    sorted again for each): the cache follows every change, and a copy
    changed afterwards does not change the original's listing."""
    image = _image()
    assert image.topic_names_after(None, 1) == (["t"], True)
    copy = image.copy()
    copy.apply_record(TopicRecord(name="a", topic_id="aid"), copy.offset)
    image.apply_record(RemoveTopicRecord(topic_id="tid"), image.offset)

    assert image.topic_names_after(None, 10) == (["u"], False)
    assert copy.topic_names_after(None, 10) == (["a", "t", "u"], False)
    assert copy.topic_names_after("a", 1) == (["t"], True)
    restored = ClusterImage()
    restored.topic_names_after(None, 10)
    restored.restore(copy.snapshot())
    assert restored.topic_names_after("t", 10) == (["u"], False)
    for each in (image, copy, restored):
        each.check_indexes()


def test_snapshot_and_restore_give_an_equal_image():
    """KIP-630: restore(snapshot()) gives an equal image, with equal
    fingerprints and working indexes."""
    for image in (ClusterImage(), _image()):
        restored = ClusterImage()
        restored.apply(_entries([RegisterBrokerRecord(broker_id=9, incarnation_id="x", listeners=LISTENERS)]))

        restored.restore(image.snapshot())

        assert restored == image
        assert restored.fingerprint() == image.fingerprint()
        restored.check_indexes()
        assert restored.partitions_led_by(2) == image.partitions_led_by(2)


def test_a_restored_image_applies_later_records_like_the_original():
    image = _image()
    restored = ClusterImage()
    restored.restore(image.snapshot())
    later = _entries([PartitionChangeRecord(topic_id="tid", partition_id=1, leader=1, isr=(2, 1))], image.offset)

    image.apply(later)
    restored.apply(later)

    assert restored.fingerprint() == image.fingerprint()


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", msgpack.packb([2, 0, [], []]), msgpack.packb([1, -1, [], []]), msgpack.packb([1, 5, [[1]], []])],
)
def test_restoring_garbage_raises_and_leaves_the_image_unchanged(data):
    image = _image()

    with pytest.raises(SnapshotDecodeError):
        image.restore(data)

    assert image == _image()


def test_an_undecodable_record_is_logged_and_skipped_alike_on_every_node(caplog):
    """Bad input (design.md): an undecodable record must never crash a node;
    every node skips it, so images stay identical at every offset."""
    entries = _entries(_sample_records()[:2])
    entries.append(Entry(2, 1, RecordKind.DATA, b"\xff not msgpack"))
    entries.append(Entry(3, 1, RecordKind.DATA, msgpack.packb([99, 0, []])))
    entries += _entries([BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=0, fenced=-1)], 4)
    images = [ClusterImage(), ClusterImage()]

    for image in images:
        image.apply(entries)

    assert images[0] == images[1]
    assert images[0].offset == 5 and images[0].skipped_records == 2
    assert images[0].broker_state(1) is BrokerState.ONLINE
    assert "skipped the record at offset 2" in caplog.text


def test_a_record_that_does_not_fit_is_skipped_alike_on_every_node():
    entries = _entries([*_sample_records(), PartitionChangeRecord(topic_id="nope", partition_id=0, leader=1)])
    first, second = ClusterImage(), ClusterImage()

    first.apply(entries)
    second.apply(entries[:5])
    second.apply(entries[5:])

    assert first == second and first.skipped_records == 1


def test_control_records_and_replayed_entries_only_move_the_offset():
    image = _image()
    fingerprint = image.fingerprint()

    image.apply(_entries(_sample_records()))  # already applied: ignored
    image.apply([Entry(image.offset, 2, RecordKind.LEADER_CHANGE, b"leader=1 epoch=2")])

    assert image.offset == len(_sample_records()) + 1
    with pytest.raises(ValueError):
        image.apply_record(NoOpRecord(), 3)
    image2 = _image()
    image2.apply([Entry(image2.offset, 2, RecordKind.LEADER_CHANGE, b"")])
    assert image2.fingerprint() != fingerprint  # the offset is part of the image


def test_copies_are_independent_both_ways():
    """The working image is a copy-on-write copy: changes on either side never
    show on the other."""
    original = _image()
    copy = original.copy()
    reference = _image()

    copy.apply_record(PartitionChangeRecord(topic_id="tid", partition_id=0, isr=(1,)), copy.offset)
    copy.apply_record(RemoveTopicRecord(topic_id="uid"), copy.offset)
    original.apply_record(PartitionChangeRecord(topic_id="tid", partition_id=1, leader=NO_LEADER), original.offset)

    assert copy.topic("u") is None and original.topic("u") is not None
    assert original.partitions_with_replica_in_isr(2) == reference.partitions_with_replica_in_isr(2)
    assert copy.partitions_with_replica_in_isr(2) == frozenset({("tid", 1)})
    assert original.partitions_led_by(2) == frozenset()
    assert copy.partitions_led_by(2) == frozenset({("tid", 1)})
    for image in (original, copy):
        image.check_indexes()


def test_query_answers_msgpack_with_the_offset():
    """The quorum's ReadRequest path: msgpack questions, msgpack answers,
    each with the image offset; never an exception."""
    image = _image()

    def ask(*question):
        return msgpack.unpackb(image.query(msgpack.packb(list(question))))

    assert ask("list_topics") == {"offset": 10, "topics": ["t", "u"]}
    topic = ask("describe_topic", "t")["topic"]
    assert topic["partitions"][1] == {
        "partition": 1, "replicas": [2, 1], "isr": [2], "leader": 2, "leader_epoch": 3, "partition_epoch": 0
    }
    assert ask("describe_topic", "zz")["error"] == 3
    cluster = ask("cluster")
    assert [b["state"] for b in cluster["brokers"]] == ["Online", "Online"]
    assert cluster["offline_partition_count"] == 1
    assert ask("broker", 1)["broker"]["rack"] == "r1"
    assert ask("broker", 5)["error"] == 102
    assert ask("nonsense")["error"] == 42
    assert msgpack.unpackb(image.query(b"\xc1"))["error"] == 42


def test_fingerprints_do_not_depend_on_the_process():
    """Identical at the same offset on every node: the fingerprint is the
    same in another process with another hash seed."""
    image = _image()
    script = (
        "import sys; sys.path.insert(0, 'tests/registration');"
        "from test_registration_image import _image; print(_image().fingerprint())"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")

    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True
    )

    assert result.stdout.strip() == image.fingerprint()


def test_images_built_by_a_controller_are_identical_on_every_node():
    harness = Harness()
    for broker_id in (1, 2, 3):
        harness.start_broker(broker_id)
    harness.create_topic("t", 12, 3)
    harness.heartbeat(2, want_fence=True)

    harness.check_invariants()
    assert harness.working == harness.image


# Raw partition changes [topic_id, partition_id, isr, leader, replicas]
# that the record's validation refuses, with why.
_INVALID_CHANGE_VALUES = [
    ("", 0, None, 1, None),  # an empty topic id
    ("tid", -1, None, 1, None),  # a negative partition id
    ("tid", True, None, 1, None),  # a bool is not an int
    ("tid", 0, (1, 1), -2, None),  # a broker twice in the ISR
    ("tid", 0, (), -2, None),  # an empty ISR
    ("tid", 0, None, -3, None),  # below LEADER_UNCHANGED
    ("tid", 0, None, 1, (2, "x")),  # a replica that is not a broker id
]


@pytest.mark.parametrize("values", _INVALID_CHANGE_VALUES)
def test_a_partition_change_with_an_invalid_field_is_skipped_with_the_records_own_error(values, caplog):
    """Voters apply partition changes from their field values, without
    building the record (issue 21); the validation and its message must
    stay the record's own: the same error decode_record raises, the record
    skipped, the image unchanged."""
    data = msgpack.packb([PartitionChangeRecord.TYPE_CODE, 0, list(values)], use_bin_type=True)
    with pytest.raises(RecordDecodeError) as raised:
        decode_record(data)
    image = _image()
    offset = image.offset

    image.apply([Entry(offset, 1, RecordKind.DATA, data)])

    assert image.skipped_records == 1 and image.offset == offset + 1
    assert f"skipped the record at offset {offset}: {raised.value}" in caplog.text
    reference = _image()
    reference.apply([Entry(offset, 1, RecordKind.DATA, encode_record(NoOpRecord()))])
    assert image == reference


def test_partition_changes_applied_from_their_values_match_the_records_path(caplog):
    """The voter's path (``apply``: values, no record object) and the
    controller's (``apply_record``) give equal images and skip the same
    changes with the same messages, fitting or not."""
    changes = [
        PartitionChangeRecord(topic_id="tid", partition_id=0, isr=(1,)),
        PartitionChangeRecord(topic_id="tid", partition_id=0, isr=(2,)),  # leader 1 not in the ISR
        PartitionChangeRecord(topic_id="tid", partition_id=0, leader=2, isr=(2, 1)),
        PartitionChangeRecord(topic_id="tid", partition_id=1, leader=NO_LEADER),
        PartitionChangeRecord(topic_id="tid", partition_id=1, isr=(2, 3)),  # 3 not a replica
        PartitionChangeRecord(topic_id="tid", partition_id=9, leader=1),  # no such partition
        PartitionChangeRecord(topic_id="tid", partition_id=1, leader=1, isr=(1,), replicas=(1, 2)),
        PartitionChangeRecord(topic_id="uid", partition_id=0, leader=2),
    ]
    by_values = _image()
    by_records = _image()
    first = by_values.offset

    by_values.apply(_entries(changes, first))
    values_log, _ = caplog.text, caplog.clear()
    refusals = []
    for offset, change in enumerate(changes, first):
        try:
            by_records.apply_record(change, offset)
        except InvalidRecordError as error:
            refusals.append(f"skipped the record at offset {offset}: {error}")
            by_records.apply([Entry(offset, 1, RecordKind.DATA, encode_record(NoOpRecord()))])

    assert by_values == by_records and by_values.fingerprint() == by_records.fingerprint()
    by_values.check_indexes()
    assert len(refusals) == 3 and by_values.skipped_records == 3
    assert all(refusal in values_log for refusal in refusals)


def test_a_big_batch_is_applied_with_the_cyclic_collector_paused_then_running_again():
    """Issue 21: a voter applies a fence's 10,000 partition changes without
    the collector's young-generation passes walking the batch again and
    again; the collector runs again right after (one pass, as the pause
    ends). The same batch unpaused starts several passes."""
    topics = [TopicRecord(name="big", topic_id="bid")]
    partitions = [
        PartitionRecord(topic_id="bid", partition_id=p, replicas=(1, 2), isr=(1, 2), leader=1) for p in range(4_000)
    ]
    changes = [PartitionChangeRecord(topic_id="bid", partition_id=p, isr=(2,), leader=2) for p in range(4_000)]
    paused, unpaused = _image(), _image()
    for image in (paused, unpaused):
        image.apply(_entries(topics + partitions, image.offset))
    batch = _entries(changes, paused.offset)
    passes: list[int] = []

    def count(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    def passes_during(apply):
        gc.collect()  # counts from zero: the few allocations before the pause cannot start a pass
        passes.clear()
        gc.callbacks.append(count)
        try:
            apply(batch)
        finally:
            gc.callbacks.remove(count)
        return len(passes)

    assert passes_during(unpaused._apply_entries) >= 3
    assert passes_during(paused.apply) <= 1
    assert gc.isenabled()
    assert paused == unpaused
    assert paused.leader_count(2) == 4_000 + 1 and paused.leader_count(1) == 1  # the sample: 2 leads tid/1, 1 tid/0
    paused.check_indexes()


def test_the_collector_pause_leaves_a_disabled_collector_disabled_and_survives_errors():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ZeroDivisionError):
        with collector_paused():
            assert not gc.isenabled()
            1 / 0
    assert gc.isenabled()


def test_the_online_brokers_index_follows_every_broker_record_copies_and_snapshots():
    """Elections ask for the Online brokers at every fence and unfencing:
    an index, not a scan of every registration (5,000 brokers unfencing
    after a failover made the scan quadratic). It must follow fencing,
    controlled shutdown, a new registration and unregistration, stay
    apart in a copy, and come back from a snapshot."""
    original = _image()
    copy = original.copy()
    assert original.brokers_in_state(BrokerState.ONLINE) == [1, 2]

    copy.apply(_entries([BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=0, fenced=1)], copy.offset))
    shut_down = BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=1, in_controlled_shutdown=1)
    copy.apply(_entries([shut_down], copy.offset))
    assert copy.brokers_in_state(BrokerState.ONLINE) == [] and original.brokers_in_state(BrokerState.ONLINE) == [1, 2]
    assert copy.brokers_in_state(BrokerState.STOPPING) == [2]

    bounced = RegisterBrokerRecord(broker_id=2, incarnation_id="new", listeners=LISTENERS)
    original.apply(_entries([bounced], original.offset))
    assert original.brokers_in_state(BrokerState.ONLINE) == [1]
    original.apply(_entries([UnregisterBrokerRecord(broker_id=1, broker_epoch=0)], original.offset))
    assert original.brokers_in_state(BrokerState.ONLINE) == []
    copy.apply(_entries([BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=0, fenced=-1)], copy.offset))
    restored = ClusterImage()
    restored.restore(copy.snapshot())
    assert restored.brokers_in_state(BrokerState.ONLINE) == [1] == copy.brokers_in_state(BrokerState.ONLINE)
    for image in (original, copy, restored):
        image.check_indexes()
