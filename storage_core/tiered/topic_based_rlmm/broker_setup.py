"""Create ``__remote_log_metadata`` and start the broker's RLMM (broker mode).

Called by ``KafkaBroker.start`` (which provides ``BrokerServices``) after the local
partitions are hosted, when ``remote.log.storage.system.enable=true``. The topic is internal,
``cleanup.policy=delete``, ``retention.ms`` = ``remote.log.metadata.topic.retention.ms``
(default -1) with
``remote.log.metadata.topic.num.partitions`` partitions and
``remote.log.metadata.topic.replication.factor`` replicas (one on a single broker). An
existing topic keeps its partition count: user partitions must keep mapping to the same
metadata partition.
"""

from __future__ import annotations

import asyncio
import logging

from storage_core.common import TopicIdPartition
from storage_core.errors import InvalidReplicationFactorError
from storage_core.tiered.topic_based_rlmm.broker_services import BrokerServices
from storage_core.tiered.topic_based_rlmm.config import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    ConsumerTaskConfig,
    metadata_topic_configs,
)
from storage_core.tiered.topic_based_rlmm.manager import TopicBasedRemoteLogMetadataManager

logger = logging.getLogger(__name__)


async def maybe_start_remote_log_metadata_manager(
    broker: BrokerServices, *, consumer_config: ConsumerTaskConfig | None = None
) -> TopicBasedRemoteLogMetadataManager | None:
    """The started broker-mode RLMM, or ``None`` when remote storage is off."""
    config = broker.config
    if not config.get_bool("remote.log.storage.system.enable"):
        return None
    loop = asyncio.get_running_loop()
    try:
        topic = await loop.run_in_executor(
            None,
            broker.ensure_internal_topic,
            REMOTE_LOG_METADATA_TOPIC_NAME,
            config.get_int("remote.log.metadata.topic.num.partitions"),
            metadata_topic_configs(config.get_int("remote.log.metadata.topic.retention.ms")),
        )
    except InvalidReplicationFactorError as error:
        # Kafka's rule for internal topics: not before that many brokers are registered.
        # Without the manager no tiered offset is served and no local segment of a
        # remote-enabled topic is deleted (the deletion guard waits for it): nothing is lost.
        logger.error(
            "tiered storage is not available until %s can be created: %s (start the other"
            " brokers, or lower remote.log.metadata.topic.replication.factor)",
            REMOTE_LOG_METADATA_TOPIC_NAME,
            error,
        )
        return None
    manager = TopicBasedRemoteLogMetadataManager.for_broker(
        broker,
        loop,
        num_metadata_topic_partitions=len(topic.partitions),
        consumer_config=consumer_config,
    )
    leaders: set[TopicIdPartition] = set()
    followers: set[TopicIdPartition] = set()
    for tp, partition in broker.replica_manager.partitions().items():
        if partition.log.config.remote_storage_enable:
            tip = TopicIdPartition(partition.topic_id, tp)
            (leaders if partition.is_leader else followers).add(tip)
    # Restoring snapshots reads files: not on the loop.
    await loop.run_in_executor(None, manager.on_partition_leadership_changes, leaders, followers)
    manager.start()
    logger.info(
        "remote log metadata manager started metadata_partitions=%d tracked_partitions=%d",
        len(topic.partitions),
        len(leaders) + len(followers),
    )
    return manager


async def stop_remote_log_metadata_manager(
    manager: TopicBasedRemoteLogMetadataManager | None,
) -> None:
    """Close the manager off the loop (it joins its thread and writes checkpoints)."""
    if manager is not None:
        await asyncio.get_running_loop().run_in_executor(None, manager.close)
