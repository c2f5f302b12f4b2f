"""The cluster part of a status snapshot, from one Metadata answer (pure; no I/O).

Format (``details.cluster`` of a ``cluster_status`` run summary)::

    {
      "cluster_id": "..." | null,
      "controller_id": 2,                      # Metadata's controller_id (-1: none known)
      "brokers": [{"id": 1, "address": "host:port", "rack": null}, ...],   # by id
      "partitions": [                          # every partition of every topic, by name
        {"partition": "orders-0", "leader": 1, "leader_epoch": 3, "preferred_leader": 1,
         "replicas": [1, 2, 3], "isr": [1, 2], "offline_replicas": [3],
         "under_replicated": true, "offline": false}, ...],
      "under_replicated_partitions": ["orders-0", ...],   # led, ISR smaller than replicas
      "offline_partitions": ["orders-1", ...],            # no leader (not counted above)
      "partitions_total": 12,                  # the ones listed may stop at PARTITIONS_MAX
      "truncated": false
    }

The preferred leader is the first replica (Kafka's preferred replica).
"""

from __future__ import annotations

from typing import Any

from storage_core.client.metadata import NO_LEADER, ClusterMetadata, PartitionMetadata

PARTITIONS_MAX = 10_000  # partitions listed in one snapshot (the counts cover them all)


def partition_replication(name: str, partition: PartitionMetadata) -> dict[str, Any]:
    """One partition's leader, epoch, replicas, ISR and offline replicas."""
    replicas = [int(r) for r in partition.replicas]
    isr = [int(r) for r in partition.isr]
    return {
        "partition": name,
        "leader": None if partition.leader_id == NO_LEADER else int(partition.leader_id),
        "leader_epoch": int(partition.leader_epoch),
        "preferred_leader": replicas[0] if replicas else None,
        "replicas": replicas,
        "isr": isr,
        "offline_replicas": [int(r) for r in partition.offline_replicas],
        "under_replicated": partition.leader_id != NO_LEADER and len(isr) < len(replicas),
        "offline": partition.leader_id == NO_LEADER,
    }


def cluster_view(metadata: ClusterMetadata, *, topic: str | None = None) -> dict[str, Any]:
    """The ``details.cluster`` of a snapshot (see the module docstring); ``topic`` keeps the
    partitions of that topic only (the brokers and the controller are the whole cluster's)."""
    rows = [
        partition_replication(f"{t.name}-{p.partition}", p)
        for t in sorted(metadata.topics, key=lambda t: t.name)
        if topic is None or t.name == topic
        for p in sorted(t.partitions, key=lambda p: p.partition)
    ]
    return {
        "cluster_id": metadata.cluster_id,
        "controller_id": int(metadata.controller_id),
        "brokers": [
            {"id": b.node_id, "address": b.address, "rack": b.rack}
            for b in sorted(metadata.brokers, key=lambda b: b.node_id)
        ],
        "partitions": rows[:PARTITIONS_MAX],
        "under_replicated_partitions": [r["partition"] for r in rows if r["under_replicated"]][
            :PARTITIONS_MAX
        ],
        "offline_partitions": [r["partition"] for r in rows if r["offline"]][:PARTITIONS_MAX],
        "partitions_total": len(rows),
        "truncated": len(rows) > PARTITIONS_MAX,
    }
