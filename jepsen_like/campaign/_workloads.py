"""Client workloads. Every operation is recorded invoke -> ok / fail / info
exactly as the design says: ``fail`` only when the operation certainly did
not happen, ``info`` when it may have (a timeout, a lost connection, an
answer that could not be read), and a fresh process id after every
``info`` (a Jepsen process has one operation in flight, forever).

Three workloads, all recorded in the checker's register model so that
tier 2 (per-key linearizability) checks every key:

``register``
    Keys ``r<n>``: read / write / cas of unique integer values through the
    controller leader's register map, each read in the campaign's read mode.

``metadata``
    Topics, key ``topic/<name>``, value ``{"partitions": p,
    "replication_factor": r}`` while the topic exists, ``null`` when it
    does not. A create is ``cas [null, descriptor]`` (the controller refuses
    a name that is taken: TOPIC_ALREADY_EXISTS is a definite ``fail``), a
    delete is ``write null`` (deleting an absent topic changes nothing, so
    UNKNOWN_TOPIC_OR_PARTITION is a ``fail`` too), a describe is a ``read``
    through the controller (``linearizable`` or ``leader-local``) or through
    a broker (mode ``broker``, bounded staleness). Synthetic brokers, key
    ``broker/<id>`` with ids from 1001 (never a real broker's), value the
    incarnation id: RegisterBroker is ``write <incarnation>``,
    UnregisterBroker ``write null``, DescribeCluster a ``read``. The
    operation's own name is in the ``op`` field.

``mixed`` (the default)
    Both.

Offsets (what the checker compares, docs/checker.md): a register read
carries the key's version (the offset of the record that last wrote it), a
write the offset it committed at; a broker read ``image_offset - 1`` (the
last metadata-log record its image reflects); a controller read of a
synthetic broker ``offset - 1`` of the image it was answered from, whose
offset counts registration records only, exactly the records that write
``broker/<id>`` keys; a controller read of a topic carries no offset (that
image offset is not comparable with a broker's, and would make one
process's reads look non-monotonic).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from broker_agent import ErrorCode as BrokerErrorCode
from broker_agent import MetadataRequest, MetadataResponse, ProtocolError
from quorum.client import IndeterminateError, QuorumClient, QuorumClientError
from quorum.runtime import PeerNotAuthenticatedError, TlsConfig
from quorum.runtime import KeyValueStateMachine
from quorum.wire import ApplicationRequest, ApplicationResponse, ErrorFrame, FrameDecoder, decode_message, encode_message
from registration import ErrorCode, RegisterBrokerRequest
from registration.client import AdminClient, AdminClientError

from ._history import HistoryRecorder

logger = logging.getLogger("pykraft.campaign")

#: How long the final reads may take in all. Each key gets two attempts of
#: up to 10 s: against a cluster that lost its leader for good (a membership
#: run's nemesis once left one), a run sat in its final reads for hours.
FINAL_READS_S_MAX = 120.0

WORKLOADS = ("register", "metadata", "mixed")
FIRST_SYNTHETIC_BROKER_ID = 1001
SYNTHETIC_LISTENERS = (("PLAINTEXT", "127.0.0.1", 9),)
#: Retired topics whose descriptor is kept (see ``Workload._topics``).
RETIRED_TOPICS_KEPT = 64


@dataclass(slots=True)
class WorkloadOptions:
    kind: str = "mixed"  # one of WORKLOADS
    clients: int = 6
    read_mode: str = "linearizable"  # register reads: or "leader-local"
    keys_live: int = 3  # register keys in use at once
    ops_per_key: int = 120  # then the key is retired (keeps each key's history small)
    request_timeout_s: float = 2.0
    think_s: float = 0.01
    # After an info, the client's next process starts at the next controller
    # (it fails over). Off: at the same one, as a client whose metadata still
    # names the old leader keeps going back to it (the zombie-leader story).
    fail_over_after_info: bool = True
    read_fraction: float = 0.5  # register ops; the rest: 60% writes, 40% compare-and-set
    # metadata
    metadata_fraction: float = 0.35  # of a mixed workload's operations
    topics_live: int = 3
    ops_per_topic: int = 30
    synthetic_brokers_live: int = 2
    ops_per_synthetic_broker: int = 20
    synthetic_broker_fraction: float = 0.25  # of metadata operations
    brokers_online_replication_max: int = 2  # topics get 1..this many replicas


@dataclass(slots=True)
class ClientEndpoints:
    """How workload client ``index`` reaches the cluster."""

    controllers: list[str]  # ID@HOST:PORT as the client must dial them
    brokers: dict[int, tuple[str, int]]  # broker id -> address as the client must dial it
    sockets: Callable[[], contextlib.AbstractContextManager[None]]  # netns: the client's namespace
    tls: TlsConfig | None = None  # the harness's certificate, when the cluster runs TLS
    # With TLS: the certificate of synthetic broker ``id`` (a registration
    # is accepted only from the broker its certificate names).
    broker_tls: Callable[[int], TlsConfig] | None = None

    def starting_at(self, node_id: int) -> ClientEndpoints:
        """The same, with controller ``node_id`` first (itself if unknown)."""
        for shift, entry in enumerate(self.controllers):
            if entry.split("@", 1)[0] == str(node_id):
                return self.rotated(shift)
        return self

    def rotated(self, shift: int) -> ClientEndpoints:
        """The same, with the controllers' list starting ``shift`` further on."""
        if not self.controllers:
            return self
        shift %= len(self.controllers)
        return ClientEndpoints(
            self.controllers[shift:] + self.controllers[:shift], self.brokers, self.sockets, self.tls, self.broker_tls
        )


class _Retired(Exception):
    """The process's outcome is unknown: retire it (fresh process id)."""


class _BrokerLink:
    """One connection to one broker, one request at a time. ``request``
    raises ``_NotSent`` when nothing left (connect refused), ``_NoAnswer``
    when the request left and no answer came."""

    class NotSent(Exception):
        pass

    class NoAnswer(Exception):
        pass

    def __init__(self, address: tuple[str, int], cluster_id: str, tls: TlsConfig | None = None) -> None:
        self.address = address
        self.cluster_id = cluster_id
        self.tls = tls
        self.stream: trio.abc.Stream | None = None
        self.decoder = FrameDecoder()
        self.correlation_id = 0

    async def request(self, request: MetadataRequest, timeout_s: float) -> MetadataResponse:
        with trio.move_on_after(timeout_s) as scope:
            if self.stream is None:
                try:
                    if self.tls is None:
                        self.stream = await trio.open_tcp_stream(*self.address)
                    else:
                        self.stream, _ = await self.tls.connect(*self.address)
                except (OSError, trio.BrokenResourceError, trio.TooSlowError, PeerNotAuthenticatedError) as error:
                    raise self.NotSent(f"connect: {error}") from error
                self.decoder = FrameDecoder()
            self.correlation_id += 1
            wanted = self.correlation_id
            frame = encode_message(ApplicationRequest(payload=request.to_payload()), correlation_id=wanted, cluster_id=self.cluster_id)
            try:
                await self.stream.send_all(frame)
                while True:
                    while (payload := self.decoder.next_frame()) is not None:
                        decoded = decode_message(payload, expected_cluster_id=self.cluster_id)
                        if decoded.correlation_id == wanted:
                            return _broker_answer(decoded.message)
                    data = await self.stream.receive_some(256 * 1024)
                    if not data:
                        raise trio.BrokenResourceError("connection closed by the broker")
                    self.decoder.feed(data)
            except Exception as error:  # noqa: BLE001 - any failure after sending: no answer
                await self.close()
                raise self.NoAnswer(f"{type(error).__name__}: {error}") from error
        assert scope.cancelled_caught
        await self.close()
        raise self.NoAnswer(f"no answer within {timeout_s} s")

    async def close(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            with trio.move_on_after(0.5) as scope:
                scope.shield = True
                await stream.aclose()


def _broker_answer(message: Any) -> MetadataResponse:
    if isinstance(message, ErrorFrame):
        raise ValueError(f"the broker refused the frame: {message.code.name} {message.message}")
    if not isinstance(message, ApplicationResponse) or message.error:
        raise ValueError(f"not a broker answer: {type(message).__name__}")
    try:
        return MetadataResponse.from_payload(message.payload)
    except ProtocolError as error:
        raise ValueError(f"unreadable broker answer: {error}") from error


class _Session:
    """One process's connections: a quorum client (registers), an admin
    client (controller requests), links to brokers, and the broker-read
    floor (the highest image offset this process has read from a broker:
    asked as ``min_image_offset``, so its broker reads never go back)."""

    def __init__(self, process: int, endpoints: ClientEndpoints, options: WorkloadOptions, cluster_id: str) -> None:
        self.process = process
        self.endpoints = endpoints
        self.stack = contextlib.AsyncExitStack()
        timeout_s = options.request_timeout_s
        tls = endpoints.tls
        self.cluster_id = cluster_id
        self.timeout_s = timeout_s
        self.quorum = QuorumClient(
            endpoints.controllers, cluster_id=cluster_id, request_timeout_s=timeout_s, retry_timeout_s=timeout_s, tls=tls
        )
        self.admin = AdminClient(endpoints.controllers, cluster_id=cluster_id, timeout_s=timeout_s, tls=tls)
        self.brokers = {broker_id: _BrokerLink(address, cluster_id, tls) for broker_id, address in endpoints.brokers.items()}
        self.broker_epochs: dict[int, int] = {}
        self.broker_floor = -1
        # The node the last RegisterBroker went to (or tried to reach):
        # with TLS it travels on a client of its own, gone when it fails.
        self.registration_sent_to: str | None = None

    async def register_broker(self, request: RegisterBrokerRequest) -> tuple[Any, str | None]:
        """RegisterBroker for a synthetic broker; with TLS over a short-lived
        connection with that broker's certificate. Returns the response and
        the node that answered. Raises as ``AdminClient.register_broker``."""
        broker_tls = self.endpoints.broker_tls
        if broker_tls is None:
            try:
                return await self.admin.register_broker(request), serving_node(self.admin.quorum_client)
            finally:
                self.registration_sent_to = sent_to_node(self.admin.quorum_client)
        failure: BaseException | None = None
        async with AdminClient(
            self.endpoints.controllers, cluster_id=self.cluster_id, timeout_s=self.timeout_s, tls=broker_tls(request.broker_id)
        ) as registrar:
            try:
                return await registrar.register_broker(request), serving_node(registrar.quorum_client)
            except (QuorumClientError, AdminClientError) as error:  # re-raised outside the client's nursery
                failure = error
            finally:
                self.registration_sent_to = sent_to_node(registrar.quorum_client)
        assert failure is not None
        raise failure

    async def __aenter__(self) -> _Session:
        await self.stack.enter_async_context(self.quorum)
        await self.stack.enter_async_context(self.admin)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        for link in self.brokers.values():
            await link.close()
        await self.stack.aclose()


def serving_node(client: QuorumClient) -> str | None:
    """The node whose answer ended ``client``'s last request, from its
    bootstrap entry; None when unknown (no answer yet, or a ``HOST:PORT``
    entry without a node id)."""
    server = client.last_answered_by
    return None if server is None or server.node_id is None else str(server.node_id)


def sent_to_node(client: QuorumClient) -> str | None:
    """The node ``client``'s last request went to (or tried to reach),
    answered or not, from its bootstrap entry: the node a failed or
    indeterminate operation is recorded against. None as ``serving_node``."""
    server = client.last_sent_to
    return None if server is None or server.node_id is None else str(server.node_id)


def _refusal(answer: Any) -> str:
    """The error of a definite refusal (an error code in an answer), for
    the history."""
    return f"{answer.error.name}: {answer.message}"[:200]


def _in_flight(error: QuorumClientError) -> bool:
    """Whether a request the client gave up on had left without an answer
    (a timeout or a connection lost while waiting). QuorumClient retries
    idempotent requests after such a failure and, when time runs out,
    raises a QuorumClientError caused by the last one."""
    return isinstance(error, IndeterminateError) or isinstance(error.__cause__, IndeterminateError)


def topic_descriptor(partitions: int, replication_factor: int) -> dict[str, int]:
    return {"partitions": partitions, "replication_factor": replication_factor}


class Workload:
    """Runs ``options.clients`` client tasks until a deadline, recording
    every operation. ``endpoints(index)`` says how client ``index``
    reaches the cluster."""

    def __init__(
        self,
        history: HistoryRecorder,
        endpoints: Callable[[int], ClientEndpoints],
        options: WorkloadOptions,
        *,
        cluster_id: str,
        rng: random.Random,
    ) -> None:
        if options.kind not in WORKLOADS:
            raise ValueError(f"workload must be one of {WORKLOADS}, got {options.kind!r}")
        self.history = history
        self.endpoints = endpoints
        self.options = options
        self.cluster_id = cluster_id
        self.rng = rng
        self._process_ids = itertools.count(0)
        self._values = itertools.count(1)
        # What the workload keeps does not grow with the run's length: keys
        # are numbered (r0, r1, ...; t0, ...; 1001, ...), so the keys touched
        # so far follow from how many were made and which are live.
        self._keys_made = self._topics_made = 0
        self._live_keys = [self._new_key() for _ in range(options.keys_live)]
        # Operations picked on each live key (an entry goes when its key retires).
        self._ops_on_key: dict[str, int] = {}
        self._last_written: dict[str, int] = {}  # live register keys only
        # Keys a schedule's operations used (``--replay``): as many as the schedule has.
        self._scheduled_keys: set[str] = set()
        # Topics: name -> descriptor, for the live ones and the last
        # RETIRED_TOPICS_KEPT retired (an operation picked before its topic
        # retired may still need it).
        self._topics: dict[str, dict[str, int]] = {}
        self._retired_topics: collections.deque[str] = collections.deque()
        self._live_topics = [self._new_topic() for _ in range(options.topics_live)]
        # Synthetic brokers: ids from 1001, never a real broker's.
        self._synthetic_made = 0
        self._live_synthetic = [self._new_synthetic_broker() for _ in range(options.synthetic_brokers_live)]
        self._incarnations = itertools.count(1)
        self.real_brokers = sorted(endpoints(0).brokers)

    # ------------------------------------------------------------------
    # Keys
    # ------------------------------------------------------------------

    def touched_keys(self) -> list[str]:
        """Every key an operation was invoked on: register keys, then
        ``topic/<name>``, then ``broker/<id>``."""

        def touched(made: int, name: Callable[[int], str], key: Callable[[str], str], live: list[Any]) -> list[str]:
            live_names = {str(item) for item in live}
            return [
                name(number) for number in range(made)
                if name(number) not in live_names or self._ops_on_key.get(key(name(number)))
            ]  # fmt: skip

        registers = touched(self._keys_made, lambda n: f"r{n}", lambda name: name, self._live_keys)
        topics = touched(self._topics_made, lambda n: f"t{n}", lambda name: f"topic/{name}", self._live_topics)
        synthetic = touched(
            self._synthetic_made, lambda n: str(FIRST_SYNTHETIC_BROKER_ID + n), lambda name: f"broker/{name}", self._live_synthetic
        )
        return (
            sorted(set(registers) | self._scheduled_keys)
            + [f"topic/{name}" for name in sorted(topics)]
            + [f"broker/{broker_id}" for broker_id in sorted(int(name) for name in synthetic)]
        )

    def _new_key(self) -> str:
        self._keys_made += 1
        return f"r{self._keys_made - 1}"

    def _new_topic(self) -> str:
        name = f"t{self._topics_made}"
        self._topics_made += 1
        replicas = min(len(self.endpoints(0).brokers), self.options.brokers_online_replication_max)
        self._topics[name] = topic_descriptor(self.rng.randint(1, 3), self.rng.randint(1, max(1, replicas)))
        return name

    def _new_synthetic_broker(self) -> int:
        self._synthetic_made += 1
        return FIRST_SYNTHETIC_BROKER_ID + self._synthetic_made - 1

    def _count(self, live: list[Any], index: int, key: str, limit: int, renew: Callable[[], Any]) -> Any:
        """Count one operation picked on ``live[index]`` (key ``key``); at
        ``limit`` it retires and ``renew()`` takes its place. Returns the
        retired item or None."""
        count = self._ops_on_key.get(key, 0) + 1
        self._ops_on_key[key] = count
        if count < limit:
            return None
        retired, live[index] = live[index], renew()
        del self._ops_on_key[key]
        return retired

    def _pick_register_key(self) -> str:
        index = self.rng.randrange(len(self._live_keys))
        key = self._live_keys[index]
        if self._count(self._live_keys, index, key, self.options.ops_per_key, self._new_key) is not None:
            self._last_written.pop(key, None)
        return key

    def _pick_topic(self) -> str:
        index = self.rng.randrange(len(self._live_topics))
        name = self._live_topics[index]
        if self._count(self._live_topics, index, f"topic/{name}", self.options.ops_per_topic, self._new_topic) is not None:
            self._retired_topics.append(name)
            if len(self._retired_topics) > RETIRED_TOPICS_KEPT:
                del self._topics[self._retired_topics.popleft()]
        return name

    def _pick_synthetic_broker(self) -> int:
        index = self.rng.randrange(len(self._live_synthetic))
        broker_id = self._live_synthetic[index]
        self._count(
            self._live_synthetic, index, f"broker/{broker_id}", self.options.ops_per_synthetic_broker, self._new_synthetic_broker
        )
        return broker_id

    def remembered(self) -> int:
        """Entries in the workload's own tables (bounded whatever the run's
        length: the long-run test holds it to that)."""
        return len(self._ops_on_key) + len(self._last_written) + len(self._topics) + len(self._retired_topics)

    # ------------------------------------------------------------------
    # Clients
    # ------------------------------------------------------------------

    async def run(self, deadline_s: float) -> None:
        """Run every client until ``deadline_s`` (trio's clock)."""
        async with trio.open_nursery() as nursery:
            for client_index in range(self.options.clients):
                nursery.start_soon(self._client, client_index, deadline_s)

    async def _client(self, client_index: int, deadline_s: float) -> None:
        endpoints = self.endpoints(client_index)
        with endpoints.sockets():
            for sessions in itertools.count():
                if trio.current_time() >= deadline_s:
                    break
                process = next(self._process_ids)
                # One session per process id: after an indeterminate result
                # its connections (and the process) are retired, and the
                # next one starts at the next controller, as a client that
                # timed out fails over (else a client whose first node is
                # cut off would stall on it again and again).
                start_at = endpoints.rotated(sessions) if self.options.fail_over_after_info else endpoints
                async with _Session(process, start_at, self.options, self.cluster_id) as session:
                    while trio.current_time() < deadline_s:
                        try:
                            await self._one_operation(session)
                        except _Retired:
                            break
                        except Exception as error:  # noqa: BLE001 - a harness bug must not end the campaign
                            logger.exception("client %d: unexpected error; the operation is recorded indeterminate", client_index)
                            self._close_pending(process, error)
                            break
                        await trio.sleep(self.options.think_s)

    async def _one_operation(self, session: _Session) -> None:
        """One operation, recorded; raises ``_Retired`` when its outcome is
        unknown."""
        kind = self.options.kind
        metadata = kind == "metadata" or (kind == "mixed" and self.rng.random() < self.options.metadata_fraction)
        if not metadata:
            await self._register_operation(session)
        elif self.rng.random() < self.options.synthetic_broker_fraction:
            await self._synthetic_broker_operation(session)
        else:
            await self._topic_operation(session)

    def _close_pending(self, process: int, error: BaseException) -> None:
        """Complete the process's open operation as ``info`` (it may have
        happened) after an error the workload did not expect."""
        invoke = self.history.pending.get(process)
        if invoke is not None:
            self.history.record(
                process, "info", invoke["f"], invoke["key"], invoke["value"], error=f"harness error: {type(error).__name__}: {error}"[:200]
            )

    def _indeterminate(self, process: int, f: str, key: str, value: Any, error: BaseException | str, **extra: Any) -> None:
        self.history.record(process, "info", f, key, value, error=f"indeterminate: {error}"[:200], **extra)
        raise _Retired

    async def _controller_call(
        self,
        session: _Session,
        f: str,
        key: str,
        value: Any,
        call: Callable[[], Awaitable[Any]],
        *,
        answered_by: bool = False,
        **extra: Any,
    ) -> tuple[Any, str | None] | None:
        """One controller request as operation ``f`` on ``key``: records the
        invoke, then ``info`` (and retires the process) when the request may
        have happened, ``fail`` when it certainly did not. Returns the
        response and the node that answered, for the caller to record the
        outcome; None after a recorded failure (with the node the request
        went to). ``answered_by``: ``call`` returns (response, node) itself
        (it used a client of its own: RegisterBroker)."""
        process, record = session.process, self.history.record
        record(process, "invoke", f, key, value, **extra)
        try:
            response = await call()
        except (AdminClientError, QuorumClientError) as error:
            node = session.registration_sent_to if answered_by else sent_to_node(session.admin.quorum_client)
            # An answer it could not read, or a request left in flight: it may have happened.
            if isinstance(error, AdminClientError) or _in_flight(error):
                self._indeterminate(process, f, key, value, error, node=node, **extra)
            record(process, "fail", f, key, value, error=str(error)[:200], node=node, **extra)
            return None
        if answered_by:
            return response
        return response, serving_node(session.admin.quorum_client)

    # ------------------------------------------------------------------
    # Registers
    # ------------------------------------------------------------------

    async def _register_operation(self, session: _Session) -> None:
        key = self._pick_register_key()
        roll = self.rng.random()
        reads = self.options.read_fraction
        if roll < reads:
            f, value = "read", None
        elif roll < reads + 0.6 * (1 - reads):
            f, value = "write", next(self._values)
        else:
            f, value = "cas", [self._last_written.get(key), next(self._values)]
        await self._register_call(session, f, key, value, self.options.read_mode)

    def _wrote(self, key: str, value: int) -> None:
        if key in self._live_keys:  # a retired key is never written again
            self._last_written[key] = value

    async def _register_call(self, session: _Session, f: str, key: str, value: Any, read_mode: str) -> None:
        """Operation ``f`` (read, write, cas) on register ``key``, recorded;
        raises ``_Retired`` when its outcome is unknown."""
        process, client, record = session.process, session.quorum, self.history.record
        extra: dict[str, Any] = {}
        if f == "read":
            extra["mode"] = read_mode
        elif f == "write":
            extra["write_id"] = f"{key}={value}"
        else:
            extra["write_id"] = f"{key}={value[1]}"
        record(process, "invoke", f, key, value, **extra)
        try:
            if f == "read":
                read_offset, answer = await client.read(key.encode(), mode=read_mode)
                found, version = KeyValueStateMachine.decode_answer(answer) if answer else (None, -1)
                shown = int(found) if found is not None else None
                record(process, "ok", f, key, shown, offset=version, read_offset=read_offset, node=serving_node(client), **extra)
            elif f == "write":
                offset = await client.propose([KeyValueStateMachine.encode_put(key.encode(), str(value).encode())])
                self._wrote(key, value)
                record(process, "ok", f, key, value, offset=offset, node=serving_node(client))
            else:
                expected, new = value
                expected_bytes = str(expected).encode() if expected is not None else None
                offset, (answer,) = await client.propose_with_results(
                    [KeyValueStateMachine.encode_cas(key.encode(), expected_bytes, str(new).encode())]
                )
                if answer == KeyValueStateMachine.CAS_APPLIED:
                    self._wrote(key, new)
                    record(process, "ok", f, key, value, offset=offset, node=serving_node(client))
                else:
                    record(process, "fail", f, key, value, error="precondition failed", node=serving_node(client))
        except QuorumClientError as error:
            # The node it went to: the one that refused it or stopped answering.
            node = sent_to_node(client)
            if _in_flight(error):
                self._indeterminate(process, f, key, value, error, node=node, **extra)
            record(process, "fail", f, key, value, error=str(error)[:200], node=node, **extra)

    # ------------------------------------------------------------------
    # A schedule's operations (``--replay``; docs/replay.md)
    # ------------------------------------------------------------------

    async def run_schedule(self, operations: Sequence[Any], started_s: float) -> None:
        """Invoke each register operation (a ``jepsen_like.sim.Operation``)
        at ``started_s + at_ms`` (trio's clock), first sent to its node.
        The operations of one recorded process run one after another, on
        one client while it sends to the same node and no outcome was
        unknown (then on a fresh process, as ``run`` does)."""
        lanes: dict[int, list[Any]] = {}
        for op in operations:
            lanes.setdefault(op.process, []).append(op)
        async with trio.open_nursery() as nursery:
            for index, process in enumerate(sorted(lanes)):
                nursery.start_soon(self._lane, index, lanes[process], started_s)

    async def _lane(self, index: int, operations: list[Any], started_s: float) -> None:
        endpoints = self.endpoints(index)
        with endpoints.sockets():
            next_op = 0
            while next_op < len(operations):
                node = operations[next_op].node
                process = next(self._process_ids)
                async with _Session(process, endpoints.starting_at(node), self.options, self.cluster_id) as session:
                    while next_op < len(operations) and operations[next_op].node == node:
                        op = operations[next_op]
                        next_op += 1
                        await trio.sleep_until(started_s + op.at_ms / 1000)
                        self._scheduled_keys.add(op.key)
                        try:
                            await self._register_call(session, op.f, op.key, op.value, op.mode or self.options.read_mode)
                        except _Retired:
                            break  # the next operation on a fresh process
                        except Exception as error:  # noqa: BLE001 - a harness bug must not end the campaign
                            logger.exception("scheduled client %d: unexpected error; the operation is recorded indeterminate", index)
                            self._close_pending(process, error)
                            break

    # ------------------------------------------------------------------
    # Topics
    # ------------------------------------------------------------------

    async def _topic_operation(self, session: _Session) -> None:
        name = self._pick_topic()
        roll = self.rng.random()
        if roll < 0.25:
            await self._create_topic(session, name)
        elif roll < 0.37:
            await self._delete_topic(session, name)
        elif roll < 0.55 or not self.real_brokers:
            await self._describe_topic_at_controller(session, name, self.rng.choice(("linearizable", "leader-local")))
        else:
            await self._describe_topic_at_broker(session, name)

    async def _create_topic(self, session: _Session, name: str) -> None:
        key, descriptor = f"topic/{name}", self._topics[name]
        value = [None, descriptor]
        process, record = session.process, self.history.record
        answered = await self._controller_call(
            session, "cas", key, value,
            lambda: session.admin.create_topic(
                name, partitions=descriptor["partitions"], replication_factor=descriptor["replication_factor"]
            ),
            op="create_topic",
        )  # fmt: skip
        if answered is None:
            return
        response, node = answered
        if response.error:
            record(process, "fail", "cas", key, value, error=_refusal(response), op="create_topic", node=node)
            return
        [result] = response.results
        if result.error is ErrorCode.NONE:
            # The TopicRecord carries the topic id: the log dumps name it.
            record(process, "ok", "cas", key, value, op="create_topic", node=node, write_id=result.topic_id)
        else:
            # TOPIC_ALREADY_EXISTS (the precondition), or the request was
            # refused (not enough Online brokers): no record was written.
            record(process, "fail", "cas", key, value, error=_refusal(result), op="create_topic", node=node)

    async def _delete_topic(self, session: _Session, name: str) -> None:
        key = f"topic/{name}"
        process, record = session.process, self.history.record
        answered = await self._controller_call(
            session, "write", key, None, lambda: session.admin.delete_topics([name]), op="delete_topic"
        )
        if answered is None:
            return
        response, node = answered
        if response.error:
            record(process, "fail", "write", key, None, error=_refusal(response), op="delete_topic", node=node)
            return
        [result] = response.results
        if result.error is ErrorCode.NONE:
            record(process, "ok", "write", key, None, op="delete_topic", node=node)
        else:
            # UNKNOWN_TOPIC_OR_PARTITION: nothing to delete, nothing written.
            record(process, "fail", "write", key, None, error=_refusal(result), op="delete_topic", node=node)

    async def _describe_topic_at_controller(self, session: _Session, name: str, mode: str, *, final: bool = False) -> None:
        key = f"topic/{name}"
        process, record = session.process, self.history.record
        extra: dict[str, Any] = {"mode": mode, "op": "describe_topic"}
        if final:
            extra["final"] = True
        answered = await self._controller_call(
            session, "read", key, None,
            lambda: session.admin.describe_topics([name], linearizable=mode == "linearizable"), **extra
        )  # fmt: skip
        if answered is None:
            return
        response, node = answered
        if response.error:
            record(process, "fail", "read", key, None, error=_refusal(response), node=node, **extra)
            return
        [topic] = response.topics
        if topic.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            shown = None
        elif topic.error:
            record(process, "fail", "read", key, None, error=f"{topic.error.name}"[:200], node=node, **extra)
            return
        else:
            replicas = len(topic.partitions[0].replicas) if topic.partitions else 0
            shown = topic_descriptor(len(topic.partitions), replicas)
        # No "offset": the controller's image offset counts registration
        # records only, a broker's every record (see the module docstring).
        record(process, "ok", "read", key, shown, node=node, image_offset=response.offset, **extra)

    async def _describe_topic_at_broker(self, session: _Session, name: str) -> None:
        key = f"topic/{name}"
        broker_id = self.rng.choice(self.real_brokers)
        process, record = session.process, self.history.record
        pinned = session.broker_epochs.get(broker_id)
        extra: dict[str, Any] = {"mode": "broker", "op": "describe_topic", "broker_id": str(broker_id)}
        if pinned is not None:
            extra["broker_epoch"] = pinned
        request = MetadataRequest(
            op="describe_topic",
            topic=name,
            broker_epoch=pinned,
            min_image_offset=session.broker_floor if session.broker_floor >= 0 else None,
        )
        record(process, "invoke", "read", key, None, node=str(broker_id), **extra)
        link = session.brokers[broker_id]
        try:
            answer = await link.request(request, self.options.request_timeout_s)
        except _BrokerLink.NotSent as error:
            record(process, "fail", "read", key, None, node=str(broker_id), error=str(error)[:200], **extra)
            return
        except _BrokerLink.NoAnswer as error:
            self._indeterminate(process, "read", key, None, error, node=str(broker_id), **extra)
        node = str(answer.broker_id)
        completion = {name_: value for name_, value in extra.items() if name_ != "broker_epoch"}
        if pinned is None and answer.broker_epoch >= 0:
            completion["broker_epoch"] = answer.broker_epoch
        if answer.broker_epoch >= 0:
            session.broker_epochs[broker_id] = answer.broker_epoch
        if answer.error is BrokerErrorCode.STALE_BROKER_EPOCH:
            session.broker_epochs.pop(broker_id, None)  # it bounced: learn the new epoch next time
        if answer.error in (BrokerErrorCode.NONE, BrokerErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            if answer.error is BrokerErrorCode.NONE:
                partitions = answer.body["topic"]["partitions"]
                shown: Any = topic_descriptor(len(partitions), len(partitions[0]["replicas"]) if partitions else 0)
            else:
                shown = None
            session.broker_floor = max(session.broker_floor, answer.image_offset)
            record(process, "ok", "read", key, shown, node=node, offset=answer.image_offset - 1, state=answer.state, **completion)
        else:
            record(
                process, "fail", "read", key, None, node=node, error=_refusal(answer),
                state=answer.state, **completion,
            )  # fmt: skip

    # ------------------------------------------------------------------
    # Synthetic brokers
    # ------------------------------------------------------------------

    async def _synthetic_broker_operation(self, session: _Session) -> None:
        broker_id = self._pick_synthetic_broker()
        roll = self.rng.random()
        if roll < 0.3:
            await self._register_synthetic(session, broker_id)
        elif roll < 0.45:
            await self._unregister_synthetic(session, broker_id)
        else:
            await self._describe_synthetic(session, broker_id, self.rng.choice(("linearizable", "leader-local")))

    async def _register_synthetic(self, session: _Session, broker_id: int) -> None:
        key = f"broker/{broker_id}"
        incarnation = f"inc{next(self._incarnations)}"
        process, record = session.process, self.history.record
        extra = {"op": "register_broker", "write_id": f"{key}={incarnation}"}
        request = RegisterBrokerRequest(
            broker_id=broker_id, incarnation_id=incarnation, cluster_id=self.cluster_id, listeners=SYNTHETIC_LISTENERS
        )
        answered = await self._controller_call(
            session, "write", key, incarnation, lambda: session.register_broker(request), answered_by=True, **extra
        )
        if answered is None:
            return
        response, node = answered
        if response.error is ErrorCode.NONE:
            # The broker epoch is the offset of its RegisterBrokerRecord.
            record(process, "ok", "write", key, incarnation, offset=response.broker_epoch, node=node, **extra)
        else:
            # DUPLICATE_BROKER_REGISTRATION (the previous incarnation was
            # registered within a heartbeat interval), NOT_LEADER: nothing written.
            record(process, "fail", "write", key, incarnation, error=_refusal(response), node=node, **extra)

    async def _unregister_synthetic(self, session: _Session, broker_id: int) -> None:
        key = f"broker/{broker_id}"
        process, record = session.process, self.history.record
        answered = await self._controller_call(
            session, "write", key, None, lambda: session.admin.unregister_broker(broker_id), op="unregister_broker"
        )
        if answered is None:
            return
        response, node = answered
        if response.error is ErrorCode.NONE:
            record(process, "ok", "write", key, None, op="unregister_broker", node=node)
        else:
            # BROKER_ID_NOT_REGISTERED: nothing to remove, nothing written.
            record(process, "fail", "write", key, None, error=_refusal(response), op="unregister_broker", node=node)

    async def _describe_synthetic(self, session: _Session, broker_id: int, mode: str, *, final: bool = False) -> None:
        key = f"broker/{broker_id}"
        process, record = session.process, self.history.record
        extra: dict[str, Any] = {"mode": mode, "op": "describe_cluster"}
        if final:
            extra["final"] = True
        answered = await self._controller_call(
            session, "read", key, None, lambda: session.admin.describe_cluster(linearizable=mode == "linearizable"), **extra
        )
        if answered is None:
            return
        response, node = answered
        if response.error:
            record(process, "fail", "read", key, None, error=_refusal(response), node=node, **extra)
            return
        shown = next((b.incarnation_id for b in response.brokers if b.broker_id == broker_id), None)
        # The image offset counts registration records, which are what
        # write broker/<id> keys: every one below it is reflected.
        record(process, "ok", "read", key, shown, offset=response.offset - 1, node=node, **extra)

    # ------------------------------------------------------------------
    # Final reads
    # ------------------------------------------------------------------

    async def final_reads(self, endpoints: ClientEndpoints, *, time_limit_s: float = FINAL_READS_S_MAX) -> None:
        """One linearizable read of every key touched, after the faults
        healed and the cluster went quiet: lost acknowledged writes show up
        here. A read that fails is retried once on a fresh process. Ends
        after ``time_limit_s`` whatever is left (logged): a read cut short
        stays open in the history (indeterminate), and a key not reached
        has no final read."""
        process_ids = itertools.count(1_000_000)
        keys = self.touched_keys()
        read = 0
        with endpoints.sockets(), trio.move_on_after(time_limit_s) as limit:
            for key in keys:
                for _attempt in range(2):
                    process = next(process_ids)
                    async with _Session(process, endpoints, self.options, self.cluster_id) as session:
                        session.quorum.retry_timeout_s = 10.0
                        session.admin.quorum_client.retry_timeout_s = 10.0  # a patient last look
                        try:
                            await self._final_read(session, key)
                        except _Retired:
                            continue
                    if self._last_final_ok(key):
                        break
                read += 1
        if limit.cancelled_caught:
            logger.warning(
                "final reads stopped after %.0f s with %d of %d keys left: the cluster did not answer them",
                time_limit_s, len(keys) - read, len(keys),
            )  # fmt: skip

    def _last_final_ok(self, key: str) -> bool:
        return self.history.last_completion.get(key) == "ok"

    async def _final_read(self, session: _Session, key: str) -> None:
        if key.startswith("topic/"):
            await self._describe_topic_at_controller(session, key.removeprefix("topic/"), "linearizable", final=True)
        elif key.startswith("broker/"):
            await self._describe_synthetic(session, int(key.removeprefix("broker/")), "linearizable", final=True)
        else:
            process, record = session.process, self.history.record
            record(process, "invoke", "read", key, None, mode="linearizable", final=True)
            try:
                read_offset, answer = await session.quorum.read(key.encode(), mode="linearizable")
            except QuorumClientError as error:
                if _in_flight(error):
                    self._indeterminate(process, "read", key, None, error, mode="linearizable", final=True)
                record(process, "fail", "read", key, None, mode="linearizable", final=True, error=str(error)[:200])
                return
            found, version = KeyValueStateMachine.decode_answer(answer) if answer else (None, -1)
            value = int(found) if found is not None else None
            record(
                process, "ok", "read", key, value, mode="linearizable", offset=version, read_offset=read_offset,
                final=True, node=serving_node(session.quorum),
            )  # fmt: skip


__all__ = [
    "WORKLOADS",
    "ClientEndpoints",
    "Workload",
    "WorkloadOptions",
    "serving_node",
    "topic_descriptor",
]
