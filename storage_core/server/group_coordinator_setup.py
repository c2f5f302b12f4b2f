"""Create ``__consumer_offsets`` and start the group coordinator over its partitions.

The topic is internal, compacted, with ``offsets.topic.segment.bytes`` segments and
``offsets.topic.replication.factor`` replicas; the coordinator serves the groups of the
partitions this broker leads, and follows leadership as it moves. An existing topic keeps its
partition count, whatever ``offsets.topic.num.partitions`` says now: group ids must keep
mapping to the same partition.
"""

from __future__ import annotations

import logging

from storage_core.common import TopicPartition
from storage_core.coordinator.group.group_coordinator import GroupCoordinator
from storage_core.coordinator.group.group_coordinator_config import GroupCoordinatorConfig
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.errors import InvalidReplicationFactorError
from storage_core.log.log import Log
from storage_core.server.broker_services import BrokerServices
from storage_core.server.topic_store import TopicInfo

logger = logging.getLogger(__name__)


def ensure_offsets_topic(services: BrokerServices) -> TopicInfo:
    """``__consumer_offsets`` as it is, or created now (blocking: call off the event loop)."""
    config = services.config
    return services.admin_manager.ensure_internal_topic(
        OFFSETS_TOPIC_NAME,
        config.get_int("offsets.topic.num.partitions"),
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(config.get_int("offsets.topic.segment.bytes")),
        },
    )


async def start_group_coordinator(services: BrokerServices) -> GroupCoordinator:
    """Ensure ``__consumer_offsets`` exists, then replay it and start the coordinator."""
    config = services.config
    try:
        partitions = len(ensure_offsets_topic(services).partitions)
    except InvalidReplicationFactorError as error:
        # Kafka's rule: not before offsets.topic.replication.factor brokers are registered;
        # FindCoordinator tries again (clients retry on COORDINATOR_NOT_AVAILABLE meanwhile)
        logger.warning("%s is not created yet: %s", OFFSETS_TOPIC_NAME, error)
        partitions = config.get_int("offsets.topic.num.partitions")

    def offsets_log(partition: int) -> Log:
        tp = TopicPartition(OFFSETS_TOPIC_NAME, partition)
        return services.replica_manager.leader_partition(tp).log

    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(
            offsets_topic_num_partitions=partitions,
            group_initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
            group_min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
            group_max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
            offset_commit_timeout_ms=config.get_int("offsets.commit.timeout.ms"),
        ),
        offsets_log,
        services.replica_manager,
        services.clock,
    )

    def leads(partition: int) -> bool:
        hosted = services.replica_manager.partitions().get(
            TopicPartition(OFFSETS_TOPIC_NAME, partition)
        )
        return hosted is not None and hosted.is_leader

    await coordinator.startup(leads)
    return coordinator
