"""A development certificate authority (``kraft-quorum certs``; issue 16).

Made with the ``cryptography`` package (no shelling out to openssl):
an EC P-256 CA and, for every node, broker and client of a cluster, a
certificate whose subjectAltName carries its principal URI
(``pykraft://node/1``, ...) plus ``localhost`` and ``127.0.0.1``. Good for
development and tests; production clusters use their own CA (the files
are ordinary PEM).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .._access import Principal, PrincipalKind, parse_principal

CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
ACL_FILE = "acl.txt"
DEFAULT_VALID_DAYS = 365
#: The client ``kraft-quorum certs`` makes for administrative tools.
ADMIN_CLIENT = "admin"


@dataclass(frozen=True)
class CertificateAuthority:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, name: str = "pykraft development CA", *, valid_days: int = DEFAULT_VALID_DAYS) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )  # fmt: skip
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(certificate, key)

    @classmethod
    def load(cls, directory: Path | str) -> CertificateAuthority:
        """The CA written by ``write`` in ``directory``. Raises ``OSError``
        or ``ValueError``."""
        directory = Path(directory)
        certificate = x509.load_pem_x509_certificate((directory / CA_CERT_FILE).read_bytes())
        key = serialization.load_pem_private_key((directory / CA_KEY_FILE).read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{directory / CA_KEY_FILE} is not an EC key")
        return cls(certificate, key)

    def write(self, directory: Path | str) -> None:
        directory = Path(directory)
        (directory / CA_CERT_FILE).write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        _write_private(directory / CA_KEY_FILE, self.key)

    def issue(
        self,
        principal: Principal,
        *,
        valid_days: float = DEFAULT_VALID_DAYS,
        not_before: datetime.datetime | None = None,
    ) -> tuple[bytes, bytes]:
        """A certificate for ``principal`` and its key, both PEM. A
        ``not_before`` in the past with few ``valid_days`` makes an expired
        one (for tests)."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or (_now() - datetime.timedelta(minutes=5))
        names: list[x509.GeneralName] = [
            x509.UniformResourceIdentifier(principal.uri),
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, principal.uri)]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return certificate.public_bytes(serialization.Encoding.PEM), key_pem

    def write_member(self, directory: Path | str, principal: Principal, *, valid_days: float = DEFAULT_VALID_DAYS) -> tuple[Path, Path]:
        """Issue a certificate for ``principal`` into ``directory`` as
        ``KIND-NAME.pem`` and ``KIND-NAME-key.pem``; returns both paths."""
        directory = Path(directory)
        cert_pem, key_pem = self.issue(principal, valid_days=valid_days)
        stem = f"{principal.kind.value}-{principal.name}"
        cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
        _write_private(key_path, key_pem)
        cert_path.write_bytes(cert_pem)
        return cert_path, key_path


def create_cluster_certificates(
    directory: Path | str,
    *,
    nodes: Iterable[int],
    brokers: Iterable[int] = (),
    clients: Iterable[str] = (ADMIN_CLIENT,),
    valid_days: float = DEFAULT_VALID_DAYS,
) -> list[Path]:
    """A development CA in ``directory`` (created; reused when it holds one
    already, so new members join an existing cluster) and a certificate for
    each node, broker and client; an ACL file granting ``admin`` to the
    ``admin`` client, when there is none. Returns the files written.

    Raises ``ValueError`` for a bad id or client name, ``OSError`` for the
    files."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    principals = [Principal(PrincipalKind.NODE, str(int(node))) for node in nodes]
    principals += [Principal(PrincipalKind.BROKER, str(int(broker))) for broker in brokers]
    principals += [parse_principal(f"pykraft://client/{name}") for name in clients]
    for principal in principals:
        if principal.member_id is not None and principal.member_id < 0:
            raise ValueError(f"ids are >= 0: {principal}")
    written: list[Path] = []
    if (directory / CA_CERT_FILE).exists():
        authority = CertificateAuthority.load(directory)
    else:
        authority = CertificateAuthority.create()
        authority.write(directory)
        written += [directory / CA_CERT_FILE, directory / CA_KEY_FILE]
    for principal in principals:
        written += authority.write_member(directory, principal, valid_days=valid_days)
    acl = directory / ACL_FILE
    if not acl.exists():
        acl.write_text(
            "# Who may do what (docs/security.md, \"ACLs\"); nodes reload it on SIGHUP.\n"
            "# admin: raw writes, topics, unregistering brokers. read: describe, metadata\n"
            "# (every authenticated principal while no read line exists).\n"
            f"admin pykraft://client/{ADMIN_CLIENT}\n",
            encoding="utf-8",
        )
        written.append(acl)
    return written


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey | bytes) -> None:
    data = key if isinstance(key, bytes) else key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
