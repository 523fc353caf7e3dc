"""NOT_LEADER answers name where the leader listens (issue 17 item 4;
KIP-853's NodeEndpoints, which let a fetcher bootstrapped from any one
controller reach the leader): the answering node takes the endpoint from
the voter set it holds (a dynamic set's), else from its config's static
``voter_endpoints``; a fetcher keeps it (``learned_endpoints``, bounded,
validated) and an observer without a leader asks the leaders it learned."""

import dataclasses

import pytest

from quorum import FetchRequest, FetchResponse, Voter
from quorum.wire import LocalProtocolError, RemoteProtocolError, decode_message, encode_message

from harness import Cluster, make_config

OBSERVER = 101
ENDPOINTS = ((1, "h1:9091"), (2, "h2:9092"), (3, "h3:9093"))


def observer_of(given: int, **overrides) -> Cluster:
    """Voters 1..3 (leader 1) that know where each listens, and an
    observer whose voter list names only ``given``."""
    cluster = Cluster(3, observers=(OBSERVER,), down=(OBSERVER,), voter_endpoints=ENDPOINTS, **overrides)
    replica = cluster.replicas[OBSERVER]
    replica.config = make_config(OBSERVER, (given,))
    cluster.elect(1)
    cluster.restart(OBSERVER)
    return cluster


def test_a_follower_answers_an_observers_fetch_with_the_leaders_id_epoch_and_endpoint():
    cluster = observer_of(2)
    observer = cluster.node(OBSERVER)
    assert observer.leader_id is None and observer.learned_endpoints == {}

    cluster.tick(OBSERVER)  # its first Fetch goes to the one voter it knows
    (fetch,) = cluster.deliver(FetchRequest, src=OBSERVER)
    assert fetch.dst == 2
    (answer,) = cluster.pending(FetchResponse, src=2, dst=OBSERVER)
    # A new observer is in epoch 0: the follower refuses its epoch, and
    # names the leader of its own and where it listens.
    assert answer.error.name == "FENCED_LEADER_EPOCH"
    assert (answer.leader_id, answer.epoch, answer.leader_endpoint) == (1, cluster.node(1).epoch, "h1:9091")

    cluster.deliver(FetchResponse, src=2, dst=OBSERVER)
    assert observer.leader_id == 1
    assert dict(observer.learned_endpoints) == {1: "h1:9091"}
    # The next Fetch goes to the leader, which serves it.
    cluster.tick(OBSERVER)
    (fetch,) = cluster.deliver(FetchRequest, src=OBSERVER)
    assert fetch.dst == 1
    (served,) = cluster.pending(FetchResponse, src=1, dst=OBSERVER)
    assert served.error.name == "NONE" and served.leader_endpoint is None
    # A Fetch in the current epoch to a follower: NOT_LEADER, same names.
    cluster.inject(dataclasses.replace(fetch, dst=2, request_id=fetch.request_id + 99))
    (refused,) = cluster.pending(FetchResponse, src=2, dst=OBSERVER)
    assert refused.error.name == "NOT_LEADER"
    assert (refused.leader_id, refused.epoch, refused.leader_endpoint) == (1, cluster.node(1).epoch, "h1:9091")


def test_an_observer_without_a_leader_asks_the_leaders_it_learned_as_well():
    cluster = observer_of(2)
    cluster.tick(OBSERVER)
    cluster.deliver_all()
    observer = cluster.node(OBSERVER)
    assert observer.leader_id == 1
    # The leader and the voter the observer was given both go away; the
    # observer, looking for a leader, asks voter 2 and then node 1 in turn.
    cluster.crash(1)
    cluster.crash(2)
    asked = set()
    for _ in range(20):
        cluster.tick(OBSERVER, times=200)
        for fetch in cluster.pending(FetchRequest, src=OBSERVER):
            asked.add(fetch.dst)
        cluster.drop(FetchRequest, src=OBSERVER)
    assert asked == {1, 2}


def test_a_dynamic_voter_sets_endpoint_comes_before_the_static_one():
    bootstrap = (Voter(1, None, ("dyn1:7001",)), Voter(2, None, ("dyn2:7002",)), Voter(3, None, ("dyn3:7003",)))
    node = Cluster(3, bootstrap_voters=bootstrap, voter_endpoints=ENDPOINTS).node(2)
    assert node.endpoint_of(1) == "dyn1:7001"
    assert node.endpoint_of(None) is None
    static = Cluster(3, voter_endpoints=ENDPOINTS).node(2)
    assert static.endpoint_of(3) == "h3:9093" and static.endpoint_of(7) is None


@pytest.mark.parametrize("endpoint", ["no-port", "h:0", "h:99999", "x" * 300 + ":1", "h:1\n", ":80"])
def test_a_malformed_leader_endpoint_is_refused_at_the_wire_and_dropped_by_the_core(endpoint):
    answer = FetchResponse(src=2, dst=OBSERVER, epoch=1, request_id=1, leader_id=1, leader_endpoint=endpoint)
    # The encoder checks its output as a peer would: nothing sends it.
    with pytest.raises(LocalProtocolError, match="leader_endpoint"):
        encode_message(answer, correlation_id=0, cluster_id="c")
    # The simulator feeds the core directly: the core checks again.
    cluster = observer_of(2)
    cluster.tick(OBSERVER)
    (fetch,) = cluster.deliver(FetchRequest, src=OBSERVER)
    (honest,) = cluster.pending(FetchResponse, src=2, dst=OBSERVER)
    cluster.drop(FetchResponse, src=2, dst=OBSERVER)
    cluster.inject(dataclasses.replace(honest, leader_endpoint=endpoint))
    observer = cluster.node(OBSERVER)
    assert observer.learned_endpoints == {} and observer.leader_id is None
    assert observer.counters["messages_out_of_range"] == 1


def test_an_answer_without_an_endpoint_is_the_body_an_older_peer_decodes():
    answer = FetchResponse(src=2, dst=OBSERVER, epoch=1, request_id=1, leader_id=1)
    frame = encode_message(answer, correlation_id=0, cluster_id="c")
    with_endpoint = encode_message(dataclasses.replace(answer, leader_endpoint="h1:9091"), correlation_id=0, cluster_id="c")
    assert len(with_endpoint) > len(frame)
    assert decode_message(frame[4:], expected_cluster_id="c").message.leader_endpoint is None
    assert decode_message(with_endpoint[4:], expected_cluster_id="c").message.leader_endpoint == "h1:9091"


def test_a_peers_answer_with_a_malformed_leader_endpoint_is_refused_at_the_edge():
    answer = FetchResponse(src=2, dst=OBSERVER, epoch=1, request_id=1, leader_id=1, leader_endpoint="h1:9091")
    frame = encode_message(answer, correlation_id=0, cluster_id="c")
    forged = frame.replace(b"h1:9091", b"h1:x091")
    with pytest.raises(RemoteProtocolError, match="leader_endpoint"):
        decode_message(forged[4:], expected_cluster_id="c")
