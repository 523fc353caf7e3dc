"""Where a sequential pykraft write spends its time, stage by stage.

    python -m bench.latency_breakdown [--writes N] [--tls]

Starts 3 `kraft-quorum node` voters (fsync on) with ``PYKRAFT_TRACE_DIR``
set, so each process stamps CLOCK_MONOTONIC at every stage of the write
path (``quorum/runtime/_trace.py``); the client stamps each write's send and
answer. All processes share the clock, so the files line up. For every write
it finds the milestones below and prints the median and p90 of each leg:

  A  the client sends            F  the leader reads the ack (Fetch offset+1)
  B  the leader reads it         G  the leader's own fsync is done
  C  the leader has proposed     H  the leader sees it committed
     (Fetch responses written)   I  the client has the answer
  D  a follower reads the record
  E  that follower's fsync is done

plus the CPU time each process used per write (user + system).
``--timeline N`` also prints every stamp of the write at rank N by latency
(``--timeline 1000`` of 2000: the median one), each process's in one
column of time since the client sent it: socket writes (``tx``, with the
peer and how many frames left in that write), reads (``rx``), the core's
inputs and the disk's work, to see where a hop waits. With
``--tls`` every connection is mutual TLS 1.3 (certificates from
``create_cluster_certificates``, the client as ``pykraft://client/admin``),
as ``bench.quorum_bench``'s ``pykraft-tls`` peer.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import os
import sys
import time
from pathlib import Path

import trio

from ._common import LOOPBACK, ManagedProcess, free_ports, make_temp_dir, port_is_open, remove_temp_dir, wait_for
from .peers.pykraft_peer import kraft_quorum_executable

LEGS = [("AB", "client -> leader"), ("BC", "leader proposes, sends"), ("CD", "-> follower reads"),
        ("DE", "follower persists"), ("EF", "ack -> leader"), ("FH", "ack -> committed"),
        ("CG", "leader's own fsync"), ("HI", "commit -> client")]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _read_trace(path: Path, name: str) -> list[tuple[int, str, str, str]]:
    events = []
    for line in path.read_text().splitlines():
        when, stage, key = line.split(" ", 2)
        events.append((int(when), name, stage, key))
    return events


def _legs(events: list[tuple[int, str, str, str]], writes: list[tuple[int, int, int]], leader: str) -> dict:
    times = [event[0] for event in events]
    legs: dict[str, list[float]] = collections.defaultdict(list)
    for sent, answered, offset in writes:
        window = events[bisect.bisect_left(times, sent): bisect.bisect_right(times, answered)]

        def first(match) -> int | None:  # noqa: ANN001
            return next((when for when, node, stage, key in window if match(node, stage, key)), None)

        follower = lambda node: node not in (leader, "client")  # noqa: E731
        points = {
            "A": sent,
            "B": first(lambda n, s, k: n == leader and s == "rx"),
            "C": first(lambda n, s, k: n == leader and s == "core-call"),
            "D": first(lambda n, s, k: follower(n) and s == "recv-FetchResponse" and k.startswith(f"{offset}/")),
            "E": first(lambda n, s, k: follower(n) and s == "persist-done-inline"),
            "F": first(lambda n, s, k: n == leader and s == "recv-FetchRequest" and k == str(offset + 1)),
            "G": first(lambda n, s, k: n == leader and s == "persist-done"),
            "H": first(lambda n, s, k: n == leader and s == "committed" and k == str(offset)),
            "I": answered,
        }
        if None in points.values():
            continue  # a write whose stages overlapped another's: skip it
        for leg, _ in LEGS:
            legs[leg].append((points[leg[1]] - points[leg[0]]) / 1000)
    return legs


def _print_timeline(events: list[tuple[int, str, str, str]], writes: list[tuple[int, int, int]], rank: int) -> None:
    """Every stamp between the send and the answer of the write at ``rank``
    (by latency), in µs since the send."""
    by_latency = sorted(writes, key=lambda write: write[1] - write[0])
    sent, answered, offset = by_latency[min(max(rank, 0), len(by_latency) - 1)]
    times = [event[0] for event in events]
    print(f"write at offset {offset}, rank {rank} of {len(writes)}: {(answered - sent) / 1000:.0f} us")
    for when, node, stage, key in events[bisect.bisect_left(times, sent): bisect.bisect_right(times, answered)]:
        print(f"  {(when - sent) / 1000:7.0f}  {node:7} {stage} {key}")
    print(f"  {(answered - sent) / 1000:7.0f}  client  answered")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency_breakdown", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--tls", action="store_true", help="mutual TLS 1.3 on every connection")
    parser.add_argument("--timeline", type=int, action="append", default=[], metavar="RANK",
                        help="print every stamp of the write at this rank by latency (0: fastest); repeatable")
    args = parser.parse_args(argv)
    executable = kraft_quorum_executable()
    if executable is None:
        print("no kraft-quorum executable", file=sys.stderr)
        return 1
    workdir = make_temp_dir("pykraft-latency")
    trace_dir = workdir / "trace"
    trace_dir.mkdir()
    os.environ["PYKRAFT_TRACE_DIR"] = str(trace_dir)
    from quorum.client import QuorumClient  # after the variable: the client traces too
    from quorum.runtime import TlsConfig, _trace, create_cluster_certificates

    security: list[list[str]] = [["--plaintext"]] * 3
    client_tls = None
    if args.tls:
        certs = workdir / "certs"
        create_cluster_certificates(certs, nodes=[1, 2, 3])
        client_tls = TlsConfig(certs / "ca.pem", certs / "client-admin.pem", certs / "client-admin-key.pem")
        security = [["--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / f"node-{i + 1}.pem"),
                     "--tls-key", str(certs / f"node-{i + 1}-key.pem"), "--acl-file", str(certs / "acl.txt")]
                    for i in range(3)]
    ports = free_ports(3)
    voters = ",".join(f"{i + 1}@{LOOPBACK}:{port}" for i, port in enumerate(ports))
    processes = [
        ManagedProcess(f"pykraft-{i + 1}", [executable, "node", *security[i], "--node-id", str(i + 1), "--voters", voters,
                                            "--data-dir", str(workdir / f"node{i + 1}"), "--cluster-id", "bench"],
                       workdir / f"node{i + 1}.log", env={"PYKRAFT_TRACE_DIR": str(trace_dir)})
        for i in range(3)
    ]
    writes: list[tuple[int, int, int]] = []
    try:
        for process in processes:
            process.start()
        wait_for(lambda: all(port_is_open(p) for p in ports), 30.0, "the voters to listen", 0.1, processes)

        async def run() -> None:
            async with QuorumClient([f"{i + 1}@{LOOPBACK}:{p}" for i, p in enumerate(ports)],
                                    cluster_id="bench", tls=client_tls) as client:
                for _ in range(200):  # elect, connect, warm up
                    await client.propose([b"warm-up"])
                await trio.sleep(0.3)
                cpu_before = [_cpu_s(process.pid) for process in processes] + [time.process_time()]
                for index in range(args.writes):
                    sent = time.monotonic_ns()
                    offset = await client.propose([b"w-%08d-" % index + b"x" * 88])
                    writes.append((sent, time.monotonic_ns(), offset))
                cpu_after = [_cpu_s(process.pid) for process in processes] + [time.process_time()]
                names = [f"node {i + 1}" for i in range(3)] + ["client"]
                per_write = [(b - a) / args.writes * 1e6 for a, b in zip(cpu_before, cpu_after)]
                print("CPU per write (us): " + ", ".join(f"{n} {v:.0f}" for n, v in zip(names, per_write)))

        trio.run(run)
        for process in processes:
            process.terminate()  # SIGTERM: each voter writes its trace at exit
        events = [event for i, process in enumerate(processes)
                  for event in _read_trace(trace_dir / f"{process.pid}.trace", f"node{i + 1}")]
        events += [(sent, "client", "c-send", "") for sent, _, _ in writes]
        events.sort()
        leader = collections.Counter(node for _, node, stage, _ in events if stage == "committed").most_common(1)[0][0]
        legs = _legs(events, writes, leader)
        total = sorted((answered - sent) / 1000 for sent, answered, _ in writes)
        print(f"{len(writes)} sequential writes, leader {leader}: p50 {total[len(total) // 2]:.0f} us, "
              f"p90 {total[int(len(total) * 0.9)]:.0f} us; {len(legs['AB'])} with every stage seen")
        for leg, label in LEGS:
            values = sorted(legs[leg])
            if values:
                print(f"  {leg} {label:24} p50 {values[len(values) // 2]:6.0f} us   p90 {values[int(len(values) * 0.9)]:6.0f} us")
        for rank in args.timeline:
            _print_timeline(events, writes, rank)
        _trace.enabled = False
    finally:
        for process in processes:
            process.terminate()
        remove_temp_dir(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
