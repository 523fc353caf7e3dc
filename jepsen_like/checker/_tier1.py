"""Tier 1: the always-on checks as DataFrame queries.

Each check is a sort plus a running window, or a join, so the whole tier is
O(n log n) and runs wherever the DataFrames live. The definitions are the
reference checker's (``_reference``; its docstrings are the specification),
and the witnesses are chosen the same way so the two can be compared.

Every check yields rows ``(hid, check, ord1..ord5, evidence)``: ``ord*``
order the anomalies the way the reference orders them (the first
``max_witnesses`` are kept), and ``evidence`` is JSON in which operations are
referred to by their invoke index (``OP_REFERENCE_FIELDS``); the job swaps
those for the operations themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Mapping

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jepsen_like.checker._frames import LOG_RECORD_FIELDS, NODE_EVENT_FIELDS, per_history

# Before every time in a history: when the initial value was "written".
NEVER_NS = -(2**62)
# After every time in a history: when a put that may never finish "ends".
FOREVER_NS = 2**62

OP_REFERENCE_FIELDS = ("read", "missed_write", "read_from", "earlier_read", "failed_write", "write", "final_read", "request_op")

_EARLIER = (Window.unboundedPreceding, -1)


@dataclass(frozen=True)
class Settings:
    """Per-history settings, keyed by hid."""

    initial_text: Mapping[int, str]
    leader_local_bound_ns: Mapping[int, int] = field(default_factory=dict)
    broker_bound_ns: Mapping[int, int] = field(default_factory=dict)
    offset_by_key: Mapping[int, bool] = field(default_factory=dict)
    hids_with_dumps: frozenset[int] = frozenset()


def _anomaly(
    frame: DataFrame,
    check: str,
    evidence: Column,
    ord1: Column | None = None,
    ord2: Column | None = None,
    ord3: Column | None = None,
    ord4: Column | None = None,
    ord5: Column | None = None,
) -> DataFrame:
    def as_long(column: Column | None) -> Column:
        return (column if column is not None else F.lit(None)).cast("bigint")

    return frame.select(
        "hid",
        F.lit(check).alias("check"),
        as_long(ord1).alias("ord1"),
        (ord2 if ord2 is not None else F.lit(None)).cast("string").alias("ord2"),
        as_long(ord3).alias("ord3"),
        as_long(ord4).alias("ord4"),
        as_long(ord5).alias("ord5"),
        F.to_json(evidence).alias("evidence"),
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
        .groupBy(F.col("hid").alias("w_hid"), F.col("key").alias("w_key"), F.col("written").alias("w_value"))
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
        on=(F.col("hid") == F.col("w_hid")) & F.col("key").eqNullSafe(F.col("w_key")) & (F.col("ret") == F.col("w_value")),
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


def read_staleness(ops: DataFrame, writers: DataFrame, settings: Settings) -> DataFrame:
    """Every ok read's staleness, as ``_reference.read_staleness`` defines it:
    columns hid, index, mode, node, t_inv, bound_ns, staleness_ns,
    offsets_behind, missed (the first missed write's index), rule and
    read_from (the value rule's writer)."""
    reads = _ok_reads(ops).select(
        "hid", "index", "key", "mode", "node", "t_inv", "offset", "ret", "register_like", _bound_ns(settings).alias("bound_ns")
    )
    done_struct = "struct<t_done:bigint,index:bigint>"

    # Offset rule, two running windows over the key's writes with an offset
    # and its reads with one: by completion time, the largest offset
    # acknowledged before the invoke (the lag in offsets); by offset, the
    # earliest acknowledged of the writes with a larger offset than the
    # read's (the first missed write, when acknowledged before the invoke).
    offset_writes = ops.where(
        (F.col("outcome") == "ok") & F.col("kind").isin("write", "cas", "append") & F.col("offset").isNotNull()
    ).select(
        "hid", "key", F.col("t_done").alias("t"), F.col("offset").alias("o"), F.lit(1).alias("ord"), "offset",
        F.struct("t_done", "index").alias("c"), _null("bigint").alias("r_index"),
    )
    offset_reads = reads.where(F.col("offset").isNotNull()).select(
        "hid", "key", F.col("t_inv").alias("t"), F.col("offset").alias("o"), F.lit(0).alias("ord"), _null("bigint").alias("offset"),
        _null(done_struct).alias("c"), F.col("index").alias("r_index"),
    )
    # At equal times the read sorts first: a write acknowledged at the
    # instant of the invoke is concurrent, not before (closed intervals).
    # At equal offsets too: only larger offsets precede it.
    by_time = Window.partitionBy("hid", "key").orderBy("t", "ord").rowsBetween(*_EARLIER)
    by_offset = Window.partitionBy("hid", "key").orderBy(F.desc("o"), "ord").rowsBetween(*_EARLIER)
    by_offset_rule = (
        offset_writes.unionByName(offset_reads)
        .select("*", F.max("offset").over(by_time).alias("newest"), F.min("c").over(by_offset).alias("o_first"))
        .where(F.col("ord") == 0)
        .select("hid", F.col("r_index").alias("index"), "newest", "o_first")
    )

    # Value rule: the earliest acknowledged ok write invoked after the
    # read's value was in place.
    valued = _join_writers(reads.where(F.col("register_like")), writers, settings).where(F.col("applicable"))
    value_writes = ops.where(
        (F.col("outcome") == "ok") & F.col("kind").isin("write", "cas") & F.col("register_like")
    ).select(
        "hid", "key", F.col("t_inv").alias("t"), F.lit(0).alias("ord"), F.struct("t_done", "index").alias("c"),
        _null("bigint").alias("r_index"), _null("bigint").alias("read_from"),
    )
    value_reads = valued.select(
        "hid", "key", F.col("writer_done").alias("t"), F.lit(1).alias("ord"), _null(done_struct).alias("c"),
        F.col("index").alias("r_index"), F.col("writer_index").alias("read_from"),
    )
    # Later rows first, so "every write invoked after t" is a running prefix
    # (an unbounded-following frame would be quadratic).
    later_first = Window.partitionBy("hid", "key").orderBy(F.desc("t"), F.desc("ord")).rowsBetween(*_EARLIER)
    first_by_value = (
        value_writes.unionByName(value_reads)
        .select("*", F.min("c").over(later_first).alias("v_first"))
        .where(F.col("ord") == 1)
        .select("hid", F.col("r_index").alias("index"), "v_first", "read_from")
    )

    joined = (
        reads.join(by_offset_rule, on=["hid", "index"], how="left")
        .join(first_by_value, on=["hid", "index"], how="left")
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
    )


def stale_reads(staleness: DataFrame) -> DataFrame:
    """Reads whose staleness (:func:`read_staleness`) exceeds their bound."""
    flagged = staleness.where(F.col("staleness_ns") > F.col("bound_ns"))
    evidence = F.struct(
        F.col("index").alias("read"), F.col("missed").alias("missed_write"), "read_from", "rule",
        (F.col("bound_ns") / F.lit(1_000_000.0)).alias("bound_ms"),
        (F.col("staleness_ns") / F.lit(1_000_000.0)).alias("staleness_ms"),
        "offsets_behind",
    )
    return _anomaly(flagged, "stale-read", evidence, ord1=F.col("index"))


def _scope_key(settings: Settings) -> Column:
    return F.when(F.coalesce(per_history(settings.offset_by_key), F.lit(False)), F.col("key"))


def non_monotonic_reads_by_process(ops: DataFrame, settings: Settings) -> DataFrame:
    reads = _ok_reads(ops).where(F.col("offset").isNotNull()).select(
        "hid", "process", _scope_key(settings).alias("scope_key"), "t_inv", "index", "offset"
    )
    session = Window.partitionBy("hid", "process", "scope_key").orderBy("t_inv", "index").rowsBetween(*_EARLIER)
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
    served = Window.partitionBy("hid", "node", "scope_key").orderBy("t", "ord").rowsBetween(*_EARLIER)
    flagged = (
        completions.unionByName(invokes)
        .select("*", F.max("c").over(served).alias("best"))
        .where((F.col("ord") == 0) & (F.col("best.offset") > F.col("r_offset")))
    )
    evidence = F.struct(F.col("r_index").alias("read"), F.col("best.index").alias("earlier_read"), "node")
    return _anomaly(flagged, "non-monotonic-read-broker", evidence, ord1=F.col("r_index"))


def unwritten_reads(ops: DataFrame, writers: DataFrame, settings: Settings) -> list[DataFrame]:
    reads = _ok_reads(ops).where(F.col("register_like") & (F.col("ret") != per_history(settings.initial_text)))
    joined = _join_writers(reads, writers, settings)
    garbage = joined.where(F.col("n_all").isNull())
    aborted = joined.where((F.col("n_all") > 0) & (F.col("n_possible") == 0))
    future = joined.where((F.col("n_possible") > 0) & (F.col("first_possible.t_inv") > F.col("t_done")))
    return [
        _anomaly(garbage, "garbage-read", F.struct(F.col("index").alias("read")), ord1=F.col("index")),
        _anomaly(
            aborted, "aborted-read",
            F.struct(F.col("index").alias("read"), F.col("first_failed").alias("failed_write")), ord1=F.col("index"),
        ),
        _anomaly(
            future, "future-read",
            F.struct(F.col("index").alias("read"), F.col("first_possible.index").alias("write")), ord1=F.col("index"),
        ),
    ]


def lost_writes(ops: DataFrame, writers: DataFrame, log_dumps: DataFrame | None, settings: Settings) -> DataFrame:
    finals = (
        _ok_reads(ops)
        .where(F.col("final") == True)  # noqa: E712 (a Column comparison)
        .groupBy("hid", "key")
        .agg(F.max(F.struct("t_inv", "index", "offset", "ret", "ret_str")).alias("final"))
        .select("hid", "key", "final.*")
    )
    finals = _join_writers(finals, writers, settings).select(
        F.col("hid").alias("f_hid"), F.col("key").alias("f_key"),
        F.struct(
            "t_inv", "index", "offset", "ret_str",
            F.coalesce(F.col("applicable"), F.lit(False)).alias("applicable"), "writer_done",
        ).alias("last_final"),
    )
    put_ends = (
        ops.where((F.col("kind") == "write") & (F.col("outcome") != "fail"))
        .groupBy(F.col("hid").alias("p_hid"), F.col("key").alias("p_key"))
        .agg(F.max(F.coalesce(F.col("t_done"), F.lit(FOREVER_NS))).alias("last_put_end"))
    )
    writes = ops.where((F.col("outcome") == "ok") & F.col("kind").isin("write", "cas", "append"))
    joined = writes.join(finals, on=(writes["hid"] == finals["f_hid"]) & writes["key"].eqNullSafe(finals["f_key"]), how="left")
    joined = joined.join(put_ends, on=(joined["hid"] == put_ends["p_hid"]) & joined["key"].eqNullSafe(put_ends["p_key"]), how="left")
    has_dumps = F.col("hid").isin(*sorted(settings.hids_with_dumps)) if settings.hids_with_dumps else F.lit(False)
    if log_dumps is not None:
        committed_ids = (
            log_dumps.where((F.col("offset") < F.col("hwm")) & F.col("write_id").isNotNull())
            .select(F.col("hid").alias("l_hid"), F.col("write_id").alias("l_write_id"))
            .distinct()
            .withColumn("in_log", F.lit(True))
        )
        joined = joined.join(
            committed_ids,
            on=(joined["hid"] == committed_ids["l_hid"]) & (joined["write_id"] == committed_ids["l_write_id"]),
            how="left",
        )
        # Records below a node's log_start are in its snapshot, not its
        # dump: a write there (or one without an offset, when no dump
        # starts at 0) cannot be looked for.
        log_starts = log_dumps.groupBy(F.col("hid").alias("s_hid")).agg(
            F.min(F.coalesce(F.col("log_start"), F.lit(0))).alias("lowest_log_start")
        )
        joined = joined.join(log_starts, on=joined["hid"] == log_starts["s_hid"], how="left")
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


def forked_logs(log_dumps: DataFrame) -> DataFrame:
    variants = _committed(log_dumps).groupBy("hid", "offset", "epoch", "record_hash").agg(
        F.min(F.struct("node", "record")).alias("lowest")
    )
    forks = (
        variants.groupBy("hid", "offset")
        .agg(
            F.count(F.lit(1)).alias("variants"),
            F.array_sort(F.collect_list(F.struct("epoch", "record_hash", F.col("lowest.record").alias("record")))).alias("sorted"),
        )
        .where(F.col("variants") > 1)
    )
    evidence = F.struct("offset", F.transform("sorted", lambda item: item["record"]).alias("records"))
    return _anomaly(forks, "forked-log", evidence, ord1=F.col("offset"))


def duplicated_writes(log_dumps: DataFrame) -> DataFrame:
    placements = (
        _committed(log_dumps)
        .where(F.col("write_id").isNotNull())
        .groupBy("hid", "write_id", "offset")
        .agg(F.min(F.struct("node", "record")).alias("lowest"))
    )
    duplicates = (
        placements.groupBy("hid", "write_id")
        .agg(
            F.count(F.lit(1)).alias("offsets"),
            F.min("offset").alias("first_offset"),
            F.array_sort(F.collect_list(F.struct("offset", F.col("lowest.record").alias("record")))).alias("sorted"),
        )
        .where(F.col("offsets") > 1)
    )
    evidence = F.struct("write_id", F.transform("sorted", lambda item: item["record"]).alias("records"))
    return _anomaly(duplicates, "duplicated-write", evidence, ord1=F.col("first_offset"), ord2=F.col("write_id"))


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
    # The latest fenced report strictly before the read's invoke...
    fenced_reports = states.where(F.col("state") == "fenced").select(
        "hid", F.col("broker_id").alias("broker"), F.col("time").alias("t"), F.lit(1).alias("ord"),
        F.struct("time", "node", _event_struct().alias("event")).alias("since"), _null("bigint").alias("r_index"),
    )
    invokes = reads.select(
        "hid", F.col("node").alias("broker"), F.col("t_inv").alias("t"), F.lit(0).alias("ord"),
        _null(since_type).alias("since"), F.col("index").alias("r_index"),
    )
    per_broker = Window.partitionBy("hid", "broker").orderBy("t", "ord").rowsBetween(*_EARLIER)
    fenced_at_invoke = (
        fenced_reports.unionByName(invokes)
        .select("*", F.max("since").over(per_broker).alias("last_fenced"))
        .where((F.col("ord") == 0) & F.col("last_fenced").isNotNull())
        .select("hid", "r_index", "last_fenced")
    )
    # ...and the latest other report at or before its completion.
    other_reports = states.where(F.col("state") != "fenced").select(
        "hid", F.col("broker_id").alias("broker"), F.col("time").alias("t"), F.lit(0).alias("ord"),
        F.col("time").alias("other_time"), _null("bigint").alias("r_index"),
    )
    completions = reads.select(
        "hid", F.col("node").alias("broker"), F.col("t_done").alias("t"), F.lit(1).alias("ord"),
        _null("bigint").alias("other_time"), F.col("index").alias("r_index"),
    )
    other_by_completion = (
        other_reports.unionByName(completions)
        .select("*", F.max("other_time").over(per_broker).alias("last_other"))
        .where(F.col("ord") == 1)
        .select("hid", "r_index", "last_other")
    )
    flagged = fenced_at_invoke.join(other_by_completion, on=["hid", "r_index"], how="inner").where(
        F.col("last_other").isNull() | (F.col("last_other") < F.col("last_fenced.time"))
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
    """Every tier-1 anomaly of every history, as one DataFrame (None when no
    check is left), and every ok read's staleness (:func:`read_staleness`;
    None when no history has an ok read). ``checks`` limits them to the
    checks some history has input for (fewer Spark stages)."""
    wanted = checks if checks is not None else frozenset(
        ["stale-read", "non-monotonic-read-process", "non-monotonic-read-broker", "garbage-read", "aborted-read",
         "future-read", "lost-write", "split-brain", "forked-log", "duplicated-write", "broker-epoch-regression",
         "stale-broker-epoch", "fenced-broker-read"]
    )
    needs_writers = wanted & {"stale-read", "garbage-read", "aborted-read", "future-read", "lost-write"}
    writers = _writers_by_value(ops) if needs_writers else None
    parts: list[DataFrame] = []
    staleness = None
    if "stale-read" in wanted:
        staleness = read_staleness(ops, writers, settings)  # type: ignore[arg-type]
        parts.append(stale_reads(staleness))
    if "non-monotonic-read-process" in wanted:
        parts.append(non_monotonic_reads_by_process(ops, settings))
    if "non-monotonic-read-broker" in wanted:
        parts.append(non_monotonic_reads_by_broker(ops, settings))
    if wanted & {"garbage-read", "aborted-read", "future-read"}:
        for part in unwritten_reads(ops, writers, settings):  # type: ignore[arg-type]
            parts.append(part)
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
            parts.append(forked_logs(log_dumps))
        if "duplicated-write" in wanted:
            parts.append(duplicated_writes(log_dumps))
    if not parts:
        return None, staleness
    return reduce(DataFrame.unionByName, parts), staleness
