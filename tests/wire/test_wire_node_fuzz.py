"""The fuzz suite against a running node (issue 15, part 1): frames of
every message type with a boundary value in one field, sent over real TCP
on loopback to a single-voter node. Each is served or refused with a
protocol error (an ErrorFrame, or the connection closed), and the node keeps
serving: after every example a DescribeQuorum is answered on the same
connection (unless the frame closed it) and on a fresh one, and the node's
epoch stays within what its storage holds."""

from __future__ import annotations

import socket
import threading

import msgpack
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from _wire_strategies import any_message
from quorum.runtime import NodeConfig, open_quorum_node
from quorum import BeginQuorumEpochRequest
from quorum.wire import EPOCH_MAX, DescribeQuorumRequest, DescribeQuorumResponse, ErrorFrame, FrameDecoder, decode_message, encode_message
from test_wire_fuzz import _paths, _replace
from test_wire_hostile import boundary_values

CLUSTER = "pykraft"
TIMEOUT_S = 10.0
# A round trip per example: fewer than the sans-IO fuzzers, in proportion
# to the profile (the "long" profile of ``make soak`` runs far more).
NODE_FUZZ = settings(max_examples=max(20, settings.default.max_examples // 2))


class RunningNode:
    """A single voter in its own thread's trio run, on a loopback port."""

    def __init__(self) -> None:
        self.port: int | None = None
        self.node = None
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, quorum={"election_timeout_ms": 100}, plaintext=True)
        async with open_quorum_node(config) as node:
            await node.wait_for_leader()
            self.node, self.port = node, node.listen_port
            self._ready.set()
            await self._stop.wait()

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(30), "the node did not start"

    def stop(self) -> None:
        assert self._token is not None and self._stop is not None
        self._token.run_sync_soon(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def running_node():
    node = RunningNode()
    node.start()
    yield node
    node.stop()


# The probe sent behind each fuzz frame: a correlation id the node's own
# messages on the connection (numbered from 1) do not reach in one example.
PROBE_CORRELATION_ID = 2**40


def _exchange(port: int, payload: bytes) -> list | None:
    """Send one frame, then a DescribeQuorum probe on the same connection.
    The frames answered before the probe's answer, or None if the node
    closed the connection instead (a refusal that ends the stream)."""
    probe = encode_message(DescribeQuorumRequest(), correlation_id=PROBE_CORRELATION_ID, cluster_id=CLUSTER)
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(len(payload).to_bytes(4, "big") + payload + probe)
        decoder = FrameDecoder()
        answers: list = []
        while True:
            while (frame := decoder.next_frame()) is not None:
                decoded = decode_message(frame, expected_cluster_id=CLUSTER)
                if decoded.correlation_id == PROBE_CORRELATION_ID and type(decoded.message) is DescribeQuorumResponse:
                    return answers
                answers.append(decoded)
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            decoder.feed(data)


def _serves(port: int) -> None:
    assert _exchange(port, encode_message(DescribeQuorumRequest(), correlation_id=5, cluster_id=CLUSTER)[4:]) is not None


@NODE_FUZZ
@given(message=any_message, data=st.data())
def test_a_running_node_serves_or_refuses_any_boundary_frame_and_keeps_serving(running_node, message, data):
    epoch = running_node.node.runtime.node.epoch
    envelope = msgpack.unpackb(encode_message(message, correlation_id=77, cluster_id=CLUSTER)[4:])
    paths = [path for path in _paths(envelope) if path[:1] == (4,) and len(path) > 1] or [(4,)]
    mutated = _replace(envelope, data.draw(st.sampled_from(paths)), data.draw(boundary_values))
    try:
        payload = msgpack.packb(mutated)
    except (OverflowError, ValueError):
        return  # not packable: nothing a peer could send
    answers = _exchange(running_node.port, payload)
    # None: refused, the connection closed. Otherwise the frame was served
    # or refused with an ErrorFrame naming it, and the probe behind it was
    # answered on the same connection.
    for answer in answers or ():
        if type(answer.message) is ErrorFrame:
            assert answer.message.correlation_id == 77
    _serves(running_node.port)
    # Whatever epoch the frames moved the node to, it can store and read it
    # back (issue 15: never persist what the storage can not hold). That
    # frames from ids that are not voters may move it at all is the core's
    # concern (disruption resistance), not the wire's.
    assert epoch <= running_node.node.runtime.node.epoch <= EPOCH_MAX


def test_a_running_node_drops_a_begin_quorum_epoch_naming_itself_and_keeps_serving(running_node):
    """The frame the long profile of the fuzz test above found (``make
    soak``): a BeginQuorumEpoch that names the node itself as its sender, in
    the last epoch storage holds. The node followed "itself" and its core
    stopped it; now the core drops it, and the node serves on in its own
    epoch."""
    epoch = running_node.node.runtime.node.epoch
    forged = BeginQuorumEpochRequest(src=1, dst=1, epoch=EPOCH_MAX)
    answers = _exchange(running_node.port, encode_message(forged, correlation_id=77, cluster_id=CLUSTER)[4:])
    assert answers == []
    _serves(running_node.port)
    assert running_node.node.runtime.node.epoch == epoch
    # Counted where an operator sees it (docs/operations.md).
    metrics = running_node.node.runtime.metrics
    assert metrics.value("pykraft_quorum_inputs_refused_total", rule="messages_from_own_id") >= 1
    assert metrics.value("pykraft_quorum_inputs_refused_total", rule="messages_contradicting_leader") == 0
