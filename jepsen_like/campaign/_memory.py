"""The memory timeline of a campaign: ``memory.csv`` in the run directory.

A long run (issue 20: ``--duration 2h``) must stay within bounded memory,
and a single peak figure cannot show that: a harness that grows by a few
hundred bytes per operation and one that plateaus can end at the same
peak after 30 minutes. So while the workload runs, every ``interval_s``
the harness writes one row: the seconds since the workload started, the
operations invoked so far, its own resident set size, the blocks Python's
allocator holds (``sys.getallocatedblocks``: it grows with live Python
objects, while RSS also grows with allocator fragmentation, so the two
together say which kind of growth it is), and the summed resident set of
the node processes. ``growth_per_operation`` reads the slope back.
"""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import trio

COLUMNS = ("elapsed_s", "operations", "harness_rss_bytes", "python_blocks", "nodes_rss_bytes")

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes(pid: int | str = "self") -> int | None:
    """Resident set size of ``pid`` from ``/proc/<pid>/statm`` (None when
    the process is gone or there is no /proc)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


class MemoryTimeline:
    """Appends one row per sample to ``path`` (flushed each time, so a
    killed run keeps what it measured)."""

    def __init__(self, path: Path, operations: Callable[[], int], node_pids: Callable[[], Iterable[int]]) -> None:
        self.path = path
        self._operations = operations
        self._node_pids = node_pids
        self._file = open(path, "w", newline="")  # noqa: SIM115 - closed by close()
        self._writer = csv.writer(self._file)
        self._writer.writerow(COLUMNS)
        self._file.flush()

    def sample(self, elapsed_s: float) -> None:
        nodes = sum(rss or 0 for rss in (rss_bytes(pid) for pid in self._node_pids()))
        self._writer.writerow((f"{elapsed_s:.1f}", self._operations(), rss_bytes() or 0, sys.getallocatedblocks(), nodes))
        self._file.flush()

    async def run(self, started_s: float, interval_s: float = 10.0) -> None:
        """Sample now and every ``interval_s`` until cancelled."""
        while True:
            self.sample(trio.current_time() - started_s)
            await trio.sleep(interval_s)

    def close(self) -> None:
        self._file.close()


#: Runs with fewer samples than this (10 minutes at one per 10 s) get no
#: growth figure: their rows are mostly start-up (the first Parquet chunk,
#: the first TLS connections), and a slope fitted to them reads as a leak.
FIT_MIN_SAMPLES = 60


def growth_per_operation(
    path: Path, skip_fraction: float = 0.25, min_samples: int = FIT_MIN_SAMPLES
) -> tuple[float, float] | None:
    """The harness's RSS and Python-block growth per operation, fitted by
    least squares over the rows after the first ``skip_fraction`` of the
    run (start-up and warm caches are not growth). None with fewer than
    ``min_samples`` rows in all, no operations in the fitted ones, or a
    file it cannot read."""
    try:
        with open(path, newline="") as file:
            rows = [(int(row["operations"]), int(row["harness_rss_bytes"]), int(row["python_blocks"])) for row in csv.DictReader(file)]
    except (OSError, UnicodeDecodeError, csv.Error, KeyError, TypeError, ValueError):
        # A damaged file (a disk fault, a hand edit): no figure, rather than
        # losing the run's verdict at its very end.
        return None
    if len(rows) < max(min_samples, 3):
        return None
    rows = rows[int(len(rows) * skip_fraction) :]
    operations = [row[0] for row in rows]
    mean_operations = sum(operations) / len(operations)
    spread = sum((value - mean_operations) ** 2 for value in operations)
    if spread == 0:
        return None

    def slope(values: list[int]) -> float:
        mean = sum(values) / len(values)
        return sum((x - mean_operations) * (y - mean) for x, y in zip(operations, values, strict=True)) / spread

    return slope([row[1] for row in rows]), slope([row[2] for row in rows])
