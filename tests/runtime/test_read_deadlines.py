"""The receive path's deadlines, on virtual time (each test requests
``autojump_clock``): an inbound connection is
closed once it sent nothing for the idle timeout (counted from the last
bytes), a frame once it is not finished within the frame deadline (counted
from its first bytes), and bytes that arrive as a deadline passes are taken
(issue 21: one cancel scope per connection, its deadline moved per read)."""

from __future__ import annotations

import trio
import trio.testing

from quorum import VoteRequest
from quorum.runtime import ConnectionLimits, TcpTransport
from quorum.runtime._tcp import _Connection
from quorum.wire import DescribeQuorumRequest
from tests.scripted_peer import ScriptedPeer

CLUSTER = "deadlines"
IDLE_S = 10.0
FRAME_S = 4.0
LIMITS = ConnectionLimits(idle_timeout_ms=int(IDLE_S * 1000), frame_deadline_ms=int(FRAME_S * 1000))


def frame(message: object = VoteRequest(src=7, dst=9, epoch=1, last_epoch=0, end_offset=0, pre_vote=True)) -> bytes:
    """A whole frame of ``message``; by default one a client may send: a
    quorum message for another node, read (it counts as heard) and dropped
    with a log line."""
    transport = TcpTransport(1, cluster_id=CLUSTER, listen=None, peer_addresses={})
    connection = _Connection(ScriptedPeer([]), "peer", CLUSTER, transport.limits)
    return connection.encode(message)


async def closed_at_s(script: list[tuple[float, bytes]]) -> tuple[float, TcpTransport]:
    """The virtual time at which an inbound client connection fed by
    ``script`` was given up, and its transport (for the counters)."""
    transport = TcpTransport(1, cluster_id=CLUSTER, listen=None, peer_addresses={}, connection_limits=LIMITS)
    connection = _Connection(ScriptedPeer(script), "peer", CLUSTER, transport.limits)
    async with trio.open_nursery() as nursery:
        await transport._read_frames(connection, nursery)
    return trio.current_time(), transport


def closed_for(transport: TcpTransport, reason: str) -> float:
    return transport.metrics.value("pykraft_quorum_connections_closed_total", reason=reason) or 0


async def test_a_connection_is_closed_an_idle_timeout_after_its_last_frame(autojump_clock) -> None:
    clock = trio.current_time()
    whole = frame()
    # Each frame comes before the idle timeout of the one before it: the
    # deadline moves with every read, the connection outlives 2 timeouts.
    at_s, transport = await closed_at_s([(clock + 7, whole), (clock + 14, whole), (clock + 21, whole)])
    assert at_s == clock + 21 + IDLE_S
    assert closed_for(transport, "idle") == 1
    assert closed_for(transport, "frame_deadline") == 0


async def test_a_frame_is_closed_a_frame_deadline_after_its_first_bytes(autojump_clock) -> None:
    clock = trio.current_time()
    whole = frame()
    # More bytes of the same frame do not move its deadline.
    at_s, transport = await closed_at_s([(clock + 1, whole[:3]), (clock + 3, whole[3:5])])
    assert at_s == clock + 1 + FRAME_S
    assert closed_for(transport, "frame_deadline") == 1
    assert closed_for(transport, "idle") == 0


async def test_a_frame_finished_in_time_leaves_only_the_idle_timeout(autojump_clock) -> None:
    clock = trio.current_time()
    whole = frame()
    at_s, transport = await closed_at_s([(clock + 1, whole[:3]), (clock + 4, whole[3:])])
    assert at_s == clock + 4 + IDLE_S
    assert closed_for(transport, "idle") == 1
    assert closed_for(transport, "frame_deadline") == 0


class HeldChunk(ScriptedPeer):
    """A peer whose one chunk arrives when the test releases it."""

    def __init__(self, chunk: bytes) -> None:
        super().__init__([])
        self.chunk = chunk
        self.released = trio.Event()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.chunk:
            await self.released.wait()
            chunk, self.chunk = self.chunk, b""
            return chunk
        await trio.sleep_forever()


async def test_bytes_that_arrive_as_the_deadline_passes_are_taken(autojump_clock) -> None:
    clock = trio.current_time()
    peer = HeldChunk(frame())
    transport = TcpTransport(1, cluster_id=CLUSTER, listen=None, peer_addresses={}, connection_limits=LIMITS)
    connection = _Connection(peer, "peer", CLUSTER, transport.limits)
    closed: list[float] = []

    async def read() -> None:
        async with trio.open_nursery() as served:
            await transport._read_frames(connection, served)
        closed.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.sleep_until(clock + IDLE_S - 1)
        # The frame arrives (the reader is woken) and the idle deadline
        # passes before the reader runs again: the run loop expires the
        # deadline of a reader that already has its bytes. The read
        # succeeded, so the frame counts and the next timeout runs from it.
        peer.released.set()
        autojump_clock.jump(1)
    assert closed == [clock + 2 * IDLE_S]
    assert closed_for(transport, "idle") == 1


async def test_a_client_over_its_in_flight_bound_is_closed_as_stalled_not_idle(autojump_clock) -> None:
    clock = trio.current_time()

    async def never_answer(request: object) -> object:
        await trio.sleep_forever()

    limits = ConnectionLimits(idle_timeout_ms=int(IDLE_S * 1000), requests_in_flight_max=1)
    transport = TcpTransport(
        1, cluster_id=CLUSTER, listen=None, peer_addresses={}, connection_limits=limits, request_handler=never_answer
    )
    request = frame(DescribeQuorumRequest(version=1))
    connection = _Connection(ScriptedPeer([(clock + 1, request + request)]), "peer", CLUSTER, transport.limits)
    async with trio.open_nursery() as nursery:
        await transport._read_frames(connection, nursery)
        closed_at_s = trio.current_time()
        nursery.cancel_scope.cancel()
    # The second request waits for the first's answer, bounded by the idle
    # timeout from the moment it waits; the read's idle deadline (10 s
    # after the connection opened) does not cut that wait short.
    assert closed_at_s == clock + 1 + IDLE_S
    assert closed_for(transport, "stalled") == 1
    assert closed_for(transport, "idle") == 0
