"""Certificates for the tests that run TLS: a module's own cluster CA and
the node, broker and client certificates it names, made once per module
(quorum.runtime.create_cluster_certificates, the same code ``kraft-quorum
certs`` runs), and the TlsConfig of one of them."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from quorum.runtime import TlsConfig, create_cluster_certificates


def certificates_fixture(
    *, nodes: tuple[int, ...], brokers: tuple[int, ...] = (), clients: tuple[str, ...] = ("admin",)
) -> Callable[[pytest.TempPathFactory], Path]:
    """A module-scoped fixture: the directory of a fresh CA with
    ``node-N``, ``broker-N`` and ``client-NAME`` certificates and keys."""

    @pytest.fixture(scope="module")
    def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
        directory = tmp_path_factory.mktemp("certs")
        create_cluster_certificates(directory, nodes=list(nodes), brokers=list(brokers), clients=list(clients))
        return directory

    return certs


def tls_for(certs: Path, stem: str) -> TlsConfig:
    """The TLS settings of the certificate ``stem`` (``node-1``, ``client-admin``...)."""
    return TlsConfig(certs / "ca.pem", certs / f"{stem}.pem", certs / f"{stem}-key.pem")
