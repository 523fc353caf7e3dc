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
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import msgpack

from quorum import Entry
from quorum.runtime import KeyValueStateMachine, NodeConfig, QuorumNodeHandle, open_quorum_node

from ._controller import Controller, ControllerConfig, Proposal
from ._errors import ErrorCode
from ._image import ClusterImage
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

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def activate(self, now_ms: int, next_write_offset: int) -> None:
        self.controller.activate(now_ms, next_write_offset)
        logger.info("controller active at offset %d", next_write_offset)

    def deactivate(self) -> None:
        self.controller.deactivate()
        logger.info("controller inactive")

    def note_log_end(self, end_offset: int) -> None:
        self.controller.note_log_end(end_offset)

    def on_fetch(self, replica_id: int, extension: Any, fetch_offset: int, now_ms: int) -> Any:
        return self.controller.on_fetch(replica_id, extension, fetch_offset, now_ms)

    def tick(self, now_ms: int) -> None:
        self.controller.tick(now_ms)

    def take_proposals(self) -> list[Proposal]:
        return self.controller.take_proposals()

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
            on_committed = reply.on_committed
            return _Reply(records=list(reply.records), on_committed=lambda first: encode_message(on_committed(first)))
        if reply.on_read_confirmed is not None:
            on_read = reply.on_read_confirmed
            return _Reply(on_read_confirmed=lambda: encode_message(on_read()))
        assert reply.response is not None
        return _Reply(response=encode_message(reply.response))


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
    async with open_quorum_node(config, machine, leader_application=ControllerApplication(controller)) as node:
        yield node
