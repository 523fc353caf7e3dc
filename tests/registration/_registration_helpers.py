"""A stand-in for the runtime around one ``Controller``: a log, commits, and
several independent ``ClusterImage``s (one per node) fed the same entries.

It honours the runtime's contract: batches are proposed in the order the
controller made them (``take_proposals()`` before a reply's records), and a
batch's ``on_committed`` runs after every image has applied it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quorum import Entry, RecordKind
from registration import (
    NO_LEADER,
    BrokerHeartbeat,
    BrokerState,
    ClusterImage,
    Controller,
    ControllerConfig,
    CreateTopicsRequest,
    ErrorCode,
    HeartbeatReply,
    NewTopic,
    RegisterBrokerRequest,
    decode_record,
)

CLUSTER_ID = "test-cluster"
LISTENERS = (("PLAINTEXT", "127.0.0.1", 9092),)


@dataclass
class PendingWrite:
    """A write reply whose batch is proposed; ``response`` once committed."""

    first_offset: int
    count: int
    on_committed: Any
    response: Any = None
    committed: bool = False


@dataclass
class Harness:
    config: ControllerConfig = field(default_factory=lambda: ControllerConfig(cluster_id=CLUSTER_ID))
    nodes: int = 3
    now_ms: int = 0
    auto_commit: bool = True
    # Assert that batches land where the controller predicted (off in tests
    # that write foreign records on purpose).
    strict_offsets: bool = True
    check_every_batch: bool = False

    def __post_init__(self) -> None:
        self.images = [ClusterImage() for _ in range(self.nodes)]
        self.log: list[Entry] = []
        self.committed_end = 0
        self.in_flight: list[PendingWrite] = []
        self.batches: list[list[bytes]] = []  # every proposed batch, in order
        self.controller = Controller(self.config, self.images[0])
        self.incarnations: dict[int, int] = {}
        self.controller.activate(self.now_ms, next_write_offset=self.log_end)

    # -- the log ------------------------------------------------------------

    @property
    def log_end(self) -> int:
        return len(self.log)

    @property
    def image(self) -> ClusterImage:
        """The controller's committed image."""
        return self.controller.image

    @property
    def working(self) -> ClusterImage:
        return self.controller.working_image

    def append(self, records: list[bytes], on_committed: Any, *, kind: RecordKind = RecordKind.DATA) -> PendingWrite:
        first = self.log_end
        for index, data in enumerate(records):
            self.log.append(Entry(first + index, 1, kind, data))
        pending = PendingWrite(first, len(records), on_committed)
        self.in_flight.append(pending)
        self.batches.append(list(records))
        return pending

    def drain(self) -> None:
        """Propose what the controller queued (and commit, if auto)."""
        for proposal in self.controller.take_proposals():
            assert not self.strict_offsets or proposal.expected_first_offset == self.log_end
            self.append(proposal.records, proposal.on_committed)
        if self.auto_commit:
            self.commit()

    def commit(self, count: int | None = None) -> None:
        """Commit the first ``count`` in-flight batches (all when None), and
        any entries before them: every image applies them batch by batch,
        then the batches' callbacks run. With ``check_every_batch``, the
        images' fingerprints are compared after each batch."""
        in_flight = self.in_flight if count is None else self.in_flight[:count]
        if count is None:
            end = self.log_end
        elif in_flight:
            end = in_flight[-1].first_offset + in_flight[-1].count
        else:
            end = self.committed_end
        boundaries = sorted({p.first_offset + p.count for p in in_flight if p.first_offset + p.count <= end} | {end})
        for boundary in boundaries:
            entries = self.log[self.committed_end : boundary]
            if not entries:
                continue
            for image in self.images:
                image.apply(entries)
            self.committed_end = boundary
            if self.check_every_batch:
                assert len({image.fingerprint() for image in self.images}) == 1, f"images differ at {boundary}"
        self.in_flight = self.in_flight[len(in_flight) :]
        for pending in in_flight:
            pending.committed = True
            if pending.on_committed is not None:
                pending.response = pending.on_committed(pending.first_offset)

    def lose_uncommitted(self) -> None:
        """A leader change that truncates the uncommitted tail: those batches
        never commit and their callbacks never run."""
        del self.log[self.committed_end :]
        self.in_flight = []

    def fail_over(self, node: int) -> None:
        """The controller on ``node`` takes over: the old one is deactivated,
        the new leader's LEADER_CHANGE record commits, then it activates."""
        self.controller.deactivate()
        self.append([b"leader change"], None, kind=RecordKind.LEADER_CHANGE)
        self.commit()
        self.controller = Controller(self.config, self.images[node])
        self.controller.activate(self.now_ms, next_write_offset=self.log_end)

    def batch_records(self, batch_index: int = -1) -> list[Any]:
        return [decode_record(data) for data in self.batches[batch_index]]

    # -- requests -----------------------------------------------------------

    def request(self, request: Any, *, commit: bool | None = None) -> Any:
        """Send ``request``; returns the response (or the ``PendingWrite``
        when the batch is left uncommitted)."""
        reply = self.controller.handle_request(request, self.now_ms)
        if reply.response is not None:
            return reply.response
        if reply.is_read:
            return reply.on_read_confirmed()
        for proposal in self.controller.take_proposals():
            self.append(proposal.records, proposal.on_committed)
        assert not self.strict_offsets or reply.expected_first_offset == self.log_end
        pending = self.append(reply.records, reply.on_committed)
        if commit if commit is not None else self.auto_commit:
            self.commit()
            return pending.response
        return pending

    def register(
        self, broker_id: int, *, incarnation: str | None = None, rack: str | None = None, expect_error: Any = None
    ) -> Any:
        if incarnation is None:
            self.incarnations[broker_id] = self.incarnations.get(broker_id, 0) + 1
            incarnation = f"b{broker_id}-i{self.incarnations[broker_id]}"
        response = self.request(
            RegisterBrokerRequest(
                broker_id=broker_id, incarnation_id=incarnation, cluster_id=CLUSTER_ID, listeners=LISTENERS, rack=rack
            )
        )
        if expect_error is None and hasattr(response, "error"):
            assert response.error is ErrorCode.NONE, response
            return response.broker_epoch
        return response

    def heartbeat(
        self,
        broker_id: int,
        epoch: int | None = None,
        *,
        want_fence: bool = False,
        want_shutdown: bool = False,
        fetch_offset: int | None = None,
    ) -> HeartbeatReply:
        """A heartbeat; ``epoch`` defaults to the working image's, the fetch
        offset to the committed log end (a caught-up broker)."""
        if epoch is None:
            registration = self.working.broker(broker_id)
            assert registration is not None, f"broker {broker_id} is not registered"
            epoch = registration.broker_epoch
        if fetch_offset is None:
            fetch_offset = self.committed_end
        heartbeat = BrokerHeartbeat(
            broker_id=broker_id, broker_epoch=epoch, want_fence=want_fence, want_shutdown=want_shutdown
        )
        extension = self.controller.on_fetch(broker_id, heartbeat.to_extension(), fetch_offset, self.now_ms)
        self.drain()
        return HeartbeatReply.from_extension(extension)

    def start_broker(self, broker_id: int, *, rack: str | None = None) -> int:
        """Register and unfence a broker; returns its epoch."""
        epoch = self.register(broker_id, rack=rack)
        reply = self.heartbeat(broker_id)
        assert self.image.broker_state(broker_id) is BrokerState.ONLINE, reply
        return epoch

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        self.controller.tick(self.now_ms)
        self.drain()

    def keep_alive(self, *broker_ids: int) -> None:
        for broker_id in broker_ids:
            self.heartbeat(broker_id)

    def create_topic(self, name: str, partitions: int, replication_factor: int, *, unclean: bool = False) -> Any:
        response = self.request(
            CreateTopicsRequest(
                topics=(
                    NewTopic(
                        name=name,
                        partitions=partitions,
                        replication_factor=replication_factor,
                        unclean_leader_election=unclean,
                    ),
                )
            )
        )
        return response.results[0]

    def partition(self, name: str, partition_id: int = 0) -> Any:
        return self.image.partitions_of(name)[partition_id]

    # -- invariants -----------------------------------------------------------

    def check_invariants(self) -> None:
        fingerprints = {image.fingerprint() for image in self.images}
        assert len(fingerprints) == 1, "images differ at the same offset"
        for image in [*self.images, self.working]:
            image.check_indexes()
            check_leaders_online(image)


def check_leaders_online(image: ClusterImage) -> None:
    """Every partition leader is an online ISR member, or there is none."""
    for partition in image.iter_partitions():
        if partition.leader != NO_LEADER:
            assert partition.leader in partition.isr, partition
            assert image.broker_state(partition.leader) is BrokerState.ONLINE, (
                partition,
                image.broker_state(partition.leader),
            )
