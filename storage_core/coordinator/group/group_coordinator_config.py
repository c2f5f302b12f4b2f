"""The broker configs of the group coordinator (Kafka's ``GroupCoordinatorConfig``).

One frozen value, validated when built, under Kafka's config names and defaults; the
coordinator and its parts (``group_timers``, ``group_rebalancer``, ``offset_manager``) read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.errors import InvalidConfigError

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCoordinatorConfig:
    """The broker configs the coordinator reads, under Kafka's names and defaults.

    offsets_topic_num_partitions        offsets.topic.num.partitions
    group_initial_rebalance_delay_ms    group.initial.rebalance.delay.ms
    group_min_session_timeout_ms        group.min.session.timeout.ms  (inclusive bound)
    group_max_session_timeout_ms        group.max.session.timeout.ms  (inclusive bound)
    group_max_size                      group.max.size
    offset_metadata_max_bytes           offset.metadata.max.bytes     (characters, as Kafka)
    offset_commit_timeout_ms            offsets.commit.timeout.ms     (a write waits this long
                                                                       for the in-sync replicas)
    new_member_join_timeout_ms          how long a new member may wait in its first join
    max_timer_wait_ms                   the timer task wakes at least this often
    """

    offsets_topic_num_partitions: int = 50
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = INT32_MAX
    offset_metadata_max_bytes: int = 4096
    offset_commit_timeout_ms: int = 5000
    new_member_join_timeout_ms: int = 300_000
    max_timer_wait_ms: int = 1000

    def __post_init__(self) -> None:
        if self.offsets_topic_num_partitions <= 0:
            raise InvalidConfigError(
                "offsets.topic.num.partitions must be positive, got"
                f" {self.offsets_topic_num_partitions}"
            )
        if self.group_initial_rebalance_delay_ms < 0:
            raise InvalidConfigError(
                "group.initial.rebalance.delay.ms must be >= 0, got"
                f" {self.group_initial_rebalance_delay_ms}"
            )
        if not 0 <= self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise InvalidConfigError(
                f"group.min.session.timeout.ms ({self.group_min_session_timeout_ms}) must be"
                f" >= 0 and <= group.max.session.timeout.ms"
                f" ({self.group_max_session_timeout_ms})"
            )
        if self.group_max_size < 1:
            raise InvalidConfigError(f"group.max.size must be >= 1, got {self.group_max_size}")
        if self.offset_metadata_max_bytes < 0:
            raise InvalidConfigError(
                f"offset.metadata.max.bytes must be >= 0, got {self.offset_metadata_max_bytes}"
            )
        if self.offset_commit_timeout_ms <= 0:
            raise InvalidConfigError(
                f"offsets.commit.timeout.ms must be positive, got {self.offset_commit_timeout_ms}"
            )
        if self.new_member_join_timeout_ms <= 0 or self.max_timer_wait_ms <= 0:
            raise InvalidConfigError("the join timeout and timer wait must be positive")
