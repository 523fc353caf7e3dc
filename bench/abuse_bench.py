"""Abuse benchmark (issue 15 part 5): each hostile-client attack against the
leader of 3 ``kraft-quorum node`` processes, with a well-behaved client
writing alongside.

    .venv/bin/python -m bench.abuse_bench [--seconds 10] [--attacks a,b,...] [--quick] [--json OUT]

First a baseline period with no attack, then each attack of
``jepsen_like.nemesis.ATTACKS`` in turn for ``--seconds`` (3 with
``--quick``) at the current leader, from source address 127.0.0.66 (the
nodes' per-address caps then see the attacker apart from the good client
and the peers, all on 127.0.0.1). Throughout, one client
(``quorum.client.QuorumClient`` on all 3 voters) writes 100-byte records,
one committed write at a time. Per period: the leader's RSS (largest
sample, every 100 ms), whether the leader kept its leadership (same leader
and epoch after as before), the good client's write latencies (p50, p99,
max) and its refused writes (a propose that raised), next to the baseline.

Targets (issue 15): leader RSS under 200 MB, leadership kept, write p99
under 100 ms, no write refused; the last column says which one missed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from ._common import (
    format_table,
    install_cleanup_handlers,
    latency_summary_ms,
    machine_info,
    make_value,
    rss_bytes,
    write_json,
)

SOURCE_HOST = "127.0.0.66"
RSS_TARGET_MB = 200.0
P99_TARGET_MS = 100.0
WRITE_TIMEOUT_S = 5.0
SETTLE_S = 1.0


def _mb(value: int | None) -> float:
    return (value or 0) / 1e6


async def _describe(cluster: Any, index: int, timeout_s: float = 2.0) -> Any | None:
    """DescribeQuorum from voter ``index`` alone (None if it does not answer)."""
    import trio

    from quorum.client import QuorumClient

    try:
        async with QuorumClient([cluster.endpoints[index]], cluster_id="bench", retry_timeout_s=timeout_s) as client:
            with trio.fail_after(timeout_s):
                return await client.describe()
    except Exception:  # noqa: BLE001 - that node does not answer now
        return None


async def _leader(cluster: Any, timeout_s: float = 30.0) -> tuple[int, int]:
    """(index, epoch) of the node that names itself leader, waiting for one."""
    import trio

    with trio.fail_after(timeout_s):
        while True:
            for index in range(len(cluster.ports)):
                answer = await _describe(cluster, index)
                if answer is not None and answer.leader_id == index + 1:
                    return index, answer.epoch
            await trio.sleep(0.2)


async def _period(cluster: Any, attack: str | None, seconds: float) -> dict[str, Any]:
    """One period: the attack (None: baseline) at the leader, the good
    client writing, the leader's RSS sampled."""
    import trio

    from jepsen_like.nemesis import HostileTarget, run_attack
    from quorum.client import QuorumClient

    leader, epoch = await _leader(cluster)
    pid = cluster.processes[leader].pid
    rss_start = rss_bytes(pid)
    rss_max = rss_start or 0
    latencies_s: list[float] = []
    refused: list[str] = []
    attack_stats: dict[str, Any] = {}
    done = trio.Event()

    async def sample_rss() -> None:
        nonlocal rss_max
        while not done.is_set():
            rss_max = max(rss_max, rss_bytes(pid) or 0)
            await trio.sleep(0.1)

    async def write() -> None:
        async with QuorumClient(cluster.endpoints, cluster_id="bench", retry_timeout_s=WRITE_TIMEOUT_S) as client:
            index = 0
            while not done.is_set():
                index += 1
                started = time.perf_counter()
                try:
                    with trio.fail_after(WRITE_TIMEOUT_S):
                        await client.propose([make_value(index, 100, b"good")])
                except Exception as error:  # noqa: BLE001 - a refused write is a figure
                    refused.append(f"{type(error).__name__}: {error}"[:200])
                    continue
                latencies_s.append(time.perf_counter() - started)

    async def attack_then_stop() -> None:
        if attack is None:
            await trio.sleep(seconds)
        else:
            target = HostileTarget(
                host="127.0.0.1",
                port=cluster.ports[leader],
                node_id=leader + 1,
                voter_ids=tuple(range(1, len(cluster.ports) + 1)),
                cluster_id="bench",
                source_host=SOURCE_HOST,
            )
            stats = await run_attack(attack, target, seconds, seed=len(attack))
            attack_stats.update(stats.as_history_value())
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_rss)
        nursery.start_soon(write)
        nursery.start_soon(attack_then_stop)
    await trio.sleep(SETTLE_S)
    leader_after, epoch_after = await _leader(cluster)
    latency = latency_summary_ms(latencies_s)
    result = {
        "attack": attack or "baseline",
        "seconds": seconds,
        "leader_before": leader + 1,
        "epoch_before": epoch,
        "leader_after": leader_after + 1,
        "epoch_after": epoch_after,
        "leadership_kept": leader_after == leader and epoch_after == epoch,
        "leader_rss_start_mb": _mb(rss_start),
        "leader_rss_max_mb": _mb(rss_max),
        "writes": latency,
        "refused_writes": len(refused),
        "refusals": refused[:5],
        "attack_stats": attack_stats,
    }
    result["misses"] = _misses(result)
    return result


def _misses(result: dict[str, Any]) -> list[str]:
    misses = []
    if result["leader_rss_max_mb"] >= RSS_TARGET_MB:
        misses.append("rss")
    if not result["leadership_kept"]:
        misses.append("leadership")
    p99 = result["writes"]["p99_ms"]
    if not p99 == p99 or p99 >= P99_TARGET_MS:  # NaN: no write at all
        misses.append("p99")
    if result["refused_writes"]:
        misses.append("refused")
    return misses


def _table(results: Sequence[dict[str, Any]]) -> str:
    columns = ["leader kept", "epoch", "RSS max MB", "writes", "p50 ms", "p99 ms", "max ms", "refused", "attack conns/frames", "targets"]
    rows = []
    for result in results:
        writes = result["writes"]
        stats = result["attack_stats"]
        rows.append(
            (
                result["attack"],
                [
                    "yes" if result["leadership_kept"] else "NO",
                    f"{result['epoch_before']}->{result['epoch_after']}",
                    f"{result['leader_rss_max_mb']:.0f}",
                    str(writes["count"]),
                    f"{writes['p50_ms']:.1f}",
                    f"{writes['p99_ms']:.1f}",
                    f"{writes['max_ms']:.0f}",
                    str(result["refused_writes"]),
                    f"{stats.get('connections', 0)}/{stats.get('frames', 0)}" if stats else "-",
                    "met" if not result["misses"] else "MISSED " + ",".join(result["misses"]),
                ],
            )
        )
    return format_table(columns, rows)


def main(argv: list[str] | None = None) -> int:
    from jepsen_like.nemesis import ATTACKS

    parser = argparse.ArgumentParser(prog="python -m bench.abuse_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=None, help="each attack's duration (default 10, 3 with --quick)")
    parser.add_argument("--attacks", default=",".join(ATTACKS), help=f"comma-separated, of: {', '.join(ATTACKS)}")
    parser.add_argument("--quick", action="store_true", help="3 s per attack")
    parser.add_argument("--json", metavar="OUT", help="write the figures as JSON")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (3.0 if args.quick else 10.0)
    attacks = [name.strip() for name in args.attacks.split(",") if name.strip()]
    unknown = [name for name in attacks if name not in ATTACKS]
    if unknown:
        parser.error(f"unknown attack(s) {', '.join(unknown)}; choose from {', '.join(ATTACKS)}")

    import trio

    from .peers.pykraft_peer import PykraftCluster

    install_cleanup_handlers()
    info = machine_info()
    print(f"abuse benchmark: 3 kraft-quorum voters on {info['nproc']} CPUs ({info['cpu_model']}), load at start {info['load_average_at_start']}")
    print(f"{seconds:.0f} s per period; attacker from {SOURCE_HOST}; a good client writing sequentially throughout", flush=True)
    problem = PykraftCluster.availability_problem()
    if problem:
        print(f"pykraft: {problem}", file=sys.stderr)
        return 1
    cluster = PykraftCluster(log=lambda line: print(line, file=sys.stderr))
    results: list[dict[str, Any]] = []
    try:
        cluster.start()

        async def measure() -> None:
            for attack in [None, *attacks]:
                result = await _period(cluster, attack, seconds)
                results.append(result)
                print(
                    f"  {result['attack']}: leader kept {result['leadership_kept']}, RSS max {result['leader_rss_max_mb']:.0f} MB, "
                    f"p99 {result['writes']['p99_ms']:.1f} ms, refused {result['refused_writes']}",
                    file=sys.stderr,
                    flush=True,
                )

        trio.run(measure)
    finally:
        cluster.stop()
    print(_table(results))
    print(f"targets: leader RSS < {RSS_TARGET_MB:.0f} MB, leadership kept, good client's write p99 < {P99_TARGET_MS:.0f} ms, no write refused")
    if args.json:
        write_json(args.json, {"machine": info, "seconds": seconds, "source_host": SOURCE_HOST, "periods": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
