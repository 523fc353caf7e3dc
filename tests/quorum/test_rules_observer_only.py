"""A broker with a voter's node id (KIP-631: brokers and controllers share one
id space; two processes given one id is an operator's first mistake).

A broker is an observer for good (``QuorumConfig.observer_only``) and marks
every Fetch so. A leader that holds the Fetch's sender id as a voter's
refuses it with INCONSISTENT_VOTER_SET: with a static voter set nothing
else tells the broker from the voter, and counting the broker's fetch
offset as the voter's acknowledgement could commit a record that a
majority of voters does not hold."""

from __future__ import annotations

import random

import pytest
from harness import Cluster, fresh_node, make_config, messages_of

from quorum import ErrorCode, FetchRequest, FetchResponse, Voter, VoterSet
from quorum._node import CoreHooks, QuorumNode

VOTERS = (1, 2, 3)


def broker_fetch(cluster: Cluster, src: int, *, observer: bool) -> FetchRequest:
    """A Fetch from ``src`` that holds the leader's whole log: counted, it
    acknowledges every record."""
    leader = cluster.node(1)
    return FetchRequest(
        src=src,
        dst=1,
        epoch=leader.epoch,
        fetch_offset=leader.log.end_offset,
        last_fetched_epoch=leader.log.last_epoch,
        request_id=(7 << 32) + 1,
        observer=observer,
    )


def leader_with_uncommitted_record() -> Cluster:
    """Node 1 leads voters 1..3; node 3 is down; a record is appended and
    acknowledged by nobody yet."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.crash(3)
    cluster.propose(1, b"x")
    cluster.drop(FetchResponse)
    return cluster


def test_a_broker_fetch_naming_a_voter_id_is_refused_and_commits_nothing():
    cluster = leader_with_uncommitted_record()
    leader = cluster.node(1)
    high_watermark = leader.high_watermark
    assert leader.log.end_offset > high_watermark

    [answer] = messages_of(cluster.inject(broker_fetch(cluster, 2, observer=True)))

    assert isinstance(answer, FetchResponse) and answer.error is ErrorCode.INCONSISTENT_VOTER_SET
    assert answer.records == ()
    assert leader.high_watermark == high_watermark  # node 2's acknowledgement was not taken
    assert leader.counters["fetches_refused_observer_with_voter_id"] == 1


def test_the_same_fetch_unmarked_is_the_voter_s_acknowledgement():
    """The counterpart: what the mark protects against. Unmarked, the Fetch
    is voter 2's, and it commits the record."""
    cluster = leader_with_uncommitted_record()
    leader = cluster.node(1)
    end = leader.log.end_offset

    cluster.inject(broker_fetch(cluster, 2, observer=True))
    cluster.drop(FetchResponse)
    cluster.inject(broker_fetch(cluster, 2, observer=False))

    assert leader.high_watermark == end


def test_a_broker_fetch_with_an_id_no_voter_has_is_served():
    cluster = leader_with_uncommitted_record()
    [answer] = messages_of(cluster.inject(broker_fetch(cluster, 100, observer=True)))
    assert isinstance(answer, FetchResponse) and answer.error is ErrorCode.NONE
    assert cluster.node(1).counters["fetches_refused_observer_with_voter_id"] == 0


def test_a_follower_refuses_it_too_so_that_the_broker_hears_the_reason():
    cluster = Cluster(3)
    cluster.elect(1)
    follower = cluster.node(2)
    fetch = FetchRequest(
        src=3, dst=2, epoch=follower.epoch, fetch_offset=0, last_fetched_epoch=0, request_id=1, observer=True
    )
    [answer] = messages_of(cluster.inject(fetch))
    assert isinstance(answer, FetchResponse) and answer.error is ErrorCode.INCONSISTENT_VOTER_SET


def test_the_broker_counts_and_reports_the_refusal_and_keeps_asking():
    """The observer's side: the refusal is counted and said through the
    host's protocol-error hook (a log line in the runtime), and the broker
    asks again after the backoff."""
    cluster = Cluster(3)
    cluster.elect(1)
    reported: list[str] = []
    broker = QuorumNode(
        make_config(2, (1,), observer_only=True), rng=random.Random(0), hooks=CoreHooks(protocol_error=reported.append)
    )
    leader = cluster.node(1)

    def next_fetch() -> FetchRequest:
        for _ in range(500):
            fetches = [m for m in broker.tick().messages if isinstance(m, FetchRequest)]
            if fetches:
                return fetches[0]
        raise AssertionError("the broker sent no Fetch")

    # The first answer teaches the broker the epoch (and the leader); the
    # second, in its epoch, is the refusal it acts on.
    for _ in range(2):
        fetch = next_fetch()
        assert fetch.observer is True and fetch.dst == 1
        [answer] = messages_of(leader.step(fetch))
        assert isinstance(answer, FetchResponse) and answer.error is ErrorCode.INCONSISTENT_VOTER_SET
        broker.step(answer)
    assert broker.counters["own_fetches_refused_voter_id"] == 1
    assert any("node id 2 is one of its voters' ids" in line for line in reported)
    assert next_fetch().observer is True  # asks again
    assert not broker.is_voter


def test_an_observer_for_good_never_becomes_a_voter_whatever_the_set_says():
    """A dynamic voter set that names the broker's id names a controller: the
    broker neither counts itself a voter nor answers a candidate as one."""
    voters = (Voter(1, "A" * 22), Voter(3, "B" * 22))
    node = fresh_node(2, (1, 3), bootstrap_voters=voters, observer_only=True)
    assert not node.is_voter
    with_two = VoterSet((*voters, Voter(2, None)))
    assert with_two.holds(2, None)
    assert not node._holds_self(with_two)  # noqa: SLF001 - the one rule every voter-set change goes through


def test_an_observer_for_good_in_its_own_static_voters_is_refused_at_configuration():
    with pytest.raises(ValueError, match="observer for good"):
        make_config(2, VOTERS, observer_only=True)
    with pytest.raises(ValueError, match="observer_only must be true or false"):
        make_config(4, VOTERS, observer_only="yes")
