"""The broker's client protocol: msgpack maps inside the quorum wire's
``ApplicationRequest`` / ``ApplicationResponse`` payloads.

Request (a map)::

    {"op": "cluster_metadata" | "list_topics" | "describe_topic" | "find_leader",
     "topic": str,             # describe_topic, find_leader
     "partition": int,         # find_leader
     "after": str,             # optional, list_topics: the names after this one
     "broker_epoch": int,      # optional: the epoch of the broker meant (KIP-380)
     "min_image_offset": int}  # optional: refuse to answer from an older image

Response (a map), every answer, errors included::

    {"error": int, "message": str, "broker_id": int, "broker_epoch": int (-1: none),
     "state": "Offline" | "Fenced" | "Online" | "Stopping", "image_offset": int,
     ...the op's fields}

``list_topics`` answers one page of names in order (``topics``, at most
``LIST_TOPICS_PAGE_MAX``) and ``more``: whether names follow the page's
last, to be asked for with ``after`` set to it.

Error codes are Kafka's numbers (``ErrorCode``); ``RETRIABLE`` says which a
client may retry (elsewhere, or after a backoff).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import msgpack

OPS = ("cluster_metadata", "list_topics", "describe_topic", "find_leader")
_OP_FIELDS = {
    "cluster_metadata": frozenset(),
    "list_topics": frozenset(),
    "describe_topic": frozenset({"topic"}),
    "find_leader": frozenset({"topic", "partition"}),
}
_OPTIONAL_FIELDS = frozenset({"broker_epoch", "min_image_offset"})
# Optional fields only some ops take.
_OP_OPTIONAL_FIELDS = {"list_topics": frozenset({"after"})}
_TOPIC_NAME_CHARS_MAX = 249
_INT64_MAX = 2**63 - 1


class ErrorCode(enum.IntEnum):
    """Errors a broker answers with (Kafka's numbers; the ones registration
    shares have the same names and values)."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5  # the partition has no leader right now
    BROKER_NOT_AVAILABLE = 8  # this broker is not Online: its state is named
    INVALID_REQUEST = 42
    STALE_BROKER_EPOCH = 77  # KIP-380: meant for another incarnation
    OFFSET_NOT_AVAILABLE = 78  # the image is older than min_image_offset


#: Worth trying again: at another broker, or here after a backoff.
RETRIABLE = frozenset(
    {
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.STALE_BROKER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
    }
)


class ProtocolError(ValueError):
    """A payload that is not a well-formed broker request or response (the
    sender's fault)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRequest:
    """One client request. Raises ``ProtocolError`` on construction for a
    malformed one."""

    op: str
    topic: str | None = None
    partition: int | None = None
    broker_epoch: int | None = None
    min_image_offset: int | None = None
    after: str | None = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ProtocolError(f"op must be one of {', '.join(OPS)}, got {_preview(self.op)}")
        needs = _OP_FIELDS[self.op]
        if ("topic" in needs) != (self.topic is not None):
            raise ProtocolError(f"{self.op} {'needs' if 'topic' in needs else 'takes no'} topic")
        if ("partition" in needs) != (self.partition is not None):
            raise ProtocolError(f"{self.op} {'needs' if 'partition' in needs else 'takes no'} partition")
        if self.topic is not None and (
            not isinstance(self.topic, str) or not 1 <= len(self.topic) <= _TOPIC_NAME_CHARS_MAX
        ):
            raise ProtocolError(f"topic must be a string of 1 to {_TOPIC_NAME_CHARS_MAX} characters")
        if self.after is not None:
            if "after" not in _OP_OPTIONAL_FIELDS.get(self.op, ()):
                raise ProtocolError(f"{self.op} takes no after")
            if not isinstance(self.after, str) or len(self.after) > _TOPIC_NAME_CHARS_MAX:
                raise ProtocolError(f"after must be a string of at most {_TOPIC_NAME_CHARS_MAX} characters")
        for name in ("partition", "broker_epoch", "min_image_offset"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or not 0 <= value <= _INT64_MAX):
                raise ProtocolError(f"{name} must be an int >= 0, got {_preview(value)}")

    def to_payload(self) -> bytes:
        data: dict[str, Any] = {"op": self.op}
        for name in ("topic", "partition", "broker_epoch", "min_image_offset", "after"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return msgpack.packb(data, use_bin_type=True)

    @classmethod
    def from_payload(cls, payload: bytes) -> MetadataRequest:
        """Raises ``ProtocolError`` for anything but a well-formed request."""
        data = _unpack(payload)
        if not isinstance(data, dict) or "op" not in data:
            raise ProtocolError(f"a request is a map with an op, got {_preview(data)}")
        op = data["op"]
        if op not in OPS:
            raise ProtocolError(f"op must be one of {', '.join(OPS)}, got {_preview(op)}")
        unknown = set(data) - {"op"} - _OP_FIELDS[op] - _OPTIONAL_FIELDS - _OP_OPTIONAL_FIELDS.get(op, frozenset())
        if unknown:
            raise ProtocolError(f"{op} takes no {', '.join(sorted(map(str, unknown)))}")
        return cls(**data)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponse:
    """One answer. ``body`` holds the op's own fields (``topics``,
    ``topic``, ``brokers``, ``leader``...)."""

    error: ErrorCode
    message: str
    broker_id: int
    broker_epoch: int
    state: str
    image_offset: int
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def retriable(self) -> bool:
        return self.error in RETRIABLE

    def to_payload(self) -> bytes:
        data = dict(self.body)
        data.update(
            error=int(self.error),
            message=self.message,
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            state=self.state,
            image_offset=self.image_offset,
        )
        return msgpack.packb(data, use_bin_type=True)

    @classmethod
    def from_payload(cls, payload: bytes) -> MetadataResponse:
        """Raises ``ProtocolError`` for anything but a well-formed response."""
        data = _unpack(payload)
        if not isinstance(data, dict):
            raise ProtocolError(f"a response is a map, got {_preview(data)}")
        try:
            error = ErrorCode(data.pop("error"))
            message = data.pop("message")
            broker_id = data.pop("broker_id")
            broker_epoch = data.pop("broker_epoch")
            state = data.pop("state")
            image_offset = data.pop("image_offset")
        except KeyError as missing:
            raise ProtocolError(f"a response needs {missing}") from None
        except ValueError:
            raise ProtocolError("unknown error code") from None
        for name, value in (("broker_id", broker_id), ("broker_epoch", broker_epoch), ("image_offset", image_offset)):
            if type(value) is not int or value < -1:
                raise ProtocolError(f"{name} must be an int, got {_preview(value)}")
        if not isinstance(message, str) or not isinstance(state, str):
            raise ProtocolError("message and state must be strings")
        return cls(
            error=error,
            message=message,
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            state=state,
            image_offset=image_offset,
            body=data,
        )


def _unpack(payload: Any) -> Any:
    if not isinstance(payload, (bytes, bytearray)):
        raise ProtocolError("a payload is bytes")
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as error:  # noqa: BLE001 - msgpack raises many kinds on bad input
        raise ProtocolError(f"not msgpack: {error}") from None


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
