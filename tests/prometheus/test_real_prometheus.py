"""Debian's Prometheus on loopback scraping a 3-controller cluster and a
broker (issue 25): the leader, the high watermark and commit latency reach
it and move with a write; the alert rules load and evaluate; every panel
query of the Grafana dashboard parses and returns series."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest
import trio
from loopback import free_ports
from prometheus_tools import require_prometheus

from broker_agent import BrokerConfig, open_broker
from jepsen_like.prometheus import ALERT_RULES, KEY_QUERIES, dashboard_queries, scrape_config, start_prometheus
from quorum.runtime import NodeConfig
from registration import ControllerConfig, open_controller_node
from registration.client import AdminClient

QUORUM = {"election_timeout_ms": 500, "fetch_timeout_ms": 1000}
TIMERS = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}
WAIT_S = 60

pytestmark = pytest.mark.processes  # a real Prometheus process, real sockets


async def wait_for(prometheus, promql: str, accept, what: str):
    """Poll ``promql`` until ``accept(result)`` holds; the result."""
    with trio.fail_after(WAIT_S):
        while True:
            result = await trio.to_thread.run_sync(prometheus.query, promql)
            if accept(result):
                return result
            await trio.sleep(0.2)  # the next scrape (every 0.25 s)


def by_node(result) -> dict[str, float]:
    return {series["metric"]["node"]: float(series["value"][1]) for series in result}


async def test_prometheus_scrapes_a_cluster_and_a_broker_and_sees_a_write(tmp_path):
    require_prometheus()
    *controller_ports, prometheus_port = free_ports(4)
    voters = {node_id: ("127.0.0.1", port) for node_id, port in zip((1, 2, 3), controller_ports)}
    async with AsyncExitStack() as stack:
        controllers = []
        for node_id in voters:
            config = NodeConfig(
                node_id=node_id,
                voters=voters,
                data_dir=tmp_path / f"c{node_id}",
                fsync=False,
                metrics_listen=("127.0.0.1", 0),
                quorum=QUORUM,
                plaintext=True,
            )
            controllers.append(
                await stack.enter_async_context(
                    open_controller_node(config, ControllerConfig(cluster_id="pykraft", **TIMERS))
                )
            )
        broker_config = BrokerConfig(
            broker_id=101,
            bootstrap=voters,
            listen=("127.0.0.1", 0),
            data_dir=tmp_path / "b101",
            fsync=False,
            metrics_listen=("127.0.0.1", 0),
            quorum=QUORUM,
            **TIMERS,
            plaintext=True,
        )
        broker = await stack.enter_async_context(open_broker(broker_config))
        with trio.fail_after(WAIT_S):
            await broker.wait_online()
        targets = [("127.0.0.1", handle.metrics_port) for handle in controllers] + [("127.0.0.1", broker.metrics_port)]
        config_text = scrape_config({"pykraft": targets}, scrape_interval_s=0.25, rule_files=[ALERT_RULES])
        prometheus = await trio.to_thread.run_sync(
            lambda: start_prometheus(tmp_path / "prometheus", config_text, prometheus_port)
        )
        stack.callback(prometheus.stop)

        # Every endpoint scraped.
        await wait_for(prometheus, 'up{job="pykraft"} == 1', lambda result: len(result) == 4, "all targets up")
        # One leader among the voters, and every node (the broker too) names it.
        leaders = await wait_for(
            prometheus, 'pykraft_quorum_role{role="leader"} == 1', lambda result: len(result) == 1, "one leader"
        )
        leader = leaders[0]["metric"]["node"]
        assert leader in {"1", "2", "3"}
        named = by_node(await trio.to_thread.run_sync(prometheus.query, "pykraft_quorum_leader_id"))
        assert named == {"1": int(leader), "2": int(leader), "3": int(leader), "101": int(leader)}

        high_watermark = f'pykraft_quorum_high_watermark{{node="{leader}"}}'
        commits = f'pykraft_quorum_commit_latency_seconds_count{{node="{leader}"}}'
        before_hw = by_node(await trio.to_thread.run_sync(prometheus.query, high_watermark))[leader]
        before_commits = by_node(await trio.to_thread.run_sync(prometheus.query, commits))[leader]

        # A write: a topic created through the active controller.
        async with AdminClient([f"{node_id}@{host}:{port}" for node_id, (host, port) in voters.items()]) as admin:
            created = await admin.create_topic("t", partitions=1, replication_factor=1)
            assert not created.results[0].error
            written = (await admin.describe_cluster(linearizable=True)).offset

        after_hw = await wait_for(
            prometheus, high_watermark, lambda result: result and float(result[0]["value"][1]) >= written, "hw moved"
        )
        assert float(after_hw[0]["value"][1]) > before_hw
        await wait_for(
            prometheus, commits, lambda result: result and float(result[0]["value"][1]) > before_commits, "commit counted"
        )
        p99 = await wait_for(
            prometheus,
            f'histogram_quantile(0.99, rate(pykraft_quorum_commit_latency_seconds_bucket{{node="{leader}"}}[1m]))',
            lambda result: result and result[0]["value"][1] not in ("NaN", "+Inf"),
            "a commit latency quantile",
        )
        assert 0 < float(p99[0]["value"][1]) < 5

        # The alert rules loaded and evaluate without error; none fires on
        # a healthy cluster.
        with trio.fail_after(WAIT_S):
            while True:
                rules = await trio.to_thread.run_sync(prometheus.rules)
                if rules and all(rule["health"] == "ok" for rule in rules):
                    break
                await trio.sleep(0.2)  # the next evaluation (every 0.25 s)
        assert len(rules) == 7
        assert all(rule["state"] == "inactive" for rule in rules), [(r["name"], r["state"]) for r in rules]

        # Every dashboard panel's query, and the report's key queries, parse
        # and return series.
        queries = dashboard_queries() + sorted(KEY_QUERIES.items())
        assert len(queries) >= 20
        for title, promql in queries:
            result = await wait_for(prometheus, promql, lambda result: len(result) > 0, title)
            assert result, (title, promql)
