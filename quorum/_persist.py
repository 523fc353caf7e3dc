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

from collections.abc import Iterable, Sequence
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


def apply_outputs(outputs: Iterable[Output], target: DurableTarget) -> None:
    """``apply_output`` for each of ``outputs`` in order, except that the
    records of consecutive outputs whose only persistence work is an append
    go to ``target`` in one ``append`` call: a leader's group commit of
    many pipelined proposals (one output each) then costs one write to the
    log instead of one per proposal. The result on ``target`` is the same
    (appends of contiguous records compose; nothing else lies between them).
    Raises what ``apply_output`` raises; after an ``OSError`` the target
    holds a prefix of the work, as it would one output at a time."""
    runs: list[list[Entry]] = []
    for output in outputs:
        if (
            output.append
            and output.election_state is None
            and output.snapshot is None
            and output.truncate_to is None
            and output.delete_before is None
        ):
            runs.append(output.append)
            continue
        if not output.has_persistence:
            continue  # nothing to do: the run of appends goes on
        if runs:
            _append_runs(runs, target)
            runs = []
        apply_output(output, target)
    if runs:
        _append_runs(runs, target)


def _append_runs(runs: list[list[Entry]], target: DurableTarget) -> None:
    target.append(runs[0] if len(runs) == 1 else [entry for run in runs for entry in run])
