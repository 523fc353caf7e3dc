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
private (``client`` and ``cli`` excepted). The trio side (``open_broker``
and its types, ``BrokerConfig``) is imported on first use, so that the
simulator imports the sans-IO parts without trio.
"""

from typing import Any

from ._driver import BrokerDriver, BrokerPort, WatchedMetadata
from ._heartbeats import FetchAnswered, HeartbeatChannel
from ._lifecycle import (
    TRANSITIONS,
    Action,
    BrokerLifecycle,
    InvalidTransitionError,
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
from ._protocol import OPS, RETRIABLE, ErrorCode, MetadataRequest, MetadataResponse, ProtocolError
from ._serving import Served, serve_request

__all__ = [
    "OPS",
    "RETRIABLE",
    "TRANSITIONS",
    "Action",
    "Broker",
    "BrokerAgent",
    "BrokerConfig",
    "BrokerDriver",
    "BrokerEvent",
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

# Names served by the trio side, imported on first use (PEP 562).
_TRIO_SIDE = {
    "Broker": "._agent",
    "BrokerAgent": "._agent",
    "BrokerEvent": "._agent",
    "BrokerStateNotice": "._agent",
    "BrokerStoppedError": "._agent",
    "LeadershipChange": "._agent",
    "PartitionRole": "._agent",
    "open_broker": "._agent",
    "BrokerConfig": "._config",
}


def __getattr__(name: str) -> Any:
    module = _TRIO_SIDE.get(name)
    if module is None:
        raise AttributeError(f"module 'broker_agent' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
