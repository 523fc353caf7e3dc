"""Synthetic histories: every planted anomaly is found, with the right
witness, and nothing is reported on clean ones (one Spark run for all)."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from _checker_helpers import comparable
from jepsen_like.checker import ANOMALY_KINDS, check, check_reference, synthesize
from jepsen_like.checker._synth import find_planted, parse_plant_spec

pytestmark = pytest.mark.spark

PLANTED_PER_KIND = 2
CLEAN_SEEDS = (11, 12)


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("synth")
    made = {}
    for number, kind in enumerate(ANOMALY_KINDS):
        made[kind] = synthesize(root / kind, ops=1500, keys=12, plant={kind: PLANTED_PER_KIND}, seed=100 + number)
    made["clean-jsonl"] = synthesize(root / "clean-jsonl", ops=3000, keys=7, seed=CLEAN_SEEDS[0])
    made["clean-parquet"] = synthesize(
        root / "clean-parquet", ops=3000, keys=40, seed=CLEAN_SEEDS[1], processes=16,
        history_format="parquet", side_format="parquet",
    )
    made["clean-small"] = synthesize(root / "clean-small", ops=600, keys=5, seed=13, processes=6)
    made["all-kinds"] = synthesize(root / "all-kinds", ops=800, keys=6, plant={kind: 1 for kind in ANOMALY_KINDS}, seed=7)
    return {"root": root, **made}


@pytest.fixture(scope="module")
def results(spark, campaigns):
    return {r.history: r.to_dict() for r in check([str(campaigns["root"])], spark=spark, all_keys=True, max_witnesses=100)}


@pytest.mark.parametrize("kind", list(ANOMALY_KINDS))
def test_every_planted_anomaly_is_found_with_its_witness(kind, campaigns, results):
    result = results[kind]
    planted = campaigns[kind].planted
    assert len(planted) == PLANTED_PER_KIND if kind != "split-brain" else len(planted) >= 1
    for anomaly in planted:
        assert find_planted(result, anomaly), (kind, anomaly, result["checks"][anomaly.check])
    primary = ANOMALY_KINDS[kind].check
    implied = set(ANOMALY_KINDS[kind].implied)
    failed = {name for name, check_result in result["checks"].items() if check_result["status"] == "fail"}
    assert primary in failed
    assert failed - {primary} <= implied, failed
    # Exactly what was planted: one anomaly per plant, in its check and in
    # each check it implies.
    for name in {primary} | implied:
        assert result["checks"][name]["count"] == len(planted), (name, result["checks"][name])
    assert result["valid"] is False


@pytest.mark.parametrize("name", ["clean-jsonl", "clean-parquet", "clean-small"])
def test_clean_histories_report_nothing_and_every_check_runs(name, results):
    result = results[name]
    assert result["valid"] is True
    statuses = {check_name: check_result["status"] for check_name, check_result in result["checks"].items()}
    assert statuses == {check_name: "pass" for check_name in statuses}
    assert result["checks"]["linearizability"]["keys"]["linearizable"] == result["checks"]["linearizability"]["keys"]["total"]


def test_all_kinds_planted_together_are_all_found(campaigns, results):
    result = results["all-kinds"]
    for anomaly in campaigns["all-kinds"].planted:
        assert find_planted(result, anomaly), anomaly
    failed = {name for name, check_result in result["checks"].items() if check_result["status"] == "fail"}
    assert failed == {kind.check for kind in ANOMALY_KINDS.values()}


@pytest.mark.parametrize("name", ["all-kinds", "clean-small", "nonlinearizable", "lost-write"])
def test_reference_agrees_with_the_spark_job(name, campaigns, results):
    reference = check_reference([str(campaigns["root"] / name)], max_witnesses=100)[0]
    assert comparable(reference.to_dict()) == comparable(results[name])


def test_same_seed_same_files(tmp_path):
    first = synthesize(tmp_path / "a", ops=500, keys=3, plant={"stale-read": 1, "forked-log": 1}, seed=5)
    second = synthesize(tmp_path / "b", ops=500, keys=3, plant={"stale-read": 1, "forked-log": 1}, seed=5)
    names = ["history.jsonl", "node-events.jsonl", "log-dumps.jsonl", "planted.json"]
    match, mismatch, errors = filecmp.cmpfiles(first.directory, second.directory, names, shallow=False)
    assert (mismatch, errors) == ([], [])
    third = synthesize(tmp_path / "c", ops=500, keys=3, plant={"stale-read": 1, "forked-log": 1}, seed=6)
    assert (Path(third.directory) / "history.jsonl").read_bytes() != (Path(first.directory) / "history.jsonl").read_bytes()


def test_plant_spec_parsing():
    assert parse_plant_spec("stale-read:2, lost-write:1,split-brain") == {"stale-read": 2, "lost-write": 1, "split-brain": 1}
    assert parse_plant_spec("") == {}
    with pytest.raises(ValueError, match="unknown anomaly kind"):
        parse_plant_spec("stale-reads:1")
    with pytest.raises(ValueError, match="bad count"):
        parse_plant_spec("stale-read:x")
