"""``quorum.apply_output``: the one persistence applier, shared by the
runtime's storage and the simulator's disk (the output contract's order)."""

from quorum import ElectionState, Entry, Output, RecordKind, SnapshotId, apply_output, apply_outputs
from quorum.storage import MemoryStorage
from jepsen_like.sim import SimDisk


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.appended: list[list[int]] = []

    def write_election_state(self, state: ElectionState) -> None:
        self.calls.append("election")

    def write_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self.calls.append("snapshot")

    def reset_to_snapshot(self, snapshot_id: SnapshotId) -> None:
        self.calls.append("reset")

    def truncate_to(self, end_offset: int) -> None:
        self.calls.append("truncate")

    def append(self, entries: list[Entry]) -> None:
        self.calls.append("append")
        self.appended.append([entry.offset for entry in entries])

    def delete_before(self, offset: int) -> None:
        self.calls.append("delete")


def data(offset: int, epoch: int) -> Entry:
    return Entry(offset, epoch, RecordKind.DATA, f"r{offset}".encode())


def test_the_work_is_done_in_the_contracts_order() -> None:
    recorder = Recorder()
    output = Output(
        election_state=ElectionState(epoch=3, voted_for=1, leader_id=1),
        snapshot=(SnapshotId(4, 2), b"state"),
        reset_log=True,
        truncate_to=4,
        append=[data(4, 3)],
        delete_before=4,
    )
    apply_output(output, recorder)
    assert recorder.calls == ["election", "snapshot", "reset", "truncate", "append", "delete"]


def test_nothing_to_do_calls_nothing() -> None:
    recorder = Recorder()
    apply_output(Output(), recorder)
    assert recorder.calls == []


def test_the_runtimes_storage_and_the_simulators_disk_end_alike() -> None:
    outputs = [
        Output(election_state=ElectionState(epoch=1, voted_for=1, leader_id=1), append=[data(o, 1) for o in range(6)]),
        Output(truncate_to=4, append=[data(4, 2), data(5, 2)]),
        Output(snapshot=(SnapshotId(5, 2), b"up to 5"), delete_before=3),
        Output(election_state=ElectionState(epoch=3, voted_for=None, leader_id=2), snapshot=(SnapshotId(9, 3), b"up to 9"), reset_log=True),
        Output(append=[data(9, 3)]),
    ]
    storage, disk = MemoryStorage(), SimDisk()
    for output in outputs:
        apply_output(output, storage)
        storage.flush()
        disk.apply(output)
    recovered = storage.load()
    assert recovered.election_state == disk.election_state
    assert disk.snapshot is not None
    assert (recovered.snapshot_id, recovered.snapshot_bytes) == (disk.snapshot.snapshot_id, disk.snapshot.data)
    assert recovered.entries == disk.log.slice(disk.log.start_offset)


def test_consecutive_appends_of_a_group_commit_go_in_one_call() -> None:
    """The leader's persister writes a group commit with ``apply_outputs``:
    pipelined proposals (one output each) cost one log write, not one each;
    any other work keeps its place between the appends."""
    recorder = Recorder()
    apply_outputs(
        [
            Output(append=[data(0, 1)]),
            Output(append=[data(1, 1), data(2, 1)]),
            Output(append=[data(3, 1)], delete_before=1),
            Output(append=[data(4, 1)]),
            Output(),
            Output(append=[data(5, 1)]),
            Output(truncate_to=5, append=[data(5, 2)]),
        ],
        recorder,
    )
    assert recorder.calls == ["append", "append", "delete", "append", "truncate", "append"]
    assert recorder.appended == [[0, 1, 2], [3], [4, 5], [5]]


def test_one_call_per_group_commit_leaves_the_same_log_as_one_per_output() -> None:
    outputs = [
        Output(election_state=ElectionState(epoch=1, voted_for=1, leader_id=1), append=[data(0, 1)]),
        *(Output(append=[data(o, 1)]) for o in range(1, 5)),
        Output(truncate_to=3, append=[data(3, 2)]),
        *(Output(append=[data(o, 2)]) for o in range(4, 7)),
    ]
    one_by_one, grouped = MemoryStorage(), MemoryStorage()
    for output in outputs:
        apply_output(output, one_by_one)
    apply_outputs(outputs, grouped)
    one_by_one.flush()
    grouped.flush()
    expected = [*(data(o, 1) for o in range(3)), *(data(o, 2) for o in range(3, 7))]
    assert grouped.load().entries == one_by_one.load().entries == expected
    assert grouped.load().election_state == one_by_one.load().election_state
