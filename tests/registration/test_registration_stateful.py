"""A hypothesis state machine over the controller and three nodes' images.

Hypothesis chooses the schedule: registrations (first starts, retries,
bounces), heartbeats with any flags and lag, stale heartbeats, time passing
(session expiry, no-ops), topic creation and deletion, unregistration,
partial commits, controller failover (with or without losing the
uncommitted tail) and snapshot reloads. The committed log is applied batch
by batch to three independent ``ClusterImage``s, compared at every batch.

Invariants after every step (issue; KIP-631, KIP-380, seed 004):
- every node's image is identical at the same offset;
- a partition leader is an online ISR member, or there is none (committed
  images and the controller's working image);
- leader epochs never decrease;
- broker epochs strictly increase per broker id;
- a stale-epoch heartbeat changes nothing;
- with nothing in flight, the working image equals the committed one.
"""

from __future__ import annotations

from _registration_helpers import CLUSTER_ID, LISTENERS, Harness, check_leaders_online
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from registration import (
    BrokerHeartbeat,
    BrokerState,
    ClusterImage,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ErrorCode,
    HeartbeatReply,
    NewTopic,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    UnregisterBrokerRequest,
)

broker_ids = st.integers(min_value=1, max_value=4)
topic_names = st.sampled_from(["a", "b", "c"])


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.harness = Harness(auto_commit=False, check_every_batch=True)
        self.incarnation: dict[int, int] = {}  # broker id -> current process number
        self.known_epoch: dict[int, int] = {}  # broker id -> epoch its process learned
        self.past_epochs: dict[int, set[int]] = {}  # broker id -> epochs it held before
        self.registrations: list[tuple[int, object]] = []  # (broker id, pending write)
        self.highest_broker_epoch: dict[int, int] = {}
        self.highest_leader_epoch: dict[tuple[str, int], int] = {}

    # -- helpers ------------------------------------------------------------

    def _collect_registrations(self) -> None:
        """Brokers learn their epoch when their registration commits."""
        waiting = []
        for broker_id, pending in self.registrations:
            if not pending.committed:
                waiting.append((broker_id, pending))
            elif pending.response is not None and pending.response.error is ErrorCode.NONE:
                self._learn_epoch(broker_id, pending.response.broker_epoch)
        self.registrations = [(b, p) for b, p in waiting if p in self.harness.in_flight]

    def _learn_epoch(self, broker_id: int, epoch: int) -> None:
        previous = self.known_epoch.get(broker_id)
        if previous is not None and previous != epoch:
            self.past_epochs.setdefault(broker_id, set()).add(previous)
        self.known_epoch[broker_id] = epoch

    # -- rules --------------------------------------------------------------

    @initialize(
        online=st.integers(min_value=0, max_value=4),
        partitions=st.integers(min_value=0, max_value=6),
        unclean=st.booleans(),
    )
    def start_cluster(self, online, partitions, unclean):
        """Begin with some online brokers and a topic, so that short runs
        reach fencing, elections and shutdowns too."""
        for broker_id in range(1, online + 1):
            self.register(broker_id, new_process=True)
            self.commit_all()
            self.heartbeat(broker_id, want_fence=False, want_shutdown=False, lag=0)
            self.commit_all()
        if online and partitions:
            self.create_topic("a", partitions, min(online, 3), unclean)
            self.commit_all()

    @rule(broker_id=broker_ids, new_process=st.booleans(), commit=st.booleans())
    def register_and_commit(self, broker_id, new_process, commit):
        self.register(broker_id, new_process)
        if commit:
            self.commit_all()

    def register(self, broker_id, new_process):
        if new_process or broker_id not in self.incarnation:
            self.incarnation[broker_id] = self.incarnation.get(broker_id, 0) + 1
        request = RegisterBrokerRequest(
            broker_id=broker_id,
            incarnation_id=f"{broker_id}-{self.incarnation[broker_id]}",
            cluster_id=CLUSTER_ID,
            listeners=LISTENERS,
            rack=f"r{broker_id % 2}",
        )
        result = self.harness.request(request)
        if isinstance(result, RegisterBrokerResponse):
            if result.error is ErrorCode.NONE:
                self._learn_epoch(broker_id, result.broker_epoch)
            else:
                assert result.error in (ErrorCode.DUPLICATE_BROKER_REGISTRATION, ErrorCode.NOT_LEADER), result
        else:
            self.registrations.append((broker_id, result))

    @rule(
        broker_id=broker_ids,
        want_fence=st.booleans(),
        want_shutdown=st.sampled_from([False, False, False, True]),
        lag=st.sampled_from([0, 0, 0, 1, 5]),
    )
    def heartbeat_rule(self, broker_id, want_fence, want_shutdown, lag):
        self.heartbeat(broker_id, want_fence, want_shutdown, lag)
        self.commit_all()

    def heartbeat(self, broker_id, want_fence, want_shutdown, lag):
        epoch = self.known_epoch.get(broker_id)
        if epoch is None:
            return
        fetch_offset = max(0, self.harness.committed_end - lag)
        reply = self.harness.heartbeat(
            broker_id, epoch, want_fence=want_fence, want_shutdown=want_shutdown, fetch_offset=fetch_offset
        )
        if reply.error is ErrorCode.NONE:
            assert reply.is_caught_up == (fetch_offset > epoch)
            if reply.should_shutdown:
                assert self.harness.working.broker_state(broker_id) is BrokerState.OFFLINE
            if not reply.is_fenced:
                assert self.harness.image.broker_state(broker_id) in (BrokerState.ONLINE, BrokerState.STOPPING)
        else:
            assert reply.error in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.NOT_LEADER), reply

    @rule(broker_id=broker_ids, want_fence=st.booleans(), want_shutdown=st.booleans(), data=st.data())
    def stale_heartbeat(self, broker_id, want_fence, want_shutdown, data):
        """KIP-380: a stale generation's request changes nothing."""
        registration = self.harness.working.broker(broker_id)
        stale = sorted(self.past_epochs.get(broker_id, set()) - {registration and registration.broker_epoch})
        if not stale:
            return
        epoch = data.draw(st.sampled_from(stale))
        fingerprint = self.harness.working.fingerprint()
        heartbeat = BrokerHeartbeat(
            broker_id=broker_id, broker_epoch=epoch, want_fence=want_fence, want_shutdown=want_shutdown
        )

        reply = self.harness.controller.on_fetch(broker_id, heartbeat.to_extension(), self.harness.log_end, 0)

        assert HeartbeatReply.from_extension(reply).error is ErrorCode.STALE_BROKER_EPOCH
        assert self.harness.controller.take_proposals() == []
        assert self.harness.working.fingerprint() == fingerprint

    @rule(duration_ms=st.sampled_from([1, 500, 2_000, 4_000, 9_001]), silent=st.sets(broker_ids))
    def time_passes(self, duration_ms, silent):
        """Time passes; the brokers not in ``silent`` heartbeat first."""
        for broker_id in sorted(set(self.known_epoch) - silent):
            self.heartbeat(broker_id, want_fence=False, want_shutdown=False, lag=0)
        self.commit_all()
        self.harness.advance(duration_ms)

    @rule(name=topic_names, partitions=st.integers(1, 4), factor=st.integers(1, 3), unclean=st.booleans())
    def create_topic(self, name, partitions, factor, unclean):
        topic = NewTopic(name=name, partitions=partitions, replication_factor=factor, unclean_leader_election=unclean)
        self.harness.request(CreateTopicsRequest(topics=(topic,)))

    @rule(name=topic_names)
    def delete_topic(self, name):
        self.harness.request(DeleteTopicsRequest(names=(name,)))

    @rule(broker_id=broker_ids)
    def unregister(self, broker_id):
        self.harness.request(UnregisterBrokerRequest(broker_id=broker_id))

    @rule(broker_id=broker_ids, want_fence=st.booleans(), lag=st.sampled_from([0, 1]))
    def heartbeat_uncommitted(self, broker_id, want_fence, lag):
        self.heartbeat(broker_id, want_fence, False, lag)

    @rule(count=st.integers(min_value=1, max_value=3))
    def commit_some(self, count):
        self.harness.commit(count)
        self._collect_registrations()

    @rule()
    def commit_all(self):
        self.harness.commit()
        self._collect_registrations()

    @rule(node=st.integers(0, 2), lose_uncommitted=st.booleans())
    def fail_over(self, node, lose_uncommitted):
        if lose_uncommitted:
            self.harness.lose_uncommitted()
        self.harness.fail_over(node)
        self._collect_registrations()

    @rule(node=st.integers(1, 2))
    def reload_from_snapshot(self, node):
        """KIP-630: a node restarting from a snapshot has an equal image."""
        image = self.harness.images[node]
        if image is self.harness.controller.image:
            return
        reloaded = ClusterImage()
        reloaded.restore(image.snapshot())
        assert reloaded == image
        self.harness.images[node] = reloaded

    # -- invariants ---------------------------------------------------------

    @invariant()
    def images_are_identical_and_sound(self):
        harness = self.harness
        assert len({image.fingerprint() for image in harness.images}) == 1
        images = [harness.image]
        if harness.controller.is_active:
            images.append(harness.working)
        for image in images:
            image.check_indexes()
            check_leaders_online(image)

    @invariant()
    def leader_epochs_never_decrease(self):
        for partition in self.harness.image.iter_partitions():
            key = partition.key
            assert partition.leader_epoch >= self.highest_leader_epoch.get(key, 0)
            self.highest_leader_epoch[key] = partition.leader_epoch

    @invariant()
    def broker_epochs_strictly_increase_per_broker(self):
        for broker_id, registration in self.harness.image.brokers.items():
            highest = self.highest_broker_epoch.get(broker_id, -1)
            assert registration.broker_epoch >= highest
            self.highest_broker_epoch[broker_id] = registration.broker_epoch

    @invariant()
    def working_image_is_committed_plus_in_flight(self):
        harness = self.harness
        if harness.controller.is_active and not harness.in_flight and not harness.controller.pending_batch_count:
            assert harness.working == harness.image


ControllerMachine.TestCase.settings = settings(settings.default, stateful_step_count=60)
TestControllerStateMachine = ControllerMachine.TestCase
