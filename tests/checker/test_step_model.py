"""A model written as one Python function (``model_from_step``, issue 20
item 5): what the search makes of ok, fail and info operations under it, the
same verdicts on the reference path, the search alone and the Spark job,
and the model travelling to Spark's workers from a module they cannot
import (this test file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jepsen_like.checker import check, check_reference, model_from_step, search_history


def wallet_step(state: dict[str, int], op: dict[str, Any]) -> tuple[bool, Any, dict[str, int]]:
    """Two accounts; ``pay [from, to, amount]`` refuses an overdraft."""
    if op["f"] == "read":
        return True, state, state
    source, target, amount = op["value"]
    if state[source] < amount:
        return False, None, state
    state[source] -= amount
    state[target] += amount
    return True, None, state


WALLET = model_from_step(wallet_step, {"a": 10, "b": 0}, name="wallet", queries=("read",))


def write_history(path: Path, operations: list[tuple[int, str, str, Any, Any, int, int]]) -> Path:
    """One event pair per (process, f, completion type, invoke value,
    completion value, invoke time, completion time)."""
    events = []
    for process, f, outcome, value, result, start, end in operations:
        events.append({"process": process, "type": "invoke", "f": f, "value": value, "time": start})
        if outcome != "open":
            events.append({"process": process, "type": outcome, "f": f, "value": result, "time": end})
    events.sort(key=lambda event: event["time"])
    for index, event in enumerate(events):
        event["index"] = index
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    return path


# An overdraft that succeeded: after paying 8, "a" has 2, and a second ok
# payment of 5 fits no order.
OVERDRAFT = [
    (0, "pay", "ok", ["a", "b", 8], None, 0, 10),
    (1, "pay", "ok", ["a", "b", 5], None, 20, 30),
    (0, "read", "ok", None, {"a": -3, "b": 13}, 40, 50),
]
# A refused overdraft (fail) is dropped; an indeterminate payment (info) has
# to have happened to explain the last read, and may.
REFUSED_AND_INDETERMINATE = [
    (0, "pay", "ok", ["a", "b", 8], None, 0, 10),
    (1, "pay", "fail", ["a", "b", 5], None, 20, 30),
    (2, "pay", "info", ["b", "a", 3], None, 35, 36),
    (0, "read", "ok", None, {"a": 5, "b": 5}, 40, 50),
]
# Concurrent payments whose order decides a read: legal in one order only.
CONCURRENT = [
    (0, "pay", "ok", ["a", "b", 10], None, 0, 30),
    (1, "pay", "ok", ["b", "a", 4], None, 5, 35),
    (2, "read", "ok", None, {"a": 4, "b": 6}, 40, 50),
]


@pytest.mark.parametrize(
    ("operations", "linearizable"),
    [(OVERDRAFT, False), (REFUSED_AND_INDETERMINATE, True), (CONCURRENT, True)],
    ids=["overdraft", "refused-and-indeterminate", "concurrent"],
)
def test_the_search_and_the_reference_agree_on_a_step_model(tmp_path, operations, linearizable):
    history = write_history(tmp_path / "history.jsonl", operations)
    [verdict] = search_history(history, model=WALLET).values()
    assert (verdict.verdict == "linearizable") is linearizable
    [reference] = check_reference([str(history)], model=WALLET)
    assert reference.model == "wallet"
    assert (reference.checks["linearizability"]["status"] == "pass") is linearizable


def test_the_witness_names_the_overdraft(tmp_path):
    history = write_history(tmp_path / "history.jsonl", OVERDRAFT)
    [verdict] = search_history(history, model=WALLET).values()
    assert verdict.witness["op"]["invoke_value"] == ["a", "b", 5]


def test_a_step_model_refuses_what_it_cannot_check(tmp_path):
    with pytest.raises(TypeError, match="step must be a function"):
        model_from_step("not a function", {})
    with pytest.raises(TypeError, match="JSON value"):
        model_from_step(wallet_step, {"a": {1, 2}})

    def broken_step(state: Any, op: dict[str, Any]) -> tuple[bool, Any, Any]:
        raise KeyError(op["f"])

    history = write_history(tmp_path / "history.jsonl", OVERDRAFT[:1])
    with pytest.raises(ValueError, match=r"model broken: step raised KeyError.*\"pay\""):
        search_history(history, model=model_from_step(broken_step, {}, name="broken"))


@pytest.mark.spark
def test_spark_checks_a_step_model_shipped_from_a_test_module(spark, tmp_path):
    overdraft = write_history(tmp_path / "overdraft.jsonl", OVERDRAFT)
    fine = write_history(tmp_path / "fine.jsonl", REFUSED_AND_INDETERMINATE)
    results = {result.history: result for result in check([str(overdraft), str(fine)], model=WALLET, spark=spark)}
    assert results["fine"].valid is True
    assert results["fine"].model == "wallet"
    linearizability = results["overdraft"].checks["linearizability"]
    assert linearizability["status"] == "fail"
    assert linearizability["witnesses"][0]["op"]["invoke_value"] == ["a", "b", 5]
