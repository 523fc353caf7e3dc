"""Results: verdicts, exit codes, results files, meta (pure Python)."""

from __future__ import annotations

import json

import pytest

from jepsen_like.checker import HistoryFormatError, HistoryResult, exit_code, read_meta, write_results
from jepsen_like.checker._report import history_verdict, linearizability_check, skip_reasons, tier1_check
from jepsen_like.checker import KeyBudget


def result(name: str, statuses: dict[str, str]) -> HistoryResult:
    checks = {check: {"status": status, "count": int(status == "fail"), "witnesses": []} for check, status in statuses.items()}
    return HistoryResult(history=name, path=f"/x/{name}.jsonl", model="register", checker="spark", stats={}, checks=checks)


def test_unknown_is_never_a_pass_and_fail_wins():
    assert history_verdict({"a": {"status": "pass"}, "b": {"status": "skipped"}}) is True
    assert history_verdict({"a": {"status": "pass"}, "b": {"status": "unknown"}}) == "unknown"
    assert history_verdict({"a": {"status": "fail"}, "b": {"status": "unknown"}}) is False
    assert history_verdict({"a": {"status": "skipped"}, "b": {"status": "skipped"}}) is True
    assert result("e", {"a": "skipped", "b": "skipped"}).nothing_to_check
    assert not result("v", {"a": "skipped", "b": "pass"}).nothing_to_check


def test_exit_codes():
    valid = result("v", {"stale-read": "pass"})
    invalid = result("i", {"stale-read": "fail"})
    unknown = result("u", {"linearizability": "unknown"})
    assert exit_code([valid]) == 0
    assert exit_code([valid, unknown]) == 3
    assert exit_code([valid, unknown, invalid]) == 1
    empty = result("e", {"stale-read": "skipped", "linearizability": "skipped"})
    assert exit_code([empty]) == 4
    assert exit_code([valid, empty]) == 4
    assert exit_code([empty, unknown]) == 3
    assert exit_code([empty, invalid]) == 1


def test_linearizability_entry_counts_keys_and_orders_witnesses():
    keys = [
        {"key": "b", "verdict": "not-linearizable", "ops": 9, "witness": {"op": {"index": 7, "complete_index": 9}}},
        {"key": "a", "verdict": "not-linearizable", "ops": 5, "witness": {"op": {"index": 1, "complete_index": 3}}},
        {"key": "c", "verdict": "unknown", "ops": 50, "witness": None, "reason": "budget"},
        {"key": "d", "verdict": "linearizable", "ops": 2, "witness": None},
    ]
    entry = linearizability_check(keys, KeyBudget(budget_steps=1000), max_witnesses=1)
    assert entry["status"] == "fail" and entry["count"] == 2
    assert entry["keys"] == {"total": 4, "linearizable": 1, "not-linearizable": 2, "unknown": 1}
    assert [w["key"] for w in entry["witnesses"]] == ["a"]  # first by completion index, capped
    assert entry["unknown_keys"] == [
        {"key": "c", "ops": 50, "reason": "budget", "budget": None, "steps": None, "states": None}
    ]
    assert (entry["budget_steps"], entry["budget_states"], entry["budget_ms"]) == (1000, 4_000_000, 600_000)
    assert linearizability_check(keys[2:], KeyBudget(budget_steps=1000), max_witnesses=5)["status"] == "unknown"


def test_tier1_entry_keeps_the_exact_count_and_the_first_witnesses():
    entry = tier1_check([(5, {"read": 5}), (2, {"read": 2})], total=40, max_witnesses=1)
    assert entry == {"status": "fail", "count": 40, "witnesses": [{"read": 2}]}
    assert tier1_check([], total=0, max_witnesses=3)["status"] == "pass"


def test_checks_without_input_are_skipped_with_a_reason():
    counts = dict.fromkeys(
        ["ok_reads", "ok_reads_with_offset", "ok_broker_reads", "ok_broker_reads_with_offset", "ok_register_reads",
         "ok_final_reads", "broker_requests", "role_events", "broker_registrations", "broker_state_events",
         "log_dump_records", "tier2_operations"], 0)
    reasons = skip_reasons(counts)
    assert all(reason for reason in reasons.values())
    reasons = skip_reasons({**counts, "ok_reads": 3, "log_dump_records": 1})
    assert reasons["stale-read"] is None and reasons["lost-write"] is None and reasons["forked-log"] is None
    assert reasons["stale-broker-epoch"] is not None


def test_results_files(tmp_path):
    one = result("one", {"stale-read": "pass"})
    two = result("two", {"stale-read": "fail"})
    [path] = write_results([one], tmp_path / "deep" / "r.json")
    assert json.loads(path.read_text())["valid"] is True
    written = write_results([one, two], tmp_path / "dir")
    assert sorted(p.name for p in written) == ["one.json", "two.json"]
    assert json.loads((tmp_path / "dir" / "two.json").read_text())["valid"] is False
    with pytest.raises(NotADirectoryError):
        write_results([one, two], tmp_path / "deep" / "r.json")


def test_meta_fields_are_checked(tmp_path):
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"fetch_timeout_ms": 200, "check_quorum_factor": 2, "staleness_bound_ms": 50, "seed": 7}))
    parsed = read_meta(meta)
    assert parsed.leader_local_bound_ms == 400 and parsed.staleness_bound_ms == 50 and parsed.offset_scope == "log"
    for bad in ({"fetch_timeout_ms": -1}, {"offset_scope": "global"}, {"model": "queue"}, {"staleness_bound_ms": True}):
        meta.write_text(json.dumps(bad))
        with pytest.raises(HistoryFormatError):
            read_meta(meta)
    meta.write_text("{not json")
    with pytest.raises(HistoryFormatError, match="cannot read meta"):
        read_meta(meta)


def test_the_checker_imports_nothing_of_the_system_it_checks():
    import subprocess
    import sys

    probe = (
        "import sys, jepsen_like.checker, jepsen_like.checker.cli, jepsen_like.checker._tier1, jepsen_like.checker._tier2;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('quorum', 'registration', 'broker_agent')"
        " or m.startswith(('jepsen_like.sim', 'jepsen_like.campaign', 'jepsen_like.nemesis'))))"
    )
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


def test_the_summary_says_why_a_history_is_unknown():
    from jepsen_like.checker._report import deadline_check, unknown_lines

    keys = [{"key": "hot", "verdict": "unknown", "ops": 61, "witness": None, "budget": "states", "steps": 9, "states": 5,
             "reason": "state budget of 5 explored states used up (9 steps)"},
            {"key": "calm", "verdict": "linearizable", "ops": 2, "witness": None}]
    checks = {"stale-read": deadline_check("this check ran"), "garbage-read": deadline_check("this check ran"),
              "linearizability": linearizability_check(keys, KeyBudget(budget_states=5), max_witnesses=5)}
    result = HistoryResult(history="h", path="h.jsonl", model="register", checker="spark", stats={}, checks=checks)
    assert result.valid == "unknown" and exit_code([result]) == 3
    assert unknown_lines(result) == [
        "linearizability: key hot (61 ops) unknown: state budget of 5 explored states used up (9 steps)",
        "stale-read, garbage-read: unknown: deadline: the check's deadline passed before this check ran",
    ]
