"""The TCP transport: msgpack frames over trio streams.

Each node listens on its address. To send to a voter it keeps one outbound
connection per peer (reconnecting with backoff); a node it has no address
for (an observer, a broker) is answered over the connection that node's
last message arrived on. Every connection is read in both directions, so
either path delivers.

Bad input never takes the node down: a frame that cannot be decoded is
answered with an ``ErrorFrame`` when the stream is still in sync, otherwise
the connection is closed; either way one log line names the peer and why.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .._messages import MESSAGE_TYPES, Message
from ..wire import (
    DEFAULT_LIMITS,
    ErrorFrame,
    FrameDecoder,
    FrameTooLargeError,
    Hello,
    LocalProtocolError,
    RemoteProtocolError,
    WireLimits,
    decode_message,
    encode_message,
)
from .._messages import ErrorCode
from ._runtime import Transport
from ._writer import StreamWriter
from . import _trace

logger = logging.getLogger("pykraft.transport")

_QUORUM_MESSAGE_TYPES = frozenset(MESSAGE_TYPES)
_CONNECTION_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
RECONNECT_BACKOFF_MIN_S = 0.02
RECONNECT_BACKOFF_MAX_S = 1.0
# Raft tolerates loss: when a peer is down, keep only the newest messages.
PEER_QUEUE_MESSAGES_MAX = 10_000
RECEIVE_BYTES = 256 * 1024

# Client requests (propose, read, describe) are answered by this handler;
# it returns the response message.
RequestHandler = Callable[[Any], Awaitable[Any]]
# Tried first: ``handler(request, reply)`` returns True when it took the
# request and will call ``reply(response)`` itself, once, without blocking
# (a proposal answered from the core task when it commits: no task per
# request); False leaves the request to the ``RequestHandler``.
FastRequestHandler = Callable[[Any, Callable[[Any], None]], bool]


class _Connection:
    """One open stream: frames out through a ``StreamWriter`` (written at
    once, no task hop), frames in through a decoder."""

    def __init__(self, stream: trio.SocketStream, peer: str, cluster_id: str, limits: WireLimits) -> None:
        self.stream = stream
        self.peer = peer
        self.cluster_id = cluster_id
        self.limits = limits
        self.writer = StreamWriter(stream)
        self._correlation = itertools.count(1)
        self.closed = False

    def encode(self, message: Any, correlation_id: int | None = None) -> bytes:
        return encode_message(
            message,
            correlation_id=next(self._correlation) if correlation_id is None else correlation_id,
            cluster_id=self.cluster_id,
            limits=self.limits,
        )

    def send(self, message: Any, correlation_id: int | None = None) -> bool:
        """Encode and write ``message`` now; never blocks. False when it
        could not be sent (the connection is broken or closing: its reader
        or writer task tears it down), with a log line when it could not be
        encoded."""
        if self.closed:
            return False
        try:
            self.writer.write(self.encode(message, correlation_id))
        except LocalProtocolError as error:
            logger.error("not sent to %s, cannot encode %s: %s", self.peer, type(message).__name__, error)
            return False
        except _CONNECTION_ERRORS as error:
            logger.debug("cannot send to %s: %s", self.peer, error)
            return False
        return True

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
        limits: WireLimits = DEFAULT_LIMITS,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.listen = listen
        self.peer_addresses = {peer: address for peer, address in peer_addresses.items() if peer != node_id}
        self.request_handler = request_handler
        self.fast_request_handler = fast_request_handler
        self.limits = limits
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

    # -- Transport -----------------------------------------------------------------

    def send(self, message: Message) -> None:
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
                nursery.start_soon(trio.serve_listeners, self._serve_inbound, listeners)
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
                stream = await trio.open_tcp_stream(host, port)
            except OSError as error:
                logger.debug("cannot connect to %s: %s", name, error)
                self._unreachable(peer)
                await trio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, RECONNECT_BACKOFF_MAX_S)
                continue
            backoff_s = RECONNECT_BACKOFF_MIN_S
            connection = _Connection(stream, name, self.cluster_id, self.limits)
            try:
                # trio nurseries wrap errors in exception groups: each task
                # handles its own connection errors, so none escapes.
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_loop, connection, nursery.cancel_scope)
                    nursery.start_soon(connection.run_writer, nursery.cancel_scope)
                    connection.send(Hello(node_id=self.node_id, role="voter"))
                    await self._drain(peer, queue, connection)
                    nursery.cancel_scope.cancel()
                logger.info("connection to %s lost", name)
            except Exception:  # noqa: BLE001 - a bug here must not take the node down
                logger.exception("connection to %s failed unexpectedly", name)
            finally:
                if self._links.get(peer) is connection:
                    del self._links[peer]
                await connection.aclose()
            # The peer went away (a reset, a restart): tell the core, which
            # may stand early if it was our leader.
            self._unreachable(peer)
            await trio.sleep(backoff_s)

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

    async def _serve_inbound(self, stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            name = f"{host}:{port}"
        except OSError:
            name = "unknown peer"
        connection = _Connection(stream, name, self.cluster_id, self.limits)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.run_writer, nursery.cancel_scope)
                await self._read_loop(connection, nursery.cancel_scope, nursery)
        except Exception:  # noqa: BLE001 - one bad connection must not take the node down
            logger.exception("connection from %s failed unexpectedly", name)
        finally:
            await connection.aclose()
            for node_id, path in list(self._return_paths.items()):
                if path is connection:
                    del self._return_paths[node_id]

    async def _read_loop(
        self, connection: _Connection, scope: trio.CancelScope, nursery: trio.Nursery | None = None
    ) -> None:
        """Read frames until the stream ends, breaks, or breaks the protocol;
        then cancel ``scope`` (the connection's tasks)."""
        try:
            await self._read_frames(connection, scope, nursery)
        except _CONNECTION_ERRORS as error:
            logger.debug("connection with %s ended: %s", connection.peer, error)
        scope.cancel()

    async def _read_frames(self, connection: _Connection, scope: trio.CancelScope, nursery: trio.Nursery | None) -> None:
        decoder = FrameDecoder(frame_bytes_max=self.limits.frame_bytes_max)
        while True:
            data = await connection.stream.receive_some(RECEIVE_BYTES)
            if not data:
                return
            if _trace.enabled:
                _trace.stamp("rx", len(data))
            decoder.feed(data)
            while True:
                try:
                    payload = decoder.next_frame()
                except FrameTooLargeError as error:
                    self._reject(connection, error, answer=False)
                    return
                if payload is None:
                    break
                try:
                    decoded = decode_message(payload, expected_cluster_id=self.cluster_id, limits=self.limits)
                except RemoteProtocolError as error:
                    answer = error.correlation_id is not None and error.message_type != "ErrorFrame"
                    self._reject(connection, error, answer=answer)
                    if answer:
                        connection.send(error.to_error_frame(), error.correlation_id)
                    if not error.recoverable:
                        return
                    continue
                self._dispatch(connection, decoded.message, decoded.correlation_id, nursery)

    def _dispatch(self, connection: _Connection, message: Any, correlation_id: int, nursery: trio.Nursery | None) -> None:
        kind = type(message)
        if kind in _QUORUM_MESSAGE_TYPES:
            if message.dst != self.node_id:
                logger.warning("%s sent a message for node %d to node %d: dropped", connection.peer, message.dst, self.node_id)
                return
            if message.src not in self.peer_addresses:
                self._return_paths[message.src] = connection
            if _trace.enabled:
                _trace.stamp("recv-" + kind.__name__, _trace_key(message))
            self._deliver(message)
        elif kind is Hello:
            logger.debug("%s is %s %s", connection.peer, message.role, message.node_id)
        elif kind is ErrorFrame:
            logger.warning("%s answered with an error: %s %s", connection.peer, message.code.name, message.message)
        elif self.fast_request_handler is not None and self._handle_fast(connection, message, correlation_id):
            pass
        elif self.request_handler is not None and nursery is not None:
            nursery.start_soon(self._handle_request, connection, message, correlation_id)
        else:
            logger.warning("%s sent a %s, which this node does not serve", connection.peer, kind.__name__)

    async def _handle_request(self, connection: _Connection, request: Any, correlation_id: int) -> None:
        assert self.request_handler is not None
        if _trace.enabled:
            _trace.stamp("request", type(request).__name__)
        try:
            response = await self.request_handler(request)
        except Exception as error:  # noqa: BLE001 - a bad request must not take the node down
            logger.exception("request %s from %s failed", type(request).__name__, connection.peer)
            response = ErrorFrame(code=ErrorCode.INVALID_REQUEST, message=str(error)[:200], correlation_id=correlation_id)
        connection.send(response, correlation_id)
        if _trace.enabled:
            _trace.stamp("answered", getattr(response, "offset", None))

    def _handle_fast(self, connection: _Connection, request: Any, correlation_id: int) -> bool:
        assert self.fast_request_handler is not None

        def reply(response: Any) -> None:
            connection.send(response, correlation_id)

        try:
            return self.fast_request_handler(request, reply)
        except Exception as error:  # noqa: BLE001 - a bad request must not take the node down
            logger.exception("request %s from %s failed", type(request).__name__, connection.peer)
            reply(ErrorFrame(code=ErrorCode.INVALID_REQUEST, message=str(error)[:200], correlation_id=correlation_id))
            return True

    def _reject(self, connection: _Connection, error: RemoteProtocolError, *, answer: bool) -> None:
        self.frames_rejected += 1
        action = "answered with an error" if answer and error.recoverable else "closing the connection"
        logger.warning("bad frame from %s (%s): %s", connection.peer, action, error)


def _trace_key(message: Any) -> Any:
    records = getattr(message, "records", None)
    if records is not None:
        return f"{records[0].offset if records else None}/{len(records)}/hw={message.high_watermark}"
    return getattr(message, "fetch_offset", None)
