"""TLS on against off, in one process: CPU time and latency per write over
real loopback sockets, without disks.

    python -m bench.tls_cpu_bench [--writes 1000] [--rounds 3] [--processes]

Three voters (``open_quorum_node``, memory storage) and one ``QuorumClient``
share the process and talk over loopback TCP, once plaintext and once with
mutual TLS 1.3 on every connection (certificates from
``create_cluster_certificates``, the client as ``pykraft://client/admin``).
The two alternate within each round, so both see the same load on the
machine. Process CPU time per committed write is the figure to trust on a
shared machine (all four parties' work: client, leader, two followers);
the wall-clock rows (sequential p50, writes/s with 64 in flight, records/s
in batches of 100) move with everything else the machine runs. Prints the
median of ``--rounds`` for each row and TLS's cost against plaintext.

With ``--processes`` the voters are three ``kraft-quorum node`` processes
instead (``bench.quorum_bench``'s ``pykraft`` and ``pykraft-tls`` peers,
fsync on), and the CPU rows add up the three nodes' CPU time (from
``/proc``) with the client's.

``--batched`` measures only what ``bench.quorum_bench``'s batched rows
do, against the node processes, each part apart: a new client's first
batch of 100 (connecting to the first bootstrap node, then to the leader
if that was not it: under TLS, a handshake each, counted as full or
resumed), then batches of 100 from one connected client and from
``BATCH_CLIENTS`` connected clients at once, each client's first answer
excluded (CPU per record of all four processes, records/s, p50 / p99).

``--reconnects N`` measures what a reconnect costs instead: N connections
to one TLS listener in this process (``TlsConfig.connect``, as a client or
a node dials; the server's handshake as a node's listener does it; one
small read each, which brings the session ticket), once with a full
handshake every time and once resuming the session, alternating within
each round; CPU time is both ends'.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from quorum.client import QuorumClient
from quorum.runtime import KeyValueStateMachine, NodeConfig, TlsConfig, create_cluster_certificates, open_quorum_node

from ._common import free_ports

CLUSTER_ID = "tls-bench"
IN_FLIGHT = 64
BATCH_RECORDS = 100
# Clients of the concurrent batched rows (as bench.quorum_bench's).
BATCH_CLIENTS = 8
# New clients timed per round for the "first batch" row of ``--batched``.
NEW_CLIENTS = 5
# The rows, in print order: (key, label, unit, whether more is better).
ROWS = (
    ("seq_cpu_us", "CPU per write, sequential", "µs", False),
    ("inflight_cpu_us", f"CPU per write, {IN_FLIGHT} in flight", "µs", False),
    ("batch_cpu_us", f"CPU per record, batches of {BATCH_RECORDS}", "µs", False),
    ("seq_p50_ms", "sequential write p50", "ms", False),
    ("inflight_per_s", f"{IN_FLIGHT} in flight writes/s", "/s", True),
    ("batch_records_per_s", f"batched records/s ({BATCH_RECORDS} per batch)", "/s", True),
)


async def one_round(writes: int, certs: Path | None) -> dict[str, float]:
    """One measurement of every row, with TLS when ``certs`` is given."""

    def tls_for(stem: str) -> TlsConfig | None:
        return None if certs is None else TlsConfig(certs / "ca.pem", certs / f"{stem}.pem", certs / f"{stem}-key.pem")

    voters = {node_id: ("127.0.0.1", port) for node_id, port in zip((1, 2, 3), free_ports(3))}
    configs = [
        NodeConfig(
            node_id=node_id,
            voters=voters,
            cluster_id=CLUSTER_ID,
            tls=tls_for(f"node-{node_id}"),
            acl_file=None if certs is None else certs / "acl.txt",
            plaintext=certs is None,
        )
        for node_id in voters
    ]
    bootstrap = [f"{node_id}@127.0.0.1:{port}" for node_id, (_, port) in voters.items()]
    record = KeyValueStateMachine.encode_put(b"k", b"v" * 100)
    result: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        for config in configs:

            async def run(config: NodeConfig = config, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                async with open_quorum_node(config):
                    task_status.started()
                    await trio.sleep_forever()

            await nursery.start(run)
        async with QuorumClient(bootstrap, cluster_id=CLUSTER_ID, tls=tls_for("client-admin"), retry_timeout_s=30) as client:
            for _ in range(50):  # a leader, connections open, caches warm
                await client.propose([record])
            latencies: list[float] = []
            cpu_started = time.process_time()
            for _ in range(writes):
                started = time.perf_counter()
                await client.propose([record])
                latencies.append(time.perf_counter() - started)
            result["seq_cpu_us"] = (time.process_time() - cpu_started) / writes * 1e6
            result["seq_p50_ms"] = statistics.median(latencies) * 1e3

            per_writer = max(1, writes * 4 // IN_FLIGHT)

            async def writer() -> None:
                for _ in range(per_writer):
                    await client.propose([record])

            cpu_started, wall_started = time.process_time(), time.perf_counter()
            async with trio.open_nursery() as writers:
                for _ in range(IN_FLIGHT):
                    writers.start_soon(writer)
            total = IN_FLIGHT * per_writer
            result["inflight_cpu_us"] = (time.process_time() - cpu_started) / total * 1e6
            result["inflight_per_s"] = total / (time.perf_counter() - wall_started)

            batches = max(1, writes // 10)
            batch = [record] * BATCH_RECORDS
            cpu_started, wall_started = time.process_time(), time.perf_counter()
            for _ in range(batches):
                await client.propose(batch)
            total = batches * BATCH_RECORDS
            result["batch_cpu_us"] = (time.process_time() - cpu_started) / total * 1e6
            result["batch_records_per_s"] = total / (time.perf_counter() - wall_started)
        nursery.cancel_scope.cancel()
    return result


async def reconnect_round(connections: int, certs: Path, resumption: bool) -> dict[str, float]:
    """Per-connection CPU (client and server, both in this process) and
    wall time of ``connections`` TLS connections, with or without session
    resumption."""
    server_tls = TlsConfig(certs / "ca.pem", certs / "node-1.pem", certs / "node-1-key.pem", session_resumption=resumption)
    client_tls = TlsConfig(
        certs / "ca.pem", certs / "client-admin.pem", certs / "client-admin-key.pem", session_resumption=resumption
    )
    resumed = 0

    async def serve(tcp: trio.SocketStream) -> None:
        nonlocal resumed
        stream = server_tls.wrap_server(tcp)
        try:
            await stream.do_handshake()
            resumed += stream.session_reused
            await stream.send_all(b"hello")
            await stream.receive_some(16)
        except trio.BrokenResourceError:
            pass
        await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, serve, listeners)

        async def one() -> None:
            stream, _ = await client_tls.connect("127.0.0.1", port)
            await stream.receive_some(16)
            await stream.aclose()

        for _ in range(10):  # warm up, and a first ticket
            await one()
        resumed = 0
        cpu_started, wall_started = time.process_time(), time.perf_counter()
        for _ in range(connections):
            await one()
        result = {
            "cpu_us": (time.process_time() - cpu_started) / connections * 1e6,
            "wall_us": (time.perf_counter() - wall_started) / connections * 1e6,
            "resumed_share": resumed / connections,
        }
        nursery.cancel_scope.cancel()
    return result


def reconnect_main(connections: int, rounds: int, json_out: str | None) -> int:
    runs: dict[str, list[dict[str, float]]] = {"full": [], "resumed": []}
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as directory:
        certs = Path(directory)
        create_cluster_certificates(certs, nodes=[1])
        for _ in range(rounds):
            for mode in ("full", "resumed"):
                runs[mode].append(trio.run(reconnect_round, connections, certs, mode == "resumed"))
    if json_out:
        Path(json_out).write_text(json.dumps(runs, indent=1))
    print(f"{connections} TLS connections per round over loopback (client and server in this process), median of {rounds} rounds:")
    print(f"  {'':34} {'full':>10} {'resumed':>10} {'resumed vs full':>16}")
    for key, label in (("cpu_us", "CPU per connection µs"), ("wall_us", "wall time per connection µs")):
        full = statistics.median(run[key] for run in runs["full"])
        resumed = statistics.median(run[key] for run in runs["resumed"])
        print(f"  {label:34} {full:10.0f} {resumed:10.0f} {(resumed / full - 1) * 100:+15.1f}%")
    shares = [run["resumed_share"] for run in runs["resumed"]]
    print(f"  handshakes that resumed: {min(shares) * 100:.0f}-{max(shares) * 100:.0f} % (full: 0 %)")
    return 0


def _process_cpu_s(pid: int | None) -> float:
    """User plus system CPU time of process ``pid`` so far (Linux)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_round(writes: int, tls: bool) -> dict[str, float]:
    """The same rows against three ``kraft-quorum node`` processes."""
    from .peers.pykraft_peer import PykraftCluster, PykraftTlsCluster

    cluster = (PykraftTlsCluster if tls else PykraftCluster)(100, log=lambda line: None)
    cluster.start()
    try:
        cluster.wait_healthy(120)

        def cpu_s() -> float:
            return time.process_time() + sum(_process_cpu_s(process.pid) for process in cluster.processes)

        value = b"v" * 100
        cluster.run_sequential([value] * 50, time.monotonic() + 60)
        result: dict[str, float] = {}
        started = cpu_s()
        latencies = cluster.run_sequential([value] * writes, time.monotonic() + 300)
        result["seq_cpu_us"] = (cpu_s() - started) / len(latencies) * 1e6
        result["seq_p50_ms"] = statistics.median(latencies) * 1e3
        total = writes * 4
        started, wall_started = cpu_s(), time.perf_counter()
        done = cluster.write_many([value] * total, IN_FLIGHT, time.monotonic() + 300)
        result["inflight_cpu_us"] = (cpu_s() - started) / len(done) * 1e6
        result["inflight_per_s"] = len(done) / (time.perf_counter() - wall_started)
        batches = max(1, writes // 4)
        started, wall_started = cpu_s(), time.perf_counter()
        done = cluster.write_batches([[value] * BATCH_RECORDS] * batches, time.monotonic() + 300)
        result["batch_cpu_us"] = (cpu_s() - started) / (len(done) * BATCH_RECORDS) * 1e6
        result["batch_records_per_s"] = len(done) * BATCH_RECORDS / (time.perf_counter() - wall_started)
        return result
    finally:
        cluster.stop()


#: ``--batched``'s rows, as ``ROWS``.
BATCHED_ROWS = (
    ("first_batch_ms", f"new client's first batch (connect, p50 of {NEW_CLIENTS})", "ms", False),
    ("first_batch_handshakes", "TLS handshakes per new client (full + resumed)", "", False),
    ("first_batch_resumed", "of which resumed", "", True),
    ("batch_cpu_us", "CPU per record, 1 client", "µs", False),
    ("batch_records_per_s", "records/s, 1 client", "/s", True),
    ("batch_p50_ms", "batch p50, 1 client", "ms", False),
    ("batch_p99_ms", "batch p99, 1 client", "ms", False),
    ("batch8_cpu_us", f"CPU per record, {BATCH_CLIENTS} clients", "µs", False),
    ("batch8_records_per_s", f"records/s, {BATCH_CLIENTS} clients", "/s", True),
    ("batch8_p99_ms", f"batch p99, {BATCH_CLIENTS} clients", "ms", False),
)


def batched_round(batches: int, tls: bool) -> dict[str, float]:
    """``--batched``: the batched rows against three ``kraft-quorum node``
    processes, connection setup timed apart from the batches."""
    from .peers.pykraft_peer import PykraftCluster, PykraftTlsCluster

    cluster = (PykraftTlsCluster if tls else PykraftCluster)(100, log=lambda line: None)
    cluster.start()
    try:
        cluster.wait_healthy(120)
        batch = [b"v" * 100] * BATCH_RECORDS
        cluster.write_batches([batch] * 20, time.monotonic() + 60)  # warm-up, and session tickets

        def cpu_s() -> float:
            return time.process_time() + sum(_process_cpu_s(process.pid) for process in cluster.processes)

        async def measure() -> dict[str, float]:
            result: dict[str, float] = {}
            handshakes: list[tuple[int, int]] = []
            first_ms: list[float] = []
            for _ in range(NEW_CLIENTS):
                opened: list[Any] = []
                started = time.perf_counter()
                async with cluster._client() as client:
                    original = client._open_stream

                    async def open_stream(server: Any, original: Any = original) -> Any:
                        stream = await original(server)
                        opened.append(stream)
                        return stream

                    client._open_stream = open_stream
                    await client.propose(batch)
                    first_ms.append((time.perf_counter() - started) * 1e3)
                resumed = sum(bool(getattr(stream, "session_reused", False)) for stream in opened)
                handshakes.append((len(opened) if tls else 0, resumed))
            result["first_batch_ms"] = statistics.median(first_ms)
            result["first_batch_handshakes"] = statistics.mean(count for count, _ in handshakes)
            result["first_batch_resumed"] = statistics.mean(resumed for _, resumed in handshakes)

            async with cluster._client() as client:
                await client.propose(batch)  # connected to the leader
                latencies: list[float] = []
                cpu_started, wall_started = cpu_s(), time.perf_counter()
                for _ in range(batches):
                    started = time.perf_counter()
                    await client.propose(batch)
                    latencies.append(time.perf_counter() - started)
                result["batch_cpu_us"] = (cpu_s() - cpu_started) / (batches * BATCH_RECORDS) * 1e6
                result["batch_records_per_s"] = batches * BATCH_RECORDS / (time.perf_counter() - wall_started)
                result["batch_p50_ms"] = statistics.median(latencies) * 1e3
                result["batch_p99_ms"] = statistics.quantiles(latencies, n=100)[98] * 1e3

            async with contextlib.AsyncExitStack() as stack:
                clients = [await stack.enter_async_context(cluster._client()) for _ in range(BATCH_CLIENTS)]
                async with trio.open_nursery() as nursery:
                    for client in clients:
                        nursery.start_soon(client.propose, batch)
                latencies = []
                per_client = max(1, batches // BATCH_CLIENTS)

                async def worker(client: QuorumClient) -> None:
                    for _ in range(per_client):
                        started = time.perf_counter()
                        await client.propose(batch)
                        latencies.append(time.perf_counter() - started)

                cpu_started, wall_started = cpu_s(), time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for client in clients:
                        nursery.start_soon(worker, client)
                total = len(latencies) * BATCH_RECORDS
                result["batch8_cpu_us"] = (cpu_s() - cpu_started) / total * 1e6
                result["batch8_records_per_s"] = total / (time.perf_counter() - wall_started)
                result["batch8_p99_ms"] = statistics.quantiles(latencies, n=100)[98] * 1e3
            return result

        return trio.run(measure)
    finally:
        cluster.stop()


def print_rows(rows: tuple[tuple[str, str, str, bool], ...], runs: dict[str, list[dict[str, float]]]) -> None:
    """Each row's median over the rounds, TLS off and on, and the change."""
    print(f"  {'':52} {'TLS off':>10} {'TLS on':>10} {'on vs off':>10}")
    for key, label, unit, _ in rows:
        off = statistics.median(run[key] for run in runs["off"])
        on = statistics.median(run[key] for run in runs["on"])
        digits = 3 if unit == "ms" else 2 if unit == "" else 1
        change = f"{(on / off - 1) * 100:+9.1f}%" if off else f"{'':10}"
        extra = f" ({on - off:+.3f} ms)" if unit == "ms" else ""
        print(f"  {(label + ' ' + unit).strip():52} {off:10.{digits}f} {on:10.{digits}f} {change}{extra}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_cpu_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=1000, help="sequential writes per measurement (default 1000; with --batched, batches per row)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of off then on; the median is printed (default 3)")
    parser.add_argument("--quick", action="store_true", help="300 writes, one round")
    parser.add_argument("--processes", action="store_true", help="three kraft-quorum node processes, fsync on")
    parser.add_argument("--json", metavar="OUT", help="also write every round's figures to OUT")
    parser.add_argument("--reconnects", type=int, metavar="N", help="measure N reconnects, full handshake against resumed")
    parser.add_argument(
        "--batched", action="store_true",
        help="only the batched rows against node processes: a new client's first batch apart, then connected clients",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.reconnects is not None:
        if args.reconnects < 1:
            parser.error("--reconnects must be at least 1")
        return reconnect_main(args.reconnects, 1 if args.quick else args.rounds, args.json)
    writes, rounds = (300, 1) if args.quick else (args.writes, args.rounds)
    if writes < 10 or rounds < 1:
        parser.error("--writes must be at least 10 and --rounds at least 1")
    # The in-process plaintext nodes' startup warning, once per node and round.
    logging.getLogger("pykraft").setLevel(logging.ERROR)
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as directory:
        certs = Path(directory)
        create_cluster_certificates(certs, nodes=[1, 2, 3])
        for round_number in range(rounds):
            # --batched alternates which goes first: a row's first half may
            # see another load than its second.
            modes = ("on", "off") if args.batched and round_number % 2 else ("off", "on")
            for mode in modes:
                if args.batched:
                    runs[mode].append(batched_round(writes, mode == "on"))
                elif args.processes:
                    runs[mode].append(process_round(writes, mode == "on"))
                else:
                    runs[mode].append(trio.run(one_round, writes, certs if mode == "on" else None))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    if args.batched:
        print(
            f"3 kraft-quorum node processes (fsync on), batches of {BATCH_RECORDS} records of 100 bytes, "
            f"{writes} batches per row, median of {rounds} rounds (load average {os.getloadavg()[0]:.1f} at the end):"
        )
        print_rows(BATCHED_ROWS, runs)
        return 0
    if args.processes:
        print(f"3 kraft-quorum node processes (fsync on) and a client, CPU of all four, median of {rounds} rounds:")
    else:
        print(f"3 voters and a client in one process over loopback, memory storage, median of {rounds} rounds:")
    print_rows(ROWS, runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
