"""The metrics endpoint (issue 25): prometheus_client's exposition, one
registry per node, the health and readiness answers, and a scraper that is
slow, oversized, garbled or too many (the endpoint is untrusted input)."""

import json

import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from quorum.runtime import KeyValueStateMachine, Metrics, NodeConfig, http_get, open_quorum_node, serve_metrics


def voter(tmp_path, node_id: int, voters: dict[int, tuple[str, int]]) -> NodeConfig:
    return NodeConfig(
        node_id=node_id, voters=voters, data_dir=tmp_path / f"node{node_id}", metrics_listen=("127.0.0.1", 0),
        plaintext=True,
    )


def families(text: str) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for each in family.samples:
            if each.name == name and all(each.labels.get(key) == value for key, value in labels.items()):
                return each.value
    return None


async def test_two_embedded_nodes_export_apart_with_process_metrics_and_conventions(tmp_path):
    async with (
        open_quorum_node(voter(tmp_path, 1, {1: ("127.0.0.1", 0)})) as first,
        open_quorum_node(voter(tmp_path, 2, {2: ("127.0.0.1", 0)})) as second,
    ):
        with trio.fail_after(10):
            await first.wait_for_leader()
            await second.wait_for_leader()
        _, before = await http_get("127.0.0.1", first.metrics_port)
        await first.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
        status, after = await http_get("127.0.0.1", first.metrics_port)
        _, other = await http_get("127.0.0.1", second.metrics_port)
    assert status == 200
    # One registry per node: each endpoint has its own node's series only.
    assert {each.labels["node"] for family in text_string_to_metric_families(after) for each in family.samples
            if family.name.startswith("pykraft_")} == {"1"}  # fmt: skip
    assert {each.labels["node"] for family in text_string_to_metric_families(other) for each in family.samples
            if family.name.startswith("pykraft_")} == {"2"}  # fmt: skip
    exported = families(after)
    # The library's process, platform and GC collectors.
    assert {"process_resident_memory_bytes", "process_cpu_seconds", "process_open_fds", "python_info", "python_gc_objects_collected"} <= set(exported)
    # Conventions: counters' samples end in _total; units are base units.
    for family in exported.values():
        if family.type == "counter":
            assert all(each.name.endswith("_total") for each in family.samples), family.name
        assert not family.name.endswith(("_ms", "_milliseconds", "_kb")), family.name
    # The state is read at scrape time, the events counted as they happen.
    assert sample(after, "pykraft_quorum_role", role="leader") == 1
    assert sample(after, "pykraft_quorum_has_leader") == 1
    assert sample(after, "pykraft_quorum_leader_id") == 1
    assert sample(after, "pykraft_quorum_voted_for") == 1
    assert sample(after, "pykraft_quorum_high_watermark") == sample(before, "pykraft_quorum_high_watermark") + 1
    assert sample(after, "pykraft_quorum_commit_latency_seconds_count") == (
        (sample(before, "pykraft_quorum_commit_latency_seconds_count") or 0) + 1
    )
    assert sample(after, "pykraft_quorum_records_appended_total", source="proposal") == (
        sample(before, "pykraft_quorum_records_appended_total", source="proposal") + 1
    )
    assert sample(after, "pykraft_quorum_elections_won_total") == 1
    assert sample(after, "pykraft_quorum_election_duration_seconds_count") == 1
    assert sample(after, "pykraft_quorum_fsync_duration_seconds_count") >= 1
    assert sample(after, "pykraft_event_loop_busy_seconds_total") > 0
    assert sample(after, "pykraft_quorum_apply_lag_records") == 0


async def test_health_and_ready_say_why_in_one_json_line(tmp_path):
    # A voter of three whose peers never start: no leader, neither healthy
    # nor ready.
    voters = {1: ("127.0.0.1", 0), 2: ("127.0.0.1", 1), 3: ("127.0.0.1", 1)}
    async with open_quorum_node(voter(tmp_path, 1, voters)) as alone:
        status, body = await http_get("127.0.0.1", alone.metrics_port, "/health")
        assert status == 503 and body.count("\n") == 1
        answer = json.loads(body)
        assert answer["ok"] is False and answer["reason"].startswith("no leader known in epoch")
        status, body = await http_get("127.0.0.1", alone.metrics_port, "/ready")
        assert (status, json.loads(body)) == (503, {"ok": False, "reason": "no leader heard of since start"})
    async with open_quorum_node(voter(tmp_path / "single", 1, {1: ("127.0.0.1", 0)})) as single:
        with trio.fail_after(10):
            await single.wait_for_leader()
        await single.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
        status, body = await http_get("127.0.0.1", single.metrics_port, "/health")
        assert status == 200 and json.loads(body)["ok"] is True
        assert json.loads(body)["reason"].startswith("leader 1 in epoch")
        status, body = await http_get("127.0.0.1", single.metrics_port, "/ready")
        assert status == 200 and json.loads(body)["reason"].startswith("caught up; leader 1")
        assert (await http_get("127.0.0.1", single.metrics_port, "/nothing"))[0] == 404


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data``, then read until the server closes."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    answer = b""
    try:
        await stream.send_all(data)
        while chunk := await stream.receive_some(65536):
            answer += chunk
    except trio.BrokenResourceError:
        pass  # reset by the server (it closed with our request unread)
    finally:
        await stream.aclose()
    return answer


async def test_a_hostile_scraper_is_bounded_and_does_not_stall_the_others():
    metrics = Metrics(7)
    metrics.set_gauge("pykraft_quorum_epoch", 3, "Current epoch.")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(lambda task_status: serve_metrics(
            metrics, "127.0.0.1", 0, request_timeout_s=0.5, connections_max=4, task_status=task_status
        ))  # fmt: skip
        with trio.fail_after(10):
            # Garbage, a POST and an endless head are answered, then closed.
            assert (await raw_exchange(port, b"\x00\x01garbage\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
            assert (await raw_exchange(port, b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405 ")
            answer = await raw_exchange(port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20_000)
            assert answer.startswith(b"HTTP/1.1 431 ")
            assert metrics.value("pykraft_metrics_requests_refused_total", reason="head_too_large") == 1

            # A scraper that starts a request and never finishes it holds a
            # connection for the deadline only; meanwhile others are served.
            slow = await trio.open_tcp_stream("127.0.0.1", port)
            await slow.send_all(b"GET /met")
            status, body = await http_get("127.0.0.1", port)
            assert status == 200 and 'pykraft_quorum_epoch{node="7"} 3.0' in body
            assert await slow.receive_some(100) == b""  # closed by the server at the deadline
            await slow.aclose()
            assert metrics.value("pykraft_metrics_requests_refused_total", reason="deadline") == 1

            # Past connections_max, a new connection is closed at once
            # (tried again until the hogs are all being served).
            refused = None
            while refused is None:
                hogs = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(4)]
                answer = await raw_exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
                for hog in hogs:
                    await hog.aclose()
                refused = metrics.value("pykraft_metrics_requests_refused_total", reason="connections_full")
            assert answer == b""
            # And the endpoint serves again once they are gone.
            # (until the server has seen the hogs go)
            while await raw_exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n") == b"":
                pass

        nursery.cancel_scope.cancel()


async def test_connections_held_open_from_one_address_do_not_stop_another_scraper():
    """Found by hand: 300 connections that each sent half a request head,
    all from one address, filled the endpoint's 16 connections, and every
    scrape from elsewhere was reset until they timed out (and they came
    back). One address now holds at most ``connections_per_address_max``."""
    metrics = Metrics(7)
    metrics.set_gauge("pykraft_quorum_epoch", 3, "Current epoch.")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(lambda task_status: serve_metrics(
            metrics, "127.0.0.1", 0, request_timeout_s=60, connections_max=8, connections_per_address_max=2,
            task_status=task_status,
        ))  # fmt: skip
        with trio.fail_after(10):
            hogs = []
            for _ in range(8):
                hog = await trio.open_tcp_stream("127.0.0.1", port, local_address="127.0.0.2")
                await hog.send_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                hogs.append(hog)
            while metrics.value("pykraft_metrics_requests_refused_total", reason="address_full") != 6:
                await trio.sleep(0.01)  # the server saw all eight: two held, six refused
            stream = await trio.open_tcp_stream("127.0.0.1", port, local_address="127.0.0.3")
            await stream.send_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            answer = b""
            while chunk := await stream.receive_some(65536):
                answer += chunk
            await stream.aclose()
            assert answer.startswith(b"HTTP/1.1 200 ") and b'pykraft_quorum_epoch{node="7"} 3.0' in answer
            for hog in hogs:
                await hog.aclose()
        nursery.cancel_scope.cancel()


async def test_a_node_with_metrics_off_keeps_none_and_serves_no_endpoint(tmp_path):
    with pytest.raises(ValueError, match="metrics_listen needs metrics_enabled"):
        NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, metrics_listen=("127.0.0.1", 0), metrics_enabled=False, plaintext=True)
    config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, data_dir=tmp_path / "off", metrics_enabled=False, plaintext=True)
    async with open_quorum_node(config) as node:
        with trio.fail_after(10):
            await node.wait_for_leader()
        await node.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
        assert node.metrics_port is None
        metrics = node.runtime.metrics
        assert metrics.value("pykraft_quorum_commit_latency_seconds_count") is None
        assert metrics.text() == ""
        # The health checks still answer (they read the node, not the registry).
        assert metrics.health_check()[0] is True


async def test_peer_round_trip_time_reads_the_socket_under_a_stream_or_nothing():
    from quorum.runtime._tcp import smoothed_round_trip_s

    # No socket beneath (a memory stream): no figure, no error.
    left, _right = trio.testing.memory_stream_pair()
    assert smoothed_round_trip_s(left) is None
    # A TCP connection that has carried data: the kernel's figure, on loopback.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    with trio.fail_after(10):
        client = await trio.open_tcp_stream("127.0.0.1", port)
        server = await listeners[0].accept()
        await client.send_all(b"ping")
        assert await server.receive_some(4) == b"ping"
        while (round_trip_s := smoothed_round_trip_s(client)) is None:  # until the ACK is in
            await trio.sleep(0.01)
    assert 0 < round_trip_s < 1.0
    for resource in (client, server, *listeners):
        await resource.aclose()
