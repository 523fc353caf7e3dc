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
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from jepsen_like.nemesis import HOSTILE_KINDS, HostileTarget, NetFault, NetworkTopology, run_kind

from ._cluster import CLUSTER_ID, Cluster, ClusterSettings
from ._options import CampaignOptions
from ._processes import ProcessGroup


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


async def hostile_traffic(campaign: RunningCampaign, kind: str, node_id: int, duration_s: float, rng: random.Random) -> None:
    """Every attack of hostile kind ``kind`` (``HOSTILE_KINDS``) at node
    ``node_id``'s own listener (not through the proxy: a hostile client
    dials the node) for ``duration_s``. Recorded as the fault
    ``hostile-<kind>``; its end event also says what the attacks did
    (``stats``: connections, frames, bytes, closes and error answers)."""
    network, cluster = campaign.network, campaign.cluster
    assert network is not None and cluster is not None
    host, port = network.listen_address(node_id)
    target = HostileTarget(
        host=host,
        port=port,
        node_id=node_id,
        voter_ids=tuple(cluster.controller_ids),
        cluster_id=CLUSTER_ID,
        source_host=HOSTILE_SOURCE_HOST if campaign.options.net == "proxy" else None,
    )
    described: dict[str, Any] = {
        "fault_id": rng.getrandbits(32),
        "node": node_id,
        "role": campaign.processes.nodes[node_id].role,
        "kind": kind,
        "attacks": list(HOSTILE_KINDS[kind]),
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
    writes must go on."""
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


NEMESIS_SCENARIOS: dict[str, Scenario] = {
    "zombie-leader": zombie_leader,
    "az-isolation": az_isolation,
    "fast-bounce": fast_bounces,
    "broker-cut-from-controller": broker_cut_from_controller,
    "rolling-restart": rolling_restart,
    "hostile-clients": hostile_clients,
    "chaos": chaos,
}

__all__ = ["NEMESIS_SCENARIOS", "Scenario"]
