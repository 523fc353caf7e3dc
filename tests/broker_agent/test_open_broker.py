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
