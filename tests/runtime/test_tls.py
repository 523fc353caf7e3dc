"""Mutual TLS, identity binding and ACLs on real loopback connections
(issue 16; docs/security.md).

Each test runs in-process nodes over TLS with certificates from
``create_cluster_certificates`` and waits on conditions with bounded
timeouts."""

from __future__ import annotations

import datetime
import shutil
import ssl
from pathlib import Path

import pytest
import trio

from quorum import (
    BeginQuorumEpochRequest,
    ErrorCode,
    FetchRequest,
    Principal,
    PrincipalKind,
    VoteRequest,
    VoteResponse,
)
from quorum.client import (
    NotAuthorizedError,
    QuorumClient,
    QuorumClientError,
    TlsRequiredError,
    VoterChangeRefusedError,
    speaks_tls,
)
from quorum.runtime import (
    CertificateAuthority,
    KeyValueStateMachine,
    NodeConfig,
    TlsConfig,
    create_cluster_certificates,
    open_quorum_node,
)
from quorum.wire import ErrorFrame, FrameDecoder, decode_message, encode_message
from tests.loopback import free_ports
from tests.tls_material import certificates_fixture, tls_for

CLUSTER = "tls-test"
WAIT_S = 20


certs = certificates_fixture(nodes=(1, 2, 3, 9), brokers=(7,), clients=("admin", "reader"))


def put(key: bytes, value: bytes) -> list[bytes]:
    return [KeyValueStateMachine.encode_put(key, value)]


class Cluster:
    def __init__(self, certs: Path, size: int = 3, acl_file: Path | None = None) -> None:
        self.ports = free_ports(size)
        self.voters = {index + 1: ("127.0.0.1", port) for index, port in enumerate(self.ports)}
        self.configs = [
            NodeConfig(
                node_id=node_id,
                voters=self.voters,
                cluster_id=CLUSTER,
                quorum={"election_timeout_ms": 300, "fetch_timeout_ms": 600},
                tls=tls_for(certs, f"node-{node_id}"),
                acl_file=acl_file if acl_file is not None else certs / "acl.txt",
            )
            for node_id in self.voters
        ]
        self.bootstrap = [f"{node_id}@127.0.0.1:{port}" for node_id, (_, port) in self.voters.items()]
        self.handles: list = []

    async def start(self, nursery: trio.Nursery) -> None:
        for config in self.configs:
            ready = trio.Event()

            async def run(config: NodeConfig = config, ready: trio.Event = ready) -> None:
                async with open_quorum_node(config) as handle:
                    self.handles.append(handle)
                    ready.set()
                    await trio.sleep_forever()

            nursery.start_soon(run)
            await ready.wait()
        with trio.fail_after(WAIT_S):
            while not any(handle.is_leader for handle in self.handles):
                leader_id = await self.handles[0].wait_for_leader()
                leader = self.handles[leader_id - 1]
                await leader.runtime.wait_until(lambda: leader.is_leader or leader.runtime.node.leader_id != leader_id)

    def leader(self):
        return next(handle for handle in self.handles if handle.is_leader)

    def counter(self, name: str) -> float:
        return sum(sum(handle.runtime.metrics.samples(name).values()) for handle in self.handles)


async def write_as(cluster: Cluster, tls: TlsConfig | None, key: bytes, *, retry_timeout_s: float = WAIT_S) -> int:
    async with QuorumClient(cluster.bootstrap, cluster_id=CLUSTER, tls=tls, retry_timeout_s=retry_timeout_s) as client:
        return await client.propose(put(key, b"v"))


async def test_three_voters_replicate_over_tls_and_a_plaintext_client_is_refused(certs: Path) -> None:
    cluster = Cluster(certs)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        offset = await write_as(cluster, tls_for(certs, "client-admin"), b"a")
        assert offset >= 0
        # A plaintext client learns why at once, in one sentence, rather
        # than retrying for its whole retry timeout.
        async with QuorumClient(cluster.bootstrap, cluster_id=CLUSTER, retry_timeout_s=60) as plaintext:
            with trio.fail_after(WAIT_S):
                with pytest.raises(TlsRequiredError, match=r"^1@127\.0\.0\.1:\d+ requires TLS and this client has none: give it a TlsConfig"):
                    await plaintext.propose(put(b"plain", b"v"))
                with pytest.raises(TlsRequiredError):
                    await plaintext.describe()
        assert cluster.counter("pykraft_tls_handshake_failures_total") >= 1
        # Still serving after the refusals.
        await write_as(cluster, tls_for(certs, "client-admin"), b"b")
        # Peer round-trip time (issue 25) is read under the TLS stream: each
        # node reports one for each other voter, a loopback figure.
        with trio.fail_after(WAIT_S):
            while True:
                round_trips = {
                    handle.node_id: handle.runtime.metrics.samples("pykraft_quorum_peer_round_trip_time_seconds")
                    for handle in cluster.handles
                }
                if all(len(samples) == 2 for samples in round_trips.values()):
                    break
                await trio.sleep(0.05)
        for node_id, samples in round_trips.items():
            assert {dict(labels)["peer"] for labels in samples} == {str(peer) for peer in (1, 2, 3) if peer != node_id}
            assert all(0 < seconds < 1.0 for seconds in samples.values()), samples
        nursery.cancel_scope.cancel()


async def test_speaks_tls_tells_a_tls_listener_from_a_plaintext_one(certs: Path) -> None:
    cluster = Cluster(certs, size=1)
    plaintext_config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, cluster_id=CLUSTER, plaintext=True)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        async with open_quorum_node(plaintext_config) as plaintext_node:
            (_, tls_port) = cluster.voters[1]
            assert await speaks_tls("127.0.0.1", tls_port)
            assert not await speaks_tls("127.0.0.1", plaintext_node.listen_port)
            assert not await speaks_tls("127.0.0.1", free_ports(1)[0])  # nobody listens
            # The plaintext node still serves after the probe's ClientHello.
            async with QuorumClient([f"127.0.0.1:{plaintext_node.listen_port}"], cluster_id=CLUSTER) as client:
                with trio.fail_after(WAIT_S):
                    await plaintext_node.wait_for_leader()
                    assert await client.propose(put(b"k", b"v")) >= 0
        nursery.cancel_scope.cancel()


async def _raw_tls_handshake(port: int, context: ssl.SSLContext) -> bytes:
    """Open TLS with ``context``, send a DescribeQuorum frame, return what
    comes back before the server closes (b"" when refused)."""
    from quorum.wire import DescribeQuorumRequest

    stream = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), context, server_hostname=None)
    received = b""
    try:
        with trio.fail_after(WAIT_S):
            await stream.do_handshake()
            await stream.send_all(encode_message(DescribeQuorumRequest(), correlation_id=1, cluster_id=CLUSTER))
            while data := await stream.receive_some(65536):
                received += data
                if len(received) > 8:
                    break
    except trio.BrokenResourceError:
        pass
    finally:
        await trio.aclose_forcefully(stream)
    return received


def _client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    context.check_hostname = False
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


async def test_no_certificate_an_untrusted_ca_and_an_expired_certificate_are_refused(certs: Path, tmp_path: Path) -> None:
    stranger = CertificateAuthority.create("someone else's CA")
    admin = Principal(PrincipalKind.CLIENT, "admin")
    untrusted_cert, untrusted_key = stranger.write_member(tmp_path, admin)
    ours = CertificateAuthority.load(certs)
    expired_pem, expired_key_pem = ours.issue(
        admin, valid_days=1, not_before=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=3)
    )
    (tmp_path / "expired.pem").write_bytes(expired_pem)
    (tmp_path / "expired-key.pem").write_bytes(expired_key_pem)

    cluster = Cluster(certs, size=1)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        port = cluster.ports[0]
        valid = _client_context(certs / "ca.pem", certs / "client-admin.pem", certs / "client-admin-key.pem")
        assert await _raw_tls_handshake(port, valid), "a valid client is answered"
        refused = {
            "no certificate": _client_context(certs / "ca.pem"),
            "untrusted CA": _client_context(certs / "ca.pem", untrusted_cert, untrusted_key),
            "expired": _client_context(certs / "ca.pem", tmp_path / "expired.pem", tmp_path / "expired-key.pem"),
        }
        for name, context in refused.items():
            before = cluster.counter("pykraft_tls_handshake_failures_total")
            assert await _raw_tls_handshake(port, context) == b"", name
            assert cluster.counter("pykraft_tls_handshake_failures_total") == before + 1, name
        reasons = {labels[0][1] for labels in cluster.handles[0].runtime.metrics.samples("pykraft_tls_handshake_failures_total")}
        assert any("certificate" in reason for reason in reasons), reasons
        # The node kept serving.
        await write_as(cluster, tls_for(certs, "client-admin"), b"after")
        nursery.cancel_scope.cancel()


class RawPeer:
    """An authenticated TLS connection that speaks frames by hand."""

    def __init__(self, stream: trio.SSLStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.correlation = 0

    @classmethod
    async def open(cls, certs: Path, stem: str, port: int) -> RawPeer:
        stream, _ = await tls_for(certs, stem).connect("127.0.0.1", port)
        return cls(stream)

    async def ask(self, message: object) -> object:
        self.correlation += 1
        await self.stream.send_all(encode_message(message, correlation_id=self.correlation, cluster_id=CLUSTER))
        with trio.fail_after(WAIT_S):
            while True:
                payload = self.decoder.next_frame()
                if payload is not None:
                    return decode_message(payload, expected_cluster_id=CLUSTER).message
                self.decoder.feed(await self.stream.receive_some(65536))


async def test_a_certificate_speaks_only_for_its_own_principal(certs: Path) -> None:
    cluster = Cluster(certs)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        leader = cluster.leader()
        epoch = leader.describe().epoch
        port = cluster.voters[leader.node_id][1]
        other_voter = next(node_id for node_id in cluster.voters if node_id != leader.node_id)

        # Node 9's certificate speaking as a voter: refused, named.
        impostor = await RawPeer.open(certs, "node-9", port)
        vote = VoteRequest(src=other_voter, dst=leader.node_id, epoch=epoch + 5, last_epoch=epoch + 4, end_offset=10**6, pre_vote=False)
        answer = await impostor.ask(vote)
        assert isinstance(answer, ErrorFrame) and answer.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert "pykraft://node/9" in answer.message
        begin = BeginQuorumEpochRequest(src=other_voter, dst=leader.node_id, epoch=epoch + 5)
        answer = await impostor.ask(begin)
        assert isinstance(answer, ErrorFrame) and answer.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED

        # A forged vote from an authenticated non-voter under its own id:
        # the core refuses it; nobody is deposed.
        forged = VoteRequest(src=9, dst=leader.node_id, epoch=epoch + 5, last_epoch=epoch + 4, end_offset=10**6, pre_vote=False)
        answer = await impostor.ask(forged)
        assert not (isinstance(answer, VoteResponse) and answer.granted)

        # A broker may fetch as itself, never as a voter, and never vote.
        broker = await RawPeer.open(certs, "broker-7", port)
        answer = await broker.ask(
            VoteRequest(src=7, dst=leader.node_id, epoch=epoch + 5, last_epoch=epoch, end_offset=0, pre_vote=True)
        )
        assert isinstance(answer, ErrorFrame) and answer.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        as_voter = FetchRequest(
            src=other_voter, dst=leader.node_id, epoch=epoch, fetch_offset=0, last_fetched_epoch=0, request_id=1
        )
        answer = await broker.ask(as_voter)
        assert isinstance(answer, ErrorFrame) and answer.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        await impostor.stream.aclose()
        await broker.stream.aclose()

        assert cluster.counter("pykraft_authorization_denials_total") >= 4
        # Nobody adopted the forged epoch. (Not "the leader kept its epoch":
        # a loaded machine can starve these 300 ms timers into a real
        # election, one epoch at a time; the forgeries would jump five.)
        assert all(handle.describe().epoch < epoch + 5 for handle in cluster.handles)
        await write_as(cluster, tls_for(certs, "client-admin"), b"still")
        nursery.cancel_scope.cancel()


async def test_raw_writes_need_admin_reads_do_not_and_the_acl_reloads(certs: Path, tmp_path: Path) -> None:
    acl = tmp_path / "acl.txt"
    shutil.copy(certs / "acl.txt", acl)
    cluster = Cluster(certs, acl_file=acl)
    reader = tls_for(certs, "client-reader")
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        async with QuorumClient(cluster.bootstrap, cluster_id=CLUSTER, tls=reader, retry_timeout_s=WAIT_S) as client:
            await client.read(b"k")
            description = await client.describe()
            assert description.leader_id is not None
            with pytest.raises(NotAuthorizedError, match="client/reader may not admin"):
                await client.propose(put(b"k", b"v"))
        assert cluster.counter("pykraft_authorization_denials_total") == 1

        # Granted by the file, read again without a restart.
        acl.write_text("admin pykraft://client/admin pykraft://client/reader\nread pykraft://client/admin\n")
        for handle in cluster.handles:
            handle.reload_security()
        assert await write_as(cluster, reader, b"granted") >= 0
        # ... and reads are now restricted to the admin client.
        async with QuorumClient(cluster.bootstrap, cluster_id=CLUSTER, tls=reader, retry_timeout_s=WAIT_S) as client:
            with pytest.raises(NotAuthorizedError):
                await client.describe()
        # A broken file keeps what was in force.
        acl.write_text("grant everything\n")
        with pytest.raises(ValueError, match="unknown operation"):
            cluster.handles[0].reload_security()
        assert await write_as(cluster, reader, b"kept") >= 0
        nursery.cancel_scope.cancel()


async def test_certificates_rotate_under_load_without_a_failed_write(certs: Path, tmp_path: Path) -> None:
    rotated = tmp_path / "certs"
    shutil.copytree(certs, rotated)
    cluster = Cluster(rotated)
    admin = tls_for(rotated, "client-admin")
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        before = {handle.node_id: handle.tls.not_after for handle in cluster.handles}
        written = 0
        rotated_all = trio.Event()

        async def writer() -> None:
            nonlocal written
            async with QuorumClient(cluster.bootstrap, cluster_id=CLUSTER, tls=admin, retry_timeout_s=WAIT_S) as client:
                while not rotated_all.is_set() or written < 50:
                    await client.propose(put(b"load", str(written).encode()))
                    written += 1

        async with trio.open_nursery() as load:
            load.start_soon(writer)
            authority = CertificateAuthority.load(rotated)
            for handle in cluster.handles:
                # New keys and certificates (30 days) under the same names.
                authority.write_member(rotated, Principal(PrincipalKind.NODE, str(handle.node_id)), valid_days=30)
                handle.reload_security()
            authority.write_member(rotated, Principal(PrincipalKind.CLIENT, "admin"), valid_days=30)
            admin.reload()
            rotated_all.set()
        assert written >= 50
        for handle in cluster.handles:
            assert handle.tls.not_after < before[handle.node_id]
            assert 29 < handle.tls.days_left() < 31
        # A new connection sees the rotated certificate.
        async with QuorumClient(cluster.bootstrap, cluster_id=CLUSTER, tls=admin, retry_timeout_s=WAIT_S) as client:
            await client.describe()
            assert client.server_certificate_not_after is not None
            assert (client.server_certificate_not_after - datetime.datetime.now(datetime.timezone.utc)).days < 31
        nursery.cancel_scope.cancel()


async def test_a_certificate_near_its_expiry_is_warned_about_and_exported(certs: Path, tmp_path: Path, caplog) -> None:
    short = tmp_path / "short"
    shutil.copytree(certs, short)
    CertificateAuthority.load(short).write_member(short, Principal(PrincipalKind.NODE, "1"), valid_days=5)
    cluster = Cluster(short, size=1)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        handle = cluster.handles[0]
        gauge = handle.runtime.metrics.samples("pykraft_tls_certificate_expiry_timestamp_seconds")
        assert list(gauge) == [(("principal", "pykraft://node/1"),)]
        assert list(gauge.values())[0] == pytest.approx(handle.tls.not_after.timestamp())
        assert 4.9 < handle.tls.days_left() < 5.1
        assert any("expires in 5.0 days" in record.getMessage() for record in caplog.records)
        nursery.cancel_scope.cancel()


async def test_voter_changes_need_admin(certs: Path) -> None:
    """AddVoter and RemoveVoter are administration: the reader is refused
    before the leader looks at the request; the admin's reaches the leader,
    which answers for itself (this cluster's voter set is static). A node
    may only add itself."""
    cluster = Cluster(certs)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        async with QuorumClient(
            cluster.bootstrap, cluster_id=CLUSTER, tls=tls_for(certs, "client-reader"), retry_timeout_s=WAIT_S
        ) as reader:
            with pytest.raises(NotAuthorizedError, match="client/reader may not admin .AddVoterRequest"):
                await reader.add_voter(9, "0a1b2c3d", ["127.0.0.1:1"])
            with pytest.raises(NotAuthorizedError, match="client/reader may not admin .RemoveVoterRequest"):
                await reader.remove_voter(3)
        assert cluster.counter("pykraft_authorization_denials_total") == 2
        async with QuorumClient(
            cluster.bootstrap, cluster_id=CLUSTER, tls=tls_for(certs, "client-admin"), retry_timeout_s=WAIT_S
        ) as admin:
            with pytest.raises(VoterChangeRefusedError, match="static voter set") as refused:
                await admin.remove_voter(3)
        assert refused.value.code is ErrorCode.VOTERS_STATIC
        # A node's certificate only adds that node itself (auto-join).
        async with QuorumClient(
            cluster.bootstrap, cluster_id=CLUSTER, tls=tls_for(certs, "node-9"), retry_timeout_s=WAIT_S
        ) as node_9:
            with pytest.raises(NotAuthorizedError, match="node/9 may only add itself"):
                await node_9.add_voter(3, "0a1b2c3d", ["127.0.0.1:1"])
            with pytest.raises(NotAuthorizedError, match="node/9 may only add itself"):
                await node_9.remove_voter(3)
            with pytest.raises(NotAuthorizedError, match="node/9 may only add itself"):
                await node_9.upgrade_voters()  # the voter set is the operator's
            # Only as auto-join: an unmarked add is an operator's (issue 17).
            with pytest.raises(NotAuthorizedError, match="node/9 may only add itself as a voter by auto-join"):
                await node_9.add_voter(9, "0a1b2c3d", ["127.0.0.1:1"])
            with pytest.raises(VoterChangeRefusedError, match="static voter set"):
                await node_9.add_voter(9, "0a1b2c3d", ["127.0.0.1:1"], auto_join=True)
        nursery.cancel_scope.cancel()


def test_the_cluster_ca_is_the_only_trust_anchor(certs: Path, tmp_path: Path, monkeypatch) -> None:
    """Before: the contexts came from ``ssl.create_default_context``, which
    with no CA argument also loads the system's CAs, so a certificate any
    of those signed (SAN URI ``pykraft://node/3`` and all) would have been
    trusted. Here the "system" store is another CA (OpenSSL reads
    ``SSL_CERT_FILE``), holding a node-3 certificate of its own."""
    other = tmp_path / "other"
    create_cluster_certificates(other, nodes=[3])
    monkeypatch.setenv("SSL_CERT_FILE", str(other / "ca.pem"))
    cluster_ca = ssl._ssl._test_decode_cert(str(certs / "ca.pem"))  # noqa: SLF001 - the stdlib's own decoder
    tls = tls_for(certs, "node-1")
    for context in (tls._server, tls._client):  # noqa: SLF001
        assert [ca["subject"] for ca in context.get_ca_certs()] == [cluster_ca["subject"]]
