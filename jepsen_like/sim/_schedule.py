"""One schedule for both worlds: what a run did, as data (issue 20).

A real-process campaign writes its schedule to ``store/RUN/schedule.json``;
the simulator replays it (``jepsen-like sim --from-campaign store/RUN``),
shrinks it, and writes its own; a campaign replays either
(``jepsen-like campaign --replay PATH``). A simulator scenario's run can be
written as one too (``jepsen-like campaign --from-sim SCENARIO --seed N``).
docs/replay.md describes the format; this module is its one definition and
its validator. It is pure (no IO, no clock): the simulator's import graph
must stay free of trio, sockets and threads.

A file is untrusted input: :func:`parse_schedule` bounds every list and
number and raises :class:`ScheduleError` with the field's path and why.

Times are milliseconds from the moment the workload started (the leader
was known), and node ids are the voters 1..N. The leader at that moment is
recorded (``leader``): a replay waits for its own first leader and, when it
is another node, swaps the two ids throughout the schedule, so that a fault
aimed at "the leader" hits the leader again. Which node later elections
pick is not under a schedule's control, so a real replay is approximate
(docs/replay.md, "What carries over").
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

#: The ``format`` field of every schedule document, and its version.
FORMAT = "pykraft-schedule"
VERSION = 1
MAX_VOTERS = 7
MAX_FAULTS = 1_000
MAX_OPERATIONS = 100_000
#: A schedule may last this long (an hour): bounds what a shared file costs.
MAX_DURATION_MS = 3_600_000
MAX_TEXT = 200
MAX_KEY = 64
MAX_NOT_REPLAYABLE = 50
MAX_SEED = 2**63
#: What a file may hold before it is parsed (the CLIs read at most this).
MAX_FILE_BYTES = MAX_SCHEDULE_BYTES = 32 * 1024 * 1024
#: isolate: cut from every other node both ways (not from clients: the
#: KAFKA-15489 zombie keeps answering them); kill: kill -9, restarted after
#: ``duration_ms``; pause: SIGSTOP, SIGCONT after ``duration_ms``.
FAULT_KINDS = ("isolate", "kill", "pause")
OPERATION_KINDS = ("read", "write", "cas")
READ_MODES = ("linearizable", "leader-local")
TIMER_BOUNDS_MS = {"tick_ms": (1, 1_000), "election_timeout_ms": (10, 600_000), "fetch_timeout_ms": (10, 600_000)}


class ScheduleError(ValueError):
    """A schedule document that is not valid (the file's fault): the
    message names the field and says why."""


@dataclass(frozen=True, slots=True)
class Timers:
    """The nodes' timer settings and the two protocol switches."""

    tick_ms: int = 10
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    check_quorum: bool = True
    pre_vote: bool = True

    @property
    def check_quorum_window_ms(self) -> float:
        """check_quorum_factor (1.5, KAFKA-15489) x fetch timeout: the
        bound on a leader-local read's staleness."""
        return 1.5 * self.fetch_timeout_ms


@dataclass(frozen=True, slots=True)
class Fault:
    """``kind`` on ``node`` from ``at_ms`` for ``duration_ms``."""

    at_ms: int
    duration_ms: int
    kind: str
    node: int

    @property
    def end_ms(self) -> int:
        return self.at_ms + self.duration_ms

    def to_json(self) -> dict[str, Any]:
        return {"at_ms": self.at_ms, "duration_ms": self.duration_ms, "kind": self.kind, "node": self.node}


@dataclass(frozen=True, slots=True)
class Operation:
    """A client operation, invoked at ``at_ms`` by client process
    ``process`` (one operation at a time per process), first sent to
    ``node``. ``value``: a write's value; a cas's ``[expected, new]``."""

    at_ms: int
    process: int
    f: str
    key: str
    node: int
    value: int | list[int | None] | None = None
    mode: str | None = None

    def to_json(self) -> dict[str, Any]:
        raw: dict[str, Any] = {"at_ms": self.at_ms, "process": self.process, "f": self.f, "key": self.key, "node": self.node}
        if self.value is not None:
            raw["value"] = self.value
        if self.mode is not None:
            raw["mode"] = self.mode
        return raw


@dataclass(frozen=True, slots=True)
class Schedule:
    """A run as data: seed, nodes, timers, faults and operations."""

    seed: int
    voters: int
    timers: Timers
    duration_ms: int
    leader: int | None = None
    faults: tuple[Fault, ...] = ()
    operations: tuple[Operation, ...] = ()
    origin: str = ""
    # Why a real campaign cannot run this schedule again (faults or
    # operations of kinds the format does not hold); empty: it can.
    not_replayable: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """The document (docs/replay.md), JSON-ready."""
        return {
            **self._head(),
            "faults": [fault.to_json() for fault in self.faults],
            "operations": [op.to_json() for op in self.operations],
        }

    def _head(self) -> dict[str, Any]:
        """The document without its faults and operations."""
        head: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "origin": self.origin,
            "seed": self.seed,
            "nodes": {"voters": self.voters, "leader": self.leader},
            "timers": {
                "tick_ms": self.timers.tick_ms,
                "election_timeout_ms": self.timers.election_timeout_ms,
                "fetch_timeout_ms": self.timers.fetch_timeout_ms,
                "check_quorum": self.timers.check_quorum,
                "pre_vote": self.timers.pre_vote,
            },
            "duration_ms": self.duration_ms,
        }
        if self.not_replayable:
            head["not_replayable"] = list(self.not_replayable)
        return head

    def dumps(self) -> str:
        """The document as text, one fault or operation per line (diffable)."""
        return "".join(self.text_parts())

    def text_parts(self) -> Iterator[str]:
        """``dumps()`` in pieces, one line at a time: a writer that takes
        them one by one never holds the whole text (a long run's schedule
        holds 100,000 operations)."""
        yield json.dumps(self._head(), sort_keys=True)[:-1]
        items: tuple[Fault, ...] | tuple[Operation, ...]
        for name, items in (("faults", self.faults), ("operations", self.operations)):
            if not items:
                yield f', "{name}": []'
                continue
            yield f', "{name}": [\n'
            for index, item in enumerate(items):
                yield ("  " if index == 0 else ",\n  ") + json.dumps(item.to_json(), sort_keys=True)
            yield "\n]"
        yield "}\n"

    def with_parts(self, *, faults: Sequence[Fault] | None = None, operations: Sequence[Operation] | None = None, duration_ms: int | None = None) -> Schedule:
        """The same schedule with other faults, operations or duration;
        what falls after the (new) duration is left out, and faults are
        cut short at it."""
        end = self.duration_ms if duration_ms is None else duration_ms
        kept_faults = tuple(
            replace(f, duration_ms=min(f.duration_ms, end - f.at_ms)) for f in (self.faults if faults is None else faults) if f.at_ms < end
        )
        kept_ops = tuple(op for op in (self.operations if operations is None else operations) if op.at_ms < end)
        return replace(self, faults=kept_faults, operations=kept_ops, duration_ms=end)

    def relabelled(self, leader: int) -> Schedule:
        """The schedule with node ids ``self.leader`` and ``leader``
        swapped (a replay whose first leader is ``leader``); itself when
        they are the same or no leader was recorded."""
        if self.leader is None or self.leader == leader:
            return self
        swap = {self.leader: leader, leader: self.leader}
        return replace(
            self,
            leader=leader,
            faults=tuple(replace(f, node=swap.get(f.node, f.node)) for f in self.faults),
            operations=tuple(replace(op, node=swap.get(op.node, op.node)) for op in self.operations),
        )


# =========================================================================
# Validation (the document is untrusted)
# =========================================================================


def _int(raw: Mapping[str, Any], name: str, where: str, low: int, high: int) -> int:
    value = raw.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ScheduleError(f"{where}: {name!r} must be an integer, not {value!r}"[:300])
    if not low <= value <= high:
        raise ScheduleError(f"{where}: {name!r} {value} is outside {low}..{high}")
    return value


def _bool(raw: Mapping[str, Any], name: str, where: str) -> bool:
    value = raw.get(name)
    if not isinstance(value, bool):
        raise ScheduleError(f"{where}: {name!r} must be true or false, not {value!r}"[:300])
    return value


def _text(raw: Mapping[str, Any], name: str, where: str, longest: int) -> str:
    value = raw.get(name)
    if not isinstance(value, str) or not 0 < len(value) <= longest:
        raise ScheduleError(f"{where}: {name!r} must be a string of 1 to {longest} characters, not {value!r}"[:300])
    return value


def _object(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ScheduleError(f"{where}: must be an object, not {type(raw).__name__}")
    return raw


def _list(raw: Mapping[str, Any], name: str, most: int) -> list[Any]:
    value = raw.get(name, [])
    if not isinstance(value, list):
        raise ScheduleError(f"{name!r} must be a list")
    if len(value) > most:
        raise ScheduleError(f"{name!r} holds {len(value)} entries; at most {most}")
    return value


def _value(raw: Any, f: str, where: str) -> int | list[int | None] | None:
    def one(item: Any, nullable: bool) -> int | None:
        if item is None and nullable:
            return None
        if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item < 2**53:
            raise ScheduleError(f"{where}: a value is an integer in 0..2**53-1, not {item!r}"[:300])
        return item

    if f == "read":
        if raw is not None:
            raise ScheduleError(f"{where}: a read has no 'value'")
        return None
    if f == "write":
        return one(raw, nullable=False)
    if not isinstance(raw, list) or len(raw) != 2:
        raise ScheduleError(f"{where}: a cas's 'value' is [expected, new], not {raw!r}"[:300])
    return [one(raw[0], nullable=True), one(raw[1], nullable=False)]


def parse_schedule(document: Any) -> Schedule:
    """Validate a schedule document (a parsed JSON value) and build the
    :class:`Schedule`; raises :class:`ScheduleError` saying which field is
    wrong and why."""
    raw = _object(document, "schedule")
    if raw.get("format") != FORMAT:
        raise ScheduleError(f"'format' must be {FORMAT!r}, not {raw.get('format')!r}"[:300])
    if raw.get("version") != VERSION:
        raise ScheduleError(f"'version' {raw.get('version')!r} is not one this pykraft reads ({VERSION})"[:300])
    unknown = sorted(set(raw) - {"format", "version", "origin", "seed", "nodes", "timers", "duration_ms", "faults", "operations", "not_replayable"})
    if unknown:
        raise ScheduleError(f"unknown fields: {', '.join(map(str, unknown))}"[:300])
    origin = raw.get("origin", "")
    if not isinstance(origin, str) or len(origin) > MAX_TEXT:
        raise ScheduleError(f"'origin' must be a string of at most {MAX_TEXT} characters")
    seed = _int(raw, "seed", "schedule", 0, MAX_SEED - 1)
    nodes = _object(raw.get("nodes"), "'nodes'")
    voters = _int(nodes, "voters", "'nodes'", 1, MAX_VOTERS)
    leader = None if nodes.get("leader") is None else _int(nodes, "leader", "'nodes'", 1, voters)
    timers_raw = _object(raw.get("timers"), "'timers'")
    bounded = {name: _int(timers_raw, name, "'timers'", *bounds) for name, bounds in TIMER_BOUNDS_MS.items()}
    timers = Timers(**bounded, check_quorum=_bool(timers_raw, "check_quorum", "'timers'"), pre_vote=_bool(timers_raw, "pre_vote", "'timers'"))
    if timers.election_timeout_ms < 2 * timers.tick_ms or timers.fetch_timeout_ms < 2 * timers.tick_ms:
        raise ScheduleError("'timers': each timeout must be at least two ticks")
    duration_ms = _int(raw, "duration_ms", "schedule", 0, MAX_DURATION_MS)
    faults = []
    for index, item in enumerate(_list(raw, "faults", MAX_FAULTS)):
        where = f"fault {index + 1}"
        item = _object(item, where)
        kind = item.get("kind")
        if kind not in FAULT_KINDS:
            raise ScheduleError(f"{where}: 'kind' must be one of {', '.join(FAULT_KINDS)}, not {kind!r}"[:300])
        at_ms = _int(item, "at_ms", where, 0, duration_ms)
        faults.append(Fault(at_ms, _int(item, "duration_ms", where, 0, duration_ms - at_ms), kind, _int(item, "node", where, 1, voters)))
    operations = []
    for index, item in enumerate(_list(raw, "operations", MAX_OPERATIONS)):
        where = f"operation {index + 1}"
        item = _object(item, where)
        f = item.get("f")
        if f not in OPERATION_KINDS:
            raise ScheduleError(f"{where}: 'f' must be one of {', '.join(OPERATION_KINDS)}, not {f!r}"[:300])
        mode = None
        if f == "read":
            mode = item.get("mode")
            if mode not in READ_MODES:
                raise ScheduleError(f"{where}: a read's 'mode' must be one of {', '.join(READ_MODES)}, not {mode!r}"[:300])
        operations.append(
            Operation(
                at_ms=_int(item, "at_ms", where, 0, duration_ms),
                process=_int(item, "process", where, 0, 2**31),
                f=f,
                key=_text(item, "key", where, MAX_KEY),
                node=_int(item, "node", where, 1, voters),
                value=_value(item.get("value"), f, where),
                mode=mode,
            )
        )
    if any(b.at_ms < a.at_ms for a, b in zip(operations, operations[1:])):
        raise ScheduleError("'operations' must be in the order of their 'at_ms'")
    reasons = _list(raw, "not_replayable", MAX_NOT_REPLAYABLE)
    if not all(isinstance(reason, str) and 0 < len(reason) <= MAX_TEXT for reason in reasons):
        raise ScheduleError(f"'not_replayable' holds strings of 1 to {MAX_TEXT} characters")
    faults.sort(key=lambda f: (f.at_ms, f.node, f.kind))
    return Schedule(seed, voters, timers, duration_ms, leader, tuple(faults), tuple(operations), origin, tuple(reasons))


def loads_schedule(data: bytes | str) -> Schedule:
    """Parse a schedule file's bytes; raises :class:`ScheduleError` (too
    large, not JSON, or not a valid schedule)."""
    if len(data) > MAX_FILE_BYTES:
        raise ScheduleError(f"a schedule file holds at most {MAX_FILE_BYTES} bytes")
    try:
        document = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as bad:
        raise ScheduleError(f"not JSON: {bad}") from None
    except RecursionError:
        raise ScheduleError("its JSON nests too deeply") from None
    return parse_schedule(document)


__all__ = ["FAULT_KINDS", "FORMAT", "MAX_DURATION_MS", "MAX_FAULTS", "MAX_OPERATIONS", "MAX_SCHEDULE_BYTES", "VERSION", "Fault", "Operation", "Schedule", "ScheduleError", "Timers", "loads_schedule", "parse_schedule"]
