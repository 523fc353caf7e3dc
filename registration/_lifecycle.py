"""The broker lifecycle as data: states, events and the transition table.

The states are the four of the registration seed (``001_*``; KIP-500 uses
the same "global" states): Offline, Fenced, Online, Stopping. The
controller looks every broker-state decision up in ``TRANSITIONS`` (a
missing entry raises ``InvalidTransitionError``) and checks that the records
it wrote produced exactly the state the table names; the docs' diagram is
drawn from the same table (``python -m registration.diagram``).

How a registration's replicated flags map to a state (``state_of``):

==========================  ==================  ==========
registered?                 fenced, in c.s.     state
==========================  ==================  ==========
no (never, or unregistered)                     Offline
yes                         fenced, in c.s.     Offline (shut down cleanly)
yes                         fenced              Fenced
yes                         in c.s.             Stopping
yes                         neither             Online
==========================  ==================  ==========
"""

from __future__ import annotations

import enum

from ._errors import InvalidTransitionError


class BrokerState(enum.Enum):
    """A broker's state as the controller (and every image) sees it."""

    OFFLINE = "Offline"  # not registered, unregistered, or shut down
    FENCED = "Fenced"  # registered, but may not lead or join an ISR
    ONLINE = "Online"  # unfenced: may lead partitions
    STOPPING = "Stopping"  # controlled shutdown in progress


class BrokerEvent(enum.Enum):
    """What the controller decides about one broker."""

    # RegisterBroker with a new incarnation id (a first start or a bounce;
    # KIP-380: the old generation is failed, then the new one started).
    REGISTER = "register new incarnation"
    # A heartbeat with want_fence=False from a broker caught up to its own
    # registration record (KIP-631).
    UNFENCE = "unfence"
    # A heartbeat with want_fence=True from an unfenced broker (KIP-631).
    FENCE = "fence"
    # No heartbeat within the session timeout (KIP-631).
    SESSION_EXPIRED = "session expired"
    # A heartbeat with want_shutdown=True (KIP-631 controlled shutdown).
    SHUTDOWN_REQUESTED = "want shutdown"
    # The stopping broker leads nothing and the other online brokers have
    # fetched past the leadership moves (KIP-631 ``controlledShutdownOffset``).
    SHUTDOWN_COMPLETED = "shutdown completed"
    # UnregisterBroker from an administrator.
    UNREGISTER = "unregister"


_S = BrokerState
_E = BrokerEvent

#: (state, event) -> next state. Order is the order of the docs' diagram.
TRANSITIONS: dict[tuple[BrokerState, BrokerEvent], BrokerState] = {
    (_S.OFFLINE, _E.REGISTER): _S.FENCED,
    (_S.FENCED, _E.UNFENCE): _S.ONLINE,
    (_S.FENCED, _E.REGISTER): _S.FENCED,
    (_S.FENCED, _E.SHUTDOWN_REQUESTED): _S.OFFLINE,
    (_S.FENCED, _E.UNREGISTER): _S.OFFLINE,
    (_S.ONLINE, _E.FENCE): _S.FENCED,
    (_S.ONLINE, _E.SESSION_EXPIRED): _S.FENCED,
    (_S.ONLINE, _E.REGISTER): _S.FENCED,
    (_S.ONLINE, _E.SHUTDOWN_REQUESTED): _S.STOPPING,
    (_S.ONLINE, _E.UNREGISTER): _S.OFFLINE,
    (_S.STOPPING, _E.SHUTDOWN_COMPLETED): _S.OFFLINE,
    (_S.STOPPING, _E.SESSION_EXPIRED): _S.FENCED,
    (_S.STOPPING, _E.REGISTER): _S.FENCED,
    (_S.STOPPING, _E.UNREGISTER): _S.OFFLINE,
    (_S.OFFLINE, _E.UNREGISTER): _S.OFFLINE,
}


def next_state(state: BrokerState, event: BrokerEvent) -> BrokerState:
    """The state ``event`` leads to from ``state``.

    Raises ``InvalidTransitionError`` when the table has no such transition.
    """
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransitionError(f"no transition from {state.value} on {event.value!r}") from None


def state_of(registered: bool, fenced: bool, in_controlled_shutdown: bool) -> BrokerState:
    """The state a registration's replicated flags stand for (module docstring)."""
    if not registered:
        return BrokerState.OFFLINE
    if fenced:
        return BrokerState.OFFLINE if in_controlled_shutdown else BrokerState.FENCED
    return BrokerState.STOPPING if in_controlled_shutdown else BrokerState.ONLINE


def state_diagram_mermaid() -> str:
    """The transition table as a mermaid ``stateDiagram-v2``."""
    lines = ["stateDiagram-v2", f"    [*] --> {BrokerState.OFFLINE.value}"]
    for (state, event), target in TRANSITIONS.items():
        lines.append(f"    {state.value} --> {target.value}: {event.value}")
    return "\n".join(lines)


def transition_table_markdown() -> str:
    """The transition table as a markdown table."""
    lines = ["| state | event | next state |", "|---|---|---|"]
    for (state, event), target in TRANSITIONS.items():
        lines.append(f"| {state.value} | {event.value} | {target.value} |")
    return "\n".join(lines)
