"""QuorumClient's flush point: requests made while others are in flight
leave together (writes of at most FLUSH_FRAMES_MAX frames, one TLS record
each), a lone request leaves at once,
and every frame arrives whole and in the order it was made, whatever is
cancelled on the way (issue 16, docs/benchmarks.md "TLS on against off")."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import trio

from quorum.client import FLUSH_FRAMES_MAX, QuorumClient
from quorum.wire import FrameDecoder, ProposeRequest, ProposeResponse, decode_message, encode_message
from tests.tls_material import certificates_fixture, tls_for

CLUSTER = "flush-test"
WAIT_S = 20
# A TLS record's header: content type, legacy version, length.
_RECORD_HEADER = struct.Struct("!BHH")
_APPLICATION_DATA = 23


certs = certificates_fixture(nodes=(1,), clients=("admin",))


class RecordCounter(trio.abc.Stream):
    """The server's TCP stream, counting the TLS application-data records
    the client sends (read from the record headers in the byte stream)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.application_records = 0
        self._buffer = bytearray()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self.stream.receive_some(max_bytes)
        self._buffer += data
        while len(self._buffer) >= _RECORD_HEADER.size:
            content_type, _, length = _RECORD_HEADER.unpack_from(self._buffer)
            if len(self._buffer) < _RECORD_HEADER.size + length:
                break
            del self._buffer[: _RECORD_HEADER.size + length]
            # TLS 1.3 hides the real type inside; after the handshake every
            # record is application data on the outside.
            self.application_records += content_type == _APPLICATION_DATA
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.stream.aclose()


class FrameCountingWriter:
    """The client connection's real ``StreamWriter``, noting how many whole
    frames each ``write`` hands it (everything else passes through)."""

    def __init__(self, writer: Any, frames_per_write: list[int]) -> None:
        self._writer = writer
        self.frames_per_write = frames_per_write

    def write(self, data: bytes) -> None:
        decoder = FrameDecoder()
        decoder.feed(data)
        frames = 0
        while decoder.next_frame() is not None:
            frames += 1
        self.frames_per_write.append(frames)
        self._writer.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


class Server:
    """A node stand-in at the wire level: it answers each ProposeRequest with
    its correlation id as the offset, and holds the answers back until
    ``answer_after`` requests have arrived (so a burst is in flight)."""

    def __init__(self, certs: Path, answer_after: int) -> None:
        self.tls = tls_for(certs, "node-1")
        self.answer_after = answer_after
        self.requests: list[tuple[int, tuple[bytes, ...]]] = []
        self.counter: RecordCounter | None = None
        self.records_at_burst: int | None = None

    async def serve(self, tcp: trio.SocketStream) -> None:
        self.counter = RecordCounter(tcp)
        stream = self.tls.wrap_server(self.counter)
        await stream.do_handshake()
        after_handshake = self.counter.application_records
        decoder = FrameDecoder()
        held: list[bytes] = []
        while data := await stream.receive_some(65536):
            decoder.feed(data)
            while (payload := decoder.next_frame()) is not None:
                decoded = decode_message(payload, expected_cluster_id=CLUSTER)
                assert isinstance(decoded.message, ProposeRequest)
                self.requests.append((decoded.correlation_id, decoded.message.records))
                answer = ProposeResponse(offset=decoded.correlation_id)
                held.append(encode_message(answer, correlation_id=decoded.correlation_id, cluster_id=CLUSTER))
            if len(self.requests) >= self.answer_after and held:
                if self.records_at_burst is None:
                    self.records_at_burst = self.counter.application_records - after_handshake
                await stream.send_all(b"".join(held))
                held = []


async def start(nursery: trio.Nursery, server: Server) -> int:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, server.serve, listeners)
    return listeners[0].socket.getsockname()[1]


async def test_a_burst_of_pipelined_requests_leaves_in_few_records_each_whole_and_in_order(certs: Path) -> None:
    server = Server(certs, answer_after=1)
    offsets: dict[int, int] = {}
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        async with QuorumClient([f"1@127.0.0.1:{port}"], cluster_id=CLUSTER, tls=tls_for(certs, "client-admin")) as client:
            await client.propose([b"first"])  # connected, nothing in flight
            before = server.counter.application_records
            connection = client._connection
            assert connection is not None
            # How many frames each of the client's writes carried.
            frames_per_write: list[int] = []
            connection.writer = FrameCountingWriter(connection.writer, frames_per_write)  # type: ignore[assignment]
            # One request in flight, then 64 more made in one scheduler
            # tick: they wait at the flush point and leave in writes of at
            # most FLUSH_FRAMES_MAX frames.
            server.answer_after = 66
            with trio.fail_after(WAIT_S):
                async with trio.open_nursery() as writers:
                    for index in range(65):

                        async def one(index: int = index) -> None:
                            offsets[index] = await client.propose([b"r%d" % index])

                        writers.start_soon(one)
            records = server.counter.application_records - before
        nursery.cancel_scope.cancel()
    assert len(offsets) == 65
    # Each task got the answer to its own request (correlation ids), every
    # frame decoded whole, in the order the tasks made them.
    by_correlation = dict(server.requests)
    assert all(by_correlation[offset] == (b"r%d" % index,) for index, offset in offsets.items())
    sent = [correlation for correlation, _ in server.requests[1:]]
    assert sent == sorted(sent)
    # The request that found nothing in flight alone, then the other 64 in
    # writes of FLUSH_FRAMES_MAX: the first leaves as soon as 16 wait, not
    # after the whole burst (the server starts on it meanwhile).
    assert frames_per_write == [1, 16, 16, 16, 16], frames_per_write
    # So a handful of TLS records (a couple more if the scheduler split the
    # tick), not 64.
    assert records <= 1 + 64 // FLUSH_FRAMES_MAX + 2, records


async def test_a_lone_request_is_written_before_the_caller_yields(certs: Path) -> None:
    server = Server(certs, answer_after=1)
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        async with QuorumClient([f"1@127.0.0.1:{port}"], cluster_id=CLUSTER, tls=tls_for(certs, "client-admin")) as client:
            await client.propose([b"connect"])
            connection = client._connection
            assert connection is not None
            frame = encode_message(ProposeRequest(records=(b"lone",)), correlation_id=99, cluster_id=CLUSTER)
            connection.send_frame(frame)  # synchronous: no task has run since
            assert connection._outbox == [] and connection.writer.pending_bytes == 0
            # A second one while the first counts as in flight waits for the
            # flush point, and leaves once the flusher runs.
            slots = {99: (trio.Event(), []), 100: (trio.Event(), [])}
            connection.waiting[99] = slots[99]
            connection.send_frame(encode_message(ProposeRequest(records=(b"next",)), correlation_id=100, cluster_id=CLUSTER))
            assert len(connection._outbox) == 1
            connection.waiting[100] = slots[100]
            with trio.fail_after(WAIT_S):
                for event, _ in slots.values():
                    await event.wait()
            assert connection._outbox == []
            assert [holder[0].offset for _, holder in slots.values()] == [99, 100]
        nursery.cancel_scope.cancel()
    assert [records for _, records in server.requests] == [(b"connect",), (b"lone",), (b"next",)]


async def test_requests_cancelled_at_the_flush_point_leave_whole_frames_and_no_slots(certs: Path) -> None:
    server = Server(certs, answer_after=1)
    answered: list[int] = []
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        async with QuorumClient([f"1@127.0.0.1:{port}"], cluster_id=CLUSTER, tls=tls_for(certs, "client-admin")) as client:
            await client.propose([b"connect"])
            connection = client._connection
            assert connection is not None
            # Answers held until: connect, one in flight, one cancelled at
            # the flush point, twenty more, and a last one.
            server.answer_after = 24
            with trio.fail_after(WAIT_S):
                async with trio.open_nursery() as writers:

                    async def in_flight() -> None:
                        await client.propose([b"in-flight"])
                        answered.append(-1)

                    writers.start_soon(in_flight)
                    await trio.testing.wait_all_tasks_blocked()
                    with trio.CancelScope() as early:
                        early.cancel()
                        # Queued behind the one in flight (nothing written
                        # yet), then cancelled at its first checkpoint.
                        await client.propose([b"cancelled-before-flush"])
                        raise AssertionError("not cancelled")  # pragma: no cover
                    assert early.cancelled_caught
                    # Its slot is gone; its frame still leaves (it may be
                    # on the wire already: the flusher may run while the
                    # cancelled task yields).
                    assert len(connection.waiting) == 1
                    scopes = []
                    for index in range(20):
                        scope = trio.CancelScope()
                        scopes.append(scope)

                        async def one(index: int = index, scope: trio.CancelScope = scope) -> None:
                            with scope:
                                await client.propose([b"c%d" % index])
                                answered.append(index)

                        writers.start_soon(one)
                    await trio.testing.wait_all_tasks_blocked()
                    # Half of them cancelled while their answers are awaited.
                    for scope in scopes[::2]:
                        scope.cancel()
                    await client.propose([b"after"])
            # The cancelled ones left no slot behind (their answers were
            # dropped when they came), and the client still works.
            assert connection.waiting == {}
            await client.propose([b"last"])
        nursery.cancel_scope.cancel()
    assert sorted(answered) == [-1, *range(1, 20, 2)]
    # Every frame the server saw decoded whole (the server asserts it), the
    # cancelled ones too, in the order made.
    sent = [correlation for correlation, _ in server.requests]
    assert sent == sorted(sent)
    records = [records for _, records in server.requests]
    assert records[1:3] == [(b"in-flight",), (b"cancelled-before-flush",)] and records[-2:] == [(b"after",), (b"last",)]
    assert len(records) == 25
