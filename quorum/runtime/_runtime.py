"""The trio runtime: drives one sans-IO ``quorum.ReplicaHost`` (the core,
the state machine, proposals, reads, snapshots and the leader application,
shared with the simulator) over a transport and durable storage. What is
left here is tasks, sockets, files, group commit and threads.

Three tasks share the work:

- the **core task** owns the ``ReplicaHost``: only it calls into it, one
  input at a time (ticks, received messages, local requests, persistence
  acknowledgements), in the order they were submitted. An input that
  arrives while the core is idle is handled on the spot by the task that
  submitted it (``_submit``): trio runs one task at a time, so this is the
  same as the core task taking it, minus a scheduling hop on every message;
- the **persister** honours the output contract: it takes every output
  the core produced, makes their persistence work durable with a single
  fsync (group commit: one fsync however many outputs queued up behind the
  previous one), only then hands their messages to the transport, and
  tells the core what is durable. On the leader it is a task of its own,
  woken by the core's output and run once the tasks ready before it
  (the connection readers with frames in hand) have handed theirs to the
  core: everything they appended shares its fsync, and the followers'
  Fetch answers carrying those records left before it starts, so the
  followers' disks work in parallel with the leader's (Raft thesis
  §10.2.1). The write and fsync run in trio's thread: a worker thread's
  hand-off cost about four ``futex`` calls, a wake-up socket and two thread
  wake-ups per write, and the thread fought the loop for the GIL
  (docs/benchmarks.md, "The runtime's disk path and wake-ups"). A node
  that does not lead persists inline, in the core's run, since its next
  Fetch (the acknowledgement) waits for that fsync anyway;
- the **ticker** sleeps on trio's clock (so ``MockClock`` drives it in
  tests) until the next tick at which a timer may act
  (``ReplicaHost.next_timer_tick``: the core's, the fetcher's, the leader
  application's), at most ``TICKER_SLEEP_MAX_MS``; handling any input
  that brings that tick nearer wakes it sooner (one comparison per run of
  the core: ``_drain_inbox`` lowers the ticker's cancel-scope deadline).
  An idle node thus wakes a few times a second, not every ``tick_ms``
  (issue 21). Logical time follows that clock, not the number of
  wake-ups: before any input is handled, the core is fed every tick that
  fell due since the last one (``_feed_due_ticks``), one by one, the same
  ticks in the same order as when the ticker woke for each. A process that was
  paused (SIGSTOP, a long GC pause: seed 004) or starved of CPU therefore
  sees its timers expire as soon as it runs again, before it answers
  anything; had it counted wake-ups, an isolated leader would have kept
  serving leader-local reads for a whole check-quorum window after the
  pause, far past the staleness bound (KAFKA-15489).

A disk that fails a write or an fsync (ENOSPC, EIO) is a condition, not a
crash (docs/storage.md, "Disk errors"): the failed batch and everything
queued behind it stay queued with their messages (nothing is acknowledged),
the core hears ``persist_failed`` (a leader resigns), and the persister
retries with exponential backoff, each time first returning the storage to
its last durable point (``return_to_durable_point``: after a failed fsync
nothing written since the last good one is trusted) and then writing the
whole queue again. The first batch that is durable ends the condition.
"""

from __future__ import annotations

import abc
import errno
import logging
import random
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .._config import QuorumConfig
from .._host import (
    LeaderApplication,
    Proposal,
    ProposalLostError,
    ProposalOutcomeUnknownError,
    ReadNotConfirmedError,
    ReplicaHost,
)
from .._errors import NotLeaderError, ReconfigurationError
from .._messages import ErrorCode, FetchRequest, FetchResponse, Message
from .._node import QuorumDescription, QuorumNode, Snapshot
from .._output import Output, Role, RoleChange
from .._persist import apply_output, apply_outputs
from .._service import ServiceClass, service_class
from .._types import Entry, SnapshotId
from .._voters import Voter, endpoint_address
from ._metrics import Metrics
from ._state_machine import StateMachine
from . import _trace

__all__ = ["LeaderApplication", "Proposal", "ProposalLostError", "QuorumRuntime", "ReadNotConfirmedError", "Transport"]

# The ticker sleeps at most this long even when no timer is due sooner, so
# that a timer the prediction missed (a bug) is late by this much at worst.
TICKER_SLEEP_MAX_MS = 500

# GET /health fails while more committed records than this wait to be applied.
HEALTH_APPLY_LAG_RECORDS_MAX = 10_000
# The leader high watermarks a follower keeps, with when it learned each,
# for the apply lag in time (``_note_leader_high_watermark``).
LEARNED_COMMITS_MAX = 1024
# The first retry of a failed disk write round, and the longest backoff.
DISK_RETRY_MIN_S = 0.05
DISK_RETRY_MAX_S = 5.0

# Brokers' (observers') quorum messages wait in their own queue and are
# served this many at a time; between two batches every other task runs,
# the voters' connection readers among them (``_serve_observers``).
OBSERVER_BATCH_MESSAGES = 16
# Past this many waiting, the oldest is dropped (a lost packet to Raft: the
# broker asks again after its request timeout). Each broker keeps one Fetch
# in flight (two at most, while a resend after its request timeout crosses
# the late one), so in normal operation the queue holds about one message
# per broker, however many brokers share a connection: 4,096 dropped 7,560
# messages of 5,000 brokers on a starved leader (issue 21). Sized from what
# it costs: a broker's Fetch with its heartbeat, decoded, is ~0.6 KiB
# (measured with tracemalloc, docs/benchmarks.md), so 65,536 waiting are
# ~40 MiB, room for 30,000 brokers with a resend each; past that, brokers
# are more than one leader serves within their session anyway.
OBSERVER_QUEUE_MESSAGES_MAX = 65_536
# And past this many bytes of their frames, whatever their count: a frame
# may be up to ``small_frame_bytes_max`` (1 MiB), and a Fetch's extension
# decodes to several times its frame, so the count alone let brokers (or
# anyone claiming to be one, in plaintext) park tens of GiB. A broker's
# Fetch with its heartbeat is about 0.2 KiB on the wire: 65,536 of them are
# ~13 MiB, inside this bound.
OBSERVER_QUEUE_BYTES_MAX = 32 * 1024 * 1024

_GAP_MAX_HELP = (
    "Leader only: the longest voter fetch gap in this leadership (check quorum resigns past"
    " check_quorum_factor x fetch timeout)."
)

_VOTER_REPAIRING_HELP = (
    "Leader only: 1 while this voter's latest Fetch says it repairs a damaged log (it neither votes nor stands)."
)

logger = logging.getLogger("pykraft.quorum")


def _is_proposal(item: tuple) -> bool:
    """An inbox item that is a local "propose" call."""
    return item[0] == "call" and item[1][0] == "propose"


class Transport(abc.ABC):
    """What the runtime needs of a network. ``send`` never blocks and may
    drop (Raft tolerates loss); received messages go to ``deliver``, and a
    peer found unreachable (connection refused or reset) to
    ``unreachable``. While ``deliver`` runs, ``delivering_frame_bytes`` is
    the size of the frame the message came in (0 for a network without
    frames): what bounds the brokers' queue in bytes."""

    delivering_frame_bytes = 0
    # Set by the runtime before ``run``: a transport that reads several
    # client requests in one go may call ``hold_core()`` before handing them
    # over and ``release_core()`` after, never across an await, so that they
    # are handled in one run of the core (QuorumRuntime.hold_core).
    hold_core: Callable[[], None] | None = None
    release_core: Callable[[], None] | None = None

    @abc.abstractmethod
    def send(self, message: Message) -> None:
        """Queue ``message`` for its destination; never blocks."""

    def begin_batch(self) -> None:
        """The runtime is about to handle inputs in one synchronous run:
        a transport may hold what ``send`` is given until ``end_batch``
        and send each connection's share as one write. Optional."""

    def end_batch(self) -> None:
        """Send what was held since ``begin_batch``; never blocks."""

    @abc.abstractmethod
    async def run(
        self,
        deliver: Callable[[Message], None],
        unreachable: Callable[[int], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled; ``task_status.started()`` once ready."""

    def learn_voter_address(self, node_id: int, address: tuple[str, int]) -> None:
        """A voter set in force here names voter ``node_id`` at ``address``
        (KIP-853: added at run time): reach it there from now on. An
        in-process network needs no addresses: the default does nothing."""


@dataclass(slots=True)
class _Waiter:
    """A local request waiting for the core. A proposal whose outcome the
    host cannot tell (``ProposalOutcomeUnknownError``: a snapshot from a new
    leader covered it) stays waiting: its caller's own timeout says
    "unknown", as it would have without the snapshot."""

    event: trio.Event = field(default_factory=trio.Event)
    result: Any = None
    error: BaseException | None = None

    def resolve(self, result: Any = None, error: BaseException | None = None) -> None:
        if error is not None and type(error) is ProposalOutcomeUnknownError:
            return
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
        if error is not None and type(error) is ProposalOutcomeUnknownError:
            return  # as _Waiter
        if not self.resolved:
            self.resolved = True
            self.done(result, error)


class _CommitTimer:
    """The host's ``CommitTimer``: proposal to commit, on the leader, for
    ``pykraft_quorum_commit_latency_seconds`` (and the trace's stamps)."""

    __slots__ = ("_metrics",)

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def start(self) -> float:
        return time.perf_counter()

    def stop(self, token: float, last_offset: int) -> None:
        self._metrics.commit_seconds.observe(time.perf_counter() - token)
        if _trace.enabled:
            _trace.stamp("committed", last_offset)


class _Port:
    """The runtime's side of its ``ReplicaHost`` (``quorum.ReplicaPort``)."""

    __slots__ = ("role_changed", "output_ready", "_runtime")

    def __init__(self, runtime: QuorumRuntime) -> None:
        self._runtime = runtime
        self.role_changed = runtime._on_role_change
        self.output_ready = runtime._output_ready

    def committed(self, entries: list[Entry]) -> None:
        pass  # the host applied them; nothing else to do here

    def snapshot_changed(self, snapshot_id: SnapshotId, installed: bool) -> None:
        node_id = self._runtime.config.node_id
        if installed:
            logger.info("node %d installed snapshot %s from the leader", node_id, snapshot_id)
        else:
            logger.info("node %d took a snapshot at offset %d", node_id, snapshot_id.end_offset)


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
        leader_application: LeaderApplication | None = None,
    ) -> None:
        self.config = config
        self.state_machine = state_machine
        self.storage = storage
        self.transport = transport
        # Where each static voter listens ("host:port"), for the VOTERS
        # record an upgrade to dynamic voters writes (``upgrade_voters``):
        # set by ``open_quorum_node`` from its ``--voters`` list.
        self.voter_endpoints: dict[int, tuple[str, ...]] = {}
        self.metrics = metrics or Metrics(config.node_id)
        self._init_metrics()
        self.snapshot_every_records = snapshot_every_records
        self._event_sink = event_sink
        self._rng = rng or random.Random()
        # Inputs for the core, in order. An input that arrives while the
        # core is idle is handled at once by whoever submits it (no task
        # hop); one that arrives while the core is busy, or behind others,
        # waits here for the core task.
        self._inbox: deque[tuple] = deque()
        # Logical time: ticks fed to the core since trio's clock read
        # ``_clock_origin_s`` (set in ``run``). See ``_feed_due_ticks``.
        self._clock_origin_s: float | None = None
        self._clock: trio.abc.Clock | None = None  # the run's clock, asked directly (hot path)
        self._ticks_fed = 0
        # Before this time on trio's clock no tick falls due (it is a
        # microsecond early, so that float rounding never holds one back):
        # most inputs arrive between two ticks and cost one comparison.
        self._next_tick_check_s = 0.0
        # The ticker's sleep (see ``_ticker``): the cancel scope it sleeps
        # in, and the tick it wakes for. ``_drain_inbox`` brings the wake-up
        # forward when an input set a nearer timer. ``ticker_wakeups``
        # counts the ticker's wake-ups (tests; docs/benchmarks.md).
        self._ticker_scope: trio.CancelScope | None = None
        self._ticker_wake_tick = 0
        self.ticker_wakeups = 0
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
        # Quorum messages from non-voters (brokers' Fetches), served after the
        # voters' (quorum.service_class; docs/operations.md, "A broker
        # stampede"): a voter's Fetch, handled by the task that read it,
        # never waits for them.
        # A broker's Fetch waits here as its id (an int), the Fetch itself in
        # _observer_fetches: a broker's newer Fetch takes the place of its
        # older one still waiting (see _deliver).
        self._observer_queue: deque[Message | int] = deque()
        # Each queued entry's frame bytes, in step with the queue (0 for a
        # broker's Fetch, whose bytes are in _observer_fetch_bytes: a newer
        # Fetch replaces it in place), and their sum.
        self._observer_queue_sizes: deque[int] = deque()
        self._observer_fetch_bytes: dict[int, int] = {}
        self._observer_queue_bytes = 0
        self._observer_fetches: dict[int, FetchRequest] = {}
        self._observer_wakeup = trio.Event()
        self._core_busy = True  # until run() has handled the initial output
        self._core_held = False  # busy only because a transport holds it (hold_core)
        self._core_error: BaseException | None = None
        self._persist_queue: deque[Output] = deque()
        self._persist_wakeup = trio.Event()
        # While a write round has failed: the errno name ("ENOSPC"), the
        # backoff before the next retry, and True while the persister owes
        # the queue a retry (nothing else may write meanwhile).
        self._disk_failure: str | None = None
        self._disk_retry_s = DISK_RETRY_MIN_S
        self._disk_retry_due = False
        # The storage's log end after the last flush that succeeded: the
        # point a failed round returns to.
        self._durable_log_end = 0
        self._role_watchers: list[trio.Event] = []
        # While leading: when each other voter's last Fetch was served (trio
        # time), for the voter fetch gap metric, the interval check quorum
        # watches (docs/operations.md, "Broker stampede").
        self._voter_fetch_served_s: dict[int, float] | None = None
        self._voter_fetch_gap_max_s = 0.0
        # While this node leads: the voters whose latest Fetch said they
        # repair a damaged log (the pykraft_quorum_voter_repairing gauge).
        self._voters_repairing: set[int] = set()
        self._stopping = False
        self.application = leader_application
        self.host = self._recover()
        self.node = self.host.core
        # The voter set whose endpoints the transport was last told of, and
        # who else wants to hear of a new one (``watch_voter_set``).
        self._voters_addressed: Any = None
        # The leaders' endpoints learned from NOT_LEADER answers that the
        # transport was last told of (``_address_learned_endpoints``).
        self._endpoints_addressed: Any = None
        self._voter_set_watchers: list[Callable[[], None]] = []

    # =====================================================================
    # Startup
    # =====================================================================

    def _recover(self) -> ReplicaHost:
        """Rebuild the host (core and state machine) from durable storage."""
        recovered = self.storage.load()
        self._durable_log_end = self.storage.end_offset
        snapshot = None
        if recovered.snapshot_id is not None:
            snapshot = Snapshot(recovered.snapshot_id, recovered.snapshot_bytes)
        host = ReplicaHost(
            self.config,
            self.state_machine,
            _Port(self),
            rng=self._rng,
            # A new one per process start, not from the injected RNG: tests
            # restart nodes with the same seed (see QuorumNode).
            fetch_session=secrets.randbits(31),
            election_state=recovered.election_state,
            snapshot=snapshot,
            entries=recovered.entries_after_snapshot,
            snapshot_every_records=self.snapshot_every_records,
            application=self.application,
            commit_timer=_CommitTimer(self.metrics) if self.metrics.enabled or _trace.enabled else None,
            repairing=getattr(self.storage, "repair", None),
            repair_finished=self._repair_finished,
        )
        self._observe_repair(host.core)
        logger.info(
            "node %d recovered: epoch %d, log [%d, %d), snapshot %s",
            self.config.node_id,
            host.core.epoch,
            host.core.log.start_offset,
            host.core.log.end_offset,
            snapshot.snapshot_id if snapshot else None,
        )
        return host

    # =====================================================================
    # Metrics and health (docs/operations.md, "Metrics" and "Health")
    # =====================================================================

    def _init_metrics(self) -> None:
        """The runtime's event series, bound once (their updates are on
        the hot path), and the collector that reads the node's state at
        scrape time."""
        metrics = self.metrics
        self._fsync_seconds = metrics.fsync_seconds
        self._write_seconds = metrics.histogram(
            "pykraft_quorum_disk_write_duration_seconds", "The writes of one group round, before its fsync."
        )
        self._voter_fetch_gap_seconds = metrics.histogram(
            "pykraft_quorum_voter_fetch_gap_seconds",
            "Leader only: time between two Fetches of one voter served (from the election for the first).",
        )
        self._disk_failed_gauge = metrics.gauge(
            "pykraft_quorum_disk_failed", "1 while writes to this node's disk fail (it acknowledges nothing)."
        )
        self._disk_failed_gauge.set(0)
        # Records appended, by where from: plain ints on the hot path (no
        # lock), exported by _collect_state.
        self._records_appended = {"proposal": 0, "fetch": 0}
        self._snapshots_written = metrics.counter("pykraft_quorum_snapshots_written_total", "Snapshots written here.")
        self._snapshot_seconds = metrics.histogram(
            "pykraft_quorum_snapshot_duration_seconds", "Writing one snapshot (with the round's other writes)."
        )
        self._snapshot_bytes = metrics.gauge("pykraft_quorum_snapshot_size_bytes", "The last snapshot written here.")
        self._snapshot_last_time = metrics.gauge(
            "pykraft_quorum_snapshot_last_timestamp_seconds", "Unix time of the last snapshot written here."
        )
        # The trio thread's CPU time when run() started (the loop's busy time).
        self._loop_thread_cpu_started_s = 0.0
        metrics.add_collector(self._collect_state)
        metrics.health_check = self.health
        metrics.ready_check = self.ready
        # The high watermark a leader first told this node since it started:
        # /ready waits until the state machine has applied that far.
        self._first_high_watermark: int | None = None
        # (leader high watermark, trio time this node first heard of it),
        # rising, for the high watermarks it has not applied up to yet: the
        # apply lag in records and in time (``apply_lag``).
        self._learned_commits: deque[tuple[int, float]] = deque()

    def _count_disk_failure(self, errno_name: str) -> None:
        self.metrics.add_to_counter(
            "pykraft_quorum_disk_failures_total", 1, "Failed disk write rounds (write or fsync) by errno.",
            errno=errno_name,
        )  # fmt: skip

    def _collect_state(self) -> list[Metric]:
        """At scrape time (in the trio thread, between two core steps): the
        node's state, read where it lives."""
        node, host = self.node, self.host
        label = str(self.config.node_id)

        def gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, help_text, labels=["node"])
            family.add_metric([label], value)
            return family

        role = GaugeMetricFamily("pykraft_quorum_role", "1 for the node's current role, 0 for the others.", labels=["node", "role"])
        for each in Role:
            role.add_metric([label, each.value], 1 if node.role is each else 0)
        leader = node.leader_id
        voted_for = node.voted_for
        high_watermark = node.high_watermark
        applied = host.applied_offset
        lag_records, lag_s = self.apply_lag()
        families = [
            role,
            gauge("pykraft_quorum_leader_id", "Current leader, -1 if unknown.", -1 if leader is None else leader),
            gauge("pykraft_quorum_has_leader", "1 while this node knows a leader of its epoch.", 0 if leader is None else 1),
            gauge("pykraft_quorum_voted_for", "The candidate this node voted for in its epoch, -1 if none.",
                  -1 if voted_for is None else voted_for),  # fmt: skip
            gauge("pykraft_quorum_epoch", "Current epoch.", node.epoch),
            gauge("pykraft_quorum_high_watermark", "Offset below which every record is committed.", high_watermark),
            gauge("pykraft_quorum_log_end_offset", "Offset after the last record.", node.log.end_offset),
            gauge("pykraft_quorum_log_start_offset", "First offset still in the log (behind it: the snapshot).",
                  node.log.start_offset),  # fmt: skip
            gauge("pykraft_quorum_applied_offset", "Offset after the last record the state machine applied.", applied),
            gauge("pykraft_quorum_apply_lag_records",
                  "Records this node knows committed (its leader's high watermark) and has not applied.", lag_records),
            gauge("pykraft_quorum_apply_lag_seconds",
                  "How long ago this node learned that the next record it has to apply was committed (0: none waits).",
                  lag_s),  # fmt: skip
            gauge("pykraft_quorum_proposals_pending", "Proposals appended here and not yet committed.",
                  len(host.pending_proposals)),  # fmt: skip
            gauge("pykraft_quorum_reads_pending", "Linearizable reads waiting for their barrier.", len(host.pending_reads)),
        ]
        lag = GaugeMetricFamily(
            "pykraft_quorum_replica_fetch_lag_records",
            "Leader only: records each replica is behind the leader's log end.",
            labels=["node", "replica", "kind"],
        )
        age = GaugeMetricFamily(
            "pykraft_quorum_replica_last_fetch_age_seconds",
            "Leader only: time since each replica's last fetch.",
            labels=["node", "replica", "kind"],
        )
        if node.is_leader:
            description = node.describe()
            # The ticks due by the clock but not yet fed count too: an idle
            # node's ticker sleeps past several (issue 21).
            now_ms = (node.current_tick + self._ticks_unfed()) * self.config.tick_ms
            for kind, replicas in (("voter", description.voters), ("observer", description.observers)):
                for replica in replicas:
                    if replica.node_id == node.node_id or replica.log_end_offset is None:
                        continue
                    lag.add_metric(
                        [label, str(replica.node_id), kind], max(0, description.log_end_offset - replica.log_end_offset)
                    )
                    if replica.last_fetch_ms is not None:
                        age.add_metric([label, str(replica.node_id), kind], max(0, now_ms - replica.last_fetch_ms) / 1000)
        appended = CounterMetricFamily(
            "pykraft_quorum_records_appended_total",
            "Records appended to the local log, by where from (proposal: as leader; fetch: from a leader).",
            labels=["node", "source"],
        )
        for source, count in self._records_appended.items():
            appended.add_metric([label, source], count)
        busy = CounterMetricFamily(
            "pykraft_event_loop_busy_seconds_total",
            "CPU time of the thread running this node's trio loop (rate() of it: the loop's busy ratio, "
            "Kafka's 1 - poll-idle-ratio).",
            labels=["node"],
        )
        # Read here, in the loop's thread: scrapes are served by the loop.
        busy.add_metric([label], max(0.0, time.thread_time() - self._loop_thread_cpu_started_s))
        snapshot_failures = CounterMetricFamily(
            "pykraft_quorum_snapshot_failures_total",
            "Snapshots the state machine failed to take (skipped, retried later).",
            labels=["node"],
        )
        snapshot_failures.add_metric([label], host.snapshot_failures)
        refused = CounterMetricFamily(
            "pykraft_quorum_inputs_refused_total",
            "Messages and stands the core turned away without acting on them, by the rule that refused them "
            "(QuorumNode.counters; the log has a line for each kind of message dropped).",
            labels=["node", "rule"],
        )
        for rule, count in node.counters.items():
            if rule != "disk_failures":  # not a refusal: pykraft_quorum_disk_failures_total counts them
                refused.add_metric([label, rule], count)
        families += [lag, age, appended, busy, snapshot_failures, refused]
        return families

    def _note_leader_high_watermark(self, response: FetchResponse) -> None:
        """After the core took ``response``: note how far the leader has
        committed, and when this node learned it, if it has not applied that
        far. The core's own high watermark stops at its log end (KIP-595: a
        follower adopts the leader's only up to there), and a record is
        applied in the step that commits it locally, so only the leader's
        figure shows a follower that lags (docs/operations.md, "Apply lag in
        records and in time").
        A few comparisons per Fetch answer; nothing on the leader."""
        learned = self._learned_commits
        if not learned and response.high_watermark <= self.host.applied_offset:
            return  # the common case, decided as below: nothing to note, nothing to forget
        node = self.node
        if response.error is not ErrorCode.NONE or response.epoch != node.epoch or response.src != node.leader_id:
            return
        high_watermark = response.high_watermark
        applied = self.host.applied_offset
        if high_watermark <= applied:
            learned.clear()
            return
        while learned and learned[0][0] <= applied:
            learned.popleft()
        if learned and high_watermark <= learned[-1][0]:
            return
        if len(learned) >= LEARNED_COMMITS_MAX:
            # Bounded: widen the newest range instead. Its records then
            # count from when the first of them was learned (the lag in
            # time may read high by that range's span, never low).
            learned[-1] = (high_watermark, learned[-1][1])
            return
        learned.append((high_watermark, trio.current_time()))

    def apply_lag(self) -> tuple[int, float]:
        """(records, seconds): the records this node knows committed (its
        own high watermark, or its leader's, whichever is further) and has
        not applied; and how long ago, on trio's clock, it first learned
        that the next record it has to apply was committed (0 when none
        waits). Kafka's ``last-applied-record-lag-ms`` counts from the
        record's append on the leader instead; this leaves out the commit
        and the Fetch answer's trip, and needs no clock shared between
        nodes. Call in the trio thread: raises ``RuntimeError`` outside
        the trio run while a lag is being timed."""
        applied = self.host.applied_offset
        learned = self._learned_commits
        while learned and learned[0][0] <= applied:
            learned.popleft()
        known_committed = max(self.node.high_watermark, learned[-1][0] if learned else 0)
        if not learned:
            return max(0, known_committed - applied), 0.0
        return known_committed - applied, max(0.0, trio.current_time() - learned[0][1])

    def health(self) -> tuple[bool, str]:
        """``GET /health``: (healthy, one-line reason). Healthy when this
        node knows a leader (the core forgets one it has not heard from
        within the fetch timeout; a leader resigns when check-quorum fails),
        its disk accepts writes, it is not repairing its log, and it has
        applied all but at most ``HEALTH_APPLY_LAG_RECORDS_MAX`` of the
        records it knows committed (``apply_lag``)."""
        node = self.node
        if self._disk_failure is not None:
            return False, f"disk writes fail ({self._disk_failure})"
        if node.repairing is not None:
            return False, "repairing a damaged log"
        if node.leader_id is None:
            return False, f"no leader known in epoch {node.epoch} (role {node.role.value})"
        lag, _ = self.apply_lag()
        if lag > HEALTH_APPLY_LAG_RECORDS_MAX:
            return False, f"{lag} committed records not applied (limit {HEALTH_APPLY_LAG_RECORDS_MAX})"
        return True, f"leader {node.leader_id} in epoch {node.epoch}, {lag} records to apply"

    def ready(self) -> tuple[bool, str]:
        """``GET /ready``: (ready, one-line reason). Ready once the state
        machine has applied every record committed when this node first
        heard of a leader after starting (it has caught up once), for as
        long as it is healthy (``health``)."""
        node = self.node
        if self._first_high_watermark is None and node.leader_id is not None:
            # What this node knows committed: its leader's high watermark
            # once a Fetch answer told it (its own stops at its log end).
            self._first_high_watermark = self.host.applied_offset + self.apply_lag()[0]
        if self._first_high_watermark is None:
            return False, "no leader heard of since start"
        applied = self.host.applied_offset
        if applied < self._first_high_watermark:
            return False, f"catching up: applied {applied} of {self._first_high_watermark}"
        healthy, reason = self.health()
        return healthy, ("caught up; " if healthy else "") + reason

    def _repair_finished(self) -> None:
        """The core repaired its damaged log: make that durable (storage
        removes its repair marker). Done here, inline, and not by the disk
        thread: it is one small file, once, and until it is gone a restart
        only repairs again (docs/storage.md, "Repair")."""
        self.storage.finish_repair()
        self._observe_repair(self.node)

    def _observe_repair(self, node: QuorumNode) -> None:
        self.metrics.set_gauge(
            "pykraft_quorum_repairing",
            1 if node.repairing is not None else 0,
            "1 while this voter repairs a damaged log: it neither votes nor stands.",
        )

    # =====================================================================
    # Tasks
    # =====================================================================

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled."""
        self._clock = trio.lowlevel.current_clock()
        self._clock_origin_s = self._clock.current_time()
        self._loop_thread_cpu_started_s = time.thread_time()
        async with trio.open_nursery() as nursery:
            self.transport.hold_core, self.transport.release_core = self.hold_core, self.release_core
            await nursery.start(self.transport.run, self._deliver, self._unreachable)
            nursery.start_soon(self._persister)
            nursery.start_soon(self._ticker)
            nursery.start_soon(self._serve_observers)
            self.host.start()
            task_status.started()
            await self._core_task()

    def _submit(self, item: tuple) -> None:
        """Hand an input to the core. Inputs are handled one at a time, in
        the order submitted: at once, by the submitting task, when the core
        is idle; otherwise by whoever is busy with the core, right after the
        input at hand."""
        self._inbox.append(item)
        if not self._core_busy:
            self._drain_inbox()

    def hold_core(self) -> None:
        """A transport is about to hand over several inputs read in one go
        (a client's pipelined requests): queue them instead of handling
        each at once, until ``release_core``, which handles them as one run
        of the core (consecutive proposals in one append). Must be released
        before the caller awaits anything. Does nothing while the core is
        busy already."""
        if not self._core_busy:
            self._core_busy = self._core_held = True

    def release_core(self) -> None:
        """End ``hold_core``: handle what was queued meanwhile. Does
        nothing unless held."""
        if self._core_held:
            self._core_busy = self._core_held = False
            if self._inbox:
                self._drain_inbox()

    def _drain_inbox(self) -> None:
        self._core_busy = True
        # What this run of the core sends to one connection (a commit's
        # answers to a pipelining client, say) leaves as one write: one
        # system call, and under TLS one encryption, instead of one each.
        # Nothing waits for it: the batch ends before this returns.
        self.transport.begin_batch()
        host = self.host
        try:
            inbox = self._inbox
            while inbox and self._core_error is None:
                self._feed_due_ticks()
                if host.application_proposed:
                    self._application_catch_up()
                item = inbox.popleft()
                if _is_proposal(item) and inbox and _is_proposal(inbox[0]):
                    item = ("proposals", self._take_waiting_proposals(item))
                self._process(item)
                if host.application_proposed:
                    self._application_catch_up()
            # An input may have set a nearer timer (a Fetch sent, parked or
            # answered, a role changed): wake the ticker for it.
            if self._core_error is None and host.next_timer_tick() < self._ticker_wake_tick:
                self._wake_ticker_sooner()
        except BaseException as error:  # noqa: BLE001 - re-raised by the core task
            # A bug in the core or the runtime: the node stops, as it would
            # had the core task met it, not the task that submitted it.
            self._core_error = error
            self._inbox_wakeup.set()
        finally:
            self._core_busy = False
            self.transport.end_batch()

    def _wake_ticker_sooner(self) -> None:
        """Bring the ticker's wake-up forward to the host's next timer tick
        (the ticker recomputes its sleep once it wakes)."""
        scope = self._ticker_scope
        if scope is None:
            return  # awake: it asks the host before it sleeps again
        wake_tick = self.host.next_timer_tick()
        self._ticker_wake_tick = wake_tick
        scope.deadline = min(scope.deadline, self._tick_time_s(wake_tick))

    def _tick_time_s(self, core_tick: int) -> float:
        """When the core's tick ``core_tick`` falls due on trio's clock
        (``_feed_due_ticks``; past a long pause the runtime counts more
        ticks than the core was fed)."""
        assert self._clock_origin_s is not None
        tick = core_tick + self._ticks_fed - self.node.current_tick
        return self._clock_origin_s + tick * self.config.tick_ms / 1000

    def _application_catch_up(self) -> None:
        """The leader application proposed: send what the core answered so
        far (the batch, to the parked followers) now, then let the
        application do its put-off work while they persist it
        (``ReplicaHost.application_catch_up``). Called with the core held."""
        self.transport.end_batch()
        self.transport.begin_batch()
        self.host.application_catch_up()

    def _feed_due_ticks(self) -> None:
        """Feed the core every tick due by trio's clock that it has not had
        yet, so that its timers (check quorum above all) are current before
        it handles the next input. Called with the core held."""
        clock = self._clock
        if clock is None:
            return
        now_s = clock.current_time()
        if now_s < self._next_tick_check_s:
            return
        elapsed_ms = (now_s - self._clock_origin_s) * 1000
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
        self._next_tick_check_s = self._clock_origin_s + ((self._ticks_fed + 1) * self.config.tick_ms - 0.001) / 1000

    def _ticks_unfed(self) -> int:
        """Ticks due by trio's clock that the core has not been fed yet
        (at most the ticker's sleep, ``TICKER_SLEEP_MAX_MS``)."""
        if self._clock is None or self._clock_origin_s is None:
            return 0
        elapsed_ms = (self._clock.current_time() - self._clock_origin_s) * 1000
        return max(0, int((elapsed_ms + 1e-6) // self.config.tick_ms) - self._ticks_fed)

    async def _core_task(self) -> None:
        self._core_busy = False
        self._drain_inbox()  # whatever arrived during startup
        while self._core_error is None:
            self._inbox_wakeup = trio.Event()
            await self._inbox_wakeup.wait()
        raise self._core_error

    def _process(self, item: tuple) -> None:
        kind = item[0]
        host = self.host
        if _trace.enabled and kind != "tick":
            _trace.stamp("core-in-" + (type(item[1]).__name__ if kind == "message" else kind))
        if kind == "tick":
            host.tick()
        elif kind == "message":
            message = item[1]
            if self._voter_fetch_served_s is not None and type(message) is FetchRequest:
                self._observe_voter_fetch(message.src)
                if message.src in self._voter_fetch_served_s and message.repairing != (message.src in self._voters_repairing):
                    self._observe_voter_repairing(message.src, message.repairing)
            host.step(message)
            if type(message) is FetchResponse:
                self._note_leader_high_watermark(message)
        elif kind == "persisted":
            host.persisted(item[1])
        elif kind == "persist_failed":
            host.persist_failed(item[1], item[2])
        elif kind == "unreachable":
            host.peer_unreachable(item[1])
        elif kind == "proposals":
            host.propose_many(item[1])
        elif kind == "call":
            self._local_call(item[1], item[2])
        elif kind == "clock":
            return  # the ticks due were fed before it (_drain_inbox)
        else:  # pragma: no cover - a runtime bug
            raise AssertionError(f"unknown inbox item {kind!r}")
        if self.node.voters is not self._voters_addressed:
            self._address_voters()
        if _trace.enabled and kind != "tick":
            _trace.stamp("core-" + kind, item[1] if kind == "persisted" else None)

    def _address_voters(self) -> None:
        """The voter set changed (a VOTERS record appended, truncated or
        installed with a snapshot): tell the transport where each voter
        listens, so that a voter added at run time is reached like the
        bootstrap ones (its first endpoint; one it cannot parse is logged
        and left to answer over its own connections)."""
        voters = self._voters_addressed = self.node.voters
        for voter in voters.voters:
            if voter.node_id == self.config.node_id or not voter.endpoints:
                continue
            try:
                address = endpoint_address(voter.endpoints[0])
            except ValueError as error:
                logger.warning("node %d: voter %d: %s", self.config.node_id, voter.node_id, error)
                continue
            self.transport.learn_voter_address(voter.node_id, address)
        for watcher in self._voter_set_watchers:
            watcher()

    def _address_learned_endpoints(self) -> None:
        """A NOT_LEADER answer named where a leader listens (KIP-853
        NodeEndpoints): reach it there, before the Fetch this output sends
        it leaves. The core validated the endpoint (``check_endpoint``)."""
        learned = self._endpoints_addressed = self.node.learned_endpoints
        for node_id, endpoint in learned.items():
            self.transport.learn_voter_address(node_id, endpoint_address(endpoint))

    def watch_voter_set(self, watcher: Callable[[], None]) -> None:
        """Call ``watcher()`` in the core task whenever the voter set in
        force here changes (a VOTERS record appended or truncated, a
        snapshot installed), before the next input is handled; and once now.
        It must not block; what it raises stops the node."""
        self._voter_set_watchers.append(watcher)
        watcher()

    def _observe_voter_fetch(self, voter: int) -> None:
        """A voter's Fetch is served, while this node leads: the time since
        its previous one (or since the election) goes to the metrics."""
        served = self._voter_fetch_served_s
        assert served is not None
        last_s = served.get(voter)
        if last_s is None:
            return  # an observer (a broker)
        assert self._clock is not None  # set in ``run``, before any message
        now_s = self._clock.current_time()
        served[voter] = now_s
        gap_s = now_s - last_s
        self._voter_fetch_gap_seconds.observe(gap_s)
        if gap_s > self._voter_fetch_gap_max_s:
            self._voter_fetch_gap_max_s = gap_s
            self.metrics.set_gauge("pykraft_quorum_voter_fetch_gap_max_seconds", gap_s, _GAP_MAX_HELP)

    def _observe_voter_repairing(self, voter: int, repairing: bool) -> None:
        """While this node leads, ``voter``'s Fetch said it started (or
        finished) repairing a damaged log: the gauge says so, per voter."""
        if repairing:
            self._voters_repairing.add(voter)
        else:
            self._voters_repairing.discard(voter)
        self.metrics.set_gauge("pykraft_quorum_voter_repairing", 1 if repairing else 0, _VOTER_REPAIRING_HELP, voter=str(voter))

    async def _ticker(self) -> None:
        """Wake when the next tick that may act falls due (see the module
        docstring) and feed the ticks due. The ticks themselves are fed by
        ``_feed_due_ticks`` before every input, this wake-up's included:
        the ticker only makes sure that a timer fires when no input comes."""
        sleep_max_ticks = max(1, TICKER_SLEEP_MAX_MS // self.config.tick_ms)
        while True:
            wake_tick = min(self.host.next_timer_tick(), self.node.current_tick + sleep_max_ticks)
            self._ticker_wake_tick = wake_tick
            with trio.CancelScope(deadline=self._tick_time_s(wake_tick)) as scope:
                self._ticker_scope = scope
                try:
                    await trio.sleep_forever()
                finally:
                    self._ticker_scope = None
            self.ticker_wakeups += 1
            # Whatever ticks fell due are fed before this (empty) input.
            self._submit(("clock",))

    async def _persister(self) -> None:
        """The leader's group commit (see the module docstring), and the
        retries after a failed write round on any node. Woken by
        ``_persist_queued``, it runs after the tasks that were ready before
        it: the outputs of every frame they had in hand share one fsync."""
        while True:
            if self._disk_retry_due:
                await trio.sleep(self._disk_retry_s)
                self._retry_disk()
                continue
            if not self._persist_queue:
                self._persist_wakeup = trio.Event()
                await self._persist_wakeup.wait()
                continue
            batch, durable = self._take_persist_batch()
            if durable:
                if _trace.enabled:
                    _trace.stamp("persist-start", durable[-1].persist_seq)
                try:
                    self._write_batch(durable)
                except OSError as error:
                    self._persist_failed(batch, durable, error)
                    continue
                self._disk_ok()
                if _trace.enabled:
                    _trace.stamp("persist-done", durable[-1].persist_seq)
            self._send_persisted(batch)
            if durable:
                self._submit(("persisted", durable[-1].persist_seq))

    def _persist_failed(self, batch: list[Output], durable: list[Output], error: OSError) -> None:
        """A write round failed: a condition, not a crash. The round goes
        back to the head of the queue with its messages (nothing of it is
        acknowledged), the core hears of it (a leader resigns), and the
        persister retries after a backoff (``_retry_disk``)."""
        name = errno.errorcode.get(error.errno or 0, type(error).__name__)
        self._persist_queue.extendleft(reversed(batch))
        self._count_disk_failure(name)
        self._disk_failed_gauge.set(1)
        if self._disk_failure is None:
            # One line per transition; the retries are counted, not logged.
            logger.error(
                "node %d: disk write failed (%s: %s): not acknowledging; retrying from log end %d",
                self.config.node_id,
                name,
                error.strerror or error,
                self._durable_log_end,
            )
            self._disk_retry_s = DISK_RETRY_MIN_S
        else:
            self._disk_retry_s = min(2 * self._disk_retry_s, DISK_RETRY_MAX_S)
        self._disk_failure = name
        self._disk_retry_due = True
        self._submit(("persist_failed", durable[-1].persist_seq, name))
        self._persist_wakeup.set()

    def _retry_disk(self) -> None:
        """In the persister, after the backoff: return the storage to its
        last durable point (after a failed fsync nothing since is trusted:
        fsyncgate), then write everything queued again."""
        try:
            self.storage.return_to_durable_point(self._durable_log_end)
        except OSError as error:
            name = errno.errorcode.get(error.errno or 0, type(error).__name__)
            self._count_disk_failure(name)
            self._disk_retry_s = min(2 * self._disk_retry_s, DISK_RETRY_MAX_S)
            return
        self._disk_retry_due = False
        self._persist_queued()

    def _disk_ok(self) -> None:
        """A write round is durable: note the durable point, and end a
        failure condition if one was in force."""
        self._durable_log_end = self.storage.end_offset
        if self._disk_failure is not None:
            logger.warning(
                "node %d: disk writes succeed again (after %s): acknowledging from log end %d",
                self.config.node_id,
                self._disk_failure,
                self._durable_log_end,
            )
            self._disk_failure = None
            self._disk_failed_gauge.set(0)

    def _persist_queued(self) -> None:
        """Start persisting what is queued, the way this node's role wants:
        a follower at once, in the core's run; the leader in the persister
        task, once the core's run (and every other task ready meanwhile)
        has handed its frames to the transport."""
        if self._disk_retry_due or not self._persist_queue:
            return
        if not self.node.is_leader:
            self._persist_inline()
        else:
            self._persist_wakeup.set()

    def _take_persist_batch(self) -> tuple[list[Output], list[Output]]:
        batch = list(self._persist_queue)
        self._persist_queue.clear()
        return batch, [output for output in batch if output.persist_seq is not None]

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
            if _trace.enabled:
                _trace.stamp("persist-start-inline", durable[-1].persist_seq)
            try:
                self._write_batch(durable)
            except OSError as error:
                self._persist_failed(batch, durable, error)
                return
            self._disk_ok()
            if _trace.enabled:
                _trace.stamp("persist-done-inline", durable[-1].persist_seq)
        self._send_persisted(batch)
        if durable:
            self._submit(("persisted", durable[-1].persist_seq))

    def _write_batch(self, outputs: list[Output]) -> None:
        """All the batch's writes, one fsync."""
        storage = self.storage
        started = time.perf_counter()
        snapshots = any(output.snapshot is not None for output in outputs)
        if not snapshots:
            # A group commit of pipelined proposals: one write to the log
            # for all their records (``apply_outputs``).
            apply_outputs(outputs, storage)
        else:
            for output in outputs:
                if output.snapshot is None:
                    apply_output(output, storage)
                    continue
                snapshot_started = time.perf_counter()
                apply_output(output, storage)
                self._snapshot_seconds.observe(time.perf_counter() - snapshot_started)
                self._snapshots_written.inc()
                self._snapshot_bytes.set(len(output.snapshot[1]))
                self._snapshot_last_time.set(time.time())
        written = time.perf_counter()
        storage.flush()
        self._write_seconds.observe(written - started)
        self._fsync_seconds.observe(time.perf_counter() - written)
        if snapshots:
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
        if service_class(message, self.config.voter_set) is ServiceClass.OBSERVER:
            queue = self._observer_queue
            queued_bytes = size_bytes = self.transport.delivering_frame_bytes
            if type(message) is FetchRequest:
                # A broker's newer Fetch replaces its older one still waiting,
                # in that one's place: the older one's answer would reach a
                # broker that sent again after its request timeout and ignores
                # it. When brokers waited longer than that (5,000 starting at
                # once, issue 21), the leader answered only Fetches their
                # senders had given up on, each answer thousands of records,
                # while the resends queued behind them (docs/benchmarks.md).
                fetches, fetch_bytes = self._observer_fetches, self._observer_fetch_bytes
                src = message.src
                if src in fetches:
                    fetches[src] = message
                    self._observer_queue_bytes += size_bytes - fetch_bytes[src]
                    fetch_bytes[src] = size_bytes
                    self._count_observer_message_dropped("replaced")
                    self._trim_observer_queue()
                    return
                fetches[src] = message
                fetch_bytes[src] = size_bytes
                message, queued_bytes = src, 0
            queue.append(message)
            self._observer_queue_sizes.append(queued_bytes)
            self._observer_queue_bytes += size_bytes
            self._trim_observer_queue()
            self._observer_wakeup.set()
            return
        self._submit(("message", message))

    def _trim_observer_queue(self) -> None:
        """Drop the oldest waiting brokers' messages while the queue is
        past its count or byte bound (the newest always stays: one frame is
        far below the byte bound)."""
        queue = self._observer_queue
        while len(queue) > 1 and (
            len(queue) > OBSERVER_QUEUE_MESSAGES_MAX or self._observer_queue_bytes > OBSERVER_QUEUE_BYTES_MAX
        ):
            self._take_observer_message()
            self._count_observer_message_dropped("queue_full")

    def _take_observer_message(self) -> Message:
        """The oldest waiting broker's message, out of the queue and its
        byte count."""
        oldest = self._observer_queue.popleft()
        size_bytes = self._observer_queue_sizes.popleft()
        if type(oldest) is int:
            size_bytes = self._observer_fetch_bytes.pop(oldest)
            oldest = self._observer_fetches.pop(oldest)
        self._observer_queue_bytes -= size_bytes
        return oldest

    def _count_observer_message_dropped(self, reason: str) -> None:
        self.metrics.add_to_counter(
            "pykraft_quorum_observer_messages_dropped_total",
            reason=reason,
            help_text=(
                "Brokers' quorum messages dropped unserved: past the bound of those waiting (queue_full), or a"
                " Fetch its broker's newer Fetch replaced while it waited (replaced)."
            ),
        )

    async def _serve_observers(self) -> None:
        """Hand brokers' quorum messages to the core, a batch at a time,
        letting every other task (a voter's connection reader, which hands
        its Fetch to the core at once) run between two batches."""
        queue = self._observer_queue
        while True:
            if not queue:
                self._observer_wakeup = trio.Event()
                await self._observer_wakeup.wait()
                continue
            for _ in range(min(OBSERVER_BATCH_MESSAGES, len(queue))):
                self._submit(("message", self._take_observer_message()))
            await trio.lowlevel.checkpoint()

    def _unreachable(self, peer: int) -> None:
        self._submit(("unreachable", peer))

    # =====================================================================
    # The host's effects (in the core task)
    # =====================================================================

    def _output_ready(self, output: Output) -> None:
        """An output the host has handled: early messages leave now; the
        rest is persisted (group commit) before its messages leave."""
        if self.node.learned_endpoints is not self._endpoints_addressed:
            self._address_learned_endpoints()
        for message in output.early_messages:
            self.transport.send(message)
        if output.append:
            self._records_appended["proposal" if self.node.is_leader else "fetch"] += len(output.append)
        # The core numbers exactly the outputs with persistence work.
        if output.persist_seq is not None or output.messages:
            self._persist_queue.append(output)
            self._persist_queued()

    def attach_fetch_extension(self, provider: Callable[[], Any], consumer: Callable[[Any], None]) -> None:
        """Add ``provider()`` to every Fetch this node sends, and hand each
        answer's extension to ``consumer`` (a broker agent's heartbeats and
        the controller's replies). Both run inside a core step: they must be
        quick and must not raise."""
        self.host.attach_fetch_extension(provider, consumer)

    def detach_fetch_extension(self) -> None:
        """Stop adding an extension to this node's Fetches."""
        self.host.detach_fetch_extension()

    async def application_request(self, request: Any) -> Any:
        """Hand ``request`` to the leader application; returns its answer.
        Raises ``NotLeaderError`` when this node's application is not the
        active one, ``ReadNotConfirmedError`` for a read that lost its
        leader, ``ProposalLostError`` for a write another leader's record
        replaced."""
        return await self._call("application", request)

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
        if event.role is Role.LEADER and event.node_id == self.config.node_id:
            now_s = trio.current_time()
            self._voter_fetch_served_s = {voter: now_s for voter in self.node.voters.ids if voter != event.node_id}
            self._voter_fetch_gap_max_s = 0.0
            self.metrics.set_gauge("pykraft_quorum_voter_fetch_gap_max_seconds", 0.0, _GAP_MAX_HELP)
        elif event.role is not Role.LEADER:
            self._voter_fetch_served_s = None
        if event.role is not Role.LEADER or event.node_id != self.config.node_id:
            # Only a leader hears the voters' Fetches: what it heard as leader
            # is no longer known.
            for voter in sorted(self._voters_repairing):
                self._observe_voter_repairing(voter, False)
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

    def _proposal_done(self, waiter: _Waiter | _CallbackWaiter) -> Callable[..., None]:
        """What the host calls with a proposal's outcome: the waiter's
        ``resolve``, counting failures when metrics are kept."""
        resolve = waiter.resolve
        if not self.metrics.enabled:
            return resolve

        def count_failure(result: Any = None, error: BaseException | None = None) -> None:
            if error is not None and type(error) is not ProposalOutcomeUnknownError:
                self.metrics.add_to_counter(
                    "pykraft_quorum_proposals_failed_total", 1, "Proposals answered with an error, by error.",
                    error=type(error).__name__,
                )  # fmt: skip
            resolve(result, error)

        return count_failure

    def _take_waiting_proposals(self, first: tuple) -> list[tuple[Any, Callable[..., None]]]:
        """``first`` (a "propose" call from the inbox) and the proposals
        right behind it, taken out of the inbox, as ``(records, done)`` for
        one ``ReplicaHost.propose_many``: a client's pipelined requests, read
        in one go while the transport held the core (``hold_core``)."""
        inbox = self._inbox
        proposals = [(first[1][1], self._proposal_done(first[2]))]
        while inbox and _is_proposal(inbox[0]):
            item = inbox.popleft()
            proposals.append((item[1][1], self._proposal_done(item[2])))
        return proposals

    def _local_call(self, request: tuple, waiter: _Waiter | _CallbackWaiter) -> None:
        name = request[0]
        host = self.host
        if name == "propose":
            host.propose(request[1], self._proposal_done(waiter))
        elif name == "read":
            host.read(waiter.resolve)
        elif name == "resign":
            host.resign()
            waiter.resolve(None)
        elif name == "application":
            host.application_request(request[1], lambda answer, error, _offsets: waiter.resolve(answer, error))
        elif name == "add_voter" or name == "remove_voter" or name == "upgrade_voters":
            try:
                if name == "add_voter":
                    host.add_voter(request[1], done=waiter.resolve, auto_join=request[2])
                elif name == "remove_voter":
                    host.remove_voter(request[1], request[2], done=waiter.resolve)
                else:
                    host.upgrade_voters(request[1], done=waiter.resolve)
            except (NotLeaderError, ReconfigurationError) as refused:
                waiter.resolve(None, refused)
        else:  # pragma: no cover - a runtime bug
            raise AssertionError(f"unknown local call {name!r}")

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
        return await self._call("propose", list(payloads))

    def propose_with_callback(
        self, payloads: Sequence[bytes], done: Callable[[tuple[int, list[bytes | None]] | None, BaseException | None], None]
    ) -> None:
        """``propose_with_answers`` without a task: ``done(result, None)`` or
        ``done(None, error)`` is called once, in the core task, when the
        outcome is known (at once for ``NotLeaderError``). ``done`` must not
        block or raise."""
        if not payloads:
            raise ValueError("nothing to propose")
        self._submit(("call", ("propose", list(payloads)), _CallbackWaiter(done)))

    async def read_index(self) -> int:
        """Linearizable read barrier (ReadIndex): returns once the state
        machine reflects every write acknowledged before the call; returns
        the applied offset to read at.

        Raises ``NotLeaderError`` or ``ReadNotConfirmedError``.
        """
        offset = await self._call("read")
        # Committed records up to the read offset were applied before the
        # ReadReady was handled (the core emits them first).
        applied = self.host.applied_offset
        assert applied >= offset
        return applied

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
        return self.host.leader_local_offset()

    async def add_voter(self, voter: Voter, *, auto_join: bool = False) -> int:
        """Add ``voter`` to the voter set (KIP-853 AddRaftVoter) and wait
        until the change is committed; returns the VOTERS record's offset.
        The leader checks that the new voter is caught up, and refuses
        ``auto_join`` for a disk an operator removed (``QuorumNode.add_voter``).

        Raises ``NotLeaderError``, ``ReconfigurationError`` (refused: nothing
        changed; its ``code`` says why), ``ProposalLostError`` (another
        leader's record took the offset: it did not happen) or
        ``ProposalOutcomeUnknownError``. Wrap in ``trio.fail_after`` for a
        bound: a cancelled wait leaves the outcome unknown."""
        return await self._call("add_voter", voter, auto_join)

    async def remove_voter(self, node_id: int, directory_id: str | None = None) -> int:
        """Remove voter ``node_id`` (with ``directory_id`` when given:
        KIP-853, the disk being replaced) and wait until the change is
        committed; returns and raises as ``add_voter``. A leader that
        removes itself resigns once the change is committed."""
        return await self._call("remove_voter", node_id, directory_id)

    async def upgrade_voters(self, endpoints: dict[int, tuple[str, ...]]) -> int | None:
        """Upgrade the static voter set to a dynamic one (KIP-853
        ``kraft.version`` 1; ``QuorumNode.upgrade_voters``), each voter with
        ``endpoints[id]``, and wait until the VOTERS record is committed;
        returns its offset, or None when the voters were dynamic already.
        Raises as ``add_voter``."""
        return await self._call("upgrade_voters", endpoints)

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
        return self.host.applied_offset

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
            "applied_offset": self.host.applied_offset,
            "pending_proposals": len(self.host.pending_proposals),
            "pending_reads": len(self.host.pending_reads),
            "disk_failure": self._disk_failure,
            "repairing": node.repairing is not None,
        }
