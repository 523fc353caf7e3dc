"""Which input a node serves first: the one priority rule that the trio
runtime applies (``quorum/runtime/_tcp.py`` and ``_runtime.py``) and that the
simulator applies when it models a node's service time
(``jepsen_like/sim/_cluster.py``, ``SimOptions.service_quorum_us``).

Replication is never starved (issue 15): Raft's timers measure the time
between a voter's Fetches being served, and a leader that is not fetched
from by a majority within ``check_quorum_factor x fetch_timeout`` resigns.
So a configured voter's quorum messages (Vote, BeginQuorumEpoch, Fetch, ...)
come first; then those of everyone else, which are brokers' Fetches (KIP-595
observers: each carries a heartbeat, and a broker waits out a 9 s session
before it is fenced, where a voter has 2 s); then client requests (a
proposal, a read, RegisterBroker and every other controller request).
"""

from __future__ import annotations

import enum
from collections.abc import Container
from typing import Any

from ._messages import MESSAGE_TYPES

_QUORUM_TYPES = frozenset(MESSAGE_TYPES)


class ServiceClass(enum.IntEnum):
    """The order in which a node serves what it has read: lower first."""

    VOTER = 0  # a quorum message from a configured voter
    OBSERVER = 1  # a quorum message from anyone else: a broker's Fetch
    CLIENT = 2  # everything else a node serves: proposals, reads, controller requests


def service_class(message: Any, voters: Container[int]) -> ServiceClass:
    """The class ``message`` is served in, on a node whose configured voters
    are ``voters``. Never raises."""
    if type(message) not in _QUORUM_TYPES:
        return ServiceClass.CLIENT
    return ServiceClass.VOTER if message.src in voters else ServiceClass.OBSERVER
