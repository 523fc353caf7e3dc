"""Heartbeats through fetches, sans-IO: turns the observer core's fetch
hooks into lifecycle inputs (seed 001: "the normal metadata fetches act
both as heartbeats and a way to propagate information").

``_driver.BrokerDriver`` (run by the trio agent and by the simulator)
attaches ``provide`` and ``consume`` as the observer replica's fetch
extension, calls ``settle`` once the core step that called ``consume`` is
over, and performs the lifecycle actions it collects (``take_actions``).

- ``provide`` is called as the core builds each Fetch: it returns the
  lifecycle's heartbeat and notes the moment (``sent_ms``). The answer
  reflects the leader at some instant after ``sent_ms``, never before, so a
  freshness proof dates from when the fetch was *sent*: an answer that sat
  in a socket buffer during a pause (SIGSTOP) proves nothing about the
  present.
- ``consume`` receives the controller's reply before the core applies the
  response. After a normal answer from its leader the core sends the next
  Fetch in the same step, so ``provide``, called for it, sees the log the
  answer produced and judges whether it proved the image caught up
  (``judge_catch_up``). An answer that led to no Fetch in the same step (a
  snapshot, a leader change) proves nothing: ``settle`` reports it as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from quorum import Role
from registration import HeartbeatReply

from ._lifecycle import Action, BrokerLifecycle


class ObserverView(Protocol):
    """What this module reads of the observer's ``quorum.QuorumNode``."""

    @property
    def role(self) -> Role: ...

    @property
    def leader_id(self) -> int | None: ...

    @property
    def epoch(self) -> int: ...

    @property
    def current_tick(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def answered_high_watermark(self) -> int | None: ...

    @property
    def log(self) -> Any: ...  # .end_offset


@dataclass(frozen=True, slots=True)
class FetchAnswered:
    """A fetch answered with a heartbeat reply (for metrics and traces)."""

    sent_ms: int
    completed_ms: int
    metadata_caught_up: bool


@dataclass(slots=True)
class _Pending:
    """A reply whose fetch answer the core is still applying."""

    sent_ms: int
    completed_ms: int
    heartbeat_epoch: int
    reply: HeartbeatReply
    tick: int
    node_epoch: int
    leader_id: int | None  # None: not following a leader when it came


class HeartbeatChannel:
    """Heartbeats out, replies and freshness proofs in. See the module
    docstring. Never raises on a remote's input: an unreadable reply is
    counted in ``unreadable_replies`` and ignored."""

    def __init__(self, lifecycle: BrokerLifecycle, node: ObserverView) -> None:
        self.lifecycle = lifecycle
        self.node = node
        self._sent_ms = 0
        self._heartbeat_epoch: int | None = None
        self._pending: _Pending | None = None
        self._actions: list[Action] = []
        self.answered: list[FetchAnswered] = []
        self.unreadable_replies = 0

    def provide(self, now_ms: int) -> Any:
        """The extension of the Fetch being built (None: no heartbeat)."""
        self._settle(now_ms, judged=True)
        heartbeat = self.lifecycle.heartbeat
        self._sent_ms = now_ms
        self._heartbeat_epoch = None if heartbeat is None else heartbeat.broker_epoch
        return None if heartbeat is None else heartbeat.to_extension()

    def consume(self, now_ms: int, extension: Any) -> None:
        """The extension of the answer to the fetch in flight."""
        epoch = self._heartbeat_epoch
        if epoch is None:
            return
        try:
            reply = HeartbeatReply.from_extension(extension)
        except (ValueError, TypeError):
            self.unreadable_replies += 1
            return
        self._settle(now_ms, judged=False)
        node = self.node
        self._pending = _Pending(
            sent_ms=self._sent_ms,
            completed_ms=now_ms,
            heartbeat_epoch=epoch,
            reply=reply,
            tick=node.current_tick,
            node_epoch=node.epoch,
            # An observer still looking for its leader: the answer comes
            # with a leader change and proves nothing about freshness.
            leader_id=node.leader_id if node.role is Role.FOLLOWER else None,
        )

    def settle(self, now_ms: int) -> None:
        """Call after the core step that called ``consume``: a reply not
        followed by a Fetch in that step proved nothing about freshness."""
        self._settle(now_ms, judged=False)

    def take_actions(self) -> list[Action]:
        actions, self._actions = self._actions, []
        return actions

    def take_answered(self) -> list[FetchAnswered]:
        answered, self.answered = self.answered, []
        return answered

    def _settle(self, now_ms: int, *, judged: bool) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        caught_up = judged and self.judge_catch_up(pending)
        self.answered.append(FetchAnswered(pending.sent_ms, pending.completed_ms, caught_up))
        self._actions += self.lifecycle.fetch_completed(
            max(now_ms, pending.completed_ms),
            sent_ms=pending.sent_ms,
            heartbeat_epoch=pending.heartbeat_epoch,
            reply=pending.reply,
            metadata_caught_up=caught_up,
        )

    def judge_catch_up(self, pending: _Pending) -> bool:
        """Did the answer just applied prove the image caught up with what
        the leader had committed when it answered? Called from ``provide``
        in the step that applied it.

        - Same tick, same leader and epoch, still following: it was a normal
          answer from the leader (snapshot answers lead to a FetchSnapshot,
          not a Fetch; leader changes are excluded).
        - Our log now reaches the high watermark the answer carried (as the
          leader sent it, not bounded by our log): we hold every record it
          had committed. That covers an answer with no records (the leader
          had nothing past our fetch offset), and one whose records run
          past its high watermark; one whose records end exactly at it (a
          leader answers a broker when its high watermark moves, issue 21)
          is proven too. An answer cut at ``fetch_bytes_max`` below the
          high watermark is not: the next fetch will tell.
        """
        node = self.node
        if (
            pending.leader_id is None
            or node.role is not Role.FOLLOWER
            or node.leader_id != pending.leader_id
            or node.epoch != pending.node_epoch
            or node.current_tick != pending.tick
        ):
            return False
        answered = node.answered_high_watermark
        return answered is not None and node.log.end_offset >= answered
