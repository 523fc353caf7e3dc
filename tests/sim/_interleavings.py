"""Fingerprints of the interleavings the regression seeds guard, read from a
run's full trace (``run_scenario(..., trace=lines.append, full_trace=True)``).

Each fingerprint is a function ``(events, options) -> list[str]``: one line
per place in the run where the interleaving happens, empty when it does not.
``events`` are the trace's lines as ``(ms, text)``.

A seed only guards a bug while its schedule still produces the bug's events;
any change to the code or to the simulator's draws can move them. To find a
new seed that reproduces one (prints the first few that do)::

    PYTHONPATH=. .venv/bin/python tests/sim/_interleavings.py FINGERPRINT \\
        [--scenario random] [--start 0] [--seeds 2000] [--no-pre-vote]
"""

from __future__ import annotations

import re
import sys
from typing import Callable, Sequence

Events = list[tuple[float, str]]
Fingerprint = Callable[[Events, object], list[str]]

_LINE = re.compile(r"^\s*(?P<ms>\d+\.\d+) (?P<text>.*)$")
_ROLE = re.compile(r"^n(?P<node>\d+) (?P<role>unattached|prospective|candidate|leader|follower|resigned) e(?P<epoch>\d+)\b(?P<rest>.*)$")
_LEADER_LOCAL_REFUSED = re.compile(r"^client p\d+ read \S+ via n(?P<node>\d+) \(leader-local\): fail not_leader$")
_FETCH = re.compile(r"^n(?P<leader>\d+) <- (?P<node>\d+)->(?P=leader) Fetch e\d+ #\S+ offset=\d+ last=e(?P<last>\d+) ")
_SNAPSHOT_ANSWER = re.compile(r"^n(?P<node>\d+) <- (?P<leader>\d+)->(?P=node) FetchResp e(?P<epoch>\d+) #\S+ .*\bsnapshot=(?P<end>\d+) ")


def parse(lines: Sequence[str]) -> Events:
    """The trace's timed lines as ``(ms, text)``, text stripped."""
    events = []
    for line in lines:
        match = _LINE.match(line)
        if match:
            events.append((float(match["ms"]), match["text"].strip()))
    return events


def _restarted_leader_refused_a_local_read(events: Events, options, *, from_snapshot: bool) -> list[str]:
    # The refusal reaches the client at most delay_max after it left the
    # node, so a refusal seen at t was decided after t - delay_max; a
    # refusal seen before the leader's first commit was decided before it.
    delay_max_ms = options.faults.delay_max_ms
    snapshot_taken: set[int] = set()
    restarted: dict[int, bool] = {}  # node -> it restarted holding a snapshot
    windows: dict[int, tuple[int, float]] = {}  # restarted leader -> (epoch, since ms), until its first commit
    found = []
    for ms, text in events:
        if match := re.match(r"^n(\d+) snapshot at \d+$", text):
            snapshot_taken.add(int(match[1]))
        elif match := re.match(r"^n(\d+) RESTART$", text):
            restarted[int(match[1])] = int(match[1]) in snapshot_taken
        elif (match := _ROLE.match(text)) and int(match["node"]) in restarted:
            node = int(match["node"])
            if match["role"] == "leader":
                windows[node] = (int(match["epoch"]), ms)
            else:
                windows.pop(node, None)
        elif match := re.match(r"^n(\d+) commit ", text):
            node = int(match[1])
            if windows.pop(node, None) is not None:
                restarted.pop(node, None)
        elif match := _LEADER_LOCAL_REFUSED.match(text):
            node = int(match["node"])
            if node in windows and (restarted[node] or not from_snapshot):
                epoch, since_ms = windows[node]
                if ms - delay_max_ms > since_ms:  # it arrived after the election (no commit yet: still in the window)
                    found.append(
                        f"n{node} restarted{' from a snapshot' if restarted[node] else ''}, won epoch {epoch} at "
                        f"{since_ms:.3f} ms and refused a leader-local read (answered at {ms:.3f} ms) before its first commit"
                    )
    return found


def restarted_leader_refused_a_local_read(events: Events, options) -> list[str]:
    """A node restarted, was elected, and was asked for a leader-local read
    before a record of its own epoch committed (its state machine had not
    replayed the log yet): seed 15."""
    return _restarted_leader_refused_a_local_read(events, options, from_snapshot=False)


def snapshot_restored_leader_refused_a_local_read(events: Events, options) -> list[str]:
    """The same, by a node that restarted holding a snapshot: seed 105."""
    return _restarted_leader_refused_a_local_read(events, options, from_snapshot=True)


def epoch_lost_in_a_crash(events: Events, options) -> list[str]:
    """A node learned a new epoch (seed 43: and granted a vote in it),
    crashed before that election state was durable, and restarted in an
    older epoch."""
    epoch: dict[int, int] = {}
    voted_in: dict[int, int] = {}  # node -> epoch of the vote it granted last
    at_crash: dict[int, tuple[int, int | None]] = {}
    restarting: set[int] = set()  # its next role line is the epoch it restarted in
    found = []
    for ms, text in events:
        if match := re.match(r"^n(\d+) RESTART$", text):
            restarting.add(int(match[1]))
        elif match := _ROLE.match(text):
            node, role_epoch = int(match["node"]), int(match["epoch"])
            if node in restarting and node in at_crash:
                restarting.discard(node)
                crashed_epoch, vote_epoch = at_crash.pop(node)
                if role_epoch < crashed_epoch:
                    how = "voted in" if vote_epoch == crashed_epoch else "learned"
                    found.append(f"n{node} {how} epoch {crashed_epoch}, crashed, and restarted in epoch {role_epoch} at {ms:.3f} ms")
            epoch[node] = role_epoch
            if "(voted for" in match["rest"]:
                voted_in[node] = role_epoch
        elif match := re.match(r"^n(\d+) CRASH$", text):
            node = int(match[1])
            at_crash[node] = (epoch.get(node, 0), voted_in.get(node))
    return found


def healed_node_stood_again_and_again(events: Events, options) -> list[str]:
    """After the heal, the node with the short log stood at least twice, every
    vote for it was refused, and then an up-to-date voter won: seed 3 of
    partition-heal-disruption without pre-vote."""
    healed_at = next((ms for ms, text in events if text == "HEAL network"), None)
    if healed_at is None:
        return []
    stands: dict[int, list[int]] = {}
    granted: set[tuple[int, int]] = set()
    for ms, text in events:
        if ms < healed_at:
            continue
        if (match := _ROLE.match(text)) and match["role"] == "candidate":
            stands.setdefault(int(match["node"]), []).append(int(match["epoch"]))
        elif match := re.match(r"^n(\d+) <- \d+->\d+ VoteResp e(\d+) vote granted", text):
            granted.add((int(match[1]), int(match[2])))
        elif (match := _ROLE.match(text)) and match["role"] == "leader":
            winner = int(match["node"])
            return [
                f"n{node} stood in epochs {epochs} after the heal, was refused every vote, then n{winner} won epoch {match['epoch']}"
                for node, epochs in stands.items()
                if node != winner and len(epochs) >= 2 and not any((node, e) in granted for e in epochs)
            ]
    return []


def deposed_leader_sent_a_snapshot(events: Events, options) -> list[str]:
    """A node that had led an older epoch fetched from a newer leader with a
    last epoch older than that leader's, and was answered with a snapshot
    (the leader's log no longer held that epoch): seeds 100510, 100516."""
    led: dict[int, int] = {}  # node -> last epoch it led
    last_fetched: dict[int, int] = {}
    found = []
    for ms, text in events:
        if (match := _ROLE.match(text)) and match["role"] == "leader":
            led[int(match["node"])] = int(match["epoch"])
        elif match := _FETCH.match(text):
            last_fetched[int(match["node"])] = int(match["last"])
        elif match := _SNAPSHOT_ANSWER.match(text):
            node, epoch = int(match["node"]), int(match["epoch"])
            if node in led and led[node] < epoch and last_fetched.get(node, epoch) < epoch:
                found.append(
                    f"n{node} (leader of epoch {led[node]}) fetched with last epoch {last_fetched[node]} and "
                    f"n{match['leader']} (epoch {epoch}) answered with its snapshot at {match['end']}, at {ms:.3f} ms"
                )
    return found


_VOTER_CHANGE = re.compile(
    r"^(?:OPERATOR (?P<op>add|remove)(?: wiped)? n(?P<target>\d+)|n(?P<joiner>\d+) AUTO-JOIN) at n(?P<leader>\d+): "
    r"voters record at offset (?P<offset>\d+)$"
)


def lone_leader_gained_a_voter_by_auto_join(events: Events, options) -> list[str]:
    """The leader was the only voter (operators had removed the others) and
    auto-join added a second: seed 46403, where the lone leader then
    resigned for check quorum 3 ms later. The voter set is followed through
    the changes the trace reports (an uncommitted change later truncated
    would be miscounted; the test's own assertions say what must hold)."""
    voters = set(range(1, options.voters + 1))
    found = []
    for ms, text in events:
        match = _VOTER_CHANGE.match(text)
        if not match:
            continue
        leader = int(match["leader"])
        if match["joiner"] is not None:
            if voters == {leader}:
                found.append(
                    f"n{leader}, the only voter, added n{match['joiner']} by auto-join at offset {match['offset']}, "
                    f"at {ms:.3f} ms"
                )
            voters.add(int(match["joiner"]))
        elif match["op"] == "add":
            voters.add(int(match["target"]))
        else:
            voters.discard(int(match["target"]))
    return found


_DAMAGE_FOUND = re.compile(r"^n(?P<node>\d+) log damaged at offset \d+")


def damaged_observer_added_as_a_voter(events: Events, options) -> list[str]:
    """A node restarted with a damaged log while it was no voter (an
    observer, or a spare), and was added as a voter later: seed 12712, where
    the core dropped such a node's repair but storage kept the marker, so at
    its next restart the voter repaired again, could not vote, and with a
    second damaged voter no majority could elect a leader (liveness). The
    voter set is followed as in ``lone_leader_gained_a_voter_by_auto_join``."""
    voters = set(range(1, options.voters + 1))
    damaged_as_observer: dict[int, float] = {}
    found = []
    for ms, text in events:
        if (match := _DAMAGE_FOUND.match(text)) and int(match["node"]) not in voters:
            damaged_as_observer.setdefault(int(match["node"]), ms)
            continue
        match = _VOTER_CHANGE.match(text)
        if not match:
            continue
        added = match["joiner"] or (match["target"] if match["op"] == "add" else None)
        if added is not None:
            node = int(added)
            if node in damaged_as_observer and node not in voters:
                found.append(
                    f"n{node}, damaged at {damaged_as_observer.pop(node):.3f} ms while no voter, was added as a voter "
                    f"at offset {match['offset']}, at {ms:.3f} ms"
                )
            voters.add(node)
        else:
            voters.discard(int(match["target"]))
    return found


_UPGRADE = re.compile(r"^OPERATOR upgrade voters at n\d+: voters record at offset (?P<offset>\d+)$")
_FETCH_OFFSET = re.compile(r"^n\d+ <- (?P<node>\d+)->\d+ Fetch e\d+ #\S+ offset=(?P<offset>\d+) ")
_VOTE_GRANTED = re.compile(r"^n(?P<candidate>\d+) <- (?P<voter>\d+)->(?P=candidate) VoteResp e\d+ vote granted")


def voter_without_the_upgrade_elected_an_added_one(events: Events, options) -> list[str]:
    """A voter whose log did not reach its static cluster's upgrade to
    dynamic voters (its last Fetch asked for an offset at or below the
    upgrade's record) voted for a candidate outside the static set: seed
    17247, where n3, down during the upgrade, refused n5 (added after it)
    while n2 repaired a damaged log, and no leader could be elected."""
    static_voters = set(range(1, options.voters + 1))
    upgrade_offset = None
    fetched_up_to: dict[int, int] = {}
    found = []
    for ms, text in events:
        if match := _UPGRADE.match(text):
            upgrade_offset = int(match["offset"])
        elif match := _FETCH_OFFSET.match(text):
            fetched_up_to[int(match["node"])] = int(match["offset"])
        elif upgrade_offset is not None and (match := _VOTE_GRANTED.match(text)):
            voter, candidate = int(match["voter"]), int(match["candidate"])
            if candidate not in static_voters and fetched_up_to.get(voter, 0) <= upgrade_offset:
                found.append(
                    f"n{voter} (fetching at offset {fetched_up_to.get(voter, 0)}, the upgrade at {upgrade_offset}) "
                    f"voted for n{candidate}, at {ms:.3f} ms"
                )
    return found


_BEGIN_EPOCH = re.compile(r"^n(?P<voter>\d+) <- (?P<leader>\d+)->(?P=voter) BeginEpoch e(?P<epoch>\d+)$")
_VOTE_GRANTED_IN = re.compile(
    r"^n(?P<candidate>\d+) <- (?P<voter>\d+)->(?P=candidate) VoteResp e(?P<epoch>\d+) vote granted"
)


def voter_behind_an_addition_elected_the_added_node(events: Events, options) -> list[str]:
    """A voter whose log ended before the record that added a node (its
    last Fetch asked for an offset at or below it, so the added node was
    outside its voter set) voted for that node, which won and sent it
    BeginQuorumEpoch in the same epoch: seed 266758, where n2 refused the
    leader it had elected five epochs running, and with n1 repairing no
    majority of {1, 2, 5} ever fetched from n5 (liveness)."""
    added_at: dict[int, int] = {}
    fetched_up_to: dict[int, int] = {}
    granted: dict[tuple[int, int], int] = {}  # (voter, epoch) -> candidate
    found = []
    for ms, text in events:
        if (match := _VOTER_CHANGE.match(text)) and match["op"] == "add":
            added_at[int(match["target"])] = int(match["offset"])
        elif match := _FETCH_OFFSET.match(text):
            fetched_up_to[int(match["node"])] = int(match["offset"])
        elif match := _VOTE_GRANTED_IN.match(text):
            voter, candidate = int(match["voter"]), int(match["candidate"])
            if candidate in added_at and fetched_up_to.get(voter, 0) <= added_at[candidate]:
                granted[voter, int(match["epoch"])] = candidate
        elif match := _BEGIN_EPOCH.match(text):
            voter, leader, epoch = int(match["voter"]), int(match["leader"]), int(match["epoch"])
            if granted.pop((voter, epoch), None) == leader:
                found.append(
                    f"n{voter} (fetching at offset {fetched_up_to.get(voter, 0)}, n{leader} added at "
                    f"{added_at[leader]}) elected n{leader} in epoch {epoch}, at {ms:.3f} ms"
                )
    return found


_DAMAGED_AT = re.compile(r"^n(?P<node>\d+) log damaged at offset (?P<offset>\d+) \(of (?P<end>\d+)\)")
_REPAIRED = re.compile(r"^n(?P<node>\d+) \w+ e\d+ .*\(log repaired ")
_VOTE_NAMING_DISK = re.compile(
    r"^n(?P<voter>\d+) <- (?P<candidate>\d+)->(?P=voter) Vote e(?P<epoch>\d+) (?:pre|vote) .*\bvoter-dir=\S+"
)


def damaged_below_its_addition_asked_to_vote(events: Events, options) -> list[str]:
    """A node whose log was damaged below the record that added it as a
    voter (what is left of its log holds a set without it, so it looks like
    an observer) was asked for its vote, before its repair finished, by a
    candidate naming its disk: seed 306014, where n4 dropped its repair state and granted n3,
    whose log lacked a committed record, its vote (leader completeness)."""
    added_at: dict[int, int] = {}
    damaged: dict[int, str] = {}
    found = []
    for ms, text in events:
        if (match := _VOTER_CHANGE.match(text)) and match["op"] == "add":
            added_at[int(match["target"])] = int(match["offset"])
        elif match := _DAMAGED_AT.match(text):
            node = int(match["node"])
            if node in added_at and int(match["offset"]) < added_at[node]:
                damaged[node] = f"damaged at {match['offset']} of {match['end']}, added at {added_at[node]}"
        elif (match := _REPAIRED.match(text)) and int(match["node"]) in damaged:
            del damaged[int(match["node"])]
        elif (match := _VOTE_NAMING_DISK.match(text)) and int(match["voter"]) in damaged:
            voter = int(match["voter"])
            found.append(f"n{voter} ({damaged.pop(voter)}) asked for its vote by n{match['candidate']}, at {ms:.3f} ms")
    return found


_WIPED = re.compile(r"^NEMESIS n(?P<node>\d+) DISK WIPED")
_FETCH_SNAPSHOT = re.compile(r"^n\d+ <- (?P<node>\d+)->\d+ FetchSnap e\d+ #\S+ snapshot=(?P<end>\d+) pos=0$")


def joiner_fetched_a_snapshot_from_before_the_upgrade(events: Events, options) -> list[str]:
    """A disk wiped after its static cluster's upgrade to dynamic voters (so
    formatted to join, with the upgrade's set) asked its leader for a
    snapshot that ends at or before the upgrade's VOTERS record (one
    without a voter set): seed 180174, where the joiner dropped it as "not
    a dynamic-voter snapshot" and asked again and again until that leader
    snapshotted once more."""
    upgrade_offset = None
    wiped_after_upgrade: set[int] = set()
    found = []
    for ms, text in events:
        if match := _UPGRADE.match(text):
            upgrade_offset = int(match["offset"])
        elif upgrade_offset is not None and (match := _WIPED.match(text)):
            wiped_after_upgrade.add(int(match["node"]))
        elif (match := _FETCH_SNAPSHOT.match(text)) and int(match["node"]) in wiped_after_upgrade:
            end = int(match["end"])
            if upgrade_offset is not None and end <= upgrade_offset:
                found.append(
                    f"n{match['node']}, wiped after the upgrade at offset {upgrade_offset}, fetched snapshot {end} "
                    f"at {ms:.3f} ms"
                )
                wiped_after_upgrade.discard(int(match["node"]))
    return found


_AUTO_JOIN_ASKS = re.compile(r"^n(?P<node>\d+) AUTO-JOIN asks n\d+ to add directory ")
_AUTO_JOIN_ENDS = re.compile(r"^n(?P<node>\d+) AUTO-JOIN (?P<how>at n\d+: voters record at offset \d+|refused by )")


def disk_wiped_while_an_auto_join_ask_travelled(events: Events, options) -> list[str]:
    """The nemesis wiped a disk while a node's auto-join ask was on its way
    to the leader, and the leader then added that node's disk: seed 336093,
    where the wiped disk was the asker's own (n5: {n2} became {n2, n5} with
    n5's old disk gone, no majority left)."""
    travelling: dict[int, list[str]] = {}
    found = []
    for ms, text in events:
        if match := _AUTO_JOIN_ASKS.match(text):
            travelling[int(match["node"])] = []
        elif (match := _WIPED.match(text)) is not None:
            for wipes in travelling.values():
                wipes.append(f"n{match['node']} at {ms:.3f} ms")
        elif match := _AUTO_JOIN_ENDS.match(text):
            wipes = travelling.pop(int(match["node"]), [])
            if wipes and match["how"].startswith("at "):
                found.append(f"n{match['node']} added at {ms:.3f} ms, its ask travelling while the nemesis wiped {', '.join(wipes)}")
    return found


_AUTO_JOIN_AT = re.compile(r"^n(?P<node>\d+) AUTO-JOIN at n(?P<leader>\d+): voters record at offset \d+$")
_VOTE_NAMING = re.compile(
    r"^n(?P<node>\d+) <- (?P<candidate>\d+)->(?P=node) Vote e\d+ (?P<kind>pre|vote) last=\S+ voter-dir=d(?P=node)-\d+$"
)
_VOTE_REFUSED = re.compile(r"^n(?P<candidate>\d+) <- (?P<node>\d+)->(?P=candidate) VoteResp e\d+ (?P<kind>pre|vote) rejected")


def observer_outranked_the_leader_that_added_it(events: Events, options) -> list[str]:
    """After the heal, a spare node whose addition a leader appended by
    auto-join (and nobody else did) refused that leader's vote request
    naming its disk, its log ahead of the leader's: seed 571925, where n3,
    cut off, had added n5; n2 led epoch 2 and n5 copied its records; n2's
    disk was wiped; then no voter could win, n3 lacking n5's vote and n1
    lacking n3's (liveness)."""
    healed_at = next((ms for ms, text in events if text == "HEAL network"), None)
    if healed_at is None:
        return []
    added_by: dict[int, set[int]] = {}
    asked: set[tuple[int, int, str]] = set()
    found = []
    for ms, text in events:
        if match := _AUTO_JOIN_AT.match(text):
            added_by.setdefault(int(match["node"]), set()).add(int(match["leader"]))
        elif ms < healed_at:
            continue
        elif match := _VOTE_NAMING.match(text):
            node, candidate = int(match["node"]), int(match["candidate"])
            if node > options.voters and added_by.get(node) == {candidate}:
                asked.add((node, candidate, match["kind"]))
        elif match := _VOTE_REFUSED.match(text):
            key = (int(match["node"]), int(match["candidate"]), match["kind"])
            if key in asked:
                asked.discard(key)
                found.append(f"n{key[0]}, added by n{key[1]} only, refused its {key[2]} vote at {ms:.3f} ms")
    return found


FINGERPRINTS: dict[str, Fingerprint] = {
    function.__name__: function
    for function in (
        restarted_leader_refused_a_local_read,
        snapshot_restored_leader_refused_a_local_read,
        epoch_lost_in_a_crash,
        healed_node_stood_again_and_again,
        deposed_leader_sent_a_snapshot,
        lone_leader_gained_a_voter_by_auto_join,
        damaged_observer_added_as_a_voter,
        voter_without_the_upgrade_elected_an_added_one,
        voter_behind_an_addition_elected_the_added_node,
        damaged_below_its_addition_asked_to_vote,
        joiner_fetched_a_snapshot_from_before_the_upgrade,
        disk_wiped_while_an_auto_join_ask_travelled,
        observer_outranked_the_leader_that_added_it,
    )
}


def run_with_trace(scenario: str, seed: int, options):
    """Run a scenario with the full trace; the result and the parsed events."""
    from jepsen_like.sim import run_scenario

    lines: list[str] = []
    result = run_scenario(scenario, seed, options, trace=lines.append, full_trace=True)
    return result, parse(lines)


def _find_seeds(argv: Sequence[str]) -> None:
    import argparse

    from jepsen_like.sim._scenarios import default_options

    parser = argparse.ArgumentParser(description="Seeds whose run shows a fingerprint.")
    parser.add_argument("fingerprint", choices=sorted(FINGERPRINTS))
    parser.add_argument("--scenario", default="random")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--no-pre-vote", action="store_true")
    parser.add_argument("--first", type=int, default=5, help="Stop after this many.")
    args = parser.parse_args(argv)
    hits = 0
    for seed in range(args.start, args.start + args.seeds):
        options = default_options(args.scenario, seed)
        if args.no_pre_vote:
            options.pre_vote = False
        result, events = run_with_trace(args.scenario, seed, options)
        found = FINGERPRINTS[args.fingerprint](events, options)
        if found:
            print(f"seed {seed} valid={result.valid}: {found[0]}", flush=True)
            hits += 1
            if hits >= args.first:
                return


if __name__ == "__main__":
    _find_seeds(sys.argv[1:])
