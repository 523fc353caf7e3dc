"""Acceptance: the 109 Porcupine histories get the verdicts Porcupine's own
tests assert (shared/porcupine/README.md), through the Spark job; the
reference checker agrees on the small ones."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest

from jepsen_like.checker import REGISTER, check, check_operations, check_reference, discover_histories
from jepsen_like.checker._load import pair_operations, read_history_events

pytestmark = pytest.mark.spark

LINEARIZABLE_ETCD = {
    "002", "005", "007", "018", "025", "031", "038", "045", "048", "049", "051", "053",
    "056", "067", "075", "076", "080", "087", "092", "098", "100", "101", "102",
}
EMPTY_ETCD = "095"


def expected_valid(name: str) -> bool:
    if name.startswith("etcd_"):
        return name[len("etcd_"):] in LINEARIZABLE_ETCD or name[len("etcd_"):] == EMPTY_ETCD
    assert name.startswith("kv_c"), name
    return name.endswith("-ok")


@pytest.fixture(scope="module")
def spark_results(spark, porcupine_dir):
    return {result.history: result for result in check([str(porcupine_dir)], spark=spark)}


def test_all_109_histories_get_porcupines_verdict(spark_results):
    assert len(spark_results) == 109
    wrong = {name: result.valid for name, result in spark_results.items() if result.valid is not expected_valid(name)}
    assert wrong == {}
    assert sum(1 for name in spark_results if expected_valid(name)) == 27  # 23 + the empty one + 3 kv


def test_violations_come_with_a_witness_and_nothing_else_fires(spark_results):
    for name, result in spark_results.items():
        if expected_valid(name):
            assert result.failed_checks() == [], name
            continue
        # Tier 1 is sound: on these histories only the search finds anything.
        assert result.failed_checks() == ["linearizability"], name
        witness = result.checks["linearizability"]["witnesses"][0]
        assert witness["minimal"] is True
        assert witness["op"]["type"] == "ok"
        assert "complete_index" in witness["op"]


def test_empty_history_is_trivially_valid(spark_results):
    result = spark_results["etcd_095"]
    assert result.valid is True
    assert result.stats["operations"] == 0


def test_reference_checker_agrees_on_the_small_histories(spark_results, porcupine_dir):
    for path in sorted(porcupine_dir.glob("*.jsonl")):
        if path.stem.startswith("kv_c50"):
            continue  # too big for the naive search
        reference = check_reference([str(path)])[0]
        assert reference.valid is expected_valid(path.stem), path.stem
        spark_result = spark_results[path.stem]
        for name, check_result in reference.checks.items():
            if name == "linearizability":
                assert check_result["status"] == spark_result.checks[name]["status"], path.stem
                reference_ops = {(w["key"], w["op"]["index"]) for w in check_result["witnesses"]}
                spark_ops = {(w["key"], w["op"]["index"]) for w in spark_result.checks[name]["witnesses"]}
                # The Spark job may stop at the first refuted key; the
                # witnesses it does give are the reference's.
                assert spark_ops <= reference_ops, path.stem
            else:
                assert check_result == spark_result.checks[name], (path.stem, name)


def test_treating_info_as_fail_or_as_done_breaks_linearizable_histories(porcupine_dir):
    """The README's warning, checked: the same search with info operations
    dropped (as if failed) or returned at their timeout finds false
    violations in most linearizable etcd histories."""
    as_fail = as_done = 0
    names = sorted(LINEARIZABLE_ETCD)
    for source in discover_histories([str(porcupine_dir / f"etcd_{name}.jsonl") for name in names]):
        operations, _ = pair_operations(source, read_history_events(source))
        by_key = defaultdict(list)
        for operation in operations:
            by_key[operation.key].append(operation)
        (key_ops,) = by_key.values()
        assert check_operations(key_ops, REGISTER).verdict == "linearizable", source.name
        dropped = [o for o in key_ops if o.outcome != "info"]
        as_fail += check_operations(dropped, REGISTER).verdict == "not-linearizable"
        done = [
            replace(o, outcome="ok", return_ns=o.complete_ns) if o.outcome == "info" and o.complete_ns is not None else o
            for o in key_ops
            if not (o.outcome == "info" and o.f == "read")
        ]
        as_done += check_operations(done, REGISTER).verdict == "not-linearizable"
    assert as_fail >= 15, as_fail
    assert as_done >= 15, as_done
