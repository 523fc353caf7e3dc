"""The trio runtime under MockClock, over an in-process network and
in-memory storage: real tasks, virtual time, no sleeps in the tests.

Each test requests ``autojump_clock`` itself: pytest-trio installs the
clock only when the test function asks for it.
"""

import random

import pytest
import trio

from quorum import FetchRequest, NotLeaderError, QuorumConfig, Role
from quorum.runtime import KeyValueStateMachine, MemoryNetwork, QuorumRuntime
from quorum.storage import MemoryStorage

VOTERS = (1, 2, 3)


class Cluster:
    """Three runtimes in one trio run; each can be crashed and restarted
    with what its storage had made durable."""

    def __init__(self, nursery, voters=VOTERS, **quorum_options):
        self.nursery = nursery
        self.voters = voters
        self.network = MemoryNetwork()
        self.storages = {node_id: MemoryStorage() for node_id in voters}
        self.runtimes: dict[int, QuorumRuntime] = {}
        self.scopes: dict[int, trio.CancelScope] = {}
        self.machines: dict[int, KeyValueStateMachine] = {}
        self.quorum_options = quorum_options

    async def start(self, node_id):
        config = QuorumConfig(node_id=node_id, voters=self.voters, **self.quorum_options)
        machine = KeyValueStateMachine()
        runtime = QuorumRuntime(
            config,
            machine,
            storage=self.storages[node_id],
            transport=self.network.transport(node_id),
            rng=random.Random(node_id),
            snapshot_every_records=20,
        )
        scope = trio.CancelScope()

        async def run(task_status=trio.TASK_STATUS_IGNORED):
            with scope:
                await runtime.run(task_status=task_status)

        await self.nursery.start(run)
        self.runtimes[node_id], self.scopes[node_id], self.machines[node_id] = runtime, scope, machine
        return runtime

    async def start_all(self):
        for node_id in self.voters:
            await self.start(node_id)

    def crash(self, node_id):
        self.scopes.pop(node_id).cancel()
        self.runtimes.pop(node_id)
        self.storages[node_id].crash()  # lose whatever was not flushed

    async def leader(self, timeout_s=30):
        with trio.fail_after(timeout_s):
            while True:
                for node_id, runtime in sorted(self.runtimes.items()):
                    if runtime.node.leader_has_committed_own_epoch:
                        return runtime
                await trio.sleep(0.01)


@pytest.fixture
async def cluster(nursery):
    # Few records kept behind a snapshot, so a lagging replica needs one.
    cluster = Cluster(nursery, snapshot_retained_records=10)
    await cluster.start_all()
    yield cluster
    nursery.cancel_scope.cancel()


async def test_three_voters_elect_a_leader_and_commit_writes(cluster, autojump_clock):
    leader = await cluster.leader()
    offset = await leader.propose([KeyValueStateMachine.encode_put(b"k", b"v1")])
    assert offset >= 1  # after the leader-change record
    await leader.propose([KeyValueStateMachine.encode_put(b"k", b"v2")])
    assert cluster.machines[leader.config.node_id].get(b"k")[0] == b"v2"


async def test_followers_apply_what_the_leader_committed(cluster, autojump_clock):
    leader = await cluster.leader()
    last = await leader.propose([KeyValueStateMachine.encode_put(b"k%d" % i, b"v") for i in range(10)])
    with trio.fail_after(5):
        for runtime in cluster.runtimes.values():
            await runtime.wait_until(lambda runtime=runtime: runtime.applied_offset > last)
    for machine in cluster.machines.values():
        assert sorted(machine.values) == sorted(b"k%d" % i for i in range(10))


async def test_a_follower_refuses_proposals_with_a_leader_hint(cluster, autojump_clock):
    leader = await cluster.leader()
    follower = next(r for r in cluster.runtimes.values() if r is not leader)
    with trio.fail_after(5):
        await follower.wait_until(lambda: follower.node.leader_id == leader.config.node_id)
    with pytest.raises(NotLeaderError) as raised:
        await follower.propose([b"x"])
    assert raised.value.leader_id == leader.config.node_id


async def test_linearizable_read_returns_an_offset_covering_acknowledged_writes(cluster, autojump_clock):
    leader = await cluster.leader()
    written = await leader.propose([KeyValueStateMachine.encode_put(b"k", b"v")])
    read_offset = await leader.read_index()
    assert read_offset > written


async def test_killed_leader_is_replaced_and_rejoins_as_follower(cluster, autojump_clock):
    old = await cluster.leader()
    old_id = old.config.node_id
    await old.propose([KeyValueStateMachine.encode_put(b"before", b"1")])
    cluster.crash(old_id)
    new = await cluster.leader()
    assert new.config.node_id != old_id
    await new.propose([KeyValueStateMachine.encode_put(b"after", b"2")])
    rejoined = await cluster.start(old_id)
    with trio.fail_after(10):
        await rejoined.wait_until(lambda: rejoined.applied_offset >= new.applied_offset)
    assert cluster.machines[old_id].get(b"after")[0] == b"2"
    assert rejoined.role is Role.FOLLOWER


async def test_isolated_leader_resigns_by_check_quorum(cluster, autojump_clock):
    leader = await cluster.leader()
    leader_id = leader.config.node_id
    cluster.network.isolate(leader_id, list(VOTERS))
    started = trio.current_time()
    with trio.fail_after(10):
        await leader.wait_until(lambda: leader.role is not Role.LEADER)
    assert trio.current_time() - started <= 1.5 * 2.0 + 0.01 + 0.01


async def test_a_leader_paused_past_check_quorum_refuses_leader_local_reads_at_once(cluster, autojump_clock):
    """Seed 004 §3 (a long pause) meets KAFKA-15489: the clock jumps 10 s
    while no task runs, as after SIGSTOP/SIGCONT. The very first thing the
    leader is asked must already see check quorum expired; counting ticker
    wake-ups instead of the clock would answer as the leader for another
    3 s of stale state."""
    leader = await cluster.leader()
    assert leader.leader_local_offset() >= 0
    cluster.network.isolate(leader.config.node_id, list(VOTERS))
    autojump_clock.jump(10)  # no task has run since: the ticker is asleep
    with pytest.raises(NotLeaderError):
        leader.leader_local_offset()
    assert leader.role is not Role.LEADER


async def test_resign_hands_leadership_over_quickly(cluster, autojump_clock):
    leader = await cluster.leader()
    await leader.resign()
    started = trio.current_time()
    successor = await cluster.leader()
    assert successor is not leader
    # EndQuorumEpoch: the first preferred successor stands on its next tick.
    assert trio.current_time() - started < 0.2


async def test_a_lagging_replica_catches_up_from_a_snapshot(cluster, autojump_clock):
    leader = await cluster.leader()
    lagging = next(node_id for node_id in VOTERS if node_id != leader.config.node_id)
    cluster.crash(lagging)
    cluster.storages[lagging] = MemoryStorage()  # a lost disk: starts empty
    for batch in range(10):
        await leader.propose([KeyValueStateMachine.encode_put(b"k%d" % batch, b"v%d" % i) for i in range(20)])
    assert leader.node.log.start_offset > 0  # old records dropped behind the snapshot
    rejoined = await cluster.start(lagging)
    with trio.fail_after(10):
        await rejoined.wait_until(lambda: rejoined.applied_offset >= leader.applied_offset)
    assert cluster.machines[lagging].values == cluster.machines[leader.config.node_id].values


async def test_single_voter_quorum_needs_no_peers(nursery, autojump_clock):
    cluster = Cluster(nursery, voters=(1,))
    await cluster.start_all()
    leader = await cluster.leader()
    offset = await leader.propose([KeyValueStateMachine.encode_put(b"solo", b"1")])
    assert await leader.read_index() > offset
    nursery.cancel_scope.cancel()


async def test_compare_and_set_answers_reach_the_proposer(cluster, autojump_clock):
    leader = await cluster.leader()
    await leader.propose([KeyValueStateMachine.encode_put(b"k", b"1")])
    _, [applied] = await leader.propose_with_answers([KeyValueStateMachine.encode_cas(b"k", b"1", b"2")])
    _, [refused] = await leader.propose_with_answers([KeyValueStateMachine.encode_cas(b"k", b"1", b"3")])
    assert (applied, refused) == (KeyValueStateMachine.CAS_APPLIED, KeyValueStateMachine.CAS_REFUSED)
    assert cluster.machines[leader.config.node_id].get(b"k")[0] == b"2"


async def test_snapshots_let_the_retention_policy_delete_old_segments(tmp_path, autojump_clock):
    """KIP-630 / metadata.max.retention.bytes: once a snapshot covers them,
    whole segments beyond the size budget are deleted, and the node still
    restarts from snapshot + log with every write."""
    from quorum.storage import FileStorage, RetentionPolicy

    def open_storage():
        return FileStorage.open(
            tmp_path,
            node_id=1,
            cluster_id="retention",
            segment_bytes_max=4096,
            retention=RetentionPolicy(retention_bytes=8192, retention_ms=None),
        )

    async def run_node(storage, body):
        machine = KeyValueStateMachine()
        runtime = QuorumRuntime(
            QuorumConfig(node_id=1, voters=(1,)),
            machine,
            storage=storage,
            transport=MemoryNetwork().transport(1),
            rng=random.Random(1),
            snapshot_every_records=50,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            await runtime.wait_until(lambda: runtime.node.leader_has_committed_own_epoch)
            await body(runtime, machine)
            nursery.cancel_scope.cancel()

    async def write(runtime, machine):
        for index in range(400):
            await runtime.propose([KeyValueStateMachine.encode_put(b"k%d" % (index % 7), b"v" * 100 + b"%d" % index)])

    storage = open_storage()
    await run_node(storage, write)
    infos = storage.log.segment_infos()
    assert storage.log.log_start_offset > 0, "nothing was deleted"
    assert sum(info.size_bytes for info in infos[:-1]) <= 8192 + 4096
    storage.close()

    async def check(runtime, machine):
        assert [machine.get(b"k%d" % key)[0] for key in (0, 6)] == [b"v" * 100 + b"399", b"v" * 100 + b"398"]

    await run_node(open_storage(), check)


async def test_a_voters_fetch_is_served_before_the_brokers_fetches_read_before_it(cluster, autojump_clock):
    """Issue 15 part 4 (quorum.service_class): brokers' Fetches wait in
    their own queue, served a batch at a time; a voter's Fetch read after
    200 of them goes to the core at once, and theirs are all served after."""
    leader = await cluster.leader()
    node = leader.node
    follower = min(v for v in VOTERS if v != node.node_id)
    await trio.sleep(2)  # idle: the follower's Fetch is parked

    def last_fetch_ms(voter):
        return {r.node_id: r.last_fetch_ms for r in node.describe().voters}[voter]

    # Until the follower's last Fetch is older than the leader's clock (its
    # long poll may have been renewed at this very tick): the Fetch below
    # must change its last fetch time. Renewed every fetch_max_wait_ms, so
    # one more tick does.
    while last_fetch_ms(follower) >= (node.current_tick + leader._ticks_unfed()) * leader.config.tick_ms:
        await trio.sleep(leader.config.tick_ms / 1000)
    brokers = range(1000, 1200)
    for broker in brokers:
        leader._deliver(
            FetchRequest(src=broker, dst=node.node_id, epoch=node.epoch, fetch_offset=0, last_fetched_epoch=0, request_id=1)
        )
    before = {r.node_id: r.last_fetch_ms for r in node.describe().voters}
    request = FetchRequest(
        src=follower, dst=node.node_id, epoch=node.epoch, fetch_offset=node.log.end_offset,
        last_fetched_epoch=node.log.last_epoch, request_id=(1 << 40),
    )  # fmt: skip
    leader._deliver(request)

    # Handed to the core by the delivering task, before any broker's.
    assert {r.node_id: r.last_fetch_ms for r in node.describe().voters}[follower] != before[follower]
    assert node.describe().observers == ()
    assert len(leader._observer_queue) == len(brokers)
    with trio.fail_after(5):
        while leader._observer_queue:
            await trio.sleep(0)
    assert {r.node_id for r in node.describe().observers} == set(brokers)


async def test_a_brokers_newer_fetch_takes_the_place_of_its_older_one_still_waiting(cluster, autojump_clock):
    """Issue 21: brokers that waited past their request timeout sent again;
    the leader answered the Fetches they had given up on, the resends queued
    behind. A broker's newer Fetch now replaces its older one still waiting,
    in that one's place; the core sees the newer only."""
    leader = await cluster.leader()
    node = leader.node
    brokers = range(1000, 1100)

    def fetch(broker: int, request: int) -> FetchRequest:
        return FetchRequest(
            src=broker, dst=node.node_id, epoch=node.epoch, fetch_offset=node.log.end_offset,
            last_fetched_epoch=node.log.last_epoch, request_id=(1 << 32) + request,
        )  # fmt: skip

    for request in (1, 2):
        for broker in brokers:
            leader._deliver(fetch(broker, request))
    leader._deliver(fetch(2000, 1))  # after every first Fetch, and every resend

    assert len(leader._observer_queue) == len(brokers) + 1
    assert leader.metrics.value("pykraft_quorum_observer_messages_dropped_total", reason="replaced") == len(brokers)
    served = []
    original = leader._submit

    def note(item):
        if item[0] == "message" and item[1].src >= 1000:
            served.append((item[1].src, item[1].request_id & 0xFFFFFFFF))
        original(item)

    leader._submit = note
    with trio.fail_after(5):
        while leader._observer_queue:
            await trio.sleep(0)
    assert served == [(broker, 2) for broker in brokers] + [(2000, 1)]
    assert leader._observer_fetches == {}


async def test_the_brokers_queue_is_bounded_in_bytes_whatever_its_count(cluster, autojump_clock):
    """Brokers' messages wait as decoded objects: a Fetch's extension of a
    1 MiB frame decodes to several MiB, and the count bound (65,536) alone
    let brokers, or anyone claiming broker ids over plaintext, park tens of
    GiB. Past OBSERVER_QUEUE_BYTES_MAX of frames the oldest go, counted as
    queue_full; a broker's newer Fetch replacing its older one is counted at
    its own size; what is left is served and the count goes back to 0."""
    from quorum.runtime._runtime import OBSERVER_QUEUE_BYTES_MAX

    leader = await cluster.leader()
    node = leader.node
    frame_bytes = 1024 * 1024

    def fetch(broker: int, request: int) -> FetchRequest:
        return FetchRequest(
            src=broker, dst=node.node_id, epoch=node.epoch, fetch_offset=node.log.end_offset,
            last_fetched_epoch=node.log.last_epoch, request_id=(1 << 32) + request,
        )  # fmt: skip

    def deliver(message: FetchRequest, size_bytes: int) -> None:
        # As a TCP transport delivers a message it read in a frame of that size.
        leader.transport.delivering_frame_bytes = size_bytes
        try:
            leader._deliver(message)
        finally:
            leader.transport.delivering_frame_bytes = 0

    senders = OBSERVER_QUEUE_BYTES_MAX // frame_bytes + 10
    for broker in range(1000, 1000 + senders):
        deliver(fetch(broker, 1), frame_bytes)
    dropped = leader.metrics.value("pykraft_quorum_observer_messages_dropped_total", reason="queue_full")
    assert dropped == 10  # the oldest ten went
    assert leader._observer_queue_bytes == OBSERVER_QUEUE_BYTES_MAX
    assert list(leader._observer_queue)[0] == 1010 and set(leader._observer_fetches) == set(leader._observer_queue)

    # The newest broker's resend, five times larger: four more of the oldest go.
    deliver(fetch(1000 + senders - 1, 2), 5 * frame_bytes)
    assert leader.metrics.value("pykraft_quorum_observer_messages_dropped_total", reason="queue_full") == dropped + 4
    assert leader._observer_queue_bytes <= OBSERVER_QUEUE_BYTES_MAX
    assert list(leader._observer_queue)[0] == 1014

    with trio.fail_after(5):
        while leader._observer_queue:
            await trio.sleep(0)
    assert leader._observer_queue_bytes == 0 and not leader._observer_fetches and not leader._observer_fetch_bytes


class SlowLinkNetwork(MemoryNetwork):
    """A ``MemoryNetwork`` on which every message to one node (once chosen
    with ``slow_down``) arrives ``delay_s`` of trio's clock late."""

    def __init__(self, nursery, *, every_node=False):
        super().__init__()
        self._nursery = nursery
        self._slow_node: int | None = None
        self._delay_s = 0.0
        self._every_node = every_node  # every message is late, to whichever node

    def slow_down(self, node_id: int, delay_s: float) -> None:
        self._slow_node, self._delay_s = node_id, delay_s

    def _send(self, message):
        if message.dst != self._slow_node and not self._every_node:
            super()._send(message)
            return

        async def later():
            await trio.sleep(self._delay_s)
            MemoryNetwork._send(self, message)

        self._nursery.start_soon(later)


async def test_a_follower_on_a_slow_link_reports_its_apply_lag_in_records_and_time(nursery, autojump_clock):
    """Issue 25 (Kafka's last-applied-record-lag-ms): a follower that learns
    of commits it has not fetched yet reports them, in records and in the
    time since it learned the next one to apply was committed, until it has
    applied them; the leader, which applies in the step that commits,
    reports none. Before this, a follower's own high watermark (which stops
    at its log end) made both figures 0 however far behind it was, and a
    /ready first asked while it lagged said it had caught up."""
    cluster = Cluster(nursery, fetch_bytes_max=64)  # a record or two per Fetch answer
    cluster.network = SlowLinkNetwork(nursery)
    await cluster.start_all()
    leader = await cluster.leader()
    slow = cluster.runtimes[min(node_id for node_id in VOTERS if node_id != leader.config.node_id)]
    with trio.fail_after(5):
        await slow.wait_until(lambda: slow.applied_offset == leader.applied_offset)
    assert slow.apply_lag() == (0, 0.0)

    cluster.network.slow_down(slow.config.node_id, delay_s=0.1)
    written_at = trio.current_time()
    last = await leader.propose([KeyValueStateMachine.encode_put(b"k%03d" % i, b"v" * 20) for i in range(60)])
    seen = []
    with trio.fail_after(60):
        while slow.applied_offset <= last:
            records, seconds = slow.apply_lag()
            assert leader.apply_lag() == (0, 0.0)
            assert slow.metrics.value("pykraft_quorum_apply_lag_records") == records
            assert slow.metrics.value("pykraft_quorum_apply_lag_seconds") == pytest.approx(seconds)
            seen.append((trio.current_time() - written_at, records, seconds))
            if records > 0:
                # /health and /ready count what the leader committed too.
                healthy, reason = slow.health()
                assert healthy and reason.endswith(f", {records} records to apply")
                ready, why = slow.ready()
                assert not ready and why.startswith("catching up: applied"), why
            await trio.sleep(0.05)

    lagging = [(elapsed, records, seconds) for elapsed, records, seconds in seen if records > 0]
    assert len(lagging) > 10, seen  # dozens of 0.1 s round trips to catch up
    # Never more than it has to apply, never learned before the write, and
    # the records fall while the time since the first unapplied commit grows.
    assert all(records <= 60 for _, records, _ in lagging)
    assert all(0 <= seconds <= elapsed for elapsed, _, seconds in lagging)
    assert [records for _, records, _ in lagging] == sorted((records for _, records, _ in lagging), reverse=True)
    assert max(seconds for _, _, seconds in lagging) >= 1.0
    healthy, reason = slow.health()
    assert healthy and reason.endswith(", 0 records to apply")
    assert slow.ready()[0] is True
    assert slow.apply_lag() == (0, 0.0)
    assert slow.metrics.value("pykraft_quorum_apply_lag_seconds") == 0


async def test_an_idle_cluster_wakes_a_few_times_a_second_and_still_answers_and_fails_over(nursery, autojump_clock):
    """Issue 21: the ticker sleeps until the next tick at which a timer may
    act, instead of waking every tick (100 a second). Idle, each node wakes
    a few times a simulated second, yet the leader still answers every long
    poll when it expires (a follower's Fetches follow one another every
    fetch_max_wait_ms, not later), and a partitioned leader is replaced by
    a follower standing when its fetch timeout runs out."""
    # Timeouts that are no multiple of one another nor of the ticker's
    # longest sleep (500 ms): a wake-up that is not aimed at them misses.
    cluster = Cluster(nursery, fetch_max_wait_ms=370, fetch_timeout_ms=1730, election_timeout_ms=830)
    # Every message 3 ms late, each delivered by a task of its own: inputs
    # reach a node while its ticker sleeps (on the plain MemoryNetwork a
    # whole election runs inside the wake-up that started it).
    cluster.network = SlowLinkNetwork(nursery, every_node=True)
    cluster.network.slow_down(0, delay_s=0.003)
    await cluster.start_all()
    late: list[tuple[int, float, float]] = []

    async def watch_the_tickers():
        # Every 5 ms: a sleeping ticker wakes no later than the next
        # tick at which its host may act, whatever inputs came meanwhile.
        while True:
            for node_id, runtime in cluster.runtimes.items():
                scope = runtime._ticker_scope
                if scope is not None:
                    due_s = runtime._tick_time_s(runtime.host.next_timer_tick())
                    if scope.deadline > due_s + 1e-9:
                        late.append((node_id, scope.deadline, due_s))
            await trio.sleep(0.005)

    nursery.start_soon(watch_the_tickers)
    leader = await cluster.leader()
    await trio.sleep(1)  # settled: the followers' Fetches are parked
    woken = {node_id: runtime.ticker_wakeups for node_id, runtime in cluster.runtimes.items()}
    leader._voter_fetch_gap_max_s = 0.0
    await trio.sleep(5)
    for node_id, runtime in cluster.runtimes.items():
        per_second = (runtime.ticker_wakeups - woken[node_id]) / 5
        assert per_second <= 6, (node_id, per_second)
    # A long poll answered late would show as a longer gap between one
    # follower's Fetches: parked for 370 ms (from the tick it arrived in),
    # answered at its expiry, the next one 6 ms later (two messages).
    assert 0.36 <= leader._voter_fetch_gap_max_s <= 0.37 + 0.006 + 1e-6
    assert leader.role is Role.LEADER and leader.node.epoch == min(r.node.epoch for r in cluster.runtimes.values())

    old_id = leader.config.node_id
    followers = [runtime for node_id, runtime in cluster.runtimes.items() if node_id != old_id]
    cluster.network.isolate(old_id, list(VOTERS))
    cut_at = trio.current_time()
    with trio.fail_after(10):
        while all(runtime.role is Role.FOLLOWER for runtime in followers):
            await trio.sleep(0.001)
    # The fetch timeout (1.73 s) runs from the last answer, at most one
    # long poll (0.37 s) before the cut; a ticker asleep past it is late.
    assert 1.73 - 0.38 <= trio.current_time() - cut_at <= 1.73 + 0.003 + 0.011
    with trio.fail_after(10):
        while not any(runtime.node.leader_has_committed_own_epoch for runtime in followers):
            await trio.sleep(0.01)
    await trio.sleep(1)
    assert not late, late[:5]
