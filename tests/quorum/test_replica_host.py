"""``quorum.ReplicaHost`` on its own: one voter, a port that makes every
output durable at once. The runtime and the simulator drive this same
object; these tests pin what it promises them."""

import logging
import random
from collections import deque
from typing import Any

import msgpack

from quorum import (
    Entry,
    KeyValueStateMachine,
    NotLeaderError,
    Output,
    Proposal,
    QuorumConfig,
    RecordKind,
    ReplicaHost,
    Role,
    VoteRequest,
)
from quorum._types import EPOCH_MAX


class InstantDisk:
    """A ``ReplicaPort`` that persists each output as soon as the host's
    input is over (never re-entering the host from inside it)."""

    def __init__(self) -> None:
        self.queue: deque[Output] = deque()
        self.roles: list[Role] = []
        self.snapshots: list[tuple[int, bool]] = []

    def role_changed(self, event: Any) -> None:
        self.roles.append(event.role)

    def committed(self, entries: Any) -> None:
        pass

    def output_ready(self, output: Output) -> None:
        self.queue.append(output)

    def snapshot_changed(self, snapshot_id: Any, installed: bool) -> None:
        self.snapshots.append((snapshot_id.end_offset, installed))

    def settle(self, host: ReplicaHost) -> None:
        while self.queue:
            output = self.queue.popleft()
            if output.has_persistence:
                host.persisted(output.persist_seq)


class Counter:
    """A leader application that proposes one batch per activation and
    counts what it saw."""

    def __init__(self) -> None:
        self.activations: list[int] = []
        self.committed_at: list[int] = []
        self.queued: list[Proposal] = []
        self.catch_ups = 0

    def activate(self, now_ms: int, next_write_offset: int) -> None:
        self.activations.append(next_write_offset)
        self.queued.append(Proposal([KeyValueStateMachine.encode_put(b"app", b"on")], self.committed_at.append))

    def deactivate(self) -> None:
        pass

    def on_fetch(self, replica_id: int, extension: Any, fetch_offset: int, now_ms: int) -> Any:
        return None

    def tick(self, now_ms: int) -> None:
        pass

    def catch_up(self) -> None:
        self.catch_ups += 1

    def note_log_end(self, end_offset: int) -> None:
        pass

    def take_proposals(self) -> list[Proposal]:
        proposals, self.queued = self.queued, []
        return proposals

    def handle_request(self, request: Any, now_ms: int) -> Any:
        raise AssertionError("not used")


def new_host(**options: Any) -> tuple[ReplicaHost, InstantDisk, KeyValueStateMachine]:
    disk, machine = InstantDisk(), KeyValueStateMachine()
    host = ReplicaHost(QuorumConfig(node_id=1, voters=(1,)), machine, disk, rng=random.Random(7), fetch_session=0, **options)
    host.start()
    disk.settle(host)
    return host, disk, machine


def elect(host: ReplicaHost, disk: InstantDisk) -> None:
    for _ in range(1000):
        if host.core.leader_has_committed_own_epoch:
            return
        host.tick()
        disk.settle(host)
    raise AssertionError("a single voter did not elect itself")


def test_a_proposal_is_answered_once_committed_with_the_machines_answers() -> None:
    host, disk, _machine = new_host()
    results: list[Any] = []
    host.propose([KeyValueStateMachine.encode_put(b"k", b"v")], lambda result, error: results.append((result, error)))
    assert isinstance(results[0][1], NotLeaderError)  # refused at once: not the leader yet
    elect(host, disk)
    cas = KeyValueStateMachine.encode_cas(b"k", None, b"w")
    host.propose([cas], lambda result, error: results.append((result, error)))
    assert len(results) == 1  # not committed before it is durable
    disk.settle(host)
    (last, answers), error = results[1]
    assert error is None and last == host.applied_offset - 1
    assert answers == [KeyValueStateMachine.CAS_APPLIED]


def test_proposals_given_together_share_one_append_and_are_each_answered_as_their_own() -> None:
    """propose_many: a client's pipelined requests, appended in one go (one
    output), each still answered with its own last offset and its own
    records' answers; refused together, each told, when not leading."""
    host, disk, _machine = new_host()
    refused: list[Any] = []
    host.propose_many([([b"x"], lambda result, error: refused.append(error))] * 2)
    assert [type(error) for error in refused] == [NotLeaderError, NotLeaderError]
    elect(host, disk)
    outputs: list[Output] = []
    handle = host._handle

    def note(output: Output) -> None:
        outputs.append(output)
        handle(output)

    host._handle = note  # type: ignore[method-assign]
    put = KeyValueStateMachine.encode_put(b"k", b"v")
    cas_applied = KeyValueStateMachine.encode_cas(b"k", b"v", b"w")
    cas_refused = KeyValueStateMachine.encode_cas(b"k", b"v", b"z")
    results: dict[str, Any] = {}
    first = host.core.log.end_offset
    host.propose_many([
        ([put], lambda result, error: results.setdefault("put", (result, error))),
        ([cas_applied, b"not a command"], lambda result, error: results.setdefault("two", (result, error))),
        ([cas_refused], lambda result, error: results.setdefault("refused", (result, error))),
    ])  # fmt: skip
    assert [len(output.append) for output in outputs] == [4]  # one append of the three
    assert results == {}  # not before it is durable
    disk.settle(host)
    assert results == {
        "put": ((first, [None]), None),
        "two": ((first + 2, [KeyValueStateMachine.CAS_APPLIED, None]), None),
        "refused": ((first + 3, [KeyValueStateMachine.CAS_REFUSED]), None),
    }


def test_a_read_is_answered_at_an_offset_the_machine_has_applied() -> None:
    host, disk, _machine = new_host()
    elect(host, disk)
    reads: list[Any] = []
    host.read(lambda offset, error: reads.append((offset, error, host.applied_offset)))
    disk.settle(host)
    offset, error, applied = reads[0]
    assert error is None and applied >= offset


def test_the_application_starts_after_a_record_of_its_epoch_is_applied_and_its_batch_commits() -> None:
    application = Counter()
    host, disk, _machine = new_host(application=application)
    elect(host, disk)
    disk.settle(host)
    assert application.activations and host.application_active
    assert host.applied_offset > host.core.epoch_start_offset
    assert len(application.committed_at) == 1 and application.committed_at[0] < host.applied_offset


def test_the_application_catches_up_once_after_an_input_that_proposed_its_batches() -> None:
    application = Counter()
    host, disk, _machine = new_host(application=application)
    host.application_catch_up()
    assert application.catch_ups == 0  # nothing proposed yet
    while not host.application_proposed:
        host.tick()
        disk.settle(host)
    assert application.catch_ups == 0  # the world calls it, once the batch's messages left
    host.application_catch_up()
    host.application_catch_up()
    assert application.catch_ups == 1 and not host.application_proposed


def test_a_snapshot_is_taken_every_n_records_applied() -> None:
    host, disk, _machine = new_host(snapshot_every_records=5)
    elect(host, disk)
    for value in range(12):
        host.propose([KeyValueStateMachine.encode_put(b"k", bytes([value]))], lambda result, error: None)
        disk.settle(host)
    taken = [end for end, installed in disk.snapshots if not installed]
    assert taken and all(later - earlier >= 5 for earlier, later in zip([0] + taken, taken))
    assert host.core.snapshot is not None and host.core.snapshot.snapshot_id.end_offset == taken[-1]


def test_abandon_tells_every_waiting_proposer_in_offset_order_that_its_outcome_is_unknown() -> None:
    host, disk, _machine = new_host()
    elect(host, disk)
    told: list[str] = []
    for key in (b"b", b"a"):
        host.propose([KeyValueStateMachine.encode_put(key, b"v")], lambda result, error, key=key: told.append(f"{key.decode()} {type(error).__name__}"))
    host.abandon()  # never made durable: the process went away
    assert told == ["b ProposalOutcomeUnknownError", "a ProposalOutcomeUnknownError"]
    disk.settle(host)
    assert len(told) == 2  # told once


def test_recovery_starts_the_log_at_the_snapshot_and_restores_the_machine_from_it() -> None:
    from quorum import Entry, RecordKind, Snapshot, SnapshotId

    source = KeyValueStateMachine()
    source.apply([Entry(offset, 1, RecordKind.DATA, KeyValueStateMachine.encode_put(b"k", bytes([offset]))) for offset in range(10)])
    entries = [Entry(offset, 1, RecordKind.DATA, KeyValueStateMachine.encode_put(b"k", bytes([offset]))) for offset in range(6, 14)]
    machine = KeyValueStateMachine()
    host = ReplicaHost(
        QuorumConfig(node_id=1, voters=(1,)),
        machine,
        InstantDisk(),
        rng=random.Random(7),
        fetch_session=0,
        snapshot=Snapshot(SnapshotId(10, 1), source.snapshot()),
        entries=entries,
    )
    # Records 6..9 are still on disk behind the snapshot: not loaded, as the
    # epoch before them is not known.
    assert (host.core.log.start_offset, host.core.log.end_offset) == (10, 14)
    assert host.applied_offset == 10 and machine.snapshot() == source.snapshot()


def test_messages_the_core_drops_are_logged_once_per_interval_with_a_count(caplog) -> None:
    """A hostile peer's out-of-range messages reach the log as one line per
    interval of logical time, not one per message."""
    host, disk, _machine = new_host()
    elect(host, disk)
    forged = VoteRequest(src=9, dst=1, epoch=EPOCH_MAX + 1, last_epoch=0, end_offset=0, pre_vote=False)
    with caplog.at_level(logging.WARNING, logger="pykraft.quorum"):
        for _ in range(50):
            host.step(forged)
        for _ in range(1_001):  # past the 10 s interval, at 10 ms a tick
            host.tick()
            disk.settle(host)
        host.step(forged)
    lines = [record.getMessage() for record in caplog.records if "dropped" in record.getMessage()]
    assert len(lines) == 2, lines
    assert "49 more since the last such line" in lines[1]
    assert host.core.counters["messages_out_of_range"] == 51
    assert host.core.role is Role.LEADER


class RecordingMachine(KeyValueStateMachine):
    """Records how many entries each ``apply`` call got."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def apply(self, entries: Any) -> dict[int, bytes]:
        self.calls.append(len(entries))
        return super().apply(entries)


class RecordingPerRecordMachine(RecordingMachine):
    apply_never_raises = False


def apply_one_batch(machine: RecordingMachine) -> list[Any]:
    disk = InstantDisk()
    host = ReplicaHost(QuorumConfig(node_id=1, voters=(1,)), machine, disk, rng=random.Random(7), fetch_session=0)
    host.start()
    disk.settle(host)
    elect(host, disk)
    machine.calls.clear()
    results: list[Any] = []
    records = [KeyValueStateMachine.encode_cas(b"k", None, b"a"), KeyValueStateMachine.encode_cas(b"k", None, b"b"), b"\xc1"]
    host.propose(records, lambda result, error: results.append((result, error)))
    disk.settle(host)
    return results


def test_a_machine_whose_apply_never_raises_gets_whole_batches_with_the_same_answers() -> None:
    batched, per_record = RecordingMachine(), RecordingPerRecordMachine()
    assert apply_one_batch(batched) == apply_one_batch(per_record)
    assert batched.calls == [3]  # the three records in one call
    assert per_record.calls == [1, 1, 1]
    assert batched.values == per_record.values


def damaged_copies(samples: list[bytes], rng: random.Random, *, edits_max: int, count: int = 3000) -> list[bytes]:
    """``count`` records, each a sample with up to ``edits_max`` bytes
    changed or inserted at random: commands, near-commands and noise."""
    records = []
    for _ in range(count):
        data = bytearray(rng.choice(samples))
        for _ in range(rng.randrange(edits_max + 1)):
            if data and rng.random() < 0.7:
                data[rng.randrange(len(data))] = rng.randrange(256)
            else:
                data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
        records.append(bytes(data))
    return records


def test_the_key_value_machine_never_raises_and_batches_change_nothing() -> None:
    """What lets it take whole batches: any bytes are a record (or ignored),
    and one call per record gives the same state and answers as one call."""
    samples = [KeyValueStateMachine.encode_put(b"k", b"v"), KeyValueStateMachine.encode_cas(b"k", b"v", b"w"), b""]
    records = damaged_copies(samples, random.Random(18), edits_max=3)
    records += [b"\xc1", b"\x81\x90\x01", b"\x81\x91\x01\x01", b"\xd9\x01\xff", b"\xc7\x01\xff\x00"]
    entries = [Entry(offset=offset, epoch=1, kind=RecordKind.DATA, data=data) for offset, data in enumerate(records)]
    batched, one_by_one = KeyValueStateMachine(), KeyValueStateMachine()
    answers = batched.apply(entries)
    single: dict[int, bytes] = {}
    for entry in entries:
        single.update(one_by_one.apply([entry]))
    assert answers == single and batched.values == one_by_one.values
    assert answers  # some records were real compare-and-sets


def _apply_by_unpacking_everything(values: dict, entries: list[Entry]) -> dict[int, bytes]:
    """The key-value machine's rules with no shortcut: every record is
    unpacked, and what is not a command is skipped."""
    answers: dict[int, bytes] = {}
    for entry in entries:
        try:
            command = msgpack.unpackb(entry.data, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException):
            continue
        if not isinstance(command, list):
            continue
        if len(command) == 2 and isinstance(command[0], bytes) and isinstance(command[1], (bytes, type(None))):
            if command[1] is None:
                values.pop(command[0], None)
            else:
                values[command[0]] = (command[1], entry.offset)
        elif len(command) == 4 and command[0] == "cas" and isinstance(command[1], bytes) and isinstance(command[3], bytes):
            applied = values.get(command[1], (None, -1))[0] == command[2]
            if applied:
                values[command[1]] = (command[3], entry.offset)
            answers[entry.offset] = KeyValueStateMachine.CAS_APPLIED if applied else KeyValueStateMachine.CAS_REFUSED
    return answers


def test_records_known_from_their_first_byte_not_to_be_commands_change_nothing():
    """apply skips a record whose first byte starts no msgpack array without
    unpacking it: the same state and answers as unpacking every record,
    commands written with the long array headers (array 16 and 32)
    included."""
    samples = [KeyValueStateMachine.encode_put(b"k", b"v"), KeyValueStateMachine.encode_cas(b"k", b"v", b"w"),
               KeyValueStateMachine.encode_put(b"k", None), b"v-00000001-xxxx", b"\x01", b""]
    records = damaged_copies(samples, random.Random(21), edits_max=2)
    put_16 = b"\xdc\x00\x02\xc4\x01k\xc4\x01u"  # ["k", "u"] with an array 16 header
    cas_32 = b"\xdd\x00\x00\x00\x04\xa3cas\xc4\x01k\xc4\x01u\xc4\x01w"  # ["cas", "k", "u", "w"], array 32
    records += [put_16, cas_32, cas_32]
    entries = [Entry(offset=offset, epoch=1, kind=RecordKind.DATA, data=data) for offset, data in enumerate(records)]
    machine, expected_values = KeyValueStateMachine(), {}
    answers = machine.apply(entries)
    assert answers == _apply_by_unpacking_everything(expected_values, entries)
    assert machine.values == expected_values
    offset_of_cas_32 = len(records) - 2
    assert answers[offset_of_cas_32] == KeyValueStateMachine.CAS_APPLIED  # the long headers were read as commands
    assert answers[offset_of_cas_32 + 1] == KeyValueStateMachine.CAS_REFUSED


class VoterWatcher(Counter):
    """Answers every request at once with the voter set it was last told."""

    def __init__(self) -> None:
        super().__init__()
        self.voters: Any = None

    def note_voters(self, voters: Any) -> None:
        self.voters = voters

    def handle_request(self, request: Any, now_ms: int) -> Any:
        return _Answer(self.voters.ids if self.voters is not None else None)


class _Answer:
    """A reply that answers at once (``LeaderApplication.handle_request``)."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.on_committed = None
        self.on_read_confirmed = None


def test_the_application_is_told_the_voter_set_before_each_request() -> None:
    """What lets the controller refuse a broker a voter's id (KIP-631: one id
    space), the voters in force on this leader, registered or not."""
    application = VoterWatcher()
    host, disk, _machine = new_host(application=application)
    elect(host, disk)
    answers: list[Any] = []
    host.application_request(b"any", lambda answer, error, offsets: answers.append((answer, error)))
    assert answers == [((1,), None)]
