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

``--reconnects N`` measures what a reconnect costs instead: N connections
to one TLS listener in this process (``TlsConfig.connect``, as a client or
a node dials; the server's handshake as a node's listener does it; one
small read each, which brings the session ticket), once with a full
handshake every time and once resuming the session, alternating within
each round; CPU time is both ends'.
"""

from __future__ import annotations

import argparse
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

CLUSTER_ID = "tls-bench"
IN_FLIGHT = 64
BATCH_RECORDS = 100
# The rows, in print order: (key, label, unit, whether more is better).
ROWS = (
    ("seq_cpu_us", "CPU per write, sequential", "µs", False),
    ("inflight_cpu_us", f"CPU per write, {IN_FLIGHT} in flight", "µs", False),
    ("batch_cpu_us", f"CPU per record, batches of {BATCH_RECORDS}", "µs", False),
    ("seq_p50_ms", "sequential write p50", "ms", False),
    ("inflight_per_s", f"{IN_FLIGHT} in flight writes/s", "/s", True),
    ("batch_records_per_s", f"batched records/s ({BATCH_RECORDS} per batch)", "/s", True),
)


def _free_ports(count: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(count)]
    for item in sockets:
        item.bind(("127.0.0.1", 0))
    ports = [item.getsockname()[1] for item in sockets]
    for item in sockets:
        item.close()
    return ports


async def one_round(writes: int, certs: Path | None) -> dict[str, float]:
    """One measurement of every row, with TLS when ``certs`` is given."""

    def tls_for(stem: str) -> TlsConfig | None:
        return None if certs is None else TlsConfig(certs / "ca.pem", certs / f"{stem}.pem", certs / f"{stem}-key.pem")

    voters = {node_id: ("127.0.0.1", port) for node_id, port in zip((1, 2, 3), _free_ports(3))}
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_cpu_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=1000, help="sequential writes per measurement (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of off then on; the median is printed (default 3)")
    parser.add_argument("--quick", action="store_true", help="300 writes, one round")
    parser.add_argument("--processes", action="store_true", help="three kraft-quorum node processes, fsync on")
    parser.add_argument("--json", metavar="OUT", help="also write every round's figures to OUT")
    parser.add_argument("--reconnects", type=int, metavar="N", help="measure N reconnects, full handshake against resumed")
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
        for _ in range(rounds):
            for mode in ("off", "on"):
                if args.processes:
                    runs[mode].append(process_round(writes, mode == "on"))
                else:
                    runs[mode].append(trio.run(one_round, writes, certs if mode == "on" else None))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    if args.processes:
        print(f"3 kraft-quorum node processes (fsync on) and a client, CPU of all four, median of {rounds} rounds:")
    else:
        print(f"3 voters and a client in one process over loopback, memory storage, median of {rounds} rounds:")
    print(f"  {'':42} {'TLS off':>10} {'TLS on':>10} {'on vs off':>10}")
    for key, label, unit, more_is_better in ROWS:
        off = statistics.median(run[key] for run in runs["off"])
        on = statistics.median(run[key] for run in runs["on"])
        change = (on / off - 1) * 100
        extra = f" ({on - off:+.3f} ms)" if unit == "ms" else ""
        print(f"  {label + ' ' + unit:42} {off:10.{1 if unit != 'ms' else 3}f} {on:10.{1 if unit != 'ms' else 3}f} {change:+9.1f}%{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
