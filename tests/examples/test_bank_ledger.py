"""A campaign against the user's own state machine, from pytest (issue 20,
item 5): the bank ledger of examples/bank_ledger.py served by three node
processes, four clients transferring and reading while nodes are paused
and cut off (and killed, in the long test), the history checked against
the ledger's model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jepsen_like.campaign import run_own_campaign
from jepsen_like.campaign.pytest_plugin import replicated_cluster  # noqa: F401  (the fixture)
from jepsen_like.checker import model_from_step

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import bank_ledger  # noqa: E402

pytestmark = pytest.mark.processes

LEDGER_MODEL = model_from_step(bank_ledger.ledger_step, bank_ledger.INITIAL_STATE, name="bank-ledger", queries=("read",))


def _faults_started(history: Path) -> set[str]:
    events = [json.loads(line) for line in history.read_text().splitlines()]
    return {event["f"] for event in events if event["process"] == "nemesis" and event["value"]["phase"] == "start"}


async def test_the_ledger_survives_pauses_and_partitions(replicated_cluster, tmp_path):  # noqa: F811
    """Pauses and partitions shorter than a client's request timeout leave
    few operations indeterminate, so the search is quick; kills (every
    operation in flight at the leader indeterminate) are in the long test."""
    cluster = replicated_cluster(bank_ledger.Ledger, queries=("read",))
    result = await run_own_campaign(
        cluster, model=LEDGER_MODEL, generate=bank_ledger.generate, run_dir=tmp_path / "run",
        duration_s=5, fault_s=0.8, seed=3, nemeses=("pause", "partition"), checker="search",
    )  # fmt: skip
    assert result.valid is True, result.result
    assert result.counts["ok"] > 50
    assert result.counts["fail"] > 0  # overdrafts refused by the ledger itself
    assert result.faults >= 2 and _faults_started(result.history)


# The same campaign with kills too, longer, checked by the Spark job (the
# model travels to Spark's Python workers by value). Faults are spaced out:
# a kill or a cut of the leader leaves every operation in flight there
# indeterminate, and 30 s of one-second faults (about 50 of them) made the
# search run out of budget.
@pytest.mark.long
async def test_the_ledger_campaign_checked_by_spark(replicated_cluster, tmp_path):  # noqa: F811
    cluster = replicated_cluster(bank_ledger.Ledger, queries=("read",))
    result = await run_own_campaign(
        cluster, model=LEDGER_MODEL, generate=bank_ledger.generate, run_dir=tmp_path / "run",
        duration_s=20, fault_s=1.5, seed=11, checker="spark",
    )  # fmt: skip
    assert result.valid is True, result.result.to_dict()
    assert result.result.checks["linearizability"]["status"] == "pass"
    assert result.faults >= 4


@pytest.mark.long  # 20-40 s on 2 cores: make soak
async def test_the_ledger_survives_hostile_clients_and_damaged_disks(replicated_cluster, tmp_path):  # noqa: F811
    """The other two nemeses: garbage, oversized, stalled and flooding
    traffic at a node's own port, and a node killed with its log torn or a
    bit of it flipped (it cuts the torn tail, or repairs from the leader)."""
    cluster = replicated_cluster(bank_ledger.Ledger, queries=("read",))
    result = await run_own_campaign(
        cluster, model=LEDGER_MODEL, generate=bank_ledger.generate, run_dir=tmp_path / "run",
        duration_s=8, fault_s=1.0, seed=4, nemeses=("hostile", "storage"), checker="search",
    )  # fmt: skip
    assert result.valid is True, result.result
    started = _faults_started(result.history)
    assert started == {"hostile", "storage"}, started
    assert result.counts["ok"] > 50
