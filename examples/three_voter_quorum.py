"""A three-voter quorum inside one trio program, on loopback TCP and real files.

Three ``open_quorum_node`` nodes, each with its own data directory and port,
talk over real sockets exactly as three processes would (for three processes,
run ``kraft-quorum node`` three times, or this module's ``Voter`` in each).
The program:

1. waits for an election and writes through the leader;
2. shows what a follower says to a write: ``NotLeaderError`` naming the
   leader (a client retries there);
3. reads linearizably (ReadIndex) on the leader, then reads a follower's
   own copy (a follower's state machine is only as fresh as its last fetch);
4. prints the leader's view of replication (``describe()``);
5. stops the leader (it hands over with EndQuorumEpoch), writes through the
   new leader, restarts the old one on its data directory and waits until it
   has caught up;
6. writes and reads with a ``QuorumClient`` bootstrapped at a follower (it
   follows the leader hint).

    python examples/three_voter_quorum.py [--writes N]
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import time
from pathlib import Path

import trio

from quorum import NotLeaderError
from quorum.client import QuorumClient
from quorum.runtime import KeyValueStateMachine, NodeConfig, QuorumNodeHandle, open_quorum_node

# Quicker timers than the defaults (1 s election, 2 s fetch) so the demo is
# short; keep fetch_max_wait_ms below fetch_timeout_ms.
TIMERS = {"election_timeout_ms": 500, "fetch_timeout_ms": 1000, "fetch_max_wait_ms": 250}


def free_ports(count: int) -> list[int]:
    """Ports the OS says are free now (good enough for a demo on loopback)."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


class Voter:
    """One voter in its own task; ``stop()`` closes it as SIGTERM would."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.handle: QuorumNodeHandle | None = None
        self._stop = trio.Event()
        self._stopped = trio.Event()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with open_quorum_node(self.config, KeyValueStateMachine()) as handle:
            self.handle = handle
            task_status.started()
            await self._stop.wait()
        self._stopped.set()

    @property
    def running(self) -> bool:
        """Started and not yet stopped."""
        return self.handle is not None and not self._stopped.is_set()

    async def stop(self) -> None:
        self._stop.set()
        await self._stopped.wait()


async def leader_of(voters: dict[int, Voter]) -> QuorumNodeHandle:
    """The voter that leads and has committed its epoch's first record."""
    while True:
        for voter in voters.values():
            if voter.running and voter.handle.is_leader:
                return voter.handle
        await trio.sleep(0.01)


async def run(base_dir: Path, writes: int) -> None:
    ports = free_ports(3)
    addresses = {node_id: ("127.0.0.1", port) for node_id, port in zip((1, 2, 3), ports)}
    configs = {
        node_id: NodeConfig(node_id=node_id, voters=addresses, data_dir=base_dir / f"node{node_id}", quorum=TIMERS, plaintext=True)
        for node_id in addresses
    }
    print("voters: " + ",".join(f"{n}@{host}:{port}" for n, (host, port) in addresses.items()))
    async with trio.open_nursery() as nursery:
        voters = {node_id: Voter(config) for node_id, config in configs.items()}
        for voter in voters.values():
            await nursery.start(voter.run)

        started = time.monotonic()
        leader = await leader_of(voters)
        print(f"node {leader.node_id} leads epoch {leader.describe().epoch} after {time.monotonic() - started:.2f} s")

        for number in range(writes):
            await leader.propose([KeyValueStateMachine.encode_put(b"color", f"blue-{number}".encode())])
        print(f"{writes} writes committed; high watermark {leader.describe().high_watermark}")

        follower = next(v.handle for v in voters.values() if v.handle is not leader)
        try:
            await follower.propose([KeyValueStateMachine.encode_put(b"color", b"red")])
        except NotLeaderError as error:
            print(f"a write to follower {follower.node_id}: NotLeaderError, leader hint {error.leader_id}")

        offset = await leader.read("linearizable")
        value, version = leader.state_machine.get(b"color")
        print(f"linearizable read on the leader at offset {offset}: color={value.decode()} (written at offset {version})")
        value, version = follower.state_machine.get(b"color")
        print(f"follower {follower.node_id}'s own copy: color={value.decode()} (its high watermark {follower.describe().high_watermark})")

        print("the leader's view of replication:")
        for replica in leader.describe().voters:
            print(f"  voter {replica.node_id}: log end offset {replica.log_end_offset}, last fetch at {replica.last_fetch_ms} ms")

        old_leader_id = leader.node_id
        stopped_at = time.monotonic()
        await voters[old_leader_id].stop()  # resigns first: EndQuorumEpoch to the others
        leader = await leader_of(voters)
        print(
            f"node {old_leader_id} stopped; node {leader.node_id} leads epoch {leader.describe().epoch} "
            f"after {(time.monotonic() - stopped_at) * 1000:.0f} ms"
        )
        offset = await leader.propose([KeyValueStateMachine.encode_put(b"color", b"green")])
        print(f"write through the new leader committed at offset {offset}")

        voters[old_leader_id] = Voter(configs[old_leader_id])  # same data directory
        await nursery.start(voters[old_leader_id].run)
        restarted = voters[old_leader_id].handle
        assert restarted is not None
        with trio.fail_after(10):
            while restarted.state_machine.get(b"color")[0] != b"green":
                await trio.sleep(0.01)
        stats = restarted.statistics()
        print(
            f"node {old_leader_id} restarted as {stats['role']} of epoch {stats['epoch']}, "
            f"caught up: color=green at high watermark {stats['high_watermark']}"
        )

        # A client writes and reads through any node: bootstrapped at a
        # follower, it follows the NOT_LEADER hint to the leader.
        follower = next(v.handle for v in voters.values() if v.running and not v.handle.is_leader)
        bootstrap = [f"{follower.node_id}@127.0.0.1:{follower.listen_port}"] + [
            f"{n}@{host}:{port}" for n, (host, port) in addresses.items() if n != follower.node_id
        ]
        async with QuorumClient(bootstrap) as client:
            offset = await client.propose([KeyValueStateMachine.encode_put(b"color", b"purple")])
            answered_by = client.last_answered_by
            _, answer = await client.read(b"color")  # the state machine's query(b"color"), linearizable
            value, version = KeyValueStateMachine.decode_answer(answer)
        print(
            f"a client bootstrapped at follower {follower.node_id} wrote at offset {offset} "
            f"(answered by node {answered_by.node_id}); read back: color={value.decode()} (offset {version})"
        )

        for voter in voters.values():
            if voter.running:
                await voter.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pykraft-three-") as base_dir:
        trio.run(run, Path(base_dir), args.writes)


if __name__ == "__main__":
    main()
