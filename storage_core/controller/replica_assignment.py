"""Where a new partition's replicas go: Kafka's ``AdminUtils.assignReplicasToBrokers``.

Three goals, in Kafka's words: spread the replicas evenly among brokers; for the partitions
whose first replica is on one broker, spread their other replicas over the other brokers; when
every broker has a rack, put each partition's replicas on different racks where possible.

Without racks: the first replica of each partition goes round-robin from a start index; the
others follow at an increasing shift, so that two partitions led by the same broker do not
share the same followers. With racks, the same walk runs over a rack-alternated broker list
(brokers taken from each rack in turn), skipping a broker whose rack (or itself) already holds
a replica while some rack (or broker) holds none. Example without racks, 5 brokers, start 0:

    p0 -> 0,1,2   p1 -> 1,2,3   p2 -> 2,3,4   p3 -> 3,4,0   p4 -> 4,0,1
    p5 -> 0,2,3   p6 -> 1,3,4   ...           (shift + 1 after each round of the brokers)

Pure: the caller passes the live brokers and, for reproducible placements, the start index.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from storage_core.errors import InvalidPartitionsError, InvalidReplicationFactorError


class RackAssignmentError(InvalidReplicationFactorError):
    """Some brokers have a rack and others do not: a rack-aware placement is impossible."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerMetadata:
    broker_id: int
    rack: str | None = None


def assign_replicas_to_brokers(
    brokers: Sequence[BrokerMetadata],
    partition_count: int,
    replication_factor: int,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """Partition id -> replicas (preferred leader first). A negative ``fixed_start_index``
    draws the start and the shift at random, as Kafka does for each new topic;
    ``start_partition_id`` numbers the partitions added to an existing topic."""
    if partition_count <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}."
        )
    rng = rng or random.Random()
    if all(b.rack is None for b in brokers):
        ids = [b.broker_id for b in brokers]
        return _assign_rack_unaware(
            ids,
            partition_count,
            replication_factor=replication_factor,
            fixed_start_index=fixed_start_index,
            start_partition_id=start_partition_id,
            rng=rng,
        )
    return _assign_rack_aware(
        brokers,
        partition_count,
        replication_factor=replication_factor,
        fixed_start_index=fixed_start_index,
        start_partition_id=start_partition_id,
        rng=rng,
    )


def rack_alternated_broker_list(rack_of: Mapping[int, str]) -> list[int]:
    """Brokers taken one from each rack in turn (racks sorted, brokers of a rack sorted):
    rack1: 0,1,2 / rack2: 3,4,5 / rack3: 6,7,8 -> 0,3,6,1,4,7,2,5,8."""
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in rack_of.items():
        by_rack.setdefault(rack, []).append(broker_id)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    result: list[int] = []
    while len(result) < len(rack_of):
        for queue in queues:
            if queue:
                result.append(queue.pop(0))
    return result


def _replica_index(first: int, shift: int, replica: int, broker_count: int) -> int:
    return (first + 1 + (shift + replica) % (broker_count - 1)) % broker_count


def _start(fixed_start_index: int, broker_count: int, rng: random.Random) -> tuple[int, int]:
    if fixed_start_index >= 0:
        return fixed_start_index, fixed_start_index
    return rng.randrange(broker_count), rng.randrange(broker_count)


def _assign_rack_unaware(
    ids: list[int],
    partition_count: int,
    *,
    replication_factor: int,
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, tuple[int, ...]]:
    n = len(ids)
    start_index, shift = _start(fixed_start_index, n, rng)
    partition = max(0, start_partition_id)
    assignment = {}
    for _ in range(partition_count):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [ids[first]]
        replicas += [ids[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        assignment[partition] = tuple(replicas)
        partition += 1
    return assignment


def _assign_rack_aware(
    brokers: Sequence[BrokerMetadata],
    partition_count: int,
    *,
    replication_factor: int,
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, tuple[int, ...]]:
    missing = [b.broker_id for b in brokers if b.rack is None]
    if missing:
        raise RackAssignmentError(
            "Not all brokers have rack information for replica rack aware assignment "
            f"(brokers without a rack: {missing})."
        )
    rack_of = {b.broker_id: str(b.rack) for b in brokers}
    rack_count = len(set(rack_of.values()))
    arranged = rack_alternated_broker_list(rack_of)
    n = len(arranged)
    start_index, shift = _start(fixed_start_index, n, rng)
    partition = max(0, start_partition_id)
    assignment = {}
    for _ in range(partition_count):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        brokers_used = {leader}
        k = 0
        for _replica in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first, shift * rack_count, k, n)]
                rack = rack_of[broker]
                k += 1
                rack_ok = rack not in racks_used or len(racks_used) == rack_count
                broker_ok = broker not in brokers_used or len(brokers_used) == n
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        assignment[partition] = tuple(replicas)
        partition += 1
    return assignment
