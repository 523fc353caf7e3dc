"""The trio runtime: a ``QuorumNode`` driven over real transports and
storage. See ``docs/architecture.md``."""

from ._memory_transport import MemoryNetwork, MemoryTransport
from ._metrics import Metrics, serve_metrics
from ._runtime import ProposalLostError, QuorumRuntime, ReadNotConfirmedError, Transport
from ._state_machine import KeyValueStateMachine, StateMachine

__all__ = [
    "KeyValueStateMachine",
    "MemoryNetwork",
    "MemoryTransport",
    "Metrics",
    "ProposalLostError",
    "QuorumRuntime",
    "ReadNotConfirmedError",
    "StateMachine",
    "Transport",
    "serve_metrics",
]
