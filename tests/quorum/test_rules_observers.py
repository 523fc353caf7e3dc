"""How a leader answers observers' (brokers') parked Fetches (issue 21).

An observer applies committed records only, so the leader answers its
parked Fetch when the high watermark moves, with the records up to it, not
on every append: one answer per commit instead of two. A voter's answer in
the same step goes out first, and observers are answered a bounded group
per step (``OBSERVER_ANSWERS_PER_STEP_MAX`` answers carrying about
``OBSERVER_ANSWER_RECORDS_PER_STEP_MAX`` records). The observers here are bare
ids whose Fetches the test writes (no core behind them): the leader's side
is what is under test."""

from __future__ import annotations

from harness import Cluster, messages_of

from quorum import ErrorCode, FetchRequest, FetchResponse, Message
from quorum._node import OBSERVER_ANSWER_RECORDS_PER_STEP_MAX, OBSERVER_ANSWERS_PER_STEP_MAX

VOTERS = (1, 2, 3)


def observer_fetch(cluster: Cluster, src: int, fetch_offset: int, request: int) -> FetchRequest:
    """Observer ``src``'s Fetch from ``fetch_offset`` (its log holds the
    leader's records below it), request number ``request`` of session 1."""
    leader = cluster.node(1)
    return FetchRequest(
        src=src,
        dst=1,
        epoch=leader.epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=leader.log.epoch_at(fetch_offset - 1) or 0 if fetch_offset else 0,
        request_id=(1 << 32) + request,
    )


def to_observers(message: Message) -> bool:
    return message.dst not in VOTERS


def to_voters(message: Message) -> bool:
    return message.dst in VOTERS


def leader_with_parked_observers(observers: range, **overrides: object) -> Cluster:
    """Voters 1..3, node 1 leading with everything committed; each observer
    has fetched once (a new session is answered at once, to learn the high
    watermark) and has its second Fetch parked."""
    cluster = Cluster(3, **overrides)
    cluster.elect(1)
    end = cluster.node(1).log.end_offset
    for observer in observers:
        [first] = messages_of(cluster.inject(observer_fetch(cluster, observer, end, 1)))
        assert isinstance(first, FetchResponse) and first.high_watermark == end
        cluster.drop(dst=observer)
        assert messages_of(cluster.inject(observer_fetch(cluster, observer, end, 2))) == []  # parked
    return cluster


def test_a_parked_observer_is_answered_once_per_commit_with_the_committed_record():
    """An observer that fetches again at once after every answer hears of a
    record once: when it is committed, with the high watermark that commits
    it (before issue 21: once with the record when appended, once more with
    the high watermark)."""
    observers = range(100, 110)
    cluster = leader_with_parked_observers(observers)
    end = cluster.node(1).log.end_offset
    answers: dict[int, list[FetchResponse]] = {observer: [] for observer in observers}
    requests = {observer: 2 for observer in observers}

    cluster.propose(1, b"unfence")
    while cluster.in_flight:
        cluster.deliver(where=to_voters)
        for response in cluster.drop(FetchResponse, where=to_observers):
            answers[response.dst].append(response)
            requests[response.dst] += 1
            offset = response.records[-1].offset + 1 if response.records else end
            cluster.inject(observer_fetch(cluster, response.dst, offset, requests[response.dst]))

    assert cluster.node(1).high_watermark == end + 1
    for observer, responses in answers.items():
        assert [(r.high_watermark, [e.data for e in r.records]) for r in responses] == [(end + 1, [b"unfence"])], observer


def test_an_append_answers_the_parked_voters_only():
    """A record appended goes at once to the voters whose acknowledgement
    commits it; parked observers wait for the commit."""
    cluster = leader_with_parked_observers(range(100, 105))

    cluster.propose(1, b"a")

    assert sorted(m.dst for m in cluster.pending(FetchResponse)) == [2, 3]


def test_without_answers_on_commit_an_append_answers_every_parked_fetch():
    """``observers_answered_on_commit`` off (kept for simulator seeds found
    before issue 21): every parked Fetch is answered on every append."""
    cluster = leader_with_parked_observers(range(100, 105), observers_answered_on_commit=False)

    cluster.propose(1, b"a")

    assert sorted(m.dst for m in cluster.pending(FetchResponse)) == [2, 3, *range(100, 105)]


def test_a_voters_answer_goes_out_before_the_observers_its_fetch_makes_due():
    """A voter's Fetch that commits a record (the observers are then due an
    answer) and finds the next one is answered first in the step's output:
    a voter's answer never waits behind brokers' answers."""
    cluster = leader_with_parked_observers(range(100, 110))
    cluster.propose(1, b"a")
    cluster.deliver(FetchResponse, where=to_voters)  # the voters take a
    acknowledgement = cluster.take_one(FetchRequest, src=2)  # it commits a
    cluster.drop(FetchRequest, src=3)
    cluster.propose(1, b"b")
    cluster.drop(FetchResponse)

    output = cluster.inject(acknowledgement)

    answers = [m for m in messages_of(output) if isinstance(m, FetchResponse)]
    assert [m.dst for m in answers] == [2, *range(100, 110)]
    assert [e.data for e in answers[0].records] == [b"b"]
    assert all(m.high_watermark == cluster.node(1).high_watermark for m in answers[1:])


def test_observers_due_are_answered_a_bounded_group_per_step_in_id_order():
    """When more observers are due than one step answers, the rest are
    answered by the next steps (a tick is one), in id order, each once."""
    extra = 37
    observers = range(100, 100 + OBSERVER_ANSWERS_PER_STEP_MAX + extra)
    cluster = leader_with_parked_observers(observers)
    cluster.propose(1, b"a")
    cluster.deliver(FetchResponse, where=to_voters)
    acknowledgement = cluster.take_one(FetchRequest, src=2)
    cluster.drop()

    first = [m.dst for m in messages_of(cluster.inject(acknowledgement)) if isinstance(m, FetchResponse)]
    cluster.tick(1)
    second = [m.dst for m in messages_of(cluster.replica(1).outputs[-1]) if isinstance(m, FetchResponse)]
    cluster.tick(1)

    assert first == list(observers)[:OBSERVER_ANSWERS_PER_STEP_MAX]
    assert second == list(observers)[OBSERVER_ANSWERS_PER_STEP_MAX:]
    assert messages_of(cluster.replica(1).outputs[-1]) == []


def test_observers_due_are_answered_a_bounded_number_of_records_per_step():
    """Brokers lagging by many records (5,000 brokers starting at once, each
    first heartbeat an unfencing record): a step answers observers until
    their answers carry ``OBSERVER_ANSWER_RECORDS_PER_STEP_MAX`` records,
    however few answers that is (512 answers of thousands of records each
    were ~250 ms of encoding a step, and the followers' fetch timeouts
    fired, issue 21); the next steps answer the rest."""
    records_each = 100
    per_step = -(-OBSERVER_ANSWER_RECORDS_PER_STEP_MAX // records_each)  # the step that reaches the bound answers
    observers = range(100, 100 + per_step + 20)
    cluster = leader_with_parked_observers(observers)
    cluster.propose(1, *[b"unfence %d" % i for i in range(records_each)])
    cluster.deliver(FetchResponse, where=to_voters)
    acknowledgement = cluster.take_one(FetchRequest, src=2)
    cluster.drop()

    first = [m for m in messages_of(cluster.inject(acknowledgement)) if isinstance(m, FetchResponse)]
    cluster.tick(1)
    second = [m for m in messages_of(cluster.replica(1).outputs[-1]) if isinstance(m, FetchResponse)]

    assert per_step < OBSERVER_ANSWERS_PER_STEP_MAX
    assert [m.dst for m in first] == list(observers)[:per_step]
    assert [m.dst for m in second] == list(observers)[per_step:]
    assert {len(m.records) for m in first + second} == {records_each}


def test_an_observers_answer_of_more_records_than_a_step_carries_still_goes_out():
    """At least one observer is answered per step, whatever its answer
    carries: a broker behind by more than the bound still catches up."""
    records_each = OBSERVER_ANSWER_RECORDS_PER_STEP_MAX + 1
    cluster = leader_with_parked_observers(range(100, 103))
    cluster.propose(1, *[b"r"] * records_each)
    cluster.deliver(FetchResponse, where=to_voters)
    acknowledgement = cluster.take_one(FetchRequest, src=2)
    cluster.drop()

    answered = []
    for step in range(3):
        output = cluster.inject(acknowledgement) if step == 0 else cluster.tick_once(1)
        answers = [m for m in messages_of(output) if isinstance(m, FetchResponse) and m.dst >= 100]
        assert [len(m.records) for m in answers] == [records_each]
        answered += [m.dst for m in answers]
    assert answered == [100, 101, 102]


def test_observers_long_polls_ending_together_are_answered_a_bounded_group_per_tick():
    """Parked broker Fetches whose long poll ends on one tick are answered
    ``OBSERVER_ANSWERS_PER_STEP_MAX`` a tick, the rest on the next ticks
    (still expired then); a voter's parked Fetch at once with them."""
    extra = 37
    observers = range(100, 100 + OBSERVER_ANSWERS_PER_STEP_MAX + extra)
    cluster = leader_with_parked_observers(observers)
    cluster.run(3, nodes=(2, 3))  # the followers' Fetches park too
    assert cluster.pending() == []
    config = cluster.node(1).config

    answered: list[list[int]] = []
    for _ in range(config.ticks(config.fetch_max_wait_ms) + 2):
        answers = [m.dst for m in messages_of(cluster.tick_once(1)) if isinstance(m, FetchResponse)]
        if answers:
            answered.append(answers)

    assert [2, 3] == sorted(d for d in answered[0] if d < 100)
    assert [d for d in answered[0] if d >= 100] == list(observers)[:OBSERVER_ANSWERS_PER_STEP_MAX]
    assert answered[1:] == [list(observers)[OBSERVER_ANSWERS_PER_STEP_MAX:]]


def test_a_read_answers_the_parked_voters_only():
    """ReadIndex (Raft thesis §6.4) needs fresh Fetches from voters only; an
    observer's parked Fetch is left parked."""
    cluster = leader_with_parked_observers(range(100, 105))

    output = cluster.read_index(1, "r")

    assert sorted(m.dst for m in messages_of(output) if isinstance(m, FetchResponse)) == [2, 3]


def test_an_observer_keeps_the_high_watermark_its_leaders_answer_carried():
    """``answered_high_watermark``: the leader's high watermark as sent, not
    bounded by the observer's log (a broker's freshness proof compares its
    log end with it); None once an answer takes no position (an error)."""
    cluster = Cluster(3, observers=(4,))
    cluster.elect(1)
    assert cluster.node(4).answered_high_watermark is None
    cluster.tick(4)
    cluster.deliver_all()
    observer = cluster.node(4)
    assert observer.answered_high_watermark == cluster.node(1).high_watermark == observer.log.end_offset

    cluster.propose(1, b"a")
    cluster.deliver_all()
    assert observer.answered_high_watermark == cluster.node(1).high_watermark == observer.log.end_offset

    # Its next Fetch is parked on the leader: let the long poll end, and
    # hand the Fetch after that to a leader that has resigned meanwhile.
    config = cluster.node(1).config
    cluster.tick(1, times=config.ticks(config.fetch_max_wait_ms))
    cluster.deliver(FetchResponse, dst=4)
    [fetch] = cluster.drop(FetchRequest, src=4)
    cluster.resign(1)
    cluster.inject(fetch)
    [refusal] = cluster.deliver(FetchResponse, dst=4)
    assert refusal.error is not ErrorCode.NONE
    assert observer.answered_high_watermark is None
