"""The deterministic simulator: the real quorum cores over a simulated
network and disk, driven by one seed.

Events are ordered by (virtual time in microseconds, sequence number); every
random choice comes from RNGs derived from the seed, and nothing iterates a
set or dict whose order could vary, so a seed replays exactly.

Each node is a ``quorum.ReplicaHost`` — the very host the trio runtime
drives — plugged into a simulated network and disk: the simulator keeps
only virtual time, the network model and disk latency. It honours the
core's output contract (``quorum/_output.py``): outputs are handled in
order, persistence goes to a simulated disk that takes time, and messages
leave only once everything before them is durable. A crash loses whatever
the disk had not finished writing, and the disk may fail writes for a
while (ENOSPC, EIO: ``Simulation.fail_disk``, ``SimOptions.disk_fault_rate``),
which the host must survive as a condition (docs/storage.md, "Disk errors").
"""

from __future__ import annotations

import heapq
import json
import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from jepsen_like import HarnessInvariantError
from quorum import (
    AutoJoin,
    AutoJoinAction,
    ElectionCopy,
    ElectionState,
    Entry,
    ErrorCode,
    LeaderApplication,
    MemoryLog,
    Message,
    NotLeaderError,
    Output,
    ReconfigurationError,
    ProposalLostError,
    QuorumConfig,
    QuorumNode,
    RepairState,
    ReplicaHost,
    Role,
    RoleChange,
    ServiceClass,
    RecordKind,
    Snapshot,
    SnapshotId,
    Voter,
    VoteRequest,
    VoterSet,
    UndecidableElectionStateError,
    apply_output,
    choose_election_copy,
    describe_message,
    rolled_back_by_log,
    service_class,
    majorities_overlap,
)

from ._network import LinkFaults, Network

US_PER_MS = 1000
# A host retries a failed disk write after this long (the runtime backs off
# exponentially; the simulator keeps it fixed, drawing nothing).
DISK_RETRY_MS = 50


class InvariantViolation(Exception):
    """A safety property of the quorum was broken during a simulated run."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(slots=True)
class SimOptions:
    """Everything a run draws or is told; printed with the seed."""

    voters: int = 3
    check_quorum: bool = True
    pre_vote: bool = True
    fast_failover: bool = True
    # QuorumConfig.unreachable_leader_wait_ms; None: its default (a quarter
    # of the election timeout). Regression seeds found when the wait was a
    # whole election timeout replay as found with it set to that.
    unreachable_leader_wait_ms: int | None = None
    # QuorumConfig.observers_answered_on_commit (issue 21). Regression
    # seeds found before it replay as found with it off.
    observers_answered_on_commit: bool = True
    tick_ms: int = 10
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    check_quorum_factor: float = 1.5
    disk_latency_min_ms: float = 0.2
    disk_latency_max_ms: float = 1.0
    client_timeout_ms: int = 5000
    faults: LinkFaults = field(default_factory=LinkFaults)
    snapshot_every_records: int = 0  # 0: never
    # Per disk write, the chance that the node's disk starts failing every
    # write (ENOSPC or EIO, drawn) for a window of the given length. 0: the
    # disk never fails on its own (scenarios may still call ``fail_disk``).
    disk_fault_rate: float = 0.0
    disk_fault_min_ms: float = 200.0
    disk_fault_max_ms: float = 3000.0
    # The chance that a crash also damages the crashed node's durable log
    # (a flipped bit in a sealed record; issue 14): 0 never.
    disk_damage_rate: float = 0.0
    # The chance that a crash also rolls one copy of the crashed node's
    # election state back to an older valid one (issue 14): 0 never.
    election_rollback_rate: float = 0.0
    # A voter's service time per input it reads from the network (issue 15
    # part 4). 0, the default: every input is served the instant it arrives,
    # so no flood can delay another input. Set, a voter serves one input at
    # a time, a quorum message taking ``service_quorum_us`` and anything
    # else (a client or controller request) ``service_client_us``, in the
    # order ``quorum.service_class`` gives (the trio runtime's rule: voters'
    # quorum messages, then brokers', then client requests);
    # ``service_priority`` off serves in arrival order (test-only: it shows
    # what the rule buys).
    service_quorum_us: int = 0
    service_client_us: int = 0
    service_priority: bool = True
    # Dynamic voters (KIP-853): ``voters`` is the bootstrap set, and
    # ``spare_nodes`` more nodes start as observers that may be added.
    # ``reconfigure``: the random scenario's nemesis also changes voters.
    dynamic_voters: bool = False
    spare_nodes: int = 0
    reconfigure: bool = False
    # KIP-853 auto-join on every node (``quorum.AutoJoin``, the trio node's
    # ``--auto-join``): each asks the leader to add its disk once caught up,
    # never again once that disk was a voter. Dynamic voters only.
    auto_join: bool = False
    # A static voter set that gets upgraded to dynamic voters (issue 17):
    # the nodes have directory ids (a static ``kraft-quorum format`` writes
    # one too) and ``spare_nodes`` more start as observers; the scenario, or
    # the random scenario's membership nemesis, upgrades the set with the
    # leader's ``upgrade_voters`` (the path ``kraft-quorum upgrade-voters``
    # takes) before any other change. Not with ``dynamic_voters``.
    migrate_voters: bool = False
    # Test-only, with ``migrate_voters``: a disk wiped after the upgrade is
    # formatted as the static cluster's disks were (no ``--initial-voters``),
    # the procedure docs/operations.md gave first. The new, empty disk is
    # then a voter of the static set in its own eyes, and with a node that
    # missed the upgrade it makes a majority of that set (sweep seeds 6521:
    # two leaders in one epoch; 6954: a leader without committed records).
    # Off, such a disk is formatted to join (``--join --initial-voters``
    # naming the committed voter set): an observer until added.
    static_format_after_upgrade: bool = False
    # An observer of the run, not an option of it (never in ``describe()``):
    # the visual replay's ``Recording`` (``_recorder.py``). None: no cost.
    recorder: Any = None

    @property
    def voters_may_change(self) -> bool:
        """Dynamic voters, from the start or after the upgrade: the
        simulation checks votes and voter sets, and counts majorities in
        the voter sets of the log."""
        return self.dynamic_voters or self.migrate_voters

    def quorum_config(self, node_id: int, directory_id: str | None = None) -> QuorumConfig:
        dynamic: dict[str, Any] = {}
        if self.dynamic_voters:
            bootstrap = tuple(Voter(voter, disk_directory_id(voter, 0)) for voter in range(1, self.voters + 1))
            dynamic = {"bootstrap_voters": bootstrap, "directory_id": directory_id}
        elif self.migrate_voters:
            # Static voters; the directory id is what each Fetch carries,
            # from which the leader learns the disks it writes in the set.
            dynamic = {"directory_id": directory_id}
        return QuorumConfig(
            node_id=node_id,
            voters=tuple(range(1, self.voters + 1)),
            **dynamic,
            tick_ms=self.tick_ms,
            election_timeout_ms=self.election_timeout_ms,
            fetch_timeout_ms=self.fetch_timeout_ms,
            check_quorum=self.check_quorum,
            check_quorum_factor=self.check_quorum_factor,
            pre_vote=self.pre_vote,
            fast_failover=self.fast_failover,
            unreachable_leader_wait_ms=self.unreachable_leader_wait_ms,
            observers_answered_on_commit=self.observers_answered_on_commit,
            snapshot_retained_records=50,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "voters": self.voters,
            "check_quorum": self.check_quorum,
            "pre_vote": self.pre_vote,
            "fast_failover": self.fast_failover,
            "tick_ms": self.tick_ms,
            "election_timeout_ms": self.election_timeout_ms,
            "fetch_timeout_ms": self.fetch_timeout_ms,
            "check_quorum_factor": self.check_quorum_factor,
            "drop_rate": self.faults.drop_rate,
            "duplicate_rate": self.faults.duplicate_rate,
            "reorder_rate": self.faults.reorder_rate,
            "delay_ms": [self.faults.delay_min_ms, self.faults.delay_max_ms],
            "snapshot_every_records": self.snapshot_every_records,
            "disk_fault_rate": self.disk_fault_rate,
            # Only when on, so that the options of runs without damage read
            # as they always did.
            **({"disk_damage_rate": self.disk_damage_rate} if self.disk_damage_rate else {}),
            **({"election_rollback_rate": self.election_rollback_rate} if self.election_rollback_rate else {}),
            **(
                {"unreachable_leader_wait_ms": self.unreachable_leader_wait_ms}
                if self.unreachable_leader_wait_ms is not None
                else {}
            ),
            **({} if self.observers_answered_on_commit else {"observers_answered_on_commit": False}),
            # The same for the service model.
            **(
                {
                    "service_quorum_us": self.service_quorum_us,
                    "service_client_us": self.service_client_us,
                    "service_priority": self.service_priority,
                }
                if self.models_service
                else {}
            ),
            # Likewise only for a cluster with dynamic voters.
            **(
                {"dynamic_voters": True, "spare_nodes": self.spare_nodes, "reconfigure": self.reconfigure}
                if self.dynamic_voters
                else {}
            ),
            **(
                {"migrate_voters": True, "spare_nodes": self.spare_nodes, "reconfigure": self.reconfigure}
                if self.migrate_voters
                else {}
            ),
            # And auto-join only when on.
            **({"auto_join": True} if self.auto_join else {}),
        }

    @property
    def models_service(self) -> bool:
        """Whether voters take time to serve what they read."""
        return self.service_quorum_us > 0 or self.service_client_us > 0


def disk_directory_id(node_id: int, generation: int) -> str:
    """The directory id of ``node_id``'s disk after ``generation`` wipes
    (what ``kraft-quorum format`` would draw at random; here, from the
    position, so that a seed replays)."""
    return f"d{node_id}-{generation}"


# How many earlier copies of the election state a SimDisk keeps to roll back to.
ELECTION_HISTORY_MAX = 8


class SimDisk:
    """A node's durable state: what survives a crash. The simulator's and
    the rule tests' (tests/quorum/harness.py) disk alike."""

    def __init__(
        self,
        election_state: ElectionState | None = None,
        entries: Iterable[Entry] = (),
        snapshot: Snapshot | None = None,
    ) -> None:
        # The election state is kept twice, as FileStorage keeps it
        # (quorum-state.json and its witness, each with a generation that
        # grows at every write): ``election_state`` / ``election_generation``
        # are the primary, ``election_witness`` the witness.
        # ``election_history``: the copies written before (the latest
        # ``ELECTION_HISTORY_MAX``), which ``roll_back_election_copy`` restores.
        self.election_state = election_state
        self.election_generation = 0 if election_state is None else 1
        self.election_witness: ElectionCopy | None = None if election_state is None else ElectionCopy(1, election_state)
        self.election_history: list[ElectionCopy] = []
        self.snapshot = snapshot
        self.log = MemoryLog(snapshot.snapshot_id if snapshot else None, entries)
        self.writes = 0
        # A failure window: every write before ``failing_until_us`` fails
        # with ``failure`` (an errno name). A failed write leaves the disk at
        # its last durable point: the model of a host that, after a failed
        # write or fsync, trusts nothing it wrote since its last successful
        # fsync (fsyncgate) and goes back to that point before retrying.
        self.failure: str | None = None
        self.failing_until_us = 0
        self.failed_writes = 0
        # A failed write may have reached the disk in part before it failed
        # (a torn write: its election state, its truncation and the first
        # records of its append). ``durable_end``: the log end before it,
        # where the next attempt first returns to, as the runtime's
        # ``return_to_durable_point`` does; None when nothing is torn. A
        # crash before that attempt leaves the torn part on the disk, as
        # unsynced writes may survive a crash.
        self.durable_end: int | None = None
        self.torn_writes = 0
        # Storage faults (issue 14). ``damaged_from``: the first offset of
        # the durable log a flipped bit made unreadable, found at the next
        # start (``recover``). ``repair``: the durable repair marker, as
        # FileStorage.open(repair_damage=True) writes it.
        self.damaged_from: int | None = None
        self.repair: RepairState | None = None
        self.election_state_lost = False
        # The directory id ``format`` gave this disk (dynamic voters only).
        self.directory_id: str | None = None
        # The initial voters a ``format --join --initial-voters`` wrote for
        # this disk (one replaced after a static cluster's upgrade), or None.
        self.joined_voters: VoterSet | None = None
        # Auto-join's durable marker (``quorum.cli.AUTO_JOIN_MARKER``): this
        # disk has been a voter, so auto-join never adds it again.
        self.auto_join_was_voter = False

    def failure_at(self, now_us: int) -> str | None:
        """The error a write started at ``now_us`` fails with, or None."""
        return self.failure if now_us < self.failing_until_us else None

    def apply(self, output: Output) -> None:
        """Carry out an output's persistence work (``quorum.apply_output``,
        as the runtime's storage does). Raises ``ValueError`` /
        ``AssertionError`` when the output breaks the contract (an append
        that does not continue the log, a deletion outside it)."""
        self.writes += 1
        apply_output(output, self)

    # -- the applier's target (quorum.DurableTarget) --------------------------

    def write_election_state(self, state: ElectionState) -> None:
        # The primary, then the witness, both durable before anything that
        # depends on them leaves (quorum/_election_copies.py).
        if self.election_state is not None:
            self.election_history.append(ElectionCopy(self.election_generation, self.election_state))
            del self.election_history[:-ELECTION_HISTORY_MAX]
        self.election_generation += 1
        self.election_state = state
        self.election_witness = ElectionCopy(self.election_generation, state)

    def write_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self.snapshot = Snapshot(snapshot_id, data)

    def reset_to_snapshot(self, snapshot_id: SnapshotId) -> None:
        self.log.reset(snapshot_id)

    def truncate_to(self, end_offset: int) -> None:
        if end_offset < self.log.end_offset:
            self.log.truncate_to(end_offset)

    def append(self, entries: Sequence[Entry]) -> None:
        self.log.append(entries)

    def delete_before(self, offset: int) -> None:
        epoch_before = self.log.epoch_at(offset - 1)
        assert epoch_before is not None, "delete_before points outside the durable log"
        self.log.delete_before(offset, epoch_before)

    # -- storage faults (issue 14) --------------------------------------------

    def damage_log(self, offset: int) -> bool:
        """A bit flips in the durable record at ``offset`` (kept only if it
        is a record this disk holds beyond its snapshot). True if it did."""
        floor = max(self.log.start_offset, self.snapshot.snapshot_id.end_offset if self.snapshot else 0)
        if not floor <= offset < self.log.end_offset:
            return False
        self.damaged_from = offset if self.damaged_from is None else min(self.damaged_from, offset)
        return True

    def lose_election_state(self) -> None:
        """The election state file is gone (the next start finds out)."""
        self.election_state = None
        self.election_state_lost = True

    def roll_back_election_copy(self, copy: str, generations_back: int) -> ElectionCopy | None:
        """An older, valid version of one copy of the election state
        (``copy``: "primary" or "witness") is restored, ``generations_back``
        writes back (or the oldest kept): a restored backup, or a file
        system that lost the last renames. Returns the copy restored, or
        None if none older was written."""
        assert copy in ("primary", "witness") and generations_back >= 1
        if not self.election_history:
            return None
        older = self.election_history[max(0, len(self.election_history) - generations_back)]
        if copy == "primary":
            self.election_state, self.election_generation = older.state, older.generation
        else:
            self.election_witness = older
        return older

    def recover(self) -> str | None:
        """What storage does at a start. The two copies of the election
        state are reconciled as ``ElectionStateFile.read`` does (the newer
        copy wins; the stale one is written again), and a state the log
        proves older is refused, as ``FileStorage.open`` does. Damage found
        in the log is opened for repair as ``FileStorage.open(repair_damage=True)``
        does (the repair recorded, the valid prefix kept, the rest moved
        aside: here, dropped from the live log). Returns a line saying what
        was found, or None. A lost election state beside data (or beside
        its witness) is refused: raises ``RuntimeError`` (docs/storage.md,
        "Election state lost beside a log", "Election state rolled back")."""
        if self.election_state_lost and (
            self.log.end_offset > 0 or self.snapshot is not None or self.election_witness is not None
        ):
            raise RuntimeError("the election state is lost beside a log or its witness: the node refuses to start")
        findings = []
        if self.election_state is not None:
            try:
                choice = choose_election_copy(
                    ElectionCopy(self.election_generation, self.election_state), self.election_witness
                )
            except UndecidableElectionStateError as error:
                raise RuntimeError(f"the election state copies disagree ({error}): the node refuses to start") from None
            if choice.finding is not None:
                findings.append(f"election state: {choice.finding}")
                self.election_state, self.election_generation = choice.copy.state, choice.copy.generation
                self.election_witness = choice.copy
            log_epoch = max(self.log.last_epoch, self.snapshot.snapshot_id.epoch if self.snapshot else 0)
            reason = rolled_back_by_log(self.election_state, log_epoch)
            if reason is not None:
                raise RuntimeError(f"the election state was rolled back ({reason}): the node refuses to start")
        damaged = self.damaged_from
        if damaged is None:
            return "; ".join(findings) or None
        self.damaged_from = None
        found = RepairState(
            damaged_from_offset=damaged,
            restart_epoch=self.election_state.epoch if self.election_state else 0,
            acknowledged_end=self.log.end_offset,
        )
        self.repair = found if self.repair is None else self.repair.merged_with(found)
        end = self.log.end_offset
        self.log.truncate_to(damaged)
        findings.append(f"log damaged at offset {damaged} (of {end}): repairing from a leader")
        return "; ".join(findings)

    def finish_repair(self) -> None:
        self.repair = None

    def tear(self, output: Output, appended: int) -> None:
        """A write of ``output`` that failed part-way: its election state
        and truncation reached the disk, and the first ``appended`` records
        of its append (never its deletion). Only for an output without a
        snapshot. The next attempt returns to ``durable_end`` first
        (``return_to_durable_point``)."""
        assert output.snapshot is None and 0 <= appended <= len(output.append)
        if self.durable_end is None:
            self.durable_end = self.log.end_offset
        self.torn_writes += 1
        apply_output(replace(output, append=output.append[:appended], delete_before=None), self)

    def return_to_durable_point(self) -> None:
        """Before a write is tried again: cut what a torn attempt left past
        the log end of the last write that succeeded (docs/storage.md,
        "Disk errors": nothing written since the last successful fsync is
        trusted)."""
        if self.durable_end is not None:
            self.truncate_to(self.durable_end)
            self.durable_end = None

    def recovered_log(self) -> MemoryLog:
        """A fresh copy of the whole durable log, records behind the snapshot
        included (the core rule tests' restarts; a simulated process recovers
        as the runtime does, through ``ReplicaHost``: from the snapshot on)."""
        start = SnapshotId(self.log.start_offset, self.log.start_epoch) if self.log.start_offset else None
        return MemoryLog(start, self.log.slice(self.log.start_offset))


class KeyValueMachine:
    """The replicated state machine of the register workload: each data
    record is a JSON write ``{"key", "value"}``; the state maps a key to
    (value, offset of the record that wrote it). Its host hands it each
    committed data record once (``quorum.StateMachine``)."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[Any, int]] = {}

    def apply(self, entries: list[Entry]) -> None:
        for entry in entries:
            command = json.loads(entry.data)
            self.values[command["key"]] = (command["value"], entry.offset)

    def snapshot(self) -> bytes:
        return json.dumps({"values": self.values}, sort_keys=True).encode()

    def restore(self, data: bytes) -> None:
        state = json.loads(data)
        self.values = {key: (value, offset) for key, (value, offset) in state["values"].items()}

    def read(self, key: str) -> tuple[Any, int]:
        return self.values.get(key, (None, -1))


class SimNode:
    """One simulated process: a replica host, its disk and its pipeline."""

    def __init__(self, node_id: int, options: SimOptions) -> None:
        self.node_id = node_id
        self.options = options
        self.disk = SimDisk()
        # How often the disk was wiped and formatted again (a new directory).
        self.disk_generation = 0
        if options.voters_may_change:
            self.disk.directory_id = disk_directory_id(node_id, 0)
        # The last vote this process recorded (epoch, voted_for): a new one
        # must come from a voter of the set the node holds.
        self.last_vote: tuple[int, int] | None = None
        self.host: ReplicaHost | None = None  # None while the process is down
        self.incarnation = 0
        # The process's auto-join (SimOptions.auto_join), or None.
        self.auto_join: AutoJoin | None = None
        self.pipeline: deque[Output] = deque()
        self.disk_busy = False
        # The last process's state machine (kept after a crash, for views).
        self.machine: Any = KeyValueMachine()
        self.last_hw = 0
        # SIGSTOP: while paused the process handles nothing; what reached
        # it (ticks, messages, disk completions) waits here, in order.
        self.paused = False
        self.held: list[_Event] = []
        # The service model (SimOptions.service_quorum_us): inputs waiting to
        # be served, as (class, sequence, arrival time, event), and whether
        # one is being served.
        self.service_queue: list[tuple[int, int, int, Any]] = []
        self.service_busy = False
        self.service_queue_peak = 0  # the longest the queue grew (a scenario resets it)
        # Outputs the host handed over (``_SimPort.output_ready``): whether a
        # tick acted, for the check of ``ReplicaHost.next_timer_tick``.
        self.outputs_handed = 0

    @property
    def core(self) -> QuorumNode | None:
        return self.host.core if self.host is not None else None

    @property
    def up(self) -> bool:
        return self.host is not None


class _SimPort:
    """A simulated process's side of its ``ReplicaHost`` (``quorum.ReplicaPort``)."""

    __slots__ = ("sim", "node")

    def __init__(self, sim: Simulation, node: SimNode) -> None:
        self.sim = sim
        self.node = node

    def role_changed(self, event: RoleChange) -> None:
        self.sim._on_role_change(self.node, event)

    def committed(self, entries: list[Entry]) -> None:
        self.sim._on_commit(self.node, entries)

    def output_ready(self, output: Output) -> None:
        self.node.outputs_handed += 1
        self.sim._output_ready(self.node, output)

    def snapshot_changed(self, snapshot_id: SnapshotId, installed: bool) -> None:
        if not installed:
            self.sim._say(f"n{self.node.node_id} snapshot at {snapshot_id.end_offset}")


@dataclass(order=True, slots=True)
class _Event:
    time_us: int
    seq: int
    kind: str = field(compare=False)
    node: int = field(compare=False)
    incarnation: int = field(compare=False)
    payload: Any = field(compare=False, default=None)


class Simulation:
    """A cluster of simulated voters. See the module docstring.

    ``trace`` receives one line per event worth reading; ``history`` holds
    client operations in the project's history format.
    """

    def __init__(self, seed: int, options: SimOptions | None = None, *, trace: Callable[[str], None] | None = None, full_trace: bool = False) -> None:
        self.seed = seed
        self.options = options or SimOptions()
        self._master = random.Random(seed)
        self._rng = random.Random(self._master.getrandbits(64))
        self.network = Network(random.Random(self._master.getrandbits(64)), self.options.faults)
        self._queue: list[_Event] = []
        self._seq = 0
        self.now_us = 0
        self._trace = trace
        self._full_trace = full_trace
        self._recorder = self.options.recorder
        node_count = self.options.voters + self.options.spare_nodes
        self.nodes: dict[int, SimNode] = {i: SimNode(i, self.options) for i in range(1, node_count + 1)}
        self.events_processed = 0
        # Called with (node, input, microseconds it waited to be served) for
        # every message and client request a node serves (scenarios measure
        # service with it; with the service model off the wait is 0).
        self.served_watchers: list[Callable[[SimNode, Any, int], None]] = []
        # invariant bookkeeping
        self.leaders_by_epoch: dict[int, tuple[int, int]] = {}
        self.committed: dict[int, tuple[int, int, bytes]] = {}  # offset -> (epoch, kind, data)
        self.max_epoch_seen: dict[int, int] = {i: 0 for i in self.nodes}
        # (node, disk generation, epoch) -> the vote that disk made durable.
        self.durable_votes: dict[tuple[int, int, int], int] = {}
        # Disks (node id, directory id) an operator removed and has not added
        # since: no leader may let auto-join add one of them again.
        self.removed_by_operator: set[tuple[int, str | None]] = set()
        # Auto-join asks on their way to a leader: (asking node, leader,
        # the leader's incarnation it was sent to). See
        # auto_join_asks_in_flight.
        self._auto_join_asks: list[tuple[int, int, int]] = []
        self.role_log: list[RoleChange] = []
        self.resignations: list[tuple[int, int, str]] = []  # (time_us, node, reason)
        self.history: list[dict[str, Any]] = []
        self._delivering: Message | None = None
        self._next_process = 0
        self._read_ids = 0
        # Random disk failure windows (options.disk_fault_rate) until heal().
        self._disk_faults_on = self.options.disk_fault_rate > 0
        for node_id in self.nodes:
            self._start(node_id)

    # =====================================================================
    # Time and events
    # =====================================================================

    @property
    def now_ms(self) -> float:
        return self.now_us / US_PER_MS

    def _push(self, delay_us: int, kind: str, node: int, incarnation: int = 0, payload: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._queue, _Event(self.now_us + max(0, delay_us), self._seq, kind, node, incarnation, payload))

    def schedule(self, delay_ms: float, action: Callable[[], None]) -> None:
        """Run ``action`` after ``delay_ms`` of virtual time."""
        self._push(int(delay_ms * US_PER_MS), "action", 0, 0, action)

    @property
    def next_event_us(self) -> int | None:
        """When the next queued event is due (virtual us), or None."""
        return self._queue[0].time_us if self._queue else None

    def run_until(self, time_ms: float) -> None:
        """Process every event up to ``time_ms``; raises InvariantViolation."""
        self.run_until_us(int(time_ms * US_PER_MS))

    def run_until_us(self, limit: int) -> None:
        """Process every event up to ``limit`` virtual microseconds (exact,
        for replays); raises InvariantViolation."""
        while self._queue and self._queue[0].time_us <= limit:
            self._step_event(heapq.heappop(self._queue))
        self.now_us = max(self.now_us, limit)

    def run_for(self, duration_ms: float) -> None:
        self.run_until(self.now_ms + duration_ms)

    def run_until_true(self, predicate: Callable[[], bool], timeout_ms: float, step_ms: float = 10) -> bool:
        """Run until ``predicate()`` holds (checked every ``step_ms``) or the
        timeout passes. Returns whether it held."""
        deadline = self.now_ms + timeout_ms
        while self.now_ms < deadline:
            if predicate():
                return True
            self.run_for(step_ms)
        return predicate()

    def _step_event(self, event: _Event) -> None:
        if self._recorder is not None:
            self._record_network()  # scenario code changes it between events
        self.now_us = event.time_us
        self.events_processed += 1
        kind = event.kind
        if kind == "action":
            event.payload()
            return
        node = self.nodes.get(event.node)
        if kind == "deliver" and self._recorder is not None:
            alive = node is not None and node.core is not None and node.incarnation == event.incarnation
            self._recorder.message_arrived(self.now_us, event.payload, alive)
        if node is None or node.core is None or node.incarnation != event.incarnation:
            if kind == "deliver" and node is not None and node.core is None:
                self._say_full(f"n{event.node} down, dropped {describe_message(event.payload)}")
            return
        if node.paused:
            node.held.append(event)
            return
        host = node.host
        assert host is not None
        if kind in ("deliver", "client") and self.options.models_service and node.node_id <= self.options.voters:
            self._enqueue_for_service(node, event)
        elif kind == "served":
            node.service_busy = False
            arrived_us, waiting = event.payload
            self._serve_input(node, waiting, self.now_us - arrived_us)
            self._serve_next(node)
        elif kind == "tick":
            # The simulator ticks every node every tick; it checks on each
            # tick that the host's prediction of its next acting tick (what
            # the trio runtime's ticker sleeps until, issue 21) held: a tick
            # before it must produce nothing.
            quiet_until = host.next_timer_tick()
            outputs = node.outputs_handed
            host.tick()
            if node.outputs_handed != outputs and host.core.current_tick < quiet_until:
                raise InvariantViolation(
                    "timer-prediction",
                    f"n{node.node_id} acted at tick {host.core.current_tick}, predicted quiet until {quiet_until}",
                )
            self._push(self.options.tick_ms * US_PER_MS, "tick", node.node_id, node.incarnation)
        elif kind in ("deliver", "client"):
            self._serve_input(node, event, 0)
        elif kind == "disk":
            self._disk_done(node, event.payload)
        elif kind == "unreachable":
            host.peer_unreachable(event.payload)
        elif kind == "auto-join":
            self._auto_join_round(node)
            self._push(self.options.fetch_timeout_ms * US_PER_MS, "auto-join", node.node_id, node.incarnation)
        elif kind == "auto-joined":
            self._auto_joined(node, event.payload)
        else:  # pragma: no cover - a simulator bug
            raise HarnessInvariantError(f"unknown event {kind}")
        # As the runtime does once the input's messages have left: the
        # leader application's put-off work (ReplicaHost.application_catch_up).
        if node.host is not None and node.host.application_proposed:
            node.host.application_catch_up()

    def _serve_input(self, node: SimNode, event: _Event, waited_us: int) -> None:
        """A message (``deliver``) or client request (``client``) served."""
        host = node.host
        assert host is not None
        if event.kind == "deliver":
            self._say_full(f"n{node.node_id} <- {describe_message(event.payload)}")
            # The message being handled, for the vote invariant (_check_voters).
            self._delivering = event.payload
            host.step(event.payload)
            self._delivering = None
        else:
            event.payload(node)
        for watcher in self.served_watchers:
            watcher(node, event.payload, waited_us)

    # -- the service model (SimOptions.service_quorum_us) -------------------

    def _enqueue_for_service(self, node: SimNode, event: _Event) -> None:
        """An input arrived at a voter that models its service time: it
        waits its turn (``quorum.service_class`` decides the turn)."""
        voters = range(1, self.options.voters + 1)
        served_as = service_class(event.payload, voters) if event.kind == "deliver" else ServiceClass.CLIENT
        rank = int(served_as) if self.options.service_priority else 0
        heapq.heappush(node.service_queue, (rank, event.seq, self.now_us, event))
        node.service_queue_peak = max(node.service_queue_peak, len(node.service_queue))
        if not node.service_busy:
            self._serve_next(node)

    def _serve_next(self, node: SimNode) -> None:
        if not node.service_queue:
            return
        _rank, _seq, arrived_us, event = heapq.heappop(node.service_queue)
        quorum = event.kind == "deliver" and service_class(event.payload, ()) is not ServiceClass.CLIENT
        cost_us = self.options.service_quorum_us if quorum else self.options.service_client_us
        node.service_busy = True
        self._push(cost_us, "served", node.node_id, node.incarnation, (arrived_us, event))

    # =====================================================================
    # Processes
    # =====================================================================

    def _start(self, node_id: int) -> None:
        node = self.nodes[node_id]
        node.incarnation += 1
        disk = node.disk
        rng = random.Random(self._master.getrandbits(64))
        node.pipeline.clear()
        node.disk_busy = False
        # A new process trusts what it finds on disk, torn writes included.
        disk.durable_end = None
        node.service_queue.clear()
        node.service_busy = False
        node.machine = self._new_machine(node_id)
        try:
            found = disk.recover()
        except RuntimeError as refusal:
            node.incarnation -= 1
            self._say(f"n{node_id} REFUSES TO START ({refusal})")
            return
        if found is not None:
            self._say(f"n{node_id} {found}")
        config = self.options.quorum_config(node_id, disk.directory_id)
        if disk.joined_voters is not None:
            config = replace(config, voters=(), bootstrap_voters=disk.joined_voters.voters)
        node.host = ReplicaHost(
            config,
            node.machine,
            _SimPort(self, node),
            rng=rng,
            # Each restart is a new process: a new fetch session.
            fetch_session=node.incarnation - 1,
            election_state=disk.election_state,
            snapshot=disk.snapshot,
            entries=disk.log.slice(disk.log.start_offset),
            snapshot_every_records=self.options.snapshot_every_records,
            application=self._new_application(node_id, node.machine),
            repairing=disk.repair,
            repair_finished=disk.finish_repair,
        )
        assert node.core is not None
        node.last_hw = node.core.high_watermark
        stored = disk.election_state
        node.last_vote = (stored.epoch, stored.voted_for) if stored and stored.voted_for is not None else None
        # What a crash took away (an epoch learned but never persisted, so
        # never acted upon) is not a regression: compare with the disk.
        durable_epoch = disk.election_state.epoch if disk.election_state else 0
        self.max_epoch_seen[node_id] = durable_epoch
        self._check_epoch(node)
        if self._recorder is not None:
            log = node.core.log
            self._recorder.node_started(self.now_us, node_id, log.slice(log.start_offset), log.start_offset, node.core.high_watermark)
        node.host.start()
        phase_us = self._rng.randrange(self.options.tick_ms * US_PER_MS)
        self._push(phase_us, "tick", node_id, node.incarnation)
        if self.options.auto_join and self.options.voters_may_change:
            node.auto_join = AutoJoin(node_id, disk.directory_id, was_voter=disk.auto_join_was_voter)
            self._observe_auto_join(node)
            self._push(self.options.fetch_timeout_ms * US_PER_MS, "auto-join", node_id, node.incarnation)

    def _new_machine(self, node_id: int) -> Any:
        """The state machine a (re)starting process replays the log into
        (a ``quorum.StateMachine``). Simulations of other machines override it."""
        del node_id
        return KeyValueMachine()

    def _new_application(self, node_id: int, machine: Any) -> LeaderApplication | None:
        """The leader application a (re)starting process hosts: none for a
        bare quorum (the broker simulation runs the controller)."""
        del node_id, machine
        return None

    def crash(self, node_id: int) -> None:
        """kill -9: the process and its unfinished disk writes are gone."""
        node = self.nodes[node_id]
        host = node.host
        if host is None:
            return
        node.host = None
        node.pipeline.clear()
        node.disk_busy = False
        node.paused = False
        node.held.clear()
        node.service_queue.clear()  # what it had read dies with it
        node.service_busy = False
        # The kernel resets the dead process's connections: peers that can
        # still reach this host learn of it one hop later.
        for peer_id, peer in sorted(self.nodes.items()):
            if peer.core is not None and not self.network.is_blocked(node_id, peer_id):
                delay_us = int(self._rng.uniform(self.options.faults.delay_min_ms, self.options.faults.delay_max_ms) * US_PER_MS)
                self._push(delay_us, "unreachable", peer_id, peer.incarnation, node_id)
        host.abandon()
        self._say(f"n{node_id} CRASH")
        if self._recorder is not None:
            self._recorder.node_crashed(self.now_us, node_id)

    def damage_disk(self, node_id: int, offset: int | None = None) -> bool:
        """A bit flips in a sealed record of ``node_id``'s durable log (at
        ``offset``, or at one drawn from the seed); its next start finds the
        damage and repairs (``SimDisk.recover``). True if a record was hit."""
        disk = self.nodes[node_id].disk
        floor = max(disk.log.start_offset, disk.snapshot.snapshot_id.end_offset if disk.snapshot else 0)
        if offset is None:
            if floor >= disk.log.end_offset:
                return False
            offset = self._rng.randrange(floor, disk.log.end_offset)
        if not disk.damage_log(offset):
            return False
        self._say(f"n{node_id} DISK DAMAGE at offset {offset} (log end {disk.log.end_offset})")
        return True

    def roll_back_election_state(self, node_id: int, copy: str | None = None, generations_back: int | None = None) -> bool:
        """One copy of ``node_id``'s election state ("primary" or "witness";
        drawn from the seed when None) is replaced by an older valid one,
        ``generations_back`` writes back (drawn when None): a restored
        backup, a file system that lost its last renames (issue 14). Its
        next start finds it out (``SimDisk.recover``). True if a copy went
        back."""
        disk = self.nodes[node_id].disk
        if copy is None:
            copy = self._rng.choice(("primary", "witness"))
        if generations_back is None:
            generations_back = self._rng.randint(1, ELECTION_HISTORY_MAX)
        newest = disk.election_generation
        older = disk.roll_back_election_copy(copy, generations_back)
        if older is None:
            return False
        self._say(
            f"NEMESIS n{node_id} ELECTION STATE ROLLBACK: the {copy} goes back from generation {newest} to "
            f"{older.generation} (epoch {older.state.epoch}, voted for {older.state.voted_for})"
        )
        return True

    def pause(self, node_id: int) -> None:
        """SIGSTOP: ``node_id`` stops handling anything (its peers see only
        silence) until ``resume``; a no-op when it is down or paused."""
        node = self.nodes[node_id]
        if node.core is None or node.paused:
            return
        node.paused = True
        self._say(f"n{node_id} PAUSE")

    def resume(self, node_id: int) -> None:
        """SIGCONT: what reached a paused process while it slept is handled
        now, in the order it came (its clock jumps: one tick fires)."""
        node = self.nodes[node_id]
        if not node.paused:
            return
        node.paused = False
        self._say(f"n{node_id} RESUME")
        held, node.held = node.held, []
        for event in held:
            self._push(0, event.kind, event.node, event.incarnation, event.payload)
    def wipe_disk(self, node_id: int) -> None:
        """``node_id``'s disk is replaced by an empty one, formatted afresh
        (a new directory id, KIP-853); the node crashes and restarts on it."""
        node = self.nodes[node_id]
        self.crash(node_id)
        node.disk_generation += 1
        node.disk = SimDisk()
        node.disk.directory_id = disk_directory_id(node_id, node.disk_generation)
        upgraded = self.first_committed_voters()
        if self.options.migrate_voters and upgraded is not None and not self.options.static_format_after_upgrade:
            # ``kraft-quorum format --join --initial-voters`` naming the set
            # the upgrade wrote: the voters in force at the log's start, as
            # for a cluster bootstrapped with dynamic voters, and the static
            # set's ids (so the first VOTERS record the node fetches
            # overlaps it); this new directory is in none of them.
            node.disk.joined_voters = upgraded
        self._say(f"NEMESIS n{node_id} DISK WIPED (directory {node.disk.directory_id})")
        self._start(node_id)

    def restart(self, node_id: int) -> None:
        if self.nodes[node_id].core is not None:
            return
        self._say(f"n{node_id} RESTART")
        self._start(node_id)

    def inject(self, message: Message, *, sender: int) -> None:
        """Put ``message`` on the network from ``sender``, a process outside
        the cluster (a rogue peer): it crosses the link ``sender ->
        message.dst`` (its delay, loss and partitions), whatever
        ``message.src`` claims, and is lost if its target is down. The
        visual replay does not record it."""
        target = self.nodes.get(message.dst)
        for delay_ms in self.network.deliveries(sender, message.dst):
            self._push(int(delay_ms * US_PER_MS), "deliver", message.dst, target.incarnation if target else 0, message)

    def heal(self) -> None:
        """Remove every network fault (partitions and lossy links) and every
        disk failure, and stop drawing new disk failures."""
        self._disk_faults_on = False
        for node_id, node in sorted(self.nodes.items()):
            if node.disk.failure_at(self.now_us) is not None:
                node.disk.failing_until_us = self.now_us
                self._say(f"HEAL n{node_id} disk")
        self.network.heal()
        self.network.faults = LinkFaults(
            delay_min_ms=self.options.faults.delay_min_ms, delay_max_ms=self.options.faults.delay_max_ms
        )
        self._say("HEAL network")

    # =====================================================================
    # Auto-join (KIP-853; the decision is quorum.AutoJoin, as in the node)
    # =====================================================================

    def _observe_auto_join(self, node: SimNode) -> None:
        """After every output and at start, as the trio node does on every
        change of its voter set: "was a voter" is durable at once."""
        assert node.auto_join is not None and node.core is not None
        if node.auto_join.observe(node.core):
            node.disk.auto_join_was_voter = True
            self._say_full(f"n{node.node_id} AUTO-JOIN remembers directory {node.disk.directory_id} was a voter")

    def _auto_join_round(self, node: SimNode) -> None:
        """One round of the node's auto-join loop (every fetch timeout): ask
        the leader it knows to add its disk when the action is JOIN."""
        decision, core = node.auto_join, node.core
        if decision is None or core is None:
            return
        self._observe_auto_join(node)
        if decision.action(core) is not AutoJoinAction.JOIN:
            return
        leader, node_id, voter = core.leader_id, node.node_id, Voter(node.node_id, node.disk.directory_id)
        assert leader is not None
        # The node may ask for a disk an operator removed: it cannot know
        # before it hears of the removal (a snapshot may have swallowed the
        # add and the removal while it was cut off). The leader must refuse
        # it (checked below), and the node must then never ask again.
        self._say(f"n{node_id} AUTO-JOIN asks n{leader} to add directory {voter.directory_id}")
        incarnation = node.incarnation
        ask = (node_id, leader, self.nodes[leader].incarnation)
        self._auto_join_asks.append(ask)

        def answer(code: ErrorCode) -> None:
            # The answer travels back to the asking process (lost if it
            # died). Only an answer that changes the node's decision
            # travels: the others change nothing there, and drawing their
            # delays would move every seed's schedule.
            if node.incarnation == incarnation and code in AutoJoin.DECISIVE_ANSWERS:
                self._push(self._client_delay_us(), "auto-joined", node_id, incarnation, code)

        def committed(_result: Any, error: BaseException | None) -> None:
            if error is None:
                answer(ErrorCode.NONE)

        def at_leader(leader_node: SimNode) -> None:
            assert leader_node.host is not None
            self._auto_join_asks.remove(ask)
            try:
                offset = leader_node.host.add_voter(voter, committed, auto_join=True)
            except (NotLeaderError, ReconfigurationError) as refused:
                self._say_full(f"n{node_id} AUTO-JOIN refused by n{leader_node.node_id}: {refused}")
                if isinstance(refused, ReconfigurationError):
                    answer(refused.code)
                return
            if (node_id, voter.directory_id) in self.removed_by_operator:
                raise InvariantViolation(
                    "auto-join-re-add",
                    f"n{leader_node.node_id} lets auto-join add n{node_id}'s directory {voter.directory_id} again"
                    f" after an operator removed it",
                )
            self._say(f"n{node_id} AUTO-JOIN at n{leader_node.node_id}: voters record at offset {offset}")

        self._to_node(leader, at_leader, lambda: None)

    def auto_join_asks_in_flight(self) -> set[int]:
        """The nodes whose AddVoter (auto-join) may still reach the leader it
        was sent to: that leader is still the process it was sent to, so the
        ask is on the wire or waiting to be served. Once there it may add the
        node's disk at once (KIP-853: a voter set is in force when appended),
        so a nemesis that wipes only disks outside every voter set must count
        these nodes in too (sweep seed 336093)."""
        # An ask to a process that has ended since was lost with it.
        return {
            node_id
            for node_id, leader, incarnation in self._auto_join_asks
            if self.nodes[leader].core is not None and self.nodes[leader].incarnation == incarnation
        }

    def _auto_joined(self, node: SimNode, code: ErrorCode) -> None:
        """The leader answered the node's AddVoter: committed, or refused."""
        assert node.auto_join is not None
        if node.auto_join.answered(code):
            node.disk.auto_join_was_voter = True
            said = "added" if code is ErrorCode.NONE else f"refused {code.name}"
            self._say_full(f"n{node.node_id} AUTO-JOIN {said}: directory {node.disk.directory_id} was a voter")

    # =====================================================================
    # The output contract
    # =====================================================================

    def _output_ready(self, node: SimNode, output: Output) -> None:
        """The host handed over an output (its committed records and reads
        already handled): early messages leave now, the rest waits for the
        disk (``_pump``)."""
        core = node.core
        assert core is not None
        if self._recorder is not None:
            self._recorder.node_output(self.now_us, node.node_id, output, core.high_watermark)
        if core.high_watermark < node.last_hw:
            raise InvariantViolation("hw-regress", f"n{node.node_id} high watermark {node.last_hw} -> {core.high_watermark}")
        node.last_hw = core.high_watermark
        self._check_epoch(node)
        if self.options.voters_may_change:
            self._check_voters(node, output)
        if node.auto_join is not None:
            self._observe_auto_join(node)
        self._send_all(output.early_messages)
        node.pipeline.append(output)
        self._pump(node)

    def _pump(self, node: SimNode) -> None:
        while node.pipeline and not node.disk_busy:
            head = node.pipeline[0]
            if head.has_persistence:
                node.disk_busy = True
                latency = self._rng.uniform(self.options.disk_latency_min_ms, self.options.disk_latency_max_ms)
                self._push(int(latency * US_PER_MS), "disk", node.node_id, node.incarnation, head.persist_seq)
                return
            node.pipeline.popleft()
            self._send_all(head.messages)

    def fail_disk(self, node_id: int, error: str, duration_ms: float) -> None:
        """Make every write to ``node_id``'s disk fail with ``error``
        ("ENOSPC", "EIO") for ``duration_ms`` of virtual time."""
        disk = self.nodes[node_id].disk
        disk.failure = error
        disk.failing_until_us = self.now_us + int(duration_ms * US_PER_MS)
        self._say(f"NEMESIS n{node_id} disk fails with {error} for {duration_ms:.0f} ms")

    def _disk_done(self, node: SimNode, persist_seq: int) -> None:
        head = node.pipeline[0]
        assert head.persist_seq == persist_seq
        assert node.host is not None
        disk = node.disk
        options = self.options
        if self._disk_faults_on and disk.failure_at(self.now_us) is None and self._rng.random() < options.disk_fault_rate:
            error = self._rng.choice(("ENOSPC", "EIO"))
            self.fail_disk(node.node_id, error, self._rng.uniform(options.disk_fault_min_ms, options.disk_fault_max_ms))
        error = disk.failure_at(self.now_us)
        disk.return_to_durable_point()
        if error is not None:
            # Part of the output may have reached the disk (a torn write,
            # half the time when it appends); its messages stay here. The
            # write is retried until the disk takes it, as the runtime does.
            disk.failed_writes += 1
            if head.append and head.snapshot is None and self._rng.random() < 0.5:
                disk.tear(head, self._rng.randrange(len(head.append) + 1))
            if node.host.core.disk_failure is None:
                self._say(f"n{node.node_id} DISK FAILED ({error}) at output {persist_seq}")
            node.host.persist_failed(persist_seq, error)
            self._push(DISK_RETRY_MS * US_PER_MS, "disk", node.node_id, node.incarnation, persist_seq)
            return
        if node.host.core.disk_failure is not None:
            self._say(f"n{node.node_id} DISK RESUMED at output {persist_seq}")
        node.pipeline.popleft()
        disk.apply(head)
        self._check_one_vote_per_epoch(node, head.election_state)
        node.disk_busy = False
        self._send_all(head.messages)
        node.host.persisted(persist_seq)
        self._pump(node)

    def _send_all(self, messages: list[Message]) -> None:
        for message in messages:
            target = self.nodes.get(message.dst)
            delays = self.network.deliveries(message.src, message.dst)
            if not delays:
                self._say_full(f"net dropped {describe_message(message)}")
            if self._recorder is not None:
                self._record_send(message, target, delays)
            for delay_ms in delays:
                if target is not None and target.core is None and not self.network.is_blocked(message.src, message.dst):
                    # Connection refused: the sender's transport notices.
                    self._push(int(2 * delay_ms * US_PER_MS), "unreachable", message.src, self.nodes[message.src].incarnation, message.dst)
                else:
                    self._push(int(delay_ms * US_PER_MS), "deliver", message.dst, target.incarnation if target else 0, message)

    def _record_send(self, message: Message, target: SimNode | None, delays: list[float]) -> None:
        """Tell the recorder what became of each copy (as _send_all decides)."""
        recorder = self._recorder
        if not delays:
            outcome = "partitioned" if self.network.is_blocked(message.src, message.dst) else "lost"
            recorder.message_sent(self.now_us, message, None, outcome)
        for delay_ms in delays:
            if target is not None and target.core is None and not self.network.is_blocked(message.src, message.dst):
                recorder.message_sent(self.now_us, message, self.now_us + max(0, int(delay_ms * US_PER_MS)), "refused")
            else:
                recorder.message_sent(self.now_us, message, self.now_us + max(0, int(delay_ms * US_PER_MS)))

    def _record_network(self) -> None:
        faults = self.network.faults
        self._recorder.network_changed(self.now_us, self.network.blocked_links)
        rates = {"drop_rate": faults.drop_rate, "duplicate_rate": faults.duplicate_rate, "reorder_rate": faults.reorder_rate}
        self._recorder.link_faults_changed(self.now_us, rates)

    # =====================================================================
    # Invariants, checked as events happen
    # =====================================================================

    def _on_role_change(self, node: SimNode, event: RoleChange) -> None:
        self.role_log.append(event)
        if self._recorder is not None:
            self._recorder.role_changed(self.now_us, event)
        leader = f" leader=n{event.leader_id}" if event.leader_id is not None else ""
        self._say(f"n{node.node_id} {event.role.value} e{event.epoch}{leader} ({event.reason})")
        if event.role is Role.RESIGNED:
            self.resignations.append((self.now_us, node.node_id, event.reason))
        if event.role is Role.LEADER:
            # Keyed by process incarnation too: the same node leading one
            # epoch twice across a restart is two leaders as well.
            me = (node.node_id, node.incarnation)
            previous = self.leaders_by_epoch.setdefault(event.epoch, me)
            if previous != me:
                raise InvariantViolation(
                    "two-leaders",
                    f"n{previous[0]} (start {previous[1]}) and n{me[0]} (start {me[1]}) both lead epoch {event.epoch}",
                )
            self._check_leader_completeness(node)

    def _check_one_vote_per_epoch(self, node: SimNode, state: ElectionState | None) -> None:
        """A vote made durable (so about to be sent) never differs from one
        the same disk made durable before in that epoch, across restarts
        (Raft thesis §3.8): what a lost or rolled-back election state would
        break."""
        if state is None or state.voted_for is None:
            return
        key = (node.node_id, node.disk_generation, state.epoch)
        earlier = self.durable_votes.setdefault(key, state.voted_for)
        if earlier != state.voted_for:
            raise InvariantViolation(
                "double-vote",
                f"n{node.node_id} voted for n{earlier} and then for n{state.voted_for} in epoch {state.epoch}",
            )

    def _check_voters(self, node: SimNode, output: Output) -> None:
        """Dynamic voters: a node grants a vote only while it is a voter in
        the set it holds, or to a candidate whose set names it, with the
        disk it has, as a voter (KIP-853: a voter just added that lacks the
        record); it votes for itself only as a voter or while its own
        removal is the uncommitted last change in its log (Raft thesis
        §4.2.2: it stands, counting only the votes of its set); and every voter set
        appended to a log differs from the set before it so little that
        every majority of one meets every majority of the other (Raft
        thesis §4.1, single-server changes)."""
        core = node.core
        assert core is not None
        state = output.election_state
        if state is not None and state.voted_for is not None:
            vote = (state.epoch, state.voted_for)
            if vote != node.last_vote:
                node.last_vote = vote
                standing_while_removed = state.voted_for == node.node_id and (
                    core.removal_pending or core.named_voter_by is not None
                )
                request = self._delivering
                addressed = (
                    isinstance(request, VoteRequest)
                    and request.src == state.voted_for
                    and request.voter_directory_id is not None
                    and request.voter_directory_id == node.disk.directory_id
                )
                if not core.is_voter and not standing_while_removed and not addressed:
                    raise InvariantViolation(
                        "vote-by-non-voter",
                        f"n{node.node_id} voted for n{state.voted_for} in epoch {state.epoch} while not a voter of "
                        f"{core.voters.describe()}",
                    )
        for entry in output.append:
            if entry.kind is RecordKind.VOTERS:
                before = core.voters_at(entry.offset)
                after = VoterSet.decode(entry.data)
                if not majorities_overlap(before.ids, after.ids):
                    raise InvariantViolation(
                        "voter-sets-overlap",
                        f"n{node.node_id} appended voters {after.describe()} at offset {entry.offset} after "
                        f"{before.describe()}: two majorities could be disjoint",
                    )

    def _voter_sets_after_the_committed_one(self) -> list[VoterSet]:
        """Voter sets appended after the last committed VOTERS record, in
        any log, on disk or in a live node's memory (a leader counts
        majorities in the set it has appended before its disk has it; at
        most one change is pending at a time, but logs that followed
        different leaders may hold different ones)."""
        committed_at = max(
            (offset for offset, (_epoch, kind, _data) in self.committed.items() if kind == int(RecordKind.VOTERS)), default=-1
        )
        found: list[VoterSet] = []
        for _node_id, node in sorted(self.nodes.items()):
            logs = [node.disk.log] if node.core is None else [node.disk.log, node.core.log]
            for log in logs:
                for offset in range(max(committed_at + 1, log.start_offset), log.end_offset):
                    entry = log.entry(offset)
                    if entry is not None and entry.kind is RecordKind.VOTERS:
                        voters = VoterSet.decode(entry.data)
                        if voters not in found:
                            found.append(voters)
        return found

    def first_committed_voters(self) -> VoterSet | None:
        """The voter set of the first committed VOTERS record (a static
        cluster's upgrade), if any."""
        for offset in sorted(self.committed):
            _epoch, kind, data = self.committed[offset]
            if kind == int(RecordKind.VOTERS):
                return VoterSet.decode(data)
        return None

    def committed_voters(self) -> VoterSet | None:
        """The voter set of the last committed VOTERS record, if any."""
        for offset in sorted(self.committed, reverse=True):
            _epoch, kind, data = self.committed[offset]
            if kind == int(RecordKind.VOTERS):
                return VoterSet.decode(data)
        return None

    def _check_epoch(self, node: SimNode) -> None:
        assert node.core is not None
        epoch = node.core.epoch
        if epoch < self.max_epoch_seen[node.node_id]:
            raise InvariantViolation("epoch-regress", f"n{node.node_id} epoch {self.max_epoch_seen[node.node_id]} -> {epoch}")
        self.max_epoch_seen[node.node_id] = epoch

    def _on_commit(self, node: SimNode, entries: list[Entry]) -> None:
        """Records ``node`` committed and applied (its host has answered the
        proposals they decide)."""
        for entry in entries:
            record = (entry.epoch, int(entry.kind), entry.data)
            known = self.committed.setdefault(entry.offset, record)
            if known != record:
                raise InvariantViolation(
                    "log-matching",
                    f"n{node.node_id} committed e{entry.epoch} at offset {entry.offset}, another node committed e{known[0]}",
                )
        if entries:
            self._say_full(f"n{node.node_id} commit {entries[0].offset}..{entries[-1].offset}")

    def _check_leader_completeness(self, node: SimNode) -> None:
        """Raft's Leader Completeness (thesis §3.6.3): a new leader holds
        every committed record."""
        core = node.core
        assert core is not None
        log = core.log
        for offset in sorted(self.committed):
            if offset < log.start_offset:
                continue
            entry = log.entry(offset)
            record = self.committed[offset]
            if entry is None or (entry.epoch, int(entry.kind), entry.data) != record:
                raise InvariantViolation(
                    "leader-completeness", f"n{node.node_id} leads epoch {core.epoch} without committed offset {offset}"
                )

    def check_final_durability(self) -> None:
        """Every committed record is on the disks of a majority (persist
        before acknowledging); raises ``InvariantViolation`` (lost-write).

        With dynamic voters, a majority of the last committed voter set, or
        of a set appended after it and not committed yet (on a disk or in a
        live node's memory): a leader counts majorities in the last set in
        its log (Raft thesis §4.1), so a record may commit on a majority of
        a set whose own record is still uncommitted, or not yet on the
        leader's own disk. That is safe because consecutive sets differ by one
        voter and their majorities overlap, and each such set is checked
        with the disks it names (seed 46403: offset 121 committed on n3 and
        n4 of {3, 4, 5}, whose record at 122 was not yet committed, while
        {3, 5} was the last committed set)."""
        # Static voters: a majority of nodes 1..voters. Not of every node:
        # brokers (observers) and spare nodes hold logs too, and counting
        # their disks both raised a false loss when 1,000 brokers had not
        # fetched the last record yet (broker-stampede seed 0: 30 disks,
        # 3 voters and 27 brokers) and could have hidden a real one.
        static_voters = [node for node_id, node in sorted(self.nodes.items()) if node_id <= self.options.voters]
        holder_sets: list[tuple[int, list[SimNode]]] = [(self.options.voters // 2 + 1, static_voters)]
        if self.options.voters_may_change:
            final = self.committed_voters() or self.options.quorum_config(1).initial_voter_set
            holder_sets = [
                (voters.majority, [node for node_id, node in sorted(self.nodes.items()) if voters.holds(node_id, node.disk.directory_id)])
                for voters in [final, *self._voter_sets_after_the_committed_one()]
            ]
        for offset, record in sorted(self.committed.items()):
            held = [(sum(1 for node in nodes if _disk_holds(node, offset, record)), majority) for majority, nodes in holder_sets]
            if all(count < majority for count, majority in held):
                holders = held[0][0]
                raise InvariantViolation("lost-write", f"committed offset {offset} is on {holders} disks, fewer than a majority")

    def check_final(self) -> None:
        """End-of-run validations: every committed record on the disks of a
        majority (:meth:`check_final_durability`), committed prefixes
        identical on every live node, and every acknowledged write present
        in them."""
        self.check_final_durability()
        for node in self.nodes.values():
            if node.core is None:
                continue
            log = node.core.log
            for offset in range(log.start_offset, min(node.core.high_watermark, log.end_offset)):
                entry = log.entry(offset)
                assert entry is not None
                known = self.committed.get(offset)
                if known is not None and known != (entry.epoch, int(entry.kind), entry.data):
                    raise InvariantViolation("log-matching", f"n{node.node_id} differs at committed offset {offset}")
        for op in self.history:
            if op["f"] == "write" and op["type"] == "ok":
                offset = op["offset"]
                record = self.committed.get(offset)
                if record is None or json.loads(record[2])["value"] != op["value"]:
                    raise InvariantViolation("lost-write", f"acknowledged write {op['value']!r} at offset {offset} is not committed")

    # =====================================================================
    # Cluster views
    # =====================================================================

    def leader(self) -> int | None:
        """The live node that leads the highest epoch, if any."""
        best: tuple[int, int] | None = None
        for node_id, node in sorted(self.nodes.items()):
            if node.core is not None and node.core.role is Role.LEADER:
                if best is None or node.core.epoch > best[0]:
                    best = (node.core.epoch, node_id)
        return best[1] if best else None

    def stable_leader(self) -> int | None:
        """A leader that has committed a record of its own epoch."""
        leader = self.leader()
        if leader is None:
            return None
        core = self.nodes[leader].core
        return leader if core is not None and core.leader_has_committed_own_epoch else None

    # =====================================================================
    # Clients (history in the project's format)
    # =====================================================================

    def new_process(self) -> int:
        self._next_process += 1
        return self._next_process

    def _record(self, process: int, type_: str, f: str, key: str | None, value: Any, **extra: Any) -> dict[str, Any]:
        event = {
            "index": len(self.history),
            "time": self.now_us * 1000,
            "process": process,
            "type": type_,
            "f": f,
            "key": key,
            "value": value,
        }
        event.update({k: v for k, v in extra.items() if v is not None})
        self.history.append(event)
        if self._recorder is not None:
            self._recorder.client_event(event)
        return event

    def _client_delay_us(self) -> int:
        faults = self.options.faults
        return int(self._rng.uniform(faults.delay_min_ms, faults.delay_max_ms) * US_PER_MS)

    def client_write(self, process: int, node_id: int, key: str, value: Any, on_done: Callable[[str], None] | None = None) -> None:
        """A client writes ``key = value`` through ``node_id``."""
        self._record(process, "invoke", "write", key, value, node=node_id)
        done = {"flag": False}

        def complete(type_: str, offset: int | None = None, error: str | None = None) -> None:
            if done["flag"]:
                return
            done["flag"] = True
            self._record(process, type_, "write", key, value, node=node_id, offset=offset if type_ == "ok" else None, error=error)
            self._say(f"client p{process} write {key}={value} via n{node_id}: {type_}{' ' + error if error else ''}")
            if on_done:
                on_done(type_)

        def resolved(result: Any, error: BaseException | None) -> None:
            if isinstance(error, NotLeaderError):
                self._push(self._client_delay_us(), "action", 0, 0, lambda: complete("fail", error="not_leader"))
                return
            if error is None:
                outcome, offset, reason = "ok", result[0], None
            elif isinstance(error, ProposalLostError):
                outcome, offset, reason = "fail", error.offset, "lost"
            else:  # ProposalOutcomeUnknownError: a snapshot covered it, or a crash
                outcome, offset, reason = "info", getattr(error, "offset", None), "crashed"
            self._push(self._client_delay_us(), "action", 0, 0, lambda: complete(outcome, offset, reason))

        def at_node(node: SimNode) -> None:
            assert node.host is not None
            node.host.propose([json.dumps({"key": key, "value": value}).encode()], resolved)

        self._to_node(node_id, at_node, lambda: complete("fail", error="unreachable"))
        self.schedule(self.options.client_timeout_ms, lambda: complete("info", error="timeout"))

    def client_read(self, process: int, node_id: int, key: str, mode: str, on_done: Callable[[str], None] | None = None) -> None:
        """A client reads ``key`` through ``node_id`` in ``mode``
        ("linearizable": ReadIndex; "leader-local": the node's own state
        while it believes it leads)."""
        self._record(process, "invoke", "read", key, None, node=node_id, mode=mode)
        done = {"flag": False}

        def complete(type_: str, value: Any = None, offset: int | None = None, error: str | None = None) -> None:
            if done["flag"]:
                return
            done["flag"] = True
            self._record(process, type_, "read", key, value, node=node_id, mode=mode, offset=offset, error=error)
            self._say(f"client p{process} read {key} via n{node_id} ({mode}): {type_} {value if type_ == 'ok' else error}")
            if on_done:
                on_done(type_)

        def answer(node: SimNode) -> None:
            value, offset = node.machine.read(key)
            self._push(self._client_delay_us(), "action", 0, 0, lambda: complete("ok", value, offset))

        def refused() -> None:
            self._push(self._client_delay_us(), "action", 0, 0, lambda: complete("fail", error="not_leader"))

        def at_node(node: SimNode) -> None:
            host = node.host
            assert host is not None
            if mode == "leader-local":
                # Like Kafka's controller (KAFKA-15345), the application acts
                # as leader only once it has applied a record of its own
                # epoch: before that its state may predate its election.
                try:
                    host.leader_local_offset()
                except NotLeaderError:
                    refused()
                    return
                answer(node)
                return

            def on_read(_offset: Any, error: BaseException | None) -> None:
                if error is None:
                    answer(node)
                else:
                    refused()

            host.read(on_read)

        self._to_node(node_id, at_node, lambda: complete("fail", error="unreachable"))
        self.schedule(self.options.client_timeout_ms, lambda: complete("info", error="timeout"))

    def _to_node(self, node_id: int, at_node: Callable[[SimNode], None], unreachable: Callable[[], None]) -> None:
        node = self.nodes[node_id]
        if node.core is None:
            self._push(2 * self._client_delay_us(), "action", 0, 0, unreachable)
            return
        self._push(self._client_delay_us(), "client", node_id, node.incarnation, at_node)

    # =====================================================================
    # Trace
    # =====================================================================

    def _say(self, line: str) -> None:
        if self._recorder is not None:
            self._recorder.story_line(self.now_us, line)
        if self._trace is not None:
            self._trace(f"{self.now_ms:10.3f} {line}")

    def _say_full(self, line: str) -> None:
        if self._full_trace and self._trace is not None:
            self._trace(f"{self.now_ms:10.3f}   {line}")


def _disk_holds(node: SimNode, offset: int, record: tuple[int, int, bytes]) -> bool:
    """Does ``node``'s disk hold committed ``record`` at ``offset`` (or a
    snapshot past it)?"""
    log = node.disk.log
    if offset < log.start_offset:
        return True  # behind the disk's snapshot
    entry = log.entry(offset) if offset < log.end_offset else None
    return entry is not None and (entry.epoch, int(entry.kind), entry.data) == record
