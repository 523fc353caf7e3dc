"""The replica host: what one quorum replica does around its sans-IO core,
written once and driven by both worlds — the trio runtime
(``quorum.runtime.QuorumRuntime``) and the deterministic simulator
(``jepsen_like.sim``). What the simulator proves is therefore the code that
runs (TigerBeetle's rule: nothing the host does is written twice).

``ReplicaHost`` owns the core (``QuorumNode``), the state machine, the
applied offset, the proposals and reads waiting for an outcome, the
snapshot policy and the leader application (the controller). It does no IO,
reads no clock and starts nothing: the world feeds it inputs (``tick``,
``step``, ``persisted``, ``peer_unreachable``, local calls) and it hands
each effect to the world's ``ReplicaPort`` in the order it arises:

- ``role_changed(event)`` for every role change of the core;
- ``committed(entries)`` once committed records are applied (and the
  proposals they decide are answered);
- ``output_ready(output)`` for every core output, after its committed
  records and reads were handled: the world sends ``early_messages`` at
  once, carries out the persistence work, and only then sends ``messages``
  (the output contract, ``quorum/_output.py``);
- ``snapshot_changed(snapshot_id, installed)`` when the state machine was
  snapshotted here (``installed=False``) or replaced by the leader's
  snapshot (``installed=True``).

Outcomes of local calls go to the ``done(result, error)`` given with each
call, exactly once: inside a later input for a proposal or a read, at once
for a refusal. Logical time is the core's: ``now_ms`` is the core's tick
count times ``tick_ms``.
"""

from __future__ import annotations

import inspect
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ._config import QuorumConfig
from ._errors import QuorumError
from ._log import MemoryLog
from ._messages import ErrorCode, FetchRequest, Message
from ._node import CoreHooks, NotLeaderError, QuorumNode, RepairState, Snapshot
from ._output import NO_OUTPUT, Output, ReadReady, RoleChange
from ._types import DATA_KIND, ElectionState, Entry, SnapshotId
from ._voters import Voter, VoterSet, state_machine_data
from .wire import FRAME_BYTES_MAX

logger = logging.getLogger("pykraft.quorum")

# At most one "dropped a message" line per this much logical time.
_PROTOCOL_ERROR_LOG_INTERVAL_MS = 10_000

#: The most bytes a state machine's answers may take: what one answer frame
#: (to a client's read; to a proposal, all its records' answers together)
#: can carry, less room for the frame's other fields and each answer's
#: header (at most 5 bytes each for the 10,000 records a proposal may
#: hold). An answer past it could not be sent, and its client would wait
#: out its timeout for nothing: the reader or proposer gets an error naming
#: the size instead. ``@replicated`` objects hold their results to it too.
RESULT_BYTES_MAX = FRAME_BYTES_MAX - 64 * 1024

#: ``done(result, error)``: exactly one of them is not None (a read's or a
#: proposal's result may be falsy, never None).
Done = Callable[[Any, BaseException | None], None]


class ProposalLostError(QuorumError):
    """The proposal's offset was committed with another record: it did not
    happen (a definite failure; safe to retry)."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"the proposal at offset {offset} was replaced by another leader's record")
        self.offset = offset


class ProposalOutcomeUnknownError(QuorumError):
    """Whether the proposal happened cannot be told here: the records at its
    offsets arrived inside a snapshot from a new leader (or the process went
    away). It may or may not be committed."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"the outcome of the proposal at offset {offset} is unknown")
        self.offset = offset


class ApplyFailedError(QuorumError):
    """The state machine raised while applying the record at ``offset`` (or
    answered what cannot travel to a proposer: not bytes, or more than
    ``RESULT_BYTES_MAX`` bytes). The record stays committed (every replica
    applied it and failed the same way, since apply is deterministic); its
    proposer gets this error instead of an answer. ``description`` is
    ``"ExceptionType: message"``."""

    def __init__(self, offset: int, description: str) -> None:
        super().__init__(f"applying the record at offset {offset} failed: {description}")
        self.offset = offset
        self.description = description


class QueryFailedError(ApplyFailedError):
    """A read's query failed: the state machine's ``query()`` (or a
    ``@query`` method) raised, or answered what no answer frame can carry.
    Nothing changed, so nothing was applied: it is an ``ApplyFailedError``
    only so that callers that caught that before this class existed still
    catch it. ``offset`` is where the read was taken, ``description`` what
    failed."""

    def __init__(self, offset: int, description: str) -> None:
        QuorumError.__init__(self, f"the query read at offset {offset} failed: {description}")
        self.offset = offset
        self.description = description


class RepeatedFailureLog:
    """Logs a user's callback that fails again and again without flooding
    the log: a client retrying a read whose ``query()`` raises would
    otherwise write a traceback per read. The first failure of a kind
    (``failed``'s ``kind``: what failed and the exception's type) is
    logged with its traceback, later ones in one line when their count
    reaches 2, 4, 8, ..., saying how many. A count, not a clock, so the
    host still reads none. At most ``KINDS_MAX`` kinds are told apart;
    later ones share one count."""

    KINDS_MAX = 64

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self.counts: dict[tuple[str, str], int] = {}

    def failed(self, kind: tuple[str, str], line: str, error: BaseException | None = None) -> None:
        counts = self.counts
        if kind not in counts and len(counts) >= self.KINDS_MAX:
            kind = ("", "other")
        count = counts[kind] = counts.get(kind, 0) + 1
        if count == 1:
            self._log.error("%s", line, exc_info=error)
        elif count & (count - 1) == 0:
            self._log.error(
                "%s (%d times so far; logged each time the count doubles, with the traceback the first time)",
                line, count,
            )  # fmt: skip


class ReadNotConfirmedError(QuorumError):
    """A linearizable read could not be confirmed: this node lost its
    leadership first (retriable, at the leader hint)."""

    def __init__(self, leader_id: int | None) -> None:
        super().__init__(f"leadership lost before the read was confirmed (leader hint {leader_id})")
        self.leader_id = leader_id


@runtime_checkable
class StateMachine(Protocol):
    """What a replicated application gives the host.

    ``apply`` receives committed data records in offset order, exactly once
    per process lifetime (after a restart, from the latest snapshot on). It
    may return a dict of answers by offset (bytes), which the host hands
    back to the proposer of those records. The host hands it one record
    per call, so that an exception is contained to its record: the host
    logs it, the proposer gets ``ApplyFailedError`` and the replica goes on
    (the state is whatever the failing call left, identical everywhere).
    A machine whose class sets ``apply_never_raises = True`` (the built-in
    ``KeyValueStateMachine``: it skips what it cannot read) gets each
    committed run of records in one call instead, which saves a call and a
    ``try`` per record; should it raise after all, the host cannot tell how
    much of the run took effect (runs differ from replica to replica), so
    the exception stops the node rather than let replicas diverge.
    ``snapshot`` returns the state reflecting every record applied so far;
    ``restore`` replaces the state with a snapshot's. All three must be
    deterministic: every replica applies the same records.
    """

    def apply(self, entries: Sequence[Entry]) -> dict[int, bytes] | None: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


@dataclass(slots=True)
class Proposal:
    """An atomic batch an application asks the leader to append.
    ``on_committed(first_offset)`` runs once the whole batch is committed."""

    records: list[bytes]
    on_committed: Callable[[int], Any] | None = None


class LeaderApplication(Protocol):
    """An application that acts on the quorum leader (the controller).

    The host calls it synchronously, inside an input; it must not block.
    ``activate`` comes once this node leads *and* has applied every record
    up to its own epoch's first one, so the application's view is complete
    (KAFKA-15345); ``deactivate`` when leadership ends. ``on_fetch`` answers
    the ``extension`` of an observer's Fetch (a broker's heartbeat) and
    returns the response's extension. ``take_proposals`` hands over the
    batches it wants appended.
    """

    def activate(self, now_ms: int, next_write_offset: int) -> None:
        ...

    def deactivate(self) -> None:
        ...

    def on_fetch(self, replica_id: int, extension: Any, fetch_offset: int, now_ms: int) -> Any:
        ...

    def tick(self, now_ms: int) -> None:
        ...

    def next_tick_due_ms(self) -> int | None:
        """The earliest ``now_ms`` at which ``tick`` may act (propose,
        change state), None if no tick will until another call changes
        something. Conservative: never later than the first tick that acts.
        The host asks after every input while the application is active
        (``ReplicaHost.next_timer_tick``); an application without this
        method is ticked as if every tick might act."""
        ...

    def note_log_end(self, end_offset: int) -> None:
        """Called before every decision (request, fetch, tick) with where the
        leader's log ends: other proposers (clients of the quorum itself)
        may have appended since the application's last batch."""

    def note_voters(self, voters: VoterSet) -> None:
        """Optional. Called before every request it handles with the voter
        set in force on this leader: the controller refuses to register a
        broker under a voter's id (KIP-631: one id space), registered as a
        controller or not."""

    def take_proposals(self) -> list[Proposal]:
        ...

    def catch_up(self) -> None:
        """The batches just taken have been handed to the network (see
        ``ReplicaHost.application_catch_up``): do the work put off until
        they left (the controller applies them to its working image)."""

    def handle_request(self, request: Any, now_ms: int) -> Any:
        """A client's request. Returns a reply with exactly one of:
        ``response`` (answer now); ``records`` and ``on_committed(first)``
        (propose the records as one batch; the callback builds the answer
        once they are committed and applied); ``on_read_confirmed()`` (a
        linearizable read: the callback builds the answer after a ReadIndex
        round, once the state machine has applied up to the read offset)."""
        ...


class ReplicaPort(Protocol):
    """The world's side of a ``ReplicaHost``: what it does with the host's
    effects (see the module docstring). Called synchronously, inside an
    input; must not call back into the host except through local calls."""

    def role_changed(self, event: RoleChange) -> None: ...

    def committed(self, entries: list[Entry]) -> None: ...

    def output_ready(self, output: Output) -> None: ...

    def snapshot_changed(self, snapshot_id: SnapshotId, installed: bool) -> None: ...


class CommitTimer(Protocol):
    """Measures proposals, for a world that keeps a clock (the runtime's
    commit-latency metric): ``start()`` when a batch is proposed returns a
    token, ``stop(token, last_offset)`` runs once it is committed."""

    def start(self) -> Any: ...

    def stop(self, token: Any, last_offset: int) -> None: ...


#: ``done(answer, error, offsets)`` for an application request: ``offsets``
#: is (first, last) of a committed write, None otherwise.
ApplicationDone = Callable[[Any, BaseException | None, tuple[int, int] | None], None]


@dataclass(slots=True)
class _PendingProposal:
    epoch: int
    first_offset: int
    done: Done  # done((last_offset, answers), None) or done(None, error)
    timer_token: Any = None


def _kind(value: object) -> str:
    if inspect.iscoroutine(value):
        value.close()  # never to be awaited: no "was never awaited" warning on top
        return "a coroutine (an async def method?)"
    return "None" if value is None else f"a {type(value).__name__}"


def answers_problem(answers: object) -> str | None:
    """What is wrong with what a state machine's ``apply`` returned, or
    None when it is usable: None, or a dict of answers (``bytes``, or None
    for none) by ``int`` offset. Cheap: the dict holds the answers of one
    call's records, mostly none."""
    if answers is None:
        return None
    if type(answers) is not dict:
        return f"apply() returned {_kind(answers)}: it must return None or a dict of answers (bytes) by offset"
    for offset, answer in answers.items():
        if type(offset) is not int or not (answer is None or type(answer) is bytes):
            return (
                f"apply() answered {_kind(answer)} for offset {offset!r}: answers must be bytes, by int offset"
            )
    return None


def check_state_machine(machine: object) -> None:
    """Refuse, before a node opens anything, a state machine the host could
    not call: ``apply``, ``snapshot`` and ``restore`` (and ``query``, when
    given) must be plain methods. The host calls them synchronously in the
    node's task; an ``async def`` would hand it a coroutine that never runs.
    Raises ``TypeError`` naming the method."""
    if isinstance(machine, type):
        raise TypeError(
            f"the state machine must be an instance ({machine.__name__}()), not the class {machine.__name__}"
        )
    name = type(machine).__name__
    for method_name in ("apply", "snapshot", "restore", "query"):
        method = getattr(machine, method_name, None)
        if method is None and method_name == "query":
            continue  # optional: a node without it answers clients' reads with no value
        if method is None or not callable(method):
            raise TypeError(
                f"the state machine {name} has no {method_name}() method: a StateMachine needs apply(entries), "
                "snapshot() and restore(data)"
            )
        if inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method):
            raise TypeError(
                f"{name}.{method_name}() is async: the node calls its state machine synchronously, in order, "
                "so apply, snapshot, restore and query must be plain (def) methods that return at once"
            )


class ReplicaHost:
    """One replica's host. See the module docstring.

    ``election_state``, ``snapshot`` and ``entries`` (the durable log's
    records, in offset order) are what storage recovered; ``rng`` and
    ``fetch_session`` go to the core. ``snapshot_every_records`` (0: never)
    is the snapshot policy: a snapshot once that many records were applied
    since the last one. ``application`` runs while this node leads.
    ``commit_timer`` (optional) measures every proposal, the application's
    included. ``repairing`` (a ``RepairState`` from storage) starts a voter
    whose log was damaged in repair; ``repair_finished`` is called once
    when the core says the log is repaired, to make that durable.
    """

    def __init__(
        self,
        config: QuorumConfig,
        state_machine: StateMachine,
        port: ReplicaPort,
        *,
        rng: random.Random,
        fetch_session: int,
        election_state: ElectionState | None = None,
        snapshot: Snapshot | None = None,
        entries: Iterable[Entry] = (),
        snapshot_every_records: int = 0,
        application: LeaderApplication | None = None,
        commit_timer: CommitTimer | None = None,
        repairing: RepairState | None = None,
        repair_finished: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        # A voter repairing a damaged log (``RepairState``); once the core
        # says the log is repaired, ``repair_finished`` makes that durable
        # (clears storage's repair marker). Until it returns, a restart
        # repairs again: conservative, never unsafe.
        self._repair_finished = repair_finished
        self.commit_timer = commit_timer
        self.state_machine = state_machine
        self.port = port
        self.snapshot_every_records = snapshot_every_records
        self.application = application
        self.application_active = False
        # The application's ``next_tick_due_ms`` (optional, see
        # ``LeaderApplication``): without it, every tick may act.
        self._application_next_due: Callable[[], int | None] | None = getattr(application, "next_tick_due_ms", None)
        # Its ``note_voters`` (optional, likewise).
        self._application_note_voters: Callable[[VoterSet], None] | None = getattr(application, "note_voters", None)
        # The application proposed since its last catch_up (see
        # application_catch_up).
        self.application_proposed = False
        self.applied_offset = 0
        self._last_snapshot_offset = 0
        # Snapshots the state machine failed to take (its ``snapshot()``
        # raised): each is skipped, logged (at ERROR only for the first of a
        # run of failures) and retried ``snapshot_every_records`` later.
        self.snapshot_failures = 0
        self._snapshot_failing = False
        if snapshot is not None:
            self._restore(snapshot.data, snapshot.snapshot_id.end_offset)
            self.applied_offset = self._last_snapshot_offset = snapshot.snapshot_id.end_offset
        # Proposals in flight, by the offset of their last record.
        self.pending_proposals: dict[int, _PendingProposal] = {}
        self.pending_reads: dict[int, Done] = {}
        self._next_read_id = 0
        # Answers the state machine gave for records a local proposer waits on.
        self._answers: dict[int, bytes | ApplyFailedError] = {}
        # What this node adds to its own Fetches and does with the answers'
        # extensions (a broker's heartbeats): attached and detached while
        # the core's hooks stay the ones it was built with.
        self._fetch_extension_provider: Callable[[], Any] | None = None
        self._fetch_extension_consumer: Callable[[Any], None] | None = None
        # Logical ms of the last protocol-error log line, and how many were
        # held back since: a hostile peer must not be able to flood the log.
        self._protocol_error_logged_ms: int | None = None
        self._protocol_errors_held = 0
        # Reads whose query() failed, by kind: logged without flooding.
        self.query_failures = RepeatedFailureLog(logger)
        # The core's log starts at the snapshot: records still on disk behind
        # it are not loaded, since the epoch just before them is not known (a
        # follower that far behind takes the snapshot instead).
        start = snapshot.snapshot_id if snapshot is not None else None
        first = start.end_offset if start is not None else 0
        log = MemoryLog(start, [entry for entry in entries if entry.offset >= first])
        self.core = QuorumNode(
            config,
            rng=rng,
            election_state=election_state,
            log=log,
            snapshot=snapshot,
            hooks=CoreHooks(
                fetch_extension_handler=self._on_fetch_extension if application is not None else None,
                fetch_extension_provider=self._provide_fetch_extension,
                fetch_extension_consumer=self._consume_fetch_extension,
                protocol_error=self._log_protocol_error,
            ),
            fetch_session=fetch_session,
            repairing=repairing,
        )
        self._repair_pending = self.core.repairing is not None

    def _log_protocol_error(self, description: str) -> None:
        """The core dropped a message it could not act on (out of range, from
        a non-voter...): one log line per ``_PROTOCOL_ERROR_LOG_INTERVAL_MS``
        of logical time, saying how many were held back; the core counts
        them all (``QuorumNode.counters``)."""
        now_ms = self.core.current_tick * self.config.tick_ms
        last_ms = self._protocol_error_logged_ms
        if last_ms is not None and now_ms - last_ms < _PROTOCOL_ERROR_LOG_INTERVAL_MS:
            self._protocol_errors_held += 1
            return
        held, self._protocol_errors_held = self._protocol_errors_held, 0
        self._protocol_error_logged_ms = now_ms
        logger.warning(
            "node %d: %s%s",
            self.config.node_id,
            description,
            f" ({held} more since the last such line)" if held else "",
        )

    # =====================================================================
    # Inputs
    # =====================================================================

    def start(self) -> None:
        """Hand over the core's first output (what recovery left to do)."""
        self._handle(self.core.initial_output())

    def tick(self) -> None:
        """One logical tick (``config.tick_ms``)."""
        self._handle(self.core.tick())
        self._drive_application(ticked=True)

    def step(self, message: Message) -> None:
        """A message from a peer, addressed to this node."""
        self._handle(self.core.step(message))
        self._drive_application(ticked=False)

    def persisted(self, persist_seq: int) -> None:
        """The world made every output up to ``persist_seq`` durable."""
        self._handle(self.core.persisted(persist_seq))
        self._drive_application(ticked=False)

    def persist_failed(self, persist_seq: int, error: str) -> None:
        """The world could not make output ``persist_seq`` durable (``error``:
        an errno name). It keeps that output and every later one, and
        retries them in order from its last durable point; the next
        ``persisted`` ends the condition (``QuorumNode.persist_failed``)."""
        self._handle(self.core.persist_failed(persist_seq, error))
        self._drive_application(ticked=False)

    def peer_unreachable(self, peer: int) -> None:
        """The transport found ``peer`` unreachable (refused, reset)."""
        self._handle(self.core.peer_unreachable(peer))
        self._drive_application(ticked=False)

    # =====================================================================
    # Local calls
    # =====================================================================

    def propose(self, records: Sequence[bytes], done: Done) -> None:
        """Append ``records`` as one atomic batch. ``done((last_offset,
        answers), None)`` once committed and applied (``answers``: what the
        state machine answered for each record, None where nothing);
        ``done(None, error)`` with ``NotLeaderError`` (at once),
        ``ProposalLostError``, ``ProposalOutcomeUnknownError`` or
        ``ApplyFailedError`` (the state machine raised on one of them)."""
        self._propose(records, done)
        self._drive_application(ticked=False)

    def propose_many(self, proposals: Sequence[tuple[Sequence[bytes], Done]]) -> None:
        """``propose`` for each ``(records, done)`` of ``proposals``, in
        order, appended together: one append and one output for them all
        (the records of a client's pipelined requests read in one go), each
        proposal still committed, applied and answered as one atomic batch
        of its own."""
        self._propose_many(proposals)
        self._drive_application(ticked=False)

    def read(self, done: Done) -> None:
        """A linearizable read barrier (ReadIndex): ``done(offset, None)``
        once the state machine has applied every record committed before
        the call (the core emits committed records before the ReadReady);
        ``done(None, error)`` with ``NotLeaderError`` or
        ``ReadNotConfirmedError``."""
        self._read(done)
        self._drive_application(ticked=False)

    def resign(self) -> None:
        """Hand leadership over (graceful shutdown). Raises nothing."""
        try:
            output = self.core.resign()
        except NotLeaderError:
            output = Output()
        self._handle(output)
        self._drive_application(ticked=False)

    def add_voter(self, voter: Voter, done: Done | None = None, *, auto_join: bool = False) -> int:
        """Append a VOTERS record adding ``voter`` (KIP-853); returns its
        offset: the change is done once that record is committed. With
        ``done``, ``done(offset, None)`` is called then, or ``done(None,
        error)`` with ``ProposalLostError`` (another leader's record took the
        offset: the change did not happen) or ``ProposalOutcomeUnknownError``,
        as for a proposal. ``auto_join``: the node asks for itself
        (``QuorumNode.add_voter``). Raises ``NotLeaderError`` or
        ``ReconfigurationError`` (nothing changed; ``done`` is not called)."""
        offset = self._change_voters(lambda: self.core.add_voter(voter, auto_join=auto_join), done)
        assert offset is not None  # the core always appends a change
        return offset

    def remove_voter(self, node_id: int, directory_id: str | None = None, done: Done | None = None) -> int:
        """Append a VOTERS record removing ``node_id``; returns, calls
        ``done`` and raises as ``add_voter``."""
        offset = self._change_voters(lambda: self.core.remove_voter(node_id, directory_id), done)
        assert offset is not None  # the core always appends a change
        return offset

    def upgrade_voters(self, endpoints: Mapping[int, Sequence[str]], done: Done | None = None) -> int | None:
        """Upgrade a static voter set to a dynamic one (``QuorumNode.upgrade_voters``,
        ``endpoints`` by voter id); returns the VOTERS record's offset, or
        None when the voters are dynamic already (then ``done(None, None)``
        is called at once). Calls ``done`` and raises as ``add_voter``."""
        return self._change_voters(lambda: self.core.upgrade_voters(endpoints), done)

    def _change_voters(self, change: Callable[[], tuple[int | None, Output]], done: Done | None) -> int | None:
        offset, output = change()
        if offset is None:
            self._handle(output)
            if done is not None:
                done(None, None)
            return None
        if done is not None:
            # Decided like a proposal: committed in this epoch, or lost. It is
            # registered before the output is handled, which may commit it
            # at once (a lone voter).
            def voter_change_done(result: Any, error: BaseException | None) -> None:
                done(None if result is None else result[0], error)

            self.pending_proposals[offset] = _PendingProposal(self.core.epoch, offset, voter_change_done)
        self._handle(output)
        return offset

    def answer_query(self, request: bytes, offset: int) -> bytes | None:
        """The state machine's answer to a client's read taken at ``offset``
        (its ``query(request)``; None for a machine without one). Not an
        input: it only reads the state machine, so the world may call it
        between inputs (the runtime does, from the task serving the read).

        Raises ``QueryFailedError`` naming the machine when ``query``
        raised, answered something other than bytes or None, or answered
        more than ``RESULT_BYTES_MAX`` bytes (no answer frame could carry
        it): the read fails, the node goes on. Logged through
        ``query_failures``: a client retrying that read must not write a
        traceback per attempt."""
        machine = self.state_machine
        query = getattr(machine, "query", None)
        if query is None:
            return None
        name = f"{type(machine).__name__}.query()"
        try:
            value = query(request)
        except Exception as error:  # the user's state machine: this read fails, the node goes on
            failure = QueryFailedError(offset, f"{name} raised {type(error).__name__}: {error}")
            self.query_failures.failed((name, type(error).__name__), f"node {self.config.node_id}: {failure}", error)
            raise failure from error
        if value is None or (type(value) is bytes and len(value) <= RESULT_BYTES_MAX):
            return value
        if type(value) is bytes:
            kind = "too large"
            problem = f"{name} answered {len(value)} bytes, over the limit of {RESULT_BYTES_MAX} an answer may carry"
        else:
            kind = "not bytes"
            problem = f"{name} answered {_kind(value)}: an answer must be bytes or None"
        failure = QueryFailedError(offset, problem)
        self.query_failures.failed((name, kind), f"node {self.config.node_id}: {failure}")
        raise failure

    def leader_local_offset(self) -> int:
        """For a leader-local read (answered from this node's own state, as
        Kafka's controller does): the applied offset, if this node leads and
        has applied a record of its own epoch (KAFKA-15345).

        Raises ``NotLeaderError`` otherwise.
        """
        core = self.core
        if not core.leader_has_committed_own_epoch:
            raise NotLeaderError(core.leader_id, core.epoch)
        return self.applied_offset

    def application_request(self, request: Any, done: ApplicationDone) -> None:
        """Hand ``request`` to the leader application (see
        ``LeaderApplication.handle_request``). ``done(answer, None,
        offsets)``, or ``done(None, error, None)`` with ``NotLeaderError``
        (this node's application is not the active one),
        ``ProposalLostError``, ``ProposalOutcomeUnknownError`` or
        ``ReadNotConfirmedError``."""
        self._application_call(request, done)
        self._drive_application(ticked=False)

    def attach_fetch_extension(self, provider: Callable[[], Any], consumer: Callable[[Any], None]) -> None:
        """Add ``provider()`` to every Fetch this node sends, and hand each
        answer's extension to ``consumer`` (a broker's heartbeats and the
        controller's replies). Both run inside a core step: they must be
        quick and must not raise."""
        self._fetch_extension_provider = provider
        self._fetch_extension_consumer = consumer

    def detach_fetch_extension(self) -> None:
        """Stop adding an extension to this node's Fetches."""
        self._fetch_extension_provider = None
        self._fetch_extension_consumer = None

    def abandon(self) -> None:
        """The process is going away: every proposal still waiting learns
        that its outcome is unknown (in offset order), every read that it
        was not confirmed (in the order asked)."""
        for offset in sorted(self.pending_proposals):
            self.pending_proposals.pop(offset).done(None, ProposalOutcomeUnknownError(offset))
        reads, self.pending_reads = self.pending_reads, {}
        for done in reads.values():
            done(None, ReadNotConfirmedError(None))

    @property
    def now_ms(self) -> int:
        """The core's logical clock."""
        return self.core.current_tick * self.config.tick_ms

    def next_timer_tick(self) -> int:
        """The earliest tick at which ``tick()`` may do anything: the core's
        timers (``QuorumNode.next_timer_tick``: election, fetch and request
        deadlines, the fetcher's backoff, check quorum, parked long polls)
        and the active leader application's (``next_tick_due_ms``: the
        controller's session expiry and no-op writes). Proposals and reads
        have no timer here (they end with the epoch or a commit, both
        inputs). Before that tick every tick only advances the clock, so a
        world may sleep until it, asking again after every other input,
        while still feeding every tick in order (the trio runtime's ticker,
        issue 21). Always after the current tick; never later than the
        first tick that acts."""
        core = self.core
        due = core.next_timer_tick
        if self.application_active:
            next_due = self._application_next_due
            due_ms = next_due() if next_due is not None else 0
            if due_ms is not None:
                tick_ms = self.config.tick_ms
                # application.tick(t * tick_ms) acts once t * tick_ms >= due_ms.
                application_tick = max(-(-due_ms // tick_ms), core.current_tick + 1)
                if application_tick < due:
                    due = application_tick
        return due

    # =====================================================================
    # Outputs
    # =====================================================================

    def _handle(self, output: Output) -> None:
        """Act on one core output: role changes, an installed snapshot,
        committed records, read answers; then hand it to the world
        (``port.output_ready``) and apply the snapshot policy."""
        if output is NO_OUTPUT or not output:
            return
        if self._repair_pending and self.core.repairing is None:
            self._repair_pending = False
            if self._repair_finished is not None:
                self._repair_finished()
        port = self.port
        for event in output.events:
            port.role_changed(event)
        if output.snapshot_loaded is not None:
            snapshot_id, data = output.snapshot_loaded
            self._restore(data, snapshot_id.end_offset)
            self.applied_offset = self._last_snapshot_offset = snapshot_id.end_offset
            port.snapshot_changed(snapshot_id, True)
        if output.committed:
            self._apply(output.committed)
        for read in output.reads:
            done = self.pending_reads.pop(read.read_id, None)
            if done is None:
                continue
            if isinstance(read, ReadReady):
                done(read.offset, None)
            else:
                done(None, ReadNotConfirmedError(self.core.leader_id))
        port.output_ready(output)
        self._maybe_snapshot()

    def _restore(self, data: bytes, end_offset: int) -> None:
        """Hand a snapshot to the state machine. If its ``restore`` raises,
        its state is unknown (half replaced, perhaps) and nothing could
        contain that: the node stops, saying why in one line, and the
        error leaves ``open_quorum_node`` as it is."""
        try:
            self.state_machine.restore(state_machine_data(data))
        except Exception as error:
            logger.critical(
                "node %d: the state machine's restore() raised loading the snapshot of offsets below %d (%s: %s): "
                "its state is unknown, so the node stops",
                self.config.node_id, end_offset, type(error).__name__, error,
            )  # fmt: skip
            raise

    def _apply(self, entries: list[Entry]) -> None:
        applied = self.applied_offset
        data = [entry for entry in entries if entry.kind is DATA_KIND and entry.offset >= applied]
        if data:
            self._apply_data(data)
        self.applied_offset = max(applied, entries[-1].offset + 1)
        pending_proposals = self.pending_proposals
        if pending_proposals:
            for entry in entries:
                pending = pending_proposals.pop(entry.offset, None)
                if pending is None:
                    continue
                if entry.epoch != pending.epoch:
                    pending.done(None, ProposalLostError(entry.offset))
                    continue
                if pending.timer_token is not None:
                    self.commit_timer.stop(pending.timer_token, entry.offset)  # type: ignore[union-attr]
                pop = self._answers.pop
                answers = [pop(offset, None) for offset in range(pending.first_offset, entry.offset + 1)]
                answers_bytes = 0
                for answer in answers:  # a loop, not a generator: once per committed proposal
                    if type(answer) is bytes:
                        answers_bytes += len(answer)
                    elif answer is not None:  # an ApplyFailedError
                        pending.done(None, answer)
                        break
                else:
                    if answers_bytes > RESULT_BYTES_MAX:
                        pending.done(None, self._answers_too_large(pending.first_offset, entry.offset, answers_bytes))
                    else:
                        pending.done((entry.offset, answers), None)
            if pending_proposals:
                # Proposals below the high watermark that no committed record
                # decided were covered by a snapshot installed from a new
                # leader: whether they happened cannot be told.
                high_watermark = self.core.high_watermark
                for offset in sorted(offset for offset in pending_proposals if offset < high_watermark):
                    pending_proposals.pop(offset).done(None, ProposalOutcomeUnknownError(offset))
        if not pending_proposals:
            self._answers.clear()
        self.port.committed(entries)

    def _answers_too_large(self, first_offset: int, last_offset: int, answers_bytes: int) -> ApplyFailedError:
        """The proposer's error when the state machine's answers to its
        records are more than one answer frame can carry (``RESULT_BYTES_MAX``):
        the same for a local proposer as for a client's, whose answer would
        otherwise never arrive. The records took effect; only the answers
        are lost. Logged once per proposal, here only (the proposer's node)."""
        offsets = f"offset {first_offset}" if first_offset == last_offset else f"offsets {first_offset}..{last_offset}"
        description = (
            f"ValueError: apply() answered {answers_bytes} bytes for {offsets}, over the limit of {RESULT_BYTES_MAX} "
            "an answer may carry (the records took effect; only their answers are dropped)"
        )
        logger.error("node %d: %s; the proposer gets ApplyFailedError", self.config.node_id, description)
        return ApplyFailedError(first_offset, description)

    def _apply_data(self, data: list[Entry]) -> None:
        """Apply committed data records one per call: batches differ from
        replica to replica (group commit), so a state machine must already
        give the same result however records are grouped, and one record per
        call tells exactly which record raised. An exception is contained to
        its record (deterministic: every replica raises at the same one),
        logged, and becomes the proposer's ``ApplyFailedError``. A machine
        that declares ``apply_never_raises`` gets the whole list in one call
        (see ``StateMachine``)."""
        apply = self.state_machine.apply
        keep_answers = bool(self.pending_proposals)
        if getattr(type(self.state_machine), "apply_never_raises", False) is True:
            answers = apply(data)
            problem = answers_problem(answers)
            if problem is not None:
                # The records took effect (it did not raise); only their
                # answers are unusable, and they are this node's alone.
                logger.error(
                    "node %d: the state machine's %s (offsets %d..%d); their proposers get ApplyFailedError",
                    self.config.node_id, problem, data[0].offset, data[-1].offset,
                )  # fmt: skip
                if keep_answers:
                    for entry in data:
                        self._answers[entry.offset] = ApplyFailedError(entry.offset, f"TypeError: {problem}")
                return
            if answers and keep_answers:
                self._answers.update(answers)
            return
        for entry in data:
            try:
                answers = apply([entry])
                problem = answers_problem(answers)
                if problem is not None:
                    # Contained as if apply had raised: the answer is
                    # deterministic, so every replica fails it alike.
                    raise TypeError(problem)
            except Exception as error:  # a user's state machine: contained, see above
                description = f"{type(error).__name__}: {error}"
                logger.error(
                    "node %d: the state machine raised applying offset %d (%s); the replica goes on",
                    self.config.node_id,
                    entry.offset,
                    description,
                )
                logger.debug("node %d: the traceback of offset %d", self.config.node_id, entry.offset, exc_info=True)
                if keep_answers:
                    self._answers[entry.offset] = ApplyFailedError(entry.offset, description)
                continue
            if answers and keep_answers:
                self._answers.update(answers)

    def _maybe_snapshot(self) -> None:
        if not self.snapshot_every_records:
            return
        applied = self.applied_offset
        if applied - self._last_snapshot_offset < self.snapshot_every_records:
            return
        epoch = self.core.log.epoch_at(applied - 1)
        if epoch is None or applied > self.core.high_watermark:
            return
        # Set before trying: a failed snapshot is retried only after another
        # ``snapshot_every_records`` records, not on every output.
        self._last_snapshot_offset = applied
        snapshot_id = SnapshotId(applied, epoch)
        try:
            data = self.state_machine.snapshot()
            if type(data) is not bytes:
                # Checked here, before the core keeps it and storage writes
                # it: anything else would stop the node in the persister.
                if not isinstance(data, (bytearray, memoryview)):
                    raise TypeError(f"snapshot() returned {_kind(data)}, not bytes")
                data = bytes(data)
        except Exception as error:  # a user's state machine: contained, never fatal
            # Nothing is lost by skipping it: the log behind the last good
            # snapshot stays, so this replica (and a follower fetching from
            # it) still has every record; only compaction waits.
            self.snapshot_failures += 1
            level = logging.DEBUG if self._snapshot_failing else logging.ERROR
            self._snapshot_failing = True
            logger.log(
                level,
                "node %d: the state machine failed to snapshot at offset %d (%s: %s); the log is kept "
                "and the snapshot retried %d records later",
                self.config.node_id,
                applied,
                type(error).__name__,
                error,
                self.snapshot_every_records,
            )
            return
        if self._snapshot_failing:
            self._snapshot_failing = False
            logger.info("node %d: the state machine snapshots again (offset %d)", self.config.node_id, applied)
        output = self.core.snapshot_taken(snapshot_id, data)
        self.port.snapshot_changed(snapshot_id, False)
        self._handle(output)

    # =====================================================================
    # Proposals and reads
    # =====================================================================

    def _propose(self, records: Sequence[bytes], done: Done) -> bool:
        """Propose one atomic batch; False (and ``done`` told) if this node
        cannot."""
        return self._propose_many(((records, done),))

    def _propose_many(self, proposals: Sequence[tuple[Sequence[bytes], Done]]) -> bool:
        """Propose each ``(records, done)`` as an atomic batch of its own,
        all in one append; False (and each ``done`` told) if this node
        cannot."""
        core = self.core
        records = proposals[0][0] if len(proposals) == 1 else [record for batch, _ in proposals for record in batch]
        try:
            first, output = core.propose(records)
        except NotLeaderError as error:
            for _, done in proposals:
                done(None, error)
            return False
        timer = self.commit_timer
        epoch = core.epoch
        for batch, done in proposals:
            self.pending_proposals[first + len(batch) - 1] = _PendingProposal(
                epoch, first, done, timer.start() if timer is not None else None
            )
            first += len(batch)
        self._handle(output)
        return True

    def _read(self, done: Done) -> None:
        self._next_read_id += 1
        read_id = self._next_read_id
        try:
            output = self.core.read_index(read_id)
        except NotLeaderError as error:
            done(None, error)
            return
        self.pending_reads[read_id] = done
        self._handle(output)

    # =====================================================================
    # The leader application
    # =====================================================================

    def _on_fetch_extension(self, request: FetchRequest) -> Any:
        application = self.application
        assert application is not None
        if not self.application_active:
            return {"error": int(ErrorCode.NOT_LEADER)}  # leader, but not caught up yet
        application.note_log_end(self.core.log.end_offset)
        return application.on_fetch(request.src, request.extension, request.fetch_offset, self.now_ms)

    def _provide_fetch_extension(self) -> Any:
        provider = self._fetch_extension_provider
        return provider() if provider is not None else None

    def _consume_fetch_extension(self, extension: Any) -> None:
        consumer = self._fetch_extension_consumer
        if consumer is not None:
            consumer(extension)

    def _drive_application(self, *, ticked: bool) -> None:
        """After every input: activate the application once this node leads
        and has applied a record of its own epoch, deactivate it when
        leadership ends, tick it, and propose what it queued."""
        application = self.application
        if application is None:
            return
        core = self.core
        ready = core.leader_has_committed_own_epoch and self.applied_offset > core.epoch_start_offset
        if ready and not self.application_active:
            self.application_active = True
            application.activate(self.now_ms, core.log.end_offset)
            logger.info("node %d: leader application active at offset %d", self.config.node_id, self.applied_offset)
        elif not core.is_leader and self.application_active:
            self.application_active = False
            application.deactivate()
            logger.info("node %d: leader application inactive", self.config.node_id)
        if not self.application_active:
            return
        if ticked:
            application.note_log_end(core.log.end_offset)
            application.tick(self.now_ms)
        self._propose_application_batches()

    def _propose_application_batches(self) -> None:
        assert self.application is not None
        for proposal in self.application.take_proposals():
            self.application_proposed = True
            if not self._propose(proposal.records, _batch_done(proposal.on_committed, len(proposal.records))):
                return  # no longer leading: the application is deactivated next

    def application_catch_up(self) -> None:
        """Let the leader application do the work it put off past its
        proposals, if it proposed since the last call: the controller
        proposes a fence's 10,000 partition changes once encoded and applies
        them to its working image here, about 30 ms of CPU. Each world calls
        it after the input that proposed, once that input's messages (the
        parked Fetches answered with the batch) have left: then the
        followers receive and persist the batch while the leader works,
        instead of after (issue 21). Cheap when nothing was proposed.
        Raises what the application's ``catch_up`` raises (a bug: the node
        stops, as for any exception of the application)."""
        if not self.application_proposed:
            return
        self.application_proposed = False
        if self.application is not None and self.application_active:
            self.application.catch_up()

    def _application_call(self, request: Any, done: ApplicationDone) -> None:
        application = self.application
        core = self.core
        if application is None or not self.application_active:
            done(None, NotLeaderError(core.leader_id, core.epoch), None)
            return
        application.note_log_end(core.log.end_offset)
        if self._application_note_voters is not None:
            self._application_note_voters(core.voters)
        reply = application.handle_request(request, self.now_ms)
        if reply.on_committed is not None:
            # Batches the application queued earlier go first: it predicted
            # their offsets in this order.
            self._propose_application_batches()
            build = reply.on_committed
            count = len(reply.records)

            def committed(result: Any, error: BaseException | None) -> None:
                if error is not None:
                    done(None, error, None)
                else:
                    first = result[0] - count + 1
                    done(build(first), None, (first, result[0]))

            self._propose(list(reply.records), committed)
        elif reply.on_read_confirmed is not None:
            confirmed = reply.on_read_confirmed

            def read(_offset: Any, error: BaseException | None) -> None:
                if error is not None:
                    done(None, error, None)
                else:
                    done(confirmed(), None, None)

            self._read(read)
        else:
            done(reply.response, None, None)


def _batch_done(on_committed: Callable[[int], Any] | None, count: int) -> Done:
    """The ``done`` of a batch the application queued itself:
    ``on_committed(first_offset)`` once committed; a lost batch needs
    nothing (the application learns the log again when next activated)."""

    def done(result: Any, error: BaseException | None) -> None:
        if error is None and on_committed is not None:
            on_committed(result[0] - count + 1)

    return done
