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


class _Connection:
    """One open stream: frames out through a lock, frames in through a
    decoder."""

    def __init__(self, stream: trio.abc.Stream, peer: str, cluster_id: str, limits: WireLimits) -> None:
        self.stream = stream
        self.peer = peer
        self.cluster_id = cluster_id
        self.limits = limits
        self._send_lock = trio.Lock()
        self._correlation = itertools.count(1)
        self.closed = False

    def encode(self, message: Any, correlation_id: int | None = None) -> bytes:
        return encode_message(
            message,
            correlation_id=next(self._correlation) if correlation_id is None else correlation_id,
            cluster_id=self.cluster_id,
            limits=self.limits,
        )

    async def send_frames(self, frames: list[bytes]) -> None:
        async with self._send_lock:
            await self.stream.send_all(b"".join(frames))

    async def aclose(self) -> None:
        self.closed = True
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
        limits: WireLimits = DEFAULT_LIMITS,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.listen = listen
        self.peer_addresses = {peer: address for peer, address in peer_addresses.items() if peer != node_id}
        self.request_handler = request_handler
        self.limits = limits
        self.bound_port: int | None = None
        self._queues: dict[int, deque[Message]] = {peer: deque() for peer in self.peer_addresses}
        self._wakeups: dict[int, trio.Event] = {peer: trio.Event() for peer in self.peer_addresses}
        self._return_paths: dict[int, _Connection] = {}
        self._deliver: Callable[[Message], None] = lambda message: None
        self._unreachable: Callable[[int], None] = lambda peer: None
        self._nursery: trio.Nursery | None = None
        self.frames_rejected = 0

    # -- Transport -----------------------------------------------------------------

    def send(self, message: Message) -> None:
        queue = self._queues.get(message.dst)
        if queue is not None:
            if len(queue) >= PEER_QUEUE_MESSAGES_MAX:
                queue.popleft()
            queue.append(message)
            self._wakeups[message.dst].set()
            return
        connection = self._return_paths.get(message.dst)
        if connection is None or connection.closed or self._nursery is None:
            return  # nowhere to send it: like a lost packet
        self._nursery.start_soon(self._send_on_return_path, connection, message)

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
                    try:
                        await connection.send_frames([connection.encode(Hello(node_id=self.node_id, role="voter"))])
                        await self._drain(peer, queue, connection)
                    except _CONNECTION_ERRORS as error:
                        logger.info("connection to %s lost: %s", name, error)
                    nursery.cancel_scope.cancel()
            except Exception:  # noqa: BLE001 - a bug here must not take the node down
                logger.exception("connection to %s failed unexpectedly", name)
            finally:
                await connection.aclose()
            # The peer went away (a reset, a restart): tell the core, which
            # may stand early if it was our leader.
            self._unreachable(peer)
            await trio.sleep(backoff_s)

    async def _drain(self, peer: int, queue: deque[Message], connection: _Connection) -> None:
        while not connection.closed:
            while not queue:
                self._wakeups[peer] = trio.Event()
                await self._wakeups[peer].wait()
            frames = []
            while queue:
                message = queue.popleft()
                try:
                    frames.append(connection.encode(message))
                except LocalProtocolError as error:
                    logger.error("not sent to %s, cannot encode %s: %s", connection.peer, type(message).__name__, error)
            if frames:
                await connection.send_frames(frames)

    async def _send_on_return_path(self, connection: _Connection, message: Message) -> None:
        try:
            await connection.send_frames([connection.encode(message)])
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the requester is gone; it will ask again
        except LocalProtocolError as error:
            logger.error("not sent to %s, cannot encode %s: %s", connection.peer, type(message).__name__, error)

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
                        with trio.move_on_after(1):
                            await self._answer(connection, error.to_error_frame(), error.correlation_id)
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
            self._deliver(message)
        elif kind is Hello:
            logger.debug("%s is %s %s", connection.peer, message.role, message.node_id)
        elif kind is ErrorFrame:
            logger.warning("%s answered with an error: %s %s", connection.peer, message.code.name, message.message)
        elif self.request_handler is not None and nursery is not None:
            nursery.start_soon(self._handle_request, connection, message, correlation_id)
        else:
            logger.warning("%s sent a %s, which this node does not serve", connection.peer, kind.__name__)

    async def _handle_request(self, connection: _Connection, request: Any, correlation_id: int) -> None:
        assert self.request_handler is not None
        try:
            response = await self.request_handler(request)
        except Exception as error:  # noqa: BLE001 - a bad request must not take the node down
            logger.exception("request %s from %s failed", type(request).__name__, connection.peer)
            response = ErrorFrame(code=ErrorCode.INVALID_REQUEST, message=str(error)[:200], correlation_id=correlation_id)
        await self._answer(connection, response, correlation_id)

    async def _answer(self, connection: _Connection, message: Any, correlation_id: int) -> None:
        try:
            await connection.send_frames([connection.encode(message, correlation_id)])
        except _CONNECTION_ERRORS:
            pass  # the requester is gone
        except LocalProtocolError as error:
            logger.error("cannot answer %s with %s: %s", connection.peer, type(message).__name__, error)

    def _reject(self, connection: _Connection, error: RemoteProtocolError, *, answer: bool) -> None:
        self.frames_rejected += 1
        action = "answered with an error" if answer and error.recoverable else "closing the connection"
        logger.warning("bad frame from %s (%s): %s", connection.peer, action, error)
