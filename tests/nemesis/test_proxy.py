"""The proxy's link modes over real loopback sockets, with the proxy served
in the test's own trio run and driven through its control socket.

A "nothing happens" check is a bounded wait for the thing that must not
happen (``STALL_WINDOW_S``); every positive wait is a bounded wait for a
condition."""

from __future__ import annotations

import pytest
import trio
from nemesis_servers import EchoServer, RecordingServer, frame

from jepsen_like.nemesis import AsyncProxyClient, ProxyCommandError, serve_proxy

STALL_WINDOW_S = 0.3
WAIT_S = 10.0


@pytest.fixture
async def proxy(nursery):
    _server, port = await nursery.start(serve_proxy, "127.0.0.1", 0)
    client = await AsyncProxyClient.connect("127.0.0.1", port)
    yield client
    await client.aclose()


@pytest.fixture
async def echo(nursery):
    server = EchoServer()
    await nursery.start(server.serve)
    return server


@pytest.fixture
async def recorder(nursery):
    server = RecordingServer()
    await nursery.start(server.serve)
    return server


async def receive_exactly(stream: trio.SocketStream, size: int, timeout_s: float = WAIT_S) -> bytes:
    data = b""
    with trio.fail_after(timeout_s):
        while len(data) < size:
            chunk = await stream.receive_some(size - len(data))
            assert chunk, "stream closed early"
            data += chunk
    return data


async def nothing_arrives(stream: trio.SocketStream) -> bool:
    with trio.move_on_after(STALL_WINDOW_S):
        await stream.receive_some(1)
        return False
    return True


async def test_pass_forwards_both_ways_and_counts_bytes(proxy, echo):
    port = await proxy.add_link("a->b", 0, "127.0.0.1", echo.port)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    payload = bytes(range(256)) * 1000
    await stream.send_all(payload)
    assert await receive_exactly(stream, len(payload)) == payload
    stats = (await proxy.stats())["a->b"]
    assert stats["mode"] == "pass"
    assert stats["bytes_a_to_b"] == stats["bytes_b_to_a"] == len(payload)
    assert stats["connections_open"] == 1 and stats["connections_accepted"] == 1
    await stream.aclose()


async def test_drop_stalls_both_ways_and_resumes_with_every_frame_intact(proxy, recorder, nursery):
    port = await proxy.add_link("a->b", 0, "127.0.0.1", recorder.port)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    assert await receive_exactly(stream, len(RecordingServer.GREETING)) == RecordingServer.GREETING
    frames_total = 400
    frames = [frame(sequence, 1 + (sequence * 7919) % 20_000) for sequence in range(frames_total)]

    async def send_frames():
        for data in frames:
            await stream.send_all(data)

    await stream.send_all(frames[0])
    assert await recorder.wait_for(lambda: len(recorder.frames()) == 1, WAIT_S)
    await proxy.set_link("a->b", "drop")
    forwarded_at_drop = (await proxy.stats())["a->b"]["bytes_a_to_b"]
    nursery.start_soon(send_frames)  # keeps sending into the stall until back-pressure blocks it

    # Nothing more is forwarded, and the target gets exactly what was.
    assert not await recorder.wait_for(lambda: len(recorder.received) > forwarded_at_drop, STALL_WINDOW_S)
    stats = (await proxy.stats())["a->b"]
    assert stats["bytes_a_to_b"] == forwarded_at_drop
    assert stats["mode"] == "drop" and stats["connections_open"] == 1  # held open, not closed
    await recorder.push(b"news from b")
    assert await nothing_arrives(stream)  # b→a stalls too

    await proxy.set_link("a->b", "pass")
    expected = [0, *range(frames_total)]
    assert await recorder.wait_for(lambda: len(recorder.received) >= sum(map(len, frames)) + len(frames[0]), WAIT_S)
    assert recorder.frames() == expected  # in order, every byte checked
    assert await receive_exactly(stream, 11) == b"news from b"
    await stream.aclose()


async def test_drop_accepts_new_connections_but_forwards_nothing_until_heal(proxy, echo):
    port = await proxy.add_link("a->b", 0, "127.0.0.1", echo.port)
    await proxy.set_link("a->b", "drop")
    stream = await trio.open_tcp_stream("127.0.0.1", port)  # the connect succeeds
    await stream.send_all(b"are you there?")
    assert await nothing_arrives(stream)
    assert echo.connections == 0  # not even a connection reached the target
    await proxy.set_link("a->b", "pass")
    assert await receive_exactly(stream, 14) == b"are you there?"
    assert echo.connections == 1
    await stream.aclose()


async def test_refuse_resets_open_connections_and_refuses_new_ones_until_heal(proxy, echo):
    port = await proxy.add_link("a->b", 0, "127.0.0.1", echo.port)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"x")
    assert await receive_exactly(stream, 1) == b"x"

    await proxy.set_link("a->b", "refuse")
    with pytest.raises(trio.BrokenResourceError):  # ECONNRESET, not a quiet EOF
        with trio.fail_after(WAIT_S):
            while await stream.receive_some(1):
                pass
    with trio.socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        await sock.connect(("127.0.0.1", port))  # a real RST to the SYN: ECONNREFUSED
    assert (await proxy.stats())["a->b"]["connections_reset"] == 1

    await proxy.set_link("a->b", "pass")  # the same port listens again
    again = await trio.open_tcp_stream("127.0.0.1", port)
    await again.send_all(b"back")
    assert await receive_exactly(again, 4) == b"back"
    await again.aclose()


async def test_one_way_a_to_b_cuts_only_what_a_sends(proxy, recorder):
    port = await proxy.add_link("a->b", 0, "127.0.0.1", recorder.port)
    await proxy.set_link("a->b", "one-way-a-to-b")
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    assert await receive_exactly(stream, len(RecordingServer.GREETING)) == RecordingServer.GREETING  # b→a flows
    await stream.send_all(b"from a")
    assert not await recorder.wait_for(lambda: len(recorder.received) > 0, STALL_WINDOW_S)  # a→b cut
    await proxy.set_link("a->b", "pass")
    assert await recorder.wait_for(lambda: bytes(recorder.received) == b"from a", WAIT_S)
    await stream.aclose()


async def test_one_way_b_to_a_cuts_only_what_b_sends(proxy, recorder):
    port = await proxy.add_link("a->b", 0, "127.0.0.1", recorder.port)
    await proxy.set_link("a->b", "one-way-b-to-a")
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"from a")
    assert await recorder.wait_for(lambda: bytes(recorder.received) == b"from a", WAIT_S)  # a→b flows
    assert await nothing_arrives(stream)  # the greeting (b→a) is held
    await proxy.set_link("a->b", "pass")
    assert await receive_exactly(stream, len(RecordingServer.GREETING)) == RecordingServer.GREETING
    await stream.aclose()


async def test_delay_adds_at_least_the_delay_each_way(proxy, echo):
    delay_ms = 120
    port = await proxy.add_link("a->b", 0, "127.0.0.1", echo.port)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await proxy.set_delay("a->b", delay_ms, 0, "a-to-b")
    started_s = trio.current_time()
    await stream.send_all(b"ping")
    assert await receive_exactly(stream, 4) == b"ping"
    one_way_s = trio.current_time() - started_s
    assert delay_ms / 1000 <= one_way_s < delay_ms / 1000 + 5.0

    await proxy.set_delay("a->b", delay_ms, 0, "both")
    started_s = trio.current_time()
    await stream.send_all(b"pong")
    assert await receive_exactly(stream, 4) == b"pong"
    assert trio.current_time() - started_s >= 2 * delay_ms / 1000
    assert (await proxy.stats())["a->b"]["delay_b_to_a_ms"] == [delay_ms, 0]
    await stream.aclose()


async def test_jitter_never_reorders_bytes(proxy, recorder):
    port = await proxy.add_link("a->b", 0, "127.0.0.1", recorder.port)
    await proxy.set_delay("a->b", 1, 30)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    frames = [frame(sequence, 50) for sequence in range(200)]
    for data in frames:  # many small writes, so many separately delayed chunks
        await stream.send_all(data)
    assert await recorder.wait_for(lambda: len(recorder.received) == sum(map(len, frames)), WAIT_S)
    assert recorder.frames() == list(range(200))
    await stream.aclose()


async def test_heal_all_restores_every_link(proxy, echo):
    for name in ("x", "y", "z"):
        await proxy.add_link(name, 0, "127.0.0.1", echo.port)
    await proxy.apply({"x": {"mode": "drop"}, "y": {"mode": "refuse"}, "z": {"delay_a_to_b_ms": [50, 5]}})
    assert await proxy.link_modes() == {"x": "drop", "y": "refuse", "z": "pass"}
    await proxy.heal_all()
    stats = await proxy.stats()
    assert {name: entry["mode"] for name, entry in stats.items()} == {"x": "pass", "y": "pass", "z": "pass"}
    assert stats["z"]["delay_a_to_b_ms"] == [0, 0]


async def test_bad_commands_are_answered_with_errors_and_change_nothing(proxy, echo):
    await proxy.add_link("x", 0, "127.0.0.1", echo.port)
    with pytest.raises(ProxyCommandError, match="no link named"):
        await proxy.set_link("nope", "drop")
    with pytest.raises(ProxyCommandError) as bad_mode:
        await proxy.set_link("x", "sideways")
    assert bad_mode.value.kind == "ValueError"
    with pytest.raises(ProxyCommandError, match="already in use"):
        await proxy.add_link("x", 0, "127.0.0.1", echo.port)
    with pytest.raises(ProxyCommandError, match="unknown op"):
        await proxy.request("explode")
    with pytest.raises(ProxyCommandError):  # one bad entry: nothing applied
        await proxy.apply({"x": {"mode": "drop"}, "nope": {"mode": "drop"}})
    with pytest.raises(ProxyCommandError, match=">= 0"):
        await proxy.set_delay("x", -1)
    assert await proxy.link_modes() == {"x": "pass"}


async def test_a_dead_target_resets_the_client(proxy):
    with trio.socket.socket() as probe:  # a port nobody listens on
        await probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    port = await proxy.add_link("a->dead", 0, "127.0.0.1", dead_port)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    with pytest.raises(trio.BrokenResourceError):
        with trio.fail_after(WAIT_S):
            while await stream.receive_some(1):
                pass
    assert (await proxy.stats())["a->dead"]["upstream_failures"] == 1
