"""``TlsStream``: TLS records made and sent synchronously through
``StreamWriter`` (quorum/runtime/_tls.py), on real loopback sockets, and
what a hostile peer can do to a node's TLS listener (a handshake never
finished, garbage before or after it, requests never read).

Waits are on conditions, bounded by ``fail_after``; the handshake timeout
runs on trio's ``MockClock``."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from quorum.client import QuorumClient
from quorum.runtime import (
    HANDSHAKE_TIMEOUT_S,
    ConnectionLimits,
    KeyValueStateMachine,
    NodeConfig,
    StreamWriter,
    TlsStream,
    open_quorum_node,
)
from quorum.wire import DescribeQuorumRequest, DescribeQuorumResponse, FrameDecoder, ProposeRequest, decode_message, encode_message
from tests.loopback import free_ports
from tests.tls_material import certificates_fixture, tls_for

CLUSTER = "tls-stream-test"
WAIT_S = 20


certs = certificates_fixture(nodes=(1, 2), clients=("admin",))


async def connected_pair(certs: Path, nursery: trio.Nursery) -> tuple[TlsStream, TlsStream]:
    """A client and a server ``TlsStream`` over loopback, handshake done."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    server_side: list[TlsStream] = []
    done = trio.Event()

    async def accept() -> None:
        tcp = await listeners[0].accept()
        stream = tls_for(certs, "node-2").wrap_server(tcp)
        await stream.do_handshake()
        server_side.append(stream)
        done.set()

    nursery.start_soon(accept)
    with trio.fail_after(WAIT_S):
        client, principal = await tls_for(certs, "node-1").connect("127.0.0.1", port)
        await done.wait()
    assert str(principal) == "pykraft://node/2"
    await listeners[0].aclose()
    return client, server_side[0]


async def read_exactly(stream: TlsStream, size: int) -> bytes:
    received = bytearray()
    while len(received) < size:
        data = await stream.receive_some(65536)
        assert data, "the stream ended early"
        received += data
    return bytes(received)


async def test_frames_written_while_the_peer_does_not_read_arrive_whole_and_in_order(certs: Path) -> None:
    """Records are made at once and the kernel's refusal keeps them, in
    order, for ``run()``: nothing is lost, reordered or encrypted twice."""
    async with trio.open_nursery() as nursery:
        client, server = await connected_pair(certs, nursery)
        writer = StreamWriter(client)
        nursery.start_soon(writer.run)
        frames = [bytes([index % 251]) * (1 + (index * 7919) % 3000) for index in range(3000)]
        frames.append(b"L" * (1024 * 1024))  # split into many records
        frames.append(b"end")
        for frame in frames:
            writer.write(frame)
        # The peer has not read: the kernel took only part, the rest waits.
        assert writer.pending_bytes > 0
        expected = b"".join(frames)
        with trio.fail_after(WAIT_S):
            assert await read_exactly(server, len(expected)) == expected
            while writer.pending_bytes:
                await trio.sleep(0.001)
        # And back the other way, through send_all.
        await server.send_all(b"pong")
        with trio.fail_after(WAIT_S):
            assert await read_exactly(client, 4) == b"pong"
        writer.close()
        nursery.cancel_scope.cancel()


async def test_receive_some_keeps_to_max_bytes_and_close_notify_reads_as_the_end(certs: Path) -> None:
    async with trio.open_nursery() as nursery:
        client, server = await connected_pair(certs, nursery)
        for index in range(10):
            await client.send_all(b"%d" % index * 100)
        with trio.fail_after(WAIT_S):
            chunks = []
            total = sum(len(b"%d" % index * 100) for index in range(10))
            while sum(map(len, chunks)) < total:
                chunk = await server.receive_some(150)
                assert 0 < len(chunk) <= 150
                chunks.append(chunk)
            assert b"".join(chunks) == b"".join(b"%d" % index * 100 for index in range(10))
            await client.aclose()
            assert await server.receive_some(100) == b""
        await server.aclose()
        nursery.cancel_scope.cancel()


async def test_a_tcp_end_without_close_notify_is_a_broken_stream_not_an_end(certs: Path) -> None:
    """A cut connection is not a clean end (a truncation must not pass for
    one): as ``trio.SSLStream`` with ``https_compatible=False``."""
    async with trio.open_nursery() as nursery:
        client, server = await connected_pair(certs, nursery)
        await client.transport_stream.aclose()
        with trio.fail_after(WAIT_S), pytest.raises(trio.BrokenResourceError):
            await server.receive_some(100)
        await server.aclose()
        nursery.cancel_scope.cancel()


async def test_a_tls_stream_speaks_with_trio_ssl_stream_both_ways(certs: Path) -> None:
    """The records are standard TLS: trio's own SSLStream at the other end
    of either side reads and writes them."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    node_2 = tls_for(certs, "node-2")
    async with trio.open_nursery() as nursery:

        async def serve_with_trio() -> None:
            tcp = await listeners[0].accept()
            stream = trio.SSLStream(tcp, node_2._server, server_side=True, https_compatible=False)
            await stream.send_all(await stream.receive_some(100) + b"!")
            await stream.aclose()

        nursery.start_soon(serve_with_trio)
        with trio.fail_after(WAIT_S):
            client, _ = await tls_for(certs, "node-1").connect("127.0.0.1", port)
            await client.send_all(b"hello")
            assert await read_exactly(client, 6) == b"hello!"
            assert await client.receive_some(100) == b""
        await client.aclose()
        await listeners[0].aclose()


# ---------------------------------------------------------------------------
# A node's TLS listener against hostile peers
# ---------------------------------------------------------------------------


class OneNode:
    def __init__(self, handle, certs: Path) -> None:
        self.handle = handle
        self.certs = certs
        self.address = ("127.0.0.1", handle.listen_port)

    def counter(self, name: str) -> float:
        return sum(self.handle.runtime.metrics.samples(name).values())

    async def still_serving(self) -> None:
        stream, _ = await tls_for(self.certs, "client-admin").connect(*self.address)
        try:
            await stream.send_all(encode_message(DescribeQuorumRequest(), correlation_id=1, cluster_id=CLUSTER))
            decoder = FrameDecoder()
            while (payload := decoder.next_frame()) is None:
                data = await stream.receive_some(65536)
                assert data
                decoder.feed(data)
            assert isinstance(decode_message(payload, expected_cluster_id=CLUSTER).message, DescribeQuorumResponse)
        finally:
            await stream.aclose()


async def start_node(nursery: trio.Nursery, certs: Path, **limits: int) -> OneNode:
    (port,) = free_ports(1)
    config = NodeConfig(
        node_id=1,
        voters={1: ("127.0.0.1", port)},
        cluster_id=CLUSTER,
        tls=tls_for(certs, "node-1"),
        acl_file=certs / "acl.txt",
        connection_limits=ConnectionLimits(**limits),
    )
    handles: list = []

    async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with open_quorum_node(config) as handle:
            handles.append(handle)
            task_status.started()
            await trio.sleep_forever()

    await nursery.start(run)
    with trio.fail_after(WAIT_S):
        while not handles[0].is_leader:
            await trio.sleep(0.01)
    return OneNode(handles[0], certs)


async def closed_by_node(stream: trio.SocketStream) -> None:
    try:
        while await stream.receive_some(65536):
            pass
    except trio.BrokenResourceError:
        pass


async def test_a_peer_that_never_finishes_its_handshake_is_closed_after_the_timeout(certs: Path, autojump_clock) -> None:
    async with trio.open_nursery() as nursery:
        node = await start_node(nursery, certs)
        silent = await trio.open_tcp_stream(*node.address)
        half = await trio.open_tcp_stream(*node.address)
        # The first bytes of a ClientHello's record header, and no more.
        await half.send_all(b"\x16\x03\x01")
        started = trio.current_time()
        with trio.fail_after(HANDSHAKE_TIMEOUT_S * 3):
            await closed_by_node(silent)
            await closed_by_node(half)
            while node.counter("pykraft_quorum_connections_open"):
                await trio.sleep(0.01)
        assert trio.current_time() - started >= HANDSHAKE_TIMEOUT_S
        assert node.counter("pykraft_tls_handshake_failures_total") == 2
        await node.still_serving()
        await silent.aclose()
        await half.aclose()
        nursery.cancel_scope.cancel()


async def test_garbage_before_or_after_the_handshake_closes_that_connection_only(certs: Path) -> None:
    async with trio.open_nursery() as nursery:
        node = await start_node(nursery, certs)
        with trio.fail_after(WAIT_S):
            # Not TLS at all: a plaintext frame where a ClientHello belongs.
            plain = await trio.open_tcp_stream(*node.address)
            await plain.send_all(encode_message(DescribeQuorumRequest(), correlation_id=1, cluster_id=CLUSTER))
            await closed_by_node(plain)
            assert node.counter("pykraft_tls_handshake_failures_total") == 1
            # A proper handshake, then bytes that are no TLS record.
            secure, _ = await tls_for(certs, "client-admin").connect(*node.address)
            await secure.transport_stream.send_all(b"\x17\x03\x03\x00\x20" + b"\x00" * 32 + b"garbage" * 100)
            with pytest.raises(trio.BrokenResourceError):
                while await secure.receive_some(65536):
                    pass
            while node.counter("pykraft_quorum_connections_open"):
                await trio.sleep(0.01)
            await node.still_serving()
        await plain.aclose()
        await secure.aclose()
        nursery.cancel_scope.cancel()


async def test_a_tls_client_that_sends_and_never_reads_is_held_to_the_backlog_bound(certs: Path) -> None:
    """Past ``requests_in_flight_max`` or ``write_backlog_bytes_max`` of
    answers not written (counted in TLS records), the connection is not
    read; another client is served meanwhile."""
    backlog_max = 64 * 1024
    async with trio.open_nursery() as nursery:
        node = await start_node(nursery, certs, requests_in_flight_max=8, write_backlog_bytes_max=backlog_max)
        flood, _ = await tls_for(certs, "client-admin").connect(*node.address)
        request = encode_message(
            ProposeRequest(records=(KeyValueStateMachine.encode_put(b"flood", b"x" * 200),)),
            correlation_id=1,
            cluster_id=CLUSTER,
        )
        sent = 0

        async def flood_forever() -> None:
            nonlocal sent
            while True:
                await flood.send_all(request * 64)
                sent += 64

        nursery.start_soon(flood_forever)
        with trio.fail_after(60):
            while node.counter("pykraft_quorum_backpressure_pauses_total") == 0:
                await trio.sleep(0.01)
            bootstrap = [f"1@{node.address[0]}:{node.address[1]}"]
            async with QuorumClient(bootstrap, cluster_id=CLUSTER, tls=tls_for(certs, "client-admin"), retry_timeout_s=20) as client:
                for index in range(20):
                    await client.propose([KeyValueStateMachine.encode_put(b"k%d" % index, b"v")])
        # Bounded: the node read few of the flood's requests, and holds at
        # most the bound (and the answers of one read) for the flooder.
        assert node.handle.runtime.applied_offset < sent
        connections = node.handle._transport._open_connections
        assert connections and all(c.writer.pending_bytes <= 2 * backlog_max for c in connections)
        nursery.cancel_scope.cancel()
    await flood.aclose()


def test_nothing_is_encrypted_before_the_handshake(certs: Path) -> None:
    """``encrypt`` refuses until ``do_handshake`` has proved the peer (an
    ``SSL_write`` would otherwise start a handshake on its own)."""
    record = KeyValueStateMachine.encode_put(b"k", b"v" * 100)
    frame = encode_message(ProposeRequest(records=(record,)), correlation_id=1, cluster_id=CLUSTER)
    left, right = socket.socketpair()
    try:
        stream = tls_for(certs, "node-1").wrap_client(trio.SocketStream(trio.socket.from_stdlib_socket(left)))
        with pytest.raises(trio.BrokenResourceError):
            stream.encrypt(frame)
    finally:
        left.close()
        right.close()


async def test_a_send_cancelled_part_way_breaks_the_stream_for_later_sends(certs: Path, autojump_clock) -> None:
    """The peer may hold part of a record: nothing sent after it could be
    read, so later sends refuse (as ``trio.SSLStream``'s do)."""
    async with trio.open_nursery() as nursery:
        client, server = await connected_pair(certs, nursery)
        with trio.move_on_after(0.5) as scope:
            while True:  # the peer never reads: the kernel fills, then this waits
                await client.send_all(b"x" * 1024 * 1024)
        assert scope.cancelled_caught
        with pytest.raises(trio.BrokenResourceError):
            await client.send_all(b"after")
        await client.aclose()
        await server.aclose()
        nursery.cancel_scope.cancel()
