"""The broker's own lifecycle, sans-IO and table-driven.

States are the four of the registration seed (``001_*``; KIP-500 uses the
same "global" states), seen from the broker's side:

- **Offline**: not registered (starting, re-registering) or stopped;
- **Fenced**: registered with a broker epoch, but not serving: not yet caught
  up and unfenced, fenced by the controller, or **self-fenced** because it
  has not completed a metadata fetch with the current leader within its
  session timeout (seed 001: "It will re-enter the fenced state if it can't
  contact the active controller"; Kafka dropped this, we keep it on
  purpose: a broker cut from the controller must stop claiming to be part
  of the cluster, seed 003 case 2);
- **Online**: serving clients;
- **Stopping**: controlled shutdown; leaderships are being moved off.

``BrokerLifecycle`` is a plain object fed inputs (``tick``, fetch
completions, registration results, image updates, local calls), each with
the caller's ``now_ms``; it returns a list of actions (``Register``,
``SetHeartbeat``, ``StateChanged``, ``Stop``). It reads no clock and does
no IO; its only randomness is the jitter of registration retries, drawn from
a seeded ``random.Random`` the driver passes in (the incarnation id is the
driver's too). Every state
change is looked up in ``TRANSITIONS``; a missing entry raises
``InvalidTransitionError`` (registration's, shared with the controller's
table: a bug in this module, never a remote's fault).
The docs' diagram is drawn from the same table (``python -m
broker_agent.diagram``).

Inputs that mean nothing in the current state (a heartbeat reply while
Offline, a second shutdown request) are ignored, by rule, not by accident:
each input method says which states it acts in.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from registration import (
    BrokerHeartbeat,
    BrokerState,
    ErrorCode,
    HeartbeatReply,
    InvalidTransitionError,
    RegisterBrokerResponse,
)


class LifecycleEvent(enum.Enum):
    """What moves the broker from one state to another."""

    # RegisterBroker answered with a broker epoch (seed 001 "Register Flow":
    # the controller records the broker Fenced and answers).
    REGISTERED = "registered"
    # A completed fetch proved the image caught up, within the session
    # timeout, and the controller's reply says caught up and not fenced
    # (KIP-631 IsCaughtUp / IsFenced=false).
    CAUGHT_UP_AND_UNFENCED = "caught up and unfenced"
    # The controller's reply says fenced (session expired there, or it acted
    # on want_fence) (KIP-631).
    CONTROLLER_FENCED = "fenced by the controller"
    # No completed metadata fetch with the current leader within the session
    # timeout: self-fencing (seed 001; seed 003 case 2).
    SESSION_LOST = "session lost"
    # SIGTERM / SIGINT / a call: controlled shutdown (seed 001 "Stopping").
    SHUTDOWN_REQUESTED = "shutdown requested"
    # The controller's reply says should-shutdown (seed 001: "a special
    # result code in the MetadataFetchResponse").
    SHOULD_SHUTDOWN = "should shutdown"
    # The leaderships could not be moved in time (seed 001: "the broker will
    # shut down if the leaders can't be moved in a predetermined amount of
    # time").
    SHUTDOWN_TIMEOUT = "shutdown timeout"
    # The image holds no registration with this broker's epoch any more
    # (unregistered, or replaced by another incarnation): register again.
    REGISTRATION_GONE = "registration gone"
    # A heartbeat answered STALE_BROKER_EPOCH (KIP-380): register again.
    EPOCH_REFUSED = "epoch refused"


_S = BrokerState
_E = LifecycleEvent

#: (state, event) -> next state. The order is the order of the docs' diagram.
TRANSITIONS: dict[tuple[BrokerState, LifecycleEvent], BrokerState] = {
    (_S.OFFLINE, _E.REGISTERED): _S.FENCED,
    (_S.FENCED, _E.CAUGHT_UP_AND_UNFENCED): _S.ONLINE,
    (_S.ONLINE, _E.CONTROLLER_FENCED): _S.FENCED,
    (_S.ONLINE, _E.SESSION_LOST): _S.FENCED,
    (_S.ONLINE, _E.SHUTDOWN_REQUESTED): _S.STOPPING,
    (_S.FENCED, _E.SHUTDOWN_REQUESTED): _S.STOPPING,
    (_S.STOPPING, _E.SHOULD_SHUTDOWN): _S.OFFLINE,
    (_S.STOPPING, _E.SHUTDOWN_TIMEOUT): _S.OFFLINE,
    (_S.FENCED, _E.REGISTRATION_GONE): _S.OFFLINE,
    (_S.FENCED, _E.EPOCH_REFUSED): _S.OFFLINE,
    (_S.ONLINE, _E.REGISTRATION_GONE): _S.OFFLINE,
    (_S.ONLINE, _E.EPOCH_REFUSED): _S.OFFLINE,
    (_S.STOPPING, _E.REGISTRATION_GONE): _S.OFFLINE,
    (_S.STOPPING, _E.EPOCH_REFUSED): _S.OFFLINE,
    (_S.OFFLINE, _E.SHUTDOWN_REQUESTED): _S.OFFLINE,
}


def next_state(state: BrokerState, event: LifecycleEvent) -> BrokerState:
    """The state ``event`` leads to from ``state``.

    Raises ``InvalidTransitionError`` when the table has no such transition.
    """
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransitionError(f"no transition from {state.value} on {event.value!r}") from None


def state_diagram_mermaid() -> str:
    """The transition table as a mermaid ``stateDiagram-v2``."""
    lines = ["stateDiagram-v2", f"    [*] --> {BrokerState.OFFLINE.value}"]
    for (state, event), target in TRANSITIONS.items():
        lines.append(f"    {state.value} --> {target.value}: {event.value}")
    return "\n".join(lines)


def transition_table_markdown() -> str:
    """The transition table as a markdown table."""
    lines = ["| state | event | next state |", "|---|---|---|"]
    for (state, event), target in TRANSITIONS.items():
        lines.append(f"| {state.value} | {event.value} | {target.value} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Actions
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Register:
    """Send RegisterBroker (with this process's incarnation id; every
    attempt of one process uses the same one, so a retry is recognised).
    Answer with ``registration_completed`` or ``registration_failed``."""

    attempt: int


@dataclass(frozen=True, slots=True)
class SetHeartbeat:
    """What the broker's next fetches carry from now on (None: no heartbeat,
    the broker has no epoch)."""

    heartbeat: BrokerHeartbeat | None


@dataclass(frozen=True, slots=True)
class StateChanged:
    """The broker moved from ``old`` to ``new`` on ``event``. ``broker_epoch``
    is the epoch after the change (None when Offline)."""

    old: BrokerState
    new: BrokerState
    event: LifecycleEvent
    broker_epoch: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class Stop:
    """The broker is done: shut down cleanly, timed out, or (``error``) it
    cannot go on (the cluster refused it for good)."""

    reason: str
    error: bool = False


Action = Register | SetHeartbeat | StateChanged | Stop

# Registration errors worth retrying: the controller moved, or the previous
# incarnation is still heard from (KIP-631 DUPLICATE_BROKER_REGISTRATION
# clears once it has been silent for one heartbeat interval).
_RETRIABLE_REGISTRATION_ERRORS = frozenset(
    {ErrorCode.NOT_LEADER, ErrorCode.DUPLICATE_BROKER_REGISTRATION, ErrorCode.BROKER_NOT_AVAILABLE}
)
_REGISTRATION_BACKOFF_FIRST_MS = 100  # KIP-631: exponential from 100 ms


@dataclass(frozen=True, slots=True, kw_only=True)
class LifecycleConfig:
    """Timers of the broker lifecycle, in milliseconds.

    Raises ``ValueError`` on construction for values that cannot work.
    """

    broker_id: int
    # No completed metadata fetch with the leader for this long: self-fence.
    session_timeout_ms: int = 9_000
    # Caps the registration retry backoff: a DUPLICATE_BROKER_REGISTRATION
    # clears once the previous incarnation has been silent this long.
    heartbeat_interval_ms: int = 2_000
    # Stopping gives up waiting for should-shutdown after this long.
    shutdown_timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        if type(self.broker_id) is not int or self.broker_id < 0:
            raise ValueError(f"broker_id must be an int >= 0, got {self.broker_id!r}")
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "shutdown_timeout_ms"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} must be an int > 0, got {value!r}")
        if self.session_timeout_ms <= self.heartbeat_interval_ms:
            raise ValueError(
                f"session_timeout_ms ({self.session_timeout_ms}) must exceed "
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms})"
            )


class BrokerLifecycle:
    """One broker's lifecycle. See the module docstring.

    Times are the driver's milliseconds (any monotonic origin); each input
    takes ``now_ms``, which must never go backwards (``ValueError``).
    """

    def __init__(self, config: LifecycleConfig, rng: random.Random | None = None) -> None:
        """``rng`` jitters registration retries: each waits a uniform draw
        between half the backoff and the whole of it, so that brokers
        refused together (a controller restart, a start-up storm) do not
        retry together. Pass a seeded generator (the simulator: from its
        seed); without one, retries wait the bare backoff."""
        self.config = config
        self._rng = rng
        self._state = BrokerState.OFFLINE
        self._broker_epoch: int | None = None
        self._highest_epoch = -1
        self._now_ms: int | None = None
        # Shutdown was asked for: Offline is then final.
        self._stopping_requested = False
        self._stopped = False
        self._shutdown_deadline_ms: int | None = None
        # Registration
        self._registration_in_flight = False
        self._registration_attempts = 0
        self._next_registration_ms = 0
        self._registration_backoff_ms = _REGISTRATION_BACKOFF_FIRST_MS
        # Freshness: when the newest fetch that proved the image caught up
        # with the leader was *sent* (its answer reflects the leader at some
        # moment after that, never before).
        self._fresh_fetch_sent_ms: int | None = None
        # Fenced because of SESSION_LOST and not fresh since: ask the
        # controller to fence us too (want_fence), so that it moves our
        # leaderships even when only our fetch answers are lost (a one-way
        # partition keeps our heartbeats arriving).
        self._self_fenced = False
        self._heartbeat: BrokerHeartbeat | None = None

    # ------------------------------------------------------------------
    # Queries
    # ------------------------------------------------------------------

    @property
    def state(self) -> BrokerState:
        return self._state

    @property
    def broker_epoch(self) -> int | None:
        """The current broker epoch (KIP-380), None when not registered."""
        return self._broker_epoch

    @property
    def stopped(self) -> bool:
        """True once the broker is done (a ``Stop`` action was returned)."""
        return self._stopped

    @property
    def registration_attempts(self) -> int:
        return self._registration_attempts

    @property
    def fresh_fetch_sent_ms(self) -> int | None:
        """When the newest fetch that proved the image caught up was sent."""
        return self._fresh_fetch_sent_ms

    @property
    def heartbeat(self) -> BrokerHeartbeat | None:
        """What the next fetch carries (the last ``SetHeartbeat``)."""
        return self._heartbeat

    def is_fresh(self, now_ms: int) -> bool:
        """A fetch sent within the session timeout proved the image caught up."""
        sent = self._fresh_fetch_sent_ms
        return sent is not None and now_ms - sent <= self.config.session_timeout_ms

    def may_serve(self, now_ms: int) -> bool:
        """May the broker answer a client at ``now_ms``? Only Online, and only
        while fresh: checked at the moment of the answer, so a broker that
        wakes from a pause (SIGSTOP) refuses before any timer has fired."""
        return self._state is BrokerState.ONLINE and self.is_fresh(now_ms)

    def next_timer_ms(self) -> int | None:
        """When ``tick`` has something to do next (None: nothing scheduled)."""
        deadlines: list[int] = []
        if self._state is BrokerState.ONLINE and self._fresh_fetch_sent_ms is not None:
            deadlines.append(self._fresh_fetch_sent_ms + self.config.session_timeout_ms + 1)
        if self._state is BrokerState.STOPPING and self._shutdown_deadline_ms is not None:
            deadlines.append(self._shutdown_deadline_ms)
        if self._wants_registration():
            deadlines.append(self._next_registration_ms)
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------------
    # Inputs
    # ------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Action]:
        """Fire due timers: self-fencing (Online), the shutdown timeout
        (Stopping), a registration (Offline, not stopping)."""
        actions: list[Action] = []
        self._advance(now_ms, actions)
        if self._wants_registration() and now_ms >= self._next_registration_ms:
            self._registration_in_flight = True
            self._registration_attempts += 1
            actions.append(Register(self._registration_attempts))
        return actions

    def registration_completed(self, now_ms: int, response: RegisterBrokerResponse) -> list[Action]:
        """The controller answered the RegisterBroker in flight. Acts only
        when a registration is in flight and the broker is not stopping.

        Success → Fenced with the new epoch. Retriable errors (NOT_LEADER,
        DUPLICATE_BROKER_REGISTRATION, BROKER_NOT_AVAILABLE) → retry after
        an exponential backoff capped at the heartbeat interval. Any other
        error (INCONSISTENT_CLUSTER_ID, INVALID_REQUEST, ...) → ``Stop``
        with ``error``: the cluster refuses this broker for good.
        """
        actions: list[Action] = []
        self._advance(now_ms, actions)
        if not self._registration_in_flight:
            return actions
        self._registration_in_flight = False
        if self._stopping_requested or self._state is not BrokerState.OFFLINE:
            return actions
        if response.error is ErrorCode.NONE:
            if response.broker_epoch <= self._highest_epoch:
                # KIP-380: epochs only grow. A controller answering with an
                # older one is confused; do not adopt it, ask again.
                self._schedule_registration_retry(now_ms)
                return actions
            self._registration_backoff_ms = _REGISTRATION_BACKOFF_FIRST_MS
            self._broker_epoch = response.broker_epoch
            self._highest_epoch = response.broker_epoch
            self._fresh_fetch_sent_ms = None
            self._self_fenced = False
            self._change(LifecycleEvent.REGISTERED, f"broker epoch {response.broker_epoch}", actions)
            return actions
        if response.error in _RETRIABLE_REGISTRATION_ERRORS:
            self._schedule_registration_retry(now_ms)
            return actions
        self._stop(f"registration refused: {response.error.name} {response.message}".strip(), actions, error=True)
        return actions

    def registration_failed(self, now_ms: int, reason: str) -> list[Action]:
        """The RegisterBroker in flight got no answer (timeout, no controller
        reachable): retry after the backoff. ``reason`` is for the log only."""
        del reason
        actions: list[Action] = []
        self._advance(now_ms, actions)
        if self._registration_in_flight:
            self._registration_in_flight = False
            self._schedule_registration_retry(now_ms)
        return actions

    def fetch_completed(
        self,
        now_ms: int,
        *,
        sent_ms: int,
        heartbeat_epoch: int,
        reply: HeartbeatReply,
        metadata_caught_up: bool,
    ) -> list[Action]:
        """A metadata fetch sent at ``sent_ms`` carrying a heartbeat for
        ``heartbeat_epoch`` was answered by the leader with ``reply``.
        ``metadata_caught_up``: after applying the answer, the image holds
        everything the leader had committed when it answered.

        A reply for another epoch than the current one is ignored (it
        answers an earlier incarnation's heartbeat). STALE_BROKER_EPOCH →
        register again (KIP-380). NOT_LEADER (the controller is not active
        yet) still counts for freshness: the data came from the leader.
        """
        actions: list[Action] = []
        if sent_ms > now_ms:
            raise ValueError(f"a fetch sent at {sent_ms} cannot complete at {now_ms}")
        self._advance(now_ms, actions)
        if self._broker_epoch is None or heartbeat_epoch != self._broker_epoch:
            return actions
        if reply.error is ErrorCode.STALE_BROKER_EPOCH:
            self._forget_registration(LifecycleEvent.EPOCH_REFUSED, f"epoch {heartbeat_epoch} refused", actions)
            return actions
        if reply.error not in (ErrorCode.NONE, ErrorCode.NOT_LEADER):
            return actions
        if metadata_caught_up and now_ms - sent_ms <= self.config.session_timeout_ms:
            if self._fresh_fetch_sent_ms is None or sent_ms > self._fresh_fetch_sent_ms:
                self._fresh_fetch_sent_ms = sent_ms
            self._self_fenced = False
        if reply.error is ErrorCode.NONE:
            state = self._state
            if state is BrokerState.FENCED:
                if reply.is_caught_up and not reply.is_fenced and self.is_fresh(now_ms):
                    self._change(LifecycleEvent.CAUGHT_UP_AND_UNFENCED, "the controller unfenced us", actions)
            elif state is BrokerState.ONLINE:
                if reply.is_fenced:
                    self._change(LifecycleEvent.CONTROLLER_FENCED, "the controller fenced us", actions)
            elif state is BrokerState.STOPPING and reply.should_shutdown:
                self._stop_with(LifecycleEvent.SHOULD_SHUTDOWN, "the controller says shut down", actions)
                return actions
        self._sync_heartbeat(actions)
        return actions

    def image_updated(self, now_ms: int, *, image_offset: int, registered_epoch: int | None) -> list[Action]:
        """The image applied records up to ``image_offset``; it registers this
        broker with ``registered_epoch`` (None: not at all). Once the image
        has passed our registration record (our epoch is its offset), a
        missing or different registration means ours is gone: register
        again (or, when stopping, stop)."""
        actions: list[Action] = []
        self._advance(now_ms, actions)
        epoch = self._broker_epoch
        if epoch is not None and image_offset > epoch and registered_epoch != epoch:
            found = "none" if registered_epoch is None else f"epoch {registered_epoch}"
            self._forget_registration(
                LifecycleEvent.REGISTRATION_GONE, f"the image registers {found}, not epoch {epoch}", actions
            )
        return actions

    def shutdown_requested(self, now_ms: int) -> list[Action]:
        """SIGTERM / SIGINT / a call. Online or Fenced → Stopping (heartbeats
        ask to shut down until the controller agrees or the shutdown timeout
        passes); Offline → stop at once (nothing to hand over). Repeated
        requests change nothing."""
        actions: list[Action] = []
        self._advance(now_ms, actions)
        if self._stopping_requested:
            return actions
        self._stopping_requested = True
        if self._state is BrokerState.OFFLINE:
            self._stop_with(LifecycleEvent.SHUTDOWN_REQUESTED, "shutdown requested while offline", actions)
            return actions
        self._shutdown_deadline_ms = now_ms + self.config.shutdown_timeout_ms
        self._change(LifecycleEvent.SHUTDOWN_REQUESTED, "controlled shutdown", actions)
        return actions

    # ------------------------------------------------------------------
    # Internals
    # ------------------------------------------------------------------

    def _advance(self, now_ms: int, actions: list[Action]) -> None:
        """Move the clock and fire the time-based transitions due by now."""
        if type(now_ms) is not int:
            raise ValueError(f"now_ms must be an int, got {now_ms!r}")
        if self._now_ms is not None and now_ms < self._now_ms:
            raise ValueError(f"time went backwards: {self._now_ms} -> {now_ms}")
        self._now_ms = now_ms
        if self._state is BrokerState.ONLINE and not self.is_fresh(now_ms):
            # Seed 001: a broker that cannot reach the controller stops
            # claiming to be part of the cluster.
            self._self_fenced = True
            self._change(LifecycleEvent.SESSION_LOST, "no fresh metadata fetch within the session timeout", actions)
        if (
            self._state is BrokerState.STOPPING
            and self._shutdown_deadline_ms is not None
            and now_ms >= self._shutdown_deadline_ms
        ):
            self._stop_with(LifecycleEvent.SHUTDOWN_TIMEOUT, "leaderships not moved in time", actions)

    def _wants_registration(self) -> bool:
        return self._state is BrokerState.OFFLINE and not self._stopping_requested and not self._registration_in_flight

    def _schedule_registration_retry(self, now_ms: int) -> None:
        delay_ms = self._registration_backoff_ms
        if self._rng is not None:
            delay_ms = self._rng.randint((delay_ms + 1) // 2, delay_ms)
        self._next_registration_ms = now_ms + delay_ms
        self._registration_backoff_ms = min(self._registration_backoff_ms * 2, self.config.heartbeat_interval_ms)

    def _forget_registration(self, event: LifecycleEvent, reason: str, actions: list[Action]) -> None:
        if self._stopping_requested:
            self._stop_with(event, reason, actions)
            return
        self._change(event, reason, actions)
        # Register again at once: the old registration is of no use.
        self._next_registration_ms = self._now_ms or 0
        self._registration_backoff_ms = _REGISTRATION_BACKOFF_FIRST_MS

    def _change(self, event: LifecycleEvent, reason: str, actions: list[Action]) -> None:
        old = self._state
        new = next_state(old, event)
        self._state = new
        if new is BrokerState.OFFLINE:
            self._broker_epoch = None
            self._fresh_fetch_sent_ms = None
            self._self_fenced = False
        actions.append(StateChanged(old, new, event, self._broker_epoch, reason))
        self._sync_heartbeat(actions)

    def _stop_with(self, event: LifecycleEvent, reason: str, actions: list[Action]) -> None:
        self._change(event, reason, actions)
        self._stop(reason, actions)

    def _stop(self, reason: str, actions: list[Action], *, error: bool = False) -> None:
        self._stopping_requested = True
        if not self._stopped:
            self._stopped = True
            actions.append(Stop(reason, error))

    def _sync_heartbeat(self, actions: list[Action]) -> None:
        epoch = self._broker_epoch
        if epoch is None or self._state is BrokerState.OFFLINE:
            heartbeat = None
        else:
            heartbeat = BrokerHeartbeat(
                broker_id=self.config.broker_id,
                broker_epoch=epoch,
                want_fence=self._state is BrokerState.FENCED and self._self_fenced,
                want_shutdown=self._state is BrokerState.STOPPING,
            )
        if heartbeat != self._heartbeat:
            self._heartbeat = heartbeat
            actions.append(SetHeartbeat(heartbeat))
