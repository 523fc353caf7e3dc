"""Tiny trio servers for the proxy tests to forward to, and checkable
frames."""

from __future__ import annotations

import random
import struct

import trio

FRAME_HEADER = struct.Struct("!II")  # payload length, sequence number


def frame(sequence: int, size: int) -> bytes:
    """A frame whose payload is a function of its sequence number, so the
    receiver can check every byte."""
    return FRAME_HEADER.pack(size, sequence) + random.Random(sequence).randbytes(size)


class EchoServer:
    """Echoes every byte back; counts connections."""

    def __init__(self) -> None:
        self.port = 0
        self.connections = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        try:
            async with stream:
                while data := await stream.receive_some(65536):
                    await stream.send_all(data)
        except trio.BrokenResourceError:
            pass


class RecordingServer:
    """Sends a greeting on connect, records what it receives, checks
    frames when asked to."""

    GREETING = b"hello from b\n"

    def __init__(self) -> None:
        self.port = 0
        self.connections = 0
        self.received = bytearray()
        self.changed = trio.Event()
        self.streams: list[trio.SocketStream] = []

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        self._notify()
        self.streams.append(stream)
        try:
            async with stream:
                await stream.send_all(self.GREETING)
                while data := await stream.receive_some(65536):
                    self.received += data
                    self._notify()
        except trio.BrokenResourceError:
            pass

    async def push(self, data: bytes) -> None:
        """Send ``data`` to every connected client (the b→a direction)."""
        for stream in self.streams:
            await stream.send_all(data)

    def _notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, condition, timeout_s: float) -> bool:
        """Poll ``condition`` on every change, up to ``timeout_s``; whether
        it became true."""
        with trio.move_on_after(timeout_s):
            while not condition():
                await self.changed.wait()
            return True
        return False

    def frames(self) -> list[int]:
        """Sequence numbers of the complete frames received so far;
        asserts every byte of each is right."""
        sequences, offset, data = [], 0, bytes(self.received)
        while offset + FRAME_HEADER.size <= len(data):
            size, sequence = FRAME_HEADER.unpack_from(data, offset)
            end = offset + FRAME_HEADER.size + size
            if end > len(data):
                break
            assert data[offset:end] == frame(sequence, size), f"frame {sequence} corrupted"
            sequences.append(sequence)
            offset = end
        return sequences
