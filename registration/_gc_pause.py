"""Pausing Python's cyclic garbage collector around one bounded batch.

Why: fencing a broker that leads 10,000 partitions builds, on the
controller, and applies, on every voter, tens of thousands of young objects
(records, partition states, the copy-on-write copies of two 10,000-key index
sets). Every 700 allocations the collector's young-generation pass walks the
young containers again, those big sets included: measured, about a quarter
of the CPU of building the batch and a tenth of a voter's apply
(docs/benchmarks.md, "The fence's per-record cost"). Nothing a batch makes
forms a reference cycle (records and partition states are tuples and
slotted objects of ints, strings and tuples), so reference counting frees
all of its garbage while the collector sleeps; the collector's counters
keep counting, and its next pass runs at the first allocation after the
batch. Callers pause it around one batch of bounded size only.

Not thread-safe by design: the collector is process-wide and the cores run
on one thread, the event loop's (the runtime writes its log there too).
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
