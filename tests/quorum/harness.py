"""A scripted, deterministic driver for a few ``QuorumNode``s.

The tests of the core's rules need to decide exactly which message arrives,
which is lost, whose clock moves and when a disk write completes. ``Cluster``
gives them that, and honours the output contract of ``quorum/_output.py``
exactly:

1. persistence first: each node has an in-memory "disk" (election state, a
   ``MemoryLog``, a snapshot) that an output's persistence work is applied to,
   in the contract's order; then ``node.persisted(seq)`` is called and its
   output handled;
2. only then are the output's ``messages`` put on the network, never before
   the persistence of every earlier output of the same node (``hold_disk``
   makes a node's disk stall, and everything behind it waits);
3. ``early_messages`` (the leader's Fetch responses, which depend on nothing
   durable) go on the network at once; committed records, reads, snapshot
   loads and role changes are recorded at once.

The network is a list of messages in flight. Nothing is delivered unless a
test says so (``deliver``, ``deliver_all``, ``run``); ``drop`` loses messages,
``inject`` hands any message (a duplicate, a stale or forged one) to its
receiver. Every delivered message is written to ``transcript`` as rendered by
``quorum.describe_message``.

An ``observer`` (the transcript runner of ``test_transcripts.py``) is told of
everything as it happens, in order: ``observer(kind, node_id, item)`` with
kind ``"output"`` (an ``Output`` was handed back), ``"persist"`` (an output's
persistence became durable), ``"send"`` (messages went on the network),
``"deliver"`` (a message reached ``node_id``) and ``"lost"`` (a message
across a cut link, or to a node that is down, vanished).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from jepsen_like.sim import SimDisk
from quorum import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    ElectionState,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Entry,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    MemoryLog,
    Message,
    Output,
    QuorumConfig,
    QuorumNode,
    ReadFailed,
    ReadReady,
    RecordKind,
    RepairState,
    Role,
    RoleChange,
    Snapshot,
    SnapshotId,
    VoteRequest,
    VoteResponse,
    describe_message,
)
from quorum._types import EPOCH_MAX

# The defaults of QuorumConfig, in ticks of 10 ms.
TICK_MS = 10
ELECTION_TIMEOUT_TICKS = 100
FETCH_TIMEOUT_TICKS = 200
REQUEST_TIMEOUT_TICKS = 100
FETCH_MAX_WAIT_TICKS = 50
CHECK_QUORUM_TICKS = 300  # check_quorum_factor 1.5 * fetch timeout

Matcher = Callable[[Message], bool]
Observer = Callable[[str, int, Any], None]
ELECTION_MESSAGES = (VoteRequest, VoteResponse, BeginQuorumEpochRequest, BeginQuorumEpochResponse)


def make_config(node_id: int, voters: Sequence[int], **overrides: Any) -> QuorumConfig:
    return QuorumConfig(node_id=node_id, voters=tuple(voters), tick_ms=TICK_MS, **overrides)


def record(offset: int, epoch: int, data: bytes | None = None, kind: RecordKind = RecordKind.DATA) -> Entry:
    """One log record; its payload names its position unless given."""
    return Entry(offset, epoch, kind, data if data is not None else f"e{epoch}@{offset}".encode())


def records(*epochs: int, start: int = 0) -> list[Entry]:
    """A log written by the given epochs, one record each: ``records(1, 1, 2)``."""
    return [record(start + index, epoch) for index, epoch in enumerate(epochs)]


def messages_of(output: Output) -> list[Message]:
    """Every message an output carries, early ones first."""
    return [*output.early_messages, *output.messages]


def matching(
    kind: type | tuple[type, ...] | None = None,
    *,
    src: int | None = None,
    dst: int | None = None,
    where: Matcher | None = None,
) -> Matcher:
    """A message filter: every given criterion must hold."""

    def matches(message: Message) -> bool:
        return (
            (kind is None or isinstance(message, kind))
            and (src is None or message.src == src)
            and (dst is None or message.dst == dst)
            and (where is None or where(message))
        )

    return matches


# The simulator's disk: one implementation of the persistence contract.
Disk = SimDisk


@dataclass(slots=True)
class Replica:
    """One process: its core, its disk, its write pipeline and what it told
    the application."""

    node_id: int
    config: QuorumConfig
    disk: Disk
    node: QuorumNode | None = None
    incarnation: int = 0
    pipeline: deque[Output] = field(default_factory=deque)
    disk_held: bool = False
    # While set, every write fails with this errno name (``fail_disk``).
    disk_failure: str | None = None
    pumping: bool = False
    outputs: list[Output] = field(default_factory=list)
    committed: list[Entry] = field(default_factory=list)
    reads: list[ReadReady | ReadFailed] = field(default_factory=list)
    events: list[RoleChange] = field(default_factory=list)
    loaded_snapshots: list[tuple[SnapshotId, bytes]] = field(default_factory=list)
    high_watermarks: list[int] = field(default_factory=list)  # after each output

    @property
    def up(self) -> bool:
        return self.node is not None


class Cluster:
    """Voters ``1..voters`` plus the given observer ids, all started fresh
    (or from ``disks``). ``overrides`` go to every node's ``QuorumConfig``."""

    def __init__(
        self,
        voters: int = 3,
        *,
        observers: Sequence[int] = (),
        seed: int = 0,
        disks: dict[int, Disk] | None = None,
        down: Sequence[int] = (),
        observer: Observer | None = None,
        **overrides: Any,
    ) -> None:
        self.seed = seed
        self.observer = observer
        self.voter_ids = tuple(range(1, voters + 1))
        self.in_flight: list[Message] = []
        self.transcript: list[str] = []
        self._blocked: set[tuple[int, int]] = set()
        self.replicas: dict[int, Replica] = {}
        for node_id in (*self.voter_ids, *observers):
            disk = (disks or {}).get(node_id) or Disk()
            self.replicas[node_id] = Replica(node_id, make_config(node_id, self.voter_ids, **overrides), disk)
        for node_id in self.replicas:
            if node_id not in down:
                self.restart(node_id)

    # -- views -------------------------------------------------------------------

    def node(self, node_id: int) -> QuorumNode:
        node = self.replicas[node_id].node
        assert node is not None, f"node {node_id} is down"
        return node

    def replica(self, node_id: int) -> Replica:
        return self.replicas[node_id]

    def role(self, node_id: int) -> Role:
        return self.node(node_id).role

    def live(self) -> list[int]:
        return [node_id for node_id, replica in self.replicas.items() if replica.up]

    def leaders(self) -> list[int]:
        return [node_id for node_id in self.live() if self.node(node_id).is_leader]

    def log_entries(self, node_id: int) -> list[Entry]:
        log = self.node(node_id).log
        return log.slice(log.start_offset)

    def committed_data(self, node_id: int) -> list[bytes]:
        """Payloads of the DATA records ``node_id`` reported committed."""
        return [entry.data for entry in self.replicas[node_id].committed if entry.kind is RecordKind.DATA]

    def events(self, node_id: int, role: Role | None = None) -> list[RoleChange]:
        return [event for event in self.replicas[node_id].events if role is None or event.role is role]

    def pending(self, kind: Any = None, *, src: int | None = None, dst: int | None = None, where: Matcher | None = None) -> list[Message]:
        """Messages in flight that match."""
        wanted = matching(kind, src=src, dst=dst, where=where)
        return [message for message in self.in_flight if wanted(message)]

    def sent(self, node_id: int, kind: Any = None) -> list[Message]:
        """Every message ``node_id``'s outputs carried, sent or not yet."""
        wanted = matching(kind)
        outputs = self.replicas[node_id].outputs
        return [m for output in outputs for m in messages_of(output) if wanted(m)]

    def last_output(self, node_id: int) -> Output:
        return self.replicas[node_id].outputs[-1]

    def mark(self) -> int:
        """A position in the transcript, for ``transcript_since``."""
        return len(self.transcript)

    def transcript_since(self, mark: int) -> list[str]:
        return self.transcript[mark:]

    # -- the output contract -----------------------------------------------------

    def handle(self, node_id: int, output: Output) -> Output:
        """Act on one output of ``node_id`` as the contract says; returns it."""
        replica = self.replicas[node_id]
        replica.outputs.append(output)
        replica.events.extend(output.events)
        if output.snapshot_loaded is not None:
            replica.loaded_snapshots.append(output.snapshot_loaded)
        replica.committed.extend(output.committed)
        replica.reads.extend(output.reads)
        self._notify("output", node_id, output)
        self._send(node_id, output.early_messages)
        assert replica.node is not None
        replica.high_watermarks.append(replica.node.high_watermark)
        replica.pipeline.append(output)
        self._pump(replica)
        return output

    def _pump(self, replica: Replica) -> None:
        if replica.pumping:
            return  # the outer loop will reach what was just queued
        replica.pumping = True
        try:
            while replica.pipeline and not replica.disk_held and replica.node is not None:
                head = replica.pipeline[0]
                if head.has_persistence and replica.disk_failure is not None:
                    # The write fails: the output stays, with its messages,
                    # to be retried when the disk is repaired.
                    assert head.persist_seq is not None
                    self.handle(replica.node_id, replica.node.persist_failed(head.persist_seq, replica.disk_failure))
                    break
                replica.pipeline.popleft()
                if head.has_persistence:
                    assert head.persist_seq is not None
                    replica.disk.apply(head)
                    self._notify("persist", replica.node_id, head)
                    self.handle(replica.node_id, replica.node.persisted(head.persist_seq))
                self._send(replica.node_id, head.messages)
        finally:
            replica.pumping = False

    def _notify(self, kind: str, node_id: int, item: Any) -> None:
        if self.observer is not None:
            self.observer(kind, node_id, item)

    def _send(self, node_id: int, messages: list[Message]) -> None:
        if messages:
            self.in_flight.extend(messages)
            self._notify("send", node_id, messages)

    def hold_disk(self, node_id: int) -> None:
        """The disk of ``node_id`` stalls: no write completes, and no message
        of the stalled output or of any later one leaves."""
        self.replicas[node_id].disk_held = True

    def fail_disk(self, node_id: int, error: str = "ENOSPC") -> None:
        """Every write to the disk of ``node_id`` fails with ``error`` (the
        failed output is reported to the core and kept, and everything
        behind it waits) until ``repair_disk``."""
        replica = self.replicas[node_id]
        replica.disk_failure = error
        self._pump(replica)

    def repair_disk(self, node_id: int) -> None:
        """The disk takes writes again: the kept outputs are retried."""
        replica = self.replicas[node_id]
        replica.disk_failure = None
        self._pump(replica)

    def release_disk(self, node_id: int) -> None:
        replica = self.replicas[node_id]
        replica.disk_held = False
        self._pump(replica)

    # -- inputs -------------------------------------------------------------------

    def tick_once(self, node_id: int) -> Output:
        return self.handle(node_id, self.node(node_id).tick())

    def tick(self, *node_ids: int, times: int = 1) -> None:
        """Tick the given nodes (every live node if none) ``times`` times;
        deliver nothing."""
        for _ in range(times):
            for node_id in node_ids or self.live():
                self.tick_once(node_id)

    def tick_until(self, node_id: int, condition: Callable[[QuorumNode], bool], limit: int = 1000) -> int:
        """Tick ``node_id`` until ``condition(node)``; returns how many ticks."""
        for count in range(1, limit + 1):
            self.tick_once(node_id)
            if condition(self.node(node_id)):
                return count
        raise AssertionError(f"node {node_id} did not reach the condition in {limit} ticks")

    def run(self, ticks: int, *, nodes: Sequence[int] = ()) -> None:
        """``ticks`` rounds of: tick every live node (or ``nodes``) once,
        then deliver everything deliverable."""
        for _ in range(ticks):
            self.tick(*nodes)
            self.deliver_all()

    def run_until(self, condition: Callable[[], bool], limit: int = 2000) -> int:
        for count in range(1, limit + 1):
            self.run(1)
            if condition():
                return count
        raise AssertionError(f"condition not reached in {limit} rounds")

    def propose(self, node_id: int, *payloads: bytes) -> int:
        first, output = self.node(node_id).propose(list(payloads))
        self.handle(node_id, output)
        return first

    def read_index(self, node_id: int, read_id: Any) -> Output:
        return self.handle(node_id, self.node(node_id).read_index(read_id))

    def resign(self, node_id: int) -> Output:
        return self.handle(node_id, self.node(node_id).resign())

    def take_snapshot(self, node_id: int, end_offset: int | None = None, data: bytes | None = None) -> SnapshotId:
        """The state machine of ``node_id`` snapshots every record below
        ``end_offset`` (default: its high watermark)."""
        node = self.node(node_id)
        end = node.high_watermark if end_offset is None else end_offset
        epoch = node.log.epoch_at(end - 1)
        assert epoch is not None
        snapshot_id = SnapshotId(end, epoch)
        payload = data if data is not None else f"state below {end}".encode()
        self.handle(node_id, node.snapshot_taken(snapshot_id, payload))
        return snapshot_id

    # -- network -------------------------------------------------------------------

    def _take(self, wanted: Matcher) -> list[Message]:
        taken = [message for message in self.in_flight if wanted(message)]
        self.in_flight = [message for message in self.in_flight if not wanted(message)]
        return taken

    def deliver(self, kind: Any = None, *, src: int | None = None, dst: int | None = None, where: Matcher | None = None) -> list[Message]:
        """Deliver, in order, every message now in flight that matches (one
        pass: what they cause stays in flight). Messages across a blocked
        link or to a node that is down are lost. Returns those delivered."""
        delivered = []
        for message in self._take(matching(kind, src=src, dst=dst, where=where)):
            if self.replicas[message.dst].up and (message.src, message.dst) not in self._blocked:
                self.inject(message)
                delivered.append(message)
            else:
                self._notify("lost", message.dst, message)
        return delivered

    def deliver_all(self, kind: Any = None, *, src: int | None = None, dst: int | None = None, where: Matcher | None = None, limit: int = 10_000) -> int:
        """Deliver matching messages, and those they cause, until none is in
        flight. Returns how many were delivered."""
        count = 0
        while batch := self.deliver(kind, src=src, dst=dst, where=where):
            count += len(batch)
            if count > limit:
                raise AssertionError(f"still delivering after {limit} messages: a livelock?")
        return count

    def drop(self, kind: Any = None, *, src: int | None = None, dst: int | None = None, where: Matcher | None = None) -> list[Message]:
        """Lose every matching message in flight; returns them (a test may
        ``inject`` them later: a delayed, reordered or duplicated message)."""
        return self._take(matching(kind, src=src, dst=dst, where=where))

    def take_one(self, kind: Any = None, *, src: int | None = None, dst: int | None = None, where: Matcher | None = None) -> Message:
        """Remove from the network the one message in flight that matches."""
        taken = self.drop(kind, src=src, dst=dst, where=where)
        assert len(taken) == 1, f"expected one matching message in flight, found {taken}"
        return taken[0]

    def inject(self, message: Message) -> Output:
        """Hand ``message`` to its receiver now, whatever the network says."""
        self.transcript.append(describe_message(message))
        self._notify("deliver", message.dst, message)
        return self.handle(message.dst, self.node(message.dst).step(message))

    def cut(self, src: int, dst: int) -> None:
        """Lose every message from ``src`` to ``dst`` (one way)."""
        self._blocked.add((src, dst))

    def block(self, a: int, b: int) -> None:
        """Cut the link between ``a`` and ``b`` both ways."""
        self.cut(a, b)
        self.cut(b, a)

    def unblock(self, a: int, b: int) -> None:
        self._blocked -= {(a, b), (b, a)}

    def isolate(self, node_id: int) -> None:
        for other in self.replicas:
            if other != node_id:
                self.block(node_id, other)

    def heal(self) -> None:
        self._blocked.clear()

    # -- processes -----------------------------------------------------------------

    def crash(self, node_id: int) -> None:
        """kill -9: the core and every write not yet durable are gone; so are
        the messages waiting behind those writes."""
        replica = self.replicas[node_id]
        replica.node = None
        replica.pipeline.clear()
        replica.disk_held = False

    def restart(
        self, node_id: int, *, fetch_session: int | None = None, repairing: RepairState | None = None
    ) -> Output:
        """Start ``node_id`` from what its disk holds; returns its initial
        output. The fetch session defaults to the restart count (0 for the
        first process), as in the simulator. ``repairing``: it starts
        repairing a damaged log (see ``damage``)."""
        replica = self.replicas[node_id]
        assert replica.node is None, f"node {node_id} is already up"
        replica.incarnation += 1
        disk = replica.disk
        replica.node = QuorumNode(
            replica.config,
            rng=random.Random(self.seed * 1_000_003 + node_id * 101 + replica.incarnation),
            election_state=disk.election_state,
            log=disk.recovered_log(),
            snapshot=disk.snapshot,
            fetch_session=replica.incarnation - 1 if fetch_session is None else fetch_session,
            repairing=repairing,
        )
        return self.handle(node_id, replica.node.initial_output())

    def damage(self, node_id: int, damaged_from_offset: int) -> RepairState:
        """Storage of the crashed ``node_id`` finds its log damaged at
        ``damaged_from_offset`` and opens it for repair as FileStorage does:
        the valid prefix stays, the rest is moved aside; returns the repair
        marker's content to restart with."""
        replica = self.replicas[node_id]
        assert replica.node is None, f"node {node_id} must be down"
        disk = replica.disk
        state = RepairState(
            damaged_from_offset=damaged_from_offset,
            restart_epoch=disk.election_state.epoch if disk.election_state else 0,
            acknowledged_end=disk.log.end_offset,
        )
        disk.truncate_to(damaged_from_offset)
        return state

    # -- scripted stories -----------------------------------------------------------

    def stand(self, node_id: int) -> int:
        """Tick ``node_id`` alone until its election timer fires (it becomes
        Prospective, or Candidate without pre-vote); returns the ticks."""
        return self.tick_until(node_id, lambda node: node.role in (Role.PROSPECTIVE, Role.CANDIDATE, Role.LEADER))

    def time_out(self, *node_ids: int) -> None:
        """The given voters stop hearing from their leader and time out
        (their pre-votes are lost): they no longer vouch for it."""
        for node_id in node_ids:
            self.tick_until(node_id, lambda node: node.role not in (Role.FOLLOWER, Role.UNATTACHED))
            self.drop(src=node_id)

    def elect(self, node_id: int) -> None:
        """``node_id`` stands (no other node ticks) and everything is
        delivered: it wins, and replication settles (fetches parked)."""
        self.stand(node_id)
        self.deliver_all()
        node = self.node(node_id)
        assert node.is_leader, f"node {node_id} did not win: {node.role}"
        assert node.leader_has_committed_own_epoch, f"node {node_id} leads but has not committed its epoch"

    def win_election(self, node_id: int) -> None:
        """Like ``elect``, but only election messages are delivered: the
        followers' first Fetches are left in flight."""
        self.stand(node_id)
        self.deliver_all(ELECTION_MESSAGES)
        assert self.node(node_id).is_leader, f"node {node_id} did not win"


def fresh_node(node_id: int = 1, voters: Sequence[int] = (1, 2, 3), *, seed: int = 0, **overrides: Any) -> QuorumNode:
    """A lone core, for rules about one node's reaction to one input."""
    return QuorumNode(make_config(node_id, voters, **overrides), rng=random.Random(seed))


def cluster_with_node_in(role: Role, **overrides: Any) -> tuple[Cluster, int]:
    """A three-voter cluster after node 1 won epoch 1, where one node
    (returned) is in ``role`` and holds node 1's LEADER_CHANGE record
    (a candidate stands in epoch 2); nothing in flight."""
    if role is Role.CANDIDATE:
        overrides["pre_vote"] = False
    cluster = Cluster(3, **overrides)
    cluster.elect(1)
    if role is Role.LEADER:
        return cluster, 1
    if role is Role.FOLLOWER:
        return cluster, 2
    if role is Role.RESIGNED:
        cluster.resign(1)
        cluster.drop()
        return cluster, 1
    if role is Role.UNATTACHED:
        # The leader resigns; node 2 hears of it and forgets the leader.
        cluster.resign(1)
        cluster.deliver(dst=2)
        cluster.drop()
        return cluster, 2
    # Node 2 stops hearing from the leader and times out.
    cluster.tick_until(2, lambda node: node.role is role)
    cluster.drop()
    return cluster, 2


def outlive_leader_lease(cluster: Cluster, node_id: int) -> None:
    """Tick ``node_id`` alone for one minimum election timeout, delivering
    nothing: a follower's leader has then been silent long enough that the
    leader lease (Raft thesis §4.2.3) no longer holds, while its fetch
    timeout (twice as long) has not fired yet."""
    cluster.tick(node_id, times=ELECTION_TIMEOUT_TICKS)
    assert cluster.role(node_id) is Role.FOLLOWER


def leader_followed_by_an_observer_only() -> Cluster:
    """Voters 1..3 and observer 4, all following leader 1; then the links
    from node 1 to the other voters are cut: only the observer still fetches."""
    cluster = Cluster(3, observers=(4,))
    cluster.elect(1)
    cluster.tick(4)  # an observer fetches on its own clock
    cluster.deliver_all()
    assert cluster.node(4).leader_id == 1
    cluster.block(1, 2)
    cluster.block(1, 3)
    return cluster


def assert_committed_agree(cluster: Cluster) -> None:
    """Raft's State Machine Safety: no two nodes ever report different
    records committed at the same offset."""
    seen: dict[int, tuple[int, Entry]] = {}
    for node_id, replica in cluster.replicas.items():
        for entry in replica.committed:
            first = seen.setdefault(entry.offset, (node_id, entry))
            assert first[1] == entry, (
                f"offset {entry.offset}: node {first[0]} committed {first[1]}, node {node_id} committed {entry}"
            )


def messages_of_every_kind(src: int, dst: int, epoch: int, log_end: int) -> Iterator[Message]:
    """One or more messages of every kind a node can be sent, from ``src`` to
    ``dst`` in ``epoch`` (the receiver's log ending at ``log_end``), over a
    grid of the fields the rules read: leader ids, grants, request ids,
    offsets, errors. Every number fits what the wire and storage hold."""
    snapshot = SnapshotId(end_offset=1, epoch=1)
    yield BeginQuorumEpochRequest(src=src, dst=dst, epoch=epoch)
    yield BeginQuorumEpochResponse(src=src, dst=dst, epoch=epoch)
    for successors in ((), (dst,), (src, dst)):
        yield EndQuorumEpochRequest(src=src, dst=dst, epoch=epoch, preferred_successors=successors)
    yield EndQuorumEpochResponse(src=src, dst=dst, epoch=epoch)
    for pre_vote in (False, True):
        for last_epoch, end_offset in ((0, 0), (epoch, log_end + 5), (EPOCH_MAX, 10**6)):
            yield VoteRequest(src=src, dst=dst, epoch=epoch, last_epoch=last_epoch, end_offset=end_offset, pre_vote=pre_vote)
        for granted in (False, True):
            for leader_id in (None, src, dst):
                yield VoteResponse(src=src, dst=dst, epoch=epoch, granted=granted, pre_vote=pre_vote, leader_id=leader_id)
    for fetch_offset, last_fetched_epoch in ((0, 0), (log_end, epoch), (log_end + 3, epoch)):
        for request_id in (0, 1):
            yield FetchRequest(
                src=src, dst=dst, epoch=epoch, fetch_offset=fetch_offset, last_fetched_epoch=last_fetched_epoch,
                request_id=request_id,
            )
    for request_id in (1, 2):
        for leader_id in (None, src, dst):
            for high_watermark in (0, log_end + 10):
                for error in (ErrorCode.NONE, ErrorCode.NOT_LEADER, ErrorCode.FENCED_LEADER_EPOCH):
                    yield FetchResponse(
                        src=src, dst=dst, epoch=epoch, request_id=request_id, leader_id=leader_id,
                        high_watermark=high_watermark, error=error,
                    )
        yield FetchSnapshotRequest(src=src, dst=dst, epoch=epoch, snapshot_id=snapshot, position=0, request_id=request_id)
        yield FetchSnapshotResponse(
            src=src, dst=dst, epoch=epoch, request_id=request_id, leader_id=src, snapshot_id=snapshot, size=10, chunk=b"x"
        )
