"""Create ``__consumer_offsets`` and start the group coordinator over its partitions.

The topic is internal, compacted, with ``offsets.topic.segment.bytes`` segments and one
replica (this broker). An existing topic keeps its partition count, whatever
``offsets.topic.num.partitions`` says now: group ids must keep mapping to the same partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage_core.common import TopicPartition
from storage_core.coordinator.group.group_coordinator import (
    GroupCoordinator,
    GroupCoordinatorConfig,
)
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.log.log import Log

if TYPE_CHECKING:
    from storage_core.server.kafka_broker import KafkaBroker


async def start_group_coordinator(broker: KafkaBroker) -> GroupCoordinator:
    """Ensure ``__consumer_offsets`` exists, then replay it and start the coordinator."""
    config = broker.config
    topic = broker.ensure_internal_topic(
        OFFSETS_TOPIC_NAME,
        config.get_int("offsets.topic.num.partitions"),
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(config.get_int("offsets.topic.segment.bytes")),
        },
    )

    def offsets_log(partition: int) -> Log:
        tp = TopicPartition(OFFSETS_TOPIC_NAME, partition)
        return broker.replica_manager.leader_partition(tp).log

    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(
            offsets_topic_num_partitions=len(topic.partitions),
            group_initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
            group_min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
            group_max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
        ),
        offsets_log,
        broker.clock,
    )
    await coordinator.startup()
    return coordinator
