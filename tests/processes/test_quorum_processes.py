"""Three `kraft-quorum node` processes on loopback: the quorum keeps its
promises through kill -9, SIGTERM, lost disks and torn logs."""

import signal

import pytest
import trio

from quorum.client import IndeterminateError, QuorumClient
from quorum.runtime import KeyValueStateMachine

pytestmark = pytest.mark.processes


def put(key: str, value: str) -> bytes:
    return KeyValueStateMachine.encode_put(key.encode(), value.encode())


async def propose_until_committed(client, records, attempts=10):
    """A proposal in flight when its node dies is indeterminate; these
    tests write unique values, so trying again is harmless."""
    for _ in range(attempts):
        try:
            return await client.propose(records)
        except IndeterminateError:
            continue
    raise AssertionError("no proposal committed")


async def test_write_then_kill_the_leader_then_the_next_leader_commits(process_cluster):
    cluster = process_cluster
    async with cluster.client(retry_timeout_s=20) as client:
        await client.propose([put("k", "before")])
        leader = await cluster.leader()
        cluster.kill(leader, signal.SIGKILL)
        started = trio.current_time()
        await propose_until_committed(client, [put("k", "after")])
        failover_s = trio.current_time() - started
        offset, answer = await client.read(b"k")
    assert KeyValueStateMachine.decode_answer(answer)[0] == b"after"
    assert failover_s < 5  # crash detected through the connection reset, not the fetch timeout
    new_leader = await cluster.leader(exclude=leader)
    assert new_leader != leader


async def test_a_killed_node_rejoins_and_catches_up_by_snapshot(process_cluster):
    cluster = process_cluster
    async with cluster.client(retry_timeout_s=20) as client:
        await client.propose([put("k", "0")])
        leader = await cluster.leader()
        victim = next(node for node in cluster.ports if node != leader)
        cluster.kill(victim)
        # Far behind: many snapshots' worth of records (one every 200).
        for batch in range(30):
            await client.propose([put(f"k{batch}", str(i)) for i in range(100)])
        cluster.start(victim)
        leader_address = [f"127.0.0.1:{cluster.ports[leader]}"]
        with trio.fail_after(30):
            while True:
                # Only the leader knows how far each replica got.
                async with QuorumClient(leader_address, retry_timeout_s=2) as probe:
                    answer = await probe.describe()
                replica = next((r for r in answer.voters if r.node_id == victim), None)
                if replica is not None and replica.log_end_offset is not None and replica.log_end_offset >= answer.high_watermark:
                    break
                await trio.sleep(0.1)
    assert "installed snapshot" in cluster.log_text(victim)


async def test_sigterm_on_the_leader_hands_over_within_a_few_round_trips(process_cluster):
    cluster = process_cluster
    async with cluster.client(retry_timeout_s=20) as client:
        await client.propose([put("k", "v")])
        leader = await cluster.leader()
        cluster.kill(leader, signal.SIGTERM)
        await propose_until_committed(client, [put("k", "after handover")])
        new_leader = await cluster.leader(exclude=leader)
    assert "resigned on request" in cluster.log_text(leader)
    # Handed over by EndQuorumEpoch (KIP-595): the successor heard of the
    # resignation and stood at once. The mechanism, not a wall-clock bound
    # that a loaded machine breaks.
    assert f"reason=leader {leader} resigned" in cluster.log_text(new_leader)


async def test_garbage_on_the_port_is_refused_and_the_node_keeps_committing(process_cluster):
    cluster = process_cluster
    async with cluster.client(retry_timeout_s=20) as client:
        await client.propose([put("k", "v")])
    leader = await cluster.leader()
    port = cluster.ports[leader]
    garbage = [
        b"\x00\x00\x00\x05hello",  # not msgpack
        b"\xff\xff\xff\xff",  # a length over the limit
        b"\x00\x00\x00\x02\x91\x01",  # a wrong envelope
        bytes(range(256)) * 20,  # noise
        b"\x00\x00\x00\x20" + b"\x95\x01\x01\x01\xa7foreign\x90" + b"\x00" * 18,  # foreign cluster id
    ]
    for payload in garbage:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        try:
            await stream.send_all(payload)
            with trio.move_on_after(0.5):
                while await stream.receive_some(4096):
                    pass
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()
    async with cluster.client(retry_timeout_s=20) as client:
        await client.propose([put("k", "still serving")])
        _, answer = await client.read(b"k")
    assert KeyValueStateMachine.decode_answer(answer)[0] == b"still serving"
    assert "bad frame" in cluster.log_text(leader)
    assert cluster.processes[leader].poll() is None


@pytest.mark.parametrize("damage", ["truncate", "bit-flip"])
async def test_a_torn_or_damaged_log_tail_loses_nothing_committed(process_cluster, damage):
    """Crash recovery: a torn tail (a short last batch) on one node is cut
    at startup; a flipped bit in its last batch (whole, no zeroed sector:
    it may have been acknowledged) is damage, and the node repairs its log
    from the leader instead of cutting it as if it were torn. A majority
    kept its disk, so every acknowledged write survives."""
    cluster = process_cluster
    async with cluster.client(retry_timeout_s=20) as client:
        for i in range(50):
            await client.propose([put(f"k{i}", "v")])
        leader = await cluster.leader()
        victim = next(node for node in cluster.ports if node != leader)
        cluster.kill(victim)
        segments = sorted((cluster.data_dir(victim) / "log").glob("*.log"))
        last = segments[-1]
        data = bytearray(last.read_bytes())
        if damage == "truncate":
            last.write_bytes(bytes(data[: len(data) - 7]))
        else:
            data[len(data) - 3] ^= 0xFF
            last.write_bytes(bytes(data))
        cluster.start(victim)
        await client.propose([put("after", "damage")])
        if damage == "bit-flip":
            # A repairing voter does not vote until its repair is done
            # (docs/storage.md, "Repair"): stopping the healthy node before
            # then can leave no leader until it is. On a loaded machine the
            # repair can outlast the write above; wait for it.
            with trio.fail_after(60):
                while "the log is repaired" not in cluster.log_text(victim):
                    await trio.sleep(0.05)
        # Make the victim the only other member of a majority: stop a healthy one.
        healthy = next(node for node in cluster.ports if node not in (leader, victim))
        cluster.kill(healthy)
        for i in range(50):
            _, answer = await client.read(f"k{i}".encode())
            assert KeyValueStateMachine.decode_answer(answer)[0] == b"v"
        await client.propose([put("k0", "new")])
    text = cluster.log_text(victim)
    if damage == "truncate":
        assert "torn tail: truncating at byte" in text
    else:
        assert "a flipped bit, not a torn write" in text and "repairs its log from a leader" in text
        assert "torn tail" not in text


async def test_a_client_of_another_cluster_gets_a_definite_error(process_cluster):
    from quorum.client import WrongClusterError

    # The error is definite on the first answer; the long retry window
    # only covers a loaded machine where the first answer is slow to come.
    async with QuorumClient(process_cluster.bootstrap, cluster_id="another", retry_timeout_s=30) as client:
        with pytest.raises(WrongClusterError):
            await client.propose([b"x"])
