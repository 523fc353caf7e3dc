"""Metadata records: what the controller writes to the log.

Each record is a frozen, slotted, keyword-only dataclass that validates its
fields on construction (``ValueError``). On the log a record is msgpack
``[type_code, version, [field, ...]]``; type codes are Kafka's metadata
record API keys (KIP-631, ``metadata/src/main/resources/common/metadata``),
every type is at version 0.

The broker epoch is *not* a field of ``RegisterBrokerRecord``: it is the
offset at which that record sits in the log (KIP-631's choice; unique and
increasing across all brokers because log offsets are), so whoever applies
the record supplies it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, ClassVar

import msgpack

from ._errors import RecordDecodeError

#: ``PartitionChangeRecord.leader``: the leader does not change.
LEADER_UNCHANGED = -2
#: A partition without a leader (offline), as in Kafka.
NO_LEADER = -1

#: ``BrokerRegistrationChangeRecord`` flags (Kafka's int8 encoding).
FLAG_SET = 1
FLAG_CLEAR = -1
FLAG_UNCHANGED = 0

_TOPIC_NAME_MAX_CHARS = 249  # Kafka's limit (a topic's directory name + suffixes fit in 255)
_TOPIC_NAME_PATTERN = re.compile(r"[a-zA-Z0-9._-]+")
_TEXT_MAX_CHARS = 1024  # incarnation ids, topic ids, listener names, hosts, racks
_FEATURES_MAX = 32  # supported feature ranges a controller may name
# Listeners one registration may name, and a listener host's length (a DNS
# name is at most 253 characters): every registration is in every image,
# snapshot and DescribeCluster answer, so one broker must not be able to
# make them megabytes (a 1 MiB request held some 30,000 listeners).
_LISTENERS_MAX = 16
_HOST_MAX_CHARS = 255
_SHORT_IDS_MAX = 8  # ISRs up to this long take check_partition_change's fast path


def topic_name_problem(name: object) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's ``Topic.validate``
    rules), or None when it is."""
    if not isinstance(name, str):
        return f"a topic name is a string, not {type(name).__name__}"
    if not name:
        return "a topic name cannot be empty"
    if name in (".", ".."):
        return f"a topic name cannot be {name!r}"
    if len(name) > _TOPIC_NAME_MAX_CHARS:
        return f"a topic name is at most {_TOPIC_NAME_MAX_CHARS} characters, got {len(name)}"
    if not _TOPIC_NAME_PATTERN.fullmatch(name):
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


# ---------------------------------------------------------------------------
# Field checks (shared with the request dataclasses)
# ---------------------------------------------------------------------------


def check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> None:
    """Raise ``ValueError`` unless ``value`` is an int (not a bool) in range."""
    if type(value) is not int:
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be {bound}, got {value}")


def check_text(name: str, value: object, *, optional: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` is a non-empty bounded string
    (or None when ``optional``)."""
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    if not value or len(value) > _TEXT_MAX_CHARS:
        raise ValueError(f"{name} must have 1 to {_TEXT_MAX_CHARS} characters, got {len(value)}")


def check_requested_text(name: str, value: object, *, optional: bool = False) -> None:
    """``check_text``, and printable: held to by the text a request brings
    (a rack, a listener's name and host), which operators later read in
    log lines, event logs and ``kraft-cluster describe``, where a newline
    or an escape code could forge or hide a line. Records already in a log
    are read with ``check_text`` alone."""
    check_text(name, value, optional=optional)
    if isinstance(value, str) and not value.isprintable():
        raise ValueError(f"{name} must be printable, got {value!r:.80}")


def check_bool(name: str, value: object) -> None:
    if type(value) is not bool:
        raise ValueError(f"{name} must be a bool, got {type(value).__name__}")


def check_broker_ids(name: str, value: object) -> None:
    """A non-empty tuple of distinct broker ids."""
    if type(value) is not tuple or not value:
        raise ValueError(f"{name} must be a non-empty tuple of broker ids, got {value!r}")
    for broker_id in value:
        if type(broker_id) is not int or broker_id < 0:
            raise ValueError(f"{name} must hold broker ids >= 0, got {broker_id!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"{name} has a broker twice: {value}")


def check_listeners(value: object) -> None:
    """A non-empty tuple of ``(name, host, port)`` with distinct names."""
    if type(value) is not tuple or not value:
        raise ValueError(f"listeners must be a non-empty tuple of (name, host, port), got {value!r:.80}")
    names = set()
    for listener in value:
        if type(listener) is not tuple or len(listener) != 3:
            raise ValueError(f"a listener is a (name, host, port) tuple, got {listener!r:.80}")
        name, host, port = listener
        check_text("listener name", name)
        check_text("listener host", host)
        check_int("listener port", port, 0, 65535)
        if name in names:
            raise ValueError(f"listener name {name!r} appears twice")
        names.add(name)


def check_requested_listeners(value: object) -> None:
    """``check_listeners``, and the bounds a registration request is held
    to: at most ``_LISTENERS_MAX`` listeners, hosts of at most
    ``_HOST_MAX_CHARS``. Records already in a log are read without these
    bounds (written before them, they stay readable)."""
    check_listeners(value)
    assert isinstance(value, tuple)
    if len(value) > _LISTENERS_MAX:
        raise ValueError(f"at most {_LISTENERS_MAX} listeners may be registered, got {len(value)}")
    for name, host, _port in value:
        check_requested_text("listener name", name)
        check_requested_text("listener host", host)
        if len(host) > _HOST_MAX_CHARS:
            raise ValueError(f"a listener host has at most {_HOST_MAX_CHARS} characters, got {len(host)}")


def check_features(value: object) -> None:
    """A tuple of ``(name, min_version, max_version)`` with distinct names
    and 0 <= min <= max (KIP-919's supported feature ranges)."""
    if type(value) is not tuple or len(value) > _FEATURES_MAX:
        raise ValueError(f"features must be a tuple of at most {_FEATURES_MAX} (name, min, max), got {value!r:.80}")
    names = set()
    for feature in value:
        if type(feature) is not tuple or len(feature) != 3:
            raise ValueError(f"a feature is a (name, min_version, max_version) tuple, got {feature!r:.80}")
        name, low, high = feature
        check_text("feature name", name)
        check_int("feature min_version", low, 0, 32767)
        check_int("feature max_version", high, low, 32767)
        if name in names:
            raise ValueError(f"feature {name!r} appears twice")
        names.add(name)


def check_controller_fields(controller: Any) -> None:
    """The fields a controller registration carries wherever it appears
    (KIP-919: the request, the record, the description): an id >= 0, an
    incarnation id, listeners, an optional directory id and feature
    ranges. Raises ``ValueError`` naming the first bad field."""
    check_int("controller_id", controller.controller_id, 0)
    check_text("incarnation_id", controller.incarnation_id)
    check_listeners(controller.listeners)
    check_text("directory_id", controller.directory_id, optional=True)
    check_features(controller.features)


def check_flag(name: str, value: object) -> None:
    if type(value) is not int or value not in (FLAG_SET, FLAG_CLEAR, FLAG_UNCHANGED):
        raise ValueError(f"{name} must be 1 (set), -1 (clear) or 0 (unchanged), got {value!r}")


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord:
    """A broker (re)joins. Its epoch is this record's offset; it starts
    fenced and not in controlled shutdown (KIP-631). A new incarnation's
    record replaces the previous registration of the same id."""

    TYPE_CODE: ClassVar[int] = 0
    broker_id: int
    incarnation_id: str
    listeners: tuple[tuple[str, str, int], ...]
    rack: str | None = None

    def __post_init__(self) -> None:
        check_int("broker_id", self.broker_id, 0)
        check_text("incarnation_id", self.incarnation_id)
        check_listeners(self.listeners)
        check_text("rack", self.rack, optional=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationChangeRecord:
    """Fence/unfence a broker or mark it in controlled shutdown (KIP-631,
    KIP-841). Applies only to the registration with ``broker_epoch``."""

    TYPE_CODE: ClassVar[int] = 17
    broker_id: int
    broker_epoch: int
    fenced: int = FLAG_UNCHANGED
    in_controlled_shutdown: int = FLAG_UNCHANGED

    def __post_init__(self) -> None:
        check_int("broker_id", self.broker_id, 0)
        check_int("broker_epoch", self.broker_epoch, 0)
        check_flag("fenced", self.fenced)
        check_flag("in_controlled_shutdown", self.in_controlled_shutdown)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRecord:
    """An administrator removed the broker's registration (KIP-631)."""

    TYPE_CODE: ClassVar[int] = 1
    broker_id: int
    broker_epoch: int

    def __post_init__(self) -> None:
        check_int("broker_id", self.broker_id, 0)
        check_int("broker_epoch", self.broker_epoch, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord:
    """A topic is created; its partitions follow as ``PartitionRecord``s in
    the same batch."""

    TYPE_CODE: ClassVar[int] = 2
    name: str
    topic_id: str
    unclean_leader_election: bool = False

    def __post_init__(self) -> None:
        problem = topic_name_problem(self.name)
        if problem is not None:
            raise ValueError(problem)
        check_text("topic_id", self.topic_id)
        check_bool("unclean_leader_election", self.unclean_leader_election)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord:
    """A partition's full state. The ISR is never empty and the leader is
    an ISR member or ``NO_LEADER`` (Kafka without KIP-966 ELR)."""

    TYPE_CODE: ClassVar[int] = 3
    topic_id: str
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0

    def __post_init__(self) -> None:
        check_text("topic_id", self.topic_id)
        check_int("partition_id", self.partition_id, 0)
        check_broker_ids("replicas", self.replicas)
        check_broker_ids("isr", self.isr)
        if not set(self.isr) <= set(self.replicas):
            raise ValueError(f"isr {self.isr} is not a subset of replicas {self.replicas}")
        check_int("leader", self.leader, NO_LEADER)
        if self.leader != NO_LEADER and self.leader not in self.isr:
            raise ValueError(f"leader {self.leader} is not in the isr {self.isr}")
        check_int("leader_epoch", self.leader_epoch, 0)
        check_int("partition_epoch", self.partition_epoch, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChangeRecord:
    """A delta to one partition (KIP-631): ``isr``/``replicas`` are None when
    unchanged; ``leader`` is ``LEADER_UNCHANGED`` (-2), ``NO_LEADER`` (-1) or
    a broker id. Applying it bumps the leader epoch when ``leader`` is not
    -2 (there is no leader-epoch field, as in Kafka) and the partition epoch
    always."""

    TYPE_CODE: ClassVar[int] = 5
    topic_id: str
    partition_id: int
    isr: tuple[int, ...] | None = None
    leader: int = LEADER_UNCHANGED
    replicas: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_partition_change(self.topic_id, self.partition_id, self.isr, self.leader, self.replicas)


def check_partition_change(
    topic_id: object, partition_id: object, isr: object, leader: object, replicas: object
) -> None:
    """``PartitionChangeRecord``'s validation, on its field values (in field
    order), so that a voter can check a decoded change without building the
    record (``unpack_record``). Raises ``ValueError``."""
    # The usual shape accepted in one pass (a fence checks 10,000 of them on
    # the controller and on every voter): each test below is at least as
    # strict as the full check after it, which runs, with its messages, on
    # anything else.
    if (
        type(topic_id) is str
        and 0 < len(topic_id) <= _TEXT_MAX_CHARS
        and type(partition_id) is int
        and partition_id >= 0
        and type(leader) is int
        and leader >= LEADER_UNCHANGED
        and replicas is None
    ):
        if isr is None:
            return
        if type(isr) is tuple and 0 < len(isr) <= _SHORT_IDS_MAX:
            for broker_id in isr:
                if type(broker_id) is not int or broker_id < 0:
                    break
            else:
                if len(isr) == 1 or len(set(isr)) == len(isr):
                    return
    check_text("topic_id", topic_id)
    check_int("partition_id", partition_id, 0)
    if isr is not None:
        check_broker_ids("isr", isr)
    check_int("leader", leader, LEADER_UNCHANGED)
    if replicas is not None:
        check_broker_ids("replicas", replicas)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord:
    """A topic and all its partitions are deleted."""

    TYPE_CODE: ClassVar[int] = 9
    topic_id: str

    def __post_init__(self) -> None:
        check_text("topic_id", self.topic_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterControllerRecord:
    """A controller (a quorum voter running the controller) registered
    with the active controller (KIP-919): where it listens, the directory
    it votes with and the feature versions it supports, so that brokers
    and ``describe`` see the controllers. A new incarnation's record (a
    restart) replaces the previous one of the same id. Not a broker: no
    epoch, no fencing (its liveness is the quorum's business)."""

    TYPE_CODE: ClassVar[int] = 27
    controller_id: int
    incarnation_id: str
    listeners: tuple[tuple[str, str, int], ...]
    directory_id: str | None = None
    features: tuple[tuple[str, int, int], ...] = ()

    def __post_init__(self) -> None:
        check_controller_fields(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class NoOpRecord:
    """Written when the log is otherwise idle, so that followers and brokers
    can tell "caught up" from "stuck" (KIP-835, ``metadata.max.idle.interval.ms``)."""

    TYPE_CODE: ClassVar[int] = 20


Record = (
    RegisterBrokerRecord
    | BrokerRegistrationChangeRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | RegisterControllerRecord
    | NoOpRecord
)

RECORD_TYPES: tuple[type, ...] = (
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
    TopicRecord,
    PartitionRecord,
    PartitionChangeRecord,
    RemoveTopicRecord,
    BrokerRegistrationChangeRecord,
    NoOpRecord,
    RegisterControllerRecord,
)

_RECORD_VERSION = 0
_FIELD_NAMES: dict[type, tuple[str, ...]] = {cls: tuple(f.name for f in fields(cls)) for cls in RECORD_TYPES}
_FIELD_COUNTS: dict[type, int] = {cls: len(names) for cls, names in _FIELD_NAMES.items()}
_TYPES_BY_CODE: dict[int, type] = {cls.TYPE_CODE: cls for cls in RECORD_TYPES}  # type: ignore[attr-defined]

#: The first four bytes of every encoded ``PartitionChangeRecord`` of this
#: version: ``[type code, version, [its 5 fields]]`` as msgpack writes it, a
#: fixarray of 3, two fixints, a fixarray of 5. Bytes that start so and
#: decode at all decode to that shape, so ``unpack_record``'s structural
#: checks hold for them without being made (a voter applying a fence's
#: 10,000 changes, ``ClusterImage._apply_entries``).
PARTITION_CHANGE_PREFIX: bytes = msgpack.packb(
    (PartitionChangeRecord.TYPE_CODE, _RECORD_VERSION, (0,) * _FIELD_COUNTS[PartitionChangeRecord])
)[:4]
if PARTITION_CHANGE_PREFIX != bytes(
    (0x93, PartitionChangeRecord.TYPE_CODE, _RECORD_VERSION, 0x90 | _FIELD_COUNTS[PartitionChangeRecord])
):  # not an assert: it must hold under python -O too
    raise RuntimeError(f"unexpected PartitionChangeRecord prefix {PARTITION_CHANGE_PREFIX!r}")


def _values_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function returning a record's field values as a tuple, in field
    order (``attrgetter`` returns a bare value for one name, and takes no
    zero names)."""
    if not names:
        return lambda _record: ()
    if len(names) == 1:
        getter = attrgetter(names[0])
        return lambda record: (getter(record),)
    return attrgetter(*names)


# Per-record Python cost matters here: fencing a broker that leads 10,000
# partitions encodes, applies and decodes 10,000 records on the path from
# decision to commit (docs/benchmarks.md, "The controller at scale").
_VALUES: dict[type, Callable[[Any], tuple[Any, ...]]] = {cls: _values_getter(_FIELD_NAMES[cls]) for cls in RECORD_TYPES}


def encode_record(record: Record) -> bytes:
    """The record's log bytes: msgpack ``[type_code, version, [fields]]``.

    Raises ``TypeError`` for an object that is not a record.
    """
    values = _VALUES.get(type(record))
    if values is None:
        raise TypeError(f"not a metadata record: {type(record).__name__}")
    # msgpack writes a tuple as an array, exactly as a list.
    return msgpack.packb((record.TYPE_CODE, _RECORD_VERSION, values(record)), use_bin_type=True)


def encode_records(records: Iterable[Record]) -> list[bytes]:
    """``encode_record`` for each record, with one packer for all of them
    (a packer per call costs as much as the packing). Raises ``TypeError``
    for an object that is not a record."""
    pack = msgpack.Packer(use_bin_type=True).pack
    encoded = []
    for record in records:
        values = _VALUES.get(type(record))
        if values is None:
            raise TypeError(f"not a metadata record: {type(record).__name__}")
        encoded.append(pack((record.TYPE_CODE, _RECORD_VERSION, values(record))))
    return encoded


def encode_partition_changes(changes: Iterable[tuple[Any, ...]]) -> list[bytes]:
    """The log bytes of ``PartitionChangeRecord``s given as their field
    values (in field order): byte for byte what ``encode_records`` writes
    for the records, without building them (a fence writes 10,000). Each is
    validated as the record validates itself (``check_partition_change``).

    Raises ``ValueError`` for values the record refuses.
    """
    pack = msgpack.Packer(use_bin_type=True).pack
    type_code = PartitionChangeRecord.TYPE_CODE
    field_count = len(_FIELD_NAMES[PartitionChangeRecord])
    encoded = []
    for values in changes:
        if type(values) is not tuple or len(values) != field_count:
            raise ValueError(f"a partition change is a tuple of its {field_count} field values, got {values!r:.80}")
        check_partition_change(*values)
        encoded.append(pack((type_code, _RECORD_VERSION, values)))
    return encoded


def _new_record(cls: type, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
    """``cls(**dict(zip(names, values)))`` without the keyword dictionary:
    set each slot as the frozen dataclass's ``__init__`` does, then run its
    validation (``ValueError``)."""
    record = _object_new(cls)
    for name, value in zip(names, values):
        _object_setattr(record, name, value)
    post_init = getattr(cls, "__post_init__", None)
    if post_init is not None:
        post_init(record)
    return record


_object_new = object.__new__
_object_setattr = object.__setattr__


def decode_record(data: bytes) -> Record:
    """The record ``data`` holds.

    Raises ``RecordDecodeError`` for anything malformed: not msgpack, trailing
    bytes, an unknown type code or version, a wrong number of fields, or a
    field value the record's validation refuses.
    """
    cls, values = unpack_record(data)
    return record_from_values(cls, values)


def unpack_record(data: bytes) -> tuple[type, tuple[Any, ...]]:
    """The record type and the raw field values (in field order) ``data``
    holds, with the fields not yet validated: ``record_from_values`` (or,
    for a ``PartitionChangeRecord``, ``check_partition_change``) does that.

    Raises ``RecordDecodeError`` for anything malformed in the structure: not
    msgpack, trailing bytes, an unknown type code or version, a wrong number
    of fields.
    """
    try:
        decoded = msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise RecordDecodeError(f"not a msgpack record: {error}") from None
    if type(decoded) is not tuple or len(decoded) != 3:
        raise RecordDecodeError("a record is [type_code, version, [fields]]")
    type_code, version, values = decoded
    cls = _TYPES_BY_CODE.get(type_code) if type(type_code) is int else None
    if cls is None:
        raise RecordDecodeError(f"unknown record type {type_code!r}")
    if version != _RECORD_VERSION or type(version) is not int:
        raise RecordDecodeError(f"unsupported version {version!r} of {cls.__name__}")
    if type(values) is not tuple or len(values) != _FIELD_COUNTS[cls]:
        raise RecordDecodeError(f"{cls.__name__} v{version} has {len(_FIELD_NAMES[cls])} fields")
    return cls, values


def record_from_values(cls: type, values: tuple[Any, ...]) -> Record:
    """The record of type ``cls`` with the field values ``unpack_record``
    returned. Raises ``RecordDecodeError`` when the record's validation
    refuses a value."""
    try:
        return _new_record(cls, _FIELD_NAMES[cls], values)
    except (ValueError, TypeError) as error:
        raise RecordDecodeError(f"invalid {cls.__name__}: {error}") from None


def checked_partition_change(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """The field values of a ``PartitionChangeRecord`` from ``unpack_record``,
    validated exactly as ``record_from_values`` validates them, without
    building the record. Raises ``RecordDecodeError`` as it does."""
    try:
        check_partition_change(*values)
    except (ValueError, TypeError) as error:
        raise RecordDecodeError(f"invalid {PartitionChangeRecord.__name__}: {error}") from None
    return values


def describe_record(record: Record) -> str:
    """One deterministic line for logs and test failures."""
    names = _FIELD_NAMES[type(record)]
    body = " ".join(f"{name}={_short(getattr(record, name))}" for name in names)
    return f"{type(record).__name__}({body})"


def _short(value: Any) -> str:
    if isinstance(value, tuple) and len(value) > 8:
        return f"({', '.join(map(repr, value[:8]))}, ... {len(value)} items)"
    return repr(value)
