"""Jepsen's history.edn and Jepsen's models (issue 19): cas-register with an
initial value, multi-register, mutex, set, counter, each valid and invalid,
on the Spark job and on the reference checker, with their witnesses.

The EDN histories in data/edn/ were written for these tests by hand (each
with a NAME.meta.json naming its model); their expected verdicts and
witnesses are in ``EXPECTED``, worked out from the model's definition.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from jepsen_like.checker import COUNTER, HistoryFormatError, Operation, check, check_reference, discover_histories
from jepsen_like.checker._edn import iter_edn_events, parse_value
from jepsen_like.checker._model_catalog import counter_bounds
from jepsen_like.cli import main as jepsen_like

EDN_DIR = Path(__file__).resolve().parent / "data" / "edn"

# history -> (valid, linearizability witness fields: op index, its
# completion's index, and model-specific parts; None when valid)
EXPECTED = {
    "cas-register-initial-0": (True, None),
    "cas-register-stale": (False, {"op": (6, 7), "state": 2}),
    "multi-register-valid": (True, None),
    # A read of x=2, y=1 while {x:2, y:2} is written over {x:1, y:1}: each
    # key alone is linearizable, the pair is not.
    "multi-register-torn": (False, {"op": (3, 4), "state": {"x": 1, "y": 1}}),
    "mutex-valid": (True, None),
    "mutex-double-acquire": (False, {"op": (2, 3), "state": True}),
    "set-valid": (True, None),
    "set-lost-add": (False, {"op": (4, 5), "state": [1, 2]}),
    # The second read (1, after a read of 3) is within Jepsen's bounds:
    # the counter is checked as Jepsen checks it, not linearized.
    "counter-valid": (True, None),
    # The failed add of 2 counts in no bound: reads of 3 and of 0 are both
    # outside [1, 1].
    "counter-out-of-bounds": (False, {"op": (4, 5), "lower": 1, "upper": 1, "reads_out_of_bounds": 2}),
    # Independent histories (their meta says so): [key value] tuples, each
    # key a cas-register of its own. Key 1 is read as 5 after its cas to 6.
    "independent-cas-valid": (True, None),
    "independent-cas-stale": (False, {"op": (8, 9), "state": 6, "key": "1"}),
}


def _assert_expected(result, name: str) -> None:
    valid, expected = EXPECTED[name]
    linearizability = result.checks["linearizability"]
    assert result.valid is valid, (name, result.checks)
    if expected is None:
        assert linearizability["status"] == "pass", (name, linearizability)
        return
    assert linearizability["status"] == "fail" and linearizability["count"] == 1, (name, linearizability)
    witness = linearizability["witnesses"][0]
    assert (witness["op"]["index"], witness["op"]["complete_index"]) == expected["op"], (name, witness)
    assert witness["minimal"] is True
    for part, value in expected.items():
        if part == "op":
            continue
        if part == "state" and result.checker == "reference":
            continue  # the naive search names the operation only
        assert witness[part] == value, (name, part, witness)


# --- reading EDN -------------------------------------------------------------------


def test_edn_operations_become_history_events(tmp_path):
    path = tmp_path / "history.edn"
    path.write_text(
        "{:type :invoke, :f :add, :value 1, :process 0, :time 5, :index 0, :debug {:attempt 1}}\n"
        "{:type :ok, :f :add, :value 1.0, :process 0, :time 6, :index 1}\n"
        "\n"
        "{:type :info, :f :start-partition, :value {:n1 #{:n2 :n3}}, :process :nemesis, :time 7, :index 2}\n"
        "#jepsen.history.Op{:type :invoke, :f :read, :value nil, :process 1, :time 8, :index 3}\n"
        "{:type :ok, :f :read, :value #{3 1 2}, :process 1, :time 9, :index 4, :error [:timeout 12N]}\n"
    )
    events = list(iter_edn_events(path))
    assert [where for where, _ in events] == [f"{path}:{line}" for line in (1, 2, 4, 5, 6)]
    assert [event for _, event in events] == [
        # fields the checker does not know (:debug) are dropped
        {"type": "invoke", "f": "add", "value": 1, "process": 0, "time": 5, "index": 0},
        {"type": "ok", "f": "add", "value": 1.0, "process": 0, "time": 6, "index": 1},
        {"type": "info", "f": "start-partition", "value": {"n1": ["n2", "n3"]}, "process": "nemesis", "time": 7, "index": 2},
        {"type": "invoke", "f": "read", "value": None, "process": 1, "time": 8, "index": 3},
        {"type": "ok", "f": "read", "value": [1, 2, 3], "process": 1, "time": 9, "index": 4, "error": ["timeout", 12]},
    ]
    # 1 and 1.0 stay an integer and a float: different values, as in Jepsen.
    assert type(events[0][1]["value"]) is int and type(events[1][1]["value"]) is float


def test_edn_in_one_vector_without_index_or_time_goes_by_its_order():
    path = EDN_DIR / "mutex-double-acquire.edn"
    events = list(iter_edn_events(path))
    assert [where for where, _ in events] == [f"{path}:{line}" for line in range(3, 9)]
    assert [(event["index"], event["time"]) for _, event in events] == [(n, n) for n in range(6)]


MALFORMED_EDN = {
    "unclosed": ('{:type :invoke, :f :read, :process 0}\n{:type :ok :f :read :process 0\n',
                 ":2: not valid EDN (the text ends inside this form): {:type :ok"),
    "odd_map": ('{:type :invoke, :f :read, :process 0}\n\n{:type :ok :f}\n{:type :ok, :f :read, :process 0}\n',
                ":3: not valid EDN (Even number of terms required for map): {:type :ok :f}"),
    "bad_token": ('{:type :invoke, :f :read, :process 0}\n{:type :ok, :f :read, :process 0, :value }}\n', ":2: not valid EDN"),
    "not_a_map": ('{:type :invoke, :f :read, :process 0, :time 1}\n[:ok :read]\n', ":2: expected an operation map"),
    "no_type": ('{:type :invoke, :f :read, :process 0, :time 1, :index 0}\n\n{:f :read, :process 0, :time 2, :index 1}\n',
                ":3: missing required field 'type'"),
    "bad_process": ('{:type :invoke, :f :read, :process :client-7, :time 1, :index 0}\n', ":1: process must be an integer"),
    "some_indexes": ('{:type :invoke, :f :read, :process 0, :index 0}\n{:type :ok, :f :read, :process 0}\n',
                     ":2: this operation has no :index and the first one had one"),
    "unknown_tag": ('#my.app/Op {:type :invoke, :f :read, :process 0}\n', "not valid EDN here"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_EDN))
def test_malformed_edn_is_named_by_file_and_line(name, tmp_path):
    text, phrase = MALFORMED_EDN[name]
    path = tmp_path / f"{name}.edn"
    path.write_text(text)
    with pytest.raises(HistoryFormatError) as raised:
        check_reference([path])
    assert str(path) in str(raised.value) and phrase in str(raised.value), str(raised.value)


def test_initial_values_are_edn():
    assert parse_value("nil") is None and parse_value("null") is None
    assert parse_value("0") == 0 and type(parse_value("1.0")) is float
    assert parse_value('"a"') == "a" and parse_value(":a") == "a"
    assert parse_value("{:x 0, :y nil}") == {"x": 0, "y": None}
    assert parse_value("[1 2]") == [1, 2]
    for text in ("{:x", "1 2", ""):
        with pytest.raises(ValueError):
            parse_value(text)


def test_edn_files_are_found_by_extension_or_by_format(tmp_path):
    (tmp_path / "ops").write_text((EDN_DIR / "set-valid.edn").read_text())
    assert [(s.name, s.file_format) for s in discover_histories([EDN_DIR / "set-valid.edn"])] == [("set-valid", "edn")]
    assert [s.file_format for s in discover_histories([tmp_path / "ops"], history_format="edn")] == ["edn"]
    with pytest.raises(HistoryFormatError, match="not a history"):
        discover_histories([tmp_path / "ops"])
    # A Jepsen store directory (history.edn, results.edn, ...) is a campaign.
    run = tmp_path / "store" / "20261125T000000.000Z"
    run.mkdir(parents=True)
    (run / "history.edn").write_text((EDN_DIR / "set-valid.edn").read_text())
    (run / "results.edn").write_text("{:valid? true}\n")
    [source] = discover_histories([run])
    assert (source.name, source.path.name, source.file_format) == ("20261125T000000.000Z", "history.edn", "edn")


# --- the models, on the reference checker ----------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reference_checks_each_jepsen_model(name):
    [result] = check_reference([EDN_DIR / f"{name}.edn"])
    assert result.model == json.loads((EDN_DIR / f"{name}.meta.json").read_text())["model"]
    _assert_expected(result, name)


def test_independent_histories_are_checked_key_by_key_in_edn_and_json_lines(tmp_path):
    """Without the split, the valid independent history is one register
    read as 1 after a write of 5: refuted. Split, each key is its own
    register; JSON lines carry the same tuples as JSON arrays."""
    plain_copy = tmp_path / "independent.edn"  # no meta beside it: not marked independent
    plain_copy.write_text((EDN_DIR / "independent-cas-valid.edn").read_text())
    [as_one] = check_reference([plain_copy], model="cas-register")
    assert as_one.valid is False
    [split] = check_reference([plain_copy], model="cas-register", independent=True)
    assert split.valid is True and split.checks["linearizability"]["keys"]["total"] == 2
    events = [event for _, event in iter_edn_events(EDN_DIR / "independent-cas-stale.edn")]
    lines = tmp_path / "independent.jsonl"
    lines.write_text("".join(json.dumps(event) + "\n" for event in events))
    [from_json] = check_reference([lines], model="cas-register", independent=True)
    [from_edn] = check_reference([EDN_DIR / "independent-cas-stale.edn"])
    assert from_json.checks["linearizability"] == from_edn.checks["linearizability"]
    assert from_json.checks["linearizability"]["witnesses"][0]["key"] == "1"


@pytest.mark.parametrize(
    "line, phrase",
    [
        ('{"index": 1, "time": 1, "process": 0, "type": "invoke", "f": "read", "value": null}',
         "an independent history's operation values are [key value] tuples, got null"),
        ('{"index": 1, "time": 1, "process": 0, "type": "invoke", "f": "read", "key": "k", "value": ["k", null]}',
         "has a key and an independent [key value] tuple"),
    ],
)
def test_independent_values_that_are_not_tuples_are_named_by_line(tmp_path, line, phrase):
    path = tmp_path / "independent.jsonl"
    path.write_text('{"index": 0, "time": 0, "process": "nemesis", "type": "info", "f": "start", "value": null}\n' + line + "\n")
    with pytest.raises(HistoryFormatError, match=re.escape(f"{path}:2: {phrase}")):
        check_reference([path], independent=True)


def test_the_initial_value_decides_the_cas_register():
    path = EDN_DIR / "cas-register-initial-0.edn"
    [with_meta] = check_reference([path])  # its meta says 0
    [with_nil] = check_reference([path], initial_value=None)  # --initial-value nil wins
    assert with_meta.valid is True and with_nil.valid is False
    assert with_nil.failed_checks() == ["garbage-read", "linearizability"]
    assert with_nil.checks["linearizability"]["witnesses"][0]["op"]["value"] == 0
    with pytest.raises(HistoryFormatError, match="does not fit the counter model"):
        check_reference([EDN_DIR / "counter-valid.edn"], initial_value="zero")


NOT_FITTING = {
    "set_read": ('{:type :invoke, :f :read, :process 0, :time 1}\n{:type :ok, :f :read, :value 3, :process 0, :time 2}\n',
                 "set", "a set's read must be a list of elements, got 3"),
    "counter_add": ('{:type :invoke, :f :add, :value 1.5, :process 0, :time 1}\n{:type :fail, :f :add, :value 1.5, :process 0, :time 2}\n',
                    "counter", "a counter's add must be an integer, got 1.5"),
    "txn": ('{:type :invoke, :f :txn, :value [[:cas :x 1]], :process 0, :time 1}\n', "multi-register",
            'a txn\'s micro-operations must be [read|write key value], got ["cas","x",1]'),
    "unknown_f": ('{:type :invoke, :f :lock, :process 0, :time 1}\n', "mutex", "lock"),
}


@pytest.mark.parametrize("name", sorted(NOT_FITTING))
def test_reference_names_operations_that_do_not_fit_the_model(name, tmp_path):
    text, model, phrase = NOT_FITTING[name]
    path = tmp_path / f"{name}.edn"
    path.write_text(text)
    with pytest.raises(HistoryFormatError) as raised:
        check_reference([path], model=model)
    assert str(path) in str(raised.value) and phrase in str(raised.value), str(raised.value)


def test_an_integer_write_read_back_as_a_float_is_not_linearizable(tmp_path):
    path = tmp_path / "numbers.edn"
    path.write_text(
        "{:type :invoke, :f :write, :value 1, :process 0, :time 1}\n{:type :ok, :f :write, :value 1, :process 0, :time 2}\n"
        "{:type :invoke, :f :read, :value nil, :process 1, :time 3}\n{:type :ok, :f :read, :value 1.0, :process 1, :time 4}\n"
    )
    [result] = check_reference([path], model="cas-register")
    assert result.failed_checks() == ["garbage-read", "linearizability"]


# The counter's bounds, from their definition, for every read: quadratic.
def _bounds_by_definition(operations, initial):
    adds = [op for op in operations if op.f == "add" and op.outcome != "fail"]
    found = []
    for read in sorted((op for op in operations if op.f == "read" and op.outcome == "ok"), key=lambda op: (op.return_ns, op.index)):
        certain = [op for op in adds if op.outcome == "ok" and op.return_ns < read.call_ns]
        maybe = [op for op in adds if op not in certain and op.call_ns <= read.return_ns]
        base = initial + sum(op.invoke_value for op in certain)
        lower = base + sum(min(0, op.invoke_value) for op in maybe)
        upper = base + sum(max(0, op.invoke_value) for op in maybe)
        if not lower <= read.value <= upper:
            found.append((read.index, lower, upper))
    return found


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=-3, max_value=3))
def test_counter_bounds_match_their_definition(seed, initial):
    rng = random.Random(seed)
    operations = []
    for index in range(rng.randint(1, 12)):
        f = rng.choice(["add", "read"])
        start = rng.randint(0, 20)
        outcome = rng.choice(["ok", "ok", "info", "fail"]) if f == "add" else "ok"
        end = start + rng.randint(0, 6)
        operations.append(
            Operation(
                index=index, process=index, f=f, key=None, outcome=outcome,
                invoke_value=rng.randint(-2, 4) if f == "add" else None,
                value=rng.randint(-3, 8) if f == "read" else None,
                call_ns=start, return_ns=None if outcome == "info" else end,
            )
        )
    model = COUNTER.with_initial_value(initial)
    expected = _bounds_by_definition(operations, initial)
    found = counter_bounds([op for op in operations if op.outcome != "fail"], model)
    if not expected:
        assert found is None
    else:
        index, lower, upper = expected[0]
        assert found is not None
        assert (found[0].index, found[1]["lower"], found[1]["upper"]) == (index, lower, upper)
        assert found[1]["reads_out_of_bounds"] == len(expected)


# --- the Spark job -------------------------------------------------------------------


@pytest.mark.spark
def test_spark_checks_every_jepsen_model_as_the_reference_does(spark, tmp_path):
    numbers = tmp_path / "numbers.edn"
    numbers.write_text(
        "{:type :invoke, :f :write, :value 1, :process 0, :time 1}\n{:type :ok, :f :write, :value 1, :process 0, :time 2}\n"
        "{:type :invoke, :f :read, :value nil, :process 1, :time 3}\n{:type :ok, :f :read, :value 1.0, :process 1, :time 4}\n"
    )
    (tmp_path / "numbers.meta.json").write_text(json.dumps({"model": "cas-register"}))
    results = {result.history: result for result in check([EDN_DIR, numbers], spark=spark)}
    assert sorted(results) == sorted([*EXPECTED, "numbers"])
    for name in EXPECTED:
        assert results[name].checker == "spark"
        _assert_expected(results[name], name)
        [reference] = check_reference([EDN_DIR / f"{name}.edn"])
        assert results[name].failed_checks() == reference.failed_checks(), name
        assert results[name].stats["tier2_operations"] == reference.stats["tier2_operations"], name
    assert results["numbers"].failed_checks() == ["garbage-read", "linearizability"]
    # The nemesis events of a Jepsen history are counted, not checked.
    assert results["cas-register-initial-0"].stats["nemesis_events"] == 2


@pytest.mark.spark
def test_spark_initial_value_and_values_that_do_not_fit(spark, tmp_path):
    [with_nil] = check([EDN_DIR / "cas-register-initial-0.edn"], spark=spark, initial_value=None)
    assert with_nil.failed_checks() == ["garbage-read", "linearizability"]
    text, model, phrase = NOT_FITTING["set_read"]
    path = tmp_path / "set_read.edn"
    path.write_text(text)
    with pytest.raises(HistoryFormatError) as raised:
        check([path], model=model, spark=spark)
    assert f"{path}: event index 0: {phrase}" in str(raised.value), str(raised.value)


@pytest.mark.spark
def test_cli_checks_a_jepsen_history_in_one_command(spark, tmp_path):
    history = tmp_path / "jepsen-run" / "ops"  # no extension: --format edn
    history.parent.mkdir()
    history.write_text((EDN_DIR / "cas-register-stale.edn").read_text())
    run = CliRunner().invoke(
        jepsen_like,
        ["check", str(history), "--format", "edn", "--model", "cas-register", "--initial-value", "nil",
         "--out", str(tmp_path / "out.json")],
        catch_exceptions=False,
    )
    assert run.exit_code == 1, run.output
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["model"] == "cas-register" and result["valid"] is False
    assert result["checks"]["linearizability"]["witnesses"][0]["op"]["index"] == 6


def test_cli_refuses_an_initial_value_that_is_not_edn_or_does_not_fit():
    for arguments, phrase in (
        (["--initial-value", "{:x"], "not an EDN value"),
        (["--model", "counter", "--initial-value", '"a"'], "does not fit the counter model"),
    ):
        run = CliRunner().invoke(jepsen_like, ["check", str(EDN_DIR / "counter-valid.edn"), "--reference", *arguments])
        assert run.exit_code == 2 and phrase in run.output, run.output
