"""A client for a pykraft quorum: propose records, read, describe.

::

    async with QuorumClient(["1@127.0.0.1:9091", "2@127.0.0.1:9092"]) as client:
        offset = await client.propose([b"record"])

Bootstrap entries are ``ID@HOST:PORT`` or ``HOST:PORT``, and one is
enough: they are for the first contact (KIP-853's bootstrap servers). A
node that does not lead answers NOT_LEADER naming the leader and, in
version 2, where it listens; the client adds that server and goes there
(``learn_servers`` adds more, the voters of a voter set the caller holds).
Requests are pipelined on one connection. Only errors that prove the
request did not happen (NOT_LEADER) are retried; a connection lost while a
proposal was in flight raises ``IndeterminateError``: it may have happened
(``NoAnswerError``, a subclass, when the request was sent and no answer came
within ``request_timeout_s``). ``last_answered_by`` names the server whose
answer ended the last successful request, ``last_sent_to`` the server the
last request went to (or tried to reach) whether it was answered or not.

With ``tls`` (a ``quorum.runtime.TlsConfig``) every connection is mutual
TLS 1.3, and the server must prove it is a quorum node (the one a
``ID@HOST:PORT`` entry names; a broker, which is an observer node too,
only when ``server_kinds`` admits it: DescribeQuorum of a broker's view). A request the server's ACL does not allow
raises ``NotAuthorizedError`` (docs/security.md). Without ``tls``, a server
that closes the connection before answering is asked whether it speaks
TLS; if it does, the client gives up at once with ``TlsRequiredError``
rather than retrying what can never work.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import logging
import ssl
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

import trio

from ._access import PrincipalKind
from ._config import check_seconds
from ._messages import ErrorCode
from ._node import QuorumError
from ._voters import check_endpoint, endpoint_address
from .wire import (
    FIRST_BYTES_SHOWN,
    ClusterIdMismatchError,
    AddVoterRequest,
    ApplicationRequest,
    ApplicationResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ErrorFrame,
    FrameDecoder,
    ProposeRequest,
    ProposeResponse,
    ReadRequest,
    ReadResponse,
    RemoteProtocolError,
    RemoveVoterRequest,
    UpgradeVotersRequest,
    VoterChangeResponse,
    check_cluster_id,
    decode_message,
    encode_message,
)

from .runtime import (
    WRITE_ERRORS,
    NodeConfig,
    PeerNotAuthenticatedError,
    StreamReader,
    StreamWriter,
    TlsConfig,
    peer_not_after,
)
from .storage import StorageOwnershipError, holds_log

logger = logging.getLogger("pykraft.client")


class QuorumClientError(QuorumError):
    """A request failed for good (no node could take it within the retry
    timeout, or the cluster refused it). When the retry timeout ran out,
    ``__cause__`` is the last failure."""


class WrongClusterError(QuorumClientError):
    """The server belongs to another cluster (INCONSISTENT_CLUSTER_ID): a
    misconfiguration, never retried."""


class NotAuthorizedError(QuorumClientError):
    """The server refused the request: this client's principal may not make
    it (CLUSTER_AUTHORIZATION_FAILED). It certainly did not happen."""


class VoterChangeRefusedError(QuorumClientError):
    """The leader refused an AddVoter, RemoveVoter or UpgradeVoters request
    (KIP-853): ``code`` is the ``ErrorCode`` (VOTER_CHANGE_IN_PROGRESS,
    VOTER_NOT_CAUGHT_UP, DUPLICATE_VOTER, VOTER_NOT_FOUND, VOTERS_STATIC,
    VOTER_REMOVED, INVALID_REQUEST), ``reason`` the leader's sentence.
    Nothing changed."""

    def __init__(self, address: str, code: ErrorCode, reason: str) -> None:
        super().__init__(f"{address} refused the voter change: {code.name}: {reason}")
        self.code = code
        self.reason = reason


class IndeterminateError(QuorumClientError):
    """The connection failed while the request was in flight: it may or may
    not have taken effect."""


class NoAnswerError(IndeterminateError):
    """The request was sent and no answer came within the request timeout
    (the connection stayed up): the server may still act on it."""


class AnswerNotSentError(IndeterminateError):
    """The server handled the request but could not send its answer
    (UNKNOWN_SERVER_ERROR: an application's answer over the frame limit):
    it may have taken effect. Asking again gets the same answer."""


class TlsRequiredError(QuorumClientError):
    """The server speaks TLS and this client was given none. A TLS listener
    reads no plaintext request: it closed the connection without acting on
    one."""


class Server(NamedTuple):
    """One bootstrap entry; ``node_id`` is None for a ``HOST:PORT`` entry."""

    node_id: int | None
    host: str
    port: int

    def __str__(self) -> str:
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        return address if self.node_id is None else f"{self.node_id}@{address}"


def parse_bootstrap(entries: list[str]) -> list[Server]:
    """``HOST:PORT`` or ``ID@HOST:PORT`` entries as servers. Raises
    ``ValueError`` naming the first entry that is neither (a port outside
    1-65535 included), or when there is none."""
    if isinstance(entries, str):  # iterated, it would be servers named "1", "@", ...
        raise TypeError(f"bootstrap must be a list of servers, not a str: give {entries.split(',')!r}")
    parsed = []
    addresses_by_id: dict[int, tuple[str, int]] = {}
    for entry in entries:
        if not isinstance(entry, str):
            raise TypeError(f"bootstrap server {entry!r:.80} must be a str, 'HOST:PORT' or 'ID@HOST:PORT'")
        if "," in entry:
            # One string holding a list (as --bootstrap takes it) would
            # otherwise be one server whose host is "127.0.0.1:9000,127.0.0.1".
            raise ValueError(f"bad bootstrap server {entry!r}: one server per item, give {entry.split(',')!r}")
        node_id: int | None = None
        address = entry.strip()
        try:
            if "@" in address:
                node, address = address.split("@", 1)
                node_id = int(node)
            host, port_text = address.rsplit(":", 1)
            port = int(port_text)
        except ValueError:
            raise ValueError(f"bad bootstrap server {entry!r}: expected HOST:PORT or ID@HOST:PORT") from None
        if not host.strip("[]") or not 1 <= port <= 65535:
            raise ValueError(f"bad bootstrap server {entry!r}: expected HOST:PORT or ID@HOST:PORT (a port from 1 to 65535)")
        if node_id is not None:
            known = addresses_by_id.setdefault(node_id, (host.strip("[]"), port))
            if known != (host.strip("[]"), port):
                raise ValueError(f"bad bootstrap server {entry!r}: node {node_id} is given another address before it")
        parsed.append(Server(node_id, host.strip("[]"), port))
    if not parsed:
        raise ValueError("no bootstrap servers given")
    return parsed


async def speaks_tls(host: str, port: int, *, timeout_s: float = 2.0) -> bool:
    """Whether the server at ``host:port`` answers a TLS ClientHello with a
    handshake (False: it does not, or not within ``timeout_s``, or cannot
    be reached). Nothing is sent over the connection and its certificate is
    not checked: this only tells a plaintext client why it was refused."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a diagnosis, not a channel: nothing is trusted or sent
    with trio.move_on_after(timeout_s):
        try:
            stream = trio.SSLStream(await trio.open_tcp_stream(host, port), context)
        except OSError:
            return False
        try:
            await stream.do_handshake()
            return True
        except trio.BrokenResourceError:
            return False
        finally:
            await trio.aclose_forcefully(stream)
    return False


# The flush point writes a burst of pipelined requests once it holds this
# many, without waiting for the rest of the burst. Held to the end of the
# burst, a whole window (64 requests answered by one read, say) left only
# after the client had run every task it woke: the leader sat idle through
# that, then took all 64 in one commit round, so client and leader worked in
# turn instead of side by side (64 in flight: about 8,400 writes/s against
# about 10,300 with this bound, and less CPU per write; docs/benchmarks.md,
# "The client's flush bound"). 16 frames keep a TLS burst to a few records.
FLUSH_FRAMES_MAX = 16


class _Connection:
    def __init__(self, stream: trio.abc.Stream, cluster_id: str, server: Server) -> None:
        self.stream = stream
        self.cluster_id = cluster_id
        self.server = server
        self.address = f"{server.host}:{server.port}"
        self.waiting: dict[int, tuple[trio.Event, list[Any]]] = {}
        self.correlation = itertools.count(1)
        self.broken: BaseException | None = None
        # The server closed (or reset) the connection before sending a
        # byte: what a TLS listener does to plaintext (``QuorumClient._call``
        # asks why).
        self.received_any = False
        self.closed_before_answering = False
        # Set when the client moved to another node: the connection closes
        # once the requests still in flight on it are answered.
        self.retiring = False
        # What the kernel does not take is sent by ``write_loop``.
        self.writer = StreamWriter(stream)
        self.reader = StreamReader(stream)
        # The flush point (``send_frame``): frames of requests made while
        # others are in flight, held until ``flush_loop`` runs, then written
        # as one (one system call; under TLS, one record).
        self._outbox: list[bytes] = []
        self._outbox_ready = trio.Event()
        # When each waiting request times out, soonest first (``request``
        # appends them in order), and the one task that wakes them
        # (``timeout_loop``): a cancel scope per request cost a pipelining
        # client about 7 µs of CPU per request (docs/benchmarks.md).
        self._deadlines: deque[tuple[float, int]] = deque()
        # The latest deadline ever added: ``timeout_loop`` never sleeps past
        # it, even when the answered heads have gone.
        self._deadline_latest = float("-inf")
        self._deadline_added = trio.Event()
        self._timeout_scope = trio.CancelScope()

    async def write_loop(self) -> None:
        try:
            await self.writer.run()
        except WRITE_ERRORS as error:
            self.fail(error)

    def send_frame(self, frame: bytes) -> None:
        """Write ``frame`` (one whole request) now, or at the flush point.

        A request with none other in flight (a lone or sequential caller) is
        written at once: no added latency. One made while others are in
        flight joins the outbox, which ``flush_loop`` writes when it next
        runs: after every task the scheduler woke with it has had its turn,
        so a burst of pipelined requests (64 tasks answered by one read, say)
        leaves in a few writes instead of one per task: the outbox is
        written as soon as it holds ``FLUSH_FRAMES_MAX`` frames, so the
        server starts on the burst's head while the client makes its tail.
        No timer: the outbox waits only for the tasks already runnable.
        Frames never overtake each other: while the outbox holds any, new
        ones queue behind them. Raises what ``StreamWriter.write`` raises."""
        if not self._outbox and not self.waiting:
            self.writer.write(frame)
            return
        if not self._outbox:
            self._outbox_ready.set()
        self._outbox.append(frame)
        if len(self._outbox) >= FLUSH_FRAMES_MAX:
            frames, self._outbox = self._outbox, []
            self.writer.write(b"".join(frames))

    async def flush_loop(self) -> None:
        """Write the outbox, each time requests join it, as one write;
        returns once the connection failed (``fail`` wakes it)."""
        while self.broken is None:
            await self._outbox_ready.wait()
            self._outbox_ready = trio.Event()
            frames, self._outbox = self._outbox, []
            if not frames or self.broken is not None:
                continue
            try:
                self.writer.write(frames[0] if len(frames) == 1 else b"".join(frames))
            except WRITE_ERRORS as error:
                self.fail(error)

    async def timeout_loop(self) -> None:
        """Wake each request whose deadline passed unanswered (its empty
        holder then says no answer came); returns once the connection
        failed (``fail`` cancels it)."""
        deadlines = self._deadlines
        with self._timeout_scope:
            while True:
                if not deadlines:
                    await self._deadline_added.wait()
                    self._deadline_added = trio.Event()
                    continue
                await trio.sleep_until(deadlines[0][0])
                now = trio.current_time()
                while deadlines and deadlines[0][0] <= now:
                    slot = self.waiting.pop(deadlines.popleft()[1], None)
                    if slot is not None:
                        slot[0].set()

    async def read_loop(self) -> None:
        decoder = FrameDecoder()
        # The first bytes the server sent, kept until a frame decodes: what
        # names a server that does not speak this protocol at all.
        first_bytes = b""
        decoded_any = False
        try:
            while not (self.retiring and not self.waiting):
                data = await self.reader.receive_some(256 * 1024)
                if not data:
                    raise trio.BrokenResourceError("connection closed by the server")
                self.received_any = True
                if not decoded_any and len(first_bytes) < FIRST_BYTES_SHOWN:
                    first_bytes += data[: FIRST_BYTES_SHOWN - len(first_bytes)]
                decoder.feed(data)
                while (payload := decoder.next_frame()) is not None:
                    decoded = decode_message(payload, expected_cluster_id=self.cluster_id)
                    decoded_any = True
                    slot = self.waiting.pop(decoded.correlation_id, None)
                    if slot is not None:
                        slot[1].append(decoded.message)
                        slot[0].set()
                # Answered requests leave the deadlines' head (answers come
                # nearly in order), so it holds about the requests in flight.
                deadlines, waiting = self._deadlines, self.waiting
                while deadlines and deadlines[0][1] not in waiting:
                    deadlines.popleft()
            self.fail(trio.ClosedResourceError("closed by the client: it moved to another node"))
        except ClusterIdMismatchError as error:
            self.fail(WrongClusterError(f"{self.address} belongs to another cluster: {error}"))
        except RemoteProtocolError as error:
            if decoded_any:
                self.fail(error)
            else:
                # Not one frame made sense: the address is not a pykraft
                # node's (an HTTP server, the metrics port, SSH), and the
                # frame error alone ("a frame of 1397966893 bytes") would
                # not say so.
                self.fail(
                    QuorumClientError(
                        f"{self.address} does not speak the pykraft protocol ({error}; its first bytes: "
                        f"{first_bytes!r}): is it a pykraft node's client address?"
                    )
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self.closed_before_answering = not self.received_any and isinstance(error, (trio.BrokenResourceError, OSError))
            self.fail(error)
        finally:
            if self.retiring:
                with trio.move_on_after(1) as scope:
                    scope.shield = True
                    await self.stream.aclose()

    def fail(self, error: BaseException) -> None:
        self.broken = error
        self.writer.close()
        self._outbox.clear()  # never sent: their requests fail below
        self._outbox_ready.set()
        self._timeout_scope.cancel()
        for event, _ in self.waiting.values():
            event.set()
        self.waiting.clear()

    async def request(self, message: Any, timeout_s: float) -> Any:
        if isinstance(self.broken, WrongClusterError):
            raise self.broken
        if self.broken is not None:
            # Known broken before sending: certainly not sent.
            raise QuorumClientError(f"connection to {self.address} is broken: {self.broken}")
        correlation_id = next(self.correlation)
        event, holder = trio.Event(), []
        frame = encode_message(message, correlation_id=correlation_id, cluster_id=self.cluster_id)
        try:
            self.send_frame(frame)
        except WRITE_ERRORS as error:
            self.fail(error)
            raise QuorumClientError(f"could not send to {self.address}: {error}") from error
        self.waiting[correlation_id] = (event, holder)
        deadline = trio.current_time() + timeout_s
        deadlines = self._deadlines
        try:
            if deadline < self._deadline_latest:
                # Sooner than one given before (the end of the caller's
                # retry time): a scope of its own keeps the others in order.
                with trio.move_on_after(timeout_s):
                    await event.wait()
            else:
                self._deadline_latest = deadline
                deadlines.append((deadline, correlation_id))
                if len(deadlines) == 1:
                    self._deadline_added.set()
                await event.wait()
        except BaseException:
            # Cancelled: the answer, if one comes, is nobody's (and a slot
            # left behind would count as a request in flight).
            self.waiting.pop(correlation_id, None)
            raise
        if not holder:
            self.waiting.pop(correlation_id, None)
            if isinstance(self.broken, WrongClusterError):
                raise self.broken
            if self.broken is not None:
                raise IndeterminateError(f"connection to {self.address} failed with the request in flight: {self.broken}")
            raise NoAnswerError(f"no answer from {self.address} within {timeout_s:.3g} s")
        return holder[0]


# The requests a node may answer NOT_LEADER (versions 1 and 2; version 2's
# answers name where the leader listens).
_LEADER_HINT_REQUEST_TYPES = frozenset(
    {ProposeRequest, ReadRequest, ApplicationRequest, AddVoterRequest, RemoveVoterRequest, UpgradeVotersRequest}
)
# How many servers a client keeps: its bootstrap list and the leaders
# NOT_LEADER answers named. A voter set holds at most a few.
_SERVERS_MAX = 64


def _in_older_version(message: Any, version: int) -> Any:
    """``message`` as an older node takes it. Raises ``QuorumClientError``
    for an auto-join AddVoter, which version 1 cannot mark: sent unmarked it
    would be an operator's request, which the leader lets re-add a removed
    disk (issue 17); auto-join asks again later."""
    if getattr(message, "auto_join", False):
        raise QuorumClientError(f"the leader is older than auto-join's AddVoter version 2 (it speaks version {version})")
    return dataclasses.replace(message, version=version)


class QuorumClient:
    """See the module docstring. Use as an async context manager."""

    def __init__(
        self,
        bootstrap: list[str],
        *,
        cluster_id: str = "pykraft",
        request_timeout_s: float = 5.0,
        retry_timeout_s: float = 30.0,
        tls: TlsConfig | None = None,
        server_kinds: tuple[PrincipalKind, ...] = (PrincipalKind.NODE,),
    ) -> None:
        self._servers = parse_bootstrap(bootstrap)
        check_seconds(request_timeout_s, "request_timeout_s")
        check_seconds(retry_timeout_s, "retry_timeout_s")
        check_cluster_id(cluster_id)  # every request carries it
        self.tls = tls
        self.server_kinds = server_kinds
        # When the certificate of the server last connected to expires.
        self.server_certificate_not_after: datetime.datetime | None = None
        self.cluster_id = cluster_id
        self.request_timeout_s = request_timeout_s
        self.retry_timeout_s = retry_timeout_s
        self._index = 0
        self._connection: _Connection | None = None
        self._last_answered_by: Server | None = None
        self._last_sent_to: Server | None = None
        # The DescribeQuorum version to ask in: one lower each time a node
        # refuses it (an older pykraft).
        self._describe_version = 3
        # The version of the requests a node may answer NOT_LEADER: 2 (the
        # answer names where the leader listens), 1 once a node refuses it
        # (an older pykraft).
        self._leader_hint_version = 2
        # Servers a plaintext client already asked whether they speak TLS.
        self._plaintext_servers_checked: set[Server] = set()
        self._connect_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: Any = None

    @property
    def last_answered_by(self) -> Server | None:
        """The server whose answer ended the last request that returned
        (None before the first). With several tasks sharing the client,
        read it right after your own request returns, before awaiting
        anything else."""
        return self._last_answered_by

    @property
    def last_sent_to(self) -> Server | None:
        """The server the last request was last sent to, or last tried to
        reach (a connection refused counts): for a request that raised, the
        node that refused it, did not answer in time, or could not be
        reached; for one that returned, ``last_answered_by``. None before
        the first request. With several tasks sharing the client, read it
        as ``last_answered_by``."""
        return self._last_sent_to

    async def __aenter__(self) -> QuorumClient:
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        await self._close_connection()
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()
        raised = exc_info[1]
        self._nursery = None
        try:
            return await self._nursery_manager.__aexit__(*exc_info)
        except BaseExceptionGroup as group:
            # trio's nurseries wrap what leaves them in an exception group,
            # the body's own error included; the client's tasks raise none.
            # Give the caller the error its request raised, so that
            # ``except QuorumClientError`` around the block catches it (the
            # node's auto-join did not, and its process exited when a leader
            # did not answer).
            if raised is not None and group.exceptions == (raised,):
                raise raised from None
            raise

    async def _close_connection(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            connection.fail(trio.ClosedResourceError("closed by the client"))
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await connection.stream.aclose()

    async def _connect(self) -> _Connection:
        # One connection attempt at a time: concurrent requests share it.
        async with self._connect_lock:
            if self._connection is not None and self._connection.broken is None:
                return self._connection
            await self._close_connection()
            server = self._servers[self._index % len(self._servers)]
            self._last_sent_to = server
            stream = await self._open_stream(server)
            connection = _Connection(stream, self.cluster_id, server)
            assert self._nursery is not None
            self._nursery.start_soon(connection.read_loop)
            self._nursery.start_soon(connection.write_loop)
            self._nursery.start_soon(connection.flush_loop)
            self._nursery.start_soon(connection.timeout_loop)
            self._connection = connection
            return connection

    async def _open_stream(self, server: Server) -> trio.abc.Stream:
        """A stream to ``server``. Raises ``OSError``, and with TLS
        ``trio.BrokenResourceError`` (the handshake failed: an untrusted or
        expired certificate, say), ``trio.TooSlowError`` or
        ``PeerNotAuthenticatedError`` (not a node, or not the one named)."""
        if self.tls is None:
            return await trio.open_tcp_stream(server.host, server.port)
        stream, principal = await self.tls.connect(server.host, server.port)
        if principal.kind not in self.server_kinds or (server.node_id is not None and principal.member_id != server.node_id):
            await trio.aclose_forcefully(stream)
            raise PeerNotAuthenticatedError(f"{server} presented {principal}, not the quorum node expected")
        self.server_certificate_not_after = peer_not_after(stream)
        return stream

    def learn_servers(self, endpoints: Mapping[int, str | None]) -> None:
        """Ask these nodes too (node id -> "HOST:PORT"; None: not known,
        skipped): the voters of the voter set a caller holds (a broker's
        replica), in place of any address the bootstrap list gave for
        those ids. Raises ``ValueError`` for an endpoint that is not
        ``HOST:PORT``."""
        for node_id, endpoint in endpoints.items():
            if endpoint is not None:
                self._learn_server(node_id, check_endpoint(endpoint))

    def _learn_server(self, node_id: int, endpoint: str) -> None:
        """A NOT_LEADER answer said node ``node_id`` leads and listens at
        ``endpoint`` (validated by the wire): ask it there from now on, in
        place of any address the bootstrap list gave for that id (KIP-853:
        the bootstrap list is only for the first contact; the cluster's
        voter set says where its voters are). Bounded: past
        ``_SERVERS_MAX`` entries a new id is not kept (the answer's leader
        is still asked, through the node that named it)."""
        host, port = endpoint_address(endpoint)
        learned = Server(node_id, host, port)
        for index, server in enumerate(self._servers):
            if server.node_id == node_id:
                if server != learned:
                    logger.info("node %d listens at %s (not %s): a NOT_LEADER answer said so", node_id, learned, server)
                    self._servers[index] = learned
                return
        if len(self._servers) >= _SERVERS_MAX:
            return
        logger.info("learned of node %d at %s from a NOT_LEADER answer", node_id, learned)
        self._servers.append(learned)

    async def _move_to(
        self, leader_hint: int | None, away_from: _Connection | None, leader_endpoint: str | None = None
    ) -> None:
        """Use another node from the next request on (the leader named, at
        ``leader_endpoint`` when given). Only the first of several requests
        turned away by the same connection moves the client. The old
        connection is not cut: requests still in flight on it (pipelined by
        other tasks) get their answers, then it closes."""
        if away_from is not None and self._connection is not away_from:
            return  # another request already moved the client
        if leader_hint is not None and leader_endpoint is not None:
            self._learn_server(leader_hint, leader_endpoint)
        if self._connection is not None:
            connection, self._connection = self._connection, None
            connection.retiring = True
            if not connection.waiting:
                connection.fail(trio.ClosedResourceError("closed by the client: it moved to another node"))
                with trio.move_on_after(1) as scope:
                    scope.shield = True
                    await connection.stream.aclose()
        for index, (node_id, _, _) in enumerate(self._servers):
            if leader_hint is not None and node_id == leader_hint:
                self._index = index
                return
        self._index += 1

    async def _call(self, message: Any, *, retry_indeterminate: bool) -> Any:
        """Send ``message`` until a node serves it or the retry timeout
        passes. Only failures that prove the request was not acted on are
        retried (and, for reads, any failure). A request in flight when time
        runs out is indeterminate, never a definite failure."""
        backoff_s = 0.02
        hintless_answers = 0
        broken_connections = 0
        last_error: BaseException | None = None
        if self._nursery is None:
            # Not entered (or left): its connections would have no task to run in.
            raise RuntimeError("the QuorumClient is not open: use it as `async with QuorumClient(...) as client:`")
        deadline = trio.current_time() + self.retry_timeout_s
        if type(message) in _LEADER_HINT_REQUEST_TYPES and message.version > self._leader_hint_version:
            message = _in_older_version(message, self._leader_hint_version)
        while (remaining_s := deadline - trio.current_time()) > 0:
            connection = self._connection
            try:
                if connection is None or connection.broken is not None:
                    with trio.fail_after(remaining_s):
                        connection = await self._connect()
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, PeerNotAuthenticatedError) as error:
                if not isinstance(error, trio.TooSlowError):
                    last_error = error
                elif last_error is None:
                    # Time ran out while connecting: say so, rather than
                    # with TooSlowError's empty text. After another failure,
                    # that failure is the news.
                    last_error = QuorumClientError(f"could not connect to {self._last_sent_to} within {remaining_s:.3g} s")
                await self._move_to(None, None)
                await trio.sleep(min(backoff_s, max(0.0, deadline - trio.current_time())))
                backoff_s = min(backoff_s * 2, 0.5)
                continue
            self._last_sent_to = connection.server
            try:
                response = await connection.request(message, min(self.request_timeout_s, max(0.001, remaining_s)))
            except WrongClusterError:
                raise
            except (IndeterminateError, QuorumClientError) as error:
                # Closed before a byte came back: a TLS listener does that
                # to plaintext, before reading a request (none was acted on).
                if self.tls is None and connection.closed_before_answering:
                    await self._refuse_if_tls_required(connection.server, deadline)
                if isinstance(error, IndeterminateError) and not retry_indeterminate:
                    raise
                # IndeterminateError retried (a read), or not even sent: safe to retry.
                last_error = error
                await self._move_to(None, connection)
                broken_connections += 1
                if broken_connections % len(self._servers) == 0:
                    # Every node broke the connection: wait before the next
                    # round, as after refused connections, rather than
                    # reconnect in a loop that keeps a core busy (a server
                    # that resets every connection, a node restarting).
                    await trio.sleep(min(backoff_s, max(0.0, deadline - trio.current_time())))
                    backoff_s = min(backoff_s * 2, 0.5)
                continue
            if isinstance(response, ErrorFrame):
                if (
                    response.code is ErrorCode.INVALID_REQUEST
                    and type(message) in _LEADER_HINT_REQUEST_TYPES
                    and message.version == 2
                    and "version 2 is not supported" in response.message
                ):
                    # An older pykraft: ask again in version 1 (its answers
                    # name the leader's id only), and keep to it.
                    self._leader_hint_version = 1
                    message = _in_older_version(message, 1)
                    continue
                if response.code is ErrorCode.INCONSISTENT_CLUSTER_ID:
                    raise WrongClusterError(f"{connection.address} belongs to another cluster: {response.message}")
                if response.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
                    raise NotAuthorizedError(f"{connection.address} refused the request: {response.message}")
                if response.code is ErrorCode.UNKNOWN_SERVER_ERROR:
                    raise AnswerNotSentError(f"{connection.address}: {response.code.name}: {response.message}")
                raise QuorumClientError(f"{connection.address} refused the request: {response.code.name}: {response.message}")
            error_code = getattr(response, "error", ErrorCode.NONE)
            if error_code is ErrorCode.NOT_LEADER:
                last_error = QuorumClientError(f"{connection.address} is not the leader")
                await self._move_to(response.leader_hint, connection, getattr(response, "leader_endpoint", None))
                if response.leader_hint is None:
                    # No leader known there (an election, a hand-over): ask
                    # the next node at once, and back off only once a whole
                    # round of them said so. A node that already knows the
                    # new leader names it, and every wait here is time
                    # without writes (a removed leader, which knows no
                    # successor for a while, cost up to 2 s when the client
                    # backed off after each answer; bench.voter_change_bench).
                    hintless_answers += 1
                    if hintless_answers % len(self._servers) == 0:
                        await trio.sleep(min(backoff_s, max(0.0, deadline - trio.current_time())))
                        backoff_s = min(backoff_s * 2, 0.5)
                continue
            if error_code is not ErrorCode.NONE and type(response) is VoterChangeResponse:
                refused = VoterChangeRefusedError(connection.address, error_code, response.message)
                if error_code not in (ErrorCode.VOTER_CHANGE_IN_PROGRESS, ErrorCode.VOTER_NOT_CAUGHT_UP):
                    raise refused
                # Nothing happened, and it may soon: the change before is
                # about to commit (KIP-853, one at a time), or the new voter,
                # fetching, reaches the high watermark as it moves under
                # load. Ask again shortly, until the retry timeout.
                last_error = refused
                await trio.sleep(min(backoff_s, max(0.0, deadline - trio.current_time())))
                backoff_s = min(backoff_s * 2, 0.5)
                continue
            if error_code is not ErrorCode.NONE:
                raise QuorumClientError(f"{connection.address} answered {error_code.name}")
            self._last_answered_by = connection.server
            return response
        if isinstance(last_error, VoterChangeRefusedError):
            raise last_error  # the leader's own reason says what to do
        # The last failure is the cause: a NoAnswerError or other
        # IndeterminateError there means a retried request was in flight.
        raise QuorumClientError(f"no node served the request within {self.retry_timeout_s} s: {last_error}") from last_error

    async def _refuse_if_tls_required(self, server: Server, deadline: float) -> None:
        """Raise ``TlsRequiredError`` when ``server`` speaks TLS (this
        client has no ``tls``); return when it does not or does not say
        within the time left."""
        if server in self._plaintext_servers_checked:
            return
        self._plaintext_servers_checked.add(server)
        if await speaks_tls(server.host, server.port, timeout_s=max(0.0, deadline - trio.current_time())):
            raise TlsRequiredError(
                f"{server} requires TLS and this client has none: give it a TlsConfig "
                "(on the command line --tls-ca, --tls-cert and --tls-key, or --command-config)"
            )

    async def propose(self, records: list[bytes]) -> int:
        """Commit ``records``; returns the offset of the first. Raises
        ``IndeterminateError`` when it may or may not have happened,
        ``QuorumClientError`` when it certainly did not."""
        offset, _ = await self.propose_with_results(records)
        return offset

    async def propose_with_results(self, records: list[bytes]) -> tuple[int, tuple[bytes | None, ...]]:
        """``propose``, also returning the state machine's answer for each
        record (a compare-and-set's outcome, say). Raises as ``propose``."""
        response: ProposeResponse = await self._call(ProposeRequest(records=tuple(records)), retry_indeterminate=False)
        assert response.offset is not None
        return response.offset, response.results

    async def read(self, query: bytes = b"", *, mode: str = "linearizable") -> tuple[int, bytes | None]:
        """(offset read at, the state machine's answer to ``query``)."""
        response: ReadResponse = await self._call(ReadRequest(mode=mode, query=query), retry_indeterminate=True)
        assert response.offset is not None
        return response.offset, response.value

    async def application_request(self, payload: bytes, *, idempotent: bool) -> bytes:
        """Send ``payload`` to the leader's application (the controller) and
        return its answer. ``idempotent`` requests (reads) are retried after
        an indeterminate failure; others raise ``IndeterminateError``."""
        response: ApplicationResponse = await self._call(ApplicationRequest(payload=payload), retry_indeterminate=idempotent)
        return response.payload

    async def describe(self) -> DescribeQuorumResponse:
        """DescribeQuorum from the first node that answers (not necessarily
        the leader: its view may lag). Asked in version 3 (each replica's
        directory id and a leader's repairing voters; version 2 added the
        answering node's id, disk failure and repair); a node that refuses
        a version (an older pykraft: INVALID_REQUEST, "version N is not
        supported") is asked again in the one before, which this client
        then keeps to: a version-2 answer has no directory ids and
        ``repairing_voters`` None, a version-1 answer has ``repairing``
        None too. Raises what ``_call`` raises."""
        while self._describe_version > 1:
            version = self._describe_version
            try:
                return await self._call(DescribeQuorumRequest(version=version), retry_indeterminate=True)
            except QuorumClientError as error:
                if f"version {version} is not supported" not in str(error):
                    raise
                self._describe_version = version - 1
        return await self._call(DescribeQuorumRequest(version=1), retry_indeterminate=True)

    async def add_voter(
        self, node_id: int, directory_id: str | None, endpoints: list[str], *, auto_join: bool = False
    ) -> int:
        """KIP-853 AddRaftVoter at the leader: add replica ``node_id`` with
        data directory ``directory_id`` (None: whichever fetches under that
        id now), listening on ``endpoints`` ("host:port"). ``auto_join``:
        the node asks for itself (sent in version 2; the leader refuses it
        with VOTER_REMOVED for a disk an operator removed; a leader older
        than version 2 refuses the version, and auto-join asks again
        later). Returns the offset of the committed VOTERS record. Raises
        ``ValueError`` for a bad argument, ``VoterChangeRefusedError``
        (nothing changed; a change in progress and a voter not yet caught
        up are asked again until the retry timeout),
        ``IndeterminateError`` (the connection failed with the request in
        flight: describe the quorum to see whether it happened),
        ``QuorumClientError`` (no leader served it in time)."""
        request = AddVoterRequest(
            node_id=node_id,
            directory_id=directory_id,
            endpoints=tuple(endpoints),
            auto_join=auto_join,
        )
        return _change_offset(await self._call(request, retry_indeterminate=False))

    async def remove_voter(self, node_id: int, directory_id: str | None = None) -> int:
        """KIP-853 RemoveRaftVoter at the leader: remove voter ``node_id``
        (only if its directory is ``directory_id``, when given). Returns and
        raises as ``add_voter``."""
        request = RemoveVoterRequest(node_id=node_id, directory_id=directory_id)
        return _change_offset(await self._call(request, retry_indeterminate=False))

    async def upgrade_voters(self) -> int | None:
        """Upgrade the cluster's static voter set to a dynamic one (KIP-853
        ``kraft.version`` 1) at the leader. Returns the offset of the
        committed VOTERS record, or None when the voters were dynamic
        already (idempotent: safe to run again, and after a leader change).
        Raises as ``add_voter``; VOTER_NOT_CAUGHT_UP (a voter's directory
        id not yet known) is asked again until the retry timeout."""
        response: VoterChangeResponse = await self._call(UpgradeVotersRequest(), retry_indeterminate=True)
        return response.offset


def _change_offset(response: VoterChangeResponse) -> int:
    """The offset a successful AddVoter or RemoveVoter answer gives. Raises
    ``QuorumClientError`` for an answer without one (no pykraft node sends
    that: only an upgrade may append nothing)."""
    if response.offset is None:
        raise QuorumClientError("the leader answered a voter change without the offset of its record")
    return response.offset


# How long a node about to start on a fresh disk with a static voter list
# waits for its peers' DescribeQuorum answers: a peer that is down refuses
# the connection at once; only a partition costs this much.
FRESH_DISK_PROBE_TIMEOUT_S = 2.0


async def refuse_a_fresh_static_disk_in_a_dynamic_cluster(
    config: NodeConfig, *, timeout_s: float = FRESH_DISK_PROBE_TIMEOUT_S
) -> None:
    """Refuse to start a node given a static voter list (``--voters``) on a
    fresh disk when any of the other voters it names answers DescribeQuorum
    with a dynamic voter set (KIP-853: voters with directory ids). Raises
    ``StorageOwnershipError`` (one sentence naming the fix); returns at
    once, asking nobody, for a disk that is not fresh or not static.

    The hazard (issue 17, simulator seeds 6521 and 6954): a voter of a
    cluster upgraded to dynamic voters loses its disk and is started again
    with ``--voters`` on an empty directory, or on one formatted as the
    static disks were (``kraft-quorum format`` without ``--initial-voters``).
    Its log is empty, so nothing tells it of the upgrade: it is a voter of
    the static set in its own eyes, and with a node that missed the upgrade
    it makes a majority of that set (two leaders in one epoch, or a leader
    without the committed records). A replaced disk must be formatted with
    ``--join --initial-voters`` and added as a voter.

    Static: no ``meta.json`` (its first open will write a static one), or
    one without bootstrap voters. Fresh, for a formatted disk: this node is
    a voter of its static list, and the disk holds no log segment with
    bytes in it and no snapshot (``quorum.storage.holds_log``), whatever its
    election state says: an epoch and a vote tell nothing of the voter set,
    and a wiped disk that started once (its probe found no peer) is as
    blind as before. A disk with a log is never refused: it fetches the
    VOTERS records from where its log ends, and its log shows it took part
    in the cluster. A disk the answering peer names as a voter (its node id
    with its directory id) is not refused either: it is the disk the
    upgrade counted, whose loss of records Raft already allows for. A
    static cluster's first start is unaffected: its nodes answer with a
    static set, or not at all (they are starting too). Peers that do not
    answer within ``timeout_s`` are not waited for.

    Why a probe and not the core: an empty log with a static voter list is
    exactly the state of every voter at a static cluster's first start, and
    with ``kraft.version`` 0 membership lives in the command line, not on
    the disk (KIP-853, "Motivation": a lost disk can make a static voter
    vote without its old votes and records). Only a peer that holds the
    upgrade can tell the two apart. The core refuses the Vote of a
    candidate whose disk is not the one its set names
    (``QuorumNode._names_another_disk``), but a static node that missed
    the upgrade names no disk at all.

    The trio runtime cannot ask this itself (this client is built on it):
    ``kraft-quorum node``, ``kraft-controller`` and ``quorum.replicated``
    call this before ``open_quorum_node``; other embedders may too."""
    identity = config.identity
    if config.data_dir is None or (identity is not None and identity.bootstrap_voters):
        return
    if identity is not None and (config.node_id not in config.voters or holds_log(config.data_dir)):
        return
    peers = {node_id: address for node_id, address in config.voters.items() if node_id != config.node_id}
    this_disk = (config.node_id, identity.directory_id if identity is not None else None)
    dynamic_at: list[int] = []

    async def ask(node_id: int, host: str, port: int) -> None:
        with trio.move_on_after(timeout_s):
            try:
                # One connection attempt first: a peer that is down (a
                # static cluster's first start) refuses at once, and the
                # client would retry it until its timeout.
                await (await trio.open_tcp_stream(host, port)).aclose()
            except OSError:
                return
            try:
                async with QuorumClient(
                    [f"{host}:{port}"], cluster_id=config.cluster_id, request_timeout_s=timeout_s,
                    retry_timeout_s=timeout_s, tls=config.tls,
                ) as client:  # fmt: skip
                    answer = await client.describe()
            except (QuorumClientError, OSError) as error:
                logger.debug("node %d: voter %d did not answer: %s", config.node_id, node_id, error)
                return
            named = {(replica.node_id, replica.directory_id) for replica in answer.voters}
            if any(directory_id is not None for _, directory_id in named) and this_disk not in named:
                dynamic_at.append(node_id)

    async with trio.open_nursery() as nursery:
        for node_id, (host, port) in sorted(peers.items()):
            nursery.start_soon(ask, node_id, host, port)
    if dynamic_at:
        what = (
            "has no meta.json"
            if identity is None
            else "holds no log and its meta.json names no voters (formatted without --initial-voters)"
        )
        sentence = (
            f"{config.data_dir} {what} but voter {min(dynamic_at)} reports that cluster {config.cluster_id!r} has "
            f"dynamic voters, so node {config.node_id} refuses to start with a static voter list: format a new, "
            f"empty data directory with kraft-quorum format --join --initial-voters (the voters as the cluster was "
            f"formatted or upgraded) and add it as a voter (docs/operations.md, \"Upgrading static voters to dynamic\")"
        )
        logging.getLogger("pykraft.node").error("%s", sentence)
        raise StorageOwnershipError(sentence)
