"""The epoch prologue (QuorumNode._epoch_prologue): KIP-595 common epoch
handling applied to every message in one place. The rules for requests
are covered message by message in test_rules_elections.py; these cover the
response side, where the prologue sits after the match against the fetch in
flight."""

from __future__ import annotations

from harness import Cluster, messages_of

from quorum import Entry, FetchRequest, FetchResponse, RecordKind, Role


def test_answer_to_the_fetch_in_flight_from_an_earlier_epoch_is_dropped():
    """Raft thesis §3.3: a response with a stale term is ignored. Even one
    that answers the very request in flight must not move the log or the
    high watermark: its records were chosen by a leader of an epoch this
    node has left. (With honest peers it cannot happen, since every epoch
    change drops the fetch in flight; the rule holds anyway.)"""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"x")
    cluster.deliver(FetchResponse, dst=2)
    [request] = cluster.pending(FetchRequest, src=2)
    follower = cluster.node(2)
    end_before, hw_before = follower.log.end_offset, follower.high_watermark
    stale = FetchResponse(
        src=1,
        dst=2,
        epoch=request.epoch - 1,
        request_id=request.request_id,
        leader_id=1,
        high_watermark=end_before + 1,
        records=(Entry(end_before, request.epoch - 1, RecordKind.DATA, b"from an old leader"),),
    )

    output = cluster.inject(stale)

    assert (follower.log.end_offset, follower.high_watermark) == (end_before, hw_before)
    assert (follower.role, follower.epoch) == (Role.FOLLOWER, request.epoch)
    assert not output.append and not output.committed and not messages_of(output)


def test_answer_that_is_not_to_the_fetch_in_flight_is_dropped_before_its_epoch_is_read():
    """A late or duplicated Fetch answer is not an answer at all: even a
    later epoch in it is not adopted from it (the request it answers was
    given up, and a fresh one will learn the epoch)."""
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"x")
    cluster.deliver(FetchResponse, dst=2)
    [request] = cluster.pending(FetchRequest, src=2)
    follower = cluster.node(2)
    late = FetchResponse(
        src=1, dst=2, epoch=request.epoch + 3, request_id=request.request_id - 1, leader_id=3, high_watermark=0
    )

    output = cluster.inject(late)

    assert (follower.role, follower.epoch, follower.leader_id) == (Role.FOLLOWER, request.epoch, 1)
    assert not output
