"""The persistence applier: carries out one core output's persistence work
in the order the output contract requires (``quorum/_output.py``), on any
durable target. The runtime's storage (``quorum.storage.FileStorage`` and
``MemoryStorage``) and the simulator's disk (``jepsen_like.sim.SimDisk``)
both go through it, so the order the simulator proves is the order the
runtime writes in.

Sans-IO itself: it only calls the target's methods (and imports neither
files nor locks), so the simulator imports it freely.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ._output import Output
from ._types import ElectionState, Entry, SnapshotId


class DurableTarget(Protocol):
    """What the applier needs of a disk. Each call is durable on return,
    except ``append``, which the caller makes durable (one flush for a
    whole batch of outputs: group commit) before it acknowledges anything."""

    def write_election_state(self, state: ElectionState) -> None: ...

    def write_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None: ...

    def reset_to_snapshot(self, snapshot_id: SnapshotId) -> None: ...

    def truncate_to(self, end_offset: int) -> None: ...

    def append(self, entries: Sequence[Entry]) -> None: ...

    def delete_before(self, offset: int) -> None: ...


def apply_output(output: Output, target: DurableTarget) -> None:
    """Carry out ``output``'s persistence work on ``target``: election state
    (a vote is durable before anything that depends on it), snapshot (and,
    for a snapshot installed from the leader, the log restarted after it:
    KIP-630), truncation of a diverging suffix, append, then deletion of
    records behind the snapshot. Raises what ``target`` raises (a
    ``ValueError`` for an output that breaks the contract, an ``OSError``
    from a disk); the caller must then acknowledge nothing of it."""
    if output.election_state is not None:
        target.write_election_state(output.election_state)
    if output.snapshot is not None:
        snapshot_id, data = output.snapshot
        target.write_snapshot(snapshot_id, data)
        if output.reset_log:
            target.reset_to_snapshot(snapshot_id)
    if output.truncate_to is not None:
        target.truncate_to(output.truncate_to)
    if output.append:
        target.append(output.append)
    if output.delete_before is not None:
        target.delete_before(output.delete_before)
