"""broker_agent: the broker side of the cluster (seed 001, KIP-380).

A broker is whatever registers with the controller: a ``kraft-broker``
process, or an instance of a user's service that embeds the agent to get
membership, liveness and partition leadership from the quorum.

- ``BrokerLifecycle`` (``_lifecycle``): the sans-IO lifecycle, Offline →
  Fenced → Online → Stopping, as a transition table that also draws the
  docs' diagram (``python -m broker_agent.diagram``); ``HeartbeatChannel``
  (``_heartbeats``) turns the observer core's fetch hooks into its inputs,
  and ``serve_request`` (``_serving``) answers clients from the image, both
  sans-IO too, so a simulator drives them as the agent does;
- ``open_broker`` (``_agent``): the trio agent — an observer of the
  metadata quorum that heartbeats through its fetches, keeps the cluster
  image, and serves clients only while Online;
- ``MetadataClient`` (``client``): bootstrap, find an online broker, retry
  retriable errors, keep a monotonic view.

The public names are re-exported here once; the modules behind them are
private (``client`` and ``cli`` excepted). The trio agent's names are
imported on first use, so that importing the package needs no trio.
"""

from registration import InvalidTransitionError

from ._driver import BrokerDriver, BrokerPort, WatchedMetadata
from ._errors import BrokerStoppedError
from ._heartbeats import FetchAnswered, HeartbeatChannel
from ._lifecycle import (
    TRANSITIONS,
    Action,
    BrokerLifecycle,
    LifecycleConfig,
    LifecycleEvent,
    Register,
    SetHeartbeat,
    StateChanged,
    Stop,
    next_state,
    state_diagram_mermaid,
    transition_table_markdown,
)
from ._notices import BrokerNotice, BrokerStateNotice, LeadershipChange, PartitionRole
from ._protocol import OPS, RETRIABLE, ErrorCode, MetadataRequest, MetadataResponse, ProtocolError
from ._serving import Served, serve_request



def __getattr__(name: str) -> object:
    """The trio agent's names (``open_broker``, ``Broker``, ``BrokerAgent``,
    ``BrokerConfig``), imported on first use (PEP 562): ``import
    broker_agent`` brings in only the sans-IO parts, which the simulator
    drives without trio (it is meant to run in a browser)."""
    if name in ("Broker", "BrokerAgent", "open_broker"):
        from . import _agent

        return getattr(_agent, name)
    if name == "BrokerConfig":
        from . import _config

        return _config.BrokerConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "OPS",
    "RETRIABLE",
    "TRANSITIONS",
    "Action",
    "Broker",
    "BrokerAgent",
    "BrokerConfig",
    "BrokerDriver",
    "BrokerNotice",
    "BrokerLifecycle",
    "BrokerPort",
    "BrokerStateNotice",
    "BrokerStoppedError",
    "ErrorCode",
    "FetchAnswered",
    "HeartbeatChannel",
    "InvalidTransitionError",
    "LeadershipChange",
    "LifecycleConfig",
    "LifecycleEvent",
    "MetadataRequest",
    "MetadataResponse",
    "PartitionRole",
    "ProtocolError",
    "Register",
    "Served",
    "SetHeartbeat",
    "StateChanged",
    "Stop",
    "WatchedMetadata",
    "next_state",
    "open_broker",
    "serve_request",
    "state_diagram_mermaid",
    "transition_table_markdown",
]
