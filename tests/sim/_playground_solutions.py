"""A way to solve each playground lesson (seed and options as the lesson
sets them), as steps both the Python tests and the browser test replay: the
Python side through ``Playground.act``, the browser through the page's own
buttons (``selector``)."""

from __future__ import annotations

from typing import Any

from jepsen_like.sim._playground import Playground

S = 1_000_000  # virtual microseconds per second


def _isolate(node: int, peers: tuple[int, ...]) -> list[tuple[str, Any]]:
    return [("click", {"do": "cut", "node": min(node, peer), "peer": max(node, peer)}) for peer in peers]


#: lesson id -> steps: ("advance", until_us) or ("click", action fields);
#: with seed 7, n1 leads epoch 1 from 1.35 s, and n3 takes over when n1 is cut off.
SOLUTIONS: dict[str, list[tuple[str, Any]]] = {
    "election": [("advance", 3 * S), ("click", {"do": "crash", "node": 1}), ("advance", 6 * S)],
    "replication": [("advance", 3 * S), ("click", {"do": "write", "node": 1, "key": "k"}), ("advance", 3_500_000)],
    "pre-vote": [("advance", 3 * S), *_isolate(2, (1, 3)), ("advance", 7 * S), ("click", {"do": "heal"}), ("advance", 10 * S)],
    "zombie-leader": [
        ("advance", 3 * S),
        *_isolate(1, (2, 3)),
        ("advance", 7 * S),
        ("click", {"do": "write", "node": 3, "key": "k"}),
        ("advance", 11 * S),  # past the leader-local bound: 1.5 fetch timeouts after the write
        ("click", {"do": "read", "node": 1, "key": "k", "mode": "leader-local"}),
        ("advance", 11_500_000),
    ],
    "check-quorum": [
        ("advance", 3 * S),
        *_isolate(1, (2, 3)),
        ("advance", 7 * S),
        ("click", {"do": "write", "node": 3, "key": "k"}),
        ("advance", 11 * S),  # past the leader-local bound: 1.5 fetch timeouts after the write
        ("click", {"do": "read", "node": 1, "key": "k", "mode": "leader-local"}),
        ("advance", 11_500_000),
    ],
    "broker-fencing": [
        ("advance", 3 * S),
        ("click", {"do": "add_broker"}),
        ("advance", 8 * S),
        *[("click", {"do": "cut", "node": voter, "peer": 101}) for voter in (1, 2, 3)],
        ("advance", 15 * S),
        ("click", {"do": "heal"}),
        ("advance", 20 * S),
    ],
    "fast-bounce": [
        ("advance", 3 * S),
        ("click", {"do": "add_broker"}),
        ("advance", 8 * S),
        ("click", {"do": "crash", "node": 101}),
        ("click", {"do": "restart", "node": 101}),
        ("advance", 14 * S),
    ],
    "snapshots": [
        ("advance", 3 * S),
        ("click", {"do": "crash", "node": 2}),
        *[step for i in range(9) for step in (("click", {"do": "write", "node": 1, "key": "k", "times": 10}), ("advance", 3 * S + (i + 1) * 200_000))],
        ("advance", 6 * S),
        ("click", {"do": "restart", "node": 2}),
        ("advance", 9 * S),
    ],
}


def selector(fields: dict[str, Any]) -> str:
    """The page's button for an action."""
    parts = [f'button[data-do="{fields["do"]}"]']
    for name in ("node", "peer", "mode"):
        if name in fields:
            parts.append(f'[data-{name}="{fields[name]}"]')
    parts.append('[data-extra="x10"]' if fields.get("times") == 10 else ":not([data-extra])")
    return "".join(parts)


def solve_in_python(playground: Any, steps: list[tuple[str, Any]]) -> None:
    """Replay ``steps`` on a ``Playground`` as the page would (its writes
    carry the values v1, v2, ... in order)."""
    written = 0
    for kind, arg in steps:
        if kind == "advance":
            playground.run_until(arg)
            continue
        fields = {k: v for k, v in arg.items() if k != "times"}
        for _ in range(arg.get("times", 1)):
            if fields["do"] == "write":
                written += 1
                fields["value"] = f"v{written}"
            playground.act(**fields)


def recorded_session() -> Playground:
    """A session that uses every kind of action."""
    playground = Playground(7)
    playground.run_until(3 * S)
    playground.act(do="write", node=1, key="x", value="1")
    playground.run_until(3_200_000)
    playground.act(do="cut", node=1, peer=2)
    playground.act(do="cut", node=1, peer=3)
    playground.run_until(4 * S)
    playground.act(do="read", node=1, key="x", mode="leader-local")
    playground.act(do="pause", node=2)
    playground.run_until(5 * S)
    playground.act(do="resume", node=2)
    playground.act(do="set", node=1, option="check_quorum", on=False)
    playground.run_until(8 * S)
    playground.act(do="mend", node=1, peer=2)
    playground.act(do="crash", node=1)
    playground.run_until(9 * S)
    playground.act(do="restart", node=1)
    playground.act(do="heal")
    playground.act(do="read", node=3, key="x", mode="linearizable")
    playground.act(do="set", node=2, option="pre_vote", on=False)
    playground.run_until(10 * S)
    playground.act(do="cut_zone", zone="az3")
    playground.run_until(11 * S)
    playground.act(do="mend_zone", zone="az3")
    playground.run_until(12 * S)
    return playground
