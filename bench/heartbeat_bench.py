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

import msgpack
import trio

from quorum import Entry, ErrorCode, FetchRequest, FetchResponse, OffsetAndEpoch, RecordKind, SnapshotId
from quorum.client import QuorumClient
from quorum.runtime import scrape_metrics
from quorum.wire import FRAME_HEADER_BYTES, FrameDecoder, encode_message
from registration import BrokerHeartbeat, HeartbeatReply
from registration.client import AdminClient

from ._common import free_ports
from .reconnect_bench import register_brokers

CLUSTER_ID = "heartbeat-bench"
REQUEST_TIMEOUT_S = 5.0
# The start-up phase (every broker unfenced) ends here at the latest.
STARTUP_S_MAX = 120.0
# Between the start-up phase and the window.
WARM_UP_S = 3.0
BIN = Path(sys.executable).parent



# What a broker needs of its Fetch's answer, read straight from the msgpack
# body (positions of ``encode_fetch_response``, checked below at import)
# without the decoder's per-record checks: a real broker checks the records
# it gets on its own core, and 5,000 brokers' checks in this one process took
# most of its CPU when every broker fetched every unfencing record, on the
# two cores the controllers share with it (issue 21, docs/benchmarks.md).
_DST, _REQUEST_ID, _ERROR, _RECORDS, _DIVERGING, _SNAPSHOT_ID, _EXTENSION = 1, 3, 5, 8, 9, 10, 12


def _answer_type_code() -> int:
    """The FetchResponse's type code, once the positions above are checked."""
    sample = FetchResponse(
        src=1, dst=2, epoch=3, request_id=4, leader_id=1, error=ErrorCode.NOT_LEADER, high_watermark=5,
        log_start_offset=0, records=(Entry(5, 3, RecordKind.DATA, b"r"),),
        diverging=OffsetAndEpoch(offset=6, epoch=3), read_token=7, extension={"x": 1},
    )  # fmt: skip
    frame = encode_message(sample, correlation_id=1, cluster_id=CLUSTER_ID)
    type_code, _version, _correlation_id, _cluster_id, body = msgpack.unpackb(frame[FRAME_HEADER_BYTES:])
    assert (body[_DST], body[_REQUEST_ID], body[_ERROR], body[_RECORDS], body[_DIVERGING], body[_EXTENSION]) == (
        2, 4, int(ErrorCode.NOT_LEADER), [[5, 3, int(RecordKind.DATA), b"r"]], [3, 6], {"x": 1},
    ), "encode_fetch_response's field order changed: update the positions above"  # fmt: skip
    snapshot_answer = FetchResponse(
        src=1, dst=2, epoch=3, request_id=4, leader_id=1, high_watermark=5, log_start_offset=4,
        snapshot_id=SnapshotId(end_offset=4, epoch=2), read_token=7,
    )  # fmt: skip
    frame = encode_message(snapshot_answer, correlation_id=1, cluster_id=CLUSTER_ID)
    assert msgpack.unpackb(frame[FRAME_HEADER_BYTES:])[4][_SNAPSHOT_ID] == [4, 2], "update _SNAPSHOT_ID"
    return type_code


_FETCH_RESPONSE_TYPE_CODE = _answer_type_code()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime




def _runqueue_wait_seconds(pid: int) -> float:
    """Time ``pid``'s threads were runnable but waited for a core (the
    scheduler's run-queue delay, /proc/PID/schedstat): on a shared machine,
    the part of a process's slowness that is other processes' CPU."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9


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
        # Records the answers carried: each broker's first heartbeat unfences
        # it (one record), and every broker fetches every record.
        self.records_received = 0
        # Answers that sent a broker to the leader's snapshot.
        self.snapshots_loaded = 0
        # Brokers whose latest heartbeat reply says fenced; set once none is.
        self.fenced = set(epochs)
        self.all_unfenced = trio.Event()

    async def run(self) -> None:
        """Play the brokers until cancelled."""
        broker_ids = sorted(self.epochs)
        groups = [broker_ids[i :: self.connections] for i in range(self.connections)]
        async with trio.open_nursery() as nursery:
            for group in groups:
                nursery.start_soon(self._connection, group)

    def _note_reply(self, broker_id: int, extension: object) -> None:
        if extension is None:
            return
        if HeartbeatReply.from_extension(extension).is_fenced:
            self.fenced.add(broker_id)
        else:
            self.fenced.discard(broker_id)
            if not self.fenced:
                self.all_unfenced.set()

    async def _connection(self, broker_ids: list[int]) -> None:
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
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_again_when_unanswered)
                while True:
                    data = await stream.receive_some(1 << 20)
                    if not data:
                        nursery.cancel_scope.cancel()
                        break
                    decoder.feed(data)
                    while (payload := decoder.next_frame()) is not None:
                        type_code, _version, _correlation_id, cluster_id, body = msgpack.unpackb(payload)
                        if type_code != _FETCH_RESPONSE_TYPE_CODE or cluster_id != CLUSTER_ID:
                            continue
                        broker_id = body[_DST]
                        if outstanding.get(broker_id) != body[_REQUEST_ID]:
                            continue  # the answer to a Fetch sent again since
                        del outstanding[broker_id]
                        self.round_trips_s.append(trio.current_time() - sent_at.pop(broker_id, trio.current_time()))
                        if body[_ERROR]:
                            self.errors += 1
                            name = ErrorCode(body[_ERROR]).name
                            self.error_codes[name] = self.error_codes.get(name, 0) + 1
                            # A real broker backs off and follows the leader hint;
                            # here the run is spoiled: say so, do not spin (and
                            # do not hold up the connection's other brokers).
                            nursery.start_soon(back_off_then_send, broker_id)
                            continue
                        else:
                            self.answered += 1
                            self._note_reply(broker_id, body[_EXTENSION])
                            records = body[_RECORDS]
                            if records:
                                self.records_received += len(records)
                                offsets[broker_id] = records[-1][0] + 1
                                last_epochs[broker_id] = records[-1][1]
                            diverging = body[_DIVERGING]
                            if diverging is not None:
                                last_epochs[broker_id], offsets[broker_id] = diverging
                            snapshot_id = body[_SNAPSHOT_ID]
                            if snapshot_id is not None:
                                # Behind the leader's log start (a broker answered
                                # late, after a snapshot): a real broker loads the
                                # snapshot, and its log then ends where it does.
                                # Without this, the broker fetched below the log
                                # start for good, never caught up, stayed fenced.
                                self.snapshots_loaded += 1
                                offsets[broker_id], last_epochs[broker_id] = snapshot_id
                        await send(broker_id)
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()


async def run(
    brokers: int, seconds: float, connections: int, log_dir: str | None = None, timeline: bool = False
) -> dict[str, object]:
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

            def cpu_now() -> dict[str, float]:
                # Every process's CPU (utime + stime): the leader's, each
                # follower's and this load generator's own, which shares the
                # machine's cores with them.
                cpu = {f"c{node_id}": _cpu_seconds(process.pid) for node_id, process in processes.items()}
                cpu["bench"] = _cpu_seconds(os.getpid())
                cpu["leader_wait"] = _runqueue_wait_seconds(processes[leader].pid)
                cpu["bench_wait"] = _runqueue_wait_seconds(os.getpid())
                return cpu

            def shares(before: dict[str, float], after: dict[str, float], span_s: float) -> dict[str, float]:
                return {name: round((after[name] - before[name]) / span_s, 3) for name in after}

            async def print_timeline() -> None:
                # One line a second (--timeline): answers, records, Fetches
                # sent again and this process's CPU, to see a backlog form.
                answered, records, sent_again = load.answered, load.records_received, load.sent_again
                cpu, started_s = _cpu_seconds(os.getpid()), trio.current_time()
                while True:
                    await trio.sleep(1.0)
                    now_cpu = _cpu_seconds(os.getpid())
                    print(
                        f"[heartbeat] t={trio.current_time() - started_s:5.1f}s answered {load.answered - answered:6d}"
                        f" records {load.records_received - records:8d} sent_again {load.sent_again - sent_again:5d}"
                        f" fenced {len(load.fenced):5d} bench_cpu {now_cpu - cpu:.2f}",
                        file=sys.stderr, flush=True,
                    )  # fmt: skip
                    answered, records, sent_again, cpu = load.answered, load.records_received, load.sent_again, now_cpu

            async with trio.open_nursery() as nursery:
                if timeline:
                    nursery.start_soon(print_timeline)
                # Phase 1, start-up: every broker's first heartbeat unfences
                # it (one record each), and every broker fetches every one of
                # those records. Over when every broker's latest reply says
                # Online (or after STARTUP_S_MAX).
                print(f"[heartbeat] load starts: leader {leader}, pid {processes[leader].pid}", file=sys.stderr, flush=True)
                startup_began, cpu_startup = trio.current_time(), cpu_now()
                nursery.start_soon(load.run)
                with trio.move_on_after(STARTUP_S_MAX):
                    await load.all_unfenced.wait()
                startup_s = trio.current_time() - startup_began if load.all_unfenced.is_set() else None
                startup_shares = shares(cpu_startup, cpu_now(), trio.current_time() - startup_began)
                startup = {
                    "startup_s": None if startup_s is None else round(startup_s, 1),
                    "startup_records_received": load.records_received,
                    "startup_fetches_sent_again": load.sent_again,
                    "startup_snapshots_loaded": load.snapshots_loaded,
                    "startup_leader_cpu_share": startup_shares[f"c{leader}"],
                    "startup_bench_cpu_share": startup_shares["bench"],
                    "startup_leader_runqueue_wait_share": startup_shares["leader_wait"],
                    "startup_bench_runqueue_wait_share": startup_shares["bench_wait"],
                }
                # Phase 2, steady state: a warm-up, then the window.
                await trio.sleep(WARM_UP_S)
                print(f"[heartbeat] window starts: leader {leader}, pid {processes[leader].pid}", file=sys.stderr, flush=True)
                cpu_before = cpu_now()
                answered_before, records_before, sent_again_before = load.answered, load.records_received, load.sent_again
                round_trips_before, errors_before = len(load.round_trips_s), dict(load.error_codes)
                await trio.sleep(seconds)
                window_shares = shares(cpu_before, cpu_now(), seconds)
                heartbeats = load.answered - answered_before
                records = load.records_received - records_before
                sent_again = load.sent_again - sent_again_before
                round_trips = sorted(load.round_trips_s[round_trips_before:])
                errors = {code: count - errors_before.get(code, 0) for code, count in load.error_codes.items()}
                nursery.cancel_scope.cancel()
            text = await scrape_metrics("127.0.0.1", metrics_ports[leader])
            async with AdminClient(bootstrap, cluster_id=CLUSTER_ID) as admin:
                cluster = await admin.describe_cluster()
            online = sum(1 for broker in cluster.brokers if broker.state == "Online")
            return {
                "brokers": brokers,
                "registration_s": round(registration_s, 2),
                **startup,
                "window_s": seconds,
                "heartbeats_per_s": round(heartbeats / seconds, 1),
                "records_received_per_s": round(records / seconds, 1),
                "leader_cpu_share": window_shares[f"c{leader}"],
                "follower_cpu_shares": [window_shares[f"c{node_id}"] for node_id in sorted(processes) if node_id != leader],
                "bench_cpu_share": window_shares["bench"],
                "leader_runqueue_wait_share": window_shares["leader_wait"],
                "bench_runqueue_wait_share": window_shares["bench_wait"],
                "controller_handling_p50_s": _histogram_quantile(text, "pykraft_controller_heartbeat_seconds", 0.5),
                "controller_handling_p99_s": _histogram_quantile(text, "pykraft_controller_heartbeat_seconds", 0.99),
                # The leader's own view of its voters: the longest time
                # between two Fetches of one voter served (over the whole run;
                # the followers' fetch timeout is 2 s), and its fsyncs, which
                # run on its event loop.
                "voter_fetch_gap_max_s": round(_counter_total(text, "pykraft_quorum_voter_fetch_gap_max_seconds"), 3),
                "leader_fsync_p99_s": _histogram_quantile(text, "pykraft_quorum_fsync_duration_seconds", 0.99),
                "fetch_round_trip_p50_ms": round(round_trips[len(round_trips) // 2] * 1000, 1) if round_trips else None,
                "fetch_round_trip_p99_ms": round(round_trips[int(len(round_trips) * 0.99)] * 1000, 1) if round_trips else None,
                "fetch_errors": {code: count for code, count in sorted(errors.items()) if count},
                "fetches_sent_again": sent_again,
                "observer_messages_dropped": _counter_total(
                    text, 'pykraft_quorum_observer_messages_dropped_total{node="%d",reason="queue_full"}' % leader
                ),
                "observer_fetches_replaced": _counter_total(
                    text, 'pykraft_quorum_observer_messages_dropped_total{node="%d",reason="replaced"}' % leader
                ),
                "leader_changed": (await _leader_now(bootstrap)) != leader,
                "brokers_online": online,
                "brokers_not_online": [(b.broker_id, b.state) for b in cluster.brokers if b.state != "Online"][:5],
                "fenced_by_their_replies": sorted(load.fenced)[:5],
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
    parser.add_argument("--timeline", action="store_true", help="print answers and resends each second (stderr)")
    args = parser.parse_args(argv)
    if args.quick:
        args.brokers, args.seconds = 200, 5.0
    result = trio.run(run, args.brokers, args.seconds, args.connections, args.log_dir, args.timeline)
    print(f"heartbeat bench: {result['brokers']} brokers heartbeating through fetches, 3 controllers (fsync), {args.seconds:.0f} s window")
    for key, value in result.items():
        print(f"  {key:<28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
