"""QuorumClient's public answers to "who answered?", "where did it go?" and
"did it time out?": ``last_answered_by``, ``last_sent_to`` and
``NoAnswerError`` (an ``IndeterminateError``)."""

import functools
import socket

import pytest
import trio

import quorum.wire._schema as schema
from quorum import ErrorCode
from quorum.client import AnswerNotSentError, IndeterminateError, NoAnswerError, QuorumClient, QuorumClientError
from quorum.runtime import KeyValueStateMachine, NodeConfig, open_quorum_node
from quorum.wire import (
    ErrorFrame,
    FrameDecoder,
    ProposeRequest,
    ProposeResponse,
    UnsupportedVersionError,
    decode_message,
    encode_message,
)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def silent_server(nursery: trio.Nursery, received: list[bytes]) -> int:
    """A TCP server that reads whatever comes and never answers."""

    async def swallow(stream: trio.SocketStream) -> None:
        async with stream:
            while data := await stream.receive_some(65536):
                received.append(data)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, swallow, 0, host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1]


async def test_a_proposal_without_an_answer_raises_no_answer_error(autojump_clock):
    received: list[bytes] = []
    async with trio.open_nursery() as nursery:
        port = await silent_server(nursery, received)
        async with QuorumClient([f"7@127.0.0.1:{port}"], request_timeout_s=2.0, retry_timeout_s=30.0) as client:
            started = trio.current_time()
            with pytest.raises(NoAnswerError) as caught:
                await client.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
            # Raised at the request timeout, not the retry timeout: a sent
            # proposal is never retried.
            assert trio.current_time() - started == pytest.approx(2.0, abs=0.1)
            assert isinstance(caught.value, IndeterminateError)  # existing callers still catch it
            assert received, "the request left the client"
            assert client.last_answered_by is None
            # Where it went, for the history of an operation that may have happened there.
            assert client.last_sent_to is not None and (client.last_sent_to.node_id, client.last_sent_to.port) == (7, port)
        nursery.cancel_scope.cancel()


async def test_a_read_retried_until_the_retry_timeout_names_the_timeout_as_its_cause(autojump_clock):
    received: list[bytes] = []
    async with trio.open_nursery() as nursery:
        port = await silent_server(nursery, received)
        async with QuorumClient([f"127.0.0.1:{port}"], request_timeout_s=1.0, retry_timeout_s=3.5) as client:
            with pytest.raises(QuorumClientError) as caught:
                await client.read(b"k")
        # Reads are retried after a timeout; the give-up error is not itself
        # indeterminate, but its cause says a request was left in flight.
        assert not isinstance(caught.value, IndeterminateError)
        assert isinstance(caught.value.__cause__, NoAnswerError)
        nursery.cancel_scope.cancel()


async def test_a_refused_connection_is_not_a_no_answer_error(autojump_clock):
    async with QuorumClient([f"127.0.0.1:{closed_port()}"], retry_timeout_s=1.0) as client:
        with pytest.raises(QuorumClientError) as caught:
            await client.read(b"k")
    assert not isinstance(caught.value, IndeterminateError)
    assert not isinstance(caught.value.__cause__, IndeterminateError)


async def test_last_sent_to_names_the_node_a_request_could_not_reach(autojump_clock):
    port = closed_port()
    async with QuorumClient([f"4@127.0.0.1:{port}"], retry_timeout_s=1.0) as client:
        assert client.last_sent_to is None
        with pytest.raises(QuorumClientError):
            await client.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
        assert client.last_sent_to is not None and (client.last_sent_to.node_id, client.last_sent_to.port) == (4, port)
        assert client.last_answered_by is None


async def test_last_answered_by_names_the_node_that_answered(tmp_path):
    node_port, dead_port = closed_port(), closed_port()
    config = NodeConfig(
        node_id=1,
        voters={1: ("127.0.0.1", node_port)},
        data_dir=tmp_path / "node1",
        quorum={"election_timeout_ms": 100},
        plaintext=True,
    )
    async with open_quorum_node(config) as node:
        with trio.fail_after(20):
            await node.wait_for_leader()
            # The first entry refuses connections: the client moves on to
            # node 1, and says so.
            async with QuorumClient([f"9@127.0.0.1:{dead_port}", f"1@127.0.0.1:{node_port}"]) as client:
                assert client.last_answered_by is None
                await client.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
                answered = client.last_answered_by
                assert answered is not None
                assert (answered.node_id, answered.host, answered.port) == (1, "127.0.0.1", node_port)
                assert str(answered) == f"1@127.0.0.1:{node_port}"
                assert client.last_sent_to == answered
                await client.read(b"k")
                assert client.last_answered_by == answered


async def test_a_node_refusing_version_2_is_asked_again_in_version_1(autojump_clock, monkeypatch):
    """An older pykraft knows version 1 of Propose only: it answers the
    version-2 request with INVALID_REQUEST "version 2 is not supported";
    the client asks again in version 1 and keeps to it."""
    versions_seen: list[int] = []

    async def old_node(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder()
        async with stream:
            while data := await stream.receive_some(65536):
                decoder.feed(data)
                while (payload := decoder.next_frame()) is not None:
                    try:
                        decoded = decode_message(payload, expected_cluster_id="pykraft")
                    except UnsupportedVersionError as error:
                        # What an older node's codec raises and answers.
                        versions_seen.append(error.version)
                        answer = ErrorFrame(code=ErrorCode.INVALID_REQUEST, message=str(error), correlation_id=error.correlation_id)
                        await stream.send_all(encode_message(answer, correlation_id=error.correlation_id, cluster_id="pykraft"))
                        continue
                    versions_seen.append(decoded.version)
                    reply = ProposeResponse(offset=7, version=decoded.version)
                    await stream.send_all(encode_message(reply, correlation_id=decoded.correlation_id, cluster_id="pykraft"))

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, old_node, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        propose = schema.SCHEMA_BY_CLASS[ProposeRequest]
        # The older node's decoder (this process's server side): Propose in
        # version 1 only.
        old = schema.MessageSchema(propose.type_code, propose.message_class, propose.encode_body, propose.decode_body)
        monkeypatch.setitem(schema.SCHEMA_BY_CODE, propose.type_code, old)
        async with QuorumClient([f"127.0.0.1:{port}"], retry_timeout_s=5) as client:
            assert await client.propose([b"x"]) == 7
            assert await client.propose([b"y"]) == 7
        assert versions_seen == [2, 1, 1]
        nursery.cancel_scope.cancel()


async def scripted_node(nursery: trio.Nursery, answer, requests: list[float]) -> int:
    """A node that answers each Propose with ``answer(version)`` and notes
    when each request came."""

    async def serve(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder()
        async with stream:
            while data := await stream.receive_some(65536):
                decoder.feed(data)
                while (payload := decoder.next_frame()) is not None:
                    decoded = decode_message(payload, expected_cluster_id="pykraft")
                    requests.append(trio.current_time())
                    reply = answer(decoded.version)
                    await stream.send_all(encode_message(reply, correlation_id=decoded.correlation_id, cluster_id="pykraft"))

    listeners = await nursery.start(functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1]


def not_leader(version: int) -> ProposeResponse:
    return ProposeResponse(error=ErrorCode.NOT_LEADER, version=version)


async def test_nodes_that_know_no_leader_are_asked_in_turn_before_any_backoff(autojump_clock):
    """Before: the client slept (20, 40, 80 ... 500 ms) after every
    NOT_LEADER that named no leader, so while a removed leader and its
    observers knew no successor, writes stopped for up to 2 s although the
    next node in the list led. Now it backs off only after a whole round."""
    asked: list[float] = []
    async with trio.open_nursery() as nursery:
        unknowing = [await scripted_node(nursery, not_leader, asked) for _ in range(2)]
        leader = await scripted_node(nursery, lambda version: ProposeResponse(offset=7, version=version), asked)
        servers = [f"127.0.0.1:{port}" for port in (*unknowing, leader)]
        async with QuorumClient(servers, retry_timeout_s=5) as client:
            started = trio.current_time()
            assert await client.propose([b"x"]) == 7
            assert trio.current_time() - started < 0.01  # no backoff on the way
        assert len(asked) == 3

        # Nobody knows a leader: still a backoff per round, not a hot loop.
        asked.clear()
        async with QuorumClient([f"127.0.0.1:{port}" for port in unknowing], retry_timeout_s=2) as client:
            with pytest.raises(QuorumClientError):
                await client.propose([b"y"])
        assert 4 <= len(asked) <= 30
        nursery.cancel_scope.cancel()


async def test_requests_in_flight_on_one_connection_each_time_out_at_their_own_deadline(autojump_clock):
    """One task wakes a connection's requests when their time is up
    (``timeout_loop``), in the order they were given; a request given a
    shorter time than one before it (the end of a caller's retry time) is
    still woken at its own deadline, not at the earlier request's."""
    from quorum.client import Server, _Connection

    received: list[bytes] = []
    timed_out_after_s: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        port = await silent_server(nursery, received)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        connection = _Connection(stream, "pykraft", Server(None, "127.0.0.1", port))
        for loop in (connection.read_loop, connection.write_loop, connection.flush_loop, connection.timeout_loop):
            nursery.start_soon(loop)
        started = trio.current_time()

        async def ask(name: str, timeout_s: float) -> None:
            with pytest.raises(NoAnswerError):
                await connection.request(ProposeRequest(records=(name.encode(),)), timeout_s)
            timed_out_after_s[name] = trio.current_time() - started

        async with trio.open_nursery() as asking:
            for name, timeout_s in (("first", 5.0), ("sooner", 1.0), ("later", 6.0), ("same", 5.0)):
                asking.start_soon(ask, name, timeout_s)
                await trio.sleep(0)
        assert timed_out_after_s == pytest.approx({"first": 5.0, "sooner": 1.0, "later": 6.0, "same": 5.0}, abs=0.01)
        assert not connection.waiting and not connection._deadlines
        nursery.cancel_scope.cancel()


async def test_answered_requests_leave_no_deadlines_behind(autojump_clock):
    """A long-lived connection keeps a deadline per request in flight, not
    one per request it ever made."""
    async with trio.open_nursery() as nursery:
        port = await scripted_node(nursery, lambda version: ProposeResponse(offset=7, version=version), [])
        async with QuorumClient([f"127.0.0.1:{port}"]) as client:
            for _ in range(200):
                assert await client.propose([b"x"]) == 7
            async with trio.open_nursery() as pipelined:
                for _ in range(64):
                    pipelined.start_soon(client.propose, [b"y"])
            connection = client._connection
            assert connection is not None and len(connection._deadlines) <= 1
        nursery.cancel_scope.cancel()


async def test_a_clients_pipelined_proposals_read_in_one_go_are_appended_together(tmp_path):
    """The transport holds the core while it hands over the requests of one
    read (QuorumRuntime.hold_core): a client's pipelined proposals are
    appended in one go, each answered with its own offset, in order."""
    node_port = closed_port()
    config = NodeConfig(
        node_id=1, voters={1: ("127.0.0.1", node_port)}, data_dir=tmp_path / "node1",
        quorum={"election_timeout_ms": 100}, plaintext=True,
    )  # fmt: skip
    async with open_quorum_node(config) as node:
        with trio.fail_after(20):
            await node.wait_for_leader()
            host = node.runtime.host
            groups: list[int] = []
            propose_many = host.propose_many

            def note(proposals):  # noqa: ANN001
                groups.append(len(proposals))
                propose_many(proposals)

            host.propose_many = note
            stream = await trio.open_tcp_stream("127.0.0.1", node_port)
            requests = [ProposeRequest(records=(b"r%d" % index,)) for index in range(20)]
            await stream.send_all(b"".join(
                encode_message(request, correlation_id=index + 1, cluster_id="pykraft") for index, request in enumerate(requests)
            ))  # fmt: skip
            decoder, answers = FrameDecoder(), {}
            while len(answers) < len(requests):
                decoder.feed(await stream.receive_some(65536))
                while (payload := decoder.next_frame()) is not None:
                    decoded = decode_message(payload, expected_cluster_id="pykraft")
                    answers[decoded.correlation_id] = decoded.message.offset
            await stream.aclose()
    offsets = [answers[index + 1] for index in range(len(requests))]
    assert offsets == list(range(offsets[0], offsets[0] + len(requests)))  # each its own, in order
    assert sum(groups) == len(requests) and max(groups) > 1  # appended together, not one by one


async def test_an_error_raised_in_the_clients_block_leaves_it_as_raised(autojump_clock):
    """``except QuorumClientError`` around ``async with QuorumClient(...)``
    catches a request's error: not wrapped in the exception group trio's
    nursery would make of it. The node's auto-join loop caught it that way,
    missed it, and its process exited when a leader did not answer."""
    received: list[bytes] = []
    async with trio.open_nursery() as nursery:
        port = await silent_server(nursery, received)
        with pytest.raises(NoAnswerError):
            async with QuorumClient([f"127.0.0.1:{port}"], request_timeout_s=1.0, retry_timeout_s=2.0) as client:
                await client.propose([b"x"])
        with pytest.raises(ValueError, match="nothing"):  # any error, not only the client's
            async with QuorumClient([f"127.0.0.1:{port}"]):
                raise ValueError("nothing to do with the client")
        nursery.cancel_scope.cancel()


# More connections than any client with a backoff makes in these tests:
# the stranger then stops the test, which would otherwise spin for ever
# (a hot loop never lets the autojump clock reach the retry timeout).
_STRANGER_CONNECTIONS_MAX = 200


async def stranger(nursery: trio.Nursery, greeting: bytes, connections: list[int]) -> int:
    """A server of another protocol: it sends ``greeting`` (an SSH banner,
    an HTTP answer) on every connection, or, with none, closes at once."""

    async def serve(stream: trio.SocketStream) -> None:
        connections.append(1)
        if len(connections) > _STRANGER_CONNECTIONS_MAX:
            nursery.cancel_scope.cancel()
        async with stream:
            if greeting:
                await stream.send_all(greeting)
                await stream.receive_some(65536)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1]


@pytest.mark.parametrize(
    "greeting", [b"SSH-2.0-OpenSSH_9.2\r\n", b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"]
)
async def test_a_server_of_another_protocol_is_named_as_such(autojump_clock, greeting):
    """Before: "frame of 1397966893 bytes is over the limit of 16777216",
    which does not tell a user that --bootstrap names an SSH or HTTP port."""
    connections: list[int] = []
    raised: list[QuorumClientError] = []
    async with trio.open_nursery() as nursery:
        port = await stranger(nursery, greeting, connections)
        async with QuorumClient([f"127.0.0.1:{port}"], retry_timeout_s=1.0) as client:
            with pytest.raises(QuorumClientError) as caught:
                await client.describe()
            raised.append(caught.value)
        nursery.cancel_scope.cancel()
    assert len(connections) <= _STRANGER_CONNECTIONS_MAX, "reconnected in a hot loop"
    text = str(raised[0])
    assert f"127.0.0.1:{port} does not speak the pykraft protocol" in text
    assert repr(greeting[:20])[2:-1] in text  # its first bytes, shown


async def test_a_server_that_closes_every_connection_is_not_reconnected_to_in_a_hot_loop(autojump_clock):
    """Before: a read retried at once after each broken connection, so a
    server that resets every connection was reconnected to thousands of
    times a second until the retry timeout (and the reason shown at the
    end was a connect timeout's empty text: "within 3.0 s: ")."""
    connections: list[int] = []
    raised: list[QuorumClientError] = []
    async with trio.open_nursery() as nursery:
        port = await stranger(nursery, b"", connections)
        async with QuorumClient([f"127.0.0.1:{port}"], retry_timeout_s=3.0) as client:
            with pytest.raises(QuorumClientError) as caught:
                await client.read(b"k")
            raised.append(caught.value)
        nursery.cancel_scope.cancel()
    assert len(connections) <= 20, "reconnected in a hot loop"  # a backoff per round: 20, 40, ... 500 ms
    assert str(raised[0]).rstrip(": ") != "no node served the request within 3 s"
    assert f"127.0.0.1:{port}" in str(raised[0])


async def test_an_answer_too_large_to_send_is_an_error_not_a_timeout():
    """Found by hand (a leader application's answer over the 16 MiB frame
    limit): the node logged "cannot encode" and sent nothing, and the
    client waited out its request timeout. Now it hears at once that the
    request was handled and its answer cannot be sent."""
    from quorum.wire import ApplicationRequest, ApplicationResponse

    async def huge_answer(runtime, request):
        assert isinstance(request, ApplicationRequest)
        return ApplicationResponse(payload=b"x" * (17 * 1024 * 1024))

    config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, fsync=False, plaintext=True)
    with trio.fail_after(20):
        async with open_quorum_node(config, KeyValueStateMachine(), request_handler=huge_answer) as node:
            await node.wait_for_leader()
            async with QuorumClient([f"1@127.0.0.1:{node.listen_port}"], request_timeout_s=60.0) as client:
                with pytest.raises(AnswerNotSentError, match="UNKNOWN_SERVER_ERROR: the request was handled") as caught:
                    await client.application_request(b"q", idempotent=False)
                assert isinstance(caught.value, IndeterminateError)  # it may have taken effect
                assert "frame" in str(caught.value) or "too large" in str(caught.value)
