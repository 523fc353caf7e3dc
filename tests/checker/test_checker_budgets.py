"""Checks that always return (issue 19): per-key budgets of steps, explored
states and time, and a deadline for the whole check, on the Spark job and
the reference checker. A key that runs out is unknown with the reason; the
other keys are still decided; a check with an unknown key and no invalid
one exits 3, never 0.

The undecidable key is ``_checker_helpers.explosive_history``'s: 2^60
states, so no machine decides it however fast, and which limit stops it
never depends on the machine's speed."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from _checker_helpers import explosive_history
from jepsen_like.checker import KeyBudget, check, check_reference
from jepsen_like.checker._job import DEADLINE_GRACE_S
from jepsen_like.cli import main as jepsen_like

UNLIMITED = 10**15


def _keys(result) -> tuple[dict, list]:
    lin = result["checks"]["linearizability"] if isinstance(result, dict) else result.checks["linearizability"]
    return lin["keys"], lin["unknown_keys"]


def test_cli_a_key_out_of_its_state_budget_is_unknown_the_others_decided_exit_3(spark, tmp_path):
    history = explosive_history(tmp_path / "explosive.jsonl")
    out = tmp_path / "explosive.json"
    run = CliRunner().invoke(
        jepsen_like, ["check", str(history), "--key-budget-states", "5000", "--out", str(out)], catch_exceptions=False
    )
    assert run.exit_code == 3, run.output
    assert "0 valid, 0 invalid, 1 unknown" in run.output
    summary = " ".join(run.output.split())  # (the summary wraps at the console's width)
    assert "linearizability: key hot (61 ops) unknown: state budget of 5000 explored states used up" in summary
    result = json.loads(out.read_text())
    keys, unknown = _keys(result)
    assert result["valid"] == "unknown"
    assert keys == {"total": 4, "linearizable": 3, "not-linearizable": 0, "unknown": 1}
    assert [(entry["key"], entry["budget"], entry["states"]) for entry in unknown] == [("hot", "states", 5000)]
    assert result["checks"]["linearizability"]["budget_states"] == 5000
    # The reference checker: the same verdicts by the same limit (its own counts).
    reference = CliRunner().invoke(
        jepsen_like, ["check", "--reference", str(history), "--key-budget-states", "5000"], catch_exceptions=False
    )
    assert reference.exit_code == 3, reference.output
    assert "key hot (61 ops) unknown: state budget of 5000 explored states used up" in " ".join(reference.output.split())


def test_reference_deadline_leaves_the_hot_key_unknown_and_decides_the_rest(tmp_path):
    history = explosive_history(tmp_path / "explosive.jsonl")
    started = time.monotonic()
    [result] = check_reference(
        str(history),
        limits=KeyBudget(
            budget_steps=UNLIMITED, budget_states=UNLIMITED, deadline_at_s=time.time() + 1.0
        ),
    )
    assert time.monotonic() - started < 30  # 1 s, and a wide margin for a loaded machine
    keys, unknown = _keys(result)
    assert result.valid == "unknown"
    assert keys["linearizable"] + keys["unknown"] == 4 and keys["not-linearizable"] == 0
    assert unknown[0]["key"] == "hot" and unknown[0]["budget"] == "deadline"
    assert unknown[0]["reason"].startswith("deadline: the check's deadline passed after ")


def test_spark_deadline_passed_before_the_job_leaves_every_check_unknown(spark, tmp_path):
    """The deadline's plumbing on the driver, without waiting for it: a
    deadline already gone when the first phase starts."""
    history = explosive_history(tmp_path / "explosive.jsonl")
    [result] = check(str(history), spark=spark, deadline_s=1e-6)
    assert result.valid == "unknown"
    assert {check_["status"] for check_ in result.checks.values()} == {"unknown"}
    assert result.checks["linearizability"]["reason"] == "deadline: the check's deadline passed before this check ran"
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None  # the job group is not left behind


@pytest.mark.long
def test_spark_deadline_is_honoured_within_a_bounded_margin(spark, tmp_path):
    """Budgets out of reach, a deadline of 120 s: the check returns soon after
    it (the searches stop themselves at the deadline; the job is cancelled
    DEADLINE_GRACE_S after it at the latest), the hot key unknown by the
    deadline, the calm keys decided."""
    history = explosive_history(tmp_path / "explosive.jsonl")
    # A first check of the same history warms the session (its first job
    # compiles and loads much), so that the phases before tier 2 take
    # seconds below the deadline, not minutes, on a loaded machine.
    check(str(history), spark=spark, budget_states=5000)
    deadline_s = 120.0  # far more than the phases before tier 2 take, even on a loaded machine
    started = time.monotonic()
    [result] = check(
        str(history), spark=spark, deadline_s=deadline_s, budget_steps=UNLIMITED, budget_states=UNLIMITED,
        budget_ms=UNLIMITED,
    )
    elapsed_s = time.monotonic() - started
    assert deadline_s <= elapsed_s < deadline_s + DEADLINE_GRACE_S + 30, elapsed_s
    keys, unknown = _keys(result)
    assert keys == {"total": 4, "linearizable": 3, "not-linearizable": 0, "unknown": 1}
    assert unknown[0]["key"] == "hot" and unknown[0]["budget"] == "deadline"
    assert result.valid == "unknown"
    assert result.checks["stale-read"]["status"] == "pass"  # tier 1 finished well before
