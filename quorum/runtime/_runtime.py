"""The trio runtime: drives one sans-IO ``QuorumNode`` over a transport and
durable storage.

Three tasks share the work:

- the **core task** owns the ``QuorumNode``: only it calls into it, one
  input at a time (ticks, received messages, local requests, persistence
  acknowledgements), in the order they were submitted. An input that
  arrives while the core is idle is handled on the spot by the task that
  submitted it (``_submit``): trio runs one task at a time, so this is the
  same as the core task taking it, minus a scheduling hop on every message;
- the **persister** honours the output contract: it takes every output
  the core produced, makes their persistence work durable with a single
  fsync (group commit: one fsync however many outputs queued up behind the
  previous one), only then hands their messages to the transport, and
  tells the core what is durable. On the leader the fsync runs in a worker
  thread, so that the leader keeps appending and answering fetches
  meanwhile; a node that does not lead persists inline, in the core task,
  since its next Fetch (the acknowledgement) waits for that fsync anyway;
- the **ticker** wakes every ``tick_ms`` of trio's clock (so ``MockClock``
  drives it in tests). Logical time follows that clock, not the number of
  wake-ups: before any input is handled, the core is fed every tick that
  fell due since the last one (``_feed_due_ticks``). A process that was
  paused (SIGSTOP, a long GC pause: seed 004) or starved of CPU therefore
  sees its timers expire as soon as it runs again, before it answers
  anything; had it counted wake-ups, an isolated leader would have kept
  serving leader-local reads for a whole check-quorum window after the
  pause, far past the staleness bound (KAFKA-15489).
"""

from __future__ import annotations

import abc
import logging
import queue
import random
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from .._config import QuorumConfig
from .._log import MemoryLog
from .._messages import ErrorCode, Message
from .._node import CoreHooks, NotLeaderError, QuorumDescription, QuorumError, QuorumNode, Snapshot
from .._output import Output, ReadFailed, ReadReady, Role, RoleChange
from .._types import Entry, RecordKind, SnapshotId
from ._metrics import Metrics
from ._state_machine import StateMachine
from . import _trace

logger = logging.getLogger("pykraft.quorum")


class ProposalLostError(QuorumError):
    """The proposal's offset was committed with another record: it did not
    happen (a definite failure; safe to retry)."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"the proposal at offset {offset} was replaced by another leader's record")
        self.offset = offset


class ReadNotConfirmedError(QuorumError):
    """A linearizable read could not be confirmed: this node lost its
    leadership first (retriable, at the leader hint)."""

    def __init__(self, leader_id: int | None) -> None:
        super().__init__(f"leadership lost before the read was confirmed (leader hint {leader_id})")
        self.leader_id = leader_id


@dataclass(slots=True)
class Proposal:
    """An atomic batch an application asks the leader to append.
    ``on_committed(first_offset)`` runs once the whole batch is committed."""

    records: list[bytes]
    on_committed: Callable[[int], Any] | None = None


class LeaderApplication(Protocol):
    """An application that acts on the quorum leader (the controller).

    The runtime calls it from the core task, synchronously; it must not
    block. ``activate`` comes once this node leads *and* has applied every
    record up to its own epoch's first one, so the application's view is
    complete (KAFKA-15345); ``deactivate`` when leadership ends.
    ``on_fetch`` answers the ``extension`` of an observer's Fetch (a
    broker's heartbeat) and returns the response's extension.
    ``take_proposals`` hands over the batches it wants appended.
    """

    def activate(self, now_ms: int, next_write_offset: int) -> None:
        ...

    def deactivate(self) -> None:
        ...

    def on_fetch(self, replica_id: int, extension: Any, fetch_offset: int, now_ms: int) -> Any:
        ...

    def tick(self, now_ms: int) -> None:
        ...

    def note_log_end(self, end_offset: int) -> None:
        """Called before every decision (request, fetch, tick) with where the
        leader's log ends: other proposers (clients of the quorum itself)
        may have appended since the application's last batch."""

    def take_proposals(self) -> list[Proposal]:
        ...

    def handle_request(self, request: Any, now_ms: int) -> Any:
        """A client's request. Returns a reply with exactly one of:
        ``response`` (answer now); ``records`` and ``on_committed(first)``
        (propose the records as one batch; the callback builds the answer
        once they are committed and applied); ``on_read_confirmed()`` (a
        linearizable read: the callback builds the answer after a ReadIndex
        round, once the state machine has applied up to the read offset)."""
        ...


class Transport(abc.ABC):
    """What the runtime needs of a network. ``send`` never blocks and may
    drop (Raft tolerates loss); received messages go to ``deliver``, and a
    peer found unreachable (connection refused or reset) to
    ``unreachable``."""

    @abc.abstractmethod
    def send(self, message: Message) -> None:
        """Queue ``message`` for its destination; never blocks."""

    @abc.abstractmethod
    async def run(
        self,
        deliver: Callable[[Message], None],
        unreachable: Callable[[int], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled; ``task_status.started()`` once ready."""


@dataclass(slots=True)
class _Waiter:
    """A local request waiting for the core."""

    event: trio.Event = field(default_factory=trio.Event)
    result: Any = None
    error: BaseException | None = None

    def resolve(self, result: Any = None, error: BaseException | None = None) -> None:
        if not self.event.is_set():
            self.result, self.error = result, error
            self.event.set()

    async def wait(self) -> Any:
        await self.event.wait()
        if self.error is not None:
            raise self.error
        return self.result


@dataclass(slots=True)
class _CallbackWaiter:
    """A local request answered by a callback, run in the core task as soon
    as the answer is known (no task to wake): ``done(result, error)``."""

    done: Callable[[Any, BaseException | None], None]
    resolved: bool = False

    def resolve(self, result: Any = None, error: BaseException | None = None) -> None:
        if not self.resolved:
            self.resolved = True
            self.done(result, error)


@dataclass(slots=True)
class _ReadThen:
    """A linearizable application read: once confirmed, the answer is built
    by ``then()`` (the state machine has applied up to the read offset: the
    core emits committed records before the ReadReady)."""

    waiter: _Waiter
    then: Callable[[], Any]

    def resolve(self, result: Any = None, error: BaseException | None = None) -> None:
        if error is not None:
            self.waiter.resolve(error=error)
        else:
            self.waiter.resolve(self.then())


@dataclass(slots=True)
class _PendingProposal:
    epoch: int
    last_offset: int
    waiter: _Waiter | None
    started_s: float  # perf_counter() when proposed, for the commit latency metric
    first_offset: int = 0
    on_committed: Callable[[int], Any] | None = None
    on_lost: Callable[[int], Any] | None = None


class _DiskThread:
    """One thread that carries out the leader's writes and fsyncs, fed
    through a queue: cheaper than a ``trio.to_thread`` call per batch (no
    limiter, no task to reschedule). ``done(error)`` runs in the trio
    thread once a batch is durable (or failed)."""

    def __init__(self, write_batch: Callable[[list[Output]], None], token: trio.lowlevel.TrioToken) -> None:
        self._write_batch = write_batch
        self._token = token
        self._jobs: queue.SimpleQueue[tuple[list[Output], Callable[[BaseException | None], None]] | None] = (
            queue.SimpleQueue()
        )
        self.last_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="pykraft-disk", daemon=True)
        self._thread.start()

    def submit(self, outputs: list[Output], done: Callable[[BaseException | None], None]) -> None:
        self._jobs.put((outputs, done))

    def stop(self) -> None:
        """Let the batch in progress finish, then end the thread (blocking)."""
        self._jobs.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            outputs, done = job
            error: BaseException | None = None
            started = time.perf_counter()
            try:
                self._write_batch(outputs)
            except BaseException as failure:  # noqa: BLE001 - handed to the trio thread
                error = failure
            self.last_seconds = time.perf_counter() - started
            try:
                self._token.run_sync_soon(done, error)
            except trio.RunFinishedError:
                return


class QuorumRuntime:
    """One quorum replica: core, storage, transport and state machine.

    ``storage`` is a ``quorum.storage.FileStorage`` or ``MemoryStorage``
    (anything with ``load()`` and ``persist(...)``); ``transport`` a
    ``Transport``. Run it with ``await nursery.start(runtime.run)``.
    """

    def __init__(
        self,
        config: QuorumConfig,
        state_machine: StateMachine,
        *,
        storage: Any,
        transport: Transport,
        rng: random.Random | None = None,
        snapshot_every_records: int = 10_000,
        metrics: Metrics | None = None,
        event_sink: Callable[[dict[str, Any]], None] | None = None,
        io_in_thread: bool = True,
        leader_application: LeaderApplication | None = None,
    ) -> None:
        self.config = config
        self.state_machine = state_machine
        self.storage = storage
        self.transport = transport
        self.metrics = metrics or Metrics()
        self.snapshot_every_records = snapshot_every_records
        self._event_sink = event_sink
        # Disk IO runs in a worker thread so the core keeps serving during
        # an fsync; in-memory storage (tests under MockClock) runs inline.
        self._io_in_thread = io_in_thread
        self._rng = rng or random.Random()
        # Inputs for the core, in order. An input that arrives while the
        # core is idle is handled at once by whoever submits it (no task
        # hop); one that arrives while the core is busy, or behind others,
        # waits here for the core task.
        self._inbox: deque[tuple] = deque()
        # Logical time: ticks fed to the core since trio's clock read
        # ``_clock_origin_s`` (set in ``run``). See ``_feed_due_ticks``.
        self._clock_origin_s: float | None = None
        self._ticks_fed = 0
        longest_timeout_ms = max(
            2 * config.election_timeout_ms,
            config.fetch_timeout_ms * config.check_quorum_factor,
            config.request_timeout_ms,
            config.election_backoff_max_ms,
        )
        # Past every timeout (and a minute, for the application's session
        # timers), more ticks change nothing: a longer pause is cut to this.
        self._max_catch_up_ticks = int(max(60_000, 2 * longest_timeout_ms) // config.tick_ms)
        self._inbox_wakeup = trio.Event()
        self._core_busy = True  # until run() has handled the initial output
        self._core_error: BaseException | None = None
        self._persist_queue: deque[Output] = deque()
        self._persist_wakeup = trio.Event()
        # True while the disk thread works on a batch: outputs queued
        # meanwhile wait for it (their messages go after its fsync).
        self._persisting = False
        self._disk_thread: _DiskThread | None = None
        self._pending_proposals: dict[int, _PendingProposal] = {}
        self._pending_reads: dict[int, _Waiter | _ReadThen] = {}
        self._next_read_id = 0
        self._applied_offset = 0
        self._last_snapshot_offset = 0
        # Answers the state machine gave for records a local proposer waits on.
        self._answers: dict[int, bytes] = {}
        self._role_watchers: list[trio.Event] = []
        self._stopping = False
        self.application = leader_application
        self._application_active = False
        # What this node adds to its own Fetches and does with the answers'
        # extensions (a broker agent's heartbeats): attached and detached at
        # run time, while the core's hooks stay the ones it was built with.
        self._fetch_extension_provider: Callable[[], Any] | None = None
        self._fetch_extension_consumer: Callable[[Any], None] | None = None
        self.node = self._recover()

    # =====================================================================
    # Startup
    # =====================================================================

    def _recover(self) -> QuorumNode:
        """Rebuild the core and the state machine from durable storage."""
        recovered = self.storage.load()
        snapshot = None
        if recovered.snapshot_id is not None:
            snapshot = Snapshot(recovered.snapshot_id, recovered.snapshot_bytes)
            self.state_machine.restore(recovered.snapshot_bytes)
            self._applied_offset = recovered.snapshot_id.end_offset
            self._last_snapshot_offset = recovered.snapshot_id.end_offset
        # The core's log starts at the snapshot: records kept on disk behind
        # it are not loaded, since the epoch just before them is not known
        # (a follower that far behind takes the snapshot instead).
        log = MemoryLog(snapshot.snapshot_id if snapshot else None, recovered.entries_after_snapshot)
        node = QuorumNode(
            self.config,
            rng=self._rng,
            election_state=recovered.election_state,
            log=log,
            snapshot=snapshot,
            hooks=CoreHooks(
                fetch_extension_handler=self._on_fetch_extension if self.application is not None else None,
                fetch_extension_provider=self._provide_fetch_extension,
                fetch_extension_consumer=self._consume_fetch_extension,
            ),
            # A new one per process start, not from the injected RNG: tests
            # restart nodes with the same seed (see QuorumNode).
            fetch_session=secrets.randbits(31),
        )
        logger.info(
            "node %d recovered: epoch %d, log [%d, %d), snapshot %s",
            self.config.node_id,
            node.epoch,
            log.start_offset,
            log.end_offset,
            snapshot.snapshot_id if snapshot else None,
        )
        return node

    # =====================================================================
    # Tasks
    # =====================================================================

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled."""
        if self._io_in_thread:
            self._disk_thread = _DiskThread(self._write_batch, trio.lowlevel.current_trio_token())
        self._clock_origin_s = trio.current_time()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.transport.run, self._deliver, self._unreachable)
                nursery.start_soon(self._persister)
                nursery.start_soon(self._ticker)
                self._handle(self.node.initial_output())
                task_status.started()
                await self._core_task()
        finally:
            if self._disk_thread is not None:
                # Storage is closed after this returns: no write may still
                # be running then.
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self._disk_thread.stop)
                self._disk_thread = None

    def _submit(self, item: tuple) -> None:
        """Hand an input to the core. Inputs are handled one at a time, in
        the order submitted: at once, by the submitting task, when the core
        is idle; otherwise by whoever is busy with the core, right after the
        input at hand."""
        self._inbox.append(item)
        if not self._core_busy:
            self._drain_inbox()

    def _drain_inbox(self) -> None:
        self._core_busy = True
        try:
            while self._inbox and self._core_error is None:
                self._feed_due_ticks()
                self._process(self._inbox.popleft())
        except BaseException as error:  # noqa: BLE001 - re-raised by the core task
            # A bug in the core or the runtime: the node stops, as it would
            # had the core task met it, not the task that submitted it.
            self._core_error = error
            self._inbox_wakeup.set()
        finally:
            self._core_busy = False

    def _feed_due_ticks(self) -> None:
        """Feed the core every tick due by trio's clock that it has not had
        yet, so that its timers (check quorum above all) are current before
        it handles the next input. Called with the core held."""
        if self._clock_origin_s is None:
            return
        elapsed_ms = (trio.current_time() - self._clock_origin_s) * 1000
        # The epsilon keeps a wake-up exactly on a tick boundary from being
        # rounded down to the tick before.
        due = int((elapsed_ms + 1e-6) // self.config.tick_ms)
        behind = due - self._ticks_fed
        if behind > self._max_catch_up_ticks:
            logger.warning(
                "node %d: %d ms behind trio's clock (paused or starved); catching up %d ticks",
                self.config.node_id,
                behind * self.config.tick_ms,
                self._max_catch_up_ticks,
            )
            self._ticks_fed = due - self._max_catch_up_ticks
        while self._ticks_fed < due and self._core_error is None:
            self._ticks_fed += 1
            self._process(("tick",))

    async def _core_task(self) -> None:
        self._core_busy = False
        self._drain_inbox()  # whatever arrived during startup
        while self._core_error is None:
            self._inbox_wakeup = trio.Event()
            await self._inbox_wakeup.wait()
        raise self._core_error

    def _process(self, item: tuple) -> None:
        kind = item[0]
        node = self.node
        if _trace.enabled and kind != "tick":
            _trace.stamp("core-in-" + (type(item[1]).__name__ if kind == "message" else kind))
        if kind == "tick":
            output = node.tick()
            if node.is_leader and node.current_tick % 50 == 0:
                self.metrics.observe_lag(node)
        elif kind == "message":
            output = node.step(item[1])
        elif kind == "persisted":
            output = node.persisted(item[1])
        elif kind == "unreachable":
            output = node.peer_unreachable(item[1])
        elif kind == "call":
            output = self._local_call(item[1], item[2])
        elif kind == "clock":
            return  # the ticks due were fed before it (_drain_inbox)
        else:  # pragma: no cover - a runtime bug
            raise AssertionError(f"unknown inbox item {kind!r}")
        self._handle(output)
        if _trace.enabled and kind != "tick":
            _trace.stamp("core-" + kind, item[1] if kind == "persisted" else None)
        if self.application is not None:
            self._drive_application(kind == "tick")

    async def _ticker(self) -> None:
        period_s = self.config.tick_ms / 1000
        while True:
            await trio.sleep(period_s)
            # Whatever ticks fell due are fed before this (empty) input.
            self._submit(("clock",))

    async def _persister(self) -> None:
        """Group commit for a leader whose storage is in memory (tests): the
        outputs queued while other tasks ran are persisted together."""
        while True:
            if self._persisting or not self._persist_queue:
                # Nothing to do, or the disk thread will take the queue.
                self._persist_wakeup = trio.Event()
                await self._persist_wakeup.wait()
                continue
            batch, durable = self._take_persist_batch()
            if durable:
                started = time.perf_counter()
                self._write_batch(durable)
                self.metrics.fsync_seconds.observe(time.perf_counter() - started)
            self._send_persisted(batch)
            if durable:
                self._submit(("persisted", durable[-1].persist_seq))

    def _persist_queued(self) -> None:
        """Start persisting what is queued, the way this node's role wants."""
        if self._persisting or not self._persist_queue:
            return
        if not self.node.is_leader:
            self._persist_inline()
        elif self._disk_thread is not None:
            self._persist_in_thread()
        else:
            self._persist_wakeup.set()

    def _persist_in_thread(self) -> None:
        """The leader's fsync runs in the disk thread, so that the leader
        keeps appending and answering fetches meanwhile (Raft thesis
        §10.2.1); everything queued behind it goes in the next fsync."""
        assert self._disk_thread is not None
        batch, durable = self._take_persist_batch()
        if not durable:
            self._send_persisted(batch)
            return
        self._persisting = True
        if _trace.enabled:
            _trace.stamp("persist-start", durable[-1].persist_seq)
        self._disk_thread.submit(durable, lambda error: self._persisted_in_thread(batch, durable, error))

    def _persisted_in_thread(self, batch: list[Output], durable: list[Output], error: BaseException | None) -> None:
        """In the trio thread (``run_sync_soon``), once the disk thread is
        done with ``batch``. Must not raise: trio would abort the run."""
        self._persisting = False
        if error is None:
            try:
                self.metrics.fsync_seconds.observe(self._disk_thread.last_seconds if self._disk_thread else 0.0)
                if _trace.enabled:
                    _trace.stamp("persist-done", durable[-1].persist_seq)
                self._send_persisted(batch)
                self._submit(("persisted", durable[-1].persist_seq))
                self._persist_queued()
                return
            except BaseException as failure:  # noqa: BLE001 - re-raised by the core task
                error = failure
        # A disk failure (the log may hold a prefix of the batch: nothing may
        # be acknowledged) or a bug: the node stops.
        self._core_error = error
        self._inbox_wakeup.set()

    def _take_persist_batch(self) -> tuple[list[Output], list[Output]]:
        batch = list(self._persist_queue)
        self._persist_queue.clear()
        return batch, [output for output in batch if output.has_persistence]

    def _send_persisted(self, batch: list[Output]) -> None:
        # Persist before acknowledging: only now may the messages leave
        # (a vote grant, a Fetch whose offset acknowledges records).
        send = self.transport.send
        for output in batch:
            for message in output.messages:
                send(message)

    def _persist_inline(self) -> None:
        """Persist the queued outputs here and now, in the core task: no
        task or thread hop between the fsync and the Fetch it allows. For a
        node that is not leading, whose next Fetch waits on this fsync
        anyway, blocking the loop for it costs nothing."""
        batch, durable = self._take_persist_batch()
        if durable:
            started = time.perf_counter()
            if _trace.enabled:
                _trace.stamp("persist-start-inline", durable[-1].persist_seq)
            self._write_batch(durable)
            self.metrics.fsync_seconds.observe(time.perf_counter() - started)
            if _trace.enabled:
                _trace.stamp("persist-done-inline", durable[-1].persist_seq)
        self._send_persisted(batch)
        if durable:
            self._submit(("persisted", durable[-1].persist_seq))

    def _write_batch(self, outputs: list[Output]) -> None:
        """Runs in a worker thread: all the batch's writes, one fsync."""
        storage = self.storage
        for output in outputs:
            if output.snapshot is not None and output.reset_log:
                storage.write_snapshot(*output.snapshot)
                storage.reset_to_snapshot(output.snapshot[0])
                snapshot = None
            else:
                snapshot = output.snapshot
            storage.persist(
                election_state=output.election_state,
                snapshot=snapshot,
                truncate_to=output.truncate_to,
                append=output.append,
                delete_before=output.delete_before,
                flush=False,
            )
        storage.flush()
        if any(output.snapshot is not None for output in outputs):
            # The size/age policy (NodeConfig.retention_bytes/_ms, like
            # Kafka's metadata.max.retention.*) may drop what lies behind
            # the new snapshot. The core need not hear of it: its own log
            # starts at a snapshot after a restart anyway.
            storage.apply_retention(int(time.time() * 1000))

    # =====================================================================
    # Transport callbacks (run in transport tasks; never block)
    # =====================================================================

    def _deliver(self, message: Message) -> None:
        if message.dst != self.config.node_id:
            logger.warning("dropped a message addressed to node %d: %r", message.dst, type(message).__name__)
            return
        self._submit(("message", message))

    def _unreachable(self, peer: int) -> None:
        self._submit(("unreachable", peer))

    # =====================================================================
    # Output handling (in the core task)
    # =====================================================================

    def _handle(self, output: Output) -> None:
        if not output:
            return
        for event in output.events:
            self._on_role_change(event)
        if output.snapshot_loaded is not None:
            snapshot_id, data = output.snapshot_loaded
            self.state_machine.restore(data)
            self._applied_offset = snapshot_id.end_offset
            self._last_snapshot_offset = snapshot_id.end_offset
            logger.info("node %d installed snapshot %s from the leader", self.config.node_id, snapshot_id)
        if output.committed:
            self._apply(output.committed)
        for read in output.reads:
            pending = self._pending_reads.pop(read.read_id, None)
            if pending is None:
                continue
            if isinstance(read, ReadReady):
                pending.resolve(read.offset)
            else:
                pending.resolve(error=ReadNotConfirmedError(self.node.leader_id))
        for message in output.early_messages:
            self.transport.send(message)
        if output.has_persistence or output.messages:
            self._persist_queue.append(output)
            self._persist_queued()
        self._maybe_snapshot()
        self.metrics.observe_node(self.node)

    # =====================================================================
    # The leader application (in the core task)
    # =====================================================================

    def _now_ms(self) -> int:
        return self.node.current_tick * self.config.tick_ms

    def _on_fetch_extension(self, request: Any) -> Any:
        assert self.application is not None
        if not self._application_active:
            return {"error": int(ErrorCode.NOT_LEADER)}  # leader, but not caught up yet
        self.application.note_log_end(self.node.log.end_offset)
        return self.application.on_fetch(request.src, request.extension, request.fetch_offset, self._now_ms())

    def attach_fetch_extension(self, provider: Callable[[], Any], consumer: Callable[[Any], None]) -> None:
        """Add ``provider()`` to every Fetch this node sends, and hand each
        answer's extension to ``consumer`` (a broker agent's heartbeats and
        the controller's replies). Both run inside a core step: they must be
        quick and must not raise."""
        self._fetch_extension_provider = provider
        self._fetch_extension_consumer = consumer

    def detach_fetch_extension(self) -> None:
        """Stop adding an extension to this node's Fetches."""
        self._fetch_extension_provider = None
        self._fetch_extension_consumer = None

    def _provide_fetch_extension(self) -> Any:
        provider = self._fetch_extension_provider
        return provider() if provider is not None else None

    def _consume_fetch_extension(self, extension: Any) -> None:
        consumer = self._fetch_extension_consumer
        if consumer is not None:
            consumer(extension)

    def _drive_application(self, ticked: bool) -> None:
        application = self.application
        assert application is not None
        ready = self.node.leader_has_committed_own_epoch and self._applied_offset > self.node.epoch_start_offset
        if ready and not self._application_active:
            self._application_active = True
            application.activate(self._now_ms(), self.node.log.end_offset)
            logger.info("node %d: leader application active at offset %d", self.config.node_id, self._applied_offset)
        elif not self.node.is_leader and self._application_active:
            self._application_active = False
            application.deactivate()
            logger.info("node %d: leader application inactive", self.config.node_id)
        if not self._application_active:
            return
        if ticked:
            application.note_log_end(self.node.log.end_offset)
            application.tick(self._now_ms())
        self._propose_application_batches()

    def _propose_application_batches(self) -> None:
        assert self.application is not None
        for proposal in self.application.take_proposals():
            if self._propose_batch(proposal.records, proposal.on_committed) is not None:
                return  # no longer leading: the application is deactivated next

    def _propose_batch(
        self,
        records: list[bytes],
        on_committed: Callable[[int], Any] | None,
        on_lost: Callable[[int], Any] | None = None,
    ) -> NotLeaderError | None:
        """Propose one atomic batch; returns the error if this node cannot."""
        try:
            first, output = self.node.propose(records)
        except NotLeaderError as error:
            return error
        last = first + len(records) - 1
        self._pending_proposals[last] = _PendingProposal(
            self.node.epoch, last, None, time.perf_counter(), first, on_committed, on_lost
        )
        self._handle(output)
        return None

    def _application_call(self, request: Any, waiter: _Waiter) -> Output:
        """An application request, in the core task (see
        ``LeaderApplication.handle_request``)."""
        application = self.application
        if application is None or not self._application_active:
            waiter.resolve(error=NotLeaderError(self.node.leader_id, self.node.epoch))
            return Output()
        application.note_log_end(self.node.log.end_offset)
        reply = application.handle_request(request, self._now_ms())
        if reply.on_committed is not None:
            # Batches the application queued earlier go first: it predicted
            # their offsets in this order.
            self._propose_application_batches()
            on_committed = reply.on_committed
            error = self._propose_batch(
                list(reply.records),
                lambda first: waiter.resolve(on_committed(first)),
                lambda offset: waiter.resolve(error=ProposalLostError(offset)),
            )
            if error is not None:
                waiter.resolve(error=error)
        elif reply.on_read_confirmed is not None:
            self._next_read_id += 1
            confirmed = reply.on_read_confirmed
            self._pending_reads[self._next_read_id] = _ReadThen(waiter, confirmed)
            return self.node.read_index(self._next_read_id)
        else:
            waiter.resolve(reply.response)
        return Output()

    async def application_request(self, request: Any) -> Any:
        """Hand ``request`` to the leader application; returns its answer.
        Raises ``NotLeaderError`` when this node's application is not the
        active one, ``ReadNotConfirmedError`` for a read that lost its
        leader."""
        return await self._call("application", request)

    def _apply(self, entries: list[Entry]) -> None:
        data = [entry for entry in entries if entry.kind is RecordKind.DATA and entry.offset >= self._applied_offset]
        if data:
            answers = self.state_machine.apply(data)
            if answers and self._pending_proposals:
                self._answers.update(answers)
        self._applied_offset = max(self._applied_offset, entries[-1].offset + 1)
        if self._pending_proposals:
            for entry in entries:
                pending = self._pending_proposals.get(entry.offset)
                if pending is None:
                    continue
                del self._pending_proposals[entry.offset]
                if entry.epoch != pending.epoch:
                    if pending.waiter is not None:
                        pending.waiter.resolve(error=ProposalLostError(entry.offset))
                    if pending.on_lost is not None:
                        pending.on_lost(entry.offset)
                    continue
                self.metrics.commit_seconds.observe(time.perf_counter() - pending.started_s)
                if _trace.enabled:
                    _trace.stamp("committed", entry.offset)
                if pending.waiter is not None:
                    answers = [self._answers.pop(offset, None) for offset in range(pending.first_offset, entry.offset + 1)]
                    pending.waiter.resolve((entry.offset, answers))
                if pending.on_committed is not None:
                    pending.on_committed(pending.first_offset)
        if not self._pending_proposals:
            self._answers.clear()

    def _maybe_snapshot(self) -> None:
        if not self.snapshot_every_records:
            return
        applied = self._applied_offset
        if applied - self._last_snapshot_offset < self.snapshot_every_records:
            return
        epoch = self.node.log.epoch_at(applied - 1)
        if epoch is None or applied > self.node.high_watermark:
            return
        self._last_snapshot_offset = applied
        output = self.node.snapshot_taken(SnapshotId(applied, epoch), self.state_machine.snapshot())
        logger.info("node %d took a snapshot at offset %d", self.config.node_id, applied)
        self._handle(output)

    def _on_role_change(self, event: RoleChange) -> None:
        logger.info(
            "node %d role=%s epoch=%d leader=%s reason=%s",
            event.node_id,
            event.role.value,
            event.epoch,
            event.leader_id,
            event.reason,
        )
        self.metrics.on_role_change(event)
        if self._event_sink is not None:
            self._event_sink(
                {
                    "event": "role",
                    "node": event.node_id,
                    "role": event.role.value,
                    "epoch": event.epoch,
                    "leader": event.leader_id,
                    "reason": event.reason,
                }
            )
        watchers, self._role_watchers = self._role_watchers, []
        for watcher in watchers:
            watcher.set()

    # =====================================================================
    # Local requests (called from any task; executed by the core task)
    # =====================================================================

    def _local_call(self, request: tuple, waiter: _Waiter) -> Output:
        name = request[0]
        node = self.node
        try:
            if name == "propose":
                payloads: Sequence[bytes] = request[1]
                first, output = node.propose(payloads)
                last = first + len(payloads) - 1
                self._pending_proposals[last] = _PendingProposal(node.epoch, last, waiter, request[2], first)
                return output
            if name == "read":
                self._next_read_id += 1
                self._pending_reads[self._next_read_id] = waiter
                return node.read_index(self._next_read_id)
            if name == "resign":
                output = node.resign()
                waiter.resolve(None)
                return output
            if name == "application":
                return self._application_call(request[1], waiter)
        except NotLeaderError as error:
            waiter.resolve(error=error)
            return Output()
        raise AssertionError(f"unknown local call {name!r}")  # pragma: no cover

    async def _call(self, *request: Any) -> Any:
        waiter = _Waiter()
        self._submit(("call", request, waiter))
        return await waiter.wait()

    async def propose(self, payloads: Sequence[bytes]) -> int:
        """Append records and wait until they are committed; returns the
        offset of the last one (``propose_with_answers`` also returns what
        the state machine answered for each).

        Raises ``NotLeaderError`` (with a leader hint) when this node does
        not lead, ``ProposalLostError`` when another leader's record took the
        offset (it did not happen). Wrap in ``trio.fail_after`` for a bound:
        a cancelled wait leaves the outcome unknown.
        """
        last, _ = await self.propose_with_answers(payloads)
        return last

    async def propose_with_answers(self, payloads: Sequence[bytes]) -> tuple[int, list[bytes | None]]:
        """``propose``, returning (last offset, the state machine's answer for
        each record, None where it gave none). Raises as ``propose``."""
        if not payloads:
            raise ValueError("nothing to propose")
        return await self._call("propose", list(payloads), time.perf_counter())

    def propose_with_callback(
        self, payloads: Sequence[bytes], done: Callable[[tuple[int, list[bytes | None]] | None, BaseException | None], None]
    ) -> None:
        """``propose_with_answers`` without a task: ``done(result, None)`` or
        ``done(None, error)`` is called once, in the core task, when the
        outcome is known (at once for ``NotLeaderError``). ``done`` must not
        block or raise."""
        if not payloads:
            raise ValueError("nothing to propose")
        self._submit(("call", ("propose", list(payloads), time.perf_counter()), _CallbackWaiter(done)))

    async def read_index(self) -> int:
        """Linearizable read barrier (ReadIndex): returns once the state
        machine reflects every write acknowledged before the call; returns
        the applied offset to read at.

        Raises ``NotLeaderError`` or ``ReadNotConfirmedError``.
        """
        offset = await self._call("read")
        # Committed records up to the read offset were applied before the
        # ReadReady was handled (the core emits them first).
        assert self._applied_offset >= offset
        return self._applied_offset

    def leader_local_offset(self) -> int:
        """For a leader-local read (answered from this node's own state, as
        Kafka's controller does): the applied offset, if this node leads and
        has applied a record of its own epoch (KAFKA-15345).

        Raises ``NotLeaderError`` otherwise.
        """
        # After a pause, check quorum must get its say before this node
        # answers as the leader: handling any input feeds the ticks due
        # (see the module docstring).
        self._submit(("clock",))
        if not self.node.leader_has_committed_own_epoch:
            raise NotLeaderError(self.node.leader_id, self.node.epoch)
        return self._applied_offset

    async def resign(self) -> None:
        """Hand leadership over (graceful shutdown)."""
        await self._call("resign")

    async def wait_for_role_change(self) -> None:
        event = trio.Event()
        self._role_watchers.append(event)
        await event.wait()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds; re-checked on every role change
        and every 10 ms of trio's clock."""
        while not predicate():
            with trio.move_on_after(0.01):
                await self.wait_for_role_change()

    # =====================================================================
    # Queries
    # =====================================================================

    @property
    def applied_offset(self) -> int:
        return self._applied_offset

    @property
    def role(self) -> Role:
        return self.node.role

    def describe(self) -> QuorumDescription:
        return self.node.describe()

    def statistics(self) -> dict[str, Any]:
        node = self.node
        return {
            "node_id": self.config.node_id,
            "role": node.role.value,
            "epoch": node.epoch,
            "leader_id": node.leader_id,
            "high_watermark": node.high_watermark,
            "log_start_offset": node.log.start_offset,
            "log_end_offset": node.log.end_offset,
            "applied_offset": self._applied_offset,
            "pending_proposals": len(self._pending_proposals),
            "pending_reads": len(self._pending_reads),
        }
