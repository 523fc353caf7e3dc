"""Staleness, measured: how far behind each ok read was, and the summary of
those figures that results carry (docs/checker.md, "Staleness").

Both checkers measure every ok read the same way (the reference in
``_reference.read_staleness``, the Spark job in ``_tier1.read_staleness``)
and hand the per-read figures to :func:`summarize`, which lives once, here,
so that the tables the two produce are the same by construction once the
per-read figures are. Fault windows come from the history's nemesis events
(:func:`fault_windows`).

Pure Python, no Spark: the reference checker runs under Pyodide.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Iterable, Mapping, Sequence

from jepsen_like.checker._load import HistoryMeta
from jepsen_like.checker._models import MODE_BROKER, MODE_LEADER_LOCAL, READ_MODES

# Percentiles each group reports (nearest rank, over every read of the group,
# fresh ones included).
PERCENTILES = (50, 90, 99)
# Upper edges (ms, inclusive) of the histogram's buckets after the first,
# which counts the reads that missed nothing; the last bucket is open.
HISTOGRAM_EDGES_MS = (1, 10, 100, 1_000, 10_000)
# The bucket of reads invoked outside every fault window.
NO_FAULT = "no fault"


@dataclass(frozen=True)
class ReadStaleness:
    """One ok read's figures: ``staleness_ns`` is the read's invoke time
    minus the acknowledgement time of the first write it missed (0 when it
    missed none); ``offsets_behind`` the largest offset acknowledged on its
    key before its invoke minus the offset it read (None when the read has
    no offset); ``missed_write`` the invoke index of the first missed write."""

    index: int
    mode: str
    node: str | None
    invoke_ns: int
    staleness_ns: int
    offsets_behind: int | None
    bound_ns: int
    missed_write: int | None


@dataclass(frozen=True)
class FaultWindow:
    """A fault, from its start event to its end (``None``: open at either
    side: it started before the history or never ended)."""

    name: str
    start_ns: int | None
    end_ns: int | None

    @property
    def span(self) -> tuple[float, float]:
        """The window as a closed interval, infinite at an open side."""
        return (
            -math.inf if self.start_ns is None else self.start_ns,
            math.inf if self.end_ns is None else self.end_ns,
        )

    def holds(self, time_ns: int) -> bool:
        """Whether an instant is in the window (closed interval)."""
        start, end = self.span
        return start <= time_ns <= end


def bound_ns_of_mode(mode: str | None, meta: HistoryMeta) -> int | None:
    """How long before a read's invoke a write must have been acknowledged
    for a read in ``mode`` to have to reflect it (ns): 0 for linearizable
    reads (``None`` mode), the meta's bounds for leader-local and broker
    reads (None when the meta does not give it)."""
    if mode == MODE_LEADER_LOCAL:
        bound_ms = meta.leader_local_bound_ms
    elif mode == MODE_BROKER:
        bound_ms = meta.staleness_bound_ms
    else:
        return 0
    return None if bound_ms is None else round(bound_ms * 1_000_000)


def _fault_identity(f: str, fault: Any) -> tuple[str, str]:
    if isinstance(fault, Mapping) and fault.get("fault_id") is not None:
        return f, json.dumps(fault["fault_id"], sort_keys=True)
    return f, json.dumps(fault, sort_keys=True, default=str)


def _fault_name(f: str, fault: Any) -> str:
    if isinstance(fault, Mapping) and fault.get("fault_id") is not None:
        return f"{f} #{fault['fault_id']}"
    return f


def fault_windows(nemesis_events: Iterable[Mapping[str, Any]]) -> list[FaultWindow]:
    """Fault windows from nemesis events (``index``, ``time``, ``f``,
    ``value``), the way pykraft's harness marks them: ``value.phase`` is
    ``start`` or ``end`` and ``value.fault`` the fault; a start and an end
    with the same ``f`` and fault (its ``fault_id`` when it has one) bound a
    window. A second start of an open fault ends the first there; an end
    without a start opens the window at the history's start; phase ``all``
    ends every open window; a window never ended runs to the history's end.
    Other nemesis events (Jepsen's ``start-partition`` and the like) make no
    window. Windows are listed by start (then end, then name)."""
    windows: list[FaultWindow] = []
    open_windows: dict[tuple[str, str], tuple[str, int]] = {}
    for event in sorted(nemesis_events, key=lambda e: (e["time"], e["index"])):
        value = event.get("value")
        if not isinstance(value, Mapping):
            continue
        f, phase, fault, time_ns = str(event.get("f")), value.get("phase"), value.get("fault"), event["time"]
        identity = _fault_identity(f, fault)
        if phase == "start":
            if identity in open_windows:
                name, start_ns = open_windows.pop(identity)
                windows.append(FaultWindow(name, start_ns, time_ns))
            open_windows[identity] = (_fault_name(f, fault), time_ns)
        elif phase == "end":
            if identity in open_windows:
                name, start_ns = open_windows.pop(identity)
                windows.append(FaultWindow(name, start_ns, time_ns))
            else:
                windows.append(FaultWindow(_fault_name(f, fault), None, time_ns))
        elif phase == "all":
            for name, start_ns in open_windows.values():
                windows.append(FaultWindow(name, start_ns, time_ns))
            open_windows.clear()
    windows.extend(FaultWindow(name, start_ns, None) for name, start_ns in open_windows.values())
    return sorted(windows, key=lambda w: (-1 if w.start_ns is None else w.start_ns, math.inf if w.end_ns is None else w.end_ns, w.name))


def _percentile(sorted_values: Sequence[int], percent: int) -> int:
    """Nearest rank: the smallest value at or above ``percent`` % of them."""
    rank = max(1, math.ceil(percent * len(sorted_values) / 100))
    return sorted_values[rank - 1]


def _ms(ns: int) -> float:
    return ns / 1_000_000


def _histogram(sorted_values_ns: Sequence[int]) -> list[int]:
    """Reads per bucket: missed nothing (0), then up to each edge of
    :data:`HISTOGRAM_EDGES_MS` (inclusive), then beyond the last. From
    sorted values, by bisection: a few steps per bucket, not per read."""
    zeros = bisect_right(sorted_values_ns, 0) - bisect_left(sorted_values_ns, 0)
    at_or_below = [bisect_right(sorted_values_ns, edge_ms * 1_000_000) for edge_ms in HISTOGRAM_EDGES_MS]
    counts = [zeros, at_or_below[0] - zeros]
    counts += [upper - lower for lower, upper in zip(at_or_below, at_or_below[1:])]
    counts.append(len(sorted_values_ns) - at_or_below[-1])
    return counts


def _bound_ms(mode: str, meta: HistoryMeta) -> float | None:
    bound_ns = bound_ns_of_mode(mode, meta)
    return None if bound_ns is None else _ms(bound_ns)


@dataclass(frozen=True)
class StalenessColumns:
    """Many reads' :class:`ReadStaleness` figures as one sequence per field
    (position ``i`` of each is read ``i``): what :func:`summarize` works on.
    The Spark job builds it from the columns it fetches, without an object
    per read (millions of them in a big history)."""

    index: Sequence[int]
    mode: Sequence[str]
    node: Sequence[str | None]
    invoke_ns: Sequence[int]
    staleness_ns: Sequence[int]
    offsets_behind: Sequence[int | None]
    bound_ns: Sequence[int]
    missed_write: Sequence[int | None]

    @classmethod
    def of(cls, reads: Iterable[ReadStaleness]) -> "StalenessColumns":
        rows = [
            (read.index, read.mode, read.node, read.invoke_ns, read.staleness_ns, read.offsets_behind, read.bound_ns,
             read.missed_write)
            for read in reads
        ]
        if not rows:
            return cls([], [], [], [], [], [], [], [])
        return cls(*(list(column) for column in zip(*rows)))

    def __len__(self) -> int:
        return len(self.index)


def _taken(positions: Sequence[int], column: Sequence[Any]) -> Sequence[Any]:
    """``column``'s values at ``positions`` (itemgetter: one C call)."""
    if len(positions) == 1:
        return (column[positions[0]],)
    return itemgetter(*positions)(column)


def _group_figures(positions: Sequence[int], reads: StalenessColumns) -> dict[str, Any]:
    """The figures of one group of reads (``positions`` in ``reads``, at
    least one). The worst read is the stalest, the earliest invoked (lowest
    index) among equals."""
    values = _taken(positions, reads.staleness_ns)
    ordered = sorted(values)
    count = len(ordered)
    worst_ns = ordered[-1]
    bounds = _taken(positions, reads.bound_ns)
    if min(bounds) == max(bounds):  # one mode per group: one bound
        beyond_bound = count - bisect_right(ordered, bounds[0])
    else:
        beyond_bound = sum(1 for value, bound in zip(values, bounds) if value > bound)
    offsets = [offset for offset in _taken(positions, reads.offsets_behind) if offset is not None]
    worst_read = worst_missed_write = None
    if worst_ns > 0:
        tied, start = [], 0
        for _ in range(values.count(worst_ns)):
            start = values.index(worst_ns, start) + 1
            tied.append(positions[start - 1])
        worst = min(tied, key=reads.index.__getitem__)
        worst_read, worst_missed_write = reads.index[worst], reads.missed_write[worst]
    figures: dict[str, Any] = {
        "reads": count,
        "missed_writes": count - bisect_right(ordered, 0),
        "beyond_bound": beyond_bound,
        "max_ms": _ms(worst_ns),
    }
    figures.update({f"p{percent}_ms": _ms(_percentile(ordered, percent)) for percent in PERCENTILES})
    figures["max_offsets_behind"] = max(offsets) if offsets else None
    figures["histogram"] = _histogram(ordered)
    figures["worst_read"] = worst_read
    figures["worst_missed_write"] = worst_missed_write
    return figures


def _by_window(
    by_mode: Mapping[str, list[int]], invoke_ns: Sequence[int], windows: Sequence[FaultWindow]
) -> dict[tuple[int, str], list[int]]:
    """Per (window's position in ``windows``, mode), the reads invoked in it
    (closed intervals; a read in several windows is in each); position -1:
    the reads invoked in none."""
    spans = [window.span for window in windows]
    # The windows' union as sorted disjoint intervals: a read is in no
    # window when bisection finds it outside the interval starting before it.
    union: list[list[float]] = []
    for start, end in sorted(spans):
        if union and start <= union[-1][1]:
            union[-1][1] = max(union[-1][1], end)
        else:
            union.append([start, end])
    union_starts = [start for start, _ in union]
    union_ends = [end for _, end in union]
    groups: dict[tuple[int, str], list[int]] = {}
    for mode, positions in by_mode.items():
        for number, (start, end) in enumerate(spans):
            inside = [position for position in positions if start <= invoke_ns[position] <= end]
            if inside:
                groups[(number, mode)] = inside
        outside = [
            position for position in positions
            if (at := bisect_right(union_starts, invoke_ns[position]) - 1) < 0 or invoke_ns[position] > union_ends[at]
        ]
        if outside:
            groups[(-1, mode)] = outside
    return groups


def summarize(
    reads: Iterable[ReadStaleness] | StalenessColumns, windows: Sequence[FaultWindow], meta: HistoryMeta
) -> dict[str, Any]:
    """The ``staleness`` section of a history's results: per read mode, per
    (mode, node) and per (fault window, mode), the number of reads, how many
    missed a write, how many missed one beyond the mode's bound, the worst
    and the percentiles of the staleness in ms, the largest lag in offsets,
    a histogram (:data:`HISTOGRAM_EDGES_MS`) and the worst read with the
    write it missed (invoke indexes); and each mode's bound (``bounds_ms``,
    from ``meta``). Groups are listed in a fixed order (mode, node, window
    start). The figures do not depend on the order of ``reads``."""
    columns = reads if isinstance(reads, StalenessColumns) else StalenessColumns.of(reads)
    by_node: dict[tuple[str, str | None], list[int]] = {}
    for position, group_key in enumerate(zip(columns.mode, columns.node)):
        group = by_node.get(group_key)
        if group is None:
            group = by_node[group_key] = []
        group.append(position)
    by_mode: dict[str, list[int]] = {}
    for (mode, _), positions in by_node.items():
        by_mode.setdefault(mode, []).extend(positions)
    by_window = _by_window(by_mode, columns.invoke_ns, windows)

    def mode_order(mode: str) -> tuple[int, str]:  # strictest first, as READ_MODES lists them
        return (READ_MODES.index(mode) if mode in READ_MODES else len(READ_MODES), mode)

    return {
        "reads": len(columns),
        "bounds_ms": {mode: _bound_ms(mode, meta) for mode in sorted(by_mode, key=mode_order)},
        "by_mode": [{"mode": mode, **_group_figures(by_mode[mode], columns)} for mode in sorted(by_mode, key=mode_order)],
        "by_node": [
            {"mode": mode, "node": node, **_group_figures(by_node[(mode, node)], columns)}
            for mode, node in sorted(by_node, key=lambda pair: (mode_order(pair[0]), pair[1] is None, pair[1] or ""))
        ],
        "by_window": [
            {
                "window": windows[position].name if position >= 0 else NO_FAULT,
                "start_ns": windows[position].start_ns if position >= 0 else None,
                "end_ns": windows[position].end_ns if position >= 0 else None,
                "mode": mode,
                **_group_figures(by_window[(position, mode)], columns),
            }
            for position, mode in sorted(by_window, key=lambda pair: (pair[0] < 0, pair[0], mode_order(pair[1])))
        ],
    }
