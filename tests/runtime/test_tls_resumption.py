"""TLS 1.3 session resumption on reconnect (issue 16; docs/security.md,
"Session resumption"): a reconnect resumes, the principal is still the
one in the peer certificate on both sides, and no session outlives a
reload, its age limit or its peer certificate. Also: every TLS socket
(client, server, node to node) has TCP_NODELAY."""

from __future__ import annotations

import socket
import time as real_time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from quorum import Principal, PrincipalKind
from quorum.client import QuorumClient
from quorum.runtime import (
    CertificateAuthority,
    KeyValueStateMachine,
    NodeConfig,
    TlsConfig,
    open_quorum_node,
)
from quorum.runtime import _tls
from quorum.runtime._tls import SESSION_TICKET_MAX_AGE_S, peer_principal
from tests.loopback import free_ports
from tests.tls_material import certificates_fixture, tls_for

CLUSTER = "tls-resumption-test"
WAIT_S = 20


certs = certificates_fixture(nodes=(1, 2, 3), clients=("admin",))


class Server:
    """A TLS listener that finishes each handshake, records what it saw,
    and sends a few bytes (which carry the session ticket along)."""

    def __init__(self, tls: TlsConfig) -> None:
        self.tls = tls
        self.seen: list[tuple[bool, Principal | None, str | None]] = []

    async def serve(self, tcp: trio.SocketStream) -> None:
        stream = self.tls.wrap_server(tcp)
        try:
            with trio.fail_after(WAIT_S):
                await stream.do_handshake()
        except trio.BrokenResourceError as error:
            self.seen.append((False, None, str(error)))
            await trio.aclose_forcefully(stream)
            return
        self.seen.append((stream.session_reused, peer_principal(stream), None))
        await stream.send_all(b"hello")
        await stream.receive_some(100)  # until the client closes
        await trio.aclose_forcefully(stream)


async def start(nursery: trio.Nursery, server: Server) -> int:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, server.serve, listeners)
    return listeners[0].socket.getsockname()[1]


async def round_trip(client: TlsConfig, port: int) -> tuple[bool, Principal]:
    """Connect, read the server's greeting (and with it the ticket), close."""
    with trio.fail_after(WAIT_S):
        stream, principal = await client.connect("127.0.0.1", port)
        assert await stream.receive_some(100) == b"hello"
        resumed = stream.session_reused
        await stream.aclose()
    return resumed, principal


async def test_a_reconnect_resumes_and_both_sides_still_see_the_certificates_principal(certs: Path) -> None:
    server, client = Server(tls_for(certs, "node-1")), tls_for(certs, "client-admin")
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        first = await round_trip(client, port)
        second = await round_trip(client, port)
        third = await round_trip(client, port)
        nursery.cancel_scope.cancel()
    node, admin = Principal(PrincipalKind.NODE, "1"), Principal(PrincipalKind.CLIENT, "admin")
    assert [first, second, third] == [(False, node), (True, node), (True, node)]
    assert server.seen == [(False, admin, None), (True, admin, None), (True, admin, None)]


async def test_a_server_that_issues_no_tickets_is_looked_at_once_and_never_resumed(certs: Path) -> None:
    node = TlsConfig(certs / "ca.pem", certs / "node-1.pem", certs / "node-1-key.pem", session_resumption=False)
    server, client = Server(node), tls_for(certs, "client-admin")
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        with trio.fail_after(WAIT_S):
            stream, _ = await client.connect("127.0.0.1", port)
            assert stream._on_ticket is not None
            assert await stream.receive_some(100) == b"hello"
            # No ticket came with the first data: none will (reading the
            # session again on every read would cost a copy each time).
            assert stream._on_ticket is None
            await stream.aclose()
        assert not (await round_trip(client, port))[0]
        nursery.cancel_scope.cancel()
    assert client._tickets == {}


async def test_no_session_outlives_a_reload_on_either_side(certs: Path) -> None:
    server, client = Server(tls_for(certs, "node-1")), tls_for(certs, "client-admin")
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        await round_trip(client, port)
        assert (await round_trip(client, port))[0]
        # SIGHUP on the server: new ticket keys, so the client's ticket
        # (offered: the client did not reload) is refused, a full
        # handshake checks the certificate again.
        server.tls.reload()
        assert not (await round_trip(client, port))[0]
        assert (await round_trip(client, port))[0]
        # The client reloads: it forgets its tickets.
        client.reload()
        assert not (await round_trip(client, port))[0]
        nursery.cancel_scope.cancel()
    assert [resumed for resumed, _, _ in server.seen] == [False, True, False, True, False]


async def test_a_ticket_is_offered_once_and_not_after_its_age_limit(certs: Path, monkeypatch) -> None:
    server, client = Server(tls_for(certs, "node-1")), tls_for(certs, "client-admin")
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        await round_trip(client, port)
        # Used once: two connections at once, only one resumes.
        async with trio.open_nursery() as pair:
            results: list[bool] = []

            async def one() -> None:
                with trio.fail_after(WAIT_S):
                    stream, _ = await client.connect("127.0.0.1", port)
                results.append(stream.session_reused)
                assert await stream.receive_some(100) == b"hello"
                await stream.aclose()

            pair.start_soon(one)
            pair.start_soon(one)
        assert sorted(results) == [False, True]
        # Each of the pair left a ticket: two more at once both resume.
        results.clear()
        async with trio.open_nursery() as pair:
            pair.start_soon(one)
            pair.start_soon(one)
        assert results == [True, True]
        await round_trip(client, port)  # a fresh ticket
        # Tickets age on the process's monotonic clock (not trio's: the
        # next test says why).
        monkeypatch.setattr(_tls, "time", MonotonicLater(SESSION_TICKET_MAX_AGE_S + 1))
        assert not (await round_trip(client, port))[0]
        nursery.cancel_scope.cancel()


def test_tickets_kept_are_bounded_per_address_and_in_all_newest_offered_first(certs: Path, monkeypatch) -> None:
    client = tls_for(certs, "client-admin")
    context = client._client
    for number in range(_tls.SESSION_TICKETS_PER_ADDRESS_MAX + 2):
        client._keep_ticket(("127.0.0.1", 1), context, f"a{number}")  # type: ignore[arg-type]
    kept = len(client._tickets[("127.0.0.1", 1)])
    assert kept == client._ticket_count == _tls.SESSION_TICKETS_PER_ADDRESS_MAX
    last = _tls.SESSION_TICKETS_PER_ADDRESS_MAX + 1
    assert [client._take_ticket(("127.0.0.1", 1)) for _ in range(2)] == [f"a{last}", f"a{last - 1}"]
    # In all: the address a ticket came to longest ago loses its oldest.
    monkeypatch.setattr(_tls, "SESSION_TICKETS_MAX", 8)
    for port in (2, 3, 4):
        client._keep_ticket(("127.0.0.1", port), context, f"p{port}")  # type: ignore[arg-type]
    assert client._ticket_count == 8
    assert list(client._tickets) == [("127.0.0.1", 1), ("127.0.0.1", 2), ("127.0.0.1", 3), ("127.0.0.1", 4)]
    assert len(client._tickets[("127.0.0.1", 1)]) == 5
    assert client._take_ticket(("127.0.0.1", 5)) is None
    # Too old: dropped with every older one of its address.
    monkeypatch.setattr(_tls, "time", MonotonicLater(SESSION_TICKET_MAX_AGE_S + 1))
    assert client._take_ticket(("127.0.0.1", 1)) is None
    assert ("127.0.0.1", 1) not in client._tickets and client._ticket_count == 3


class MonotonicLater:
    """The ``time`` module as ``_tls`` reads it, its monotonic clock
    ``seconds`` ahead (the wall clock as it is)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def monotonic(self) -> float:
        return real_time.monotonic() + self.seconds

    def time(self) -> float:
        return real_time.time()


def test_a_ticket_kept_in_one_trio_run_resumes_the_next_whatever_its_clock_reads(certs: Path) -> None:
    """Regression: ticket ages were read on trio's clock, whose origin each
    ``trio.run`` draws at random, so a client made in a later run (a
    benchmark's next phase) found a fresh ticket "older than 600 s" and
    made a full handshake (or, the other way round, would have offered one
    older than that). Here the second run's clock reads 700 s later than
    the first's, as a random origin may."""
    server, client = Server(tls_for(certs, "node-1")), tls_for(certs, "client-admin")
    (port,) = free_ports(1)

    async def run_once(clock_ahead_s: float) -> bool:
        trio.lowlevel.current_clock().jump(clock_ahead_s)  # type: ignore[attr-defined]
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
            nursery.start_soon(trio.serve_listeners, server.serve, listeners)
            resumed, _ = await round_trip(client, port)
            nursery.cancel_scope.cancel()
        return resumed

    first = trio.run(run_once, 0.0, clock=trio.testing.MockClock(rate=1.0))
    second = trio.run(run_once, SESSION_TICKET_MAX_AGE_S + 100, clock=trio.testing.MockClock(rate=1.0))
    assert (first, second) == (False, True)


@pytest.mark.parametrize("expiring", ["client", "server"])
async def test_a_resumed_session_whose_peer_certificate_expired_since_is_refused(
    certs: Path, tmp_path: Path, monkeypatch, expiring: str
) -> None:
    # One side's certificate is valid for one more day.
    authority = CertificateAuthority.load(certs)
    principal = Principal(PrincipalKind.CLIENT, "admin") if expiring == "client" else Principal(PrincipalKind.NODE, "1")
    cert_pem, key_pem = authority.issue(principal, valid_days=1)
    (tmp_path / "brief.pem").write_bytes(cert_pem)
    (tmp_path / "brief-key.pem").write_bytes(key_pem)
    brief = TlsConfig(certs / "ca.pem", tmp_path / "brief.pem", tmp_path / "brief-key.pem")
    client = brief if expiring == "client" else tls_for(certs, "client-admin")
    server = Server(brief if expiring == "server" else tls_for(certs, "node-1"))
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        await round_trip(client, port)
        assert (await round_trip(client, port))[0]

        class TwoDaysLater:
            """The wall clock the expiry check reads, two days on."""

            @staticmethod
            def time() -> float:
                return real_time.time() + 2 * 86400

            monotonic = staticmethod(real_time.monotonic)

        monkeypatch.setattr(_tls, "time", TwoDaysLater)
        with trio.fail_after(WAIT_S):
            if expiring == "server":
                # The client finds the server's certificate expired.
                with pytest.raises(trio.BrokenResourceError, match="resumed session's peer certificate has expired"):
                    await client.connect("127.0.0.1", port)
            else:
                # The client's handshake ends first; the server refuses.
                stream, _ = await client.connect("127.0.0.1", port)
                with pytest.raises(trio.BrokenResourceError):
                    await stream.receive_some(100)
            while len(server.seen) < 3:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    reused, refused_principal, error = server.seen[-1]
    assert refused_principal is None
    if expiring == "client":
        assert "resumed session's peer certificate has expired" in (error or "")


@asynccontextmanager
async def two_nodes(certs: Path) -> AsyncIterator[tuple[dict[int, tuple[str, int]], dict[int, Any]]]:
    """Voters 1 and 2 over TLS, in this process: (addresses, handles)."""
    ports = free_ports(2)
    voters = {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1])}
    handles: dict[int, Any] = {}
    async with trio.open_nursery() as nursery:
        for node_id in voters:
            ready = trio.Event()

            async def run(node_id: int = node_id, ready: trio.Event = ready) -> None:
                config = NodeConfig(
                    node_id=node_id, voters=voters, cluster_id=CLUSTER, tls=tls_for(certs, f"node-{node_id}"),
                    acl_file=certs / "acl.txt", quorum={"election_timeout_ms": 300, "fetch_timeout_ms": 600},
                )  # fmt: skip
                async with open_quorum_node(config) as handle:
                    handles[node_id] = handle
                    ready.set()
                    await trio.sleep_forever()

            nursery.start_soon(run)
            await ready.wait()
        yield voters, handles
        nursery.cancel_scope.cancel()


def client_for(certs: Path, voters: dict[int, tuple[str, int]]) -> QuorumClient:
    bootstrap = [f"{node_id}@127.0.0.1:{port}" for node_id, (_, port) in voters.items()]
    return QuorumClient(bootstrap, cluster_id=CLUSTER, tls=tls_for(certs, "client-admin"), retry_timeout_s=WAIT_S)


def nodelay(stream: Any) -> bool:
    """TCP_NODELAY on the socket under a TLS stream: without it a frame's
    records could wait for the peer's delayed ACK (Nagle)."""
    return bool(stream.transport_stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


async def test_every_tls_socket_has_nodelay_client_server_and_between_nodes(certs: Path) -> None:
    async with two_nodes(certs) as (voters, handles):
        async with client_for(certs, voters) as client:
            await client.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
            assert client._connection is not None and nodelay(client._connection.stream)
            with trio.fail_after(WAIT_S):
                while not all(handle._transport._links for handle in handles.values()):
                    await trio.sleep(0.01)
            streams = [link.stream for handle in handles.values() for link in handle._transport._links.values()]
            inbound = [
                connection.stream
                for handle in handles.values()
                for connection in handle._transport._open_connections
                if connection not in handle._transport._links.values()
            ]
            # Each node's link out, each node's inbound link from the
            # other, and the client's connection to the leader.
            assert len(streams) == 2 and len(inbound) >= 3
            assert all(nodelay(stream) for stream in streams + inbound)


async def test_node_links_resume_after_a_lost_connection(certs: Path) -> None:
    async with two_nodes(certs) as (voters, handles):
        node_1, node_2 = handles[1], handles[2]
        transport = node_1._transport

        def resumed_inbound(handle: Any) -> float:
            samples = handle.runtime.metrics.samples("pykraft_tls_handshakes_total")
            return samples.get((("direction", "inbound"), ("resumed", "true")), 0.0)

        with trio.fail_after(WAIT_S):
            # Node 1's link to node 2 is up and has its ticket (node 2
            # answers on it, which carries the ticket in).
            while 2 not in transport._links or voters[2] not in node_1.tls._tickets:
                await trio.sleep(0.01)
            before = resumed_inbound(node_2)
            first = transport._links[2]
            await first.stream.transport_stream.aclose()  # the connection is lost
            while transport._links.get(2) in (None, first) or resumed_inbound(node_2) == before:
                await trio.sleep(0.01)
            link = transport._links[2]
        assert link.stream.session_reused
        assert link.principal == Principal(PrincipalKind.NODE, "2")
        assert resumed_inbound(node_2) == before + 1
        # And the cluster still commits over it.
        async with client_for(certs, voters) as client:
            await client.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
