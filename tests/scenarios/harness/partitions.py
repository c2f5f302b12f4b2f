"""What a broker answers about a partition in its own Metadata (read with raw frames, no
client-side caching). ListOffsets, with Kafka's special timestamps, is
``tests.tiered_broker_support.list_offset``."""

from __future__ import annotations

from tests import cluster_support

NO_EPOCH = -1  # a ListOffsets answer without a leader epoch


def metadata_leader(bootstrap: str, topic: str) -> tuple[int, int]:
    """(leader, error code) of partition 0 in one broker's own Metadata answer."""
    (answer,) = cluster_support.metadata(bootstrap, topic).topics
    (partition,) = answer.partitions
    return int(partition.leader_id), int(partition.error_code.value)
