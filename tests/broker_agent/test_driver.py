"""``BrokerDriver``: the broker's sans-IO driver, shared by the trio agent
and the simulator, over a real observer ``ReplicaHost``."""

import random

from broker_agent import BrokerDriver, ErrorCode, LifecycleConfig, MetadataRequest, Register, Stop, WatchedMetadata
from quorum import Output, QuorumConfig, ReplicaHost
from registration import ErrorCode as RegistrationErrorCode
from registration import RegisterBrokerResponse


class Port:
    """Records what the driver asks of its world."""

    def __init__(self) -> None:
        self.actions: list = []
        self.images_applied = 0

    def perform(self, actions: list) -> None:
        self.actions += actions

    def fetches_answered(self, answered: list) -> None:
        pass

    def image_applied(self) -> None:
        self.images_applied += 1

    # quorum.ReplicaPort, for the observer's host
    def role_changed(self, event) -> None:
        pass

    def committed(self, entries) -> None:
        pass

    def output_ready(self, output: Output) -> None:
        pass

    def snapshot_changed(self, snapshot_id, installed: bool) -> None:
        pass


def new_driver() -> tuple[BrokerDriver, Port]:
    port = Port()
    host = ReplicaHost(
        QuorumConfig(node_id=101, voters=(1, 2, 3)), WatchedMetadata(), port, rng=random.Random(1), fetch_session=0
    )
    return BrokerDriver(LifecycleConfig(broker_id=101), host, port, cluster_id="c"), port


def test_a_new_process_registers_and_looks_at_its_image_once() -> None:
    driver, port = new_driver()
    driver.start(0)
    assert [type(action) for action in port.actions] == [Register]
    driver.step(1)
    driver.step(2)
    assert port.images_applied == 1  # nothing changed since the first look
    driver.note_image_changed()
    driver.step(3)
    assert port.images_applied == 2


def test_a_broker_the_cluster_refused_refuses_clients_and_asks_for_nothing_more() -> None:
    """After the cluster refused the broker for good (Stop), a client's
    request is refused and neither it nor a step asks for anything (no new
    registration, no state change)."""
    driver, port = new_driver()
    driver.start(0)
    driver.registration_completed(5, RegisterBrokerResponse(error=RegistrationErrorCode.INCONSISTENT_CLUSTER_ID))
    assert isinstance(port.actions[-1], Stop) and driver.lifecycle.stopped
    performed = len(port.actions)
    served = driver.serve(MetadataRequest(op="list_topics").to_payload(), 10_000)
    driver.step(10_001)
    assert served.response.error is not ErrorCode.NONE
    assert port.actions[performed:] == []
