"""Real Kafka through the adapter (jepsen_like.campaign.kafka): one combined
controller+broker process formatted with a cluster id, a topic created
through Kafka's admin path and read back from the broker's metadata.

Skipped, with one line saying how to fetch it, only when Kafka 4.4's jars
are not in the cache (``make kafka``; ``make test`` fetches them when it can).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from jepsen_like.campaign.kafka import KafkaCluster, kafka_problem

pytestmark = pytest.mark.processes

START_TIMEOUT_S = 240.0


def wait_until(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``condition`` until truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except Exception as error:  # noqa: BLE001 - "not yet"
            last = error
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_one_controller_kafka_creates_a_topic_and_reads_it_back(tmp_path):
    problem = kafka_problem()
    if problem:
        pytest.skip(f"KAFKA NOT FETCHED, test not run: {problem}")
    cluster = KafkaCluster(tmp_path / "kafka", controllers=1, brokers=0, combined=True, heap_mb=512)
    try:
        cluster.start(timeout_s=START_TIMEOUT_S)
        node = cluster.nodes[1]
        assert node.roles == ("broker", "controller")
        assert (node.data_dir / "meta.properties").read_text().count(cluster.cluster_id) == 1
        assert cluster.active_controller() == 1
        assert cluster.unfenced_brokers() == {1}

        cluster.create_topic("orders", partitions=3, replication_factor=1)
        assert wait_until(lambda: cluster.topic_partitions("orders") == 3, 60.0, "orders in the metadata")
        assert cluster.topic_partitions("no-such-topic") is None

        from confluent_kafka import KafkaError, KafkaException

        with pytest.raises(KafkaException) as refused:
            cluster.create_topic("orders", partitions=1)
        assert refused.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    except BaseException:
        cluster.stop(remove=False)  # keep the logs under tmp_path for the failure's reader
        raise
    pids = [pid for n in cluster.nodes.values() for pid in n.pids]
    cluster.stop(remove=True)
    assert pids and not any(_alive(pid) for pid in pids)
    assert not any(n.directory.exists() for n in cluster.nodes.values())
