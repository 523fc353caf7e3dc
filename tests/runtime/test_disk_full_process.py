"""A real `kraft-quorum node` whose data directory is a tiny tmpfs (issue
14, part 3): when it fills up, the process stays up, says so in one log
line, and the other two keep committing; once the filesystem grows it
resumes by itself, catches up, and its directory checks sound. (That it
stops acknowledging is shown by tests/runtime/test_runtime_disk_errors.py;
here the filesystem may free space of its own when a write rolls back.)

Needs root (mount); without it the test is skipped with one loud line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent.parent / "processes"))

from cluster import ProcessCluster  # noqa: E402

from quorum.client import IndeterminateError, QuorumClient  # noqa: E402
from quorum.runtime import KeyValueStateMachine  # noqa: E402
from quorum.storage import check_storage  # noqa: E402

pytestmark = pytest.mark.processes

VICTIM = 3


def put(key: str, value: bytes) -> bytes:
    return KeyValueStateMachine.encode_put(key.encode(), value)


@pytest.fixture
def small_disk_cluster(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: mounting a tiny tmpfs needs root; the full-disk process test did not run")
    cluster = ProcessCluster(tmp_path)
    mount_point = cluster.data_dir(VICTIM)
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)], check=True)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()
        subprocess.run(["umount", str(mount_point)], check=True)


async def propose(client: QuorumClient, records: list[bytes]) -> int:
    for _ in range(10):
        try:
            return await client.propose(records)
        except IndeterminateError:
            continue
    raise AssertionError("no proposal committed")


async def victim_view(cluster: ProcessCluster) -> tuple[int | None, int]:
    """(log end offset of the victim as its leader sees it, high watermark)."""
    leader = await cluster.leader()
    async with QuorumClient([f"127.0.0.1:{cluster.ports[leader]}"], retry_timeout_s=2) as probe:
        answer = await probe.describe()
    replica = next(r for r in answer.voters if r.node_id == VICTIM)
    return replica.log_end_offset, answer.high_watermark


async def test_a_node_on_a_full_filesystem_stays_up_and_resumes_when_it_grows(small_disk_cluster):
    cluster = small_disk_cluster
    value = b"x" * 2000
    async with cluster.client(retry_timeout_s=30) as client:
        await propose(client, [put("k", b"first")])
        # The victim may lead or follow: either way the other two are a
        # majority with room on their disks.
        # About 2 kB a record: the 256 kB filesystem fills within 200.
        with trio.fail_after(120):
            index = 0
            while "disk write failed (ENOSPC" not in cluster.log_text(VICTIM):
                await propose(client, [put(f"k{index % 10}", value)])
                index += 1
        # The process is up; the other two keep committing.
        assert cluster.processes[VICTIM].poll() is None
        for more in range(20):
            await propose(client, [put("after-full", b"%d" % more)])
        assert cluster.processes[VICTIM].poll() is None

        subprocess.run(
            ["mount", "-o", "remount,size=64m", str(cluster.data_dir(VICTIM))], check=True
        )
        with trio.fail_after(60):
            while True:
                end, high_watermark = await victim_view(cluster)
                if "disk writes succeed again" in cluster.log_text(VICTIM) and end is not None and end >= high_watermark:
                    break
                await trio.sleep(0.1)
    assert cluster.processes[VICTIM].poll() is None
    # One line per transition: every failure has its recovery. (Space a
    # rolled-back write frees may end a failure before the remount.)
    log_text = cluster.log_text(VICTIM)
    assert log_text.count("disk write failed") == log_text.count("disk writes succeed again") >= 1
    assert "Traceback" not in log_text
    cluster.stop_all()
    report = check_storage(cluster.data_dir(VICTIM))
    assert report.verdict == "sound", report.lines
