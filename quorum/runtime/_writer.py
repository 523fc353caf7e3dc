"""Writing frames to a trio socket stream without a task hop.

``trio.SocketStream.send_all`` must be awaited, so a synchronous caller (the
core task handing a message to the transport) would have to wake a sender
task and wait for the scheduler to run it: a hop on every message of the
replication round. A ``StreamWriter`` instead hands the bytes to the kernel
at once with a non-blocking ``write`` on the socket; only what the kernel
does not take (a full send buffer) is kept, in order, for ``run()`` to send
with ``send_all`` once the socket is writable again. Bytes never overtake
each other: while anything is kept back, later writes queue behind it.

A TLS stream (``TlsStream``, quorum/runtime/_tls.py) is written the same
way: ``write`` turns the frame into TLS records at once
(``TlsStream.encrypt``, Python's ``ssl`` doing the cryptography) and hands
those to the socket underneath, so a TLS frame costs no task hop either.
Records must reach the socket in the order they were made (each carries
the next sequence number of the connection's keys); they are, because
they are made and then written or kept in one synchronous step.
Any other stream (none in pykraft; a test's memory stream, say) has no
socket to write to: every write is kept for ``run()``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import trio

from ._tls import TlsStream

WRITE_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class StreamWriter:
    """The only writer of ``stream`` (nothing else may send on it)."""

    __slots__ = (
        "stream", "_socket_stream", "_encrypt", "_direct", "_pending", "_pending_bytes", "_flushing", "_wakeup",
        "error", "closed", "on_drained",
    )  # fmt: skip

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        # Where the bytes go: the stream itself, or the TCP stream under TLS
        # (whose records ``encrypt`` makes).
        self._encrypt: Callable[[bytes], bytes] | None = None
        self._socket_stream: trio.abc.Stream = stream
        if isinstance(stream, TlsStream):
            self._encrypt = stream.encrypt
            self._socket_stream = stream.transport_stream
            stream.attach_writer(self)
        # A socket is written directly; anything else through ``run()``.
        self._direct = isinstance(self._socket_stream, trio.SocketStream)
        # Called (no arguments) each time ``run`` has handed every kept-back
        # byte to the kernel: a reader holding back for the backlog to drain
        # resumes then.
        self.on_drained: Callable[[], None] | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._flushing = False
        self._wakeup = trio.Event()
        self.error: BaseException | None = None
        self.closed = False

    @property
    def pending_bytes(self) -> int:
        """Bytes accepted by ``write`` that the kernel has not taken yet."""
        return self._pending_bytes

    def write(self, data: bytes) -> None:
        """Send ``data`` now, or as soon as the socket takes it; never blocks.
        (Under TLS, ``b""`` sends the records the TLS layer made by itself.)

        Raises ``trio.ClosedResourceError`` after ``close()``, or the error
        that broke the stream (an ``OSError`` such as a reset, a
        ``trio.BrokenResourceError`` from TLS); the caller then drops the
        connection.
        """
        if self.error is not None:
            raise self.error
        if self.closed:
            raise trio.ClosedResourceError("the connection is closed")
        if self._encrypt is not None:
            try:
                data = self._encrypt(data)
            except trio.BrokenResourceError as error:
                self.error = error
                self._wakeup.set()
                raise
            if not data:
                return
        if self._pending or self._flushing or not self._direct:
            self._keep(data)
            return
        # fileno() is -1 once the socket is closed, so a closed descriptor
        # number (perhaps reused by another file) is never written to.
        assert isinstance(self._socket_stream, trio.SocketStream)
        fd = self._socket_stream.socket.fileno()
        if fd < 0:
            self.closed = True
            raise trio.ClosedResourceError("the socket is closed")
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as error:
            self.error = error
            self._wakeup.set()
            raise
        if sent < len(data):
            self._keep(data[sent:] if sent else data)

    def _keep(self, data: bytes) -> None:
        self._pending.append(data)
        self._pending_bytes += len(data)
        self._wakeup.set()

    def close(self) -> None:
        """Refuse further writes and stop ``run()``."""
        self.closed = True
        self._wakeup.set()

    async def run(self) -> None:
        """Send what ``write`` kept back; returns after ``close()``, raises
        the stream's error when it breaks."""
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            if self.error is not None:
                raise self.error
            while self._pending and not self.closed:
                data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
                self._pending = []
                self._pending_bytes = 0
                self._flushing = True
                try:
                    await self._socket_stream.send_all(data)
                except WRITE_ERRORS as error:
                    self.error = error
                    raise
                finally:
                    self._flushing = False
            if not self._pending and self.on_drained is not None:
                self.on_drained()
            if self.closed:
                return
