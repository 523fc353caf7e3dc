"""The cluster image: brokers, topics and partitions, built by applying
metadata records in log order.

The same code runs on every controller and every broker, so the image is a
pure function of the records it applied: at the same offset every node's
image is identical (``fingerprint()``), and ``restore(snapshot())`` gives an
equal image. It implements the quorum's ``StateMachine`` protocol
(``apply``/``snapshot``/``restore``/``query``).

Values in the image are immutable (frozen dataclasses and tuples) and every
index is copy-on-write, so ``copy()`` costs a handful of dict copies at C
speed: the controller's speculative working copy of a 100,000-partition
image takes milliseconds, not a deep copy.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from types import MappingProxyType
from typing import Any, NamedTuple

import msgpack

from quorum import Entry, RecordKind, collector_paused

from ._errors import ErrorCode, InvalidRecordError, RecordDecodeError, SnapshotDecodeError
from ._lifecycle import BrokerState, state_of
from ._records import (
    FLAG_SET,
    LEADER_UNCHANGED,
    NO_LEADER,
    PARTITION_CHANGE_PREFIX,
    BrokerRegistrationChangeRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    check_partition_change,
    checked_partition_change,
    describe_record,
    record_from_values,
    unpack_record,
)

logger = logging.getLogger("pykraft.registration")

#: (topic id, partition id)
PartitionKey = tuple[str, int]

_SNAPSHOT_FORMAT = 1
# Format 2 adds the registered controllers (KIP-919). An image without any
# is still written in format 1, byte for byte what nodes before format 2
# wrote and read.
_SNAPSHOT_FORMAT_CONTROLLERS = 2
_EMPTY: frozenset = frozenset()
# ``apply`` pauses the cyclic collector for batches of at least this many
# entries, at most this many at a time (bounded pauses, even when recovery
# applies a whole log in one call).
_GC_PAUSE_MIN_ENTRIES = 256
_GC_PAUSE_MAX_ENTRIES = 20_000
# ``apply`` leaves at most this many partition changes' index updates
# pending (_SetIndex.pending) when it returns.
_PENDING_CHANGES_MAX = 1024


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker. ``broker_epoch`` is the offset of its
    ``RegisterBrokerRecord`` (KIP-631)."""

    broker_id: int
    incarnation_id: str
    listeners: tuple[tuple[str, str, int], ...]
    rack: str | None
    broker_epoch: int
    fenced: bool
    in_controlled_shutdown: bool

    @property
    def state(self) -> BrokerState:
        return state_of(True, self.fenced, self.in_controlled_shutdown)


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """A registered controller (KIP-919 ``RegisterControllerRecord``)."""

    controller_id: int
    incarnation_id: str
    listeners: tuple[tuple[str, str, int], ...]
    directory_id: str | None
    features: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str
    unclean_leader_election: bool


class PartitionState(NamedTuple):
    """One partition. ``leader`` is ``NO_LEADER`` (-1) when offline.

    A named tuple, not a frozen dataclass: applying a partition change builds
    one, and fencing a broker that leads 10,000 partitions builds 10,000 on
    every voter; a tuple is built several times faster."""

    topic_id: str
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    @property
    def key(self) -> PartitionKey:
        return (self.topic_id, self.partition_id)


class _SetIndex:
    """key -> set of members, shared copy-on-write between image copies.

    After ``copy()`` neither side owns any set: the first mutation of a key's
    set on either side copies that one set.

    ``pending`` holds updates noted but not yet made (partition changes note
    theirs there: a fence's 10,000 each move one key between two brokers'
    sets, and one set operation per broker costs far less than three method
    calls per partition). Every method applies them first, so nothing reads
    or changes the sets past them.
    """

    __slots__ = ("_sets", "_owned", "pending")

    def __init__(self, sets: dict[Any, set] | None = None) -> None:
        self._sets: dict[Any, set] = {} if sets is None else sets
        self._owned: set = set()  # keys whose set only this index holds
        #: key -> {member: True (added) or False (discarded)}, the last
        #: update noted per member; see ``apply_pending``.
        self.pending: dict[Any, dict[Any, bool]] = {}

    def add(self, key: Any, member: Any) -> None:
        if self.pending:
            self.apply_pending()
        members = self._sets.get(key)
        if members is None:
            self._sets[key] = {member}
            self._owned.add(key)
            return
        if key not in self._owned:
            members = self._sets[key] = set(members)
            self._owned.add(key)
        members.add(member)

    def discard(self, key: Any, member: Any) -> None:
        if self.pending:
            self.apply_pending()
        members = self._sets.get(key)
        if members is None or member not in members:
            return
        if len(members) == 1:
            del self._sets[key]
            self._owned.discard(key)
            return
        if key not in self._owned:
            members = self._sets[key] = set(members)
            self._owned.add(key)
        members.remove(member)

    def get(self, key: Any) -> frozenset | set:
        """The members of ``key`` (do not mutate the result)."""
        if self.pending:
            self.apply_pending()
        return self._sets.get(key, _EMPTY)

    def keys(self) -> Iterable[Any]:
        if self.pending:
            self.apply_pending()
        return self._sets.keys()

    def items(self) -> Iterable[tuple[Any, set]]:
        if self.pending:
            self.apply_pending()
        return self._sets.items()

    def copy(self) -> _SetIndex:
        if self.pending:
            self.apply_pending()
        self._owned = set()
        return _SetIndex(dict(self._sets))

    def copy_sets(self) -> _SetIndex:
        """A copy that shares no set: each side owns its sets (this one
        keeps owning what it owned), so neither copies one on its first
        change to it. For an index whose sets a big batch changes nearly
        all of on both sides (``ClusterImage.copy``)."""
        if self.pending:
            self.apply_pending()
        other = _SetIndex({key: set(members) for key, members in self._sets.items()})
        other._owned = set(other._sets)
        return other

    def apply_pending(self) -> None:
        """Make the noted updates: for one member of a set only the last
        ``add`` or ``discard`` matters, so this ends where making them in
        order would (the same sets, a key without members removed), with
        one copy-on-write per key at most."""
        sets = self._sets
        owned = self._owned
        pending, self.pending = self.pending, {}
        for key, member_changes in pending.items():
            added = [member for member, present in member_changes.items() if present]
            if len(added) == len(member_changes):
                removed: Iterable[Any] = ()
            elif not added:
                removed = member_changes  # its keys, every one discarded
            else:
                removed = [member for member, present in member_changes.items() if not present]
            members = sets.get(key)
            if members is None:
                members = set(added)
            elif key in owned:
                members.difference_update(removed)
                members.update(added)
            else:
                members = members.difference(removed)
                members.update(added)
            if members:
                sets[key] = members
                owned.add(key)
            elif key in sets:
                del sets[key]
                owned.discard(key)


class ClusterImage:
    """Brokers, topics and partitions as of ``offset``. See the module
    docstring. A fresh image is empty at offset 0."""

    def __init__(self) -> None:
        self._offset = 0
        self._brokers: dict[int, BrokerRegistration] = {}
        # Ids of the Online brokers: elections ask for them at every fence and
        # at every unfencing, and scanning 5,000 registrations each time made
        # a heartbeat storm quadratic (docs/benchmarks.md, "The controller at
        # scale").
        self._online: set[int] = set()
        self._controllers: dict[int, ControllerRegistration] = {}
        self._topics_by_id: dict[str, TopicInfo] = {}
        self._topics_by_name: dict[str, TopicInfo] = {}
        # The names in order, built on first use after a topic comes or
        # goes: every page of a listing (``topic_names_after``) would sort a
        # million names again. Never changed in place, so copies share it.
        self._sorted_topic_names: list[str] | None = None
        self._partitions: dict[PartitionKey, PartitionState] = {}
        # Indexes, so that fencing a broker that leads 10,000 partitions
        # touches those partitions, not all 100,000.
        self._partition_ids = _SetIndex()  # topic id -> partition ids
        self._leaderless = _SetIndex()  # topic id -> partition ids with no leader
        self._led_by = _SetIndex()  # broker id -> partition keys it leads
        self._in_isr = _SetIndex()  # broker id -> partition keys whose ISR holds it
        # Replica and ISR tuples are interned: a 1,000-broker cluster has far
        # fewer distinct replica sets than partitions.
        self._tuples: dict[tuple[int, ...], tuple[int, ...]] = {}
        # Partition changes whose index updates are noted, not yet made.
        self._pending_changes = 0
        #: Records skipped because they were undecodable or did not fit the
        #: image (diagnostics only; not part of the image's state).
        self.skipped_records = 0

    # ------------------------------------------------------------------
    # Copy, equality
    # ------------------------------------------------------------------

    def copy(self) -> ClusterImage:
        """An independent image equal to this one. Cheap: values are
        immutable and indexes copy-on-write, so the cost is a few dict copies
        (about O(partitions) at C speed).

        The leaders index is copied set by set instead: a fence, or a
        controlled shutdown, moves its broker's leaderships to nearly every
        other broker, so the first one after a copy (the controller's
        ``activate``) copied about a thousand shared sets on each side,
        the working image's and the committed one's, on the fence's path
        (docs/benchmarks.md, "The fence, a fifth time"); here, once, and
        the committed image keeps its own."""
        other = ClusterImage.__new__(ClusterImage)
        other._offset = self._offset
        other._brokers = dict(self._brokers)
        other._online = set(self._online)
        other._controllers = dict(self._controllers)
        other._topics_by_id = dict(self._topics_by_id)
        other._topics_by_name = dict(self._topics_by_name)
        other._sorted_topic_names = self._sorted_topic_names
        other._partitions = dict(self._partitions)
        other._partition_ids = self._partition_ids.copy()
        other._leaderless = self._leaderless.copy()
        other._led_by = self._led_by.copy_sets()
        other._in_isr = self._in_isr.copy()
        other._tuples = self._tuples  # an append-only cache of canonical tuples
        self._pending_changes = other._pending_changes = 0  # the index copies made them
        other.skipped_records = 0
        return other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClusterImage):
            return NotImplemented
        return (
            self._offset == other._offset
            and self._brokers == other._brokers
            and self._controllers == other._controllers
            and self._topics_by_id == other._topics_by_id
            and self._partitions == other._partitions
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"ClusterImage(offset={self._offset}, brokers={len(self._brokers)}, "
            f"topics={len(self._topics_by_id)}, partitions={len(self._partitions)})"
        )

    # ------------------------------------------------------------------
    # Applying records
    # ------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """The next offset to apply: one past the last record applied."""
        return self._offset

    def apply(self, entries: Sequence[Entry]) -> None:
        """Apply committed log entries in offset order (``StateMachine``).

        Entries below ``offset`` were applied already and are ignored;
        control records only advance the offset. A record that cannot be
        decoded, or that does not fit the image, is logged and skipped: it
        must never stop a node, and every node skips it alike. Raises
        nothing for any record (``ControllerStateMachine`` relies on it to
        declare ``apply_never_raises``).
        """
        if len(entries) < _GC_PAUSE_MIN_ENTRIES:
            self._apply_entries(entries)
            return
        # A big batch (a fence: one partition change per partition the
        # broker led) with the cyclic collector paused, a bounded run at a
        # time; see quorum/_gc_pause.py.
        for start in range(0, len(entries), _GC_PAUSE_MAX_ENTRIES):
            with collector_paused():
                self._apply_entries(entries[start : start + _GC_PAUSE_MAX_ENTRIES])

    def _apply_entries(self, entries: Sequence[Entry]) -> None:
        data_kind = RecordKind.DATA
        appliers = _APPLIERS
        prefix = PARTITION_CHANGE_PREFIX
        unpackb = msgpack.unpackb
        check = check_partition_change
        # Partition changes (the most frequent record, by far: a fence
        # writes one per partition the broker led) are gathered into a run
        # of field values, with their offsets, and applied together
        # (_change_partitions) before any other entry is looked at, so that
        # every record still applies in log order to the image as the
        # records before it left it.
        run: list[tuple[Any, ...]] = []
        run_offsets: list[int] = []
        next_offset = self._offset
        for offset, _epoch, kind, data in entries:  # an Entry is a named tuple: unpacking beats attributes
            if offset < next_offset:
                continue
            next_offset = offset + 1
            if kind is data_kind and data[:4] == prefix:
                # unpack_record's structural checks hold for these bytes
                # (PARTITION_CHANGE_PREFIX); the same decode and the
                # record's own validation, without the record object. On
                # any error the general path below decodes it again and
                # names the error as it always has.
                try:
                    values = unpackb(data, use_list=False, raw=False, strict_map_key=True)[2]
                    check(*values)
                except (ValueError, TypeError, msgpack.UnpackException):
                    pass
                else:
                    run.append(values)
                    run_offsets.append(offset)
                    continue
            if run:
                self._apply_change_run(run, run_offsets)
                run, run_offsets = [], []
            if kind is not data_kind:
                self._offset = offset + 1
                continue
            try:
                # apply_record without its checks: the offset was checked
                # above and unpack_record returns only record types.
                cls, values = unpack_record(data)
                if cls is PartitionChangeRecord:
                    # Not in the shape the encoder writes (or refused: then
                    # this raises the record's error).
                    self._change_partition(*checked_partition_change(values))
                else:
                    appliers[cls](self, record_from_values(cls, values), offset)
                self._offset = offset + 1
            except (RecordDecodeError, InvalidRecordError) as error:
                logger.error("skipped the record at offset %d: %s", offset, error)
                self.skipped_records += 1
                self._offset = offset + 1
        if run:
            self._apply_change_run(run, run_offsets)
        # Index updates wait for a batch's worth of changes, however the
        # records come (the quorum host hands a state machine one record per
        # call), and no longer: they hold memory until made.
        if self._pending_changes >= _PENDING_CHANGES_MAX:
            self._apply_pending_changes()

    def _apply_change_run(self, run: list[tuple[Any, ...]], offsets: list[int]) -> None:
        """Apply validated partition changes, the records at ``offsets``;
        log and skip each that does not fit the image, as ``_apply_entries``
        does any record."""
        count = len(run)
        done = 0
        while done < count:
            done = self._change_partitions(run, done)
            if done < count:
                error = self._change_refusal(*run[done])
                logger.error("skipped the record at offset %d: %s", offsets[done], error)
                self.skipped_records += 1
                done += 1
        self._offset = offsets[-1] + 1

    def apply_record(self, record: Record, offset: int) -> None:
        """Apply one record that sits at ``offset`` in the log.

        Raises ``InvalidRecordError`` (and changes nothing) when the record
        does not fit the image; ``ValueError`` when ``offset`` is below
        ``self.offset`` (records go in log order); ``TypeError`` for an
        object that is not a record.
        """
        if offset < self._offset:
            raise ValueError(f"offset {offset} is below the image's offset {self._offset}")
        apply = _APPLIERS.get(type(record))
        if apply is None:
            raise TypeError(f"not a metadata record: {type(record).__name__}")
        apply(self, record, offset)
        self._offset = offset + 1

    def apply_partition_changes(self, changes: Sequence[tuple[Any, ...]], offset: int) -> None:
        """Apply ``PartitionChangeRecord``s given as their field values (in
        field order, already validated as the record validates them:
        ``check_partition_change``), the first at ``offset`` and the others
        at the offsets after it: what ``apply_record`` does one record at a
        time, with the index updates applied together (the controller's
        fence, issue 21).

        Raises ``ValueError`` when ``offset`` is below ``self.offset``;
        ``InvalidRecordError`` at the first change that does not fit the
        image, with the changes before it applied and it and the rest not.
        """
        if offset < self._offset:
            raise ValueError(f"offset {offset} is below the image's offset {self._offset}")
        applied = 0
        try:
            applied = self._change_partitions(changes, 0)
            if applied < len(changes):
                raise self._change_refusal(*changes[applied])
        finally:
            self._apply_pending_changes()
            if applied:
                self._offset = offset + applied

    def _apply_register_broker(self, record: RegisterBrokerRecord, offset: int) -> None:
        previous = self._brokers.get(record.broker_id)
        if previous is not None and previous.broker_epoch >= offset:
            raise InvalidRecordError(
                f"{describe_record(record)} at offset {offset}: broker epochs must increase "
                f"(current epoch {previous.broker_epoch})"
            )
        # A new registration starts fenced (KIP-631 RegisterBrokerRecord
        # ``Fenced`` defaults to true) and replaces the previous one.
        self._online.discard(record.broker_id)
        self._brokers[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            listeners=record.listeners,
            rack=record.rack,
            broker_epoch=offset,
            fenced=True,
            in_controlled_shutdown=False,
        )

    def _apply_register_controller(self, record: RegisterControllerRecord, _offset: int) -> None:
        # KIP-919: the latest registration of a controller id replaces the
        # one before (a restart registers a new incarnation).
        self._controllers[record.controller_id] = ControllerRegistration(
            controller_id=record.controller_id,
            incarnation_id=record.incarnation_id,
            listeners=record.listeners,
            directory_id=record.directory_id,
            features=record.features,
        )

    def _registration_for(self, broker_id: int, broker_epoch: int, record: Record) -> BrokerRegistration:
        registration = self._brokers.get(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            current = None if registration is None else registration.broker_epoch
            raise InvalidRecordError(f"{describe_record(record)}: the broker's current epoch is {current}")
        return registration

    def _apply_registration_change(self, record: BrokerRegistrationChangeRecord, _offset: int) -> None:
        registration = self._registration_for(record.broker_id, record.broker_epoch, record)
        fenced = registration.fenced
        if record.fenced != 0:
            fenced = record.fenced == FLAG_SET
        in_controlled_shutdown = registration.in_controlled_shutdown
        if record.in_controlled_shutdown != 0:
            in_controlled_shutdown = record.in_controlled_shutdown == FLAG_SET
        if fenced or in_controlled_shutdown:
            self._online.discard(record.broker_id)
        else:
            self._online.add(record.broker_id)
        self._brokers[record.broker_id] = BrokerRegistration(
            broker_id=registration.broker_id,
            incarnation_id=registration.incarnation_id,
            listeners=registration.listeners,
            rack=registration.rack,
            broker_epoch=registration.broker_epoch,
            fenced=fenced,
            in_controlled_shutdown=in_controlled_shutdown,
        )

    def _apply_unregister_broker(self, record: UnregisterBrokerRecord, _offset: int) -> None:
        self._registration_for(record.broker_id, record.broker_epoch, record)
        del self._brokers[record.broker_id]
        self._online.discard(record.broker_id)

    def _apply_topic(self, record: TopicRecord, _offset: int) -> None:
        if record.name in self._topics_by_name or record.topic_id in self._topics_by_id:
            raise InvalidRecordError(f"{describe_record(record)}: the name or the id is taken")
        topic = TopicInfo(record.name, record.topic_id, record.unclean_leader_election)
        self._topics_by_name[record.name] = topic
        self._topics_by_id[record.topic_id] = topic
        self._sorted_topic_names = None

    def _apply_partition(self, record: PartitionRecord, _offset: int) -> None:
        key = (record.topic_id, record.partition_id)
        if record.topic_id not in self._topics_by_id:
            raise InvalidRecordError(f"{describe_record(record)}: unknown topic id")
        if key in self._partitions:
            raise InvalidRecordError(f"{describe_record(record)}: the partition exists")
        intern = self._tuples.setdefault
        replicas = intern(record.replicas, record.replicas)
        isr = intern(record.isr, record.isr)
        self._partitions[key] = PartitionState(
            record.topic_id,
            record.partition_id,
            replicas,
            isr,
            record.leader,
            record.leader_epoch,
            record.partition_epoch,
        )
        self._partition_ids.add(record.topic_id, record.partition_id)
        for broker_id in isr:
            self._in_isr.add(broker_id, key)
        if record.leader == NO_LEADER:
            self._leaderless.add(record.topic_id, record.partition_id)
        else:
            self._led_by.add(record.leader, key)

    def _apply_partition_change(self, record: PartitionChangeRecord, _offset: int) -> None:
        self._change_partition(record.topic_id, record.partition_id, record.isr, record.leader, record.replicas)

    def _change_partitions(self, changes: Sequence[tuple[Any, ...]], start: int) -> int:
        """Apply ``changes[start:]``, partition changes as their validated
        field values, in order, until one does not fit the image; returns
        its index (``len(changes)`` when all were applied), leaving it and
        those after it unapplied. ``_change_refusal`` says why it did not
        fit.

        A run at a time, not a method call per change: a fence passes here
        10,000 times on the controller's working image and on every voter,
        and the call cost about a fifth of it (docs/benchmarks.md, "The
        fence, a fifth time"). A single change comes here too
        (``_change_partition``), so the rules are written once; hence also
        the local names.
        """
        partitions = self._partitions
        get = partitions.get
        intern = self._tuples.setdefault
        new_state = _new_partition_state
        in_isr = self._in_isr.pending
        led_by = self._led_by.pending
        leaderless = self._leaderless.pending
        index = start
        try:
            for index in range(start, len(changes)):
                topic_id, partition_id, new_isr, new_leader, new_replicas = changes[index]
                key = (topic_id, partition_id)
                old = get(key)
                if old is None:
                    return index
                old_topic_id, old_partition_id, old_replicas, old_isr, old_leader, leader_epoch, partition_epoch = old
                replicas = old_replicas if new_replicas is None else intern(new_replicas, new_replicas)
                isr = old_isr if new_isr is None else intern(new_isr, new_isr)
                if new_leader == LEADER_UNCHANGED:
                    leader = old_leader
                else:
                    # Kafka's replay: the leader epoch moves whenever the
                    # record names a leader (even the same one).
                    leader = new_leader
                    leader_epoch += 1
                if new_isr is not None or new_replicas is not None:
                    for broker_id in isr:
                        if broker_id not in replicas:
                            return index
                if leader != NO_LEADER and leader not in isr:
                    return index
                partitions[key] = new_state(
                    (old_topic_id, old_partition_id, replicas, isr, leader, leader_epoch, partition_epoch + 1)
                )
                # The index updates, noted (_SetIndex.pending): ``_note``
                # written out where a fence passes 10,000 times (a broker
                # leaves an ISR, a leader moves); a call each cost more.
                if isr is not old_isr:
                    for broker_id in old_isr:
                        if broker_id not in isr:
                            noted = in_isr.get(broker_id)
                            if noted is None:
                                in_isr[broker_id] = {key: False}
                            else:
                                noted[key] = False
                    for broker_id in isr:
                        if broker_id not in old_isr:
                            _note(in_isr, broker_id, key, True)
                if leader != old_leader:
                    if old_leader == NO_LEADER:
                        _note(leaderless, old_topic_id, old_partition_id, False)
                    else:
                        noted = led_by.get(old_leader)
                        if noted is None:
                            led_by[old_leader] = {key: False}
                        else:
                            noted[key] = False
                    if leader == NO_LEADER:
                        _note(leaderless, old_topic_id, old_partition_id, True)
                    else:
                        noted = led_by.get(leader)
                        if noted is None:
                            led_by[leader] = {key: True}
                        else:
                            noted[key] = True
            index = len(changes)
            return index
        finally:
            self._pending_changes += index - start

    def _change_partition(
        self,
        topic_id: str,
        partition_id: int,
        new_isr: tuple[int, ...] | None,
        new_leader: int,
        new_replicas: tuple[int, ...] | None,
    ) -> None:
        """Apply a ``PartitionChangeRecord`` given as its (validated) field
        values. Raises ``InvalidRecordError`` (and changes nothing) when it
        does not fit the image."""
        change = (topic_id, partition_id, new_isr, new_leader, new_replicas)
        if self._change_partitions((change,), 0) == 0:
            raise self._change_refusal(*change)

    def _change_refusal(
        self,
        topic_id: str,
        partition_id: int,
        new_isr: tuple[int, ...] | None,
        new_leader: int,
        new_replicas: tuple[int, ...] | None,
    ) -> InvalidRecordError:
        """Why ``_change_partitions`` stopped at this change: the rules it
        applies, written out once more to name the one broken."""
        key = (topic_id, partition_id)
        described = _describe_change(key, new_isr, new_leader, new_replicas)
        old = self._partitions.get(key)
        if old is None:
            return InvalidRecordError(f"{described}: unknown partition")
        replicas = old.replicas if new_replicas is None else new_replicas
        isr = old.isr if new_isr is None else new_isr
        leader = old.leader if new_leader == LEADER_UNCHANGED else new_leader
        if new_isr is not None or new_replicas is not None:
            for broker_id in isr:
                if broker_id not in replicas:
                    return InvalidRecordError(f"{described}: isr {isr} is not within replicas {replicas}")
        if leader != NO_LEADER and leader not in isr:
            return InvalidRecordError(f"{described}: leader {leader} is not in the isr {isr}")
        raise AssertionError(f"{described} fits the image: nothing to refuse")

    def _apply_pending_changes(self) -> None:
        """Make the index updates partition changes noted."""
        self._in_isr.apply_pending()
        self._led_by.apply_pending()
        self._leaderless.apply_pending()
        self._pending_changes = 0

    def _apply_remove_topic(self, record: RemoveTopicRecord, _offset: int) -> None:
        topic = self._topics_by_id.get(record.topic_id)
        if topic is None:
            raise InvalidRecordError(f"{describe_record(record)}: unknown topic id")
        for partition_id in list(self._partition_ids.get(record.topic_id)):
            key = (record.topic_id, partition_id)
            partition = self._partitions.pop(key)
            for broker_id in partition.isr:
                self._in_isr.discard(broker_id, key)
            if partition.leader == NO_LEADER:
                self._leaderless.discard(record.topic_id, partition_id)
            else:
                self._led_by.discard(partition.leader, key)
            self._partition_ids.discard(record.topic_id, partition_id)
        del self._topics_by_id[record.topic_id]
        del self._topics_by_name[topic.name]
        self._sorted_topic_names = None

    def _apply_no_op(self, _record: NoOpRecord, _offset: int) -> None:
        pass

    # ------------------------------------------------------------------
    # Snapshots
    # ------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole image as compact, canonical msgpack (sorted; an ISR
        equal to the replicas is stored as nil)."""
        brokers = [
            [
                registration.broker_id,
                registration.incarnation_id,
                registration.listeners,
                registration.rack,
                registration.broker_epoch,
                registration.fenced,
                registration.in_controlled_shutdown,
            ]
            for _, registration in sorted(self._brokers.items())
        ]
        topics = []
        partitions = self._partitions
        for name in self._topic_names_in_order():
            topic = self._topics_by_name[name]
            rows = []
            for partition_id in sorted(self._partition_ids.get(topic.topic_id)):
                partition = partitions[(topic.topic_id, partition_id)]
                rows.append(
                    [
                        partition_id,
                        partition.replicas,
                        None if partition.isr == partition.replicas else partition.isr,
                        partition.leader,
                        partition.leader_epoch,
                        partition.partition_epoch,
                    ]
                )
            topics.append([name, topic.topic_id, topic.unclean_leader_election, rows])
        if not self._controllers:
            return msgpack.packb([_SNAPSHOT_FORMAT, self._offset, brokers, topics], use_bin_type=True)
        controllers = [
            [c.controller_id, c.incarnation_id, c.listeners, c.directory_id, c.features]
            for _, c in sorted(self._controllers.items())
        ]
        return msgpack.packb(
            [_SNAPSHOT_FORMAT_CONTROLLERS, self._offset, brokers, topics, controllers], use_bin_type=True
        )

    def restore(self, data: bytes) -> None:
        """Replace this image with the one ``snapshot()`` wrote.

        Raises ``SnapshotDecodeError`` (leaving the image unchanged) when
        ``data`` is not such a snapshot.
        """
        try:
            restored = _restore(data)
        except SnapshotDecodeError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, msgpack.UnpackException) as error:
            raise SnapshotDecodeError(f"not a cluster-image snapshot: {error!r}") from None
        self._offset = restored._offset
        self._brokers = restored._brokers
        self._online = restored._online
        self._controllers = restored._controllers
        self._topics_by_id = restored._topics_by_id
        self._topics_by_name = restored._topics_by_name
        self._sorted_topic_names = restored._sorted_topic_names
        self._partitions = restored._partitions
        self._partition_ids = restored._partition_ids
        self._leaderless = restored._leaderless
        self._led_by = restored._led_by
        self._in_isr = restored._in_isr
        self._tuples = restored._tuples
        self._pending_changes = 0

    def fingerprint(self) -> str:
        """A stable hash of the whole image (equal images, equal
        fingerprints, on any node and any Python process)."""
        return hashlib.sha256(self.snapshot()).hexdigest()

    # ------------------------------------------------------------------
    # Queries
    # ------------------------------------------------------------------

    @property
    def brokers(self) -> Mapping[int, BrokerRegistration]:
        """Registered brokers by id (read-only)."""
        return MappingProxyType(self._brokers)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self._brokers.get(broker_id)

    @property
    def controllers(self) -> Mapping[int, ControllerRegistration]:
        """Registered controllers by id (KIP-919; read-only)."""
        return MappingProxyType(self._controllers)

    def controller(self, controller_id: int) -> ControllerRegistration | None:
        return self._controllers.get(controller_id)

    def broker_state(self, broker_id: int) -> BrokerState:
        registration = self._brokers.get(broker_id)
        if registration is None:
            return BrokerState.OFFLINE
        return registration.state

    def brokers_in_state(self, state: BrokerState) -> list[int]:
        """Ids of the registered brokers in ``state``, ascending (Online:
        indexed, O(result))."""
        if state is BrokerState.ONLINE:
            return sorted(self._online)
        return sorted(broker_id for broker_id, registration in self._brokers.items() if registration.state is state)

    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        """Topics by name (read-only)."""
        return MappingProxyType(self._topics_by_name)

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics_by_name.get(name)

    def topic_by_id(self, topic_id: str) -> TopicInfo | None:
        return self._topics_by_id.get(topic_id)

    @property
    def partition_count(self) -> int:
        return len(self._partitions)

    def partition(self, topic_id: str, partition_id: int) -> PartitionState | None:
        return self._partitions.get((topic_id, partition_id))

    def _topic_names_in_order(self) -> list[str]:
        """Every topic name, sorted (cached; do not change the list)."""
        names = self._sorted_topic_names
        if names is None:
            names = self._sorted_topic_names = sorted(self._topics_by_name)
        return names

    def topic_names_after(self, after: str | None, limit: int) -> tuple[list[str], bool]:
        """At most ``limit`` topic names in name order, from after ``after``
        (None: from the first), and whether more follow: one page of a
        listing (the controller's ListTopics, a broker's list_topics)."""
        names = self._topic_names_in_order()
        start = 0 if after is None else bisect.bisect_right(names, after)
        page = names[start : start + limit]
        return page, start + len(page) < len(names)

    def partition_count_of(self, name: str) -> int:
        """How many partitions topic ``name`` has (O(1)).

        Raises ``KeyError`` for an unknown topic.
        """
        return len(self._partition_ids.get(self._topics_by_name[name].topic_id))

    def partitions_of(self, name: str) -> list[PartitionState]:
        """The partitions of topic ``name``, by partition id.

        Raises ``KeyError`` for an unknown topic.
        """
        topic_id = self._topics_by_name[name].topic_id
        return [self._partitions[(topic_id, pid)] for pid in sorted(self._partition_ids.get(topic_id))]

    def partitions_led_by(self, broker_id: int) -> frozenset[PartitionKey]:
        """Keys of the partitions ``broker_id`` leads (indexed: O(result))."""
        return frozenset(self._led_by.get(broker_id))

    def leader_count(self, broker_id: int) -> int:
        """How many partitions ``broker_id`` leads."""
        return len(self._led_by.get(broker_id))

    def partitions_with_replica_in_isr(self, broker_id: int) -> frozenset[PartitionKey]:
        """Keys of the partitions whose ISR holds ``broker_id`` (indexed)."""
        return frozenset(self._in_isr.get(broker_id))

    def partitions_in_isr_of(self, broker_id: int) -> list[PartitionState]:
        """The partitions whose ISR holds ``broker_id``, sorted by key
        (topic id, then partition id): the order a fence elects them in.

        ``[partition(*key) for key in sorted(partitions_with_replica_in_isr(
        broker_id))]``, cheaper (a fence's 10,000): partition ids sorted per
        topic rather than (topic id, partition id) tuples compared, and the
        states looked up in C."""
        by_topic: dict[str, list[int]] = {}
        for topic_id, partition_id in self._in_isr.get(broker_id):
            ids = by_topic.get(topic_id)
            if ids is None:
                by_topic[topic_id] = [partition_id]
            else:
                ids.append(partition_id)
        lookup = self._partitions.__getitem__
        states: list[PartitionState] = []
        for topic_id in sorted(by_topic):
            ids = by_topic[topic_id]
            ids.sort()
            states += map(lookup, zip(repeat(topic_id), ids))
        return states

    def partitions_without_leader(self) -> list[PartitionKey]:
        """Keys of the offline partitions, sorted (indexed: O(result))."""
        return sorted((topic_id, pid) for topic_id, pids in self._leaderless.items() for pid in pids)

    def iter_partitions(self) -> Iterable[PartitionState]:
        """Every partition, in no particular order."""
        return self._partitions.values()

    def describe_topic(self, name: str) -> dict[str, Any] | None:
        """A topic as plain data (msgpack- and JSON-friendly), or None:
        ``{"name", "topic_id", "unclean_leader_election", "partitions":
        [{"partition", "replicas", "isr", "leader", "leader_epoch",
        "partition_epoch"}]}``."""
        topic = self._topics_by_name.get(name)
        if topic is None:
            return None
        return {
            "name": topic.name,
            "topic_id": topic.topic_id,
            "unclean_leader_election": topic.unclean_leader_election,
            "partitions": [
                {
                    "partition": p.partition_id,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "partition_epoch": p.partition_epoch,
                }
                for p in self.partitions_of(name)
            ],
        }

    def describe_broker(self, broker_id: int) -> dict[str, Any] | None:
        """A registered broker as plain data, or None."""
        registration = self._brokers.get(broker_id)
        if registration is None:
            return None
        return {
            "broker_id": registration.broker_id,
            "broker_epoch": registration.broker_epoch,
            "incarnation_id": registration.incarnation_id,
            "state": registration.state.value,
            "listeners": [list(listener) for listener in registration.listeners],
            "rack": registration.rack,
        }

    def query(self, request: bytes) -> bytes | None:
        """Answer a msgpack query with msgpack (the quorum's ReadRequest).

        Queries: ``["describe_topic", name]``, ``["list_topics"]``,
        ``["cluster"]``, ``["broker", broker_id]``. Every answer is a map
        with the image's ``offset``; an unknown or malformed query gets
        ``{"error": INVALID_REQUEST, "message": ...}``. Never raises.
        """
        try:
            decoded = msgpack.unpackb(request, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException):
            decoded = None
        answer: dict[str, Any] = {"offset": self._offset}
        match decoded:
            case ["describe_topic", str() as name]:
                topic = self.describe_topic(name)
                if topic is None:
                    answer["error"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                answer["topic"] = topic
            case ["list_topics"]:
                answer["topics"] = list(self._topic_names_in_order())
            case ["cluster"]:
                answer["brokers"] = [self.describe_broker(broker_id) for broker_id in sorted(self._brokers)]
                answer["topic_count"] = len(self._topics_by_id)
                answer["partition_count"] = len(self._partitions)
                answer["offline_partition_count"] = sum(len(pids) for _, pids in self._leaderless.items())
            case ["broker", int() as broker_id] if not isinstance(broker_id, bool):
                broker = self.describe_broker(broker_id)
                if broker is None:
                    answer["error"] = int(ErrorCode.BROKER_ID_NOT_REGISTERED)
                answer["broker"] = broker
            case _:
                answer["error"] = int(ErrorCode.INVALID_REQUEST)
                answer["message"] = (
                    'expected ["describe_topic", name], ["list_topics"], ["cluster"] or ["broker", id]'
                )
        return msgpack.packb(answer, use_bin_type=True)

    def check_indexes(self) -> None:
        """Rebuild every index from the partitions and compare (for tests).

        Raises ``AssertionError`` on the first difference.
        """
        partition_ids: dict[str, set[int]] = {}
        leaderless: dict[str, set[int]] = {}
        led_by: dict[int, set[PartitionKey]] = {}
        in_isr: dict[int, set[PartitionKey]] = {}
        for key, partition in self._partitions.items():
            assert key == partition.key, (key, partition)
            partition_ids.setdefault(partition.topic_id, set()).add(partition.partition_id)
            if partition.leader == NO_LEADER:
                leaderless.setdefault(partition.topic_id, set()).add(partition.partition_id)
            else:
                led_by.setdefault(partition.leader, set()).add(key)
            for broker_id in partition.isr:
                in_isr.setdefault(broker_id, set()).add(key)
        assert dict(self._partition_ids.items()) == partition_ids, "partition ids index"
        assert dict(self._leaderless.items()) == leaderless, "leaderless index"
        assert dict(self._led_by.items()) == led_by, "led-by index"
        assert dict(self._in_isr.items()) == in_isr, "in-isr index"
        online = {broker_id for broker_id, entry in self._brokers.items() if entry.state is BrokerState.ONLINE}
        assert self._online == online, "online brokers index"
        assert set(self._topics_by_id) == {t.topic_id for t in self._topics_by_name.values()}, "topic maps"
        assert self._sorted_topic_names in (None, sorted(self._topics_by_name)), "sorted topic names"
        assert set(partition_ids) <= set(self._topics_by_id), "partitions of unknown topics"


_new_partition_state = partial(tuple.__new__, PartitionState)  # PartitionState(*fields), without its __new__'s call


def _note(pending: dict[Any, dict[Any, bool]], key: Any, member: Any, present: bool) -> None:
    """Note an index update in a ``_SetIndex.pending``."""
    members = pending.get(key)
    if members is None:
        pending[key] = {member: present}
    else:
        members[member] = present


def _describe_change(
    key: PartitionKey, isr: tuple[int, ...] | None, leader: int, replicas: tuple[int, ...] | None
) -> str:
    """``describe_record`` of the partition change with these (valid) field
    values, for an error message."""
    topic_id, partition_id = key
    record = PartitionChangeRecord(
        topic_id=topic_id, partition_id=partition_id, isr=isr, leader=leader, replicas=replicas
    )
    return describe_record(record)


_APPLIERS = {
    RegisterBrokerRecord: ClusterImage._apply_register_broker,
    BrokerRegistrationChangeRecord: ClusterImage._apply_registration_change,
    UnregisterBrokerRecord: ClusterImage._apply_unregister_broker,
    TopicRecord: ClusterImage._apply_topic,
    PartitionRecord: ClusterImage._apply_partition,
    PartitionChangeRecord: ClusterImage._apply_partition_change,
    RemoveTopicRecord: ClusterImage._apply_remove_topic,
    NoOpRecord: ClusterImage._apply_no_op,
    RegisterControllerRecord: ClusterImage._apply_register_controller,
}


def _restore(data: bytes) -> ClusterImage:
    """Build an image from snapshot bytes; lets structural errors escape as
    ValueError/TypeError/KeyError/IndexError for ``restore`` to wrap."""
    decoded = msgpack.unpackb(data, use_list=False, raw=False)
    if type(decoded) is tuple and len(decoded) == 5 and decoded[0] == _SNAPSHOT_FORMAT_CONTROLLERS:
        _, offset, brokers, topics, controllers = decoded
    elif type(decoded) is tuple and len(decoded) == 4 and decoded[0] == _SNAPSHOT_FORMAT:
        _, offset, brokers, topics = decoded
        controllers = ()
    else:
        raise SnapshotDecodeError("not a cluster-image snapshot of format 1 or 2")
    image = ClusterImage()
    for controller_id, incarnation_id, listeners, directory_id, features in controllers:
        # Through the record's own checks: a snapshot is read from disk or
        # from a peer.
        record = RegisterControllerRecord(
            controller_id=controller_id,
            incarnation_id=incarnation_id,
            listeners=listeners,
            directory_id=directory_id,
            features=features,
        )
        image._apply_register_controller(record, 0)
    if type(offset) is not int or offset < 0:
        raise SnapshotDecodeError(f"bad offset {offset!r}")
    image._offset = offset
    for broker_id, incarnation_id, listeners, rack, broker_epoch, fenced, in_controlled_shutdown in brokers:
        if type(broker_id) is not int or type(broker_epoch) is not int or broker_epoch >= offset:
            raise SnapshotDecodeError(f"bad broker {broker_id!r} epoch {broker_epoch!r}")
        image._brokers[broker_id] = BrokerRegistration(
            broker_id, incarnation_id, listeners, rack, broker_epoch, bool(fenced), bool(in_controlled_shutdown)
        )
        if not fenced and not in_controlled_shutdown:
            image._online.add(broker_id)
    intern = image._tuples.setdefault
    partitions = image._partitions
    partition_ids = image._partition_ids._sets
    leaderless = image._leaderless._sets
    led_by = image._led_by._sets
    in_isr = image._in_isr._sets
    for name, topic_id, unclean, rows in topics:
        if type(name) is not str or type(topic_id) is not str or topic_id in image._topics_by_id:
            raise SnapshotDecodeError(f"bad topic {name!r} {topic_id!r}")
        topic = TopicInfo(name, topic_id, bool(unclean))
        image._topics_by_name[name] = topic
        image._topics_by_id[topic_id] = topic
        image._sorted_topic_names = None
        ids = partition_ids[topic_id] = set()
        for partition_id, replicas, isr, leader, leader_epoch, partition_epoch in rows:
            if type(replicas) is not tuple or not replicas:
                raise SnapshotDecodeError(f"bad replicas {replicas!r}")
            replicas = intern(replicas, replicas)
            isr = replicas if isr is None else intern(isr, isr)
            key = (topic_id, partition_id)
            partitions[key] = PartitionState(
                topic_id, partition_id, replicas, isr, leader, leader_epoch, partition_epoch
            )
            ids.add(partition_id)
            for broker_id in isr:
                members = in_isr.get(broker_id)
                if members is None:
                    in_isr[broker_id] = {key}
                else:
                    members.add(key)
            if leader == NO_LEADER:
                leaderless.setdefault(topic_id, set()).add(partition_id)
            else:
                members = led_by.get(leader)
                if members is None:
                    led_by[leader] = {key}
                else:
                    members.add(key)
        if not ids:
            del partition_ids[topic_id]
    # Freshly built sets belong to this image alone.
    for index in (image._partition_ids, image._leaderless, image._led_by, image._in_isr):
        index._owned = set(index._sets)
    return image
