"""The agent over the in-process network under MockClock: three
controllers and three brokers that register, heartbeat through their
fetches, serve only while Online, self-fence when cut from the controller
(seed 001, seed 003 case 2), shut down under control, and refuse requests
meant for an earlier incarnation (KIP-380, seed 000)."""

from __future__ import annotations

import trio
from _memory_cluster import SESSION_TIMEOUT_MS, VOTERS, MemoryCluster, controller_request

from broker_agent import BrokerStateNotice, ErrorCode, LeadershipChange, MetadataRequest, PartitionRole
from registration import BrokerState, CreateTopicsRequest, NewTopic, UnregisterBrokerRequest

BROKERS = (101, 102, 103)


async def online_cluster(nursery, broker_ids=BROKERS):
    cluster = MemoryCluster(nursery)
    await cluster.start_controllers()
    agents = [await cluster.start_broker(broker_id) for broker_id in broker_ids]
    with trio.fail_after(30):
        for agent in agents:
            await agent.wait_for_state(lambda state: state is BrokerState.ONLINE)
    return cluster, agents


def ask(agent, op="list_topics", **fields):
    return agent.answer(MetadataRequest(op=op, **fields).to_payload())


async def create_topic(cluster, name, partitions=3, replication_factor=3):
    topic = NewTopic(name=name, partitions=partitions, replication_factor=replication_factor)
    response = await controller_request(cluster, CreateTopicsRequest(topics=(topic,)))
    assert not response.results[0].error, response
    return response


async def wait_until(predicate, timeout_s=30.0):
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.01)


def leader_of(cluster) -> int:
    return next(node_id for node_id, brain in cluster.controller_brains.items() if brain.is_active)


async def test_brokers_register_with_distinct_epochs_and_serve_once_online(nursery, autojump_clock):
    cluster, agents = await online_cluster(nursery)
    epochs = [agent.broker_epoch for agent in agents]
    assert len(set(epochs)) == 3
    for agent in agents:
        answer = ask(agent, "cluster_metadata")
        assert answer.error is ErrorCode.NONE
        assert answer.state == "Online"
        assert answer.broker_epoch == agent.broker_epoch
        # The image holds the broker's own registration record (its epoch).
        assert answer.image_offset > agent.broker_epoch
        assert sorted(b["broker_id"] for b in answer.body["brokers"]) == list(BROKERS)
    registrations = [e for e in cluster.events if e["event"] == "broker_registration"]
    assert sorted(e["broker_id"] for e in registrations) == list(BROKERS)
    assert all(cluster.controller_view(broker_id) is BrokerState.ONLINE for broker_id in BROKERS)


async def test_every_answer_reflects_writes_committed_before_the_last_fresh_fetch(nursery, autojump_clock):
    cluster, agents = await online_cluster(nursery)
    response = await create_topic(cluster, "orders")
    created_at = trio.current_time()
    # The promise: after the staleness bound every Online broker's answers
    # include the write; an answer that does not must not happen after it.
    bound_s = agents[0].config.effective_staleness_bound_ms / 1000
    with trio.fail_after(bound_s):
        for agent in agents:
            while True:
                answer = ask(agent, "list_topics")
                if answer.error is ErrorCode.NONE and "orders" in answer.body["topics"]:
                    break
                assert trio.current_time() - created_at <= bound_s
                await trio.sleep(0.01)
    answer = ask(agents[0], "describe_topic", topic="orders")
    assert [p["partition"] for p in answer.body["topic"]["partitions"]] == [0, 1, 2]
    assert answer.body["topic"]["topic_id"] == response.results[0].topic_id
    found = ask(agents[0], "find_leader", topic="orders", partition=1)
    assert found.error is ErrorCode.NONE and found.body["leader"] in BROKERS
    leader_agent = next(agent for agent in agents if agent.config.broker_id == found.body["leader"])
    assert found.body["leader_broker_epoch"] == leader_agent.broker_epoch
    assert ask(agents[0], "find_leader", topic="orders", partition=9).error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert ask(agents[0], "describe_topic", topic="nope").error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    ahead = ask(agents[0], "list_topics", min_image_offset=answer.image_offset + 10_000)
    assert ahead.error is ErrorCode.OFFSET_NOT_AVAILABLE


async def test_a_broker_cut_from_the_controllers_fences_itself_and_comes_back(nursery, autojump_clock):
    """Seed 001 / seed 003 case 2: partitioned from the controller, the
    broker stops claiming to be part of the cluster within its session
    timeout, answers nothing meanwhile, and serves again once healed,
    reflecting what was written while it was away."""
    cluster, agents = await online_cluster(nursery)
    victim = agents[0]
    cluster.network.isolate(victim.config.broker_id, list(VOTERS))
    cut_at = trio.current_time()
    await victim.wait_for_state(lambda state: state is BrokerState.FENCED)
    fenced_after_s = trio.current_time() - cut_at
    assert fenced_after_s <= SESSION_TIMEOUT_MS / 1000 + 0.2
    refused = ask(victim, "list_topics")
    assert refused.error is ErrorCode.BROKER_NOT_AVAILABLE and refused.state == "Fenced"
    await create_topic(cluster, "written-while-cut", replication_factor=2)
    await wait_until(lambda: cluster.controller_view(victim.config.broker_id) is BrokerState.FENCED)
    cluster.network.heal()
    await victim.wait_for_state(lambda state: state is BrokerState.ONLINE)
    answer = ask(victim, "list_topics")
    assert answer.error is ErrorCode.NONE and "written-while-cut" in answer.body["topics"]
    states = [e["state"] for e in cluster.events if e["event"] == "broker_state" and e["node"] == victim.config.broker_id]
    assert states[-3:] == ["online", "fenced", "online"]


async def test_one_way_cut_the_broker_asks_to_be_fenced_so_its_leaderships_move(nursery, autojump_clock):
    """Only the leader's answers are lost: the controller still hears the
    broker's heartbeats and would keep it Online with its leaderships. The
    self-fenced broker says want_fence, so the controller fences it."""
    cluster, agents = await online_cluster(nursery)
    await create_topic(cluster, "t", partitions=6)
    victim = agents[1]
    me = victim.config.broker_id
    await wait_until(lambda: len(cluster.controllers[leader_of(cluster)].state_machine.image.partitions_led_by(me)) > 0)
    for voter in VOTERS:
        cluster.network._blocked.add((voter, me))  # answers to the broker are dropped
    await victim.wait_for_state(lambda state: state is BrokerState.FENCED)
    await wait_until(lambda: cluster.controller_view(me) is BrokerState.FENCED)
    image = cluster.controllers[leader_of(cluster)].state_machine.image
    assert image.partitions_led_by(me) == frozenset()
    cluster.network.heal()
    await victim.wait_for_state(lambda state: state is BrokerState.ONLINE)


async def test_a_killed_broker_is_fenced_by_the_controller_and_its_leaderships_move(nursery, autojump_clock):
    cluster, agents = await online_cluster(nursery)
    await create_topic(cluster, "t", partitions=6)
    victim = agents[2].config.broker_id
    image = lambda: cluster.controllers[leader_of(cluster)].state_machine.image  # noqa: E731
    await wait_until(lambda: len(image().partitions_led_by(victim)) > 0)
    cluster.stop(victim)
    killed_at = trio.current_time()
    await wait_until(lambda: cluster.controller_view(victim) is BrokerState.FENCED)
    detection_s = trio.current_time() - killed_at
    assert detection_s <= (SESSION_TIMEOUT_MS + 500) / 1000 + 0.5
    assert image().partitions_led_by(victim) == frozenset()


async def test_controlled_shutdown_moves_leaderships_then_stops(nursery, autojump_clock):
    cluster, agents = await online_cluster(nursery)
    await create_topic(cluster, "t", partitions=6)
    stopping = agents[0]
    me = stopping.config.broker_id
    image = lambda: cluster.controllers[leader_of(cluster)].state_machine.image  # noqa: E731
    await wait_until(lambda: len(image().partitions_led_by(me)) > 0)
    stopping.request_shutdown()
    assert stopping.state is BrokerState.STOPPING
    assert ask(stopping).error is ErrorCode.BROKER_NOT_AVAILABLE
    with trio.fail_after(10):
        await stopping.wait_stopped()
    assert stopping.stop_reason == "the controller says shut down"
    assert stopping.state is BrokerState.OFFLINE
    assert image().partitions_led_by(me) == frozenset()
    # should-shutdown is decided with the final fence record, which commits next.
    await wait_until(lambda: cluster.controller_view(me) is BrokerState.OFFLINE)  # shut down cleanly


async def test_a_fast_bounce_gets_a_new_epoch_and_old_epoch_requests_are_refused(nursery, autojump_clock):
    """Seed 000 (KIP-380): the restarted broker registers a new incarnation
    and gets a larger epoch; a request meant for the old one is refused."""
    cluster, agents = await online_cluster(nursery)
    old = agents[0]
    broker_id, old_epoch = old.config.broker_id, old.broker_epoch
    cluster.stop(broker_id)
    new = await cluster.start_broker(broker_id, incarnation_id="second-life")
    with trio.fail_after(10):
        await new.wait_for_state(lambda state: state is BrokerState.ONLINE)
    assert new.broker_epoch > old_epoch
    refused = ask(new, "list_topics", broker_epoch=old_epoch)
    assert refused.error is ErrorCode.STALE_BROKER_EPOCH
    assert refused.broker_epoch == new.broker_epoch
    assert ask(new, "list_topics", broker_epoch=new.broker_epoch).error is ErrorCode.NONE
    requests = [e for e in cluster.events if e["event"] == "broker_request"]
    assert [(e["broker_epoch"], e["accepted"]) for e in requests] == [(old_epoch, False), (new.broker_epoch, True)]


async def test_an_unregistered_broker_registers_again(nursery, autojump_clock):
    cluster, agents = await online_cluster(nursery)
    agent = agents[0]
    old_epoch = agent.broker_epoch
    response = await controller_request(cluster, UnregisterBrokerRequest(broker_id=agent.config.broker_id))
    assert not response.error
    await wait_until(lambda: agent.broker_epoch is not None and agent.broker_epoch > old_epoch)
    await agent.wait_for_state(lambda state: state is BrokerState.ONLINE)
    events = [e["lifecycle_event"] for e in cluster.events if e["event"] == "broker_state" and e["node"] == agent.config.broker_id]
    assert events[-3] in ("registration gone", "epoch refused")


async def test_the_broker_follows_a_new_controller_leader_without_leaving_online(nursery, autojump_clock):
    cluster, agents = await online_cluster(nursery)
    old_leader = leader_of(cluster)
    cluster.stop(old_leader)
    await wait_until(lambda: any(brain.is_active for node, brain in cluster.controller_brains.items() if node != old_leader))
    await create_topic(cluster, "after-failover")
    await wait_until(lambda: all("after-failover" in agent.metadata.image.topics for agent in agents))
    for agent in agents:
        assert agent.state is BrokerState.ONLINE
        assert agent.runtime.node.leader_id != old_leader


async def test_leadership_changes_carry_leader_epochs_and_go_to_none_when_fenced(nursery, autojump_clock):
    cluster, agents = await online_cluster(nursery)
    agent = agents[0]
    me = agent.config.broker_id
    seen: list = []
    fenced_seen = trio.Event()

    async def watch():
        async for event in agent.leadership_changes():
            seen.append(event)
            if isinstance(event, BrokerStateNotice) and event.state is BrokerState.FENCED:
                fenced_seen.set()

    nursery.start_soon(watch)
    await create_topic(cluster, "t", partitions=3)
    await wait_until(lambda: sum(isinstance(e, LeadershipChange) for e in seen) >= 3)
    roles = agent.current_roles()
    assert {key[1] for key in roles} == {0, 1, 2}
    led = [change for change in roles.values() if change.role == PartitionRole.LEADER]
    assert led and all(change.leader_id == me and change.leader_epoch >= 0 for change in led)
    cluster.network.isolate(me, list(VOTERS))
    with trio.fail_after(10):
        await fenced_seen.wait()
    await wait_until(lambda: isinstance(seen[-1], LeadershipChange) and seen[-1].role == PartitionRole.NONE)
    assert agent.current_roles() == {}
    assert isinstance(seen[0], BrokerStateNotice) and seen[0].state is BrokerState.ONLINE


async def test_a_broker_far_behind_loads_a_snapshot_then_comes_online(nursery, autojump_clock):
    """The controllers keep only a few records behind their snapshots, so a
    new broker cannot fetch from offset 0: it installs the leader's snapshot
    (the controllers' format: image and register map) and catches up."""
    cluster = MemoryCluster(nursery)
    await cluster.start_controllers(snapshot_every_records=20, snapshot_retained_records=2)
    first = await cluster.start_broker(101)
    await first.wait_for_state(lambda state: state is BrokerState.ONLINE)
    for index in range(12):
        await create_topic(cluster, f"t{index}", partitions=3, replication_factor=1)
    leader = cluster.controllers[leader_of(cluster)]
    await wait_until(lambda: leader.node.log.start_offset > 0)
    late = await cluster.start_broker(102)
    with trio.fail_after(30):
        await late.wait_for_state(lambda state: state is BrokerState.ONLINE)
    assert late.runtime.node.log.start_offset > 0  # it started from a snapshot
    answer = ask(late, "list_topics")
    assert answer.error is ErrorCode.NONE and answer.body["topics"] == sorted(f"t{i}" for i in range(12))
