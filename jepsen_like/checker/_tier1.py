"""Tier 1: the always-on checks as DataFrame queries.

Each check is a sort plus a running window, or a join, so the whole tier is
O(n log n) and runs wherever the DataFrames live. The definitions are the
reference checker's (``_reference``; its docstrings are the specification),
and the witnesses are chosen the same way so the two can be compared.

Checks that need the same shuffle share it: the staleness rules' three
windows run over one shuffle of a key's writes and reads, a check whose
rows meet again in a window's partition groups them there, and the checks
over the same join or aggregation are one query (Spark computes a
DataFrame used twice in a plan twice). The stale reads themselves, and
the garbage, aborted and future reads (whose rule needs the same join of
the reads with their value's writers), are picked from the per-read
staleness rows the job fetches anyway (:func:`stale_read_evidence`,
:func:`unwritten_read_evidence`).

Groupings, joins and window partitions over operations and log records
name first the column that tells rows apart (a value, a key, an offset, a
write id, a process) and the history id last: a sort follows that order,
and Spark's sort prefix is the first sort column only, so a sort beginning
with the history id (the same for every row of a one-history check)
compared nearly every pair of rows in full (docs/benchmarks.md, "Sort keys
whose prefix decides"). A read meets its value's writers on the key as a
struct, equal when both keys are null, and grouped by that same struct:
the writers' aggregation then arrives partitioned and sorted as the join
wants it (with ``eqNullSafe`` the join shuffled and sorted it again).

Every other check yields rows ``(hid, check, ord1..ord5, evidence)``: ``ord*``
order the anomalies the way the reference orders them (the first
``max_witnesses`` are kept), and ``evidence`` is JSON in which operations are
referred to by their invoke index (``OP_REFERENCE_FIELDS``); the job swaps
those for the operations themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Mapping

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jepsen_like.checker._frames import LOG_RECORD_FIELDS, NODE_EVENT_FIELDS, per_history

# Before every time in a history: when the initial value was "written".
NEVER_NS = -(2**62)
# After every time in a history: when a put that may never finish "ends".
FOREVER_NS = 2**62

GARBAGE_READ, ABORTED_READ, FUTURE_READ = "garbage-read", "aborted-read", "future-read"
# The checks whose anomalies are picked from the per-read staleness rows
# (read_staleness) where they are fetched, not from anomaly rows.
FROM_STALENESS_ROWS = frozenset(["stale-read", GARBAGE_READ, ABORTED_READ, FUTURE_READ])

OP_REFERENCE_FIELDS = ("read", "missed_write", "read_from", "earlier_read", "failed_write", "write", "final_read", "request_op")

_EARLIER = (Window.unboundedPreceding, -1)

# The most keys whose per-key rows the lost-write check broadcasts to every
# task (one row per key, its last final read among them).
BROADCAST_KEYS_MAX = 100_000


@dataclass(frozen=True)
class Settings:
    """Per-history settings, keyed by hid."""

    initial_text: Mapping[int, str]
    leader_local_bound_ns: Mapping[int, int] = field(default_factory=dict)
    broker_bound_ns: Mapping[int, int] = field(default_factory=dict)
    offset_by_key: Mapping[int, bool] = field(default_factory=dict)
    hids_with_dumps: frozenset[int] = frozenset()
    # Distinct (history, key) pairs among the operations; None: not counted.
    keys_total: int | None = None
    # The witnesses each check keeps per history (the job's max_witnesses,
    # at least 1); the log-record checks look for no more. None: every one.
    witnesses_max: int | None = None


def _anomaly(
    frame: DataFrame,
    check: str | Column,
    evidence: Column,
    ord1: Column | None = None,
    ord2: Column | None = None,
    ord3: Column | None = None,
    ord4: Column | None = None,
    ord5: Column | None = None,
    *,
    evidence_json: bool = False,
    total: Column | None = None,
) -> DataFrame:
    """Anomaly rows: ``check`` a name or a column of names, ``evidence`` a
    struct (or, with ``evidence_json``, a column of its JSON already).
    ``total``: the check's exact count in the history, for a check that
    returns only its first witnesses (null: the rows are all of them)."""

    def as_long(column: Column | None) -> Column:
        return (column if column is not None else F.lit(None)).cast("bigint")

    return frame.select(
        "hid",
        (F.lit(check) if isinstance(check, str) else check).alias("check"),
        as_long(ord1).alias("ord1"),
        (ord2 if ord2 is not None else F.lit(None)).cast("string").alias("ord2"),
        as_long(ord3).alias("ord3"),
        as_long(ord4).alias("ord4"),
        as_long(ord5).alias("ord5"),
        (evidence if evidence_json else F.to_json(evidence)).alias("evidence"),
        as_long(total).alias("total"),
    )


def _null(type_name: str) -> Column:
    return F.lit(None).cast(type_name)


def _bound_ns(settings: Settings) -> Column:
    return (
        F.when(F.col("mode") == "leader-local", per_history(settings.leader_local_bound_ns))
        .when(F.col("mode") == "broker", per_history(settings.broker_bound_ns))
        .otherwise(F.lit(0))
        .cast("bigint")
    )


def _ok_reads(ops: DataFrame) -> DataFrame:
    return ops.where((F.col("kind") == "read") & (F.col("outcome") == "ok"))


def _writers_by_value(ops: DataFrame) -> DataFrame:
    """Per (hid, key, value) of keys without appends: how many writes/cas
    wrote it, how many may have happened, the one that may have (when there
    is exactly one), the first failed one and the first invoked possible one."""
    possible = F.col("outcome") != "fail"
    return (
        ops.where(F.col("kind").isin("write", "cas") & F.col("register_like"))
        .groupBy(F.col("written").alias("w_value"), F.struct("key").alias("w_key"), F.col("hid").alias("w_hid"))
        .agg(
            F.count(F.lit(1)).alias("n_all"),
            F.sum(F.when(possible, 1).otherwise(0)).alias("n_possible"),
            F.max(F.when(possible, F.struct("index", "outcome", "t_done"))).alias("possible_writer"),
            F.min(F.when(~possible, F.col("index"))).alias("first_failed"),
            F.min(F.when(possible, F.struct("t_inv", "index"))).alias("first_possible"),
        )
    )


def _join_writers(reads: DataFrame, writers: DataFrame, settings: Settings) -> DataFrame:
    """Reads with their value's writers, and the value rule's inputs:
    ``applicable`` and ``writer_done`` (when the value was certainly in place)."""
    joined = reads.join(
        writers,
        on=(F.col("ret") == F.col("w_value")) & (F.struct("key") == F.col("w_key")) & (F.col("hid") == F.col("w_hid")),
        how="left",
    ).drop("w_hid", "w_key", "w_value")
    single_ok = (F.col("n_possible") == 1) & (F.col("possible_writer.outcome") == "ok")
    initial = (F.col("ret") == per_history(settings.initial_text)) & (F.coalesce(F.col("n_possible"), F.lit(0)) == 0)
    return joined.select(
        "*",
        (single_ok | initial).alias("applicable"),
        F.when(single_ok, F.col("possible_writer.t_done")).when(initial, F.lit(NEVER_NS)).alias("writer_done"),
        F.when(single_ok, F.col("possible_writer.index")).alias("writer_index"),
    )


def _unwritten(settings: Settings) -> tuple[Column, Column]:
    """For a read joined with its value's writers (:func:`_join_writers`):
    which of the garbage, aborted and future reads it is (null: none; a read
    is at most one of the three, ``_reference.unwritten_reads``), and the
    write its evidence names (the first failed write of an aborted read, the
    first possible write of a future one)."""
    candidate = F.col("register_like") & (F.col("ret") != per_history(settings.initial_text))
    garbage = candidate & F.col("n_all").isNull()
    aborted = candidate & (F.col("n_all") > 0) & (F.col("n_possible") == 0)
    future = candidate & (F.col("n_possible") > 0) & (F.col("first_possible.t_inv") > F.col("t_done"))
    check = (
        F.when(garbage, F.lit(GARBAGE_READ)).when(aborted, F.lit(ABORTED_READ)).when(future, F.lit(FUTURE_READ))
    )
    write = F.when(aborted, F.col("first_failed")).when(future, F.col("first_possible.index"))
    return check, write


def unwritten_read_evidence(check: str, index: int, write: int | None) -> dict[str, Any]:
    """A garbage, aborted or future read's evidence from its
    :func:`read_staleness` row (``unwritten``, ``index``, ``unwritten_write``):
    the fields, and the nulls left out, of ``to_json`` over the struct each
    check's query built before the three were folded into the staleness
    rows."""
    evidence: dict[str, Any] = {"read": index}
    if check == ABORTED_READ and write is not None:
        evidence["failed_write"] = write
    elif check == FUTURE_READ and write is not None:
        evidence["write"] = write
    return evidence


def read_staleness(ops: DataFrame, writers: DataFrame, settings: Settings) -> DataFrame:
    """Every ok read's staleness, as ``_reference.read_staleness`` defines it:
    columns hid, index, mode, node, t_inv, bound_ns, staleness_ns,
    offsets_behind, missed (the first missed write's index), rule and
    read_from (the value rule's writer); and whether it is a garbage,
    aborted or future read (``unwritten``: the check's name or null, and
    ``unwritten_write``: the write its evidence names; see
    :func:`_unwritten`).

    The unwritten reads come from the same join of the reads with their
    value's writers that the value rule needs: as a query of their own they
    shuffled every ok read a second time and aggregated the writers a
    second time with other aggregates (one job and two stages more per
    check; at ten million operations a few seconds, within the machine's
    noise: docs/benchmarks.md, "The unwritten reads in the staleness rows").

    Both rules are running windows over one key's writes and reads, so the
    three windows below share one pass: the key's writes and its reads go
    through a single shuffle by (hid, key), each window sorts that partition
    its own way, and every read comes out of it with all it needs (no join
    back by index). A row that plays no part in a window (a read in a
    window over writes, a write without an offset in the offset rule's)
    brings null to its aggregate, so where it sorts does not matter."""
    reads = _join_writers(
        _ok_reads(ops).select(
            "hid", "index", "key", "mode", "node", "t_inv", "t_done", "offset", "ret", "register_like",
            _bound_ns(settings).alias("bound_ns"),
        ),
        writers,
        settings,
    )
    unwritten, unwritten_write = _unwritten(settings)
    done_struct = "struct<t_done:bigint,index:bigint>"
    acknowledged = F.struct("t_done", "index")
    has_offset = F.col("offset").isNotNull()
    value_write = F.col("kind").isin("write", "cas") & F.col("register_like")
    writes = ops.where(
        (F.col("outcome") == "ok") & F.col("kind").isin("write", "cas", "append") & (has_offset | value_write)
    ).select(
        "hid", "key", F.lit(False).alias("is_read"),
        # Offset rule, by completion time: the largest offset acknowledged
        # before the invoke (the lag in offsets)...
        F.col("t_done").alias("t_time"), F.lit(1).alias("ord_time"), F.col("offset").alias("w_offset"),
        # ...and by offset: the earliest acknowledged of the writes with a
        # larger offset than the read's (the first missed write, when
        # acknowledged before the invoke).
        F.col("offset").alias("o"), F.lit(1).alias("ord_o"), F.when(has_offset, acknowledged).alias("c_offset"),
        # Value rule: the earliest acknowledged ok write invoked after the
        # read's value was in place.
        F.col("t_inv").alias("t_later"), F.lit(0).alias("ord_later"), F.when(value_write, acknowledged).alias("c_value"),
        _null("bigint").alias("index"), _null("string").alias("mode"), _null("string").alias("node"),
        _null("bigint").alias("t_inv"), _null("bigint").alias("offset"), _null("bigint").alias("bound_ns"),
        _null("boolean").alias("valued"), _null("bigint").alias("read_from"),
        _null("string").alias("unwritten"), _null("bigint").alias("unwritten_write"),
    )
    valued = F.coalesce(F.col("applicable"), F.lit(False)) & F.col("register_like")
    read_rows = reads.select(
        "hid", "key", F.lit(True).alias("is_read"),
        F.col("t_inv").alias("t_time"), F.lit(0).alias("ord_time"), _null("bigint").alias("w_offset"),
        F.col("offset").alias("o"), F.lit(0).alias("ord_o"), _null(done_struct).alias("c_offset"),
        F.when(valued, F.col("writer_done")).alias("t_later"), F.lit(1).alias("ord_later"), _null(done_struct).alias("c_value"),
        "index", "mode", "node", "t_inv", "offset", "bound_ns", valued.alias("valued"),
        F.when(valued, F.col("writer_index")).alias("read_from"),
        unwritten.alias("unwritten"), unwritten_write.cast("bigint").alias("unwritten_write"),
    )
    # At equal times a read sorts first: a write acknowledged at the instant
    # of the invoke is concurrent, not before (closed intervals). At equal
    # offsets too: only larger offsets precede it. Later rows first for the
    # value rule, so "every write invoked after t" is a running prefix (an
    # unbounded-following frame would be quadratic).
    per_key = Window.partitionBy("key", "hid")
    by_time = per_key.orderBy("t_time", "ord_time").rowsBetween(*_EARLIER)
    by_offset = per_key.orderBy(F.desc("o"), "ord_o").rowsBetween(*_EARLIER)
    later_first = per_key.orderBy(F.desc("t_later"), F.desc("ord_later")).rowsBetween(*_EARLIER)
    joined = (
        writes.unionByName(read_rows)
        .select(
            "*",
            F.when(F.col("offset").isNotNull(), F.max("w_offset").over(by_time)).alias("newest"),
            F.when(F.col("offset").isNotNull(), F.min("c_offset").over(by_offset)).alias("o_first"),
            F.when(F.col("valued"), F.min("c_value").over(later_first)).alias("v_first"),
        )
        .where(F.col("is_read"))
    )
    by_offset_missed = F.col("o_first.t_done") < F.col("t_inv")
    by_value_missed = F.col("v_first.t_done") < F.col("t_inv")
    value_wins = by_value_missed & (~F.coalesce(by_offset_missed, F.lit(False)) | (F.col("v_first") < F.col("o_first")))
    first = F.when(value_wins, F.col("v_first")).when(by_offset_missed, F.col("o_first"))
    return joined.select(
        "hid", "index", "mode", "node", "t_inv", "bound_ns",
        F.coalesce(F.col("t_inv") - first.getField("t_done"), F.lit(0)).cast("bigint").alias("staleness_ns"),
        F.when(
            F.col("offset").isNotNull(), F.greatest(F.coalesce(F.col("newest"), F.col("offset")) - F.col("offset"), F.lit(0))
        ).cast("bigint").alias("offsets_behind"),
        first.getField("index").alias("missed"),
        F.when(value_wins, F.lit("value")).when(by_offset_missed, F.lit("offset")).alias("rule"),
        F.when(value_wins, F.col("read_from")).alias("read_from"),
        "unwritten", "unwritten_write",
    )


def stale_read_evidence(
    index: int, missed: int | None, read_from: int | None, rule: str | None, bound_ns: int, staleness_ns: int,
    offsets_behind: int | None,
) -> dict[str, Any] | None:
    """A stale read's evidence from its :func:`read_staleness` row, or None
    when its staleness is within its bound. Computed where the rows are
    fetched (every ok read's row comes back for the staleness summary
    anyway), not in a query of its own: that would compute the staleness
    windows a second time. The fields, and the nulls left out, are those of
    the other checks' evidence (``to_json`` of the same struct)."""
    if staleness_ns is None or bound_ns is None or staleness_ns <= bound_ns:
        return None
    evidence = {
        "read": index, "missed_write": missed, "read_from": read_from, "rule": rule,
        "bound_ms": bound_ns / 1_000_000.0, "staleness_ms": staleness_ns / 1_000_000.0, "offsets_behind": offsets_behind,
    }
    return {name: value for name, value in evidence.items() if value is not None}


def _scope_key(settings: Settings) -> Column:
    return F.when(F.coalesce(per_history(settings.offset_by_key), F.lit(False)), F.col("key"))


def non_monotonic_reads_by_process(ops: DataFrame, settings: Settings) -> DataFrame:
    reads = _ok_reads(ops).where(F.col("offset").isNotNull()).select(
        "hid", "process", _scope_key(settings).alias("scope_key"), "t_inv", "index", "offset"
    )
    session = Window.partitionBy("process", "scope_key", "hid").orderBy("t_inv", "index").rowsBetween(*_EARLIER)
    flagged = reads.select("*", F.max(F.struct("offset", "index")).over(session).alias("best")).where(
        F.col("best.offset") > F.col("offset")
    )
    evidence = F.struct(F.col("index").alias("read"), F.col("best.index").alias("earlier_read"))
    return _anomaly(flagged, "non-monotonic-read-process", evidence, ord1=F.col("index"))


def non_monotonic_reads_by_broker(ops: DataFrame, settings: Settings) -> DataFrame:
    reads = _ok_reads(ops).where(
        (F.col("mode") == "broker") & F.col("node").isNotNull() & F.col("offset").isNotNull()
    ).withColumn("scope_key", _scope_key(settings))
    completions = reads.select(
        "hid", "node", "scope_key", F.col("t_done").alias("t"), F.lit(1).alias("ord"),
        F.struct("offset", "index").alias("c"), _null("bigint").alias("r_offset"), _null("bigint").alias("r_index"),
    )
    invokes = reads.select(
        "hid", "node", "scope_key", F.col("t_inv").alias("t"), F.lit(0).alias("ord"),
        _null("struct<offset:bigint,index:bigint>").alias("c"), F.col("offset").alias("r_offset"),
        F.col("index").alias("r_index"),
    )
    served = Window.partitionBy("node", "scope_key", "hid").orderBy("t", "ord").rowsBetween(*_EARLIER)
    flagged = (
        completions.unionByName(invokes)
        .select("*", F.max("c").over(served).alias("best"))
        .where((F.col("ord") == 0) & (F.col("best.offset") > F.col("r_offset")))
    )
    evidence = F.struct(F.col("r_index").alias("read"), F.col("best.index").alias("earlier_read"), "node")
    return _anomaly(flagged, "non-monotonic-read-broker", evidence, ord1=F.col("r_index"))


def lost_writes(ops: DataFrame, writers: DataFrame, log_dumps: DataFrame | None, settings: Settings) -> DataFrame:
    # Per key, in one aggregation: its last final read (the latest invoked)
    # and when its last possible put may have ended.
    final_read = (F.col("kind") == "read") & (F.col("outcome") == "ok") & (F.col("final") == True)  # noqa: E712
    possible_put = (F.col("kind") == "write") & (F.col("outcome") != "fail")
    per_key = (
        ops.where(final_read | possible_put)
        .groupBy("key", "hid")
        .agg(
            F.max(F.when(final_read, F.struct("t_inv", "index", "offset", "ret", "ret_str"))).alias("final"),
            F.max(F.when(possible_put, F.coalesce(F.col("t_done"), F.lit(FOREVER_NS)))).alias("last_put_end"),
        )
        .select("hid", "key", F.col("final").isNotNull().alias("has_final"), "final.*", "last_put_end")
    )
    per_key = _join_writers(per_key, writers, settings).select(
        F.col("hid").alias("f_hid"), F.col("key").alias("f_key"),
        F.when(
            F.col("has_final"),
            F.struct(
                "t_inv", "index", "offset", "ret_str",
                F.coalesce(F.col("applicable"), F.lit(False)).alias("applicable"), "writer_done",
            ),
        ).alias("last_final"),
        "last_put_end",
    )
    if settings.keys_total is not None and settings.keys_total <= BROADCAST_KEYS_MAX:
        # Broadcast when the keys are known to be few: a shuffled join sent
        # every write through a shuffle by its key before Spark saw how small
        # this side is (and then through another by its write id, below).
        per_key = F.broadcast(per_key)
    writes = ops.where((F.col("outcome") == "ok") & F.col("kind").isin("write", "cas", "append"))
    joined = writes.join(per_key, on=writes["key"].eqNullSafe(per_key["f_key"]) & (writes["hid"] == per_key["f_hid"]), how="left")
    has_dumps = F.col("hid").isin(*sorted(settings.hids_with_dumps)) if settings.hids_with_dumps else F.lit(False)
    if log_dumps is not None:
        committed_ids = (
            log_dumps.where((F.col("offset") < F.col("hwm")) & F.col("write_id").isNotNull())
            .select(F.col("write_id").alias("l_write_id"), F.col("hid").alias("l_hid"))
            .distinct()
            .withColumn("in_log", F.lit(True))
        )
        joined = joined.join(
            committed_ids,
            on=(joined["write_id"] == committed_ids["l_write_id"]) & (joined["hid"] == committed_ids["l_hid"]),
            how="left",
        )
        # Records below a node's log_start are in its snapshot, not its
        # dump: a write there (or one without an offset, when no dump
        # starts at 0) cannot be looked for.
        log_starts = log_dumps.groupBy(F.col("hid").alias("s_hid")).agg(
            F.min(F.coalesce(F.col("log_start"), F.lit(0))).alias("lowest_log_start")
        )
        # One row per history: broadcast whatever Spark estimates (joined
        # by shuffle, every write would be sorted by its history id).
        joined = joined.join(F.broadcast(log_starts), on=joined["hid"] == log_starts["s_hid"], how="left")
        lowest = F.coalesce(F.col("lowest_log_start"), F.lit(0))
        in_dumps = F.when(F.col("offset").isNotNull(), F.col("offset") >= lowest).otherwise(lowest == 0)
        missing_from_log = has_dumps & F.col("write_id").isNotNull() & F.col("in_log").isNull() & in_dumps
    else:
        missing_from_log = F.lit(False)

    before_final = F.col("last_final").isNotNull() & (F.col("t_done") < F.col("last_final.t_inv"))
    by_offset = (
        before_final & F.col("offset").isNotNull() & F.col("last_final.offset").isNotNull()
        & (F.col("offset") > F.col("last_final.offset"))
    )
    by_value = (
        before_final & F.col("register_like") & F.col("kind").isin("write", "cas")
        & F.col("last_final.applicable") & (F.col("t_inv") > F.col("last_final.writer_done"))
    )
    by_append = (
        before_final & (F.col("kind") == "append") & F.col("last_final.ret_str").isNotNull() & F.col("arg_str").isNotNull()
        & (F.instr(F.col("last_final.ret_str"), F.col("arg_str")) == 0)
        & (F.col("last_put_end").isNull() | (F.col("last_put_end") < F.col("t_inv")))
    )
    reasons = F.array_sort(
        F.array_compact(
            F.array(
                F.when(by_offset, F.lit("final-read-offset")),
                F.when(by_value, F.lit("final-read-value")),
                F.when(by_append, F.lit("final-read-append")),
                F.when(missing_from_log, F.lit("final-log")),
            )
        )
    )
    flagged = joined.select("*", reasons.alias("reasons"), (by_offset | by_value | by_append).alias("uses_final")).where(
        F.size("reasons") > 0
    )
    evidence = F.struct(
        F.col("index").alias("write"), "reasons", F.when(F.col("uses_final"), F.col("last_final.index")).alias("final_read")
    )
    return _anomaly(flagged, "lost-write", evidence, ord1=F.col("index"))


def _event_struct() -> Column:
    return F.struct(*[F.col(name) for name in NODE_EVENT_FIELDS])


def split_brains(node_events: DataFrame) -> DataFrame:
    roles = node_events.where(F.col("kind") == "role")
    first_key = [F.col("time"), F.col("node"), F.coalesce(F.col("role"), F.lit("")).alias("role_"),
                 F.coalesce(F.col("leader"), F.lit("")).alias("leader_"), _event_struct().alias("event")]
    claims = roles.where(F.col("role") == "leader").select(
        "hid", "epoch", F.col("node").alias("claimed"), F.struct(*first_key).alias("claim")
    ).unionByName(
        roles.where(F.col("leader").isNotNull()).select(
            "hid", "epoch", F.col("leader").alias("claimed"), F.struct(*first_key).alias("claim")
        )
    )
    per_leader = claims.groupBy("hid", "epoch", "claimed").agg(F.min("claim").alias("first"))
    per_epoch = (
        per_leader.groupBy("hid", "epoch")
        .agg(
            F.count(F.lit(1)).alias("leaders"),
            F.array_sort(F.collect_list(F.struct(F.col("claimed").alias("leader"), F.col("first.event").alias("event")))).alias("claims"),
        )
        .where(F.col("leaders") > 1)
    )
    return _anomaly(per_epoch, "split-brain", F.struct("epoch", "claims"), ord1=F.col("epoch"))


def _committed(log_dumps: DataFrame) -> DataFrame:
    return log_dumps.where(F.col("offset") < F.col("hwm")).withColumn(
        "record", F.struct(*[F.col(name) for name in LOG_RECORD_FIELDS])
    )


def _with_more_than_one(rows: DataFrame, keys: list[str], values: list[str], lowest: str | None = None) -> DataFrame:
    """The ``keys`` at which ``rows`` hold more than one distinct ``values``
    (a null counts as a value, as grouping counts it); with ``lowest``, also
    the lowest of that value column there, in a column of that name.

    The witness queries carry whole records through aggregations Spark can
    only sort (a minimum over a struct, a collected list); a healthy log
    gives them nothing to do. This finds the few keys they are needed for
    with hash aggregations over the key and value columns alone, in one
    shuffle (partitioned by ``keys``, both aggregations find their rows in
    place)."""
    return (
        rows.select(*keys, *values)
        .repartition(*keys)
        .distinct()
        .groupBy(*keys)
        .agg(F.count(F.lit(1)).alias("distinct_values"), *([F.min(lowest).alias(lowest)] if lowest else []))
        .where(F.col("distinct_values") > 1)
        .drop("distinct_values")
    )


def _first_per_history(flagged: DataFrame, order: list[Column], settings: Settings) -> DataFrame:
    """The flagged keys whose witnesses will be kept, the first
    ``settings.witnesses_max`` of each history in the check's order, each
    with its history's exact count of flagged keys
    (``flagged_in_history``).

    The witness query keeps only the records at these keys, through a
    broadcast join: a filter as the records stream by, with no shuffle of
    them (a shuffled join would shuffle every record before Spark knows the
    other side is empty). What is broadcast is then bounded by the
    witnesses wanted, not by the input: a log dump forked at every offset
    flags millions of offsets, and holding them all in the driver and every
    task cost hundreds of megabytes at ten million operations."""
    per_history = Window.partitionBy("hid")
    counted = flagged.select("*", F.count(F.lit(1)).over(per_history).alias("flagged_in_history"))
    if settings.witnesses_max is None:
        return counted
    ranked = per_history.orderBy(*order)
    return (
        counted.select("*", F.row_number().over(ranked).alias("witness_rank"))
        .where(F.col("witness_rank") <= settings.witnesses_max)
        .drop("witness_rank")
    )


def forked_logs(log_dumps: DataFrame, settings: Settings) -> DataFrame:
    committed = _committed(log_dumps)
    forked_offsets = _first_per_history(
        _with_more_than_one(committed, ["offset", "hid"], ["epoch", "record_hash"]),
        [F.col("offset")],
        settings,
    )
    at_forks = committed.join(F.broadcast(forked_offsets), ["offset", "hid"], "inner")
    variants = at_forks.groupBy("offset", "hid", "epoch", "record_hash", "flagged_in_history").agg(
        F.min(F.struct("node", "record")).alias("lowest")
    )
    forks = (
        variants.groupBy("offset", "hid", "flagged_in_history")
        .agg(
            F.count(F.lit(1)).alias("variants"),
            F.array_sort(F.collect_list(F.struct("epoch", "record_hash", F.col("lowest.record").alias("record")))).alias("sorted"),
        )
        .where(F.col("variants") > 1)
    )
    evidence = F.struct("offset", F.transform("sorted", lambda item: item["record"]).alias("records"))
    return _anomaly(forks, "forked-log", evidence, ord1=F.col("offset"), total=F.col("flagged_in_history"))


def duplicated_writes(log_dumps: DataFrame, settings: Settings) -> DataFrame:
    written = _committed(log_dumps).where(F.col("write_id").isNotNull())
    # Ranked as the anomalies are (ord1, ord2 below): by the first offset,
    # then the write id as text.
    written_twice = _first_per_history(
        _with_more_than_one(written, ["write_id", "hid"], ["offset"], lowest="offset").withColumnRenamed("offset", "first_offset"),
        [F.col("first_offset"), F.col("write_id").cast("string")],
        settings,
    )
    placements = (
        written.join(F.broadcast(written_twice), ["write_id", "hid"], "inner")
        .groupBy("write_id", "hid", "offset", "flagged_in_history")
        .agg(F.min(F.struct("node", "record")).alias("lowest"))
    )
    duplicates = (
        placements.groupBy("write_id", "hid", "flagged_in_history")
        .agg(
            F.count(F.lit(1)).alias("offsets"),
            F.min("offset").alias("first_offset"),
            F.array_sort(F.collect_list(F.struct("offset", F.col("lowest.record").alias("record")))).alias("sorted"),
        )
        .where(F.col("offsets") > 1)
    )
    evidence = F.struct("write_id", F.transform("sorted", lambda item: item["record"]).alias("records"))
    return _anomaly(
        duplicates, "duplicated-write", evidence,
        ord1=F.col("first_offset"), ord2=F.col("write_id"), total=F.col("flagged_in_history"),
    )


def _registrations(node_events: DataFrame) -> DataFrame:
    """One row per (broker, broker_epoch, offset) at its first report."""
    return (
        node_events.where(F.col("kind") == "broker_registration")
        .groupBy("hid", "broker_id", "broker_epoch", "offset")
        .agg(F.min(F.struct("time", "node")).alias("first"))
        .select("hid", "broker_id", "broker_epoch", "offset", F.col("first.time").alias("time"), F.col("first.node").alias("node"))
        .withColumn("registration", F.struct("broker_id", "broker_epoch", "offset", "time", "node"))
        .withColumn(
            "ranked",
            F.struct("broker_epoch", "time", F.coalesce(F.col("offset"), F.lit(-1)).alias("offset_"), "registration"),
        )
    )


def broker_epoch_regressions(node_events: DataFrame) -> DataFrame:
    registrations = _registrations(node_events)
    order = Window.partitionBy("hid", "broker_id").orderBy(
        "time", F.coalesce(F.col("offset"), F.lit(-1)), "broker_epoch"
    ).rowsBetween(*_EARLIER)
    flagged = registrations.select("*", F.max("ranked").over(order).alias("best")).where(
        F.col("best.broker_epoch") >= F.col("broker_epoch")
    )
    evidence = F.struct("registration", F.col("best.registration").alias("earlier_registration"))
    return _anomaly(
        flagged, "broker-epoch-regression", evidence,
        ord2=F.col("broker_id"), ord3=F.col("time"), ord4=F.coalesce(F.col("offset"), F.lit(-1)), ord5=F.col("broker_epoch"),
    )


def stale_broker_epochs(ops: DataFrame, node_events: DataFrame) -> DataFrame:
    registrations = _registrations(node_events)
    ranked_type = registrations.schema["ranked"].dataType.simpleString()
    event_type = node_events.select(_event_struct().alias("e")).schema["e"].dataType.simpleString()
    from_events = node_events.where((F.col("kind") == "broker_request") & (F.col("accepted") == True)).select(  # noqa: E712
        "hid", "broker_id", "broker_epoch", F.col("time").alias("t"), F.lit(-1).cast("bigint").alias("index"),
        _event_struct().alias("event"), F.lit(0).alias("ord"), _null(ranked_type).alias("ranked"),
    )
    from_ops = ops.where(
        (F.col("outcome") == "ok") & F.col("broker_id").isNotNull() & F.col("broker_epoch").isNotNull()
    ).select(
        "hid", "broker_id", "broker_epoch", F.col("t_inv").alias("t"), "index", _null(event_type).alias("event"),
        F.lit(0).alias("ord"), _null(ranked_type).alias("ranked"),
    )
    # Registrations sort after requests at equal times: only a registration
    # strictly before the request makes its epoch stale.
    reported = registrations.select(
        "hid", "broker_id", _null("bigint").alias("broker_epoch"), F.col("time").alias("t"),
        _null("bigint").alias("index"), _null(event_type).alias("event"), F.lit(1).alias("ord"), "ranked",
    )
    order = Window.partitionBy("hid", "broker_id").orderBy("t", "ord").rowsBetween(*_EARLIER)
    flagged = (
        from_events.unionByName(from_ops).unionByName(reported)
        .select("*", F.max("ranked").over(order).alias("best"))
        .where((F.col("ord") == 0) & (F.col("best.broker_epoch") > F.col("broker_epoch")))
    )
    evidence = F.struct(
        F.when(F.col("index") >= 0, F.col("index")).alias("request_op"),
        F.col("event").alias("request_event"),
        F.col("best.registration").alias("newer_registration"),
    )
    return _anomaly(
        flagged, "stale-broker-epoch", evidence,
        ord1=F.col("t"), ord2=F.col("broker_id"), ord3=F.col("broker_epoch"), ord4=F.col("index"),
    )


def fenced_broker_reads(ops: DataFrame, node_events: DataFrame) -> DataFrame:
    states = node_events.where(F.col("kind") == "broker_state")
    reads = _ok_reads(ops).where((F.col("mode") == "broker") & F.col("node").isNotNull())
    since_type = "struct<time:bigint,node:string,event:{}>".format(
        node_events.select(_event_struct().alias("e")).schema["e"].dataType.simpleString()
    )
    # One running window over the broker's reports and its reads' invokes
    # and completions gives each read the latest fenced report strictly
    # before its invoke and the latest other report at or before its
    # completion. At equal times: other reports, invokes, fenced reports,
    # completions (each aggregate sees only its own reports, so only each
    # kind's place against the reads matters).
    other_ord, invoke_ord, fenced_ord, completion_ord = 0, 1, 2, 3
    fenced_reports = states.where(F.col("state") == "fenced").select(
        "hid", F.col("broker_id").alias("broker"), F.col("time").alias("t"), F.lit(fenced_ord).alias("ord"),
        F.struct("time", "node", _event_struct().alias("event")).alias("since"), _null("bigint").alias("other_time"),
        _null("bigint").alias("r_index"),
    )
    other_reports = states.where(F.col("state") != "fenced").select(
        "hid", F.col("broker_id").alias("broker"), F.col("time").alias("t"), F.lit(other_ord).alias("ord"),
        _null(since_type).alias("since"), F.col("time").alias("other_time"), _null("bigint").alias("r_index"),
    )
    invokes = reads.select(
        "hid", F.col("node").alias("broker"), F.col("t_inv").alias("t"), F.lit(invoke_ord).alias("ord"),
        _null(since_type).alias("since"), _null("bigint").alias("other_time"), F.col("index").alias("r_index"),
    )
    completions = reads.select(
        "hid", F.col("node").alias("broker"), F.col("t_done").alias("t"), F.lit(completion_ord).alias("ord"),
        _null(since_type).alias("since"), _null("bigint").alias("other_time"), F.col("index").alias("r_index"),
    )
    per_broker = Window.partitionBy("broker", "hid").orderBy("t", "ord").rowsBetween(*_EARLIER)
    # The read's two rows meet again in the window's partition: grouping by
    # (hid, broker, read) needs no second shuffle.
    flagged = (
        fenced_reports.unionByName(other_reports).unionByName(invokes).unionByName(completions)
        .select(
            "hid", "broker", "ord", "r_index",
            F.max("since").over(per_broker).alias("last_fenced"), F.max("other_time").over(per_broker).alias("last_other"),
        )
        .where(F.col("ord").isin(invoke_ord, completion_ord))
        .groupBy("r_index", "broker", "hid")
        .agg(
            F.max(F.when(F.col("ord") == invoke_ord, F.col("last_fenced"))).alias("last_fenced"),
            F.max(F.when(F.col("ord") == completion_ord, F.col("last_other"))).alias("last_other"),
        )
        .where(
            F.col("last_fenced").isNotNull()
            & (F.col("last_other").isNull() | (F.col("last_other") < F.col("last_fenced.time")))
        )
    )
    evidence = F.struct(F.col("r_index").alias("read"), F.col("last_fenced.event").alias("fenced_since"))
    return _anomaly(flagged, "fenced-broker-read", evidence, ord1=F.col("r_index"))


def anomalies(
    ops: DataFrame,
    node_events: DataFrame | None,
    log_dumps: DataFrame | None,
    settings: Settings,
    checks: frozenset[str] | None = None,
) -> tuple[DataFrame | None, DataFrame | None]:
    """Every tier-1 anomaly of every history but the stale, garbage,
    aborted and future reads, as one DataFrame (None when no check is left),
    and every ok read's staleness (:func:`read_staleness`, from which
    :func:`stale_read_evidence` and :func:`unwritten_read_evidence` pick
    those four checks' anomalies; None when none of them is wanted).
    ``checks`` limits them to the checks some history has input for (fewer
    Spark stages)."""
    wanted = checks if checks is not None else frozenset(
        ["stale-read", "non-monotonic-read-process", "non-monotonic-read-broker", "garbage-read", "aborted-read",
         "future-read", "lost-write", "split-brain", "forked-log", "duplicated-write", "broker-epoch-regression",
         "stale-broker-epoch", "fenced-broker-read"]
    )
    needs_writers = wanted & (FROM_STALENESS_ROWS | {"lost-write"})
    writers = _writers_by_value(ops) if needs_writers else None
    parts: list[DataFrame] = []
    staleness = None
    if wanted & FROM_STALENESS_ROWS:
        # Their anomalies are picked from the staleness rows where they are
        # fetched (stale_read_evidence, unwritten_read_evidence).
        staleness = read_staleness(ops, writers, settings)  # type: ignore[arg-type]
    if "non-monotonic-read-process" in wanted:
        parts.append(non_monotonic_reads_by_process(ops, settings))
    if "non-monotonic-read-broker" in wanted:
        parts.append(non_monotonic_reads_by_broker(ops, settings))
    if "lost-write" in wanted:
        parts.append(lost_writes(ops, writers, log_dumps, settings))  # type: ignore[arg-type]
    if node_events is not None:
        if "stale-broker-epoch" in wanted:
            parts.append(stale_broker_epochs(ops, node_events))
        if "split-brain" in wanted:
            parts.append(split_brains(node_events))
        if "broker-epoch-regression" in wanted:
            parts.append(broker_epoch_regressions(node_events))
        if "fenced-broker-read" in wanted:
            parts.append(fenced_broker_reads(ops, node_events))
    if log_dumps is not None:
        if "forked-log" in wanted:
            parts.append(forked_logs(log_dumps, settings))
        if "duplicated-write" in wanted:
            parts.append(duplicated_writes(log_dumps, settings))
    if not parts:
        return None, staleness
    return reduce(DataFrame.unionByName, parts), staleness
