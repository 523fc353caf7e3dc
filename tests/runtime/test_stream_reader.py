"""``StreamReader``: waits for the socket, then reads once; reads again at
once only after a read that filled its buffer; ends and fails as a stream
should (docs/benchmarks.md, "Where a sequential write spends its time")."""

from __future__ import annotations

import socket
import struct

import pytest
import trio
import trio.testing

from quorum.runtime import StreamReader

WAIT_S = 10


async def socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    left, right = trio.socket.socketpair()
    return trio.SocketStream(left), trio.SocketStream(right)


async def test_a_read_waits_for_data_and_returns_what_arrived() -> None:
    near, far = await socket_pair()
    reader = StreamReader(near)
    received: list[bytes] = []

    async def read() -> None:
        received.append(await reader.receive_some(1024))

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            assert received == []  # nothing to read: it waits, it does not fail
            await far.send_all(b"frame")
    assert received == [b"frame"]


async def test_a_full_read_is_followed_by_one_that_reads_the_rest_at_once() -> None:
    near, far = await socket_pair()
    reader = StreamReader(near)
    await far.send_all(b"abcdefgh")
    with trio.fail_after(WAIT_S):
        assert await reader.receive_some(4) == b"abcd"
        assert await reader.receive_some(4) == b"efgh"
        # That read filled its buffer too, but nothing is left: the next
        # one waits for data rather than failing with EAGAIN.
        async with trio.open_nursery() as nursery:
            got: list[bytes] = []

            async def read() -> None:
                got.append(await reader.receive_some(4))

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            await far.send_all(b"ij")
    assert got == [b"ij"]


async def test_the_peers_close_reads_as_the_end_of_the_stream() -> None:
    near, far = await socket_pair()
    reader = StreamReader(near)
    await far.send_all(b"last")
    await far.aclose()
    with trio.fail_after(WAIT_S):
        assert await reader.receive_some(1024) == b"last"
        assert await reader.receive_some(1024) == b""


async def test_a_reset_is_a_broken_stream_as_with_trios_socket_stream() -> None:
    near, far = await socket_pair()
    reader = StreamReader(near)
    await near.send_all(b"never read")  # unread at close: the close is a reset
    far.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await far.aclose()
    with trio.fail_after(WAIT_S), pytest.raises(trio.BrokenResourceError):
        await reader.receive_some(1024)


async def test_a_socket_closed_here_cannot_be_read() -> None:
    near, _far = await socket_pair()
    reader = StreamReader(near)
    await near.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await reader.receive_some(1024)


async def test_closing_the_socket_wakes_a_waiting_read() -> None:
    near, _far = await socket_pair()
    reader = StreamReader(near)
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            failures: list[BaseException] = []

            async def read() -> None:
                try:
                    await reader.receive_some(1024)
                except trio.ClosedResourceError as error:
                    failures.append(error)

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            await near.aclose()
    assert len(failures) == 1


async def test_a_stream_without_a_socket_is_read_through_its_own_receive_some() -> None:
    send_stream, receive_stream = trio.testing.memory_stream_pair()
    reader = StreamReader(receive_stream)
    await send_stream.send_all(b"in memory")
    with trio.fail_after(WAIT_S):
        assert await reader.receive_some(1024) == b"in memory"
