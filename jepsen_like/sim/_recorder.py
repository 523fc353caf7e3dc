"""A structured record of one simulated run, for the visual replay.

A ``Recording`` is handed to the simulator as ``SimOptions.recorder``; the
``Simulation`` calls it as things happen (each call site is guarded by
``if recorder is not None``, so a run without one pays nothing). It keeps
plain tuples of numbers and short strings, in virtual microseconds, and
``to_data()`` turns them into the JSON the replay page embeds.

What it records:

- every message put on the network: sent, and then delivered, dropped by a
  partition, lost by a lossy link, refused (receiver process down) or
  discarded at arrival (receiver crashed or restarted in between);
- role changes with epoch, leader and the core's reason;
- each node's in-memory log as the core changes it (appends, truncations,
  snapshot resets, recovery after a restart) and its high watermark;
- faults: the set of blocked links whenever it changes, lossy-link settings,
  crashes and restarts;
- the story lines the simulator traces, and every client history event.

It never draws randomness and never changes what the simulation does: a
recorded run is the same run as an unrecorded one.
"""

from __future__ import annotations

import json
from typing import Any

from quorum import Entry, Message, Output, RecordKind, RoleChange, describe_message, message_type_name

# Delivery outcomes of a message copy.
PENDING = "pending"
DELIVERED = "delivered"
PARTITIONED = "partitioned"  # a blocked link dropped it (iptables DROP)
LOST = "lost"  # a lossy link dropped it
REFUSED = "refused"  # the receiver's process was down: connection refused
DISCARDED = "discarded"  # arrived after the receiver crashed or restarted


class Recording:
    """See the module docstring. Times are virtual microseconds."""

    def __init__(self) -> None:
        # [send_us, arrive_us | None, src, dst, type, epoch, outcome, description]
        self.messages: list[list[Any]] = []
        self._in_flight: dict[tuple[int, int], tuple[int, Message]] = {}
        self.roles: list[tuple[int, int, str, int, int | None, str]] = []  # (us, node, role, epoch, leader, reason)
        # per node: (us, op, ...) with op "append" (offset, epoch, kind, label), "truncate" (end),
        # "reset" (start offset, epoch), "recover" (start offset, [(offset, epoch, kind, label)]), "hw" (hw)
        self.logs: dict[int, list[tuple[Any, ...]]] = {}
        self._hw: dict[int, int] = {}
        self.process: list[tuple[int, int, str]] = []  # (us, node, "start" | "crash")
        self.blocked: list[tuple[int, tuple[tuple[int, int], ...]]] = []  # (us, sorted blocked links)
        self.lossy: list[tuple[int, dict[str, float]]] = []  # (us, link fault rates)
        self.story: list[tuple[int, str]] = []
        self.client_events: list[dict[str, Any]] = []
        self.nodes: list[int] = []

    # -- the simulator's calls ------------------------------------------------------

    def node_started(self, time_us: int, node_id: int, entries: list[Entry], start_offset: int, high_watermark: int) -> None:
        """A process started (or restarted) with this recovered log."""
        if node_id not in self.logs:
            self.logs[node_id] = []
            self.nodes.append(node_id)
        self.logs[node_id].append((time_us, "recover", start_offset, [_record(entry) for entry in entries]))
        self._set_hw(time_us, node_id, high_watermark, force=True)
        self.process.append((time_us, node_id, "start"))

    def node_crashed(self, time_us: int, node_id: int) -> None:
        self.process.append((time_us, node_id, "crash"))

    def node_output(self, time_us: int, node_id: int, output: Output, high_watermark: int) -> None:
        """What one core output did to the node's in-memory log, in the
        order the core did it: snapshot reset, truncation, appends."""
        log = self.logs.setdefault(node_id, [])
        if output.reset_log and output.snapshot is not None:
            snapshot_id = output.snapshot[0]
            log.append((time_us, "reset", snapshot_id.end_offset, snapshot_id.epoch))
        if output.truncate_to is not None:
            log.append((time_us, "truncate", output.truncate_to))
        for entry in output.append:
            log.append((time_us, "append", *_record(entry)))
        self._set_hw(time_us, node_id, high_watermark)

    def role_changed(self, time_us: int, event: RoleChange) -> None:
        self.roles.append((time_us, event.node_id, event.role.value, event.epoch, event.leader_id, event.reason))

    def message_sent(self, time_us: int, message: Message, arrive_us: int | None, outcome: str = PENDING) -> None:
        """One copy of ``message`` left; ``arrive_us`` is when it is due
        (None with an outcome: it will never arrive)."""
        index = len(self.messages)
        self.messages.append(
            [time_us, arrive_us, message.src, message.dst, message_type_name(message), message.epoch, outcome, _brief(message)]
        )
        if arrive_us is not None and outcome == PENDING:
            # Keyed by object identity and due time: the two copies of a
            # duplicated message are due at different times. The message is
            # kept alive with the key, so its id cannot be reused meanwhile.
            self._in_flight[(id(message), arrive_us)] = (index, message)

    def message_arrived(self, time_us: int, message: Message, delivered: bool) -> None:
        """A copy reached its receiver's host: handed to the core, or
        discarded because the process it was sent to is gone."""
        found = self._in_flight.pop((id(message), time_us), None)
        if found is not None:
            self.messages[found[0]][6] = DELIVERED if delivered else DISCARDED

    def network_changed(self, time_us: int, blocked: frozenset[tuple[int, int]]) -> None:
        links = tuple(sorted(blocked))
        if not self.blocked or self.blocked[-1][1] != links:
            self.blocked.append((time_us, links))

    def link_faults_changed(self, time_us: int, rates: dict[str, float]) -> None:
        if not self.lossy or self.lossy[-1][1] != rates:
            self.lossy.append((time_us, rates))

    def story_line(self, time_us: int, line: str) -> None:
        self.story.append((time_us, line))

    def client_event(self, event: dict[str, Any]) -> None:
        self.client_events.append(dict(event))

    # -- helpers ------------------------------------------------------------------------

    def _set_hw(self, time_us: int, node_id: int, high_watermark: int, force: bool = False) -> None:
        if force or self._hw.get(node_id) != high_watermark:
            self._hw[node_id] = high_watermark
            self.logs.setdefault(node_id, []).append((time_us, "hw", high_watermark))


def _record(entry: Entry) -> tuple[int, int, str, str]:
    """(offset, epoch, kind, label) of a log record; the label is the
    register write it carries, or the leader-change marker."""
    if entry.kind is RecordKind.LEADER_CHANGE:
        return (entry.offset, entry.epoch, "leader-change", "LEADER_CHANGE")
    label = entry.data[:40].decode("utf-8", "replace")
    try:
        command = json.loads(entry.data)
        label = f"{command['key']}={command['value']}"
    except (ValueError, KeyError, TypeError):
        pass
    return (entry.offset, entry.epoch, "data", label)


def _brief(message: Message) -> str:
    """The trace's one-line description without the leading ``src->dst``,
    which the arrow shows."""
    return describe_message(message).partition(" ")[2]
