"""The TCP transport: msgpack frames over trio streams.

Each node listens on its address. To send to a voter it keeps one outbound
connection per peer (reconnecting with backoff); a node it has no address
for (an observer, a broker) is answered over the connection that node's
last message arrived on. Every connection is read in both directions, so
either path delivers.

Bad input never takes the node down: a frame that cannot be decoded is
answered with an ``ErrorFrame`` when the stream is still in sync, otherwise
the connection is closed; either way a log line names the peer and why (at
most one per peer address and reason every ``LOG_INTERVAL_S``).

What a peer can cost is bounded by ``ConnectionLimits`` (docs/operations.md,
"Hostile peers and clients"): open connections per listener and per source
address (the excess is closed at accept), frame sizes per message type, the
time to finish a started frame, the idle time, and client requests in flight
per connection. Past that last bound, or while more than
``write_backlog_bytes_max`` of answers wait to be written (a client that
sends and never reads), the connection is not read until answers drain.

With a ``TlsConfig``, every connection is mutual TLS 1.3 (docs/security.md):
an inbound one is wrapped at accept and must finish its handshake within
``HANDSHAKE_TIMEOUT_S``; an outbound one must reach the node whose
principal it expects. The principal of the peer's certificate then goes
with every message it sends: Raft messages are checked against it
(``quorum.refuse_quorum_message``: a node speaks only as itself, a broker
only fetches as itself), client requests are put to the ``authorize``
callback. A refusal is answered with CLUSTER_AUTHORIZATION_FAILED, counted
and logged with the principal; the connection stays open.

Replication first (the rule is ``quorum.service_class``, which the simulator
applies too; brokers' quorum messages then wait behind the voters' in the
runtime's observer queue): quorum messages (Vote, BeginQuorumEpoch, Fetch, ...) go
to the core from the task that read them, whatever a connection's client
requests are doing, and never count against the in-flight bound (only
against their own connection's unwritten answers); a task
reading client requests yields to the scheduler every
``CLIENT_FRAMES_PER_YIELD`` requests, so a burst of them read at once can
not hold a voter's Fetch back.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import logging
import socket
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .._access import Principal, PrincipalKind, refuse_quorum_message
from .._config import TIMER_MS_MAX, check_int_setting, setting_value_shown
from .._gc_pause import collector_paused
from .._messages import MESSAGE_TYPES, FetchRequest, FetchResponse, FetchSnapshotRequest, Message
from .._service import ServiceClass, service_class
from ..wire import (
    FIRST_BYTES_SHOWN,
    NODE_LIMITS,
    AddVoterRequest,
    ApplicationRequest,
    DescribeQuorumRequest,
    ErrorFrame,
    ProposeRequest,
    ReadRequest,
    RemoveVoterRequest,
    UpgradeVotersRequest,
    FrameDecoder,
    FrameTooLargeError,
    Hello,
    LocalProtocolError,
    RecordSegments,
    RemoteProtocolError,
    WireLimits,
    decode_message,
    encode_message,
)
from .._messages import ErrorCode
from ._metrics import Metrics
from ._runtime import Transport
from ._tls import (
    HANDSHAKE_TIMEOUT_S,
    PeerNotAuthenticatedError,
    TlsConfig,
    TlsStream,
    handshake_failure_reason,
    peer_principal,
)
from ._reader import StreamReader
from ._writer import StreamWriter
from . import _trace

logger = logging.getLogger("pykraft.transport")

_QUORUM_MESSAGE_TYPES = frozenset(MESSAGE_TYPES)
_CLIENT_REQUEST_TYPES = frozenset(
    {
        ProposeRequest, ReadRequest, DescribeQuorumRequest, ApplicationRequest,
        AddVoterRequest, RemoveVoterRequest, UpgradeVotersRequest,
    }
)
_CONNECTION_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
RECONNECT_BACKOFF_MIN_S = 0.02
RECONNECT_BACKOFF_MAX_S = 1.0
# Raft tolerates loss: when a peer is down, keep only the newest messages.
PEER_QUEUE_MESSAGES_MAX = 10_000
# Distinct peers counted apart in the per-peer byte counters; the rest are "other".
PEER_LABELS_MAX = 256
RECEIVE_BYTES = 256 * 1024
# One log line per peer address and reason in this many seconds; the next
# one says how many were suppressed.
LOG_INTERVAL_S = 10.0
_LOG_KEYS_MAX = 10_000
# A task reading client requests lets others run after this many. Each
# yield also lets the runtime hand the proposals read so far to the core as
# one batch, so a small number splits a pipelining client's burst into small
# batches, each a commit round (16 cost a third of the 64-in-flight
# throughput; docs/benchmarks.md). 128 requests of a few tens of
# microseconds each keep a voter's Fetch waiting a few milliseconds at most.
CLIENT_FRAMES_PER_YIELD = 128
# Large frames (FetchResponse, FetchSnapshotResponse) are accepted only for
# this long after this node last sent a Fetch or FetchSnapshot (a leader,
# which fetches from nobody, takes none: a 16 MiB frame of msgpack can cost
# over 1 GB to decode), and only on the connections fetch answers arrive on.
LARGE_FRAME_WINDOW_S = 30.0
# A frame of at least this many bytes is decoded, and handled (the core,
# a follower's inline write and fsync, the answers it sends), with the
# cyclic collector paused (quorum/_gc_pause.py): a Fetch answer or a
# proposal of thousands of records makes a list, then an Entry, per record,
# and the collector's passes meanwhile walked them, promoted the transient
# lists and set off a full pass of the heap mid-commit (a third of the three
# nodes' CPU to commit a 10,001-record fence; docs/benchmarks.md, "The
# fence, a fourth time"). A frame is bounded (``frame_bytes_max``), and
# under this size it holds at most a few thousand records.
COLLECTOR_PAUSE_FRAME_BYTES_MIN = 64 * 1024
# Bytes written to a link to another voter that the kernel may hold unsent
# (TCP_NOTSENT_LOWAT; trio sets 16 KiB on every SocketStream). With 16 KiB
# the kernel took about 96 KiB of a leader's 418 KiB Fetch answer carrying
# the fence's 10,001 records (16 KiB plus the follower's receive window):
# the rest waited in the StreamWriter for the event loop, which the
# leader's own write and fsync of the batch then held for 10-30 ms, so the
# followers received the batch only after the leader had persisted it
# instead of beside it (docs/benchmarks.md, "The fence, a fourth time").
# The kernel now takes a whole Fetch answer of up to this size and feeds
# the follower as it reads; the socket's send buffer still bounds it, and
# frames still leave in order (what the kernel does not take is kept, in
# order, by the writer).
PEER_LINK_UNSENT_BYTES_MAX = 4 * 1024 * 1024
# accept() errors that mean "out of descriptors or memory for now": retry
# after a pause rather than give up the listener (as trio.serve_listeners).
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_RETRY_S = 0.1
# Linux's ``struct tcp_info`` (linux/tcp.h, a stable ABI): ``tcpi_rtt``, the
# kernel's smoothed round-trip time of the connection in microseconds, is
# the u32 at byte 68 (8 bytes of u8 fields, then 15 u32s before it).
_TCP_INFO_RTT = struct.Struct("=I")
_TCP_INFO_RTT_OFFSET = 68
_TCP_INFO_BYTES = 104


def smoothed_round_trip_s(stream: trio.abc.Stream) -> float | None:
    """The kernel's smoothed round-trip time (RFC 6298 SRTT) of the TCP
    connection under ``stream`` (a TLS stream's too), in seconds; None where
    the platform has no ``TCP_INFO`` (Linux only), the socket is gone, or
    no segment has been acknowledged yet. Costs one ``getsockopt``; never
    raises."""
    option = getattr(socket, "TCP_INFO", None)
    if option is None:
        return None
    while not hasattr(stream, "socket"):
        stream = getattr(stream, "transport_stream", None)  # under TLS: the stream it wraps
        if stream is None:
            return None
    try:
        raw = stream.socket.getsockopt(socket.IPPROTO_TCP, option, _TCP_INFO_BYTES)
    except (OSError, ValueError):
        return None
    if len(raw) < _TCP_INFO_RTT_OFFSET + _TCP_INFO_RTT.size:
        return None
    (rtt_us,) = _TCP_INFO_RTT.unpack_from(raw, _TCP_INFO_RTT_OFFSET)
    return rtt_us / 1e6 if rtt_us else None


# The most one connection's unanswered requests or unwritten answers may
# hold (``request_bytes_in_flight_max``, ``write_backlog_bytes_max``): 64
# times the defaults. Past it one peer, with a few connections, pins
# gigabytes.
CONNECTION_BYTES_MAX_LIMIT = 256 * 1024 * 1024
# The least ``write_backlog_bytes_max`` may be: a few dozen answers.
WRITE_BACKLOG_BYTES_MIN = 64 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionLimits:
    """What one peer, and all of them, may cost a node's listener and
    connections. See docs/operations.md for each setting.

    Raises ``ValueError`` on construction when a value is not a positive int,
    a time is over ``quorum.TIMER_MS_MAX`` (an hour), or a per-connection
    byte bound is out of its range (below, ``CONNECTION_BYTES_MAX_LIMIT``).
    """

    # Open inbound connections on the listener, and from one source address.
    connections_max: int = 1024
    connections_per_address_max: int = 256
    # A frame whose first byte arrived must be complete within this.
    frame_deadline_ms: int = 10_000
    # An inbound connection that sends nothing for this long is closed (a
    # connection from a configured voter, which may have nothing to say
    # between elections, excepted).
    idle_timeout_ms: int = 300_000
    # Client requests read from one connection and not yet answered, and the
    # bytes of their frames: the count bounds the tasks and answers a
    # pipelining client holds, the bytes what its proposals cost in memory.
    # Deep enough for a client's whole pipeline to reach one commit round.
    requests_in_flight_max: int = 1024
    request_bytes_in_flight_max: int = 4 * 1024 * 1024
    # Bytes of answers waiting to be written to one connection, past which it
    # is not read.
    write_backlog_bytes_max: int = 4 * 1024 * 1024
    # Largest frame of any type (FetchResponse, FetchSnapshotResponse), and
    # of every other type.
    frame_bytes_max: int = NODE_LIMITS.frame_bytes_max
    small_frame_bytes_max: int = NODE_LIMITS.small_frame_bytes_max

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if item.name.endswith("_ms"):
                # A deadline past an hour no longer bounds what a stalled
                # or silent peer costs (quorum.TIMER_MS_MAX).
                check_int_setting(item.name, value, 1, TIMER_MS_MAX, unit="ms")
            elif item.name in ("request_bytes_in_flight_max", "write_backlog_bytes_max"):
                continue  # bounded below, once small_frame_bytes_max is known good
            elif type(value) is not int or value < 1:
                raise ValueError(f"{item.name} must be an int >= 1, got {setting_value_shown(value)}")
        if self.small_frame_bytes_max > self.frame_bytes_max:
            raise ValueError("small_frame_bytes_max must not exceed frame_bytes_max")
        # One request is read whatever the bytes in flight, so a bound below
        # the largest request frame would bound nothing more than that one
        # request, and pipelining would stop: the bound as given must be
        # the bound that holds. The cap stops a unit typo from letting one
        # connection pin gigabytes.
        check_int_setting(
            "request_bytes_in_flight_max", self.request_bytes_in_flight_max, self.small_frame_bytes_max,
            CONNECTION_BYTES_MAX_LIMIT, unit="bytes", low_means="small_frame_bytes_max, one request frame",
        )  # fmt: skip
        # Answers are written as the kernel takes them; below this floor a
        # client's pipelined answers would stop its reads at every burst
        # (and "4" meant as MiB is refused rather than taken as 4 bytes).
        check_int_setting(
            "write_backlog_bytes_max", self.write_backlog_bytes_max, WRITE_BACKLOG_BYTES_MIN,
            CONNECTION_BYTES_MAX_LIMIT, unit="bytes",
        )  # fmt: skip
        self.wire_limits()  # frame_bytes_max must fit a length prefix

    def wire_limits(self) -> WireLimits:
        """The decoder's limits for a node with these settings."""
        return dataclasses.replace(
            NODE_LIMITS, frame_bytes_max=self.frame_bytes_max, small_frame_bytes_max=self.small_frame_bytes_max
        )


DEFAULT_CONNECTION_LIMITS = ConnectionLimits()


class _LogLimiter:
    """At most one log line per (peer address, reason) every
    ``LOG_INTERVAL_S``: a hostile peer must not fill the disk with them."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def warning(self, host: str, reason: str, text: str, *args: Any) -> None:
        now = trio.current_time()
        key = (host, reason)
        last = self._last.get(key)
        if last is not None and now - last[0] < LOG_INTERVAL_S:
            self._last[key] = (last[0], last[1] + 1)
            return
        if len(self._last) >= _LOG_KEYS_MAX:
            self._last = {k: v for k, v in self._last.items() if now - v[0] < LOG_INTERVAL_S}
        suppressed = last[1] if last is not None else 0
        self._last[key] = (now, 0)
        if suppressed:
            text += " (%d more like it from this address in the last %.0f s)"
            args = (*args, suppressed, LOG_INTERVAL_S)
        logger.warning(text, *args)

# Client requests (propose, read, describe) are answered by this handler;
# it returns the response message.
RequestHandler = Callable[[Any], Awaitable[Any]]
# Tried first: ``handler(request, reply)`` returns True when it took the
# request and will call ``reply(response)`` itself, once, without blocking
# (a proposal answered from the core task when it commits: no task per
# request); False leaves the request to the ``RequestHandler``.
FastRequestHandler = Callable[[Any, Callable[[Any], None]], bool]
# Asked before a client request is served, with the principal of the
# connection it came on (None on a plaintext listener): why it is refused,
# or None to serve it.
RequestAuthorizer = Callable[[Principal | None, Any], str | None]


def _allow_unsent_bytes(stream: trio.abc.Stream, unsent_bytes_max: int) -> None:
    """Let the kernel hold up to ``unsent_bytes_max`` bytes of ``stream``
    not yet sent (TCP_NOTSENT_LOWAT on its socket, the one under TLS too).
    Where the option or a socket is missing, leaves the stream as it is;
    raises nothing."""
    socket_stream = stream.transport_stream if isinstance(stream, TlsStream) else stream
    if not isinstance(socket_stream, trio.SocketStream) or not hasattr(socket, "TCP_NOTSENT_LOWAT"):
        return
    try:
        socket_stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, unsent_bytes_max)
    except OSError as error:
        logger.debug("cannot set TCP_NOTSENT_LOWAT: %s", error)


class _Batch:
    """What a transport's connections share as they send: the frames held
    while the runtime runs its core (``begin_batch`` to ``end_batch``), as
    the connections that hold some, in the order they were first given
    one; and the records already checked and packed for FetchResponses
    (one append answers thousands of parked brokers' Fetches with the same
    records: packed once, not once per broker; issue 21)."""

    __slots__ = ("active", "connections", "record_segments")

    def __init__(self) -> None:
        self.active = False
        self.connections: list[_Connection] = []
        self.record_segments = RecordSegments()


class _Connection:
    """One open stream: frames out through a ``StreamWriter`` (written at
    once, no task hop; held to the end of a ``_Batch`` while one is
    active), frames in through a decoder."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        peer: str,
        cluster_id: str,
        limits: WireLimits,
        host: str = "",
        principal: Principal | None = None,
        batch: _Batch | None = None,
    ) -> None:
        self.stream = stream
        self._batch = batch if batch is not None else _Batch()
        self._held: list[bytes] = []
        # Who the peer's certificate says it is (None without TLS).
        self.principal = principal
        self.peer = peer
        self.host = host or peer
        self.cluster_id = cluster_id
        self.limits = limits
        self.writer = StreamWriter(stream)
        self.reader = StreamReader(stream)
        self.writer.on_drained = self.capacity_changed
        self._correlation = itertools.count(1)
        self.closed = False
        # Who is at the other end, for the per-peer byte counters: a node id
        # once known (an outbound link, a Hello or a quorum message), else
        # "client". Plain ints: counted without a lock on every frame.
        self.peer_label = "client"
        self.bytes_in = 0
        self.bytes_out = 0
        # Client requests read and not yet answered, and their frames' bytes.
        self.requests_in_flight = 0
        self.request_bytes_in_flight = 0
        # A configured voter said Hello on this connection: no idle timeout.
        self.from_voter = False
        # The peer's Hello said role "observer" (a broker): its Fetches are
        # marked so (FetchRequest.observer).
        self.from_observer = False
        self._capacity = trio.Event()

    def request_started(self, size: int) -> None:
        """A client request of ``size`` frame bytes was read and is being served."""
        self.requests_in_flight += 1
        self.request_bytes_in_flight += size

    def request_answered(self, size: int) -> None:
        """The request of ``size`` bytes was answered (or handed on): the
        reader may take the next one."""
        self.requests_in_flight -= 1
        self.request_bytes_in_flight -= size
        self.capacity_changed()

    def capacity_changed(self) -> None:
        """An answer was written or the backlog drained: wake the reader if
        it holds back."""
        self._capacity.set()

    async def wait_for_capacity(self) -> None:
        self._capacity = trio.Event()
        await self._capacity.wait()

    def encode(self, message: Any, correlation_id: int | None = None) -> bytes:
        return encode_message(
            message,
            correlation_id=next(self._correlation) if correlation_id is None else correlation_id,
            cluster_id=self.cluster_id,
            limits=self.limits,
            record_segments=self._batch.record_segments,
        )

    def send(self, message: Any, correlation_id: int | None = None) -> bool:
        """Encode and write ``message`` now; never blocks. False when it
        could not be sent (the connection is broken or closing: its reader
        or writer task tears it down), with a log line when it could not be
        encoded. During a batch the frame is held until it ends."""
        if self.closed or self.writer.error is not None:
            return False
        try:
            frame = self.encode(message, correlation_id)
            if self._batch.active:
                if not self._held:
                    self._batch.connections.append(self)
                self._held.append(frame)
            else:
                self.writer.write(frame)
                if _trace.enabled:
                    _trace.stamp("tx", f"{self.peer}/1")
            self.bytes_out += len(frame)
        except LocalProtocolError as error:
            logger.error("not sent to %s, cannot encode %s: %s", self.peer, type(message).__name__, error)
            if correlation_id is not None and type(message) is not ErrorFrame:
                # A client waits on this answer (an application's answer
                # over the frame limit, say): tell it now that the request
                # was handled and its outcome is unknown, rather than leave
                # it to time out (and retry a read meant for this node).
                return self.send(
                    ErrorFrame(
                        code=ErrorCode.UNKNOWN_SERVER_ERROR,
                        message=f"the request was handled but its answer cannot be sent: {error}"[:400],
                        correlation_id=correlation_id,
                    ),
                    correlation_id,
                )
            return False
        except _CONNECTION_ERRORS as error:
            logger.debug("cannot send to %s: %s", self.peer, error)
            return False
        return True

    def write_held(self) -> None:
        """Write the frames held during the batch that just ended, as one."""
        frames, self._held = self._held, []
        if self.closed or not frames:
            return
        try:
            self.writer.write(frames[0] if len(frames) == 1 else b"".join(frames))
            if _trace.enabled:
                _trace.stamp("tx", f"{self.peer}/{len(frames)}")
        except _CONNECTION_ERRORS as error:
            logger.debug("cannot send to %s: %s", self.peer, error)

    @property
    def broken(self) -> bool:
        return self.closed or self.writer.error is not None

    async def run_writer(self, scope: trio.CancelScope) -> None:
        """Send what the kernel did not take at once; cancel ``scope`` (the
        connection's tasks) when the stream breaks."""
        try:
            await self.writer.run()
        except _CONNECTION_ERRORS as error:
            logger.debug("connection with %s broke while sending: %s", self.peer, error)
        scope.cancel()

    async def aclose(self) -> None:
        self.closed = True
        self.writer.close()
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await self.stream.aclose()


class TcpTransport(Transport):
    """Listens on ``listen`` and reaches the peers in ``peer_addresses``
    (node id → (host, port))."""

    def __init__(
        self,
        node_id: int,
        *,
        cluster_id: str,
        listen: tuple[str, int] | None,
        peer_addresses: dict[int, tuple[str, int]],
        request_handler: RequestHandler | None = None,
        fast_request_handler: FastRequestHandler | None = None,
        connection_limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
        metrics: Metrics | None = None,
        tls: TlsConfig | None = None,
        authorize: RequestAuthorizer | None = None,
        observer_only: bool = False,
    ) -> None:
        self.node_id = node_id
        # What this node says it is in the Hello of each connection it
        # opens. An observer for good (a broker: QuorumConfig.observer_only)
        # says "observer", and the receiving transport marks each of its
        # Fetches so (FetchRequest.observer): a role every release accepts,
        # where a new field in the Fetch body would be refused by an older
        # controller.
        self.hello_role = "observer" if observer_only else "voter"
        self.tls = tls
        self.authorize = authorize
        self.voter_ids = frozenset(peer_addresses)
        self.cluster_id = cluster_id
        self.listen = listen
        self.peer_addresses = {peer: address for peer, address in peer_addresses.items() if peer != node_id}
        self._voters = frozenset(peer_addresses) | {node_id}
        self.request_handler = request_handler
        self.fast_request_handler = fast_request_handler
        self.connection_limits = connection_limits
        self.limits = connection_limits.wire_limits()
        self.metrics = metrics if metrics is not None else Metrics(node_id)
        self.bound_port: int | None = None
        self._queues: dict[int, deque[Message]] = {peer: deque() for peer in self.peer_addresses}
        self._wakeups: dict[int, trio.Event] = {peer: trio.Event() for peer in self.peer_addresses}
        # Established outbound connections (Hello sent, queue drained): a
        # message for such a peer is written at once.
        self._links: dict[int, _Connection] = {}
        self._return_paths: dict[int, _Connection] = {}
        self._deliver: Callable[[Message], None] = lambda message: None
        self._unreachable: Callable[[int], None] = lambda peer: None
        self._nursery: trio.Nursery | None = None
        self.frames_rejected = 0
        self._log = _LogLimiter()
        self._batch = _Batch()
        self._inbound_open = 0
        self._inbound_by_host: dict[str, int] = {}
        self._large_frames_until_s = float("-inf")
        self.metrics.set_gauge(
            "pykraft_quorum_connections_open", 0, "Inbound connections open on the listener."
        )
        # Bytes per peer: of the open connections, and of those closed.
        self._open_connections: set[_Connection] = set()
        self._closed_bytes: dict[str, list[int]] = {}
        self.metrics.add_collector(self._collect)

    def _collect(self) -> Iterable[Metric]:
        """At scrape time: bytes in and out per peer, and the configured
        voters this node holds no connection to (Kafka's
        number-unknown-voter-connections)."""
        totals = {label: list(pair) for label, pair in self._closed_bytes.items()}
        for connection in self._open_connections:
            pair = totals.setdefault(connection.peer_label, [0, 0])
            pair[0] += connection.bytes_in
            pair[1] += connection.bytes_out
        node = str(self.node_id)
        received = CounterMetricFamily(
            "pykraft_quorum_peer_received_bytes_total", "Bytes received from each peer (node id, or client).", labels=["node", "peer"]
        )
        sent = CounterMetricFamily(
            "pykraft_quorum_peer_sent_bytes_total", "Bytes sent to each peer (node id, or client).", labels=["node", "peer"]
        )
        for label, (bytes_in, bytes_out) in sorted(totals.items()):
            received.add_metric([node, label], bytes_in)
            sent.add_metric([node, label], bytes_out)
        unknown = GaugeMetricFamily(
            "pykraft_quorum_unknown_voter_connections",
            "Configured voters this node has no open link to.",
            labels=["node"],
        )
        unknown.add_metric([node], sum(1 for peer in self.peer_addresses if peer not in self._links))
        # Read from the kernel here, at scrape time: nothing on the hot path
        # (docs/operations.md, "Peer round-trip time", says why this measure).
        round_trip = GaugeMetricFamily(
            "pykraft_quorum_peer_round_trip_time_seconds",
            "The kernel's smoothed TCP round-trip time (TCP_INFO tcpi_rtt) of this node's link to each configured voter.",
            labels=["node", "peer"],
        )
        for peer, link in sorted(self._links.items()):
            rtt_s = smoothed_round_trip_s(link.stream)
            if rtt_s is not None:
                round_trip.add_metric([node, str(peer)], rtt_s)
        return [received, sent, unknown, round_trip]

    def _track(self, connection: _Connection) -> None:
        self._open_connections.add(connection)

    def _untrack(self, connection: _Connection) -> None:
        if connection in self._open_connections:
            self._open_connections.discard(connection)
            label = connection.peer_label
            if label not in self._closed_bytes and len(self._closed_bytes) >= PEER_LABELS_MAX:
                label = "other"  # a peer may claim any id: bounded series
            pair = self._closed_bytes.setdefault(label, [0, 0])
            pair[0] += connection.bytes_in
            pair[1] += connection.bytes_out

    # -- Transport -----------------------------------------------------------------

    def learn_voter_address(self, node_id: int, address: tuple[str, int]) -> None:
        """Reach voter ``node_id`` at ``address`` from now on, as a
        bootstrap voter (KIP-853: added at run time). A voter this node
        already knows keeps its address."""
        if node_id == self.node_id or node_id in self.peer_addresses:
            return
        self.peer_addresses[node_id] = address
        self.voter_ids = self.voter_ids | {node_id}
        self._voters = self._voters | {node_id}
        self._queues[node_id] = deque()
        self._wakeups[node_id] = trio.Event()
        logger.info("node %d: voter %d is at %s:%d", self.node_id, node_id, *address)
        if self._nursery is not None:  # else ``run`` starts its link with the others
            self._nursery.start_soon(self._peer_link, node_id)

    def send(self, message: Message) -> None:
        if type(message) is FetchRequest or type(message) is FetchSnapshotRequest:
            self._large_frames_until_s = trio.current_time() + LARGE_FRAME_WINDOW_S
        queue = self._queues.get(message.dst)
        if queue is not None:
            link = self._links.get(message.dst)
            if link is not None and not queue:
                if not link.send(message) and link.broken:
                    self._links.pop(message.dst, None)  # the link task reconnects
                return
            if len(queue) >= PEER_QUEUE_MESSAGES_MAX:
                queue.popleft()
            queue.append(message)
            self._wakeups[message.dst].set()
            return
        connection = self._return_paths.get(message.dst)
        if connection is None or connection.closed:
            return  # nowhere to send it: like a lost packet
        connection.send(message)

    def begin_batch(self) -> None:
        self._batch.active = True

    def end_batch(self) -> None:
        batch = self._batch
        batch.active = False
        connections, batch.connections = batch.connections, []
        for connection in connections:
            connection.write_held()

    async def run(
        self,
        deliver: Callable[[Message], None],
        unreachable: Callable[[int], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self._deliver, self._unreachable = deliver, unreachable
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.listen is not None:
                host, port = self.listen
                listeners = await trio.open_tcp_listeners(port, host=host)
                self.bound_port = listeners[0].socket.getsockname()[1]
                for listener in listeners:
                    nursery.start_soon(self._accept_loop, listener, nursery)
            for peer in sorted(self.peer_addresses):
                nursery.start_soon(self._peer_link, peer)
            task_status.started()
            await trio.sleep_forever()

    # -- outbound --------------------------------------------------------------------

    async def _peer_link(self, peer: int) -> None:
        host, port = self.peer_addresses[peer]
        backoff_s = RECONNECT_BACKOFF_MIN_S
        queue, name = self._queues[peer], f"node {peer} at {host}:{port}"
        while True:
            try:
                stream, principal = await self._connect(peer, host, port)
            except (OSError, trio.BrokenResourceError, trio.TooSlowError, PeerNotAuthenticatedError) as error:
                logger.debug("cannot connect to %s: %s", name, error)
                self._unreachable(peer)
                await trio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, RECONNECT_BACKOFF_MAX_S)
                continue
            backoff_s = RECONNECT_BACKOFF_MIN_S
            _allow_unsent_bytes(stream, PEER_LINK_UNSENT_BYTES_MAX)
            connection = _Connection(stream, name, self.cluster_id, self.limits, host, principal, self._batch)
            connection.peer_label = str(peer)
            self._track(connection)
            try:
                # trio nurseries wrap errors in exception groups: each task
                # handles its own connection errors, so none escapes.
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_loop, connection, nursery.cancel_scope)
                    nursery.start_soon(connection.run_writer, nursery.cancel_scope)
                    connection.send(Hello(node_id=self.node_id, role=self.hello_role))
                    await self._drain(peer, queue, connection)
                    nursery.cancel_scope.cancel()
                logger.info("connection to %s lost", name)
            except Exception:  # noqa: BLE001 - a bug here must not take the node down
                logger.exception("connection to %s failed unexpectedly", name)
            finally:
                if self._links.get(peer) is connection:
                    del self._links[peer]
                self._untrack(connection)
                await connection.aclose()
            # The peer went away (a reset, a restart): tell the core, which
            # may stand early if it was our leader.
            self._unreachable(peer)
            await trio.sleep(backoff_s)

    async def _connect(self, peer: int, host: str, port: int) -> tuple[trio.abc.Stream, Principal | None]:
        """A stream to voter ``peer``; with TLS, only once its certificate
        proved it is that node. Raises ``OSError``, ``trio.BrokenResourceError``
        or ``trio.TooSlowError`` (the handshake), ``PeerNotAuthenticatedError``."""
        if self.tls is None:
            return await trio.open_tcp_stream(host, port), None
        try:
            stream, principal = await self.tls.connect(host, port)
        except (trio.BrokenResourceError, trio.TooSlowError, PeerNotAuthenticatedError) as error:
            self._count_handshake_failure(error)
            self._log.warning(
                host, "tls_handshake", "TLS with node %d at %s:%d failed: %s", peer, host, port, handshake_failure_reason(error)
            )
            raise
        if principal.kind is not PrincipalKind.NODE or principal.member_id != peer:
            await trio.aclose_forcefully(stream)
            self._count_handshake_failure(None, "wrong_principal")
            self._log.warning(
                host, "wrong_principal", "%s:%d presented %s, not pykraft://node/%d: not connecting", host, port, principal, peer
            )
            raise PeerNotAuthenticatedError(f"{host}:{port} is {principal}, not node {peer}")
        self._count_handshake("outbound", stream)
        return stream, principal

    def _count_handshake(self, direction: str, stream: TlsStream) -> None:
        self.metrics.add_to_counter(
            "pykraft_tls_handshakes_total",
            help_text="TLS handshakes completed, by direction and whether they resumed an earlier session.",
            direction=direction,
            resumed=str(stream.session_reused).lower(),
        )

    def _count_handshake_failure(self, error: BaseException | None, reason: str | None = None) -> None:
        self.metrics.add_to_counter(
            "pykraft_tls_handshake_failures_total",
            help_text="TLS handshakes that failed (no or untrusted or expired certificate, wrong principal, timeout).",
            reason=reason or (handshake_failure_reason(error) if error is not None else "unknown"),
        )

    async def _drain(self, peer: int, queue: deque[Message], connection: _Connection) -> None:
        """Send what queued up while the link was down, then let ``send``
        write to this connection directly; returns once it breaks."""
        while not connection.broken:
            while queue and not connection.broken:
                connection.send(queue.popleft())
            if connection.broken:
                return
            self._links[peer] = connection
            self._wakeups[peer] = trio.Event()
            await self._wakeups[peer].wait()

    # -- inbound ---------------------------------------------------------------------

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Accept connections; close at once those over the listener's or
        their address's cap (counted, logged at most once per interval)."""
        limits = self.connection_limits
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as error:
                    if error.errno not in _ACCEPT_CAPACITY_ERRNOS:
                        raise
                    logger.error("cannot accept a connection (%s): retrying in %.1f s", error, _ACCEPT_RETRY_S)
                    await trio.sleep(_ACCEPT_RETRY_S)
                    continue
                try:
                    host, port = stream.socket.getpeername()[:2]
                except OSError:
                    host, port = "unknown", 0
                refused = None
                if self._inbound_open >= limits.connections_max:
                    refused = "listener_full"
                elif self._inbound_by_host.get(host, 0) >= limits.connections_per_address_max:
                    refused = "address_full"
                if refused is not None:
                    self.metrics.add_to_counter(
                        "pykraft_quorum_connections_refused_total",
                        help_text="Inbound connections closed at accept, by the cap that refused them.",
                        reason=refused,
                    )
                    self._log.warning(
                        host, refused, "refused a connection from %s:%s: %s (%d open, %d from this address)",
                        host, port, refused.replace("_", " "), self._inbound_open, self._inbound_by_host.get(host, 0),
                    )  # fmt: skip
                    stream.socket.close()
                    continue
                self._inbound_open += 1
                self._inbound_by_host[host] = self._inbound_by_host.get(host, 0) + 1
                self.metrics.set_gauge("pykraft_quorum_connections_open", self._inbound_open)
                self.metrics.add_to_counter(
                    "pykraft_quorum_connections_accepted_total", help_text="Inbound connections accepted."
                )
                nursery.start_soon(self._serve_inbound, stream, host, f"{host}:{port}")

    async def _accept_tls(self, stream: trio.SocketStream, host: str, name: str) -> _Connection | None:
        """The TLS handshake of an inbound connection; None (logged,
        counted, closed) when the peer did not prove a principal."""
        assert self.tls is not None
        secure = self.tls.wrap_server(stream)
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                await secure.do_handshake()
            principal = peer_principal(secure)
        except (trio.BrokenResourceError, trio.TooSlowError, PeerNotAuthenticatedError) as error:
            self._count_handshake_failure(error)
            self._log.warning(host, "tls_handshake", "refused a connection from %s: TLS: %s", name, handshake_failure_reason(error))
            await trio.aclose_forcefully(secure)
            return None
        self._count_handshake("inbound", secure)
        return _Connection(secure, f"{name} ({principal})", self.cluster_id, self.limits, host, principal, self._batch)

    async def _serve_inbound(self, stream: trio.SocketStream, host: str, name: str) -> None:
        connection: _Connection | None = None
        try:
            if self.tls is None:
                connection = _Connection(stream, name, self.cluster_id, self.limits, host, batch=self._batch)
            else:
                connection = await self._accept_tls(stream, host, name)
                if connection is None:
                    return
            self._track(connection)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.run_writer, nursery.cancel_scope)
                await self._read_loop(connection, nursery.cancel_scope, nursery)
        except Exception:  # noqa: BLE001 - one bad connection must not take the node down
            logger.exception("connection from %s failed unexpectedly", name)
        finally:
            self._inbound_open -= 1
            remaining = self._inbound_by_host[host] - 1
            if remaining:
                self._inbound_by_host[host] = remaining
            else:
                del self._inbound_by_host[host]
            self.metrics.set_gauge("pykraft_quorum_connections_open", self._inbound_open)
            if connection is None:
                await trio.aclose_forcefully(stream)
                return
            self._untrack(connection)
            await connection.aclose()
            for node_id, path in list(self._return_paths.items()):
                if path is connection:
                    del self._return_paths[node_id]

    def _frame_bytes_max_for(self, connection: _Connection, inbound: bool, type_code: int | None) -> int:
        """A large frame (a FetchResponse or FetchSnapshotResponse) only while
        this node fetches, and only where its fetch answers come from: a
        connection it opened (an observer's answers come back on it), or one
        on which a configured voter said Hello (the leader's link to a
        follower). Anything else is held to the small limit."""
        if (
            type_code in self.limits.large_type_codes
            and (not inbound or connection.from_voter)
            and trio.current_time() < self._large_frames_until_s
        ):
            return self.limits.frame_bytes_max
        return self.limits.small_frame_bytes_max

    async def _read_loop(
        self, connection: _Connection, scope: trio.CancelScope, nursery: trio.Nursery | None = None
    ) -> None:
        """Read frames until the stream ends, breaks, breaks the protocol or
        a limit; then cancel ``scope`` (the connection's tasks)."""
        try:
            await self._read_frames(connection, nursery)
        except _CONNECTION_ERRORS as error:
            logger.debug("connection with %s ended: %s", connection.peer, error)
        scope.cancel()

    def _close_for(self, connection: _Connection, reason: str, text: str, *args: Any) -> None:
        self.metrics.add_to_counter(
            "pykraft_quorum_connections_closed_total",
            help_text="Connections this node closed, by the limit or protocol rule the peer broke.",
            reason=reason,
        )
        self._log.warning(connection.host, reason, "closing the connection with %s: " + text, connection.peer, *args)

    async def _read_frames(self, connection: _Connection, nursery: trio.Nursery | None) -> None:
        """The receive path. Inbound connections (``nursery`` given: client
        requests are served) have an idle timeout; every connection a
        deadline to finish a started frame."""
        limits = self.connection_limits
        inbound = nursery is not None
        decoder = FrameDecoder(
            frame_bytes_max=self.limits.frame_bytes_max,
            frame_bytes_max_for=lambda type_code: self._frame_bytes_max_for(connection, inbound, type_code),
        )
        frame_deadline_s = limits.frame_deadline_ms / 1000
        idle_timeout_s = limits.idle_timeout_ms / 1000
        last_heard_s = trio.current_time()
        frame_started_s: float | None = None
        client_frames = 0
        while True:
            if frame_started_s is not None:
                deadline_s, reason = frame_started_s + frame_deadline_s, "frame_deadline"
            elif inbound and not connection.from_voter:
                deadline_s, reason = last_heard_s + idle_timeout_s, "idle"
            else:
                deadline_s, reason = float("inf"), ""
            with trio.move_on_at(deadline_s) as timer:
                data = await connection.reader.receive_some(RECEIVE_BYTES)
                if not data:
                    if decoder.in_frame:
                        logger.debug("%s closed the connection %d bytes into a frame", connection.peer, decoder.buffered_bytes)
                    return
            if timer.cancelled_caught:
                if reason == "idle":
                    self._close_for(connection, reason, "nothing received for %.0f s", idle_timeout_s)
                else:
                    self._close_for(
                        connection, reason, "a frame was started and not finished within %.1f s (%d bytes of it)",
                        frame_deadline_s, decoder.buffered_bytes,
                    )  # fmt: skip
                return
            last_heard_s = trio.current_time()
            connection.bytes_in += len(data)
            if _trace.enabled:
                _trace.stamp("rx", len(data))
            decoder.feed(data)
            completed_frame = False
            # A client's requests read in one go are handed to the core as
            # one run: its pipelined proposals in one append (about a fifth
            # of the leader's CPU per write at 64 in flight; issue 21). Held
            # only between awaits: a voter's message never waits behind it.
            hold = self.hold_core if inbound and not connection.from_voter else None
            if hold is not None:
                hold()
            try:
                while True:
                    try:
                        payload = decoder.next_frame()
                    except FrameTooLargeError as error:
                        # In the first bytes the connection sent: most likely
                        # no pykraft peer at all (HTTP, SSH, a scanner), and
                        # those bytes tell the operator which.
                        first = data[:FIRST_BYTES_SHOWN] if connection.bytes_in == len(data) else None
                        self._reject(connection, error, answer=False, reason="frame_too_large", first_bytes=first)
                        return
                    if payload is None:
                        break
                    completed_frame = True
                    pause_collector = len(payload) >= COLLECTOR_PAUSE_FRAME_BYTES_MIN
                    try:
                        if pause_collector:
                            with collector_paused():
                                decoded = decode_message(payload, expected_cluster_id=self.cluster_id, limits=self.limits)
                        else:
                            decoded = decode_message(payload, expected_cluster_id=self.cluster_id, limits=self.limits)
                    except RemoteProtocolError as error:
                        answer = error.correlation_id is not None and error.message_type != "ErrorFrame"
                        self._reject(connection, error, answer=answer, reason="protocol_error")
                        if answer:
                            connection.send(error.to_error_frame(), error.correlation_id)
                        if not error.recoverable:
                            return
                        continue
                    message = decoded.message
                    # Not read further while this connection's answers wait to be
                    # written (the peer does not read them), nor, for client
                    # requests, past the in-flight bound. Quorum messages never
                    # wait behind client requests.
                    client_request = nursery is not None and service_class(message, self._voters) is ServiceClass.CLIENT
                    while connection.writer.pending_bytes > limits.write_backlog_bytes_max or (
                        client_request
                        and (
                            connection.requests_in_flight >= limits.requests_in_flight_max
                            or connection.request_bytes_in_flight >= limits.request_bytes_in_flight_max
                        )
                    ):
                        self.metrics.add_to_counter(
                            "pykraft_quorum_backpressure_pauses_total",
                            help_text="Times a connection was not read until its answers were written.",
                        )
                        if hold is not None:
                            self.release_core()
                        with trio.move_on_after(idle_timeout_s if inbound else float("inf")) as wait:
                            await connection.wait_for_capacity()
                        if hold is not None:
                            hold()
                        if wait.cancelled_caught:
                            self._close_for(connection, "stalled", "its answers were not read for %.0f s", idle_timeout_s)
                            return
                        if connection.broken:
                            return
                        last_heard_s = trio.current_time()
                    if pause_collector:
                        # Not across the wait above: other tasks run there.
                        with collector_paused():
                            self._dispatch(connection, message, decoded.correlation_id, nursery, len(payload))
                    else:
                        self._dispatch(connection, message, decoded.correlation_id, nursery, len(payload))
                    if client_request:
                        # Replication first: let voters' tasks run between
                        # bursts of client requests read in one go.
                        client_frames += 1
                        if client_frames % CLIENT_FRAMES_PER_YIELD == 0:
                            if hold is not None:
                                self.release_core()
                            await trio.lowlevel.checkpoint()
                            if hold is not None:
                                hold()
            finally:
                if hold is not None:
                    self.release_core()

            # The frame deadline runs from the first bytes of the frame now in
            # progress (a new one if a frame completed in this chunk; the
            # time this node spent on the chunk, backpressure included, is
            # not the peer's).
            if not decoder.in_frame:
                frame_started_s = None
            elif completed_frame or frame_started_s is None:
                frame_started_s = trio.current_time()

    def _dispatch(
        self, connection: _Connection, message: Any, correlation_id: int, nursery: trio.Nursery | None, size: int
    ) -> None:
        kind = type(message)
        principal = connection.principal
        if kind in _QUORUM_MESSAGE_TYPES:
            if principal is not None:
                refusal = refuse_quorum_message(principal, message, self.voter_ids)
                if refusal is not None:
                    self._refuse(connection, "quorum", refusal, correlation_id)
                    return
            if message.dst != self.node_id:
                self._log.warning(
                    connection.host, "wrong_node", "%s sent a message for node %d to node %d: dropped",
                    connection.peer, message.dst, self.node_id,
                )  # fmt: skip
                return
            if message.src not in self.peer_addresses:
                self._return_paths[message.src] = connection
            if connection.from_observer and kind is FetchRequest:
                message.observer = True  # its Hello said so (decoded just now: ours to mark)
            if connection.peer_label == "client":
                connection.peer_label = str(message.src)
            if _trace.enabled:
                _trace.stamp("recv-" + kind.__name__, _trace_key(message))
            if kind is FetchResponse and message.error is not ErrorCode.NONE:
                self.metrics.add_to_counter(
                    "pykraft_quorum_fetch_errors_total", 1, "Fetch answers that carried an error, by error.",
                    error=message.error.name,
                )  # fmt: skip
            self.delivering_frame_bytes = size
            try:
                self._deliver(message)
            finally:
                self.delivering_frame_bytes = 0
        elif kind is Hello:
            logger.debug("%s is %s %s", connection.peer, message.role, message.node_id)
            proven = principal is None or (principal.kind is PrincipalKind.NODE and principal.member_id == message.node_id)
            if message.role == "voter" and message.node_id in self.peer_addresses and proven:
                connection.from_voter = True
                connection.peer_label = str(message.node_id)
            # Believed as a Fetch's src is (over plaintext, from anyone): it
            # can only get the sender's own Fetches refused.
            connection.from_observer = message.role == "observer"
        elif kind is ErrorFrame:
            self._log.warning(
                connection.host, "error_frame", "%s answered with an error: %s %.200s",
                connection.peer, message.code.name, message.message,
            )  # fmt: skip
        elif kind not in _CLIENT_REQUEST_TYPES or nursery is None:
            # An answer sent as if it were a request, or a request on a
            # connection this node opened: nothing to serve.
            self._log.warning(
                connection.host, "not_served", "%s sent a %s, which this node does not serve", connection.peer, kind.__name__
            )
            if nursery is not None:
                connection.send(
                    ErrorFrame(
                        code=ErrorCode.INVALID_REQUEST,
                        message=f"{kind.__name__} is not a request this node serves",
                        correlation_id=correlation_id,
                    ),
                    correlation_id,
                )
        elif self.authorize is not None and (refusal := self.authorize(principal, message)) is not None:
            self._refuse(connection, "request", refusal, correlation_id)
        elif self.fast_request_handler is not None and self._handle_fast(connection, message, correlation_id, size):
            pass
        elif self.request_handler is not None:
            connection.request_started(size)
            nursery.start_soon(self._handle_request, connection, message, correlation_id, size)
        else:
            self._log.warning(
                connection.host, "not_served", "%s sent a %s, which this node does not serve", connection.peer, kind.__name__
            )

    def _refuse(self, connection: _Connection, kind: str, refusal: str, correlation_id: int) -> None:
        """An authenticated peer asked for what its principal may not do:
        answer, count, log (the connection stays open)."""
        self.metrics.add_to_counter(
            "pykraft_authorization_denials_total",
            help_text="Messages and requests refused because the sender's principal may not send them.",
            kind=kind,
        )
        self._log.warning(connection.host, "denied_" + kind, "refused from %s: %s", connection.peer, refusal)
        connection.send(
            ErrorFrame(code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, message=refusal[:200], correlation_id=correlation_id),
            correlation_id,
        )

    async def _handle_request(self, connection: _Connection, request: Any, correlation_id: int, size: int) -> None:
        assert self.request_handler is not None
        if _trace.enabled:
            _trace.stamp("request", type(request).__name__)
        try:
            response = await self.request_handler(request)
        except Exception as error:  # noqa: BLE001 - a bad request must not take the node down
            logger.exception("request %s from %s failed", type(request).__name__, connection.peer)
            response = ErrorFrame(code=ErrorCode.INVALID_REQUEST, message=str(error)[:200], correlation_id=correlation_id)
        connection.send(response, correlation_id)
        connection.request_answered(size)
        if _trace.enabled:
            _trace.stamp("answered", getattr(response, "offset", None))

    def _handle_fast(self, connection: _Connection, request: Any, correlation_id: int, size: int) -> bool:
        assert self.fast_request_handler is not None
        answered = False

        def reply(response: Any) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            connection.send(response, correlation_id)
            connection.request_answered(size)

        connection.request_started(size)
        try:
            taken = self.fast_request_handler(request, reply)
        except Exception as error:  # noqa: BLE001 - a bad request must not take the node down
            logger.exception("request %s from %s failed", type(request).__name__, connection.peer)
            reply(ErrorFrame(code=ErrorCode.INVALID_REQUEST, message=str(error)[:200], correlation_id=correlation_id))
            return True
        if not taken and not answered:
            connection.request_answered(size)
        return taken

    def _reject(
        self,
        connection: _Connection,
        error: RemoteProtocolError,
        *,
        answer: bool,
        reason: str,
        first_bytes: bytes | None = None,
    ) -> None:
        self.frames_rejected += 1
        self.metrics.add_to_counter(
            "pykraft_quorum_frames_rejected_total",
            help_text="Frames refused: over their type's size limit, or breaking the protocol.",
            reason=reason,
        )
        if not error.recoverable:
            self.metrics.add_to_counter("pykraft_quorum_connections_closed_total", reason=reason)
        action = "answered with an error" if answer and error.recoverable else "closing the connection"
        if first_bytes is not None:
            self._log.warning(
                connection.host, reason, "bad frame from %s (%s): %s; its first bytes: %r (not a pykraft peer?)",
                connection.peer, action, error, first_bytes,
            )  # fmt: skip
            return
        self._log.warning(connection.host, reason, "bad frame from %s (%s): %s", connection.peer, action, error)


def _trace_key(message: Any) -> Any:
    records = getattr(message, "records", None)
    if records is not None:
        return f"{records[0].offset if records else None}/{len(records)}/hw={message.high_watermark}"
    return getattr(message, "fetch_offset", None)
