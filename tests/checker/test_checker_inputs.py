"""Inputs and the command line: where histories are found, formats,
malformed input (a clear error, never a traceback), exit codes and --out."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from _checker_helpers import Case, comparable, write_campaign
from jepsen_like.checker import HistoryFormatError, check, check_reference, discover_histories, synthesize
from jepsen_like.cli import main as jepsen_like

pytestmark = pytest.mark.spark

VALID_LINES = [
    '{"index":0,"process":0,"type":"invoke","f":"write","key":"x","value":1,"time":0}',
    '{"index":1,"process":0,"type":"ok","f":"write","key":"x","value":1,"time":1000000}',
]

# name -> (lines, a phrase the error must contain)
MALFORMED = {
    "not_json": (VALID_LINES + ['{"index":2,"process":0,"type":"invoke"'], "not"),
    "missing_type": (VALID_LINES + ['{"index":2,"process":0,"f":"read","key":"x","time":5}'], "type"),
    "bad_type": (VALID_LINES + ['{"index":2,"process":0,"type":"done","f":"read","key":"x","time":5}'], "type must be one of"),
    "bad_process": (VALID_LINES + ['{"index":2,"process":"p7","type":"invoke","f":"read","key":"x","time":5}'], "process must be"),
    "bad_mode": (VALID_LINES + ['{"index":2,"process":1,"type":"invoke","f":"read","key":"x","time":5,"mode":"eventual"}'], "mode must be one of"),
    "orphan_completion": (VALID_LINES + ['{"index":2,"process":3,"type":"ok","f":"read","key":"x","value":1,"time":5}'], "without an invoke"),
    "double_invoke": (VALID_LINES + [
        '{"index":2,"process":0,"type":"invoke","f":"read","key":"x","time":5}',
        '{"index":3,"process":0,"type":"invoke","f":"read","key":"x","time":6}',
    ], "invoked again"),
    "mismatched_completion": (VALID_LINES + [
        '{"index":2,"process":0,"type":"invoke","f":"read","key":"x","time":5}',
        '{"index":3,"process":0,"type":"ok","f":"read","key":"y","value":1,"time":6}',
    ], "different f or key"),
    "duplicate_index": (VALID_LINES + ['{"index":1,"process":2,"type":"invoke","f":"read","key":"x","time":5}'], "more than once"),
}


@pytest.fixture(scope="module")
def malformed_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("malformed")
    for name, (lines, _) in MALFORMED.items():
        (root / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_spark_job_names_every_malformed_file_and_what_is_wrong(spark, malformed_dir):
    with pytest.raises(HistoryFormatError) as raised:
        check([str(malformed_dir)], spark=spark)
    message = str(raised.value)
    for name, (_, phrase) in MALFORMED.items():
        lines = [line for line in message.splitlines() if f"{name}.jsonl" in line]
        assert lines, (name, message)
        assert any(phrase in line for line in lines), (name, phrase, lines)


@pytest.mark.parametrize("name", list(MALFORMED))
def test_reference_names_the_file_line_and_problem(name, malformed_dir):
    with pytest.raises(HistoryFormatError) as raised:
        check_reference([str(malformed_dir / f"{name}.jsonl")])
    message = str(raised.value)
    assert f"{name}.jsonl" in message
    phrase = MALFORMED[name][1]
    assert phrase in message or (name == "not_json" and "not valid JSON" in message), message


def _history(tmp: Path, name: str, lines: list[str], meta: dict | None = None) -> Path:
    path = tmp / f"{name}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    if meta is not None:
        (tmp / f"{name}.meta.json").write_text(json.dumps(meta))
    return path


def test_operations_that_do_not_fit_the_model_are_errors(spark, tmp_path):
    cas = _history(tmp_path, "bad_cas", [
        '{"index":0,"process":0,"type":"invoke","f":"cas","key":"x","value":5,"time":0}',
        '{"index":1,"process":0,"type":"ok","f":"cas","key":"x","value":5,"time":1}',
    ])
    kv = _history(tmp_path, "bad_kv", [
        '{"index":0,"process":0,"type":"invoke","f":"put","key":"x","value":5,"time":0}',
        '{"index":1,"process":0,"type":"ok","f":"put","key":"x","value":5,"time":1}',
    ])
    unknown_f = _history(tmp_path, "unknown_f", [
        '{"index":0,"process":0,"type":"invoke","f":"create_topic","key":"t","value":"a","time":0}',
    ])
    no_bound = _history(tmp_path, "no_bound", [
        '{"index":0,"process":0,"type":"invoke","f":"read","key":"x","time":0,"mode":"leader-local"}',
        '{"index":1,"process":0,"type":"ok","f":"read","key":"x","value":null,"time":1}',
    ])
    with pytest.raises(HistoryFormatError) as raised:
        check([str(tmp_path)], spark=spark)
    message = str(raised.value)
    assert "bad_cas.jsonl" in message and "[expected, new]" in message
    assert "bad_kv.jsonl" in message and "strings" in message
    assert "unknown_f.jsonl" in message and "create_topic" in message and "--model metadata" in message
    assert "no_bound.jsonl" in message and "fetch_timeout_ms" in message
    for path, phrase in ((cas, "[expected, new]"), (kv, "strings"), (unknown_f, "create_topic"), (no_bound, "fetch_timeout_ms")):
        with pytest.raises(HistoryFormatError, match=None) as single:
            check_reference([str(path)])
        assert phrase in str(single.value)
    # The metadata model takes metadata operations (tier 1 only).
    assert check_reference([str(unknown_f)], model="metadata")[0].valid is True


def test_malformed_side_files_and_meta_are_errors(spark, tmp_path):
    case = Case().op("w", 0, "write", "x", 1, start_ms=0, end_ms=1)
    write_campaign(tmp_path / "events", case, node_events=[{"time": 0, "node": "n1", "kind": "role", "role": "leader"}])
    write_campaign(tmp_path / "dumps", case, log_dumps=[{"node": "n1", "offset": 0, "epoch": 1, "hwm": 1}])
    with pytest.raises(HistoryFormatError) as raised:
        check([str(tmp_path)], spark=spark)
    assert "role event without 'epoch'" in str(raised.value)
    assert "record_hash" in str(raised.value)
    (tmp_path / "meta_bad").mkdir()
    case.write(tmp_path / "meta_bad" / "history.jsonl")
    (tmp_path / "meta_bad" / "meta.json").write_text('{"fetch_timeout_ms": "ten"}')
    with pytest.raises(HistoryFormatError, match="fetch_timeout_ms"):
        discover_histories([str(tmp_path / "meta_bad")])


def _side_file_campaign(directory: Path, name: str, lines: list[str]) -> Path:
    """A valid campaign whose side file ``name`` holds ``lines`` as written."""
    write_campaign(directory, Case().op("w", 0, "write", "x", 1, start_ms=0, end_ms=1))
    (directory / name).write_text("\n".join(lines) + "\n")
    return directory


_NODE_EVENT = '{"time":0,"node":"n1","kind":"role","epoch":1,"role":"leader","leader":"n1"}'
_LOG_RECORD = '{"node":"n1","offset":%d,"epoch":1,"record_hash":"h%d","hwm":3}'


@pytest.mark.parametrize(
    ("name", "lines", "expected"),
    [
        # A record that is JSON but lacks a field the kind needs.
        (
            "node-events.jsonl",
            [_NODE_EVENT, _NODE_EVENT, '{"time":5,"node":"n2","kind":"role","role":"follower"}', _NODE_EVENT],
            r"node-events.jsonl:3: role event without 'epoch'",
        ),
        # A field of the wrong type (Spark's reader takes the whole line as
        # a corrupt record), after a blank line that still counts.
        (
            "log-dumps.jsonl",
            [_LOG_RECORD % (0, 0), "", '{"node":"n1","offset":"one","epoch":1,"record_hash":"h1","hwm":3}', _LOG_RECORD % (2, 2)],
            r"log-dumps.jsonl:3: offset must be an integer, got 'one'",
        ),
        # Not JSON at all.
        (
            "log-dumps.jsonl",
            [_LOG_RECORD % (0, 0), '{"node":"n1","offset":1,'],
            r"log-dumps.jsonl:2: not valid JSON",
        ),
    ],
    ids=["node-event-missing-field", "log-dump-wrong-type", "log-dump-not-json"],
)
def test_a_malformed_side_file_line_is_named_by_its_line_on_both_paths_alike(spark, tmp_path, name, lines, expected):
    # Found by hand: the Spark job named only the side file ("FILE: not a
    # valid record: ..."), the reference its line; both now say the same.
    campaign = _side_file_campaign(tmp_path / "campaign", name, lines)
    with pytest.raises(HistoryFormatError) as reference:
        check_reference([str(campaign)])
    reference_message = str(reference.value)
    assert re.search(expected, reference_message), reference_message
    with pytest.raises(HistoryFormatError) as spark_raised:
        check([str(campaign)], spark=spark)
    assert reference_message in str(spark_raised.value).splitlines(), (reference_message, str(spark_raised.value))


def test_a_malformed_parquet_side_file_row_is_named_by_its_row_on_both_paths_alike(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    campaign = tmp_path / "campaign"
    write_campaign(campaign, Case().op("w", 0, "write", "x", 1, start_ms=0, end_ms=1))
    rows = [json.loads(_LOG_RECORD % (offset, offset)) for offset in range(3)]
    rows[1]["record_hash"] = None
    pq.write_table(pa.Table.from_pylist(rows), campaign / "log-dumps.parquet")
    with pytest.raises(HistoryFormatError) as reference:
        check_reference([str(campaign)])
    reference_message = str(reference.value)
    assert reference_message.endswith("log-dumps.parquet row 2: missing required field 'record_hash'"), reference_message
    with pytest.raises(HistoryFormatError) as spark_raised:
        check([str(campaign)], spark=spark)
    assert reference_message in str(spark_raised.value).splitlines(), (reference_message, str(spark_raised.value))


def _nested(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _register_lines(value_json: str) -> list[str]:
    """A write of a value and a read of it, as JSON lines."""
    return [
        f'{{"index":0,"process":0,"type":"invoke","f":"write","key":"x","value":{value_json},"time":0}}',
        f'{{"index":1,"process":0,"type":"ok","f":"write","key":"x","value":{value_json},"time":1}}',
        '{"index":2,"process":1,"type":"invoke","f":"read","key":"x","value":null,"time":2}',
        f'{{"index":3,"process":1,"type":"ok","f":"read","key":"x","value":{value_json},"time":3}}',
    ]


def test_values_nested_past_the_limit_are_refused_on_every_path_and_format(spark, tmp_path):
    # Found by hand: a value nested 990 levels deep passed Spark's reader
    # (Jackson allowed 1,000) and crashed the whole check in the search's
    # Python worker (RecursionError decoding it); the reference checker
    # crashed on it too, and on a line that is not UTF-8. Every path now
    # refuses a value past VALUE_NESTING_MAX where it reads it, naming the
    # file and line, and takes one at the limit.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jepsen_like.checker import get_model
    from jepsen_like.checker._errors import VALUE_NESTING_MAX

    at_limit, past_limit, far_past = ("[" * n + "]" * n for n in (VALUE_NESTING_MAX, VALUE_NESTING_MAX + 1, 990))
    fine = tmp_path / "fine"
    fine.mkdir()
    (fine / "at-limit.jsonl").write_text("\n".join(_register_lines(at_limit)) + "\n")
    assert check_reference([str(fine)])[0].valid is True
    assert check([str(fine)], spark=spark)[0].valid is True

    refused = tmp_path / "refused"
    refused.mkdir()
    (refused / "past-limit.jsonl").write_text("\n".join(_register_lines(past_limit)) + "\n")
    (refused / "far-past.jsonl").write_text("\n".join(_register_lines(far_past)) + "\n")
    rows = [json.loads(line) for line in _register_lines("0")]
    for row in rows:
        row["value"] = "null" if row["value"] is None else past_limit
    pq.write_table(pa.Table.from_pylist(rows), refused / "past-limit-parquet.parquet")
    (refused / "past-limit-edn.edn").write_text(
        "{:type :invoke, :f :write, :value %s, :process 0, :time 0, :index 0}\n" % past_limit
    )
    expected = {
        "past-limit.jsonl": "past-limit.jsonl:1: value nests deeper than 100 levels",
        "far-past.jsonl": "far-past.jsonl:1:",
        "past-limit-parquet.parquet": "past-limit-parquet.parquet row 1: value nests deeper than 100 levels",
        "past-limit-edn.edn": "past-limit-edn.edn:1: :value nests deeper than 100 levels",
    }
    for name, phrase in expected.items():
        with pytest.raises(HistoryFormatError) as raised:
            check_reference([str(refused / name)])
        assert phrase in str(raised.value), (name, str(raised.value)[:300])
        assert "nests deeper than 100 levels" in str(raised.value)
    # An EDN history is read in the driver, before the Spark job, whose
    # one action reports every other file's problems together.
    with pytest.raises(HistoryFormatError, match=r"past-limit-edn.edn:1: :value nests deeper than 100 levels"):
        check([str(refused / "past-limit-edn.edn")], spark=spark)
    (refused / "past-limit-edn.edn").unlink()
    with pytest.raises(HistoryFormatError) as raised:
        check([str(refused)], spark=spark)
    message = str(raised.value)
    for name in set(expected) - {"past-limit-edn.edn"}:
        lines = [line for line in message.splitlines() if name in line]
        assert any("nests deeper than 100 levels" in line for line in lines), (name, message[:2000])
    # An initial value is refused the same way, wherever it comes from.
    with pytest.raises(ValueError, match="nests deeper than 100 levels"):
        get_model("cas-register", _nested(VALUE_NESTING_MAX + 1))


def test_a_line_that_is_not_utf8_is_named_by_its_line_on_both_paths(spark, tmp_path):
    # The reference checker crashed on it (UnicodeDecodeError).
    path = tmp_path / "latin1.jsonl"
    lines = [line.encode() for line in _register_lines("1")]
    lines[2] = lines[2].replace(b'"key":"x"', b'"key":"\xe9t\xe9"')
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(HistoryFormatError, match=r"latin1.jsonl:3: not valid UTF-8 \(byte 0xe9 at character \d+\)"):
        check_reference([str(path)])
    with pytest.raises(HistoryFormatError, match=r"latin1.jsonl:3"):
        check([str(path)], spark=spark)


def test_integers_past_64_bits_and_numbers_past_1000_characters_are_refused_on_both_paths(spark, tmp_path):
    # Found by hand: an index, time or process past 64 bits passed the
    # reference checker (Spark's reader refused it: the paths disagreed),
    # and a 5,000-digit number crashed it (Python's int() refuses past
    # 4,300 digits with a ValueError the reader did not expect).
    lines = _register_lines("1")
    cases = {
        "big-index": [*lines[:3], lines[3].replace('"index":3', '"index":9223372036854775808')],
        "big-time": [*lines[:3], lines[3].replace('"time":3', '"time":-9223372036854775809')],
        "big-process": [*lines[:2], *(line.replace('"process":1', '"process":99999999999999999999') for line in lines[2:])],
        "long-number": [line.replace('"value":1', '"value":' + "9" * 1001) for line in lines],
        "long-float": [line.replace('"value":1', '"value":0.' + "5" * 1000) for line in lines],
    }
    for name, case_lines in cases.items():
        (tmp_path / f"{name}.jsonl").write_text("\n".join(case_lines) + "\n")
        with pytest.raises(HistoryFormatError, match=rf"{name}.jsonl:\d+: "):
            check_reference([str(tmp_path / f"{name}.jsonl")])
    with pytest.raises(HistoryFormatError) as raised:
        check([str(tmp_path)], spark=spark)
    message = str(raised.value)
    for name in cases:
        assert f"{name}.jsonl:" in message, (name, message[:2000])
    # The largest and smallest 64-bit integers, and a number of 1,000
    # characters, are taken by both.
    edge = tmp_path / "edge"
    edge.mkdir()
    edge_lines = [line.replace('"value":1', '"value":' + "9" * 1000) for line in lines]
    edge_lines[0] = edge_lines[0].replace('"time":0', '"time":-9223372036854775808')
    edge_lines[3] = edge_lines[3].replace('"index":3', '"index":9223372036854775807')
    (edge / "edge.jsonl").write_text("\n".join(edge_lines) + "\n")
    assert check_reference([str(edge)])[0].valid is True
    assert check([str(edge)], spark=spark)[0].valid is True


def _edn_register(tmp: Path, name: str, number: str) -> Path:
    """An EDN history: a write of 1, then a read answered with ``number``
    (on line 4, inside a vector)."""
    path = tmp / f"{name}.edn"
    path.write_text(
        "{:type :invoke, :f :write, :value 1, :process 0, :time 0, :index 0}\n"
        "{:type :ok, :f :write, :value 1, :process 0, :time 1, :index 1}\n"
        "{:type :invoke, :f :read, :value nil, :process 1, :time 2, :index 2}\n"
        "{:type :ok, :f :read, :value [%s], :process 1, :time 3, :index 3}\n" % number
    )
    return path


def test_edn_numbers_past_1000_characters_are_refused_alike_on_both_paths(spark, tmp_path):
    # Found by hand: an EDN integer of 1,001 to 4,300 digits passed the
    # reference checker while Spark refused the JSON line it became ("not
    # a valid event"), and one of 5,000 digits gave Python's int-limit
    # text on both. The EDN reader now refuses one past NUMBER_CHARS_MAX
    # characters, as the JSON-lines readers do.
    from jepsen_like.checker._edn import parse_value
    from jepsen_like.checker._errors import NUMBER_CHARS_MAX

    assert NUMBER_CHARS_MAX == 1000
    at_limit = _edn_register(tmp_path, "at-limit", "9" * 1000)
    assert check_reference([str(at_limit)])[0].valid is False  # the read saw a value never written
    assert check([str(at_limit)], spark=spark)[0].valid is False
    negative_at_limit = _edn_register(tmp_path, "negative-at-limit", "-" + "9" * 999)
    assert check_reference([str(negative_at_limit)])[0].valid is False
    assert check([str(negative_at_limit)], spark=spark)[0].valid is False
    for name, number in (
        ("past-limit", "9" * 1001),
        ("negative-past-limit", "-" + "9" * 1000),
        ("float-past-limit", "0." + "5" * 999),
        ("past-int-limit", "9" * 5000),
    ):
        path = _edn_register(tmp_path, name, number)
        expected = f"{path}:4: a number has more than 1000 characters"
        with pytest.raises(HistoryFormatError) as reference:
            check_reference([str(path)])
        assert str(reference.value) == expected
        with pytest.raises(HistoryFormatError) as spark_raised:
            check([str(path)], spark=spark)
        assert str(spark_raised.value) == expected
    # An initial value (--initial-value) is EDN read alike, for both paths.
    assert parse_value("[" + "9" * 1000 + "]") == [int("9" * 1000)]
    for number in ("9" * 1001, "9" * 5000):
        with pytest.raises(ValueError, match="a number has more than 1000 characters"):
            parse_value(f"[{number}]")


def test_discovery_of_files_directories_and_campaigns(tmp_path, porcupine_dir):
    shutil.copy(porcupine_dir / "etcd_002.jsonl", tmp_path / "a.jsonl")
    (tmp_path / "a.meta.json").write_text('{"model": "register"}')
    write_campaign(tmp_path / "run-1", Case().op("w", 0, "write", "x", 1, start_ms=0, end_ms=1))
    (tmp_path / "notes.txt").write_text("not a history")
    sources = discover_histories([str(tmp_path)])
    assert [source.name for source in sources] == ["a", "run-1"]
    assert sources[0].meta.model == "register"
    assert [s.name for s in discover_histories([str(tmp_path / "run-1")])] == ["run-1"]
    with pytest.raises(HistoryFormatError, match="no such file"):
        discover_histories([str(tmp_path / "missing.jsonl")])
    with pytest.raises(HistoryFormatError, match="both named 'a'"):
        discover_histories([str(tmp_path / "a.jsonl"), str(tmp_path)])
    (tmp_path / "empty").mkdir()
    with pytest.raises(HistoryFormatError, match="no histories"):
        discover_histories([str(tmp_path / "empty")])


def test_parquet_history_and_side_files_check_the_same_as_json_lines(spark, tmp_path):
    plant = {"stale-read": 1, "fenced-read": 1, "forked-log": 1, "split-brain": 1}
    synthesize(tmp_path / "as-jsonl", ops=600, keys=4, plant=plant, seed=21)
    synthesize(tmp_path / "as-parquet", ops=600, keys=4, plant=plant, seed=21, history_format="parquet", side_format="parquet")
    results = {r.history: r.to_dict() for r in check([str(tmp_path)], spark=spark, all_keys=True)}
    for result in results.values():
        result.pop("path")
        result.pop("history")
    assert comparable(results["as-jsonl"]) == comparable(results["as-parquet"])
    assert results["as-jsonl"]["valid"] is False


# ---------------------------------------------------------------------------
# The command line.


def _run(arguments: list[str]):
    return CliRunner().invoke(jepsen_like, arguments, catch_exceptions=False)


def test_cli_one_history_writes_its_results_file_and_exits_0(spark, tmp_path, porcupine_dir):
    out = tmp_path / "results" / "etcd_002-result.json"
    run = _run(["check", str(porcupine_dir / "etcd_002.jsonl"), "--out", str(out)])
    assert run.exit_code == 0, run.output
    result = json.loads(out.read_text())
    assert result["history"] == "etcd_002" and result["valid"] is True
    assert "1 histories: 1 valid" in run.output


def test_cli_several_histories_write_a_directory_and_exit_1(spark, tmp_path, porcupine_dir):
    out = tmp_path / "out"
    run = _run(["check", str(porcupine_dir / "etcd_002.jsonl"), str(porcupine_dir / "etcd_000.jsonl"), "--out", str(out)])
    assert run.exit_code == 1, run.output
    assert sorted(path.name for path in out.iterdir()) == ["etcd_000.json", "etcd_002.json"]
    assert json.loads((out / "etcd_000.json").read_text())["valid"] is False
    assert "etcd_000 linearizability" in run.output  # the summary names the witness


def test_cli_out_of_budget_is_unknown_and_exits_3(spark, porcupine_dir):
    run = _run(["check", str(porcupine_dir / "etcd_007.jsonl"), "--budget-steps", "100"])
    assert run.exit_code == 3, run.output
    assert "1 unknown" in run.output


def test_cli_malformed_input_is_a_clear_error_not_a_traceback(spark, malformed_dir):
    run = CliRunner().invoke(jepsen_like, ["check", str(malformed_dir / "bad_type.jsonl")])
    assert run.exit_code == 2
    assert "type must be one of" in run.output
    assert "Traceback" not in run.output
    assert run.exception is None or isinstance(run.exception, SystemExit)


def test_cli_synth_then_reference_check(tmp_path):
    run = _run(["synth", "--ops", "300", "--keys", "3", "--plant", "garbage-read:1", "--seed", "4", "--out", str(tmp_path / "c")])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["planted"][0]["check"] == "garbage-read"
    checked = _run(["check", "--reference", str(tmp_path / "c"), "--out", str(tmp_path / "c.json")])
    assert checked.exit_code == 1, checked.output
    assert json.loads((tmp_path / "c.json").read_text())["checks"]["garbage-read"]["count"] == 1
    bad = CliRunner().invoke(jepsen_like, ["synth", "--ops", "10", "--plant", "nope:1", "--out", str(tmp_path / "d")])
    assert bad.exit_code == 2 and "unknown anomaly kind" in bad.output


@pytest.mark.processes
@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (["--spark-master", "bogus://host"], "SparkException: Master must either be yarn or start with spark, k8s, or local"),
        (["--spark-conf", "spark.driver.memory=banana"], "Invalid maximum heap size: -Xmxbanana"),
    ],
)
def test_cli_a_spark_that_refuses_to_start_is_a_clear_error_with_its_reason(tmp_path, options, reason):
    # Found by hand: a master URL or a setting the JVM refuses was reported
    # as "unexpected PySparkRuntimeError ... most likely a bug in pykraft".
    # A fresh process: this one's Spark session would be reused as it is.
    import subprocess
    import sys

    history = tmp_path / "h.jsonl"
    history.write_text("\n".join(VALID_LINES) + "\n")
    log = tmp_path / "spark.log"
    run = subprocess.run(
        [sys.executable, "-m", "jepsen_like.checker", "check", *options, str(history), "--spark-log", str(log)],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"Error: Spark did not start: {reason} (its output is in {log})" in run.stderr, run.stderr
    assert "Traceback" not in run.stdout + run.stderr and "bug in pykraft" not in run.stderr


def test_spark_start_failure_reason_is_the_jvms_last_informative_line(tmp_path):
    from jepsen_like.checker._spark import _start_failure

    log = tmp_path / "spark.log"
    earlier = 'Exception in thread "main" java.lang.IllegalStateException: an earlier run\n'
    log.write_text(earlier)
    start = log.stat().st_size
    with log.open("a") as out:
        out.write("WARNING: Using incubator modules: jdk.incubator.vector\n")
        out.write("Invalid initial heap size: -Xms9q\n")
        out.write("Error: Could not create the Java Virtual Machine.\n")
        out.write("Error: A fatal exception has occurred. Program will exit.\n")
    assert _start_failure(log, start) == "Invalid initial heap size: -Xms9q"
    assert _start_failure(log, log.stat().st_size) == "the Java process exited before it was ready"
    assert _start_failure(tmp_path / "missing.log", 0) == "the Java process exited before it was ready"


def test_cli_a_deadline_that_is_not_a_number_is_refused():
    run = CliRunner().invoke(jepsen_like, ["check", "--deadline", "nan", "whatever.jsonl"])
    assert run.exit_code == 2 and "must be a number of seconds, got nan" in run.output
