"""The netns backend for real: namespaces, veths, a bridge and firewall
rules, checked with real TCP and UDP between the namespaces, and cleanup
checked with ``ip netns list`` and ``ip link``. Skipped, with the reason,
where the machine cannot (not root, no ``ip``/``nft``/``iptables``)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import trio

from jepsen_like.nemesis import NetnsNetwork, UnsupportedFaultError, cleanup_leftovers, leftovers

AVAILABLE, REASON = NetnsNetwork.available()
pytestmark = [pytest.mark.netns, pytest.mark.skipif(not AVAILABLE, reason=f"netns backend unavailable: {REASON}")]

CONNECT_TIMEOUT_S = 0.3  # a DROP shows itself only as silence: this long
WAIT_S = 10.0

FIREWALLS = [
    pytest.param("nft", marks=pytest.mark.skipif(shutil.which("nft") is None, reason="nft not installed")),
    pytest.param("iptables", marks=pytest.mark.skipif(shutil.which("iptables-restore") is None, reason="iptables not installed")),
]


def ip_output(*argv: str) -> str:
    return subprocess.run(["ip", *argv], capture_output=True, text=True, check=True).stdout


def nothing_named(prefix: str) -> bool:
    return prefix not in ip_output("netns", "list") and prefix not in ip_output("link")


def connect(net: NetnsNetwork, src, dst) -> str:
    """``ok``, ``timeout`` (silence: a DROP) or ``refused`` (a REJECT)."""
    with contextlib.closing(net.open_socket_in(src)) as sock:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(net.address_for(src, dst))
        except TimeoutError:
            return "timeout"
        except ConnectionRefusedError:
            return "refused"
    return "ok"


@contextlib.contextmanager
def listening(net: NetnsNetwork, node_id):
    """A listener at the node's address inside its namespace; the kernel
    completes handshakes into the backlog, so nothing needs to accept."""
    with contextlib.closing(net.open_socket_in(node_id)) as server:
        server.bind(net.listen_address(node_id))
        server.listen(64)
        yield server


@pytest.mark.parametrize("firewall", FIREWALLS)
def test_two_namespaces_connect_then_drop_then_heal_then_refuse(firewall):
    with NetnsNetwork(firewall=firewall) as net:
        prefix = net.prefix
        net.add_node(1, "controller")
        net.add_node(2, "controller")
        assert net.firewall == firewall
        assert {f"{prefix}br", net.namespace_of(1), net.namespace_of(2)} <= set(ip_output("netns", "list").split())
        with listening(net, 1), listening(net, 2):
            assert connect(net, 1, 2) == "ok" and connect(net, 2, 1) == "ok"

            net.isolate(2)  # DROP both ways
            assert connect(net, 1, 2) == "timeout" and connect(net, 2, 1) == "timeout"

            net.heal()
            assert connect(net, 1, 2) == "ok" and connect(net, 2, 1) == "ok"

            net.split([1], [2], how="refuse")  # REJECT with tcp-reset
            assert connect(net, 1, 2) == "refused" and connect(net, 2, 1) == "refused"
            net.heal()
            assert connect(net, 1, 2) == "ok"
    assert nothing_named(prefix)


def test_a_one_way_cut_drops_one_direction_only():
    with NetnsNetwork() as net:
        net.add_node(1, "controller")
        net.add_node(2, "controller")
        receivers = {node: net.open_socket_in(node, type=socket.SOCK_DGRAM) for node in (1, 2)}
        senders = {node: net.open_socket_in(node, type=socket.SOCK_DGRAM) for node in (1, 2)}
        try:
            for node, sock in receivers.items():
                sock.bind(net.listen_address(node))
                sock.settimeout(CONNECT_TIMEOUT_S)
            net.cut_one_way(1, 2)
            senders[1].sendto(b"1 to 2", net.address_for(1, 2))
            senders[2].sendto(b"2 to 1", net.address_for(2, 1))
            assert receivers[1].recv(100) == b"2 to 1"
            with pytest.raises(TimeoutError):
                receivers[2].recv(100)
        finally:
            for sock in [*receivers.values(), *senders.values()]:
                sock.close()


async def test_in_process_clients_open_their_sockets_in_their_own_namespace():
    with NetnsNetwork() as net:
        net.add_node(1, "broker")
        net.add_client("near")
        net.add_client("far")

        async def echo(stream):
            async with stream:
                while data := await stream.receive_some(1024):
                    await stream.send_all(data)

        async def reachable(client_id) -> bool:
            with net.client_sockets(client_id), trio.move_on_after(CONNECT_TIMEOUT_S):
                stream = await trio.open_tcp_stream(*net.address_for(client_id, 1))
                async with stream:
                    await stream.send_all(b"hi")
                    return await stream.receive_some(2) == b"hi"
            return False

        async with trio.open_nursery() as nursery:
            with net.client_sockets(1):
                listeners = await trio.open_tcp_listeners(net.listen_address(1)[1], host=net.listen_address(1)[0])
            nursery.start_soon(trio.serve_listeners, echo, listeners)
            assert await reachable("near") and await reachable("far")
            net.isolate_from(1, ["far"])
            assert await reachable("near")
            assert not await reachable("far")
            net.heal()
            assert await reachable("far")
            nursery.cancel_scope.cancel()
        # outside the block, sockets are the test process's own again
        with trio.socket.socket() as own:
            await own.bind(("127.0.0.1", 0))


def test_run_in_starts_a_process_inside_the_members_namespace():
    with NetnsNetwork() as net:
        net.add_node(7, "controller")
        argv = net.run_in(7, ["ip", "-4", "-o", "addr", "show"])
        assert argv[:4] == ["ip", "netns", "exec", net.namespace_of(7)]
        shown = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        assert f"{net.address_of(7)}/24" in shown and net.listen_address(7) == (net.address_of(7), 9092)


def test_delay_is_refused_with_a_clear_reason():
    with NetnsNetwork() as net:
        net.add_node(1, "controller")
        net.add_node(2, "controller")
        with pytest.raises(UnsupportedFaultError, match="tc netem"):
            net.set_delay(1, 2, 50)
        assert net.active_faults() == []


def test_leaving_the_block_removes_everything_even_on_error_and_kills_stragglers():
    with pytest.raises(RuntimeError, match="boom"):
        with NetnsNetwork() as net:
            prefix = net.prefix
            net.add_node(1, "controller")
            net.add_client("c1")
            net.isolate(1, clients=True)
            straggler = subprocess.Popen(net.run_in(1, ["sleep", "600"]))
            assert leftovers(prefix)["namespaces"]
            raise RuntimeError("boom")
    assert straggler.wait(timeout=WAIT_S) == -signal.SIGKILL
    assert nothing_named(prefix)
    assert leftovers(prefix) == {"namespaces": [], "links": []}
    net.close()  # idempotent


KILLED_RUN = """
import subprocess, sys
from jepsen_like.nemesis import NetnsNetwork
net = NetnsNetwork().open()
net.add_node(1, "controller")
net.add_node(2, "broker")
net.isolate(1)
sleeper = subprocess.Popen(net.run_in(2, ["sleep", "600"]))
print(net.prefix, sleeper.pid, flush=True)
sys.stdin.read()  # until the test kills us
"""


def test_cleanup_leftovers_removes_what_a_killed_run_left():
    run = subprocess.Popen([sys.executable, "-c", KILLED_RUN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        prefix, sleeper_pid = run.stdout.readline().split()
    finally:
        run.kill()  # no cleanup code of its own runs
        run.wait(timeout=WAIT_S)
        if run.stdin is not None:
            run.stdin.close()
        if run.stdout is not None:
            run.stdout.close()
    assert len(leftovers(prefix)["namespaces"]) == 3  # the bridge and two members
    removed = cleanup_leftovers(prefix)
    assert sorted(removed) == sorted([f"{prefix}br", f"{prefix}m0", f"{prefix}m1"])
    assert nothing_named(prefix)
    deadline = time.monotonic() + WAIT_S
    while _alive(int(sleeper_pid)) and time.monotonic() < deadline:
        time.sleep(0.02)  # bounded poll: init reaps the orphan
    assert not _alive(int(sleeper_pid))
    assert cleanup_leftovers(prefix) == []  # idempotent


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_cleanup_leftovers_refuses_a_prefix_wider_than_one_run():
    for prefix in ("pk-", "pk", "", "pk-toolongid-", "eth"):
        with pytest.raises(ValueError, match="pk-<run id>-"):
            cleanup_leftovers(prefix)


CTRL_C_RUN = """
import sys
from jepsen_like.nemesis import NetnsNetwork
try:
    with NetnsNetwork() as net:
        net.add_node(1, "controller")
        net.add_client("c1")
        net.isolate(1, clients=True)
        print(net.prefix, flush=True)
        sys.stdin.read()  # until Ctrl-C
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_ctrl_c_in_the_harness_removes_everything():
    run = subprocess.Popen([sys.executable, "-c", CTRL_C_RUN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        prefix = run.stdout.readline().strip()
        assert len(leftovers(prefix)["namespaces"]) == 3
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=WAIT_S) == 130
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=WAIT_S)
        for pipe in (run.stdin, run.stdout):
            if pipe is not None:
                pipe.close()
    assert nothing_named(prefix)
