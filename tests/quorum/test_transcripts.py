"""Transcript tests of the quorum core, in the style of etcd's ``datadriven``.

Each file in ``tests/quorum/transcripts/`` is a story told to a few
``QuorumNode`` cores through ``harness.Cluster``: a sequence of commands,
each followed by ``----`` and the output it must produce, then a blank line.
Lines starting with ``#`` are comments (they tell the story to a reader).
The runner executes every command, renders what the cores did, and compares
the whole file with what it would be if every expected block were the
actual output; a mismatch fails with a unified diff of the two.

When the core changes on purpose, rewrite the expected blocks in place and
review the diff as text::

    PYKRAFT_REWRITE_TRANSCRIPTS=1 .venv/bin/python -m pytest tests/quorum/test_transcripts.py

Every transcript also names the events it exists to show (``KEY_EVENTS``
below): those are checked on every run, rewritten or not, so that a rewrite
cannot quietly turn a story into one that no longer makes its point.

Commands (node lists are comma-separated; ``type`` is a short message name
such as ``Fetch``, ``VoteResp``, ``EndEpoch``; times are in ticks of
``harness.TICK_MS`` ms):

- ``cluster voters=3 [observers=4] [seed=0] [check_quorum=on|off]
  [pre_vote=on|off] [fast_failover=on|off] [election_timeout=T]
  [fetch_timeout=T] [request_timeout=T] [fetch_max_wait=T] [backoff_base=T]
  [backoff_max=T] [snapshot_retained_records=N] [snapshot_chunk_bytes=N]``:
  a fresh cluster (a file may start several);
- ``tick [n=1] [nodes=..]``: n rounds of one tick of each node (all live
  ones by default); nothing is delivered;
- ``campaign node=N``: tick every live node until N's election timer fires
  (it must be the first to fire: choose the seed);
- ``deliver [from=..] [to=..] [type=..]``: deliver the matching messages in
  flight, once (what they cause stays in flight);
- ``stabilize [from=..] [to=..] [type=..]``: deliver until nothing matching
  is in flight;
- ``run n=R [nodes=..]``: R rounds of one tick each, then ``stabilize``;
- ``drop [from=..] [to=..] [type=..]``: lose the matching messages in flight;
- ``partition 1 | 2 3``: cut every link between the groups (cuts add up);
  ``heal`` restores every link;
- ``crash node=N`` (kill -9: what was not durable is lost);
  ``restart node=N`` (from what its disk holds);
- ``hold-disk node=N``: N's writes stop completing, so ``persisted(seq)``
  is not called and the messages behind them wait; ``release-disk
  [node=N]`` (every held disk if no node is named);
- ``propose node=N p1 p2 ..``, ``read node=N mode=leader-local|linearizable``,
  ``resign node=N``, ``snapshot node=N [end=OFFSET]``;
- ``status [nodes=..]`` (role, epoch, leader, vote, high watermark, log
  start and end, the node's own tick) and ``logs [nodes=..]``.

Output lines: a delivered message as ``quorum.describe_message`` renders it,
with what its receiver did indented below; ``[round R]`` heads what round
R of a ``tick`` or ``run`` command did; ``nN: role=..`` a role or epoch
change (with the tick of the node's own clock); ``nN: persist ..`` a write
that became durable; ``send ..`` a message put on the network; ``nN:
commit ..`` records reported committed; ``nN: read ..`` a read's answer.
Records are written ``offset:eEPOCH=payload`` (``LC`` is a new leader's
LEADER_CHANGE record). A command that did nothing visible prints ``ok``.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from harness import TICK_MS, Cluster, assert_committed_agree, matching

from quorum import (
    MESSAGE_TYPES,
    Entry,
    Message,
    NotLeaderError,
    Output,
    ReadFailed,
    ReadReady,
    RecordKind,
    Role,
    describe_message,
    message_type_name,
)

TRANSCRIPTS = Path(__file__).resolve().parent / "transcripts"
REWRITE = os.environ.get("PYKRAFT_REWRITE_TRANSCRIPTS") == "1"
SEPARATOR = "----"


# -- the file format ----------------------------------------------------------------


@dataclass(slots=True)
class Block:
    """One command: the comment and blank lines before it, the command
    line, and the output the file expects."""

    preamble: list[str]
    command: str
    line_number: int
    expected: list[str]


def parse_transcript(text: str, name: str) -> tuple[list[Block], list[str]]:
    """The blocks of a transcript and the lines after the last one.
    Raises ``ValueError`` when a command is not followed by ``----``."""
    lines = text.splitlines()
    blocks: list[Block] = []
    preamble: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip() or line.startswith("#"):
            preamble.append(line)
            index += 1
            continue
        if index + 1 >= len(lines) or lines[index + 1] != SEPARATOR:
            raise ValueError(f"{name}:{index + 1}: command {line!r} is not followed by {SEPARATOR!r}")
        command_index = index
        index += 2
        expected: list[str] = []
        while index < len(lines) and lines[index].strip():
            expected.append(lines[index])
            index += 1
        index += 1  # the blank line that ends the block
        blocks.append(Block(preamble, line, command_index + 1, expected))
        preamble = []
    return blocks, preamble


def render_transcript(blocks: list[Block], outputs: list[list[str]], trailer: list[str]) -> str:
    lines: list[str] = []
    for block, output in zip(blocks, outputs, strict=True):
        lines += [*block.preamble, block.command, SEPARATOR, *output, ""]
    lines += trailer
    return "\n".join(lines) + ("" if lines and lines[-1] == "" else "\n")


# -- rendering what the cores did -------------------------------------------------------


def describe_entries(entries: list[Entry]) -> str:
    return " ".join(
        f"{entry.offset}:e{entry.epoch}=" + ("LC" if entry.kind is RecordKind.LEADER_CHANGE else entry.data.decode())
        for entry in entries
    )


def describe_persistence(output: Output) -> str:
    parts = []
    if (state := output.election_state) is not None:
        parts.append(f"election e{state.epoch} voted={state.voted_for} leader={state.leader_id}")
    if output.snapshot is not None:
        snapshot_id, _ = output.snapshot
        reset = ", log reset" if output.reset_log else ""
        parts.append(f"snapshot end={snapshot_id.end_offset} e{snapshot_id.epoch}{reset}")
    if output.truncate_to is not None:
        parts.append(f"truncate to {output.truncate_to}")
    if output.append:
        parts.append(f"append {describe_entries(output.append)}")
    if output.delete_before is not None:
        parts.append(f"delete before {output.delete_before}")
    return "; ".join(parts)


# The short names of describe_message ("Fetch", "VoteResp", ...); the name
# depends on the class only, so an instance without fields will do.
TYPE_NAMES = frozenset(message_type_name(kind.__new__(kind)) for kind in MESSAGE_TYPES)


def parse_nodes(value: str) -> list[int]:
    return [int(part) for part in value.split(",") if part]


@dataclass(slots=True)
class Command:
    name: str
    args: dict[str, str]
    words: list[str]

    @classmethod
    def parse(cls, line: str) -> Command:
        name, *tokens = line.split()
        args: dict[str, str] = {}
        words: list[str] = []
        for token in tokens:
            key, equals, value = token.partition("=")
            if equals:
                args[key] = value
            else:
                words.append(token)
        return cls(name, args, words)

    def node(self) -> int:
        return int(self.args["node"])

    def nodes(self, default: list[int]) -> list[int]:
        return parse_nodes(self.args["nodes"]) if "nodes" in self.args else default

    def matcher(self) -> Callable[[Message], bool]:
        sources = set(parse_nodes(self.args["from"])) if "from" in self.args else None
        targets = set(parse_nodes(self.args["to"])) if "to" in self.args else None
        kinds = set(self.args["type"].split(",")) if "type" in self.args else None
        if kinds is not None and kinds - TYPE_NAMES:
            raise ValueError(f"unknown message type(s) {sorted(kinds - TYPE_NAMES)}; known: {sorted(TYPE_NAMES)}")
        return matching(
            where=lambda message: (
                (sources is None or message.src in sources)
                and (targets is None or message.dst in targets)
                and (kinds is None or message_type_name(message) in kinds)
            )
        )


# ``cluster`` arguments given in ticks, and the QuorumConfig field (in ms) each sets.
TICK_SETTINGS = {
    "election_timeout": "election_timeout_ms",
    "fetch_timeout": "fetch_timeout_ms",
    "request_timeout": "request_timeout_ms",
    "fetch_max_wait": "fetch_max_wait_ms",
    "backoff_base": "election_backoff_base_ms",
    "backoff_max": "election_backoff_max_ms",
    "retry_backoff": "retry_backoff_ms",
}
SWITCHES = ("check_quorum", "pre_vote", "fast_failover")
COUNTS = {"snapshot_retained_records": "snapshot_retained_records", "snapshot_chunk_bytes": "snapshot_chunk_bytes_max"}


# The arguments each command takes, and whether it takes plain words.
ANY = frozenset({"*"})
FILTERS = frozenset({"from", "to", "type"})
NODE = frozenset({"node"})
ARGUMENTS: dict[str, tuple[frozenset[str], bool]] = {
    "cluster": (ANY, False),  # checked by do_cluster
    "tick": (frozenset({"n", "nodes"}), False),
    "campaign": (NODE, False),
    "deliver": (FILTERS, False),
    "stabilize": (FILTERS, False),
    "run": (frozenset({"n", "nodes"}), False),
    "drop": (FILTERS, False),
    "partition": (frozenset(), True),
    "heal": (frozenset(), False),
    "crash": (NODE, False),
    "restart": (NODE, False),
    "hold-disk": (NODE, False),
    "release-disk": (NODE, False),
    "propose": (NODE, True),
    "read": (frozenset({"node", "mode"}), False),
    "resign": (NODE, False),
    "snapshot": (frozenset({"node", "end"}), False),
    "status": (frozenset({"nodes"}), False),
    "logs": (frozenset({"nodes"}), False),
}


@dataclass
class TranscriptRun:
    """Runs the commands of one transcript and renders their effects."""

    cluster: Cluster | None = None
    clusters: list[Cluster] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    indent: str = ""
    reads: int = 0
    outputs: list[tuple[str, list[str]]] = field(default_factory=list)

    # -- observing the harness --------------------------------------------------------

    def emit(self, line: str) -> None:
        self.lines.append(self.indent + line)

    def observe(self, kind: str, node_id: int, item: Any) -> None:
        if kind == "deliver":
            self.indent = ""
            self.emit(describe_message(item))
            self.indent = "  "
        elif kind == "lost":
            self.indent = ""
            cluster = self.require_cluster()
            reason = "node down" if not cluster.replica(node_id).up else "link cut"
            self.emit(f"{describe_message(item)} (lost: {reason})")
        elif kind == "send":
            for message in item:
                self.emit(f"send {describe_message(message)}")
        elif kind == "persist":
            self.emit(f"n{node_id}: persist {describe_persistence(item)}")
        elif kind == "output":
            self.observe_output(node_id, item)

    def observe_output(self, node_id: int, output: Output) -> None:
        for event in output.events:
            self.emit(
                f"n{node_id}: role={event.role.value} epoch={event.epoch} leader={event.leader_id}"
                f" tick={event.tick} ({event.reason})"
            )
        if output.snapshot_loaded is not None:
            snapshot_id, data = output.snapshot_loaded
            self.emit(f"n{node_id}: load snapshot end={snapshot_id.end_offset} e{snapshot_id.epoch} ({data.decode()})")
        if output.committed:
            self.emit(f"n{node_id}: commit {describe_entries(output.committed)}")
        for read in output.reads:
            if isinstance(read, ReadReady):
                self.emit(f"n{node_id}: read {read.read_id} ready offset={read.offset}")
            else:
                assert isinstance(read, ReadFailed)
                self.emit(f"n{node_id}: read {read.read_id} failed leader={read.leader_id} ({read.reason})")

    # -- commands ------------------------------------------------------------------

    def require_cluster(self) -> Cluster:
        assert self.cluster is not None, "start with a `cluster` command"
        return self.cluster

    def execute(self, line: str) -> list[str]:
        """Run one command line; returns its rendered output ("ok" if none).
        Raises ``ValueError`` for an unknown command, an argument the
        command does not take, or a missing one."""
        self.lines, self.indent = [], ""
        command = Command.parse(line)
        if command.name not in ARGUMENTS:
            raise ValueError(f"unknown transcript command {command.name!r}")
        keys, takes_words = ARGUMENTS[command.name]
        unknown = sorted(set(command.args) - keys) if keys is not ANY else []
        if unknown or (command.words and not takes_words):
            raise ValueError(f"{command.name} does not take {unknown or command.words}")
        handler = getattr(self, "do_" + command.name.replace("-", "_"))
        try:
            handler(command)
        except KeyError as missing:
            raise ValueError(f"{command.name} needs the argument {missing}") from None
        self.check_invariants(line)
        output = self.lines or ["ok"]
        self.outputs.append((line, output))
        return output

    def check_invariants(self, line: str) -> None:
        """Election Safety (Raft thesis §3.6.3) after every command: no two
        nodes lead the same epoch."""
        if self.cluster is None:
            return
        epochs = [self.cluster.node(node_id).epoch for node_id in self.cluster.leaders()]
        assert len(epochs) == len(set(epochs)), f"after {line!r}: two leaders in one epoch {epochs}"

    def do_cluster(self, command: Command) -> None:
        overrides: dict[str, Any] = {}
        for key, value in command.args.items():
            if key in TICK_SETTINGS:
                overrides[TICK_SETTINGS[key]] = int(value) * TICK_MS
            elif key in SWITCHES:
                if value not in ("on", "off"):
                    raise ValueError(f"{key} is on or off, not {value!r}")
                overrides[key] = value == "on"
            elif key in COUNTS:
                overrides[COUNTS[key]] = int(value)
            elif key not in ("voters", "observers", "seed"):
                raise ValueError(f"unknown cluster setting {key!r}")
        self.cluster = Cluster(
            int(command.args.get("voters", "3")),
            observers=parse_nodes(command.args.get("observers", "")),
            seed=int(command.args.get("seed", "0")),
            observer=self.observe,
            **overrides,
        )
        self.clusters.append(self.cluster)
        config = self.cluster.node(self.cluster.voter_ids[0]).config
        check_quorum = config.ticks(config.check_quorum_ms) if config.check_quorum else "off"
        self.lines.insert(
            0,
            f"voters={list(config.voters)} tick={config.tick_ms}ms"
            f" election_timeout={config.ticks(config.election_timeout_ms)}"
            f" fetch_timeout={config.ticks(config.fetch_timeout_ms)}"
            f" check_quorum={check_quorum} pre_vote={'on' if config.pre_vote else 'off'}",
        )

    def rounds(self, count: int, one_round: Callable[[], None]) -> None:
        """``count`` rounds; the output of each round that did something is
        headed ``[round R]``."""
        for number in range(1, count + 1):
            mark = len(self.lines)
            one_round()
            self.indent = ""
            if len(self.lines) > mark:
                self.lines.insert(mark, f"[round {number}]")

    def do_tick(self, command: Command) -> None:
        cluster = self.require_cluster()
        nodes = command.nodes([])
        self.rounds(int(command.args.get("n", "1")), lambda: cluster.tick(*nodes))

    def do_campaign(self, command: Command) -> None:
        """Every live node ticks, round by round, until node N's election
        timer fires. Raises ``AssertionError`` if another node stands first
        (choose the seed so that N's timer is the earliest)."""
        cluster, node_id = self.require_cluster(), command.node()
        standing = (Role.PROSPECTIVE, Role.CANDIDATE)

        def stood() -> list[int]:
            return [other for other in cluster.live() if cluster.role(other) in standing]

        assert not stood(), f"already standing: {stood()}"
        for count in range(1, 10_000):
            cluster.tick()
            if stood():
                assert stood() == [node_id], f"node(s) {stood()} stood, not node {node_id}: choose another seed"
                self.emit(f"(every node ticked {count} times)")
                return
        raise AssertionError(f"node {node_id} never stood")

    def do_deliver(self, command: Command) -> None:
        self.require_cluster().deliver(where=command.matcher())

    def do_stabilize(self, command: Command) -> None:
        self.require_cluster().deliver_all(where=command.matcher())

    def do_run(self, command: Command) -> None:
        cluster = self.require_cluster()
        nodes = command.nodes([])
        self.rounds(int(command.args["n"]), lambda: cluster.run(1, nodes=nodes))

    def do_drop(self, command: Command) -> None:
        for message in self.require_cluster().drop(where=command.matcher()):
            self.emit(f"dropped {describe_message(message)}")

    def do_partition(self, command: Command) -> None:
        cluster = self.require_cluster()
        groups = [parse_nodes(group.replace(" ", ",")) for group in " ".join(command.words).split("|")]
        for index, group in enumerate(groups):
            for other in groups[index + 1 :]:
                for a in group:
                    for b in other:
                        cluster.block(a, b)

    def do_heal(self, command: Command) -> None:
        self.require_cluster().heal()

    def do_crash(self, command: Command) -> None:
        self.require_cluster().crash(command.node())

    def do_restart(self, command: Command) -> None:
        self.require_cluster().restart(command.node())

    def do_hold_disk(self, command: Command) -> None:
        self.require_cluster().hold_disk(command.node())

    def do_release_disk(self, command: Command) -> None:
        cluster = self.require_cluster()
        held = [node_id for node_id in sorted(cluster.replicas) if cluster.replica(node_id).disk_held]
        for node_id in [command.node()] if "node" in command.args else held:
            cluster.release_disk(node_id)

    def do_propose(self, command: Command) -> None:
        cluster, node_id = self.require_cluster(), command.node()
        try:
            first = cluster.propose(node_id, *(word.encode() for word in command.words))
        except NotLeaderError as error:
            self.emit(f"n{node_id}: refused: {error}")
            return
        self.lines.insert(0, f"n{node_id}: proposed at offset {first}")

    def do_read(self, command: Command) -> None:
        cluster, node_id = self.require_cluster(), command.node()
        mode = command.args["mode"]
        node = cluster.node(node_id)
        if mode == "leader-local":
            # As the runtime answers one (QuorumRuntime.leader_local_offset):
            # from this node's own state, if it believes it leads and has
            # committed a record of its own epoch (KAFKA-15345).
            if node.leader_has_committed_own_epoch:
                self.emit(f"n{node_id}: read leader-local ok offset={node.high_watermark}")
            else:
                self.emit(f"n{node_id}: read leader-local refused: not the leader (hint {node.leader_id})")
            return
        if mode != "linearizable":
            raise ValueError(f"unknown read mode {mode!r}")
        self.reads += 1
        read_id = f"r{self.reads}"
        try:
            output = cluster.read_index(node_id, read_id)
        except NotLeaderError as error:
            self.emit(f"n{node_id}: read {read_id} refused: {error}")
            return
        if not output.reads:
            self.emit(f"n{node_id}: read {read_id} waits for a majority to confirm leadership")

    def do_resign(self, command: Command) -> None:
        self.require_cluster().resign(command.node())

    def do_snapshot(self, command: Command) -> None:
        cluster, node_id = self.require_cluster(), command.node()
        end = int(command.args["end"]) if "end" in command.args else None
        snapshot_id = cluster.take_snapshot(node_id, end)
        self.lines.insert(0, f"n{node_id}: snapshot of records below {snapshot_id.end_offset} (e{snapshot_id.epoch})")

    def do_status(self, command: Command) -> None:
        cluster = self.require_cluster()
        for node_id in command.nodes(sorted(cluster.replicas)):
            replica = cluster.replica(node_id)
            if not replica.up:
                self.emit(f"n{node_id}: down")
                continue
            node = cluster.node(node_id)
            held = " disk=held" if replica.disk_held else ""
            self.emit(
                f"n{node_id}: {node.role.value} e{node.epoch} leader={node.leader_id} voted={node.voted_for}"
                f" hw={node.high_watermark} log=[{node.log.start_offset},{node.log.end_offset})"
                f" tick={node.current_tick}{held}"
            )

    def do_logs(self, command: Command) -> None:
        cluster = self.require_cluster()
        for node_id in command.nodes(sorted(cluster.replicas)):
            if not cluster.replica(node_id).up:
                self.emit(f"n{node_id}: down")
                continue
            node = cluster.node(node_id)
            entries = cluster.log_entries(node_id)
            committed = describe_entries([entry for entry in entries if entry.offset < node.high_watermark])
            pending = describe_entries([entry for entry in entries if entry.offset >= node.high_watermark])
            self.emit(f"n{node_id}: start={node.log.start_offset} committed [{committed}] uncommitted [{pending}]")


# -- the key events each transcript exists to show ----------------------------------------


def outputs_of(run: TranscriptRun, command_prefix: str) -> list[list[str]]:
    return [output for line, output in run.outputs if line.startswith(command_prefix)]


def lines_matching(run: TranscriptRun, pattern: str, command_prefix: str = "") -> list[str]:
    found = re.compile(pattern)
    return [
        line for output in outputs_of(run, command_prefix) for line in output if found.search(line)
    ]


def require(run: TranscriptRun, pattern: str, command_prefix: str = "") -> list[str]:
    found = lines_matching(run, pattern, command_prefix)
    assert found, f"no output line of a {command_prefix or 'any'!r} command matches {pattern!r}"
    return found


KEY_EVENTS: dict[str, Callable[[TranscriptRun], None]] = {}


def key_events(name: str) -> Callable[[Callable[[TranscriptRun], None]], Callable[[TranscriptRun], None]]:
    def register(check: Callable[[TranscriptRun], None]) -> Callable[[TranscriptRun], None]:
        KEY_EVENTS[name] = check
        return check

    return register


def index_of(run: TranscriptRun, command: str, start: int = 0) -> int:
    """Position of the first command equal to ``command`` from ``start``."""
    for index in range(start, len(run.outputs)):
        if run.outputs[index][0] == command:
            return index
    raise AssertionError(f"the transcript has no command {command!r}")


def lines_between(run: TranscriptRun, start: int, end: int | None = None) -> list[str]:
    return [line for _, output in run.outputs[start:end] for line in output]


def numbers(pattern: str, lines: list[str]) -> list[int]:
    """The first group of ``pattern``, as an int, in every line it matches."""
    found = re.compile(pattern)
    return [int(match.group(1)) for line in lines if (match := found.search(line))]


def leaders_at_once(output: list[str]) -> int:
    return sum(1 for line in output if re.match(r"n\d+: leader e", line))


@key_events("zombie_leader_check_quorum_off.txt")
def zombie_leader_keeps_serving_stale_reads(run: TranscriptRun) -> None:
    """KAFKA-15489 without the fix: while the majority elects and commits,
    the cut-off leader never resigns and answers reads that miss a write."""
    partition = index_of(run, "partition 1 | 2 3")
    after = lines_between(run, partition)
    require(run, r"^ *n3: role=leader epoch=3 ")
    assert not [line for line in after if re.search(r"n1: role=(resigned|prospective|candidate)", line)]
    assert any(leaders_at_once(output) == 2 for line, output in run.outputs[partition:] if line == "status")
    stale = numbers(r"n1: read leader-local ok offset=(\d+)", after)
    fresh = numbers(r"n3: read leader-local ok offset=(\d+)", after)
    assert stale and fresh and max(stale) < min(fresh), (stale, fresh)
    assert any(re.search(r"n3: commit .*:e3=b$", line) for line in after), "the write the reads miss is committed"
    assert not lines_matching(run, r"n1: read r\d+ ready"), "a linearizable read was confirmed by a minority"
    assert lines_matching(run, r"n3: read r\d+ ready offset=4")


@key_events("zombie_leader_check_quorum_on.txt")
def isolated_leader_resigns_on_check_quorum(run: TranscriptRun) -> None:
    """KAFKA-15489 with the fix: the cut-off leader resigns exactly
    1.5 x fetch timeout after a majority last fetched, and serves no
    leader-local read after that."""
    partition = index_of(run, "partition 1 | 2 3")
    [last_fetch_tick] = numbers(r"^n1: leader .* tick=(\d+)", run.outputs[partition - 1][1])
    resign_ticks = numbers(r"n1: role=resigned epoch=1 .*tick=(\d+) \(check quorum", lines_between(run, partition))
    assert len(resign_ticks) == 1, f"node 1 resigned on check quorum {len(resign_ticks)} times, not once"
    [resign_tick] = resign_ticks
    config = run.clusters[0].node(2).config
    assert resign_tick - last_fetch_tick == config.ticks(config.check_quorum_ms)
    resigned = next(
        index
        for index in range(partition, len(run.outputs))
        if any("n1: role=resigned" in line for line in run.outputs[index][1])
    )
    assert not numbers(r"n1: read leader-local ok offset=(\d+)", lines_between(run, resigned))
    assert lines_matching(run, r"n1: read leader-local refused")
    assert not any(leaders_at_once(output) == 2 for line, output in run.outputs if line == "status")
    require(run, r"n1: read r1 failed .*leadership lost")


@key_events("pre_vote_disruption.txt")
def healed_node_cannot_depose_the_leader_with_pre_vote(run: TranscriptRun) -> None:
    """KIP-996: with pre-vote, node 3's pre-votes are refused and no epoch
    changes. Without it, node 3's Votes from a later epoch are refused under
    the leader lease (Raft thesis §4.2.3), but its refusal of the leader's
    BeginQuorumEpoch carries that epoch back and deposes the leader."""
    second = index_of(run, "cluster voters=3 seed=2 pre_vote=off")
    with_pre_vote = lines_between(run, 0, second)
    assert sum(line.endswith("send 1->3 VoteResp e1 pre rejected leader=1") for line in with_pre_vote) == 1
    assert sum(line.endswith("send 2->3 VoteResp e1 pre rejected leader=1") for line in with_pre_vote) == 1
    assert any("n3: role=follower epoch=1 leader=1" in line and "lost the pre-vote" in line for line in with_pre_vote)
    assert not numbers(r"role=\w+ epoch=([2-9])", with_pre_vote)
    final_status = run.outputs[second - 1][1]
    assert final_status[0].startswith("n1: leader e1 ")
    without = lines_between(run, second)
    assert not [line for line in without if re.search(r"n[12]: role=\w+ epoch=\d+ .*vote request from 3", line)]
    assert any(line.endswith("send 1->3 VoteResp e1 vote rejected leader=1") for line in without)
    assert any(line.endswith("send 2->3 VoteResp e1 vote rejected leader=1") for line in without)
    assert "  send 3->1 BeginEpochResp e5 FENCED_LEADER_EPOCH" in without
    assert any(re.search(r"n1: role=unattached epoch=5 .*learned of epoch 5 from 3", line) for line in without)
    assert not numbers(r"n3: role=leader epoch=(\d+)", without)


@key_events("diverging_truncation.txt")
def deposed_leader_truncates_to_the_diverging_offset(run: TranscriptRun) -> None:
    """KIP-595: the new leader's Fetch answer names the divergence and the
    deposed leader truncates its uncommitted records there, never below its
    high watermark."""
    heal = index_of(run, "heal")
    [logs_before_heal] = [output for line, output in run.outputs[:heal] if line == "logs"]
    assert logs_before_heal[0] == "n1: start=0 committed [0:e1=LC 1:e1=a] uncommitted [2:e1=b 3:e1=c]"
    after = lines_between(run, heal)
    assert any(re.search(r"^  send 3->1 FetchResp e3 #\d+ diverging=e1@2 ", line) for line in after)
    # Truncated to 2: exactly its high watermark, nothing committed removed.
    assert "  n1: persist truncate to 2" in after
    assert not [line for line in lines_matching(run, r"commit ") if re.search(r"e1=[bc]\b", line)]
    final_logs = run.outputs[-1][1]
    assert len({line.split(": ", 1)[1] for line in final_logs}) == 1, final_logs
    assert "2:e3=LC 3:e3=d" in final_logs[0]


@key_events("snapshot_catch_up.txt")
def follower_behind_log_start_installs_the_snapshot(run: TranscriptRun) -> None:
    """KIP-630: a Fetch below the leader's log start is answered with the
    snapshot id; the follower downloads it in chunks and installs it. And
    a follower acknowledges nothing before its disk has it."""
    held, released = index_of(run, "hold-disk node=2"), index_of(run, "release-disk node=2")
    assert not [line for line in lines_between(run, held, released) if re.search(r"n1: commit 1:", line)]
    assert any(line.endswith("n1: commit 1:e1=a 2:e1=b 3:e1=c") for line in lines_between(run, released))
    require(run, r"^  send 1->3 FetchResp e1 #1:\d+ snapshot=4 ")
    assert lines_matching(run, r"^dropped 1->3 FetchSnapResp e1 #1:\d+ pos=0 ", "drop")
    assert len(lines_matching(run, r"send 3->1 FetchSnap e1 #1:\d+ snapshot=4 pos=0$")) == 2, "no retry of the lost chunk"
    assert len(lines_matching(run, r"^  send 1->3 FetchSnapResp ")) == 3
    require(run, r"n3: load snapshot end=4 e1")
    require(run, r"n3: persist snapshot end=4 e1, log reset")
    assert run.outputs[-1][1][2] == "n3: start=4 committed [4:e1=d] uncommitted []"


@key_events("leader_disk_stall_and_crash.txt")
def records_committed_without_the_leaders_disk_survive_its_crash(run: TranscriptRun) -> None:
    """Raft thesis §10.2.1: the followers' acknowledgements alone commit
    while the leader's write stalls; the leader's crash then loses its copy,
    and it restarts Resigned, never Leader, and recovers the records."""
    held, crash = index_of(run, "hold-disk node=1"), index_of(run, "crash node=1")
    before_crash = lines_between(run, held, crash)
    assert not [line for line in before_crash if "n1: persist" in line]
    assert any(line.endswith("n1: commit 1:e1=a 2:e1=b") for line in before_crash)
    assert run.outputs[crash + 1][1] == ["n1: role=resigned epoch=1 leader=None tick=0 (restarted after leading)"]
    assert re.match(r"n1: resigned e1 .* log=\[0,1\)", run.outputs[crash + 2][1][0])
    require(run, r"n2: role=leader epoch=2 ")
    assert run.outputs[-1][1][0].startswith("n1: start=0 committed [0:e1=LC 1:e1=a 2:e1=b 3:e2=LC]")


@key_events("resign_hand_over.txt")
def resigning_leader_hands_over_to_the_most_up_to_date_voter(run: TranscriptRun) -> None:
    """KIP-595 EndQuorumEpoch: successors ordered by acknowledged offset;
    the first stands at once, wins, and commits what only it had."""
    resign = index_of(run, "resign node=1")
    assert len(lines_matching(run, r"^send 1->\d EndEpoch e1 successors=\[4, 2, 5, 3\]$", "resign")) == 4
    stood = [line for line in lines_between(run, resign) if re.search(r"role=(prospective|candidate)", line)]
    assert stood and all(line.lstrip().startswith("n4: ") for line in stood), stood
    require(run, r"n4: role=leader epoch=2 ")
    require(run, r"n4: commit 3:e1=c 4:e2=LC")


# -- the test ----------------------------------------------------------------------------


def transcript_files() -> list[Path]:
    return sorted(TRANSCRIPTS.glob("*.txt"))


def run_transcript(path: Path) -> tuple[str, str, TranscriptRun]:
    """Expected and actual text of a transcript file, and the run."""
    text = path.read_text()
    blocks, trailer = parse_transcript(text, path.name)
    run = TranscriptRun()
    outputs = []
    for block in blocks:
        try:
            outputs.append(run.execute(block.command))
        except Exception as error:
            raise AssertionError(f"{path.name}:{block.line_number}: {block.command!r} failed: {error!r}") from error
    for cluster in run.clusters:
        assert_committed_agree(cluster)
    return text, render_transcript(blocks, outputs, trailer), run


def test_every_transcript_names_its_key_events():
    names = [path.name for path in transcript_files()]
    assert names, "no transcripts found"
    assert sorted(KEY_EVENTS) == names


def transcript_diff(path: Path, expected: str, actual: str) -> str | None:
    """None when the run matches the file; else an explanation ending in a
    unified diff of the file against the run."""
    if actual == expected:
        return None
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            fromfile=f"{path.name} (expected)",
            tofile=f"{path.name} (actual)",
        )
    )
    return (
        f"transcript {path.name} differs from the run; if the change is intended, rewrite it with\n"
        f"PYKRAFT_REWRITE_TRANSCRIPTS=1 .venv/bin/python -m pytest tests/quorum/test_transcripts.py\n\n{diff}"
    )


@pytest.mark.parametrize("path", transcript_files(), ids=lambda path: path.stem)
def test_transcript(path: Path):
    expected, actual, run = run_transcript(path)
    if path.name in KEY_EVENTS:  # a missing entry fails test_every_transcript_names_its_key_events
        KEY_EVENTS[path.name](run)
    if REWRITE:
        if actual != expected:
            path.write_text(actual)
        return
    if (mismatch := transcript_diff(path, expected, actual)) is not None:
        pytest.fail(mismatch, pytrace=False)


def test_a_wrong_expectation_fails_with_a_diff_and_a_rewrite_fixes_it(tmp_path):
    path = tmp_path / "story.txt"
    path.write_text("# one node\ncluster voters=1\n----\nvoters=[1]\n\nstatus\n----\nn1: leader\n")
    expected, actual, _ = run_transcript(path)
    mismatch = transcript_diff(path, expected, actual)
    assert mismatch is not None
    assert "-n1: leader\n+n1: unattached e0 leader=None voted=None hw=0 log=[0,0) tick=0\n" in mismatch
    assert "+n1: role=unattached epoch=0 leader=None tick=0 (started)\n" in mismatch
    path.write_text(actual)  # what the rewrite flag does
    assert transcript_diff(path, *run_transcript(path)[:2]) is None


def test_parse_and_render_round_trip():
    text = "# a story\n\ncluster voters=1\n----\nvoters=[1]\n\n# next\nstatus\n----\nn1: down\n"
    blocks, trailer = parse_transcript(text, "example")
    assert [block.command for block in blocks] == ["cluster voters=1", "status"]
    assert render_transcript(blocks, [block.expected for block in blocks], trailer) == text


def test_a_command_without_separator_is_rejected():
    with pytest.raises(ValueError, match="example:1: command 'status' is not followed"):
        parse_transcript("status\nn1: down\n", "example")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("frobnicate", "unknown transcript command 'frobnicate'"),
        ("tick n=3 node=1", r"tick does not take \['node'\]"),
        ("heal now", r"heal does not take \['now'\]"),
        ("read node=1", "read needs the argument 'mode'"),
        ("deliver type=Fetchh", r"unknown message type\(s\) \['Fetchh'\]"),
        ("cluster voters=3 chek_quorum=off", "unknown cluster setting 'chek_quorum'"),
        ("cluster voters=3 pre_vote=no", "pre_vote is on or off"),
    ],
)
def test_a_mistyped_command_is_an_error_not_an_output(line, message):
    """A typo must fail loudly, not be rewritten into the expected output."""
    run = TranscriptRun()
    run.execute("cluster voters=3")
    with pytest.raises(ValueError, match=message):
        run.execute(line)
