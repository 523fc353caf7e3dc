"""Small and foreign histories: where a malformed event is (file and line)
on the Spark path as on the reference path, histories with nothing to check,
what the history format means by numbers, and the command line's quiet,
logged Spark."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jepsen_like.checker import HistoryFormatError, _frames, _job, _tier1, check, check_reference, exit_code, synthesize
from jepsen_like.checker._report import EXIT_NOTHING_TO_CHECK
from jepsen_like.checker._spark import prune_class_archives

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]

WRITE_1 = [
    '{"index":0,"process":0,"type":"invoke","f":"write","key":"x","value":1,"time":0}',
    '{"index":1,"process":0,"type":"ok","f":"write","key":"x","value":1,"time":1000}',
]


def _write(tmp: Path, name: str, lines: list[str]) -> str:
    path = tmp / f"{name}.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def _spark_error(spark, path: str) -> list[str]:
    with pytest.raises(HistoryFormatError) as raised:
        check([path], spark=spark)
    return str(raised.value).splitlines()[1:]  # after "malformed history:"


def _reference_error(path: str) -> str:
    with pytest.raises(HistoryFormatError) as raised:
        check_reference([path])
    return str(raised.value)


def test_a_line_that_is_not_json_is_named_by_file_and_line_on_both_paths(spark, tmp_path):
    path = _write(tmp_path, "cut", WRITE_1 + ['{"index":2,"process":0,"type":"invoke"'])
    assert [line.split(": ")[0] for line in _spark_error(spark, path)] == [f"{path}:3"]
    assert _reference_error(path).startswith(f"{path}:3: ")


def test_a_malformed_event_is_named_by_file_line_and_index(spark, tmp_path):
    path = _write(tmp_path, "mode", WRITE_1 + [
        '{"index":2,"process":1,"type":"invoke","f":"read","key":"x","time":5,"mode":"eventual"}',
    ])
    [line] = _spark_error(spark, path)
    assert line.startswith(f"{path}:3: event index 2: mode must be one of"), line
    assert _reference_error(path).startswith(f"{path}:3: mode must be one of")


@pytest.fixture(params=["small", "big"])
def input_size(request, monkeypatch):
    """Both ways of finding repeated indexes: a small input's one action,
    and a big input's counts first (``_frames._index_counts``)."""
    if request.param == "big":
        monkeypatch.setattr(_job, "is_small_input", lambda sources: False)
    return request.param


def test_a_non_integer_process_is_one_error_per_event_and_no_duplicate_index(spark, tmp_path, input_size):
    # Before the fix the completion, kept as malformed and also seen as its
    # invoke's completion, was reported a second time as a duplicate index.
    path = _write(tmp_path, "process", [line.replace('"process":0', '"process":"p7"') for line in WRITE_1])
    lines = _spark_error(spark, path)
    assert lines == [
        f'{path}:1: event index 0: process must be an integer or "nemesis", got p7',
        f'{path}:2: event index 1: process must be an integer or "nemesis", got p7',
    ]
    assert _reference_error(path).startswith(f"{path}:1: process must be")


def test_a_duplicated_index_names_both_lines(spark, tmp_path, input_size):
    path = _write(tmp_path, "dup", WRITE_1 + ['{"index":1,"process":2,"type":"invoke","f":"read","key":"x","time":5}'])
    assert _spark_error(spark, path) == [f"{path}:3: event index 1: index appears more than once (also at line 2)"]
    assert _reference_error(path) == f"{path}:3: index 1 appears more than once"


def test_indexes_far_apart_repeat_only_where_they_repeat(spark, tmp_path, monkeypatch):
    """The big input's counts (one bitmap per range of indexes) tell indexes
    in different ranges, negative ones and ones past 2**32 apart, and point
    at the one history whose index repeats."""
    monkeypatch.setattr(_job, "is_small_input", lambda sources: False)
    searched = []  # the histories _duplicate_indexes was run over
    search = _frames._duplicate_indexes
    monkeypatch.setattr(_frames, "_duplicate_indexes", lambda kept: searched.append(kept) or search(kept))
    indexes = [-40_000, -1, 0, 32_767, 32_768, 2**32 + 1, 2**40]

    def history(name: str, repeated: int | None) -> str:
        lines = []
        for process, index in enumerate(indexes):
            lines.append(f'{{"index":{index},"process":{process},"type":"invoke","f":"write","key":"x","value":{process},"time":{process}}}')
        if repeated is not None:
            lines.append(f'{{"index":{repeated},"process":99,"type":"invoke","f":"read","key":"x","time":100}}')
        return _write(tmp_path, name, lines)

    clean = history("clean", None)
    assert [result.history for result in check([clean], spark=spark)] == ["clean"]
    assert searched == []  # the counts were enough
    repeats = history("repeats", 2**32 + 1)
    with pytest.raises(HistoryFormatError) as raised:
        check([clean, repeats], spark=spark)
    assert str(raised.value).splitlines()[1:] == [
        f"{repeats}:8: event index {2**32 + 1}: index appears more than once (also at line 6)"
    ]
    assert len(searched) == 1


# One check in a JVM of its own, as a big input (the path long histories
# take), with Spark's code generator logging at INFO.
_CHECK_WITH_CODEGEN_LOG = """
import sys
from jepsen_like.checker import _job, check
_job.is_small_input = lambda sources: False
check([sys.argv[1]], spark_master="local[2]", spark_log=sys.argv[2], linearizability=False,
      spark_conf={"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:" + sys.argv[3]})
"""


def test_no_generated_method_of_a_check_is_too_long_for_the_jvm_to_compile(tmp_path):
    """HotSpot does not compile a method longer than 8,000 bytes of
    bytecode: a query stage whose generated method is that long runs
    interpreted. The pairing stage's was (8,469 to 8,815 bytes: all of an
    event's checks in one expression), which tripled that stage's time on
    big histories. Spark's code generator logs, at INFO, each generated
    method that long; it only logs what it compiles (not what it finds in
    its cache), hence a JVM of its own for one check of a campaign with
    every side file (tier 1: tier 2's search is Python, not generated
    code)."""
    campaign = synthesize(tmp_path / "campaign", ops=100, keys=4, seed=3).directory
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text(
        (REPO / "jepsen_like" / "checker" / "log4j2.properties").read_text()
        + "logger.codegen.name = org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator\n"
        + "logger.codegen.level = info\n"
    )
    spark_log = tmp_path / "spark.log"
    completed = subprocess.run(
        [sys.executable, "-c", _CHECK_WITH_CODEGEN_LOG, str(campaign), str(spark_log), str(log4j)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr
    written = spark_log.read_text(encoding="utf-8", errors="replace")
    assert "Code generated in" in written  # the logger was heard
    assert [line for line in written.splitlines() if "too long to be JIT compiled" in line] == []


def _tier1_plan(spark, tmp_path, monkeypatch) -> str:
    """Tier 1's executed plans as a big input gets them (the small-input
    path and automatic broadcast joins off), from the operations of a real
    check of a small synthesized campaign."""
    campaign = synthesize(tmp_path / "campaign", ops=100, keys=4, seed=3).directory
    plans = []
    real_findings = _job._tier1_findings

    def capture_plans(spark_session, ops, loaded, settings, max_witnesses, applicable):
        # The checks over node events group a few hundred rows: left out.
        found, staleness = _tier1.anomalies(ops, None, loaded.log_dumps, settings, applicable)
        plans.extend(frame._jdf.queryExecution().executedPlan().toString() for frame in (found, staleness))
        return real_findings(spark_session, ops, loaded, settings, max_witnesses, applicable)

    monkeypatch.setattr(_job, "_tier1_findings", capture_plans)
    monkeypatch.setattr(_job, "is_small_input", lambda sources: False)
    previous = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        [result] = check([str(campaign)], spark=spark, linearizability=False)
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", previous)
    assert result.checks["stale-read"]["status"] != "skipped" and len(plans) == 2
    return "\n".join(plans)


def test_tier1_sorts_begin_with_a_column_that_tells_rows_apart(spark, tmp_path, monkeypatch):
    """Spark's sort prefix is the first sort column only: a sort of
    operations or log records that began with the history id (one value in
    a one-history check) compared nearly every pair of rows in full, and
    the writers' aggregation, joined on a key compared with ``eqNullSafe``,
    was shuffled and sorted again before each join (docs/benchmarks.md,
    "Sort keys whose prefix decides": 374 s → 281 s at ten million
    operations)."""
    plan = _tier1_plan(spark, tmp_path, monkeypatch)
    sorts = re.findall(r"Sort \[([^\]]*)\]", plan)
    assert len(sorts) > 10, plan  # the joins' and windows' sorts are there
    lines = plan.splitlines()
    hid_first = [number for number, line in enumerate(lines) if re.search(r"Sort \[hid#", line)]
    # Exempt: the log checks' ranking of their flagged keys per history
    # (_tier1._first_per_history), over anomalies, not over every record.
    ranks_flagged_keys = [number for number in hid_first if "AS flagged_in_history#" in lines[number - 1]]
    assert len(ranks_flagged_keys) == 2, plan
    assert [lines[number] for number in hid_first if number not in ranks_flagged_keys] == []
    assert "hashpartitioning(w_value" not in plan  # the writers reach their joins as aggregated


def test_tier1_sends_whole_log_records_and_writes_through_no_shuffle_they_can_skip(spark, tmp_path, monkeypatch):
    """The forked-log and duplicated-write checks first find the offsets and
    write ids that need a witness, with hash aggregations over a few
    columns, and let only their records through to the witness queries by
    a broadcast semi join (they used to sort every record, whole, twice);
    the lost-write check broadcasts its per-key rows when the keys are
    few, so the writes are not shuffled by key first (docs/benchmarks.md,
    "Flag first, then find the witnesses")."""
    plan = _tier1_plan(spark, tmp_path, monkeypatch)
    assert len(re.findall(r"BroadcastHashJoin \[[^\]]*\], \[[^\]]*\], Inner, BuildRight", plan)) == 2, plan
    assert "hashpartitioning(coalesce(key" not in plan, plan


def test_tier1_joins_the_reads_with_their_writers_once(spark, tmp_path, monkeypatch):
    """The garbage, aborted and future reads are judged in the staleness
    rows, from the join of the ok reads with their value's writers that the
    value rule makes anyway: as a query of their own they shuffled every ok
    read again and aggregated the writers again (docs/benchmarks.md, "The
    unwritten reads in the staleness rows"). Two joins with the writers are
    left: the reads' and the lost-write check's per-key final reads'."""
    plan = _tier1_plan(spark, tmp_path, monkeypatch)
    assert len(re.findall(r"Join \[[^\]]*\], \[w_value#", plan)) == 2, plan


def test_a_log_forked_everywhere_is_counted_exactly_and_only_its_first_witnesses_are_gathered(spark):
    """The forked-log and duplicated-write checks send only the offsets and
    write ids whose witnesses are kept (the first ``max_witnesses`` of each
    history) to their witness queries, with the exact count beside them:
    what they broadcast is bounded by the witnesses wanted, not by a log
    dump forked at every offset (docs/benchmarks.md, "Witness sets bounded
    by the witnesses wanted")."""
    forks, nodes = 40, 3
    rows = [
        # Each node holds its own record at every committed offset; the same
        # write id is committed at two offsets (2k, 2k + 1) by every node.
        (0, f"n{node}", offset, 100, 1, f"hash-{node}-{offset}", f"w{offset // 2:03d}", None)
        for node in range(nodes)
        for offset in range(forks)
    ]
    dumps = spark.createDataFrame(
        rows, "hid int, node string, offset long, hwm long, epoch long, record_hash string, write_id string, log_start long"
    )
    settings = _tier1.Settings(initial_text={}, witnesses_max=2)
    found = {
        check_name: sorted((row["ord1"], row["total"]) for row in frame.collect())
        for check_name, frame in (
            ("forked-log", _tier1.forked_logs(dumps, settings)),
            ("duplicated-write", _tier1.duplicated_writes(dumps, settings)),
        )
    }
    assert found == {"forked-log": [(0, forks), (1, forks)], "duplicated-write": [(0, forks // 2), (2, forks // 2)]}


def test_reads_of_values_nobody_wrote_are_counted_exactly_and_only_the_first_witnesses_become_objects(spark, tmp_path):
    """The garbage reads (like the stale reads) are picked from the
    staleness rows the job fetches: counted there, and only the first
    ``max_witnesses`` by read index turned into evidence (a system that
    serves nothing it was given fails every read)."""
    reads = 30
    lines = []
    for number in range(reads):
        process = number % 3
        lines.append(json.dumps({"index": 2 * number, "process": process, "type": "invoke", "f": "read", "key": "x",
                                 "value": None, "time": 10 * number}))
        lines.append(json.dumps({"index": 2 * number + 1, "process": process, "type": "ok", "f": "read", "key": "x",
                                 "value": 1000 - number, "time": 10 * number + 5}))
    path = _write(tmp_path, "garbage", lines)
    [spark_result] = check([path], spark=spark, linearizability=False, max_witnesses=2)
    [reference] = check_reference([path], max_witnesses=2)
    garbage = spark_result.checks["garbage-read"]
    assert garbage["count"] == reads
    assert [witness["read"]["index"] for witness in garbage["witnesses"]] == [0, 2]
    assert garbage == reference.checks["garbage-read"]


def test_the_log_checks_count_every_anomaly_and_keep_the_first_witnesses_as_the_reference_does(spark, tmp_path):
    campaign = synthesize(tmp_path / "c", ops=1500, keys=8, plant={"forked-log": 5, "duplicated-write": 5}, seed=21)
    for max_witnesses in (1, 3):
        [spark_result] = check([str(campaign.directory)], spark=spark, linearizability=False, max_witnesses=max_witnesses)
        [reference] = check_reference([str(campaign.directory)], max_witnesses=max_witnesses)
        for name in ("forked-log", "duplicated-write"):
            entry = spark_result.checks[name]
            assert entry["count"] == 5 and len(entry["witnesses"]) == max_witnesses, (name, entry)
            assert entry == reference.checks[name], name


@pytest.mark.parametrize(
    "lines",
    [[], ['{"index":0,"process":"nemesis","type":"info","f":"start-partition","key":null,"time":0}']],
    ids=["empty", "nemesis-only"],
)
def test_nothing_to_check_is_its_own_verdict_on_both_paths(spark, tmp_path, lines):
    path = _write(tmp_path, "h", lines)
    [spark_result] = check([path], spark=spark)
    [reference_result] = check_reference([path])
    for result in (spark_result, reference_result):
        # Trivially valid (Porcupine agrees), but it proves nothing, and says so.
        assert result.valid is True and result.nothing_to_check
        assert result.to_dict()["nothing_to_check"] is True
        assert {entry["status"] for entry in result.checks.values()} == {"skipped"}
        assert exit_code([result]) == EXIT_NOTHING_TO_CHECK


# ---------------------------------------------------------------------------
# Numbers: a number with a fraction or exponent is a float, an integer is not,
# and they are different values (as Clojure's = says in Jepsen and Knossos).


def _read_after_write(written: str, read: str) -> list[str]:
    return [
        f'{{"index":0,"process":0,"type":"invoke","f":"write","key":"x","value":{written},"time":0}}',
        f'{{"index":1,"process":0,"type":"ok","f":"write","key":"x","value":{written},"time":1000}}',
        '{"index":2,"process":0,"type":"invoke","f":"read","key":"x","value":null,"time":2000}',
        f'{{"index":3,"process":0,"type":"ok","f":"read","key":"x","value":{read},"time":3000}}',
    ]


NUMBER_CASES = {
    # written, read, same value?
    "int-read-as-float": ("1", "1.0", False),
    "float-read-as-int": ("2.0", "2", False),
    "float-trailing-zeros": ("1.50", "1.5", True),
    "exponent": ("1e2", "100.0", True),
    "exponent-vs-int": ("1e2", "100", False),
    "big-int": ("123456789012345678901234567", "123456789012345678901234567", True),
    "nested": ('[1.0,{"b":2,"a":0.50}]', '[1.00,{"a":0.5,"b":2}]', True),
    "nested-int-vs-float": ('[1,{"a":2}]', '[1,{"a":2.0}]', False),
    "string-vs-number": ('"1"', "1", False),
}


def test_number_semantics_agree_on_both_paths(spark, tmp_path):
    paths = {name: _write(tmp_path, name, _read_after_write(w, r)) for name, (w, r, _) in NUMBER_CASES.items()}
    spark_results = {result.history: result for result in check(list(paths.values()), spark=spark)}
    for name, (written, read, same) in NUMBER_CASES.items():
        reference = check_reference([paths[name]])[0]
        for result in (spark_results[name], reference):
            assert result.valid is same, (name, result.checker, result.to_dict()["checks"])
            assert not result.nothing_to_check
            if not same:
                assert result.failed_checks() == ["garbage-read", "linearizability"], (name, result.checker)
                witness = result.checks["garbage-read"]["witnesses"][0]["read"]
                assert json.dumps(witness["value"]) == json.dumps(json.loads(read)), (name, result.checker)


# Histories whose values hold no non-integer number are checked without any
# Python in the operations' plan (Spark's own JSON text is exact for them):
# each is checked alone so that the other cases' floats do not bring it back.
INTEGER_ONLY_CASES = {
    # written, read, same value?
    "int-vs-other-int": ("1", "2", False),
    "object-key-order": ('{"b":[2,3],"a":1}', '{"a":1,"b":[2,3]}', True),
    "string-vs-number": ('"1"', "1", False),
    "nested-ints": ('[1,{"a":-7}]', '[1,{"a":-7}]', True),
}


@pytest.mark.parametrize("name", sorted(INTEGER_ONLY_CASES))
def test_integer_only_values_agree_on_both_paths(spark, tmp_path, name):
    written, read, same = INTEGER_ONLY_CASES[name]
    path = _write(tmp_path, name, _read_after_write(written, read))
    [spark_result] = check([path], spark=spark)
    [reference] = check_reference([path])
    for result in (spark_result, reference):
        assert result.valid is same, (name, result.checker, result.to_dict()["checks"])
        if not same:
            assert result.failed_checks() == ["garbage-read", "linearizability"], (name, result.checker)
    statuses = {name: (entry["status"], entry.get("count")) for name, entry in spark_result.checks.items()}
    assert statuses == {name: (entry["status"], entry.get("count")) for name, entry in reference.checks.items()}
    if not same:
        assert spark_result.checks["garbage-read"]["witnesses"] == reference.checks["garbage-read"]["witnesses"]


# ---------------------------------------------------------------------------
# The command line, in a process of its own (its own JVM, as a user runs it).


def _cli_environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "COLUMNS": "200", **extra}


_MAPS_ARCHIVE = """
import sys
from pyspark import SparkContext
from jepsen_like.checker import spark_session
spark_session("local[2]", log_path=sys.argv[1], small_input=True)
maps = open(f"/proc/{SparkContext._gateway.proc.pid}/maps").read()
print("mapped" if sys.argv[2] in maps else "not mapped")
"""


@pytest.mark.long  # two JVMs and a 170 MB archive, about 30 s on 2 cores: make soak
def test_a_small_check_leaves_a_class_archive_that_the_next_jvm_maps(tmp_path):
    archives = tmp_path / "archives"
    environment = _cli_environment(JEPSEN_LIKE_CHECK_CLASS_ARCHIVES=str(archives))
    path = _write(tmp_path, "h", WRITE_1)
    log = tmp_path / "spark.log"
    first = subprocess.run(
        [sys.executable, "-m", "jepsen_like.checker", "check", path, "--spark-log", str(log), "--spark-master", "local[2]"],
        capture_output=True, text=True, env=environment, timeout=900, cwd=tmp_path,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stderr == "", first.stderr
    # Dumped when the first run's JVM exited, renamed into place complete.
    [archive] = archives.iterdir()
    assert archive.suffix == ".jsa" and archive.stat().st_size > 0, archive
    second = subprocess.run(
        [sys.executable, "-c", _MAPS_ARCHIVE, str(log), str(archive)],
        capture_output=True, text=True, env=environment, timeout=600, cwd=tmp_path,
    )
    assert second.stdout.strip() == "mapped", second.stdout + second.stderr
    assert second.stderr == "", second.stderr
    assert sorted(archives.iterdir()) == [archive]  # nothing dumped twice


def test_cli_empty_history_says_nothing_to_check_with_its_exit_code_and_no_spark_noise(tmp_path):
    path = _write(tmp_path, "empty", [])
    log = tmp_path / "spark.log"
    environment = _cli_environment()
    run = subprocess.run(
        [sys.executable, "-m", "jepsen_like.checker", "check", path, "--spark-log", str(log), "--spark-master", "local[2]"],
        capture_output=True, text=True, env=environment, timeout=600, cwd=tmp_path,
    )
    assert run.returncode == EXIT_NOTHING_TO_CHECK, run.stdout + run.stderr
    assert "nothing to check" in run.stdout
    assert run.stderr == "", run.stderr
    # What Spark printed went to the log file instead.
    assert log.read_text().strip()


def test_cli_a_users_own_garbage_collector_replaces_the_checkers(tmp_path):
    """The checker chooses the driver JVM's collector (serial for a small
    input, parallel for a big one); a user's ``-XX:+UseG1GC`` through
    ``--spark-conf`` made two, and the JVM refused to start ("Multiple
    garbage collectors selected": the command failed with Spark's "Java
    gateway process exited")."""
    path = _write(tmp_path, "h", WRITE_1)
    log = tmp_path / "spark.log"
    run = subprocess.run(
        [sys.executable, "-m", "jepsen_like.checker", "check", path, "--spark-log", str(log), "--spark-master", "local[2]",
         "--spark-conf", "spark.driver.extraJavaOptions=-XX:+UseG1GC"],
        capture_output=True, text=True, env=_cli_environment(), timeout=600, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 valid" in run.stdout, run.stdout


_FAILED_START = """
import sys
from jepsen_like.checker._spark import SessionStart
starting = SessionStart("local[1]", log_path=sys.argv[1])
starting.wait()
try:
    starting.result()
except OSError as error:
    print("raised", type(error).__name__)
"""


def test_a_session_started_on_a_thread_raises_its_error_in_the_caller(tmp_path):
    """The command line starts its session on a thread of its own: what
    stopped it from starting (here a Spark log that cannot be created, a
    file in the way of its directory) is raised where the session is asked
    for, not lost with the thread."""
    in_the_way = tmp_path / "not-a-directory"
    in_the_way.write_text("")
    run = subprocess.run(
        [sys.executable, "-c", _FAILED_START, str(in_the_way / "spark.log")],
        capture_output=True, text=True, env=_cli_environment(), timeout=120, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() in ("raised FileExistsError", "raised NotADirectoryError"), run.stdout + run.stderr


def test_a_small_input_is_told_by_its_event_count_not_its_file_size(tmp_path):
    from jepsen_like.checker._load import SMALL_INPUT_EVENTS_MAX, SMALL_INPUT_SIDE_RECORDS_MAX, discover_histories, is_small_input

    # Long events (300 bytes each) once made a 10,000-operation campaign
    # look like 60,000 events: it then got none of the small-input settings.
    padding = "x" * 250
    long_events = tmp_path / "long.jsonl"
    long_events.write_text(f'{{"index":0,"note":"{padding}"}}\n' * SMALL_INPUT_EVENTS_MAX)
    assert is_small_input(discover_histories([long_events]))
    many_events = tmp_path / "many.jsonl"
    many_events.write_text("{}\n" * (SMALL_INPUT_EVENTS_MAX + 1))
    assert not is_small_input(discover_histories([many_events]))
    campaign = tmp_path / "campaign"
    campaign.mkdir()
    (campaign / "history.jsonl").write_text("{}\n" * 10)
    (campaign / "log-dumps.jsonl").write_text("{}\n" * (SMALL_INPUT_SIDE_RECORDS_MAX + 1))
    assert not is_small_input(discover_histories([campaign]))


def test_tier2_has_no_more_partitions_than_keys_to_search():
    """Each tier-2 partition is a Python task: a one-key history gets one,
    not two per core; keys of histories with nothing to search count for
    none; many keys get two per core."""
    from jepsen_like.checker._job import tier2_partitions

    one_key = {0: {"keys": 1, "tier2_operations": 3}}
    assert tier2_partitions(2, one_key) == 1
    assert tier2_partitions(2, {**one_key, 1: {"keys": 40, "tier2_operations": 0}}) == 1
    assert tier2_partitions(2, {0: {"keys": 3, "tier2_operations": 9}}) == 3
    assert tier2_partitions(2, {0: {"keys": 500, "tier2_operations": 900}}) == 4
    assert tier2_partitions(1, {0: {"keys": 500, "tier2_operations": 900}}) == 2
    assert tier2_partitions(8, {0: {"keys": 0, "tier2_operations": 0}}) == 1


def test_only_the_newest_class_archives_are_kept(tmp_path):
    """One archive per Spark install (each virtualenv has its own), about
    170 MB each: writing one deletes all but the newest few, never the one
    just written."""
    archives = [tmp_path / f"spark-driver-{index:016x}.jsa" for index in range(7)]
    for age_s, archive in enumerate(reversed(archives)):
        archive.write_bytes(b"x")
        os.utime(archive, (1_000_000 - age_s, 1_000_000 - age_s))
    just_written = archives[0]  # the oldest by mtime: kept all the same
    (tmp_path / "other.txt").write_text("not an archive")
    prune_class_archives(tmp_path, keep=just_written, kept=3)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [just_written.name, *(archive.name for archive in archives[-3:])] + ["other.txt"]
    )


def test_a_users_driver_java_options_add_to_the_checkers_own():
    """``--spark-conf spark.driver.extraJavaOptions=...`` once replaced the
    checker's JVM options (its log4j setup, its class archive): Spark noise
    came back on the terminal. Now the user's follow the checker's."""
    from jepsen_like.checker._spark import merged_java_options

    conf, options = merged_java_options(
        {"spark.driver.extraJavaOptions": " -Dfoo=1 ", "spark.executor.memory": "8g"}, "-Dlog4j2.configurationFile=x"
    )
    assert options == "-Dlog4j2.configurationFile=x -Dfoo=1"
    assert conf == {"spark.executor.memory": "8g"}
    assert merged_java_options(None, "-Da=1") == ({}, "-Da=1")
    # A collector of the user's replaces the checker's: the JVM refuses to
    # start with two ("Multiple garbage collectors selected").
    _, options = merged_java_options(
        {"spark.driver.extraJavaOptions": "-XX:+UseG1GC -Xlog:gc"}, "-Dx=1 -XX:+UseParallelGC -XX:MetaspaceSize=64m"
    )
    assert options == "-Dx=1 -XX:MetaspaceSize=64m -XX:+UseG1GC -Xlog:gc"
    _, options = merged_java_options({"spark.driver.extraJavaOptions": "-XX:+UseGCOverheadLimit"}, "-XX:+UseSerialGC")
    assert options == "-XX:+UseSerialGC -XX:+UseGCOverheadLimit"  # tunes a collector, chooses none


def test_a_write_compacted_into_a_snapshot_is_not_lost(tmp_path):
    """Found by a 30-minute campaign: its nodes compacted their logs into
    snapshots, the log dumps began at offset 728,249, and every earlier
    acknowledged write (105,998 of them) was reported lost by the final-log
    rule. A dump now says where its log starts (``log_start``), and a write
    below the lowest start is not looked for in the dumps; one past it still
    is."""
    from jepsen_like.checker._reference import check_source_reference
    from jepsen_like.checker._load import discover_histories

    directory = tmp_path / "run"
    directory.mkdir()
    lines = [
        {"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "write", "key": "x", "value": 1, "write_id": "w1"},
        {"index": 1, "time": 1, "process": 0, "type": "ok", "f": "write", "key": "x", "value": 1, "offset": 5, "write_id": "w1"},
        {"index": 2, "time": 2, "process": 0, "type": "invoke", "f": "write", "key": "x", "value": 2, "write_id": "w2"},
        {"index": 3, "time": 3, "process": 0, "type": "ok", "f": "write", "key": "x", "value": 2, "offset": 12, "write_id": "w2"},
    ]
    (directory / "history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    dumps = [{"node": "1", "offset": offset, "epoch": 1, "record_hash": "h", "write_id": None, "hwm": 20, "log_start": 10}
             for offset in range(10, 20)]
    (directory / "log-dumps.jsonl").write_text("".join(json.dumps(record) + "\n" for record in dumps))
    [source] = discover_histories([str(directory)])
    lost = check_source_reference(source).checks["lost-write"]
    assert lost["status"] == "fail" and lost["count"] == 1, lost  # w2 (offset 12) was dumped and is missing
    assert lost["witnesses"][0]["write"]["write_id"] == "w2"


def test_java_lookups_are_asked_of_the_jvm_once_and_field_values_every_time(spark):
    # The session fixture starts through spark_session, which caches
    # PySpark's Java lookups and turns its DataFrame debugging off: a second
    # F.col costs one round trip (the call itself), not three (class,
    # member, call) plus five for the Python call site.
    from pyspark import SparkContext
    from pyspark.sql import functions as F

    from jepsen_like.checker._java_lookups import cache_java_lookups

    cache_java_lookups()  # idempotent: the fixture's session already has it
    client = SparkContext._gateway._gateway_client
    real_send = client.send_command
    sent: list[str] = []

    def counting_send(command, *args, **kwargs):
        sent.append(command)
        return real_send(command, *args, **kwargs)

    client.send_command = counting_send
    try:
        F.col("warm")
        integer = getattr(SparkContext._jvm, "java.lang.Integer")
        del sent[:]
        column = F.col("x")
        col_round_trips = len(sent)
        del sent[:]
        # A static field (java.lang.Integer.MAX_VALUE) is read from the
        # JVM each time, never from the cache.
        first, second = integer.MAX_VALUE, integer.MAX_VALUE
        field_round_trips = len(sent)
    finally:
        del client.send_command
    assert col_round_trips == 1
    assert field_round_trips == 2 and first == second == 2**31 - 1
    assert str(column) == "Column<'x'>"
    assert [row.id for row in spark.range(3).select(F.col("id")).collect()] == [0, 1, 2]


def test_a_one_check_process_releases_no_java_object_one_by_one(spark):
    # The command line checks once and exits: a Java object its queries
    # made gets no finalizer (py4j's, which releases it on the JVM with a
    # round trip when Python drops it); it goes with the JVM. Turned back
    # on afterwards: this session is shared.
    from py4j.finalizer import ThreadSafeFinalizer
    from pyspark import SparkContext
    from pyspark.sql import functions as F

    from jepsen_like.checker._spark import keep_java_objects_until_exit

    gateway = SparkContext._gateway

    def has_finalizer(column) -> bool:
        java = column._jc
        key = f"{java._gateway_client.address}{java._gateway_client.port}{java._target_id}"
        return key in ThreadSafeFinalizer.finalizers

    try:
        released_by_default = has_finalizer(F.col("y"))
        keep_java_objects_until_exit()
        released_after = has_finalizer(F.col("y"))
    finally:
        gateway.gateway_property.enable_memory_management = True
    assert released_by_default
    assert not released_after
