"""An exception raised by a state machine's apply is contained to its
record (issue 18, item 4): the proposer gets ``ApplyFailedError``, every
replica applied the same records to the same state, the node logs it and
keeps serving. Three runtimes over an in-process network, MockClock.

Each test requests ``autojump_clock`` itself (pytest-trio installs the
clock only when the test function asks for it).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

import msgpack
import pytest
import trio

from quorum import ApplyFailedError, Entry, QuorumConfig, RecordKind
from quorum.replicated import Replicated, ReplicatedStateMachine, encode_call, query, replicated
from quorum.runtime import MemoryNetwork, QuorumRuntime
from quorum.storage import MemoryStorage

VOTERS = (1, 2, 3)


class Ledger:
    """A plain ``quorum.StateMachine`` whose apply raises on a negative
    amount, after changing nothing, and on ``b"half"`` after changing half
    of its state (what the failing call leaves must be the same
    everywhere)."""

    def __init__(self) -> None:
        self.total = 0
        self.touched = 0

    def apply(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        answers = {}
        for entry in entries:
            if entry.data == b"half":
                self.touched += 1
                raise RuntimeError("half done")
            amount = int(entry.data)
            if amount < 0:
                raise ValueError(f"negative amount {amount}")
            self.total += amount
            answers[entry.offset] = str(self.total).encode()
        return answers

    def snapshot(self) -> bytes:
        return msgpack.packb([self.total, self.touched])

    def restore(self, data: bytes) -> None:
        self.total, self.touched = msgpack.unpackb(data)


class Counter(Replicated):
    def __init__(self) -> None:
        self.total = 0
        self.log: list[int] = []

    @replicated
    def add(self, n):
        self.log.append(n)  # changed before it raises: the same on every replica
        if n < 0:
            raise ValueError("counters only go up")
        self.total += n
        return self.total

    @replicated
    def unanswerable(self):
        return object()  # msgpack cannot encode the result

    @query
    def value(self):
        return self.total


async def start_cluster(nursery, make_machine):
    network = MemoryNetwork()
    runtimes, machines = {}, {}
    for node_id in VOTERS:
        machine = make_machine()
        runtime = QuorumRuntime(
            QuorumConfig(node_id=node_id, voters=VOTERS),
            machine,
            storage=MemoryStorage(),
            transport=network.transport(node_id),
            rng=random.Random(node_id),
            snapshot_every_records=0,
        )
        await nursery.start(runtime.run)
        runtimes[node_id], machines[node_id] = runtime, machine
    with trio.fail_after(30):
        while True:
            leaders = [runtime for runtime in runtimes.values() if runtime.node.leader_has_committed_own_epoch]
            if leaders:
                return leaders[0], runtimes, machines
            await trio.sleep(0.01)


async def wait_applied_everywhere(runtimes, offset):
    with trio.fail_after(30):
        while any(runtime.applied_offset < offset for runtime in runtimes.values()):
            await trio.sleep(0.01)


async def test_a_raising_state_machine_fails_its_record_identically_everywhere(nursery, autojump_clock, caplog):
    leader, runtimes, machines = await start_cluster(nursery, Ledger)
    with caplog.at_level(logging.ERROR, logger="pykraft.quorum"):
        assert (await leader.propose_with_answers([b"5"]))[1] == [b"5"]
        with pytest.raises(ApplyFailedError) as failed:
            await leader.propose_with_answers([b"-3"])
        assert failed.value.description == "ValueError: negative amount -3"
        with pytest.raises(ApplyFailedError, match="RuntimeError: half done"):
            await leader.propose_with_answers([b"half"])
        # A batch with a failing record fails as a whole for its proposer;
        # its other records were applied, on every replica.
        with pytest.raises(ApplyFailedError) as batch:
            await leader.propose_with_answers([b"1", b"-1", b"2"])
        last, answers = await leader.propose_with_answers([b"10"])
    assert answers == [b"18"]  # 5 + 1 + 2 + 10: the nodes kept running
    assert batch.value.offset == last - 2
    await wait_applied_everywhere(runtimes, last + 1)
    assert {(machine.total, machine.touched) for machine in machines.values()} == {(18, 1)}
    failures = [record for record in caplog.records if "the state machine raised" in record.getMessage()]
    assert len(failures) == 3 * len(VOTERS)  # logged by every replica, once per failing record


async def test_a_replicated_method_that_raises_answers_an_error_and_changes_every_replica_alike(
    nursery, autojump_clock
):
    leader, runtimes, machines = await start_cluster(nursery, lambda: ReplicatedStateMachine(Counter()))
    machine = machines[leader.config.node_id]

    async def call(name, *args):
        last, answers = await leader.propose_with_answers([encode_call(name, args, {})])
        failed, value = msgpack.unpackb(answers[0], raw=False)
        return last, failed, value

    assert (await call("add", 4))[1:] == (0, 4)
    assert (await call("add", -1))[1:] == (1, "ValueError: counters only go up")
    failed, description = (await call("unanswerable"))[1:]
    assert failed == 1 and description.startswith("TypeError")
    last, failed, value = await call("add", 3)
    assert (failed, value) == (0, 7)
    await wait_applied_everywhere(runtimes, last + 1)
    states = {msgpack.packb(m.target.snapshot_state()) for m in machines.values()}
    assert len(states) == 1
    assert machine.target.snapshot_state() == {"log": [4, -1, 3], "total": 7}
    assert machine.run_query("value", [], {}) == 7


def test_the_default_snapshot_round_trips_public_attributes():
    counter = Counter()
    counter.total, counter.log, counter._cache = 3, [1, 2], "not state"
    machine = ReplicatedStateMachine(counter)
    data = machine.snapshot()
    other = ReplicatedStateMachine(Counter())
    other.target.extra = "dropped by restore"
    other.restore(data)
    assert vars(other.target) == {"total": 3, "log": [1, 2]}


def test_state_msgpack_cannot_encode_is_refused_at_the_start_naming_the_hooks_to_override():
    counter = Counter()
    counter.seen = {1, 2}
    with pytest.raises(TypeError, match="state of Counter cannot be snapshotted.*override snapshot_state"):
        ReplicatedStateMachine(counter)
    with pytest.raises(TypeError, match="state of Counter cannot be snapshotted"):
        counter.start(node_id=1, voters="1@127.0.0.1:1", plaintext=True)  # refused before any port is opened


class Tagger(Replicated):
    """``tag`` may leave a ``set`` in the state, which msgpack cannot encode."""

    def __init__(self) -> None:
        self.tags: dict[str, list[str]] = {}

    @replicated
    def tag(self, name, value, as_set=False):
        self.tags.setdefault(name, []).append(value)
        if as_set:
            self.tags[name] = set(self.tags[name])
        return len(self.tags[name])


async def test_a_call_that_leaves_the_state_unencodable_is_undone_everywhere_and_snapshots_go_on(
    nursery, autojump_clock, caplog
):
    """Regression: the call used to succeed, and the next snapshot raised in
    the node's task, which stopped the node. Now the call fails at the
    caller, every replica undoes it, and every replica can snapshot."""
    leader, runtimes, machines = await start_cluster(nursery, lambda: ReplicatedStateMachine(Tagger()))

    async def call(*args):
        last, answers = await leader.propose_with_answers([encode_call("tag", args, {})])
        failed, value = msgpack.unpackb(answers[0], raw=False)
        return last, failed, value

    assert (await call("a", "x"))[1:] == (0, 1)
    with caplog.at_level(logging.ERROR, logger="pykraft.replicated"):
        failed, description = (await call("a", "y", True))[1:]
    assert failed == 1
    assert description.startswith("TypeError: the state of Tagger cannot be snapshotted") and "undone" in description
    last, failed, value = await call("a", "z")
    assert (failed, value) == (0, 2)  # "y" was undone with its call
    await wait_applied_everywhere(runtimes, last + 1)
    for machine in machines.values():
        assert machine.target.tags == {"a": ["x", "z"]}
        assert msgpack.unpackb(machine.snapshot(), raw=False) == {"tags": {"a": ["x", "z"]}}
    assert sum("state of Tagger cannot be snapshotted" in record.getMessage() for record in caplog.records) == len(VOTERS)


class Fragile(Replicated):
    """``snapshot_state()`` raises while ``broken`` is set."""

    def __init__(self) -> None:
        self.items: list[int] = []

    @replicated
    def add(self, item, break_it=False):
        self.items.append(item)
        if break_it:
            self.broken = True
        return len(self.items)

    def snapshot_state(self):
        if getattr(self, "broken", False):
            raise AttributeError("no snapshot while broken")
        return {"items": self.items}

    def restore_state(self, state):
        vars(self).pop("broken", None)
        self.items = state["items"]


def test_a_call_after_which_snapshot_state_raises_is_undone_too():
    machine = ReplicatedStateMachine(Fragile())
    calls = [encode_call("add", [1], {}), encode_call("add", [2], {"break_it": True}), encode_call("add", [3], {})]
    entries = [Entry(offset=offset, epoch=1, kind=RecordKind.DATA, data=data) for offset, data in enumerate(calls)]
    answers = {offset: msgpack.unpackb(answer, raw=False) for offset, answer in machine.apply(entries).items()}
    assert answers[0] == [0, 1] and answers[2] == [0, 2]
    assert answers[1] == [1, "AttributeError: no snapshot while broken; the call was undone"]
    assert machine.target.items == [1, 3]
    assert msgpack.unpackb(machine.snapshot(), raw=False) == {"items": [1, 3]}


class UnsnapshottableLedger(Ledger):
    """A plain state machine whose ``snapshot()`` raises until ``fixed``."""

    fixed = False

    def snapshot(self) -> bytes:
        if not self.fixed:
            raise TypeError("cannot encode a set")
        return super().snapshot()


async def test_a_state_machine_whose_snapshot_raises_keeps_the_node_running_and_is_retried(
    nursery, autojump_clock, caplog
):
    """Regression: the exception of ``snapshot()`` escaped the node's task
    and stopped the node. Now the snapshot is skipped, logged once at ERROR,
    counted, and retried ``snapshot_every_records`` records later."""
    network = MemoryNetwork()
    machine = UnsnapshottableLedger()
    runtime = QuorumRuntime(
        QuorumConfig(node_id=1, voters=(1,)),
        machine,
        storage=MemoryStorage(),
        transport=network.transport(1),
        rng=random.Random(1),
        snapshot_every_records=2,
    )
    await nursery.start(runtime.run)
    with trio.fail_after(30):
        while not runtime.node.leader_has_committed_own_epoch:
            await trio.sleep(0.01)
    with caplog.at_level(logging.DEBUG, logger="pykraft.quorum"):
        for amount in range(1, 7):
            await runtime.propose_with_answers([str(amount).encode()])
    assert machine.total == 21  # the node kept applying
    failures = runtime.host.snapshot_failures
    assert failures >= 2  # retried, not given up
    assert runtime.metrics.value("pykraft_quorum_snapshot_failures_total") == failures
    failing = [record for record in caplog.records if "failed to snapshot" in record.getMessage()]
    assert [record.levelno for record in failing] == [logging.ERROR] + [logging.DEBUG] * (failures - 1)
    assert runtime.node.log.start_offset == 0  # nothing compacted behind a snapshot that was not taken
    machine.fixed = True
    with caplog.at_level(logging.INFO, logger="pykraft.quorum"):
        for amount in range(3):
            await runtime.propose_with_answers([b"1"])
    assert runtime.host.snapshot_failures == failures
    assert any("snapshots again" in record.getMessage() for record in caplog.records)


def test_records_that_are_not_calls_of_the_class_are_ignored():
    machine = ReplicatedStateMachine(Counter())
    entries = [
        Entry(offset=0, epoch=1, kind=RecordKind.DATA, data=b"\xc1"),  # not msgpack
        Entry(offset=1, epoch=1, kind=RecordKind.DATA, data=msgpack.packb(["nope", [], {}])),
        Entry(offset=2, epoch=1, kind=RecordKind.DATA, data=msgpack.packb(["value", [], {}])),  # a query is not a command
        Entry(offset=3, epoch=1, kind=RecordKind.DATA, data=encode_call("add", [2], {})),
    ]
    answers = machine.apply(entries)
    assert list(answers) == [3]
    assert machine.target.total == 2


class CallCountingLedger(Ledger):
    """A ``Ledger`` that records the size of every apply call."""

    def __init__(self) -> None:
        super().__init__()
        self.call_sizes: list[int] = []

    def apply(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        self.call_sizes.append(len(entries))
        return super().apply(entries)


class TotalLedger(CallCountingLedger):
    """Declares that apply never raises: the host may hand it whole runs."""

    apply_never_raises = True


@pytest.mark.parametrize(("machine_class", "batched"), [(CallCountingLedger, False), (TotalLedger, True)])
async def test_only_a_machine_that_never_raises_gets_a_committed_run_in_one_call(
    nursery, autojump_clock, machine_class, batched
):
    leader, runtimes, machines = await start_cluster(nursery, machine_class)
    last, answers = await leader.propose_with_answers([b"1", b"2", b"3", b"4"])
    assert answers == [b"1", b"3", b"6", b"10"]
    await wait_applied_everywhere(runtimes, last + 1)
    for machine in machines.values():
        assert machine.total == 10
        assert (max(machine.call_sizes) >= 4) is batched  # one call for the batch, or one per record
        assert sum(machine.call_sizes) == 4
