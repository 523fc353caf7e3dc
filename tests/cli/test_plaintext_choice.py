"""Plaintext is a choice, never a default (issue 16, item 5): every
command that listens (``kraft-quorum node``, ``kraft-controller``,
``kraft-broker``) refuses to start with neither certificates nor
``--plaintext``, refuses both, and with ``--plaintext`` (or ``plaintext =
true`` in a ``--config`` file) says in one startup line that it runs
without TLS. Real processes; every wait is a bounded poll."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopback import free_ports
from quorum.cli_errors import EXIT_USAGE
from quorum.runtime import create_cluster_certificates

from test_cli_errors import Process, assert_reported, run

pytestmark = pytest.mark.processes

STARTUP_LINE = "runs without TLS (plaintext, chosen explicitly)"


def listener_args(command: str, port: int) -> list[object]:
    """The arguments ``command`` needs to start, but for TLS or --plaintext."""
    if command == "kraft-broker":
        return ["--broker-id", 101, "--bootstrap", f"1@127.0.0.1:{port}", "--listen", "127.0.0.1:0"]
    node = ["--node-id", 1, "--voters", f"1@127.0.0.1:{port}"]
    return ["node", *node] if command == "kraft-quorum" else node


@pytest.mark.parametrize("command", ["kraft-quorum", "kraft-controller", "kraft-broker"])
def test_a_listener_given_neither_certificates_nor_plaintext_refuses_to_start(command):
    (port,) = free_ports(1)
    result = run(command, *listener_args(command, port))
    (line,) = assert_reported(
        result, EXIT_USAGE, "no TLS chosen", "--tls-ca, --tls-cert and --tls-key", "kraft-quorum certs", "--plaintext"
    )
    assert line.endswith("to run without TLS.") or line.endswith("plaintext = true).")
    assert "serving" not in result.stderr


@pytest.mark.parametrize("command", ["kraft-quorum", "kraft-controller", "kraft-broker"])
def test_plaintext_and_certificates_together_are_a_usage_error(tmp_path, command):
    create_cluster_certificates(tmp_path, nodes=[1], brokers=[101])
    stem = "broker-101" if command == "kraft-broker" else "node-1"
    tls = ["--tls-ca", tmp_path / "ca.pem", "--tls-cert", tmp_path / f"{stem}.pem", "--tls-key", tmp_path / f"{stem}-key.pem"]
    (port,) = free_ports(1)
    result = run(command, *listener_args(command, port), "--plaintext", *tls)
    assert_reported(result, EXIT_USAGE, "--plaintext and --tls-* exclude each other")


def test_plaintext_chosen_is_said_in_one_startup_line(tmp_path):
    (port,) = free_ports(1)
    node = Process(tmp_path, "node", "kraft-quorum", *listener_args("kraft-quorum", port), "--plaintext")
    try:
        node.wait_for_output("serving on port")
    finally:
        assert node.stop() == 0
    lines = [line for line in node.output().splitlines() if STARTUP_LINE in line]
    assert len(lines) == 1, node.output()
    assert f"node 1 {STARTUP_LINE}: any process that reaches 127.0.0.1:{port} may speak as any node" in lines[0]


def test_a_config_file_chooses_plaintext_with_a_boolean(tmp_path: Path):
    (port,) = free_ports(1)
    config = tmp_path / "controller.toml"
    config.write_text(f'node_id = 1\nvoters = "1@127.0.0.1:{port}"\nplaintext = true\n')
    controller = Process(tmp_path, "controller", "kraft-controller", "--config", config)
    try:
        controller.wait_for_output(STARTUP_LINE)
    finally:
        assert controller.stop() == 0
    config.write_text(f'node_id = 1\nvoters = "1@127.0.0.1:{port}"\nplaintext = "yes"\n')
    assert_reported(run("kraft-quorum", "node", "--config", config), EXIT_USAGE, "plaintext must be true or false, got 'yes'")
    config.write_text(f'node_id = 1\nvoters = "1@127.0.0.1:{port}"\nplaintext = false\n')
    assert_reported(run("kraft-quorum", "node", "--config", config), EXIT_USAGE, "no TLS chosen", "plaintext = true")
