"""The proxy as its own process: it starts, forwards, and stops cleanly by
command, by SIGTERM, and when its harness goes away (stdin closed)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from jepsen_like.nemesis import ProxyClient, ProxyCommandError, ProxyError

EXIT_TIMEOUT_S = 10.0


@pytest.fixture
def echo_port():
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.05)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=echo, args=(connection,), daemon=True).start()

    def echo(connection: socket.socket) -> None:
        with connection:
            try:
                while data := connection.recv(65536):
                    connection.sendall(data)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=EXIT_TIMEOUT_S)
    server.close()


def round_trip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=EXIT_TIMEOUT_S) as connection:
        connection.sendall(payload)
        received = b""
        while len(received) < len(payload):
            chunk = connection.recv(65536)
            assert chunk
            received += chunk
        return received


def control_port_closed(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=1).close()
    except OSError:
        return True
    return False


def test_the_proxy_process_forwards_and_stops_cleanly_on_shutdown(echo_port):
    proxy = ProxyClient.start()
    try:
        assert proxy.process is not None and proxy.process.poll() is None
        port = proxy.add_link("n1->n2", 0, "127.0.0.1", echo_port)
        assert round_trip(port, b"through a process") == b"through a process"
        assert proxy.stats()["n1->n2"]["bytes_a_to_b"] == len(b"through a process")
        with pytest.raises(ProxyCommandError, match="no link"):
            proxy.set_link("n9->n1", "drop")
    finally:
        proxy.stop()
    assert proxy.process.returncode == 0
    assert control_port_closed(proxy.control_address)
    proxy.stop()  # idempotent
    with pytest.raises(ProxyError, match="closed"):
        proxy.stats()


def test_the_proxy_process_exits_when_its_harness_goes_away():
    proxy = ProxyClient.start()
    proxy.close()
    assert proxy.process is not None and proxy.process.stdin is not None
    proxy.process.stdin.close()  # what a SIGKILLed harness does to the pipe
    assert proxy.process.wait(timeout=EXIT_TIMEOUT_S) == 0


def test_the_proxy_process_exits_on_sigterm():
    proxy = ProxyClient.start()
    assert proxy.process is not None
    proxy.process.send_signal(signal.SIGTERM)
    assert proxy.process.wait(timeout=EXIT_TIMEOUT_S) == 0
    with pytest.raises(ProxyError, match="exited with 0"):
        proxy.stats()
    proxy.stop()


def test_a_proxy_that_cannot_start_says_so(tmp_path):
    log = tmp_path / "proxy.log"
    with pytest.raises(ProxyError, match="did not start"):
        ProxyClient.start(control_host="256.0.0.1", stderr=log, ready_timeout_s=EXIT_TIMEOUT_S)
    assert log.read_text()  # the proxy's own error is in its log


def test_python_dash_m_prints_its_control_port_when_ready():
    process = subprocess.Popen(
        [sys.executable, "-m", "jepsen_like.nemesis.proxy", "--control", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        assert ready["event"] == "ready" and ready["control_port"] > 0 and ready["pid"] == process.pid
        with ProxyClient(("127.0.0.1", ready["control_port"])) as client:
            client.ping()
    finally:
        process.wait(timeout=EXIT_TIMEOUT_S)  # the client's stop() asked it to shut down
        if process.stdout is not None:
            process.stdout.close()
    assert process.returncode == 0


HARNESS = """
import sys
from jepsen_like.nemesis import ProxyNetwork
try:
    with ProxyNetwork() as net:
        net.add_node(1)
        net.add_node(2)
        print(net.proxy.process.pid, flush=True)
        sys.stdin.read()  # until Ctrl-C or SIGKILL
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_the_proxy_process_goes_away_with_its_harness(how):
    harness = subprocess.Popen([sys.executable, "-c", HARNESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert harness.stdout is not None
        proxy_pid = int(harness.stdout.readline())
        assert process_alive(proxy_pid)
        harness.send_signal(how)
        assert harness.wait(timeout=EXIT_TIMEOUT_S) == (130 if how == signal.SIGINT else -signal.SIGKILL)
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(timeout=EXIT_TIMEOUT_S)
        for pipe in (harness.stdin, harness.stdout):
            if pipe is not None:
                pipe.close()
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while process_alive(proxy_pid) and time.monotonic() < deadline:
        time.sleep(0.02)  # bounded poll: the orphaned proxy sees stdin EOF and exits
    assert not process_alive(proxy_pid)


def process_alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie awaiting its reaper."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
