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
"""

from __future__ import annotations

import datetime
import logging
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from .._access import Principal, principal_from_uris
from .._node import QuorumError

logger = logging.getLogger("pykraft.tls")

#: A TLS handshake must finish within this (a peer that opens a connection
#: and says nothing must not hold a slot for the idle timeout).
HANDSHAKE_TIMEOUT_S = 10.0
#: ``describe`` and the log warn once a certificate expires within this.
EXPIRY_WARNING_DAYS = 14


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
    _server: ssl.SSLContext = field(init=False, repr=False)
    _client: ssl.SSLContext = field(init=False, repr=False)
    principal: Principal = field(init=False)
    not_after: datetime.datetime = field(init=False)

    def __post_init__(self) -> None:
        self.reload()

    def reload(self) -> None:
        """Read the three files again and build new contexts for new
        connections. On failure the old ones stay in use and ``TlsError``
        says why."""
        server = self._context(ssl.Purpose.CLIENT_AUTH)
        client = self._context(ssl.Purpose.SERVER_AUTH)
        principal, not_after = _describe_certificate(Path(self.cert_file))
        self._server, self._client, self.principal, self.not_after = server, client, principal, not_after

    def _context(self, purpose: ssl.Purpose) -> ssl.SSLContext:
        context = ssl.create_default_context(purpose, cafile=None)
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

    def wrap_server(self, stream: trio.abc.Stream) -> trio.SSLStream[Any]:
        return trio.SSLStream(stream, self._server, server_side=True, https_compatible=False)

    def wrap_client(self, stream: trio.abc.Stream) -> trio.SSLStream[Any]:
        return trio.SSLStream(stream, self._client, server_hostname=None, https_compatible=False)

    async def connect(self, host: str, port: int) -> tuple[trio.SSLStream[Any], Principal]:
        """Open a TCP connection and finish the TLS handshake; returns the
        stream and the server's principal. Raises ``OSError``,
        ``trio.BrokenResourceError`` (the handshake failed: the reason is
        its ``__cause__``), ``trio.TooSlowError``, or
        ``PeerNotAuthenticatedError``."""
        tcp = await trio.open_tcp_stream(host, port)
        stream = self.wrap_client(tcp)
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                await stream.do_handshake()
            return stream, peer_principal(stream)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise


def peer_principal(stream: trio.SSLStream[Any]) -> Principal:
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


def peer_not_after(stream: trio.SSLStream[Any]) -> datetime.datetime | None:
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
