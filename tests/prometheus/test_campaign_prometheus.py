"""``jepsen-like campaign --prometheus`` (``make run PROMETHEUS=1``): a real
Prometheus scrapes every node of a short campaign, the report links the
key queries, and the run's data can be served again afterwards."""

from __future__ import annotations

import json

import pytest
import trio
from loopback import free_ports
from prometheus_tools import require_prometheus

from jepsen_like.campaign import Campaign, CampaignOptions
from jepsen_like.prometheus import KEY_QUERIES, start_prometheus

pytestmark = pytest.mark.processes


async def test_a_campaign_scraped_by_prometheus_links_its_queries_and_keeps_its_data(tmp_path):
    require_prometheus()
    options = CampaignOptions(
        store=tmp_path / "store", scenario="chaos", time_limit_s=8, seed=4, brokers=1, quiesce_s=2.0,
        checker="reference", prometheus=True,
    )  # fmt: skip
    result = await Campaign(options).run()
    assert result.valid is True, result.anomalies
    described = json.loads((result.run_dir / "prometheus.json").read_text())
    assert [query["name"] for query in described["queries"]] == list(KEY_QUERIES)
    report = result.report.read_text()
    assert "<h3>Prometheus</h3>" in report
    for query in described["queries"]:
        assert query["link"].startswith(described["url"] + "/graph?g0.expr=")
        assert query["link"].replace("&", "&amp;") in report
    # The run's Prometheus is gone with the run; its data is not.
    directory = result.run_dir / "prometheus"
    [port] = free_ports(1)
    server = await trio.to_thread.run_sync(
        lambda: start_prometheus(directory, (directory / "prometheus.yml").read_text(), port)
    )
    try:
        seen = await trio.to_thread.run_sync(server.query, "max by (node) (max_over_time(pykraft_quorum_high_watermark[1h]))")
        assert {series["metric"]["node"] for series in seen} == {"1", "2", "3", "101"}
        assert all(float(series["value"][1]) > 0 for series in seen)
        leaders = await trio.to_thread.run_sync(server.query, 'max_over_time(pykraft_quorum_role{role="leader"}[1h]) == 1')
        assert leaders  # some controller led during the run
    finally:
        server.stop()
