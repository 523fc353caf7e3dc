"""Requests to the controller and its responses, and the heartbeat carried
in a broker's Fetch.

Every message is a frozen, slotted, keyword-only dataclass that validates
its fields' shapes on construction (``ValueError``); *meaning* (is this topic
name legal? are there enough brokers?) is the controller's to judge and
answer with an error code. On the wire a message is a msgpack-ready list
``[wire_name, [field, ...]]`` (``to_wire()``); nested messages are plain
field lists. ``from_wire`` and ``message_from_wire`` raise ``ValueError`` on
anything malformed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

import msgpack

from ._errors import ErrorCode
from ._records import check_bool, check_controller_fields, check_int, check_listeners, check_requested_listeners, check_requested_text, check_text

# ---------------------------------------------------------------------------
# Wire helpers
# ---------------------------------------------------------------------------


class _Wire:
    """Mixin: ``to_wire`` / ``from_wire`` driven by the dataclass fields.

    ``_NESTED`` maps a field name to the message type of the elements of a
    tuple field (e.g. ``CreateTopicsRequest.topics``: ``NewTopic``).
    """

    __slots__ = ()
    WIRE_NAME: ClassVar[str] = ""
    _NESTED: ClassVar[dict[str, type]] = {}

    def to_wire(self) -> list[Any]:
        """``[wire_name, [fields]]`` for a top-level message."""
        return [self.WIRE_NAME, self._values()]

    def _values(self) -> list[Any]:
        return [_plain(getattr(self, f.name)) for f in fields(self)]  # type: ignore[arg-type]

    @classmethod
    def from_wire(cls, data: Any) -> Any:
        """The message ``data`` (a ``to_wire()`` list) encodes.

        Raises ``ValueError`` when ``data`` is malformed or names another type.
        """
        if not isinstance(data, (list, tuple)) or len(data) != 2 or data[0] != cls.WIRE_NAME:
            raise ValueError(f"not a {cls.__name__}: {_preview(data)}")
        return cls._from_values(data[1])

    @classmethod
    def _from_values(cls, values: Any) -> Any:
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        if not isinstance(values, (list, tuple)) or len(values) != len(names):
            raise ValueError(f"{cls.__name__} has {len(names)} fields, got {_preview(values)}")
        kwargs = {}
        for name, value in zip(names, values):
            nested = cls._NESTED.get(name)
            if nested is not None and value is not None:
                if not isinstance(value, (list, tuple)):
                    raise ValueError(f"{cls.__name__}.{name} must be a list")
                value = tuple(nested._from_values(item) for item in value)
            elif name == "error":
                value = _error_code(value)
            else:
                value = _frozen(value)
            kwargs[name] = value
        try:
            return cls(**kwargs)
        except TypeError as error:
            raise ValueError(f"invalid {cls.__name__}: {error}") from None


def _plain(value: Any) -> Any:
    if isinstance(value, _Wire):
        return value._values()
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, ErrorCode):
        return int(value)
    return value


def _frozen(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    return value


def _error_code(value: Any) -> ErrorCode:
    if type(value) is not int:
        raise ValueError(f"an error code is an int, got {_preview(value)}")
    try:
        return ErrorCode(value)
    except ValueError:
        raise ValueError(f"unknown error code {value}") from None


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_error(value: object) -> None:
    if not isinstance(value, ErrorCode):
        raise ValueError(f"error must be an ErrorCode, got {value!r}")


def _check_message(value: object) -> None:
    if not isinstance(value, str):
        raise ValueError(f"message must be a string, got {type(value).__name__}")


def _check_tuple_of(name: str, value: object, element: type, *, allow_empty: bool = True) -> None:
    if type(value) is not tuple or (not allow_empty and not value):
        raise ValueError(f"{name} must be a {'non-empty ' if not allow_empty else ''}tuple")
    for item in value:
        if not isinstance(item, element):
            raise ValueError(f"{name} holds a {type(item).__name__}, not a {element.__name__}")


# ---------------------------------------------------------------------------
# Broker registration (KIP-631 BrokerRegistration, UnregisterBroker)
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRequest(_Wire):
    """A broker process joins. ``incarnation_id`` is fresh for every process
    start (KIP-631): the same one again is a retry, another one a restart."""

    WIRE_NAME: ClassVar[str] = "register_broker"
    broker_id: int
    incarnation_id: str
    cluster_id: str
    listeners: tuple[tuple[str, str, int], ...]
    rack: str | None = None

    def __post_init__(self) -> None:
        check_int("broker_id", self.broker_id, 0)
        check_text("incarnation_id", self.incarnation_id)
        check_text("cluster_id", self.cluster_id)
        check_requested_listeners(self.listeners)
        check_requested_text("rack", self.rack, optional=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerResponse(_Wire):
    """``broker_epoch`` is the offset of the broker's registration record
    (KIP-631), or -1 on error."""

    WIRE_NAME: ClassVar[str] = "register_broker_response"
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    broker_epoch: int = -1

    def __post_init__(self) -> None:
        _check_error(self.error)
        _check_message(self.message)
        check_int("broker_epoch", self.broker_epoch, -1)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRequest(_Wire):
    """An administrator removes a broker's registration."""

    WIRE_NAME: ClassVar[str] = "unregister_broker"
    broker_id: int

    def __post_init__(self) -> None:
        check_int("broker_id", self.broker_id, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerResponse(_Wire):
    WIRE_NAME: ClassVar[str] = "unregister_broker_response"
    error: ErrorCode = ErrorCode.NONE
    message: str = ""

    def __post_init__(self) -> None:
        _check_error(self.error)
        _check_message(self.message)


# ---------------------------------------------------------------------------
# Controller registration (KIP-919 ControllerRegistration)
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterControllerRequest(_Wire):
    """A controller process registers itself with the active controller
    (KIP-919): ``incarnation_id`` is fresh for every process start (the
    same one again is a retry), ``directory_id`` the disk it votes with
    (None: not known, a static voter set), ``features`` the
    ``(name, min_version, max_version)`` ranges it supports."""

    WIRE_NAME: ClassVar[str] = "register_controller"
    controller_id: int
    incarnation_id: str
    cluster_id: str
    listeners: tuple[tuple[str, str, int], ...]
    directory_id: str | None = None
    features: tuple[tuple[str, int, int], ...] = ()

    def __post_init__(self) -> None:
        check_controller_fields(self)
        check_requested_listeners(self.listeners)
        check_text("cluster_id", self.cluster_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterControllerResponse(_Wire):
    WIRE_NAME: ClassVar[str] = "register_controller_response"
    error: ErrorCode = ErrorCode.NONE
    message: str = ""

    def __post_init__(self) -> None:
        _check_error(self.error)
        _check_message(self.message)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeControllersRequest(_Wire):
    """The registered controllers (KIP-919), from the active controller's
    committed image (leader-local, or ``linearizable``)."""

    WIRE_NAME: ClassVar[str] = "describe_controllers"
    linearizable: bool = False

    def __post_init__(self) -> None:
        check_bool("linearizable", self.linearizable)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerDescription(_Wire):
    controller_id: int
    incarnation_id: str
    listeners: tuple[tuple[str, str, int], ...]
    directory_id: str | None = None
    features: tuple[tuple[str, int, int], ...] = ()

    def __post_init__(self) -> None:
        check_controller_fields(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeControllersResponse(_Wire):
    """``offset`` is the image offset the answer reflects."""

    WIRE_NAME: ClassVar[str] = "describe_controllers_response"
    _NESTED: ClassVar[dict[str, type]] = {"controllers": ControllerDescription}
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    offset: int = -1
    controllers: tuple[ControllerDescription, ...] = ()

    def __post_init__(self) -> None:
        _check_error(self.error)
        _check_message(self.message)
        check_int("offset", self.offset, -1)
        _check_tuple_of("controllers", self.controllers, ControllerDescription)


# ---------------------------------------------------------------------------
# Topics
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTopic(_Wire):
    """One topic of a CreateTopics request. Only the field types are checked
    here; the controller answers a bad name, partition count or replication
    factor with an error for this topic."""

    name: str
    partitions: int
    replication_factor: int
    unclean_leader_election: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValueError(f"name must be a string, got {type(self.name).__name__}")
        check_int("partitions", self.partitions, -(2**31))
        check_int("replication_factor", self.replication_factor, -(2**31))
        check_bool("unclean_leader_election", self.unclean_leader_election)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsRequest(_Wire):
    WIRE_NAME: ClassVar[str] = "create_topics"
    _NESTED: ClassVar[dict[str, type]] = {"topics": NewTopic}
    topics: tuple[NewTopic, ...]

    def __post_init__(self) -> None:
        _check_tuple_of("topics", self.topics, NewTopic, allow_empty=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicResult(_Wire):
    name: str
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    topic_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValueError("name must be a string")
        _check_error(self.error)
        _check_message(self.message)
        check_text("topic_id", self.topic_id, optional=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsResponse(_Wire):
    """``error`` is for the whole request (NOT_LEADER); per-topic errors are
    in ``results``, in request order."""

    WIRE_NAME: ClassVar[str] = "create_topics_response"
    _NESTED: ClassVar[dict[str, type]] = {"results": CreateTopicResult}
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    results: tuple[CreateTopicResult, ...] = ()

    def __post_init__(self) -> None:
        _check_error(self.error)
        _check_message(self.message)
        _check_tuple_of("results", self.results, CreateTopicResult)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicsRequest(_Wire):
    WIRE_NAME: ClassVar[str] = "delete_topics"
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_tuple_of("names", self.names, str, allow_empty=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicResult(_Wire):
    name: str
    error: ErrorCode = ErrorCode.NONE
    message: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValueError("name must be a string")
        _check_error(self.error)
        _check_message(self.message)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicsResponse(_Wire):
    WIRE_NAME: ClassVar[str] = "delete_topics_response"
    _NESTED: ClassVar[dict[str, type]] = {"results": DeleteTopicResult}
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    results: tuple[DeleteTopicResult, ...] = ()

    def __post_init__(self) -> None:
        _check_error(self.error)
        _check_message(self.message)
        _check_tuple_of("results", self.results, DeleteTopicResult)


# ---------------------------------------------------------------------------
# Describe
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterRequest(_Wire):
    """``linearizable``: answer only after a ReadIndex round proves this node
    still leads (design.md's linearizable read); otherwise leader-local, from
    the controller's committed image."""

    WIRE_NAME: ClassVar[str] = "describe_cluster"
    linearizable: bool = False

    def __post_init__(self) -> None:
        check_bool("linearizable", self.linearizable)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerDescription(_Wire):
    broker_id: int
    broker_epoch: int
    incarnation_id: str
    state: str  # a BrokerState value: "Offline", "Fenced", "Online", "Stopping"
    listeners: tuple[tuple[str, str, int], ...]
    rack: str | None = None
    # How long ago the active controller last heard the broker's heartbeat
    # (leader-local soft state); None when it has not heard from it.
    last_heartbeat_ms_ago: int | None = None

    def __post_init__(self) -> None:
        check_int("broker_id", self.broker_id, 0)
        check_int("broker_epoch", self.broker_epoch, 0)
        check_text("incarnation_id", self.incarnation_id)
        check_text("state", self.state)
        check_listeners(self.listeners)
        check_text("rack", self.rack, optional=True)
        if self.last_heartbeat_ms_ago is not None:
            check_int("last_heartbeat_ms_ago", self.last_heartbeat_ms_ago, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterResponse(_Wire):
    """``offset`` is the image offset the answer reflects."""

    WIRE_NAME: ClassVar[str] = "describe_cluster_response"
    _NESTED: ClassVar[dict[str, type]] = {"brokers": BrokerDescription}
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    offset: int = -1
    cluster_id: str = ""
    brokers: tuple[BrokerDescription, ...] = ()
    topic_count: int = 0
    partition_count: int = 0
    offline_partition_count: int = 0

    def __post_init__(self) -> None:
        _check_error(self.error)
        _check_message(self.message)
        check_int("offset", self.offset, -1)
        if not isinstance(self.cluster_id, str):
            raise ValueError("cluster_id must be a string")
        _check_tuple_of("brokers", self.brokers, BrokerDescription)
        check_int("topic_count", self.topic_count, 0)
        check_int("partition_count", self.partition_count, 0)
        check_int("offline_partition_count", self.offline_partition_count, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTopicsRequest(_Wire):
    """``names`` None: every topic. ``linearizable`` as in
    ``DescribeClusterRequest``."""

    WIRE_NAME: ClassVar[str] = "describe_topics"
    names: tuple[str, ...] | None = None
    linearizable: bool = False

    def __post_init__(self) -> None:
        if self.names is not None:
            _check_tuple_of("names", self.names, str)
        check_bool("linearizable", self.linearizable)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionDescription(_Wire):
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    def __post_init__(self) -> None:
        check_int("partition_id", self.partition_id, 0)
        _check_tuple_of("replicas", self.replicas, int)
        _check_tuple_of("isr", self.isr, int)
        check_int("leader", self.leader, -1)
        check_int("leader_epoch", self.leader_epoch, 0)
        check_int("partition_epoch", self.partition_epoch, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicDescription(_Wire):
    _NESTED: ClassVar[dict[str, type]] = {"partitions": PartitionDescription}
    name: str
    error: ErrorCode = ErrorCode.NONE
    topic_id: str | None = None
    unclean_leader_election: bool = False
    partitions: tuple[PartitionDescription, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValueError("name must be a string")
        _check_error(self.error)
        check_text("topic_id", self.topic_id, optional=True)
        check_bool("unclean_leader_election", self.unclean_leader_election)
        _check_tuple_of("partitions", self.partitions, PartitionDescription)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTopicsResponse(_Wire):
    WIRE_NAME: ClassVar[str] = "describe_topics_response"
    _NESTED: ClassVar[dict[str, type]] = {"topics": TopicDescription}
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    offset: int = -1
    topics: tuple[TopicDescription, ...] = ()

    def __post_init__(self) -> None:
        _check_error(self.error)
        _check_message(self.message)
        check_int("offset", self.offset, -1)
        _check_tuple_of("topics", self.topics, TopicDescription)


#: The most partitions one DescribeTopics answer describes. The controller
#: builds a description per partition between two inputs of its event loop
#: (about 20 µs each), and past some 400,000 the answer no longer fits one
#: frame: a request for more is refused, naming the count, before any is
#: built (before, describing a million partitions held the loop for
#: minutes, fenced every broker and was never sent). Kafka's
#: DescribeTopicPartitions pages by 2,000 (KIP-966).
DESCRIBE_PARTITIONS_MAX = 10_000

#: The most topics one ListTopics answer names; ``ListTopicsResponse.more``
#: says a next page follows (``after`` the last name).
LIST_TOPICS_PAGE_MAX = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ListTopicsRequest(_Wire):
    """The topics' names, ids and partition counts in name order, from
    after the name ``after`` (None: from the first), at most
    ``LIST_TOPICS_PAGE_MAX`` of them: what ``kraft-topics list`` shows,
    without describing any partition. ``linearizable`` as in
    ``DescribeClusterRequest``."""

    WIRE_NAME: ClassVar[str] = "list_topics"
    after: str | None = None
    linearizable: bool = False

    def __post_init__(self) -> None:
        check_text("after", self.after, optional=True)
        check_bool("linearizable", self.linearizable)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicListing(_Wire):
    name: str
    topic_id: str
    partition_count: int

    def __post_init__(self) -> None:
        check_text("name", self.name)
        check_text("topic_id", self.topic_id)
        check_int("partition_count", self.partition_count, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListTopicsResponse(_Wire):
    """``more``: topics after the last one listed remain (ask again with
    ``after`` set to its name)."""

    WIRE_NAME: ClassVar[str] = "list_topics_response"
    _NESTED: ClassVar[dict[str, type]] = {"topics": TopicListing}
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    offset: int = -1
    topics: tuple[TopicListing, ...] = ()
    more: bool = False

    def __post_init__(self) -> None:
        _check_error(self.error)
        _check_message(self.message)
        check_int("offset", self.offset, -1)
        _check_tuple_of("topics", self.topics, TopicListing)
        check_bool("more", self.more)


# ---------------------------------------------------------------------------
# The heartbeat, carried by a broker's Fetch (seed 001; KIP-631 fields)
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerHeartbeat:
    """The ``extension`` of a broker's Fetch: who it is and what it wants.
    The fetch offset itself is the Fetch's own (KIP-631
    ``CurrentMetadataOffset``)."""

    broker_id: int
    broker_epoch: int
    want_fence: bool = False
    want_shutdown: bool = False

    def __post_init__(self) -> None:
        check_int("broker_id", self.broker_id, 0)
        check_int("broker_epoch", self.broker_epoch, 0)
        check_bool("want_fence", self.want_fence)
        check_bool("want_shutdown", self.want_shutdown)

    def to_extension(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id,
            "broker_epoch": self.broker_epoch,
            "want_fence": self.want_fence,
            "want_shutdown": self.want_shutdown,
        }

    @classmethod
    def from_extension(cls, extension: Any) -> BrokerHeartbeat:
        """Raises ``ValueError`` unless ``extension`` is exactly the map
        ``to_extension`` writes."""
        if not isinstance(extension, dict) or set(extension) != _HEARTBEAT_KEYS:
            raise ValueError(f"a heartbeat is a map with keys {sorted(_HEARTBEAT_KEYS)}, got {_preview(extension)}")
        return cls(**extension)


_HEARTBEAT_KEYS = frozenset({"broker_id", "broker_epoch", "want_fence", "want_shutdown"})


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatReply:
    """The ``extension`` of the Fetch response (KIP-631
    BrokerHeartbeatResponse fields)."""

    error: ErrorCode = ErrorCode.NONE
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shutdown: bool = False

    def __post_init__(self) -> None:
        _check_error(self.error)
        check_bool("is_caught_up", self.is_caught_up)
        check_bool("is_fenced", self.is_fenced)
        check_bool("should_shutdown", self.should_shutdown)

    def to_extension(self) -> dict[str, Any]:
        return {
            "error": int(self.error),
            "is_caught_up": self.is_caught_up,
            "is_fenced": self.is_fenced,
            "should_shutdown": self.should_shutdown,
        }

    @classmethod
    def from_extension(cls, extension: Any) -> HeartbeatReply:
        """Raises ``ValueError`` unless ``extension`` is the map
        ``to_extension`` writes (an error-only map ``{"error": code}`` is
        accepted too: the runtime answers so before the controller is
        active)."""
        if not isinstance(extension, dict) or "error" not in extension or not set(extension) <= _REPLY_KEYS:
            raise ValueError(f"a heartbeat reply is a map with keys {sorted(_REPLY_KEYS)}, got {_preview(extension)}")
        values = dict(extension)
        values["error"] = _error_code(values["error"])
        return cls(**values)


_REPLY_KEYS = frozenset({"error", "is_caught_up", "is_fenced", "should_shutdown"})


Request = (
    RegisterBrokerRequest
    | UnregisterBrokerRequest
    | CreateTopicsRequest
    | DeleteTopicsRequest
    | DescribeClusterRequest
    | DescribeTopicsRequest
    | ListTopicsRequest
    | RegisterControllerRequest
    | DescribeControllersRequest
)
Response = (
    RegisterBrokerResponse
    | UnregisterBrokerResponse
    | CreateTopicsResponse
    | DeleteTopicsResponse
    | DescribeClusterResponse
    | DescribeTopicsResponse
    | ListTopicsResponse
    | RegisterControllerResponse
    | DescribeControllersResponse
)

REQUEST_TYPES: tuple[type, ...] = (
    RegisterBrokerRequest,
    UnregisterBrokerRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeTopicsRequest,
    RegisterControllerRequest,
    DescribeControllersRequest,
    ListTopicsRequest,
)
RESPONSE_TYPES: tuple[type, ...] = (
    RegisterBrokerResponse,
    UnregisterBrokerResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeClusterResponse,
    DescribeTopicsResponse,
    RegisterControllerResponse,
    DescribeControllersResponse,
    ListTopicsResponse,
)
_BY_WIRE_NAME: dict[str, type] = {cls.WIRE_NAME: cls for cls in REQUEST_TYPES + RESPONSE_TYPES}


def message_from_wire(data: Any) -> Request | Response:
    """Decode any request or response from its ``to_wire()`` list.

    Raises ``ValueError`` for anything malformed or of an unknown type.
    """
    if not isinstance(data, (list, tuple)) or len(data) != 2 or not isinstance(data[0], str):
        raise ValueError(f"a message is [wire_name, [fields]], got {_preview(data)}")
    cls = _BY_WIRE_NAME.get(data[0])
    if cls is None:
        raise ValueError(f"unknown message type {data[0]!r}")
    return cls.from_wire(data)


def encode_message(message: Request | Response) -> bytes:
    """A request or response as an application payload: msgpack of its
    ``to_wire()`` list."""
    return msgpack.packb(message.to_wire(), use_bin_type=True)


def decode_message(payload: bytes) -> Request | Response:
    """The request or response in an application payload.

    Raises ``ValueError`` for anything that is not a registration message.
    """
    try:
        data = msgpack.unpackb(payload, raw=False)
    except Exception as error:  # noqa: BLE001 - msgpack raises many kinds on bad input
        raise ValueError(f"not msgpack: {error}") from error
    return message_from_wire(data)


def error_response(request: Request, error: ErrorCode, message: str) -> Response:
    """The response to ``request`` that carries only ``error``."""
    match request:
        case RegisterBrokerRequest():
            return RegisterBrokerResponse(error=error, message=message)
        case UnregisterBrokerRequest():
            return UnregisterBrokerResponse(error=error, message=message)
        case CreateTopicsRequest():
            return CreateTopicsResponse(error=error, message=message)
        case DeleteTopicsRequest():
            return DeleteTopicsResponse(error=error, message=message)
        case DescribeClusterRequest():
            return DescribeClusterResponse(error=error, message=message)
        case DescribeTopicsRequest():
            return DescribeTopicsResponse(error=error, message=message)
        case ListTopicsRequest():
            return ListTopicsResponse(error=error, message=message)
        case RegisterControllerRequest():
            return RegisterControllerResponse(error=error, message=message)
        case DescribeControllersRequest():
            return DescribeControllersResponse(error=error, message=message)
    raise TypeError(f"not a controller request: {type(request).__name__}")
