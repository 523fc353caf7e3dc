"""A userspace TCP proxy that cuts, stalls, refuses and delays links.

One *link* is a listening port on the proxy that forwards every accepted
connection to one target address. The side that connects is **a**, the
target is **b**; the harness makes one link per directed (src, dst) pair,
so a is always the source node or client and b the destination node.

Link modes (see ``docs/nemesis.md``):

``pass``
    bytes flow both ways.
``drop``
    both directions stall: the proxy stops reading, forwards nothing it
    still holds, and keeps every connection open, so senders see silence,
    never an error (like an iptables DROP). New connections are accepted
    and stall too (no upstream connection is made until the link heals).
``refuse``
    existing connections are reset (RST) and the listening socket stops
    listening, so new connections get ECONNREFUSED (like REJECT with
    tcp-reset). The port stays bound to the proxy, so nothing else can
    take it before the link heals.
``one-way-a-to-b``
    the a→b direction is cut (stalls); b→a still flows.
``one-way-b-to-a``
    the b→a direction is cut (stalls); a→b still flows.

Stalling never loses or reorders a byte: after a heal the stream resumes
exactly where it stopped. Each direction of each connection holds at most
``QUEUED_CHUNKS_MAX`` chunks of ``CHUNK_BYTES``; when that is full the
proxy stops reading and TCP back-pressure reaches the sender.

The service is controlled over a line-based JSON socket: one request per
line, ``{"id": 1, "op": "set_link", "args": {"name": "n1->n2", "mode":
"drop"}}``, answered by one line, ``{"id": 1, "ok": true, "result": null}``
or ``{"id": 1, "ok": false, "error": "...", "kind": "ValueError"}``.
"""

from __future__ import annotations

import enum
import errno
import json
import logging
import random
import socket as stdlib_socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

logger = logging.getLogger("pykraft.nemesis.proxy")

CHUNK_BYTES = 64 * 1024
# Per direction of one connection: at most 16 x 64 KiB = 1 MiB held.
QUEUED_CHUNKS_MAX = 16
LISTEN_BACKLOG = 128
UPSTREAM_CONNECT_TIMEOUT_S = 10.0
CONTROL_LINE_BYTES_MAX = 1024 * 1024
PORT_PICK_ATTEMPTS = 64


class LinkMode(enum.StrEnum):
    PASS = "pass"
    DROP = "drop"
    REFUSE = "refuse"
    ONE_WAY_A_TO_B = "one-way-a-to-b"  # a→b cut, b→a flows
    ONE_WAY_B_TO_A = "one-way-b-to-a"  # b→a cut, a→b flows


class Direction(enum.StrEnum):
    A_TO_B = "a-to-b"
    B_TO_A = "b-to-a"


_FLOWS: dict[LinkMode, frozenset[Direction]] = {
    LinkMode.PASS: frozenset(Direction),
    LinkMode.DROP: frozenset(),
    LinkMode.REFUSE: frozenset(),
    LinkMode.ONE_WAY_A_TO_B: frozenset({Direction.B_TO_A}),
    LinkMode.ONE_WAY_B_TO_A: frozenset({Direction.A_TO_B}),
}


def link_mode_for(a_to_b_cut: bool, b_to_a_cut: bool, *, refuse: bool = False) -> LinkMode:
    """The mode that cuts exactly the given directions; ``refuse`` turns a
    cut of both directions into ``refuse``.

    Raises ``ValueError`` when ``refuse`` is asked for with only one
    direction cut (a reset kills both directions of a TCP connection)."""
    if a_to_b_cut and b_to_a_cut:
        return LinkMode.REFUSE if refuse else LinkMode.DROP
    if refuse:
        raise ValueError("refuse cuts both directions of a connection; it cannot be one-way")
    if a_to_b_cut:
        return LinkMode.ONE_WAY_A_TO_B
    if b_to_a_cut:
        return LinkMode.ONE_WAY_B_TO_A
    return LinkMode.PASS


@dataclass(slots=True)
class _Delay:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0


class _Eof:
    """Marks the end of one direction in a chunk queue."""


_EOF = _Eof()


@dataclass(eq=False, slots=True)
class _Pipe:
    """One accepted connection and its upstream twin."""

    cancel_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    # Cancelled when its direction stops flowing, so that a blocked read
    # gives up and nothing new is read (trio's receive_some loses no data
    # when cancelled).
    read_scopes: dict[Direction, trio.CancelScope] = field(default_factory=dict)
    reset: bool = False
    connected_upstream: bool = False


class _Link:
    def __init__(self, name: str, listener: trio.socket.SocketType, target: tuple[str, int], rng: random.Random) -> None:
        self.name = name
        self.listener = listener
        self.target = target
        self.rng = rng
        self.mode = LinkMode.PASS
        self.delays = {direction: _Delay() for direction in Direction}
        self.pipes: set[_Pipe] = set()
        self.bytes_forwarded = {direction: 0 for direction in Direction}
        self.connections_accepted = 0
        self.connections_reset = 0
        self.upstream_failures = 0
        self.nursery: trio.Nursery | None = None
        self.accept_scope: trio.CancelScope | None = None
        self._changed = trio.Event()

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def flows(self, direction: Direction) -> bool:
        return direction in _FLOWS[self.mode]

    def may_connect_upstream(self) -> bool:
        return self.mode not in (LinkMode.DROP, LinkMode.REFUSE)

    def notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._changed.wait()

    def stats(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "port": self.port,
            "target": list(self.target),
            "bytes_a_to_b": self.bytes_forwarded[Direction.A_TO_B],
            "bytes_b_to_a": self.bytes_forwarded[Direction.B_TO_A],
            "delay_a_to_b_ms": [self.delays[Direction.A_TO_B].delay_ms, self.delays[Direction.A_TO_B].jitter_ms],
            "delay_b_to_a_ms": [self.delays[Direction.B_TO_A].delay_ms, self.delays[Direction.B_TO_A].jitter_ms],
            "connections_open": len(self.pipes),
            "connections_accepted": self.connections_accepted,
            "connections_reset": self.connections_reset,
            "upstream_failures": self.upstream_failures,
        }


def _bind_listener(host: str, port: int) -> trio.socket.SocketType:
    """A listening socket bound to an explicit port.

    The port is always bound explicitly (a free one is picked first when
    ``port`` is 0) because only an explicitly bound port stays reserved
    after ``shutdown(SHUT_RD)`` stops listening for ``refuse``; a socket
    bound to port 0 would give its port back. No SO_REUSEADDR, so no other
    socket can bind the port while a link refuses.

    Raises ``OSError`` when the port cannot be bound."""
    attempts = 1 if port else PORT_PICK_ATTEMPTS
    last_error: OSError | None = None
    for _ in range(attempts):
        wanted = port
        if not wanted:
            with stdlib_socket.socket() as probe:
                probe.bind((host, 0))
                wanted = probe.getsockname()[1]
        sock = stdlib_socket.socket()
        try:
            sock.bind((host, wanted))
            sock.listen(LISTEN_BACKLOG)
        except OSError as error:
            sock.close()
            last_error = error
            if error.errno != errno.EADDRINUSE:
                raise
            continue
        sock.setblocking(False)
        return trio.socket.from_stdlib_socket(sock)
    assert last_error is not None
    raise last_error


def _close(stream: trio.SocketStream | None, *, reset: bool) -> None:
    """Close at once; with ``reset``, send RST instead of FIN (SO_LINGER 0)
    so the peer sees ECONNRESET, as it would from a REJECT."""
    if stream is None:
        return
    sock = stream.socket
    if reset:
        try:
            sock.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already dead
    sock.close()


class ProxyServer:
    """The links and their state; ``serve`` runs them in a nursery.

    Every public method is synchronous and applies its change within one
    scheduler step, so a batch from ``apply`` takes effect atomically with
    respect to the forwarding tasks."""

    def __init__(self, *, link_host: str = "127.0.0.1", seed: int = 0) -> None:
        self.link_host = link_host
        self.seed = seed
        self._links: dict[str, _Link] = {}
        self._nursery: trio.Nursery | None = None
        self.shutdown_requested = trio.Event()

    # -- lifecycle ------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the links until cancelled. Closes every socket on the way out."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            for link in self._links.values():
                link.listener.close()
            self._links.clear()

    # -- commands ---------------------------------------------------------------------

    def add_link(self, name: str, listen_port: int, target_host: str, target_port: int) -> int:
        """Listen on ``listen_port`` (0: pick a free one) and forward to
        ``target_host:target_port``; returns the port.

        Raises ``ValueError`` for a duplicate name, ``OSError`` when the
        port cannot be bound, ``RuntimeError`` when not serving."""
        if self._nursery is None:
            raise RuntimeError("the proxy is not serving")
        if not name or name in self._links:
            raise ValueError(f"link name {name!r} is empty or already in use")
        listener = _bind_listener(self.link_host, int(listen_port))
        rng = random.Random(f"{self.seed}:{name}")
        link = _Link(name, listener, (target_host, int(target_port)), rng)
        self._links[name] = link
        self._nursery.start_soon(self._run_link, link, name=f"link {name}")
        return link.port

    def set_link(self, name: str, mode: str) -> None:
        """Put a link in ``mode`` (a ``LinkMode`` value).

        Raises ``KeyError`` for an unknown link, ``ValueError`` for an
        unknown mode."""
        link = self._link(name)
        self._set_mode(link, LinkMode(mode))

    def set_delay(self, name: str, delay_ms: float, jitter_ms: float = 0.0, direction: str = "both") -> None:
        """Delay every chunk forwarded in ``direction`` (``a-to-b``,
        ``b-to-a`` or ``both``) by ``delay_ms`` plus a uniform draw from
        [0, ``jitter_ms``]; order is kept. Zero removes the delay.

        Raises ``KeyError`` for an unknown link, ``ValueError`` for a
        negative delay or an unknown direction."""
        link = self._link(name)
        if delay_ms < 0 or jitter_ms < 0:
            raise ValueError(f"delay_ms and jitter_ms must be >= 0, got {delay_ms}, {jitter_ms}")
        directions = list(Direction) if direction == "both" else [Direction(direction)]
        for one in directions:
            link.delays[one] = _Delay(float(delay_ms), float(jitter_ms))
        link.notify()

    def apply(self, links: dict[str, dict[str, Any]]) -> None:
        """Set several links at once: ``{name: {"mode": ..., "delay_a_to_b_ms":
        [delay, jitter], "delay_b_to_a_ms": [delay, jitter]}}`` (each key
        optional). Everything is validated before anything changes.

        Raises ``KeyError`` for an unknown link, ``ValueError`` for a bad
        mode or delay."""
        plan: list[tuple[_Link, LinkMode | None, dict[Direction, _Delay]]] = []
        for name, change in links.items():
            link = self._link(name)
            mode = LinkMode(change["mode"]) if "mode" in change else None
            delays: dict[Direction, _Delay] = {}
            for direction in Direction:
                key = f"delay_{direction.value.replace('-', '_')}_ms"
                if key in change:
                    delay_ms, jitter_ms = (float(x) for x in change[key])
                    if delay_ms < 0 or jitter_ms < 0:
                        raise ValueError(f"{name}: delays must be >= 0, got {change[key]}")
                    delays[direction] = _Delay(delay_ms, jitter_ms)
            plan.append((link, mode, delays))
        for link, mode, delays in plan:
            link.delays.update(delays)
            if mode is not None:
                self._set_mode(link, mode)
            else:
                link.notify()

    def heal_all(self) -> None:
        """Every link back to ``pass`` with no delay."""
        for link in self._links.values():
            link.delays = {direction: _Delay() for direction in Direction}
            self._set_mode(link, LinkMode.PASS)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per link: mode, port, target, bytes forwarded each way, delays,
        open / accepted / reset connections, failed upstream connects."""
        return {name: link.stats() for name, link in sorted(self._links.items())}

    # -- control protocol ---------------------------------------------------------------

    def handle_request(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run one control request; never raises (errors are answered)."""
        request_id = request.get("id") if isinstance(request, dict) else None
        try:
            if not isinstance(request, dict):
                raise ValueError("a request must be a JSON object")
            op = request.get("op")
            args = request.get("args") or {}
            handler = _OPS.get(op) if isinstance(op, str) else None
            if handler is None:
                raise ValueError(f"unknown op {op!r}; expected one of {sorted(_OPS)}")
            result = handler(self, **args)
        except (KeyError, ValueError, TypeError, OSError, RuntimeError) as error:
            message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
            return {"id": request_id, "ok": False, "error": str(message), "kind": type(error).__name__}
        return {"id": request_id, "ok": True, "result": result}

    async def serve_control(self, stream: trio.abc.Stream) -> None:
        """Answer JSON-line requests on ``stream`` until it closes."""
        buffer = bytearray()
        try:
            while True:
                data = await stream.receive_some(CHUNK_BYTES)
                if not data:
                    return
                buffer += data
                while b"\n" in buffer:
                    line, _, rest = bytes(buffer).partition(b"\n")
                    buffer = bytearray(rest)
                    try:
                        request = json.loads(line)
                    except ValueError as error:
                        answer: dict[str, Any] = {"id": None, "ok": False, "error": f"bad JSON: {error}", "kind": "ValueError"}
                    else:
                        answer = self.handle_request(request)
                    await stream.send_all(json.dumps(answer).encode() + b"\n")
                    if answer["ok"] and isinstance(request, dict) and request.get("op") == "shutdown":
                        # Only now: the caller must get its answer before we go.
                        self.shutdown_requested.set()
                if len(buffer) > CONTROL_LINE_BYTES_MAX:
                    await stream.send_all(b'{"id": null, "ok": false, "error": "request line too long", "kind": "ValueError"}\n')
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    # -- internals ------------------------------------------------------------------------

    def _link(self, name: str) -> _Link:
        try:
            return self._links[name]
        except KeyError:
            raise KeyError(f"no link named {name!r}") from None

    def _set_mode(self, link: _Link, mode: LinkMode) -> None:
        previous = link.mode
        link.mode = mode
        if mode is LinkMode.REFUSE and previous is not LinkMode.REFUSE:
            self._stop_listening(link)
            for pipe in list(link.pipes):
                pipe.reset = True
                pipe.cancel_scope.cancel()
                link.connections_reset += 1
        elif previous is LinkMode.REFUSE and mode is not LinkMode.REFUSE:
            self._start_listening(link)
        for pipe in link.pipes:
            for direction, scope in pipe.read_scopes.items():
                if not link.flows(direction):
                    scope.cancel()
        link.notify()

    def _stop_listening(self, link: _Link) -> None:
        if link.accept_scope is not None:
            link.accept_scope.cancel()
            link.accept_scope = None
        # Stops listening but keeps the explicitly bound port: connects now
        # get RST (ECONNREFUSED), and queued, unaccepted connections too.
        try:
            link.listener.shutdown(stdlib_socket.SHUT_RD)
        except OSError as error:
            logger.warning("link %s: cannot stop listening: %s", link.name, error)

    def _start_listening(self, link: _Link) -> None:
        link.listener.listen(LISTEN_BACKLOG)
        if link.nursery is not None:
            link.nursery.start_soon(self._accept_loop, link)

    async def _run_link(self, link: _Link) -> None:
        async with trio.open_nursery() as nursery:
            link.nursery = nursery
            if link.mode is not LinkMode.REFUSE:
                nursery.start_soon(self._accept_loop, link)
            await trio.sleep_forever()

    async def _accept_loop(self, link: _Link) -> None:
        assert link.nursery is not None
        with trio.CancelScope() as scope:
            link.accept_scope = scope
            while True:
                try:
                    sock, _ = await link.listener.accept()
                except OSError as error:
                    if link.mode is LinkMode.REFUSE:
                        return  # the listener was shut down under us
                    logger.warning("link %s: accept failed: %s", link.name, error)
                    await trio.sleep(0.01)  # e.g. EMFILE: do not spin
                    continue
                link.connections_accepted += 1
                link.nursery.start_soon(self._run_pipe, link, trio.SocketStream(sock))

    async def _run_pipe(self, link: _Link, downstream: trio.SocketStream) -> None:
        pipe = _Pipe()
        link.pipes.add(pipe)
        upstream: trio.SocketStream | None = None
        try:
            with pipe.cancel_scope:
                if link.mode is LinkMode.REFUSE:
                    # Accepted just before the link started refusing, and
                    # so missed by its sweep of open connections.
                    pipe.reset = True
                    link.connections_reset += 1
                    return
                # In drop mode the client's connect has succeeded (the proxy
                # accepted), but nothing reaches the target until a heal.
                await link.wait_until(link.may_connect_upstream)
                with trio.move_on_after(UPSTREAM_CONNECT_TIMEOUT_S):
                    try:
                        upstream = await trio.open_tcp_stream(*link.target)
                    except OSError as error:
                        logger.debug("link %s: target %s:%d: %s", link.name, *link.target, error)
                if upstream is None:
                    link.upstream_failures += 1
                    pipe.reset = True  # the client sees the target's refusal as a reset
                    return
                pipe.connected_upstream = True
                try:
                    async with trio.open_nursery() as nursery:
                        for direction, source, sink in (
                            (Direction.A_TO_B, downstream, upstream),
                            (Direction.B_TO_A, upstream, downstream),
                        ):
                            send_channel, receive_channel = trio.open_memory_channel[Any](QUEUED_CHUNKS_MAX)
                            nursery.start_soon(self._read_direction, link, pipe, direction, source, send_channel)
                            nursery.start_soon(self._write_direction, link, direction, sink, receive_channel)
                except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pipe.reset = True  # one side reset: pass the reset on
        finally:
            link.pipes.discard(pipe)
            _close(downstream, reset=pipe.reset)
            _close(upstream, reset=pipe.reset)

    async def _read_direction(
        self,
        link: _Link,
        pipe: _Pipe,
        direction: Direction,
        source: trio.SocketStream,
        chunks: trio.MemorySendChannel[Any],
    ) -> None:
        last_due_s = 0.0
        async with chunks:
            while True:
                await link.wait_until(lambda: link.flows(direction))
                with trio.CancelScope() as read_scope:
                    pipe.read_scopes[direction] = read_scope
                    data = await source.receive_some(CHUNK_BYTES)
                del pipe.read_scopes[direction]
                if read_scope.cancelled_caught:
                    continue  # the direction was cut while we waited for data
                if not data:
                    await chunks.send(_EOF)
                    return
                delay = link.delays[direction]
                due_s = trio.current_time()
                if delay.delay_ms or delay.jitter_ms:
                    due_s += (delay.delay_ms + link.rng.uniform(0.0, delay.jitter_ms)) / 1000.0
                # Jitter must not reorder bytes: never due before the last chunk.
                due_s = max(due_s, last_due_s)
                last_due_s = due_s
                await chunks.send((due_s, data))

    async def _write_direction(
        self,
        link: _Link,
        direction: Direction,
        sink: trio.SocketStream,
        chunks: trio.MemoryReceiveChannel[Any],
    ) -> None:
        async with chunks:
            async for item in chunks:
                if item is _EOF:
                    await link.wait_until(lambda: link.flows(direction))
                    await sink.send_eof()
                    return
                due_s, data = item
                while True:
                    await link.wait_until(lambda: link.flows(direction))
                    if trio.current_time() >= due_s:
                        break
                    await trio.sleep_until(due_s)
                await sink.send_all(data)
                link.bytes_forwarded[direction] += len(data)


def _op_add_link(server: ProxyServer, name: str, listen_port: int, target_host: str, target_port: int) -> int:
    return server.add_link(name, listen_port, target_host, target_port)


def _op_shutdown(server: ProxyServer) -> None:
    pass  # serve_control stops the proxy once the answer is sent


def _op_ping(server: ProxyServer) -> str:
    return "pong"


_OPS: dict[str, Callable[..., Any]] = {
    "add_link": _op_add_link,
    "set_link": ProxyServer.set_link,
    "set_delay": ProxyServer.set_delay,
    "apply": ProxyServer.apply,
    "heal_all": ProxyServer.heal_all,
    "stats": ProxyServer.stats,
    "shutdown": _op_shutdown,
    "ping": _op_ping,
}


async def serve_proxy(
    control_host: str = "127.0.0.1",
    control_port: int = 0,
    *,
    link_host: str = "127.0.0.1",
    seed: int = 0,
    task_status: trio.TaskStatus[tuple[ProxyServer, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a proxy with its control socket on ``control_host:control_port``
    until a ``shutdown`` command or cancellation; ``task_status.started``
    gets ``(server, control_port)``.

    Raises ``OSError`` when the control port cannot be bound."""
    server = ProxyServer(link_host=link_host, seed=seed)
    listeners = await trio.open_tcp_listeners(control_port, host=control_host)
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        nursery.start_soon(trio.serve_listeners, server.serve_control, listeners)
        task_status.started((server, port))
        await server.shutdown_requested.wait()
        nursery.cancel_scope.cancel()
