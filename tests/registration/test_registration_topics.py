"""Topics: creation, replica placement (rack-aware), errors, deletion and
describe answers (KIP-631 topics on the controller; seed 004 "Creating/
deleting topics")."""

from __future__ import annotations

from collections import Counter

import pytest
import trio
from _registration_helpers import Harness

from registration import (
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeTopicsRequest,
    ErrorCode,
    ListTopicsRequest,
    NewTopic,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    place_replicas,
)
from registration.client import AdminClient


def _cluster(brokers=(1, 2, 3), racks=None) -> Harness:
    harness = Harness()
    for broker_id in brokers:
        harness.start_broker(broker_id, rack=None if racks is None else racks[broker_id])
    return harness


def test_create_topic_writes_the_topic_and_its_partitions_in_one_batch():
    """Seed 004 B: a new topic's partitions get replicas, ISR = replicas and
    leader = the first replica, written with the topic as one batch."""
    harness = _cluster()

    result = harness.create_topic("orders", 4, 3)

    assert result.error is ErrorCode.NONE
    records = harness.batch_records()
    assert records[0] == TopicRecord(name="orders", topic_id=result.topic_id)
    assert [type(r) for r in records[1:]] == [PartitionRecord] * 4
    for partition in harness.image.partitions_of("orders"):
        assert partition.isr == partition.replicas and partition.leader == partition.replicas[0]
        assert (partition.leader_epoch, partition.partition_epoch) == (0, 0)


def test_replicas_and_leaders_spread_evenly_over_online_brokers():
    """Replicas spread over the online brokers (Kafka's striped placement):
    each broker gets the same number of replicas and of leaderships."""
    harness = _cluster((1, 2, 3, 4, 5))

    harness.create_topic("t", 20, 3)

    partitions = harness.image.partitions_of("t")
    assert Counter(p.leader for p in partitions) == {b: 4 for b in (1, 2, 3, 4, 5)}
    assert Counter(b for p in partitions for b in p.replicas) == {b: 12 for b in (1, 2, 3, 4, 5)}
    assert len({p.replicas for p in partitions}) > 5  # followers do not always pair alike


def test_leadership_keeps_spreading_across_topics():
    """One-partition topics do not all land their leader on the same broker."""
    harness = _cluster()

    for index in range(6):
        harness.create_topic(f"t{index}", 1, 1)

    assert Counter(harness.partition(f"t{index}").leader for index in range(6)) == {1: 2, 2: 2, 3: 2}


def test_fenced_and_stopping_brokers_get_no_replicas():
    """Replicas go to online brokers only (seed 004 question 5: "we only
    assign replicas to live brokers")."""
    harness = _cluster((1, 2, 3, 4))
    harness.heartbeat(2, want_fence=True)
    harness.heartbeat(4, want_shutdown=True)

    harness.create_topic("t", 6, 2)

    assert {b for p in harness.image.partitions_of("t") for b in p.replicas} == {1, 3}


def test_placement_is_rack_aware_when_racks_are_set():
    """Rack awareness: every partition spans min(replication factor, racks)
    racks, and leaders still spread evenly."""
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    harness = _cluster(tuple(racks), racks)

    harness.create_topic("three", 12, 3)
    harness.create_topic("two", 12, 2)
    harness.create_topic("four", 12, 4)

    for name, spans in (("three", 3), ("two", 2), ("four", 3)):
        for partition in harness.image.partitions_of(name):
            assert len({racks[b] for b in partition.replicas}) == spans, partition
    assert Counter(p.leader for p in harness.image.partitions_of("three")) == {b: 2 for b in racks}


def test_place_replicas_gives_distinct_replicas_and_checks_its_input():
    for count in range(1, 8):
        brokers = [(b, None) for b in range(count)]
        for factor in range(1, count + 1):
            for replicas in place_replicas(brokers, partition_count=3 * count, replication_factor=factor, start=5):
                assert len(set(replicas)) == factor
    with pytest.raises(ValueError):
        place_replicas([(1, None)], partition_count=1, replication_factor=2)


def test_a_topic_that_exists_is_refused():
    """Kafka TOPIC_ALREADY_EXISTS (36)."""
    harness = _cluster()
    harness.create_topic("t", 1, 1)
    log_end = harness.log_end

    result = harness.create_topic("t", 1, 1)

    assert result.error is ErrorCode.TOPIC_ALREADY_EXISTS
    assert harness.log_end == log_end


def test_a_topic_named_twice_in_one_request_is_refused():
    """Kafka answers INVALID_REQUEST for a name repeated in one request."""
    harness = _cluster()
    new = NewTopic(name="t", partitions=1, replication_factor=1)

    response = harness.request(CreateTopicsRequest(topics=(new, new)))

    assert [r.error for r in response.results] == [ErrorCode.INVALID_REQUEST] * 2
    assert harness.image.topic("t") is None


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/", "ünïcode"])
def test_bad_topic_names_are_refused(name):
    """Kafka's topic-name rules: 1 to 249 of [a-zA-Z0-9._-], not "." or "..";
    INVALID_TOPIC_EXCEPTION (17)."""
    harness = _cluster()

    result = harness.create_topic(name, 1, 1)

    assert result.error is ErrorCode.INVALID_TOPIC_EXCEPTION
    assert result.message


def test_a_replication_factor_above_the_online_brokers_is_refused():
    """Kafka INVALID_REPLICATION_FACTOR (38): too few online brokers."""
    harness = _cluster((1, 2))
    harness.register(3)  # registered, fenced: does not count

    result = harness.create_topic("t", 1, 3)

    assert result.error is ErrorCode.INVALID_REPLICATION_FACTOR
    assert "2 are online" in result.message


@pytest.mark.parametrize(
    ("partitions", "factor", "error"),
    [
        (0, 1, ErrorCode.INVALID_PARTITIONS),
        (-3, 1, ErrorCode.INVALID_PARTITIONS),
        (1, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
    ],
)
def test_bad_counts_are_refused(partitions, factor, error):
    """Kafka INVALID_PARTITIONS (37) and INVALID_REPLICATION_FACTOR (38)."""
    harness = _cluster()

    assert harness.create_topic("t", partitions, factor).error is error


def test_valid_topics_are_created_beside_refused_ones():
    """Per-topic results, as in Kafka's CreateTopics: the valid topics of a
    request are created (in one batch) even when others are refused."""
    harness = _cluster()
    request = CreateTopicsRequest(
        topics=(
            NewTopic(name="good", partitions=2, replication_factor=2),
            NewTopic(name="bad name", partitions=1, replication_factor=1),
            NewTopic(name="also-good", partitions=1, replication_factor=3),
        )
    )

    response = harness.request(request)

    assert [r.error for r in response.results] == [ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.NONE]
    assert sorted(harness.image.topics) == ["also-good", "good"]


def test_delete_topics_removes_the_topic_and_its_partitions():
    """Seed 004 B: deleting a topic removes it with all its partitions."""
    harness = _cluster()
    topic_id = harness.create_topic("t", 3, 2).topic_id

    response = harness.request(DeleteTopicsRequest(names=("t",)))

    assert response.results[0].error is ErrorCode.NONE
    assert harness.batch_records() == [RemoveTopicRecord(topic_id=topic_id)]
    assert harness.image.topic("t") is None and harness.image.partition_count == 0
    assert harness.image.partitions_led_by(1) == frozenset()
    harness.check_invariants()


def test_deleting_an_unknown_topic_is_an_error():
    """Kafka UNKNOWN_TOPIC_OR_PARTITION (3)."""
    harness = _cluster()

    response = harness.request(DeleteTopicsRequest(names=("nope",)))

    assert response.results[0].error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_recreated_topic_gets_a_new_id():
    """Topic ids are unique in the log, so a recreated topic is a new one
    (KIP-516's reason for topic ids)."""
    harness = _cluster()
    first = harness.create_topic("t", 1, 1).topic_id
    harness.request(DeleteTopicsRequest(names=("t",)))

    second = harness.create_topic("t", 1, 1).topic_id

    assert first != second and len(second) == 22


def test_describe_answers_from_the_committed_image_with_its_offset():
    """Issue: describe requests are answered leader-local (from the committed
    image, not the speculative one) and carry the image offset."""
    harness = _cluster()
    harness.create_topic("t", 2, 3)
    harness.auto_commit = False
    pending = harness.request(CreateTopicsRequest(topics=(NewTopic(name="u", partitions=1, replication_factor=1),)))
    assert pending.response is None

    cluster = harness.request(DescribeClusterRequest())
    topics = harness.request(DescribeTopicsRequest())

    assert cluster.offset == topics.offset == harness.image.offset == harness.committed_end
    assert (cluster.topic_count, cluster.partition_count) == (1, 2)
    assert [t.name for t in topics.topics] == ["t"]
    assert [b.state for b in cluster.brokers] == ["Online"] * 3
    unknown = harness.request(DescribeTopicsRequest(names=("u",)))
    assert unknown.topics[0].error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_one_request_creates_at_most_ten_thousand_partitions():
    """Kafka bounds a user operation to 10,000 records
    (MAX_RECORDS_PER_USER_OP). Found by hand: with a bound of a million,
    ``kraft-topics create --partitions 1000000`` held the controller's loop
    for minutes; the broker missed its session and was fenced (a million
    partition changes more), and every describe after it timed out."""
    harness = _cluster()
    log_end = harness.log_end
    too_many = harness.create_topic("huge", 10_001, 1)
    assert too_many.error is ErrorCode.INVALID_PARTITIONS
    assert "at most 10000 partitions per request" in too_many.message
    assert harness.log_end == log_end
    both = harness.request(
        CreateTopicsRequest(
            topics=(NewTopic(name="a", partitions=6_000, replication_factor=1), NewTopic(name="b", partitions=6_000, replication_factor=1))
        )
    )
    assert [result.error for result in both.results] == [ErrorCode.NONE, ErrorCode.INVALID_PARTITIONS]
    assert harness.create_topic("most", 10_000, 1).error is ErrorCode.NONE


def test_a_describe_of_more_partitions_than_one_answer_holds_is_refused_and_a_listing_pages():
    """A DescribeTopics of every topic described every partition in one go
    (a million took the controller's loop minutes, and the answer was over
    the frame limit, so never sent): past DESCRIBE_PARTITIONS_MAX it is
    refused, counted first. ListTopics names every topic, page by page."""
    harness = _cluster()
    for name in ("a", "b", "c"):
        assert harness.create_topic(name, 4_000, 1).error is ErrorCode.NONE

    everything = harness.request(DescribeTopicsRequest())
    assert everything.error is ErrorCode.INVALID_REQUEST and not everything.topics
    assert "every topic holds 12000 partitions, more than one answer describes (10000)" in everything.message
    two = harness.request(DescribeTopicsRequest(names=("a", "c", "unknown")))
    assert [(t.name, len(t.partitions), t.error) for t in two.topics] == [
        ("a", 4_000, ErrorCode.NONE), ("c", 4_000, ErrorCode.NONE), ("unknown", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]  # fmt: skip

    listing = harness.request(ListTopicsRequest())
    assert [(t.name, t.partition_count) for t in listing.topics] == [("a", 4_000), ("b", 4_000), ("c", 4_000)]
    assert not listing.more and listing.offset == harness.image.offset


def test_a_listing_pages_by_name(monkeypatch):
    import registration._controller as controller_module

    monkeypatch.setattr(controller_module, "LIST_TOPICS_PAGE_MAX", 2)
    harness = _cluster()
    for name in ("d", "a", "c", "b", "e"):
        harness.create_topic(name, 1, 1)
    pages = []
    after = None
    while True:
        page = harness.request(ListTopicsRequest(after=after))
        pages.append([t.name for t in page.topics])
        if not page.more:
            break
        after = page.topics[-1].name
    assert pages == [["a", "b"], ["c", "d"], ["e"]]
    assert [t.name for t in harness.request(ListTopicsRequest(after="bb")).topics] == ["c", "d"]


def test_a_linearizable_describe_is_answered_after_the_read_is_confirmed():
    """design.md: a linearizable read waits for a ReadIndex round; the
    controller hands the runtime a function to answer with afterwards."""
    harness = _cluster()

    reply = harness.controller.handle_request(DescribeClusterRequest(linearizable=True), harness.now_ms)

    assert reply.response is None and reply.is_read and not reply.is_write
    assert reply.on_read_confirmed().offset == harness.image.offset


class _AdminOverHarness(AdminClient):
    """The real ``AdminClient`` request logic (paging included), its
    requests answered by the harness's controller instead of over TCP."""

    def __init__(self, harness) -> None:  # no QuorumClient: nothing travels
        self.harness = harness
        self.requests: list[object] = []

    async def request(self, request, expected, *, idempotent):
        self.requests.append(request)
        response = self.harness.request(request)
        assert isinstance(response, expected)
        return response


def test_describing_every_topic_asks_in_groups_one_answer_holds(monkeypatch):
    """``kraft-topics describe`` without names: listed (page by page), then
    described in groups of at most DESCRIBE_PARTITIONS_MAX partitions, so
    that no request is refused however many topics there are."""
    import registration._controller as controller_module
    from registration.cli import _describe_every_topic

    monkeypatch.setattr(controller_module, "LIST_TOPICS_PAGE_MAX", 2)
    harness = _cluster()
    for name, partitions in (("a", 6_000), ("b", 3_000), ("c", 2_000), ("d", 9_000), ("e", 1)):
        assert harness.create_topic(name, partitions, 1).error is ErrorCode.NONE
    admin = _AdminOverHarness(harness)

    listings = trio.run(admin.list_topics)
    assert [(t.name, t.partition_count) for t in listings] == [("a", 6_000), ("b", 3_000), ("c", 2_000), ("d", 9_000), ("e", 1)]
    assert len(admin.requests) == 3  # pages of two

    admin.requests.clear()
    response = trio.run(_describe_every_topic, admin, False)
    assert not response.error
    assert [(t.name, len(t.partitions)) for t in response.topics] == [(t.name, t.partition_count) for t in listings]
    groups = [request.names for request in admin.requests if isinstance(request, DescribeTopicsRequest)]
    assert groups == [("a", "b"), ("c",), ("d", "e")]
