"""The command lines over mutual TLS (issue 16): ``kraft-quorum certs``,
a node started with certificates, clients with ``--tls-*`` or
``--command-config``, refusals reported in one sentence, and the ACL
reloaded on SIGHUP. Real processes; every wait is a bounded poll."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from loopback import free_ports
from quorum.cli_errors import EXIT_FAILED, EXIT_USAGE

from test_cli_errors import Process, assert_reported, run, wait_for

pytestmark = pytest.mark.processes


def tls_flags(certs: Path, stem: str) -> list[str]:
    return ["--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / f"{stem}.pem"), "--tls-key", str(certs / f"{stem}-key.pem")]


def test_certs_then_a_tls_node_then_clients_with_and_without_the_acl(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    made = run("kraft-quorum", "certs", "--dir", certs, "--nodes", "1", "--clients", "admin,reader")
    assert made.returncode == 0, made.stderr
    written = {Path(line).name for line in made.stdout.split()}
    assert {"ca.pem", "ca-key.pem", "node-1.pem", "node-1-key.pem", "client-admin.pem", "client-reader-key.pem", "acl.txt"} <= written
    assert (certs / "node-1-key.pem").stat().st_mode & 0o777 == 0o600

    (port,) = free_ports(1)
    node = Process(
        tmp_path, "node", "kraft-quorum", "node", "--node-id", 1, "--voters", f"1@127.0.0.1:{port}",
        "--election-timeout-ms", 300, *tls_flags(certs, "node-1"), "--acl-file", certs / "acl.txt",
    )  # fmt: skip
    try:
        node.wait_for_output("serving on port")
        assert "mutual TLS 1.3 as pykraft://node/1" in node.output()
        bootstrap = ("--bootstrap", f"1@127.0.0.1:{port}", "--timeout-s", 10)
        (certs / "admin.toml").write_text('tls_ca = "ca.pem"\ntls_cert = "client-admin.pem"\ntls_key = "client-admin-key.pem"\n')

        def admin_write() -> subprocess.CompletedProcess[str]:
            return run("kraft-quorum", "write", *bootstrap, "--command-config", certs / "admin.toml", "k", "v")

        assert "committed at offset" in wait_for(lambda: (r := admin_write()).returncode == 0 and r.stdout, "a write")
        described = run("kraft-quorum", "describe", *bootstrap, *tls_flags(certs, "client-reader"))
        assert described.returncode == 0, described.stderr
        assert "CertificateExpiry: server" in described.stdout
        assert "CertificateExpiry: client pykraft://client/reader" in described.stdout

        refused = run("kraft-quorum", "write", *bootstrap, *tls_flags(certs, "client-reader"), "k", "v")
        assert_reported(refused, EXIT_FAILED, "pykraft://client/reader may not admin", "ACL")
        # Clients without TLS are told why in one sentence, at once (not
        # after --timeout-s of retries), and nothing was written.
        for command in (("describe",), ("write", "k", "plain"), ("read", "k")):
            plaintext = run("kraft-quorum", command[0], "--bootstrap", f"1@127.0.0.1:{port}", "--timeout-s", 30, *command[1:])
            assert_reported(plaintext, EXIT_USAGE, f"1@127.0.0.1:{port} requires TLS and this client has none", "--tls-ca")

        # The ACL, changed and reloaded on SIGHUP without a restart.
        (certs / "acl.txt").write_text("admin pykraft://client/admin pykraft://client/reader\n")
        node.process.send_signal(signal.SIGHUP)
        node.wait_for_output("SIGHUP: certificate, CA bundle and ACL reloaded")
        granted = run("kraft-quorum", "write", *bootstrap, *tls_flags(certs, "client-reader"), "k", "w")
        assert granted.returncode == 0, granted.stderr
        # A broken ACL on SIGHUP is logged; the node keeps the one in force.
        (certs / "acl.txt").write_text("grant all\n")
        node.process.send_signal(signal.SIGHUP)
        node.wait_for_output("not reloaded, the previous certificate and ACL stay in force")
        assert node.process.poll() is None
        assert run("kraft-quorum", "write", *bootstrap, *tls_flags(certs, "client-reader"), "k", "x").returncode == 0
    finally:
        assert node.stop() == 0, node.output()


def test_half_the_tls_options_is_a_usage_error(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    assert run("kraft-quorum", "certs", "--dir", certs, "--nodes", "1").returncode == 0
    result = run(
        "kraft-quorum", "describe", "--bootstrap", "127.0.0.1:1", "--tls-ca", certs / "ca.pem", "--tls-cert", certs / "client-admin.pem"
    )
    assert result.returncode == 2 and "--tls-key" in result.stderr
