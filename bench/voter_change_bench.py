"""Voter changes with real `kraft-quorum node` processes (issue 17, KIP-853):
how long adding a caught-up voter takes, and how long writes stop while the
leader removes itself.

    python -m bench.voter_change_bench [--trials 10] [--json OUT]

Four `kraft-quorum node` processes on 127.0.0.1 with fsync on: three voters
formatted with `kraft-quorum format --initial-voters`, and a fourth disk
formatted with `--join` that fetches as an observer. One client writes
100-byte records one after another for the whole run (no pause between
writes), and remembers when each was acknowledged.

  add a caught-up voter     `add_voter` of the observer once it has fetched
                            up to the high watermark: from the request to
                            the answer, which comes when the VOTERS record
                            is committed; then `remove_voter` takes it out
                            again for the next trial (timed too)
  leader removes itself     `remove_voter` of the leader's own disk. Write
                            unavailability is the longest gap between two
                            acknowledged writes from the request until 3 s
                            after its answer: the old leader leads until the
                            change commits, then hands over (EndQuorumEpoch)
                            and a remaining voter is elected. The removed
                            node, an observer now, is added back before the
                            next trial.
  write gap, no change      the longest gap between acknowledged writes in
                            a quiet second before each trial (the baseline
                            a change's gap is read against)

Every wait is bounded; every process and directory is removed at exit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import trio

from bench._common import (
    LOOPBACK,
    ManagedProcess,
    free_ports,
    install_cleanup_handlers,
    latency_summary_ms,
    make_temp_dir,
    remove_temp_dir,
)
from quorum.client import IndeterminateError, QuorumClient, QuorumClientError
from quorum.runtime import KeyValueStateMachine

CLUSTER_ID = "pykraft-voter-bench"
VOTERS = (1, 2, 3)
JOINER = 4
WAIT_S = 60.0
AFTER_ANSWER_S = 3.0


class Cluster:
    """Three formatted voters and a fourth disk that joins, as processes."""

    def __init__(self) -> None:
        self.workdir = make_temp_dir("pykraft-voters")
        self.ports = dict(zip((*VOTERS, JOINER), free_ports(len(VOTERS) + 1)))
        self.directory_ids: dict[int, str] = {node_id: uuid.uuid4().hex for node_id in VOTERS}
        self.processes: dict[int, ManagedProcess] = {}
        executable = Path(sys.executable).parent / "kraft-quorum"
        initial = ",".join(f"{i}@{LOOPBACK}:{self.ports[i]}:{self.directory_ids[i]}" for i in VOTERS)
        for node_id, port in self.ports.items():
            data_dir = self.workdir / f"node{node_id}"
            format_argv = [
                str(executable), "format", "--data-dir", str(data_dir), "--node-id", str(node_id),
                "--cluster-id", CLUSTER_ID, "--initial-voters", initial,
                *(["--join"] if node_id == JOINER else ["--directory-id", self.directory_ids[node_id]]),
            ]  # fmt: skip
            done = subprocess.run(format_argv, capture_output=True, text=True, timeout=60, check=True)
            self.directory_ids[node_id] = json.loads(done.stdout)["directory_id"]
            node_argv = [
                str(executable), "node", "--plaintext", "--node-id", str(node_id), "--data-dir", str(data_dir),
                "--listen", f"{LOOPBACK}:{port}",
            ]  # fmt: skip
            self.processes[node_id] = ManagedProcess(f"pykraft-{node_id}", node_argv, self.workdir / f"node{node_id}.log")

    @property
    def bootstrap(self) -> list[str]:
        return [f"{node_id}@{LOOPBACK}:{port}" for node_id, port in self.ports.items()]

    def endpoint(self, node_id: int) -> str:
        return f"{LOOPBACK}:{self.ports[node_id]}"

    def start(self) -> None:
        for process in self.processes.values():
            process.start()

    def stop(self, logs_to: Path | None = None) -> None:
        for process in self.processes.values():
            process.terminate(grace_s=5.0)
        if logs_to is not None:
            logs_to.mkdir(parents=True, exist_ok=True)
            for log in self.workdir.glob("node*.log"):
                shutil.copy(log, logs_to / log.name)
        remove_temp_dir(self.workdir)


class Writer:
    """Sequential writes for the whole run; the acknowledgement times."""

    def __init__(self) -> None:
        self.acknowledged_at: list[float] = []
        self.indeterminate = 0

    async def run(self, client: QuorumClient) -> None:
        sequence = 0
        while True:
            sequence += 1
            record = KeyValueStateMachine.encode_put(b"k%d" % (sequence % 1000), b"v" * 100)
            try:
                await client.propose([record])
            except IndeterminateError:
                self.indeterminate += 1
                continue
            self.acknowledged_at.append(trio.current_time())

    def longest_gap_s(self, start: float, end: float) -> float:
        """The longest time without an acknowledgement within [start, end]
        (its ends count as acknowledgements: a gap open at either end is
        measured up to it)."""
        times = [start, *(t for t in self.acknowledged_at if start < t < end), end]
        return max(later - earlier for earlier, later in zip(times, times[1:]))

    async def acknowledges_after(self, moment: float, timeout_s: float) -> None:
        with trio.fail_after(timeout_s):
            while not self.acknowledged_at or self.acknowledged_at[-1] <= moment:
                await trio.sleep(0.005)


async def quorum_view(cluster: Cluster) -> Any:
    """DescribeQuorum as the leader answers it (only the leader knows every
    replica's progress): any node names the leader, which is then asked."""
    with trio.fail_after(WAIT_S):
        while True:
            for node_id in cluster.ports:
                try:
                    async with QuorumClient(
                        [f"{node_id}@{cluster.endpoint(node_id)}"], cluster_id=CLUSTER_ID, retry_timeout_s=1
                    ) as client:
                        view = await client.describe()
                except QuorumClientError:
                    continue
                if view.leader_id is not None and view.node_id == view.leader_id:
                    return view
            await trio.sleep(0.02)


async def wait_caught_up_observer(cluster: Cluster, node_id: int) -> None:
    """Until the leader sees ``node_id``'s disk fetching at its high
    watermark as an observer (what `add-voter` requires)."""
    with trio.fail_after(WAIT_S):
        while True:
            view = await quorum_view(cluster)
            rows = [r for r in view.observers if r.node_id == node_id and r.directory_id == cluster.directory_ids[node_id]]
            if rows and rows[0].log_end_offset is not None and rows[0].log_end_offset >= view.high_watermark - 1:
                return
            await trio.sleep(0.05)


async def run_trials(cluster: Cluster, trials: int) -> dict[str, Any]:
    writer = Writer()
    add_s: list[float] = []
    remove_s: list[float] = []
    self_removal_gap_s: list[float] = []
    baseline_gap_s: list[float] = []
    async with QuorumClient(cluster.bootstrap, cluster_id=CLUSTER_ID, retry_timeout_s=30) as writes, QuorumClient(
        cluster.bootstrap, cluster_id=CLUSTER_ID, retry_timeout_s=30
    ) as admin:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run, writes)
            await writer.acknowledges_after(trio.current_time(), WAIT_S)
            for trial in range(trials):
                # A quiet second: the write gap with no change under way.
                quiet_start = trio.current_time()
                await trio.sleep(1.0)
                baseline_gap_s.append(writer.longest_gap_s(quiet_start, trio.current_time()))

                await wait_caught_up_observer(cluster, JOINER)
                started = trio.current_time()
                await admin.add_voter(JOINER, cluster.directory_ids[JOINER], [cluster.endpoint(JOINER)])
                add_s.append(trio.current_time() - started)
                started = trio.current_time()
                await admin.remove_voter(JOINER, cluster.directory_ids[JOINER])
                remove_s.append(trio.current_time() - started)

                leader = (await quorum_view(cluster)).leader_id
                started = trio.current_time()
                await admin.remove_voter(leader, cluster.directory_ids[leader])
                answered = trio.current_time()
                await writer.acknowledges_after(answered, WAIT_S)
                await trio.sleep(AFTER_ANSWER_S)
                self_removal_gap_s.append(writer.longest_gap_s(started, answered + AFTER_ANSWER_S))
                # Back as a voter for the next trial (an operator's re-add).
                await wait_caught_up_observer(cluster, leader)
                await admin.add_voter(leader, cluster.directory_ids[leader], [cluster.endpoint(leader)])
                print(
                    f"  trial {trial + 1}: add {add_s[-1] * 1e3:.0f} ms, remove {remove_s[-1] * 1e3:.0f} ms, "
                    f"leader {leader} removes itself: writes stop {self_removal_gap_s[-1] * 1e3:.0f} ms "
                    f"(quiet-second gap {baseline_gap_s[-1] * 1e3:.1f} ms)",
                    flush=True,
                )
            nursery.cancel_scope.cancel()
    return {
        "trials": trials,
        "add_caught_up_voter": latency_summary_ms(add_s),
        "remove_voter": latency_summary_ms(remove_s),
        "leader_self_removal_write_gap": latency_summary_ms(self_removal_gap_s),
        "quiet_write_gap": latency_summary_ms(baseline_gap_s),
        "writes_acknowledged": len(writer.acknowledged_at),
        "writes_indeterminate": writer.indeterminate,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.voter_change_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10, help="rounds of add, remove and leader self-removal (default 10)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures to OUT")
    parser.add_argument("--logs", metavar="DIR", type=Path, help="copy the nodes' logs to DIR at the end")
    arguments = parser.parse_args(argv)
    if arguments.trials < 1:
        parser.error("--trials must be at least 1")
    install_cleanup_handlers()
    cluster = Cluster()
    try:
        cluster.start()
        print(f"4 kraft-quorum node processes (3 voters, 1 joining disk), fsync on, in {cluster.workdir}", flush=True)
        result = trio.run(run_trials, cluster, arguments.trials)
    finally:
        cluster.stop(logs_to=arguments.logs)
    rows = (
        ("add a caught-up voter", "add_caught_up_voter"),
        ("remove a voter (not the leader)", "remove_voter"),
        ("leader removes itself: writes stop", "leader_self_removal_write_gap"),
        ("write gap, no change (baseline)", "quiet_write_gap"),
    )
    print(f"\n{'':36}{'p50 ms':>10}{'max ms':>10}")
    for label, key in rows:
        print(f"{label:36}{result[key]['p50_ms']:>10.1f}{result[key]['max_ms']:>10.1f}")
    print(f"writes acknowledged {result['writes_acknowledged']:,}, indeterminate {result['writes_indeterminate']}")
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
