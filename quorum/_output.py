"""What the core hands back after every input: the IO contract.

Each call into a ``QuorumNode`` returns one ``Output``. The driver (the trio
runtime, or the simulator) must handle outputs **in the order they were
returned**, like this:

1. If ``persist_seq`` is set, make the persistence work durable, in this
   order: ``election_state`` (atomically), ``snapshot`` (and, when
   ``reset_log`` is set, discard the whole log: it now starts at that
   snapshot's end offset), ``truncate_to``, ``append``, ``delete_before``;
   fsync.
2. Only then send ``messages``, and call ``node.persisted(persist_seq)``
   (in either order) and handle the ``Output`` it returns. A message may depend on the persisted state
   (a granted vote on the recorded vote, Raft thesis §3.8; a Fetch offset on
   the records being on disk, since the offset *is* the acknowledgement), so
   it must never leave before the persistence of its own output **and of
   every earlier output** is durable.
3. ``early_messages``, ``committed``, ``snapshot_loaded``, ``reads`` and
   ``events`` may be acted on at once. Early messages depend on no
   persistence: they are the leader's Fetch responses, which may carry
   records the leader has not yet made durable (Raft thesis §10.2.1: the
   leader writes its log in parallel with replicating it; it counts itself
   toward the high watermark only once ``persisted`` says so). Committed
   records are already durable on a majority.

Nothing here is ever an instruction to read a clock or to sleep: timers are
the driver calling ``node.tick()`` every ``tick_ms``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ._messages import Message
from ._types import ElectionState, Entry, SnapshotId
from ._voters import VoterSet


class Role(enum.Enum):
    """KIP-595 / KIP-996 role names."""

    UNATTACHED = "unattached"  # knows an epoch, no leader yet
    PROSPECTIVE = "prospective"  # pre-vote round (KIP-996), epoch not bumped
    CANDIDATE = "candidate"  # standing in a new epoch
    LEADER = "leader"
    FOLLOWER = "follower"  # knows the leader of its epoch and fetches from it
    RESIGNED = "resigned"  # former leader of this epoch, handing over


@dataclass(frozen=True, slots=True)
class ReadReady:
    """A linearizable read may now be served from the state machine once it
    has applied every record below ``offset`` (ReadIndex, Raft thesis §6.4)."""

    read_id: Any
    offset: int


@dataclass(frozen=True, slots=True)
class ReadFailed:
    """A linearizable read cannot be served here: leadership was lost before
    it was confirmed. ``leader_id`` is a hint, possibly None."""

    read_id: Any
    leader_id: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class RoleChange:
    """An event for logs and node event logs: the node changed role or epoch."""

    tick: int
    node_id: int
    role: Role
    epoch: int
    leader_id: int | None
    reason: str


@dataclass(slots=True, init=False)
class Output:
    """Everything one input produced. See the module docstring for the order
    in which a driver must act on it."""

    persist_seq: int | None = None
    election_state: ElectionState | None = None
    snapshot: tuple[SnapshotId, bytes] | None = None
    reset_log: bool = False
    truncate_to: int | None = None
    append: list[Entry] = field(default_factory=list)
    delete_before: int | None = None
    messages: list[Message] = field(default_factory=list)
    early_messages: list[Message] = field(default_factory=list)
    committed: list[Entry] = field(default_factory=list)
    # The state machine must reset itself from this snapshot before applying
    # ``committed`` (a follower installed a snapshot fetched from its leader).
    snapshot_loaded: tuple[SnapshotId, bytes] | None = None
    reads: list[ReadReady | ReadFailed] = field(default_factory=list)
    events: list[RoleChange] = field(default_factory=list)
    # The voter set in force after this input, when the input changed it (a
    # VOTERS record appended or truncated, a snapshot installed; KIP-853).
    voters_changed: VoterSet | None = None

    # Written out rather than generated: the core builds one per input
    # (about eight per committed write), and the generated constructor's
    # default-factory calls made it a third dearer. A list argument left
    # out (or None) is a new empty list.
    def __init__(
        self,
        persist_seq: int | None = None,
        election_state: ElectionState | None = None,
        snapshot: tuple[SnapshotId, bytes] | None = None,
        reset_log: bool = False,
        truncate_to: int | None = None,
        append: list[Entry] | None = None,
        delete_before: int | None = None,
        messages: list[Message] | None = None,
        early_messages: list[Message] | None = None,
        committed: list[Entry] | None = None,
        snapshot_loaded: tuple[SnapshotId, bytes] | None = None,
        reads: list[ReadReady | ReadFailed] | None = None,
        events: list[RoleChange] | None = None,
        voters_changed: VoterSet | None = None,
    ) -> None:
        self.persist_seq = persist_seq
        self.election_state = election_state
        self.snapshot = snapshot
        self.reset_log = reset_log
        self.truncate_to = truncate_to
        self.append = [] if append is None else append
        self.delete_before = delete_before
        self.messages = [] if messages is None else messages
        self.early_messages = [] if early_messages is None else early_messages
        self.committed = [] if committed is None else committed
        self.snapshot_loaded = snapshot_loaded
        self.reads = [] if reads is None else reads
        self.events = [] if events is None else events
        self.voters_changed = voters_changed

    @property
    def has_persistence(self) -> bool:
        return (
            self.election_state is not None
            or self.snapshot is not None
            or self.truncate_to is not None
            or bool(self.append)
            or self.delete_before is not None
        )

    def __bool__(self) -> bool:
        # Every field tested here, not through ``has_persistence``: the
        # host asks this of every output (most are empty).
        return bool(
            self.append
            or self.messages
            or self.early_messages
            or self.committed
            or self.election_state is not None
            or self.snapshot is not None
            or self.truncate_to is not None
            or self.delete_before is not None
            or self.snapshot_loaded
            or self.reads
            or self.events
            or self.voters_changed is not None
        )


#: What the core returns for an input that produced nothing (a parked
#: Fetch, most ticks: about half the inputs of a write), shared rather than
#: built each time. Drivers only read outputs; the core changes only the
#: one it is still building.
NO_OUTPUT = Output()
