"""A real `kraft-quorum node` told to refuse a damaged data directory
(`--on-damage refuse`; a lost election state is refused whatever the flag)
exits at once with the storage error's one sentence and exit status 3, never
a traceback and never a truncation (issue 14); `check-storage` agrees,
read-only. The default, repair, is tested in
test_damaged_log_repair_processes.py."""

from __future__ import annotations

import subprocess

import pytest
from cluster import BIN, free_ports

from quorum._types import ElectionState, Entry, RecordKind
from quorum.storage import FileStorage


def _node_dir(path):
    """A node-1 data directory of cluster "pykraft" with 40 records in 10
    batches, as a running node leaves it."""
    with FileStorage.open(path, node_id=1, cluster_id="pykraft", fsync=False) as storage:
        storage.persist(election_state=ElectionState(3, voted_for=2, leader_id=2))
        for base in range(0, 40, 4):
            storage.persist(append=[Entry(o, 3, RecordKind.DATA, b"v%d" % o * 8) for o in range(base, base + 4)])
    return path


def _flip_middle_byte(data_dir):
    segment = next((data_dir / "log").glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x40
    segment.write_bytes(bytes(data))


def _lose_election_state(data_dir):
    (data_dir / "quorum-state.json").unlink()


@pytest.mark.parametrize(
    "damage, sentence, flags",
    [
        (_flip_middle_byte, "is damaged at byte", ["--on-damage", "refuse"]),
        (_lose_election_state, "is missing although the log holds offsets up to 40", []),
        (_lose_election_state, "is missing although the log holds offsets up to 40", ["--on-damage", "repair"]),
    ],
)
def test_node_refuses_a_damaged_data_dir_with_one_sentence(tmp_path, damage, sentence, flags):
    data_dir = _node_dir(tmp_path / "node1")
    damage(data_dir)
    before = {p.relative_to(data_dir): p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file()}
    ports = free_ports(3)
    voters = ",".join(f"{i}@127.0.0.1:{port}" for i, port in zip((1, 2, 3), ports))
    node = subprocess.run(
        [str(BIN / "kraft-quorum"), "node", "--plaintext", "--node-id", "1", "--voters", voters, "--data-dir", str(data_dir), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert node.returncode == 3, node.stderr
    assert "Traceback" not in node.stderr
    last_line = node.stderr.strip().splitlines()[-1]
    assert last_line.startswith("Error: ") and sentence in last_line and last_line.endswith("describes.")
    after = {p.relative_to(data_dir): p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file()}
    assert after == before  # nothing cut, nothing rewritten (the lock file is empty either way)

    check = subprocess.run(
        [str(BIN / "kraft-quorum"), "check-storage", str(data_dir)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 3 and check.stdout.strip().endswith("verdict: damaged"), check.stdout


async def test_kill_9_under_load_leaves_a_sound_or_torn_log_never_damage(process_cluster):
    """What held before issue 14 and must keep holding: kill -9 of a busy
    node (leader, then a follower) leaves a directory that check-storage
    calls sound or torn, never damaged; the node restarts on it, and every
    acknowledged write is still there."""
    import signal

    import trio

    from quorum.client import IndeterminateError
    from quorum.runtime import KeyValueStateMachine

    cluster = process_cluster
    acknowledged: dict[str, str] = {}
    milestones = {150: trio.Event(), 300: trio.Event(), 450: trio.Event()}

    async def writer(client, name, stop):
        sequence = 0
        while not stop.is_set():
            key, value = f"{name}-{sequence}", str(sequence)
            sequence += 1
            try:
                await client.propose([KeyValueStateMachine.encode_put(key.encode(), value.encode())])
            except IndeterminateError:
                continue  # may or may not have happened: not counted
            acknowledged[key] = value
            for count, event in milestones.items():
                if len(acknowledged) >= count:
                    event.set()

    def check(node_id):
        return subprocess.run(
            [str(BIN / "kraft-quorum"), "check-storage", str(cluster.data_dir(node_id))],
            capture_output=True,
            text=True,
            timeout=60,
        )

    async with cluster.client(retry_timeout_s=30) as client:
        stop = trio.Event()
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for name in ("a", "b", "c"):
                    nursery.start_soon(writer, client, name, stop)
                await milestones[150].wait()
                leader = await cluster.leader()
                cluster.kill(leader, signal.SIGKILL)
                result = check(leader)
                assert result.returncode in (0, 1), result.stdout
                cluster.start(leader)
                await milestones[300].wait()
                current_leader = await cluster.leader()
                follower = next(node for node in sorted(cluster.ports) if node != current_leader)
                cluster.kill(follower, signal.SIGKILL)
                result = check(follower)
                assert result.returncode in (0, 1), result.stdout
                cluster.start(follower)
                await milestones[450].wait()
                stop.set()
        for key, value in sorted(acknowledged.items()):
            _, answer = await client.read(key.encode())
            assert KeyValueStateMachine.decode_answer(answer)[0] == value.encode(), key
