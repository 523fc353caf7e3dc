"""The embedding API: ``open_quorum_node``.

::

    config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 9091)}, data_dir="data/1")
    async with open_quorum_node(config, KeyValueStateMachine()) as node:
        await node.wait_for_leader()   # one election timeout, even alone
        offset = await node.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
        await node.read("linearizable")   # the state machine now reflects every acknowledged write

A single voter needs nothing else; three voters are three such programs (or
processes) with the same ``voters`` map.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import trio

from .._access import AccessControlList, Operation, Principal, PrincipalKind
from .._config import QuorumConfig, fetch_answer_bytes_max, setting_value_shown
from .._messages import ErrorCode
from .._errors import ReconfigurationError, leaf_exceptions
from .._host import QueryFailedError, check_state_machine
from .._node import NotLeaderError, QuorumDescription
from .._voters import PORT_MAX, Voter, endpoint_address
from ..storage import (
    CorruptSnapshotError,
    DamagedLogError,
    DataDirIdentity,
    FileStorage,
    MemoryStorage,
    RetentionPolicy,
    SoleVoterDamagedError,
    read_data_dir_identity,
)
from ..wire import (
    NODE_ID_MAX,
    NODE_LIMITS,
    check_cluster_id,
    AddVoterRequest,
    ApplicationRequest,
    ApplicationResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ErrorFrame,
    ProposeRequest,
    ProposeResponse,
    ReadRequest,
    ReadResponse,
    RemoveVoterRequest,
    UpgradeVotersRequest,
    VoterChangeResponse,
    check_cluster_id,
)
from ._metrics import Metrics, serve_metrics
from ._runtime import LeaderApplication, ProposalLostError, ProposalOutcomeUnknownError, QuorumRuntime, ReadNotConfirmedError
from ._state_machine import KeyValueStateMachine, StateMachine
from ._acl_file import AclFile
from ._tcp import ConnectionLimits, TcpTransport
from ._tls import EXPIRY_WARNING_DAYS, TlsConfig

logger = logging.getLogger("pykraft.quorum")

_QUORUM_FIELDS = {f.name for f in fields(QuorumConfig) if f.init and f.name not in ("node_id", "voters")}


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``"1@host:port,2@host:port"`` (Kafka's controller.quorum.voters form).

    Raises ``ValueError`` naming the bad entry, or an id given twice: a
    typo such as ``1@a:9001,1@b:9002,3@c:9003`` (meant ``2@b``) would
    otherwise make a cluster of two voters that its operator believes has
    three, one loss from stopping.
    """
    voters: dict[int, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            node, address = item.split("@", 1)
            host, port = address.rsplit(":", 1)
            node_id, entry = int(node), (host.strip("[]"), int(port))
        except ValueError:
            raise ValueError(f"bad voter {item!r}: expected ID@HOST:PORT") from None
        if node_id in voters:
            raise ValueError(f"voter {node_id} is given twice ({item!r}): each voter needs its own id")
        voters[node_id] = entry
    if not voters:
        raise ValueError("no voters given")
    return voters


#: The most record bytes one proposal may carry: what a client's request
#: frame may hold (``NODE_LIMITS.small_frame_bytes_max``, 1 MiB) less room
#: for the frame's header and each record's length prefix.
PROPOSAL_BYTES_MAX = NODE_LIMITS.small_frame_bytes_max - 64 * 1024


def check_records(records: Sequence[bytes]) -> None:
    """Refuse, in the caller, a proposal the quorum could not take: not a
    list of ``bytes`` (``TypeError``: a ``str`` must be encoded first), none
    at all, more than ``NODE_LIMITS.records_per_request_max`` records or
    more than ``PROPOSAL_BYTES_MAX`` bytes (``ValueError``)."""
    if isinstance(records, (bytes, str)) or not isinstance(records, Sequence):
        raise TypeError(f"records must be a list of bytes, not {type(records).__name__}")
    if not records:
        raise ValueError("nothing to propose")
    if len(records) > NODE_LIMITS.records_per_request_max:
        raise ValueError(f"{len(records)} records in one proposal, over the limit of {NODE_LIMITS.records_per_request_max}")
    size = 0
    for index, record in enumerate(records):
        if type(record) is not bytes:
            raise TypeError(f"record {index} is a {type(record).__name__}, not bytes")
        size += len(record)
    if size > PROPOSAL_BYTES_MAX:
        raise ValueError(f"the proposal holds {size} bytes, over the limit of {PROPOSAL_BYTES_MAX}")


def check_voter_addresses(voters: object) -> None:
    """Refuse a ``voters`` map of the wrong shape, naming the entry:
    ``{node_id: (host, port)}`` with int ids, a host string and a port in
    0-65535 (0: pick one at bind time, for a node that dials nobody).
    Raises ``TypeError`` (not a map, a str id) or ``ValueError``."""
    if not isinstance(voters, dict):
        raise TypeError(
            f"voters must be a dict {{node_id: (host, port)}} (or, to start(), \"1@HOST:PORT,...\"), "
            f"not {type(voters).__name__}"
        )
    for node_id, address in voters.items():
        if type(node_id) is not int or not 0 <= node_id <= NODE_ID_MAX:
            raise TypeError(f"voter id {node_id!r} must be an int in 0-{NODE_ID_MAX}")
        check_address(address, f"voter {node_id}'s")


def check_address(address: object, whose: str) -> None:
    """``(host, port)``: a non-empty host string and a port in 0-65535.
    Raises ``ValueError`` naming ``whose`` address it is."""
    if not (isinstance(address, (tuple, list)) and len(address) == 2):
        raise ValueError(f"{whose} address must be (host, port), got {address!r}")
    host, port = address
    if not isinstance(host, str) or not host:
        raise ValueError(f"{whose} host must be a non-empty str, got {host!r}")
    if type(port) is not int or not 0 <= port <= PORT_MAX:
        raise ValueError(f"{whose} port must be an int in 0-{PORT_MAX}, got {port!r}")


def check_transport_choice(tls: TlsConfig | None, plaintext: bool) -> None:
    """Check that a process that listens chose TLS or plaintext, exactly one
    (issue 16, "Defaults": plaintext only when chosen). Raises
    ``ValueError`` saying how to choose, or ``TypeError`` for a
    ``plaintext`` that is not a bool."""
    if type(plaintext) is not bool:
        raise TypeError(f"plaintext must be True or False, got {plaintext!r}")
    if tls is not None and plaintext:
        raise ValueError("plaintext=True and tls exclude each other: give one")
    if tls is None and not plaintext:
        raise ValueError(
            "no TLS chosen: give tls=TlsConfig(ca, cert, key) (`kraft-quorum certs` makes the files), "
            "or plaintext=True to run without TLS"
        )


@dataclass(kw_only=True)
class NodeConfig:
    """Everything one node process needs.

    ``voters`` maps every voter's id to its address. A node whose id is not
    among them is an observer and must give ``listen``. A ``data_dir``
    formatted for dynamic voters (``kraft-quorum format --initial-voters``
    or ``--standalone``, KIP-853) supplies them itself: its ``meta.json``
    names the bootstrap voters with their endpoints (added to ``voters``,
    which may then be empty) and this disk's directory id; the voter set
    then changes at run time (``kraft-quorum add-voter``). ``data_dir`` None
    keeps everything in memory (tests, throwaway prototypes). ``quorum``
    overrides ``QuorumConfig`` fields (``election_timeout_ms``, ...).
    ``connection_limits`` bounds what peers and clients may cost the node
    (docs/operations.md, "Hostile peers and clients").

    ``tls`` makes every connection mutual TLS 1.3 and refuses plaintext
    (docs/security.md). A node without ``tls`` must say ``plaintext=True``:
    plaintext is a choice (teaching, examples, quick starts), never a
    default, and the node announces it in one log line at startup. ``acl_file`` names the ACL (reloaded by
    ``QuorumNodeHandle.reload_security``); None keeps the defaults (reads
    for every authenticated principal, administration for none).
    """

    node_id: int
    voters: dict[int, tuple[str, int]] = field(default_factory=dict)
    # None: the cluster id ``kraft-quorum format`` wrote into ``data_dir``'s
    # meta.json, or "pykraft" for an unformatted or in-memory node.
    cluster_id: str | None = None
    listen: tuple[str, int] | None = None
    data_dir: Path | str | None = None
    fsync: bool = True
    snapshot_every_records: int = 10_000
    retention_bytes: int | None = 100 * 1024 * 1024
    retention_ms: int | None = 7 * 24 * 3600 * 1000
    metrics_listen: tuple[str, int] | None = None
    # False: no metrics are kept at all (for measuring their cost); then
    # there is no endpoint either.
    metrics_enabled: bool = True
    event_log: Path | str | None = None
    quorum: dict[str, Any] = field(default_factory=dict)
    connection_limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    # What a damaged log (not merely torn) makes the node do at startup:
    # "repair" it from a leader, neither voting nor standing until then
    # (docs/storage.md, "Repair"), or "refuse" to start (an operator steps in).
    on_damage: str = "repair"
    tls: TlsConfig | None = None
    plaintext: bool = False
    acl_file: Path | str | None = None
    # KIP-853 auto-join, done by the node processes (``quorum.cli.auto_join``):
    # needs a data directory formatted for dynamic voters.
    auto_join: bool = False
    # What ``data_dir``'s meta.json says (read at construction), or None.
    identity: DataDirIdentity | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        check_transport_choice(self.tls, self.plaintext)
        if type(self.node_id) is not int or not 0 <= self.node_id <= NODE_ID_MAX:
            raise TypeError(f"node_id must be an int in 0-{NODE_ID_MAX}, got {self.node_id!r}")
        check_voter_addresses(self.voters)
        for name in ("fsync", "metrics_enabled", "auto_join"):
            if type(getattr(self, name)) is not bool:  # fsync="no" would mean fsync on
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("listen", "metrics_listen"):
            if getattr(self, name) is not None:
                check_address(getattr(self, name), f"the {name}")
        if self.data_dir is not None:
            self.identity = read_data_dir_identity(self.data_dir)
        if self.cluster_id is None:
            self.cluster_id = self.identity.cluster_id if self.identity is not None else "pykraft"
        # Every message carries it: one the wire cannot encode would start a
        # node that never reaches its peers (each send refused, logged).
        check_cluster_id(self.cluster_id)
        if self.identity is not None and self.identity.bootstrap_voters:
            self.voters = {**_bootstrap_addresses(self.identity.bootstrap_voters), **self.voters}
        if not self.voters:
            raise ValueError(
                "no voters: give the voters' addresses, or a data directory formatted with "
                "--initial-voters or --standalone (kraft-quorum format)"
            )
        if self.auto_join and (self.identity is None or not self.identity.bootstrap_voters):
            raise ValueError(
                "auto_join needs a data directory formatted for dynamic voters "
                "(kraft-quorum format --initial-voters or --standalone)"
            )
        if self.acl_file is not None and self.tls is None:
            raise ValueError("acl_file needs tls: on a plaintext listener nobody is authenticated")
        if not self.metrics_enabled and self.metrics_listen is not None:
            raise ValueError("metrics_listen needs metrics_enabled (there is nothing to serve)")
        if type(self.snapshot_every_records) is not int or self.snapshot_every_records < 0:
            # 0: never; a negative count would snapshot after every apply.
            raise ValueError(
                f"snapshot_every_records must be an int >= 0, got {setting_value_shown(self.snapshot_every_records)}"
            )
        for name in ("retention_bytes", "retention_ms"):
            # No upper bound: a longer or larger retention only keeps more
            # log (None keeps it all); but a float nan would pass every
            # comparison and delete nothing without a word.
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 0):
                raise ValueError(f"{name} must be an int >= 0 or None, got {setting_value_shown(value)}")
        if self.on_damage not in ("repair", "refuse"):
            raise ValueError(f"on_damage must be 'repair' or 'refuse', got {self.on_damage!r}")
        unknown = set(self.quorum) - _QUORUM_FIELDS
        if unknown:
            raise ValueError(f"unknown quorum settings: {', '.join(sorted(unknown))}")
        if self.listen is None:
            if self.node_id not in self.voters:
                raise ValueError(
                    f"node {self.node_id} is not among the voters ({', '.join(map(str, sorted(self.voters)))}): "
                    "give its id as a voter, or a listen address to run it as an observer"
                )
            self.listen = self.voters[self.node_id]

    def quorum_config(self, identity: DataDirIdentity | None = None) -> QuorumConfig:
        """The core's configuration: ``quorum``'s settings, with the
        directory id and bootstrap voters of ``data_dir``'s meta.json when
        it has them (``identity``: what storage read or, at a first start,
        wrote there; else what was read at construction). Raises
        ``ValueError`` when ``quorum`` names another directory id or other
        bootstrap voters than the disk's."""
        settings = dict(self.quorum)
        identity = identity if identity is not None else self.identity
        if identity is not None:
            for name, stored in (("directory_id", identity.directory_id), ("bootstrap_voters", identity.bootstrap_voters)):
                if not stored:
                    continue
                given = settings.setdefault(name, stored)
                if (tuple(given) if name == "bootstrap_voters" else given) != stored:
                    raise ValueError(f"quorum setting {name} {given!r} differs from {self.data_dir}'s meta.json: {stored!r}")
        # Where each voter listens, for the NOT_LEADER answers that name it
        # (a static set names no endpoints of its own); port 0 (pick one
        # at bind time) is nowhere another node can reach.
        settings.setdefault(
            "voter_endpoints",
            tuple(
                (node_id, address_endpoint(*address)) for node_id, address in sorted(self.voters.items()) if address[1]
            ),
        )
        if settings.get("bootstrap_voters"):
            # Dynamic voters: the set comes from the disk and the log, and
            # ``voters`` is only where to reach them.
            config = QuorumConfig(node_id=self.node_id, **settings)
        else:
            config = QuorumConfig(node_id=self.node_id, voters=tuple(self.voters), **settings)
        # A Fetch answer over the frame limit cannot be sent (it is logged
        # and dropped): the follower it is for would never catch up.
        answer_bytes_max = fetch_answer_bytes_max(config.fetch_bytes_max)
        if answer_bytes_max > self.connection_limits.frame_bytes_max:
            raise ValueError(
                f"fetch_bytes_max {config.fetch_bytes_max} needs Fetch answers of up to {answer_bytes_max} bytes, "
                f"over frame_bytes_max {self.connection_limits.frame_bytes_max}: lower fetch_bytes_max or raise "
                "frame_bytes_max"
            )
        return config


def _bootstrap_addresses(voters: Sequence[Voter]) -> dict[int, tuple[str, int]]:
    """Each bootstrap voter's first endpoint, as an address. Raises
    ``ValueError`` for an endpoint that is not ``HOST:PORT``."""
    return {voter.node_id: endpoint_address(voter.endpoints[0]) for voter in voters if voter.endpoints}


class QuorumNodeHandle:
    """What ``open_quorum_node`` yields."""

    def __init__(
        self,
        runtime: QuorumRuntime,
        transport: TcpTransport | None,
        tls: TlsConfig | None = None,
        acl: AclFile | None = None,
    ) -> None:
        self.runtime = runtime
        self._transport = transport
        self.tls = tls
        self._acl = acl if acl is not None else AclFile(None)
        self.metrics_port: int | None = None
        # Set by open_quorum_node: once serving, and once its block ended.
        self.started = False
        self.closed = False

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(
                f"node {self.node_id} is closed: its open_quorum_node block has ended (open it again to use it)"
            )

    @property
    def acl(self) -> AccessControlList:
        return self._acl.acl

    def reload_security(self) -> None:
        """Read the certificate, key, CA bundle and ACL file again (what a
        node process does on SIGHUP): new connections use the new
        certificate, open ones keep theirs. Raises ``TlsError``,
        ``ValueError`` or ``OSError`` for a file that cannot be used; what
        was in force then stays."""
        if self.tls is not None:
            self.tls.reload()
            logger.info("TLS certificate reloaded: %s, expires %s", self.tls.principal, self.tls.not_after.isoformat())
        self._acl.reload()
        note_certificate_expiry(self.runtime.metrics, self.tls)

    @property
    def node_id(self) -> int:
        return self.runtime.config.node_id

    @property
    def listen_port(self) -> int | None:
        return self._transport.bound_port if self._transport else None

    @property
    def state_machine(self) -> StateMachine:
        return self.runtime.state_machine

    @property
    def is_leader(self) -> bool:
        return not self.closed and self.runtime.node.leader_has_committed_own_epoch

    async def propose(self, records: list[bytes]) -> int:
        """Commit ``records``; returns the offset of the first. Raises
        ``TypeError`` or ``ValueError`` for records that could not be
        proposed (see ``check_records``: nothing is proposed then),
        ``NotLeaderError`` (retry at ``leader_id``), ``ProposalLostError``,
        ``ApplyFailedError`` (the state machine raised on a record), or
        ``RuntimeError`` once the node is closed."""
        first, _ = await self.propose_with_answers(records)
        return first

    async def propose_with_answers(self, records: list[bytes]) -> tuple[int, list[bytes | None]]:
        """``propose``, also returning what the state machine answered for
        each record (None where nothing). Raises as ``propose``."""
        check_records(records)
        self._check_open()
        last, answers = await self.runtime.propose_with_answers(records)
        return last - len(records) + 1, answers

    async def read(self, mode: str = "linearizable") -> int:
        """Wait until the state machine may be read in ``mode``
        ("linearizable": ReadIndex; "leader-local": this leader's own state,
        as Kafka's controller answers); returns the applied offset.
        Raises ``NotLeaderError`` or ``ReadNotConfirmedError``, and
        ``RuntimeError`` once the node is closed."""
        if mode not in ("linearizable", "leader-local"):
            raise ValueError(f"unknown read mode {mode!r}: expected 'linearizable' or 'leader-local'")
        self._check_open()
        if mode == "linearizable":
            return await self.runtime.read_index()
        return self.runtime.leader_local_offset()

    async def wait_for_leader(self) -> int:
        """Wait until some node leads and this node knows it; returns its id.
        Raises ``RuntimeError`` once the node is closed (nothing would change)."""
        self._check_open()
        node = self.runtime.node
        await self.runtime.wait_until(
            lambda: node.leader_id is not None and (node.leader_id != node.node_id or self.is_leader)
        )
        assert node.leader_id is not None
        return node.leader_id

    async def resign(self) -> None:
        await self.runtime.resign()

    def describe(self) -> QuorumDescription:
        return self.runtime.describe()

    def statistics(self) -> dict[str, Any]:
        return self.runtime.statistics()


def address_endpoint(host: str, port: int) -> str:
    """``(host, port)`` as a voter endpoint, ``HOST:PORT`` (``[::1]:9093``
    for IPv6): the inverse of ``endpoint_address``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


VoterChangeRequest = AddVoterRequest | RemoveVoterRequest | UpgradeVotersRequest


def leader_fields(runtime: QuorumRuntime, request: Any, leader_hint: int | None) -> dict[str, Any]:
    """The fields of an answer to ``request`` that may say NOT_LEADER: its
    version (the request's, Kafka's rule), the hinted leader, and, in
    version 2, the epoch it leads (when this node knows it leads now) and
    where it listens, from the voter set this node holds (KIP-853
    NodeEndpoints): a client given only this node's address reaches the
    leader through it."""
    node = runtime.node
    return {
        "version": request.version,
        "leader_hint": leader_hint,
        "leader_epoch": node.epoch if leader_hint is not None and leader_hint == node.leader_id else None,
        "leader_endpoint": node.endpoint_of(leader_hint),
    }


async def handle_voter_change(runtime: QuorumRuntime, request: VoterChangeRequest) -> VoterChangeResponse:
    """Serve a KIP-853 AddVoter, RemoveVoter or UpgradeVoters request on
    this node: the leader appends the change and answers once it is
    committed; every refusal is an answer (NOT_LEADER with the leader hint,
    or the ``ReconfigurationError``'s code and reason), logged once."""
    if isinstance(request, AddVoterRequest):
        asker = "auto-join: " if request.auto_join else ""
        what = f"{asker}add voter {request.node_id} (directory {request.directory_id})"
    elif isinstance(request, RemoveVoterRequest):
        what = f"remove voter {request.node_id} (directory {request.directory_id})"
    else:
        what = "upgrade the static voter set to dynamic voters"
    try:
        if isinstance(request, AddVoterRequest):
            offset = await runtime.add_voter(
                Voter(request.node_id, request.directory_id, request.endpoints), auto_join=request.auto_join
            )
        elif isinstance(request, RemoveVoterRequest):
            offset = await runtime.remove_voter(request.node_id, request.directory_id)
        else:
            offset = await runtime.upgrade_voters(runtime.voter_endpoints)
            if offset is None:
                return VoterChangeResponse(
                    message="the voters are dynamic already: nothing to do", version=request.version
                )
    except NotLeaderError as error:
        return VoterChangeResponse(
            error=ErrorCode.NOT_LEADER, message=str(error), **leader_fields(runtime, request, error.leader_id)
        )
    except ReconfigurationError as error:
        logger.info("node %d: refused to %s: %s", runtime.config.node_id, what, error.reason)
        return VoterChangeResponse(
            error=error.code, message=error.reason, **leader_fields(runtime, request, runtime.node.leader_id)
        )
    except (ProposalLostError, ProposalOutcomeUnknownError) as error:
        # A new leader's log replaced (or may have replaced) the change:
        # the client asks the new leader, whose voter set tells the truth.
        logger.info("node %d: %s: %s", runtime.config.node_id, what, error)
        return VoterChangeResponse(
            error=ErrorCode.NOT_LEADER, message=str(error), **leader_fields(runtime, request, runtime.node.leader_id)
        )
    logger.info("node %d: %s: committed at offset %d", runtime.config.node_id, what, offset)
    return VoterChangeResponse(offset=offset, version=request.version)


async def handle_client_request(runtime: QuorumRuntime, request: Any) -> Any:
    """Answer a client's wire request from this node."""
    node = runtime.node
    if isinstance(request, (AddVoterRequest, RemoveVoterRequest, UpgradeVotersRequest)):
        return await handle_voter_change(runtime, request)
    try:
        if isinstance(request, ProposeRequest):
            last, answers = await runtime.propose_with_answers(list(request.records))
            return ProposeResponse(
                offset=last - len(request.records) + 1, results=tuple(answers), version=request.version
            )
        if isinstance(request, ReadRequest):
            if request.mode == "linearizable":
                offset = await runtime.read_index()
            else:
                offset = runtime.leader_local_offset()
            try:
                value = runtime.host.answer_query(request.query, offset)
            except QueryFailedError as error:
                # The user's query() failed (the host logged it, without
                # flooding): an answer naming it, not a node error's traceback.
                return ErrorFrame(code=ErrorCode.INVALID_REQUEST, message=str(error)[:200], correlation_id=0)
            return ReadResponse(offset=offset, value=value, version=request.version)
        if isinstance(request, ApplicationRequest):
            return ApplicationResponse(payload=await runtime.application_request(request.payload), version=request.version)
        if isinstance(request, DescribeQuorumRequest):
            description = runtime.describe()
            return DescribeQuorumResponse(
                leader_id=description.leader_id,
                epoch=description.epoch,
                high_watermark=description.high_watermark,
                voters=description.voters,
                observers=description.observers,
                node_id=description.node_id,
                disk_failure=description.disk_failure,
                repairing=description.repairing,
                repairing_voters=description.repairing_voters,
                # In the version asked for: an old client reads version 1.
                version=request.version,
            )
    except NotLeaderError as error:
        code, hint = ErrorCode.NOT_LEADER, error.leader_id
    except ReadNotConfirmedError as error:
        code, hint = ErrorCode.NOT_LEADER, error.leader_id
    except ProposalLostError:
        code, hint = ErrorCode.NOT_LEADER, node.leader_id
    else:
        raise ValueError(f"not a client request: {type(request).__name__}")
    fields = leader_fields(runtime, request, hint)
    if isinstance(request, ProposeRequest):
        return ProposeResponse(error=code, **fields)
    if isinstance(request, ApplicationRequest):
        return ApplicationResponse(error=code, **fields)
    return ReadResponse(error=code, **fields)


def propose_from_client(runtime: QuorumRuntime, request: Any, reply: Callable[[Any], None]) -> bool:
    """The fast path for a client's ProposeRequest (a ``FastRequestHandler``):
    proposed from the receiving task and answered by the core task when
    it commits, with no task per request. Other requests: False."""
    if type(request) is not ProposeRequest or not request.records:
        return False
    count = len(request.records)

    def done(result: tuple[int, list[bytes | None]] | None, error: BaseException | None) -> None:
        if result is not None:
            last, answers = result
            reply(ProposeResponse(offset=last - count + 1, results=tuple(answers), version=request.version))
        elif isinstance(error, NotLeaderError):
            reply(ProposeResponse(error=ErrorCode.NOT_LEADER, **leader_fields(runtime, request, error.leader_id)))
        elif isinstance(error, ProposalLostError):
            reply(ProposeResponse(error=ErrorCode.NOT_LEADER, **leader_fields(runtime, request, runtime.node.leader_id)))
        else:  # ApplyFailedError: the state machine raised (the host logged it)
            logger.info("proposal failed: %r", error)
            reply(ErrorFrame(code=ErrorCode.INVALID_REQUEST, message=str(error)[:200], correlation_id=0))

    runtime.propose_with_callback(request.records, done)
    return True


#: ``authorize_application(principal, payload, acl)``: why an authenticated
#: principal may not send this ``ApplicationRequest`` payload, or None.
ApplicationAuthorizer = Callable[[Principal, bytes, AccessControlList], "str | None"]


def require(operation: Operation) -> ApplicationAuthorizer:
    """An ``ApplicationAuthorizer`` that requires ``operation`` for every
    payload (a broker's client requests are all reads)."""

    def authorize(principal: Principal, payload: bytes, acl: AccessControlList) -> str | None:
        return None if acl.allows(principal, operation) else f"{principal} may not {operation.value}"

    return authorize


def authorize_client_request(
    acl: AclFile, application: ApplicationAuthorizer | None
) -> Callable[[Principal | None, Any], str | None]:
    """The node's ``RequestAuthorizer``: raw writes (ProposeRequest) are
    administration, reads and DescribeQuorum are reads, an application's
    requests are for ``application`` to judge (administration without one).
    A plaintext connection (no principal) is not judged: choosing plaintext
    is choosing no authentication."""

    def authorize(principal: Principal | None, request: Any) -> str | None:
        if principal is None:
            return None
        kind = type(request)
        if principal.kind is PrincipalKind.NODE and kind in (AddVoterRequest, RemoveVoterRequest, UpgradeVotersRequest):
            # A node may do anything an ACL grants, but the voter set is the
            # operator's: a node's certificate only adds that node itself
            # (auto-join), never another node and never removes one. And
            # only marked as auto-join: an unmarked AddVoter is an
            # operator's, which the leader does for a disk an operator
            # removed (and forgets the removal), so a node must not be
            # able to send one (issue 17).
            if kind is AddVoterRequest and request.node_id == principal.member_id:
                if request.auto_join:
                    return None
                return (
                    f"{principal} may only add itself as a voter by auto-join (AddVoterRequest version 2 with "
                    f"auto_join): an add-voter not marked so is an operator's"
                )
            return f"{principal} may only add itself as a voter (auto-join), not send this {kind.__name__}"
        if kind is ApplicationRequest and application is not None:
            return application(principal, request.payload, acl.acl)
        operation = Operation.READ if kind is ReadRequest or kind is DescribeQuorumRequest else Operation.ADMIN
        if acl.acl.allows(principal, operation):
            return None
        return f"{principal} may not {operation.value} ({kind.__name__})"

    return authorize


#: How often a node looks again at how long its certificate has left.
EXPIRY_CHECK_INTERVAL_S = 3600.0


def note_certificate_expiry(metrics: Metrics, tls: TlsConfig | None) -> None:
    """The expiry gauge of this process's certificate: when it expires, as
    a Unix time (alert on ``... - time() < 14 * 86400``)."""
    if tls is None:
        return
    metrics.set_gauge(
        "pykraft_tls_certificate_expiry_timestamp_seconds",
        tls.not_after.timestamp(),
        "When this process's TLS certificate expires (Unix time; updated on reload).",
        principal=tls.principal.uri,
    )


async def warn_before_expiry(tls: TlsConfig) -> None:
    """Log a warning every ``EXPIRY_CHECK_INTERVAL_S`` while the
    certificate (as last reloaded) expires within ``EXPIRY_WARNING_DAYS``."""
    while True:
        days = tls.days_left()
        if days < EXPIRY_WARNING_DAYS:
            logger.warning("the TLS certificate %s (%s) expires in %.1f days: renew it and send SIGHUP", tls.cert_file, tls.principal, days)
        await trio.sleep(EXPIRY_CHECK_INTERVAL_S)


def _sole_static_voter(config: NodeConfig) -> bool:
    """Whether this node is its cluster's only voter, for good: a damaged
    voter repairs its log from a leader (docs/storage.md, "Repair"), and a
    static voter set of one has no leader but this node, nor any other copy
    of the log. With dynamic voters (KIP-853) the log's own voter set may be
    older than the cluster's, whose leader then finds this node."""
    return set(config.voters) == {config.node_id} and not (
        config.identity is not None and config.identity.bootstrap_voters
    )


def open_storage(config: NodeConfig) -> FileStorage | MemoryStorage:
    """The node's storage. Raises the errors of ``FileStorage.open``, and
    ``SoleVoterDamagedError`` for a damaged log that nobody can repair."""
    if config.data_dir is None:
        return MemoryStorage()
    sole_voter = _sole_static_voter(config)
    try:
        storage = FileStorage.open(
            config.data_dir,
            node_id=config.node_id,
            cluster_id=config.cluster_id,
            fsync=config.fsync,
            retention=RetentionPolicy(retention_bytes=config.retention_bytes, retention_ms=config.retention_ms),
            repair_damage=config.on_damage == "repair" and not sole_voter,
        )
    except DamagedLogError as damage:
        if sole_voter:
            raise SoleVoterDamagedError(config.node_id, damage.where) from None
        raise
    if sole_voter and storage.repair is not None:
        # A repair an earlier start began (its marker is continued whatever
        # the flag says): the damaged part is already aside.
        storage.close()
        raise SoleVoterDamagedError(
            config.node_id,
            f"the log in {config.data_dir} is being repaired from offset {storage.repair.damaged_from_offset} "
            f"(its damaged part is in a damaged-* directory beside it)",
        )
    return storage


class EventLog:
    """A node's event log: one JSON object per line, stamped with
    ``wall_ns``, flushed per line (the harness reads it after a kill -9).
    ``path`` None makes ``emit`` a no-op. Shared by the quorum runtime and
    an application beside it (the controller), so both write one file."""

    def __init__(self, path: Path | str | None) -> None:
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def emit(self, event: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps({"wall_ns": time.time_ns(), **event}) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@asynccontextmanager
async def _startup_error_unwrapped(handle: QuorumNodeHandle) -> AsyncIterator[None]:
    """A node that fails to start (its port in use, say) raises that error,
    as ``open_quorum_node`` documents, not the nested exception groups of
    the nurseries it failed in. Once the handle is in the caller's hands,
    errors pass as they are."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = leaf_exceptions(group)
        if handle.started or len(leaves) != 1:
            raise
        raise leaves[0] from group


@asynccontextmanager
async def open_quorum_node(
    config: NodeConfig,
    state_machine: StateMachine | None = None,
    *,
    rng: random.Random | None = None,
    leader_application: LeaderApplication | None = None,
    request_handler: Callable[[QuorumRuntime, Any], Awaitable[Any]] | None = None,
    event_log: EventLog | None = None,
    authorize_application: ApplicationAuthorizer | None = None,
) -> AsyncIterator[QuorumNodeHandle]:
    """Run a quorum node for the duration of the ``async with`` block.

    On exit a leader resigns first (EndQuorumEpoch), so a successor takes
    over in about a round trip. Raises ``ValueError`` for a bad config and
    the storage errors of ``FileStorage.open`` (another node's directory, a
    corrupt election state). ``request_handler(runtime, request)`` replaces
    the default answers to clients' wire requests (a broker serves its own).
    ``event_log`` replaces the one opened from ``config.event_log`` (the
    caller then closes it). ``authorize_application`` judges the
    ``ApplicationRequest`` payloads of authenticated clients (default: they
    need ``admin``).
    """
    machine = state_machine if state_machine is not None else KeyValueStateMachine()
    check_state_machine(machine)  # before anything is opened
    acl = AclFile(config.acl_file)
    storage = open_storage(config)
    metrics = Metrics(config.node_id, enabled=config.metrics_enabled)
    if config.tls is not None:
        logger.info("node %d: mutual TLS 1.3 as %s; plaintext connections are refused", config.node_id, config.tls.principal)
        note_certificate_expiry(metrics, config.tls)
    own_event_log = event_log is None
    events = EventLog(config.event_log) if event_log is None else event_log

    runtime_ref: list[QuorumRuntime] = []

    handler = request_handler or handle_client_request

    async def serve_request(request: Any) -> Any:
        return await handler(runtime_ref[0], request)

    transport = TcpTransport(
        config.node_id,
        cluster_id=config.cluster_id,
        listen=config.listen,
        peer_addresses=config.voters,
        request_handler=serve_request,
        fast_request_handler=(
            (lambda request, reply: propose_from_client(runtime_ref[0], request, reply))
            if request_handler is None
            else None
        ),
        connection_limits=config.connection_limits,
        metrics=metrics,
        tls=config.tls,
        authorize=authorize_client_request(acl, authorize_application) if config.tls is not None else None,
        observer_only=config.quorum.get("observer_only") is True,
    )
    try:
        runtime = QuorumRuntime(
            # The identity storage read, or wrote at this first start: a
            # static node knows its directory id from its first start on,
            # which an upgrade to dynamic voters needs (``upgrade_voters``).
            config.quorum_config(getattr(storage, "identity", None)),
            machine,
            storage=storage,
            transport=transport,
            rng=rng,
            snapshot_every_records=config.snapshot_every_records,
            metrics=metrics,
            event_sink=events.emit,
            leader_application=leader_application,
        )
    except BaseException as error:
        # Recovery read the snapshot and the log and failed: the directory
        # is released, so that the caller may move it aside and start again.
        storage.close()
        if own_event_log:
            events.close()
        if isinstance(error, CorruptSnapshotError) and error.where is not None and _sole_static_voter(config):
            raise SoleVoterDamagedError(config.node_id, error.where) from None
        raise
    runtime.voter_endpoints = {node_id: (address_endpoint(*address),) for node_id, address in config.voters.items()}
    runtime_ref.append(runtime)
    handle = QuorumNodeHandle(runtime, transport, config.tls, acl)
    try:
        async with _startup_error_unwrapped(handle), trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            if config.tls is None:
                # Once listening, so that the line names the bound port.
                logger.warning(
                    "node %d runs without TLS (plaintext, chosen explicitly): any process that reaches %s:%d "
                    "may speak as any node, broker or client",
                    config.node_id, (config.listen or ("-", 0))[0], handle.listen_port,
                )  # fmt: skip
            else:
                nursery.start_soon(warn_before_expiry, config.tls)
            if config.metrics_listen is not None:
                host, port = config.metrics_listen
                handle.metrics_port = await nursery.start(serve_metrics, metrics, host, port)
            handle.started = True
            try:
                yield handle
            finally:
                with trio.move_on_after(2) as scope:
                    scope.shield = True
                    if runtime.node.is_leader:
                        await runtime.resign()
                        # Let the EndQuorumEpoch leave before the sockets close.
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
    finally:
        handle.closed = True
        storage.close()
        if own_event_log:
            events.close()
