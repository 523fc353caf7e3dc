"""A replicated bank ledger, and a campaign that checks it never overdraws.

The ledger is a ``Replicated`` class served by three node processes; the
campaign transfers money between four accounts from four clients while
nodes are killed, paused and cut off, and the checker searches the history
for an order of the transfers in which every one that succeeded was legal
(no account below zero) and every read saw the balances of that order.

    python examples/bank_ledger.py [--seconds 10] [--checker spark|reference] [--buggy]

``--buggy`` runs a ledger that forgets the overdraft check: the checker
finds the transfer that overdrew, with the order of operations that proves it.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from typing import Any

from quorum.replicated import Replicated, query, replicated

ACCOUNTS = ("alice", "bob", "carol", "dave")
OPENING_BALANCE = 100


class InsufficientFunds(Exception):
    pass


class Ledger(Replicated):
    def __init__(self):
        self.accounts = {name: OPENING_BALANCE for name in ACCOUNTS}

    @replicated
    def transfer(self, source, target, amount):
        if self.accounts[source] < amount:
            raise InsufficientFunds(f"{source} has {self.accounts[source]}, cannot send {amount}")
        self.accounts[source] -= amount
        self.accounts[target] += amount

    @query
    def read(self):
        return dict(self.accounts)


class OverdraftLedger(Ledger):
    """The bug: no balance check."""

    @replicated
    def transfer(self, source, target, amount):
        self.accounts[source] -= amount
        self.accounts[target] += amount


# The sequential specification the history is checked against:
# step(state, op) -> (ok, result, new_state).
def ledger_step(state: dict[str, int], op: dict[str, Any]) -> tuple[bool, Any, dict[str, int]]:
    if op["f"] == "read":
        return True, state, state
    source, target, amount = op["value"]
    if state[source] < amount:
        return False, None, state  # an overdraft cannot succeed
    state[source] -= amount
    state[target] += amount
    return True, None, state


INITIAL_STATE = {name: OPENING_BALANCE for name in ACCOUNTS}


def generate(rng: random.Random) -> dict[str, Any]:
    """One operation: a read, or a transfer between two accounts."""
    if rng.random() < 0.3:
        return {"f": "read", "value": None}
    source, target = rng.sample(ACCOUNTS, 2)
    return {"f": "transfer", "value": [source, target, rng.randint(1, 60)]}


def main() -> int:
    import trio

    from jepsen_like.campaign import ReplicatedCluster, run_own_campaign
    from jepsen_like.checker import model_from_step

    parser = argparse.ArgumentParser(description="A campaign against a replicated bank ledger.")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--checker", choices=("spark", "search"), default="spark", help="search: the linearizability search alone, no Spark")
    parser.add_argument("--buggy", action="store_true", help="run the ledger without its overdraft check")
    parser.add_argument("--nemeses", default="kill,pause,partition", help="comma-separated; empty for none")
    args = parser.parse_args()
    model = model_from_step(ledger_step, INITIAL_STATE, name="bank-ledger", queries=("read",))
    target = OverdraftLedger if args.buggy else Ledger
    nemeses = tuple(name for name in args.nemeses.split(",") if name)

    async def campaign() -> Any:
        with tempfile.TemporaryDirectory(prefix="bank-ledger-") as run_dir:
            with ReplicatedCluster(target, run_dir, queries=("read",)) as cluster:
                result = await run_own_campaign(
                    cluster, model=model, generate=generate, run_dir=run_dir,
                    duration_s=args.seconds, nemeses=nemeses, checker=args.checker,
                )  # fmt: skip
            counts = result.counts
            print(f"{counts['ok']} ok, {counts['fail']} fail, {counts['info']} info; {result.faults} faults")
            if args.checker == "spark":
                linearizability = result.result.checks["linearizability"]
                witnesses = linearizability.get("witnesses", [])
                print(f"linearizability: {linearizability['status']}")
            else:
                witnesses = [verdict.witness for verdict in result.result.values() if verdict.witness]
            for witness in witnesses[:1]:
                op = witness["op"]
                print(f"not linearizable at: {op['f']} {op.get('invoke_value')} -> {op['type']}")
            return result.valid

    valid = trio.run(campaign)
    print(f"valid: {valid}")
    return 0 if valid is True else 1


if __name__ == "__main__":
    sys.exit(main())
