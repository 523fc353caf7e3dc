"""Durable storage of a quorum node: the segmented log, the election state
file and snapshots, plus an in-memory twin for the simulator.

The runtime talks to ``FileStorage`` (or the simulator to
``MemoryStorage``); both expose the same methods. See ``docs/storage.md``
for the on-disk formats, recovery rules and fsync policy.
"""

from ._check import (
    EXIT_DAMAGED,
    EXIT_IN_USE,
    EXIT_NOT_A_DATA_DIR,
    EXIT_SOUND,
    EXIT_TORN_TAIL,
    StorageCheck,
    check_storage,
    check_storage_report,
)
from ._dump import dump_log, dump_log_command, format_item, main
from ._election import ELECTION_STATE_FILE_NAME, ELECTION_WITNESS_FILE_NAME, ElectionStateFile
from ._errors import (
    CorruptElectionStateError,
    CorruptLogMetadataError,
    CorruptRecordError,
    CorruptSnapshotError,
    DamagedLogError,
    LogFailedError,
    MissingElectionStateError,
    RolledBackElectionStateError,
    SnapshotNotFoundError,
    SoleVoterDamagedError,
    StorageError,
    StorageOwnershipError,
)
from ._memory import MemoryElectionState, MemoryLogStore, MemorySnapshotStore, MemorySnapshotWriter
from ._segments import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_SEGMENT_BYTES_MAX,
    LogVerdict,
    SegmentedLog,
    SegmentInfo,
)
from ._files import atomic_write_json
from ._snapshots import SnapshotStore, SnapshotWriter
from ._storage import (
    DataDirIdentity,
    FileStorage,
    MemoryStorage,
    RecoveredState,
    RetentionPolicy,
    format_data_dir,
    holds_log,
    new_directory_id,
    read_data_dir_identity,
)

__all__ = [
    "DataDirIdentity",
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "DEFAULT_SEGMENT_BYTES_MAX",
    "ELECTION_STATE_FILE_NAME",
    "ELECTION_WITNESS_FILE_NAME",
    "EXIT_DAMAGED",
    "EXIT_IN_USE",
    "EXIT_NOT_A_DATA_DIR",
    "EXIT_SOUND",
    "EXIT_TORN_TAIL",
    "CorruptElectionStateError",
    "CorruptLogMetadataError",
    "CorruptRecordError",
    "CorruptSnapshotError",
    "DamagedLogError",
    "ElectionStateFile",
    "FileStorage",
    "LogFailedError",
    "LogVerdict",
    "MemoryElectionState",
    "MemoryLogStore",
    "MemorySnapshotStore",
    "MemorySnapshotWriter",
    "MissingElectionStateError",
    "MemoryStorage",
    "RecoveredState",
    "RolledBackElectionStateError",
    "RetentionPolicy",
    "SegmentInfo",
    "SegmentedLog",
    "SnapshotNotFoundError",
    "SnapshotStore",
    "SnapshotWriter",
    "SoleVoterDamagedError",
    "StorageCheck",
    "StorageError",
    "StorageOwnershipError",
    "atomic_write_json",
    "check_storage",
    "check_storage_report",
    "dump_log",
    "format_data_dir",
    "holds_log",
    "dump_log_command",
    "format_item",
    "main",
    "new_directory_id",
    "read_data_dir_identity",
]
