"""The playground's lessons: a goal, a hint and a check each.

A lesson starts a playground from its own seed and options; its check reads
only the simulation the learner steered (``Playground``), so the page and the
tests judge a lesson by the same code. docs/learn-raft.md links each lesson
(``playground/index.html#lesson=ID``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quorum import Role

from ._playground import PageDriver, Playground


@dataclass(frozen=True, slots=True)
class Lesson:
    """One guided exercise. ``check`` answers (done, what is still missing)."""

    id: str
    title: str
    goal: str
    hint: str
    check: Callable[[Playground], tuple[bool, str]]
    seed: int = 7
    options: dict[str, Any] = field(default_factory=dict)

    def start(self) -> Playground:
        return Playground(self.seed, self.options)

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "goal": self.goal, "hint": self.hint, "seed": self.seed, "options": dict(self.options)}


def _leaders(playground: Playground) -> list[tuple[int, int]]:
    """(epoch, node) of every leader elected so far, in order."""
    return [(event.epoch, event.node_id) for event in playground.sim.role_log if event.role is Role.LEADER]


def _crashed_leader(playground: Playground) -> tuple[bool, str]:
    if not any(a.do == "crash" for a in playground.actions):
        return False, "crash the leader first"
    leaders = _leaders(playground)
    if not leaders:
        return False, "wait for a first leader, then crash it"
    current = playground.sim.leader()
    if current is None:
        return False, "no leader yet: keep time running"
    first_epoch = leaders[0][0]
    epoch = playground.sim.nodes[current].core.epoch
    if not any(a.do == "crash" and a.node == leaders[0][1] for a in playground.actions):
        return False, f"the node you crashed was not the leader (n{leaders[0][1]} was)"
    if epoch <= first_epoch:
        return False, "no new leader yet: keep time running"
    return True, f"n{current} leads epoch {epoch}"


def _replicated(playground: Playground) -> tuple[bool, str]:
    sim = playground.sim
    acked = [op for op in sim.history if op["f"] == "write" and op["type"] == "ok"]
    if not acked:
        return False, "write a value through the leader"
    offset = acked[-1]["offset"]
    behind = [n for n, node in sorted(sim.nodes.items()) if node.core is None or node.core.high_watermark <= offset]
    if behind:
        return False, "the write is acknowledged; wait until every node's high watermark passes it (" + ", ".join(f"n{n}" for n in behind) + " behind)"
    return True, f"offset {offset} is below every node's high watermark"


def _isolated_then_healed(playground: Playground) -> tuple[int, int, int] | None:
    """(node, cut at, healed at) of a node the learner cut from every peer
    and later healed, or None."""
    voters = playground.options["voters"]
    cut: set[tuple[int, int]] = set()
    isolated_since: dict[int, int] = {}
    for action in playground.actions:
        if action.do == "cut":
            cut |= {(action.node, action.peer), (action.peer, action.node)}
        elif action.do == "mend":
            cut -= {(action.node, action.peer), (action.peer, action.node)}
        elif action.do == "heal":
            cut = set()
        for node in range(1, voters + 1):
            alone = all((node, peer) in cut for peer in range(1, voters + 1) if peer != node)
            if alone and node not in isolated_since:
                isolated_since[node] = action.at_us
            elif not alone and node in isolated_since:
                return node, isolated_since[node], action.at_us
    return None


def _pre_vote(playground: Playground) -> tuple[bool, str]:
    found = _isolated_then_healed(playground)
    if found is None:
        return False, "cut one follower from both others, wait, then heal it"
    node, cut_us, healed_us = found
    if healed_us - cut_us < 3_000_000:
        return False, f"n{node} was alone {(healed_us - cut_us) / 1e6:.1f} s: leave it alone at least 3 s"
    if playground.now_us < healed_us + 2_000_000:
        return False, "healed: keep time running 2 s"
    if len(_leaders(playground)) > 1:
        return False, "an election happened: the lone node disturbed the cluster (was pre-vote off?)"
    return True, f"n{node} came back without forcing an election"


def _zombie(playground: Playground) -> tuple[bool, str]:
    stale = playground.stale_reads()
    if stale:
        read = stale[0]
        return True, f"p{read['process']} read a stale value from n{read['node']} ({read['mode']})"
    return False, (
        "no stale read yet: cut the leader off, write through the new leader,"
        " then, over 3 s later, read leader-local at the old one"
    )


def _check_quorum(playground: Playground) -> tuple[bool, str]:
    found = [node for _, node, _ in playground.sim.resignations]
    if not found:
        return False, "cut the leader from both followers and keep time running"
    if playground.stale_reads():
        return False, "a stale read happened: was check quorum off on the old leader?"
    return True, f"n{found[0]} resigned by itself: no zombie to read from"


def _snapshot(playground: Playground) -> tuple[bool, str]:
    sim = playground.sim
    restarted = [a.node for a in playground.actions if a.do == "restart"]
    for node_id in restarted:
        core = sim.nodes[node_id].core
        leader = sim.leader()
        if core is None or leader is None or core.snapshot is None:
            continue
        if core.high_watermark >= sim.nodes[leader].core.high_watermark and core.log.start_offset > 0:
            return True, f"n{node_id} caught up from a snapshot ending at {core.snapshot.snapshot_id.end_offset}"
    return False, "crash a follower, write until the leader snapshots past it, restart the follower"


def _broker_records(playground: Playground) -> list[Any]:
    return list(playground.sim.broker_states) if playground.brokers else []


def _fenced_and_back(playground: Playground) -> tuple[bool, str]:
    records = _broker_records(playground)
    if not records:
        return False, "add a broker and keep time running until it registers"
    progress: dict[tuple[int, str], int] = {}  # (broker, incarnation) -> steps seen: Online, Fenced, Online
    for record in records:
        key = (record.broker_id, record.incarnation_id)
        step = progress.get(key, 0)
        wanted = ("Online", "Fenced", "Online")[step] if step < 3 else None
        if wanted is not None and record.new.value == wanted:
            progress[key] = step + 1
    best = max(progress.values(), default=0)
    if best >= 3:
        broker = next(key[0] for key, step in progress.items() if step >= 3)
        return True, f"b{broker} was unfenced, fenced, and unfenced again by the same process"
    return False, (
        "wait until the broker is Online",
        "cut the broker from every voter and wait for its session to run out (3 s)",
        "heal its links and wait until it is Online again",
    )[best]


def _fast_bounce(playground: Playground) -> tuple[bool, str]:
    online: dict[int, list[tuple[str, int]]] = {}
    for record in _broker_records(playground):
        if record.new.value == "Online" and record.broker_epoch is not None:
            online.setdefault(record.broker_id, []).append((record.incarnation_id, record.broker_epoch))
    for broker, seen in sorted(online.items()):
        incarnations = list(dict.fromkeys(incarnation for incarnation, _ in seen))
        if len(incarnations) >= 2:
            first = min(epoch for incarnation, epoch in seen if incarnation == incarnations[0])
            last = max(epoch for incarnation, epoch in seen if incarnation == incarnations[-1])
            if last > first:
                return True, f"b{broker} came back Online with broker epoch {last} (was {first}): the old incarnation is fenced out"
    if not online:
        return False, "add a broker and wait until it is Online"
    return False, "crash the Online broker and restart it at once, then keep time running"


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        "election",
        "Leader election",
        "Crash the leader and watch the others elect a new one in a later epoch.",
        "Wait for a leader (the dark node), press its crash button, keep time running: a follower's fetch timer runs out, it asks for pre-votes, then votes.",
        _crashed_leader,
    ),
    Lesson(
        "replication",
        "Log replication and the high watermark",
        "Write a value and watch it become committed everywhere: every node's high watermark passes it.",
        "Write through the leader. The leader appends, followers fetch it; the high watermark moves once a majority has it, and followers learn it on their next fetch.",
        _replicated,
    ),
    Lesson(
        "pre-vote",
        "Pre-vote (KIP-996)",
        "Cut one follower off for at least 3 seconds, then heal it: with pre-vote it cannot force an election when it comes back.",
        "Cut both links of a follower, run 3 s, heal. Then restart the lesson, switch pre-vote off on that follower (it takes effect on its restart) and try again.",
        _pre_vote,
    ),
    Lesson(
        "zombie-leader",
        "The zombie leader (KAFKA-15489), check quorum off",
        "With check quorum off, make the old leader serve a stale leader-local read after a new leader was elected.",
        "Cut the leader from both followers, wait for a new leader, write through it, then read leader-local at the old leader"
        " more than 3 s later: a leader-local read may lag one check-quorum window (1.5 fetch timeouts), no more.",
        _zombie,
        options={"check_quorum": False},
    ),
    Lesson(
        "check-quorum",
        "Check quorum stops the zombie",
        "Same moves with check quorum on: the cut-off leader resigns by itself and the stale read fails.",
        "Cut the leader from both followers and run: within 1.5 fetch timeouts without a majority of fetches it resigns.",
        _check_quorum,
    ),
    Lesson(
        "broker-fencing",
        "Broker registration, heartbeats and fencing",
        "Add a broker and watch it register and get unfenced; cut it off from the controller until it is fenced; heal it and see it unfenced again.",
        "Press 'add broker'. It registers (Fenced, with a broker epoch), heartbeats in its metadata fetches and is unfenced once caught up. Cut its three links: after the 3 s session timeout it fences itself, and so does the controller. Heal all.",
        _fenced_and_back,
        options={"brokers": True},
    ),
    Lesson(
        "fast-bounce",
        "The fast bounce (KIP-380 broker epochs)",
        "Restart an Online broker at once: its new incarnation comes back Online with a new, higher broker epoch.",
        "Add a broker, wait until it is Online, press crash then restart. The controller first refuses the new incarnation (it still hears the old one's session), then registers it with a new epoch: requests for the old epoch are refused from then on.",
        _fast_bounce,
        options={"brokers": True},
    ),
    Lesson(
        "snapshots",
        "Snapshots",
        "Make a restarted follower catch up from the leader's snapshot instead of its log.",
        "Crash a follower, press '10 writes' at the leader until it has snapshotted (every 20 records) past the follower, then restart it.",
        _snapshot,
        options={"snapshot_every_records": 20},
    ),
)


def lesson(lesson_id: str) -> Lesson:
    """The lesson called ``lesson_id``; raises KeyError."""
    for found in LESSONS:
        if found.id == lesson_id:
            return found
    raise KeyError(lesson_id)


def lessons_json() -> str:
    """Every lesson's text and starting point, for the page's menu."""
    return json.dumps([found.describe() for found in LESSONS])


def check_json(lesson_id: str, driver: PageDriver) -> str:
    """The page's check of ``lesson_id`` on ``driver``'s session:
    ``{"done": bool, "detail": str}``; raises KeyError."""
    done, detail = lesson(lesson_id).check(driver.playground)
    return json.dumps({"done": done, "detail": detail})
