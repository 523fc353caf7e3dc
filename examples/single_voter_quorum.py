"""A one-voter quorum inside a trio program: a replicated ledger of accounts.

The program embeds ``open_quorum_node`` with a state machine of its own
(``Ledger``), on real TCP and a real data directory:

1. writes deposits and transfers (a transfer that would overdraw is refused
   by the state machine, deterministically, on every replica);
2. reads in both modes (linearizable: a ReadIndex round; leader-local: the
   leader's own applied state);
3. takes snapshots (every 25 records here) so the log is trimmed;
4. closes the node and opens it again on the same directory: the state comes
   back from the latest snapshot plus the records after it.

One voter is a majority of itself: nothing is replicated, but every record
is fsynced before it counts as committed, exactly as with three voters.

    python examples/single_voter_quorum.py [--data-dir DIR] [--transfers N]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence

import msgpack
import trio

from quorum import Entry
from quorum.runtime import NodeConfig, open_quorum_node


class Ledger:
    """Account balances. Records (msgpack):

    - ``["deposit", account, amount]``;
    - ``["transfer", source, target, amount]``: applied only if ``source``
      holds at least ``amount``; answers ``b"ok"`` or ``b"refused"``.

    ``apply``, ``snapshot`` and ``restore`` are deterministic: every replica
    that applies the same records holds the same balances.
    """

    def __init__(self) -> None:
        self.balances: dict[str, int] = {}
        self.records_applied = 0

    @staticmethod
    def deposit(account: str, amount: int) -> bytes:
        return msgpack.packb(["deposit", account, amount])

    @staticmethod
    def transfer(source: str, target: str, amount: int) -> bytes:
        return msgpack.packb(["transfer", source, target, amount])

    def apply(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        answers: dict[int, bytes] = {}
        for entry in entries:
            command = msgpack.unpackb(entry.data)
            self.records_applied += 1
            if command[0] == "deposit":
                _, account, amount = command
                self.balances[account] = self.balances.get(account, 0) + amount
            elif command[0] == "transfer":
                _, source, target, amount = command
                if self.balances.get(source, 0) >= amount:
                    self.balances[source] -= amount
                    self.balances[target] = self.balances.get(target, 0) + amount
                    answers[entry.offset] = b"ok"
                else:
                    answers[entry.offset] = b"refused"
        return answers

    def snapshot(self) -> bytes:
        return msgpack.packb(sorted(self.balances.items()))

    def restore(self, data: bytes) -> None:
        self.balances = {account: amount for account, amount in msgpack.unpackb(data)}


def node_config(data_dir: str) -> NodeConfig:
    return NodeConfig(
        node_id=1,
        # Port 0: the OS picks a free port (a single voter dials nobody).
        voters={1: ("127.0.0.1", 0)},
        data_dir=data_dir,
        snapshot_every_records=25,
        # Keep only 5 records behind each snapshot (default 1000), so the
        # log start visibly moves.
        quorum={"snapshot_retained_records": 5},
        plaintext=True,
    )


async def run(data_dir: str, transfers: int) -> None:
    async with open_quorum_node(node_config(data_dir), Ledger()) as node:
        leader = await node.wait_for_leader()  # one election timeout, even alone
        print(f"node {node.node_id} listening on 127.0.0.1:{node.listen_port}; leader: {leader}")

        offset = await node.propose([Ledger.deposit("alice", 100), Ledger.deposit("bob", 20)])
        print(f"deposits committed at offsets {offset}..{offset + 1}")

        refused = 0
        for number in range(transfers):
            source, target = ("alice", "bob") if number % 2 == 0 else ("bob", "carol")
            # propose_with_answers also returns what the state machine answered.
            _, answers = await node.propose_with_answers([Ledger.transfer(source, target, 7)])
            refused += answers[0] == b"refused"
        print(f"{transfers} transfers committed, {refused} refused by the ledger (would overdraw)")

        read_offset = await node.read("linearizable")
        ledger = node.state_machine
        print(f"linearizable read at offset {read_offset}: {dict(sorted(ledger.balances.items()))}")
        local_offset = await node.read("leader-local")
        print(f"leader-local read at offset {local_offset}: total {sum(ledger.balances.values())}")
        stats = node.statistics()
        print(
            "statistics: "
            + ", ".join(f"{key}={stats[key]}" for key in ("role", "epoch", "high_watermark", "log_start_offset", "log_end_offset"))
        )
        before = dict(ledger.balances)

    # The same directory again: the latest snapshot, then the records after it.
    restored = Ledger()
    async with open_quorum_node(node_config(data_dir), restored) as node:
        await node.wait_for_leader()
        await node.read("linearizable")
        stats = node.statistics()
        print(
            f"reopened: epoch {stats['epoch']}, log {stats['log_start_offset']}..{stats['log_end_offset']}, "
            f"{restored.records_applied} records replayed after the snapshot"
        )
        print(f"balances after restart {'match' if restored.balances == before else 'DIFFER'}: {dict(sorted(restored.balances.items()))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="default: a fresh temporary directory")
    parser.add_argument("--transfers", type=int, default=60)
    args = parser.parse_args()
    if args.data_dir:
        trio.run(run, args.data_dir, args.transfers)
    else:
        with tempfile.TemporaryDirectory(prefix="pykraft-single-") as data_dir:
            trio.run(run, data_dir, args.transfers)


if __name__ == "__main__":
    main()
