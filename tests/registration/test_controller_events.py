"""Node events from the active controller: one per broker-state decision
its committed image applies (registrations, fencing and unfencing, session
expiry, controlled shutdown), none per heartbeat, none from a standby."""

import json

import trio

from jepsen_like.campaign._cluster import node_event
from jepsen_like.checker._load import read_node_events
from quorum import Entry, RecordKind
from quorum.runtime import NodeConfig
from registration import (
    FLAG_SET,
    BrokerHeartbeat,
    BrokerRegistrationChangeRecord,
    Controller,
    ControllerApplication,
    ControllerConfig,
    ControllerStateMachine,
    ErrorCode,
    RegisterBrokerRequest,
    decode_message,
    encode_message,
    encode_record,
    open_controller_node,
)
from registration.client import AdminClient

CLUSTER_ID = "test-cluster"
LISTENERS = (("PLAINTEXT", "127.0.0.1", 9092),)


class ActiveController:
    """The adapter as the runtime drives it, with every batch committed at
    once: records appended at the log end, applied to the state machine,
    then the batch's callback run."""

    def __init__(self) -> None:
        self.machine = ControllerStateMachine()
        config = ControllerConfig(cluster_id=CLUSTER_ID, session_timeout_ms=9_000, heartbeat_interval_ms=2_000)
        self.events: list[dict] = []
        self.application = ControllerApplication(
            Controller(config, self.machine.image), self.machine.image, state_machine=self.machine, emit=self.events.append
        )
        self.log_end = 0
        self.now_ms = 0
        self.application.activate(self.now_ms, self.log_end)

    def commit(self, records, on_committed):
        first = self.log_end
        self.machine.apply([Entry(first + index, 1, RecordKind.DATA, data) for index, data in enumerate(records)])
        self.log_end += len(records)
        return on_committed(first) if on_committed is not None else None

    def drain(self) -> None:
        for proposal in self.application.take_proposals():
            self.commit(proposal.records, proposal.on_committed)

    def register(self, broker_id: int, incarnation: str) -> int:
        request = RegisterBrokerRequest(broker_id=broker_id, incarnation_id=incarnation, cluster_id=CLUSTER_ID, listeners=LISTENERS)
        reply = self.application.handle_request(encode_message(request), self.now_ms)
        self.drain()
        response = decode_message(self.commit(reply.records, reply.on_committed))
        assert response.error is ErrorCode.NONE, response
        return response.broker_epoch

    def heartbeat(self, broker_id: int, epoch: int, **wants: bool) -> None:
        heartbeat = BrokerHeartbeat(broker_id=broker_id, broker_epoch=epoch, **wants)
        self.application.on_fetch(broker_id, heartbeat.to_extension(), self.log_end, self.now_ms)
        self.drain()

    def tick(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        self.application.tick(self.now_ms)
        self.drain()

    def states(self) -> list[tuple]:
        return [
            (event["state"], event["cause"])
            for event in self.events
            if event["event"] == "controller_broker_state"
        ]


def test_each_broker_state_decision_is_one_event_when_it_commits():
    controller = ActiveController()
    epoch = controller.register(7, "inc-1")
    [registration, fenced] = controller.events
    assert registration == {
        "event": "broker_registration", "broker_id": 7, "broker_epoch": epoch, "offset": epoch, "incarnation_id": "inc-1",
    }  # fmt: skip
    assert fenced == {
        "event": "controller_broker_state", "broker_id": 7, "broker_epoch": epoch, "state": "fenced",
        "previous_state": "offline", "cause": "registered", "offset": epoch,
    }  # fmt: skip

    controller.heartbeat(7, epoch)  # caught up: unfenced
    for _ in range(20):  # heartbeats that change nothing write nothing
        controller.now_ms += 1_000
        controller.heartbeat(7, epoch)
    controller.tick(9_001)  # silent past the session timeout
    controller.heartbeat(7, epoch)
    controller.heartbeat(7, epoch, want_fence=True)
    controller.heartbeat(7, epoch)
    controller.heartbeat(7, epoch, want_shutdown=True)
    controller.heartbeat(7, epoch, want_shutdown=True)  # it leads nothing: done
    assert controller.states() == [
        ("fenced", "registered"),
        ("online", "unfenced"),
        ("fenced", "fenced: session expired"),
        ("online", "unfenced"),
        ("fenced", "fenced: requested by the broker"),
        ("online", "unfenced"),
        ("stopping", "controlled shutdown started"),
        ("offline", "controlled shutdown completed"),
    ]
    # Each event names the record that made the change, in log order.
    offsets = [event["offset"] for event in controller.events]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets) - 1  # registration + its state share one

    count = len(controller.events)
    new_epoch = controller.register(7, "inc-2")
    assert new_epoch > epoch
    assert [event["event"] for event in controller.events[count:]] == ["broker_registration", "controller_broker_state"]
    assert controller.events[-1]["cause"] == f"registered a new incarnation (epoch {epoch} replaced)"


def test_a_standby_controller_writes_no_broker_events():
    controller = ActiveController()
    epoch = controller.register(7, "inc-1")
    controller.heartbeat(7, epoch)
    count = len(controller.events)
    controller.application.deactivate()
    # The next leader's fence record reaches this node's image too.
    fence = BrokerRegistrationChangeRecord(broker_id=7, broker_epoch=epoch, fenced=FLAG_SET)
    controller.commit([encode_record(fence)], None)
    assert controller.machine.image.broker(7).fenced
    assert len(controller.events) == count


def test_the_campaign_keeps_controller_events_tagged_with_the_controller(tmp_path):
    """The converted events pass the checker's loader; a controller-view
    state is not a ``broker_state`` (the broker's own view, which the
    fenced-broker-read check holds the broker to)."""
    controller = ActiveController()
    epoch = controller.register(7, "inc-1")
    controller.heartbeat(7, epoch)
    path = tmp_path / "node-events.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for event in controller.events:
            converted = node_event({"wall_ns": 5_000, **event}, 2, 1_000)
            assert converted is not None
            out.write(json.dumps(converted) + "\n")
    loaded = read_node_events([path])
    assert [(event["kind"], event["node"], event["broker_id"], event["time"]) for event in loaded] == [
        ("broker_registration", "2", "7", 4_000),
        ("controller_broker_state", "2", "7", 4_000),
        ("controller_broker_state", "2", "7", 4_000),
    ]
    assert loaded[0]["broker_epoch"] == loaded[0]["offset"] == epoch


async def test_kraft_controller_writes_broker_events_to_its_event_log(tmp_path):
    events_path = tmp_path / "node1.events.jsonl"
    config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, data_dir=tmp_path / "c1", event_log=events_path, plaintext=True)
    async with open_controller_node(config) as node:
        with trio.fail_after(10):
            await node.wait_for_leader()
        async with AdminClient([f"1@127.0.0.1:{node.listen_port}"]) as admin:
            with trio.fail_after(10):
                while True:  # the controller activates once its epoch's record is applied
                    response = await admin.register_broker(
                        RegisterBrokerRequest(broker_id=7, incarnation_id="inc-1", cluster_id="pykraft", listeners=LISTENERS)
                    )
                    if response.error is not ErrorCode.NOT_LEADER:
                        break
                    await trio.sleep(0.05)
            assert response.error is ErrorCode.NONE
    lines = [json.loads(line) for line in events_path.read_text(encoding="utf-8").splitlines()]
    assert all(isinstance(line["wall_ns"], int) for line in lines)
    kinds = [line["event"] for line in lines]
    assert "role" in kinds  # the runtime's events and the controller's share the file
    [registration] = [line for line in lines if line["event"] == "broker_registration"]
    assert (registration["broker_id"], registration["broker_epoch"]) == (7, response.broker_epoch)
    [state] = [line for line in lines if line["event"] == "controller_broker_state"]
    assert (state["state"], state["cause"]) == ("fenced", "registered")
