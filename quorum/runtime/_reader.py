"""Reading a connection with one system call per arrival.

``trio.SocketStream.receive_some`` tries ``recv`` first and waits for the
socket only when that fails. On a connection that carries one exchange at a
time (a follower's Fetch and its answer, a client's sequential writes) the
data the last read took was all there was, so the next read nearly always
fails with EAGAIN before it waits: one wasted ``recv`` per message on every
node (docs/benchmarks.md, "Where a sequential write spends its time").
``StreamReader`` waits first and reads once the socket is readable, and
reads again at once only when the last read filled the buffer (more may be
queued). ``TlsStream`` reads its ciphertext through one. Any other stream (a
test's memory stream) is read through its own ``receive_some``.

Reading first was measured again for issue 21 (docs/benchmarks.md, "The
read path's wake-ups"): on the leader's sequential writes it added about
3 failed reads per write and 28 Python calls per read, and every wait
still re-armed the socket: trio registers a descriptor for one event at a
time (``EPOLLONESHOT``), so no stream can stay registered.
"""

from __future__ import annotations

import errno
import os

import trio


class StreamReader:
    """The only reader of ``stream`` (nothing else may receive from it)."""

    __slots__ = ("stream", "_socket", "_more")

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        # The last read filled its buffer: more bytes may be waiting.
        self._more = False

    async def receive_some(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` (at least one), or ``b""`` once the peer
        closed its side; a checkpoint, as ``trio.abc.ReceiveStream``'s.

        Raises ``trio.ClosedResourceError`` when the socket was closed here,
        ``trio.BrokenResourceError`` (from the ``OSError``) when the
        connection broke (a reset), as ``trio.SocketStream`` does, or what
        the stream's own ``receive_some`` raises."""
        sock = self._socket
        if sock is None:
            return await self.stream.receive_some(max_bytes)
        # fileno() is -1 once the socket is closed: a closed descriptor
        # number (perhaps reused by another file) is never read.
        fd = sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the socket is closed")
        if self._more:
            await trio.lowlevel.checkpoint()
        else:
            # The number, not the socket: trio would ask it for the number
            # again. A close (``notify_closing``) still wakes this wait.
            await trio.lowlevel.wait_readable(fd)
        while True:
            fd = sock.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("the socket is closed")
            try:
                data = os.read(fd, max_bytes)
            except BlockingIOError:
                # Readiness was a guess (after a full read) or spurious.
                await trio.lowlevel.wait_readable(sock)
                continue
            except OSError as error:
                if error.errno == errno.EBADF:
                    raise trio.ClosedResourceError("the socket is closed") from error
                raise trio.BrokenResourceError(f"the connection broke: {error}") from error
            self._more = len(data) == max_bytes
            return data
