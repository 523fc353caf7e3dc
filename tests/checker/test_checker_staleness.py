"""Staleness figures with known answers, without Spark: the fault windows,
the summary's arithmetic (nearest-rank percentiles, histogram, bounds) and
the reference checker's per-read figures on concurrency edges. The Spark
job is held to the same figures in test_checker_semantics.py (the
``staleness_figures`` case) and test_checker_crosscheck.py (generated
histories with fault windows)."""

from __future__ import annotations

import math

from _checker_helpers import MS, Case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jepsen_like.checker import HistoryMeta, check_reference, stale_reads_of_events
from jepsen_like.checker._staleness import (
    HISTOGRAM_EDGES_MS,
    PERCENTILES,
    FaultWindow,
    ReadStaleness,
    StalenessColumns,
    fault_windows,
    summarize,
)

META = HistoryMeta(fetch_timeout_ms=10, check_quorum_factor=1.5, staleness_bound_ms=20)


def _nemesis(index: int, at_ms: int, f: str, phase: str, fault=None) -> dict:
    value = {"phase": phase} if fault is None else {"phase": phase, "fault": fault}
    return {"index": index, "time": at_ms * MS, "f": f, "value": value}


def test_fault_windows_pair_starts_and_ends_by_fault():
    events = [
        _nemesis(0, 1, "partition", "start", {"fault_id": 1}),
        _nemesis(1, 2, "kill", "start", {"node": 3}),
        _nemesis(2, 3, "partition", "start", {"fault_id": 2}),
        _nemesis(3, 4, "partition", "end", {"fault_id": 1}),
        _nemesis(4, 5, "pause", "end", {"node": 2}),  # never started: from the history's start
        _nemesis(5, 6, "kill", "start", {"node": 3}),  # started again: the first ends here
        _nemesis(6, 7, "heal", "all"),  # ends every open window
        _nemesis(7, 8, "partition", "start", {"fault_id": 3}),  # never ends
        {"index": 8, "time": 9 * MS, "f": "start-partition", "value": ["n1"]},  # Jepsen style: no window
    ]
    assert fault_windows(reversed(events)) == [
        FaultWindow("pause", None, 5 * MS),
        FaultWindow("partition #1", 1 * MS, 4 * MS),
        FaultWindow("kill", 2 * MS, 6 * MS),
        FaultWindow("partition #2", 3 * MS, 7 * MS),
        FaultWindow("kill", 6 * MS, 7 * MS),
        FaultWindow("partition #3", 8 * MS, None),
    ]


def _read(index: int, staleness_ms: float, *, mode="leader-local", node="n1", at_ms=0, offsets=None, bound_ms=15, missed=None):
    return ReadStaleness(index, mode, node, at_ms * MS, round(staleness_ms * MS), offsets, bound_ms * MS, missed)


def test_summary_percentiles_are_nearest_rank_over_every_read():
    # 10 reads: 0 (x5), 0.5, 5, 50, 500, 20000 ms.
    reads = [_read(i, 0) for i in range(5)]
    reads += [_read(5, 0.5, missed=100), _read(6, 5, missed=101), _read(7, 50, missed=102, offsets=4),
              _read(8, 500, missed=103, offsets=0), _read(9, 20000, missed=104)]
    [group] = summarize(reads, [], META)["by_mode"]
    assert group == {
        "mode": "leader-local", "reads": 10, "missed_writes": 5, "beyond_bound": 3, "max_ms": 20000.0,
        "p50_ms": 0.0, "p90_ms": 500.0, "p99_ms": 20000.0, "max_offsets_behind": 4,
        "histogram": [5, 1, 1, 1, 1, 0, 1], "worst_read": 9, "worst_missed_write": 104,
    }


def test_summary_groups_by_node_and_window_and_gives_each_mode_its_bound():
    windows = [FaultWindow("kill #1", 10 * MS, 20 * MS), FaultWindow("partition #2", 15 * MS, None)]
    reads = [
        _read(0, 0, mode="linearizable", node="n1", at_ms=5, bound_ms=0),
        _read(1, 3, node="n2", at_ms=10, missed=0),  # both ends of a window are in it
        _read(2, 0, node="n2", at_ms=17),  # in both windows
        _read(3, 25, mode="broker", node="b1", at_ms=30, bound_ms=20, missed=1),
        _read(4, 1, node=None, at_ms=9, missed=0),
    ]
    summary = summarize(reads, windows, META)
    assert summary["reads"] == 5
    assert summary["bounds_ms"] == {"linearizable": 0.0, "leader-local": 15.0, "broker": 20.0}
    assert [(g["mode"], g["node"], g["reads"], g["max_ms"]) for g in summary["by_node"]] == [
        ("linearizable", "n1", 1, 0.0), ("leader-local", "n2", 2, 3.0), ("leader-local", None, 1, 1.0), ("broker", "b1", 1, 25.0),
    ]
    assert [(g["window"], g["mode"], g["reads"], g["beyond_bound"]) for g in summary["by_window"]] == [
        ("kill #1", "leader-local", 2, 0),
        ("partition #2", "leader-local", 1, 0),
        ("partition #2", "broker", 1, 1),
        ("no fault", "linearizable", 1, 0),
        ("no fault", "leader-local", 1, 0),
    ]
    assert summarize([], windows, META) == {"reads": 0, "bounds_ms": {}, "by_mode": [], "by_node": [], "by_window": []}


def test_concurrent_writes_are_not_missed(tmp_path):
    case = Case()
    case.op("w1", 1, "write", "x", "a", start_ms=0, end_ms=1, offset=1)
    case.op("w2", 2, "write", "x", "b", start_ms=2, end_ms=10, offset=2)
    # w2 is acknowledged at 10: the reads invoked at or before 10 may precede it.
    case.op("during", 3, "read", "x", None, start_ms=5, end_ms=12, result="a", offset=1)
    case.op("at_ack", 4, "read", "x", None, start_ms=10, end_ms=11, result="a", offset=1)
    # Invoked 1 ms after: 1 ms behind, a linearizability violation.
    case.op("after", 5, "read", "x", None, start_ms=11, end_ms=12, result="a", offset=1)
    # A write that is still open (info) is never missed.
    case.op("w3", 6, "write", "x", "c", start_ms=3, end_ms=4, outcome="info", offset=3)
    case.write(tmp_path / "h.jsonl")
    [result] = check_reference([str(tmp_path / "h.jsonl")])
    by_read = {g["worst_read"]: g for g in result.staleness["by_node"]}
    [group] = result.staleness["by_mode"]
    assert (group["reads"], group["missed_writes"], group["max_ms"], group["worst_read"]) == (3, 1, 1.0, case.index["after"])
    assert group["worst_missed_write"] == case.index["w2"] and group["max_offsets_behind"] == 1
    assert list(by_read) == [case.index["after"]]
    [witness] = result.checks["stale-read"]["witnesses"]
    assert witness["read"]["index"] == case.index["after"] and witness["staleness_ms"] == 1.0


def test_first_missed_write_is_the_earliest_acknowledged_of_either_rule():
    # w2 (offset 5, acknowledged at 9) and w3 (no offset, acknowledged at 4):
    # the read of w1's value with offset 1 missed both; the first is w3.
    events = [
        {"index": 0, "time": 0, "process": 1, "type": "invoke", "f": "write", "key": "x", "value": 1},
        {"index": 1, "time": 1 * MS, "process": 1, "type": "ok", "f": "write", "key": "x", "value": 1, "offset": 1},
        {"index": 2, "time": 2 * MS, "process": 2, "type": "invoke", "f": "write", "key": "x", "value": 3},
        {"index": 3, "time": 4 * MS, "process": 2, "type": "ok", "f": "write", "key": "x", "value": 3},
        {"index": 4, "time": 5 * MS, "process": 3, "type": "invoke", "f": "write", "key": "x", "value": 2},
        {"index": 5, "time": 9 * MS, "process": 3, "type": "ok", "f": "write", "key": "x", "value": 2, "offset": 5},
        {"index": 6, "time": 30 * MS, "process": 4, "type": "invoke", "f": "read", "key": "x", "value": None, "mode": "leader-local"},
        {"index": 7, "time": 31 * MS, "process": 4, "type": "ok", "f": "read", "key": "x", "value": 1, "offset": 1},
    ]
    [witness] = stale_reads_of_events(events, META)
    assert (witness["missed_write"]["index"], witness["rule"], witness["read_from"]["index"]) == (2, "value", 0)
    assert (witness["staleness_ms"], witness["bound_ms"], witness["offsets_behind"]) == (26.0, 15.0, 4)
    # Within the bound: measured, not flagged.
    assert stale_reads_of_events([dict(e, time=e["time"] - 12 * MS) if e["index"] >= 6 else e for e in events], META) == []


def test_stale_read_evidence_from_a_staleness_row_is_the_other_checks_shape():
    # The Spark job picks stale reads from the per-read staleness rows it
    # fetches; the evidence must read as the to_json of the struct it used
    # to build in Spark: fields in order, null fields left out.
    from jepsen_like.checker._tier1 import stale_read_evidence

    within = dict(index=7, missed=3, read_from=None, rule="offset", bound_ns=15 * MS, offsets_behind=2)
    assert stale_read_evidence(**within, staleness_ns=15 * MS) is None  # at the bound: not stale
    assert stale_read_evidence(**within, staleness_ns=0) is None
    evidence = stale_read_evidence(**within, staleness_ns=15 * MS + 500_000)
    assert evidence == {"read": 7, "missed_write": 3, "rule": "offset", "bound_ms": 15.0, "staleness_ms": 15.5, "offsets_behind": 2}
    assert list(evidence) == ["read", "missed_write", "rule", "bound_ms", "staleness_ms", "offsets_behind"]
    by_value = stale_read_evidence(7, 3, 1, "value", 0, 1, None)
    assert list(by_value.items()) == [("read", 7), ("missed_write", 3), ("read_from", 1), ("rule", "value"), ("bound_ms", 0.0), ("staleness_ms", 1e-06)]


# The summary's definition, read by read (how summarize computed it before
# it worked on columns): the oracle the columnar summary is held to.
def _oracle_group(reads):
    ordered = sorted(read.staleness_ns for read in reads)
    worst = max(reads, key=lambda read: (read.staleness_ns, -read.index))
    offsets = [read.offsets_behind for read in reads if read.offsets_behind is not None]
    histogram = [0] * (len(HISTOGRAM_EDGES_MS) + 2)
    for value in ordered:
        if value == 0:
            histogram[0] += 1
            continue
        bucket = len(HISTOGRAM_EDGES_MS) + 1
        for position, edge_ms in enumerate(HISTOGRAM_EDGES_MS):
            if value <= edge_ms * MS:
                bucket = position + 1
                break
        histogram[bucket] += 1
    figures = {
        "reads": len(reads),
        "missed_writes": sum(1 for read in reads if read.staleness_ns > 0),
        "beyond_bound": sum(1 for read in reads if read.staleness_ns > read.bound_ns),
        "max_ms": worst.staleness_ns / MS,
    }
    for percent in PERCENTILES:
        figures[f"p{percent}_ms"] = ordered[max(1, math.ceil(percent * len(ordered) / 100)) - 1] / MS
    figures["max_offsets_behind"] = max(offsets) if offsets else None
    figures["histogram"] = histogram
    figures["worst_read"] = worst.index if worst.staleness_ns > 0 else None
    figures["worst_missed_write"] = worst.missed_write if worst.staleness_ns > 0 else None
    return figures


def _oracle_groups(reads, windows):
    by_mode, by_node, by_window = {}, {}, {}
    for read in sorted(reads, key=lambda read: read.index):
        by_mode.setdefault(read.mode, []).append(read)
        by_node.setdefault((read.mode, read.node), []).append(read)
        inside = [position for position, window in enumerate(windows) if window.holds(read.invoke_ns)]
        for position in inside or [-1]:
            by_window.setdefault((position, read.mode), []).append(read)
    return (
        {mode: _oracle_group(group) for mode, group in by_mode.items()},
        {key: _oracle_group(group) for key, group in by_node.items()},
        {key: _oracle_group(group) for key, group in by_window.items()},
    )


_MODES = ("linearizable", "leader-local", "broker")
_BOUND_MS = {"linearizable": 0, "leader-local": 15, "broker": 20}
_times_ms = st.integers(min_value=0, max_value=40)


@st.composite
def _reads_and_windows(draw):
    count = draw(st.integers(min_value=0, max_value=40))
    indexes = draw(st.lists(st.integers(min_value=0, max_value=10_000), min_size=count, max_size=count, unique=True))
    reads = []
    for index in indexes:
        mode = draw(st.sampled_from(_MODES))
        # Few distinct staleness values, so that the worst read is often tied.
        staleness_ns = draw(st.sampled_from([0, 0, 1, MS, MS + 1, 7 * MS, 7 * MS, 2_000 * MS, 20_000 * MS]))
        reads.append(ReadStaleness(
            index, mode, draw(st.sampled_from(["n1", "n2", None])), draw(_times_ms) * MS, staleness_ns,
            draw(st.one_of(st.none(), st.integers(min_value=0, max_value=9))), _BOUND_MS[mode] * MS,
            draw(st.one_of(st.none(), st.integers(min_value=0, max_value=10_000))),
        ))
    windows = [
        FaultWindow(
            draw(st.sampled_from(["kill", "partition #1"])),
            draw(st.one_of(st.none(), _times_ms.map(lambda ms: ms * MS))),
            draw(st.one_of(st.none(), _times_ms.map(lambda ms: ms * MS))),
        )
        for _ in range(draw(st.integers(min_value=0, max_value=4)))
    ]
    return reads, windows


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_reads_and_windows(), st.randoms(use_true_random=False))
def test_summary_of_columns_matches_the_read_by_read_definition(case, shuffler):
    """Every group's figures equal the per-read definition's, whatever the
    order the reads arrive in (the Spark job's rows come in no order), and
    from objects or from columns alike."""
    reads, windows = case
    by_mode, by_node, by_window = _oracle_groups(reads, windows)
    shuffled = list(reads)
    shuffler.shuffle(shuffled)
    summary = summarize(shuffled, windows, META)
    assert summary == summarize(StalenessColumns.of(reversed(reads)), windows, META)
    assert summary["reads"] == len(reads)
    assert {group.pop("mode"): group for group in summary["by_mode"]} == by_mode
    assert {(group.pop("mode"), group.pop("node")): group for group in summary["by_node"]} == by_node
    found = {}
    for group in summary["by_window"]:
        name, start_ns, end_ns, mode = group.pop("window"), group.pop("start_ns"), group.pop("end_ns"), group.pop("mode")
        position = next(
            (p for p, w in enumerate(windows) if (w.name, w.start_ns, w.end_ns) == (name, start_ns, end_ns)), -1
        )
        found[(position, mode)] = group
    # Windows equal in name and bounds are one key here; the oracle keeps
    # the first of them too.
    assert found == {
        key: group for key, group in by_window.items()
        if key[0] < 0 or key[0] == next(p for p, w in enumerate(windows) if w == windows[key[0]])
    }
