"""Broker stampede after a controller failover (issue 15 part 4), on real
processes.

    .venv/bin/python -m bench.reconnect_bench [--brokers 1000] [--hold 3] [--quick] [--json OUT]

Three ``kraft-controller`` processes on loopback (fsync on, default
connection limits). ``--brokers`` brokers, played by this process (one
trio task and one TCP connection each, speaking the real protocol: a
RegisterBroker through ``ApplicationRequest``, then Fetches carrying the
heartbeat, KIP-595 observers' way), register and heartbeat until every one
is Online. The brokers' connections come from 127.0.0.2, 127.0.0.3, ...
(``BROKERS_PER_ADDRESS`` each), as brokers on several hosts would: the
nodes' per-address cap (256) stays as it is.

Then the leader is killed (SIGKILL). Every broker's connection breaks at
that instant and every broker goes to the next voter at once (no backoff, no
jitter: the worst case; a real observer waits for its fetch timeout first),
follows the leader named in the answer, and heartbeats there, or registers
again if its session had expired. Measured:

- time to a new leader (read from the survivors' metrics endpoints, which
  take none of the quorum port's connections);
- the gap between a voter's Fetches served at the new leader (its metric
  ``pykraft_quorum_voter_fetch_gap_seconds``: p50 / p99 as the upper bound
  of their histogram bucket, capped at the largest, which is exact),
  against the fetch timeout (2 s);
- whether the new leader kept its leadership (same leader and epoch at the
  end, no election started on the survivors since);
- time until every broker had a heartbeat answered "unfenced" by the new
  leader, and how many registered again;
- writes alongside (a topic created every 200 ms through the admin client):
  how many committed during the stampede, and their latency;
- the new leader's largest RSS and its CPU over the stampede.

Targets: voter fetch gap under the fetch timeout, leadership kept, every
broker back. The last line says which one missed; the exit status is 1 then.
"""

from __future__ import annotations

import argparse
import itertools
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from quorum import ErrorCode, FetchRequest, FetchResponse
from quorum.client import QuorumClient
from quorum.runtime import scrape_metrics
from quorum.wire import ApplicationRequest, ApplicationResponse, FrameDecoder, decode_message, encode_message
from registration import (
    BrokerHeartbeat,
    HeartbeatReply,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
)
from registration import ErrorCode as ControllerErrorCode
from registration import decode_message as decode_controller_message
from registration import encode_message as encode_controller_message
from registration.client import AdminClient

from ._common import free_ports, install_cleanup_handlers, latency_summary_ms, rss_bytes, write_json

CLUSTER_ID = "reconnect-bench"
BIN = Path(sys.executable).parent
FETCH_TIMEOUT_MS = 2000
# Below the nodes' connections_per_address_max (256).
BROKERS_PER_ADDRESS = 200
BROKER_ID_BASE = 1000
# A Fetch unanswered this long is presumed lost (the leader parks one for
# up to 500 ms): the broker asks the next voter.
FETCH_DEADLINE_S = 1.5
REQUEST_DEADLINE_S = 5.0
RETRY_BACKOFF_S = 0.02
WRITE_PERIOD_S = 0.2
START_WAVE_BROKERS = 50
START_WAVE_PERIOD_S = 0.1
PROGRESS_PERIOD_S = 5.0
GAP_METRIC = "pykraft_quorum_voter_fetch_gap_seconds"
GAP_MAX_METRIC = "pykraft_quorum_voter_fetch_gap_max_seconds"


def _cpu_seconds(pid: int) -> float:
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def histogram_quantile_s(text: str, name: str, quantile: float) -> float | None:
    """The upper bound of the bucket holding ``quantile`` of a Prometheus
    histogram in ``text`` (None when it is empty)."""
    buckets = []
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            bound = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if bound == "+Inf" else float(bound), float(line.rsplit(" ", 1)[1])))
    if not buckets or buckets[-1][1] == 0:
        return None
    for bound, count in buckets:
        if count >= quantile * buckets[-1][1]:
            return bound
    return None


def metric_value(text: str, name: str) -> float | None:
    """The sum of the samples of ``name`` in ``text`` (None if it has none)."""
    values = [
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{") or line.startswith(name + " ")
    ]
    return sum(values) if values else None


@dataclass(slots=True)
class FleetStats:
    """What the brokers saw, shared by their tasks."""

    online_at_s: dict[int, float] = field(default_factory=dict)  # broker -> first unfenced answer since `since_s`
    registrations: int = 0
    registration_errors: dict[str, int] = field(default_factory=dict)
    fetch_errors: dict[str, int] = field(default_factory=dict)
    reconnects: int = 0
    since_s: float = 0.0
    min_epoch: int = 0  # answers from an older quorum epoch do not count as "back"


class Broker:
    """One broker, speaking the real protocol on its own connection: it
    registers (``RegisterBroker`` in an ``ApplicationRequest``), then sends
    Fetches carrying its heartbeat to the leader, following NOT_LEADER
    answers and going to the next voter when its connection breaks."""

    def __init__(
        self, broker_id: int, voters: dict[int, int], source: str, stats: FleetStats, start_offset: int
    ) -> None:
        self.broker_id = broker_id
        self.voters = voters
        self.voter_ids = sorted(voters)
        self.source = source
        self.stats = stats
        self.target = self.voter_ids[broker_id % len(self.voter_ids)]
        self.epoch = 0
        self.broker_epoch: int | None = None
        self.fetch_offset = start_offset
        self.last_fetched_epoch = 0
        self.request_ids = itertools.count((random.getrandbits(30) << 32) + 1)
        self.correlation = itertools.count(1)

    def _next_voter(self) -> None:
        self.target = self.voter_ids[(self.voter_ids.index(self.target) + 1) % len(self.voter_ids)]

    async def run(self) -> None:
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", self.voters[self.target], local_address=self.source)
            except OSError:
                self._next_voter()
                await trio.sleep(RETRY_BACKOFF_S)
                continue
            try:
                async with stream:
                    await self._session(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, EOFError, trio.TooSlowError):
                self._next_voter()
            self.stats.reconnects += 1

    async def _session(self, stream: trio.SocketStream) -> None:
        """Until the connection breaks or the leader is elsewhere."""
        decoder = FrameDecoder()

        async def call(message: Any, deadline_s: float) -> Any:
            await stream.send_all(encode_message(message, correlation_id=next(self.correlation), cluster_id=CLUSTER_ID))
            with trio.fail_after(deadline_s):
                while True:
                    payload = decoder.next_frame()
                    if payload is not None:
                        return decode_message(payload, expected_cluster_id=CLUSTER_ID).message
                    data = await stream.receive_some(1 << 20)
                    if not data:
                        raise EOFError("closed")
                    decoder.feed(data)

        while True:
            if self.broker_epoch is None:
                request = RegisterBrokerRequest(
                    broker_id=self.broker_id,
                    incarnation_id=f"bench-{self.broker_id}",
                    cluster_id=CLUSTER_ID,
                    listeners=(("PLAINTEXT", "127.0.0.1", 9000 + self.broker_id),),
                )
                answer = await call(ApplicationRequest(payload=encode_controller_message(request)), REQUEST_DEADLINE_S)
                if not isinstance(answer, ApplicationResponse) or answer.error is not ErrorCode.NONE:
                    hint = getattr(answer, "leader_hint", None)
                    if hint in self.voters and hint != self.target:
                        self.target = hint
                        return
                    await trio.sleep(RETRY_BACKOFF_S * 10)
                    self._next_voter()
                    return
                response = decode_controller_message(answer.payload)
                assert isinstance(response, RegisterBrokerResponse)
                self.stats.registrations += 1
                if response.error is not ControllerErrorCode.NONE:
                    name = response.error.name
                    self.stats.registration_errors[name] = self.stats.registration_errors.get(name, 0) + 1
                    await trio.sleep(0.5)  # the controller asks for time (a duplicate whose session has not expired)
                    continue
                self.broker_epoch = response.broker_epoch
            heartbeat = BrokerHeartbeat(broker_id=self.broker_id, broker_epoch=self.broker_epoch)
            request = FetchRequest(
                src=self.broker_id,
                dst=self.target,
                epoch=self.epoch,
                fetch_offset=self.fetch_offset,
                last_fetched_epoch=self.last_fetched_epoch,
                request_id=next(self.request_ids),
                extension=heartbeat.to_extension(),
            )
            response = await call(request, FETCH_DEADLINE_S)
            if not isinstance(response, FetchResponse):
                continue
            if response.epoch > self.epoch:
                self.epoch = response.epoch
            if response.error:
                name = response.error.name
                self.stats.fetch_errors[name] = self.stats.fetch_errors.get(name, 0) + 1
                if response.leader_id in self.voters and response.leader_id != self.target:
                    self.target = response.leader_id
                    return
                if response.error is ErrorCode.NOT_LEADER:
                    await trio.sleep(RETRY_BACKOFF_S)
                    self._next_voter()
                    return
                continue
            if response.diverging is not None:
                self.fetch_offset = response.diverging.offset
                self.last_fetched_epoch = response.diverging.epoch
            elif response.records:
                self.fetch_offset = response.records[-1].offset + 1
                self.last_fetched_epoch = response.records[-1].epoch
            try:
                reply = HeartbeatReply.from_extension(response.extension)
            except ValueError:
                continue
            if reply.error is ControllerErrorCode.STALE_BROKER_EPOCH or reply.should_shutdown:
                self.broker_epoch = None  # the controller forgot us: register again
            elif reply.error is ControllerErrorCode.NONE and not reply.is_fenced and self.epoch >= self.stats.min_epoch:
                self.stats.online_at_s.setdefault(self.broker_id, trio.current_time())


async def _cluster_ready(bootstrap: list[str]) -> bool:
    """The active controller answers a DescribeCluster."""
    try:
        async with AdminClient(bootstrap, cluster_id=CLUSTER_ID, timeout_s=5) as admin:
            await admin.describe_cluster()
    except Exception:  # noqa: BLE001 - not yet
        return False
    return True


async def register_brokers(
    bootstrap: list[str], broker_ids: range, cluster_id: str = CLUSTER_ID, in_flight: int = 64
) -> dict[int, int]:
    """Register every broker through the admin client (retrying while no
    leader answers), up to ``in_flight`` registrations at once (one at a
    time, 5,000 brokers took 213 s at load 20: a commit round each); their
    epochs. Raises ``RuntimeError`` when one is refused. Also used by
    ``bench.heartbeat_bench``."""
    epochs: dict[int, int] = {}
    failures: list[str] = []
    slots = trio.Semaphore(in_flight)

    async def register(admin: AdminClient, broker_id: int) -> None:
        request = RegisterBrokerRequest(
            broker_id=broker_id,
            incarnation_id=f"bench-{broker_id}",
            cluster_id=cluster_id,
            listeners=(("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
        )
        try:
            for _ in range(100):
                response = await admin.register_broker(request)
                if response.error.name != "NOT_LEADER":
                    break
                await trio.sleep(0.05)
            if response.error is not ControllerErrorCode.NONE:
                failures.append(f"registration of {broker_id} failed: {response.error.name} {response.message}")
                return
            epochs[broker_id] = response.broker_epoch
        finally:
            slots.release()

    async with AdminClient(bootstrap, cluster_id=cluster_id, timeout_s=30) as admin:
        async with trio.open_nursery() as nursery:
            for broker_id in broker_ids:
                await slots.acquire()
                if failures:
                    slots.release()
                    break
                nursery.start_soon(register, admin, broker_id)
    if failures:
        raise RuntimeError(failures[0])
    return dict(sorted(epochs.items()))


async def _progress(stats: FleetStats, brokers: int) -> None:
    """A line on stderr every few seconds: how far the brokers are."""
    while True:
        await trio.sleep(PROGRESS_PERIOD_S)
        print(
            f"[reconnect_bench] {len(stats.online_at_s)}/{brokers} unfenced, {stats.registrations} registrations,"
            f" errors {stats.registration_errors} {stats.fetch_errors}, {stats.reconnects} reconnects",
            file=sys.stderr,
            flush=True,
        )


async def _leader(metrics_ports: dict[int, int], timeout_s: float = 5.0) -> tuple[int, int] | None:
    """(leader, epoch) from the first voter whose metrics name a leader that
    itself says it leads. Read from the metrics endpoint, not the quorum
    port: asking must not take one of the connections the brokers fill."""
    views: dict[int, tuple[int, int, str]] = {}
    for node_id in sorted(metrics_ports):
        try:
            with trio.fail_after(timeout_s):
                text = await scrape_metrics("127.0.0.1", metrics_ports[node_id])
        except (OSError, trio.TooSlowError):
            continue
        leader, epoch = metric_value(text, "pykraft_quorum_leader_id"), metric_value(text, "pykraft_quorum_epoch")
        # One sample per role, 1 for the current one (prometheus_client).
        role = next(
            (
                line.split('role="')[1].split('"')[0]
                for line in text.splitlines()
                if line.startswith("pykraft_quorum_role{") and float(line.rsplit(" ", 1)[1]) == 1
            ),
            "",
        )
        if leader is not None and epoch is not None:
            views[node_id] = (int(leader), int(epoch), role)
    for node_id, (leader, epoch, role) in sorted(views.items()):
        if leader == node_id and role == "leader":
            return leader, epoch
    return None


async def _wait(predicate: Any, timeout_s: float, what: str, step_s: float = 0.05) -> float:
    started = trio.current_time()
    with trio.move_on_after(timeout_s):
        while not await predicate():
            await trio.sleep(step_s)
        return trio.current_time() - started
    raise RuntimeError(f"{what} not within {timeout_s:.0f} s")


async def run(brokers: int, hold_s: float, data_dir: str) -> dict[str, Any]:
    """The whole benchmark; returns its figures. Raises ``RuntimeError``
    when the cluster or the brokers do not come up."""
    ports = free_ports(6)
    voters = {i + 1: ports[i] for i in range(3)}
    metrics_ports = {i + 1: ports[3 + i] for i in range(3)}
    voters_arg = ",".join(f"{i}@127.0.0.1:{p}" for i, p in voters.items())
    bootstrap = [f"{i}@127.0.0.1:{p}" for i, p in voters.items()]
    processes = {
        node_id: subprocess.Popen(
            [str(BIN / "kraft-controller"), "--plaintext", "--node-id", str(node_id), "--voters", voters_arg,
             "--data-dir", f"{data_dir}/c{node_id}", "--cluster-id", CLUSTER_ID,
             "--fetch-timeout-ms", str(FETCH_TIMEOUT_MS),
             "--metrics", f"127.0.0.1:{metrics_ports[node_id]}", "--log-level", "WARNING"],
            stdout=subprocess.DEVNULL, stderr=open(f"{data_dir}/c{node_id}.log", "wb"),
        )
        for node_id in voters
    }  # fmt: skip
    stats = FleetStats()
    try:
        async def has_leader() -> bool:
            return await _leader(metrics_ports) is not None

        await _wait(has_leader, 60, "a first leader")
        await _wait(lambda: _cluster_ready(bootstrap), 60, "the controller")
        # Registered first, through the admin client: one process playing
        # every broker would otherwise decode each broker's share of the
        # registrations' records a thousand times over (every commit answers
        # every parked broker Fetch), which real brokers, each in its own
        # process, do not pay together.
        started = trio.current_time()
        broker_epochs = await register_brokers(bootstrap, range(BROKER_ID_BASE, BROKER_ID_BASE + brokers))
        registration_s = trio.current_time() - started
        async with QuorumClient(bootstrap, cluster_id=CLUSTER_ID) as client:
            start_offset = (await client.describe()).high_watermark
        fleet = [
            Broker(BROKER_ID_BASE + i, voters, f"127.0.0.{2 + i // BROKERS_PER_ADDRESS}", stats, start_offset)
            for i in range(brokers)
        ]
        for broker in fleet:
            broker.broker_epoch = broker_epochs[broker.broker_id]
        async with trio.open_nursery() as nursery:
            started = trio.current_time()
            nursery.start_soon(_progress, stats, brokers)
            # The brokers start over a couple of seconds (a cluster's brokers
            # do not all start in one millisecond); the failover is the
            # stampede measured.
            for number, broker in enumerate(fleet):
                nursery.start_soon(broker.run)
                if number % START_WAVE_BROKERS == START_WAVE_BROKERS - 1:
                    await trio.sleep(START_WAVE_PERIOD_S)

            async def all_online() -> bool:
                return len(stats.online_at_s) == brokers

            await _wait(all_online, 300, f"{brokers} brokers Online")
            startup_s = trio.current_time() - started
            await trio.sleep(2.0)  # steady heartbeats
            await _wait(has_leader, 60, "the leader's metrics")
            found = await _leader(metrics_ports)
            assert found is not None
            old_leader, old_epoch = found
            survivors = {node_id: port for node_id, port in metrics_ports.items() if node_id != old_leader}
            registrations_before = stats.registrations
            stats.online_at_s.clear()
            stats.min_epoch = old_epoch + 1
            processes[old_leader].kill()
            killed_at = trio.current_time()
            stats.since_s = killed_at

            new: list[tuple[int, int]] = []

            async def new_leader() -> bool:
                found = await _leader(survivors)
                if found is not None and found[1] > old_epoch:
                    new.append(found)
                    return True
                return False

            failover_s = await _wait(new_leader, 30, "a new leader", step_s=0.01)
            leader, epoch = new[-1]
            leader_pid = processes[leader].pid
            cpu_before = _cpu_seconds(leader_pid)
            own_cpu_before = time.process_time()
            elections_before = {
                node_id: metric_value(await scrape_metrics("127.0.0.1", metrics_ports[node_id]), "pykraft_quorum_elections_started_total")
                for node_id in survivors
            }
            refused_before = metric_value(
                await scrape_metrics("127.0.0.1", metrics_ports[leader]), "pykraft_quorum_connections_refused_total"
            ) or 0
            rss_peak = [rss_bytes(leader_pid) or 0]
            write_latencies_s: list[float] = []
            write_failures = [0]
            stop = trio.Event()

            async def sample_rss() -> None:
                while not stop.is_set():
                    rss_peak[0] = max(rss_peak[0], rss_bytes(leader_pid) or 0)
                    await trio.sleep(0.1)

            async def write() -> None:
                async with AdminClient(bootstrap, cluster_id=CLUSTER_ID, timeout_s=10) as admin:
                    for number in itertools.count():
                        if stop.is_set():
                            return
                        sent = time.perf_counter()
                        try:
                            response = await admin.create_topic(f"stampede-{number}", partitions=1, replication_factor=1)
                            ok = response.error.name == "NONE"
                        except Exception:  # noqa: BLE001 - counted, not fatal
                            ok = False
                        if ok:
                            write_latencies_s.append(time.perf_counter() - sent)
                        else:
                            write_failures[0] += 1
                        await trio.sleep(WRITE_PERIOD_S)

            async with trio.open_nursery() as watchers:
                watchers.start_soon(sample_rss)
                watchers.start_soon(write)
                await _wait(all_online, 120, f"{brokers} brokers back")
                back_s = max(stats.online_at_s.values()) - killed_at
                await trio.sleep(hold_s)
                stop.set()
            stampede_s = trio.current_time() - killed_at
            cpu_s = _cpu_seconds(leader_pid) - cpu_before
            own_cpu_s = time.process_time() - own_cpu_before
            text = await scrape_metrics("127.0.0.1", metrics_ports[leader])
            elections_after = {
                node_id: metric_value(await scrape_metrics("127.0.0.1", metrics_ports[node_id]), "pykraft_quorum_elections_started_total")
                for node_id in survivors
            }
            final = await _leader(survivors)
            refused = (metric_value(text, "pykraft_quorum_connections_refused_total") or 0) - refused_before
            nursery.cancel_scope.cancel()
        gap_max_s = metric_value(text, GAP_MAX_METRIC)

        def gap_quantile_s(quantile: float) -> float | None:
            # A bucket's upper bound, but never above the largest gap seen.
            bound = histogram_quantile_s(text, GAP_METRIC, quantile)
            return None if bound is None or gap_max_s is None else min(bound, gap_max_s)

        return {
            "brokers": brokers,
            "registration_s": round(registration_s, 2),
            "startup_all_online_s": round(startup_s, 2),
            "killed": old_leader,
            "new_leader": leader,
            "failover_s": round(failover_s, 3),
            "voter_fetch_gap_p50_ms_at_most": _ms(gap_quantile_s(0.5)),
            "voter_fetch_gap_p99_ms_at_most": _ms(gap_quantile_s(0.99)),
            "voter_fetch_gap_max_ms": _ms(gap_max_s),
            "fetch_timeout_ms": FETCH_TIMEOUT_MS,
            "leadership_kept": final == (leader, epoch) and elections_after == elections_before,
            "all_brokers_back_s": round(back_s, 3),
            "registered_again": stats.registrations - registrations_before,
            "writes_during": len(write_latencies_s),
            "write_failures_during": write_failures[0],
            "write_latency_ms": latency_summary_ms(write_latencies_s) if write_latencies_s else None,
            "leader_rss_peak_mb": round(rss_peak[0] / 1e6, 1),
            "leader_cpu_share": round(cpu_s / stampede_s, 3),
            # The brokers' process (this one): near 1.0, it is what is slow.
            "brokers_cpu_share": round(own_cpu_s / stampede_s, 3),
            "fetch_errors": dict(sorted(stats.fetch_errors.items())),
            "registration_errors": dict(sorted(stats.registration_errors.items())),
            "reconnects": stats.reconnects,
            "connections_refused_at_leader": int(refused),
        }
    except BaseException:
        for node_id in voters:  # what the controllers said, for the reader
            lines = Path(f"{data_dir}/c{node_id}.log").read_text(errors="replace").splitlines()
            print(f"[reconnect_bench] controller {node_id}'s last log lines:", *lines[-15:], sep="\n  ", file=sys.stderr)
        raise
    finally:
        for process in processes.values():
            process.kill()
            process.wait(timeout=10)


def _ms(value_s: float | None) -> float | None:
    return None if value_s is None else round(value_s * 1000, 1)


def missed_targets(result: dict[str, Any]) -> list[str]:
    """The targets a run missed (empty: met)."""
    missed = []
    gap = result["voter_fetch_gap_max_ms"]
    if gap is None or gap >= result["fetch_timeout_ms"]:
        missed.append(f"voter fetch gap {gap} ms not under the fetch timeout")
    if not result["leadership_kept"]:
        missed.append("leadership lost")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reconnect_bench")
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--hold", type=float, default=3.0, help="seconds the leader must hold on after every broker is back")
    parser.add_argument("--quick", action="store_true", help="200 brokers")
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.brokers = 200
    install_cleanup_handlers()  # SIGTERM unwinds: the controllers are killed
    with tempfile.TemporaryDirectory(prefix="reconnect-bench-") as directory:
        result = trio.run(run, args.brokers, args.hold, directory)
    print(f"reconnect bench: {result['brokers']} brokers, 3 controllers (fsync), the leader killed (SIGKILL)")
    for key, value in result.items():
        print(f"  {key:<24} {value}")
    missed = missed_targets(result)
    print("  targets: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
    if args.json_path:
        write_json(args.json_path, result)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
