"""Named campaigns: each drives faults until the deadline, one at a time,
every fault's start and end recorded in the history as a nemesis
operation (``process: "nemesis"``).

| scenario | what it does | source |
|---|---|---|
| ``zombie-leader`` | cut the controller leader from every other node (not from its clients) for three check-quorum windows, again and again | KAFKA-15489, seed 002 |
| ``az-isolation`` | cut a whole zone (a controller and a broker, with the zone's clients) from the rest; alternately the leader's zone and another | seed 003 cases 3 and 4 |
| ``fast-bounce`` | restart a broker within its session timeout: kill -9 during a controlled shutdown, or while running, and start it at once | seed 000 (KIP-380) |
| ``broker-cut-from-controller`` | cut a broker from every controller but not from its clients: both ways, or only one way | seed 003 case 2, seed 001 |
| ``rolling-restart`` | SIGTERM each node in turn (controllers resign, brokers shut down under control), restart it, wait until it is back | |
| ``hostile-clients`` | garbage, oversize, stalled, pipelined, forged-field and flood traffic at a member's own port, each kind in turn, mostly at the controller leader | issue 15 |
| ``chaos`` | everything above at random, plus kill -9, SIGSTOP pauses, random halves, bridges, one-way cuts, delays (proxy only) | |
| ``membership`` | voters added, removed (the leader too) and replaced (kill -9, a new disk formatted with ``--join``, the old directory id removed, the new one added), one change at a time, with kills, pauses and isolations in between and beside | issue 17 (KIP-853) |
| ``storage`` | one voter's files at a time: kill -9, flip a bit in a batch that a valid batch follows (the node repairs its log from a leader), tear the last write, take the election state away (the node must refuse to start; the file is put back), restart; kill -9 every voter at once; fill a voter's size-capped tmpfs (root) | issue 14 |
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import trio

from jepsen_like.nemesis import HOSTILE_KINDS, HostileTarget, NetFault, NetworkTopology, attacks_of, run_kind
from quorum.client import IndeterminateError, QuorumClient, QuorumClientError, VoterChangeRefusedError

from ._cluster import CLUSTER_ID, Cluster, ClusterSettings
from ._membership import MembershipMove, choose_membership_move
from ._options import CampaignOptions
from ._processes import NodeProcess, ProcessGroup
from ._storage_faults import (
    NothingToDamageError,
    SmallDisk,
    flip_byte,
    kept_election_state_is_older,
    lose_election_state,
    roll_back_election_state,
    save_election_state,
    restore_election_state,
    torn_write,
)


class RunningCampaign(Protocol):
    """What a scenario uses of the run it drives. ``Campaign`` (``_runner``)
    is the one implementation; the scenarios name this protocol instead of
    importing it, because the runner imports them to look one up."""

    options: CampaignOptions
    settings: ClusterSettings
    rng: random.Random
    status: Callable[[str], None]
    network: NetworkTopology | None
    cluster: Cluster | None
    # The voter whose data directory is a size-capped tmpfs (the ``storage``
    # scenario, as root), or None.
    small_disk: tuple[int, SmallDisk] | None

    @property
    def processes(self) -> ProcessGroup: ...

    async def fault(self, name: str, start: Callable[[], Any], stop: Callable[[], Any], duration_s: float) -> None: ...

    async def net_fault(self, name: str, make: Callable[[], NetFault], duration_s: float) -> None: ...

    async def fault_with(
        self, name: str, start: Callable[[], Awaitable[Any]], body: Callable[[Any], Awaitable[None]]
    ) -> None: ...

    async def current_leader(self) -> int | None: ...


Scenario = Callable[[RunningCampaign, float], Awaitable[None]]


def check_quorum_s(campaign: RunningCampaign) -> float:
    """check_quorum_factor x fetch_timeout, in seconds."""
    return 1.5 * campaign.options.fetch_timeout_ms / 1000


def session_s(campaign: RunningCampaign) -> float:
    return campaign.options.session_timeout_ms / 1000


def _left(deadline_s: float) -> float:
    return deadline_s - trio.current_time()


def _rng(campaign: RunningCampaign) -> random.Random:
    return random.Random(campaign.rng.getrandbits(64))


# =========================================================================
# Building blocks
# =========================================================================


async def kill_and_restart(campaign: RunningCampaign, node_id: int, down_s: float) -> None:
    """kill -9, down for ``down_s``, start again."""
    node = campaign.processes.nodes[node_id]
    await campaign.fault("kill", lambda: (node.kill(), {"node": node_id, "role": node.role})[1], node.start, down_s)


async def pause_node(campaign: RunningCampaign, node_id: int, paused_s: float) -> None:
    """SIGSTOP for ``paused_s``, then SIGCONT (a long GC pause, seed 004 §3)."""
    node = campaign.processes.nodes[node_id]
    await campaign.fault("pause", lambda: (node.pause(), {"node": node_id, "role": node.role})[1], node.resume, paused_s)


async def broker_epoch_now(campaign: RunningCampaign, broker_id: int) -> int | None:
    """The broker's epoch in the active controller's image (None: unknown)."""
    assert campaign.cluster is not None
    return (await campaign.cluster.broker_states()).get(broker_id, ("", None))[1]


async def wait_until_back(campaign: RunningCampaign, node_id: int, timeout_s: float, *, old_epoch: int | None = None) -> bool:
    """A controller: it answers and knows a leader. A broker: the active
    controller's image shows it Online (with another epoch than
    ``old_epoch``: a restarted broker is a new incarnation)."""
    cluster = campaign.cluster
    assert cluster is not None
    node = campaign.processes.nodes[node_id]
    if node.role == "broker":
        not_epochs = {node_id: old_epoch} if old_epoch is not None else None
        return await cluster.wait_for_brokers_online([node_id], timeout_s, not_epochs=not_epochs)
    with trio.move_on_after(timeout_s):
        while True:
            answer = await cluster.describe_node(node_id)
            if answer is not None and answer.leader_id is not None:
                return True
            await trio.sleep(0.2)
    return False


async def fast_bounce(campaign: RunningCampaign, broker_id: int, *, during_shutdown: bool, rng: random.Random) -> None:
    """Seed 000: the broker comes back before its session expires. With
    ``during_shutdown``, SIGTERM first (a controlled shutdown starts:
    Stopping), then kill -9 part way through it; else kill -9 at once. The
    new process starts immediately, with a new incarnation; the controller
    must fence the old epoch and register the new one, and no request meant
    for the old epoch may be acted on (KIP-380)."""
    node = campaign.processes.nodes[broker_id]
    settle_s = rng.uniform(0.05, 0.6) if during_shutdown else 0.0

    async def start() -> dict[str, Any]:
        return {"node": broker_id, "during": "controlled-shutdown" if during_shutdown else "running", "after_s": round(settle_s, 3)}

    async def body(_: Any) -> None:
        old_epoch = await broker_epoch_now(campaign, broker_id)
        if during_shutdown:
            node.send_sigterm()
            await trio.sleep(settle_s)
        await trio.to_thread.run_sync(node.kill)
        node.start()
        await wait_until_back(campaign, broker_id, timeout_s=4 * session_s(campaign) + 5, old_epoch=old_epoch)

    await campaign.fault_with("fast-bounce", start, body)


async def controlled_shutdown(campaign: RunningCampaign, broker_id: int, down_s: float) -> None:
    """SIGTERM a broker (its leaderships move off, then the controller says
    shut down), keep it down for ``down_s``, start it again."""
    node = campaign.processes.nodes[broker_id]

    async def start() -> dict[str, Any]:
        return {"node": broker_id, "role": "broker"}

    async def body(_: Any) -> None:
        await node.stop_gracefully(timeout_s=campaign.settings.shutdown_timeout_ms / 1000 + 3)
        await trio.sleep(down_s)
        node.start()

    await campaign.fault_with("controlled-shutdown", start, body)


async def graceful_restart(campaign: RunningCampaign, node_id: int) -> None:
    """SIGTERM (a controller resigns with EndQuorumEpoch; a broker shuts
    down under control), start again, wait until it is back."""
    node = campaign.processes.nodes[node_id]

    async def start() -> dict[str, Any]:
        return {"node": node_id, "role": node.role}

    async def body(_: Any) -> None:
        old_epoch = await broker_epoch_now(campaign, node_id) if node.role == "broker" else None
        await node.stop_gracefully(timeout_s=campaign.settings.shutdown_timeout_ms / 1000 + 3)
        node.start()
        if not await wait_until_back(campaign, node_id, timeout_s=30, old_epoch=old_epoch):
            campaign.status(f"node {node_id} was not back within 30 s of its restart")

    await campaign.fault_with("restart", start, body)


#: Where hostile traffic comes from on loopback (proxy mode): an address of
#: its own, so that the nodes' per-address caps tell it from the proxy's
#: links, which all come from 127.0.0.1.
HOSTILE_SOURCE_HOST = "127.0.0.66"


async def hostile_traffic(
    campaign: RunningCampaign, kind: str, node_id: int, duration_s: float, rng: random.Random, *, authenticated: bool = False
) -> None:
    """Every attack of hostile kind ``kind`` (``attacks_of``) at node
    ``node_id``'s own listener (not through the proxy: a hostile client
    dials the node) for ``duration_s``. ``authenticated`` (a run with
    ``--tls`` only): the attacker holds the run's ``client/hostile``
    certificate, so its traffic passes the handshake and meets the frame
    decoder and authorization. Recorded as the fault ``hostile-<kind>``
    (``authenticated`` says which attacker); its end event also says what
    the attacks did (``stats``: connections, frames, bytes, closes, error
    answers, failed handshakes, authorization refusals)."""
    network, cluster = campaign.network, campaign.cluster
    assert network is not None and cluster is not None
    if authenticated and cluster.hostile_tls is None:
        raise ValueError("an authenticated hostile client needs a run with --tls")
    host, port = network.listen_address(node_id)
    target = HostileTarget(
        host=host,
        port=port,
        node_id=node_id,
        voter_ids=tuple(cluster.controller_ids),
        cluster_id=CLUSTER_ID,
        source_host=HOSTILE_SOURCE_HOST if campaign.options.net == "proxy" else None,
        tls=cluster.hostile_tls if authenticated else None,
    )
    described: dict[str, Any] = {
        "fault_id": rng.getrandbits(32),
        "node": node_id,
        "role": campaign.processes.nodes[node_id].role,
        "kind": kind,
        "attacks": list(attacks_of(kind, authenticated=authenticated)),
        "authenticated": authenticated,
        "address": f"{host}:{port}",
        "seconds": round(duration_s, 2),
    }

    async def start() -> dict[str, Any]:
        return described

    async def body(value: dict[str, Any]) -> None:
        with cluster.observer_sockets():
            results = await run_kind(kind, target, duration_s, seed=rng.getrandbits(32))
        # The end event carries the figures (the fault_id pairs it with its start).
        value["stats"] = [stats.as_history_value() for stats in results]

    await campaign.fault_with(f"hostile-{kind}", start, body)


# =========================================================================
# Named campaigns
# =========================================================================


async def zombie_leader(campaign: RunningCampaign, deadline_s: float) -> None:
    """KAFKA-15489: cut the leader from the other nodes (not from its
    clients) for longer than the check-quorum timeout, again and again."""
    network = campaign.network
    assert network is not None
    # Long enough for a new leader to be elected (the fetch timeout) and its
    # writes to age past the check-quorum bound while the old one serves.
    isolation_s = 3 * check_quorum_s(campaign) + 4
    while _left(deadline_s) > isolation_s + 3:
        await trio.sleep(3)
        leader = await campaign.current_leader()
        if leader is None:
            continue
        await campaign.net_fault("isolate-leader", lambda: network.isolate(leader), isolation_s)


async def az_isolation(campaign: RunningCampaign, deadline_s: float) -> None:
    """Seed 003 cases 3 and 4: a zone (one controller, its brokers, its
    clients) cut from the others for longer than the broker session and the
    check-quorum window. Alternately the controller leader's zone (case 4:
    a new leader is elected outside; the old one must stop serving) and
    another zone (case 3). Clients inside the zone reach only it."""
    network, cluster = campaign.network, campaign.cluster
    assert network is not None and cluster is not None
    rng = _rng(campaign)
    zones = cluster.zones()
    round_number = 0
    if len(zones) < 2:
        campaign.status("az-isolation needs two zones (two controllers); nothing to do")
        return
    outage_s = max(session_s(campaign), check_quorum_s(campaign)) + 3
    while _left(deadline_s) > outage_s + 4:
        await trio.sleep(rng.uniform(2, 3))
        leader = await campaign.current_leader()
        leader_zone = cluster.zone_of(leader) if leader is not None else None
        if round_number % 2 == 0 and leader_zone is not None:
            zone = leader_zone
        else:
            zone = rng.choice([z for z in zones if z != leader_zone] or zones)
        round_number += 1
        await campaign.net_fault("isolate-zone", lambda: network.isolate_zone(zone, clients=True), rng.uniform(outage_s, outage_s + 2))


async def fast_bounces(campaign: RunningCampaign, deadline_s: float) -> None:
    """Seed 000: bounce each broker in turn within its session timeout,
    mostly in the middle of a controlled shutdown."""
    cluster = campaign.cluster
    assert cluster is not None
    rng = _rng(campaign)
    if not cluster.broker_ids:
        campaign.status("fast-bounce needs brokers; nothing to do")
        return
    turn = 0
    while _left(deadline_s) > session_s(campaign) + 6:
        await trio.sleep(rng.uniform(1.0, 2.5))
        broker_id = cluster.broker_ids[turn % len(cluster.broker_ids)]
        turn += 1
        await fast_bounce(campaign, broker_id, during_shutdown=rng.random() < 0.7, rng=rng)


async def broker_cut_from_controller(campaign: RunningCampaign, deadline_s: float) -> None:
    """Seed 003 case 2 and seed 001: a broker loses the controllers but
    keeps its clients. Cut both ways (the broker self-fences within its
    session and refuses reads; the controller fences it and moves its
    leaderships), only the controllers' answers (its heartbeats still
    arrive; it must self-fence and ask to be fenced), or only its
    heartbeats (the controller fences it; its fetch answers stop too)."""
    network, cluster = campaign.network, campaign.cluster
    assert network is not None and cluster is not None
    rng = _rng(campaign)
    if not cluster.broker_ids:
        campaign.status("broker-cut-from-controller needs brokers; nothing to do")
        return
    controllers = cluster.controller_ids
    cut_s = session_s(campaign) + 2
    turn = 0
    while _left(deadline_s) > cut_s + 8:
        await trio.sleep(rng.uniform(1.5, 3))
        broker_id = cluster.broker_ids[turn % len(cluster.broker_ids)]
        shape = ("both-ways", "answers-lost", "heartbeats-lost")[(turn // len(cluster.broker_ids)) % 3]
        turn += 1
        if shape == "both-ways":
            make = lambda: network.isolate_from(broker_id, controllers)  # noqa: E731
        elif shape == "answers-lost":
            make = lambda: network.cut_one_way(controllers, broker_id)  # noqa: E731
        else:
            make = lambda: network.cut_one_way(broker_id, controllers)  # noqa: E731
        await campaign.net_fault(f"broker-cut-{shape}", make, rng.uniform(cut_s, cut_s + 2))
        await wait_until_back(campaign, broker_id, timeout_s=15)


async def rolling_restart(campaign: RunningCampaign, deadline_s: float) -> None:
    """SIGTERM and restart every node in turn, controllers first, then the
    brokers, waiting for each to be back before the next; again from the
    start while time is left."""
    cluster = campaign.cluster
    assert cluster is not None
    order = cluster.controller_ids + cluster.broker_ids
    turn = 0
    while _left(deadline_s) > 10:
        await trio.sleep(1.5)
        await graceful_restart(campaign, order[turn % len(order)])
        turn += 1


async def hostile_clients(campaign: RunningCampaign, deadline_s: float) -> None:
    """Issue 15: hostile clients at the members' own ports while the
    workload runs: each kind of ``HOSTILE_KINDS`` in turn (garbage,
    oversize, stalled, pipelined, forged-field, flood) for a few seconds,
    at the controller leader two times in three, else at another member
    (a follower or a broker). Nothing may be lost or read stale, and the
    writes must go on.

    With ``--tls`` each window is run twice over, at the same member: by
    an attacker without a certificate (refused at the handshake), then by
    one holding the run's ``client/hostile`` certificate (its traffic
    reaches the frame decoder, and what only members send must be refused
    by authorization)."""
    cluster = campaign.cluster
    assert cluster is not None
    rng = _rng(campaign)
    kinds = list(HOSTILE_KINDS)
    members = cluster.controller_ids + cluster.broker_ids
    turn = 0
    while _left(deadline_s) > 3:
        await trio.sleep(rng.uniform(0.3, 0.8))
        kind = kinds[turn % len(kinds)]
        turn += 1
        leader = await campaign.current_leader()
        # (A forged BeginQuorumEpoch can make the controllers name a
        # leader that is no member at all: then pick a member.)
        node_id = leader if leader in members and rng.random() < 2 / 3 else rng.choice(members)
        duration_s = min(rng.uniform(2, 3.5), _left(deadline_s) - 2)
        if duration_s < 1:
            break
        await hostile_traffic(campaign, kind, node_id, duration_s, rng)
        if cluster.hostile_tls is not None:
            duration_s = min(duration_s, _left(deadline_s) - 2)
            if duration_s < 1:
                break
            await hostile_traffic(campaign, kind, node_id, duration_s, rng, authenticated=True)


async def chaos(campaign: RunningCampaign, deadline_s: float) -> None:
    """Everything at random, one fault at a time: network shapes of every
    kind (the leader isolated, random halves, a bridge, one-way cuts, a zone,
    a broker cut from the controllers, delays below the fetch timeout in
    proxy mode), kill -9 and restart, SIGSTOP pauses, fast bounces and
    controlled shutdowns of brokers."""
    network, cluster = campaign.network, campaign.cluster
    assert network is not None and cluster is not None
    rng = _rng(campaign)
    controllers, brokers = cluster.controller_ids, cluster.broker_ids
    nodes = controllers + brokers

    async def isolate_leader() -> None:
        leader = await campaign.current_leader()
        target = leader if leader is not None else rng.choice(controllers)
        await campaign.net_fault("isolate", lambda: network.isolate(target), rng.uniform(2, 6))

    async def halves() -> None:
        await campaign.net_fault("partition-halves", lambda: network.split_random_halves(rng), rng.uniform(2, 6))

    async def bridge() -> None:
        await campaign.net_fault("bridge", lambda: network.bridge_random(rng), rng.uniform(2, 6))

    async def one_way() -> None:
        victim = rng.choice(nodes)
        others = [n for n in nodes if n != victim]
        await campaign.net_fault("one-way-cut", lambda: network.cut_one_way(victim, others), rng.uniform(2, 5))

    async def zone() -> None:
        chosen = rng.choice(cluster.zones())
        await campaign.net_fault("isolate-zone", lambda: network.isolate_zone(chosen, clients=True), rng.uniform(3, 6))

    async def broker_cut() -> None:
        broker_id = rng.choice(brokers)
        await campaign.net_fault("broker-cut-both-ways", lambda: network.isolate_from(broker_id, controllers), rng.uniform(2, 6))

    async def delay() -> None:
        # Below the fetch timeout: the leader-local and broker bounds
        # assume no message is delayed longer than that (design.md).
        source = rng.choice(nodes)
        targets = [n for n in nodes if n != source]
        delay_ms = rng.uniform(20, 0.15 * campaign.options.fetch_timeout_ms)
        await campaign.net_fault("delay", lambda: network.set_delay(source, targets, delay_ms, delay_ms / 4), rng.uniform(2, 5))

    async def kill() -> None:
        await kill_and_restart(campaign, rng.choice(nodes), rng.uniform(1, 4))

    async def pause() -> None:
        await pause_node(campaign, rng.choice(nodes), rng.uniform(1, 4))

    async def bounce() -> None:
        await fast_bounce(campaign, rng.choice(brokers), during_shutdown=rng.random() < 0.5, rng=rng)

    async def shutdown() -> None:
        await controlled_shutdown(campaign, rng.choice(brokers), rng.uniform(1, 3))

    menu: list[tuple[float, Callable[[], Awaitable[None]]]] = [
        (0.15, isolate_leader),
        (0.12, halves),
        (0.06, bridge),
        (0.08, one_way),
        (0.12, kill),
        (0.12, pause),
    ]
    if len(cluster.zones()) > 1:
        menu.append((0.06, zone))
    if brokers:
        menu += [(0.08, broker_cut), (0.08, bounce), (0.05, shutdown)]
    if campaign.options.net == "proxy":
        menu.append((0.04, delay))
    weights = [weight for weight, _ in menu]
    while _left(deadline_s) > 7:
        await trio.sleep(rng.uniform(1.0, 3.0))
        [(_, action)] = rng.choices(menu, weights=weights)
        await action()


# =========================================================================
# Voter changes (issue 17, KIP-853; docs/nemesis.md, "Voter changes")
# =========================================================================

#: How long one voter request may take (the client asks again while the
#: leader refuses for a change in progress or a voter not caught up).
VOTER_REQUEST_TIMEOUT_S = 30.0


async def voter_request(campaign: RunningCampaign, call: Callable[[QuorumClient], Awaitable[int]]) -> dict[str, Any]:
    """One AddRaftVoter or RemoveRaftVoter through the harness's own client
    (it finds the leader among every controller). Returns what the history
    records: ``{"outcome": "ok", "offset": N}`` once committed, else the
    outcome ("refused", "indeterminate": it may have happened, "timeout")
    and the error."""
    cluster = campaign.cluster
    assert cluster is not None
    try:
        with cluster.observer_sockets():
            async with QuorumClient(
                cluster.observer_bootstrap(), cluster_id=CLUSTER_ID, retry_timeout_s=VOTER_REQUEST_TIMEOUT_S, tls=cluster.tls
            ) as client:
                return {"outcome": "ok", "offset": await call(client)}
    except BaseExceptionGroup as group:
        # What the client's own nursery raised: its first client error.
        matched, rest = group.split(QuorumClientError)
        if rest is not None or matched is None:
            raise
        return _voter_request_failure(matched.exceptions[0])
    except QuorumClientError as error:
        return _voter_request_failure(error)


def _voter_request_failure(error: BaseException) -> dict[str, Any]:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    if isinstance(error, VoterChangeRefusedError):
        return {"outcome": "refused", "error": str(error)}
    if isinstance(error, IndeterminateError):
        return {"outcome": "indeterminate", "error": str(error)}
    return {"outcome": "timeout", "error": str(error)}


async def _rejoined_by_auto_join(campaign: RunningCampaign, node_id: int, directory_id: str, timeout_s: float) -> float | None:
    """Seconds until the leader reports voter ``node_id`` with
    ``directory_id``, added by the node's own auto-join; None if not within
    ``timeout_s``."""
    cluster = campaign.cluster
    assert cluster is not None
    started = trio.current_time()
    with trio.move_on_after(timeout_s):
        while ((await cluster.quorum_view()).voters or {}).get(node_id) != directory_id:
            await trio.sleep(0.2)
        return round(trio.current_time() - started, 3)
    return None


async def change_voters(campaign: RunningCampaign, move: MembershipMove, rng: random.Random) -> None:
    """Carry out ``move``, recorded as the nemesis fault ``move.kind``: its
    start names the node, its directory id and the voter set before (as the
    leader reports it); its end adds the outcome, the offset of the
    committed VOTERS record and the voter set after. A replacement kills
    the node, formats a new disk for it (``kraft-quorum format --join``),
    starts it, removes its old directory id and adds the new one once it
    has caught up. With auto-join on the controllers (``--auto-join``) a
    replacement is recorded as ``replace-voter-auto-join``: the operator
    only removes the old directory id, and the node adds its new disk by
    itself (the end says ``rejoined_by`` and ``rejoin_s``, from the
    removal's commit to the new disk in the leader's voter set)."""
    cluster = campaign.cluster
    assert cluster is not None
    node_id = move.node
    auto_join = move.kind == "replace-voter" and campaign.settings.auto_join
    kind = "replace-voter-auto-join" if auto_join else move.kind
    described: dict[str, Any] = {"fault_id": rng.getrandbits(32), "node": node_id}

    async def start() -> dict[str, Any]:
        view = await cluster.quorum_view()
        voters = view.voters or {}
        described["voters_before"] = sorted(voters) if view.voters is not None else None
        described["directory_id"] = voters.get(node_id) if node_id in voters else cluster.directory_id(node_id)
        return described

    async def body(value: dict[str, Any]) -> None:
        directory_id = value["directory_id"]
        if move.kind == "add-voter":
            value.update(await voter_request(campaign, lambda client: client.add_voter(node_id, directory_id, [cluster.endpoint(node_id)])))
        elif move.kind == "remove-voter":
            value.update(await voter_request(campaign, lambda client: client.remove_voter(node_id, directory_id)))
        else:
            node = campaign.processes.nodes[node_id]
            await trio.to_thread.run_sync(node.kill)
            new_directory_id = value["new_directory_id"] = await trio.to_thread.run_sync(cluster.format_for_join, node_id)
            node.start()
            removed = await voter_request(campaign, lambda client: client.remove_voter(node_id, directory_id))
            value["removed"] = removed
            if auto_join and removed["outcome"] == "indeterminate":
                # The removal may have happened: the leader's set says.
                held = (await cluster.quorum_view()).voters
                if held is not None and held.get(node_id) != directory_id:
                    removed["outcome"] = "ok"
                    removed["found"] = "the old directory id is no longer a voter"
            if removed["outcome"] == "ok" and auto_join:
                rejoin_s = await _rejoined_by_auto_join(campaign, node_id, new_directory_id, VOTER_REQUEST_TIMEOUT_S)
                value["outcome"] = "ok" if rejoin_s is not None else "not rejoined"
                value["rejoined_by"] = "auto-join" if rejoin_s is not None else None
                value["rejoin_s"] = rejoin_s
            elif removed["outcome"] == "ok":
                await wait_until_back(campaign, node_id, timeout_s=30)
                added = await voter_request(
                    campaign, lambda client: client.add_voter(node_id, new_directory_id, [cluster.endpoint(node_id)])
                )
                value.update(added)
            else:
                value["outcome"] = removed["outcome"]
        view = await cluster.quorum_view()
        value["voters_after"] = sorted(view.voters) if view.voters is not None else None
        campaign.status(f"{kind} n{node_id}: {value.get('outcome')}, voters now {value['voters_after']}")

    await campaign.fault_with(kind, start, body)


async def membership(campaign: RunningCampaign, deadline_s: float) -> None:
    """Issue 17 (KIP-853): voter changes one at a time, chosen by
    ``choose_membership_move`` from the voter set the leader reports (add
    a controller that is not a voter, remove a voter, the leader included,
    replace a voter's disk), a third of them beside an isolated controller;
    between changes, a kill -9 and restart, a pause or an isolation of a
    controller. The harness follows the voter set (``QuorumView.voters``);
    the history records every change with the sets before and after."""
    network, cluster = campaign.network, campaign.cluster
    assert network is not None and cluster is not None
    rng = _rng(campaign)
    controllers = cluster.controller_ids

    async def beside(action: Callable[[], Awaitable[None]]) -> None:
        victim = rng.choice(controllers)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(campaign.net_fault, "isolate", lambda: network.isolate(victim), rng.uniform(2, 5))
            await action()

    while _left(deadline_s) > VOTER_REQUEST_TIMEOUT_S / 2:
        await trio.sleep(rng.uniform(1.0, 2.5))
        view = await cluster.quorum_view()
        down = [node for node in controllers if not campaign.processes.nodes[node].running]
        # A voter whose directory in the set is not its node's disk: a
        # replacement destroyed that disk and its removal did not happen.
        lost_disks = [
            node for node, directory_id in (view.voters or {}).items()
            if directory_id is not None and node in controllers and directory_id != cluster.directory_id(node)
        ]  # fmt: skip
        move = choose_membership_move(rng, sorted(view.voters or ()), controllers, view.leader, down, lost_disks)
        if move is not None:
            change = lambda: change_voters(campaign, move, rng)  # noqa: E731
            await (beside(change) if rng.random() < 1 / 3 else change())
        await trio.sleep(rng.uniform(0.5, 1.5))
        roll = rng.random()
        if roll < 0.3:
            await kill_and_restart(campaign, rng.choice(controllers), rng.uniform(1, 3))
        elif roll < 0.5:
            await pause_node(campaign, rng.choice(controllers), rng.uniform(1, 3))
        elif roll < 0.7:
            victim = rng.choice(controllers)
            await campaign.net_fault("isolate", lambda: network.isolate(victim), rng.uniform(2, 5))


# =========================================================================
# Storage faults (issue 14, part 5; docs/nemesis.md, "Storage faults")
# =========================================================================

#: A node that refuses its data directory exits with this status
#: (docs/operations.md, "Errors and exit codes").
_REFUSED_EXIT_STATUS = 3

#: Scenarios whose last voter runs on a size-capped tmpfs (``SmallDisk``).
SMALL_DISK_SCENARIOS = frozenset({"storage"})


def _log_size(node: NodeProcess) -> int:
    try:
        return node.log_path.stat().st_size
    except FileNotFoundError:
        return 0


def _log_since(node: NodeProcess, mark: int) -> str:
    with open(node.log_path, "rb") as log:
        log.seek(mark)
        return log.read().decode("utf-8", "replace")


async def _wait_for_log_line(node: NodeProcess, mark: int, text: str, timeout_s: float) -> bool:
    """Whether ``text`` appears in the node's log after byte ``mark`` within ``timeout_s``."""
    with trio.move_on_after(timeout_s):
        while text not in _log_since(node, mark):
            await trio.sleep(0.1)
        return True
    return False


async def _wait_for_exit(node: NodeProcess, timeout_s: float) -> int | None:
    """The exit status of the node's process, or None if it still runs after ``timeout_s``."""
    process = node.process
    assert process is not None
    with trio.move_on_after(timeout_s):
        while process.poll() is None:
            await trio.sleep(0.05)
    return process.poll()


async def voters_caught_up(campaign: RunningCampaign, timeout_s: float) -> bool:
    """Every voter runs, and the leader reports each one's log end at or past
    its high watermark: no voter is missing committed records (or still
    repairing), so damaging one of them leaves every committed record on
    the two others (Protocol-Aware Recovery: one damaged copy of three)."""
    cluster = campaign.cluster
    assert cluster is not None
    with trio.move_on_after(timeout_s):
        while True:
            leader = await campaign.current_leader()
            answer = await cluster.describe_node(leader) if leader is not None else None
            if answer is not None and all(campaign.processes.nodes[n].running for n in cluster.controller_ids):
                ends = {replica.node_id: replica.log_end_offset for replica in answer.voters}
                if all(ends.get(n) is not None and ends[n] >= answer.high_watermark for n in cluster.controller_ids):
                    return True
            await trio.sleep(0.2)
    return False


async def damage_stopped_files(campaign: RunningCampaign, node_id: int, kind: str, rng: random.Random) -> None:
    """kill -9 voter ``node_id``, damage its files (``kind``: ``flip-byte``,
    ``torn-write``, ``election-state-lost`` or ``election-state-rollback``),
    start it again and record what it did: ``flip-byte`` must start
    repairing and finish (``the log is repaired``), ``torn-write`` must
    start and cut a torn tail (at the byte the nemesis wrote from, or
    before it if the kill tore a write too), ``election-state-lost`` must
    refuse to start (exit status 3); the nemesis then puts the very file
    back, as an operator who kept it would, and starts the node again.
    ``election-state-rollback`` (one copy replaced by an older one saved
    while the node ran) must start and say it took the newer copy. Recorded
    as ``storage-<kind>``: the start event names the node, the file and the
    byte offset; the end event adds the ``outcome``."""
    cluster = campaign.cluster
    assert cluster is not None
    node = campaign.processes.nodes[node_id]
    data_dir = cluster.data_dir(node_id)
    keep_dir = storage_keep_dir(campaign, node_id)
    damage = {
        "flip-byte": flip_byte,
        "torn-write": torn_write,
        "election-state-rollback": lambda data_dir, rng: roll_back_election_state(data_dir, keep_dir, rng),
    }.get(kind)
    back_s = 30.0

    async def start() -> dict[str, Any]:
        await trio.to_thread.run_sync(node.kill)
        try:
            if damage is not None:
                done = await trio.to_thread.run_sync(damage, data_dir, rng)
            else:
                done = await trio.to_thread.run_sync(lose_election_state, data_dir, keep_dir)
        except NothingToDamageError as error:
            done = {"kind": kind, "skipped": str(error)}
        return {"node": node_id, "role": node.role, **done}

    async def body(value: dict[str, Any]) -> None:
        mark = _log_size(node)
        try:
            node.start()
            if kind == "election-state-lost" and "skipped" not in value:
                status = await _wait_for_exit(node, back_s)
                refusal = [line for line in _log_since(node, mark).splitlines() if line.startswith("Error:")]
                value["outcome"] = "refused" if status == _REFUSED_EXIT_STATUS else f"exit status {status}" if status is not None else "started"
                value["refusal"] = refusal[-1] if refusal else None
                if status is None:
                    await trio.to_thread.run_sync(node.kill)
                restore_election_state(data_dir, value["kept_as"])
                value["operator_repair"] = "the kept quorum-state.json put back"
                mark = _log_size(node)
                node.start()
            elif kind == "flip-byte" and "skipped" not in value:
                repairing = await _wait_for_log_line(node, mark, "repairs its log from a leader", back_s)
                repaired = repairing and await _wait_for_log_line(node, mark, "the log is repaired", back_s)
                value["outcome"] = "repaired" if repaired else "repairing, not finished" if repairing else "no repair started"
            elif kind == "election-state-rollback" and "skipped" not in value:
                found = await _wait_for_log_line(node, mark, "the election state in", back_s)
                line = [l for l in _log_since(node, mark).splitlines() if "the election state in" in l]
                value["outcome"] = "newer copy taken" if found else "rollback not noticed"
                value["finding"] = line[-1] if line else None
            elif kind == "torn-write" and "skipped" not in value:
                cut = await _wait_for_log_line(node, mark, "torn tail: truncating at byte", back_s)
                value["outcome"] = "torn tail cut" if cut else "torn tail not cut"
            back = await wait_until_back(campaign, node_id, timeout_s=back_s)
            value.setdefault("outcome", "started" if back else "not back")
            value["back"] = back
        finally:
            with trio.CancelScope(shield=True):
                if value.get("kept_as") and not (data_dir / "quorum-state.json").exists():
                    await trio.to_thread.run_sync(node.kill)
                    restore_election_state(data_dir, value["kept_as"])
                if not node.running:
                    node.start()

    await campaign.fault_with(f"storage-{kind}", start, body)


def storage_keep_dir(campaign: RunningCampaign, node_id: int) -> Path:
    """Where the storage nemesis keeps files it took from, or saved of,
    ``node_id``'s data directory."""
    cluster = campaign.cluster
    assert cluster is not None
    return cluster.run_dir / "storage-faults" / f"node{node_id}"


async def restart_all_voters(campaign: RunningCampaign, down_s: float) -> None:
    """kill -9 every voter at once, start them all after ``down_s``: only
    what each fsynced before acknowledging is left, and that must hold
    everything acknowledged (Raft thesis §3.8)."""
    cluster = campaign.cluster
    assert cluster is not None
    voters = [campaign.processes.nodes[n] for n in cluster.controller_ids]

    async def start() -> dict[str, Any]:
        for node in voters:
            await trio.to_thread.run_sync(node.kill)
        return {"nodes": list(cluster.controller_ids), "kind": "restart-all-voters", "down_s": round(down_s, 2)}

    async def body(value: dict[str, Any]) -> None:
        try:
            await trio.sleep(down_s)
        finally:
            with trio.CancelScope(shield=True):
                for node in voters:
                    node.start()
        started = trio.current_time()
        try:
            await cluster.wait_for_leader(timeout_s=60)
            value["leader_after_s"] = round(trio.current_time() - started, 2)
        except trio.TooSlowError:
            value["leader_after_s"] = None

    await campaign.fault_with("restart-all-voters", start, body)


async def fill_disk(campaign: RunningCampaign, full_s: float) -> None:
    """Shrink the small disk's tmpfs to what it holds plus a few pages: the
    voter's writes fail with ENOSPC (it stays up, acknowledges nothing
    more, a leader resigns); after ``full_s`` it is grown back, and the
    node must resume by itself (docs/storage.md, "Disk errors")."""
    assert campaign.small_disk is not None
    node_id, disk = campaign.small_disk
    node = campaign.processes.nodes[node_id]
    mark = _log_size(node)

    async def start() -> dict[str, Any]:
        used = await trio.to_thread.run_sync(disk.used_bytes)
        size = await trio.to_thread.run_sync(disk.fill)
        return {"node": node_id, "role": node.role, "kind": "disk-full", "file": str(disk.path), "offset": used, "used_bytes": used, "size_bytes": size}

    async def body(value: dict[str, Any]) -> None:
        try:
            value["filled"] = await _wait_for_log_line(node, mark, "disk write failed (ENOSPC", 20)
            if value["filled"]:
                await trio.sleep(full_s)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(disk.grow)
        if value["filled"]:
            value["resumed"] = await _wait_for_log_line(node, mark, "disk writes succeed again", 30)
        value["outcome"] = "resumed" if value.get("resumed") else "never filled" if not value["filled"] else "not resumed"

    await campaign.fault_with("disk-full", start, body)


STORAGE_FAULT_KINDS = (
    "flip-byte",
    "torn-write",
    "election-state-lost",
    "election-state-rollback",
    "restart-all-voters",
    "disk-full",
)


async def storage(campaign: RunningCampaign, deadline_s: float) -> None:
    """Issue 14, part 5: storage faults on real processes, one at a time,
    each only once every voter holds the committed log again (so at most
    one copy of three is ever damaged): a flipped bit in a batch a valid
    batch follows, a torn last write, a lost election state (refused, then
    put back), an election state rolled back to an older copy saved while
    the node ran (the newer copy taken), every voter killed at once, a full disk (root only: the
    kinds are taken in a shuffled order each round, and ``disk-full`` is
    left out with one status line without root)."""
    cluster = campaign.cluster
    assert cluster is not None
    rng = _rng(campaign)
    kinds = list(STORAGE_FAULT_KINDS)
    if campaign.small_disk is None:
        kinds.remove("disk-full")
        campaign.status("storage: no small disk (needs root to mount a tmpfs); disk-full faults are left out")
    round_kinds: list[str] = []
    while _left(deadline_s) > 12:
        await trio.sleep(rng.uniform(0.5, 1.5))
        if not await voters_caught_up(campaign, timeout_s=min(30.0, max(1.0, _left(deadline_s) - 12))):
            campaign.status("storage: the voters did not all catch up; no storage fault until they do")
            continue
        # A copy of each voter's election state, saved while it runs: the
        # older copy a later rollback restores (elections happen between).
        for node_id in cluster.controller_ids:
            await trio.to_thread.run_sync(save_election_state, cluster.data_dir(node_id), storage_keep_dir(campaign, node_id))
        if not round_kinds:
            round_kinds = rng.sample(kinds, len(kinds))
        kind = round_kinds.pop()
        if kind == "election-state-rollback":
            older = [
                n for n in cluster.controller_ids
                if kept_election_state_is_older(cluster.data_dir(n), storage_keep_dir(campaign, n))
            ]  # fmt: skip
            if not older and round_kinds:
                # No election since the copies were saved: roll back later
                # in this round, after faults that cause one.
                round_kinds.insert(0, kind)
                kind = round_kinds.pop()
            else:
                await damage_stopped_files(campaign, rng.choice(older or list(cluster.controller_ids)), kind, rng)
                continue
        if kind == "restart-all-voters":
            await restart_all_voters(campaign, rng.uniform(0.2, 2.0))
        elif kind == "disk-full":
            await fill_disk(campaign, rng.uniform(1.5, 3.0))
        else:
            await damage_stopped_files(campaign, rng.choice(cluster.controller_ids), kind, rng)


NEMESIS_SCENARIOS: dict[str, Scenario] = {
    "zombie-leader": zombie_leader,
    "az-isolation": az_isolation,
    "fast-bounce": fast_bounces,
    "broker-cut-from-controller": broker_cut_from_controller,
    "rolling-restart": rolling_restart,
    "hostile-clients": hostile_clients,
    "storage": storage,
    "chaos": chaos,
    "membership": membership,
}

__all__ = ["NEMESIS_SCENARIOS", "SMALL_DISK_SCENARIOS", "STORAGE_FAULT_KINDS", "Scenario"]
