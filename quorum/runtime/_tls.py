"""Mutual TLS 1.3 for every pykraft connection (issue 16; docs/security.md).

One ``TlsConfig`` per process, shared by every listener and connector in
it (the node's transport, ``QuorumClient``, the broker's clients): it
holds the CA bundle, this process's certificate and key, and the two
``ssl.SSLContext`` built from them. ``reload()`` (on SIGHUP) rebuilds the
contexts from the files; connections already open keep theirs, new ones
use the new certificate: rotation without restart.

Both sides present a certificate and check the other's against the CA
bundle; host names are not checked, principals are: the peer's identity is
the ``pykraft://`` URI in its certificate's subjectAltName
(``quorum.parse_principal``), which callers bind to what the peer says it
is. Only TLS 1.3 is offered.

A connection is a ``TlsStream``: Python's ``ssl`` does every bit of the
protocol and the cryptography (an ``ssl.SSLObject`` over two
``ssl.MemoryBIO``), the stream only moves bytes between those buffers and
the TCP socket. Why not ``trio.SSLStream``: its ``send_all`` must be
awaited, so a frame produced by a synchronous caller (the core task
answering a proposal, a leader sending a Fetch answer) had to wait for the
connection's writer task, a scheduler hop on each of the four message hops
of a write; and its record handling (locks, conflict detectors, one
``receive_some`` per record) costs more Python per frame. Here
``encrypt`` turns plaintext into TLS records at once, without awaiting,
so ``StreamWriter`` sends them straight into the socket exactly as it
sends plaintext (docs/benchmarks.md, "TLS on against off").

Reconnects resume the TLS 1.3 session (RFC 8446 §2.2: a ticket from the
server, offered as a PSK with a fresh (EC)DHE exchange): ``connect`` offers
the newest ticket that address gave this ``TlsConfig``, once (a few are kept
per address, so connections opened together all resume), and the server
accepts it only if its own context made it, which skips both certificate
signatures and chain checks. Mutual authentication keeps its meaning: a
resumed session carries the peer certificate of the full handshake it
came from (``getpeercert`` returns it on both sides, so the principal is
bound as before), it is refused when that certificate has expired since,
and no session outlives a reload: ``reload`` builds new contexts, whose
new ticket keys make every earlier ticket unusable on the server, and the
client forgets its tickets (``ssl`` would refuse a session of another
context anyway). docs/security.md, "Session resumption", lists the limits.
"""

from __future__ import annotations

import datetime
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import trio

from .._access import Principal, principal_from_uris
from .._node import QuorumError
from ._reader import StreamReader

logger = logging.getLogger("pykraft.tls")

#: A TLS handshake must finish within this (a peer that opens a connection
#: and says nothing must not hold a slot for the idle timeout).
HANDSHAKE_TIMEOUT_S = 10.0
#: ``describe`` and the log warn once a certificate expires within this.
EXPIRY_WARNING_DAYS = 14
#: A client offers a session ticket at most this long after it got it
#: (servers accept them for OpenSSL's 7,200 s; a short age keeps a
#: session close to the full handshake that checked its certificates).
SESSION_TICKET_MAX_AGE_S = 600.0
#: Tickets a ``TlsConfig`` keeps in all (the oldest goes first).
SESSION_TICKETS_MAX = 1024
#: Tickets it keeps per address, each offered once (RFC 8446 §C.4: a ticket
#: reused would let an observer link the connections): so many connections
#: opened to one node at once (clients sharing a process, as the benchmarks'
#: eight) all resume, not the first alone.
SESSION_TICKETS_PER_ADDRESS_MAX = 8


class TlsError(QuorumError):
    """A TLS setting that cannot work: a file missing or unreadable, a key
    that does not match its certificate, a certificate without one pykraft
    principal. The message says which file and why."""


class PeerNotAuthenticatedError(QuorumError):
    """The peer's certificate was verified but names no usable principal,
    or not the one expected on this connection."""


@dataclass(eq=False)
class TlsConfig:
    """The CA bundle, certificate and key of one process (PEM files).

    Raises ``TlsError`` on construction (and on ``reload``) when the files
    cannot be used.
    """

    ca_file: Path | str
    cert_file: Path | str
    key_file: Path | str
    #: Resume TLS sessions on reconnect (offer tickets as a client, issue
    #: them as a server); off, every connection makes a full handshake.
    session_resumption: bool = field(default=True, kw_only=True)
    _server: ssl.SSLContext = field(init=False, repr=False)
    _client: ssl.SSLContext = field(init=False, repr=False)
    principal: Principal = field(init=False)
    not_after: datetime.datetime = field(init=False)
    # (host, port) -> [(the client context it belongs to, the session, when
    # it arrived on ``time.monotonic``)], oldest first; addresses in the
    # order a ticket last arrived. Not trio's clock: each ``trio.run`` draws
    # a new origin for it at random, so a ticket kept in one run (a client
    # made and closed per run, as the benchmarks do) read as far too old or
    # as younger than it is in the next.
    _tickets: dict[tuple[str, int], list[tuple[ssl.SSLContext, ssl.SSLSession, float]]] = field(
        init=False, repr=False, default_factory=dict
    )
    _ticket_count: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        self.reload()

    def reload(self) -> None:
        """Read the three files again and build new contexts for new
        connections, forgetting every session ticket (the new server
        context refuses the old ones too). On failure the old contexts stay
        in use and ``TlsError`` says why."""
        server = self._context(ssl.Purpose.CLIENT_AUTH)
        client = self._context(ssl.Purpose.SERVER_AUTH)
        # One ticket per connection: a client keeps only the newest.
        server.num_tickets = 1 if self.session_resumption else 0
        principal, not_after = _describe_certificate(Path(self.cert_file))
        self._server, self._client, self.principal, self.not_after = server, client, principal, not_after
        self._tickets.clear()
        self._ticket_count = 0

    def _context(self, purpose: ssl.Purpose) -> ssl.SSLContext:
        # Not ssl.create_default_context: with no CA argument it also loads
        # the system's public CAs (and honours SSLKEYLOGFILE). The cluster's
        # CA is the only trust anchor: a certificate any public or corporate
        # CA signed, SAN URI and all, must not make its holder a member.
        side = ssl.PROTOCOL_TLS_SERVER if purpose is ssl.Purpose.CLIENT_AUTH else ssl.PROTOCOL_TLS_CLIENT
        context = ssl.SSLContext(side)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        # Identities are principals in the SAN URI, bound by the caller;
        # nodes are reached by address, so host names are not checked.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_verify_locations(cafile=str(self.ca_file))
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (OSError, ssl.SSLError) as error:
            raise TlsError(f"cannot use {self.cert_file} / {self.key_file} with CA {self.ca_file}: {error}") from error
        return context

    def days_left(self, now: datetime.datetime | None = None) -> float:
        """Days until this process's certificate expires (negative after)."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        return (self.not_after - now).total_seconds() / 86400

    def wrap_server(self, stream: trio.abc.Stream) -> TlsStream:
        """The server side of TLS on ``stream`` (handshake not started)."""
        return TlsStream(stream, self._server, server_side=True)

    def wrap_client(self, stream: trio.abc.Stream) -> TlsStream:
        """The client side of TLS on ``stream`` (handshake not started)."""
        return TlsStream(stream, self._client, server_side=False)

    def _take_ticket(self, address: tuple[str, int]) -> ssl.SSLSession | None:
        """The newest ticket to offer ``address``, used once; None when
        there is none younger than ``SESSION_TICKET_MAX_AGE_S`` of the
        current context (those of a context before a reload are dropped)."""
        kept = self._tickets.get(address)
        session, now_s = None, time.monotonic()
        while kept and session is None:
            context, candidate, received_s = kept.pop()
            self._ticket_count -= 1
            if now_s - received_s > SESSION_TICKET_MAX_AGE_S:
                self._ticket_count -= len(kept)  # the rest are older still
                kept.clear()
            elif context is self._client:
                session = candidate
        if kept is not None and not kept:
            del self._tickets[address]
        return session if self.session_resumption else None

    def _keep_ticket(self, address: tuple[str, int], context: ssl.SSLContext, session: ssl.SSLSession) -> None:
        if context is not self._client:
            return  # made before a reload: never offered
        kept = self._tickets.pop(address, [])
        if len(kept) >= SESSION_TICKETS_PER_ADDRESS_MAX:
            del kept[0]
            self._ticket_count -= 1
        if self._ticket_count >= SESSION_TICKETS_MAX:
            oldest = self._tickets[next(iter(self._tickets))]
            del oldest[0]
            self._ticket_count -= 1
            if not oldest:
                del self._tickets[next(iter(self._tickets))]
        kept.append((context, session, time.monotonic()))
        self._ticket_count += 1
        self._tickets[address] = kept

    async def connect(self, host: str, port: int) -> tuple[TlsStream, Principal]:
        """Open a TCP connection and finish the TLS handshake (resuming the
        session of a recent connection to ``host:port`` when the server
        accepts it); returns the stream and the server's principal. Raises
        ``OSError``, ``trio.BrokenResourceError`` (the handshake failed: the
        reason is its ``__cause__``), ``trio.TooSlowError``, or
        ``PeerNotAuthenticatedError``."""
        tcp = await trio.open_tcp_stream(host, port)
        address, context = (host, port), self._client
        stream = TlsStream(
            tcp,
            context,
            server_side=False,
            session=self._take_ticket(address),
            on_ticket=(lambda session: self._keep_ticket(address, context, session)) if self.session_resumption else None,
        )
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                await stream.do_handshake()
            return stream, peer_principal(stream)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise


class RecordSender(Protocol):
    """What a ``TlsStream`` needs of the ``StreamWriter`` that sends its
    records (a protocol: the writer module imports this one)."""

    @property
    def pending_bytes(self) -> int: ...

    def write(self, data: bytes) -> None: ...


class TlsStream(trio.abc.Stream):
    """One TLS connection over a TCP stream (``transport_stream``): an
    ``ssl.SSLObject`` does the protocol, this class only carries its bytes.

    Reading and writing are independent: ``receive_some`` may run in one
    task while others write. Writing has two forms. ``encrypt`` is
    synchronous: it returns the records to put on the socket now, in the
    order they were made, and is what ``StreamWriter`` uses (it then owns
    the socket's sending side: nothing else may send on this stream, and
    it must send every record ``encrypt`` returned, in order).
    ``send_all`` (encrypt, then await the socket) is for callers without
    a ``StreamWriter``.

    Bounded whatever the peer does: ciphertext is read from the socket only
    when the ``SSLObject`` asks for more (``RECEIVE_BYTES`` at a time), so
    the incoming buffer never holds more than that and one partial record;
    plaintext is returned as it is decrypted, at most ``max_bytes`` per
    call. The handshake's time limit is the caller's
    (``HANDSHAKE_TIMEOUT_S``). Errors are those of ``trio.SSLStream``
    (``https_compatible=False``): a protocol error, a failed handshake or
    an end of the TCP stream without TLS's close_notify raise
    ``trio.BrokenResourceError`` whose ``__cause__`` is the ``ssl`` error;
    close_notify reads as ``b""``.
    """

    #: Ciphertext read from the socket at once.
    RECEIVE_BYTES = 256 * 1024
    #: Plaintext ``receive_some`` returns when given no ``max_bytes``.
    DEFAULT_RECEIVE_BYTES = 256 * 1024

    def __init__(
        self,
        transport_stream: trio.abc.Stream,
        context: ssl.SSLContext,
        *,
        server_side: bool,
        session: ssl.SSLSession | None = None,
        on_ticket: Callable[[ssl.SSLSession], None] | None = None,
    ) -> None:
        """A client offers ``session`` (a ticket from an earlier connection
        with the same context) and hands the first ticket the server sends
        to ``on_ticket``."""
        self.transport_stream = transport_stream
        # Ciphertext in with one read per arrival (no failed read first).
        self._transport_reader = StreamReader(transport_stream)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(
            self._incoming, self._outgoing, server_side=server_side, server_hostname=None, session=session
        )
        # TLS 1.3 tickets arrive after the handshake and are taken in by
        # the first read (``receive_some``).
        self._on_ticket = on_ticket
        self._handshake_done = False
        self._received_close_notify = False
        # The last read stopped at its ``max_bytes``: the record may hold more.
        self._record_unread = False
        self._send_broken = False
        self._closed = False
        # The StreamWriter that owns sending (``attach_writer``), if any.
        self._writer: RecordSender | None = None

    # -- handshake and identity -------------------------------------------

    async def do_handshake(self) -> None:
        """Run the TLS handshake to its end. Raises
        ``trio.BrokenResourceError`` (refused, garbage, or the peer went
        away; the ``ssl`` error is the ``__cause__``) or the transport's
        ``OSError``. Bound it with a timeout."""
        while not self._handshake_done:
            try:
                self._ssl.do_handshake()
                if self._ssl.session_reused and _resumed_certificate_expired(self._ssl):
                    cause = ssl.SSLError("the resumed session's peer certificate has expired")
                    cause.reason = "RESUMED_CERTIFICATE_EXPIRED"
                    raise trio.BrokenResourceError(f"TLS handshake failed: {cause.args[0]}") from cause
                self._handshake_done = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as error:
                # Tell the peer why (the alert OpenSSL wrote), without
                # waiting for it to read.
                self._send_nowait(self._outgoing.read())
                raise trio.BrokenResourceError(f"TLS handshake failed: {error}") from error
            records = self._outgoing.read()
            if records:
                await self.transport_stream.send_all(records)
            if not self._handshake_done:
                data = await self._transport_reader.receive_some(self.RECEIVE_BYTES)
                if not data:
                    raise trio.BrokenResourceError("the peer closed the connection during the TLS handshake")
                self._incoming.write(data)

    def getpeercert(self) -> dict[str, Any] | None:
        """The peer's verified certificate (``ssl.SSLObject.getpeercert``;
        on a resumed session, the one its full handshake verified)."""
        return self._ssl.getpeercert()

    @property
    def session_reused(self) -> bool:
        """Whether the handshake resumed an earlier session."""
        return self._ssl.session_reused

    # -- sending ----------------------------------------------------------

    def attach_writer(self, writer: RecordSender) -> None:
        """``writer`` sends this stream's records from
        now on: records the read side makes (a TLS 1.3 KeyUpdate answer)
        go to it, and ``aclose`` sends close_notify only once it has
        nothing left to send (or the peer would get a cut record)."""
        self._writer = writer

    def encrypt(self, data: bytes) -> bytes:
        """TLS records carrying ``data``, preceded by any records the
        ``SSLObject`` made since the last call; never blocks. The caller
        must send them, in order, before anything ``encrypt`` returns
        later. Raises ``trio.BrokenResourceError`` (from the ``ssl``
        error) or ``trio.ClosedResourceError``."""
        if self._closed:
            raise trio.ClosedResourceError("the TLS stream is closed")
        if self._send_broken:
            raise trio.BrokenResourceError("an earlier send on this TLS stream did not finish")
        if not self._handshake_done:
            # SSL_write would start a handshake of its own; nothing may be
            # sent before ``do_handshake`` proved who the peer is.
            raise trio.BrokenResourceError("no TLS handshake yet: nothing can be sent")
        if data:
            try:
                # A memory BIO takes everything: SSL_write writes all of
                # ``data`` (split into records of up to 16 KiB) or fails.
                self._ssl.write(data)
            except ssl.SSLError as error:
                raise trio.BrokenResourceError(f"TLS write failed: {error}") from error
        return self._outgoing.read()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt ``data`` and send it (for callers without a
        ``StreamWriter``). Raises like ``encrypt`` and the transport."""
        records = self.encrypt(bytes(data))
        if not records:
            await trio.lowlevel.checkpoint()
            return
        try:
            await self.transport_stream.send_all(records)
        except BaseException:
            # Cancelled or failed part way: the peer may hold part of a
            # record, so nothing sent after it could be read (as with
            # trio.SSLStream, the stream is broken from now on).
            self._send_broken = True
            raise

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    def _send_nowait(self, data: bytes) -> None:
        """Hand ``data`` to the kernel if it takes it now (an alert, a
        close_notify: best effort, on the way out)."""
        socket = getattr(self.transport_stream, "socket", None)
        if not data or socket is None or socket.fileno() < 0:
            return
        try:
            os.write(socket.fileno(), data)
        except OSError:
            pass  # full or broken: the peer learns from the closed socket

    # -- receiving --------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Up to ``max_bytes`` of plaintext (all the records already
        received, joined), waiting for the socket only when none is
        decrypted yet; ``b""`` after the peer's close_notify. Raises
        ``trio.BrokenResourceError`` (a bad record, or the TCP stream ended
        without close_notify), ``trio.ClosedResourceError`` or the
        transport's ``OSError``."""
        if self._closed:
            raise trio.ClosedResourceError("the TLS stream is closed")
        if max_bytes is None:
            max_bytes = self.DEFAULT_RECEIVE_BYTES
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        while True:
            chunks: list[bytes] = []
            size = 0
            read_any = False
            # OpenSSL returns one record per read: take every record
            # already buffered, so a burst of small frames costs one pass
            # of the caller's decoder, not one per frame. Read only while
            # ciphertext is buffered, or the last read filled its request
            # (its record may hold more): an empty read costs an exception.
            while (
                size < max_bytes
                and not self._received_close_notify
                and (self._incoming.pending or self._record_unread or self._incoming.eof)
            ):
                wanted = max_bytes - size
                read_any = True
                try:
                    chunk = self._ssl.read(wanted)
                except ssl.SSLWantReadError:
                    self._record_unread = False
                    break
                except ssl.SSLZeroReturnError:
                    self._received_close_notify = True
                    break
                except ssl.SSLError as error:
                    raise trio.BrokenResourceError(f"TLS read failed: {error}") from error
                if not chunk:
                    self._received_close_notify = True
                    break
                self._record_unread = len(chunk) == wanted
                chunks.append(chunk)
                size += len(chunk)
            if self._outgoing.pending and self._writer is not None:
                # Reading made records to send (post-handshake messages).
                self._writer.write(b"")
            if self._on_ticket is not None and read_any:
                # A server sends its tickets as it finishes the handshake,
                # ahead of any data: looked for after each read until one
                # came or data did (reading ``session`` copies it, about
                # 140 µs: not on every read of a connection without one).
                session = self._ssl.session
                if session is not None and session.has_ticket:
                    on_ticket, self._on_ticket = self._on_ticket, None
                    on_ticket(session)
                elif chunks:
                    self._on_ticket = None
            if chunks:
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if self._received_close_notify:
                await trio.lowlevel.checkpoint()
                return b""
            if self._incoming.eof:
                raise trio.BrokenResourceError("the TCP connection ended inside a TLS record")
            data = await self._transport_reader.receive_some(self.RECEIVE_BYTES)
            if not data:
                # No close_notify: SSLObject.read now raises SSLEOFError.
                self._incoming.write_eof()
            else:
                self._incoming.write(data)

    # -- closing ----------------------------------------------------------

    async def aclose(self) -> None:
        """Send close_notify if it can go at once, then close the socket."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        if self._handshake_done and (self._writer is None or self._writer.pending_bytes == 0):
            try:
                self._ssl.unwrap()
            except ssl.SSLError:
                pass  # it waits for the peer's close_notify: not waited for
            self._send_nowait(self._outgoing.read())
        await self.transport_stream.aclose()


def _resumed_certificate_expired(tls: ssl.SSLObject) -> bool:
    """Whether the peer certificate a resumed session carries has expired
    since its full handshake (resumption checks no certificate, so this
    does)."""
    certificate = tls.getpeercert()
    text = certificate.get("notAfter") if certificate else None
    return not text or ssl.cert_time_to_seconds(text) <= time.time()


def peer_principal(stream: TlsStream | trio.SSLStream[Any]) -> Principal:
    """The principal of the verified peer certificate on ``stream`` (after
    the handshake). Raises ``PeerNotAuthenticatedError``."""
    certificate = stream.getpeercert()
    if not certificate:
        raise PeerNotAuthenticatedError("the peer presented no certificate")
    uris = [value for kind, value in certificate.get("subjectAltName", ()) if kind == "URI"]
    try:
        return principal_from_uris(uris)
    except ValueError as error:
        raise PeerNotAuthenticatedError(str(error)) from None


def peer_not_after(stream: TlsStream | trio.SSLStream[Any]) -> datetime.datetime | None:
    """When the peer's certificate expires (None when unknown)."""
    certificate = stream.getpeercert()
    text = certificate.get("notAfter") if certificate else None
    if not text:
        return None
    return datetime.datetime.fromtimestamp(ssl.cert_time_to_seconds(text), datetime.timezone.utc)


def handshake_failure_reason(error: BaseException) -> str:
    """A short reason for a failed handshake: the SSL error's reason
    (``CERTIFICATE_VERIFY_FAILED``, ``TLSV13_ALERT_CERTIFICATE_REQUIRED``, ...)."""
    cause = error.__cause__ or error
    reason = getattr(cause, "reason", None) or getattr(cause, "verify_message", None)
    return str(reason or type(cause).__name__ or "handshake failed").lower()


def _describe_certificate(path: Path) -> tuple[Principal, datetime.datetime]:
    try:
        from cryptography import x509

        certificate = x509.load_pem_x509_certificate(path.read_bytes())
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = names.get_values_for_type(x509.UniformResourceIdentifier)
        return principal_from_uris(uris), certificate.not_valid_after_utc
    except (OSError, ValueError) as error:
        raise TlsError(f"cannot use the certificate {path}: {error}") from error
    except x509.ExtensionNotFound:
        raise TlsError(f"the certificate {path} has no subjectAltName naming a pykraft principal") from None
