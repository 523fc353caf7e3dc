"""Reading histories, node event logs and log dumps into Spark DataFrames,
validating them, and pairing events into operations.

Every history gets a small integer id (``hid``); all histories of one run
live in the same DataFrames, so one Spark job checks them all. Per-history
settings (model, bounds, offset scope) are map literals keyed by ``hid``.

Values stay JSON: ``arg`` / ``ret`` are the canonical JSON text of the invoke
and completion values (``_models.canonical_json`` of the value as Python's
``json`` module reads it), which is what equality between values means here:
``1`` and ``1.0`` differ, as they do in Jepsen and Knossos (docs/checker.md,
"Numbers").
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import partial, reduce
from pathlib import Path
from typing import Any, Mapping, Sequence

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jepsen_like.checker._errors import NUMBER_CHARS_MAX, VALUE_NESTING_MAX, HistoryFormatError, too_deep_field
from jepsen_like.checker._load import (
    BROKER_STATES,
    COMPLETION_TYPES,
    EVENT_TYPES,
    LOG_DUMP_REQUIRED,
    NEMESIS,
    _NODE_EVENT_REQUIRED,
    HistorySource,
    locate_lines,
    read_history_events,
    side_file_errors,
)
from jepsen_like.checker._model_catalog import shape_error
from jepsen_like.checker._models import READ_MODES, Model, variant_json
from jepsen_like.checker._step_model import STEP, is_step_model

CORRUPT = "_corrupt_record"
# Each event's id within its history's scan: two rows of one history with the
# same row_id are the same event (an invoke's completion is seen both on its
# own and in the invoke's `next`), so an index seen twice is a duplicate only
# when the row ids differ.
ROW_ID = "row_id"
ERRORS_SHOWN_MAX = 20

HISTORY_SCHEMA = T.StructType(
    [
        T.StructField("index", T.LongType()),
        T.StructField("time", T.LongType()),
        T.StructField("process", T.StringType()),
        T.StructField("type", T.StringType()),
        T.StructField("f", T.StringType()),
        T.StructField("key", T.StringType()),
        T.StructField("value", T.VariantType()),
        T.StructField("node", T.StringType()),
        T.StructField("offset", T.LongType()),
        T.StructField("epoch", T.LongType()),
        T.StructField("mode", T.StringType()),
        T.StructField("final", T.BooleanType()),
        T.StructField("write_id", T.StringType()),
        T.StructField("broker_id", T.StringType()),
        T.StructField("broker_epoch", T.LongType()),
        T.StructField("error", T.StringType()),
    ]
)
NODE_EVENT_SCHEMA = T.StructType(
    [
        T.StructField("time", T.LongType()),
        T.StructField("node", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("epoch", T.LongType()),
        T.StructField("role", T.StringType()),
        T.StructField("leader", T.StringType()),
        T.StructField("broker_id", T.StringType()),
        T.StructField("broker_epoch", T.LongType()),
        T.StructField("offset", T.LongType()),
        T.StructField("state", T.StringType()),
        T.StructField("accepted", T.BooleanType()),
        T.StructField("request", T.StringType()),
    ]
)
LOG_DUMP_SCHEMA = T.StructType(
    [
        T.StructField("node", T.StringType()),
        T.StructField("offset", T.LongType()),
        T.StructField("epoch", T.LongType()),
        T.StructField("record_hash", T.StringType()),
        T.StructField("write_id", T.StringType()),
        T.StructField("hwm", T.LongType()),
        T.StructField("log_start", T.LongType()),
    ]
)
NODE_EVENT_FIELDS = [field.name for field in NODE_EVENT_SCHEMA.fields]
LOG_RECORD_FIELDS = [field.name for field in LOG_DUMP_SCHEMA.fields]

# Answer-side fields come from the completion first, request-side ones from
# the invoke first (as _models.merge_optional_fields does).
_ANSWER_SIDE = ("node", "offset", "epoch", "error")
_REQUEST_SIDE = ("mode", "final", "write_id", "broker_id", "broker_epoch")

# Operation columns a witness is rendered from (see _models.operation_from_row).
OP_RENDER_COLUMNS = (
    "index", "process", "f", "key", "outcome", "t_inv", "t_done", "arg", "complete_index", "complete_time", "ret",
    "node", "offset", "epoch", "mode", "final", "write_id", "broker_id", "broker_epoch", "error",
)


def per_history(values: Mapping[int, Any], column: str = "hid") -> Column:
    """A column holding ``values[hid]`` for each row (null where absent)."""
    if not values:
        return F.lit(None)
    pairs = []
    for hid, value in sorted(values.items()):
        pairs += [F.lit(hid), F.lit(value)]
    return F.element_at(F.create_map(*pairs), F.col(column))


def _file_path() -> Column:
    """The local path of the file a row came from (Spark reports a
    percent-encoded URI; a '+' in it is a plus, not a space)."""
    uri = F.regexp_replace(F.input_file_name(), "^file://", "")
    return F.url_decode(F.regexp_replace(uri, "\\+", "%2B"))


def _hid_by_file(paths_by_hid: Mapping[int, Sequence[Path]]) -> Column:
    pairs = []
    for hid, paths in sorted(paths_by_hid.items()):
        for path in paths:
            pairs += [F.lit(os.path.abspath(path)), F.lit(hid)]
    return F.element_at(F.create_map(*pairs), _file_path())


# A JSON line's nesting as Jackson counts it: the event (or record) object
# is one level, its fields' values may nest VALUE_NESTING_MAX more. A line
# past it is a corrupt record, reported with its file and line
# (_raise_errors says why).
_LINE_NESTING_MAX = VALUE_NESTING_MAX + 1


def _read_json(spark: SparkSession, paths_by_hid: Mapping[int, Sequence[Path]], schema: T.StructType) -> DataFrame:
    """One scan over every file (small files share tasks), each row tagged
    with its history's hid and its file."""
    with_corrupt = T.StructType(schema.fields + [T.StructField(CORRUPT, T.StringType())])
    paths = [os.path.abspath(path) for _, group in sorted(paths_by_hid.items()) for path in group]
    return (
        spark.read.schema(with_corrupt)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .option("maxNestingDepth", str(_LINE_NESTING_MAX))
        .option("maxNumLen", str(NUMBER_CHARS_MAX))
        .json(paths)
        .withColumn(ROW_ID, F.monotonically_increasing_id())
        .withColumn("source_file", _file_path())
        .withColumn("hid", _hid_by_file(paths_by_hid).cast("int"))
    )


def _read_parquet_history(spark: SparkSession, source: HistorySource, hid: int) -> DataFrame:
    raw = spark.read.parquet(str(source.path))
    columns = set(raw.columns)
    selected = []
    corrupt = F.lit(None).cast("string")
    value_text = "value_text"
    for field in HISTORY_SCHEMA.fields:
        if field.name not in columns:
            selected.append(F.lit(None).cast(field.dataType).alias(field.name))
        elif field.name == "value":
            # Parquet holds the value as JSON text; text that is not JSON is a
            # malformed event, reported like a corrupt JSON line. Parsed once:
            # the check for a failed parse reads the parsed column (written
            # in one select, the parse ran twice per event).
            selected.append(F.col("value").cast("string").alias(value_text))
            selected.append(F.expr("try_parse_json(CAST(`value` AS STRING))").alias("value"))
            text = F.col(value_text)
            # Nesting past the limit needs two characters a level: only
            # such rare long texts are parsed a second time, by Jackson
            # with the limit (parse_json has none of its own to set).
            too_deep = (F.length(text) > 2 * VALUE_NESTING_MAX) & F.from_json(
                text, "variant", {"maxNestingDepth": str(VALUE_NESTING_MAX)}
            ).isNull()
            corrupt = (
                F.when(text.isNotNull() & F.col("value").isNull(), F.concat(F.lit("value is not JSON text: "), text))
                .when(
                    text.isNotNull() & too_deep,
                    F.concat(F.lit(f"value nests deeper than {VALUE_NESTING_MAX} levels: "), text),
                )
            )
        else:
            selected.append(F.expr(f"try_cast(`{field.name}` AS {field.dataType.simpleString()})").alias(field.name))
    return raw.select(*selected).select(
        *[field.name for field in HISTORY_SCHEMA.fields], corrupt.alias(CORRUPT),
        F.monotonically_increasing_id().alias(ROW_ID), F.lit(str(source.path)).alias("source_file"), F.lit(hid).alias("hid"),
    )


def _read_histories(spark: SparkSession, sources: Sequence[HistorySource]) -> DataFrame:
    frames = []
    json_paths = {
        hid: [source.path]
        for hid, source in enumerate(sources)
        if source.file_format == "jsonl" and not source.meta.independent
    }
    if json_paths:
        frames.append(_read_json(spark, json_paths, HISTORY_SCHEMA))
    for hid, source in enumerate(sources):
        if source.file_format == "edn" or source.meta.independent:
            frames.append(_read_in_driver(spark, source, hid))
        elif source.file_format == "parquet":
            frames.append(_read_parquet_history(spark, source, hid))
    return reduce(DataFrame.unionByName, frames)


def _read_in_driver(spark: SparkSession, source: HistorySource, hid: int) -> DataFrame:
    """A Jepsen EDN history, or an independent one (its [key value] tuples
    split): parsed and validated in the driver (the EDN parser is Python;
    its errors name the file and line, as the reference checker's do), then
    handed to Spark as the JSON lines it stands for."""
    lines = [json.dumps(event) for event in read_history_events(source)]
    with_corrupt = T.StructType(HISTORY_SCHEMA.fields + [T.StructField(CORRUPT, T.StringType())])
    return (
        spark.read.schema(with_corrupt)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .option("maxNestingDepth", str(_LINE_NESTING_MAX))
        .option("maxNumLen", str(NUMBER_CHARS_MAX))
        .json(spark.sparkContext.parallelize(lines, 1))
        .withColumn(ROW_ID, F.monotonically_increasing_id())
        .withColumn("source_file", F.lit(str(source.path)))
        .withColumn("hid", F.lit(hid))
    )


def _read_parquet_table(spark: SparkSession, path: Path, hid: int, schema: T.StructType) -> DataFrame:
    """A Parquet side file with the columns of ``schema`` (missing ones null,
    others cast; a value that does not cast becomes null and is reported as
    a missing field)."""
    raw = spark.read.parquet(str(path))
    columns = set(raw.columns)
    selected = [
        F.expr(f"try_cast(`{field.name}` AS {field.dataType.simpleString()})").alias(field.name)
        if field.name in columns
        else F.lit(None).cast(field.dataType).alias(field.name)
        for field in schema.fields
    ]
    return raw.select(
        *selected, F.lit(None).cast("string").alias(CORRUPT), F.lit(str(path)).alias("source_file"), F.lit(hid).alias("hid")
    )


def _read_side_files(spark: SparkSession, sources: Sequence[HistorySource], attribute: str, schema: T.StructType) -> DataFrame | None:
    json_paths: dict[int, list[Path]] = {}
    frames = []
    for hid, source in enumerate(sources):
        for path in getattr(source, attribute):
            if path.suffix == ".parquet":
                frames.append(_read_parquet_table(spark, path, hid, schema))
            else:
                json_paths.setdefault(hid, []).append(path)
    if json_paths:
        frames.insert(0, _read_json(spark, json_paths, schema).drop(ROW_ID))
    if not frames:
        return None
    return reduce(DataFrame.unionByName, frames)


def _first_message(checks: Sequence[tuple[Column, Column]]) -> Column:
    """The message of the first check whose condition holds, else null."""
    expression = None
    for condition, message in checks:
        expression = F.when(condition, message) if expression is None else expression.when(condition, message)
    return expression  # type: ignore[return-value]


def _row_checks() -> list[tuple[Column, Column]]:
    """What can be wrong with one event on its own."""
    valid = F.col(CORRUPT).isNull()
    checks = [
        (F.col(CORRUPT).isNotNull(), F.concat(F.lit("not a valid event: "), F.substring(F.col(CORRUPT), 1, 200))),
        # Rows are tagged with their history by file path; a row that could
        # not be would silently escape every check.
        (F.col("hid").isNull(), F.lit("could not tell which history file this event came from")),
    ]
    for name in ("index", "time", "process", "type", "f"):
        checks.append((valid & F.col(name).isNull(), F.lit(f"missing required field '{name}'")))
    checks += [
        (
            ~F.col("type").isin(*EVENT_TYPES),
            F.concat(F.lit(f"type must be one of {', '.join(EVENT_TYPES)}, got "), F.col("type")),
        ),
        (
            (F.col("process") != NEMESIS) & F.expr("try_cast(process AS BIGINT)").isNull(),
            F.concat(F.lit('process must be an integer or "nemesis", got '), F.col("process")),
        ),
        (
            F.col("mode").isNotNull() & ~F.col("mode").isin(*READ_MODES),
            F.concat(F.lit(f"mode must be one of {', '.join(READ_MODES)}, got "), F.col("mode")),
        ),
    ]
    return checks


def _pair(events: DataFrame, *, small_input: bool = False) -> DataFrame:
    """Each event with its process's previous event type and next event.

    A big input is shuffled by process before the window: that partitioning
    serves the window's (history, process) partitions, and the window's
    copy of each row (the struct ``lead`` takes the next row from) is then
    built after the shuffle, not carried through it beside the row (which
    doubled the bytes every event costs the load's one big shuffle).
    """
    if not small_input:
        events = events.repartition("process")
    by_process = Window.partitionBy("hid", "process").orderBy("index")
    following = F.lead(
        F.struct(
            "type", "time", "index", "f", "key", "value", "node", "offset", "epoch", "mode", "final",
            "write_id", "broker_id", "broker_epoch", "error", ROW_ID,
        )
    ).over(by_process)
    return events.select("*", F.lag("type").over(by_process).alias("prev_type"), following.alias("next"))


def _pairing_checks() -> list[tuple[Column, Column]]:
    """What can be wrong with how a client event follows its process's
    previous one (for rows of :func:`_pair`)."""
    invoke = F.col("type") == "invoke"
    next_is_completion = F.col("next.type").isin(*COMPLETION_TYPES)
    return [
        (
            ~invoke & (F.col("prev_type").isNull() | (F.col("prev_type") != "invoke")),
            F.concat(F.col("type"), F.lit(" completion without an invoke for process "), F.col("process")),
        ),
        (
            invoke & (F.col("next.type") == "invoke"),
            F.concat(
                F.lit("process "), F.col("process"), F.lit(" invoked again (index "), F.col("next.index").cast("string"),
                F.lit(") while this operation had not completed"),
            ),
        ),
        (
            invoke & next_is_completion & ((F.col("next.f") != F.col("f")) | ~F.col("next.key").eqNullSafe(F.col("key"))),
            F.concat(
                F.lit("its completion (index "), F.col("next.index").cast("string"), F.lit(") has a different f or key"),
            ),
        ),
        (
            invoke & next_is_completion & (F.col("next.time") < F.col("time")),
            F.concat(F.lit("its completion (index "), F.col("next.index").cast("string"), F.lit(") ends before it began")),
        ),
    ]


def _too_deep_field(line: str) -> str | None:
    """The field of a JSON line Spark's reader refused that nests deeper
    than ``VALUE_NESTING_MAX`` levels (``"a field"`` when Python's decoder
    cannot even read that deep), or None: the line was refused for
    something else (not JSON at all, say)."""
    try:
        record = json.loads(line)
    except RecursionError:
        return "a field"
    except ValueError:
        return None
    return too_deep_field(record) if isinstance(record, dict) else None


def _raise_errors(rows: list, sources: Sequence[HistorySource], what: str) -> None:
    """Raise one :class:`HistoryFormatError` for the error rows (``hid``,
    ``index``, ``message``, ``raw``: a corrupt line's text), naming each
    JSON-lines event by file and line, as the reference checker does."""
    if not rows:
        return
    shown = rows[:ERRORS_SHOWN_MAX]
    located: dict[int, tuple[dict[int, list[int]], dict[str, int]]] = {}
    for hid in sorted({row["hid"] for row in shown if row["hid"] is not None}):
        if sources[hid].file_format == "jsonl":
            indexes = {row["index"] for row in shown if row["hid"] == hid and row["index"] is not None}
            raw_lines = {row["raw"] for row in shown if row["hid"] == hid and row["raw"] is not None}
            located[hid] = locate_lines(sources[hid].path, indexes, raw_lines)
    lines = []
    for row in shown:
        path = sources[row["hid"]].path if row["hid"] is not None else "(unknown file)"
        by_index, by_text = located.get(row["hid"], ({}, {}))
        numbers = by_index.get(row["index"], []) if row["index"] is not None else []
        if row["raw"] is not None and row["raw"] in by_text:
            numbers = [by_text[row["raw"]]]
        message = row["message"]
        too_deep = _too_deep_field(row["raw"]) if row["raw"] is not None else None
        if too_deep is not None:
            message = f"not a valid event: {too_deep} nests deeper than {VALUE_NESTING_MAX} levels: {row['raw'][:200]}"
        if len(numbers) > 1:
            # A duplicated index: name the later line, as a reader meets it.
            message += " (also at line " + ", ".join(str(n) for n in numbers[:-1]) + ")"
        where = f"{path}:{numbers[-1]}" if numbers else str(path)
        if row["index"] is not None:
            where += f": event index {row['index']}"
        elif not numbers:
            where += ": a line"
        lines.append(f"{where}: {message}")
    more = "" if len(rows) <= ERRORS_SHOWN_MAX else f"\n(and more; the first {ERRORS_SHOWN_MAX} are shown)"
    raise HistoryFormatError(f"malformed {what}:\n" + "\n".join(lines) + more)


def _raise_side_errors(rows: list, sources: Sequence[HistorySource]) -> None:
    """Raise one :class:`HistoryFormatError` for the side-file error rows
    (``source_file``, ``message``). The job finds which files hold
    malformed records, not their lines: each such file is read again here,
    in the driver, by the reference checker's reader, whose messages name
    the line (or Parquet row) and are the reference checker's own. Only a
    check that has failed pays for it. A file where that reader finds
    nothing the job did keeps the job's message, naming the file alone."""
    if not rows:
        return
    flagged: dict[str, list] = {}
    for row in rows:
        flagged.setdefault(row["source_file"], []).append(row)
    # Spark names a JSON-lines file by its absolute path, a Parquet one as given.
    side_files = [
        (path, node_event)
        for source in sources
        for paths, node_event in ((source.node_event_paths, True), (source.log_dump_paths, False))
        for path in paths
    ]
    shown: list[str] = []
    for path, node_event in side_files:
        job_rows = flagged.pop(os.path.abspath(path), []) + flagged.pop(str(path), [])
        if not job_rows or len(shown) > ERRORS_SHOWN_MAX:
            continue
        found = side_file_errors(path, node_event=node_event, limit=ERRORS_SHOWN_MAX + 1 - len(shown))
        shown += found or [f"{path}: {row['message']}" for row in job_rows]
    shown += [f"{row['source_file']}: {row['message']}" for file_rows in flagged.values() for row in file_rows]
    more = "" if len(rows) <= ERRORS_SHOWN_MAX and len(shown) <= ERRORS_SHOWN_MAX else (
        f"\n(and more; the first {ERRORS_SHOWN_MAX} are shown)"
    )
    raise HistoryFormatError("malformed node events or log dumps:\n" + "\n".join(shown[:ERRORS_SHOWN_MAX]) + more)


def _side_errors(frame: DataFrame, required: Mapping[str, Sequence[str]] | Sequence[str], *, kinds: bool) -> DataFrame:
    checks = [
        (F.col(CORRUPT).isNotNull(), F.concat(F.lit("not a valid record: "), F.substring(F.col(CORRUPT), 1, 200))),
        (F.col("hid").isNull(), F.lit("could not tell which history this record belongs to")),
    ]
    valid = F.col(CORRUPT).isNull()
    if kinds:
        for name in ("time", "node", "kind"):
            checks.append((valid & F.col(name).isNull(), F.lit(f"missing required field '{name}'")))
        for kind, names in required.items():  # type: ignore[union-attr]
            for name in names:
                checks.append(
                    (valid & (F.col("kind") == kind) & F.col(name).isNull(), F.lit(f"{kind} event without '{name}'"))
                )
        checks.append(
            (
                valid & (F.col("kind") == "broker_state") & ~F.col("state").isin(*BROKER_STATES),
                F.concat(F.lit(f"state must be one of {', '.join(BROKER_STATES)}, got "), F.col("state")),
            )
        )
    else:
        for name in required:  # type: ignore[union-attr]
            checks.append((valid & F.col(name).isNull(), F.lit(f"missing required field '{name}'")))
    messages = F.array_compact(F.array(*[F.when(condition, message) for condition, message in checks]))
    return (
        frame.select("hid", "source_file", messages.alias("messages"))
        .where(F.size("messages") > 0)
        .select("hid", "source_file", F.col("messages")[0].alias("message"))
    )


def materialize(frame: DataFrame, *, small_input: bool = False) -> DataFrame:
    """Compute ``frame`` once and keep it, under a plan without lineage.
    Every later query over it is then analysed and optimised against that
    short plan: with the full read-pair-join plan underneath, building the
    tier-1 queries alone took seconds. Kept on local disk (the OS caches it),
    not in Spark's memory: a ten-million-operation history in the memory
    store starved the sorts and aggregations of execution memory.

    ``small_input``: computed by the first job that reads it, not now in a
    job of its own (one job fewer: what a small input's check pays is per
    job, not per row), and kept in memory as rows (no serializing to disk
    and reading back; kilobytes to a few megabytes)."""
    if small_input:
        return frame.localCheckpoint(eager=False, storageLevel=StorageLevel.MEMORY_ONLY)
    return frame.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)


def _event_indexes(kept: DataFrame) -> DataFrame:
    """(hid, index, row id) of every event with an index: the kept rows'
    own, and each invoke's completion's (kept in its ``next``)."""
    own = kept.select("hid", "index", ROW_ID)
    completions = kept.where(
        (F.col("process") != NEMESIS) & (F.col("type") == "invoke") & F.col("next.type").isin(*COMPLETION_TYPES)
    ).select("hid", F.col("next.index").alias("index"), F.col(f"next.{ROW_ID}").alias(ROW_ID))
    return own.unionByName(completions).where(F.col("index").isNotNull())


def _duplicate_indexes(kept: DataFrame) -> DataFrame:
    """(hid, index, message, raw) for every index two different events of a
    history carry. Sorts rather than hashes: equal indexes meet in one bucket
    of a window (a hash aggregation over tens of millions of distinct indexes
    ran out of memory). A completion kept on its own (because it is
    malformed) is also its invoke's ``next``: the same row id, not a
    duplicate."""
    bucket = Window.partitionBy("hid", F.pmod(F.col("index"), F.lit(64))).orderBy("index", ROW_ID)
    previous = F.lag(F.struct("index", ROW_ID)).over(bucket)
    return (
        _event_indexes(kept).select("hid", "index", ROW_ID, previous.alias("previous"))
        .where((F.col("previous.index") == F.col("index")) & (F.col(f"previous.{ROW_ID}") != F.col(ROW_ID)))
        .select(
            "hid", "index", F.lit("index appears more than once").alias("message"), F.lit(None).cast("string").alias("raw")
        )
    )


def _index_counts(kept: DataFrame) -> DataFrame:
    """Per history, how many event indexes it has and how many distinct
    ones: equal when no index repeats. Counted in bitmaps (one per range
    of 32,768 indexes, combined before the shuffle), so that a big history
    pays a scan, not the sort of every index that :func:`_duplicate_indexes`
    costs; that runs only for a history whose counts differ."""
    per_range = _event_indexes(kept).groupBy("hid", F.bitmap_bucket_number("index").alias("index_range")).agg(
        F.count(F.lit(1)).alias("indexes"), F.bitmap_construct_agg(F.bitmap_bit_position("index")).alias("seen")
    )
    return per_range.groupBy("hid").agg(
        F.sum("indexes").alias("indexes"), F.sum(F.bitmap_count("seen")).alias("distinct_indexes")
    )


def release(frame: DataFrame | None) -> None:
    """Drop what :func:`materialize` kept (best effort: without it the
    blocks go when the JVM garbage-collects the RDD)."""
    if frame is None:
        return
    try:
        frame._jdf.queryExecution().logical().rdd().unpersist(False)
    except Exception:  # noqa: BLE001 (an internal API; the fallback is the collector)
        pass


@dataclass
class Loaded:
    """What :func:`load` read: ``paired``, the invoke events each with its
    completion in ``next`` (and the nemesis events), materialized; per-history
    event counts, operation names and side-file counts (:data:`SIDE_COUNTS`);
    the side files (materialized, or None). Call :meth:`release` when done."""

    paired: DataFrame
    event_counts: dict[int, dict[str, int]]
    operation_names: dict[int, set[str]]
    side_counts: dict[int, dict[str, int]]
    node_events: DataFrame | None
    log_dumps: DataFrame | None
    # Per history, its nemesis events (index, time, f, value), for the
    # staleness figures' fault windows.
    nemesis: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    # Some value (of any history) holds a non-integer number: exact_json
    # needs Python for those (see inexact_values).
    inexact_values: bool = True

    def release(self) -> None:
        for frame in (self.paired, self.node_events, self.log_dumps):
            release(frame)


# Per-history counts of node events (by kind) and log-dump records.
SIDE_COUNTS = ("node_events", "role_events", "broker_registrations", "broker_state_events", "broker_requests", "log_dump_records")
# What each row of load's one action is (column "row").
_ERROR_ROW, _SIDE_ERROR_ROW, _COUNT_ROW, _SIDE_COUNT_ROW, _NEMESIS_ROW = "error", "side error", "count", "side count", "nemesis"
_INDEX_COUNT_ROW = "index count"
# An event's first failed check of its own (_row_checks), before pairing.
_ROW_ERROR = "row_error"


def _side_count_rows(node_events: DataFrame | None, log_dumps: DataFrame | None) -> list[DataFrame]:
    parts = []
    if node_events is not None:
        kind = F.col("kind")
        parts.append(
            node_events.groupBy("hid").agg(
                F.count(F.lit(1)).alias("node_events"),
                F.sum(F.when(kind == "role", 1).otherwise(0)).alias("role_events"),
                F.sum(F.when(kind == "broker_registration", 1).otherwise(0)).alias("broker_registrations"),
                F.sum(F.when(kind == "broker_state", 1).otherwise(0)).alias("broker_state_events"),
                F.sum(F.when((kind == "broker_request") & (F.col("accepted") == True), 1).otherwise(0)).alias("broker_requests"),  # noqa: E712
            )
        )
    if log_dumps is not None:
        parts.append(log_dumps.groupBy("hid").agg(F.count(F.lit(1)).alias("log_dump_records")))
    return [part.withColumn("row", F.lit(_SIDE_COUNT_ROW)) for part in parts]


def load(spark: SparkSession, sources: Sequence[HistorySource], *, small_input: bool = False) -> Loaded:
    """Read and validate every history and its side files (``small_input``:
    see :func:`materialize`). Validation and counting are one Spark action: what
    a small input's check costs is per job, not per row.

    Raises :class:`HistoryFormatError` listing the first malformed events or
    records (file, event index or record text, and what is wrong).
    """
    # One scan, one pairing. What is kept: invokes (each with its completion
    # in `next`), nemesis events, and any event found malformed; a
    # completion that follows its invoke lives on in that invoke's row.
    #
    # An event's own checks run before the pairing's shuffle, its pairing
    # checks after the window: both in one expression made the pairing
    # stage's generated method longer than the 8,000 bytes of bytecode the
    # JVM compiles (HotSpot's DontCompileHugeMethods), and that stage ran
    # interpreted, at a third of its speed (152 s of task CPU of 681 for ten
    # million operations; docs/benchmarks.md, "A method too long to compile").
    events = _read_histories(spark, sources).drop("source_file")
    paired = _pair(events.select("*", _first_message(_row_checks()).alias(_ROW_ERROR)), small_input=small_input)
    well_formed_client = F.col(CORRUPT).isNull() & F.col("hid").isNotNull() & (F.col("process") != NEMESIS)
    error = F.coalesce(
        F.col(_ROW_ERROR),
        _first_message([(well_formed_client & condition, message) for condition, message in _pairing_checks()]),
    )
    kept = materialize(
        paired.select("*", error.alias("error_message"))
        .drop(_ROW_ERROR)
        .where(F.col("error_message").isNotNull() | (F.col("type") == "invoke") | (F.col("process") == NEMESIS)),
        small_input=small_input,
    )
    node_events = _read_side_files(spark, sources, "node_event_paths", NODE_EVENT_SCHEMA)
    log_dumps = _read_side_files(spark, sources, "log_dump_paths", LOG_DUMP_SCHEMA)
    # Side files arrive in as many partitions as file splits (one partition
    # of a big log dump can hold millions of records): spread them first.
    # A small input's are kilobytes, in one split: its one shuffle
    # partition would only copy them. Log dumps are spread by offset, so
    # that every node's copy of a record lands in one partition: the partial
    # aggregations of the forked-log, duplicated-write and lost-write checks
    # combine a record's copies before their shuffles (a third of the rows
    # at three nodes). Spark does not carry that partitioning over to the
    # kept copy, so those checks still shuffle.
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))

    def spread(frame: DataFrame, *columns: str) -> DataFrame:
        return frame if small_input else frame.repartition(partitions, *columns)

    node_events = materialize(spread(node_events), small_input=small_input) if node_events is not None else None
    log_dumps = (
        materialize(spread(log_dumps, "hid", "offset"), small_input=small_input) if log_dumps is not None else None
    )

    errors = kept.where(F.col("error_message").isNotNull()).select(
        "hid", "index", F.col("error_message").alias("message"), F.col(CORRUPT).alias("raw")
    )
    # A small input finds repeated indexes in the same action (what it pays
    # is per job); a big one counts them first (_index_counts) and looks for
    # them only in a history where some index repeats.
    parts = [
        (errors.unionByName(_duplicate_indexes(kept)) if small_input else errors)
        .orderBy("hid", "index")
        .limit(ERRORS_SHOWN_MAX + 1)
        .withColumn("row", F.lit(_ERROR_ROW))
    ]
    if not small_input:
        parts.append(_index_counts(kept).withColumn("row", F.lit(_INDEX_COUNT_ROW)))
    side_errors = []
    if node_events is not None:
        side_errors.append(_side_errors(node_events, _NODE_EVENT_REQUIRED, kinds=True))
    if log_dumps is not None:
        side_errors.append(_side_errors(log_dumps, LOG_DUMP_REQUIRED, kinds=False))
    if side_errors:
        parts.append(
            reduce(DataFrame.unionByName, side_errors).limit(ERRORS_SHOWN_MAX + 1).withColumn("row", F.lit(_SIDE_ERROR_ROW))
        )
    client = F.col("process") != NEMESIS
    completed = client & F.col("next.type").isin(*COMPLETION_TYPES)
    parts.append(
        kept.groupBy("hid")
        .agg(
            (F.count(F.lit(1)) + F.sum(F.when(completed, 1).otherwise(0))).alias("events"),
            F.sum(F.when(~client, 1).otherwise(0)).alias("nemesis_events"),
            F.collect_set(F.when(client, F.col("f"))).alias("operation_names"),
            F.max(inexact_values(F.col("value")) | inexact_values(F.col("next.value"))).alias("inexact_values"),
        )
        .withColumn("row", F.lit(_COUNT_ROW))
    )
    parts += _side_count_rows(node_events, log_dumps)
    # Nemesis events are few (one per fault start and end): they travel in
    # the same action, their value as the variant itself (exact numbers).
    parts.append(
        kept.where((F.col("process") == NEMESIS) & F.col("error_message").isNull() & F.col("hid").isNotNull())
        .select("hid", "index", "time", "f", F.col("value").alias("nemesis_value"))
        .withColumn("row", F.lit(_NEMESIS_ROW))
    )
    rows = reduce(partial(DataFrame.unionByName, allowMissingColumns=True), parts).collect()

    by_kind: dict[str, list] = {}
    for row in rows:
        by_kind.setdefault(row["row"], []).append(row)
    problems = by_kind.get(_ERROR_ROW, [])
    repeating = sorted(
        row["hid"] for row in by_kind.get(_INDEX_COUNT_ROW, []) if row["hid"] is not None and row["distinct_indexes"] != row["indexes"]
    )
    if repeating:  # malformed input: a second action, for its messages
        problems += (
            _duplicate_indexes(kept.where(F.col("hid").isin(*repeating))).orderBy("hid", "index").limit(ERRORS_SHOWN_MAX + 1).collect()
        )
    problems = sorted(problems, key=lambda row: (row["hid"] is not None, row["hid"] or 0, row["index"] is not None, row["index"] or 0))
    if problems or by_kind.get(_SIDE_ERROR_ROW):
        for frame in (kept, node_events, log_dumps):
            release(frame)
    _raise_errors(problems, sources, "history")
    _raise_side_errors(by_kind.get(_SIDE_ERROR_ROW, []), sources)

    event_counts = {hid: {"events": 0, "nemesis_events": 0} for hid in range(len(sources))}
    operation_names: dict[int, set[str]] = {hid: set() for hid in range(len(sources))}
    for row in by_kind.get(_COUNT_ROW, []):
        event_counts[row["hid"]] = {"events": row["events"], "nemesis_events": row["nemesis_events"]}
        operation_names[row["hid"]] = set(row["operation_names"])
    side_counts = {hid: {name: 0 for name in SIDE_COUNTS} for hid in range(len(sources))}
    for row in by_kind.get(_SIDE_COUNT_ROW, []):
        for name in SIDE_COUNTS:
            side_counts[row["hid"]][name] += row[name] or 0
    inexact = any(row["inexact_values"] for row in by_kind.get(_COUNT_ROW, []))
    nemesis: dict[int, list[dict[str, Any]]] = {hid: [] for hid in range(len(sources))}
    for row in by_kind.get(_NEMESIS_ROW, []):
        value = row["nemesis_value"]
        nemesis[row["hid"]].append({
            "index": row["index"], "time": row["time"], "f": row["f"],
            "value": None if value is None else json.loads(variant_json(value.toPython())),
        })
    return Loaded(kept, event_counts, operation_names, side_counts, node_events, log_dumps, nemesis, inexact)


# Variant types whose JSON text Spark's to_json does not give exactly: a
# decimal loses its trailing zeros (1.0 prints as 1, the integer's text), and
# a VARIANT element type hides what is inside (a mixed array or object).
_INEXACT_VARIANT_TYPES = "DECIMAL|DOUBLE|FLOAT|VARIANT"
# Schemas that hold none of those, tested first by equality: most values of
# a history are one of these, and a regular expression over every value's
# schema cost 1.5-2 s per 10 million values (docs/benchmarks.md, "Flag
# first, then find the witnesses").
_EXACT_VARIANT_SCHEMAS = (
    "BIGINT", "STRING", "BOOLEAN", "VOID", "ARRAY<BIGINT>", "ARRAY<STRING>", "ARRAY<VOID>", "ARRAY<BOOLEAN>",
)


def _variant_text(value):  # type: ignore[no-untyped-def]  (no hints: Spark reads them as a UDF kind)
    return None if value is None else variant_json(value.toPython())


_exact_json_udf = F.udf(_variant_text, T.StringType())


def inexact_values(value: Column) -> Column:
    """Whether a variant column's value holds a number Spark's ``to_json``
    does not write exactly (false for a SQL null)."""
    schema = F.call_function("schema_of_variant", value)
    return F.coalesce(
        F.when(schema.isin(*_EXACT_VARIANT_SCHEMAS), F.lit(False)).otherwise(schema.rlike(_INEXACT_VARIANT_TYPES)), F.lit(False)
    )


def exact_json(value: Column, *, inexact: bool = True) -> Column:
    """The canonical JSON text of a variant column, the text
    ``canonical_json`` gives for the same JSON (null for a SQL null).

    Spark's ``to_json`` is that text for integers, strings, booleans, null
    and containers of them; values with a non-integer number anywhere go
    through Python (rare in histories), where the variant still holds the
    number as written. ``inexact=False`` promises there are none (see
    :func:`inexact_values`): the plan then has no Python stage, which costs
    a small input's check more than the rest of its query."""
    if not inexact:
        return F.to_json(value)
    needs_python = inexact_values(value)
    return F.when(value.isNull(), F.lit(None).cast("string")).when(
        needs_python, _exact_json_udf(F.when(needs_python, value))
    ).otherwise(F.to_json(value))


def _shape_error(model_name, f, outcome, arg, ret):  # type: ignore[no-untyped-def]  (no hints: a UDF)
    return None if model_name is None else shape_error(model_name, f, outcome, arg, ret)


_shape_error_udf = F.udf(_shape_error, T.StringType())


def model_error(models: Mapping[int, Model]) -> Column:
    """Per operation row: why it does not fit its history's model, or null."""
    strict = per_history({hid: model.strict for hid, model in models.items()})
    model_name = per_history({hid: model.name for hid, model in models.items()})
    is_kv = model_name == "kv"
    checks = []
    own_prepare = {
        hid: model.name for hid, model in models.items() if model.prepare_op is not None and not is_step_model(model)
    }
    if own_prepare:
        # Models that prepare their own operations (_model_catalog) say what
        # is wrong with a value in Python, as the reference checker does.
        shape = _shape_error_udf(
            F.when(F.col("kind").isNotNull(), per_history(own_prepare)), F.col("f"), F.col("outcome"), F.col("arg"), F.col("ret")
        )
        checks.append((shape.isNotNull(), shape))
    checks += [
        (
            strict & F.col("kind").isNull(),
            F.concat(
                F.lit("operation "), F.col("f"), F.lit(" is not part of the "), model_name,
                F.lit(" model (--model picks another: set, counter, mutex, ...; --model metadata accepts metadata operations)"),
            ),
        ),
        (
            (F.col("kind") == "cas") & ~F.coalesce(F.col("cas_shape_ok"), F.lit(False)),
            F.concat(F.lit("cas must have value [expected, new], got "), F.col("arg")),
        ),
        (
            is_kv & F.col("kind").isin("write", "append") & F.col("arg_str").isNull(),
            F.concat(F.lit("kv values must be strings, got "), F.col("arg")),
        ),
        (
            is_kv & (F.col("kind") == "read") & (F.col("outcome") == "ok") & F.col("ret_str").isNull(),
            F.concat(F.lit("kv values must be strings, got "), F.col("ret")),
        ),
    ]
    expression = None
    for condition, message in checks:
        expression = F.when(condition, message) if expression is None else expression.when(condition, message)
    return expression  # type: ignore[return-value]


def build_operations(paired: DataFrame, models: Mapping[int, Model], *, inexact_numbers: bool = True) -> DataFrame:
    """Operations from paired events: one row per invoke, with its completion.

    Columns: hid, index, process, f, key, kind (read/write/cas/append or null
    when the model does not model ``f``), outcome (ok/fail/info; info when no
    completion), t_inv, t_done (completion time of ok/fail only),
    complete_index, complete_time, arg / ret (canonical JSON text of the
    invoke / completion value; ret null without a completion), written (the
    value a write or cas would store), expected (cas), arg_str / ret_str (the
    values as strings, for kv), cas_shape_ok / kv_shape_ok (value fits the
    model), the merged optional fields, and register_like (the key has no
    appends).

    ``inexact_numbers``: some value may hold a non-integer number
    (:attr:`Loaded.inexact_values`); False keeps Python out of the plan.
    """
    client = paired.where(F.col(CORRUPT).isNull() & (F.col("process") != NEMESIS) & (F.col("type") == "invoke"))
    completion = F.col("next.type").isin(*COMPLETION_TYPES)
    kind_by_model: dict[str, Column] = {}
    for model in {m.name: m for m in models.values()}.values():
        expression = None
        for f, kind in model.kinds.items():
            expression = (F.when(F.col("f") == f, F.lit(kind)) if expression is None else expression.when(F.col("f") == f, F.lit(kind)))
        if is_step_model(model):  # every other operation name steps the user's model
            expression = F.lit(STEP) if expression is None else expression.otherwise(F.lit(STEP))
        kind_by_model[model.name] = expression  # type: ignore[assignment]
    model_name = per_history({hid: model.name for hid, model in models.items()})
    inexact = inexact_numbers
    kind = None
    for name, expression in kind_by_model.items():
        kind = F.when(model_name == name, expression) if kind is None else kind.when(model_name == name, expression)

    def merged(name: str) -> Column:
        invoke_side, completion_side = F.col(name), F.when(completion, F.col(f"next.{name}"))
        if name in _ANSWER_SIDE:
            return F.coalesce(completion_side, invoke_side).alias(name)
        return F.coalesce(invoke_side, completion_side).alias(name)

    outcome = F.when(completion, F.col("next.type")).otherwise(F.lit("info"))
    ret_value = F.when(completion, F.col("next.value"))
    ops = client.select(
        "hid",
        "index",
        F.col("process").cast("bigint").alias("process"),
        "f",
        "key",
        kind.alias("kind"),  # type: ignore[union-attr]
        outcome.alias("outcome"),
        F.col("time").alias("t_inv"),
        F.when(completion & F.col("next.type").isin("ok", "fail"), F.col("next.time")).alias("t_done"),
        F.when(completion, F.col("next.index")).alias("complete_index"),
        F.when(completion, F.col("next.time")).alias("complete_time"),
        F.coalesce(exact_json(F.col("value"), inexact=inexact), F.lit("null")).alias("arg"),
        F.when(completion, F.coalesce(exact_json(F.col("next.value"), inexact=inexact), F.lit("null"))).alias("ret"),
        exact_json(F.expr("variant_get(value, '$[0]', 'variant')"), inexact=inexact).alias("cas_expected"),
        exact_json(F.expr("variant_get(value, '$[1]', 'variant')"), inexact=inexact).alias("cas_new"),
        (
            F.expr("schema_of_variant(value)").startswith("ARRAY")
            & F.expr("variant_get(value, '$[1]', 'variant')").isNotNull()
            & F.expr("variant_get(value, '$[2]', 'variant')").isNull()
        ).alias("cas_shape_ok"),
        F.when(F.expr("schema_of_variant(value)") == "STRING", F.expr("variant_get(value, '$', 'string')")).alias("arg_str"),
        F.when(
            completion & (F.expr("schema_of_variant(next.value)") == "STRING"), F.expr("variant_get(next.value, '$', 'string')")
        ).alias("ret_str"),
        *[merged(name) for name in _ANSWER_SIDE + _REQUEST_SIDE],
    )
    ops = ops.withColumn(
        "written",
        F.when(F.col("kind") == "cas", F.col("cas_new")).when(F.col("kind").isin("write", "append"), F.col("arg")),
    )
    append_keys = (
        ops.where(F.col("kind") == "append")
        .select(F.col("hid").alias("a_hid"), F.col("key").alias("a_key"))
        .distinct()
        .withColumn("has_append", F.lit(True))
    )
    ops = (
        ops.join(append_keys, on=(F.col("hid") == F.col("a_hid")) & F.col("key").eqNullSafe(F.col("a_key")), how="left")
        .withColumn("register_like", F.col("has_append").isNull())
        .drop("a_hid", "a_key", "has_append")
    )
    return ops
