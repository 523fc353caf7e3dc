"""The broker driver, sans-IO: everything a broker does between its
observer replica (``quorum.ReplicaHost``) and its ``BrokerLifecycle``,
written once and driven by both worlds — the trio agent
(``_agent.BrokerAgent``) and the simulator (``jepsen_like.sim``).

``BrokerDriver`` owns the lifecycle and the heartbeat channel and knows
which order to feed them in: heartbeats out and replies in through the
replica's fetch extension (``provide`` / ``consume``), a reply that led to
no Fetch settled after the step (``step``), image updates, timers, and
client requests (``serve``). It reads no clock — every call carries
``now_ms`` — and does no IO: what the lifecycle asks for goes to the
world's ``BrokerPort`` as it arises:

- ``perform(actions)``: ``Register`` (send a RegisterBroker), ``StateChanged``,
  ``Stop``, ``SetHeartbeat`` (nothing to do: ``provide`` reads the
  lifecycle's heartbeat for every Fetch);
- ``fetches_answered(answered)``: fetches answered with a heartbeat reply
  (for metrics);
- ``image_applied()``: the lifecycle has taken an image update (the agent
  refreshes the partition roles it reports).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from quorum import Entry
from registration import ControllerStateMachine

from ._heartbeats import FetchAnswered, HeartbeatChannel
from ._lifecycle import Action, BrokerLifecycle, LifecycleConfig
from ._serving import Served, serve_request


class WatchedMetadata(ControllerStateMachine):
    """A broker's state machine: the controllers' (same records, same
    snapshot format, so the leader's snapshots load here), calling
    ``on_change`` after every apply or restore (a driver's
    ``note_image_changed``)."""

    def __init__(self) -> None:
        super().__init__()
        self.on_change: Callable[[], None] = lambda: None

    def apply(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        answers = super().apply(entries)
        self.on_change()
        return answers

    def restore(self, data: bytes) -> None:
        super().restore(data)
        self.on_change()


class BrokerPort(Protocol):
    """The world's side of a ``BrokerDriver`` (see the module docstring)."""

    def perform(self, actions: list[Action]) -> None: ...

    def fetches_answered(self, answered: list[FetchAnswered]) -> None: ...

    def image_applied(self) -> None: ...


class BrokerDriver:
    """One broker's driver over its observer ``host`` (a
    ``quorum.ReplicaHost`` whose state machine has the cluster ``image``).
    See the module docstring. Never raises on a remote's input."""

    def __init__(
        self, config: LifecycleConfig, host: Any, port: BrokerPort, *, cluster_id: str, rng: random.Random | None = None
    ) -> None:
        """``rng``: the seeded generator that jitters registration retries
        (``BrokerLifecycle``); None: no jitter."""
        self.host = host
        self.port = port
        self.cluster_id = cluster_id
        self.lifecycle = BrokerLifecycle(config, rng)
        self.heartbeats = HeartbeatChannel(self.lifecycle, host.core)
        # Set when the replica's state machine moved (note_image_changed);
        # a new process has not looked at its image yet.
        self._image_dirty = True

    @property
    def image(self) -> Any:
        """The cluster image (``registration.ClusterImage``)."""
        return self.host.state_machine.image

    @property
    def image_offset(self) -> int:
        """Every committed metadata record below this offset is reflected in
        the image (records of other kinds are skipped, not missed)."""
        return int(self.host.applied_offset)

    def known_controllers(self) -> dict[int, str | None]:
        """The controllers this broker knows of, node id -> where it listens
        ("HOST:PORT", None when not known), the leader its replica follows
        first: the voter set its replica holds (the log's, once fetched,
        KIP-853; before that the bootstrap list) and the leaders NOT_LEADER
        answers named. Like Kafka's ``controller.quorum.bootstrap.servers``,
        the bootstrap list is only for the first contact."""
        core = self.host.core
        ordered = [] if core.leader_id is None else [core.leader_id]
        ordered += core.voters.ids
        ordered += sorted(core.learned_endpoints)
        own = self.lifecycle.config.broker_id
        return {node_id: core.endpoint_of(node_id) for node_id in ordered if node_id != own}

    def registration_target(self, attempt: int) -> int | None:
        """The controller to send registration ``attempt`` (1, 2, ...) to:
        the leader the replica follows, else the known controllers in turn
        (``known_controllers``); None if it knows none."""
        core = self.host.core
        if core.leader_id is not None and core.leader_id != self.lifecycle.config.broker_id:
            return core.leader_id
        candidates = list(self.known_controllers())
        return candidates[(attempt - 1) % len(candidates)] if candidates else None

    # ------------------------------------------------------------------
    # Inputs
    # ------------------------------------------------------------------

    def start(self, now_ms: int) -> None:
        """The process has started: fire what is due (the first registration)."""
        self.port.perform(self.lifecycle.tick(now_ms))

    def provide(self, now_ms: int) -> Any:
        """The replica's fetch-extension provider: the heartbeat for the
        Fetch being built."""
        extension = self.heartbeats.provide(now_ms)
        self._take_heartbeat_actions()
        return extension

    def consume(self, now_ms: int, extension: Any) -> None:
        """The replica's fetch-extension consumer: the controller's reply.
        The world calls ``step`` once the core step that called it is over."""
        self.heartbeats.consume(now_ms, extension)
        self._take_heartbeat_actions()

    def note_image_changed(self) -> None:
        """The replica's state machine applied records or a snapshot."""
        self._image_dirty = True

    def step(self, now_ms: int) -> None:
        """After every replica step (and on the world's timer): settle a
        reply that led to no Fetch, hand a changed image to the lifecycle,
        fire due timers. Nothing once the lifecycle has stopped."""
        lifecycle = self.lifecycle
        if lifecycle.stopped:
            return
        self.heartbeats.settle(now_ms)
        self._take_heartbeat_actions()
        if self._image_dirty:
            self._image_dirty = False
            registration = self.image.broker(lifecycle.config.broker_id)
            self.port.perform(
                lifecycle.image_updated(
                    now_ms,
                    image_offset=self.image_offset,
                    registered_epoch=None if registration is None else registration.broker_epoch,
                )
            )
            self.port.image_applied()
        self.port.perform(lifecycle.tick(now_ms))

    def serve(self, payload: bytes, now_ms: int) -> Served:
        """Answer one client payload (``serve_request``), after the
        time-based transitions due by now, so that the state named (and the
        decision to serve) is the state at this instant. Never raises on a
        client's input."""
        lifecycle = self.lifecycle
        if not lifecycle.stopped:
            self.port.perform(lifecycle.tick(now_ms))
        return serve_request(
            payload,
            lifecycle=lifecycle,
            image=self.image,
            image_offset=self.image_offset,
            now_ms=now_ms,
            cluster_id=self.cluster_id,
            controller_id=self.host.core.leader_id,
        )

    def registration_failed(self, now_ms: int, reason: str) -> None:
        """The RegisterBroker in flight got no answer (timeout, unreachable)."""
        self.port.perform(self.lifecycle.registration_failed(now_ms, reason))

    def registration_completed(self, now_ms: int, response: Any) -> None:
        """The controller answered the RegisterBroker in flight."""
        self.port.perform(self.lifecycle.registration_completed(now_ms, response))

    def shutdown_requested(self, now_ms: int) -> None:
        """Begin a controlled shutdown (idempotent)."""
        self.port.perform(self.lifecycle.shutdown_requested(now_ms))

    def _take_heartbeat_actions(self) -> None:
        answered = self.heartbeats.take_answered()
        if answered:
            self.port.fetches_answered(answered)
        self.port.perform(self.heartbeats.take_actions())
