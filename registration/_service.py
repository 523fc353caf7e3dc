"""The controller as a quorum service: what a ``kraft-controller`` process
runs.

- ``ControllerStateMachine``: the replicated state of a controller node —
  the ``ClusterImage`` (registration records) beside a key-value register
  map (the harness's register workload); records are told apart by their
  first element.
- ``ControllerApplication``: adapts the sans-IO ``Controller`` to the quorum
  runtime's ``LeaderApplication``: requests arrive as msgpack payloads
  (``[wire_name, [fields]]``) and answers leave the same way.
- ``open_controller_node``: a quorum voter running all of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import msgpack

from quorum import Entry
from quorum.runtime import KeyValueStateMachine, NodeConfig, QuorumNodeHandle, open_quorum_node
from quorum.runtime._metrics import FINE_BUCKETS_S

from ._controller import Controller, ControllerConfig, Proposal
from ._errors import ErrorCode, RecordDecodeError
from ._image import ClusterImage
from ._lifecycle import BrokerState
from ._records import FLAG_SET, BrokerRegistrationChangeRecord, decode_record
from ._requests import message_from_wire

logger = logging.getLogger("pykraft.controller")


def _is_registration_record(data: bytes) -> bool:
    """Registration records are msgpack ``[type_code:int, version, ...]``;
    key-value records start with a key (bytes) or ``"cas"``."""
    return len(data) >= 2 and 0x90 <= data[0] <= 0x9F and data[1] <= 0x7F


class ControllerStateMachine:
    """The cluster image and the register map, as one quorum state machine."""

    def __init__(self) -> None:
        self.image = ClusterImage()
        self.registers = KeyValueStateMachine()

    def apply(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        metadata = [entry for entry in entries if _is_registration_record(entry.data)]
        registers = [entry for entry in entries if not _is_registration_record(entry.data)]
        if metadata:
            self.image.apply(metadata)
        return self.registers.apply(registers) if registers else {}

    def query(self, query: bytes) -> bytes | None:
        return self.registers.query(query)

    def snapshot(self) -> bytes:
        return msgpack.packb([self.image.snapshot(), self.registers.snapshot()], use_bin_type=True)

    def restore(self, data: bytes) -> None:
        image, registers = msgpack.unpackb(data, raw=False)
        self.image.restore(image)
        self.registers.restore(registers)


@dataclass(slots=True)
class _Reply:
    """The runtime's view of a controller ``Reply`` (answers as payloads)."""

    response: bytes | None = None
    records: list[bytes] = field(default_factory=list)
    on_committed: Callable[[int], bytes] | None = None
    on_read_confirmed: Callable[[], bytes] | None = None


def encode_message(message: Any) -> bytes:
    return msgpack.packb(message.to_wire(), use_bin_type=True)


def decode_message(payload: bytes) -> Any:
    """Raises ``ValueError`` for anything that is not a registration message."""
    try:
        data = msgpack.unpackb(payload, raw=False)
    except Exception as error:  # noqa: BLE001 - msgpack raises many kinds on bad input
        raise ValueError(f"not msgpack: {error}") from error
    return message_from_wire(data)


class ControllerApplication:
    """``LeaderApplication`` for the quorum runtime, around ``Controller``."""

    def __init__(self, controller: Controller, image: ClusterImage) -> None:
        self.controller = controller
        self.image = image
        self.metrics: Any = None  # the runtime's Metrics, once the node is open
        # Which decision the next fence records come from, for the metric.
        self._fence_causes = "session expired"

    def activate(self, now_ms: int, next_write_offset: int) -> None:
        self.controller.activate(now_ms, next_write_offset)
        logger.info("controller active at offset %d", next_write_offset)

    def deactivate(self) -> None:
        self.controller.deactivate()
        logger.info("controller inactive")

    def note_log_end(self, end_offset: int) -> None:
        self.controller.note_log_end(end_offset)

    def on_fetch(self, replica_id: int, extension: Any, fetch_offset: int, now_ms: int) -> Any:
        started = time.perf_counter()
        reply = self.controller.on_fetch(replica_id, extension, fetch_offset, now_ms)
        if self.metrics is not None:
            self.metrics.histogram(
                "pykraft_controller_heartbeat_seconds", "Time to handle one broker heartbeat.", FINE_BUCKETS_S
            ).observe(time.perf_counter() - started)
        self._fence_causes = "requested by the broker"
        return reply

    def tick(self, now_ms: int) -> None:
        self._fence_causes = "session expired"
        self.controller.tick(now_ms)
        if self.metrics is not None and now_ms % 1000 < 10:
            for state in ("Offline", "Fenced", "Online", "Stopping"):
                self.metrics.set_gauge(
                    "pykraft_controller_brokers",
                    len(self.image.brokers_in_state(_broker_state(state))),
                    "Registered brokers by state (committed image).",
                    state=state.lower(),
                )

    def take_proposals(self) -> list[Proposal]:
        proposals = self.controller.take_proposals()
        if self.metrics is not None:
            for proposal in proposals:
                fences = sum(1 for data in proposal.records if _is_fence(data))
                if fences:
                    self.metrics.add_to_counter(
                        "pykraft_controller_fence_events_total", fences, "Brokers fenced, by cause.", cause=self._fence_causes
                    )
        return proposals

    def handle_request(self, payload: bytes, now_ms: int) -> _Reply:
        try:
            request = decode_message(payload)
        except ValueError as error:
            logger.warning("malformed controller request: %s", error)
            return _Reply(response=_error_payload(f"malformed request: {error}"))
        try:
            reply = self.controller.handle_request(request, now_ms)
        except TypeError as error:  # a response type sent as a request, say
            return _Reply(response=_error_payload(str(error)))
        if reply.on_committed is not None:
            fences = sum(1 for data in reply.records if _is_fence(data))
            if fences and self.metrics is not None:
                self.metrics.add_to_counter(
                    "pykraft_controller_fence_events_total", fences, "Brokers fenced, by cause.", cause="bounce or unregistration"
                )
            on_committed = reply.on_committed
            return _Reply(records=list(reply.records), on_committed=lambda first: encode_message(on_committed(first)))
        if reply.on_read_confirmed is not None:
            on_read = reply.on_read_confirmed
            return _Reply(on_read_confirmed=lambda: encode_message(on_read()))
        assert reply.response is not None
        return _Reply(response=encode_message(reply.response))


def _is_fence(data: bytes) -> bool:
    try:
        record = decode_record(data)
    except RecordDecodeError:
        return False
    return isinstance(record, BrokerRegistrationChangeRecord) and record.fenced == FLAG_SET


def _broker_state(name: str) -> BrokerState:
    return BrokerState(name)


def _error_payload(message: str) -> bytes:
    return msgpack.packb(["error", [int(ErrorCode.INVALID_REQUEST), message[:500]]], use_bin_type=True)


@asynccontextmanager
async def open_controller_node(
    config: NodeConfig, controller_config: ControllerConfig | None = None
) -> AsyncIterator[QuorumNodeHandle]:
    """A quorum voter that runs the controller when it leads. Raises as
    ``open_quorum_node``."""
    machine = ControllerStateMachine()
    controller = Controller(controller_config or ControllerConfig(cluster_id=config.cluster_id), machine.image)
    application = ControllerApplication(controller, machine.image)
    async with open_quorum_node(config, machine, leader_application=application) as node:
        application.metrics = node.runtime.metrics
        yield node
