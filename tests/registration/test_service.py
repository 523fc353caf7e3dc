"""The controller as a quorum service: a single-voter kraft controller on
real sockets, driven through the admin client."""

import trio

from quorum.runtime import KeyValueStateMachine, NodeConfig, scrape_metrics
from registration import ControllerStateMachine, ErrorCode, RegisterBrokerRequest, open_controller_node
from registration.client import AdminClient


def single_voter(tmp_path) -> NodeConfig:
    return NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, data_dir=tmp_path / "c1", metrics_listen=("127.0.0.1", 0), plaintext=True)


async def test_admin_requests_reach_the_controller_and_registrations_are_replicated(tmp_path):
    async with open_controller_node(single_voter(tmp_path)) as node:
        with trio.fail_after(10):
            await node.wait_for_leader()
        bootstrap = [f"1@127.0.0.1:{node.listen_port}"]
        async with AdminClient(bootstrap) as admin:
            with trio.fail_after(10):
                while True:  # the controller activates once its epoch's record is applied
                    response = await admin.register_broker(
                        RegisterBrokerRequest(
                            broker_id=7, incarnation_id="inc-1", cluster_id="pykraft", listeners=(("PLAIN", "h", 1),)
                        )
                    )
                    if response.error is not ErrorCode.NOT_LEADER:
                        break
                    await trio.sleep(0.05)
            assert response.error is ErrorCode.NONE
            cluster = await admin.describe_cluster(linearizable=True)
            [broker] = cluster.brokers
            assert (broker.broker_id, broker.broker_epoch, broker.state) == (7, response.broker_epoch, "Fenced")
            refused = await admin.create_topic("t", partitions=1, replication_factor=1)
            assert refused.results[0].error is ErrorCode.INVALID_REPLICATION_FACTOR  # no broker online
        # Read from the committed image at scrape time.
        body = await scrape_metrics("127.0.0.1", node.metrics_port)
        assert 'pykraft_controller_brokers{node="1",state="fenced"} 1.0' in body
        assert 'pykraft_controller_active{node="1"} 1.0' in body
        metrics = node.runtime.metrics
        assert metrics.value("pykraft_controller_broker_state_transitions_total", from_state="offline", to_state="fenced") == 1
        assert metrics.value("pykraft_controller_last_committed_record_offset") == node.runtime.node.high_watermark - 1


def test_registration_and_register_records_share_the_log_without_mixing():
    from quorum import Entry, RecordKind
    from registration import NoOpRecord, encode_record

    machine = ControllerStateMachine()
    answers = machine.apply(
        [
            Entry(0, 1, RecordKind.DATA, encode_record(NoOpRecord())),
            Entry(1, 1, RecordKind.DATA, KeyValueStateMachine.encode_put(b"k", b"v")),
            Entry(2, 1, RecordKind.DATA, KeyValueStateMachine.encode_cas(b"k", b"v", b"w")),
        ]
    )
    assert answers == {2: KeyValueStateMachine.CAS_APPLIED}
    assert machine.registers.get(b"k") == (b"w", 2)
    assert machine.image.skipped_records == 0
    restored = ControllerStateMachine()
    restored.restore(machine.snapshot())
    assert restored.registers.get(b"k") == (b"w", 2)
    assert restored.image.fingerprint() == machine.image.fingerprint()
