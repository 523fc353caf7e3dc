"""Error codes and exceptions of the registration layer.

Codes are Kafka's numbers. The ones the quorum already defines
(``quorum.ErrorCode``) keep the same names and values here, so a code can be
compared with either enum; the others are the Kafka errors the controller adds
for topics and broker administration.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Every error code a registration request or heartbeat can answer with."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER = 6  # not the active controller; retry at the quorum leader
    BROKER_NOT_AVAILABLE = 8
    INVALID_TOPIC_EXCEPTION = 17  # a topic name Kafka would refuse
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38  # also "fewer online brokers than replicas"
    INVALID_REQUEST = 42
    STALE_BROKER_EPOCH = 77  # KIP-380
    DUPLICATE_BROKER_REGISTRATION = 101  # KIP-631
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_CLUSTER_ID = 104


class RecordDecodeError(ValueError):
    """Bytes that are not a well-formed metadata record of a known type and
    version (the writer's fault, or corruption): never applied."""


class InvalidRecordError(ValueError):
    """A well-formed record that does not fit the image it is applied to
    (a change to a partition that does not exist, a fence for an epoch that
    is not the broker's current one...). Only a faulty controller writes
    one; every image skips it the same way, so images stay identical."""


class SnapshotDecodeError(ValueError):
    """Bytes that are not a snapshot this version of ``ClusterImage`` wrote."""


class RegistrationInvariantError(RuntimeError):
    """A bug in the registration layer, never a remote's fault: the
    controller's own bookkeeping disagrees with itself. Never caught: the
    controller must stop rather than write records from a wrong view."""


class InvalidTransitionError(RegistrationInvariantError):
    """A broker-lifecycle event that a transition table does not allow in
    the current state. The controller's table (``registration``) and the
    broker agent's own (``broker_agent``) both raise it: either way it is a
    bug in the code that fed the event, never a remote's fault."""


class NotActiveError(RuntimeError):
    """A leader-only operation on a controller that is not active."""
