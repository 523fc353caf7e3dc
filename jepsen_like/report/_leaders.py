"""Periods with two leaders at once, from who believed they led when.

Shared by the campaign report (role spans from node event logs) and the
simulator's replay (role segments from its recording). Raft allows two
nodes to believe they lead at once, each in its own epoch (the Raft
thesis, §3.4: at most one leader per term); the older one is a zombie until it hears of
the newer epoch, and with check quorum off it may serve stale reads all that
while. Two leaders claiming one epoch are a split brain, which the checker
flags; the band shows both.
"""

from __future__ import annotations

from typing import Any, Iterable, TypeVar

from ._load import node_order

Time = TypeVar("Time", int, float)


def concurrent_leaders(spans: Iterable[tuple[Any, Time, Time, Any]]) -> list[tuple[Time, Time, list[tuple[Any, Any]]]]:
    """The periods in which two or more nodes lead, from leader spans
    ``(node, start, end, epoch)`` (any time unit; empty spans are ignored).
    Each period is ``(start, end, [(node, epoch), ...])`` with the nodes in
    numeric order; a period ends where the set of leaders changes, and
    touching periods with the same leaders are merged. Ordered by start."""
    points: list[tuple[Any, int, Any, Any]] = []  # (time, -1 end / +1 start, node, epoch)
    for node, start, end, epoch in spans:
        if end > start:
            points.append((start, 1, node, epoch))
            points.append((end, -1, node, epoch))
    # Ends before starts at one instant: a hand-over is not an overlap.
    points.sort(key=lambda p: (p[0], p[1]))
    current: dict[Any, Any] = {}
    opened: list[list[Any]] = []  # [start, end or None, leaders]
    for time, step, node, epoch in points:
        if len(current) >= 2 and opened and opened[-1][1] is None:
            opened[-1][1] = time
        if step > 0:
            current[node] = epoch
        else:
            current.pop(node, None)
        if len(current) >= 2:
            opened.append([time, None, [(n, current[n]) for n in sorted(current, key=node_order)]])
    merged: list[tuple[Any, Any, list[tuple[Any, Any]]]] = []
    for start, end, leaders in opened:
        if end is None or end <= start:
            continue
        if merged and merged[-1][1] == start and merged[-1][2] == leaders:
            merged[-1] = (merged[-1][0], end, leaders)
        else:
            merged.append((start, end, leaders))
    return merged
