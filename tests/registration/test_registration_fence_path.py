"""The fence's fast path (issue 21): partition changes elected, encoded and
applied from their field values, and index updates noted then made in
bulk, must give what the record objects and one-at-a-time index updates
give: the same bytes, the same refusals, the same images and indexes."""

from __future__ import annotations

import random

import msgpack
import pytest
from _registration_helpers import LISTENERS

from quorum import Entry, RecordKind
from registration import (
    LEADER_UNCHANGED,
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    ClusterImage,
    InvalidRecordError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    PartitionState,
    RecordDecodeError,
    RegisterBrokerRecord,
    TopicRecord,
    decode_record,
    elect_leader,
    encode_record,
)
from registration._election import election_change
from registration._image import _PENDING_CHANGES_MAX, _SetIndex
from registration._records import (
    check_broker_ids,
    check_int,
    check_partition_change,
    check_text,
    encode_partition_changes,
    encode_records,
)


class _StrSubclass(str):
    pass


# Field values around every edge of PartitionChangeRecord's validation, the
# fast path's shape included (an ISR of up to 8 ids, no replicas).
_TOPIC_IDS = ["tid", "", "x" * 1024, "x" * 1025, _StrSubclass("sub"), b"tid", None]
_PARTITION_IDS = [0, 7, -1, True, 1.0, None]
_ISRS = [None, (1,), (1, 2), (2, 1, 3), tuple(range(8)), tuple(range(9)), (1, 1), (), (True,), (1, -1), (1, "2"), [1, 2]]
_LEADERS = [LEADER_UNCHANGED, NO_LEADER, 0, 5, -3, False, "1"]
_REPLICAS = [None, (1, 2), (), (1, 1)]


def _full_check(topic_id, partition_id, isr, leader, replicas) -> None:
    """PartitionChangeRecord's rules, written out with the shared field
    checks (the reference the fast path must agree with)."""
    check_text("topic_id", topic_id)
    check_int("partition_id", partition_id, 0)
    if isr is not None:
        check_broker_ids("isr", isr)
    check_int("leader", leader, LEADER_UNCHANGED)
    if replicas is not None:
        check_broker_ids("replicas", replicas)


def _outcome(check, values) -> str | None:
    try:
        check(*values)
    except (ValueError, TypeError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def test_the_fast_check_accepts_and_refuses_exactly_what_the_full_check_does():
    rng = random.Random(21)
    combos = [
        (topic_id, partition_id, isr, leader, replicas)
        for topic_id in _TOPIC_IDS
        for partition_id in _PARTITION_IDS[:3]
        for isr in _ISRS
        for leader in _LEADERS
        for replicas in _REPLICAS[:2]
    ]
    combos += [tuple(rng.choice(field) for field in (_TOPIC_IDS, _PARTITION_IDS, _ISRS, _LEADERS, _REPLICAS)) for _ in range(2_000)]
    accepted = 0
    for values in combos:
        expected = _outcome(_full_check, values)
        assert _outcome(check_partition_change, values) == expected, values
        accepted += expected is None
    assert 0 < accepted < len(combos)


def test_changes_encoded_from_values_are_the_records_bytes_and_refused_alike():
    changes = [
        ("tid", 0, (2, 3), 2, None),
        ("tid", 1, None, NO_LEADER, None),
        ("tid", 2, (1,), LEADER_UNCHANGED, None),
        ("uid", 0, (1, 2), 1, (1, 2, 3)),
    ]
    records = [
        PartitionChangeRecord(topic_id=t, partition_id=p, isr=i, leader=l, replicas=r) for t, p, i, l, r in changes
    ]
    assert encode_partition_changes(changes) == encode_records(records)
    for bad in (("tid", 0, (1, 1), 2, None), ("", 0, None, 1, None), ("tid", 0, None, -3, None)):
        with pytest.raises(ValueError) as refused:
            encode_partition_changes([bad])
        with pytest.raises(ValueError) as by_record:
            PartitionChangeRecord(topic_id=bad[0], partition_id=bad[1], isr=bad[2], leader=bad[3], replicas=bad[4])
        assert str(refused.value) == str(by_record.value)
    with pytest.raises(ValueError):
        encode_partition_changes([("tid", 0, None, 1)])  # a field short


def test_election_change_is_elect_leaders_record_as_values():
    rng = random.Random(2111)
    for _ in range(2_000):
        replicas = tuple(rng.sample(range(6), rng.randint(1, 4)))
        isr = tuple(b for b in replicas if rng.random() < 0.7) or replicas[:1]
        leader = rng.choice((*isr, NO_LEADER))
        partition = PartitionState("tid", rng.randint(0, 9), replicas, isr, leader, 3, 5)
        online = {b for b in range(6) if rng.random() < 0.6}
        removing = rng.choice((None, *replicas))
        unclean = rng.random() < 0.3
        record = elect_leader(
            partition, is_acceptable=online.__contains__, removing=removing, unclean_allowed=unclean
        )
        values = election_change(partition, online.__contains__, removing, unclean)
        if record is None:
            assert values is None
        else:
            assert values == (record.topic_id, record.partition_id, record.isr, record.leader, record.replicas)


def test_noted_index_updates_end_where_the_same_updates_in_order_do():
    """The last add or discard of a member decides, whatever came before;
    keys left empty go; copies stay independent both ways."""
    rng = random.Random(7)
    for _ in range(200):
        start = {key: set(rng.sample(range(10), rng.randint(1, 5))) for key in range(4)}
        direct, noted = _SetIndex({k: set(v) for k, v in start.items()}), _SetIndex({k: set(v) for k, v in start.items()})
        shared = noted.copy() if rng.random() < 0.5 else None  # copy-on-write sets
        for _ in range(rng.randint(0, 30)):
            key, member, present = rng.randrange(5), rng.randrange(10), rng.random() < 0.5
            (direct.add if present else direct.discard)(key, member)
            noted.pending.setdefault(key, {})[member] = present
        assert dict(noted.items()) == dict(direct.items())  # items() makes the pending updates
        assert not noted.pending
        if shared is not None:
            assert dict(shared.items()) == {k: v for k, v in start.items()}


def _fence_cluster(partitions: int) -> tuple[list[Entry], list[PartitionChangeRecord]]:
    records: list = [RegisterBrokerRecord(broker_id=b, incarnation_id=f"b{b}", listeners=LISTENERS) for b in range(4)]
    records += [BrokerRegistrationChangeRecord(broker_id=b, broker_epoch=b, fenced=-1) for b in range(4)]
    records.append(TopicRecord(name="t", topic_id="tid"))
    records += [
        PartitionRecord(topic_id="tid", partition_id=p, replicas=(0, 1 + p % 3, 1 + (p + 1) % 3), isr=(0, 1 + p % 3, 1 + (p + 1) % 3), leader=0)
        for p in range(partitions)
    ]
    changes = [
        PartitionChangeRecord(topic_id="tid", partition_id=p, isr=(1 + p % 3, 1 + (p + 1) % 3), leader=1 + p % 3)
        for p in range(partitions)
    ]
    entries = [Entry(offset, 1, RecordKind.DATA, encode_record(r)) for offset, r in enumerate(records)]
    return entries, changes


@pytest.mark.parametrize("partitions", [3, _PENDING_CHANGES_MAX + 5])
def test_a_fence_applied_one_record_per_call_or_at_once_gives_one_image(partitions):
    """The quorum host hands a state machine one record per call; the bench
    and recovery hand it whole batches: the same images, the same indexes,
    and never more than a bounded number of changes' index updates left
    pending."""
    entries, changes = _fence_cluster(partitions)
    base = len(entries)
    batch = [Entry(base + i, 1, RecordKind.DATA, encode_record(c)) for i, c in enumerate(changes)]
    one_by_one, at_once, by_records = ClusterImage(), ClusterImage(), ClusterImage()
    for image in (one_by_one, at_once, by_records):
        image.apply(entries)
    for entry in batch:
        one_by_one.apply([entry])
        assert one_by_one._pending_changes <= _PENDING_CHANGES_MAX
    at_once.apply(batch)
    for offset, change in enumerate(changes, base):
        by_records.apply_record(change, offset)
    assert one_by_one == at_once == by_records
    for image in (one_by_one, at_once, by_records):
        assert image.leader_count(0) == 0 and image.partitions_with_replica_in_isr(0) == frozenset()
        image.check_indexes()
    assert one_by_one.fingerprint() == at_once.fingerprint()


def test_a_copy_taken_with_updates_pending_has_them_and_stays_independent():
    entries, changes = _fence_cluster(4)
    image = ClusterImage()
    image.apply(entries)
    image.apply_record(changes[0], image.offset)  # one change: its index updates wait
    assert image._pending_changes == 1
    copy = image.copy()
    image.apply_record(changes[1], image.offset)
    assert copy.leader_count(0) == 3 and image.leader_count(0) == 2
    copy.check_indexes()
    image.check_indexes()


def test_apply_partition_changes_stops_at_the_first_change_that_does_not_fit():
    entries, changes = _fence_cluster(3)
    image = ClusterImage()
    image.apply(entries)
    first = image.offset
    values = [(c.topic_id, c.partition_id, c.isr, c.leader, c.replicas) for c in changes]
    values.insert(1, ("tid", 99, None, 1, None))  # no such partition
    with pytest.raises(InvalidRecordError):
        image.apply_partition_changes(values, first)
    assert image.offset == first + 1 and image.leader_count(0) == 2
    image.check_indexes()
    with pytest.raises(ValueError):
        image.apply_partition_changes(values[2:], first)  # below the image's offset


def _random_value(rng: random.Random, depth: int = 0):
    choice = rng.randrange(9 if depth < 2 else 6)
    if choice == 0:
        return rng.randint(-3, 12)
    if choice == 1:
        return rng.choice(("tid", "uid", "", "t", "x" * 300))
    if choice == 2:
        return None
    if choice == 3:
        return rng.random() < 0.5
    if choice == 4:
        return rng.choice((b"\x00", 1.5, 2**40))
    if choice == 5:
        return rng.choice(((1, 2), (2,), (1, 1), (), (0, 1, 2, 3)))
    if choice == 6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if choice == 7:
        return {rng.choice(("a", "b")): _random_value(rng, depth + 1)}
    return tuple(_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))


def test_the_controllers_state_machine_never_raises_whatever_the_records():
    """ControllerStateMachine declares ``apply_never_raises`` (the host hands
    it whole runs, and would stop the node if it raised): records of every
    type with random field values, random bytes and truncated records are
    skipped or applied, never raised, and a run in one call ends where the
    same records one per call end."""
    from registration import ControllerStateMachine
    from registration._records import RECORD_TYPES, _FIELD_NAMES

    assert ControllerStateMachine.apply_never_raises is True
    entries, _ = _fence_cluster(6)
    rng = random.Random(595)
    garbage = []
    for _ in range(3_000):
        kind = rng.randrange(4)
        if kind == 0:
            cls = rng.choice(RECORD_TYPES)
            fields = [_random_value(rng) for _ in _FIELD_NAMES[cls]]
            data = msgpack.packb([cls.TYPE_CODE, 0, fields], use_bin_type=True)
        elif kind == 1:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 12)))
        elif kind == 2:
            data = encode_record(PartitionChangeRecord(topic_id="tid", partition_id=rng.randrange(8), leader=rng.randrange(4)))
            data = data[: rng.randrange(len(data) + 1)] + bytes(rng.randrange(2))
        else:
            data = msgpack.packb([_random_value(rng) for _ in range(rng.randint(0, 4))], use_bin_type=True)
        garbage.append(data)
    base = len(entries)
    run = [Entry(base + i, 1, RecordKind.DATA, data) for i, data in enumerate(garbage)]
    at_once, one_by_one = ControllerStateMachine(), ControllerStateMachine()
    for machine in (at_once, one_by_one):
        machine.image.apply(entries)
    at_once.apply(run)
    for entry in run:
        one_by_one.apply([entry])
    assert at_once.image == one_by_one.image  # offsets included
    assert at_once.snapshot() == one_by_one.snapshot()  # the register map's records too
    assert at_once.image.skipped_records == one_by_one.image.skipped_records > 1_000
    at_once.image.check_indexes()


def _random_change_values(rng: random.Random) -> tuple:
    """A partition change's field values in the record's shape, fitting the
    image of ``_fence_cluster`` or not (unknown partitions, a leader out of
    the ISR, an ISR out of the replicas), unchanged fields included."""
    isr = rng.choice((None, None, (1,), (2,), (1, 2), (2, 3), (0, 1, 2), (1, 3), (3, 0), (4,)))
    leader = rng.choice((LEADER_UNCHANGED, LEADER_UNCHANGED, NO_LEADER, 0, 1, 2, 3, 4))
    replicas = rng.choice((None,) * 8 + ((1, 2), (0, 1, 2, 3), (2, 3, 1)))
    return ("tid" if rng.random() < 0.95 else "uid", rng.randrange(12), isr, leader, replicas)


def test_a_run_of_partition_changes_applies_as_the_records_do_one_at_a_time(caplog):
    """Voters gather a run of partition changes and apply it in one loop
    (``ClusterImage._change_partitions``, a copy of ``_change_partition``'s
    body, issue 21): random runs, fitting or not, among other records,
    control records, undecodable bytes and changes framed in msgpack's
    longer forms, end where the records applied one at a time through
    ``apply_record`` end: the same image and indexes, the same records
    skipped with the same messages."""
    rng = random.Random(2021)
    entries, _ = _fence_cluster(10)
    for trial in range(60):
        batch_values: list = []
        for _ in range(rng.randint(1, 120)):
            kind = rng.random()
            if kind < 0.8:
                batch_values.append(("change", _random_change_values(rng)))
            elif kind < 0.86:
                batch_values.append(("long-framed", _random_change_values(rng)))
            elif kind < 0.9:
                batch_values.append(("control", None))
            elif kind < 0.94:
                batch_values.append(("garbage", rng.choice((b"\x93\x05\x00\x95\xa3tid", b"\x93\x05\x00\x95", b"\xc1"))))
            else:
                batch_values.append(("record", rng.randrange(4)))
        base = len(entries)
        batch: list[Entry] = []
        for offset, (kind, value) in enumerate(batch_values, base):
            if kind == "change":
                data = encode_partition_changes([value])[0] if value[0] == "tid" else msgpack.packb(
                    [PartitionChangeRecord.TYPE_CODE, 0, list(value)], use_bin_type=True
                )
            elif kind == "long-framed":  # array 16 headers: not the encoder's prefix, decodes alike
                body = msgpack.packb(list(value), use_bin_type=True)[1:]
                data = b"\xdc\x00\x03" + bytes((PartitionChangeRecord.TYPE_CODE, 0)) + b"\xdc\x00\x05" + body
            elif kind == "control":
                batch.append(Entry(offset, 1, RecordKind.LEADER_CHANGE, b""))
                continue
            elif kind == "garbage":
                data = value
            else:
                data = encode_record(BrokerRegistrationChangeRecord(broker_id=value, broker_epoch=value, fenced=1))
            batch.append(Entry(offset, 1, RecordKind.DATA, data))

        at_once = ClusterImage()
        at_once.apply(entries)
        one_at_a_time = ClusterImage()
        one_at_a_time.apply(entries)
        caplog.clear()
        at_once.apply(batch)
        messages = [r.getMessage() for r in caplog.records]
        expected = []
        for entry in batch:
            if entry.kind is not RecordKind.DATA:
                one_at_a_time.apply_record(NoOpRecord(), entry.offset)
                continue
            try:
                one_at_a_time.apply_record(decode_record(entry.data), entry.offset)
            except (RecordDecodeError, InvalidRecordError) as error:
                expected.append(f"skipped the record at offset {entry.offset}: {error}")
                one_at_a_time.apply_record(NoOpRecord(), entry.offset)
        assert messages == expected, trial
        assert at_once.skipped_records == len(expected)
        assert at_once == one_at_a_time and at_once.fingerprint() == one_at_a_time.fingerprint(), trial
        at_once.check_indexes()


def test_the_controllers_run_of_changes_stops_where_the_records_would():
    """``apply_partition_changes`` (the controller's working image) applies
    what ``apply_record`` would, one change at a time, up to the first that
    does not fit, and raises that change's error."""
    rng = random.Random(631)
    entries, _ = _fence_cluster(10)
    for _ in range(100):
        values = [_random_change_values(rng) for _ in range(rng.randint(1, 40))]
        run, by_records = ClusterImage(), ClusterImage()
        run.apply(entries)
        by_records.apply(entries)
        first = run.offset
        refusal = None
        for offset, change in enumerate(values, first):
            record = PartitionChangeRecord(
                topic_id=change[0], partition_id=change[1], isr=change[2], leader=change[3], replicas=change[4]
            )
            try:
                by_records.apply_record(record, offset)
            except InvalidRecordError as error:
                refusal = str(error)
                break
        if refusal is None:
            run.apply_partition_changes(values, first)
        else:
            with pytest.raises(InvalidRecordError) as raised:
                run.apply_partition_changes(values, first)
            assert str(raised.value) == refusal
        assert run == by_records and run.fingerprint() == by_records.fingerprint()
        run.check_indexes()


def test_the_partitions_in_a_brokers_isr_come_in_key_order():
    """``partitions_in_isr_of`` (the order a fence elects and writes its
    changes in) is the states of ``sorted(partitions_with_replica_in_isr)``,
    topic ids compared as strings, partition ids as numbers."""
    rng = random.Random(21)
    records: list = [RegisterBrokerRecord(broker_id=b, incarnation_id=f"b{b}", listeners=LISTENERS) for b in range(5)]
    topic_ids = ["t10", "t9", "t1", "T", "t", "t_", "t0"]
    for topic_id in topic_ids:
        records.append(TopicRecord(name=f"name-{len(records)}", topic_id=topic_id))
        for partition_id in rng.sample(range(1_000), 40):
            replicas = tuple(rng.sample(range(5), 3))
            isr = replicas[: rng.randint(1, 3)]
            records.append(
                PartitionRecord(topic_id=topic_id, partition_id=partition_id, replicas=replicas, isr=isr, leader=isr[0])
            )
    image = ClusterImage()
    image.apply([Entry(offset, 1, RecordKind.DATA, encode_record(r)) for offset, r in enumerate(records)])
    for broker_id in range(6):
        expected = [image.partition(*key) for key in sorted(image.partitions_with_replica_in_isr(broker_id))]
        assert image.partitions_in_isr_of(broker_id) == expected
        assert all(state is not None for state in expected)
    assert image.partitions_in_isr_of(5) == []


def test_an_image_copy_shares_no_leaders_set_and_each_side_changes_its_own_in_place():
    """``ClusterImage.copy`` (the controller's activation) copies the leaders
    index set by set: a fence then moves leaderships on both sides, the
    working image's and the committed one's, without copying a shared set
    first, and neither sees the other's changes, copies of copies too."""
    entries, changes = _fence_cluster(30)
    original = ClusterImage()
    original.apply(entries)
    owned_before = {broker_id: members for broker_id, members in original._led_by.items()}
    copy = original.copy()
    assert all(copy._led_by._sets[b] is not members for b, members in owned_before.items())
    copy_of_copy = copy.copy()
    first = original.offset

    for offset, change in enumerate(changes[:20], first):
        original.apply_record(change, offset)
    original.apply_record(NoOpRecord(), first + 20)  # an apply makes the noted index updates
    assert original._led_by._sets[0] is owned_before[0]  # changed in place: no copy
    for offset, change in enumerate(changes[10:], first):
        copy.apply_record(change, offset)
    copy.apply_record(NoOpRecord(), first + 20)

    assert original.leader_count(0) == 10 and copy.leader_count(0) == 10 and copy_of_copy.leader_count(0) == 30
    assert original.partitions_led_by(0) != copy.partitions_led_by(0)
    reference = ClusterImage()
    reference.apply(entries)
    assert copy_of_copy == reference and copy_of_copy.fingerprint() == reference.fingerprint()
    for image in (original, copy, copy_of_copy):
        image.check_indexes()
