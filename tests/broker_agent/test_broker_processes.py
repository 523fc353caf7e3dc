"""Three `kraft-controller` and three `kraft-broker` processes on loopback:
kill -9, SIGSTOP beyond the session timeout, and an immediate restart.

The figures measured here (detection, bounce → online, pause recovery) go in
``FIGURES``, which tests/broker_agent/conftest.py prints in pytest's terminal
summary (even without ``-s``, and when one test runs alone); the tests
assert the protocol's bounds on them, with generous slack because this
machine is loaded.
"""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
import trio
from _processes import BIN, BROKERS, FETCH_TIMEOUT_MS, HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS, BrokerCluster

from broker_agent import ErrorCode, MetadataRequest, MetadataResponse
from broker_agent.client import MetadataClientError
from quorum.wire import ApplicationRequest, FrameDecoder, decode_message, encode_message

pytestmark = pytest.mark.processes

FIGURES: dict[str, float] = {}
# Slack for a loaded 2-core machine on top of each protocol bound.
SLACK_S = 1.5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = BrokerCluster(tmp_path_factory.mktemp("brokers"))
    cluster.start_all()
    try:
        trio.run(_wait_until_serving, cluster)
        yield cluster
    finally:
        cluster.stop_all()


async def _wait_until_serving(cluster: BrokerCluster) -> None:
    started = time.monotonic()
    async with cluster.admin() as admin:
        await cluster.wait_for_states(
            admin,
            lambda states: all(states.get(b, ("",))[0] == "Online" for b in BROKERS),
            60,
            "every broker Online",
        )
        with trio.fail_after(30):
            while True:
                response = await admin.create_topic("orders", partitions=6, replication_factor=3)
                if not response.results[0].error:
                    break
                await trio.sleep(0.1)
        cluster.orders_acknowledged_at = time.monotonic()
        cluster.orders_offset = (await admin.describe_cluster()).offset  # covers the write
    FIGURES["cluster start → 3 brokers Online (s)"] = time.monotonic() - started


async def wait_all_online(cluster: BrokerCluster, timeout_s: float = 30) -> dict[int, tuple[str, int]]:
    async with cluster.admin() as admin:
        return await cluster.wait_for_states(
            admin, lambda states: all(states.get(b, ("",))[0] == "Online" for b in BROKERS), timeout_s, "all Online"
        )


async def ask_broker(port: int, request: MetadataRequest, timeout_s: float = 5.0) -> MetadataResponse:
    """One request on a fresh connection, no retries."""
    with trio.fail_after(timeout_s):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        try:
            await stream.send_all(encode_message(ApplicationRequest(payload=request.to_payload()), correlation_id=1, cluster_id="pykraft"))
            return await _read_answer(stream)
        finally:
            await stream.aclose()


async def _read_answer(stream) -> MetadataResponse:
    decoder = FrameDecoder()
    while True:
        payload = decoder.next_frame()
        if payload is not None:
            return MetadataResponse.from_payload(decode_message(payload, expected_cluster_id="pykraft").message.payload)
        data = await stream.receive_some(65536)
        assert data, "the broker closed the connection"
        decoder.feed(data)


async def leaders_by_broker(cluster: BrokerCluster) -> dict[int, int]:
    async with cluster.admin() as admin:
        topics = await admin.describe_topics(["orders"])
    counts: dict[int, int] = {}
    for partition in topics.topics[0].partitions:
        counts[partition.leader] = counts.get(partition.leader, 0) + 1
    return counts


async def test_brokers_come_online_and_answer_clients_with_offsets_and_epochs(cluster):
    described = subprocess.run(
        [str(BIN / "kraft-cluster"), "describe", "--bootstrap", ",".join(cluster.controllers), "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "Online" in described.stdout
    states = await wait_all_online(cluster)
    async with cluster.metadata_client() as client:
        client.advance_to(cluster.orders_offset)  # read the fixture's write
        metadata = await client.cluster_metadata()
        assert sorted(b["broker_id"] for b in metadata.body["brokers"]) == list(BROKERS)
        assert metadata.broker_epoch == states[metadata.broker_id][1]
        leader = await client.find_leader("orders", 0)
        assert leader.leader in BROKERS and leader.leader_epoch >= 0
        assert leader.image_offset >= metadata.image_offset  # monotonic per client
        assert "orders" in await client.list_topics()
    # The staleness promise: an Online broker's answer reflects every write
    # acknowledged more than the bound before it (session + check quorum).
    bound_s = (SESSION_TIMEOUT_MS + 1.5 * FETCH_TIMEOUT_MS) / 1000
    for broker_id in BROKERS:
        while True:
            answer = await ask_broker(cluster.broker_ports[broker_id], MetadataRequest(op="describe_topic", topic="orders"))
            if answer.error is ErrorCode.NONE:
                break
            assert answer.error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.BROKER_NOT_AVAILABLE), answer
            assert time.monotonic() - cluster.orders_acknowledged_at <= bound_s, answer
            await trio.sleep(0.02)
        assert answer.broker_epoch == states[broker_id][1]
        assert len(answer.body["topic"]["partitions"]) == 6


async def test_kill_9_a_broker_is_fenced_within_the_session_and_its_leaderships_move(cluster):
    await wait_all_online(cluster)
    counts = await leaders_by_broker(cluster)
    victim = max(BROKERS, key=lambda broker_id: counts.get(broker_id, 0))
    assert counts.get(victim, 0) > 0
    async with cluster.admin() as admin:
        killed_at = cluster.kill(victim)
        await cluster.wait_for_states(
            admin,
            lambda states: states.get(victim, ("",))[0] == "Fenced",
            SESSION_TIMEOUT_MS / 1000 + HEARTBEAT_INTERVAL_MS / 1000 + SLACK_S,
            f"broker {victim} fenced",
        )
        detection_s = time.monotonic() - killed_at
    FIGURES["kill -9 → fenced by the controller (s)"] = detection_s
    counts = await leaders_by_broker(cluster)
    assert victim not in counts, counts
    cluster.start_broker(victim)
    await wait_all_online(cluster)


async def test_sigstop_beyond_the_session_then_sigcont_answers_nothing_stale_and_serves_again(cluster):
    await wait_all_online(cluster)
    victim = BROKERS[1]
    port = cluster.broker_ports[victim]
    before = await ask_broker(port, MetadataRequest(op="list_topics"))
    assert before.error is ErrorCode.NONE
    cluster.signal(victim, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        async with cluster.admin() as admin:
            await cluster.wait_for_states(
                admin,
                lambda states: states.get(victim, ("",))[0] == "Fenced",
                SESSION_TIMEOUT_MS / 1000 + SLACK_S + 1,
                f"paused broker {victim} fenced",
            )
            created = await admin.create_topic("written-during-pause", partitions=1, replication_factor=2)
            assert not created.results[0].error
        # A request that reaches the paused broker before it wakes up.
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        request = MetadataRequest(op="list_topics")
        await stream.send_all(encode_message(ApplicationRequest(payload=request.to_payload()), correlation_id=1, cluster_id="pykraft"))
        paused_s = time.monotonic() - stopped_at
    finally:
        cluster.signal(victim, signal.SIGCONT)
    resumed_at = time.monotonic()
    with trio.fail_after(10):
        first = await _read_answer(stream)
    await stream.aclose()
    # Nothing stale: refused (not Online), or it already reflects the write.
    if first.error is ErrorCode.NONE:
        assert "written-during-pause" in first.body["topics"], first
    else:
        assert first.error is ErrorCode.BROKER_NOT_AVAILABLE and first.state != "Online", first
    with trio.fail_after(20):
        while True:
            answer = await ask_broker(port, MetadataRequest(op="list_topics"))
            if answer.error is ErrorCode.NONE:
                break
            assert answer.error is ErrorCode.BROKER_NOT_AVAILABLE
            await trio.sleep(0.02)
    recovery_s = time.monotonic() - resumed_at
    assert "written-during-pause" in answer.body["topics"]
    assert answer.image_offset > before.image_offset
    states = [(e["state"], e["lifecycle_event"]) for e in cluster.events(victim) if e["event"] == "broker_state"]
    assert ("fenced", "session lost") in states, states
    FIGURES["SIGSTOP (paused s)"] = paused_s
    FIGURES["SIGCONT → serving again (s)"] = recovery_s
    await wait_all_online(cluster)


async def test_restart_immediately_gets_a_new_epoch_and_the_old_epoch_is_refused(cluster):
    """Seed 000 (KIP-380): a fast bounce."""
    states = await wait_all_online(cluster)
    victim = BROKERS[2]
    old_epoch = states[victim][1]
    killed_at = cluster.kill(victim)
    cluster.start_broker(victim)
    async with cluster.admin() as admin:
        await cluster.wait_for_states(
            admin,
            lambda states: states.get(victim, ("", -1))[1] > old_epoch,
            30,
            f"broker {victim} registered again",
        )
        new_epoch_s = time.monotonic() - killed_at
        states = await cluster.wait_for_states(
            admin, lambda states: states.get(victim, ("",))[0] == "Online", 30, f"broker {victim} Online again"
        )
    port = cluster.broker_ports[victim]
    with trio.fail_after(20):
        while (answer := await ask_broker(port, MetadataRequest(op="list_topics"))).error is not ErrorCode.NONE:
            await trio.sleep(0.02)
    bounce_to_online_s = time.monotonic() - killed_at
    new_epoch = states[victim][1]
    assert answer.broker_epoch == new_epoch > old_epoch
    refused = await ask_broker(port, MetadataRequest(op="list_topics", broker_epoch=old_epoch))
    assert refused.error is ErrorCode.STALE_BROKER_EPOCH and refused.broker_epoch == new_epoch
    accepted = await ask_broker(port, MetadataRequest(op="list_topics", broker_epoch=new_epoch))
    assert accepted.error is ErrorCode.NONE
    events = cluster.events(victim)
    registrations = [e for e in events if e["event"] == "broker_registration"]
    assert registrations[-1]["broker_epoch"] == new_epoch
    registration_ms = registrations[-1]["registration_ms"]
    assert registration_ms <= HEARTBEAT_INTERVAL_MS + SLACK_S * 1000, registrations[-1]
    requests = [(e["broker_epoch"], e["accepted"]) for e in events if e["event"] == "broker_request"]
    assert requests[-2:] == [(old_epoch, False), (new_epoch, True)]
    FIGURES["restart: first RegisterBroker → new epoch (ms)"] = registration_ms
    FIGURES["restart: kill → new epoch in the controller (s)"] = new_epoch_s
    FIGURES["restart: kill → serving again (s)"] = bounce_to_online_s
    async with cluster.metadata_client(retry_timeout_s=10) as client:
        # The client learns the new epoch, and a bounced broker's stale pin is
        # refused and relearned without surfacing an error.
        client._epochs[("127.0.0.1", port)] = old_epoch
        client._index = list(client.brokers).index(("127.0.0.1", port))
        assert "orders" in await client.list_topics()


async def test_sigterm_is_a_controlled_shutdown(cluster):
    await wait_all_online(cluster)
    victim = BROKERS[0]
    counts = await leaders_by_broker(cluster)
    cluster.signal(victim, signal.SIGTERM)
    process = cluster.processes.pop(victim)
    started = time.monotonic()
    assert process.wait(timeout=15) == 0
    FIGURES["SIGTERM → controlled shutdown done (s)"] = time.monotonic() - started
    assert victim not in await leaders_by_broker(cluster)
    async with cluster.admin() as admin:
        states = await cluster.broker_states(admin)
    assert states[victim][0] == "Offline"
    events = [(e["state"], e["lifecycle_event"]) for e in cluster.events(victim) if e["event"] == "broker_state"]
    assert events[-2:] == [("stopping", "shutdown requested"), ("offline", "should shutdown")], (events, counts)
    cluster.start_broker(victim)
    await wait_all_online(cluster)
    with pytest.raises(MetadataClientError):
        async with cluster.metadata_client(retry_timeout_s=0.5) as client:
            await client.describe_topic("no-such-topic")
