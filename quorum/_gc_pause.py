"""Pausing Python's cyclic garbage collector around one bounded batch.

Why: a batch of tens of thousands of records makes tens of thousands of
young container objects at once. A voter's Fetch answer carrying a fence
(10,001 records, docs/benchmarks.md) is decoded into one list per record,
then one ``Entry`` per record; the controller builds records and partition
states, and every voter's image applies them. Every 700 allocations the
collector's young-generation pass walks the young containers again, and
every tenth promotes what is alive at that moment into the old generation,
whose pass walks the whole heap once enough was promoted: measured, a
quarter of the controller's CPU to build the fence and of each quorum
node's CPU to commit it (docs/benchmarks.md, "The fence's per-record cost"
and "The fence, a fourth time"). Nothing a batch makes forms a reference
cycle (records, entries and partition states are tuples and slotted
objects of ints, strings and bytes), so reference counting frees all of
its garbage while the collector sleeps; the collector's counters keep
counting, and its next pass (of the young generation: no pass of an older
one was counted meanwhile) runs at the first allocation after the batch.
Callers pause it around one batch of bounded size only.

Used by hosts (the trio transport around one large frame) and by the
controller's cores; the quorum's core never calls it. Not thread-safe by
design: the collector is process-wide and the cores run on one thread, the
event loop's.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cyclic collector for the ``with`` block, then enable it
    again, unless it was disabled already (then leave it so). Raises nothing
    of its own."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
