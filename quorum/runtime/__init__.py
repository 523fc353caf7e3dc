"""The trio runtime: a ``QuorumNode`` driven over real transports and
storage. See ``docs/architecture.md``."""

from ._acl_file import AclFile, AclFileError
from ._certs import CertificateAuthority, create_cluster_certificates
from ._memory_transport import MemoryNetwork, MemoryTransport
from ._metrics import FINE_BUCKETS_S, Metrics, http_get, scrape_metrics, serve_metrics
from ._node_api import (
    PROPOSAL_BYTES_MAX,
    ApplicationAuthorizer,
    require,
    EventLog,
    NodeConfig,
    QuorumNodeHandle,
    check_records,
    handle_client_request,
    open_quorum_node,
    parse_voters,
)
from ._runtime import HEALTH_APPLY_LAG_RECORDS_MAX, LeaderApplication, Proposal, ProposalLostError, QuorumRuntime, ReadNotConfirmedError, Transport
from ._state_machine import KeyValueStateMachine, StateMachine
from ._tcp import ConnectionLimits, TcpTransport
from ._tls import (
    EXPIRY_WARNING_DAYS,
    HANDSHAKE_TIMEOUT_S,
    PeerNotAuthenticatedError,
    TlsConfig,
    TlsError,
    TlsStream,
    peer_not_after,
    peer_principal,
)
from ._reader import StreamReader
from ._small_files import read_small_file
from ._writer import WRITE_ERRORS, StreamWriter

__all__ = [
    "EXPIRY_WARNING_DAYS",
    "HANDSHAKE_TIMEOUT_S",
    "AclFile",
    "AclFileError",
    "ApplicationAuthorizer",
    "CertificateAuthority",
    "PeerNotAuthenticatedError",
    "TlsConfig",
    "TlsError",
    "TlsStream",
    "create_cluster_certificates",
    "peer_not_after",
    "peer_principal",
    "read_small_file",
    "require",
    "FINE_BUCKETS_S",
    "HEALTH_APPLY_LAG_RECORDS_MAX",
    "PROPOSAL_BYTES_MAX",
    "WRITE_ERRORS",
    "ConnectionLimits",
    "EventLog",
    "StreamReader",
    "StreamWriter",
    "KeyValueStateMachine",
    "LeaderApplication",
    "Proposal",
    "MemoryNetwork",
    "MemoryTransport",
    "NodeConfig",
    "QuorumNodeHandle",
    "check_records",
    "handle_client_request",
    "open_quorum_node",
    "parse_voters",
    "Metrics",
    "ProposalLostError",
    "QuorumRuntime",
    "ReadNotConfirmedError",
    "StateMachine",
    "TcpTransport",
    "Transport",
    "http_get",
    "scrape_metrics",
    "serve_metrics",
]
