"""The Spark job: many histories checked in one session.

Phases (each a handful of Spark actions, whatever the number of histories):
load, validate and count (``_frames``: one action for the histories and
their side files), operations and their counts, tier 1
(``_tier1``: one job for every anomaly of every history, then one small one to
fetch the operations its witnesses name), tier 2 (``_tier2``: a small-budget
pass over every key, then a full-budget pass over the keys it could not
decide, in histories no key has refuted yet). A small input's check also
starts tier 2's Python workers on a thread of its own while the first
phases run.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import replace
from functools import partial, reduce
from pathlib import Path
from typing import Any, Mapping, MutableMapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jepsen_like.checker import _tier1, _tier2
from jepsen_like.checker._errors import HistoryFormatError
from jepsen_like.checker._frames import OP_RENDER_COLUMNS, Loaded, build_operations, load, materialize, model_error, release
from jepsen_like.checker._load import (
    HistorySource,
    discover_histories,
    estimated_events,
    is_small_input,
    model_override_name,
    resolve_model_name,
)
from jepsen_like.checker._model_catalog import MODEL_DEFAULT, get_model
from jepsen_like.checker._models import MODE_LINEARIZABLE, Model, canonical_json, operation_from_row, render_operation
from jepsen_like.checker._report import (
    CHECK_NAMES,
    DEFAULT_MAX_WITNESSES,
    INPUT_COUNTS,
    HistoryResult,
    deadline_check,
    linearizability_check,
    skip_reasons,
    skipped,
    tier1_check,
)
from jepsen_like.checker._spark import DEFAULT_MASTER, SessionStart, spark_session
from jepsen_like.checker._staleness import StalenessColumns, fault_windows, summarize
from jepsen_like.checker._wgl import (
    BUDGET_DEADLINE,
    BUDGET_STEPS,
    DEFAULT_BUDGET_MS,
    DEFAULT_BUDGET_STATES,
    DEFAULT_BUDGET_STEPS,
    NOT_LINEARIZABLE,
    UNKNOWN,
    KeyBudget,
    deadline_reason,
)

# The first tier-2 pass gives each key at most this many search steps (about
# half a second): most keys decide in a few thousand, and one refuted key
# decides its history, so the expensive keys only get their full budget when
# nothing else has decided. Large enough that the Porcupine histories' refuted
# keys (the costliest: 0.7 million steps, search and shrinking) get a minimal
# witness in the first pass.
FIRST_PASS_BUDGET_STEPS = 1_000_000


def check(
    paths: Sequence[str] | str,
    *,
    model: str | Model | None = None,
    spark_master: str = DEFAULT_MASTER,
    budget_steps: int = DEFAULT_BUDGET_STEPS,
    budget_states: int = DEFAULT_BUDGET_STATES,
    budget_ms: int = DEFAULT_BUDGET_MS,
    deadline_s: float | None = None,
    max_witnesses: int = DEFAULT_MAX_WITNESSES,
    all_keys: bool = False,
    linearizability: bool = True,
    spark: SparkSession | SessionStart | None = None,
    spark_conf: Mapping[str, str] | None = None,
    spark_log: str | Path | None = None,
    timings: MutableMapping[str, float] | None = None,
    initial_value: Any = MODEL_DEFAULT,
    history_format: str | None = None,
    independent: bool = False,
) -> list[HistoryResult]:
    """Check histories with the Spark job.

    ``paths``: history files (JSON lines, Parquet or Jepsen EDN),
    directories of them, or campaign directories (docs/checker.md).
    ``model``: a name from ``MODELS`` (or a ``Model``, such as one from
    ``model_from_step``) for every history; by default each
    history's meta, else ``kv`` if it has get/put/append, else ``register``.
    ``initial_value``: the model's initial state for every history, when not
    the model's own (``None`` is Jepsen's nil). ``history_format``: the
    format of the files named in ``paths`` whatever their names say.
    ``independent``: every history's values are Jepsen's independent
    ``[key value]`` tuples, each key its own object. ``budget_steps``,
    ``budget_states``, ``budget_ms``: each key's linearizability search
    (and the shrinking of its witness) may use that many search steps (in
    its final pass), explored states and milliseconds; out of budget, the key
    is ``unknown`` and says which limit it reached. Steps and states are
    counts, so that verdicts and witnesses do not depend on the machine or
    its load; time is the safety net. ``deadline_s``: seconds (from this
    call) for the whole check; when they pass, the checks and keys not yet
    decided are ``unknown`` (reason ``deadline``), the Spark jobs are
    cancelled, and the results are returned a few seconds later at most
    (:class:`DeadlineGuard`). ``all_keys``: search every key
    even in histories another key has already refuted. ``linearizability``:
    False skips tier 2 (reported as skipped). ``spark``: a session
    to use, or one being started (:class:`SessionStart`: the command line
    starts it before importing this module); else one is started on
    ``spark_master``, tuned for a short life when the input is small,
    writing Spark's output to ``spark_log`` (see :func:`spark_session`). ``timings``, if given, receives the seconds each
    phase took.

    Returns one :class:`HistoryResult` per history, in input order.

    Raises :class:`HistoryFormatError` for missing or malformed input, and
    ``ValueError`` for an unknown model, an initial value that does not fit
    it, or a budget or deadline that is not positive.
    """
    if deadline_s is not None and not deadline_s > 0:
        raise ValueError(f"deadline_s must be positive, got {deadline_s}")
    limits = KeyBudget(budget_steps, budget_states, budget_ms, None if deadline_s is None else time.time() + deadline_s)
    if model is not None:
        get_model(model, initial_value)
    sources = discover_histories(
        [paths] if isinstance(paths, str) else paths, history_format=history_format, independent=independent
    )
    started = time.monotonic()
    if isinstance(spark, SessionStart):
        session = spark.result()
    elif spark is None:
        small = is_small_input(sources)
        session = spark_session(spark_master, conf=spark_conf, log_path=spark_log, small_input=small)
    else:
        session = spark
    if timings is not None:
        timings["session_s"] = time.monotonic() - started
    return check_sources(
        session, sources, model=model, limits=limits, max_witnesses=max_witnesses, all_keys=all_keys,
        linearizability=linearizability, timings=timings, initial_value=initial_value,
    )


def check_sources(
    spark: SparkSession,
    sources: Sequence[HistorySource],
    *,
    model: str | Model | None = None,
    limits: KeyBudget = KeyBudget(),
    max_witnesses: int = DEFAULT_MAX_WITNESSES,
    all_keys: bool = False,
    linearizability: bool = True,
    timings: MutableMapping[str, float] | None = None,
    initial_value: Any = MODEL_DEFAULT,
) -> list[HistoryResult]:
    """:func:`check` on already discovered histories, in a given session,
    each key within ``limits`` (and the check within its deadline)."""
    timings = timings if timings is not None else {}
    clock = time.monotonic()
    run_conf = {"spark.sql.shuffle.partitions": str(shuffle_partitions(spark, sources))}
    small_input = is_small_input(sources)
    if small_input:
        run_conf.update(_SMALL_INPUT_CONF)
    previous_conf = {name: spark.conf.get(name, None) for name in run_conf}
    for name, value in run_conf.items():
        spark.conf.set(name, value)

    def lap(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        timings[name] = now - clock
        clock = now

    warm_up = None
    if small_input and linearizability:
        warm_up = threading.Thread(target=_warm_up_quietly, args=(spark,), name="checker-warm-up", daemon=True)
        warm_up.start()
    loaded: Loaded | None = None
    ops: DataFrame | None = None
    model_names: dict[int, str] = {}
    counts: dict[int, dict[str, int]] | None = None
    tier1: dict[tuple[int, str], tuple[int, list]] | None = None
    tier2: dict[int, list[dict[str, Any]]] | None = None
    # Staleness figures per history, and its nemesis events (fault windows):
    # empty when the deadline came first.
    read_figures: dict[int, StalenessColumns] = {}
    nemesis: dict[int, list[Any]] = {}
    guard = DeadlineGuard(spark, limits.deadline_at_s)
    try:
        with guard:
            guard.enter("load")
            loaded = load(spark, sources, small_input=small_input)
            model_names = {
                hid: resolve_model_name(source, loaded.operation_names[hid], model_override_name(model))
                for hid, source in enumerate(sources)
            }
            models = {}
            for hid, name in model_names.items():
                try:
                    models[hid] = get_model(model if isinstance(model, Model) else name, sources[hid].meta.initial_value if initial_value is MODEL_DEFAULT else initial_value)
                except ValueError as error:  # an initial value this history's model has no state for
                    raise HistoryFormatError(f"{sources[hid].path}: {error}") from None
            lap("load_s")
            guard.enter("operations")
            ops = materialize(
                build_operations(loaded.paired, models, inexact_numbers=loaded.inexact_values), small_input=small_input
            )
            history_counts = _operation_counts(ops, models, sources)
            release(loaded.paired)
            nemesis = loaded.nemesis
            side = loaded.side_counts
            for hid in history_counts:
                history_counts[hid].update(loaded.event_counts[hid])
                history_counts[hid].update(side[hid])
                history_counts[hid]["broker_requests"] += history_counts[hid].pop("op_broker_requests")
            counts = history_counts
            lap("operations_s")
            settings = _settings(sources, models, side, counts, max_witnesses)
            applicable = frozenset(
                name for hid in counts for name, reason in skip_reasons(counts[hid]).items() if reason is None
            )
            guard.enter("tier1")
            tier1, read_figures = _tier1_findings(spark, ops, loaded, settings, max_witnesses, applicable)
            lap("tier1_s")
            if linearizability:
                if warm_up is not None:
                    warm_up.join()
                guard.enter(TIER2_PHASE)
                partitions = tier2_partitions(spark.sparkContext.defaultParallelism, counts)
                tier2 = _tier2_findings(
                    spark, ops, models, limits=limits, all_keys=all_keys, guard=guard, partitions=partitions
                )
                lap("tier2_s")
    finally:
        release(ops)
        if loaded is not None:
            loaded.release()
        for name, value in previous_conf.items():
            if value is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, value)

    results = []
    for hid, source in enumerate(sources):
        checks: dict[str, Any] = {}
        if counts is None:  # the deadline came before the histories were counted
            checks = {name: deadline_check("this check ran") for name in CHECK_NAMES}
            results.append(
                HistoryResult(
                    history=source.name, path=str(source.path), model=model_names.get(hid, model_override_name(model) or "-"),
                    checker="spark", stats={}, checks=checks,
                )
            )
            continue
        history_counts = counts[hid]
        reasons = skip_reasons(history_counts)
        for name in CHECK_NAMES:
            if name == "linearizability" and not linearizability:
                checks[name] = skipped("not requested (linearizability=False)")
            elif reasons[name] is not None:
                checks[name] = skipped(reasons[name])
            elif name == "linearizability":
                if tier2 is None:
                    checks[name] = deadline_check("its keys were searched")
                else:
                    checks[name] = linearizability_check(tier2.get(hid, []), limits, max_witnesses)
            elif tier1 is None:
                checks[name] = deadline_check("this check ran")
            else:
                total, witnesses = tier1.get((hid, name), (0, []))
                checks[name] = tier1_check(witnesses, total, max_witnesses)
        stats = {name: history_counts[name] for name in _STAT_NAMES}
        stats.update({name: history_counts[name] for name in INPUT_COUNTS})
        results.append(
            HistoryResult(
                history=source.name, path=str(source.path), model=model_names[hid], checker="spark",
                stats=stats, checks=checks,
                staleness=summarize(read_figures.get(hid, []), fault_windows(nemesis.get(hid, [])), source.meta),
            )
        )
    return results


def _warm_up_quietly(spark: SparkSession) -> None:
    try:
        _tier2.warm_up(spark)
    except Exception:  # noqa: BLE001 (an optimisation: tier 2 starts its own workers if this failed)
        pass


_EVENTS_PER_SHUFFLE_PARTITION = 1_000_000


# A small input (``is_small_input``) is checked with the settings below:
# its check is seconds of fixed cost, most of it compiling and scheduling,
# not data. Whole-stage code generation compiles every stage to Java byte code (tens
# to hundreds of ms each, and the job has dozens), which pays back only on
# many rows; adaptive execution re-plans after every shuffle for the same
# reason. One shuffle partition: one task per stage. The expressions are
# interpreted too (no janino compilation of projections, predicates and
# orderings in the tasks), and the optimizer does not infer filters from
# constraints (costly on tier 1's plan, a union of a dozen joins and
# windows over the same operations; inferred filters only prune rows, so
# the results are the same). Together: 13 % less CPU for a 3-operation
# check, 6 % for a 9,010-operation one (docs/benchmarks.md, "The checker
# on small histories").
_SMALL_INPUT_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.constraintPropagation.enabled": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
}


def shuffle_partitions(spark: SparkSession, sources: Sequence[HistorySource]) -> int:
    """Shuffle partitions for this run: one per million events or so, at
    least one per core. Tiny tasks cost more than they do (a run of a hundred
    small histories is dominated by per-task overhead), big ones spill."""
    cores = spark.sparkContext.defaultParallelism
    return int(max(cores, min(1000, -(-estimated_events(sources) // _EVENTS_PER_SHUFFLE_PARTITION))))


_STAT_NAMES = ("events", "nemesis_events", "operations", "ok", "fail", "info", "keys", "node_events")


def _operation_counts(ops: DataFrame, models: Mapping[int, Model], sources: Sequence[HistorySource]) -> dict[int, dict[str, int]]:
    """Per-history counts (one Spark action), after checking every operation
    fits its model and every bounded read has its bound.

    Raises :class:`HistoryFormatError` otherwise.
    """
    ok = F.col("outcome") == "ok"
    read_ok = (F.col("kind") == "read") & ok
    broker_read = read_ok & (F.col("mode") == "broker") & F.col("node").isNotNull()
    error = model_error(models)

    def total(condition: Any) -> Any:
        return F.sum(F.when(condition, 1).otherwise(0))

    per_history = (
        ops.groupBy("hid")
        .agg(
            F.count(F.lit(1)).alias("operations"),
            total(ok).alias("ok"),
            total(F.col("outcome") == "fail").alias("fail"),
            total(F.col("outcome") == "info").alias("info"),
            total(read_ok).alias("ok_reads"),
            total(read_ok & F.col("offset").isNotNull()).alias("ok_reads_with_offset"),
            total(broker_read).alias("ok_broker_reads"),
            total(broker_read & F.col("offset").isNotNull()).alias("ok_broker_reads_with_offset"),
            total(read_ok & F.col("register_like")).alias("ok_register_reads"),
            total(read_ok & (F.col("final") == True)).alias("ok_final_reads"),  # noqa: E712
            total(ok & F.col("broker_id").isNotNull() & F.col("broker_epoch").isNotNull()).alias("op_broker_requests"),
            total(read_ok & (F.col("mode") == "leader-local")).alias("leader_local_reads"),
            total(read_ok & (F.col("mode") == "broker")).alias("broker_mode_reads"),
            total(error.isNotNull()).alias("model_errors"),
            F.min(F.when(error.isNotNull(), F.struct("index", error.alias("message")))).alias("first_model_error"),
            # In the same aggregation, not a second one joined to it: one
            # job fewer, which is what a small input's check pays for.
            total(_tier2.is_candidate()).alias("tier2_operations"),
        )
    )
    # The keys are counted apart, in the same action: a distinct count
    # inside the aggregation above made Spark sort every operation by
    # (history, key) to evaluate all of it (10 s of sorting at ten million
    # operations); deduplicated first, they are hashed. A null key counts
    # as a key.
    keys = ops.select("key", "hid").distinct().groupBy("hid").agg(F.count(F.lit(1)).alias("keys"))
    rows = per_history.unionByName(keys, allowMissingColumns=True).collect()
    keys_by_history = {row["hid"]: row["keys"] for row in rows if row["keys"] is not None}
    rows = [row for row in rows if row["keys"] is None]
    empty = {name: 0 for name in ("operations", "ok", "fail", "info", "keys", "op_broker_requests", *INPUT_COUNTS)}
    counts = {hid: dict(empty) for hid in range(len(sources))}
    problems = []
    for row in rows:
        hid = row["hid"]
        source = sources[hid]
        if row["model_errors"]:
            first = row["first_model_error"]
            problems.append(
                f"{source.path}: event index {first['index']}: {first['message']}"
                + (f" (and {row['model_errors'] - 1} more)" if row["model_errors"] > 1 else "")
            )
        if row["leader_local_reads"] and source.meta.leader_local_bound_ms is None:
            problems.append(
                f"{source.path}: {row['leader_local_reads']} leader-local reads, but the history's meta gives no fetch_timeout_ms"
            )
        if row["broker_mode_reads"] and source.meta.staleness_bound_ms is None:
            problems.append(
                f"{source.path}: {row['broker_mode_reads']} broker reads, but the history's meta gives no staleness_bound_ms"
            )
        counts[hid].update({name: row[name] for name in empty if name in row.asDict() and row[name] is not None})
    for hid, keys_seen in keys_by_history.items():
        counts[hid]["keys"] = keys_seen
    if problems:
        raise HistoryFormatError("operations that do not fit their history:\n" + "\n".join(problems))
    return counts


def _settings(
    sources: Sequence[HistorySource],
    models: Mapping[int, Model],
    side: Mapping[int, Mapping[str, int]],
    counts: Mapping[int, Mapping[str, int]],
    max_witnesses: int,
) -> _tier1.Settings:
    leader_local = {}
    broker = {}
    for hid, source in enumerate(sources):
        if source.meta.leader_local_bound_ms is not None:
            leader_local[hid] = round(source.meta.leader_local_bound_ms * 1_000_000)
        if source.meta.staleness_bound_ms is not None:
            broker[hid] = round(source.meta.staleness_bound_ms * 1_000_000)
    return _tier1.Settings(
        initial_text={hid: canonical_json(model.initial_value) for hid, model in models.items()},
        leader_local_bound_ns=leader_local,
        broker_bound_ns=broker,
        offset_by_key={hid: source.meta.offset_scope == "key" for hid, source in enumerate(sources)},
        hids_with_dumps=frozenset(hid for hid, side_counts in side.items() if side_counts["log_dump_records"]),
        keys_total=sum(history["keys"] for history in counts.values()),
        witnesses_max=max(1, max_witnesses),
    )


def _tier1_findings(
    spark: SparkSession,
    ops: DataFrame,
    loaded: Loaded,
    settings: _tier1.Settings,
    max_witnesses: int,
    applicable: frozenset[str],
) -> tuple[dict[tuple[int, str], tuple[int, list[tuple[int, dict[str, Any]]]]], dict[int, StalenessColumns]]:
    """(hid, check) -> (exact count, the first witnesses with their ranks),
    and each history's per-read staleness figures (in the same action)."""
    found, staleness = _tier1.anomalies(ops, loaded.node_events, loaded.log_dumps, settings, applicable)
    kept = max(1, max_witnesses)  # ranked and fetched per check (rank 1 even when none are shown)
    parts = []
    if found is not None:
        group = Window.partitionBy("hid", "check")
        ranked = group.orderBy(
            F.asc_nulls_first("ord1"), F.asc_nulls_first("ord2"), F.asc_nulls_first("ord3"),
            F.asc_nulls_first("ord4"), F.asc_nulls_first("ord5"),
        )
        parts.append(
            found.select(
                "hid", "check", "evidence",
                # A check that returns only its first witnesses counts them all itself.
                F.coalesce(F.max("total").over(group), F.count(F.lit(1)).over(group)).alias("total"),
                F.row_number().over(ranked).alias("rank"),
            )
            .where(F.col("rank") <= kept)
        )
    if staleness is not None:
        # One row per ok read: the figures the staleness summary is made of,
        # and the stale reads among them.
        parts.append(
            staleness.select(
                "hid", F.lit(_STALENESS_ROW).alias("check"), "index", "mode", "node", "t_inv", "staleness_ns", "offsets_behind",
                "bound_ns", "missed", "rule", "read_from", "unwritten", "unwritten_write",
            )
        )
    if not parts:
        return {}, {}
    # One row per ok read: millions for a big history. Fetched as Arrow
    # columns, not pickled rows: a pickled row costs the driver's JVM and
    # this process microseconds each, one at a time, after the job. The
    # staleness rows stay columns (StalenessColumns, per history): an object
    # per read cost several seconds a million.
    table = reduce(partial(DataFrame.unionByName, allowMissingColumns=True), parts).toArrow()
    is_staleness_row = pc.equal(table.column("check"), _STALENESS_ROW)
    figures, picked = _staleness_by_history(table.filter(is_staleness_row), kept)
    anomaly_rows = table.filter(pc.invert(is_staleness_row))
    del table
    evidences = []
    if "evidence" in anomaly_rows.column_names:
        evidences = [
            (hid, check_name, rank, total, json.loads(evidence))
            for hid, check_name, rank, total, evidence in zip(
                *(anomaly_rows.column(name).to_pylist() for name in ("hid", "check", "rank", "total", "evidence"))
            )
        ]
    for (hid, check_name), (total, first) in picked.items():
        if check_name in applicable:
            evidences.extend((hid, check_name, rank, total, evidence) for rank, evidence in enumerate(first, start=1))
    references = {
        (hid, evidence[name])
        for hid, _, _, _, evidence in evidences
        for name in _tier1.OP_REFERENCE_FIELDS
        if evidence.get(name) is not None
    }
    rendered = _render_operations(spark, ops, references)
    findings: dict[tuple[int, str], tuple[int, list]] = {}
    for hid, check_name, rank, count, evidence in evidences:
        _, witnesses = findings.setdefault((hid, check_name), (count, []))
        if rank <= max_witnesses:
            witnesses.append((rank, _resolve(evidence, hid, rendered)))
    return findings, figures


# The check name of the per-read staleness rows in tier 1's action (not a check).
_STALENESS_ROW = "~staleness"


def _first_reads(reads: pa.Table, kept: int) -> pa.Table:
    """The ``kept`` reads of lowest index, in index order: the witnesses,
    ranked as the other checks' anomalies are."""
    if reads.num_rows > kept:
        reads = reads.take(pc.select_k_unstable(reads, kept, [("index", "ascending")]))
    return reads.sort_by("index")


def _staleness_by_history(
    rows: pa.Table, witnesses_kept: int
) -> tuple[dict[int, StalenessColumns], dict[tuple[int, str], tuple[int, list[dict[str, Any]]]]]:
    """Tier 1's staleness rows (one per ok read) as each history's
    :class:`StalenessColumns`, and the anomalies picked from them, by
    (hid, check): their exact count and the evidence of the first
    ``witnesses_kept`` by read index, for the reads beyond their bound
    (:func:`_tier1.stale_read_evidence`) and the garbage, aborted and future
    reads (:func:`_tier1.unwritten_read_evidence`). Only those witnesses
    become Python objects: a history whose every read is stale or garbage
    (a system that serves nothing it was given) has millions."""
    if rows.num_rows == 0 or "mode" not in rows.column_names:
        return {}, {}
    rows = rows.sort_by("hid")
    figures: dict[int, StalenessColumns] = {}
    picked: dict[tuple[int, str], tuple[int, list[dict[str, Any]]]] = {}
    runs = pc.run_end_encode(rows.column("hid").combine_chunks())  # one run per history, rows sorted
    start = 0
    for hid, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
        part = rows.slice(start, end - start)
        start = end
        figures[hid] = StalenessColumns(
            index=part.column("index").to_pylist(),
            mode=pc.fill_null(part.column("mode"), MODE_LINEARIZABLE).to_pylist(),
            node=part.column("node").to_pylist(),
            invoke_ns=part.column("t_inv").to_pylist(),
            staleness_ns=part.column("staleness_ns").to_pylist(),
            offsets_behind=part.column("offsets_behind").to_pylist(),
            bound_ns=part.column("bound_ns").to_pylist(),
            missed_write=part.column("missed").to_pylist(),
        )
        # The stale reads: exactly those beyond their bound (a null on
        # either side is neither, as in stale_read_evidence).
        beyond = part.filter(pc.greater(part.column("staleness_ns"), part.column("bound_ns")))
        if beyond.num_rows:
            first = _first_reads(beyond, witnesses_kept)
            picked[(hid, "stale-read")] = (beyond.num_rows, [
                _tier1.stale_read_evidence(*fields)
                for fields in zip(*(first.column(name).to_pylist() for name in (
                    "index", "missed", "read_from", "rule", "bound_ns", "staleness_ns", "offsets_behind"
                )))
            ])
        unwritten = part.filter(pc.is_valid(part.column("unwritten")))
        for check_name in pc.unique(unwritten.column("unwritten")).to_pylist():
            of_check = unwritten.filter(pc.equal(unwritten.column("unwritten"), check_name))
            first = _first_reads(of_check, witnesses_kept)
            picked[(hid, check_name)] = (of_check.num_rows, [
                _tier1.unwritten_read_evidence(check_name, index, write)
                for index, write in zip(first.column("index").to_pylist(), first.column("unwritten_write").to_pylist())
            ])
    return figures, picked


def _render_operations(spark: SparkSession, ops: DataFrame, references: set[tuple[int, int]]) -> dict[tuple[int, int], dict]:
    if not references:
        return {}
    wanted = spark.createDataFrame(sorted(references), "hid int, index long")
    rows = ops.join(F.broadcast(wanted), on=["hid", "index"]).select("hid", *OP_RENDER_COLUMNS).collect()
    return {(row["hid"], row["index"]): render_operation(operation_from_row(row.asDict())) for row in rows}


def _resolve(evidence: Mapping[str, Any], hid: int, rendered: Mapping[tuple[int, int], dict]) -> dict[str, Any]:
    """Evidence with operation references replaced by the operations."""
    resolved: dict[str, Any] = {}
    for name, value in evidence.items():
        if name in _tier1.OP_REFERENCE_FIELDS:
            resolved["request" if name == "request_op" else name] = rendered[(hid, value)]
        elif name == "request_event":
            resolved["request"] = value
        else:
            resolved[name] = value
    return resolved


def tier2_partitions(parallelism: int, counts: Mapping[int, Mapping[str, int]]) -> int:
    """Tier 2's partitions: two per core (so that a slow key does not hold a
    core's other keys back), but never more than the keys it searches (keys
    of histories with operations to search): each partition is a task in a
    Python worker, and a one-key history's check needs one."""
    keys = sum(history["keys"] for history in counts.values() if history.get("tier2_operations"))
    return max(1, min(max(2, parallelism * 2), keys))


def _tier2_findings(
    spark: SparkSession, ops: DataFrame, models: Mapping[int, Model], *, limits: KeyBudget, all_keys: bool,
    guard: "DeadlineGuard", partitions: int,
) -> dict[int, list[dict[str, Any]]]:
    candidates = _tier2.candidates(ops)
    first_limits = replace(limits, budget_steps=min(limits.budget_steps, FIRST_PASS_BUDGET_STEPS))
    first_pass = _tier2.run(candidates, models, limits=first_limits, all_keys=all_keys, partitions=partitions)
    results = {(r["hid"], r["key"]): r for r in first_pass}
    refuted = {hid for (hid, _), r in results.items() if r["verdict"] == NOT_LINEARIZABLE}
    retry = sorted(
        (
            (hid, key)
            for (hid, key), r in results.items()
            if r["verdict"] == UNKNOWN and r["budget"] == BUDGET_STEPS and (all_keys or hid not in refuted)
        ),
        key=lambda pair: (pair[0], pair[1] is not None, pair[1] or ""),
    )
    if retry and limits.budget_steps > first_limits.budget_steps:
        wanted = spark.createDataFrame(retry, "hid int, key string")
        again = candidates.join(
            F.broadcast(wanted), on=(candidates["hid"] == wanted["hid"]) & candidates["key"].eqNullSafe(wanted["key"])
        ).select(candidates["*"])
        try:
            if guard.passed():
                raise DeadlineStop(TIER2_PHASE)
            for r in _tier2.run(again, models, limits=limits, all_keys=all_keys, partitions=partitions):
                results[(r["hid"], r["key"])] = r
        except Exception:
            if not guard.passed():
                raise
            # The deadline came before the full-budget pass (or stopped it):
            # its keys keep their first pass's counts, unknown by the deadline.
            for pair in retry:
                if results[pair]["budget"] == BUDGET_STEPS:
                    results[pair] = {
                        **results[pair], "budget": BUDGET_DEADLINE,
                        "reason": deadline_reason("the full-budget pass searched this key")
                        + f" (the first pass used up its {first_limits.budget_steps} steps)",
                    }
    by_history: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for (hid, _), r in results.items():
        by_history[hid].append(r)
    return by_history


TIER2_PHASE = "tier2"
# Past the deadline, tier 2's searches stop by themselves (each looks at the
# clock about every millisecond) and their keys come back unknown; the job is
# cancelled only if the results have not come back this long after it.
DEADLINE_GRACE_S = 5.0
# The thread-local Spark properties a job group sets (restored afterwards).
_JOB_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


class DeadlineStop(Exception):
    """The check's deadline passed before a phase began."""


class DeadlineGuard:
    """The whole check's deadline on the driver (a no-op without one).

    Used as a context manager around the check's phases, it runs their Spark
    jobs in a job group of their own and cancels that group when the
    deadline passes: running tasks are interrupted and their Python workers
    killed, and the phase's action raises. During tier 2 it waits
    :data:`DEADLINE_GRACE_S` first, since the searches stop by themselves
    and return what they decided. :meth:`enter` marks a phase's start and
    raises :class:`DeadlineStop` once the deadline has passed. The context
    manager swallows :class:`DeadlineStop` and whatever a cancelled job
    raised: the phases that did not finish are the caller's to report
    unknown (``stopped_in`` names the first).
    """

    def __init__(self, spark: SparkSession, deadline_at_s: float | None) -> None:
        self._context = spark.sparkContext
        self.deadline_at_s = deadline_at_s
        self.group = f"jepsen-like-check-{uuid.uuid4().hex}"
        self.phase: str | None = None
        self.stopped_in: str | None = None
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._grace_given = False
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> "DeadlineGuard":
        if self.deadline_at_s is None:
            return self
        self._saved = {name: self._context.getLocalProperty(name) for name in _JOB_GROUP_PROPERTIES}
        self._context.setJobGroup(self.group, "jepsen-like check (with a deadline)", interruptOnCancel=True)
        self._arm(self.deadline_at_s - time.time())
        return self

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> bool:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None
        if self.deadline_at_s is not None:
            for name, value in self._saved.items():
                self._context.setLocalProperty(name, value)  # type: ignore[arg-type]  (None removes it)
        if error is None:
            return False
        if isinstance(error, DeadlineStop) or (isinstance(error, Exception) and self._cancelled.is_set()):
            self.stopped_in = self.stopped_in or self.phase
            return True
        return False

    def enter(self, phase: str) -> None:
        """Mark the start of ``phase``. Raises :class:`DeadlineStop` if the
        deadline has passed."""
        with self._lock:
            self.phase = phase
        if self.passed():
            self.stopped_in = phase
            raise DeadlineStop(phase)

    def passed(self) -> bool:
        """Whether the deadline has passed (or the job was cancelled for it)."""
        return self.deadline_at_s is not None and (self._cancelled.is_set() or time.time() >= self.deadline_at_s)

    def _arm(self, delay_s: float) -> None:
        self._timer = threading.Timer(max(0.0, delay_s), self._on_deadline)
        self._timer.daemon = True
        self._timer.start()

    def _on_deadline(self) -> None:
        with self._lock:
            if self._timer is None:  # the check has finished
                return
            if self.phase == TIER2_PHASE and not self._grace_given:
                self._grace_given = True
                self._arm(DEADLINE_GRACE_S)
                return
            self._cancelled.set()
        self._context.cancelJobGroup(self.group)
