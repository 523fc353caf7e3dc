"""The Kafka target's workload: topic creations, deletions and Metadata
reads through ``confluent_kafka`` (librdkafka), recorded in the same
register model as the pykraft ``metadata`` workload (``_workloads``):
key ``topic/<name>``, value ``{"partitions": p, "replication_factor": r}``
while the topic exists and ``null`` when it does not; CreateTopics is
``cas [null, descriptor]``, DeleteTopics ``write null``, a Metadata read a
``read`` in mode ``broker`` (bounded staleness) whose ``node`` is the
broker that answered (librdkafka's ``orig_broker_id``; before librdkafka
has learned the id of the broker it bootstrapped from, that is -1 and the
answer names the address it came from, ``host:port/bootstrap``, which is
one client link and so one broker).

Kafka's Metadata answers carry no metadata-log offset, so the checker's
stale-read check can only use its *value* rule: a read is stale when the
value it returns has exactly one writer and a later write completed more
than the bound before the read. For that rule to see stale answers,
each topic name lives once: created (until one attempt is acknowledged or
may have been), read for its life (``TOPIC_LIFE_S`` to twice that), then
either kept (half the names: retired without a deletion, so that "no such
topic" has no writer and a broker that misses the creation is caught) or
deleted once and read for ``READS_AFTER_DELETE_S`` more (so that a broker
still showing it is caught); a name is never created again. Both spans are
longer than the staleness bound plus the longest broker cut of the
scenarios, so that a broker answering from an old image is asked about
topics whose change is older than the bound. docs/kafka-campaign.md has
the model.

Each client holds one reading ``AdminClient`` per broker, bootstrapped
from its own link to that broker and used for Metadata only (librdkafka
connects sparsely: it never dials the other brokers, so a read meant for
broker B goes to B; ``node`` records who answered), and one writing client
bootstrapped from all of them for CreateTopics and DeleteTopics. Every
call runs in a worker thread with a bounded timeout.

Outcomes: ``ok`` when Kafka answered success; ``fail`` only for answers
that prove nothing was written (TOPIC_ALREADY_EXISTS, invalid arguments,
UNKNOWN_TOPIC_OR_PART for a delete); ``info`` for everything else (a
timeout, NOT_CONTROLLER after the request was forwarded, a lost
connection): it may have happened.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from ._history import HistoryRecorder
from ._workloads import FINAL_READS_S_MAX, ClientEndpoints, WorkloadOptions, topic_descriptor

logger = logging.getLogger("pykraft.campaign")

#: Error codes that prove a CreateTopics wrote nothing (Kafka's names).
CREATE_REFUSED = frozenset(
    {"TOPIC_ALREADY_EXISTS", "INVALID_REPLICATION_FACTOR", "INVALID_PARTITIONS", "INVALID_TOPIC_EXCEPTION", "INVALID_CONFIG", "POLICY_VIOLATION", "INVALID_REQUEST"}
)
#: ... and a DeleteTopics.
DELETE_REFUSED = frozenset({"UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID", "INVALID_TOPIC_EXCEPTION", "INVALID_REQUEST"})
#: How long a topic lives (s, at least; each draws up to twice as long, so
#: that lives overlap) before it is deleted, and is read after its
#: deletion before its name is retired: longer than the staleness bound
#: (6 s with the campaign's timers) plus the longest broker cut (7 s).
TOPIC_LIFE_S = 14.0
READS_AFTER_DELETE_S = 14.0
#: Topic names live at once (their lives overlap, so a creation or a
#: deletion comes every few seconds).
TOPICS_LIVE = 6
#: Metadata answers for a topic that does not exist.
ABSENT = frozenset({"UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"})


#: A topic name's life, in order; it only moves forward (one create in
#: flight at a time, one delete ever), except that a refused create sends
#: it back from "creating" to "new".
PHASES = ("new", "creating", "created", "deleted")


@dataclass(slots=True)
class _Topic:
    name: str
    descriptor: dict[str, int]
    phase: str = "new"
    ops: int = 0
    since_s: float = 0.0  # when it entered its phase (trio's clock)
    life_s: float = TOPIC_LIFE_S
    kept: bool = False  # never deleted: retired once its life is over

    def advance(self, phase: str) -> None:
        if PHASES.index(phase) > PHASES.index(self.phase):
            self.phase = phase
            self.since_s = trio.current_time()


@dataclass(slots=True)
class _Session:
    process: int
    readers: dict[int, Any] = field(default_factory=dict)  # broker id -> AdminClient for Metadata
    writer: Any = None  # AdminClient for CreateTopics / DeleteTopics
    addresses: dict[str, int] = field(default_factory=dict)  # "host:port" of a link -> its broker


def _error_name(error: BaseException) -> str:
    """Kafka's name for an error raised by confluent_kafka (its
    KafkaError), else the exception's type."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return str(error.args[0].name())
    return type(error).__name__


def _answered_by(metadata: Any, addresses: dict[str, int]) -> str | None:
    """The broker a Metadata answer came from: its id, or (from a
    bootstrap connection, id -1) the broker behind the address it came
    from; None when neither is known."""
    if isinstance(metadata.orig_broker_id, int) and metadata.orig_broker_id >= 0:
        return str(metadata.orig_broker_id)
    name = str(metadata.orig_broker_name or "")
    address = name.split("/", 1)[0]
    broker_id = addresses.get(address)
    return None if broker_id is None else str(broker_id)


class KafkaWorkload:
    """``options.clients`` clients against Kafka's brokers until a
    deadline; ``endpoints(index)`` says how client ``index`` reaches them."""

    def __init__(
        self, history: HistoryRecorder, endpoints: Callable[[int], ClientEndpoints], options: WorkloadOptions, *, rng: random.Random
    ) -> None:
        self.history = history
        self.endpoints = endpoints
        self.options = options
        self.rng = rng
        self.broker_ids = sorted(endpoints(0).brokers)
        if not self.broker_ids:
            raise ValueError("the Kafka workload needs brokers")
        self._process_ids = itertools.count(0)
        self._names = itertools.count(0)
        self._topics: list[_Topic] = []
        self._live = [self._new_topic() for _ in range(TOPICS_LIVE)]

    def _new_topic(self) -> _Topic:
        replicas = min(len(self.broker_ids), self.options.brokers_online_replication_max)
        descriptor = topic_descriptor(self.rng.randint(1, 3), self.rng.randint(1, max(1, replicas)))
        topic = _Topic(
            f"t{next(self._names)}", descriptor, life_s=self.rng.uniform(TOPIC_LIFE_S, 2 * TOPIC_LIFE_S), kept=self.rng.random() < 0.5
        )
        self._topics.append(topic)
        return topic

    def touched_keys(self) -> list[str]:
        return [f"topic/{topic.name}" for topic in self._topics if topic.ops]

    # ------------------------------------------------------------------
    # Clients
    # ------------------------------------------------------------------

    def _open(self, process: int, endpoints: ClientEndpoints) -> _Session:
        from confluent_kafka.admin import AdminClient

        timeout_ms = int(self.options.request_timeout_s * 1000)

        def admin(bootstrap: list[tuple[str, int]]) -> Any:
            return AdminClient(
                {
                    "bootstrap.servers": ",".join(f"{host}:{port}" for host, port in bootstrap),
                    "socket.timeout.ms": max(timeout_ms, 10),
                    "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
                    "reconnect.backoff.max.ms": 500,
                    "logger": logging.getLogger("pykraft.kafka.client"),
                    "log_level": 3,
                }
            )

        brokers = sorted(endpoints.brokers.items())
        return _Session(
            process,
            {broker_id: admin([address]) for broker_id, address in brokers},
            admin([a for _, a in brokers]),
            {f"{host}:{port}": broker_id for broker_id, (host, port) in brokers},
        )

    async def run(self, deadline_s: float) -> None:
        """Run every client until ``deadline_s`` (trio's clock)."""
        async with trio.open_nursery() as nursery:
            for client_index in range(self.options.clients):
                nursery.start_soon(self._client, client_index, deadline_s)

    async def _client(self, client_index: int, deadline_s: float) -> None:
        endpoints = self.endpoints(client_index)
        session = await trio.to_thread.run_sync(self._open, next(self._process_ids), endpoints)
        try:
            while trio.current_time() < deadline_s:
                try:
                    await self._one_operation(session)
                except Exception as error:  # noqa: BLE001 - a harness bug must not end the campaign
                    logger.exception("kafka client %d: unexpected error; the operation is recorded indeterminate", client_index)
                    self._close_pending(session.process, error)
                    session.process = next(self._process_ids)
                await trio.sleep(self.options.think_s)
        finally:
            session.readers.clear()
            session.writer = None

    def _close_pending(self, process: int, error: BaseException) -> None:
        invoke = self.history.pending.get(process)
        if invoke is not None:
            self.history.record(
                process, "info", invoke["f"], invoke["key"], invoke["value"], error=f"harness error: {type(error).__name__}: {error}"[:200]
            )

    def _pick(self) -> _Topic:
        index = self.rng.randrange(len(self._live))
        topic = self._live[index]
        topic.ops += 1
        now = trio.current_time()
        if (topic.phase == "deleted" and now - topic.since_s >= READS_AFTER_DELETE_S) or (
            topic.kept and topic.phase == "created" and now - topic.since_s >= topic.life_s
        ):
            self._live[index] = self._new_topic()
        return topic

    async def _one_operation(self, session: _Session) -> None:
        topic = self._pick()
        if topic.phase == "new":
            await self._create(session, topic)
        elif topic.phase == "created" and not topic.kept and trio.current_time() - topic.since_s >= topic.life_s:
            await self._delete(session, topic)
        else:
            await self._read(session, topic, self.rng.choice(self.broker_ids))

    def _retire(self, session: _Session) -> None:
        """After an ``info`` the process may still have an operation in
        flight: the client goes on as a new process."""
        session.process = next(self._process_ids)

    async def _create(self, session: _Session, topic: _Topic) -> None:
        from confluent_kafka.admin import NewTopic

        key, value = f"topic/{topic.name}", [None, topic.descriptor]
        timeout_s = self.options.request_timeout_s
        admin = session.writer

        def create() -> None:
            new = NewTopic(topic.name, topic.descriptor["partitions"], topic.descriptor["replication_factor"])
            futures = admin.create_topics([new], operation_timeout=timeout_s, request_timeout=timeout_s)
            futures[topic.name].result(timeout=timeout_s + 1)

        process, record = session.process, self.history.record
        topic.advance("creating")
        record(process, "invoke", "cas", key, value, op="create_topic")
        try:
            await trio.to_thread.run_sync(create)
        except Exception as error:  # noqa: BLE001 - classified below
            name = _error_name(error)
            if name in CREATE_REFUSED:
                record(process, "fail", "cas", key, value, op="create_topic", error=f"{name}: {error}"[:200])
                if name == "TOPIC_ALREADY_EXISTS":
                    topic.advance("created")
                elif topic.phase == "creating":
                    topic.phase = "new"  # nothing was written: try again
                return
            record(process, "info", "cas", key, value, op="create_topic", error=f"indeterminate: {name}: {error}"[:200])
            topic.advance("created")  # it may exist: never created again
            self._retire(session)
            return
        record(process, "ok", "cas", key, value, op="create_topic")
        topic.advance("created")

    async def _delete(self, session: _Session, topic: _Topic) -> None:
        key = f"topic/{topic.name}"
        timeout_s = self.options.request_timeout_s
        admin = session.writer

        def delete() -> None:
            futures = admin.delete_topics([topic.name], operation_timeout=timeout_s, request_timeout=timeout_s)
            futures[topic.name].result(timeout=timeout_s + 1)

        process, record = session.process, self.history.record
        topic.advance("deleted")  # whatever the answer: a name lives once
        record(process, "invoke", "write", key, None, op="delete_topic")
        try:
            await trio.to_thread.run_sync(delete)
        except Exception as error:  # noqa: BLE001 - classified below
            name = _error_name(error)
            if name in DELETE_REFUSED:
                record(process, "fail", "write", key, None, op="delete_topic", error=f"{name}: {error}"[:200])
                return
            record(process, "info", "write", key, None, op="delete_topic", error=f"indeterminate: {name}: {error}"[:200])
            self._retire(session)
            return
        record(process, "ok", "write", key, None, op="delete_topic")

    async def _read(self, session: _Session, topic: _Topic, broker_id: int, *, final: bool = False) -> bool:
        """One Metadata request for the topic, meant for ``broker_id``.
        Returns whether it was answered (ok)."""
        key = f"topic/{topic.name}"
        timeout_s = self.options.request_timeout_s
        admin = session.readers[broker_id]
        extra: dict[str, Any] = {"mode": "broker", "op": "metadata", "broker_id": str(broker_id)}
        if final:
            extra["final"] = True
        process, record = session.process, self.history.record
        record(process, "invoke", "read", key, None, **extra)
        try:
            metadata = await trio.to_thread.run_sync(lambda: admin.list_topics(topic=topic.name, timeout=timeout_s))
        except Exception as error:  # noqa: BLE001 - a read that got no answer changed nothing
            record(process, "fail", "read", key, None, error=f"{_error_name(error)}: {error}"[:200], **extra)
            return False
        node = _answered_by(metadata, session.addresses)
        answer = metadata.topics.get(topic.name)
        error_name = None if answer is None or answer.error is None else str(answer.error.name())
        if answer is None or error_name in ABSENT:
            shown: Any = None
        elif answer.partitions and error_name in (None, "LEADER_NOT_AVAILABLE"):
            partitions = answer.partitions
            first = partitions[min(partitions)]
            shown = topic_descriptor(len(partitions), len(first.replicas))
        else:
            record(process, "fail", "read", key, None, node=node, error=str(error_name)[:200], **extra)
            return False
        record(process, "ok", "read", key, shown, node=node, **extra)
        return True

    # ------------------------------------------------------------------
    # Final reads
    # ------------------------------------------------------------------

    async def final_reads(self, endpoints: ClientEndpoints, *, time_limit_s: float = FINAL_READS_S_MAX) -> None:
        """After the faults healed and the cluster went quiet: one read of
        every touched topic from every broker (``final: true``), through
        the harness's own links; a read that fails is tried once more.
        Ends after ``time_limit_s`` whatever is left (logged), as the
        pykraft workload's do: each read is bounded by the request timeout,
        but brokers that never answer would keep every topic's two
        attempts per broker waiting in turn."""
        session = await trio.to_thread.run_sync(self._open, 1_000_000, endpoints)
        process_ids = itertools.count(1_000_001)
        reads = [(topic, broker_id) for topic in self._topics if topic.ops for broker_id in self.broker_ids]
        done = 0
        try:
            with trio.move_on_after(time_limit_s) as limit:
                for topic, broker_id in reads:
                    for _attempt in range(2):
                        if await self._read(session, topic, broker_id, final=True):
                            break
                        session.process = next(process_ids)
                    done += 1
        finally:
            session.readers.clear()
            session.writer = None
        if limit.cancelled_caught:
            logger.warning(
                "final reads stopped after %.0f s with %d of %d (topic, broker) reads left: the brokers did not answer them",
                time_limit_s, len(reads) - done, len(reads),
            )  # fmt: skip


__all__ = ["KafkaWorkload"]
