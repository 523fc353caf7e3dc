"""Replica placement for new partitions: spread over the online brokers,
across racks when racks are set.

Deterministic (no randomness): the caller passes ``start``, which rotates
the first replica so that leadership spreads over brokers across topics.

- Without racks, partition ``p``'s first replica is broker
  ``(start + p) mod n`` (sorted by id) and the others follow at a shift that
  changes every ``n`` partitions, so followers do not always pair with the
  same brokers (the scheme of Kafka's ``AdminUtils`` assignment).
- With racks, brokers are interleaved rack by rack (r1b1, r2b1, r3b1, r1b2,
  ...), and each partition takes replicas on distinct racks first, then on
  any broker: every partition spans ``min(replication_factor, racks)`` racks.
  A broker without a rack counts as one more rack.
"""

from __future__ import annotations

from collections.abc import Sequence


def place_replicas(
    brokers: Sequence[tuple[int, str | None]],
    *,
    partition_count: int,
    replication_factor: int,
    start: int = 0,
) -> list[tuple[int, ...]]:
    """Replica tuples (preferred leader first) for ``partition_count`` new
    partitions over ``brokers`` (``(broker_id, rack)`` pairs).

    Raises ``ValueError`` when ``replication_factor`` is below 1 or above the
    number of brokers, or ``partition_count`` is below 0.
    """
    count = len(brokers)
    if replication_factor < 1 or replication_factor > count:
        raise ValueError(f"replication factor {replication_factor} needs 1 to {count} brokers")
    if partition_count < 0:
        raise ValueError(f"partition count {partition_count} is negative")
    racks = sorted({rack for _, rack in brokers}, key=lambda rack: (rack is not None, rack or ""))
    by_id = sorted(brokers)
    if len(racks) <= 1:
        ring = [broker_id for broker_id, _ in by_id]
        rack_of: dict[int, str | None] | None = None
    else:
        groups = {rack: [broker_id for broker_id, broker_rack in by_id if broker_rack == rack] for rack in racks}
        ring = []
        for index in range(max(len(group) for group in groups.values())):
            for rack in racks:
                if index < len(groups[rack]):
                    ring.append(groups[rack][index])
        rack_of = dict(brokers)
    rack_count = len(racks)
    assignments = []
    for partition in range(partition_count):
        first = (start + partition) % count
        shift = ((start + partition) // count) % (count - 1) if count > 1 else 0

        def follower(step: int) -> int:
            return ring[(first + 1 + (shift + step) % (count - 1)) % count]

        replicas = [ring[first]]
        if rack_of is None:
            replicas += [follower(step) for step in range(replication_factor - 1)]
        else:
            used_racks = {rack_of[ring[first]]}
            for step in range(count - 1):  # distinct racks first
                if len(replicas) == replication_factor or len(used_racks) == rack_count:
                    break
                broker_id = follower(step)
                if rack_of[broker_id] not in used_racks:
                    replicas.append(broker_id)
                    used_racks.add(rack_of[broker_id])
            for step in range(count - 1):  # then any broker
                if len(replicas) == replication_factor:
                    break
                broker_id = follower(step)
                if broker_id not in replicas:
                    replicas.append(broker_id)
        assignments.append(tuple(replicas))
    return assignments
