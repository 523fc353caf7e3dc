"""Answering clients, sans-IO: one request payload in, one response (and
the event to log, if any) out, from the image and the lifecycle at
``now_ms``. The trio agent and a simulator answer the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registration import LIST_TOPICS_PAGE_MAX, BrokerState, ClusterImage

from ._lifecycle import BrokerLifecycle
from ._protocol import ErrorCode, MetadataRequest, MetadataResponse, ProtocolError


@dataclass(frozen=True, slots=True)
class Served:
    """What ``serve`` decided: the response, the op (None: malformed), and
    the ``broker_request`` event to log when the request carried an epoch."""

    response: MetadataResponse
    op: str | None
    request_event: dict[str, Any] | None


def serve_request(
    payload: bytes,
    *,
    lifecycle: BrokerLifecycle,
    image: ClusterImage,
    image_offset: int,
    now_ms: int,
    cluster_id: str,
    controller_id: int | None,
) -> Served:
    """Answer one client payload. Call ``lifecycle.tick(now_ms)`` first, so
    that the state named is the state at this instant. Never raises on a
    client's input.

    Order of checks: malformed → INVALID_REQUEST; an epoch other than the
    current one → STALE_BROKER_EPOCH (KIP-380: never acted on, whatever the
    state); not Online or not fresh → BROKER_NOT_AVAILABLE naming the state;
    an image older than ``min_image_offset`` → OFFSET_NOT_AVAILABLE; then
    the answer.
    """
    broker_id = lifecycle.config.broker_id
    epoch = lifecycle.broker_epoch

    def respond(error: ErrorCode, message: str = "", body: dict[str, Any] | None = None) -> MetadataResponse:
        return MetadataResponse(
            error=error,
            message=message,
            broker_id=broker_id,
            broker_epoch=-1 if epoch is None else epoch,
            state=lifecycle.state.value,
            image_offset=image_offset,
            body=body or {},
        )

    try:
        request = MetadataRequest.from_payload(payload)
    except ProtocolError as error:
        return Served(respond(ErrorCode.INVALID_REQUEST, f"malformed request: {error}"), None, None)
    may_serve = lifecycle.may_serve(now_ms)
    event = None
    if request.broker_epoch is not None:
        accepted = request.broker_epoch == epoch
        event = {
            "event": "broker_request",
            "broker_id": broker_id,
            "broker_epoch": request.broker_epoch,
            "current_broker_epoch": epoch,
            "op": request.op,
            "accepted": accepted and may_serve,
        }
        if not accepted:
            # KIP-380: meant for another incarnation of this broker (or for
            # another broker that had this address).
            current = "none" if epoch is None else str(epoch)
            message = f"broker {broker_id} is at epoch {current}, not {request.broker_epoch}"
            return Served(respond(ErrorCode.STALE_BROKER_EPOCH, message), request.op, event)
    if not may_serve:
        message = f"broker {broker_id} is {lifecycle.state.value}, not Online"
        return Served(respond(ErrorCode.BROKER_NOT_AVAILABLE, message), request.op, event)
    if request.min_image_offset is not None and image_offset < request.min_image_offset:
        message = f"image at offset {image_offset}, below the {request.min_image_offset} asked for"
        return Served(respond(ErrorCode.OFFSET_NOT_AVAILABLE, message), request.op, event)
    error, message, body = _answer(request, image, cluster_id, controller_id)
    return Served(respond(error, message, body), request.op, event)


def _answer(
    request: MetadataRequest, image: ClusterImage, cluster_id: str, controller_id: int | None
) -> tuple[ErrorCode, str, dict[str, Any]]:
    if request.op == "list_topics":
        # One page: a million names in one answer would pass the frame
        # limit, and never be sent.
        page, more = image.topic_names_after(request.after, LIST_TOPICS_PAGE_MAX)
        return ErrorCode.NONE, "", {"topics": page, "more": more}
    if request.op == "cluster_metadata":
        # Seed 001: "Fenced brokers should be omitted from the metadata sent
        # to clients": only Online brokers are listed.
        brokers = [
            {
                "broker_id": registration.broker_id,
                "broker_epoch": registration.broker_epoch,
                "listeners": [list(listener) for listener in registration.listeners],
                "rack": registration.rack,
            }
            for _, registration in sorted(image.brokers.items())
            if registration.state is BrokerState.ONLINE
        ]
        return (
            ErrorCode.NONE,
            "",
            {
                "cluster_id": cluster_id,
                "controller_id": controller_id if controller_id is not None else -1,
                "brokers": brokers,
                "topic_count": len(image.topics),
                "partition_count": image.partition_count,
                "offline_partition_count": len(image.partitions_without_leader()),
            },
        )
    assert request.topic is not None
    topic = image.describe_topic(request.topic)
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {request.topic!r}", {}
    if request.op == "describe_topic":
        return ErrorCode.NONE, "", {"topic": topic}
    for partition in topic["partitions"]:  # find_leader
        if partition["partition"] != request.partition:
            continue
        leader = partition["leader"]
        registration = image.broker(leader) if leader >= 0 else None
        body = {
            "topic": request.topic,
            "partition": request.partition,
            "leader": leader,
            "leader_epoch": partition["leader_epoch"],
            "leader_broker_epoch": registration.broker_epoch if registration is not None else -1,
            "leader_listeners": [list(listener) for listener in registration.listeners] if registration else [],
            "replicas": partition["replicas"],
            "isr": partition["isr"],
        }
        if leader < 0:
            return ErrorCode.LEADER_NOT_AVAILABLE, f"{request.topic}-{request.partition} has no leader", body
        return ErrorCode.NONE, "", body
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{request.topic} has no partition {request.partition}", {}
