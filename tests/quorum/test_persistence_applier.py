"""``quorum.apply_output``: the one persistence applier, shared by the
runtime's storage and the simulator's disk (the output contract's order)."""

from quorum import ElectionState, Entry, Output, RecordKind, SnapshotId, apply_output
from quorum.storage import MemoryStorage
from jepsen_like.sim import SimDisk


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

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
