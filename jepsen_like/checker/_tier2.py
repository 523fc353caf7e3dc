"""Tier 2 on Spark: one linearizability search per (history, key), on the
executors.

Operations are hash-partitioned by (history, key) and sorted within each
partition so that every key's operations are contiguous and the cheapest
keys (fewest operations) come first; ``mapInArrow`` then runs the search
(``_wgl.check_operations``) key by key. Once a key of a history is refuted,
later keys of that history in the same partition are left unchecked unless
``all_keys`` is set: one non-linearizable key already decides the history.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any, Iterator, Mapping

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jepsen_like.checker._model_catalog import get_model
from jepsen_like.checker._models import OPTIONAL_FIELDS, QUERY_KINDS, Model, operation_from_row
from jepsen_like.checker._step_model import is_step_model
from jepsen_like.checker._wgl import NOT_LINEARIZABLE, UNKNOWN, KeyBudget, check_key

RESULT_SCHEMA = (
    "hid int, key string, verdict string, ops long, steps long, states long, seconds double, witness string, "
    "reason string, budget string"
)
_RESULT_ARROW_SCHEMA = pa.schema(
    [
        ("hid", pa.int32()), ("key", pa.string()), ("verdict", pa.string()), ("ops", pa.int64()),
        ("steps", pa.int64()), ("states", pa.int64()), ("seconds", pa.float64()), ("witness", pa.string()),
        ("reason", pa.string()), ("budget", pa.string()),
    ]
)
NOT_CHECKED_REASON = "not checked: another key of this history is not linearizable"
_RESULTS_PER_BATCH = 256

_INPUT_COLUMNS = (
    "hid", "key", "index", "process", "f", "outcome", "t_inv", "t_done", "complete_index", "complete_time",
    "arg", "ret", *OPTIONAL_FIELDS,
)


def is_candidate() -> Column:
    """Whether an operation is one the search considers: one the model
    knows, except bounded-staleness reads, failed operations and queries
    (reads) without an ok (``_models.dropped_by_search``). Null (unknown)
    counts as no."""
    kind = F.col("kind")
    return (
        kind.isNotNull()
        & ~((kind == "read") & F.coalesce(F.col("mode").isin("leader-local", "broker"), F.lit(False)))
        & (F.col("outcome") != "fail")
        & ~(kind.isin(*QUERY_KINDS) & (F.col("outcome") != "ok"))
    )


def candidates(ops: DataFrame) -> DataFrame:
    """The operations the search considers (:func:`is_candidate`)."""
    return ops.where(is_candidate()).select(*_INPUT_COLUMNS)


def _check_group(rows: list[dict[str, Any]], model: Model, limits: KeyBudget, skip: bool) -> dict[str, Any]:
    hid, key = rows[0]["hid"], rows[0]["key"]
    if skip:
        return {"hid": hid, "key": key, "verdict": UNKNOWN, "ops": len(rows), "steps": 0, "states": 0, "seconds": 0.0,
                "witness": None, "reason": NOT_CHECKED_REASON, "budget": None}
    verdict = check_key([operation_from_row(row) for row in rows], model, limits)
    return {
        "hid": hid,
        "key": key,
        "verdict": verdict.verdict,
        "ops": verdict.ops,
        "steps": verdict.steps,
        "states": verdict.states,
        "seconds": verdict.seconds,
        "witness": json.dumps(verdict.witness) if verdict.witness is not None else None,
        "reason": verdict.reason,
        "budget": verdict.budget,
    }


def _check_partition(
    batches: Iterator[pa.RecordBatch], *, models: Mapping[int, tuple[str, Any] | Model], limits: KeyBudget, all_keys: bool
) -> Iterator[pa.RecordBatch]:
    # Each catalogue model is rebuilt here from its name and initial value:
    # an unpickled copy's kinds would not be the very constants the models
    # compare kinds to (``is``). A step model travels whole (it compares no
    # kinds by identity).
    by_hid = {hid: spec if isinstance(spec, Model) else get_model(*spec) for hid, spec in models.items()}
    refuted: set[int] = set()
    results: list[dict[str, Any]] = []
    group: list[dict[str, Any]] = []

    def finish() -> None:
        hid = group[0]["hid"]
        result = _check_group(group, by_hid[hid], limits, skip=(hid in refuted and not all_keys))
        if result["verdict"] == NOT_LINEARIZABLE:
            refuted.add(hid)
        results.append(result)

    for batch in batches:
        for row in batch.to_pylist():
            if group and (row["hid"], row["key"]) != (group[0]["hid"], group[0]["key"]):
                finish()
                group = []
                if len(results) >= _RESULTS_PER_BATCH:
                    yield pa.RecordBatch.from_pylist(results, schema=_RESULT_ARROW_SCHEMA)
                    results = []
            group.append(row)
    if group:
        finish()
    if results:
        yield pa.RecordBatch.from_pylist(results, schema=_RESULT_ARROW_SCHEMA)


def _warm_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    # Does nothing: a Python worker unpickling this function imports this
    # module (the search, the models, pyarrow), which is the point.
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"ready": True}], schema=pa.schema([("ready", pa.bool_())]))


def warm_up(spark: SparkSession) -> None:
    """Start the Python workers :func:`run` will use (one per core, with
    this module imported), in one small Spark job of the same kind. A small
    check runs it beside its first phases, on a thread of its own: starting
    the workers costs more than searching a small history's keys."""
    slots = spark.sparkContext.defaultParallelism
    spark.range(0, slots, 1, slots).mapInArrow(_warm_partition, "ready boolean").collect()


def run(
    operations: DataFrame,
    models: Mapping[int, Model],
    *,
    limits: KeyBudget,
    all_keys: bool,
    partitions: int,
) -> list[dict[str, Any]]:
    """Search every (history, key) of ``operations`` (from :func:`candidates`)
    against its history's model (with its initial value: the models travel
    to the executors), each key within ``limits``; one result dict per key,
    ``witness`` decoded."""
    by_key = Window.partitionBy("hid", "key")
    ordered = (
        operations.repartition(partitions, "hid", "key")
        .withColumn("key_ops", F.count(F.lit(1)).over(by_key))
        # Cheapest keys first; within a key, invoke order.
        .sortWithinPartitions("key_ops", "hid", "key", "t_inv", "index")
        .drop("key_ops")
    )
    specs = {hid: model if is_step_model(model) else (model.name, model.initial_value) for hid, model in models.items()}
    checker = partial(_check_partition, models=specs, limits=limits, all_keys=all_keys)
    rows = ordered.mapInArrow(checker, RESULT_SCHEMA).collect()
    results = []
    for row in rows:
        result = row.asDict()
        result["witness"] = json.loads(result["witness"]) if result["witness"] is not None else None
        results.append(result)
    return results
