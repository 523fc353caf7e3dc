"""Heartbeat capacity: N brokers heartbeating through their metadata fetches
against one controller, end to end.

Three ``kraft-controller`` processes on loopback (fsync on). N brokers are
registered through the admin client; then a load generator (this process)
plays every broker's observer: each sends a Fetch carrying its heartbeat,
waits for the answer (the leader parks a caught-up Fetch up to 500 ms, the
long poll), and sends the next at once — about two heartbeats per broker per
second, as real brokers do. Measured over a window:

- heartbeats per second the leader answered;
- the leader process's CPU share (utime + stime from /proc, over the window);
- the controller's own heartbeat handling time (p50 / p99, from its metrics
  histogram) — the latency the controller adds;
- brokers Online at the end (every broker unfenced through these fetches).

Run: ``python -m bench.heartbeat_bench [--brokers 1000] [--seconds 20]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from quorum import FetchRequest, FetchResponse
from quorum.client import QuorumClient
from quorum.runtime import scrape_metrics
from quorum.wire import FrameDecoder, decode_message, encode_message
from registration import BrokerHeartbeat
from registration.client import AdminClient

from ._common import free_ports
from .reconnect_bench import register_brokers

CLUSTER_ID = "heartbeat-bench"
REQUEST_TIMEOUT_S = 5.0
BIN = Path(sys.executable).parent



def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime




def _histogram_quantile(text: str, name: str, quantile: float) -> float | None:
    buckets = []
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            bound = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if bound == "+Inf" else float(bound), float(line.rsplit(" ", 1)[1])))
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    for bound, count in buckets:
        if count >= quantile * total:
            return bound
    return None


def _counter_total(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


class BrokerLoad:
    """Plays ``brokers`` observers over a few TCP connections to the leader."""

    def __init__(
        self, leader_port: int, leader_id: int, epoch: int, epochs: dict[int, int], connections: int, start_offset: int
    ) -> None:
        # Brokers in steady state: caught up with the log (a broker that
        # restarts loads a snapshot first), so each fetch is a heartbeat.
        self.start_offset = start_offset
        self.leader_port = leader_port
        self.leader_id = leader_id
        self.epoch = epoch
        self.epochs = epochs
        self.connections = connections
        self.answered = 0
        self.errors = 0
        self.error_codes: dict[str, int] = {}
        self.round_trips_s: list[float] = []
        # Fetches sent again after no answer for REQUEST_TIMEOUT_S (a real
        # broker's request timeout: the leader drops brokers' Fetches past
        # its observer queue's bound, and a dropped one is never answered).
        self.sent_again = 0

    async def run(self, deadline_s: float) -> None:
        broker_ids = sorted(self.epochs)
        groups = [broker_ids[i :: self.connections] for i in range(self.connections)]
        async with trio.open_nursery() as nursery:
            for group in groups:
                nursery.start_soon(self._connection, group, deadline_s)

    async def _connection(self, broker_ids: list[int], deadline_s: float) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", self.leader_port)
        correlation = itertools.count(1)
        request_ids = itertools.count(1)
        offsets = {broker_id: self.start_offset for broker_id in broker_ids}
        last_epochs = {broker_id: self.epoch for broker_id in broker_ids}
        sent_at: dict[int, float] = {}
        outstanding: dict[int, int] = {}  # broker -> request id of its Fetch in flight
        lock = trio.Lock()

        async def send(broker_id: int) -> None:
            request_id = next(request_ids)
            extension = BrokerHeartbeat(broker_id=broker_id, broker_epoch=self.epochs[broker_id]).to_extension()
            request = FetchRequest(
                src=broker_id,
                dst=self.leader_id,
                epoch=self.epoch,
                fetch_offset=offsets[broker_id],
                last_fetched_epoch=last_epochs[broker_id],
                request_id=request_id,
                extension=extension,
            )
            sent_at[broker_id] = trio.current_time()
            outstanding[broker_id] = request_id
            async with lock:
                await stream.send_all(encode_message(request, correlation_id=next(correlation), cluster_id=CLUSTER_ID))

        async def send_again_when_unanswered() -> None:
            while True:
                await trio.sleep(1.0)
                now = trio.current_time()
                for broker_id, at in list(sent_at.items()):
                    if now - at > REQUEST_TIMEOUT_S:
                        self.sent_again += 1
                        await send(broker_id)

        async def back_off_then_send(broker_id: int) -> None:
            await trio.sleep(0.1)
            await send(broker_id)

        for broker_id in broker_ids:
            await send(broker_id)
        decoder = FrameDecoder()
        with trio.move_on_at(deadline_s):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_again_when_unanswered)
                while True:
                    data = await stream.receive_some(1 << 20)
                    if not data:
                        nursery.cancel_scope.cancel()
                        break
                    decoder.feed(data)
                    while (payload := decoder.next_frame()) is not None:
                        response = decode_message(payload, expected_cluster_id=CLUSTER_ID).message
                        if not isinstance(response, FetchResponse):
                            continue
                        broker_id = response.dst
                        if outstanding.get(broker_id) != response.request_id:
                            continue  # the answer to a Fetch sent again since
                        del outstanding[broker_id]
                        self.round_trips_s.append(trio.current_time() - sent_at.pop(broker_id, trio.current_time()))
                        if response.error:
                            self.errors += 1
                            self.error_codes[response.error.name] = self.error_codes.get(response.error.name, 0) + 1
                            # A real broker backs off and follows the leader hint;
                            # here the run is spoiled: say so, do not spin (and
                            # do not hold up the connection's other brokers).
                            nursery.start_soon(back_off_then_send, broker_id)
                            continue
                        else:
                            self.answered += 1
                            if response.records:
                                offsets[broker_id] = response.records[-1].offset + 1
                                last_epochs[broker_id] = response.records[-1].epoch
                            if response.diverging is not None:
                                offsets[broker_id] = response.diverging.offset
                                last_epochs[broker_id] = response.diverging.epoch
                        await send(broker_id)
        await stream.aclose()


async def run(brokers: int, seconds: float, connections: int, log_dir: str | None = None) -> dict[str, object]:
    ports = free_ports(6)
    voters = {i + 1: ports[i] for i in range(3)}
    metrics_ports = {i + 1: ports[3 + i] for i in range(3)}
    voters_arg = ",".join(f"{i}@127.0.0.1:{p}" for i, p in voters.items())
    bootstrap = [f"{i}@127.0.0.1:{p}" for i, p in voters.items()]
    with tempfile.TemporaryDirectory(prefix="heartbeat-bench-") as directory:
        processes = {
            node_id: subprocess.Popen(
                [str(BIN / "kraft-controller"), "--plaintext", "--node-id", str(node_id), "--voters", voters_arg,
                 "--data-dir", f"{directory}/c{node_id}", "--cluster-id", CLUSTER_ID,
                 "--metrics", f"127.0.0.1:{metrics_ports[node_id]}",
                 "--log-level", "WARNING" if log_dir is None else "INFO"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL if log_dir is None else open(f"{log_dir}/c{node_id}.log", "wb"),
            )
            for node_id in voters
        }  # fmt: skip
        try:
            started = time.perf_counter()
            epochs = await register_brokers(bootstrap, range(1000, 1000 + brokers), CLUSTER_ID)
            registration_s = time.perf_counter() - started
            async with QuorumClient(bootstrap, cluster_id=CLUSTER_ID) as client:
                description = await client.describe()
            leader = description.leader_id
            assert leader is not None
            load = BrokerLoad(voters[leader], leader, description.epoch, epochs, connections, description.high_watermark)
            warm_up_s = 3.0
            window_started = trio.current_time() + warm_up_s
            cpu_before: list[float] = []
            answered_before: list[int] = []

            async def sample_start() -> None:
                await trio.sleep_until(window_started)
                cpu_before.append(_cpu_seconds(processes[leader].pid))
                print(f"[heartbeat] window starts: leader {leader}, pid {processes[leader].pid}", file=sys.stderr, flush=True)
                answered_before.append(load.answered)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(sample_start)
                await load.run(window_started + seconds)
            cpu_s = _cpu_seconds(processes[leader].pid) - cpu_before[0]
            heartbeats = load.answered - answered_before[0]
            text = await scrape_metrics("127.0.0.1", metrics_ports[leader])
            async with AdminClient(bootstrap, cluster_id=CLUSTER_ID) as admin:
                cluster = await admin.describe_cluster()
            online = sum(1 for broker in cluster.brokers if broker.state == "Online")
            round_trips = sorted(load.round_trips_s)
            return {
                "brokers": brokers,
                "registration_s": round(registration_s, 2),
                "window_s": seconds,
                "heartbeats_per_s": round(heartbeats / seconds, 1),
                "leader_cpu_share": round(cpu_s / seconds, 3),
                "controller_handling_p50_s": _histogram_quantile(text, "pykraft_controller_heartbeat_seconds", 0.5),
                "controller_handling_p99_s": _histogram_quantile(text, "pykraft_controller_heartbeat_seconds", 0.99),
                "fetch_round_trip_p50_ms": round(round_trips[len(round_trips) // 2] * 1000, 1) if round_trips else None,
                "fetch_round_trip_p99_ms": round(round_trips[int(len(round_trips) * 0.99)] * 1000, 1) if round_trips else None,
                "fetch_errors": dict(sorted(load.error_codes.items())),
                "fetches_sent_again": load.sent_again,
                "observer_messages_dropped": _counter_total(text, "pykraft_quorum_observer_messages_dropped_total"),
                "leader_changed": (await _leader_now(bootstrap)) != leader,
                "brokers_online": online,
            }
        finally:
            for process in processes.values():
                process.kill()
                process.wait(timeout=10)


async def _leader_now(bootstrap: list[str]) -> int | None:
    async with QuorumClient(bootstrap, cluster_id=CLUSTER_ID) as client:
        return (await client.describe()).leader_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.heartbeat_bench")
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--connections", type=int, default=10, help="TCP connections the brokers share")
    parser.add_argument("--quick", action="store_true", help="200 brokers for 5 s")
    parser.add_argument("--log-dir", help="keep each controller's log (INFO and above) here, as cN.log")
    args = parser.parse_args(argv)
    if args.quick:
        args.brokers, args.seconds = 200, 5.0
    result = trio.run(run, args.brokers, args.seconds, args.connections, args.log_dir)
    print(f"heartbeat bench: {result['brokers']} brokers heartbeating through fetches, 3 controllers (fsync), {args.seconds:.0f} s window")
    for key, value in result.items():
        print(f"  {key:<28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
