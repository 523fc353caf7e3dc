"""quorum: a KIP-595 style Raft log, sans-IO at its core.

The public names are re-exported here once; the modules behind them are
private (``_node``, ``_messages``, ...).
"""

from ._config import QuorumConfig
from ._host import (
    ApplyFailedError,
    CommitTimer,
    LeaderApplication,
    Proposal,
    ProposalLostError,
    ProposalOutcomeUnknownError,
    ReadNotConfirmedError,
    ReplicaHost,
    ReplicaPort,
    StateMachine,
)
from ._log import MemoryLog
from ._messages import (
    MESSAGE_TYPES,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
    describe_message,
    message_type_name,
)
from ._node import (
    CoreHooks,
    NotLeaderError,
    QuorumDescription,
    QuorumError,
    QuorumInvariantError,
    QuorumNode,
    ReconfigurationError,
    RepairState,
    ReplicaDescription,
    Snapshot,
)
from ._output import Output, ReadFailed, ReadReady, Role, RoleChange
from ._persist import DurableTarget, apply_output
from ._quorum_math import majorities_overlap
from ._state_machine import KeyValueStateMachine
from ._types import ElectionState, Entry, Epoch, NodeId, Offset, OffsetAndEpoch, RecordKind, SnapshotId
from ._voters import Voter, VoterSet

__all__ = [
    "MESSAGE_TYPES",
    "ApplyFailedError",
    "BeginQuorumEpochRequest",
    "BeginQuorumEpochResponse",
    "CommitTimer",
    "CoreHooks",
    "DurableTarget",
    "ElectionState",
    "EndQuorumEpochRequest",
    "EndQuorumEpochResponse",
    "Entry",
    "Epoch",
    "ErrorCode",
    "FetchRequest",
    "FetchResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "KeyValueStateMachine",
    "LeaderApplication",
    "MemoryLog",
    "Message",
    "NodeId",
    "NotLeaderError",
    "Offset",
    "OffsetAndEpoch",
    "Output",
    "Proposal",
    "ProposalLostError",
    "ProposalOutcomeUnknownError",
    "QuorumConfig",
    "QuorumDescription",
    "QuorumError",
    "QuorumInvariantError",
    "QuorumNode",
    "ReconfigurationError",
    "RepairState",
    "ReadFailed",
    "ReadNotConfirmedError",
    "ReadReady",
    "RecordKind",
    "ReplicaDescription",
    "ReplicaHost",
    "ReplicaPort",
    "Role",
    "RoleChange",
    "Snapshot",
    "SnapshotId",
    "StateMachine",
    "VoteRequest",
    "VoteResponse",
    "Voter",
    "VoterSet",
    "apply_output",
    "describe_message",
    "majorities_overlap",
    "message_type_name",
]
