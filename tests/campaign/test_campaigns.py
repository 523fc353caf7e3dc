"""Short real campaigns: real processes behind the proxy network, real
faults, the history checked by the Spark job. The harness and the checker
must find the bug they exist for, and nothing when it is fixed."""

import json

import pytest

from jepsen_like.campaign import Campaign, CampaignOptions

pytestmark = pytest.mark.processes


async def run(tmp_path, **overrides):
    options = CampaignOptions(store=tmp_path / "store", **overrides)
    return await Campaign(options).run()


async def test_a_chaos_campaign_with_partitions_kills_and_pauses_is_valid(tmp_path):
    result = await run(tmp_path, scenario="chaos", time_limit_s=25, seed=3)
    assert result.checker_error is None
    assert result.faults >= 3
    assert result.ops["ok"] > 1000
    assert result.valid is True, result.anomalies
    results = json.loads((result.run_dir / "results.json").read_text())
    assert results["checks"]["linearizability"]["status"] == "pass"
    assert results["stats"]["log_dump_records"] > 0 and results["stats"]["role_events"] > 0
    assert result.report is not None and "VALID" in result.report.read_text()


async def test_the_zombie_leader_without_check_quorum_serves_stale_reads_and_the_checker_finds_them(tmp_path):
    """KAFKA-15489 on real processes: with check quorum off, the isolated
    leader keeps answering leader-local reads that miss writes the new
    leader acknowledged long before."""
    result = await run(tmp_path, scenario="zombie-leader", time_limit_s=25, check_quorum=False, read_mode="leader-local")
    assert result.checker_error is None
    assert result.valid is False
    assert result.anomalies.get("stale-read", 0) > 0
    witnesses = json.loads((result.run_dir / "results.json").read_text())["checks"]["stale-read"]["witnesses"]
    assert witnesses, "the stale reads come with the operations that witness them"
