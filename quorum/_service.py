"""Which input a node serves first: the one priority rule that the trio
runtime applies on its listener (``quorum/runtime/_tcp.py``) and that the
simulator applies when it models a node's service time
(``jepsen_like/sim/_cluster.py``, ``SimOptions.service_quorum_us``).

Replication is never starved by clients (issue 15): Raft's timers measure
the time between a voter's Fetches being served, so a Vote,
BeginQuorumEpoch or Fetch must not wait behind client requests. Client
requests (a proposal, a read, a RegisterBroker and every other controller
request) are served once no quorum message waits. A broker's Fetch is a
quorum message (KIP-595 observers fetch like followers): it carries the
broker's heartbeat, and answering it late fences the broker, so it shares
the first class with the voters' traffic, served in arrival order.
"""

from __future__ import annotations

import enum
from typing import Any

from ._messages import MESSAGE_TYPES

_QUORUM_TYPES = frozenset(MESSAGE_TYPES)


class ServiceClass(enum.IntEnum):
    """The order in which a node serves what it has read: lower first."""

    QUORUM = 0  # Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot (requests and answers)
    CLIENT = 1  # everything else a node serves: proposals, reads, controller requests


def service_class(message: Any) -> ServiceClass:
    """The class ``message`` is served in: ``QUORUM`` for a quorum message
    (``MESSAGE_TYPES``), ``CLIENT`` for anything else. Never raises."""
    return ServiceClass.QUORUM if type(message) in _QUORUM_TYPES else ServiceClass.CLIENT
