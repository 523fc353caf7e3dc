"""A controller and a broker over mutual TLS (issue 16): the broker
registers and serves with its own certificate; registration is bound to
the certificate's broker id; topic changes need the ACL's ``admin``."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from broker_agent import BrokerConfig, open_broker
from broker_agent.client import MetadataClient, MetadataClientError
from quorum.client import NotAuthorizedError
from quorum.runtime import NodeConfig, TlsConfig, create_cluster_certificates
from registration import ControllerConfig, RegisterBrokerRequest, open_controller_node
from registration.client import AdminClient

QUORUM = {"election_timeout_ms": 500, "fetch_timeout_ms": 1000}
TIMERS = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}

pytestmark = pytest.mark.processes  # real sockets


def tls_for(certs: Path, stem: str) -> TlsConfig:
    return TlsConfig(certs / "ca.pem", certs / f"{stem}.pem", certs / f"{stem}-key.pem")


async def test_a_broker_registers_with_its_own_certificate_and_no_other(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    create_cluster_certificates(certs, nodes=[1], brokers=[101, 102], clients=["admin", "reader"])
    controller_config = NodeConfig(
        node_id=1,
        voters={1: ("127.0.0.1", 0)},
        quorum=QUORUM,
        fsync=False,
        tls=tls_for(certs, "node-1"),
        acl_file=certs / "acl.txt",
    )
    async with open_controller_node(controller_config, ControllerConfig(cluster_id="pykraft", **TIMERS)) as controller:
        port = controller.listen_port
        config = BrokerConfig(
            broker_id=101,
            bootstrap={1: ("127.0.0.1", port)},
            listen=("127.0.0.1", 0),
            quorum=QUORUM,
            tls=tls_for(certs, "broker-101"),
            **TIMERS,
        )
        bootstrap = [f"1@127.0.0.1:{port}"]
        with trio.fail_after(30):
            async with open_broker(config) as broker:
                await broker.wait_online()
                # Broker 102's certificate cannot register broker 101.
                async with AdminClient(bootstrap, tls=tls_for(certs, "broker-102")) as impostor:
                    request = RegisterBrokerRequest(
                        broker_id=101, incarnation_id="forged", cluster_id="pykraft", listeners=(("PLAINTEXT", "127.0.0.1", 1),)
                    )
                    with pytest.raises(NotAuthorizedError, match="may not register broker 101"):
                        await impostor.register_broker(request)
                # Topic changes are administration; describing is a read.
                async with AdminClient(bootstrap, tls=tls_for(certs, "client-reader")) as reader:
                    assert [b.broker_id for b in (await reader.describe_cluster()).brokers] == [101]
                    with pytest.raises(NotAuthorizedError, match="may not admin"):
                        await reader.create_topic("t", partitions=1, replication_factor=1)
                    with pytest.raises(NotAuthorizedError, match="may not admin"):
                        await reader.unregister_broker(101)
                async with AdminClient(bootstrap, tls=tls_for(certs, "client-admin")) as admin:
                    created = await admin.create_topic("t", partitions=1, replication_factor=1)
                    assert not created.results[0].error
                    written = (await admin.describe_cluster()).offset
                # A client reads from the broker over TLS; a plaintext one is refused.
                async with MetadataClient([f"127.0.0.1:{broker.listen_port}"], tls=tls_for(certs, "client-reader")) as client:
                    client.advance_to(written)
                    assert (await client.find_leader("t", 0)).leader == 101
                # It learns why at once, in one sentence, instead of retrying.
                async with MetadataClient([f"127.0.0.1:{broker.listen_port}"], retry_timeout_s=60) as plaintext:
                    with trio.fail_after(20), pytest.raises(MetadataClientError, match="requires TLS and this client has none"):
                        await plaintext.list_topics()
                # The controller registered itself (KIP-919) with its own node
                # certificate, which no denial above counts.
                image = controller.runtime.state_machine.image
                while image.controller(1) is None:
                    await trio.sleep(0.02)
                assert image.controller(1).listeners == (("CONTROLLER", "127.0.0.1", port),)
                denials = controller.runtime.metrics.samples("pykraft_authorization_denials_total")
                assert sum(denials.values()) == 3
