"""The read contract the simulator holds its clients' reads to
(``../shared/design.md``, "Consistency contract"), judged by the checker's
own stale-read check: the reference definition in ``jepsen_like.checker``
that the Spark job is held to. The simulator has no check of its own, so a
verdict here (a scenario's, the replay page's, the playground's) is the one
the checker would give on the same history.

The simulator's broker clients name their operations as Kafka does
(``create_topic``, ``list_topics``, ...); the checker's ``metadata`` model
judges reads and writes of a key. :func:`checker_events` says which is which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jepsen_like.checker import HistoryMeta, stale_reads_of_events

#: Operations that write a version (``offset``: the last record written) and
#: that read one (``offset``: the last record reflected), per key.
WRITE_OPS = frozenset({"write", "create_topic"})
READ_OPS = frozenset({"read", "cluster_metadata", "list_topics", "describe_topic", "find_leader"})


def checker_events(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The simulator's history in the checker's vocabulary: every write-like
    operation a ``write``, every read-like one a ``read`` (the rest as is)."""
    events = []
    for event in history:
        f = event["f"]
        renamed = "write" if f in WRITE_OPS else "read" if f in READ_OPS else f
        events.append(event if renamed == f else {**event, "f": renamed})
    return events


def find_stale_reads(
    history: Sequence[Mapping[str, Any]], leader_local_bound_ms: float, broker_bound_ms: float | None = None
) -> list[dict[str, Any]]:
    """Reads that broke their contract, by the checker's stale-read check
    (``jepsen_like.checker.stale_reads_of_events``): a linearizable read is
    stale if it misses a write acknowledged before it was invoked; a
    leader-local read, one acknowledged more than ``leader_local_bound_ms``
    before; a read from a broker (mode ``broker``), one acknowledged more
    than ``broker_bound_ms`` before. "Misses" compares versions (the offset
    a read reflects against the write's), or values where a read has none.

    One summary per stale read, in the order the reads were invoked:
    process, node, mode, invoked_ms, value, offset_seen (-1: none) and
    missed_offset (the witness write's).

    Raises ``ValueError`` (the checker's HistoryFormatError) for a broker
    read when ``broker_bound_ms`` is None, or for a malformed history.
    """
    # The checker's leader-local bound is check_quorum_factor x fetch_timeout_ms;
    # the caller has already multiplied them.
    meta = HistoryMeta(model="metadata", check_quorum_factor=1.0, fetch_timeout_ms=leader_local_bound_ms, staleness_bound_ms=broker_bound_ms)
    by_index = {event["index"]: event for event in history}
    stale = []
    for witness in stale_reads_of_events(checker_events(history), meta, name="simulation"):
        invoke = by_index[witness["read"]["index"]]
        done = by_index[witness["read"]["complete_index"]]
        stale.append(
            {
                "process": done["process"],
                "node": done.get("node"),
                "mode": invoke.get("mode"),
                "invoked_ms": invoke["time"] / 1e6,
                "value": done["value"],
                "offset_seen": done.get("offset", -1),
                "missed_offset": witness["missed_write"].get("offset"),
            }
        )
    return stale
