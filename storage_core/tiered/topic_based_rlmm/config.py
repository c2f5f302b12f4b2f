"""Names, defaults and limits of the topic-based RLMM (Kafka's RLMM config class).

The metadata topic is ``__remote_log_metadata``: internal, ``cleanup.policy=delete``,
``retention.ms`` from ``remote.log.metadata.topic.retention.ms`` (default -1: kept forever,
so that a cache can always be rebuilt from offset 0), ``remote.log.metadata.topic.num.partitions``
partitions (default 50; an existing topic keeps its count, as user partitions must keep
mapping to the same metadata partition).
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.tiered.metadata.partitioner import DEFAULT_REMOTE_LOG_METADATA_TOPIC_PARTITIONS

REMOTE_LOG_METADATA_TOPIC_NAME = "__remote_log_metadata"
DEFAULT_CONSUME_WAIT_MS = 120_000
"""``remote.log.metadata.consume.wait.ms`` default: how long a publish waits for its own
event to be applied (read-your-writes)."""
DEFAULT_CHECKPOINT_INTERVAL_MS = 30_000
"""How often snapshots and committed offsets are written while running (and on close)."""
DEFAULT_IDLE_POLL_MS = 100
"""How long the consumer sleeps after a round that found nothing new (publishes wake it)."""
DEFAULT_PARTITION_REFRESH_INTERVAL_MS = 1_000
"""Broker mode: how often the hosted user partitions are compared with the tracked ones."""
MAX_RECORDS_PER_READ = 2_000
"""Records read from one metadata partition per round (then the other partitions get theirs)."""
MAX_REMEMBERED_REJECTIONS = 1_000
"""Refused events remembered so that their publisher can be told (oldest forgotten first)."""
DEFAULT_PUBLISH_TIMEOUT_MS = 25_000
"""How long the append of one event may take (acks=-1), below the client request timeout."""

__all__ = [
    "DEFAULT_CHECKPOINT_INTERVAL_MS",
    "DEFAULT_CONSUME_WAIT_MS",
    "DEFAULT_IDLE_POLL_MS",
    "DEFAULT_PARTITION_REFRESH_INTERVAL_MS",
    "DEFAULT_PUBLISH_TIMEOUT_MS",
    "DEFAULT_REMOTE_LOG_METADATA_TOPIC_PARTITIONS",
    "MAX_RECORDS_PER_READ",
    "MAX_REMEMBERED_REJECTIONS",
    "REMOTE_LOG_METADATA_TOPIC_NAME",
    "ConsumerTaskConfig",
    "metadata_topic_configs",
]


def metadata_topic_configs(retention_ms: int = -1) -> dict[str, str]:
    """Topic configs of ``__remote_log_metadata``."""
    return {"cleanup.policy": "delete", "retention.ms": str(retention_ms)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerTaskConfig:
    """Timing and limits of a ``ConsumerTask`` (all in milliseconds or records)."""

    checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS
    idle_poll_ms: int = DEFAULT_IDLE_POLL_MS
    partition_refresh_interval_ms: int = DEFAULT_PARTITION_REFRESH_INTERVAL_MS
    max_records_per_read: int = MAX_RECORDS_PER_READ

    def __post_init__(self) -> None:
        for name in ("checkpoint_interval_ms", "idle_poll_ms", "partition_refresh_interval_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 < self.max_records_per_read <= 1_000_000:
            raise ValueError(
                f"max_records_per_read must be in [1, 1000000], got {self.max_records_per_read}"
            )
