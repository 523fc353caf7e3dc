"""Client requests: the embedding API used remotely (propose, read,
describe the quorum). Clients have no node id: a response is matched to its
request by the envelope's correlation id.

Every class validates itself on construction and raises ``ValueError``
naming the bad field; sequences given as lists are stored as tuples.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._messages import ErrorCode
from .._node import ReplicaDescription
from .._voters import ENDPOINT_CHARS_MAX, ENDPOINTS_MAX, check_directory_id, check_endpoint
from ._checks import (
    ERROR_MESSAGE_CHARS_MAX,
    check_bool,
    check_bytes,
    check_epoch,
    check_error_code,
    check_int64,
    check_node_id,
    check_optional_int64,
    check_optional_node_id,
    check_str,
)

READ_MODES = ("linearizable", "leader-local")

# Bytes fields are bounded by the frame size in practice; this bound only
# keeps a value constructed in-process from claiming the impossible.
_BYTES_MAX = 2**32
_BYTES_ONLY = {bytes}
_BYTES_OR_NONE = {bytes, type(None)}


def _as_tuple(instance: object, name: str) -> tuple:
    value = getattr(instance, name)
    if type(value) is list:
        value = tuple(value)
        object.__setattr__(instance, name, value)
    if type(value) is not tuple:
        raise ValueError(f"{name} must be a list or tuple, got {type(value).__name__}")
    return value


#: The versions of the client requests that a node may answer NOT_LEADER
#: (Propose, Read, Application, AddVoter, RemoveVoter, UpgradeVoters) and of
#: their answers: 1, and 2, whose answers also name the leader's epoch and
#: where it listens (KIP-853 NodeEndpoints), so that a client that was
#: given one node's address reaches the leader. A response is sent in the
#: version of its request.
LEADER_HINT_VERSIONS = (1, 2)


def _check_leader_hint_version(instance: object) -> None:
    version = getattr(instance, "version")
    if type(version) is not int or version not in LEADER_HINT_VERSIONS:
        raise ValueError(f"version must be one of {list(LEADER_HINT_VERSIONS)}, got {version!r:.40}")


def _check_leader_fields(instance: object) -> None:
    """The version and the version-2 fields of an answer that may say
    NOT_LEADER: ``leader_epoch`` (the epoch the hinted leader leads, if
    known) and ``leader_endpoint`` ("HOST:PORT" where it listens, if
    known; validated: it is a peer's word)."""
    _check_leader_hint_version(instance)
    check_optional_int64(getattr(instance, "leader_epoch"), "leader_epoch")
    endpoint = getattr(instance, "leader_endpoint")
    if endpoint is not None:
        check_endpoint(endpoint, "leader_endpoint")


def _set_error(instance: object) -> ErrorCode:
    code = check_error_code(getattr(instance, "error"))
    object.__setattr__(instance, "error", code)
    return code


@dataclass(frozen=True, slots=True, kw_only=True)
class ProposeRequest:
    """Append ``records`` (at least one) as data records. Leader only."""

    records: tuple[bytes, ...]
    version: int = 2

    def __post_init__(self) -> None:
        _check_leader_hint_version(self)
        records = _as_tuple(self, "records")
        if not records:
            raise ValueError("records must hold at least one record")
        # Every record bytes of at most _BYTES_MAX, checked in C over the
        # batch; the loop below only finds and names the first that is not.
        if set(map(type, records)) != _BYTES_ONLY or max(map(len, records)) > _BYTES_MAX:
            for index, record in enumerate(records):
                check_bytes(record, f"records[{index}]", _BYTES_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProposeResponse:
    """Sent once every proposed record is committed (``error`` NONE, and
    ``offset`` is the first record's offset), or on failure (``error`` set;
    ``leader_hint`` names the leader when known)."""

    error: ErrorCode = ErrorCode.NONE
    offset: int | None = None
    leader_hint: int | None = None
    # What the state machine answered for each record, in order (None where
    # it answers nothing): a compare-and-set's outcome, say.
    results: tuple[bytes | None, ...] = ()
    leader_epoch: int | None = None
    leader_endpoint: str | None = None
    version: int = 2

    def __post_init__(self) -> None:
        error = _set_error(self)
        _check_leader_fields(self)
        check_optional_int64(self.offset, "offset")
        check_optional_node_id(self.leader_hint, "leader_hint")
        if error is ErrorCode.NONE and self.offset is None:
            raise ValueError("a successful ProposeResponse must give the offset")
        results = _as_tuple(self, "results")
        # Most state machines answer nothing (None) or bytes: checked in C
        # over the batch; the loop below only names the first bad result.
        kinds = set(map(type, results))
        if not kinds <= _BYTES_OR_NONE or (bytes in kinds and max(len(r) for r in results if r is not None) > _BYTES_MAX):
            for index, result in enumerate(results):
                if result is not None:
                    check_bytes(result, f"results[{index}]", _BYTES_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadRequest:
    """Read the state machine. ``mode`` is "linearizable" (ReadIndex through
    the leader) or "leader-local" (the leader's applied state, bounded by
    check quorum). ``query`` is handed to the state machine as is (which key,
    say); empty when the state machine needs none."""

    mode: str = "linearizable"
    query: bytes = b""
    version: int = 2

    def __post_init__(self) -> None:
        _check_leader_hint_version(self)
        if type(self.mode) is not str or self.mode not in READ_MODES:
            raise ValueError(f"mode must be one of {READ_MODES}, got {self.mode!r:.40}")
        check_bytes(self.query, "query", _BYTES_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadResponse:
    """The state machine's answer ``value`` (None: no value), read at
    ``offset`` (the state machine had applied every record below it)."""

    error: ErrorCode = ErrorCode.NONE
    offset: int | None = None
    leader_hint: int | None = None
    value: bytes | None = None
    leader_epoch: int | None = None
    leader_endpoint: str | None = None
    version: int = 2

    def __post_init__(self) -> None:
        error = _set_error(self)
        _check_leader_fields(self)
        check_optional_int64(self.offset, "offset")
        check_optional_node_id(self.leader_hint, "leader_hint")
        if self.value is not None:
            check_bytes(self.value, "value", _BYTES_MAX)
        if error is ErrorCode.NONE and self.offset is None:
            raise ValueError("a successful ReadResponse must give the offset")


#: The DescribeQuorumResponse versions: 1 (six fields), 2 (adds
#: ``disk_failure`` and ``repairing``), 3 (each replica's directory id,
#: KIP-853, and the voters a leader knows to be repairing). A response is
#: sent in the version of its request (Kafka's rule), so an old client keeps
#: getting the version it asked for.
DESCRIBE_QUORUM_VERSIONS = (1, 2, 3)

#: The AddVoterRequest versions (``LEADER_HINT_VERSIONS``): 1 (node id,
#: directory id, endpoints), 2 (adds ``auto_join``, issue 17; its answer,
#: as every version-2 answer that may say NOT_LEADER, names where the
#: leader listens). Only a version-2 request marked ``auto_join`` is ever
#: answered VOTER_REMOVED, a code no older client can be sent.

#: The longest errno name a DescribeQuorumResponse carries ("ENOSPC", "EIO").
DISK_FAILURE_CHARS_MAX = 32


def _check_describe_version(value: object, name: str) -> None:
    if type(value) is not int or value not in DESCRIBE_QUORUM_VERSIONS:
        raise ValueError(f"{name} must be one of {list(DESCRIBE_QUORUM_VERSIONS)}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumRequest:
    """KIP-595 DescribeQuorum: any node answers from its own view.
    ``version``: the request's (and so its answer's) wire version; 2 asks
    for the storage conditions too, 3 also for each replica's directory id
    and the voters a leader knows to be repairing. Raises ``ValueError``
    for another version."""

    version: int = 3

    def __post_init__(self) -> None:
        _check_describe_version(self.version, "version")


def _check_replicas(instance: object, name: str) -> None:
    replicas = _as_tuple(instance, name)
    for index, replica in enumerate(replicas):
        if type(replica) is not ReplicaDescription:
            raise ValueError(f"{name}[{index}] must be a ReplicaDescription, got {type(replica).__name__}")
        check_node_id(replica.node_id, f"{name}[{index}].node_id")
        check_optional_int64(replica.log_end_offset, f"{name}[{index}].log_end_offset")
        check_optional_int64(replica.last_fetch_ms, f"{name}[{index}].last_fetch_ms")
        check_directory_id(replica.directory_id, f"{name}[{index}].directory_id")


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumResponse:
    """What the answering node knows of the quorum. For each replica:
    its id, its log end offset and when it last fetched (in ms of the
    answering node's logical clock), each None when unknown (only a leader
    knows other replicas' progress)."""

    error: ErrorCode = ErrorCode.NONE
    leader_id: int | None = None
    epoch: int = 0
    high_watermark: int = 0
    voters: tuple[ReplicaDescription, ...] = ()
    observers: tuple[ReplicaDescription, ...] = ()
    # Version 2 (issue 14): the answering node and its own storage conditions.
    # ``disk_failure``: the errno name of its failing disk writes ("ENOSPC"),
    # None when they succeed; ``repairing``: it repairs a damaged log (it
    # neither votes nor stands). A version-1 answer carries neither (its
    # encoder leaves them out; decoded, ``repairing`` is None: not known).
    # ``node_id``: the answering node (None in version 1).
    # Version 3 (KIP-853): each replica's ``directory_id`` (the voter set's
    # for a voter, the one its last Fetch carried for an observer); before
    # version 3 every replica's is None.
    node_id: int | None = None
    disk_failure: str | None = None
    repairing: bool | None = False
    # Version 3 also (issue 14): the voters a leader knows to be repairing a
    # damaged log (their latest Fetch said so; empty from any other node).
    # An answer of version 1 or 2 carries none (decoded: None, not known).
    repairing_voters: tuple[int, ...] | None = ()
    version: int = 3

    def __post_init__(self) -> None:
        _set_error(self)
        check_optional_node_id(self.leader_id, "leader_id")
        check_epoch(self.epoch, "epoch")
        check_int64(self.high_watermark, "high_watermark")
        _check_replicas(self, "voters")
        _check_replicas(self, "observers")
        _check_describe_version(self.version, "version")
        check_optional_node_id(self.node_id, "node_id")
        if self.disk_failure is not None:
            check_str(self.disk_failure, "disk_failure", DISK_FAILURE_CHARS_MAX, allow_empty=False)
        if self.repairing is not None or self.version != 1:
            check_bool(self.repairing, "repairing")
        if self.repairing_voters is not None or self.version >= 3:
            voters = _as_tuple(self, "repairing_voters")
            for index, node_id in enumerate(voters):
                check_node_id(node_id, f"repairing_voters[{index}]")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplicationRequest:
    """A request for the application on the leader (the controller): its
    own encoding inside ``payload`` (registration uses msgpack
    ``[name, [fields]]``). The quorum carries it without looking inside."""

    payload: bytes
    version: int = 2

    def __post_init__(self) -> None:
        _check_leader_hint_version(self)
        check_bytes(self.payload, "payload", _BYTES_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplicationResponse:
    """The application's answer (``payload``), or a quorum-level error
    (NOT_LEADER with a leader hint) when no active application took it."""

    error: ErrorCode = ErrorCode.NONE
    leader_hint: int | None = None
    payload: bytes = b""
    leader_epoch: int | None = None
    leader_endpoint: str | None = None
    version: int = 2

    def __post_init__(self) -> None:
        _set_error(self)
        _check_leader_fields(self)
        check_optional_node_id(self.leader_hint, "leader_hint")
        check_bytes(self.payload, "payload", _BYTES_MAX)


def _check_voter_key(node_id: object, directory_id: object) -> None:
    check_node_id(node_id, "node_id")
    check_directory_id(directory_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class AddVoterRequest:
    """KIP-853 AddRaftVoter, served by the leader: add the replica
    ``node_id`` whose data directory is ``directory_id`` (None: whichever
    directory fetches under that id now) and which listens on ``endpoints``
    ("host:port", at most ``ENDPOINTS_MAX``). The leader refuses a replica
    that is not caught up. Administration (the ``admin`` ACL operation).

    ``auto_join`` (version 2 only): the node asks to add itself (KIP-853
    auto-join); the leader refuses it with VOTER_REMOVED for a disk an
    operator removed (issue 17). Version 1 is an operator's request, and
    what a node older than version 2 sends. Raises ``ValueError`` naming
    the bad field."""

    node_id: int
    directory_id: str | None = None
    endpoints: tuple[str, ...] = ()
    auto_join: bool = False
    version: int = 2

    def __post_init__(self) -> None:
        _check_leader_hint_version(self)
        _check_voter_key(self.node_id, self.directory_id)
        check_bool(self.auto_join, "auto_join")
        if self.auto_join and self.version < 2:
            raise ValueError("auto_join needs version 2")
        endpoints = _as_tuple(self, "endpoints")
        if len(endpoints) > ENDPOINTS_MAX:
            raise ValueError(f"endpoints must hold at most {ENDPOINTS_MAX}, got {len(endpoints)}")
        for index, endpoint in enumerate(endpoints):
            check_str(endpoint, f"endpoints[{index}]", ENDPOINT_CHARS_MAX, allow_empty=False)
            if not endpoint.isprintable() or ":" not in endpoint:
                raise ValueError(f"endpoints[{index}] must be a printable HOST:PORT, got {endpoint!r:.60}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveVoterRequest:
    """KIP-853 RemoveRaftVoter, served by the leader: remove voter
    ``node_id`` (only if its directory is ``directory_id``, when given: the
    disk being replaced). Administration. Raises ``ValueError`` naming the
    bad field."""

    node_id: int
    directory_id: str | None = None
    version: int = 2

    def __post_init__(self) -> None:
        _check_leader_hint_version(self)
        _check_voter_key(self.node_id, self.directory_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpgradeVotersRequest:
    """Upgrade a static voter set to a dynamic one (KIP-853's
    ``kraft.version`` 0 to 1), served by the leader: it writes the first
    VOTERS record, the static voters with the directory ids they fetch
    with. Idempotent. Administration. No fields (but the version)."""

    version: int = 2

    def __post_init__(self) -> None:
        _check_leader_hint_version(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class VoterChangeResponse:
    """The answer to an AddVoterRequest, a RemoveVoterRequest or an
    UpgradeVotersRequest: ``error`` NONE once the VOTERS record at
    ``offset`` is committed (``offset`` None: an upgrade found the voters
    dynamic already, and appended nothing); otherwise why not (NOT_LEADER
    with ``leader_hint``, VOTER_CHANGE_IN_PROGRESS, VOTER_NOT_CAUGHT_UP,
    DUPLICATE_VOTER, VOTER_NOT_FOUND, VOTERS_STATIC, INVALID_REQUEST) and
    ``message``, one sentence for the operator."""

    error: ErrorCode = ErrorCode.NONE
    leader_hint: int | None = None
    offset: int | None = None
    message: str = ""
    leader_epoch: int | None = None
    leader_endpoint: str | None = None
    version: int = 2

    def __post_init__(self) -> None:
        error = _set_error(self)
        _check_leader_fields(self)
        check_optional_node_id(self.leader_hint, "leader_hint")
        check_optional_int64(self.offset, "offset")
        check_str(self.message, "message", ERROR_MESSAGE_CHARS_MAX)


CLIENT_MESSAGE_TYPES: tuple[type, ...] = (
    ApplicationRequest,
    ApplicationResponse,
    ProposeRequest,
    ProposeResponse,
    ReadRequest,
    ReadResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    AddVoterRequest,
    RemoveVoterRequest,
    UpgradeVotersRequest,
    VoterChangeResponse,
)

