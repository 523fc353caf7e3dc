"""``open_broker`` over real sockets with a single in-process controller:
metrics, a durable metadata log across restarts, a controlled shutdown on
leaving the block, and serving through the wire."""

from __future__ import annotations

import pytest
import trio

from broker_agent import BrokerConfig, ErrorCode, MetadataRequest, open_broker
from broker_agent.client import MetadataClient
from quorum.runtime import NodeConfig, scrape_metrics
from registration import BrokerState, ControllerConfig
from registration import open_controller_node
from registration.client import AdminClient

QUORUM = {"election_timeout_ms": 500, "fetch_timeout_ms": 1000}
TIMERS = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}

pytestmark = pytest.mark.processes  # real sockets




async def test_open_broker_serves_restarts_from_its_data_dir_and_shuts_down_cleanly(tmp_path):
    controller_config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, quorum=QUORUM, fsync=False, plaintext=True)
    async with open_controller_node(controller_config, ControllerConfig(cluster_id="pykraft", **TIMERS)) as controller:
        bootstrap = {1: ("127.0.0.1", controller.listen_port)}
        config = BrokerConfig(
            broker_id=101,
            bootstrap=bootstrap,
            listen=("127.0.0.1", 0),
            data_dir=tmp_path / "b101",
            fsync=False,
            metrics_listen=("127.0.0.1", 0),
            event_log=tmp_path / "b101.jsonl",
            quorum=QUORUM,
            **TIMERS,
            plaintext=True,
        )
        with trio.fail_after(30):
            async with open_broker(config) as broker:
                first_epoch = await broker.wait_online()
                assert broker.may_serve()
                async with AdminClient([f"1@127.0.0.1:{controller.listen_port}"]) as admin:
                    created = await admin.create_topic("t", partitions=2, replication_factor=1)
                    assert not created.results[0].error
                    written = (await admin.describe_cluster()).offset  # covers the write
                async with MetadataClient([f"127.0.0.1:{broker.listen_port}"]) as client:
                    client.advance_to(written)  # read our own write: no older image answers
                    leader = await client.find_leader("t", 1)
                assert leader.leader == 101 and leader.leader_broker_epoch == first_epoch
                metrics = await scrape_metrics("127.0.0.1", broker.metrics_port)
                assert 'pykraft_broker_state{node="101",state="Online"} 1.0' in metrics
                assert f'pykraft_broker_epoch{{node="101"}} {first_epoch}.0' in metrics
                assert 'pykraft_broker_fetch_latency_seconds_count{node="101"}' in metrics
                offset_before = broker.image_offset
            # Leaving the block was a controlled shutdown: the controller let it go.
            assert broker.stop_reason == "the controller says shut down"
            async with AdminClient([f"1@127.0.0.1:{controller.listen_port}"]) as admin:
                while (await admin.describe_cluster()).brokers[0].state != BrokerState.OFFLINE.value:
                    await trio.sleep(0.02)

            async with open_broker(config) as broker:
                # The metadata log came back from disk before any fetch.
                assert broker.node.runtime.node.log.end_offset >= offset_before
                second_epoch = await broker.wait_online()
                assert second_epoch > first_epoch
                stale = broker.answer(MetadataRequest(op="list_topics", broker_epoch=first_epoch))
                assert stale.error is ErrorCode.STALE_BROKER_EPOCH
                assert broker.answer(MetadataRequest(op="list_topics")).body["topics"] == ["t"]
    events = (tmp_path / "b101.jsonl").read_text().splitlines()
    assert sum('"broker_registration"' in line for line in events) == 2


async def test_list_topics_pages_and_the_client_gathers_every_page(tmp_path, monkeypatch):
    """Before, a broker answered every name in one frame: at about a
    million topics that answer passed the frame limit and was never sent.
    Now an answer holds one page (three here) and ``more``; the client asks
    ``after`` the last name until none follow."""
    monkeypatch.setattr("broker_agent._serving.LIST_TOPICS_PAGE_MAX", 3)
    controller_config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, quorum=QUORUM, fsync=False, plaintext=True)
    async with open_controller_node(controller_config, ControllerConfig(cluster_id="pykraft", **TIMERS)) as controller:
        bootstrap = {1: ("127.0.0.1", controller.listen_port)}
        config = BrokerConfig(
            broker_id=101, bootstrap=bootstrap, listen=("127.0.0.1", 0), quorum=QUORUM, **TIMERS, plaintext=True
        )
        names = [f"t{index}" for index in range(7)]
        with trio.fail_after(30):
            async with open_broker(config) as broker:
                await broker.wait_online()
                async with AdminClient([f"1@127.0.0.1:{controller.listen_port}"]) as admin:
                    for name in names:
                        assert not (await admin.create_topic(name, partitions=1, replication_factor=1)).results[0].error
                    written = (await admin.describe_cluster()).offset
                while broker.image_offset < written:
                    await trio.sleep(0.01)
                first = broker.answer(MetadataRequest(op="list_topics"))
                assert (first.body["topics"], first.body["more"]) == (["t0", "t1", "t2"], True)
                last = broker.answer(MetadataRequest(op="list_topics", after="t5"))
                assert (last.body["topics"], last.body["more"]) == (["t6"], False)
                async with MetadataClient([f"127.0.0.1:{broker.listen_port}"]) as client:
                    assert await client.list_topics() == names


def test_only_list_topics_takes_after_and_it_is_a_bounded_name():
    from broker_agent import ProtocolError

    MetadataRequest(op="list_topics", after="")  # from the first name
    with pytest.raises(ProtocolError, match="takes no after"):
        MetadataRequest(op="cluster_metadata", after="t")
    with pytest.raises(ProtocolError, match="after must be a string"):
        MetadataRequest(op="list_topics", after="t" * 250)
    with pytest.raises(ProtocolError, match="after must be a string"):
        MetadataRequest(op="list_topics", after=5)
    import msgpack

    with pytest.raises(ProtocolError, match="takes no after"):
        MetadataRequest.from_payload(msgpack.packb({"op": "describe_topic", "topic": "t", "after": "x"}))
    assert MetadataRequest.from_payload(MetadataRequest(op="list_topics", after="t1").to_payload()).after == "t1"
