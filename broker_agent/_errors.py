"""Errors the broker agent raises.

A lifecycle event its transition table lacks raises registration's
``InvalidTransitionError`` (re-exported here): the broker's table and the
controller's share it.
"""

from __future__ import annotations


class BrokerStoppedError(Exception):
    """The broker stopped (shut down, or refused by the cluster for good)
    while something waited for it."""
