"""A failed or indeterminate operation of the register workload names the
node it was sent to (issue 19: the report counts failures by reason and
node, and a register failure without one was counted as "not recorded").
Real sockets to a controller that never answers and to one that refuses
connections; time is trio's mock clock."""

from __future__ import annotations

import contextlib
import functools
import json
import random
import socket

import trio

from jepsen_like.campaign._history import HistoryRecorder
from jepsen_like.campaign._workloads import ClientEndpoints, Workload, WorkloadOptions
from jepsen_like.report._load import NO_NODE, Op, failure_breakdown


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _silent_controller(nursery: trio.Nursery) -> int:
    """A TCP server that reads requests and never answers."""

    async def swallow(stream: trio.SocketStream) -> None:
        async with stream:
            while await stream.receive_some(65536):
                pass

    listeners = await nursery.start(functools.partial(trio.serve_tcp, swallow, 0, host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1]


async def _run_register_workload(tmp_path, controllers: list[str]) -> list[dict]:
    history = HistoryRecorder(tmp_path / "history.jsonl")
    options = WorkloadOptions(kind="register", clients=2, request_timeout_s=1.0, think_s=0.01)
    endpoints = ClientEndpoints(controllers, {}, contextlib.nullcontext)
    workload = Workload(history, lambda _: endpoints, options, cluster_id="c", rng=random.Random(5))
    await workload.run(trio.current_time() + 12.0)
    history.close()
    return [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]


def _completions(events: list[dict]) -> list[dict]:
    return [event for event in events if event["type"] in ("fail", "info")]


async def test_operations_a_controller_never_answered_are_indeterminate_at_that_node(tmp_path, autojump_clock):
    async with trio.open_nursery() as nursery:
        port = await _silent_controller(nursery)
        events = await _run_register_workload(tmp_path, [f"7@127.0.0.1:{port}"])
        nursery.cancel_scope.cancel()
    completions = _completions(events)
    assert {event["f"] for event in completions} >= {"read", "write"}
    assert completions and {(event["type"], event.get("node")) for event in completions} == {("info", "7")}, completions


async def test_operations_no_controller_could_take_fail_at_the_node_tried(tmp_path, autojump_clock):
    events = await _run_register_workload(tmp_path, [f"8@127.0.0.1:{_closed_port()}"])
    completions = _completions(events)
    assert completions and {(event["type"], event.get("node")) for event in completions} == {("fail", "8")}, completions
    # The report's failures table: every failure has its node.
    ops = [
        Op(index=event["index"], process=event["process"], f=event["f"], key=event["key"], invoke_value=None, time_ns=0,
           outcome=event["type"], extra={"node": event.get("node"), "error": event.get("error")})
        for event in completions
    ]  # fmt: skip
    assert all(node != NO_NODE for (_, node, _) in failure_breakdown(ops))


async def test_the_final_reads_end_in_their_time_limit_when_no_controller_answers(tmp_path, autojump_clock, caplog):
    """Each key's final read gets two attempts of up to 10 s; against a
    cluster that never answers, the phase ends at its time limit instead
    of running for every key (a membership run sat in it for hours), and
    says so."""
    async with trio.open_nursery() as nursery:
        port = await _silent_controller(nursery)
        history = HistoryRecorder(tmp_path / "history.jsonl")
        endpoints = ClientEndpoints([f"7@127.0.0.1:{port}"], {}, contextlib.nullcontext)
        workload = Workload(history, lambda _: endpoints, WorkloadOptions(kind="register", clients=1), cluster_id="c",
                            rng=random.Random(5))  # fmt: skip
        workload.touched_keys = lambda: [f"r{index}" for index in range(40)]  # type: ignore[method-assign]
        started = trio.current_time()
        await workload.final_reads(endpoints, time_limit_s=60.0)
        took_s = trio.current_time() - started
        history.close()
        nursery.cancel_scope.cancel()
    assert 60.0 <= took_s < 61.0  # not 40 keys x 2 attempts x 10 s
    finals = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert {event["key"] for event in finals} < {f"r{index}" for index in range(40)}  # keys left unread
    assert any("final reads stopped after 60 s" in record.getMessage() for record in caplog.records)


async def test_the_kafka_final_reads_end_in_their_time_limit_when_no_broker_answers(tmp_path, autojump_clock, caplog, monkeypatch):
    """The Kafka workload's final reads (every touched topic from every
    broker, two attempts each, each up to the request timeout) end at the
    same time limit, and say so."""
    from jepsen_like.campaign import _kafka_workload

    brokers = {broker_id: ("127.0.0.1", _closed_port()) for broker_id in (1, 2, 3)}
    endpoints = ClientEndpoints([], brokers, contextlib.nullcontext)
    history = HistoryRecorder(tmp_path / "history.jsonl")
    workload = _kafka_workload.KafkaWorkload(history, lambda _: endpoints, WorkloadOptions(clients=1), rng=random.Random(5))
    for _ in range(10):
        workload._new_topic().ops = 1
    attempts = []

    async def read_timing_out(session, topic, broker_id, *, final=False):
        attempts.append((topic.name, broker_id))
        await trio.sleep(workload.options.request_timeout_s)  # what a broker that never answers costs
        return False

    monkeypatch.setattr(workload, "_open", lambda process, _endpoints: _kafka_workload._Session(process))
    monkeypatch.setattr(workload, "_read", read_timing_out)
    started = trio.current_time()
    await workload.final_reads(endpoints, time_limit_s=60.0)
    took_s = trio.current_time() - started
    history.close()
    touched = len(workload.touched_keys()) * len(brokers)
    assert 60.0 <= took_s < 60.0 + workload.options.request_timeout_s
    assert len(attempts) < 2 * touched  # (topic, broker) reads left
    assert any("final reads stopped after 60 s" in record.getMessage() for record in caplog.records)
