"""Replicated objects through the synchronous facade (issue 18, items 1-4):
three nodes on loopback in this process, each a trio loop on its own
thread, called from plain threads and from asyncio."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
import trio

from quorum import ApplyFailedError, NotLeaderError
from quorum.replicated import Replicated, query, replicated
from quorum.runtime import PROPOSAL_BYTES_MAX


class Counter(Replicated):
    def __init__(self) -> None:
        self.total = 0

    @replicated
    def add(self, n):
        if n < 0:
            raise ValueError("counters only go up")
        self.total += n
        return self.total

    @query
    def value(self):
        return self.total


class Registry(Replicated):
    """Overrides the snapshot hooks: only ``entries`` is state."""

    def __init__(self) -> None:
        self.entries = {}
        self.restored = 0

    @replicated
    def put(self, key, value):
        self.entries[key] = value

    @query
    def get(self, key):
        return self.entries.get(key)

    def snapshot_state(self):
        return self.entries

    def restore_state(self, state):
        self.entries = state
        self.restored += 1


def voters_text(count: int) -> str:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    text = ",".join(f"{index}@127.0.0.1:{sock.getsockname()[1]}" for index, sock in enumerate(sockets, 1))
    for sock in sockets:
        sock.close()
    return text


@pytest.fixture
def counters():
    voters = voters_text(3)
    nodes = [Counter().start(node_id=node_id, voters=voters, plaintext=True) for node_id in (1, 2, 3)]
    try:
        leader_id = nodes[0].wait_for_leader(timeout_s=30)
        for node in nodes:
            node.wait_for_leader(timeout_s=30)
        yield nodes, leader_id
    finally:
        for node in nodes:
            node.close()


def test_calls_from_plain_threads_on_every_node_are_replicated_once_each(counters):
    nodes, _ = counters
    results: list[int] = []
    lock = threading.Lock()

    def worker(node):
        for _ in range(10):
            total = node.add(1)
            with lock:
                results.append(total)

    threads = [threading.Thread(target=worker, args=(node,)) for node in nodes for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # Every call got the total its own command produced on the leader.
    assert sorted(results) == list(range(1, 61))
    assert {node.value() for node in nodes} == {60}


def test_calls_from_asyncio_through_to_thread(counters):
    nodes, _ = counters

    async def main():
        totals = await asyncio.gather(*(asyncio.to_thread(node.add, 2) for node in nodes))
        return sorted(totals), await asyncio.to_thread(nodes[1].value)

    totals, value = asyncio.run(main())
    assert totals == [2, 4, 6] and value == 6


def test_a_follower_forwards_by_default_and_refuses_with_the_leader_hint_when_asked(counters):
    nodes, leader_id = counters
    follower = next(node for node in nodes if not node.is_leader)
    assert follower.add(5) == 5
    # leader-local and linearizable reads from a follower run on the leader.
    for mode in ("leader-local", "linearizable"):
        follower._replica.read_mode = mode
        assert follower.value() == 5
    follower._replica.forward = False
    with pytest.raises(NotLeaderError) as refused:
        follower.add(1)
    assert refused.value.leader_id == leader_id
    with pytest.raises(NotLeaderError):
        follower.value()
    # "follower" reads this node's own state, without the leader.
    follower._replica.read_mode = "follower"
    assert follower.value() in (0, 5)
    assert nodes[leader_id - 1].value() == 5  # the refused call did not happen


def test_bad_input_fails_in_the_caller_before_anything_is_proposed(counters):
    nodes, leader_id = counters
    leader = nodes[leader_id - 1]
    end_before = leader._replica.handle.runtime.node.log.end_offset
    with pytest.raises(TypeError, match="cannot be serialised"):
        leader.add({1, 2})
    with pytest.raises(TypeError, match="cannot be serialised"):
        nodes[(leader_id) % 3].add(object())  # a follower: refused before forwarding
    with pytest.raises(ValueError, match="over the limit"):
        leader.add(b"x" * (PROPOSAL_BYTES_MAX + 1))
    assert leader._replica.handle.runtime.node.log.end_offset == end_before
    assert leader.add(1) == 1


def test_a_raising_method_fails_that_call_on_the_leader_and_through_a_follower(counters):
    nodes, leader_id = counters
    leader = nodes[leader_id - 1]
    follower = nodes[leader_id % 3]
    assert leader.add(3) == 3
    with pytest.raises(ApplyFailedError, match="ValueError: counters only go up"):
        leader.add(-1)
    with pytest.raises(ApplyFailedError, match="ValueError: counters only go up"):
        follower.add(-2)
    assert follower.add(4) == 7
    assert {node.value() for node in nodes} == {7}


def test_a_call_with_no_leader_times_out_and_a_stopped_object_says_so():
    lonely = Counter().start(node_id=1, voters=voters_text(3), timeout_s=0.5, plaintext=True)
    try:
        with pytest.raises(TimeoutError):
            lonely.add(1)
    finally:
        lonely.close()
    with pytest.raises(RuntimeError, match="not started"):
        lonely.add(1)
    with pytest.raises(ValueError, match="unknown read mode"):
        Counter().start(node_id=1, voters="1@127.0.0.1:1", read="stale", plaintext=True)


def test_state_comes_back_from_snapshot_and_log_after_a_restart(tmp_path):
    voters = voters_text(1)
    with Registry().start(node_id=1, voters=voters, data_dir=str(tmp_path), snapshot_every_records=5, plaintext=True) as registry:
        registry.wait_for_leader(timeout_s=30)
        for index in range(12):
            registry.put(f"k{index}", [index, "v"])
        assert registry.get("k3") == [3, "v"]
    with Registry().start(node_id=1, voters=voters, data_dir=str(tmp_path), plaintext=True) as registry:
        registry.wait_for_leader(timeout_s=30)
        assert registry.restored == 1  # from the snapshot, then the log's tail
        assert registry.get("k11") == [11, "v"]
        assert len(registry.entries) == 12



def test_calls_from_a_trio_program_through_to_thread(counters):
    nodes, _ = counters
    results = []

    async def add_from(node):
        results.append(await trio.to_thread.run_sync(node.add, 3))

    async def main():
        async with trio.open_nursery() as nursery:
            for node in nodes:
                nursery.start_soon(add_from, node)

    trio.run(main)
    assert sorted(results) == [3, 6, 9]


def test_replicated_objects_over_mutual_tls_forward_with_the_node_certificate(tmp_path):
    """Issue 16, the embedding API: ``tls=`` among the node options secures
    the node and its forwarding client (the node's own certificate)."""
    from quorum.runtime import TlsConfig, create_cluster_certificates

    create_cluster_certificates(tmp_path, nodes=[1, 2, 3])
    voters = voters_text(3)
    nodes = [
        Counter().start(
            node_id=node_id,
            voters=voters,
            tls=TlsConfig(tmp_path / "ca.pem", tmp_path / f"node-{node_id}.pem", tmp_path / f"node-{node_id}-key.pem"),
        )
        for node_id in (1, 2, 3)
    ]
    try:
        leader_id = nodes[0].wait_for_leader(timeout_s=30)
        for node in nodes:
            node.wait_for_leader(timeout_s=30)
        follower = nodes[leader_id % 3]  # any node but the leader
        assert follower.add(3) == 3
        assert follower.value() == 3
    finally:
        for node in nodes:
            node.close()
