"""``MetadataClient`` against scripted brokers on loopback: a monotonic
view per client, retries of retriable answers elsewhere, KIP-380 epoch
pinning, discovery from cluster metadata, and clear errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from broker_agent import ErrorCode, MetadataRequest, MetadataResponse
from broker_agent.client import MetadataClient, MetadataClientError, UnknownTopicError
from quorum.wire import ApplicationRequest, ApplicationResponse, FrameDecoder, decode_message, encode_message

Script = Callable[[MetadataRequest], MetadataResponse]


def answer(broker_id=1, *, offset=10, epoch=5, error=ErrorCode.NONE, state="Online", **body) -> MetadataResponse:
    return MetadataResponse(
        error=error, message="", broker_id=broker_id, broker_epoch=epoch, state=state, image_offset=offset, body=body
    )


class ScriptedBroker:
    """Answers each request with ``script(request)``; records the requests."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[MetadataRequest] = []
        self.port = 0

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream) -> None:
        decoder = FrameDecoder()
        try:
            while data := await stream.receive_some(65536):
                decoder.feed(data)
                while (payload := decoder.next_frame()) is not None:
                    decoded = decode_message(payload, expected_cluster_id="pykraft")
                    assert isinstance(decoded.message, ApplicationRequest)
                    request = MetadataRequest.from_payload(decoded.message.payload)
                    self.requests.append(request)
                    response = ApplicationResponse(payload=self.script(request).to_payload())
                    await stream.send_all(encode_message(response, correlation_id=decoded.correlation_id, cluster_id="pykraft"))
        except trio.BrokenResourceError:
            pass

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


async def start(nursery, *scripts: Script) -> list[ScriptedBroker]:
    brokers = [ScriptedBroker(script) for script in scripts]
    for broker in brokers:
        await nursery.start(broker.serve)
    return brokers


async def test_an_answer_older_than_one_already_seen_is_refused_and_asked_elsewhere(nursery):
    offsets = iter([10, 5])
    a, b = await start(
        nursery,
        lambda request: answer(1, offset=next(offsets), topics=["t"]),
        lambda request: answer(2, offset=12, topics=["t", "u"]),
    )
    async with MetadataClient([a.address, b.address]) as client:
        assert await client.list_topics() == ["t"]
        assert client.high_image_offset == 10
        client._index = 0  # ask A again first
        assert await client.list_topics() == ["t", "u"]
    assert client.refused_older_answers == 1
    assert client.high_image_offset == 12
    assert a.requests[1].min_image_offset == 10  # the broker is told what not to go below
    assert b.requests[0].min_image_offset == 10


async def test_a_broker_that_is_not_online_is_skipped(nursery):
    a, b = await start(
        nursery,
        lambda request: answer(1, error=ErrorCode.BROKER_NOT_AVAILABLE, state="Fenced"),
        lambda request: answer(2, topics=["t"]),
    )
    async with MetadataClient([a.address, b.address]) as client:
        assert await client.list_topics() == ["t"]
        assert client.last_address == ("127.0.0.1", b.port)


async def test_a_bounced_broker_refuses_the_old_epoch_and_the_client_learns_the_new_one(nursery):
    """KIP-380: requests carry the epoch last seen at that address."""
    epoch = [7]

    def script(request: MetadataRequest) -> MetadataResponse:
        if request.broker_epoch is not None and request.broker_epoch != epoch[0]:
            return answer(1, epoch=epoch[0], error=ErrorCode.STALE_BROKER_EPOCH)
        return answer(1, epoch=epoch[0], topics=["t"])

    (a,) = await start(nursery, script)
    async with MetadataClient([a.address]) as client:
        await client.list_topics()
        epoch[0] = 9  # the broker bounced
        await client.list_topics()
    assert [r.broker_epoch for r in a.requests] == [None, 7, None]


async def test_discovery_from_cluster_metadata(nursery):
    """Bootstrap at A, which lists only B as Online: the client goes to B."""
    online: list[list] = []
    a, b = await start(
        nursery,
        lambda request: answer(1, brokers=online),
        lambda request: answer(2, brokers=online),
    )
    online.append({"broker_id": 2, "broker_epoch": 3, "listeners": [["PLAINTEXT", "127.0.0.1", b.port]], "rack": None})
    async with MetadataClient([a.address]) as client:
        await client.cluster_metadata()
        assert client.brokers == [("127.0.0.1", b.port), ("127.0.0.1", a.port)]
        assert await client.find_online_broker() == (2, ("127.0.0.1", b.port))


async def test_definite_answers_raise_clear_errors(nursery):
    (a,) = await start(
        nursery,
        lambda request: answer(1, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if request.op == "describe_topic"
        else answer(1, error=ErrorCode.INVALID_REQUEST),
    )
    async with MetadataClient([a.address]) as client:
        with pytest.raises(UnknownTopicError):
            await client.describe_topic("nope")
        with pytest.raises(MetadataClientError, match="refused the request"):
            await client.list_topics()


async def test_no_broker_reachable_fails_within_the_retry_timeout():
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()  # nobody listens there now
    started = trio.current_time()
    async with MetadataClient([f"127.0.0.1:{port}"], retry_timeout_s=0.3) as client:
        with pytest.raises(MetadataClientError, match="no broker answered"):
            await client.list_topics()
    assert trio.current_time() - started < 2


async def test_a_server_of_another_protocol_is_named_as_such(nursery):
    """Before: "frame of 1397966893 bytes is over the limit", which does not
    say that the address is an SSH server's."""

    async def banner(stream) -> None:
        async with stream:
            await stream.send_all(b"SSH-2.0-OpenSSH_9.2\r\n")
            await stream.receive_some(65536)

    listeners = await nursery.start(trio.serve_tcp, banner, 0)
    port = listeners[0].socket.getsockname()[1]
    async with MetadataClient([f"127.0.0.1:{port}"], retry_timeout_s=0.3) as client:
        with pytest.raises(MetadataClientError) as caught:
            await client.list_topics()
    assert "not a pykraft broker" in str(caught.value)
    assert "its first bytes: b'SSH-2.0-OpenSSH_9.2\\r\\n'" in str(caught.value)


async def answering(nursery, payload: bytes) -> int:
    """A server of pykraft's wire that answers every ApplicationRequest
    with ``payload``; returns its port."""

    async def serve(stream) -> None:
        decoder = FrameDecoder()
        async with stream:
            while data := await stream.receive_some(65536):
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    decoded = decode_message(frame, expected_cluster_id="pykraft")
                    answer = ApplicationResponse(payload=payload)
                    await stream.send_all(encode_message(answer, correlation_id=decoded.correlation_id, cluster_id="pykraft"))

    listeners = await nursery.start(trio.serve_tcp, serve, 0)
    return listeners[0].socket.getsockname()[1]


async def test_a_controller_given_as_a_broker_and_a_broker_given_as_a_controller_are_named(nursery):
    """Found by hand: a broker started with --bootstrap naming another
    broker retried for ever with "the controller answered something
    unreadable: a message is [wire_name, [fields]], got {'error': 42, ...}",
    and kraft-topics pointed at a broker called that a bug in pykraft; a
    MetadataClient given a controller said "unreadable answer"."""
    import msgpack

    import registration
    from registration.client import AdminClient, AdminClientError

    refusal = registration.error_response(registration.DescribeClusterRequest(), registration.ErrorCode.INVALID_REQUEST, "no")
    controller_answer = registration.encode_message(refusal)
    controller_port = await answering(nursery, controller_answer)
    async with MetadataClient([f"127.0.0.1:{controller_port}"], retry_timeout_s=0.3) as client:
        with pytest.raises(MetadataClientError, match="a controller, not a broker: give brokers' client addresses"):
            await client.list_topics()

    broker_port = await answering(nursery, msgpack.packb({"error": 42, "message": "malformed request"}))
    async with AdminClient([f"127.0.0.1:{broker_port}"], timeout_s=2) as admin:
        with pytest.raises(AdminClientError, match=f"127.0.0.1:{broker_port} is a broker, not a controller"):
            await admin.describe_cluster()
    nursery.cancel_scope.cancel()


def test_bad_addresses_and_requests_are_refused_before_any_io():
    with pytest.raises(ValueError, match="bad broker address"):
        MetadataClient(["nowhere"])
    with pytest.raises(ValueError, match="no bootstrap"):
        MetadataClient([])


async def test_advance_to_reads_your_own_writes(nursery):
    offsets = iter([5, 9])

    def script(request: MetadataRequest) -> MetadataResponse:
        offset = next(offsets)
        if request.min_image_offset is not None and offset < request.min_image_offset:
            return answer(1, offset=offset, error=ErrorCode.OFFSET_NOT_AVAILABLE)
        return answer(1, offset=offset, topics=["written"])

    (a,) = await start(nursery, script)
    async with MetadataClient([a.address]) as client:
        client.advance_to(8)
        assert await client.list_topics() == ["written"]
        with pytest.raises(ValueError):
            client.advance_to(-1)
    assert [r.min_image_offset for r in a.requests] == [8, 8]
